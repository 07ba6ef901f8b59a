//! A lookup table of learned vectors.

use super::init;
use super::module::{Module, Visitor};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::rng::Rng;
use crate::tensor::Tensor;

/// Rows of `weight` (`[num_embeddings, embedding_dim]`) picked by integer
/// ids (PyTorch's `nn.Embedding`, without `max_norm`; `padding_idx` through
/// [`Embedding::with_padding_idx`]). The computation is
/// [`embedding`](super::functional::embedding).
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
    padding_idx: Option<usize>,
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
        Self::init(
            "Embedding",
            num_embeddings,
            embedding_dim,
            DType::F32,
            device,
            rng,
        )
    }

    /// [`Embedding::new`] with a table of `dtype` (drawn in that dtype
    /// directly).
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for non-float dtypes;
    /// [`Error::OutOfMemory`].
    ///
    /// ```
    /// use kael_core::nn::Embedding;
    /// use kael_core::{DType, Device, Rng};
    /// let emb = Embedding::new_in(10, 3, DType::F64, &Device::cpu(), &mut Rng::new(3))?;
    /// assert_eq!(emb.weight.dtype(), DType::F64);
    /// assert!(Embedding::new_in(10, 3, DType::I64, &Device::cpu(), &mut Rng::new(3)).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn new_in(
        num_embeddings: usize,
        embedding_dim: usize,
        dtype: DType,
        device: &Device,
        rng: &mut Rng,
    ) -> Result<Self> {
        Self::init(
            "Embedding::new_in",
            num_embeddings,
            embedding_dim,
            dtype,
            device,
            rng,
        )
    }

    /// The constructors, naming `op` in their errors.
    fn init(
        op: &'static str,
        num_embeddings: usize,
        embedding_dim: usize,
        dtype: DType,
        device: &Device,
        rng: &mut Rng,
    ) -> Result<Self> {
        dtype.require_float(op)?;
        crate::shape::checked_numel(op, &[num_embeddings, embedding_dim])?;
        let weight = init::normal(
            &[num_embeddings, embedding_dim],
            0.0,
            1.0,
            dtype,
            device,
            rng,
        )?
        .requires_grad_(true)?;
        Ok(Self {
            weight,
            padding_idx: None,
        })
    }

    /// The same table with `padding_idx`: positions that pick that row
    /// pass it no gradient (its gradient is always zero, as PyTorch). The
    /// row keeps its values (as PyTorch's `Embedding.from_pretrained`;
    /// `nn.Embedding(padding_idx=…)` also zeroes it at construction: do
    /// that with `weight.select(0, idx)?.fill_(0.0)` under `no_grad`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless `padding_idx < num_embeddings`.
    ///
    /// ```
    /// use kael_core::nn::{Embedding, Module};
    /// use kael_core::{Device, Rng, Tensor};
    /// let dev = Device::cpu();
    /// let emb = Embedding::new(4, 2, &dev, &mut Rng::new(0))?.with_padding_idx(0)?;
    /// let ids = Tensor::from_slice(&[0i64, 1, 0], &[3], &dev)?;
    /// emb.forward(&ids)?.sum_all()?.backward()?;
    /// assert_eq!(emb.weight.grad().unwrap().to_vec::<f32>()?[..4], [0.0, 0.0, 1.0, 1.0]);
    /// assert!(emb.with_padding_idx(4).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn with_padding_idx(self, padding_idx: usize) -> Result<Self> {
        if padding_idx >= self.num_embeddings() {
            return Err(Error::InvalidArgument {
                op: "Embedding::with_padding_idx",
                reason: "padding_idx must be a row of the table (below num_embeddings); pass a valid row",
            });
        }
        Ok(Self {
            padding_idx: Some(padding_idx),
            ..self
        })
    }

    /// The padding row, if any.
    ///
    /// ```
    /// use kael_core::nn::Embedding;
    /// use kael_core::{Device, Rng};
    /// let emb = Embedding::new(4, 2, &Device::cpu(), &mut Rng::new(0))?;
    /// assert_eq!(emb.padding_idx(), None);
    /// assert_eq!(emb.with_padding_idx(1)?.padding_idx(), Some(1));
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn padding_idx(&self) -> Option<usize> {
        self.padding_idx
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
        Ok(Self {
            weight,
            padding_idx: None,
        })
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
        super::functional::embedding_op("Embedding", input, &self.weight, self.padding_idx)
    }

    fn visit(&self, v: &mut dyn Visitor) {
        v.param("weight", &self.weight);
    }
}
