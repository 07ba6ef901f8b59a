//! A small character-level GPT built from kael's nn layers.

use kael_core::nn::{Embedding, LayerNorm, Linear, Module, TransformerBlock, Visitor, init};
use kael_core::{DType, Device, Result, Rng, Tensor, no_grad};

/// Model size.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub vocab: usize,
    pub context: usize,
    pub layers: usize,
    pub dim: usize,
    pub heads: usize,
}

/// Token + position embeddings, `layers` pre-norm blocks, a final norm and
/// an output layer whose weight *is* the token embedding (weight tying: one
/// tensor under two names, listed once by `named_parameters`).
pub struct CharGpt {
    pub cfg: Config,
    wte: Embedding,
    wpe: Embedding,
    blocks: Vec<TransformerBlock>,
    ln_f: LayerNorm,
    lm_head: Linear,
}

impl CharGpt {
    /// A model initialised as GPT-2 is: weights `N(0, 0.02)`, biases 0, the
    /// residual projections `N(0, 0.02 / √(2 · layers))`, norms at 1 / 0.
    pub fn new(cfg: Config, device: &Device, rng: &mut Rng) -> Result<Self> {
        let wte = Embedding::new(cfg.vocab, cfg.dim, device, rng)?;
        let wpe = Embedding::new(cfg.context, cfg.dim, device, rng)?;
        let blocks = (0..cfg.layers)
            .map(|_| TransformerBlock::new(cfg.dim, cfg.heads, 0.0, device, rng))
            .collect::<Result<Vec<_>>>()?;
        let ln_f = LayerNorm::new(&[cfg.dim], 1e-5, true, device)?;
        let lm_head = Linear::from_weights(wte.weight.clone(), None)?;
        let model = Self {
            cfg,
            wte,
            wpe,
            blocks,
            ln_f,
            lm_head,
        };
        model.gpt2_init(rng)?;
        Ok(model)
    }

    fn gpt2_init(&self, rng: &mut Rng) -> Result<()> {
        let resid_std = 0.02 / ((2 * self.cfg.layers) as f64).sqrt();
        no_grad(|| {
            for (name, p) in self.named_parameters() {
                if name.contains("ln_") {
                    continue; // LayerNorm weights stay 1, biases 0
                }
                let dev = p.device();
                let fresh = if name.ends_with("c_proj.weight") {
                    init::normal(p.shape(), 0.0, resid_std, DType::F32, &dev, rng)?
                } else if name.ends_with(".bias") {
                    Tensor::zeros(p.shape(), DType::F32, &dev)?
                } else {
                    init::normal(p.shape(), 0.0, 0.02, DType::F32, &dev, rng)?
                };
                p.copy_(&fresh)?;
            }
            Ok(())
        })
    }
}

impl Module for CharGpt {
    /// `ids`: `[B, T]` I64 with `T <= context`; the result: logits `[B, T, vocab]`.
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let t = ids.shape()[1];
        let pos = Tensor::arange(0i64, t as i64, &ids.device())?;
        let mut x = self.wte.forward(ids)?.add(&self.wpe.forward(&pos)?)?;
        for block in &self.blocks {
            x = block.forward(&x)?;
        }
        self.lm_head.forward(&self.ln_f.forward(&x)?)
    }

    fn visit(&self, v: &mut dyn Visitor) {
        v.module("wte", &self.wte);
        v.module("wpe", &self.wpe);
        for (i, block) in self.blocks.iter().enumerate() {
            v.module(&format!("h.{i}"), block);
        }
        v.module("ln_f", &self.ln_f);
        v.module("lm_head", &self.lm_head);
    }
}
