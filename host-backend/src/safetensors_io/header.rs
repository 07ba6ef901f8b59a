//! Reading and validating a safetensors header.
//!
//! The format: an 8-byte little-endian length `n`, then `n` bytes of JSON
//! (an object mapping each tensor name to `{"dtype", "shape",
//! "data_offsets": [begin, end]}`, plus an optional `"__metadata__"` object
//! of strings), then the data section. Offsets are relative to the data
//! section; the tensors must cover it exactly, without holes or overlaps.
//!
//! Every check here runs before any tensor byte is touched, so a bad header
//! is an [`Error::Format`] naming the problem, never an out-of-bounds read.

use super::error::{Error, Result};
use kael_core::{DType, MAX_RANK};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// Bytes of the header-length field at the start of every file.
pub const LEN_FIELD: usize = 8;

/// The largest JSON header accepted (the `safetensors` crate's limit).
pub const MAX_HEADER_LEN: usize = 100_000_000;

/// One tensor's entry in a validated header.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// The tensor's name.
    pub name: String,
    /// Its element type.
    pub dtype: DType,
    /// Its shape (row-major).
    pub shape: Vec<usize>,
    /// `[begin, end)` in bytes, relative to the start of the data section.
    pub data_offsets: (usize, usize),
}

/// A validated header.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    /// Length of the JSON text, padding included (the first 8 bytes' value).
    pub json_len: usize,
    /// The tensors, in file order (increasing data offsets).
    pub tensors: Vec<TensorInfo>,
    /// The `__metadata__` strings (empty when there are none).
    pub metadata: BTreeMap<String, String>,
}

impl Header {
    /// Byte offset of the data section from the start of the file.
    pub fn data_start(&self) -> usize {
        LEN_FIELD + self.json_len
    }
}

const REFETCH: &str =
    "the file is truncated, corrupt or not a safetensors file: re-download or re-save it";

fn format(path: &Path, reason: String) -> Error {
    Error::Format {
        path: path.to_path_buf(),
        reason,
    }
}

/// Maps a safetensors dtype name to a kael dtype.
pub fn dtype_from_name(name: &str) -> Option<DType> {
    Some(match name {
        "F32" => DType::F32,
        "F64" => DType::F64,
        "F16" => DType::F16,
        "BF16" => DType::BF16,
        "I64" => DType::I64,
        "I32" => DType::I32,
        "I16" => DType::I16,
        "I8" => DType::I8,
        "U8" => DType::U8,
        "BOOL" => DType::Bool,
        _ => return None,
    })
}

/// The safetensors name of a kael dtype.
pub fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "F32",
        DType::F64 => "F64",
        DType::F16 => "F16",
        DType::BF16 => "BF16",
        DType::I64 => "I64",
        DType::I32 => "I32",
        DType::I16 => "I16",
        DType::I8 => "I8",
        DType::U8 => "U8",
        DType::Bool => "BOOL",
    }
}

/// Parses and validates the header of `file` (the whole file's bytes).
///
/// # Errors
/// [`Error::Format`] for a truncated file, a bad length field, a header
/// that is not a JSON object of valid entries, offsets out of range,
/// overlapping or leaving holes, or a shape that does not match its bytes;
/// [`Error::UnsupportedDType`] for a dtype kael has no dtype for.
pub fn parse(path: &Path, file: &[u8]) -> Result<Header> {
    let Some(len_field) = file.first_chunk::<LEN_FIELD>() else {
        return Err(format(
            path,
            format!(
                "the file is {} bytes long, shorter than the 8-byte header length that starts every safetensors file; {REFETCH}",
                file.len()
            ),
        ));
    };
    let n = u64::from_le_bytes(*len_field);
    let json_len = usize::try_from(n)
        .ok()
        .filter(|&n| n <= MAX_HEADER_LEN)
        .ok_or_else(|| {
            format(
                path,
                format!(
                    "the header length field says {n} bytes, more than the {MAX_HEADER_LEN}-byte limit; {REFETCH}"
                ),
            )
        })?;
    let rest = file.len() - LEN_FIELD;
    let Some(json) = file.get(LEN_FIELD..LEN_FIELD + json_len) else {
        return Err(format(
            path,
            format!(
                "the header length field says {json_len} bytes but only {rest} bytes follow it; {REFETCH}"
            ),
        ));
    };
    let data_len = rest - json_len;
    let text = std::str::from_utf8(json).map_err(|e| {
        format(
            path,
            format!("the header is not UTF-8 text ({e}); {REFETCH}"),
        )
    })?;
    let value: Value = serde_json::from_str(text).map_err(|e| {
        format(
            path,
            format!("the header is not valid JSON ({e}); {REFETCH}"),
        )
    })?;
    // serde_json keeps the last of repeated keys silently: a name given
    // twice would lose a tensor (or, with the same offsets, pass unseen).
    if let Some(dup) = repeated_top_level_key(text) {
        return Err(format(
            path,
            format!(
                "the header has two entries named '{}'; the header is corrupt: re-save the file with distinct tensor names",
                dup.escape_debug()
            ),
        ));
    }
    let Value::Object(entries) = value else {
        return Err(format(
            path,
            format!(
                "the header is JSON but not an object mapping tensor names to {{dtype, shape, data_offsets}}; {REFETCH}"
            ),
        ));
    };

    let mut metadata = BTreeMap::new();
    let mut tensors = Vec::with_capacity(entries.len());
    for (name, entry) in &entries {
        if name == "__metadata__" {
            metadata = parse_metadata(path, entry)?;
        } else {
            tensors.push(parse_entry(path, name, entry, data_len)?);
        }
    }

    tensors.sort_by_key(|t| t.data_offsets);
    let mut covered = 0usize;
    let mut prev: Option<&TensorInfo> = None;
    for t in &tensors {
        let (begin, end) = t.data_offsets;
        if begin < covered {
            let name = prev.map_or("", |p| p.name.as_str());
            let (pb, pe) = prev.map_or((0, 0), |p| p.data_offsets);
            return Err(format(
                path,
                format!(
                    "tensors '{name}' (data_offsets [{pb}, {pe}]) and '{}' (data_offsets [{begin}, {end}]) overlap; the header is corrupt: re-save the file",
                    t.name
                ),
            ));
        }
        if begin > covered {
            return Err(format(
                path,
                format!(
                    "bytes {covered}..{begin} of the data section belong to no tensor (safetensors forbids holes; next tensor '{}'); the header is corrupt: re-save the file",
                    t.name
                ),
            ));
        }
        covered = end;
        prev = Some(t);
    }
    if covered != data_len {
        return Err(format(
            path,
            format!(
                "the data section is {data_len} bytes but the tensors cover only {covered}; the file has trailing bytes or the header is corrupt: re-save the file"
            ),
        ));
    }
    Ok(Header {
        json_len,
        tensors,
        metadata,
    })
}

