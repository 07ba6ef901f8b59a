//! `kael.Tensor`: a Python object that holds one kael handle.
//!
//! NOTE [Python handles]
//! A `kael.Tensor` wraps a `kael_core::Tensor`, which is itself one shared
//! pointer: Python assignment (`b = a`) is the same object, and every
//! method that returns a view (`t()`, `narrow`, slicing, `view`, …) returns
//! a new Python object over the same storage, exactly as the Rust API does.
//! Two Python objects can name one kael tensor (`t.grad` makes a new one
//! per access): `is_same` asks kael, `is` asks Python. As in PyTorch,
//! `clone()` copies (kael's `deep_clone`, recorded by autograd); Rust's
//! `Tensor::clone` (another name for the same tensor) is plain assignment.
//!
//! NOTE [Releasing the GIL]
//! An op on the threaded device whose operand has at least
//! [`GIL_RELEASE_NUMEL`] elements runs with the GIL released, so Python
//! threads compute in parallel; smaller ops keep it, since releasing and
//! re-taking it costs more than the op. Everything a kernel touches is
//! kael's (`Tensor: Send + Sync`); Python hooks called by backward take
//! the GIL back themselves.

use crate::convert;
use crate::dtype_device::{
    PyDType, PyDevice, device_of, dtype_name, extract_device, extract_dtype,
};
use crate::errors::{IntoPy, type_error, value_error};
use kael_core::{DType, DeviceKind, Number, Tensor};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyList, PyTuple};

/// Operands with at least this many elements release the GIL on the
/// threaded device (NOTE [Releasing the GIL]).
pub const GIL_RELEASE_NUMEL: usize = 1 << 15;

/// A kael tensor: a handle to a strided view of shared storage.
#[pyclass(name = "Tensor", module = "kael", frozen, weakref, subclass)]
pub struct PyTensor {
    pub t: Tensor,
}

/// A Python tensor object for a kael handle.
#[inline]
pub fn wrap(t: Tensor) -> PyTensor {
    PyTensor { t }
}

/// Whether an op on `t` should release the GIL (NOTE [Releasing the GIL]).
#[inline]
pub fn releases_gil(t: &Tensor) -> bool {
    t.numel() >= GIL_RELEASE_NUMEL && t.device().kind() == DeviceKind::ThreadedCpu
}

/// Runs `f` (kael work on `t`), without the GIL when `t` is large.
#[inline]
pub fn run<R: Send>(
    py: Python<'_>,
    t: &Tensor,
    f: impl FnOnce() -> kael_core::Result<R> + Send,
) -> PyResult<R> {
    if releases_gil(t) {
        py.detach(f).py()
    } else {
        f().py()
    }
}

/// Runs an op returning a tensor and wraps the result.
#[inline]
pub fn run_t(
    py: Python<'_>,
    t: &Tensor,
    f: impl FnOnce() -> kael_core::Result<Tensor> + Send,
) -> PyResult<PyTensor> {
    run(py, t, f).map(wrap)
}

/// An operand of a binary op: another tensor or a Python number.
pub enum Operand {
    /// A tensor (or an array converted to one on the other side's device).
    T(Tensor),
    /// A Python number, of the kind Python gave it (int, float or bool:
    /// they promote differently, NOTE [Type promotion]).
    S(Number),
}

/// Reads `other` as an operand next to `like`: a `kael.Tensor`, a number,
/// or anything `kael.tensor` accepts (converted onto `like`'s device and,
/// for lists, `like`'s dtype).
pub fn operand(op: &'static str, like: &Tensor, other: &Bound<'_, PyAny>) -> PyResult<Operand> {
    if let Ok(t) = other.cast::<PyTensor>() {
        return Ok(Operand::T(t.get().t.clone()));
    }
    // Type checks first: a failed `extract` builds an exception object,
    // which would cost more than the op (NOTE [Python handles]).
    if other.is_instance_of::<PyFloat>() {
        return Ok(Operand::S(Number::Float(other.extract::<f64>()?)));
    }
    if other.is_instance_of::<PyBool>() {
        // (bool is an int subclass: checked first)
        return Ok(Operand::S(Number::Bool(other.extract::<bool>()?)));
    }
    if other.is_instance_of::<PyInt>() {
        return match other.extract::<i64>() {
            Ok(i) => Ok(Operand::S(Number::Int(i))),
            Err(_) => Err(pyo3::exceptions::PyOverflowError::new_err(format!(
                "{op}: the integer does not fit in int64; pass a float (e.g. {}.0) for a float result",
                other
            ))),
        };
    }
    if !other.is_instance_of::<PyList>() && !other.is_instance_of::<PyTuple>() {
        // numpy scalars and other numbers: integers through `__index__`,
        // the rest through `__float__`
        if let Ok(i) = other.extract::<i64>() {
            return Ok(Operand::S(Number::Int(i)));
        }
        if let Ok(v) = other.extract::<f64>() {
            return Ok(Operand::S(Number::Float(v)));
        }
    }
    match convert::tensor_from_data(op, other, Some(like.dtype()), &like.device()) {
        Ok(t) => Ok(Operand::T(t)),
        Err(_) => Err(type_error(format!(
            "{op}: cannot combine a kael.Tensor with {}; pass a kael.Tensor, a number, a list or a numpy array",
            other
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))),
    }
}

