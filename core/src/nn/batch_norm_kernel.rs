//! Batch normalisation through the device's `batch_norm` family
//! (`kernels::batch_norm`): the passes over the activations are the
//! family's steps, the arithmetic on `[C]` vectors between them tensor
//! ops. `None` where the device lacks the family or the dtype is not f32
//! (the caller composes the op).
//!
//! NOTE [Batch norm in four passes]
//! A training step's batch norm reads its input four times and writes
//! twice: the forward is `sums(x, 0)` (the mean), `sums(x, mean)` (the
//! variance, corrected two-pass: `(Σd² - (Σd)²/M) / M`, as exact as the
//! composed two-pass form) and one `affine` (`y = a·x + d` with `a = w/σ`,
//! `d = b - mean·a`); the backward one `grad_sums(g, x, mean)` (`Σg`,
//! `Σg·(x - mean)`) and one `affine2` (`dx = a·g + b'·x + d'` with `b' =
//! -a·Σg(x - mean)/(M·σ²)`, `d' = -a·Σg/M - b'·mean`). The composed op
//! made about ten passes forward and twenty backward, each a kernel over
//! the whole activation.

use crate::autograd::{SavedTensor, no_grad, rules::Rule};
use crate::backend::{Family, Provenance};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use alloc::vec::Vec;

/// Whether `x`'s device runs the family on `x`'s dtype.
pub(super) fn runs(x: &Tensor, others: &[Option<&Tensor>]) -> bool {
    let prov = x.device().backend().provenance(Family::BatchNorm);
    matches!(prov, Provenance::Own | Provenance::Inherited(_))
        && x.dtype() == DType::F32
        && x.rank() >= 2
        && others.iter().flatten().all(|t| t.dtype() == DType::F32)
}

/// Positions per channel, as f64 (the caller checked it is above 1).
fn count(x: &Tensor) -> f64 {
    let c = x.shape()[1];
    (x.numel() / c.max(1)) as f64
}

/// A training forward: `(y, mean, 1/σ, biased variance)`, the vectors
/// `[C]`. Run under `no_grad`.
pub(super) fn train_forward(
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<(Tensor, Tensor, Tensor, Tensor)> {
    let c = x.shape()[1];
    let m = count(x);
    let zero = Tensor::zeros(&[c], DType::F32, &x.device())?;
    let s = Tensor::declared(Family::BatchNorm, 0, &[], &[x, &zero])?;
    let mean = s.select(0, 0)?.mul_scalar(1.0 / m)?;
    let s = Tensor::declared(Family::BatchNorm, 0, &[], &[x, &mean])?;
    let (d1, d2) = (s.select(0, 0)?, s.select(0, 1)?);
    let var = d2
        .sub(&d1.sqr()?.mul_scalar(1.0 / m)?)?
        .mul_scalar(1.0 / m)?
        .relu()?;
    let inv_std = var.add_scalar(eps)?.sqrt()?.recip()?;
    let y = apply(x, &mean, &inv_std, weight, bias)?;
    Ok((y, mean, inv_std, var))
}

/// `y = (x - mean)·inv_std·w + b` in one pass (evaluation, or the end of a
/// training forward).
pub(super) fn apply(
    x: &Tensor,
    mean: &Tensor,
    inv_std: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
) -> Result<Tensor> {
    let a = match weight {
        Some(w) => inv_std.mul(w)?,
        None => inv_std.clone(),
    };
    let shift = mean.mul(&a)?.neg()?;
    let d = match bias {
        Some(b) => b.add(&shift)?,
        None => shift,
    };
    let coef = Tensor::stack(&[&a, &d], 0)?;
    Tensor::declared(Family::BatchNorm, 2, &[], &[x, &coef])
}

/// The training backward from the saved input and statistics: `(dx, dw,
/// db)`. Run under `no_grad`.
pub(super) fn backward(
    g: &Tensor,
    x: &Tensor,
    mean: &Tensor,
    inv_std: &Tensor,
    weight: Option<&Tensor>,
) -> Result<(Tensor, Tensor, Tensor)> {
    let m = count(x);
    let s = Tensor::declared(Family::BatchNorm, 1, &[], &[g, x, mean])?;
    let (s1, s2) = (s.select(0, 0)?.contiguous()?, s.select(0, 1)?);
    let dw = s2.mul(inv_std)?;
    let a = match weight {
        Some(w) => inv_std.mul(w)?,
        None => inv_std.clone(),
    };
    let b = a.mul(&inv_std.sqr()?)?.mul(&s2)?.mul_scalar(-1.0 / m)?;
    let d = a.mul(&s1)?.mul_scalar(-1.0 / m)?.sub(&b.mul(mean)?)?;
    let coef = Tensor::stack(&[&a, &b, &d], 0)?;
    let dx = Tensor::declared(Family::BatchNorm, 3, &[], &[g, x, &coef])?;
    Ok((dx, dw, s1))
}

/// The running statistics' update: `new · m + old · (1 - m)` with the
/// batch's mean and unbiased variance (`var` is the biased one over
/// `count` values), `m` the momentum or, with `tracked`, `1 / (count + 1)`
/// of the layer's batch counter.
pub(super) fn update_running(
    rm: &Tensor,
    rv: &Tensor,
    mean: &Tensor,
    var: &Tensor,
    count: usize,
    momentum: f64,
    tracked: Option<&Tensor>,
) -> Result<()> {
    no_grad(|| -> Result<()> {
        let bessel = count as f64 / (count - 1) as f64;
        let blend = |new: Tensor, old: &Tensor| -> Result<Tensor> {
            match tracked {
                None => new
                    .mul_scalar(momentum)?
                    .add(&old.mul_scalar(1.0 - momentum)?),
                Some(n) => {
                    let f = n.to_dtype(old.dtype())?.add_scalar(1.0)?.recip()?;
                    new.mul(&f)?.add(&old.mul(&f.neg()?.add_scalar(1.0)?)?)
                }
            }
        };
        let new_m = blend(mean.clone(), rm)?;
        let new_v = blend(var.mul_scalar(bessel)?, rv)?;
        rm.copy_(&new_m)?;
        rv.copy_(&new_v)
    })
}

/// A batch norm's arguments besides the input and the mode.
pub(super) struct Args<'a> {
    pub(super) running: Option<(&'a Tensor, &'a Tensor)>,
    pub(super) weight: Option<&'a Tensor>,
    pub(super) bias: Option<&'a Tensor>,
    pub(super) momentum: f64,
    pub(super) tracked: Option<&'a Tensor>,
    pub(super) eps: f64,
    pub(super) count: usize,
}

