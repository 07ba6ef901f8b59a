//! Parameter initialisation, as PyTorch does it by default.
//!
//! | layer | weight | bias |
//! |---|---|---|
//! | [`Linear`](super::Linear), [`Conv1d`](super::Conv1d), [`Conv2d`](super::Conv2d) | `kaiming_uniform_(a = √5)`, which is `U(-1/√fan_in, 1/√fan_in)` | `U(-1/√fan_in, 1/√fan_in)` |
//! | [`Embedding`](super::Embedding) | `N(0, 1)` | — |
//! | [`LayerNorm`](super::LayerNorm), [`RmsNorm`](super::RmsNorm) | ones | zeros |
//!
//! `fan_in` is `in_features` for a linear layer and
//! `in_channels * prod(kernel_size)` for a convolution. Samples come from a
//! caller-owned [`Rng`] (drawn in f64, then converted), so the
//! *distributions* match PyTorch's while the values are kael's own.

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
    Tensor::rand(shape, DType::F64, device, rng)?
        .affine(high - low, low)?
        .to_dtype(dtype)
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
    Tensor::randn(shape, DType::F64, device, rng)?
        .affine(std, mean)?
        .to_dtype(dtype)
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
    let b = fan_in_bound(fan_in);
    uniform(shape, -b, b, DType::F32, device, rng)
}
