//! Parameter initialisation, as PyTorch does it by default.
//!
//! | layer | weight | bias |
//! |---|---|---|
//! | [`Linear`](super::Linear), [`Conv1d`](super::Conv1d), [`Conv2d`](super::Conv2d) | `kaiming_uniform_(a = √5)`, which is `U(-1/√fan_in, 1/√fan_in)` | `U(-1/√fan_in, 1/√fan_in)` |
//! | [`Embedding`](super::Embedding) | `N(0, 1)` | — |
//! | [`LayerNorm`](super::LayerNorm), [`RmsNorm`](super::RmsNorm) | ones | zeros |
//!
//! `fan_in` is `in_features` for a linear layer and
//! `(in_channels / groups) * prod(kernel_size)` for a convolution. Samples
//! come from a caller-owned [`Rng`], so the *distributions* match PyTorch's
//! while the values are kael's own. Each sample is computed in f64 on the
//! host and rounded once to the requested dtype there: an f32 tensor is
//! made without any f64 kernel, so initialisation works on a backend built
//! with f32 only (NOTE [Kernel selection]).

use crate::device::Device;
use crate::dtype::DType;
use crate::error::Result;
use crate::rng::Rng;
use crate::tensor::Tensor;

/// `U(low, high)` samples of `shape`.
///
/// # Errors
/// [`crate::Error::UnsupportedDType`] for non-float dtypes;
/// [`crate::Error::OutOfMemory`].
///
/// ```
/// use kael_core::{nn::init, DType, Device, Rng};
/// let w = init::uniform(&[100], -0.5, 0.5, DType::F32, &Device::cpu(), &mut Rng::new(0))?;
/// assert!(w.to_vec::<f32>()?.iter().all(|x| (-0.5..0.5).contains(x)));
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn uniform(
    shape: &[usize],
    low: f64,
    high: f64,
    dtype: DType,
    device: &Device,
    rng: &mut Rng,
) -> Result<Tensor> {
    dtype.require_float("init::uniform")?;
    // `uniform()` has 53 random bits, exactly what `rand` keeps for f64:
    // the same samples as `rand(F64).affine(high - low, low)`.
    Tensor::from_fn_f64("init::uniform", shape, dtype, device, || {
        rng.uniform() * (high - low) + low
    })
}

/// `N(mean, std²)` samples of `shape`.
///
/// # Errors
/// [`crate::Error::UnsupportedDType`] for non-float dtypes;
/// [`crate::Error::OutOfMemory`].
///
/// ```
/// use kael_core::{nn::init, DType, Device, Rng};
/// let w = init::normal(&[2, 3], 0.0, 0.02, DType::F32, &Device::cpu(), &mut Rng::new(0))?;
/// assert_eq!(w.shape(), &[2, 3]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn normal(
    shape: &[usize],
    mean: f64,
    std: f64,
    dtype: DType,
    device: &Device,
    rng: &mut Rng,
) -> Result<Tensor> {
    dtype.require_float("init::normal")?;
    Tensor::from_fn_f64("init::normal", shape, dtype, device, || {
        rng.normal() * std + mean
    })
}

/// The bound `1/√fan_in` of PyTorch's default weight and bias init for
/// linear and convolution layers (`kaiming_uniform_(a = √5)`:
/// `gain = √(2 / (1 + a²)) = √(1/3)`, `bound = gain · √(3 / fan_in)`);
/// 0 for `fan_in == 0`, as PyTorch.
///
/// ```
/// assert_eq!(kael_core::nn::init::fan_in_bound(16), 0.25);
/// ```
pub fn fan_in_bound(fan_in: usize) -> f64 {
    if fan_in == 0 {
        0.0
    } else {
        1.0 / libm::sqrt(fan_in as f64)
    }
}

/// `U(-1/√fan_in, 1/√fan_in)` of `shape` in f32: PyTorch's default for
/// linear and convolution weights and biases.
///
/// # Errors
/// [`crate::Error::OutOfMemory`].
///
/// ```
/// use kael_core::{nn::init, Device, Rng};
/// let w = init::fan_in_uniform(&[8, 4], 4, &Device::cpu(), &mut Rng::new(1))?;
/// assert!(w.to_vec::<f32>()?.iter().all(|x| x.abs() <= 0.5));
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn fan_in_uniform(
    shape: &[usize],
    fan_in: usize,
    device: &Device,
    rng: &mut Rng,
) -> Result<Tensor> {
    fan_in_uniform_in(shape, fan_in, DType::F32, device, rng)
}

/// [`fan_in_uniform`] in `dtype` (drawn in that dtype directly, see the
/// module docs).
///
/// # Errors
/// [`crate::Error::UnsupportedDType`] for non-float dtypes;
/// [`crate::Error::OutOfMemory`].
///
/// ```
/// use kael_core::{nn::init, DType, Device, Rng};
/// let w = init::fan_in_uniform_in(&[8, 4], 4, DType::F64, &Device::cpu(), &mut Rng::new(1))?;
/// assert!(w.to_vec::<f64>()?.iter().all(|x| x.abs() <= 0.5));
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn fan_in_uniform_in(
    shape: &[usize],
    fan_in: usize,
    dtype: DType,
    device: &Device,
    rng: &mut Rng,
) -> Result<Tensor> {
    let b = fan_in_bound(fan_in);
    uniform(shape, -b, b, dtype, device, rng)
}
