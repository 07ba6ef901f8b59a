//! Constant padding along one dimension (differentiable, through `cat`).

use crate::error::Result;
use crate::shape::resolve_dim;
use crate::tensor::Tensor;
use alloc::vec::Vec;

/// `x` with `before` and `after` elements of `value` added along `dim`
/// (PyTorch's `F.pad` with mode `"constant"`, one dim at a time). Built
/// with [`Tensor::cat`], so gradients flow to `x` (and not to the padding).
/// Returns `x` itself when both amounts are 0.
///
/// # Errors
/// [`crate::Error::DimOutOfRange`]; [`crate::Error::OutOfMemory`].
///
/// ```
/// use kael_core::nn::pad_dim;
/// use kael_core::{Device, Tensor};
/// let x = Tensor::from_slice(&[1.0f32, 2.0], &[1, 2], &Device::cpu())?;
/// let p = pad_dim(&x, 1, 1, 2, 0.0)?;
/// assert_eq!(p.to_vec::<f32>()?, vec![0.0, 1.0, 2.0, 0.0, 0.0]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn pad_dim(x: &Tensor, dim: isize, before: usize, after: usize, value: f64) -> Result<Tensor> {
    let d = resolve_dim("pad_dim", dim, x.rank())?;
    if before == 0 && after == 0 {
        return Ok(x.clone());
    }
    let dev = x.device();
    let mut parts: Vec<Tensor> = Vec::with_capacity(3);
    let mut side = crate::shape::Dims::from_slice(x.shape())?;
    if before > 0 {
        side[d] = before;
        parts.push(Tensor::full(&side, value, x.dtype(), &dev)?);
    }
    parts.push(x.clone());
    if after > 0 {
        side[d] = after;
        parts.push(Tensor::full(&side, value, x.dtype(), &dev)?);
    }
    let refs: Vec<&Tensor> = parts.iter().collect();
    Tensor::cat(&refs, d as isize)
}
