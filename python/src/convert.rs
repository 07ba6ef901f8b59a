//! Python values ↔ kael tensors: `kael.tensor(data)`, `tolist()`,
//! `repr()`.
//!
//! NOTE [Inferred dtypes]
//! As in PyTorch: Python floats (or a mix with ints) make `float32`, ints
//! make `int64`, bools make `bool`; an array keeps its own dtype. Nested
//! lists must be rectangular; a ragged list is a `KaelShapeError`-like
//! `KaelValueError` naming the first place it is ragged.

use crate::dtype_device::{dtype_name, extract_device, extract_dtype};
use crate::errors::{IntoPy, value_error};
use crate::tensor::{PyTensor, wrap};
use kael_core::{DType, Device, MAX_RANK, Tensor};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyList, PyTuple};

/// Values read from nested Python sequences, widened as they are read.
enum Values {
    Bool(Vec<bool>),
    Int(Vec<i64>),
    Float(Vec<f64>),
}

impl Values {
    fn push(&mut self, op: &str, v: &Bound<'_, PyAny>) -> PyResult<()> {
        if v.is_instance_of::<PyBool>() {
            let b: bool = v.extract()?;
            match self {
                Values::Bool(x) => x.push(b),
                Values::Int(x) => x.push(i64::from(b)),
                Values::Float(x) => x.push(f64::from(u8::from(b))),
            }
            return Ok(());
        }
        if v.is_instance_of::<PyInt>() {
            let i: i64 = v.extract().map_err(|_| {
                value_error(format!(
                    "{op}: an integer does not fit in int64; pass smaller values or floats"
                ))
            })?;
            match self {
                Values::Bool(x) => {
                    let mut w: Vec<i64> = x.iter().map(|&b| i64::from(b)).collect();
                    w.push(i);
                    *self = Values::Int(w);
                }
                Values::Int(x) => x.push(i),
                Values::Float(x) => x.push(i as f64),
            }
            return Ok(());
        }
        let f: f64 = if v.is_instance_of::<PyFloat>() {
            v.extract()?
        } else if let Ok(t) = v.cast::<PyTensor>() {
            let t = &t.get().t;
            if t.numel() != 1 {
                return Err(value_error(format!(
                    "{op}: a tensor with {} elements inside a list; only one-element tensors can be list items (use kael.stack for tensors)",
                    t.numel()
                )));
            }
            t.to_dtype(DType::F64).py()?.item::<f64>().py()?
        } else {
            v.extract().map_err(|_| {
                value_error(format!(
                    "{op}: {} is not a number; pass numbers, nested lists of numbers, or an array",
                    v.get_type()
                        .name()
                        .map(|n| n.to_string())
                        .unwrap_or_default()
                ))
            })?
        };
        match self {
            Values::Bool(x) => {
                let mut w: Vec<f64> = x.iter().map(|&b| f64::from(u8::from(b))).collect();
                w.push(f);
                *self = Values::Float(w);
            }
            Values::Int(x) => {
                let mut w: Vec<f64> = x.iter().map(|&i| i as f64).collect();
                w.push(f);
                *self = Values::Float(w);
            }
            Values::Float(x) => x.push(f),
        }
        Ok(())
    }
}

fn is_seq(v: &Bound<'_, PyAny>) -> bool {
    v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>()
}

/// Reads nested lists/tuples: the shape from the first item at each
/// depth, every other item checked against it.
fn read_nested(
    op: &str,
    v: &Bound<'_, PyAny>,
    depth: usize,
    shape: &mut Vec<usize>,
    out: &mut Values,
) -> PyResult<()> {
    if !is_seq(v) {
        if depth != shape.len() {
            return Err(value_error(format!(
                "{op}: the nested lists are ragged (a number at depth {depth}, lists of depth {} elsewhere); make every row the same length",
                shape.len()
            )));
        }
        return out.push(op, v);
    }
    let n = v.len()?;
    if depth == shape.len() {
        if depth >= MAX_RANK {
            return Err(value_error(format!(
                "{op}: the lists are nested deeper than kael's maximum rank {MAX_RANK}"
            )));
        }
        shape.push(n);
    } else if depth > shape.len() || shape[depth] != n {
        return Err(value_error(format!(
            "{op}: the nested lists are ragged (a list of length {n} at depth {depth} where others have {}); make every row the same length",
            shape.get(depth).copied().unwrap_or(0)
        )));
    }
    for item in v.try_iter()? {
        read_nested(op, &item?, depth + 1, shape, out)?;
    }
    // An empty list fixes the depth below it at none.
    Ok(())
}

