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

/// The prefix of the model's entries in a training checkpoint.
const MODEL: &str = "model.";
/// The prefix of the optimizer's entries.
const OPTIM: &str = "optim.";

/// Saves a model's [`state_dict`](kael_core::nn::Module::state_dict), an
/// optimizer's [`state_dict`](kael_core::optim::Optimizer::state_dict) and
/// `metadata` in one checkpoint at `path`, atomically: everything needed to
/// resume training exactly (NOTE [Optimizer state dicts]).
///
/// # Errors
/// As [`save`].
///
/// ```
/// use kael_core::nn::{Linear, Module};
/// use kael_core::optim::{Adam, AdamConfig, Optimizer};
/// use kael_core::{Device, Rng, Tensor};
/// use kael_host::checkpoint;
/// let dev = Device::cpu();
/// let model = Linear::new(3, 2, true, &dev, &mut Rng::new(0))?;
/// let mut opt = Adam::new(model.parameters(), AdamConfig::default())?;
/// model.forward(&Tensor::ones(&[1, 3], kael_core::DType::F32, &dev)?)?.sum_all()?.backward()?;
/// opt.step()?;
/// let path = std::env::temp_dir().join(format!("kael-training-doctest-{}.safetensors", std::process::id()));
/// checkpoint::save_training(&path, &model, &opt, &[("epoch", "1")])?;
/// let model2 = Linear::new(3, 2, true, &dev, &mut Rng::new(9))?;
/// let mut opt2 = Adam::new(model2.parameters(), AdamConfig::default())?;
/// let meta = checkpoint::load_training(&path, &model2, &mut opt2, &dev)?;
/// assert_eq!(meta.get("epoch").map(String::as_str), Some("1"));
/// assert_eq!(model2.weight.to_vec::<f32>()?, model.weight.to_vec::<f32>()?);
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn save_training(
    path: &Path,
    model: &(impl kael_core::nn::Module + ?Sized),
    optimizer: &(impl kael_core::optim::Optimizer + ?Sized),
    metadata: &[(&str, &str)],
) -> Result<()> {
    let mut tensors: Vec<(String, Tensor)> = model
        .state_dict()
        .into_iter()
        .map(|(n, t)| (format!("{MODEL}{n}"), t))
        .collect();
    for (n, t) in optimizer.state_dict()? {
        tensors.push((format!("{OPTIM}{n}"), t));
    }
    save(path, &tensors, metadata)
}

/// Loads a checkpoint written by [`save_training`] into `model` and
/// `optimizer` (built over the same architecture, the optimizer over
/// `model.parameters()`), reading tensors onto `device`, and returns its
/// metadata. All or nothing: the optimizer's state is checked and loaded
/// first, then the model's; if the model refuses its entries the
/// optimizer's previous state is put back.
///
/// # Errors
/// As [`load`]; the errors of the two `load_state_dict`s (which name the
/// missing, unexpected and mismatched entries).
pub fn load_training(
    path: &Path,
    model: &(impl kael_core::nn::Module + ?Sized),
    optimizer: &mut (impl kael_core::optim::Optimizer + ?Sized),
    device: &Device,
) -> Result<HashMap<String, String>> {
    let ck = load(path, device)?;
    let (mut model_entries, mut optim_entries) = (Vec::new(), Vec::new());
    for (n, t) in ck.tensors {
        if let Some(rest) = n.strip_prefix(MODEL) {
            model_entries.push((rest.to_string(), t));
        } else if let Some(rest) = n.strip_prefix(OPTIM) {
            optim_entries.push((rest.to_string(), t));
        } else {
            model_entries.push((n, t)); // reported as unexpected by the model
        }
    }
    let before = optimizer.state_dict()?;
    optimizer.load_state_dict(&optim_entries)?;
    if let Err(e) = model.load_state_dict(&model_entries) {
        optimizer.load_state_dict(&before)?;
        return Err(e.into());
    }
    Ok(ck.metadata)
}
