//! `t[key]` and `t[key] = value`.
//!
//! NOTE [Python indexing]
//! The key becomes the core's `Index` items (NOTE [Advanced indexing] in
//! `kael_core::tensor`), so Python and Rust index alike, with numpy's and
//! PyTorch's rules. Basic indexing makes a view: an int selects (dropping
//! the dimension), a slice narrows (a positive step strides), `None`
//! inserts a dimension and `...` stands for the dimensions not named.
//! Integer tensors, lists and arrays of any rank are advanced indices: they
//! broadcast together (`x[[0, 2], [1, 3]]` pairs them up), negative entries
//! count from the end, and a bool tensor or list is a mask. Assignment
//! through basic indices writes through the view (`fill_` for a number,
//! `copy_` with broadcasting otherwise); with an advanced index it is the
//! core's `index_put_` (one `copy_`: one version bump, nothing written on
//! an error; with repeated positions which write wins is not specified, as
//! in PyTorch). Negative steps are refused, as in PyTorch.

use crate::convert;
use crate::errors::{IntoPy, type_error, value_error};
use crate::tensor::{PyTensor, as_tensor, run};
use kael_core::tensor::Index;
use kael_core::{DType, Tensor};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyEllipsis, PyList, PySlice, PyTuple};

/// A Python slice bound: an int, `None`, or something with `__index__`.
fn bound(v: &Bound<'_, PyAny>) -> PyResult<Option<isize>> {
    if v.is_none() {
        return Ok(None);
    }
    v.extract::<isize>()
        .map(Some)
        .map_err(|_| type_error("index: slice bounds must be integers or None"))
}

fn items(t: &Tensor, key: &Bound<'_, PyAny>) -> PyResult<Vec<Index>> {
    let parts: Vec<Bound<'_, PyAny>> = if let Ok(tup) = key.cast::<PyTuple>() {
        tup.iter().collect()
    } else {
        vec![key.clone()]
    };
    let mut out = Vec::with_capacity(parts.len());
    for p in parts {
        out.push(if p.is_none() {
            Index::NewAxis
        } else if p.is_instance_of::<PyEllipsis>() {
            Index::Ellipsis
        } else if let Ok(s) = p.cast::<PySlice>() {
            let step = match bound(&s.getattr("step")?)? {
                None => 1,
                Some(st) if st > 0 => st as usize,
                Some(_) => {
                    return Err(value_error(
                        "index: slice steps must be positive (kael views, like PyTorch's, cannot run backwards); use .flip(dim)",
                    ));
                }
            };
            Index::Slice {
                start: bound(&s.getattr("start")?)?,
                stop: bound(&s.getattr("stop")?)?,
                step,
            }
        } else if let Ok(x) = p.cast::<PyTensor>() {
            let x = &x.get().t;
            if x.rank() == 0 && x.dtype().is_int() {
                Index::Int(x.to_dtype(DType::I64).py()?.item::<i64>().py()? as isize)
            } else {
                Index::Tensor(x.clone())
            }
        } else if p.is_instance_of::<PyBool>() {
            return Err(type_error(
                "index: a bare True/False index is not supported; use a bool tensor mask",
            ));
        } else if let Ok(i) = p.extract::<isize>() {
            Index::Int(i)
        } else if p.is_instance_of::<PyList>() || p.hasattr("__array__")? {
            // lists and arrays keep their own dtype: ints index, bools mask
            let idx = convert::tensor_from_data("index", &p, None, &t.device())?;
            Index::Tensor(idx)
        } else {
            return Err(type_error(format!(
                "index: {} cannot index a tensor; use ints, slices, None, ..., integer or bool tensors, or lists",
                p.get_type().name().map(|n| n.to_string()).unwrap_or_default()
            )));
        });
    }
    Ok(out)
}

/// Python raises `IndexError` for too many indices; checked here so the
/// exception class is Python's.
fn check_count(t: &Tensor, items: &[Index]) -> PyResult<()> {
    let consuming: usize = items
        .iter()
        .map(|i| match i {
            Index::NewAxis | Index::Ellipsis => 0,
            Index::Tensor(x) if x.dtype() == DType::Bool => x.rank(),
            _ => 1,
        })
        .sum();
    if consuming > t.rank() {
        return Err(crate::errors::index_error(format!(
            "index: too many indices for a tensor of rank {} ({consuming} given)",
            t.rank()
        )));
    }
    Ok(())
}

fn advanced(items: &[Index]) -> bool {
    items.iter().any(|i| matches!(i, Index::Tensor(_)))
}

/// `t[key]` (NOTE [Python indexing]).
pub fn get(t: &Tensor, key: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let items = items(t, key)?;
    check_count(t, &items)?;
    t.index(&items).py()
}

/// `t[key] = value` (bumps the version once).
pub fn set(
    py: Python<'_>,
    t: &Tensor,
    key: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let items = items(t, key)?;
    check_count(t, &items)?;
    if advanced(&items) {
        let v = match value.cast::<PyTensor>() {
            Ok(v) => v.get().t.clone(),
            Err(_) => {
                convert::tensor_from_data("index assignment", value, Some(t.dtype()), &t.device())?
            }
        };
        return run(py, t, || t.index_put_(&items, &v, false));
    }
    let view = t.index(&items).py()?;
    if let Ok(v) = value.extract::<f64>() {
        if value.cast::<PyTensor>().is_err() {
            return run(py, &view, || view.fill_(v));
        }
    }
    let src = as_tensor("index assignment", &view, value)?;
    run(py, &view, || view.copy_(&src))
}

/// `t.index_put_(indices, values, accumulate)`.
pub fn put(
    py: Python<'_>,
    t: &Tensor,
    indices: &Bound<'_, PyTuple>,
    values: &Bound<'_, PyAny>,
    accumulate: bool,
) -> PyResult<()> {
    let mut items = Vec::with_capacity(indices.len());
    for i in indices.iter() {
        let Ok(x) = i.cast::<PyTensor>() else {
            return Err(type_error("index_put_: indices must be a tuple of tensors"));
        };
        items.push(Index::Tensor(x.get().t.clone()));
    }
    let v = match values.cast::<PyTensor>() {
        Ok(v) => v.get().t.clone(),
        Err(_) => convert::tensor_from_data("index_put_", values, Some(t.dtype()), &t.device())?,
    };
    run(py, t, || t.index_put_(&items, &v, accumulate))
}
