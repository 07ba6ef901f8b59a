//! Minimal safetensors checkpoints: save named tensors, load them back.
//!
//! [`save`] writes `(name, tensor)` pairs (e.g. a module's
//! [`state_dict`](kael_core::nn::Module::state_dict)) plus optional string
//! metadata into one `.safetensors` file; [`load`] reads every tensor back
//! into fresh contiguous tensors on a device, ready for
//! [`load_state_dict`](kael_core::nn::Module::load_state_dict). The file is
//! read whole into memory (memory-mapped, zero-copy loading is a later
//! addition). Bytes are stored little-endian, as the format requires; kael's
//! host targets are little-endian, and on a big-endian host both functions
//! refuse to run rather than write wrong bytes.
//!
//! ```
//! use kael_core::{DType, Device, Tensor};
//! use kael_host::checkpoint;
//! let dev = Device::cpu();
//! let w = Tensor::arange(0.0f32, 6.0, &dev)?.reshape(&[2, 3])?;
//! let ids = Tensor::from_slice(&[3i64, -1], &[2], &dev)?;
//! let path = std::env::temp_dir().join("kael-checkpoint-doctest.safetensors");
//! checkpoint::save(&path, &[("w".into(), w.t()?), ("ids".into(), ids)], &[("step", "7")])?;
//! let ck = checkpoint::load(&path, &dev)?;
//! assert_eq!(ck.metadata.get("step").map(String::as_str), Some("7"));
//! let (_, w2) = ck.tensors.iter().find(|(n, _)| n == "w").unwrap();
//! assert_eq!((w2.shape(), w2.to_vec::<f32>()?), (&[3, 2][..], vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]));
//! # std::fs::remove_file(&path)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use kael_core::shared::Shared;
use kael_core::{DType, Device, Layout, Storage, Tensor};
use safetensors::tensor::{Dtype, SafeTensors, TensorView, View};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::path::Path;

/// What can go wrong saving or loading a checkpoint.
#[derive(Debug)]
pub enum CheckpointError {
    /// Reading or writing the file failed.
    Io(std::io::Error),
    /// The file is not valid safetensors (or could not be encoded).
    Format(safetensors::SafeTensorError),
    /// A tensor operation failed (device transfer, allocation).
    Tensor(kael_core::Error),
    /// A safetensors dtype that kael has no equivalent for.
    UnsupportedDType {
        /// The tensor's name.
        name: String,
        /// The dtype in the file.
        dtype: String,
    },
    /// This host is big-endian; safetensors bytes are little-endian.
    BigEndianHost,
}

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "checkpoint file: {e}; check the path and permissions"),
            Self::Format(e) => write!(
                f,
                "checkpoint: not a valid safetensors file ({e}); re-save it with checkpoint::save"
            ),
            Self::Tensor(e) => write!(f, "checkpoint: {e}"),
            Self::UnsupportedDType { name, dtype } => write!(
                f,
                "checkpoint: tensor {name:?} has dtype {dtype}, which kael does not support; convert it to F32, F64, F16, BF16, I64, I32, U8 or BOOL"
            ),
            Self::BigEndianHost => write!(
                f,
                "checkpoint: safetensors stores little-endian bytes and this host is big-endian; convert on a little-endian machine"
            ),
        }
    }
}

impl std::error::Error for CheckpointError {}

impl From<std::io::Error> for CheckpointError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

impl From<safetensors::SafeTensorError> for CheckpointError {
    fn from(e: safetensors::SafeTensorError) -> Self {
        Self::Format(e)
    }
}

impl From<kael_core::Error> for CheckpointError {
    fn from(e: kael_core::Error) -> Self {
        Self::Tensor(e)
    }
}

/// Tensors and metadata read back by [`load`].
#[derive(Debug)]
pub struct Checkpoint {
    /// `(name, tensor)` pairs, sorted by name; each tensor is contiguous,
    /// owns its storage and does not require grad.
    pub tensors: Vec<(String, Tensor)>,
    /// The string metadata stored with [`save`].
    pub metadata: HashMap<String, String>,
}

