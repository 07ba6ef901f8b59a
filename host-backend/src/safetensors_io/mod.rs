//! safetensors files: memory-mapped, zero-copy loading and atomic saving.
//!
//! ```no_run
//! use kael_host::safetensors_io::{load, save};
//! use kael_core::{Device, Tensor};
//! let w = Tensor::arange(0.0f32, 6.0, &Device::cpu())?.reshape(&[2, 3])?;
//! save("weights.safetensors", &[("w", &w)])?;
//! let file = load("weights.safetensors")?;
//! let w2 = file.tensor("w")?;
//! assert_eq!(w2.to_vec::<f32>()?, w.to_vec::<f32>()?);
//! assert_eq!(file.stats().zero_copy, 1); // no byte of w2 was copied
//! # Ok::<(), kael_host::Error>(())
//! ```
//!
//! NOTE [Zero-copy loading]
//! [`load`] maps the whole file read-only (`memmap2`) and wraps the map as
//! ONE external [`Storage`] (see `kael_core::storage`): the storage starts at
//! the map's first byte (page-aligned, so the core's 16-byte alignment
//! invariant holds for real) and covers the whole file, header included.
//! Each tensor is a contiguous [`Layout`] over that storage whose element
//! offset is `(8 + json_len + begin) / element_size`: no byte is copied,
//! pages are read from disk only when touched, and the map lives exactly as
//! long as some tensor (or the [`SafeTensorsFile`]) holds the storage.
//!
//! A tensor can be zero-copy only when its absolute byte position in the
//! file is a multiple of its element size (typed access reads the storage
//! through `&[T]`, which needs `T`'s alignment; the map base is page-aligned,
//! so file position and address alignment agree). Files written by the
//! `safetensors` crate, by PyTorch's `safetensors` and by [`save`] always
//! satisfy it: the JSON is padded to a multiple of 8 and tensors are sorted
//! by decreasing element size. Any other tensor is copied into an owned,
//! aligned tensor instead; [`LoadStats`] and
//! [`LoadedTensor::is_zero_copy`] say which path each one took. On a
//! big-endian host every tensor is copied (the format is little-endian).
//!
//! Zero-copy tensors are read-only: in-place writes fail with an error that
//! says to `deep_clone()` first, which is what mapped weights want.
//!
//! NOTE [File stability]
//! A memory map shows the file as it is on disk *now*: if another process
//! truncates or rewrites a file while its tensors are alive, reads may see
//! the new bytes or fault (SIGBUS). This is the usual contract of mapped
//! weights (PyTorch's and NumPy's mmap loading have it too). kael itself
//! never modifies a file in place: [`save`] writes a temporary file and
//! renames it over the target, so a mapped old version keeps its own bytes.
//! Do not edit weight files in place while a program has them loaded.

pub mod error;
mod header;
mod save;

pub use header::{LEN_FIELD, MAX_HEADER_LEN};
pub use save::{save, save_with_metadata};

use error::{Error, Result};
use kael_core::allocator::BUFFER_ALIGN;
use kael_core::shared::Shared;
use kael_core::storage::ExternalOwner;
use kael_core::{DType, Device, Layout, Storage, Tensor, bf16, f16};
use memmap2::Mmap;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

/// How many tensors (and bytes) a load wrapped in place and how many it
/// copied (see NOTE [Zero-copy loading]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadStats {
    /// Tensors that are views of the memory map.
    pub zero_copy: usize,
    /// Tensors that were copied into their own storage.
    pub copied: usize,
    /// Bytes of the zero-copy tensors.
    pub zero_copy_bytes: usize,
    /// Bytes of the copied tensors.
    pub copied_bytes: usize,
}

/// One tensor of a loaded file.
#[derive(Debug, Clone)]
pub struct LoadedTensor {
    name: String,
    tensor: Tensor,
    zero_copy: bool,
    data_offsets: (usize, usize),
}

impl LoadedTensor {
    /// The tensor's name in the file.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tensor.
    pub fn tensor(&self) -> &Tensor {
        &self.tensor
    }

    /// Whether the tensor is a view of the memory map (no copy).
    pub fn is_zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// `[begin, end)` of its bytes, relative to the data section.
    pub fn data_offsets(&self) -> (usize, usize) {
        self.data_offsets
    }

    /// Its size in bytes.
    pub fn nbytes(&self) -> usize {
        self.data_offsets.1 - self.data_offsets.0
    }
}

/// The tensors and metadata of one safetensors file, from [`load`].
///
/// Dropping it does not invalidate the tensors: each zero-copy tensor keeps
/// the memory map alive through its storage.
#[derive(Debug)]
pub struct SafeTensorsFile {
    path: PathBuf,
    file_len: usize,
    json_len: usize,
    tensors: Vec<LoadedTensor>,
    index: HashMap<String, usize>,
    metadata: BTreeMap<String, String>,
    stats: LoadStats,
    mapped: Range<usize>,
}

impl SafeTensorsFile {
    /// The file this was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's size in bytes.
    pub fn file_len(&self) -> usize {
        self.file_len
    }