/// `other` as a tensor next to `like` (a number becomes a 0-d tensor of
/// `like`'s dtype on its device, which broadcasts).
pub fn as_tensor(op: &'static str, like: &Tensor, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    match operand(op, like, other)? {
        Operand::T(t) => Ok(t),
        Operand::S(n) => like.number_operand(op, n).py(),
    }
}

/// A `*dims` argument: `f(2, 3)` or `f((2, 3))` or `f([2, 3])`.
pub fn dims_arg(op: &str, args: &Bound<'_, PyTuple>) -> PyResult<Vec<isize>> {
    let seq = if args.len() == 1 && args.get_item(0)?.extract::<isize>().is_err() {
        args.get_item(0)?
    } else {
        args.clone().into_any()
    };
    seq.extract::<Vec<isize>>().map_err(|_| {
        type_error(format!(
            "{op}: expected sizes as integers, e.g. {op}(2, 3) or {op}((2, 3))"
        ))
    })
}

/// `dim=None | int | tuple of ints` as kael's list of dims (empty = all).
pub fn dims_opt(op: &str, dim: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<isize>> {
    match dim {
        None => Ok(Vec::new()),
        Some(d) if d.is_none() => Ok(Vec::new()),
        Some(d) => {
            if let Ok(i) = d.extract::<isize>() {
                Ok(vec![i])
            } else {
                d.extract::<Vec<isize>>()
                    .map_err(|_| type_error(format!("{op}: dim must be an int or a tuple of ints")))
            }
        }
    }
}

fn usizes(op: &str, v: &[isize]) -> PyResult<Vec<usize>> {
    v.iter()
        .map(|&x| {
            usize::try_from(x).map_err(|_| {
                value_error(format!(
                    "{op}: sizes must be non-negative, got {x}; pass sizes >= 0"
                ))
            })
        })
        .collect()
}

#[pymethods]
impl PyTensor {
    /// `kael.Tensor(data, dtype=None, device=None, requires_grad=False)`:
    /// the same as `kael.tensor(...)` (a copy of `data`).
    #[new]
    #[pyo3(signature = (data, dtype=None, device=None, requires_grad=false))]
    fn py_new(
        data: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
        device: Option<&Bound<'_, PyAny>>,
        requires_grad: bool,
    ) -> PyResult<Self> {
        convert::tensor_fn(data, dtype, device, requires_grad)
    }

    // ------------------------------------------------------------ metadata

    /// The sizes, as a tuple.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.t.shape())
    }

    /// The sizes (`size()`), or one of them (`size(dim)`).
    #[pyo3(signature = (dim=None))]
    fn size<'py>(&self, py: Python<'py>, dim: Option<isize>) -> PyResult<Bound<'py, PyAny>> {
        match dim {
            None => Ok(PyTuple::new(py, self.t.shape())?.into_any()),
            Some(d) => Ok(self.t.size(d).py()?.into_pyobject(py)?.into_any()),
        }
    }

    /// The strides in elements (`stride()`), or one of them.
    #[pyo3(signature = (dim=None))]
    fn stride<'py>(&self, py: Python<'py>, dim: Option<isize>) -> PyResult<Bound<'py, PyAny>> {
        let s = self.t.strides();
        match dim {
            None => Ok(PyTuple::new(py, s.as_slice())?.into_any()),
            Some(d) => {
                let r = self.t.rank() as isize;
                let i = if d < 0 { d + r } else { d };
                if i < 0 || i >= r {
                    return Err(crate::errors::index_error(format!(
                        "stride: dim {d} is out of range for a tensor of rank {r}; pass a dim in -{r}..{r}"
                    )));
                }
                Ok(s.as_slice()[i as usize].into_pyobject(py)?.into_any())
            }
        }
    }

    /// The offset of the first element in the storage, in elements.
    fn storage_offset(&self) -> usize {
        self.t.offset()
    }

    /// Number of dimensions.
    #[getter]
    fn ndim(&self) -> usize {
        self.t.rank()
    }

    /// Number of dimensions (PyTorch's name).
    fn dim(&self) -> usize {
        self.t.rank()
    }

    /// Number of elements.
    fn numel(&self) -> usize {
        self.t.numel()
    }

    /// The element type.
    #[getter]
    fn dtype(&self) -> PyDType {
        PyDType { d: self.t.dtype() }
    }

    /// The device.
    #[getter]
    fn device(&self) -> PyDevice {
        device_of(&self.t.device())
    }

    /// Bytes per element.
    fn element_size(&self) -> usize {
        self.t.element_size()
    }

    /// Whether the elements are laid out densely in row-major order.
    fn is_contiguous(&self) -> bool {
        self.t.is_contiguous()
    }

    /// Whether the dtype is a floating-point one.
    fn is_floating_point(&self) -> bool {
        self.t.dtype().is_float()
    }

    /// The storage's version counter: bumped once by every in-place write
    /// through any view of the storage.
    #[getter]
    fn version(&self) -> usize {
        self.t.version()
    }

    /// PyTorch's name for [`version`](Self::version).
    #[getter]
    fn _version(&self) -> usize {
        self.t.version()
    }

    /// Whether `other` is the same kael tensor (not merely equal values).
    fn is_same(&self, other: &PyTensor) -> bool {
        self.t.is_same(&other.t)
    }

    /// Whether `other` reads and writes the same storage.
    fn shares_storage(&self, other: &PyTensor) -> bool {
        self.t.shares_storage(&other.t)
    }

    /// The tensor this one is a view of (`None` for a tensor that owns its
    /// storage view root).
    #[getter]
    fn base(&self) -> Option<PyTensor> {
        self.t.base().map(wrap)
    }

    /// Whether this tensor is a view of another.
    fn is_view(&self) -> bool {
        self.t.is_view()
    }

    /// The address of the first element (host memory), as PyTorch's
    /// `data_ptr()`.
    fn data_ptr(&self) -> usize {
        let s = self.t.storage();
        (s.as_ptr() as usize).wrapping_add(self.t.offset() * self.t.element_size())
    }

    /// Shape, strides, offset, storage, version, view root, autograd
    /// state: everything kael knows about this tensor, as text.
    fn explain(&self) -> String {
        kael_core::explain(&self.t)
    }

    fn __repr__(&self) -> String {
        convert::repr(&self.t)
    }

    fn __str__(&self) -> String {
        convert::repr(&self.t)
    }

    fn __len__(&self) -> PyResult<usize> {
        self.t.shape().first().copied().ok_or_else(|| {
            type_error("len() of a 0-d tensor: it has no first dimension; use item()")
        })
    }

    fn __hash__(slf: &Bound<'_, Self>) -> isize {
        slf.as_ptr() as isize
    }

    fn __bool__(&self) -> PyResult<bool> {
        if self.t.numel() != 1 {
            return Err(value_error(
                "bool(): the truth value of a tensor with more than one element is ambiguous; use .any() or .all()",
            ));
        }
        Ok(self.t.to_dtype(DType::F64).py()?.item::<f64>().py()? != 0.0)
    }

    fn __float__(&self) -> PyResult<f64> {
        self.t.to_dtype(DType::F64).py()?.item::<f64>().py()
    }

    fn __int__(&self) -> PyResult<i64> {
        if self.t.dtype().is_float() {
            return Ok(self.__float__()?.trunc() as i64);
        }
        self.t.to_dtype(DType::I64).py()?.item::<i64>().py()
    }

    fn __index__(&self) -> PyResult<i64> {
        if self.t.dtype().is_float() || self.t.dtype() == DType::Bool {
            return Err(type_error(
                "__index__: only integer tensors with one element can be used as an index; call .long() first",
            ));
        }
        self.t.to_dtype(DType::I64).py()?.item::<i64>().py()
    }

    fn __iter__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let n = self.__len__()?;
        let mut rows = Vec::with_capacity(n.min(1 << 20));
        for i in 0..n {
            rows.push(wrap(self.t.select(0, i as isize).py()?));
        }
        Ok(PyList::new(py, rows)?
            .into_any()
            .try_iter()?
            .into_any()
            .unbind())
    }

    // --------------------------------------------------------- conversion

    /// The values as (nested) Python lists.
    fn tolist(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        convert::tolist(py, &self.t)
    }

    /// The value of a one-element tensor as a Python number.
    fn item(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if self.t.numel() != 1 {
            return Err(value_error(
                "item(): needs a tensor with exactly one element; index or reduce it first",
            ));
        }
        convert::tolist(py, &self.t.reshape(&[0isize; 0]).py()?)
    }

    /// A numpy array over the same memory (no copy; host devices only).
    /// numpy has no bfloat16: such a tensor is refused (as PyTorch does),
    /// with the conversion to use.
    fn numpy<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        if slf.get().t.dtype() == DType::BF16 {
            return Err(type_error(
                "numpy(): numpy has no bfloat16; convert first with .to(kael.float32).numpy()",
            ));
        }
        let np = slf.py().import("numpy").map_err(|_| {
            pyo3::exceptions::PyModuleNotFoundError::new_err(
                "numpy(): numpy is not installed (kael does not require it); pip install numpy",
            )
        })?;
        np.call_method1("asarray", (slf,))
    }

    /// `to(dtype)`, `to(device)` or `to(device, dtype)`: the same tensor
    /// when nothing changes, otherwise a copy (recorded by autograd).
    #[pyo3(signature = (*args, dtype=None, device=None))]
    fn to(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        dtype: Option<&Bound<'_, PyAny>>,
        device: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        let mut want_dtype = dtype.map(|d| extract_dtype("to", d)).transpose()?;
        let mut want_device = match device {
            Some(d) => Some(extract_device("to", Some(d))?),
            None => None,
        };
        for a in args.iter() {
            if a.cast::<PyDType>().is_ok() {
                want_dtype = Some(extract_dtype("to", &a)?);
            } else if let Ok(d) = extract_device("to", Some(&a)) {
                want_device = Some(d);
            } else {
                want_dtype = Some(extract_dtype("to", &a)?);
            }
        }
        let mut t = self.t.clone();
        if let Some(d) = want_device {
            let src = t.clone();
            t = run(py, &src, || src.to_device(&d))?;
        }
        if let Some(d) = want_dtype {
            let src = t.clone();
            t = run(py, &src, || src.to_dtype(d))?;
        }
        Ok(wrap(t))
    }

    /// `to(kael.float32)`.
    fn float(&self, py: Python<'_>) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.to_dtype(DType::F32))
    }

    /// `to(kael.float64)`.
    fn double(&self, py: Python<'_>) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.to_dtype(DType::F64))
    }

    /// `to(kael.float16)`.
    fn half(&self, py: Python<'_>) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.to_dtype(DType::F16))
    }

    /// `to(kael.int64)`.
    fn long(&self, py: Python<'_>) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.to_dtype(DType::I64))
    }

    /// `to(kael.int32)`.
    fn int(&self, py: Python<'_>) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.to_dtype(DType::I32))
    }

    /// `to(kael.bool)`.
    fn bool(&self, py: Python<'_>) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.to_dtype(DType::Bool))
    }

    /// A copy that owns its storage (PyTorch's `clone`; recorded by
    /// autograd). `b = a` is the same tensor, not a copy.
    fn clone(&self, py: Python<'_>) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.deep_clone())
    }

    /// kael's name for [`clone`](Self::clone).
    fn deep_clone(&self, py: Python<'_>) -> PyResult<PyTensor> {
        self.clone(py)
    }

    /// This tensor when contiguous, otherwise a contiguous copy.
    fn contiguous(&self, py: Python<'_>) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.contiguous())
    }

    // --------------------------------------------------------------- views

    /// The transpose of a 2-d tensor (a view).
    fn t(&self) -> PyResult<PyTensor> {
        self.t.t().py().map(wrap)
    }

    /// The transpose of a 2-d tensor (a view), PyTorch's `T` for 2-d.
    #[getter(T)]
    fn big_t(&self) -> PyResult<PyTensor> {
        let r = self.t.rank() as isize;
        let dims: Vec<isize> = (0..r).rev().collect();
        self.t.permute(&dims).py().map(wrap)
    }

    /// Swaps two dimensions (a view).
    fn transpose(&self, dim0: isize, dim1: isize) -> PyResult<PyTensor> {
        self.t.transpose(dim0, dim1).py().map(wrap)
    }

    /// Reorders the dimensions (a view): `permute(1, 0, 2)`.
    #[pyo3(signature = (*dims))]
    fn permute(&self, dims: &Bound<'_, PyTuple>) -> PyResult<PyTensor> {
        let d = dims_arg("permute", dims)?;
        self.t.permute(&d).py().map(wrap)
    }

    /// `length` elements of `dim` from `start` (a view).
    fn narrow(&self, dim: isize, start: isize, length: usize) -> PyResult<PyTensor> {
        let start = if start < 0 {
            let n = self.t.size(dim).py()? as isize;
            usize::try_from(start + n).map_err(|_| {
                crate::errors::index_error(format!(
                    "narrow: start {start} is out of range for a dimension of size {n}; pass a start in -{n}..{n}"
                ))
            })?
        } else {
            start as usize
        };
        self.t.narrow(dim, start, length).py().map(wrap)
    }

    /// Index `index` of `dim`, dropping the dimension (a view).
    fn select(&self, dim: isize, index: isize) -> PyResult<PyTensor> {
        self.t.select(dim, index).py().map(wrap)
    }

    /// Broadcasts to a larger shape without copying (`-1` keeps a size).
    #[pyo3(signature = (*sizes))]
    fn expand(&self, sizes: &Bound<'_, PyTuple>) -> PyResult<PyTensor> {
        let s = dims_arg("expand", sizes)?;
        self.t.expand(&s[..]).py().map(wrap)
    }

    /// Broadcasts to `other`'s shape without copying.
    fn expand_as(&self, other: &PyTensor) -> PyResult<PyTensor> {
        self.t.expand(other.t.shape()).py().map(wrap)
    }

    /// The same storage with a new shape (a view; never copies):
    /// `view(2, 3)`, `view(-1)`; `view(kael.int32)` reinterprets the bytes.
    #[pyo3(signature = (*shape))]
    fn view(&self, shape: &Bound<'_, PyTuple>) -> PyResult<PyTensor> {
        if shape.len() == 1 {
            let a = shape.get_item(0)?;
            if a.cast::<PyDType>().is_ok() || a.extract::<String>().is_ok() {
                let d = extract_dtype("view", &a)?;
                return self.t.view_dtype(d).py().map(wrap);
            }
        }
        let s = dims_arg("view", shape)?;
        self.t.view(&s[..]).py().map(wrap)
    }

    /// A new shape: a view when the strides allow, otherwise a copy.
    #[pyo3(signature = (*shape))]
    fn reshape(&self, shape: &Bound<'_, PyTuple>) -> PyResult<PyTensor> {
        let s = dims_arg("reshape", shape)?;
        self.t.reshape(&s[..]).py().map(wrap)
    }

    /// The same bytes read as another dtype (a view).
    fn view_dtype(&self, dtype: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let d = extract_dtype("view_dtype", dtype)?;
        self.t.view_dtype(d).py().map(wrap)
    }

    /// A view with explicit sizes, strides and offset (in elements).
    #[pyo3(signature = (size, stride, storage_offset=0))]
    fn as_strided(
        &self,
        size: Vec<isize>,
        stride: Vec<isize>,
        storage_offset: isize,
    ) -> PyResult<PyTensor> {
        let size = usizes("as_strided", &size)?;
        let stride = usizes("as_strided", &stride)?;
        let off = usize::try_from(storage_offset).map_err(|_| {
            value_error("as_strided: storage_offset must be >= 0; pass an offset in elements")
        })?;
        self.t.as_strided(&size, &stride, off).py().map(wrap)
    }

    /// A new dimension of size 1 at `dim` (a view).
    fn unsqueeze(&self, dim: isize) -> PyResult<PyTensor> {
        self.t.unsqueeze(dim).py().map(wrap)
    }

    /// Drops dimensions of size 1: all, or `dim` only (a view).
    #[pyo3(signature = (dim=None))]
    fn squeeze(&self, dim: Option<isize>) -> PyResult<PyTensor> {
        match dim {
            None => self.t.squeeze(),
            Some(d) => self.t.squeeze_dim(d),
        }
        .py()
        .map(wrap)
    }

    /// Merges dimensions `start_dim..=end_dim` into one.
    #[pyo3(signature = (start_dim=0, end_dim=-1))]
    fn flatten(&self, start_dim: isize, end_dim: isize) -> PyResult<PyTensor> {
        self.t.flatten(start_dim, end_dim).py().map(wrap)
    }

    /// Sliding windows of `size` with `step` along `dim`, as a new last
    /// dimension (a view).
    fn unfold(&self, dimension: isize, size: usize, step: usize) -> PyResult<PyTensor> {
        self.t.unfold(dimension, size, step).py().map(wrap)
    }

    /// A diagonal (a view).
    #[pyo3(signature = (offset=0, dim1=0, dim2=1))]
    fn diagonal(&self, offset: isize, dim1: isize, dim2: isize) -> PyResult<PyTensor> {
        self.t.diagonal(offset, dim1, dim2).py().map(wrap)
    }

    /// Moves dimension `source` to `destination` (a view).
    fn movedim(&self, source: isize, destination: isize) -> PyResult<PyTensor> {
        self.t.movedim(source, destination).py().map(wrap)
    }

    /// `chunks` views along `dim`.
    #[pyo3(signature = (chunks, dim=0))]
    fn chunk(&self, chunks: usize, dim: isize) -> PyResult<Vec<PyTensor>> {
        Ok(self
            .t
            .chunk(chunks, dim)
            .py()?
            .into_iter()
            .map(wrap)
            .collect())
    }

    /// Views of `split_size` along `dim` (or of the given sizes).
    #[pyo3(signature = (split_size_or_sections, dim=0))]
    fn split(
        &self,
        split_size_or_sections: &Bound<'_, PyAny>,
        dim: isize,
    ) -> PyResult<Vec<PyTensor>> {
        let parts = if let Ok(n) = split_size_or_sections.extract::<usize>() {
            self.t.split(n, dim).py()?
        } else {
            let sizes: Vec<usize> = split_size_or_sections
                .extract()
                .map_err(|_| type_error("split: pass a size or a list of sizes"))?;
            self.t.split_sizes(&sizes, dim).py()?
        };
        Ok(parts.into_iter().map(wrap).collect())
    }

    /// Views of each index of `dim` (dropping it).
    #[pyo3(signature = (dim=0))]
    fn unbind(&self, dim: isize) -> PyResult<Vec<PyTensor>> {
        let n = self.t.size(dim).py()?;
        (0..n)
            .map(|i| self.t.select(dim, i as isize).py().map(wrap))
            .collect()
    }

    fn __getitem__(&self, key: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        crate::index::get(&self.t, key).map(wrap)
    }

    fn __setitem__(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        crate::index::set(py, &self.t, key, value)
    }

    /// `self[indices] = values`, or `+=` with repeated positions summed
    /// when `accumulate` (PyTorch's `index_put_`); `indices` is a tuple of
    /// index tensors, one per leading dim.
    #[pyo3(signature = (indices, values, accumulate=false))]
    fn index_put_<'py>(
        slf: Bound<'py, Self>,
        indices: &Bound<'py, PyTuple>,
        values: &Bound<'py, PyAny>,
        accumulate: bool,
    ) -> PyResult<Bound<'py, Self>> {
        crate::index::put(slf.py(), &slf.get().t, indices, values, accumulate)?;
        Ok(slf)
    }

    // ------------------------------------------------------------ autograd

    /// Whether gradients are recorded for this tensor.
    #[getter]
    fn requires_grad(&self) -> bool {
        self.t.requires_grad()
    }

    #[setter(requires_grad)]
    fn set_requires_grad(&self, on: bool) -> PyResult<()> {
        self.t.clone().requires_grad_(on).py().map(|_| ())
    }

    /// Sets `requires_grad` on a leaf and returns the same tensor.
    #[pyo3(signature = (requires_grad=true))]
    fn requires_grad_(slf: Bound<'_, Self>, requires_grad: bool) -> PyResult<Bound<'_, Self>> {
        slf.get().t.clone().requires_grad_(requires_grad).py()?;
        Ok(slf)
    }

    /// The accumulated gradient (`None` before backward).
    #[getter]
    fn grad(&self) -> Option<PyTensor> {
        self.t.grad().map(wrap)
    }

    #[setter(grad)]
    fn set_grad(&self, g: Option<&PyTensor>) -> PyResult<()> {
        self.t.set_grad(g.map(|g| g.t.clone())).py()
    }

    /// Whether this tensor has no autograd history (a leaf).
    #[getter]
    fn is_leaf(&self) -> bool {
        self.t.is_leaf()
    }

    /// The name of the backward node that produced this tensor, or `None`.
    #[getter]
    fn grad_fn(&self) -> Option<&'static str> {
        self.t.grad_fn_name()
    }

    /// The same data without history (shares storage).
    fn detach(&self) -> PyResult<PyTensor> {
        self.t.detach().py().map(wrap)
    }

    /// Backpropagates from this tensor into every leaf's `.grad`.
    #[pyo3(signature = (gradient=None, retain_graph=None, create_graph=false))]
    fn backward(
        &self,
        py: Python<'_>,
        gradient: Option<&PyTensor>,
        retain_graph: Option<bool>,
        create_graph: bool,
    ) -> PyResult<()> {
        crate::autograd::backward(
            py,
            &self.t,
            gradient.map(|g| &g.t),
            retain_graph,
            create_graph,
        )
    }

    /// Calls `hook(grad)` on the gradient flowing into this tensor during
    /// backward; a tensor it returns replaces the gradient.
    fn register_hook(&self, hook: Py<PyAny>) -> PyResult<()> {
        crate::autograd::register_hook(&self.t, hook)
    }

    // -------------------------------------------------------- in-place ops

    /// Fills every element with `value` (bumps the version).
    fn fill_(slf: Bound<'_, Self>, value: f64) -> PyResult<Bound<'_, Self>> {
        let t = slf.get().t.clone();
        run(slf.py(), &t, || t.fill_(value))?;
        Ok(slf)
    }

    /// Sets every element to 0 (bumps the version).
    fn zero_(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        let t = slf.get().t.clone();
        run(slf.py(), &t, || t.zero_())?;
        Ok(slf)
    }

    /// Copies `src` (broadcast) into this tensor (bumps the version).
    fn copy_<'py>(slf: Bound<'py, Self>, src: &Bound<'py, PyAny>) -> PyResult<Bound<'py, Self>> {
        let t = slf.get().t.clone();
        let s = as_tensor("copy_", &t, src)?;
        run(slf.py(), &t, || t.copy_(&s))?;
        Ok(slf)
    }

    // ------------------------------------------------------ linear algebra

    /// Matrix product with broadcasting batch dimensions (`@`).
    fn matmul(&self, py: Python<'_>, other: &PyTensor) -> PyResult<PyTensor> {
        let (a, b) = (&self.t, &other.t);
        run_t(py, a, || a.matmul(b))
    }

    /// 2-d matrix product.
    fn mm(&self, py: Python<'_>, other: &PyTensor) -> PyResult<PyTensor> {
        let (a, b) = (&self.t, &other.t);
        run_t(py, a, || a.mm(b))
    }

    /// Batched 3-d matrix product.
    fn bmm(&self, py: Python<'_>, other: &PyTensor) -> PyResult<PyTensor> {
        let (a, b) = (&self.t, &other.t);
        run_t(py, a, || a.bmm(b))
    }

    /// Dot product of two 1-d tensors.
    fn dot(&self, py: Python<'_>, other: &PyTensor) -> PyResult<PyTensor> {
        let (a, b) = (&self.t, &other.t);
        run_t(py, a, || a.dot(b))
    }

    fn __matmul__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let b = as_tensor("matmul", &self.t, other)?;
        let a = &self.t;
        run_t(py, a, || a.matmul(&b))
    }

    fn __rmatmul__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let a = as_tensor("matmul", &self.t, other)?;
        let b = &self.t;
        run_t(py, b, || a.matmul(b))
    }

    // ----------------------------------------------------------- reductions

    /// Sum over `dim` (an int or a tuple; all when `None`).
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn sum(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
    ) -> PyResult<PyTensor> {
        let d = dims_opt("sum", dim)?;
        let t = &self.t;
        run_t(py, t, || t.sum(&d, keepdim))
    }

    /// Mean over `dim` (all when `None`).
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn mean(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
    ) -> PyResult<PyTensor> {
        let d = dims_opt("mean", dim)?;
        let t = &self.t;
        run_t(py, t, || t.mean(&d, keepdim))
    }

    /// Product over one `dim` (all when `None`).
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn prod(&self, py: Python<'_>, dim: Option<isize>, keepdim: bool) -> PyResult<PyTensor> {
        let t = &self.t;
        match dim {
            None => run_t(py, t, || t.prod_all()),
            Some(d) => run_t(py, t, || t.prod_dim(d, keepdim)),
        }
    }

    /// The largest element (`max()`), or `(values, indices)` along `dim`.
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn max<'py>(
        &self,
        py: Python<'py>,
        dim: Option<isize>,
        keepdim: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let t = &self.t;
        match dim {
            None => Ok(Bound::new(py, run_t(py, t, || t.max_all())?)?.into_any()),
            Some(d) => {
                let (v, i) = run(py, t, || t.max_dim_with_indices(d, keepdim))?;
                values_indices(py, wrap(v), wrap(i))
            }
        }
    }

    /// The smallest element (`min()`), or `(values, indices)` along `dim`.
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn min<'py>(
        &self,
        py: Python<'py>,
        dim: Option<isize>,
        keepdim: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let t = &self.t;
        match dim {
            None => Ok(Bound::new(py, run_t(py, t, || t.min_all())?)?.into_any()),
            Some(d) => {
                let (v, i) = run(py, t, || t.min_dim_with_indices(d, keepdim))?;
                values_indices(py, wrap(v), wrap(i))
            }
        }
    }

    /// Index of the largest element along `dim` (of the flattened tensor
    /// when `None`).
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn argmax(&self, py: Python<'_>, dim: Option<isize>, keepdim: bool) -> PyResult<PyTensor> {
        let t = &self.t;
        match dim {
            None => {
                let flat = t.reshape(&[-1isize]).py()?;
                run_t(py, t, || flat.argmax(0, false))
            }
            Some(d) => run_t(py, t, || t.argmax(d, keepdim)),
        }
    }

    /// Index of the smallest element along `dim` (of the flattened tensor
    /// when `None`).
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn argmin(&self, py: Python<'_>, dim: Option<isize>, keepdim: bool) -> PyResult<PyTensor> {
        let t = &self.t;
        match dim {
            None => {
                let flat = t.reshape(&[-1isize]).py()?;
                run_t(py, t, || flat.argmin(0, false))
            }
            Some(d) => run_t(py, t, || t.argmin(d, keepdim)),
        }
    }

    /// Variance over `dim` with Bessel's `correction` (1 by default).
    #[pyo3(signature = (dim=None, correction=1, keepdim=false))]
    fn var(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        correction: usize,
        keepdim: bool,
    ) -> PyResult<PyTensor> {
        let d = dims_opt("var", dim)?;
        let t = &self.t;
        run_t(py, t, || t.var(&d, correction, keepdim))
    }

    /// Standard deviation over `dim` with Bessel's `correction`.
    #[pyo3(signature = (dim=None, correction=1, keepdim=false))]
    fn std(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        correction: usize,
        keepdim: bool,
    ) -> PyResult<PyTensor> {
        let d = dims_opt("std", dim)?;
        let t = &self.t;
        run_t(py, t, || t.std(&d, correction, keepdim))
    }

    /// The p-norm over `dim` (all when `None`).
    #[pyo3(signature = (p=2.0, dim=None, keepdim=false))]
    fn norm(
        &self,
        py: Python<'_>,
        p: f64,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
    ) -> PyResult<PyTensor> {
        let d = dims_opt("norm", dim)?;
        let t = &self.t;
        run_t(py, t, || t.norm(p, &d, keepdim))
    }

    /// Whether any element is non-zero (over `dim`, or all).
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn any(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
    ) -> PyResult<PyTensor> {
        let d = dims_opt("any", dim)?;
        let t = &self.t;
        run_t(py, t, || t.any(&d, keepdim))
    }

    /// Whether every element is non-zero (over `dim`, or all).
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn all(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
    ) -> PyResult<PyTensor> {
        let d = dims_opt("all", dim)?;
        let t = &self.t;
        run_t(py, t, || t.all(&d, keepdim))
    }

    /// Softmax along `dim`.
    fn softmax(&self, py: Python<'_>, dim: isize) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.softmax(dim))
    }

    /// Log-softmax along `dim`.
    fn log_softmax(&self, py: Python<'_>, dim: isize) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.log_softmax(dim))
    }

    /// log(sum(exp(x))) along `dim`, computed stably.
    #[pyo3(signature = (dim, keepdim=false))]
    fn logsumexp(&self, py: Python<'_>, dim: isize, keepdim: bool) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.logsumexp(dim, keepdim))
    }

    /// Running sum along `dim`.
    fn cumsum(&self, py: Python<'_>, dim: isize) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.cumsum(dim))
    }

    /// Running product along `dim`.
    fn cumprod(&self, py: Python<'_>, dim: isize) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.cumprod(dim))
    }

    /// `(values, indices)` sorted along `dim`.
    #[pyo3(signature = (dim=-1, descending=false))]
    fn sort(&self, py: Python<'_>, dim: isize, descending: bool) -> PyResult<(PyTensor, PyTensor)> {
        let t = &self.t;
        let (v, i) = run(py, t, || t.sort(dim, descending))?;
        Ok((wrap(v), wrap(i)))
    }

    /// The indices that sort `dim`.
    #[pyo3(signature = (dim=-1, descending=false))]
    fn argsort(&self, py: Python<'_>, dim: isize, descending: bool) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.argsort(dim, descending))
    }

    /// The `k` largest (or smallest) `(values, indices)` along `dim`.
    #[pyo3(signature = (k, dim=-1, largest=true, sorted=true))]
    fn topk(
        &self,
        py: Python<'_>,
        k: usize,
        dim: isize,
        largest: bool,
        sorted: bool,
    ) -> PyResult<(PyTensor, PyTensor)> {
        let t = &self.t;
        let (v, i) = run(py, t, || t.topk(k, dim, largest, sorted))?;
        Ok((wrap(v), wrap(i)))
    }

    /// Indices of the non-zero elements, one row each.
    fn nonzero(&self, py: Python<'_>) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.nonzero())
    }

    // ------------------------------------------------------ rearrangement

    /// Reverses the order along `dims` (a copy).
    #[pyo3(signature = (*dims))]
    fn flip(&self, py: Python<'_>, dims: &Bound<'_, PyTuple>) -> PyResult<PyTensor> {
        let d = dims_arg("flip", dims)?;
        let t = &self.t;
        run_t(py, t, || t.flip(&d))
    }

    /// Rotates by `shifts` along `dims` (a copy).
    fn roll(&self, py: Python<'_>, shifts: isize, dims: isize) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.roll(shifts, dims))
    }

    /// Tiles the tensor (a copy): `repeat(2, 1)`.
    #[pyo3(signature = (*repeats))]
    fn repeat(&self, py: Python<'_>, repeats: &Bound<'_, PyTuple>) -> PyResult<PyTensor> {
        let r = usizes("repeat", &dims_arg("repeat", repeats)?)?;
        let t = &self.t;
        run_t(py, t, || t.repeat(&r))
    }

    /// The lower triangle (a copy).
    #[pyo3(signature = (diagonal=0))]
    fn tril(&self, py: Python<'_>, diagonal: isize) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.tril(diagonal))
    }

    /// The upper triangle (a copy).
    #[pyo3(signature = (diagonal=0))]
    fn triu(&self, py: Python<'_>, diagonal: isize) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.triu(diagonal))
    }

    /// `value` where `mask` is true (a copy).
    fn masked_fill(&self, py: Python<'_>, mask: &PyTensor, value: f64) -> PyResult<PyTensor> {
        let (t, m) = (&self.t, &mask.t);
        run_t(py, t, || t.masked_fill(m, value))
    }

    /// The rows (or other slices) of `dim` named by `index`.
    fn index_select(&self, py: Python<'_>, dim: isize, index: &PyTensor) -> PyResult<PyTensor> {
        let (t, i) = (&self.t, &index.t);
        run_t(py, t, || t.index_select(dim, i))
    }

    /// Elements picked along `dim` by `index` (same rank).
    fn gather(&self, py: Python<'_>, dim: isize, index: &PyTensor) -> PyResult<PyTensor> {
        let (t, i) = (&self.t, &index.t);
        run_t(py, t, || t.gather(dim, i))
    }

    /// A copy with `source`'s slices of `dim` added at the positions
    /// `index` names (repeats accumulate; PyTorch's `index_add`).
    fn index_add(
        &self,
        py: Python<'_>,
        dim: isize,
        index: &PyTensor,
        source: &PyTensor,
    ) -> PyResult<PyTensor> {
        let (t, i, s) = (&self.t, &index.t, &source.t);
        run_t(py, t, || t.index_add(dim, i, s))
    }

    /// A copy with `src` (a tensor or a number) written along `dim` at the
    /// positions `index` names (PyTorch's `scatter`).
    fn scatter(
        &self,
        py: Python<'_>,
        dim: isize,
        index: &PyTensor,
        src: &Bound<'_, PyAny>,
    ) -> PyResult<PyTensor> {
        let (t, i) = (&self.t, &index.t);
        if let Ok(s) = src.cast::<PyTensor>() {
            let s = s.get().t.clone();
            return run_t(py, t, || t.scatter(dim, i, &s));
        }
        let v = src
            .extract::<f64>()
            .map_err(|_| type_error("scatter: src must be a tensor or a number"))?;
        run_t(py, t, || t.scatter_value(dim, i, v))
    }

    /// A copy with `src` added along `dim` at the positions `index` names
    /// (repeats accumulate; PyTorch's `scatter_add`).
    fn scatter_add(
        &self,
        py: Python<'_>,
        dim: isize,
        index: &PyTensor,
        src: &PyTensor,
    ) -> PyResult<PyTensor> {
        let (t, i, s) = (&self.t, &index.t, &src.t);
        run_t(py, t, || t.scatter_add(dim, i, s))
    }

    /// One-hot rows of an integer tensor.
    #[pyo3(signature = (num_classes=None))]
    fn one_hot(&self, py: Python<'_>, num_classes: Option<usize>) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.one_hot(num_classes))
    }

    /// The dtype's name in PyTorch's form, e.g. `"kael.float32"`.
    fn type_name(&self) -> String {
        format!("kael.{}", dtype_name(self.t.dtype()))
    }
}

/// `(values, indices)` as PyTorch returns them from `max(dim)`, `min(dim)`:
/// a named tuple (`r.values`, `r.indices`, or unpacked).
fn values_indices<'py>(
    py: Python<'py>,
    values: PyTensor,
    indices: PyTensor,
) -> PyResult<Bound<'py, PyAny>> {
    static TYPES: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
    let make = TYPES.get_or_try_init(py, || {
        py.import("collections")?
            .getattr("namedtuple")?
            .call1(("values_indices", ["values", "indices"]))
            .map(Bound::unbind)
    })?;
    make.bind(py).call1((values, indices))
}
