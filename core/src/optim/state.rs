//! Saving and restoring an optimizer's state, so training resumes exactly.
//!
//! NOTE [Optimizer state dicts]
//! `Optimizer::state_dict` returns named tensors with PyTorch's per-
//! parameter names, the parameter given by its position in the list the
//! optimizer was built with: `state.{i}.momentum_buffer` (SGD),
//! `state.{i}.exp_avg`, `state.{i}.exp_avg_sq` and `state.{i}.step` (Adam,
//! AdamW; the step count as a rank-0 `I64`), plus `lr` (rank-0 `F64`).
//! A parameter without state yet (no step taken) has no entries. The
//! tensors are copies: later steps do not change a saved dict.
//! `load_state_dict` checks every entry (known name, index in range,
//! the parameter's shape and dtype, complete per parameter) before it
//! changes anything, and copies the values onto each parameter's device;
//! so a refused dict leaves the optimizer as it was, and a loaded one
//! does not alias the caller's tensors.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

/// One parsed entry: the parameter index and the field name.
pub(crate) struct Entry<'a> {
    /// The parameter's position.
    pub index: usize,
    /// What follows `state.{i}.`.
    pub field: &'a str,
    /// The value.
    pub tensor: &'a Tensor,
}

/// The name of field `field` of parameter `i`.
pub(crate) fn key(i: usize, field: &str) -> String {
    format!("state.{i}.{field}")
}

/// A rank-0 tensor holding the learning rate.
pub(crate) fn lr_entry(lr: f64) -> Result<(String, Tensor)> {
    Ok((
        String::from("lr"),
        Tensor::full(&[], lr, DType::F64, &crate::Device::cpu())?,
    ))
}

/// A copy of `t` for a state dict (no grad, own storage).
pub(crate) fn saved(t: &Tensor) -> Result<Tensor> {
    crate::no_grad(|| t.deep_clone())
}

/// Splits `entries` into the learning rate and per-parameter fields,
/// refusing unknown names, indices past `n_params` and fields outside
/// `fields`; `op` names the public method.
pub(crate) fn parse<'a>(
    op: &'static str,
    entries: &'a [(String, Tensor)],
    n_params: usize,
    fields: &[&str],
) -> Result<(Option<f64>, Vec<Entry<'a>>)> {
    let mut lr = None;
    let mut out = Vec::new();
    for (name, t) in entries {
        if name == "lr" {
            if t.numel() != 1 {
                return Err(bad(op, "the entry `lr` must hold one number"));
            }
            let v = crate::no_grad(|| t.to_dtype(DType::F64)?.reshape(&[1])?.to_vec::<f64>())?;
            lr = v.first().copied();
            continue;
        }
        let parsed = name
            .strip_prefix("state.")
            .and_then(|rest| rest.split_once('.'))
            .and_then(|(i, field)| i.parse::<usize>().ok().map(|i| (i, field)));
        let Some((index, field)) = parsed else {
            return Err(bad(
                op,
                "an entry name is neither `lr` nor `state.<param index>.<field>`; pass what this optimizer kind's state_dict() returned",
            ));
        };
        if index >= n_params {
            return Err(bad(
                op,
                "an entry names a parameter index past this optimizer's parameter list; build the optimizer over the same parameters, in the same order",
            ));
        }
        if !fields.contains(&field) {
            return Err(bad(
                op,
                "an entry names a state field this optimizer does not keep (e.g. SGD's momentum_buffer given to Adam); load a state dict from the same optimizer kind",
            ));
        }
        if out
            .iter()
            .any(|e: &Entry<'_>| e.index == index && e.field == field)
        {
            return Err(bad(op, "an entry is given twice; pass each name once"));
        }
        out.push(Entry {
            index,
            field,
            tensor: t,
        });
    }
    if lr.is_some_and(|v| !(v.is_finite() && v >= 0.0)) {
        return Err(bad(op, "the entry `lr` must be a finite number >= 0"));
    }
    Ok((lr, out))
}

/// A copy of `value` on `param`'s device, checked to have its shape and
/// dtype.
pub(crate) fn like_param(op: &'static str, value: &Tensor, param: &Tensor) -> Result<Tensor> {
    if value.shape() != param.shape() || value.dtype() != param.dtype() {
        return Err(bad(
            op,
            "a state tensor's shape or dtype differs from its parameter's; build the optimizer over the same parameters, in the same order",
        ));
    }
    crate::no_grad(|| value.to_device(&param.device())?.deep_clone())
}

/// A step count from a rank-0 (or one-element) integer or float tensor.
pub(crate) fn step_count(op: &'static str, t: &Tensor) -> Result<u64> {
    if t.numel() != 1 {
        return Err(bad(op, "a `step` entry must hold one number"));
    }
    let v = crate::no_grad(|| t.to_dtype(DType::F64)?.reshape(&[1])?.to_vec::<f64>())?;
    match v.first() {
        Some(&s) if s.is_finite() && s >= 1.0 && libm::trunc(s) == s && s < 9.0e15 => Ok(s as u64),
        _ => Err(bad(op, "a `step` entry must be a whole number >= 1")),
    }
}

fn bad(op: &'static str, reason: &'static str) -> Error {
    Error::InvalidArgument { op, reason }
}
