//! Token sampling (greedy, temperature, top-k) and the generation loop.

use super::model::{Gpt2, KvCache};
use crate::{Error, Result};
use kael_core::{DType, Rng};

/// Picks the next token from a row of logits.
///
/// * `temperature == 0`: greedy (the first most likely token).
/// * otherwise: samples from `softmax(logits / temperature)`, restricted to
///   the `top_k` most likely tokens when `top_k > 0`.
///
/// Seeded: the same seed and logits give the same tokens.
#[derive(Debug, Clone)]
pub struct Sampler {
    temperature: f64,
    top_k: usize,
    rng: Rng,
}

impl Sampler {
    /// A sampler; `temperature` 0 means greedy, `top_k` 0 means no limit.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a negative or non-finite temperature.
    pub fn new(temperature: f64, top_k: usize, seed: u64) -> Result<Self> {
        if !(temperature.is_finite() && temperature >= 0.0) {
            return Err(Error::InvalidArgument {
                op: "Sampler::new",
                reason: format!(
                    "temperature {temperature} is not usable; pass a finite number >= 0 \
                     (0 for greedy decoding)"
                ),
            });
        }
        Ok(Self {
            temperature,
            top_k,
            rng: Rng::new(seed),
        })
    }

    /// Greedy decoding.
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            rng: Rng::new(0),
        }
    }

    /// The next token for `logits` (one score per vocabulary entry).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for empty logits or logits that are all
    /// NaN.
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32> {
        let bad = |reason: &str| Error::InvalidArgument {
            op: "Sampler::sample",
            reason: reason.into(),
        };
        // Candidates (index, logit), NaN dropped, most likely first.
        let mut cand: Vec<(usize, f64)> = logits
            .iter()
            .enumerate()
            .filter(|(_, l)| !l.is_nan())
            .map(|(i, &l)| (i, f64::from(l)))
            .collect();
        if cand.is_empty() {
            return Err(bad(
                "no usable logits (empty or all NaN); check the model's weights",
            ));
        }
        if self.temperature == 0.0 {
            let mut best = cand[0];
            for &c in &cand[1..] {
                if c.1 > best.1 {
                    best = c;
                }
            }
            return to_id(best.0);
        }
        cand.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if self.top_k > 0 {
            cand.truncate(self.top_k);
        }
        let max = cand[0].1;
        let weights: Vec<f64> = cand
            .iter()
            .map(|&(_, l)| ((l - max) / self.temperature).exp())
            .collect();
        let total: f64 = weights.iter().sum();
        let mut u = self.rng.uniform() * total;
        for (&(i, _), w) in cand.iter().zip(&weights) {
            if u < *w {
                return to_id(i);
            }
            u -= w;
        }
        to_id(cand[cand.len() - 1].0)
    }
}

fn to_id(i: usize) -> Result<u32> {
    u32::try_from(i).map_err(|_| Error::InvalidArgument {
        op: "Sampler::sample",
        reason: format!("token index {i} does not fit a u32 token id"),
    })
}

/// How [`generate`] runs the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decode {
    /// Keys and values of earlier positions are kept ([`KvCache`]): one new
    /// position per step.
    Cached,
    /// The whole sequence is run again every step (the reference for the
    /// cached path).
    Uncached,
}

/// Generates up to `max_new` tokens after `prompt`, calling `on_token`
/// with each as soon as it is chosen; returns the new tokens. Runs under
/// [`kael_core::no_grad`].
///
/// # Errors
/// [`Error::InvalidArgument`] for an empty prompt or when `prompt.len() +
/// max_new` exceeds the model's `n_positions`; the model's and
/// `on_token`'s errors.
pub fn generate(
    model: &Gpt2,
    prompt: &[u32],
    max_new: usize,
    sampler: &mut Sampler,
    decode: Decode,
    mut on_token: impl FnMut(u32) -> Result<()>,
) -> Result<Vec<u32>> {
    let ctx = model.config().n_positions;
    if prompt.is_empty() {
        return Err(Error::InvalidArgument {
            op: "generate",
            reason: "the prompt has no tokens; pass at least one (GPT-2 models often start \
                     from <|endoftext|>, id 50256)"
                .into(),
        });
    }
    if prompt.len() + max_new > ctx {
        return Err(Error::InvalidArgument {
            op: "generate",
            reason: format!(
                "{} prompt tokens + {max_new} new tokens exceed the model's context of {ctx} \
                 positions; ask for at most {} new tokens or shorten the prompt",
                prompt.len(),
                ctx.saturating_sub(prompt.len())
            ),
        });
    }
    kael_core::no_grad(|| {
        let mut cache = KvCache::new();
        let mut seq = prompt.to_vec();
        let mut out = Vec::with_capacity(max_new);
        for step in 0..max_new {
            let logits = match decode {
                Decode::Cached if step == 0 => model.next_logits(&seq, &mut cache)?,
                Decode::Cached => model.next_logits(&seq[seq.len() - 1..], &mut cache)?,
                Decode::Uncached => model.next_logits(&seq, &mut KvCache::new())?,
            };
            let logits = logits.to_dtype(DType::F32)?.to_vec::<f32>()?;
            let id = sampler.sample(&logits)?;
            seq.push(id);
            out.push(id);
            on_token(id)?;
        }
        Ok(out)
    })
}
