//! Training checkpoints: named tensors plus string metadata in one
//! safetensors file, written atomically.
//!
//! A thin layer over [`crate::safetensors_io`]: [`save`] goes through its
//! atomic writer (temporary file in the same directory, fsync, rename,
//! directory fsync), so a crash mid-save leaves the previous checkpoint
//! intact; [`load`] maps the file and returns tensors that own their storage
//! (deep copies of the mapped, read-only views), ready for
//! [`load_state_dict`](kael_core::nn::Module::load_state_dict) or for
//! optimizer state that is updated in place.
//!
//! ```
//! use kael_core::{Device, Tensor};
//! use kael_host::checkpoint;
//! let dev = Device::cpu();
//! let w = Tensor::arange(0.0f32, 6.0, &dev)?.reshape(&[2, 3])?;
//! let ids = Tensor::from_slice(&[3i64, -1], &[2], &dev)?;
//! let path = std::env::temp_dir().join(format!("kael-checkpoint-doctest-{}.safetensors", std::process::id()));
//! checkpoint::save(&path, &[("w".into(), w.t()?), ("ids".into(), ids)], &[("step", "7")])?;
//! let ck = checkpoint::load(&path, &dev)?;
//! assert_eq!(ck.metadata.get("step").map(String::as_str), Some("7"));
//! let (_, w2) = ck.tensors.iter().find(|(n, _)| n == "w").unwrap();
//! assert_eq!((w2.shape(), w2.to_vec::<f32>()?), (&[3, 2][..], vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]));
//! # std::fs::remove_file(&path)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::Result;
use crate::safetensors_io;
use kael_core::{Device, Tensor};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Tensors and metadata read back by [`load`].
#[derive(Debug)]
pub struct Checkpoint {
    /// `(name, tensor)` pairs, sorted by name; each tensor is contiguous,
    /// owns its storage and does not require grad.
    pub tensors: Vec<(String, Tensor)>,
    /// The string metadata stored with [`save`].
    pub metadata: HashMap<String, String>,
}

/// Writes `tensors` (any layout, any device) and `metadata` to `path`,
/// atomically.
///
/// # Errors
/// I/O errors naming the path; duplicate names; tensor-op errors (device
/// transfer, allocation). On error the previous file at `path` is intact.
pub fn save(path: &Path, tensors: &[(String, Tensor)], metadata: &[(&str, &str)]) -> Result<()> {
    let refs: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let meta: BTreeMap<String, String> = metadata
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    safetensors_io::save_with_metadata(path, &refs, &meta)
}

/// Reads every tensor of the checkpoint at `path` onto `device`.
///
/// # Errors
/// I/O errors, a malformed file, unsupported dtypes, allocation on `device`.
pub fn load(path: &Path, device: &Device) -> Result<Checkpoint> {
    let file = safetensors_io::load_on(path, device)?;
    let metadata: HashMap<String, String> = file
        .metadata()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut tensors = Vec::with_capacity(file.len());
    for (name, t) in file.into_tensors() {
        let owned = kael_core::no_grad(|| t.deep_clone())?;
        tensors.push((name, owned));
    }
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Checkpoint { tensors, metadata })
}
