//! Functional forms of the layers (PyTorch's `torch.nn.functional`): the
//! computation without the module that owns the parameters.
//!
//! Every layer of [`crate::nn`] that computes something calls one of these,
//! so a layer and its functional form cannot drift apart. Each function
//! validates its arguments first and names itself in its errors (the layers
//! pass their own name), so a refused call leaves every input unchanged.
//! Everything is a composition of differentiable [`Tensor`] ops: gradients
//! come from autograd.
//!
//! ```
//! use kael_core::nn::functional as F;
//! use kael_core::{Device, Tensor};
//! let dev = Device::cpu();
//! let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[1, 1, 4], &dev)?;
//! let w = Tensor::from_slice(&[1.0f32, -1.0], &[1, 1, 2], &dev)?;
//! let y = F::conv1d(&x, &w, None, 1, 0, 2, 1)?; // dilation 2
//! assert_eq!(y.to_vec::<f32>()?, vec![-2.0, -2.0]);
//! # Ok::<(), kael_core::Error>(())
//! ```

pub use super::loss::{Reduction, cross_entropy, mse_loss, nll_loss};

use super::pad::pad_dim;
use crate::autograd::SavedTensor;
use crate::autograd::no_grad;
use crate::autograd::rules::Rule;
use crate::dtype::DType;
use crate::error::{ErrShape, Error, Result};
use crate::rng::Rng;
use crate::shape::Dims;
use crate::tensor::Tensor;
use alloc::vec::Vec;

fn invalid(op: &'static str, reason: &'static str) -> Error {
    Error::InvalidArgument { op, reason }
}

/// Checks that an optional per-feature tensor is `[n]`, with `like`'s dtype
/// and device.
fn check_vec(op: &'static str, t: Option<&Tensor>, n: usize, like: &Tensor) -> Result<()> {
    if let Some(t) = t {
        if t.shape() != [n] {
            return Err(Error::ShapeMismatch {
                op,
                expected: ErrShape::of(&[n]),
                got: ErrShape::of(t.shape()),
            });
        }
        like.same_dtype(op, t)?;
        like.same_device(op, t)?;
    }
    Ok(())
}

fn check_eps(op: &'static str, eps: f64) -> Result<()> {
    if eps.is_nan() || eps < 0.0 || eps.is_infinite() {
        return Err(invalid(
            op,
            "eps must be a finite non-negative number (PyTorch uses 1e-5)",
        ));
    }
    Ok(())
}

// ------------------------------------------------------------------ linear

/// `y = x Wᵀ + b` over the last dim (PyTorch's `F.linear`).
///
/// `input` is `[*, in_features]`, `weight` `[out_features, in_features]`,
/// `bias` `[out_features]`; the result is `[*, out_features]`.
///
/// # Errors
/// [`Error::RankMismatch`] unless `weight` is rank 2 and `input` rank ≥ 1;
/// [`Error::ShapeMismatch`] for a wrong last dim or bias; dtype or device
/// mismatch.
///
/// ```
/// use kael_core::nn::functional::linear;
/// use kael_core::{Device, Tensor};
/// let dev = Device::cpu();
/// let w = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], &dev)?;
/// let x = Tensor::from_slice(&[1.0f32, 1.0], &[1, 2], &dev)?;
/// assert_eq!(linear(&x, &w, None)?.to_vec::<f32>()?, vec![3.0, 7.0]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn linear(input: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    linear_op("linear", input, weight, bias)
}

pub(super) fn linear_op(
    op: &'static str,
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
) -> Result<Tensor> {
    if weight.rank() != 2 {
        return Err(Error::RankMismatch {
            op,
            expected: "2 (weight is [out_features, in_features])",
            got: weight.rank(),
        });
    }
    let (out_f, in_f) = (weight.shape()[0], weight.shape()[1]);
    check_vec(op, bias, out_f, weight)?;
    let rank = input.rank();
    if rank == 0 {
        return Err(Error::RankMismatch {
            op,
            expected: "at least 1 ([*, in_features])",
            got: 0,
        });
    }
    if input.shape()[rank - 1] != in_f {
        let mut want = Dims::from_slice(input.shape())?;
        want[rank - 1] = in_f;
        return Err(Error::ShapeMismatch {
            op,
            expected: ErrShape::of(&want),
            got: ErrShape::of(input.shape()),
        });
    }
    input.same_dtype(op, weight)?;
    input.same_device(op, weight)?;
    let lead = &input.shape()[..rank - 1];
    let rows: usize = lead.iter().product();
    let x2 = if rank == 2 {
        input.clone()
    } else {
        input.reshape(&[rows, in_f])?
    };
    let mut y = x2.mm(&weight.t()?)?;
    if let Some(b) = bias {
        y = y.add(b)?;
    }
    if rank == 2 {
        return Ok(y);
    }
    let mut out = Dims::from_slice(lead)?;
    out.push(out_f)?;
    y.reshape(&out)
}

// ------------------------------------------------------------- layer norm

/// Layer normalisation over the trailing `normalized_shape` dims
/// (PyTorch's `F.layer_norm`): `(x - mean) / √(var + eps) · weight + bias`
/// with the biased variance.
///
/// # Errors
/// [`Error::InvalidArgument`] for an empty `normalized_shape` or a bad
/// `eps`; [`Error::ShapeMismatch`] when `input` does not end in
/// `normalized_shape` or `weight`/`bias` are not `normalized_shape`; dtype
/// or device mismatch.
///
/// ```
/// use kael_core::nn::functional::layer_norm;
/// use kael_core::{Device, Tensor};
/// let x = Tensor::from_slice(&[1.0f32, 3.0], &[1, 2], &Device::cpu())?;
/// assert_eq!(layer_norm(&x, &[2], None, None, 0.0)?.to_vec::<f32>()?, vec![-1.0, 1.0]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn layer_norm(
    input: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    layer_norm_op("layer_norm", input, normalized_shape, weight, bias, eps)
}

pub(super) fn layer_norm_op(
    op: &'static str,
    input: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    super::layer_norm::check_norm_args(op, normalized_shape, eps)?;
    for t in [weight, bias].into_iter().flatten() {
        if t.shape() != normalized_shape {
            return Err(Error::ShapeMismatch {
                op,
                expected: ErrShape::of(normalized_shape),
                got: ErrShape::of(t.shape()),
            });
        }
        input.same_dtype(op, t)?;
        input.same_device(op, t)?;
    }
    let dims = super::layer_norm::trailing_dims(op, input, normalized_shape)?;
    let dims = super::layer_norm::signed(&dims);
    let mut inputs: Vec<&Tensor> = alloc::vec![input];
    inputs.extend(weight);
    inputs.extend(bias);
    let n: usize = normalized_shape.iter().product();
    if !crate::autograd::needs_record(&inputs) {
        if let Some((y, _)) = super::layer_norm_kernel::forward(input, n, weight, bias, eps)? {
            return Ok(y);
        }
        return Ok(layer_norm_forward(input, &dims, weight, bias, eps)?.0);
    }
    // NOTE [Layer norm as one node]
    // Recorded as one node (`layer_norm_backward`). Where the device has
    // the fused kernels (NOTE [Fused families]) the forward is one kernel
    // that also returns each row's mean and 1/σ, the node saves those
    // (FUSED flag), and the backward is one kernel too. Otherwise the
    // forward is composed, and the node saves the normalised input and 1/σ:
    // 11 passes over the input in backward where the composition's own
    // graph took about twice as many (and ten nodes).
    let fused = no_grad(|| super::layer_norm_kernel::forward(input, n, weight, bias, eps))?;
    let (y, mut saved, fused_flag) = match fused {
        Some((y, stats)) => (
            y,
            alloc::vec![SavedTensor::input(input), SavedTensor::input(&stats)],
            FUSED,
        ),
        None => {
            let (y, xhat, inv_std) =
                no_grad(|| layer_norm_forward(input, &dims, weight, bias, eps))?;
            let saved = alloc::vec![
                SavedTensor::input(input),
                SavedTensor::input(&xhat),
                SavedTensor::input(&inv_std),
            ];
            (y, saved, 0)
        }
    };
    saved.extend(weight.map(SavedTensor::input));
    let flags = u32::from(weight.is_some())
        | (u32::from(bias.is_some()) << 1)
        | fused_flag
        | ((dims.len() as u32) << 8);
    crate::autograd::record(&y, &inputs, || {
        Ok(Rule::Fused {
            name: "NativeLayerNormBackward",
            saved,
            param: eps,
            flags,
            formula: layer_norm_backward,
        })
    })?;
    Ok(y)
}

