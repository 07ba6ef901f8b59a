//! A lookup table of learned vectors.

use super::init;
use super::module::{Module, Visitor};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::rng::Rng;
use crate::tensor::Tensor;

/// Rows of `weight` (`[num_embeddings, embedding_dim]`) picked by integer
/// ids (PyTorch's `nn.Embedding`, without `padding_idx` or `max_norm`).
///
/// Default init (see [`init`]): `N(0, 1)`, f32, requiring grad. The
/// gradient of a row is the sum of the output gradients of every position
/// that picked it.
///
/// ```
/// use kael_core::nn::{Embedding, Module};
/// use kael_core::{Device, Rng, Tensor};
/// let dev = Device::cpu();
/// let emb = Embedding::new(10, 4, &dev, &mut Rng::new(0))?;
/// let ids = Tensor::from_slice(&[1i64, 7, 7], &[1, 3], &dev)?;
/// assert_eq!(emb.forward(&ids)?.shape(), &[1, 3, 4]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub struct Embedding {
    /// `[num_embeddings, embedding_dim]`.
    pub weight: Tensor,
}

impl Embedding {
    /// A table with PyTorch's default `N(0, 1)` initialisation.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`].
    ///
    /// ```
    /// use kael_core::nn::Embedding;
    /// use kael_core::{Device, Rng};
    /// let emb = Embedding::new(65, 32, &Device::cpu(), &mut Rng::new(3))?;
    /// assert_eq!(emb.weight.shape(), &[65, 32]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn new(
        num_embeddings: usize,
        embedding_dim: usize,
        device: &Device,
        rng: &mut Rng,
    ) -> Result<Self> {
        let weight = init::normal(
            &[num_embeddings, embedding_dim],
            0.0,
            1.0,
            DType::F32,
            device,
            rng,
        )?
        .requires_grad_(true)?;
        Ok(Self { weight })
    }

    /// A table over a given `[num_embeddings, embedding_dim]` tensor (the
    /// same handle).
    ///
    /// # Errors
    /// [`Error::RankMismatch`] unless `weight` is rank 2.
    ///
    /// ```
    /// use kael_core::nn::Embedding;
    /// use kael_core::{DType, Device, Tensor};
    /// assert!(Embedding::from_weights(Tensor::zeros(&[4], DType::F32, &Device::cpu())?).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn from_weights(weight: Tensor) -> Result<Self> {
        if weight.rank() != 2 {
            return Err(Error::RankMismatch {
                op: "Embedding",
                expected: "2 (weight is [num_embeddings, embedding_dim])",
                got: weight.rank(),
            });
        }
        Ok(Self { weight })
    }

    /// `num_embeddings`.
    pub fn num_embeddings(&self) -> usize {
        self.weight.shape()[0]
    }

    /// `embedding_dim`.
    pub fn embedding_dim(&self) -> usize {
        self.weight.shape()[1]
    }
}

impl Module for Embedding {
    /// `input`: ids of any shape (`I64` or `I32`); the result has shape
    /// `input.shape() + [embedding_dim]`.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] for an id outside `0..num_embeddings`;
    /// [`Error::UnsupportedDType`] for non-integer ids.
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        Tensor::embedding(&self.weight, input)
    }

    fn visit(&self, v: &mut dyn Visitor) {
        v.param("weight", &self.weight);
    }
}
