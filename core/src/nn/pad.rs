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

/// PyTorch's `padding="same"` for a stride-1 convolution: `input` padded
/// so that the output keeps its spatial size, and the symmetric padding to
/// pass to the convolution. Along each of the last `dilation.len()` dims
/// the total padding is `dilation·(k - 1)` for a kernel of size `k`; half
/// of it (rounded down) goes on each side through the convolution's own
/// padding, and an odd one left over is added on the right here, as
/// PyTorch does.
///
/// # Errors
/// A weight of the wrong rank; a padding that overflows.
///
/// ```
/// use kael_core::nn::same_padding;
/// use kael_core::{DType, Device, Tensor};
/// let dev = Device::cpu();
/// let x = Tensor::zeros(&[1, 1, 5, 5], DType::F32, &dev)?;
/// let w = Tensor::zeros(&[1, 1, 4, 3], DType::F32, &dev)?; // even kernel: 1 extra
/// let (x, pad) = same_padding(&x, &w, &[1, 1])?;
/// assert_eq!((x.shape(), pad), (&[1, 1, 6, 5][..], vec![1, 1]));
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn same_padding(
    input: &Tensor,
    weight: &Tensor,
    dilation: &[usize],
) -> Result<(Tensor, Vec<usize>)> {
    const OP: &str = "conv (padding=\"same\")";
    let n = dilation.len();
    if weight.rank() != n + 2 || input.rank() < n {
        return Err(crate::Error::RankMismatch {
            op: OP,
            expected: "a weight of rank 2 + the number of spatial dims",
            got: weight.rank(),
        });
    }
    let mut x = input.clone();
    let mut pads = Vec::with_capacity(n);
    for (i, &d) in dilation.iter().enumerate() {
        let k = weight.shape()[2 + i];
        let total = d
            .checked_mul(k.saturating_sub(1))
            .ok_or(crate::Error::InvalidArgument {
                op: OP,
                reason: "dilation times the kernel size overflows; use a smaller dilation",
            })?;
        let left = total / 2;
        let dim = x.rank() - n + i;
        x = pad_dim(&x, dim as isize, 0, total - 2 * left, 0.0)?;
        pads.push(left);
    }
    Ok((x, pads))
}