/// Layer norm's flag: the node saved the fused kernel's stats.
const FUSED: u32 = 1 << 4;

/// `(y, x̂, 1/σ)` of layer norm over `dims` (the trailing ones).
fn layer_norm_forward(
    input: &Tensor,
    dims: &[isize],
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<(Tensor, Tensor, Tensor)> {
    let (xhat, inv_std) = normalise(input, dims, eps)?;
    let mut y = xhat.clone();
    if let Some(w) = weight {
        y = y.mul(w)?;
    }
    if let Some(b) = bias {
        y = y.add(b)?;
    }
    Ok((y, xhat, inv_std))
}

/// `((x - mean) / σ, 1/σ)` over `dims`, σ² the biased variance plus `eps`.
fn normalise(x: &Tensor, dims: &[isize], eps: f64) -> Result<(Tensor, Tensor)> {
    let mean = x.mean(dims, true)?;
    let centered = x.sub(&mean)?;
    let var = centered.sqr()?.mean(dims, true)?;
    let inv_std = var.add_scalar(eps)?.sqrt()?.recip()?;
    Ok((centered.mul(&inv_std)?, inv_std))
}

/// Layer norm's gradients (`Rule::Fused`; saved: x, x̂, 1/σ, then the
/// weight when it is an input): with `ĝ = g·w`,
/// `∂x = (ĝ - mean(ĝ) - x̂·mean(ĝ·x̂)) / σ`, `∂w = Σ g·x̂`, `∂b = Σ g` over
/// the leading dims. Under `create_graph` x̂ and 1/σ are recomputed from
/// the saved input with tensor ops, so the result is differentiable in x.
fn layer_norm_backward(
    g: &Tensor,
    saved: &[Tensor],
    eps: f64,
    flags: u32,
) -> Result<Vec<Option<Tensor>>> {
    let internal = || Error::Autograd {
        op: "layer_norm",
        reason: "internal: a saved tensor is missing; please report this",
    };
    let (has_w, has_b, k) = (flags & 1 != 0, flags & 2 != 0, (flags >> 8) as usize);
    let fused = flags & FUSED != 0;
    let [x, rest @ ..] = saved else {
        return Err(internal());
    };
    let rank = x.rank();
    let dims: Vec<isize> = (1..=k).map(|i| -(i as isize)).collect();
    let lead: Vec<isize> = (0..rank.saturating_sub(k)).map(|d| d as isize).collect();
    let (norm_saved, rest) = rest.split_at(if fused { 1 } else { 2 }.min(rest.len()));
    let w = if has_w {
        Some(rest.first().ok_or_else(internal)?)
    } else {
        None
    };
    let grad_mode = crate::autograd::is_grad_enabled();
    let (xhat, inv_std) = match norm_saved {
        _ if grad_mode => normalise(x, &dims, eps)?,
        [stats] => {
            let shape = &x.shape()[rank.saturating_sub(k)..];
            if let Some((dx, dw, db)) = super::layer_norm_kernel::backward(g, x, stats, w, shape)? {
                let mut out = alloc::vec![Some(dx)];
                if has_w {
                    out.push(Some(dw));
                }
                if has_b {
                    out.push(Some(db));
                }
                return Ok(out);
            }
            from_stats(x, stats, k)?
        }
        [xhat, inv_std] => (xhat.clone(), inv_std.clone()),
        _ => return Err(internal()),
    };
    let gh = match w {
        Some(w) => g.mul(w)?,
        None => g.clone(),
    };
    let m1 = gh.mean(&dims, true)?;
    let m2 = gh.mul(&xhat)?.mean(&dims, true)?;
    let gx = gh.sub(&m1)?.sub(&xhat.mul(&m2)?)?.mul(&inv_std)?;
    // Σ over the leading dims (none: the tensor itself).
    let lead_sum = |t: Tensor| -> Result<Tensor> {
        if lead.is_empty() {
            Ok(t)
        } else {
            t.sum(&lead, false)
        }
    };
    let mut out = alloc::vec![Some(gx)];
    if has_w {
        out.push(Some(lead_sum(g.mul(&xhat)?)?));
    }
    if has_b {
        out.push(Some(lead_sum(g.clone())?));
    }
    Ok(out)
}

/// `(x̂, 1/σ)` from the fused kernel's `stats` (`[rows, 2]` of mean and
/// 1/σ), shaped to broadcast over `x`'s last `k` dims.
fn from_stats(x: &Tensor, stats: &Tensor, k: usize) -> Result<(Tensor, Tensor)> {
    let rank = x.rank();
    let mut shape = Dims::from_slice(&x.shape()[..rank.saturating_sub(k)])?;
    for _ in 0..k {
        shape.push(1)?;
    }
    let mean = stats.select(1, 0)?.reshape(&shape[..])?;
    let inv_std = stats.select(1, 1)?.reshape(&shape[..])?;
    Ok((x.sub(&mean)?.mul(&inv_std)?, inv_std))
}

// -------------------------------------------------------------- batch norm

/// `[C, 1, …, 1]` (`rank - 1` dims): a per-channel vector shaped to
/// broadcast over `[N, C, *]`.
pub(super) fn per_channel(t: &Tensor, rank: usize) -> Result<Tensor> {
    let mut shape = Dims::from_slice(t.shape())?;
    for _ in 2..rank {
        shape.push(1)?;
    }
    t.reshape(&shape)
}

/// Batch normalisation over `[N, C, *]` (PyTorch's `F.batch_norm`).
///
/// In training mode the batch's mean and biased variance over every dim but
/// `C` normalise the input, and `running_mean`/`running_var` (when given)
/// are updated in place: `running = (1 - momentum) · running + momentum ·
/// batch`, with the *unbiased* variance for `running_var`, as PyTorch. In
/// evaluation mode (`training == false`) the running statistics normalise
/// and are not changed. `weight`/`bias` are `[C]`.
///
/// # Errors
/// [`Error::RankMismatch`] for rank < 2; [`Error::ShapeMismatch`] for a
/// statistic, weight or bias that is not `[C]`; [`Error::InvalidArgument`]
/// for a bad `eps` or `momentum`, one running statistic without the other,
/// evaluation mode without running statistics, or a training batch with a
/// single value per channel (its unbiased variance is undefined); non-float
/// dtypes; dtype or device mismatch. Nothing is updated on an error.
///
/// ```
/// use kael_core::nn::functional::batch_norm;
/// use kael_core::{DType, Device, Tensor};
/// let dev = Device::cpu();
/// let x = Tensor::from_slice(&[1.0f32, 10.0, 3.0, 30.0], &[2, 2], &dev)?;
/// let (rm, rv) = (Tensor::zeros(&[2], DType::F32, &dev)?, Tensor::ones(&[2], DType::F32, &dev)?);
/// let y = batch_norm(&x, Some(&rm), Some(&rv), None, None, true, 0.1, 0.0)?;
/// assert_eq!(y.to_vec::<f32>()?, vec![-1.0, -1.0, 1.0, 1.0]);
/// assert_eq!(rm.to_vec::<f32>()?, vec![0.2, 2.0]);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn batch_norm(
    input: &Tensor,
    running_mean: Option<&Tensor>,
    running_var: Option<&Tensor>,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    training: bool,
    momentum: f64,
    eps: f64,
) -> Result<Tensor> {
    batch_norm_op(
        "batch_norm",
        input,
        running_mean,
        running_var,
        weight,
        bias,
        training,
        momentum,
        None,
        eps,
    )
}

