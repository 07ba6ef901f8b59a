//! Shape-only layers: [`Flatten`] and [`Identity`] (PyTorch's
//! `nn.Flatten`, `nn.Identity`).

use super::module::Module;
use crate::error::Result;
use crate::tensor::Tensor;

/// Flattens dims `start_dim..=end_dim` into one (PyTorch's `nn.Flatten`;
/// [`Flatten::default`] keeps the batch dim: `start_dim = 1`,
/// `end_dim = -1`). No parameters.
///
/// ```
/// use kael_core::nn::{Flatten, Module};
/// use kael_core::{DType, Device, Tensor};
/// let x = Tensor::zeros(&[2, 3, 4], DType::F32, &Device::cpu())?;
/// assert_eq!(Flatten::default().forward(&x)?.shape(), &[2, 12]);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flatten {
    /// The first dim flattened.
    pub start_dim: isize,
    /// The last dim flattened (inclusive).
    pub end_dim: isize,
}

impl Default for Flatten {
    fn default() -> Self {
        Flatten {
            start_dim: 1,
            end_dim: -1,
        }
    }
}

impl Module for Flatten {
    /// # Errors
    /// Dims out of range, or `start_dim` after `end_dim`.
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        input.flatten(self.start_dim, self.end_dim)
    }
}

/// Returns its input (PyTorch's `nn.Identity`), e.g. to switch a layer off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Identity;

impl Module for Identity {
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        Ok(input.clone())
    }
}