fn parse_metadata(path: &Path, entry: &Value) -> Result<BTreeMap<String, String>> {
    let bad = || {
        format(
            path,
            "the \"__metadata__\" entry must be an object of string values; the header is corrupt: re-save the file".into(),
        )
    };
    let Value::Object(map) = entry else {
        return Err(bad());
    };
    map.iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k.clone(), s.clone())),
            _ => Err(bad()),
        })
        .collect()
}

fn parse_entry(path: &Path, name: &str, entry: &Value, data_len: usize) -> Result<TensorInfo> {
    let field = |field: &str, expected: &str| {
        format(
            path,
            format!(
                "tensor '{name}': the header entry has no valid \"{field}\" (expected {expected}); the header is corrupt: re-save the file"
            ),
        )
    };
    let dtype = entry
        .get("dtype")
        .and_then(Value::as_str)
        .ok_or_else(|| field("dtype", "a dtype name such as \"F32\""))?;
    let shape: Vec<usize> = entry
        .get("shape")
        .and_then(Value::as_array)
        .and_then(|dims| dims.iter().map(as_usize).collect::<Option<_>>())
        .ok_or_else(|| field("shape", "an array of non-negative integers"))?;
    let offsets = entry
        .get("data_offsets")
        .and_then(Value::as_array)
        .and_then(|o| match o.as_slice() {
            [b, e] => Some((as_usize(b)?, as_usize(e)?)),
            _ => None,
        })
        .ok_or_else(|| field("data_offsets", "[begin, end] with non-negative integers"))?;
    let (begin, end) = offsets;
    if end < begin {
        return Err(format(
            path,
            format!(
                "tensor '{name}': data_offsets [{begin}, {end}] end before they begin; the header is corrupt: re-save the file"
            ),
        ));
    }
    if end > data_len {
        return Err(format(
            path,
            format!(
                "tensor '{name}': data_offsets [{begin}, {end}] reach past the end of the {data_len}-byte data section; {REFETCH}"
            ),
        ));
    }
    let dtype = dtype_from_name(dtype).ok_or_else(|| Error::UnsupportedDType {
        path: path.to_path_buf(),
        tensor: name.to_string(),
        dtype: dtype.to_string(),
    })?;
    if shape.len() > MAX_RANK {
        return Err(format(
            path,
            format!(
                "tensor '{name}' has {} dimensions but kael supports at most {MAX_RANK}; reshape it to fewer dimensions before saving",
                shape.len()
            ),
        ));
    }
    let need = shape
        .iter()
        .try_fold(dtype.size_in_bytes(), |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| {
            format(
                path,
                format!(
                    "tensor '{name}': shape {shape:?} has more elements than memory can address; the header is corrupt: re-save the file"
                ),
            )
        })?;
    if need != end - begin {
        return Err(format(
            path,
            format!(
                "tensor '{name}': shape {shape:?} of {} needs {need} bytes but data_offsets [{begin}, {end}] hold {}; the header is corrupt: re-save the file",
                dtype_name(dtype),
                end - begin
            ),
        ));
    }
    Ok(TensorInfo {
        name: name.to_string(),
        dtype,
        shape,
        data_offsets: offsets,
    })
}

fn as_usize(v: &Value) -> Option<usize> {
    v.as_u64().and_then(|x| usize::try_from(x).ok())
}

/// The first key that appears twice at the top level of `text`, a JSON
/// document already validated by serde_json (so strings and brackets are
/// well formed). Scans once, allocating one `String` per key.
fn repeated_top_level_key(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut seen = std::collections::BTreeSet::new();
    let mut depth = 0usize;
    let mut i = 0usize;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'{' | b'[' => depth = depth.saturating_add(1),
            b'}' | b']' => depth = depth.saturating_sub(1),
            b'"' => {
                let start = i;
                i += 1;
                while let Some(&c) = bytes.get(i) {
                    match c {
                        b'\\' => i += 2,
                        b'"' => break,
                        _ => i += 1,
                    }
                }
                let raw = text.get(start..=i)?;
                let is_key = depth == 1
                    && bytes
                        .get(i + 1..)?
                        .iter()
                        .find(|c| !c.is_ascii_whitespace())
                        == Some(&b':');
                if is_key {
                    let key: String = serde_json::from_str(raw).ok()?;
                    if !seen.insert(key.clone()) {
                        return Some(key);
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}
