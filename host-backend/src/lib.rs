//! # kael-host
//!
//! The `std` side of kael. For now it re-exports the core in `sync` mode
//! (`Tensor: Send + Sync`); the threaded CPU backend, CUDA, safetensors and
//! GPT-2 land here in their own issues.

pub use kael_core as core;

pub mod checkpoint;
pub mod gpt2;
pub mod safetensors_io;
pub mod tokenizer;

pub use safetensors_io::error::{Error, Result};

#[cfg(feature = "cuda")]
pub mod cuda;