    /// Length of the JSON header in bytes (padding included).
    pub fn header_len(&self) -> usize {
        self.json_len
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether the file holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// The tensors in file order.
    pub fn tensors(&self) -> &[LoadedTensor] {
        &self.tensors
    }

    /// The tensor names in file order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.iter().map(|t| t.name.as_str())
    }

    /// The tensor called `name`, if there is one.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.entry(name).map(|e| &e.tensor)
    }

    /// The entry (tensor and how it was loaded) called `name`.
    pub fn entry(&self, name: &str) -> Option<&LoadedTensor> {
        self.index.get(name).and_then(|&i| self.tensors.get(i))
    }

    /// The tensor called `name` (a cheap handle clone).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the missing tensor.
    pub fn tensor(&self, name: &str) -> Result<Tensor> {
        self.get(name)
            .cloned()
            .ok_or_else(|| Error::InvalidArgument {
                op: "SafeTensorsFile::tensor",
                reason: format!(
                    "{} has no tensor named '{}' (it has {} tensors; list them with `kael inspect`); check the name",
                    self.path.display(),
                    name.escape_debug(),
                    self.tensors.len()
                ),
            })
    }

    /// The `__metadata__` strings of the header.
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// How many tensors were loaded in place and how many were copied.
    pub fn stats(&self) -> LoadStats {
        self.stats
    }

    /// The address range the file was mapped at (`start..start + file_len`).
    /// Zero-copy tensors' bytes lie inside it.
    pub fn mapped_range(&self) -> Range<usize> {
        self.mapped.clone()
    }

    /// The tensors by name, in file order, consuming the file.
    pub fn into_tensors(self) -> Vec<(String, Tensor)> {
        self.tensors
            .into_iter()
            .map(|t| (t.name, t.tensor))
            .collect()
    }
}

/// Loads a safetensors file onto the CPU without copying it (see NOTE
/// [Zero-copy loading] and NOTE [File stability]).
///
/// # Errors
/// [`Error::Io`] when the file cannot be opened or mapped;
/// [`Error::Format`] for a truncated or malformed file (bad length field,
/// non-JSON header, offsets out of range, overlapping or leaving holes,
/// shape and byte length that disagree); [`Error::UnsupportedDType`] for a
/// dtype other than F32, F64, F16, BF16, I64, I32, U8 and BOOL.
///
/// ```no_run
/// let file = kael_host::safetensors_io::load("model.safetensors")?;
/// for t in file.tensors() {
///     println!("{} {:?} {:?}", t.name(), t.tensor().dtype(), t.tensor().shape());
/// }
/// # Ok::<(), kael_host::Error>(())
/// ```
pub fn load(path: impl AsRef<Path>) -> Result<SafeTensorsFile> {
    load_on(path, &Device::cpu())
}

