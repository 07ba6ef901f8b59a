//! Module-level functions that make tensors: `kael.tensor`, `zeros`,
//! `arange`, `randn`, `cat`, `where`, … (PyTorch's names and defaults;
//! `device=None` is the default device, NOTE [Default device]).

use crate::convert::tensor_fn;
use crate::dtype_device::{extract_device, extract_dtype};
use crate::errors::{IntoPy, type_error};
use crate::tensor::{PyTensor, dims_arg, run_t, wrap};
use kael_core::{DType, Rng, Tensor};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::sync::Mutex;

/// The generator behind `rand`/`randn` (seed 0 until `manual_seed`).
static RNG: Mutex<Option<Rng>> = Mutex::new(None);

/// Runs `f` with kael's generator (for dropout and other random ops).
pub fn with_rng_pub<R>(f: impl FnOnce(&mut Rng) -> R) -> R {
    with_rng(f)
}

fn with_rng<R>(f: impl FnOnce(&mut Rng) -> R) -> R {
    let mut g = RNG.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(|| Rng::new(0)))
}

/// Seeds the generator behind `rand` and `randn`.
#[pyfunction]
pub fn manual_seed(seed: u64) {
    let mut g = RNG.lock().unwrap_or_else(|p| p.into_inner());
    *g = Some(Rng::new(seed));
}

fn shape_of(op: &str, size: &Bound<'_, PyTuple>) -> PyResult<Vec<usize>> {
    dims_arg(op, size)?
        .into_iter()
        .map(|d| {
            usize::try_from(d).map_err(|_| {
                crate::errors::value_error(format!("{op}: sizes must be >= 0, got {d}"))
            })
        })
        .collect()
}

fn dtype_or(op: &str, dtype: Option<&Bound<'_, PyAny>>, default: DType) -> PyResult<DType> {
    match dtype {
        Some(d) if !d.is_none() => extract_dtype(op, d),
        _ => Ok(default),
    }
}

fn finish(t: Tensor, requires_grad: bool) -> PyResult<PyTensor> {
    if requires_grad {
        Ok(wrap(t.requires_grad_(true).py()?))
    } else {
        Ok(wrap(t))
    }
}

