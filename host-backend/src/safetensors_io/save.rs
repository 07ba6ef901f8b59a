//! Writing safetensors files atomically.
//!
//! NOTE [Atomic save]
//! [`save`] never modifies the target in place: it writes a temporary file
//! in the target's directory, flushes it to disk (`fsync`), renames it over
//! the target (atomic on POSIX file systems) and then flushes the directory
//! so the rename itself survives a crash. A failure at any step removes the
//! temporary file and leaves the old target as it was; a process that has
//! the old file memory-mapped keeps reading the old bytes (NOTE [File
//! stability]). A crash or kill mid-write cannot remove its temporary
//! file; the next save of the same path does (`remove_stale_temps`: files
//! of processes no longer running, or older than a day where that cannot
//! be checked), so they do not accumulate.
//!
//! The header is built from the `safetensors` crate's `TensorInfo` (so the
//! dtype names and layout are the reference's) and validated with its
//! `Metadata::new`. The order is fixed (metadata keys sorted, tensors in
//! file order), so the same tensors always give the same bytes. Tensors are laid out by decreasing element size, then by
//! name, and the JSON is padded to a multiple of 8 bytes: every tensor then
//! starts at a multiple of its element size and loads zero-copy.

use super::error::{Error, Result};
use super::header::{LEN_FIELD, MAX_HEADER_LEN};
use kael_core::{DType, Device, Tensor};
use safetensors::tensor::{Dtype, Metadata, TensorInfo};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Saves `tensors` (name, tensor) to a safetensors file at `path`,
/// atomically (NOTE [Atomic save]). Tensors may be views, non-contiguous or
/// on any device; they are written row-major.
///
/// # Errors
/// [`Error::InvalidArgument`] for a duplicate or reserved name
/// (`__metadata__`); [`Error::Io`] when writing, syncing or renaming fails
/// (the old file is then untouched); core errors from reading a tensor.
///
/// ```no_run
/// use kael_core::{DType, Device, Tensor};
/// let w = Tensor::zeros(&[4, 4], DType::F32, &Device::cpu())?;
/// let b = Tensor::zeros(&[4], DType::F32, &Device::cpu())?;
/// kael_host::safetensors_io::save("layer.safetensors", &[("weight", &w), ("bias", &b)])?;
/// # Ok::<(), kael_host::Error>(())
/// ```
pub fn save<S: AsRef<str>>(path: impl AsRef<Path>, tensors: &[(S, &Tensor)]) -> Result<()> {
    save_with_metadata(path, tensors, &BTreeMap::new())
}

/// As [`save`], with `metadata` strings written to the header's
/// `__metadata__` entry (omitted when empty).
///
/// # Errors
/// As [`save`].
pub fn save_with_metadata<S: AsRef<str>>(
    path: impl AsRef<Path>,
    tensors: &[(S, &Tensor)],
    metadata: &BTreeMap<String, String>,
) -> Result<()> {
    let path = path.as_ref();
    if cfg!(target_endian = "big") {
        return Err(Error::InvalidArgument {
            op: "save",
            reason: "saving safetensors (a little-endian format) is not implemented on big-endian hosts; save on a little-endian machine".into(),
        });
    }
    let (order, header) = build_header(tensors, metadata)?;
    write_atomically(path, |w| {
        w.write_all(&(header.len() as u64).to_le_bytes())
            .map_err(io("write", path))?;
        w.write_all(&header).map_err(io("write", path))?;
        for &i in &order {
            if let Some((_, t)) = tensors.get(i) {
                write_tensor(w, t, path)?;
            }
        }
        Ok(())
    })
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn st_dtype(dtype: DType) -> Dtype {
    match dtype {
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::I64 => Dtype::I64,
        DType::I32 => Dtype::I32,
        DType::I16 => Dtype::I16,
        DType::I8 => Dtype::I8,
        DType::U8 => Dtype::U8,
        DType::Bool => Dtype::BOOL,
    }
}

/// The write order (indices into `tensors`) and the padded JSON header.
fn build_header<S: AsRef<str>>(
    tensors: &[(S, &Tensor)],
    metadata: &BTreeMap<String, String>,
) -> Result<(Vec<usize>, Vec<u8>)> {
    let mut seen = BTreeSet::new();
    for (name, _) in tensors {
        let name = name.as_ref();
        if name == "__metadata__" {
            return Err(Error::InvalidArgument {
                op: "save",
                reason: "the tensor name \"__metadata__\" is reserved by the safetensors format; rename the tensor".into(),
            });
        }
        if !seen.insert(name) {
            return Err(Error::InvalidArgument {
                op: "save",
                reason: format!(
                    "two tensors are named '{name}'; give every tensor a distinct name"
                ),
            });
        }
    }
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| {
        let (na, ta) = &tensors[a];
        let (nb, tb) = &tensors[b];
        tb.element_size()
            .cmp(&ta.element_size())
            .then_with(|| na.as_ref().cmp(nb.as_ref()))
    });

    let mut infos = Vec::with_capacity(tensors.len());
    let mut offset = 0usize;
    for &i in &order {
        let (name, t) = &tensors[i];
        let nbytes =
            t.numel()
                .checked_mul(t.element_size())
                .ok_or(kael_core::Error::OutOfMemory {
                    requested: usize::MAX,
                    available: None,
                })?;
        // Checked: expanded views can have huge logical sizes, and their
        // sum can pass usize::MAX even when each one fits.
        let end = offset.checked_add(nbytes).ok_or_else(|| Error::InvalidArgument {
            op: "save",
            reason: "the tensors' total size in bytes overflows usize (e.g. huge expanded views); save fewer or smaller tensors per file".into(),
        })?;
        let info = TensorInfo {
            dtype: st_dtype(t.dtype()),
            shape: t.shape().to_vec(),
            data_offsets: (offset, end),
        };
        offset = end;
        infos.push((name.as_ref().to_string(), info));
    }

    // The object is assembled by hand so that it reads like the reference
    // writer's: `__metadata__` first, then the tensors in file order, each
    // entry's fields in `TensorInfo`'s order (dtype, shape, data_offsets).
    let mut parts = Vec::with_capacity(infos.len() + 1);
    if !metadata.is_empty() {
        parts.push(format!(
            "\"__metadata__\":{}",
            serde_json::to_string(metadata).map_err(header_err)?
        ));
    }
    for (name, info) in &infos {
        parts.push(format!(
            "{}:{}",
            serde_json::to_string(name).map_err(header_err)?,
            serde_json::to_string(info).map_err(header_err)?
        ));
    }
    // Cross-check with the reference: offsets ordered, sizes matching.
    Metadata::new(None, infos).map_err(|e| Error::InvalidArgument {
        op: "save",
        reason: format!(
            "the safetensors crate rejects the header ({e}); report this as a kael bug"
        ),
    })?;
    let mut header = format!("{{{}}}", parts.join(",")).into_bytes();
    header.resize(header.len().next_multiple_of(LEN_FIELD), b' ');
    if header.len() > MAX_HEADER_LEN {
        return Err(Error::InvalidArgument {
            op: "save",
            reason: format!(
                "the header would be {} bytes, over the format's {MAX_HEADER_LEN}-byte limit; save fewer tensors per file or shorter metadata",
                header.len()
            ),
        });
    }
    Ok((order, header))
}