/// Writes `tensors` (any layout, any device: copied to contiguous host
/// bytes first) and `metadata` to `path` as safetensors.
///
/// # Errors
/// [`CheckpointError::Io`] when the file cannot be written,
/// [`CheckpointError::Format`] for duplicate names, and tensor-op errors
/// (device transfer, allocation).
pub fn save(
    path: &Path,
    tensors: &[(String, Tensor)],
    metadata: &[(&str, &str)],
) -> Result<(), CheckpointError> {
    check_endian()?;
    let mut views = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        views.push((name.clone(), HostBytes::of(t)?));
    }
    let info = if metadata.is_empty() {
        None
    } else {
        Some(
            metadata
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    };
    safetensors::serialize_to_file(views, info, path)?;
    Ok(())
}

/// Reads every tensor of the safetensors file at `path` onto `device`.
///
/// # Errors
/// [`CheckpointError::Io`], [`CheckpointError::Format`] for a malformed
/// file, [`CheckpointError::UnsupportedDType`] for dtypes kael lacks, and
/// tensor-op errors (allocation on `device`).
pub fn load(path: &Path, device: &Device) -> Result<Checkpoint, CheckpointError> {
    check_endian()?;
    let bytes = std::fs::read(path)?;
    let (_, meta) = SafeTensors::read_metadata(&bytes)?;
    let metadata = meta.metadata().clone().unwrap_or_default();
    let st = SafeTensors::deserialize(&bytes)?;
    let mut tensors = Vec::new();
    for (name, view) in st.tensors() {
        let t = to_tensor(&name, &view, device)?;
        tensors.push((name, t));
    }
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Checkpoint { tensors, metadata })
}

fn check_endian() -> Result<(), CheckpointError> {
    if cfg!(target_endian = "big") {
        Err(CheckpointError::BigEndianHost)
    } else {
        Ok(())
    }
}

fn to_tensor(
    name: &str,
    view: &TensorView<'_>,
    device: &Device,
) -> Result<Tensor, CheckpointError> {
    let dtype = kael_dtype(view.dtype()).ok_or_else(|| CheckpointError::UnsupportedDType {
        name: name.to_string(),
        dtype: format!("{:?}", view.dtype()),
    })?;
    let data = view.data();
    let storage = Storage::zeroed(data.len(), device)?;
    device.backend().write_bytes(&storage, 0, data)?;
    let layout = Layout::contiguous(view.shape())?;
    Ok(Tensor::from_storage(Shared::new(storage), layout, dtype)?)
}

fn kael_dtype(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::I64 => DType::I64,
        Dtype::I32 => DType::I32,
        Dtype::U8 => DType::U8,
        Dtype::BOOL => DType::Bool,
        _ => return None,
    })
}

fn file_dtype(d: DType) -> Dtype {
    match d {
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::I64 => Dtype::I64,
        DType::I32 => Dtype::I32,
        DType::U8 => Dtype::U8,
        DType::Bool => Dtype::BOOL,
    }
}

/// One tensor's elements as contiguous little-endian host bytes.
struct HostBytes {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl HostBytes {
    fn of(t: &Tensor) -> Result<Self, CheckpointError> {
        let t = kael_core::no_grad(|| -> kael_core::Result<Tensor> {
            let host = t.to_device(&Device::cpu())?;
            host.contiguous()
        })?;
        let es = t.element_size();
        let start = t.offset() * es;
        let end = start + t.numel() * es;
        let storage = t.storage();
        let guard = storage.read("checkpoint::save")?;
        let bytes = guard
            .bytes()
            .get(start..end)
            .ok_or(kael_core::Error::OutOfBounds {
                op: "checkpoint::save",
                reach: end,
                storage_len: guard.bytes().len(),
            })?
            .to_vec();
        Ok(Self {
            dtype: file_dtype(t.dtype()),
            shape: t.shape().to_vec(),
            bytes,
        })
    }
}

impl View for HostBytes {
    fn dtype(&self) -> Dtype {
        self.dtype
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.bytes)
    }

    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}
