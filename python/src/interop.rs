//! Zero-copy interop: the buffer protocol (`memoryview(t)`,
//! `numpy.asarray(t)`), `kael.from_numpy`, and DLPack both ways.
//!
//! NOTE [Zero-copy memory]
//! Exporting: a buffer or a DLPack capsule points at the tensor's own bytes
//! (first element, shape, strides in bytes or elements) and holds a handle
//! to the tensor, so the storage lives as long as the consumer needs it.
//! Importing: the producer's memory becomes an external kael storage
//! (`Storage::from_external_writable`, or read-only when the producer says
//! so) whose owner keeps the Python buffer or the DLPack capsule's tensor
//! alive and releases it when the storage drops. Either way a write on one
//! side is seen on the other. Writes made through numpy do not bump kael's
//! version counter (as with PyTorch's `from_numpy`); writes through kael
//! do. Only host memory is exported or imported; a misaligned pointer
//! (not a multiple of the element size) or a negative stride is refused, as
//! PyTorch refuses negative strides.

use crate::dlpack::{self, ImportError, nonnull, span_bytes};
use crate::dtype_device::default_device;
use crate::errors::{IntoPy, value_error};
use crate::tensor::{PyTensor, wrap};
use kael_core::shared::Shared;
use kael_core::storage::ExternalOwner;
use kael_core::{DType, DeviceKind, Layout, MAX_RANK, Storage, Tensor};
use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use std::ffi::{CStr, c_int, c_void};
use std::ptr::{self, NonNull};

// ------------------------------------------------------------ common

/// The struct-module format character of a dtype (`None` for bfloat16,
/// which has none).
fn format_of(d: DType) -> Option<&'static CStr> {
    Some(match d {
        DType::F32 => c"f",
        DType::F64 => c"d",
        DType::F16 => c"e",
        DType::I64 => c"q",
        DType::I32 => c"i",
        DType::I16 => c"h",
        DType::I8 => c"b",
        DType::U8 => c"B",
        DType::Bool => c"?",
        DType::BF16 => return None,
    })
}

/// The dtype of a struct-module format string with its item size.
fn dtype_of_format(format: &str, itemsize: usize) -> Option<DType> {
    let f = format.trim_start_matches(['@', '=', '<']);
    if f.starts_with(['>', '!']) {
        return None;
    }
    Some(match (f, itemsize) {
        ("f", 4) => DType::F32,
        ("d", 8) => DType::F64,
        ("e", 2) => DType::F16,
        ("q" | "l" | "i" | "h" | "b", 8) => DType::I64,
        ("i" | "l", 4) => DType::I32,
        ("h", 2) => DType::I16,
        ("b", 1) => DType::I8,
        ("B", 1) => DType::U8,
        ("?", 1) => DType::Bool,
        _ => return None,
    })
}

/// A tensor over external host bytes `[ptr, ptr + nbytes)`.
fn tensor_over(
    op: &str,
    ptr: NonNull<u8>,
    nbytes: usize,
    owner: Shared<dyn ExternalOwner>,
    writable: bool,
    shape: &[usize],
    strides: &[usize],
    dtype: DType,
) -> PyResult<Tensor> {
    if ptr.as_ptr() as usize % dtype.size_in_bytes() != 0 {
        return Err(value_error(format!(
            "{op}: the data pointer is not aligned to the element size ({} bytes); copy it first (numpy.ascontiguousarray(a).copy() or kael.tensor(a))",
            dtype.size_in_bytes()
        )));
    }
    let device = default_device()?;
    // SAFETY: the caller passes memory the producer keeps valid (for reads,
    // and for writes when `writable`) for `nbytes` bytes while `owner` lives;
    // the storage holds `owner`. Races with the producer's own writes are
    // the user's, as with any shared buffer (NOTE [Zero-copy memory]).
    let storage = unsafe {
        if writable {
            Storage::from_external_writable(ptr, nbytes, owner, &device)
        } else {
            Storage::from_external(ptr, nbytes, owner, &device)
        }
    };
    let layout = Layout::new(shape, strides, 0).py()?;
    Tensor::from_storage(Shared::new(storage), layout, dtype).py()
}

// ---------------------------------------------------- buffer protocol