/// [`batch_norm`]; with `count` (a layer's `num_batches_tracked` under
/// `momentum: None`), the running statistics are a cumulative average:
/// the factor is `1 / (count + 1)`, computed on the device (so a plan
/// replays it) in place of `momentum`.
#[allow(clippy::too_many_arguments)]
pub(super) fn batch_norm_op(
    op: &'static str,
    input: &Tensor,
    running_mean: Option<&Tensor>,
    running_var: Option<&Tensor>,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    training: bool,
    momentum: f64,
    tracked: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    let rank = input.rank();
    if rank < 2 {
        return Err(Error::RankMismatch {
            op,
            expected: "at least 2 ([N, C, *])",
            got: rank,
        });
    }
    input.dtype().require_float(op)?;
    check_eps(op, eps)?;
    if !(0.0..=1.0).contains(&momentum) {
        return Err(invalid(
            op,
            "momentum must be in [0, 1] (PyTorch's default is 0.1)",
        ));
    }
    let c = input.shape()[1];
    for t in [running_mean, running_var, weight, bias] {
        check_vec(op, t, c, input)?;
    }
    let running = match (running_mean, running_var) {
        (Some(m), Some(v)) => Some((m, v)),
        (None, None) => None,
        _ => {
            return Err(invalid(
                op,
                "running_mean and running_var must be given together; pass both or neither",
            ));
        }
    };
    let dims: Vec<isize> = (0..rank).filter(|&d| d != 1).map(|d| d as isize).collect();
    let count = input.numel().checked_div(c).unwrap_or(0);
    if training && count < 2 {
        return Err(invalid(
            op,
            "training needs more than one value per channel (batch · spatial size ≥ 2); use a larger batch or evaluation mode",
        ));
    }
    if !training && running.is_none() {
        return Err(invalid(
            op,
            "evaluation mode normalises with running_mean and running_var; pass them, or use training mode",
        ));
    }
    let by_family =
        super::batch_norm_kernel::runs(input, &[running_mean, running_var, weight, bias]);
    if by_family {
        let bn = super::batch_norm_kernel::Args {
            running,
            weight,
            bias,
            momentum,
            tracked,
            eps,
            count,
        };
        if let Some(y) = super::batch_norm_kernel::by_family(input, training, &bn)? {
            return Ok(y);
        }
    }
    let (centered, var) = match running {
        Some((rm, rv)) if !training => {
            (input.sub(&per_channel(rm, rank)?)?, per_channel(rv, rank)?)
        }
        _ => {
            let mean = input.mean(&dims, true)?;
            let centered = input.sub(&mean)?;
            let var = centered.sqr()?.mean(&dims, true)?;
            if let Some((rm, rv)) = running {
                let (m, v) = (mean.reshape(&[c])?, var.reshape(&[c])?);
                super::batch_norm_kernel::update_running(rm, rv, &m, &v, count, momentum, tracked)?;
            }
            (centered, var)
        }
    };
    let inv_std = var.add_scalar(eps)?.sqrt()?.recip()?;
    let mut y = centered.mul(&inv_std)?;
    if let Some(w) = weight {
        y = y.mul(&per_channel(w, rank)?)?;
    }
    if let Some(b) = bias {
        y = y.add(&per_channel(b, rank)?)?;
    }
    Ok(y)
}

// -------------------------------------------------------------- group norm

/// Group normalisation (PyTorch's `F.group_norm`): the `C` channels of
/// `[N, C, *]` are split into `num_groups` groups, each normalised over its
/// channels and spatial positions with its mean and biased variance, then
/// scaled and shifted per channel by `weight`/`bias` (`[C]`).
///
/// # Errors
/// [`Error::RankMismatch`] for rank < 2; [`Error::InvalidArgument`] unless
/// `num_groups > 0` divides `C`, or for a bad `eps`;
/// [`Error::ShapeMismatch`] for a weight or bias that is not `[C]`;
/// non-float dtypes; dtype or device mismatch.
///
/// ```
/// use kael_core::nn::functional::group_norm;
/// use kael_core::{Device, Tensor};
/// let x = Tensor::from_slice(&[1.0f32, 3.0, 0.0, 4.0], &[1, 2, 2], &Device::cpu())?;
/// let y = group_norm(&x, 2, None, None, 0.0)?;
/// assert_eq!(y.to_vec::<f32>()?, vec![-1.0, 1.0, -1.0, 1.0]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn group_norm(
    input: &Tensor,
    num_groups: usize,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    group_norm_op("group_norm", input, num_groups, weight, bias, eps)
}

pub(super) fn group_norm_op(
    op: &'static str,
    input: &Tensor,
    num_groups: usize,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    let rank = input.rank();
    if rank < 2 {
        return Err(Error::RankMismatch {
            op,
            expected: "at least 2 ([N, C, *])",
            got: rank,
        });
    }
    input.dtype().require_float(op)?;
    check_eps(op, eps)?;
    let (n, c) = (input.shape()[0], input.shape()[1]);
    if num_groups == 0 || c % num_groups != 0 {
        return Err(invalid(
            op,
            "num_groups must be positive and divide the channel count C (input dim 1)",
        ));
    }
    check_vec(op, weight, c, input)?;
    check_vec(op, bias, c, input)?;
    let per_group = (c / num_groups) * input.shape()[2..].iter().product::<usize>();
    let xg = input.reshape(&[n, num_groups, per_group])?;
    let mean = xg.mean_dim(-1, true)?;
    let centered = xg.sub(&mean)?;
    let var = centered.sqr()?.mean_dim(-1, true)?;
    let inv_std = var.add_scalar(eps)?.sqrt()?.recip()?;
    let mut y = centered.mul(&inv_std)?.reshape(input.shape())?;
    if let Some(w) = weight {
        y = y.mul(&per_channel(w, rank)?)?;
    }
    if let Some(b) = bias {
        y = y.add(&per_channel(b, rank)?)?;
    }
    Ok(y)
}

// ------------------------------------------------------------- convolution

/// Adds a batch dim to an unbatched input (`rank == batched - 1`) and checks
/// the rank and channel count; returns the batched input and whether to
/// squeeze the result.
pub(super) fn batched(
    op: &'static str,
    x: &Tensor,
    rank: usize,
    expected: &'static str,
    channels: usize,
) -> Result<(Tensor, bool)> {
    let (x, unbatched) = if x.rank() + 1 == rank {
        (x.unsqueeze(0)?, true)
    } else if x.rank() == rank {
        (x.clone(), false)
    } else {
        return Err(Error::RankMismatch {
            op,
            expected,
            got: x.rank(),
        });
    };
    if x.shape()[1] != channels {
        let mut want = Dims::from_slice(x.shape())?;
        want[1] = channels;
        return Err(Error::ShapeMismatch {
            op,
            expected: ErrShape::of(&want),
            got: ErrShape::of(x.shape()),
        });
    }
    Ok((x, unbatched))
}

/// Output length of a window of `k` with `stride` over `n` padded elements.
pub(super) fn out_len(op: &'static str, n: usize, k: usize, stride: usize) -> Result<usize> {
    if n < k {
        return Err(invalid(
            op,
            "the (padded) input is smaller than the (dilated) kernel; use a larger input, more padding or a smaller kernel",
        ));
    }
    Ok((n - k) / stride + 1)
}

fn overflow(op: &'static str) -> Error {
    invalid(
        op,
        "a size computed from the arguments overflows usize; use smaller sizes",
    )
}

/// The extent of a kernel of `k` taps `dilation` apart: `(k - 1)·d + 1`.
fn dilated(op: &'static str, k: usize, dilation: usize) -> Result<usize> {
    k.saturating_sub(1)
        .checked_mul(dilation)
        .and_then(|e| e.checked_add(1))
        .ok_or(overflow(op))
}

/// Validated geometry of a 1-d or 2-d (transposed) convolution, as 2-d.
struct Geom {
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
}

