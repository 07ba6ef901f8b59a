//! Multi-head causal self-attention.

use super::dropout::Dropout;
use super::linear::Linear;
use super::module::{Module, Visitor};
use crate::device::Device;
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
            c_attn: Linear::new(n_embd, three, true, device, rng)?,
            c_proj: Linear::new(n_embd, n_embd, true, device, rng)?,
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

/// `[t, t]` additive mask: 0 where key `j <=` query `i` (may attend),
/// `-inf` elsewhere. Added to the scores (an add's backward passes the
/// gradient through untouched), so masked weights are exactly 0 after the
/// softmax; the diagonal is always open, so no row is all `-inf`.
fn causal_mask(t: usize, dtype: crate::dtype::DType, device: &Device) -> Result<Tensor> {
    let pos = Tensor::arange(0i64, t as i64, device)?;
    let open = pos.unsqueeze(0)?.le(&pos.unsqueeze(1)?)?;
    let zero = Tensor::full(&[], 0.0, dtype, device)?;
    let neg_inf = Tensor::full(&[], f64::NEG_INFINITY, dtype, device)?;
    open.where_cond(&zero, &neg_inf)
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
        // The 1/√hd scale goes on q ([.., T, hd]) rather than on the scores
        // ([.., T, T]): the same product, fewer elements to scale.
        let q = q.mul_scalar(1.0 / libm::sqrt(hd as f64))?;
        let scores = q.matmul(&k.transpose(-2, -1)?)?;
        let scores = scores.add(&causal_mask(t, scores.dtype(), &input.device())?)?;
        let att = self.attn_dropout.forward(&scores.softmax(-1)?)?;
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