/// Shape and byte strides of one exported buffer, freed on release.
struct BufferInfo {
    shape: Vec<ffi::Py_ssize_t>,
    strides: Vec<ffi::Py_ssize_t>,
}

#[pymethods]
impl PyTensor {
    /// The buffer protocol: `memoryview(t)` and `numpy.asarray(t)` see the
    /// tensor's memory (strided; no copy).
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("__getbuffer__: the view is null"));
        }
        let t = slf.get().t.clone();
        let storage = t.storage();
        if !t.device().is_host_memory() {
            return Err(PyBufferError::new_err(
                "buffer: the tensor is not in host memory; call .to(kael.threaded) first",
            ));
        }
        let Some(format) = format_of(t.dtype()) else {
            return Err(PyBufferError::new_err(
                "buffer: bfloat16 has no buffer-protocol format; call .float() first",
            ));
        };
        let readonly = storage.is_read_only();
        if readonly && flags & ffi::PyBUF_WRITABLE != 0 {
            return Err(PyBufferError::new_err(
                "buffer: the tensor's storage is read-only (e.g. memory-mapped); clone() it for a writable buffer",
            ));
        }
        let item = t.element_size();
        let c_contig = t.is_contiguous();
        if flags & ffi::PyBUF_STRIDES != ffi::PyBUF_STRIDES && !c_contig {
            return Err(PyBufferError::new_err(
                "buffer: the tensor is not contiguous and the consumer did not ask for strides; call .contiguous() first",
            ));
        }
        if flags & ffi::PyBUF_C_CONTIGUOUS == ffi::PyBUF_C_CONTIGUOUS && !c_contig {
            return Err(PyBufferError::new_err(
                "buffer: a C-contiguous buffer was asked for; call .contiguous() first",
            ));
        }
        if flags & ffi::PyBUF_F_CONTIGUOUS == ffi::PyBUF_F_CONTIGUOUS && t.rank() > 1 {
            return Err(PyBufferError::new_err(
                "buffer: a Fortran-contiguous buffer was asked for; kael tensors are row-major, call .contiguous() on the transpose",
            ));
        }
        let shape: Vec<ffi::Py_ssize_t> = t.shape().iter().map(|&n| n as ffi::Py_ssize_t).collect();
        let strides: Vec<ffi::Py_ssize_t> = t
            .strides()
            .as_slice()
            .iter()
            .map(|&s| (s * item) as ffi::Py_ssize_t)
            .collect();
        let mut info = Box::new(BufferInfo { shape, strides });
        let base = storage.as_ptr() as *mut u8;
        let buf = base.wrapping_add(t.offset() * item);
        // SAFETY: `view` is a valid, writable Py_buffer the interpreter passes
        // in; every pointer stored in it stays valid until __releasebuffer__
        // (the shape/strides box is freed there; `obj` holds the tensor, so
        // its storage, and so `buf`, lives until the view is released).
        unsafe {
            (*view).buf = buf as *mut c_void;
            (*view).obj = slf.into_any().into_ptr();
            (*view).len = (t.numel() * item) as ffi::Py_ssize_t;
            (*view).itemsize = item as ffi::Py_ssize_t;
            (*view).readonly = c_int::from(readonly);
            (*view).ndim = t.rank() as c_int;
            (*view).format = if flags & ffi::PyBUF_FORMAT != 0 {
                format.as_ptr() as *mut _
            } else {
                ptr::null_mut()
            };
            (*view).shape = if flags & ffi::PyBUF_ND == ffi::PyBUF_ND {
                info.shape.as_mut_ptr()
            } else {
                ptr::null_mut()
            };
            (*view).strides = if flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES {
                info.strides.as_mut_ptr()
            } else {
                ptr::null_mut()
            };
            (*view).suboffsets = ptr::null_mut();
            (*view).internal = Box::into_raw(info) as *mut c_void;
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, view: *mut ffi::Py_buffer) {
        // SAFETY: `internal` was set by __getbuffer__ to a leaked
        // Box<BufferInfo>, and the interpreter releases each view once.
        unsafe {
            let p = (*view).internal as *mut BufferInfo;
            if !p.is_null() {
                drop(Box::from_raw(p));
                (*view).internal = ptr::null_mut();
            }
        }
    }
}