/// Checks what every convolution shares: weight rank, positive sizes,
/// stride, dilation and groups, bias, dtypes and devices. Returns the
/// geometry widened to 2-d (a 1-d convolution is a 2-d one of height 1).
#[allow(clippy::too_many_arguments)]
fn check_conv(
    op: &'static str,
    input: &Tensor,
    weight: &Tensor,
    weight_rank_msg: &'static str,
    stride: &[usize],
    padding: &[usize],
    dilation: &[usize],
    groups: usize,
) -> Result<Geom> {
    let spatial = stride.len();
    if weight.rank() != spatial + 2 {
        return Err(Error::RankMismatch {
            op,
            expected: weight_rank_msg,
            got: weight.rank(),
        });
    }
    if weight.shape().contains(&0) {
        return Err(invalid(
            op,
            "weight sizes (channels and kernel) must be positive; pass a weight without empty dims",
        ));
    }
    if stride.contains(&0) {
        return Err(invalid(
            op,
            "stride must be positive; pass 1 or more (1 visits every position)",
        ));
    }
    if dilation.contains(&0) {
        return Err(invalid(
            op,
            "dilation must be positive; pass 1 for an undilated kernel",
        ));
    }
    if groups == 0 {
        return Err(invalid(
            op,
            "groups must be positive; pass 1 for an ordinary convolution",
        ));
    }
    input.dtype().require_float(op)?;
    input.same_dtype(op, weight)?;
    input.same_device(op, weight)?;
    // The padded sizes must fit (rank checked by the caller after this, so
    // read the trailing dims of whatever rank came).
    let r = input.rank();
    for (i, &p) in padding.iter().enumerate() {
        let n = (r + i).checked_sub(spatial).map_or(0, |d| input.shape()[d]);
        p.checked_mul(2)
            .and_then(|p2| n.checked_add(p2))
            .ok_or(overflow(op))?;
    }
    let widen = |a: &[usize], fill: usize| -> [usize; 2] {
        if a.len() == 1 {
            [fill, a[0]]
        } else {
            [a[0], a[1]]
        }
    };
    Ok(Geom {
        stride: widen(stride, 1),
        padding: widen(padding, 0),
        dilation: widen(dilation, 1),
    })
}

/// `[N, C, H, W]` (batched, checked) convolved with `[O, C/g, kh, kw]`.
fn conv2d_core(
    op: &'static str,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    g: &Geom,
    groups: usize,
) -> Result<Tensor> {
    let ws = w.shape();
    let (o, cg, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
    let c = x.shape()[1];
    let eh = dilated(op, kh, g.dilation[0])?;
    let ew = dilated(op, kw, g.dilation[1])?;
    if groups == c && o == c && cg == 1 {
        // A depthwise convolution: the device's direct kernel, if any.
        if let Some(y) = super::im2col::depthwise(op, x, w, g.stride, g.padding, g.dilation)? {
            return match b {
                Some(b) => y.add(&b.reshape(&[o, 1, 1])?),
                None => Ok(y),
            };
        }
    }
    if [kh, kw] == [1, 1] && g.stride == [1, 1] && g.padding == [0, 0] && groups == 1 {
        // A pointwise convolution is one product per image on NCHW as it
        // lies: `w [O, C] @ x[n] [C, H·W]`, no windows, no permutes.
        let (n, h, wd) = (x.shape()[0], x.shape()[2], x.shape()[3]);
        let y = w
            .reshape(&[o, c])?
            .matmul(&x.reshape(&[n, c, h * wd])?)?
            .reshape(&[n, o, h, wd])?;
        return match b {
            Some(b) => y.add(&b.reshape(&[o, 1, 1])?),
            None => Ok(y),
        };
    }
    if let Some(y) = super::im2col::conv(op, x, w, g.stride, g.padding, g.dilation, groups)? {
        return match b {
            Some(b) => y.add(&b.reshape(&[o, 1, 1])?),
            None => Ok(y),
        };
    }
    // `[N, OH, OW, C, KH, KW]`: the device's im2col kernel, or views.
    let rows = super::im2col::windows(op, x, [kh, kw], g.stride, g.padding, g.dilation, 0.0)?;
    let win = match rows {
        Some(rows) => rows,
        None => {
            let x = pad_dim(x, 2, g.padding[0], g.padding[0], 0.0)?;
            let x = pad_dim(&x, 3, g.padding[1], g.padding[1], 0.0)?;
            let mut win = x.unfold(2, eh, g.stride[0])?.unfold(3, ew, g.stride[1])?;
            if g.dilation[0] > 1 {
                win = win.slice(4, 0, eh as isize, g.dilation[0])?;
            }
            if g.dilation[1] > 1 {
                win = win.slice(5, 0, ew as isize, g.dilation[1])?;
            }
            win.permute(&[0, 2, 3, 1, 4, 5])?
        }
    };
    let (n, oh, ow) = (win.shape()[0], win.shape()[1], win.shape()[2]);
    // Every product below is at most the element count of an existing
    // tensor (the windows or the weight), so none overflows.
    let m = n * oh * ow;
    let k = cg * kh * kw;
    let y = if groups == 1 {
        win.reshape(&[m, c * kh * kw])?
            .mm(&w.reshape(&[o, k])?.t()?)?
    } else {
        // [M, G, C/G · k] -> [G, M, C/G · k] @ [G, C/G · k, O/G] -> [M, O]
        let cols = win.reshape(&[m, groups, k])?.transpose(0, 1)?;
        let wg = w.reshape(&[groups, o / groups, k])?.transpose(1, 2)?;
        cols.matmul(&wg)?.transpose(0, 1)?.reshape(&[m, o])?
    };
    let y = match b {
        Some(b) => y.add(b)?,
        None => y,
    };
    y.reshape(&[n, oh, ow, o])?
        .permute(&[0, 3, 1, 2])?
        .contiguous()
}

/// A 1-d or 2-d convolution (`stride.len()` spatial dims).
#[allow(clippy::too_many_arguments)]
pub(super) fn conv_op(
    op: &'static str,
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stride: &[usize],
    padding: &[usize],
    dilation: &[usize],
    groups: usize,
) -> Result<Tensor> {
    let one_d = stride.len() == 1;
    let (wmsg, xmsg) = if one_d {
        (
            "3 (weight is [out_channels, in_channels / groups, k])",
            "3 ([N, C, L]) or 2 ([C, L])",
        )
    } else {
        (
            "4 (weight is [out_channels, in_channels / groups, kh, kw])",
            "4 ([N, C, H, W]) or 3 ([C, H, W])",
        )
    };
    let geom = check_conv(op, input, weight, wmsg, stride, padding, dilation, groups)?;
    let o = weight.shape()[0];
    if o % groups != 0 {
        return Err(invalid(
            op,
            "out_channels (weight dim 0) must be divisible by groups; change groups or the channel count",
        ));
    }
    let c = weight.shape()[1].checked_mul(groups).ok_or(overflow(op))?;
    check_vec(op, bias, o, weight)?;
    let (x, unbatched) = batched(op, input, stride.len() + 2, xmsg, c)?;
    let y = if one_d {
        let y = conv2d_core(
            op,
            &x.unsqueeze(2)?,
            &weight.unsqueeze(2)?,
            bias,
            &geom,
            groups,
        )?;
        y.squeeze_dim(2)?
    } else {
        conv2d_core(op, &x, weight, bias, &geom, groups)?
    };
    if unbatched { y.squeeze_dim(0) } else { Ok(y) }
}

/// 1-d convolution (PyTorch's `F.conv1d`, zero padding): `input`
/// `[N, C_in, L]` or `[C_in, L]`, `weight` `[C_out, C_in / groups, k]`,
/// `bias` `[C_out]`; the result is `[N, C_out, L_out]` with
/// `L_out = (L + 2·padding - dilation·(k - 1) - 1) / stride + 1`.
/// `groups == C_in` is a depthwise convolution.
///
/// # Errors
/// [`Error::RankMismatch`]; [`Error::ShapeMismatch`] for a channel count
/// other than `weight.shape()[1] · groups` or a wrong bias;
/// [`Error::InvalidArgument`] for zero stride, dilation or groups,
/// `C_out` not divisible by `groups`, or an input smaller than the dilated
/// kernel; dtype or device mismatch.
///
/// ```
/// use kael_core::nn::functional::conv1d;
/// use kael_core::{Device, Tensor};
/// let dev = Device::cpu();
/// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 10.0, 20.0, 30.0], &[1, 2, 3], &dev)?;
/// let w = Tensor::from_slice(&[1.0f32, 1.0, 1.0, -1.0], &[2, 1, 2], &dev)?; // depthwise
/// let y = conv1d(&x, &w, None, 1, 0, 1, 2)?;
/// assert_eq!(y.to_vec::<f32>()?, vec![3.0, 5.0, -10.0, -10.0]);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn conv1d(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stride: usize,
    padding: usize,
    dilation: usize,
    groups: usize,
) -> Result<Tensor> {
    conv_op(
        "conv1d",
        input,
        weight,
        bias,
        &[stride],
        &[padding],
        &[dilation],
        groups,
    )
}

