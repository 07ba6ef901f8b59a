//! Parameterless activation layers.

use super::module::Module;
use crate::error::Result;
use crate::tensor::Tensor;

/// `max(x, 0)` (PyTorch's `nn.ReLU`).
///
/// ```
/// use kael_core::nn::{Module, Relu};
/// use kael_core::{Device, Tensor};
/// let x = Tensor::from_slice(&[-1.0f32, 2.0], &[2], &Device::cpu())?;
/// assert_eq!(Relu.forward(&x)?.to_vec::<f32>()?, vec![0.0, 2.0]);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Relu;

impl Module for Relu {
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        input.relu()
    }
}

/// Which GELU formula [`Gelu`] uses (PyTorch's `approximate` argument).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GeluApproximation {
    /// `x · Φ(x)` with the exact normal CDF (erf): PyTorch's default.
    #[default]
    None,
    /// `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))`: GPT-2's `gelu_new`.
    Tanh,
}

/// GELU (PyTorch's `nn.GELU(approximate=...)`).
///
/// ```
/// use kael_core::nn::{Gelu, GeluApproximation, Module};
/// use kael_core::{Device, Tensor};
/// let x = Tensor::from_slice(&[1.0f32], &[1], &Device::cpu())?;
/// let exact = Gelu::default().forward(&x)?.item::<f32>()?;
/// let tanh = Gelu { approximate: GeluApproximation::Tanh }.forward(&x)?.item::<f32>()?;
/// assert!((exact - 0.8413447).abs() < 1e-6 && (tanh - 0.8411920).abs() < 1e-6);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Gelu {
    /// The formula.
    pub approximate: GeluApproximation,
}

impl Module for Gelu {
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        match self.approximate {
            GeluApproximation::None => input.gelu(),
            GeluApproximation::Tanh => input.gelu_tanh(),
        }
    }
}

/// `x · sigmoid(x)` (PyTorch's `nn.SiLU`).
///
/// ```
/// use kael_core::nn::{Module, Silu};
/// use kael_core::{Device, Tensor};
/// let x = Tensor::from_slice(&[0.0f32], &[1], &Device::cpu())?;
/// assert_eq!(Silu.forward(&x)?.item::<f32>()?, 0.0);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Silu;

impl Module for Silu {
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        input.silu()
    }
}

/// Hyperbolic tangent (PyTorch's `nn.Tanh`).
///
/// ```
/// use kael_core::nn::{Module, Tanh};
/// use kael_core::{Device, Tensor};
/// let x = Tensor::from_slice(&[0.0f32], &[1], &Device::cpu())?;
/// assert_eq!(Tanh.forward(&x)?.item::<f32>()?, 0.0);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Tanh;

impl Module for Tanh {
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        input.tanh()
    }
}

/// Logistic sigmoid (PyTorch's `nn.Sigmoid`).
///
/// ```
/// use kael_core::nn::{Module, Sigmoid};
/// use kael_core::{Device, Tensor};
/// let x = Tensor::from_slice(&[0.0f32], &[1], &Device::cpu())?;
/// assert_eq!(Sigmoid.forward(&x)?.item::<f32>()?, 0.5);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Sigmoid;

impl Module for Sigmoid {
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        input.sigmoid()
    }
}