/// A Python buffer held for an imported storage; released (with the
/// interpreter attached) when the storage drops.
struct HeldBuffer {
    view: Box<ffi::Py_buffer>,
}

// SAFETY: the Py_buffer is only touched in `drop`, under the interpreter
// (Python::try_attach), never concurrently.
unsafe impl Send for HeldBuffer {}
// SAFETY: as above; no `&self` method reads the raw pointers.
unsafe impl Sync for HeldBuffer {}

impl Drop for HeldBuffer {
    fn drop(&mut self) {
        let view: *mut ffi::Py_buffer = &mut *self.view;
        // At interpreter shutdown the buffer is leaked rather than released
        // without the interpreter.
        let _ = Python::try_attach(|_| {
            // SAFETY: `view` was filled by a successful PyObject_GetBuffer
            // and is released exactly once, here.
            unsafe { ffi::PyBuffer_Release(view) }
        });
    }
}

/// A tensor sharing the memory of any object with the buffer protocol
/// (numpy arrays, `array.array`, `memoryview`, …): writable when the
/// exporter allows it.
pub fn from_buffer(op: &str, obj: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let mut view = Box::new(ffi::Py_buffer::new());
    let mut writable = true;
    // SAFETY: `obj` is a live object and `view` a fresh Py_buffer; on
    // failure the interpreter leaves `view` unfilled and sets an error.
    let rc = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, ffi::PyBUF_RECORDS) };
    if rc != 0 {
        let _ = PyErr::take(obj.py());
        writable = false;
        // SAFETY: as above.
        let rc =
            unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, ffi::PyBUF_RECORDS_RO) };
        if rc != 0 {
            return Err(PyErr::take(obj.py()).unwrap_or_else(|| {
                PyTypeError::new_err(format!("{op}: the object has no buffer"))
            }));
        }
    }
    // From here on, dropping `held` releases the buffer.
    let held = HeldBuffer { view };
    let v: &ffi::Py_buffer = &held.view;
    let itemsize = usize::try_from(v.itemsize).unwrap_or(0);
    let format = if v.format.is_null() {
        "B".to_string()
    } else {
        // SAFETY: a non-null format is a NUL-terminated string owned by the
        // exporter for the view's life.
        unsafe { CStr::from_ptr(v.format) }
            .to_string_lossy()
            .into_owned()
    };
    let Some(dtype) = dtype_of_format(&format, itemsize) else {
        return Err(value_error(format!(
            "{op}: an array of format {format:?} ({itemsize}-byte items) has no kael dtype; convert it to float32/float64/float16/int64/int32/int16/int8/uint8/bool first"
        )));
    };
    let ndim = usize::try_from(v.ndim).unwrap_or(usize::MAX);
    if ndim > MAX_RANK {
        return Err(value_error(format!(
            "{op}: the array has {ndim} dimensions, more than kael's maximum {MAX_RANK}; reshape it first"
        )));
    }
    let mut shape = Vec::with_capacity(ndim);
    let mut strides = Vec::with_capacity(ndim);
    for i in 0..ndim {
        // SAFETY: with PyBUF_STRIDES the exporter fills `shape` and
        // `strides` with `ndim` entries each (0-d: none are read).
        let (n, s) = unsafe { (*v.shape.add(i), *v.strides.add(i)) };
        let n = usize::try_from(n).map_err(|_| value_error(format!("{op}: a negative size")))?;
        if s < 0 {
            return Err(value_error(format!(
                "{op}: the array has a negative stride; kael views need non-negative strides, so copy it first (numpy.ascontiguousarray(a))"
            )));
        }
        let s = s as usize;
        if itemsize == 0 || s % itemsize != 0 {
            return Err(value_error(format!(
                "{op}: a stride of {s} bytes is not a multiple of the element size {itemsize}; copy the array first"
            )));
        }
        shape.push(n);
        strides.push(s / itemsize);
    }
    let nbytes = span_bytes(&shape, &strides, itemsize)
        .ok_or_else(|| value_error(format!("{op}: the array's extent overflows")))?;
    let ptr = nonnull(v.buf as *mut u8, itemsize, nbytes)
        .ok_or_else(|| value_error(format!("{op}: the buffer's pointer is null")))?;
    let writable = writable && v.readonly == 0;
    let owner: Shared<dyn ExternalOwner> = Shared::new(held);
    tensor_over(op, ptr, nbytes, owner, writable, &shape, &strides, dtype)
}

