//! Multi-head causal self-attention.

use super::dropout::Dropout;
use super::linear::Linear;
use super::module::{Module, Visitor};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{ErrShape, Error, Result};
use crate::rng::Rng;
use crate::tensor::Tensor;

/// GPT-style masked multi-head self-attention over `[B, T, C]`.
///
/// ```text
/// q, k, v = split(c_attn(x))                  each [B, H, T, C/H]
/// a       = softmax((q / √(C/H)) kᵀ + mask)   mask: -inf where key > query
/// y       = c_proj(merge_heads(dropout(a) v)) then dropout
/// ```
///
/// `c_attn` is `Linear(C, 3C)` (queries, keys, values in that order along
/// the output), `c_proj` is `Linear(C, C)`: GPT-2's layout and names.
/// Both use [`Linear`]'s PyTorch default init (GPT-2 itself uses
/// `N(0, 0.02)`; load its weights to get those).
///
/// ```
/// use kael_core::nn::{CausalSelfAttention, Module};
/// use kael_core::{DType, Device, Rng, Tensor};
/// let dev = Device::cpu();
/// let attn = CausalSelfAttention::new(16, 4, 0.0, &dev, &mut Rng::new(0))?;
/// let y = attn.forward(&Tensor::zeros(&[2, 5, 16], DType::F32, &dev)?)?;
/// assert_eq!(y.shape(), &[2, 5, 16]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub struct CausalSelfAttention {
    /// `Linear(C, 3C)`: the query, key and value projections.
    pub c_attn: Linear,
    /// `Linear(C, C)`: the output projection.
    pub c_proj: Linear,
    /// Dropout on the attention weights.
    pub attn_dropout: Dropout,
    /// Dropout on the output.
    pub resid_dropout: Dropout,
    n_head: usize,
}

impl CausalSelfAttention {
    /// Attention over `n_embd` channels split into `n_head` heads, with
    /// biases and dropout probability `dropout` on both dropout layers.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless `n_head > 0` divides `n_embd`, or
    /// for a bad dropout probability; [`Error::OutOfMemory`].
    ///
    /// ```
    /// use kael_core::nn::CausalSelfAttention;
    /// use kael_core::{Device, Rng};
    /// assert!(CausalSelfAttention::new(10, 3, 0.0, &Device::cpu(), &mut Rng::new(0)).is_err());
    /// ```
    pub fn new(
        n_embd: usize,
        n_head: usize,
        dropout: f64,
        device: &Device,
        rng: &mut Rng,
    ) -> Result<Self> {
        Self::new_in(n_embd, n_head, dropout, DType::F32, device, rng)
    }

    /// [`CausalSelfAttention::new`] with parameters of `dtype`.
    ///
    /// # Errors
    /// As [`CausalSelfAttention::new`]; [`Error::UnsupportedDType`] for
    /// non-float dtypes.
    ///
    /// ```
    /// use kael_core::nn::CausalSelfAttention;
    /// use kael_core::{DType, Device, Rng};
    /// let a = CausalSelfAttention::new_in(8, 2, 0.0, DType::F64, &Device::cpu(), &mut Rng::new(0))?;
    /// assert_eq!(a.c_attn.weight.dtype(), DType::F64);
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
        if n_head == 0 || n_embd % n_head != 0 {
            return Err(Error::InvalidArgument {
                op: "CausalSelfAttention",
                reason: "n_head must be positive and divide n_embd",
            });
        }
        let three = n_embd.checked_mul(3).ok_or(Error::InvalidArgument {
            op: "CausalSelfAttention",
            reason: "3 * n_embd overflows usize; use a smaller n_embd",
        })?;
        Ok(Self {
            c_attn: Linear::new_in(n_embd, three, true, dtype, device, rng)?,
            c_proj: Linear::new_in(n_embd, n_embd, true, dtype, device, rng)?,
            attn_dropout: Dropout::new(dropout, rng)?,
            resid_dropout: Dropout::new(dropout, rng)?,
            n_head,
        })
    }

    /// The number of heads.
    pub fn n_head(&self) -> usize {
        self.n_head
    }
}

impl Module for CausalSelfAttention {
    /// `input` is `[B, T, C]` with `C = n_embd`; the result has its shape.
    /// Position `t` sees positions `0..=t` only.
    ///
    /// # Errors
    /// [`Error::RankMismatch`] unless rank 3; [`Error::ShapeMismatch`] when
    /// `C` is not `n_embd`; dtype or device mismatch with the weights.
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        const OP: &str = "CausalSelfAttention";
        if input.rank() != 3 {
            return Err(Error::RankMismatch {
                op: OP,
                expected: "3 ([batch, time, channels])",
                got: input.rank(),
            });
        }
        let (b, t, c) = (input.shape()[0], input.shape()[1], input.shape()[2]);
        if c != self.c_proj.out_features() {
            return Err(Error::ShapeMismatch {
                op: OP,
                expected: ErrShape::of(&[b, t, self.c_proj.out_features()]),
                got: ErrShape::of(input.shape()),
            });
        }
        let (h, hd) = (self.n_head, c / self.n_head);
        // [B, T, 3C] -> [B, T, 3, H, hd] -> [3, B, H, T, hd]
        let qkv = self
            .c_attn
            .forward(input)?
            .reshape(&[b, t, 3, h, hd])?
            .permute(&[2, 0, 3, 1, 4])?;
        let (q, k, v) = (qkv.select(0, 0)?, qkv.select(0, 1)?, qkv.select(0, 2)?);
        // softmax(q kᵀ / √hd + causal mask), as scaled_dot_product_attention.
        let att = super::functional::attention_weights(OP, &q, &k, None, None, true, None)?;
        let att = self.attn_dropout.forward(&att)?;
        // [B, H, T, hd] -> [B, T, H, hd] -> [B, T, C]
        let y = att.matmul(&v)?.transpose(1, 2)?.reshape(&[b, t, c])?;
        self.resid_dropout.forward(&self.c_proj.forward(&y)?)
    }

    fn visit(&self, v: &mut dyn Visitor) {
        v.module("c_attn", &self.c_attn);
        v.module("c_proj", &self.c_proj);
        v.module("attn_dropout", &self.attn_dropout);
        v.module("resid_dropout", &self.resid_dropout);
    }
}