fn header_err(e: serde_json::Error) -> Error {
    Error::InvalidArgument {
        op: "save",
        reason: format!("cannot encode the header as JSON ({e}); report this as a kael bug"),
    }
}

/// Writes `t`'s elements, row-major, little-endian.
fn write_tensor(w: &mut impl Write, t: &Tensor, path: &Path) -> Result<()> {
    let t = kael_core::no_grad(|| t.contiguous())?;
    let t = if t.device().is_host_memory() {
        t
    } else {
        t.to_device(&Device::cpu())?
    };
    let storage = t.storage();
    let guard = storage.read("save")?;
    let start = t.offset() * t.element_size();
    let len = t.numel() * t.element_size();
    let bytes = guard
        .bytes()
        .get(start..start + len)
        .ok_or(kael_core::Error::OutOfBounds {
            op: "save",
            reach: t.offset() + t.numel(),
            storage_len: storage.nbytes() / t.element_size(),
        })?;
    w.write_all(bytes).map_err(io("write", path))
}

static TEMP_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// The prefix of every temporary file of a save to `path`; the rest is
/// `{pid}-{n}` (the saving process, a per-process counter).
fn temp_prefix(path: &Path) -> String {
    let name = path
        .file_name()
        .map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
    format!(".{name}.kael-tmp-")
}

/// A fresh temporary path next to `path`.
fn temp_path(path: &Path) -> PathBuf {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!("{}{}-{n}", temp_prefix(path), std::process::id()))
}

/// How old a temporary file must be before a save of the same path
/// removes it where process liveness cannot be checked (no `/proc`).
const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(24 * 60 * 60);

/// Removes the temporary files that interrupted saves of `path` (a crash,
/// a kill) left next to it: those of a process that no longer runs (on
/// Linux, no `/proc/{pid}`), or elsewhere those older than a day. Saves
/// in flight (this process's, or a live one's) are left alone. Best
/// effort: a file that cannot be listed or removed is skipped.
fn remove_stale_temps(path: &Path) {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let prefix = temp_prefix(path);
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let proc_fs = Path::new("/proc/self").exists();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        let Some(pid) = rest
            .split_once('-')
            .and_then(|(pid, n)| n.parse::<usize>().ok().and(pid.parse::<u32>().ok()))
        else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let stale = if proc_fs {
            !Path::new("/proc").join(pid.to_string()).exists()
        } else {
            entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > STALE_AFTER)
        };
        if stale && entry.file_type().is_ok_and(|t| t.is_file()) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// NOTE [Atomic save]: runs `write` on a temporary file, then syncs and
/// renames it over `path`; removes the temporary file on any failure.
pub(crate) fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<&File>) -> Result<()>,
) -> Result<()> {
    remove_stale_temps(path);
    let tmp = temp_path(path);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(io("create a temporary file", &tmp))?;
    let written = (|| {
        let mut w = BufWriter::with_capacity(1 << 20, &file);
        write(&mut w)?;
        w.flush().map_err(io("write", &tmp))?;
        drop(w);
        file.sync_all().map_err(io("sync", &tmp))?;
        fs::rename(&tmp, path).map_err(io("rename the temporary file over", path))
    })();
    drop(file);
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    sync_parent(path)
}

/// Flushes the directory entry of `path` (the rename) to disk.
fn sync_parent(path: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io("sync the directory", dir))?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}
