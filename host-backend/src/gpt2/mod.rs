//! GPT-2 inference in the Hugging Face layout.
//!
//! * [`Gpt2Config`]: `config.json` (`n_embd`, `n_head`, `n_layer`,
//!   `n_positions`/`n_ctx`, `vocab_size`, `layer_norm_epsilon`).
//! * [`Gpt2`]: the model, loaded zero-copy from `model.safetensors`
//!   ([`Gpt2::load`]) or random ([`Gpt2::random`]); causal attention with a
//!   [`KvCache`]; tied output embedding.
//! * [`generate`] with a [`Sampler`] (greedy, temperature, top-k, seeded).
//!
//! Built from the core's layers and tensor ops, so it runs on any device.
//!
//! ```
//! use kael_host::gpt2::{generate, Decode, Gpt2, Gpt2Config, Sampler};
//! use kael_core::{Device, Rng};
//! let config = Gpt2Config { n_embd: 16, n_head: 2, n_layer: 1, n_positions: 8,
//!                           vocab_size: 10, ..Gpt2Config::gpt2_124m() };
//! let model = Gpt2::random(config, &Device::cpu(), &mut Rng::new(0))?;
//! assert_eq!(model.forward(&[1, 2, 3])?.shape(), &[3, 10]);
//! let ids = generate(&model, &[1, 2], 4, &mut Sampler::greedy(), Decode::Cached, |_| Ok(()))?;
//! assert_eq!(ids.len(), 4);
//! # Ok::<(), kael_host::Error>(())
//! ```

mod config;
mod generate;
mod model;

pub use config::{Activation, Gpt2Config};
pub use generate::{Decode, Sampler, generate};
pub use model::{Gpt2, Gpt2Block, KvCache, LoadOptions};