/// 2-d convolution (PyTorch's `F.conv2d`, zero padding): `input`
/// `[N, C_in, H, W]` or `[C_in, H, W]`, `weight`
/// `[C_out, C_in / groups, kh, kw]`, `bias` `[C_out]`; sizes are
/// (height, width) pairs. `H_out = (H + 2·pad - dil·(kh - 1) - 1) / stride + 1`
/// (likewise W).
///
/// # Errors
/// As [`conv1d`].
///
/// ```
/// use kael_core::nn::functional::conv2d;
/// use kael_core::{DType, Device, Tensor};
/// let dev = Device::cpu();
/// let x = Tensor::ones(&[1, 4, 5, 5], DType::F32, &dev)?;
/// let w = Tensor::ones(&[4, 1, 3, 3], DType::F32, &dev)?;
/// let y = conv2d(&x, &w, None, [1, 1], [0, 0], [2, 2], 4)?;
/// assert_eq!(y.shape(), &[1, 4, 1, 1]);
/// assert_eq!(y.to_vec::<f32>()?, vec![9.0; 4]);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn conv2d(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    groups: usize,
) -> Result<Tensor> {
    conv_op(
        "conv2d", input, weight, bias, &stride, &padding, &dilation, groups,
    )
}

/// `x` with `s - 1` zeros inserted between neighbours along `dim`.
fn zero_insert(op: &'static str, x: &Tensor, dim: usize, s: usize) -> Result<Tensor> {
    let n = x.shape()[dim];
    if s == 1 || n == 0 {
        return Ok(x.clone());
    }
    let xu = x.unsqueeze(dim as isize + 1)?;
    let mut zs = Dims::from_slice(xu.shape())?;
    zs[dim + 1] = s - 1;
    let z = Tensor::zeros(&zs, x.dtype(), &x.device())?;
    let both = Tensor::cat(&[&xu, &z], dim as isize + 1)?;
    let mut merged = Dims::from_slice(x.shape())?;
    merged[dim] = n.checked_mul(s).ok_or(overflow(op))?;
    both.reshape(&merged)?
        .narrow(dim as isize, 0, (n - 1) * s + 1)
}

/// `x` padded with zeros (positive amounts) or cropped (negative) along
/// `dim`. Pads first, so a crop larger than `x` on one side that the other
/// side's padding makes up still works; an empty result is an error.
fn pad_or_crop(
    op: &'static str,
    x: &Tensor,
    dim: usize,
    before: isize,
    after: isize,
) -> Result<Tensor> {
    let x = pad_dim(
        x,
        dim as isize,
        before.max(0).unsigned_abs(),
        after.max(0).unsigned_abs(),
        0.0,
    )?;
    let (cut_b, cut_a) = (before.min(0).unsigned_abs(), after.min(0).unsigned_abs());
    let len = x.shape()[dim]
        .checked_sub(cut_b)
        .and_then(|l| l.checked_sub(cut_a))
        .filter(|&l| l > 0)
        .ok_or(invalid(
            op,
            "the padding leaves no output; use less padding or a larger input or kernel",
        ))?;
    if cut_b == 0 && cut_a == 0 {
        return Ok(x);
    }
    x.narrow(dim as isize, cut_b, len)
}

/// A 1-d or 2-d transposed convolution (`stride.len()` spatial dims).
#[allow(clippy::too_many_arguments)]
pub(super) fn conv_transpose_op(
    op: &'static str,
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stride: &[usize],
    padding: &[usize],
    output_padding: &[usize],
    groups: usize,
    dilation: &[usize],
) -> Result<Tensor> {
    let spatial = stride.len();
    let (wmsg, xmsg) = if spatial == 1 {
        (
            "3 (weight is [in_channels, out_channels / groups, k])",
            "3 ([N, C, L]) or 2 ([C, L])",
        )
    } else {
        (
            "4 (weight is [in_channels, out_channels / groups, kh, kw])",
            "4 ([N, C, H, W]) or 3 ([C, H, W])",
        )
    };
    let geom = check_conv(op, input, weight, wmsg, stride, padding, dilation, groups)?;
    let cin = weight.shape()[0];
    if cin % groups != 0 {
        return Err(invalid(
            op,
            "in_channels (weight dim 0) must be divisible by groups; change groups or the channel count",
        ));
    }
    let o = weight.shape()[1].checked_mul(groups).ok_or(overflow(op))?;
    check_vec(op, bias, o, weight)?;
    for i in 0..spatial {
        if output_padding[i] >= stride[i].max(dilation[i]) {
            return Err(invalid(
                op,
                "output_padding must be smaller than stride or dilation (as in PyTorch); lower it",
            ));
        }
    }
    let (x, unbatched) = batched(op, input, spatial + 2, xmsg, cin)?;
    let (x, w) = if spatial == 1 {
        (x.unsqueeze(2)?, weight.unsqueeze(2)?)
    } else {
        (x, weight.clone())
    };
    let out_padding = if spatial == 1 {
        [0, output_padding[0]]
    } else {
        [output_padding[0], output_padding[1]]
    };
    // As a convolution: zeros between the input's elements (stride),
    // padded by `dil·(k-1) - pad` (cropped where negative), convolved with
    // the weight flipped and with in/out channels swapped per group.
    let mut x = x;
    #[allow(clippy::needless_range_loop)] // i indexes four arrays
    for i in 0..2 {
        let dim = i + 2;
        let n = x.shape()[dim];
        let k = w.shape()[dim];
        if n == 0 {
            return Err(invalid(
                op,
                "the input's spatial sizes must be positive; pass a non-empty input",
            ));
        }
        let reach = dilated(op, k, geom.dilation[i])? - 1;
        // (n-1)·s + reach + output_padding + 1 - 2·padding must be positive.
        let full = (n - 1)
            .checked_mul(geom.stride[i])
            .and_then(|v| v.checked_add(reach))
            .and_then(|v| v.checked_add(out_padding[i] + 1))
            .ok_or(overflow(op))?;
        let pad2 = geom.padding[i].checked_mul(2).ok_or(overflow(op))?;
        if full <= pad2 {
            return Err(invalid(
                op,
                "the padding leaves no output; use less padding or a larger input or kernel",
            ));
        }
        let before = isize::try_from(reach).map_err(|_| overflow(op))?
            - isize::try_from(geom.padding[i]).map_err(|_| overflow(op))?;
        let after = before + out_padding[i] as isize;
        x = zero_insert(op, &x, dim, geom.stride[i])?;
        x = pad_or_crop(op, &x, dim, before, after)?;
    }
    let ws = w.shape();
    let (cg, og, kh, kw) = (cin / groups, ws[1], ws[2], ws[3]);
    let w = w
        .reshape(&[groups, cg, og, kh, kw])?
        .transpose(1, 2)?
        .reshape(&[o, cg, kh, kw])?
        .flip(&[2, 3])?;
    let unit = Geom {
        stride: [1, 1],
        padding: [0, 0],
        dilation: geom.dilation,
    };
    let y = conv2d_core(op, &x, &w, bias, &unit, groups)?;
    let y = if spatial == 1 { y.squeeze_dim(2)? } else { y };
    if unbatched { y.squeeze_dim(0) } else { Ok(y) }
}

/// 1-d transposed convolution (PyTorch's `F.conv_transpose1d`): `input`
/// `[N, C_in, L]` or `[C_in, L]`, `weight` `[C_in, C_out / groups, k]`,
/// `bias` `[C_out]`; the result is `[N, C_out, L_out]` with
/// `L_out = (L - 1)·stride - 2·padding + dilation·(k - 1) + output_padding + 1`.
/// It is the gradient of [`conv1d`] with respect to its input.
///
/// # Errors
/// [`Error::RankMismatch`]; [`Error::ShapeMismatch`] for a channel count
/// other than `weight.shape()[0]` or a wrong bias;
/// [`Error::InvalidArgument`] for zero stride, dilation or groups, `C_in`
/// not divisible by `groups`, `output_padding` not below stride or
/// dilation, or padding that leaves no output; dtype or device mismatch.
///
/// ```
/// use kael_core::nn::functional::conv_transpose1d;
/// use kael_core::{Device, Tensor};
/// let dev = Device::cpu();
/// let x = Tensor::from_slice(&[1.0f32, 2.0], &[1, 1, 2], &dev)?;
/// let w = Tensor::from_slice(&[1.0f32, 10.0, 100.0], &[1, 1, 3], &dev)?;
/// let y = conv_transpose1d(&x, &w, None, 2, 0, 0, 1, 1)?;
/// assert_eq!(y.to_vec::<f32>()?, vec![1.0, 10.0, 102.0, 20.0, 200.0]);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn conv_transpose1d(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stride: usize,
    padding: usize,
    output_padding: usize,
    groups: usize,
    dilation: usize,
) -> Result<Tensor> {
    conv_transpose_op(
        "conv_transpose1d",
        input,
        weight,
        bias,
        &[stride],
        &[padding],
        &[output_padding],
        groups,
        &[dilation],
    )
}

