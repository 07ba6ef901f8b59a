//! Gradient clipping by global norm.

use super::check_non_negative;
use crate::autograd::no_grad;
use crate::dtype::DType;
use crate::error::Result;
use crate::tensor::Tensor;
use alloc::vec::Vec;

/// Scales the gradients of `params` in place so that their global 2-norm
/// (the norm of all gradient elements taken together) is at most
/// `max_norm`; returns the norm before clipping (PyTorch's
/// `clip_grad_norm_` with `norm_type = 2`).
///
/// The scale is `max_norm / (norm + 1e-6)`, applied only when it is less
/// than one. Parameters without a gradient are skipped. A NaN or infinite norm is
/// returned as is and nothing is scaled (check the result to skip such a
/// step). Sums of squares are accumulated in f64.
///
/// # Errors
/// [`crate::Error::InvalidArgument`] for a negative or non-finite
/// `max_norm`; tensor-op errors (then no gradient has been scaled).
///
/// ```
/// use kael_core::optim::clip_grad_norm_;
/// use kael_core::{Device, Tensor};
/// let w = Tensor::from_slice(&[0.0f32, 0.0], &[2], &Device::cpu())?.requires_grad_(true)?;
/// let c = Tensor::from_slice(&[3.0f32, 4.0], &[2], &Device::cpu())?;
/// w.mul(&c)?.sum_all()?.backward()?;             // grad = [3, 4], norm 5
/// let norm = clip_grad_norm_(&[w.clone()], 1.0)?;
/// assert!((norm - 5.0).abs() < 1e-9);
/// let g = w.grad().unwrap().to_vec::<f32>()?;
/// assert!((g[0] - 0.6).abs() < 1e-6 && (g[1] - 0.8).abs() < 1e-6);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn clip_grad_norm_(params: &[Tensor], max_norm: f64) -> Result<f64> {
    check_non_negative(
        "clip_grad_norm_",
        max_norm,
        "max_norm must be a finite number >= 0",
    )?;
    no_grad(|| {
        let grads: Vec<Tensor> = params.iter().filter_map(Tensor::grad).collect();
        let mut total = 0.0f64;
        for g in &grads {
            total += g.sqr()?.sum_all()?.to_dtype(DType::F64)?.item::<f64>()?;
        }
        let norm = libm::sqrt(total);
        let coef = max_norm / (norm + 1e-6);
        if coef < 1.0 {
            let scales: Vec<Tensor> = grads
                .iter()
                .map(|g| g.scalar_like(coef))
                .collect::<Result<_>>()?;
            for (g, s) in grads.iter().zip(&scales) {
                g.mul_(s)?;
            }
        }
        Ok(norm)
    })
}
