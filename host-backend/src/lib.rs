//! # kael-host
//!
//! The `std` side of kael: it re-exports the core in `sync` mode
//! (`Tensor: Send + Sync`, per-thread grad mode) and adds zero-copy
//! safetensors loading ([`safetensors_io`]), checkpoints, the GPT-2 model
//! ([`gpt2`]) and tokenizer ([`tokenizer`]), the `kael` and `kael-train`
//! binaries, the threaded CPU backend ([`cpu_threaded`]), and (feature
//! `cuda`) the CUDA backend.

pub use kael_core as core;

pub mod checkpoint;
pub mod cpu_threaded;
pub mod gpt2;
pub mod safetensors_io;
pub mod tokenizer;

pub use safetensors_io::error::{Error, Result};

#[cfg(feature = "cuda")]
pub mod cuda;