/// 2-d transposed convolution (PyTorch's `F.conv_transpose2d`): `input`
/// `[N, C_in, H, W]` or `[C_in, H, W]`, `weight`
/// `[C_in, C_out / groups, kh, kw]`, `bias` `[C_out]`; sizes are
/// (height, width) pairs, sized as [`conv_transpose1d`] per dim.
///
/// # Errors
/// As [`conv_transpose1d`].
///
/// ```
/// use kael_core::nn::functional::conv_transpose2d;
/// use kael_core::{DType, Device, Tensor};
/// let dev = Device::cpu();
/// let x = Tensor::ones(&[1, 2, 3, 3], DType::F32, &dev)?;
/// let w = Tensor::ones(&[2, 4, 3, 3], DType::F32, &dev)?;
/// let y = conv_transpose2d(&x, &w, None, [2, 2], [1, 1], [1, 1], 1, [1, 1])?;
/// assert_eq!(y.shape(), &[1, 4, 6, 6]);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn conv_transpose2d(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stride: [usize; 2],
    padding: [usize; 2],
    output_padding: [usize; 2],
    groups: usize,
    dilation: [usize; 2],
) -> Result<Tensor> {
    conv_transpose_op(
        "conv_transpose2d",
        input,
        weight,
        bias,
        &stride,
        &padding,
        &output_padding,
        groups,
        &dilation,
    )
}

// --------------------------------------------------------------- embedding

/// Rows of `weight` (`[num_embeddings, embedding_dim]`) picked by integer
/// `ids` (PyTorch's `F.embedding`); the result has shape
/// `ids.shape() + [embedding_dim]`. With `padding_idx`, the positions that
/// pick that row pass no gradient to it, so its gradient is always zero (as
/// PyTorch; its values are used as they are).
///
/// # Errors
/// [`Error::RankMismatch`] unless `weight` is rank 2;
/// [`Error::InvalidArgument`] for a `padding_idx` outside
/// `0..num_embeddings`; [`Error::IndexOutOfRange`] for an id outside it;
/// [`Error::UnsupportedDType`] for non-integer ids; device mismatch.
///
/// ```
/// use kael_core::nn::functional::embedding;
/// use kael_core::{Device, Tensor};
/// let dev = Device::cpu();
/// let w = Tensor::arange(0.0f32, 6.0, &dev)?.reshape(&[3, 2])?.requires_grad_(true)?;
/// let ids = Tensor::from_slice(&[0i64, 2, 0], &[3], &dev)?;
/// embedding(&ids, &w, Some(0))?.sum_all()?.backward()?;
/// assert_eq!(w.grad().unwrap().to_vec::<f32>()?, vec![0.0, 0.0, 0.0, 0.0, 1.0, 1.0]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn embedding(ids: &Tensor, weight: &Tensor, padding_idx: Option<usize>) -> Result<Tensor> {
    embedding_op("embedding", ids, weight, padding_idx)
}

pub(super) fn embedding_op(
    op: &'static str,
    ids: &Tensor,
    weight: &Tensor,
    padding_idx: Option<usize>,
) -> Result<Tensor> {
    if weight.rank() != 2 {
        return Err(Error::RankMismatch {
            op,
            expected: "2 (weight is [num_embeddings, embedding_dim])",
            got: weight.rank(),
        });
    }
    if let Some(p) = padding_idx {
        if p >= weight.shape()[0] {
            return Err(invalid(
                op,
                "padding_idx must be a row of the table (below num_embeddings); pass a valid row or None",
            ));
        }
    }
    let out = Tensor::embedding(weight, ids)?;
    match padding_idx {
        Some(p) => {
            // Where the id is padding_idx, the output is a detached copy:
            // `where` sends those positions' gradient nowhere.
            let at_pad = ids.eq(&ids.scalar_like(p as f64)?)?.unsqueeze(-1)?;
            at_pad.where_cond(&out.detach()?, &out)
        }
        None => Ok(out),
    }
}

// ----------------------------------------------------------------- dropout

/// Zeroes each element with probability `p` and scales the rest by
/// `1 / (1 - p)` when `training` (PyTorch's `F.dropout`); the input itself
/// (same handle) otherwise or when `p == 0`. The mask is drawn from `rng`
/// (`rand(shape) >= p`), so a seeded generator drops the same elements.
///
/// # Errors
/// [`Error::InvalidArgument`] unless `0 <= p <= 1`;
/// [`Error::UnsupportedDType`] for non-float inputs in training.
///
/// ```
/// use kael_core::nn::functional::dropout;
/// use kael_core::{DType, Device, Rng, Tensor};
/// let x = Tensor::ones(&[100], DType::F32, &Device::cpu())?;
/// let y = dropout(&x, 0.5, true, &mut Rng::new(0))?.to_vec::<f32>()?;
/// assert!(y.iter().all(|&v| v == 0.0 || v == 2.0));
/// assert!(dropout(&x, 0.5, false, &mut Rng::new(0))?.is_same(&x));
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn dropout(input: &Tensor, p: f64, training: bool, rng: &mut Rng) -> Result<Tensor> {
    dropout_op("dropout", input, p, training, rng)
}

pub(super) fn check_dropout_p(op: &'static str, p: f64) -> Result<()> {
    if !(0.0..=1.0).contains(&p) {
        return Err(invalid(
            op,
            "the drop probability p must be in [0, 1]; pass a probability (0 keeps everything)",
        ));
    }
    Ok(())
}

pub(super) fn dropout_op(
    op: &'static str,
    input: &Tensor,
    p: f64,
    training: bool,
    rng: &mut Rng,
) -> Result<Tensor> {
    check_dropout_p(op, p)?;
    if !training || p == 0.0 {
        return Ok(input.clone());
    }
    if p == 1.0 {
        return input.mul_scalar(0.0);
    }
    let dtype = input.dtype();
    dtype.require_float(op)?;
    let noise = Tensor::rand(input.shape(), dtype, &input.device(), rng)?;
    let keep = no_grad(|| {
        noise
            .ge(&noise.scalar_like(p)?)?
            .to_dtype(dtype)?
            .mul_scalar(1.0 / (1.0 - p))
    })?;
    input.mul(&keep)
}

// ----------------------------------------------------------------- pooling

/// A validated 2-d pooling window.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pool2d {
    pub(super) kernel: [usize; 2],
    pub(super) stride: [usize; 2],
    pub(super) padding: [usize; 2],
}

impl Pool2d {
    pub(super) fn new(
        op: &'static str,
        kernel: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
    ) -> Result<Self> {
        if kernel.contains(&0) {
            return Err(invalid(
                op,
                "kernel sizes must be positive; pass sizes of 1 or more",
            ));
        }
        if stride.contains(&0) {
            return Err(invalid(
                op,
                "stride must be positive; pass 1 or more (1 visits every position)",
            ));
        }
        if padding[0] > kernel[0] / 2 || padding[1] > kernel[1] / 2 {
            return Err(invalid(
                op,
                "padding must be at most half the kernel size (as in PyTorch); lower the padding or enlarge the kernel",
            ));
        }
        Ok(Self {
            kernel,
            stride,
            padding,
        })
    }

    /// The batched input (rank checked) and whether it was unbatched.
    fn batched(op: &'static str, x: &Tensor) -> Result<(Tensor, bool)> {
        match x.rank() {
            3 => Ok((x.unsqueeze(0)?, true)),
            4 => Ok((x.clone(), false)),
            r => Err(Error::RankMismatch {
                op,
                expected: "4 ([N, C, H, W]) or 3 ([C, H, W])",
                got: r,
            }),
        }
    }

