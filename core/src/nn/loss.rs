//! Loss functions: mean squared error, negative log-likelihood, cross
//! entropy. Cross entropy goes through `log_softmax` (a max-shifted
//! log-sum-exp), so large logits neither overflow nor lose precision.

use crate::dtype::DType;
use crate::error::{ErrShape, Error, Result};
use crate::shape::Dims;
use crate::tensor::Tensor;

/// How a loss reduces its per-element values (PyTorch's `reduction`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Reduction {
    /// No reduction: one value per element (per sample for NLL / cross
    /// entropy; ignored targets give 0).
    None,
    /// The mean (over non-ignored targets for NLL / cross entropy; NaN when
    /// every target is ignored, as in PyTorch).
    #[default]
    Mean,
    /// The sum.
    Sum,
}

/// `(input - target)²`, reduced (PyTorch's `F.mse_loss`).
///
/// # Errors
/// [`Error::ShapeMismatch`] unless the shapes are equal (no broadcasting:
/// PyTorch warns about it because it is almost always a bug); dtype or
/// device mismatch; non-float dtypes.
///
/// ```
/// use kael_core::nn::{mse_loss, Reduction};
/// use kael_core::{Device, Tensor};
/// let dev = Device::cpu();
/// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], &dev)?;
/// let y = Tensor::from_slice(&[1.0f32, 0.0, 0.0], &[3], &dev)?;
/// assert_eq!(mse_loss(&x, &y, Reduction::Mean)?.item::<f32>()?, 13.0 / 3.0);
/// assert_eq!(mse_loss(&x, &y, Reduction::Sum)?.item::<f32>()?, 13.0);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn mse_loss(input: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    if input.shape() != target.shape() {
        return Err(Error::ShapeMismatch {
            op: "mse_loss",
            expected: ErrShape::of(input.shape()),
            got: ErrShape::of(target.shape()),
        });
    }
    input.dtype().require_float("mse_loss")?;
    input.same_dtype("mse_loss", target)?;
    input.same_device("mse_loss", target)?;
    let sq = input.sub(target)?.sqr()?;
    match reduction {
        Reduction::None => Ok(sq),
        Reduction::Mean => sq.mean_all(),
        Reduction::Sum => sq.sum_all(),
    }
}

/// Negative log-likelihood of class indices (PyTorch's `F.nll_loss`,
/// without class weights).
///
/// `log_probs` is `[N, C]`, `[N, C, d1, ...]` or `[C]` (classes on dim 1,
/// or dim 0 for rank 1); `targets` holds class indices (`I64` or `I32`) of
/// the input's shape without the class dim. The loss of a sample is
/// `-log_probs[n, targets[n]]`; samples whose target is `ignore_index`
/// contribute nothing (and are left out of the mean's count).
///
/// # Errors
/// [`Error::ShapeMismatch`] for a target shape that does not match;
/// [`Error::UnsupportedDType`] for non-integer targets or a non-float
/// input; [`Error::IndexOutOfRange`] for a (non-ignored) target outside
/// `0..C`; device mismatch.
///
/// ```
/// use kael_core::nn::{nll_loss, Reduction};
/// use kael_core::{Device, Tensor};
/// let dev = Device::cpu();
/// let lp = Tensor::from_slice(&[-0.5f32, -1.0, -2.0, -0.1], &[2, 2], &dev)?;
/// let t = Tensor::from_slice(&[1i64, 0], &[2], &dev)?;
/// assert_eq!(nll_loss(&lp, &t, Reduction::Sum, None)?.item::<f32>()?, 3.0);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn nll_loss(
    log_probs: &Tensor,
    targets: &Tensor,
    reduction: Reduction,
    ignore_index: Option<i64>,
) -> Result<Tensor> {
    const OP: &str = "nll_loss";
    log_probs.dtype().require_float(OP)?;
    if !matches!(targets.dtype(), DType::I64 | DType::I32) {
        return Err(Error::UnsupportedDType {
            op: OP,
            dtype: targets.dtype(),
            supported: "I64, I32 (class indices)",
        });
    }
    log_probs.same_device(OP, targets)?;
    let class_dim = usize::from(log_probs.rank() > 1);
    if log_probs.rank() == 0 {
        return Err(Error::RankMismatch {
            op: OP,
            expected: "at least 1 ([C], [N, C] or [N, C, d1, ...])",
            got: 0,
        });
    }
    let mut want = Dims::from_slice(log_probs.shape())?;
    want.remove(class_dim);
    if targets.shape() != &want[..] {
        return Err(Error::ShapeMismatch {
            op: OP,
            expected: ErrShape::of(&want),
            got: ErrShape::of(targets.shape()),
        });
    }
    let d = class_dim as isize;
    let valid = match ignore_index {
        Some(ig) => Some(targets.ne(&targets.scalar_like(ig as f64)?)?),
        None => None,
    };
    // Ignored targets may be out of range (PyTorch's default is -100): pick
    // class 0 for them, then zero their loss.
    let safe = match &valid {
        Some(v) => v.where_cond(targets, &targets.scalar_like(0.0)?)?,
        None => targets.clone(),
    };
    let picked = log_probs.gather(d, &safe.unsqueeze(d)?)?.squeeze_dim(d)?;
    let (losses, count) = match &valid {
        Some(v) => {
            let w = v.to_dtype(log_probs.dtype())?;
            (picked.mul(&w)?.neg()?, Some(w))
        }
        None => (picked.neg()?, None),
    };
    match (reduction, count) {
        (Reduction::None, _) => Ok(losses),
        (Reduction::Sum, _) => losses.sum_all(),
        (Reduction::Mean, None) => losses.mean_all(),
        (Reduction::Mean, Some(w)) => losses.sum_all()?.div(&w.sum_all()?),
    }
}

