//! Seeded dropout.

use super::module::Module;
use crate::error::Result;
use crate::rng::Rng;
use crate::shared::Lock;
use crate::tensor::Tensor;

/// Zeroes each element with probability `p` in training mode and scales the
/// rest by `1 / (1 - p)`; the identity in evaluation mode (PyTorch's
/// `nn.Dropout`). Modules start in training mode, as in PyTorch.
///
/// The layer owns a generator forked from the one passed to
/// [`Dropout::new`], so a model built from one seed drops the same elements
/// on every run (each forward draws one `u64` from it and seeds the mask's
/// generator with it). The mask is `rand(shape) >= p` (a comparison), turned into
/// `0` or `1 / (1 - p)` and multiplied in, so the gradient is the same mask.
///
/// ```
/// use kael_core::nn::{Dropout, Module};
/// use kael_core::{DType, Device, Rng, Tensor};
/// let dev = Device::cpu();
/// let d = Dropout::new(0.5, &mut Rng::new(0))?;
/// let x = Tensor::ones(&[1000], DType::F32, &dev)?;
/// let y = d.forward(&x)?.to_vec::<f32>()?;
/// assert!(y.iter().all(|&v| v == 0.0 || v == 2.0));
/// d.eval();
/// assert!(d.forward(&x)?.is_same(&x));
/// # Ok::<(), kael_core::Error>(())
/// ```
pub struct Dropout {
    p: f64,
    training: Lock<bool>,
    rng: Lock<Rng>,
}

impl Dropout {
    /// Dropout with probability `p`, its generator forked from `rng` (one
    /// draw).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) unless `0 <= p <= 1`.
    ///
    /// ```
    /// use kael_core::{nn::Dropout, Rng};
    /// assert!(Dropout::new(1.5, &mut Rng::new(0)).is_err());
    /// ```
    pub fn new(p: f64, rng: &mut Rng) -> Result<Self> {
        super::functional::check_dropout_p("Dropout", p)?;
        Ok(Self {
            p,
            training: Lock::new(true),
            rng: Lock::new(Rng::new(rng.next_u64())),
        })
    }

    /// The drop probability.
    pub fn p(&self) -> f64 {
        self.p
    }

    /// Whether the layer is in training mode (dropping).
    pub fn is_training(&self) -> bool {
        self.training.with(|t| *t)
    }
}

impl Module for Dropout {
    /// Any float `input`; in evaluation mode, or with `p == 0`, the input
    /// itself (same handle).
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`](crate::Error::UnsupportedDType) for non-float inputs in training mode;
    /// [`Error::OutOfMemory`](crate::Error::OutOfMemory).
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        if !self.is_training() || self.p == 0.0 || self.p == 1.0 {
            // No mask to draw: the generator is left as it is.
            return super::functional::dropout_op(
                "Dropout",
                input,
                self.p,
                self.is_training(),
                &mut Rng::new(0),
            );
        }
        // One draw under the lock (a short critical section), then a local
        // generator seeded from it for the mask.
        let mut rng = Rng::new(self.rng.with(|r| r.next_u64()));
        super::functional::dropout_op("Dropout", input, self.p, true, &mut rng)
    }

    fn set_training(&self, on: bool) {
        self.training.with(|t| *t = on);
    }
}