    /// Output (height, width) over a padded `[H, W]` plane.
    fn out_size(&self, op: &'static str, h: usize, w: usize) -> Result<[usize; 2]> {
        let hp = h.checked_add(2 * self.padding[0]).ok_or(overflow(op))?;
        let wp = w.checked_add(2 * self.padding[1]).ok_or(overflow(op))?;
        Ok([
            out_len(op, hp, self.kernel[0], self.stride[0])?,
            out_len(op, wp, self.kernel[1], self.stride[1])?,
        ])
    }

    /// `[N, C, H_out, W_out, kh · kw]` windows of batched `x` padded with
    /// `fill`.
    fn windows(&self, op: &'static str, x: &Tensor, fill: f64) -> Result<Tensor> {
        let [kh, kw] = self.kernel;
        let [oh, ow] = self.out_size(op, x.shape()[2], x.shape()[3])?;
        let (k, s, p) = (self.kernel, self.stride, self.padding);
        if let Some(rows) = super::im2col::windows(op, x, k, s, p, [1, 1], fill as f32)? {
            // [N, OH, OW, C, KH, KW] -> [N, C, OH, OW, KH·KW] (a view).
            let (n, c) = (x.shape()[0], x.shape()[1]);
            return rows
                .permute(&[0, 3, 1, 2, 4, 5])?
                .reshape(&[n, c, oh, ow, kh * kw]);
        }
        let x = pad_dim(x, 2, self.padding[0], self.padding[0], fill)?;
        let x = pad_dim(&x, 3, self.padding[1], self.padding[1], fill)?;
        let (n, c) = (x.shape()[0], x.shape()[1]);
        x.unfold(2, kh, self.stride[0])?
            .unfold(3, kw, self.stride[1])?
            .reshape(&[n, c, oh, ow, kh * kw])
    }

    pub(super) fn max(&self, op: &'static str, input: &Tensor) -> Result<Tensor> {
        let (x, unbatched) = Self::batched(op, input)?;
        let (k, s, p) = (self.kernel, self.stride, self.padding);
        self.out_size(op, x.shape()[2], x.shape()[3])?;
        if let Some(y) = super::im2col::max_pool(op, &x, k, s, p)? {
            return if unbatched { y.squeeze_dim(0) } else { Ok(y) };
        }
        let y = self
            .windows(op, &x, f64::NEG_INFINITY)?
            .max_dim(-1, false)?;
        if unbatched { y.squeeze_dim(0) } else { Ok(y) }
    }

    pub(super) fn max_with_indices(
        &self,
        op: &'static str,
        input: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let (x, unbatched) = Self::batched(op, input)?;
        let (n, c, h, w) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
        let [oh, ow] = self.out_size(op, h, w)?;
        let win = self.windows(op, &x, f64::NEG_INFINITY)?;
        let y = win.max_dim(-1, false)?;
        // The flat index (row · W + col) of every padded position, windowed
        // like the input, then picked by each window's argmax.
        let [ph, pw] = self.padding;
        let (hp, wp) = (h + 2 * ph, w + 2 * pw);
        let mut pos: Vec<i64> = Vec::new();
        pos.try_reserve_exact(hp * wp)
            .map_err(|_| Error::OutOfMemory {
                requested: (hp * wp).saturating_mul(8),
                available: None,
            })?;
        for r in 0..hp {
            for col in 0..wp {
                pos.push((r as i64 - ph as i64) * w as i64 + (col as i64 - pw as i64));
            }
        }
        let [kh, kw] = self.kernel;
        let pos = Tensor::from_slice(&pos, &[hp, wp], &x.device())?
            .unfold(0, kh, self.stride[0])?
            .unfold(1, kw, self.stride[1])?
            .reshape(&[oh, ow, kh * kw])?
            .expand(&[n, c, oh, ow, kh * kw])?;
        let arg = no_grad(|| win.argmax(-1, true))?;
        let idx = pos.gather(-1, &arg)?.squeeze_dim(-1)?;
        if unbatched {
            Ok((y.squeeze_dim(0)?, idx.squeeze_dim(0)?))
        } else {
            Ok((y, idx))
        }
    }

    pub(super) fn avg(
        &self,
        op: &'static str,
        input: &Tensor,
        count_include_pad: bool,
    ) -> Result<Tensor> {
        let (x, unbatched) = Self::batched(op, input)?;
        input.dtype().require_float(op)?;
        self.out_size(op, x.shape()[2], x.shape()[3])?;
        if count_include_pad || self.padding == [0, 0] {
            // One divisor for every window: a depthwise convolution with
            // the constant weight 1/(kh·kw), by the device's kernel if it
            // has one (no windows; its weight needs no gradient).
            let [kh, kw] = self.kernel;
            let c = x.shape()[1];
            let w = Tensor::full(
                &[c, 1, kh, kw],
                1.0 / (kh * kw) as f64,
                x.dtype(),
                &x.device(),
            )?;
            let (s, p) = (self.stride, self.padding);
            if let Some(y) = super::im2col::depthwise(op, &x, &w, s, p, [1, 1])? {
                return if unbatched { y.squeeze_dim(0) } else { Ok(y) };
            }
        }
        let win = self.windows(op, &x, 0.0)?;
        let y = if count_include_pad || self.padding == [0, 0] {
            win.mean_dim(-1, false)?
        } else {
            // Divide by the number of real (unpadded) elements per window.
            let (h, w) = (x.shape()[2], x.shape()[3]);
            let counts = no_grad(|| -> Result<Tensor> {
                let ones = Tensor::ones(&[1, 1, h, w], x.dtype(), &x.device())?;
                self.windows(op, &ones, 0.0)?.sum_dim(-1, false)
            })?;
            win.sum_dim(-1, false)?.div(&counts)?
        };
        if unbatched { y.squeeze_dim(0) } else { Ok(y) }
    }
}

/// The maximum of each `kernel` window (PyTorch's `F.max_pool2d` with
/// `dilation = 1`, `ceil_mode = False`); padding counts as `-inf`.
/// `input` is `[N, C, H, W]` or `[C, H, W]`. Pass `stride = kernel` for
/// PyTorch's default stride. The gradient goes to the first maximum of
/// each window.
///
/// # Errors
/// [`Error::RankMismatch`]; [`Error::InvalidArgument`] for a zero kernel
/// or stride, padding above half the kernel, or an input smaller than the
/// window.
///
/// ```
/// use kael_core::nn::functional::max_pool2d;
/// use kael_core::{Device, Tensor};
/// let x = Tensor::arange(0.0f32, 16.0, &Device::cpu())?.reshape(&[1, 4, 4])?;
/// let y = max_pool2d(&x, [2, 2], [2, 2], [0, 0])?;
/// assert_eq!(y.to_vec::<f32>()?, vec![5.0, 7.0, 13.0, 15.0]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn max_pool2d(
    input: &Tensor,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
) -> Result<Tensor> {
    const OP: &str = "max_pool2d";
    Pool2d::new(OP, kernel, stride, padding)?.max(OP, input)
}

/// [`max_pool2d`] and, for each output, the flat index (`row · W + col`)
/// of its maximum in its input plane, as `I64` (PyTorch's
/// `F.max_pool2d(..., return_indices=True)`, the indices
/// `F.max_unpool2d` takes). In a tie the first maximum (in row-major window
/// order) is chosen.
///
/// # Errors
/// As [`max_pool2d`].
///
/// ```
/// use kael_core::nn::functional::max_pool2d_with_indices;
/// use kael_core::{Device, Tensor};
/// let x = Tensor::from_slice(&[1.0f32, 9.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[1, 2, 4], &Device::cpu())?;
/// let (y, i) = max_pool2d_with_indices(&x, [2, 2], [2, 2], [0, 0])?;
/// assert_eq!(y.to_vec::<f32>()?, vec![9.0, 8.0]);
/// assert_eq!(i.to_vec::<i64>()?, vec![1, 7]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn max_pool2d_with_indices(
    input: &Tensor,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
) -> Result<(Tensor, Tensor)> {
    const OP: &str = "max_pool2d_with_indices";
    Pool2d::new(OP, kernel, stride, padding)?.max_with_indices(OP, input)
}