/// Loads a safetensors file onto `device`: zero-copy when the device reads
/// host memory (the CPU backends), otherwise mapped and then copied to the
/// device tensor by tensor.
///
/// # Errors
/// As [`load`], plus the device's errors when copying to it.
pub fn load_on(path: impl AsRef<Path>, device: &Device) -> Result<SafeTensorsFile> {
    let path = path.as_ref();
    let io = |op: &'static str| {
        move |source| Error::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    };
    // Only regular files: opening a FIFO blocks until a writer comes, and a
    // directory or device is no safetensors file. Checked before opening
    // (no open to block on), and again on the opened file (the path may
    // have been replaced in between), which is opened non-blocking.
    let not_regular = |kind: &str| Error::InvalidArgument {
        op: "load",
        reason: format!(
            "{} is {kind}, not a regular file; pass the path of a .safetensors file",
            path.display()
        ),
    };
    let kind = |m: &std::fs::Metadata| {
        if m.is_dir() {
            "a directory"
        } else {
            "a FIFO, socket or device"
        }
    };
    let meta = std::fs::metadata(path).map_err(io("open"))?;
    if !meta.is_file() {
        return Err(not_regular(kind(&meta)));
    }
    let file = open_non_blocking(path).map_err(io("open"))?;
    let meta = file.metadata().map_err(io("read the metadata of"))?;
    if !meta.is_file() {
        return Err(not_regular(kind(&meta)));
    }
    // SAFETY: the map is read-only and kael never writes to it (external
    // storage refuses writes). Changes made to the file by other processes
    // while it is mapped are the caller's contract: NOTE [File stability].
    let map = unsafe { Mmap::map(&file) }.map_err(io("memory-map"))?;
    drop(file);
    let header = header::parse(path, &map)?;
    // The reference parser must accept what we accept.
    safetensors::SafeTensors::read_metadata(&map).map_err(|e| Error::Format {
        path: path.to_path_buf(),
        reason: format!("the safetensors reference parser rejects the file ({e}); re-save it"),
    })?;

    let host = if device.is_host_memory() {
        device.clone()
    } else {
        Device::cpu()
    };
    let map = Shared::new(map);
    let base = map.as_ptr();
    let file_len = map.len();
    let mapped = base as usize..base as usize + file_len;
    let storage = match NonNull::new(base.cast_mut()) {
        Some(ptr)
            if cfg!(target_endian = "little") && ptr.as_ptr() as usize % BUFFER_ALIGN == 0 =>
        {
            let owner: Shared<dyn ExternalOwner> = map.clone();
            // SAFETY: `ptr` is the start of the map, valid for reads of
            // `file_len` bytes while `owner` (the map) lives, which the
            // storage guarantees by holding it; it is page-aligned (checked
            // above against BUFFER_ALIGN); nobody writes to it (read-only map,
            // read-only external storage, NOTE [File stability]).
            Some(Shared::new(unsafe {
                Storage::from_external(ptr, file_len, owner, &host)
            }))
        }
        _ => None,
    };

    let data_start = header.data_start();
    let mut stats = LoadStats::default();
    let mut tensors = Vec::with_capacity(header.tensors.len());
    let mut index = HashMap::with_capacity(header.tensors.len());
    for info in header.tensors {
        let (begin, end) = info.data_offsets;
        let nbytes = end - begin;
        let at = data_start + begin;
        let es = info.dtype.size_in_bytes();
        let (tensor, zero_copy) = match &storage {
            Some(s)
                if at % es == 0
                    && (info.dtype != DType::Bool || bools_are_0_or_1(&map, at, nbytes)) =>
            {
                let strides = Layout::contiguous(&info.shape)?.strides().clone();
                let layout = Layout::new(&info.shape, &strides, at / es)?;
                (Tensor::from_storage(s.clone(), layout, info.dtype)?, true)
            }
            _ => {
                let bytes = map.get(at..at + nbytes).ok_or_else(|| Error::Format {
                    path: path.to_path_buf(),
                    reason: format!("tensor '{}' lies outside the file; re-save it", info.name),
                })?;
                (copy_tensor(bytes, info.dtype, &info.shape, &host)?, false)
            }
        };
        let (tensor, zero_copy) = if device.is_host_memory() {
            (tensor, zero_copy)
        } else {
            (tensor.to_device(device)?, false)
        };
        if zero_copy {
            stats.zero_copy += 1;
            stats.zero_copy_bytes += nbytes;
        } else {
            stats.copied += 1;
            stats.copied_bytes += nbytes;
        }
        index.insert(info.name.clone(), tensors.len());
        tensors.push(LoadedTensor {
            name: info.name,
            tensor,
            zero_copy,
            data_offsets: info.data_offsets,
        });
    }
    Ok(SafeTensorsFile {
        path: path.to_path_buf(),
        file_len,
        json_len: header.json_len,
        tensors,
        index,
        metadata: header.metadata,
        stats,
        mapped,
    })
}

/// Opens `path` for reading without blocking on a FIFO (on Linux, where
/// `O_NONBLOCK` is at hand; a regular file reads the same either way).
fn open_non_blocking(path: &Path) -> std::io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    options.open(path)
}

/// Whether a BOOL tensor's bytes are all 0 or 1 (kael's bool invariant,
/// NOTE [Bool storage] in the core); other bytes are normalised by copying.
fn bools_are_0_or_1(map: &[u8], at: usize, nbytes: usize) -> bool {
    map.get(at..at + nbytes)
        .is_some_and(|b| b.iter().all(|&x| x <= 1))
}

/// Copies little-endian `bytes` into a new tensor (the fallback for a
/// tensor that cannot be viewed in place).
fn copy_tensor(bytes: &[u8], dtype: DType, shape: &[usize], dev: &Device) -> Result<Tensor> {
    fn le<const N: usize, T>(bytes: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
        bytes
            .chunks_exact(N)
            .map(|c| {
                let mut a = [0u8; N];
                a.copy_from_slice(c);
                f(a)
            })
            .collect()
    }
    let t = match dtype {
        DType::F32 => Tensor::from_slice(&le(bytes, f32::from_le_bytes), shape, dev),
        DType::F64 => Tensor::from_slice(&le(bytes, f64::from_le_bytes), shape, dev),
        DType::F16 => Tensor::from_slice(
            &le(bytes, |b| f16::from_bits(u16::from_le_bytes(b))),
            shape,
            dev,
        ),
        DType::BF16 => Tensor::from_slice(
            &le(bytes, |b| bf16::from_bits(u16::from_le_bytes(b))),
            shape,
            dev,
        ),
        DType::I64 => Tensor::from_slice(&le(bytes, i64::from_le_bytes), shape, dev),
        DType::I32 => Tensor::from_slice(&le(bytes, i32::from_le_bytes), shape, dev),
        DType::I16 => Tensor::from_slice(&le(bytes, i16::from_le_bytes), shape, dev),
        DType::I8 => Tensor::from_slice(&le(bytes, i8::from_le_bytes), shape, dev),
        DType::U8 => Tensor::from_slice(bytes, shape, dev),
        DType::Bool => Tensor::from_slice(&le(bytes, |[b]: [u8; 1]| b != 0), shape, dev),
    };
    Ok(t?)
}