/// Cross entropy between logits and targets (PyTorch's `F.cross_entropy`,
/// no weights, no label smoothing). Integer targets are class indices:
/// `nll_loss(log_softmax(logits, class_dim), targets)`, with shapes,
/// `ignore_index` and reductions as [`nll_loss`]. Float targets of the
/// logits' shape and dtype are class probabilities: the loss of each sample
/// is `-sum(targets * log_softmax(logits))` over the class dim, and `Mean`
/// averages over the samples (`ignore_index` does not apply, as in
/// PyTorch).
///
/// # Errors
/// As [`nll_loss`]; probability targets of another shape or dtype.
///
/// ```
/// use kael_core::nn::{cross_entropy, Reduction};
/// use kael_core::{Device, Tensor};
/// let dev = Device::cpu();
/// let logits = Tensor::from_slice(&[1000.0f32, 0.0, 0.0, 0.0], &[2, 2], &dev)?;
/// let t = Tensor::from_slice(&[0i64, -100], &[2], &dev)?;
/// let l = cross_entropy(&logits, &t, Reduction::Mean, Some(-100))?;
/// assert_eq!(l.item::<f32>()?, 0.0); // stable: no overflow at 1000
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn cross_entropy(
    logits: &Tensor,
    targets: &Tensor,
    reduction: Reduction,
    ignore_index: Option<i64>,
) -> Result<Tensor> {
    let class_dim = isize::from(logits.rank() > 1);
    if logits.rank() == 0 {
        return Err(Error::RankMismatch {
            op: "cross_entropy",
            expected: "at least 1 ([C], [N, C] or [N, C, d1, ...])",
            got: 0,
        });
    }
    if targets.dtype().is_float() {
        return soft_cross_entropy(logits, targets, class_dim, reduction);
    }
    nll_loss(
        &logits.log_softmax(class_dim)?,
        targets,
        reduction,
        ignore_index,
    )
}

/// [`cross_entropy`] with class-probability targets.
fn soft_cross_entropy(
    logits: &Tensor,
    probs: &Tensor,
    class_dim: isize,
    reduction: Reduction,
) -> Result<Tensor> {
    const OP: &str = "cross_entropy";
    if probs.shape() != logits.shape() {
        return Err(Error::ShapeMismatch {
            op: OP,
            expected: crate::error::ErrShape::of(logits.shape()),
            got: crate::error::ErrShape::of(probs.shape()),
        });
    }
    logits.same_dtype(OP, probs)?;
    let losses = probs
        .mul(&logits.log_softmax(class_dim)?)?
        .sum(&[class_dim], false)?
        .neg()?;
    match reduction {
        Reduction::None => Ok(losses),
        Reduction::Sum => losses.sum_all(),
        Reduction::Mean => losses.mean_all(),
    }
}