/// `kael.from_numpy(a)`: a tensor sharing `a`'s memory (no copy), keeping
/// `a` alive; writes on either side are seen on the other.
#[pyfunction]
pub fn from_numpy(array: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
    from_buffer("from_numpy", array).map(wrap)
}

// ------------------------------------------------------------- DLPack

const DLTENSOR: &CStr = c"dltensor";
const USED_DLTENSOR: &CStr = c"used_dltensor";
const DLTENSOR_VERSIONED: &CStr = c"dltensor_versioned";
const USED_DLTENSOR_VERSIONED: &CStr = c"used_dltensor_versioned";

/// A capsule nobody consumed frees its tensor (a consumer renames it to
/// `used_…` and calls the deleter itself).
unsafe extern "C" fn capsule_destructor(capsule: *mut ffi::PyObject) {
    // SAFETY: the interpreter passes the capsule being destroyed; IsValid
    // checks the name (and sets no error on mismatch), and the pointer
    // under a valid name is the export `__dlpack__` stored, freed once here.
    unsafe {
        for (name, versioned) in [(DLTENSOR, false), (DLTENSOR_VERSIONED, true)] {
            if ffi::PyCapsule_IsValid(capsule, name.as_ptr()) == 1 {
                let m = ffi::PyCapsule_GetPointer(capsule, name.as_ptr());
                dlpack::delete(m, versioned);
                return;
            }
        }
    }
}

#[pymethods]
impl PyTensor {
    /// DLPack export (the array API's `__dlpack__`): a capsule over this
    /// tensor's memory that keeps the tensor alive. DLPack 1.x
    /// (`max_version >= (1, 0)`) marks read-only storage; `copy=True`
    /// exports a copy.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        slf: &Bound<'py, Self>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let _ = stream; // host memory: there is no stream to order against
        let mut t = slf.get().t.clone();
        if !t.device().is_host_memory() {
            return Err(PyBufferError::new_err(
                "__dlpack__: only host-memory tensors are exported; call .to(kael.threaded) first",
            ));
        }
        if let Some((dt, _)) = dl_device {
            if dt != dlpack::KDL_CPU && dt != dlpack::KDL_CUDA_HOST {
                return Err(PyBufferError::new_err(
                    "__dlpack__: kael exports host (CPU) memory only; ask for dl_device=(1, 0)",
                ));
            }
        }
        let copied = copy == Some(true);
        if copied {
            t = t.deep_clone().py()?;
        }
        let versioned = max_version.is_some_and(|(major, _)| major >= 1);
        if !versioned && t.storage().is_read_only() {
            return Err(PyBufferError::new_err(
                "__dlpack__: the tensor's storage is read-only and DLPack before 1.0 cannot say so; pass max_version=(1, 0) or export a clone()",
            ));
        }
        let ptr = dlpack::export(&t, versioned, copied);
        let name = if versioned {
            DLTENSOR_VERSIONED
        } else {
            DLTENSOR
        };
        // SAFETY: `ptr` is a fresh export of the kind `name` says; the
        // destructor frees it unless a consumer renames the capsule.
        let cap = unsafe { ffi::PyCapsule_New(ptr, name.as_ptr(), Some(capsule_destructor)) };
        if cap.is_null() {
            // SAFETY: no capsule was made, so nobody else owns `ptr`.
            unsafe { dlpack::delete(ptr, versioned) };
        }
        // SAFETY: `cap` is a new reference or null with an error set.
        unsafe { Bound::from_owned_ptr_or_err(py, cap) }
    }

    /// DLPack device of this tensor: `(1, 0)` (CPU) for host memory.
    fn __dlpack_device__(&self) -> PyResult<(i32, i32)> {
        match self.t.device().kind() {
            DeviceKind::Cpu | DeviceKind::ThreadedCpu => Ok((dlpack::KDL_CPU, 0)),
            _ => Err(PyBufferError::new_err(
                "__dlpack_device__: only host-memory tensors take part in DLPack; call .to(kael.threaded) first",
            )),
        }
    }
}

