//! `t[key]` and `t[key] = value`.
//!
//! NOTE [Python indexing]
//! Basic indexing makes a view, as in PyTorch and numpy: an int selects
//! (dropping the dimension), a slice narrows (a positive step strides),
//! `None` inserts a dimension and `...` stands for the dimensions not
//! named. A 1-d integer tensor or list on one dimension gathers
//! (`index_select`, a copy). Assignment writes through the basic-index
//! view (`fill_` for a number, `copy_` with broadcasting otherwise), so it
//! bumps the version once and is seen by every view of the storage.
//! Negative steps are refused, as in PyTorch.

use crate::errors::{IntoPy, index_error, type_error, value_error};
use crate::tensor::{PyTensor, as_tensor, run};
use kael_core::{DType, Tensor};
use pyo3::prelude::*;
use pyo3::types::{PyEllipsis, PyList, PySlice, PyTuple};

enum Item {
    Int(isize),
    Slice(Py<PySlice>),
    NewAxis,
    Ellipsis,
    Gather(Tensor),
}

fn items(t: &Tensor, key: &Bound<'_, PyAny>) -> PyResult<Vec<Item>> {
    let parts: Vec<Bound<'_, PyAny>> = if let Ok(tup) = key.cast::<PyTuple>() {
        tup.iter().collect()
    } else {
        vec![key.clone()]
    };
    let mut out = Vec::with_capacity(parts.len());
    for p in parts {
        out.push(if p.is_none() {
            Item::NewAxis
        } else if p.is_instance_of::<PyEllipsis>() {
            Item::Ellipsis
        } else if let Ok(s) = p.cast::<PySlice>() {
            Item::Slice(s.clone().unbind())
        } else if let Ok(x) = p.cast::<PyTensor>() {
            let x = &x.get().t;
            if x.rank() == 0 && !x.dtype().is_float() && x.dtype() != DType::Bool {
                Item::Int(x.to_dtype(DType::I64).py()?.item::<i64>().py()? as isize)
            } else {
                Item::Gather(x.clone())
            }
        } else if let Ok(i) = p.extract::<isize>() {
            Item::Int(i)
        } else if p.is_instance_of::<PyList>() {
            let idx = as_tensor("index", t, &p)?;
            Item::Gather(idx.to_dtype(DType::I64).py()?)
        } else {
            return Err(type_error(format!(
                "index: {} cannot index a tensor; use ints, slices, None, ..., or an integer tensor/list",
                p.get_type().name().map(|n| n.to_string()).unwrap_or_default()
            )));
        });
    }
    Ok(out)
}

fn apply(t: &Tensor, key: &Bound<'_, PyAny>, allow_gather: bool) -> PyResult<Tensor> {
    let py = key.py();
    let items = items(t, key)?;
    let consuming = items
        .iter()
        .filter(|i| !matches!(i, Item::NewAxis | Item::Ellipsis))
        .count();
    if items.iter().filter(|i| matches!(i, Item::Ellipsis)).count() > 1 {
        return Err(index_error(
            "index: an index can only have a single ellipsis (...)",
        ));
    }
    if consuming > t.rank() {
        return Err(index_error(format!(
            "index: too many indices for a tensor of rank {} ({consuming} given)",
            t.rank()
        )));
    }
    let mut cur = t.clone();
    let mut dim: usize = 0;
    for item in items {
        match item {
            Item::Int(i) => {
                let n = cur.size(dim as isize).py()? as isize;
                if i < -n || i >= n {
                    return Err(index_error(format!(
                        "index: {i} is out of range for dimension {dim} of size {n}; pass an index in -{n}..{n}"
                    )));
                }
                cur = cur.select(dim as isize, i).py()?;
            }
            Item::Slice(s) => {
                let n = cur.size(dim as isize).py()?;
                let ind = s.bind(py).indices(n as isize)?;
                if ind.step <= 0 {
                    return Err(value_error(
                        "index: slice steps must be positive (kael views, like PyTorch's, cannot run backwards); use .flip(dim)",
                    ));
                }
                let (start, stop, step) = (ind.start, ind.stop.max(ind.start), ind.step);
                cur = if step == 1 {
                    cur.narrow(dim as isize, start as usize, (stop - start) as usize)
                        .py()?
                } else {
                    cur.slice(dim as isize, start, stop, step as usize).py()?
                };
                dim += 1;
            }
            Item::NewAxis => {
                cur = cur.unsqueeze(dim as isize).py()?;
                dim += 1;
            }
            Item::Ellipsis => {
                dim += t.rank() - consuming;
            }
            Item::Gather(idx) => {
                if !allow_gather {
                    return Err(value_error(
                        "index assignment: integer-tensor (advanced) indices are not supported on the left of =; write through a slice, or use index_add/scatter",
                    ));
                }
                if idx.rank() > 1 || idx.dtype().is_float() || idx.dtype() == DType::Bool {
                    return Err(type_error(
                        "index: a tensor index must be a 1-d integer tensor (boolean masks: use masked_fill or where)",
                    ));
                }
                let idx = if idx.dtype() == DType::I64 {
                    idx
                } else {
                    idx.to_dtype(DType::I64).py()?
                };
                let idx = if idx.rank() == 0 {
                    idx.reshape(&[1isize]).py()?
                } else {
                    idx
                };
                cur = cur.index_select(dim as isize, &idx).py()?;
                dim += 1;
            }
        }
    }
    Ok(cur)
}

/// `t[key]`: a view for basic indices (NOTE [Python indexing]).
pub fn get(t: &Tensor, key: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    apply(t, key, true)
}

/// `t[key] = value`: writes through the view (bumps the version once).
pub fn set(
    py: Python<'_>,
    t: &Tensor,
    key: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let view = apply(t, key, false)?;
    if let Ok(v) = value.extract::<f64>() {
        if value.cast::<PyTensor>().is_err() {
            return run(py, &view, || view.fill_(v));
        }
    }
    let src = as_tensor("index assignment", &view, value)?;
    run(py, &view, || view.copy_(&src))
}