/// The mean of each `kernel` window (PyTorch's `F.avg_pool2d` with
/// `ceil_mode = False`): padding counts as zeros, and with
/// `count_include_pad` (PyTorch's default) the divisor is always
/// `kh · kw`; without it, the number of input elements in the window.
///
/// # Errors
/// As [`max_pool2d`]; non-float dtypes.
///
/// ```
/// use kael_core::nn::functional::avg_pool2d;
/// use kael_core::{DType, Device, Tensor};
/// let x = Tensor::ones(&[1, 2, 2], DType::F32, &Device::cpu())?;
/// let y = avg_pool2d(&x, [2, 2], [1, 1], [1, 1], false)?;
/// assert_eq!(y.to_vec::<f32>()?, vec![1.0; 9]);
/// let y = avg_pool2d(&x, [2, 2], [1, 1], [1, 1], true)?;
/// assert_eq!(y.to_vec::<f32>()?[0], 0.25);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn avg_pool2d(
    input: &Tensor,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    count_include_pad: bool,
) -> Result<Tensor> {
    const OP: &str = "avg_pool2d";
    Pool2d::new(OP, kernel, stride, padding)?.avg(OP, input, count_include_pad)
}

// --------------------------------------------------------------- attention

/// Whether `a` and `b` broadcast (numpy rules, aligned at the right).
fn broadcastable(a: &[usize], b: &[usize]) -> bool {
    a.iter()
        .rev()
        .zip(b.iter().rev())
        .all(|(&x, &y)| x == y || x == 1 || y == 1)
}

/// `softmax(q kᵀ · scale + mask)`: the attention weights of
/// [`scaled_dot_product_attention`], `[*, L, S]`.
pub(super) fn attention_weights(
    op: &'static str,
    q: &Tensor,
    k: &Tensor,
    v: Option<&Tensor>,
    attn_mask: Option<&Tensor>,
    is_causal: bool,
    scale: Option<f64>,
) -> Result<Tensor> {
    for t in [Some(q), Some(k), v].into_iter().flatten() {
        if t.rank() < 2 {
            return Err(Error::RankMismatch {
                op,
                expected: "at least 2 ([*, sequence, features])",
                got: t.rank(),
            });
        }
        q.same_dtype(op, t)?;
        q.same_device(op, t)?;
    }
    q.dtype().require_float(op)?;
    let (qr, kr) = (q.rank(), k.rank());
    let (l, e) = (q.shape()[qr - 2], q.shape()[qr - 1]);
    let s = k.shape()[kr - 2];
    if k.shape()[kr - 1] != e {
        return Err(invalid(
            op,
            "query and key must have the same last dim (the feature size E); project them to one size",
        ));
    }
    if let Some(v) = v {
        if v.shape()[v.rank() - 2] != s {
            return Err(invalid(
                op,
                "key and value must have the same sequence length (dim -2); pass matching tensors",
            ));
        }
        if !broadcastable(&k.shape()[..kr - 2], &v.shape()[..v.rank() - 2]) {
            return Err(invalid(
                op,
                "the batch dims of key and value must broadcast; make them equal",
            ));
        }
    }
    if !broadcastable(&q.shape()[..qr - 2], &k.shape()[..kr - 2]) {
        return Err(invalid(
            op,
            "the batch dims of query and key must broadcast; make them equal",
        ));
    }
    if is_causal && attn_mask.is_some() {
        return Err(invalid(
            op,
            "attn_mask and is_causal are exclusive (as in PyTorch); pass one of them",
        ));
    }
    let scale = match scale {
        Some(s) if !s.is_finite() => {
            return Err(invalid(op, "scale must be finite; pass None for 1/sqrt(E)"));
        }
        Some(s) => s,
        None => 1.0 / libm::sqrt(e as f64),
    };
    if let Some(m) = attn_mask {
        q.same_device(op, m)?;
        if m.dtype() != DType::Bool && m.dtype() != q.dtype() {
            return Err(invalid(
                op,
                "attn_mask must be Bool (true = attend) or the query's float dtype (added to the scores)",
            ));
        }
        let mut scores = Dims::from_slice(&[l, s])?;
        let bq = &q.shape()[..qr - 2];
        let bk = &k.shape()[..kr - 2];
        let batch = crate::shape::broadcast_shapes(op, bq, bk)?;
        for (i, &d) in batch.iter().enumerate() {
            scores.insert(i, d)?;
        }
        if m.rank() > scores.len() || !broadcastable(m.shape(), &scores) {
            return Err(Error::BroadcastMismatch {
                op,
                lhs: ErrShape::of(m.shape()),
                rhs: ErrShape::of(&scores),
            });
        }
    }
    // The scale goes on q ([.., L, E]) rather than on the scores
    // ([.., L, S]): the same product, fewer elements to scale.
    let scores = q.mul_scalar(scale)?.matmul(&k.transpose(-2, -1)?)?;
    let dev = q.device();
    let additive = |keep: &Tensor| -> Result<Tensor> {
        let zero = Tensor::full(&[], 0.0, scores.dtype(), &dev)?;
        let neg_inf = Tensor::full(&[], f64::NEG_INFINITY, scores.dtype(), &dev)?;
        keep.where_cond(&zero, &neg_inf)
    };
    if is_causal {
        // Query i attends keys 0..=i (PyTorch's `ones(L, S).tril()`); key 0
        // is always open, so no row is fully masked.
        let qi = Tensor::arange(0i64, l as i64, &dev)?.unsqueeze(1)?;
        let kj = Tensor::arange(0i64, s as i64, &dev)?.unsqueeze(0)?;
        return scores.add(&additive(&kj.le(&qi)?)?)?.softmax(-1);
    }
    let scores = match attn_mask {
        Some(m) if m.dtype() == DType::Bool => scores.add(&additive(m)?)?,
        Some(m) => scores.add(m)?,
        None => return scores.softmax(-1),
    };
    // A query whose every score is -inf attends nothing: its weights are
    // 0 (PyTorch's safe softmax), not NaN. Its scores are replaced by 0
    // before the softmax, so no NaN reaches the gradient either.
    let zero = Tensor::full(&[], 0.0, scores.dtype(), &dev)?;
    let dead = no_grad(|| {
        scores
            .max_dim(-1, true)?
            .eq(&Tensor::full(&[], f64::NEG_INFINITY, scores.dtype(), &dev)?)
    })?;
    let weights = dead.where_cond(&zero, &scores)?.softmax(-1)?;
    dead.where_cond(&zero, &weights)
}

/// Attention (PyTorch's `F.scaled_dot_product_attention`, without
/// dropout): `softmax(q kᵀ · scale + mask) v`, with `q` `[*, L, E]`, `k`
/// `[*, S, E]`, `v` `[*, S, Ev]` (batch dims broadcast) and the result
/// `[*, L, Ev]`. `scale` defaults to `1/√E`. `attn_mask` (broadcasting to
/// `[*, L, S]`) is either `Bool`, where `true` means "may attend", or of
/// the query's dtype and added to the scores; `is_causal` lets query `i`
/// attend keys `0..=i`. A query that may attend nothing (every score
/// `-inf`) gets zeros and passes no gradient, as PyTorch 2.5+.
///
/// # Errors
/// [`Error::RankMismatch`] for rank < 2; [`Error::InvalidArgument`] for
/// mismatched feature or sequence sizes, non-broadcasting batch dims, a
/// mask together with `is_causal`, a mask of another float dtype, or a
/// non-finite scale; [`Error::BroadcastMismatch`] for a mask that does not
/// broadcast; dtype or device mismatch.
///
/// ```
/// use kael_core::nn::functional::scaled_dot_product_attention;
/// use kael_core::{DType, Device, Tensor};
/// let dev = Device::cpu();
/// let q = Tensor::zeros(&[1, 2, 4], DType::F32, &dev)?;
/// let v = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[1, 2, 4], &dev)?;
/// let y = scaled_dot_product_attention(&q, &q, &v, None, true, None)?;
/// assert_eq!(y.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0, 3.0, 4.0, 5.0, 6.0]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn scaled_dot_product_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    attn_mask: Option<&Tensor>,
    is_causal: bool,
    scale: Option<f64>,
) -> Result<Tensor> {
    const OP: &str = "scaled_dot_product_attention";
    attention_weights(OP, q, k, Some(v), attn_mask, is_causal, scale)?.matmul(v)
}