/// `kael.tensor(data, dtype=None, device=None, requires_grad=False)`: a
/// copy of `data` (numbers, nested lists, an array, a tensor).
#[pyfunction]
#[pyo3(signature = (data, dtype=None, device=None, requires_grad=false))]
pub fn tensor(
    data: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<PyTensor> {
    tensor_fn(data, dtype, device, requires_grad)
}

macro_rules! filled {
    ($(#[$doc:meta])* $name:ident, $op:literal, |$shape:ident, $dt:ident, $dev:ident| $make:expr) => {
        $(#[$doc])*
        #[pyfunction]
        #[pyo3(signature = (*size, dtype=None, device=None, requires_grad=false))]
        pub fn $name(
            size: &Bound<'_, PyTuple>,
            dtype: Option<&Bound<'_, PyAny>>,
            device: Option<&Bound<'_, PyAny>>,
            requires_grad: bool,
        ) -> PyResult<PyTensor> {
            let $shape = shape_of($op, size)?;
            let $dt = dtype_or($op, dtype, DType::F32)?;
            let $dev = extract_device($op, device)?;
            finish($make.py()?, requires_grad)
        }
    };
}

filled!(
    /// Zeros of the given size: `kael.zeros(2, 3)`.
    zeros, "zeros", |s, d, dev| Tensor::zeros(&s, d, &dev)
);
filled!(
    /// Ones of the given size.
    ones, "ones", |s, d, dev| Tensor::ones(&s, d, &dev)
);
filled!(
    /// A tensor of the given size (zero-filled: kael never hands out
    /// uninitialised memory).
    empty, "empty", |s, d, dev| Tensor::zeros(&s, d, &dev)
);
filled!(
    /// Uniform samples in [0, 1).
    rand, "rand", |s, d, dev| with_rng(|r| Tensor::rand(&s, d, &dev, r))
);
filled!(
    /// Standard normal samples.
    randn, "randn", |s, d, dev| with_rng(|r| Tensor::randn(&s, d, &dev, r))
);

/// `fill_value` everywhere: `kael.full((2, 3), 7.0)`.
#[pyfunction]
#[pyo3(signature = (size, fill_value, dtype=None, device=None, requires_grad=false))]
pub fn full(
    size: &Bound<'_, PyAny>,
    fill_value: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<PyTensor> {
    let tup = PyTuple::new(size.py(), [size])?;
    let s = shape_of("full", &tup)?;
    // the fill value's kind picks the default dtype, as in PyTorch:
    // bool, int64, or the default float dtype
    let inferred = if fill_value.is_instance_of::<pyo3::types::PyBool>() {
        DType::Bool
    } else if fill_value.is_instance_of::<pyo3::types::PyInt>() {
        DType::I64
    } else {
        kael_core::promote::default_float_dtype()
    };
    let fill_value = fill_value
        .extract::<f64>()
        .map_err(|_| type_error("full: fill_value must be a number"))?;
    let d = dtype_or("full", dtype, inferred)?;
    let dev = extract_device("full", device)?;
    finish(Tensor::full(&s, fill_value, d, &dev).py()?, requires_grad)
}

/// `arange(end)`, `arange(start, end)` or `arange(start, end, step)`:
/// int64 when every bound is an int, float32 otherwise (as in PyTorch).
#[pyfunction]
#[pyo3(signature = (*args, dtype=None, device=None, requires_grad=false))]
pub fn arange(
    args: &Bound<'_, PyTuple>,
    dtype: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<PyTensor> {
    let vals: Vec<f64> = args
        .iter()
        .map(|a| a.extract::<f64>())
        .collect::<PyResult<_>>()
        .map_err(|_| type_error("arange: bounds and step must be numbers"))?;
    let ints = args
        .iter()
        .all(|a| a.is_instance_of::<pyo3::types::PyInt>());
    let (start, end, step) = match vals[..] {
        [e] => (0.0, e, 1.0),
        [s, e] => (s, e, 1.0),
        [s, e, st] => (s, e, st),
        _ => {
            return Err(type_error(
                "arange: pass end, (start, end) or (start, end, step)",
            ));
        }
    };
    let d = dtype_or("arange", dtype, if ints { DType::I64 } else { DType::F32 })?;
    let dev = extract_device("arange", device)?;
    let t = if ints && d == DType::I64 {
        Tensor::arange_step(start as i64, end as i64, step, &dev).py()?
    } else {
        Tensor::arange_step(start, end, step, &dev)
            .py()?
            .to_dtype(d)
            .py()?
    };
    finish(t, requires_grad)
}

/// `steps` evenly spaced values from `start` to `end` inclusive.
#[pyfunction]
#[pyo3(signature = (start, end, steps, dtype=None, device=None, requires_grad=false))]
pub fn linspace(
    start: f64,
    end: f64,
    steps: usize,
    dtype: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<PyTensor> {
    let d = dtype_or("linspace", dtype, DType::F32)?;
    let dev = extract_device("linspace", device)?;
    finish(
        Tensor::linspace(start, end, steps, d, &dev).py()?,
        requires_grad,
    )
}

/// The `n`×`n` identity.
#[pyfunction]
#[pyo3(signature = (n, dtype=None, device=None, requires_grad=false))]
pub fn eye(
    n: usize,
    dtype: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<PyTensor> {
    let d = dtype_or("eye", dtype, DType::F32)?;
    let dev = extract_device("eye", device)?;
    finish(Tensor::eye(n, d, &dev).py()?, requires_grad)
}

/// Zeros shaped like `t` (its dtype and device).
#[pyfunction]
pub fn zeros_like(t: &PyTensor) -> PyResult<PyTensor> {
    t.t.zeros_like().py().map(wrap)
}

/// Ones shaped like `t`.
#[pyfunction]
pub fn ones_like(t: &PyTensor) -> PyResult<PyTensor> {
    t.t.ones_like().py().map(wrap)
}

/// `fill_value` shaped like `t`.
#[pyfunction]
pub fn full_like(t: &PyTensor, fill_value: f64) -> PyResult<PyTensor> {
    t.t.full_like(fill_value).py().map(wrap)
}

/// Uniform samples shaped like `t`.
#[pyfunction]
pub fn rand_like(t: &PyTensor) -> PyResult<PyTensor> {
    with_rng(|r| t.t.rand_like(r)).py().map(wrap)
}

/// Normal samples shaped like `t`.
#[pyfunction]
pub fn randn_like(t: &PyTensor) -> PyResult<PyTensor> {
    with_rng(|r| t.t.randn_like(r)).py().map(wrap)
}

fn tensor_list(op: &str, tensors: &Bound<'_, PyAny>) -> PyResult<Vec<Tensor>> {
    let mut v = Vec::new();
    for item in tensors
        .try_iter()
        .map_err(|_| type_error(format!("{op}: pass a list or tuple of tensors")))?
    {
        let item = item?;
        let t = item
            .cast::<PyTensor>()
            .map_err(|_| type_error(format!("{op}: every item must be a kael.Tensor")))?;
        v.push(t.get().t.clone());
    }
    Ok(v)
}

/// Joins tensors along an existing dimension.
#[pyfunction]
#[pyo3(signature = (tensors, dim=0))]
pub fn cat(py: Python<'_>, tensors: &Bound<'_, PyAny>, dim: isize) -> PyResult<PyTensor> {
    let v = tensor_list("cat", tensors)?;
    let refs: Vec<&Tensor> = v.iter().collect();
    match v.first() {
        Some(f) => run_t(py, f, || Tensor::cat(&refs, dim)),
        None => Tensor::cat(&refs, dim).py().map(wrap),
    }
}

/// Joins tensors along a new dimension.
#[pyfunction]
#[pyo3(signature = (tensors, dim=0))]
pub fn stack(py: Python<'_>, tensors: &Bound<'_, PyAny>, dim: isize) -> PyResult<PyTensor> {
    let v = tensor_list("stack", tensors)?;
    let refs: Vec<&Tensor> = v.iter().collect();
    match v.first() {
        Some(f) => run_t(py, f, || Tensor::stack(&refs, dim)),
        None => Tensor::stack(&refs, dim).py().map(wrap),
    }
}

/// `input` where `condition` is true, `other` elsewhere (numbers allowed).
#[pyfunction(name = "where")]
pub fn where_(
    py: Python<'_>,
    condition: &PyTensor,
    input: &Bound<'_, PyAny>,
    other: &Bound<'_, PyAny>,
) -> PyResult<PyTensor> {
    let c = &condition.t;
    let like = match (input.cast::<PyTensor>(), other.cast::<PyTensor>()) {
        (Ok(a), _) => a.get().t.clone(),
        (_, Ok(b)) => b.get().t.clone(),
        _ => Tensor::zeros(&[], DType::F32, &c.device()).py()?,
    };
    let a = crate::tensor::as_tensor("where", &like, input)?;
    let b = crate::tensor::as_tensor("where", &like, other)?;
    run_t(py, c, || c.where_cond(&a, &b))
}

/// Matrix product (`a @ b`).
#[pyfunction]
pub fn matmul(py: Python<'_>, a: &PyTensor, b: &PyTensor) -> PyResult<PyTensor> {
    let (x, y) = (&a.t, &b.t);
    run_t(py, x, || x.matmul(y))
}
