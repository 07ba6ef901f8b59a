//! A pre-norm transformer block (GPT-2's).

use super::activation::{Gelu, GeluApproximation};
use super::attention::CausalSelfAttention;
use super::dropout::Dropout;
use super::layer_norm::LayerNorm;
use super::linear::Linear;
use super::module::{Module, Visitor};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::rng::Rng;
use crate::tensor::Tensor;

/// The feed-forward half of a block: `dropout(c_proj(gelu(c_fc(x))))` with
/// `c_fc: Linear(C, 4C)`, `c_proj: Linear(4C, C)` and the tanh GELU
/// (GPT-2's layout and names).
///
/// ```
/// use kael_core::nn::{Mlp, Module};
/// use kael_core::{DType, Device, Rng, Tensor};
/// let dev = Device::cpu();
/// let mlp = Mlp::new(8, 0.0, &dev, &mut Rng::new(0))?;
/// assert_eq!(mlp.c_fc.weight.shape(), &[32, 8]);
/// assert_eq!(mlp.forward(&Tensor::zeros(&[3, 8], DType::F32, &dev)?)?.shape(), &[3, 8]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub struct Mlp {
    /// `Linear(C, 4C)`.
    pub c_fc: Linear,
    /// `Linear(4C, C)`.
    pub c_proj: Linear,
    /// The activation between them.
    pub act: Gelu,
    /// Dropout on the output.
    pub dropout: Dropout,
}

impl Mlp {
    /// A feed-forward block over `n_embd` channels.
    ///
    /// # Errors
    /// A bad dropout probability; `4 * n_embd` overflowing usize;
    /// [`crate::Error::OutOfMemory`].
    pub fn new(n_embd: usize, dropout: f64, device: &Device, rng: &mut Rng) -> Result<Self> {
        Self::new_in(n_embd, dropout, DType::F32, device, rng)
    }

    /// [`Mlp::new`] with parameters of `dtype`.
    ///
    /// # Errors
    /// As [`Mlp::new`]; non-float dtypes.
    ///
    /// ```
    /// use kael_core::nn::Mlp;
    /// use kael_core::{DType, Device, Rng};
    /// let m = Mlp::new_in(4, 0.0, DType::F64, &Device::cpu(), &mut Rng::new(0))?;
    /// assert_eq!(m.c_fc.weight.shape(), &[16, 4]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn new_in(
        n_embd: usize,
        dropout: f64,
        dtype: DType,
        device: &Device,
        rng: &mut Rng,
    ) -> Result<Self> {
        let four = n_embd.checked_mul(4).ok_or(Error::InvalidArgument {
            op: "Mlp",
            reason: "4 * n_embd overflows usize; use a smaller n_embd",
        })?;
        Ok(Self {
            c_fc: Linear::new_in(n_embd, four, true, dtype, device, rng)?,
            c_proj: Linear::new_in(four, n_embd, true, dtype, device, rng)?,
            act: Gelu {
                approximate: GeluApproximation::Tanh,
            },
            dropout: Dropout::new(dropout, rng)?,
        })
    }
}

impl Module for Mlp {
    /// `input` is `[*, C]`; the result has its shape.
    ///
    /// # Errors
    /// As [`Linear`]'s forward.
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        let h = self.act.forward(&self.c_fc.forward(input)?)?;
        self.dropout.forward(&self.c_proj.forward(&h)?)
    }

    fn visit(&self, v: &mut dyn Visitor) {
        v.module("c_fc", &self.c_fc);
        v.module("c_proj", &self.c_proj);
        v.module("dropout", &self.dropout);
    }
}

/// `x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))`: a pre-norm GPT-2 block
/// (LayerNorm eps `1e-5`, biases everywhere, tanh GELU).
///
/// ```
/// use kael_core::nn::{Module, TransformerBlock};
/// use kael_core::{DType, Device, Rng, Tensor};
/// let dev = Device::cpu();
/// let block = TransformerBlock::new(16, 2, 0.0, &dev, &mut Rng::new(0))?;
/// assert_eq!(block.num_parameters(), 12 * 16 * 16 + 13 * 16);
/// let y = block.forward(&Tensor::zeros(&[1, 4, 16], DType::F32, &dev)?)?;
/// assert_eq!(y.shape(), &[1, 4, 16]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub struct TransformerBlock {
    /// Norm before attention.
    pub ln_1: LayerNorm,
    /// Causal self-attention.
    pub attn: CausalSelfAttention,
    /// Norm before the feed-forward half.
    pub ln_2: LayerNorm,
    /// The feed-forward half.
    pub mlp: Mlp,
}

impl TransformerBlock {
    /// A block over `n_embd` channels with `n_head` heads and dropout
    /// probability `dropout`.
    ///
    /// # Errors
    /// As [`CausalSelfAttention::new`].
    pub fn new(
        n_embd: usize,
        n_head: usize,
        dropout: f64,
        device: &Device,
        rng: &mut Rng,
    ) -> Result<Self> {
        Self::new_in(n_embd, n_head, dropout, DType::F32, device, rng)
    }

    /// [`TransformerBlock::new`] with parameters of `dtype`.
    ///
    /// # Errors
    /// As [`CausalSelfAttention::new_in`].
    ///
    /// ```
    /// use kael_core::nn::TransformerBlock;
    /// use kael_core::{DType, Device, Rng};
    /// let b = TransformerBlock::new_in(8, 2, 0.0, DType::F64, &Device::cpu(), &mut Rng::new(0))?;
    /// assert_eq!(b.ln_1.weight.as_ref().map(|w| w.dtype()), Some(DType::F64));
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn new_in(
        n_embd: usize,
        n_head: usize,
        dropout: f64,
        dtype: DType,
        device: &Device,
        rng: &mut Rng,
    ) -> Result<Self> {
        Ok(Self {
            ln_1: LayerNorm::new_in(&[n_embd], 1e-5, true, dtype, device)?,
            attn: CausalSelfAttention::new_in(n_embd, n_head, dropout, dtype, device, rng)?,
            ln_2: LayerNorm::new_in(&[n_embd], 1e-5, true, dtype, device)?,
            mlp: Mlp::new_in(n_embd, dropout, dtype, device, rng)?,
        })
    }
}

impl Module for TransformerBlock {
    /// `input` is `[B, T, C]`; the result has its shape.
    ///
    /// # Errors
    /// As [`CausalSelfAttention`]'s forward.
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        let x = input.add(&self.attn.forward(&self.ln_1.forward(input)?)?)?;
        x.add(&self.mlp.forward(&self.ln_2.forward(&x)?)?)
    }

    fn visit(&self, v: &mut dyn Visitor) {
        v.module("ln_1", &self.ln_1);
        v.module("attn", &self.attn);
        v.module("ln_2", &self.ln_2);
        v.module("mlp", &self.mlp);
    }
}