/// A tensor holding a copy of `data` (a number, nested lists, an array or
/// a buffer, or a tensor), in `dtype` (inferred when `None`) on `device`.
pub fn tensor_from_data(
    op: &str,
    data: &Bound<'_, PyAny>,
    dtype: Option<DType>,
    device: &Device,
) -> PyResult<Tensor> {
    if let Ok(t) = data.cast::<PyTensor>() {
        let t = t.get().t.detach().py()?;
        let t = t.to_device(device).py()?;
        let t = match dtype {
            Some(d) => t.to_dtype(d).py()?,
            None => t,
        };
        return if t.shares_storage(&data.cast::<PyTensor>()?.get().t) {
            t.deep_clone().py()
        } else {
            Ok(t)
        };
    }
    if !is_seq(data) && !data.is_instance_of::<PyFloat>() && !data.is_instance_of::<PyInt>() {
        // Arrays and other buffers: share, then copy onto the device.
        if let Ok(shared) = crate::interop::from_buffer(op, data) {
            let t = shared.to_device(device).py()?;
            let t = match dtype {
                Some(d) => t.to_dtype(d).py()?,
                None => t,
            };
            return if t.shares_storage(&shared) {
                t.deep_clone().py()
            } else {
                Ok(t)
            };
        }
    }
    let mut shape = Vec::new();
    let mut vals = Values::Bool(Vec::new());
    read_nested(op, data, 0, &mut shape, &mut vals)?;
    let numel: usize = shape.iter().product();
    let t = match vals {
        _ if numel == 0 => Tensor::zeros(&shape, dtype.unwrap_or(DType::F32), device).py()?,
        Values::Bool(v) => Tensor::from_slice(&v, &shape, device).py()?,
        Values::Int(v) => Tensor::from_slice(&v, &shape, device).py()?,
        Values::Float(v) => {
            let t = Tensor::from_slice(&v, &shape, device).py()?;
            if dtype.is_none() {
                t.to_dtype(DType::F32).py()?
            } else {
                t
            }
        }
    };
    match dtype {
        Some(d) => t.to_dtype(d).py(),
        None => Ok(t),
    }
}

/// `kael.tensor(data, dtype=None, device=None, requires_grad=False)`.
pub fn tensor_fn(
    data: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<PyTensor> {
    let dtype = match dtype {
        Some(d) if !d.is_none() => Some(extract_dtype("tensor", d)?),
        _ => None,
    };
    let dev = extract_device("tensor", device)?;
    let t = tensor_from_data("tensor", data, dtype, &dev)?;
    let t = if requires_grad {
        t.requires_grad_(true).py()?
    } else {
        t
    };
    Ok(wrap(t))
}

/// The values as nested Python lists (a number for a 0-d tensor).
pub fn tolist(py: Python<'_>, t: &Tensor) -> PyResult<Py<PyAny>> {
    let shape = t.shape().to_vec();
    fn nest<T: for<'a> IntoPyObject<'a> + Copy>(
        py: Python<'_>,
        vals: &[T],
        shape: &[usize],
    ) -> PyResult<Py<PyAny>> {
        match shape.split_first() {
            None => Ok(vals
                .first()
                .copied()
                .into_pyobject(py)
                .map_err(Into::into)?
                .into_any()
                .unbind()),
            Some((&n, rest)) => {
                let step: usize = rest.iter().product();
                let mut items = Vec::with_capacity(n);
                for i in 0..n {
                    let lo = i * step;
                    let part = vals.get(lo..lo + step).unwrap_or(&[]);
                    items.push(nest(py, part, rest)?);
                }
                Ok(PyList::new(py, items)?.into_any().unbind())
            }
        }
    }
    match t.dtype() {
        DType::Bool => nest(py, &t.to_vec::<bool>().py()?, &shape),
        d if d.is_float() => nest(
            py,
            &t.to_dtype(DType::F64).py()?.to_vec::<f64>().py()?,
            &shape,
        ),
        _ => nest(
            py,
            &t.to_dtype(DType::I64).py()?.to_vec::<i64>().py()?,
            &shape,
        ),
    }
}

/// kael's printed values in Python's spelling: `True`/`False` for bools,
/// and exponents as PyTorch prints them (`1.2800e+02`, not `1.2800e2`).
fn pythonic(values: &str, dtype: DType) -> String {
    if dtype == DType::Bool {
        return values.replace("true", "True").replace("false", "False");
    }
    if !dtype.is_float() || !values.contains('e') {
        return values.to_string();
    }
    let mut out = String::with_capacity(values.len() + 8);
    let b = values.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i] as char;
        out.push(c);
        // An exponent: 'e' after a digit or '.', then an optional '-', then digits.
        if c == 'e' && i > 0 && (b[i - 1].is_ascii_digit() || b[i - 1] == b'.') {
            let mut j = i + 1;
            let neg = j < b.len() && b[j] == b'-';
            if neg {
                j += 1;
            }
            let start = j;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            if j > start {
                out.push(if neg { '-' } else { '+' });
                if j - start == 1 {
                    out.push('0');
                }
                out.push_str(&values[start..j]);
                i = j;
                continue;
            }
        }
        i += 1;
    }
    out
}

/// PyTorch-style `repr`: kael's printed values, then the dtype when it is
/// not the one inferred from Python numbers, the device when it is not the
/// default, and the autograd state.
pub fn repr(t: &Tensor) -> String {
    let full = t.to_string();
    let values = full.split("\nshape=").next().unwrap_or("tensor(?)");
    let mut s = pythonic(values.trim_end_matches(')'), t.dtype());
    let d = t.dtype();
    if !matches!(d, DType::F32 | DType::I64 | DType::Bool) || t.numel() == 0 {
        s.push_str(&format!(", dtype=kael.{}", dtype_name(d)));
    }
    let dev = crate::dtype_device::device_of(&t.device());
    let default = crate::dtype_device::default_device().ok();
    if default.is_none_or(|dd| !dd.same_as(&t.device())) {
        s.push_str(&format!(", device=kael.{}", dev.name));
    }
    if let Some(name) = t.grad_fn_name() {
        s.push_str(&format!(", grad_fn=<{name}>"));
    } else if t.requires_grad() {
        s.push_str(", requires_grad=True");
    }
    s.push(')');
    s
}