/// Batch norm through the device's `batch_norm` family (NOTE [Batch norm
/// in four passes]), recorded as one node; `None` where it does not apply
/// (evaluation mode with a gradient to record: the composed path).
pub(super) fn by_family(input: &Tensor, training: bool, a: &Args<'_>) -> Result<Option<Tensor>> {
    let mut inputs: Vec<&Tensor> = alloc::vec![input];
    inputs.extend(a.weight);
    inputs.extend(a.bias);
    let needs = crate::autograd::needs_record(&inputs);
    if !training {
        let Some((rm, rv)) = a.running else {
            return Ok(None);
        };
        if needs {
            return Ok(None);
        }
        return no_grad(|| {
            let inv_std = rv.add_scalar(a.eps)?.sqrt()?.recip()?;
            apply(input, rm, &inv_std, a.weight, a.bias)
        })
        .map(Some);
    }
    let (y, mean, inv_std, var) = no_grad(|| train_forward(input, a.weight, a.bias, a.eps))?;
    if let Some((rm, rv)) = a.running {
        update_running(rm, rv, &mean, &var, a.count, a.momentum, a.tracked)?;
    }
    if needs {
        let mut saved = alloc::vec![
            SavedTensor::input(input),
            SavedTensor::input(&mean),
            SavedTensor::input(&inv_std),
        ];
        saved.extend(a.weight.map(SavedTensor::input));
        let flags = u32::from(a.weight.is_some()) | (u32::from(a.bias.is_some()) << 1);
        crate::autograd::record(&y, &inputs, || {
            Ok(Rule::Fused {
                name: "NativeBatchNormBackward",
                saved,
                param: a.eps,
                flags,
                formula: batch_norm_backward,
            })
        })?;
    }
    Ok(Some(y))
}

/// Batch norm's gradients (`Rule::Fused`; saved: x, the batch mean and
/// 1/σ, then the weight when it is an input): with `ĝ = g·w`, `∂x = (ĝ -
/// mean(ĝ) - x̂·mean(ĝ·x̂)) / σ`, `∂w = Σ g·x̂`, `∂b = Σ g` over every dim
/// but the channel one. Under `create_graph` the statistics are recomputed
/// from the saved input with tensor ops, so the result is differentiable
/// in x.
fn batch_norm_backward(
    g: &Tensor,
    saved: &[Tensor],
    eps: f64,
    flags: u32,
) -> Result<Vec<Option<Tensor>>> {
    let internal = || Error::Autograd {
        op: "batch_norm",
        reason: "internal: a saved tensor is missing; please report this",
    };
    let (has_w, has_b) = (flags & 1 != 0, flags & 2 != 0);
    let [x, mean, inv_std, rest @ ..] = saved else {
        return Err(internal());
    };
    let w = if has_w {
        Some(rest.first().ok_or_else(internal)?)
    } else {
        None
    };
    let (dx, dw, db) = if crate::autograd::is_grad_enabled() {
        let rank = x.rank();
        let dims: Vec<isize> = (0..rank).filter(|&d| d != 1).map(|d| d as isize).collect();
        let mean = x.mean(&dims, true)?;
        let centered = x.sub(&mean)?;
        let inv = centered
            .sqr()?
            .mean(&dims, true)?
            .add_scalar(eps)?
            .sqrt()?
            .recip()?;
        let xhat = centered.mul(&inv)?;
        let gh = match w {
            Some(w) => g.mul(&super::functional::per_channel(w, rank)?)?,
            None => g.clone(),
        };
        let m1 = gh.mean(&dims, true)?;
        let m2 = gh.mul(&xhat)?.mean(&dims, true)?;
        let dx = gh.sub(&m1)?.sub(&xhat.mul(&m2)?)?.mul(&inv)?;
        let dw = g.mul(&xhat)?.sum(&dims, false)?;
        (dx, dw, g.sum(&dims, false)?)
    } else {
        backward(g, x, mean, inv_std, w)?
    };
    let mut out = alloc::vec![Some(dx)];
    if has_w {
        out.push(Some(dw));
    }
    if has_b {
        out.push(Some(db));
    }
    Ok(out)
}