fn import_error(e: ImportError) -> PyErr {
    const OP: &str = "from_dlpack";
    match e {
        ImportError::Version(a, b) => value_error(format!(
            "{OP}: DLPack version {a}.{b} is not supported; kael reads 1.x (and unversioned capsules)"
        )),
        ImportError::Device(d) => value_error(format!(
            "{OP}: the tensor is on DLPack device type {d}; kael imports host memory only, so move it to the CPU first"
        )),
        ImportError::DType(c, b, l) => value_error(format!(
            "{OP}: DLPack dtype (code {c}, {b} bits, {l} lanes) has no kael dtype; convert it first"
        )),
        ImportError::Rank(n) => value_error(format!(
            "{OP}: {n} dimensions is more than kael's maximum {MAX_RANK}; reshape first"
        )),
        ImportError::Negative => value_error(format!(
            "{OP}: the tensor has a negative size or stride; kael views need non-negative strides, so copy it first"
        )),
        ImportError::Overflow => value_error(format!("{OP}: the tensor's extent overflows")),
        ImportError::Null => value_error(format!("{OP}: the data pointer is null")),
        ImportError::Misaligned(n) => value_error(format!(
            "{OP}: the data pointer is not aligned to the element size ({n} bytes); copy it first"
        )),
        ImportError::Kael(e) => crate::errors::to_py(e),
    }
}

/// `kael.from_dlpack(x)`: a tensor sharing the memory of any object with
/// `__dlpack__` (numpy arrays, PyTorch tensors, …) or of a DLPack capsule.
#[pyfunction]
pub fn from_dlpack(obj: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
    const OP: &str = "from_dlpack";
    if let Ok(t) = obj.cast::<PyTensor>() {
        return Ok(wrap(t.get().t.clone()));
    }
    let py = obj.py();
    let capsule = if obj.hasattr("__dlpack__")? {
        let kw = pyo3::types::PyDict::new(py);
        kw.set_item("max_version", (1, 0))?;
        match obj.call_method("__dlpack__", (), Some(&kw)) {
            Ok(c) => c,
            Err(e) if e.is_instance_of::<PyTypeError>(py) => obj.call_method0("__dlpack__")?,
            Err(e) => return Err(e),
        }
    } else {
        obj.clone()
    };
    let cap = capsule.as_ptr();
    // SAFETY: IsValid only reads the object's type and name.
    let versioned = unsafe { ffi::PyCapsule_IsValid(cap, DLTENSOR_VERSIONED.as_ptr()) } == 1;
    // SAFETY: as above.
    let legacy = unsafe { ffi::PyCapsule_IsValid(cap, DLTENSOR.as_ptr()) } == 1;
    if !versioned && !legacy {
        return Err(value_error(format!(
            "{OP}: expected an object with __dlpack__ or an unused DLPack capsule; a consumed capsule cannot be imported twice"
        )));
    }
    let (name, used) = if versioned {
        (DLTENSOR_VERSIONED, USED_DLTENSOR_VERSIONED)
    } else {
        (DLTENSOR, USED_DLTENSOR)
    };
    // SAFETY: the name was just checked, so GetPointer returns the managed
    // tensor the producer stored (null is checked).
    let managed = unsafe { ffi::PyCapsule_GetPointer(cap, name.as_ptr()) };
    if managed.is_null() {
        return Err(
            PyErr::take(py).unwrap_or_else(|| value_error(format!("{OP}: the capsule is empty")))
        );
    }
    // Mark the capsule consumed first, so its destructor never frees what
    // the storage will own; a refused import restores the name.
    // SAFETY: `cap` is a valid capsule.
    if unsafe { ffi::PyCapsule_SetName(cap, used.as_ptr()) } != 0 {
        return Err(PyErr::take(py)
            .unwrap_or_else(|| value_error(format!("{OP}: could not consume the capsule"))));
    }
    let device = default_device()?;
    // SAFETY: a capsule named `dltensor[_versioned]` holds a live managed
    // tensor of that kind, which the producer keeps valid until its deleter.
    match unsafe { dlpack::import(managed, versioned, &device) } {
        Ok(t) => Ok(wrap(t)),
        Err(e) => {
            // SAFETY: the import took nothing; give the capsule its name back
            // so its destructor frees the tensor.
            unsafe { ffi::PyCapsule_SetName(cap, name.as_ptr()) };
            Err(import_error(e))
        }
    }
}
