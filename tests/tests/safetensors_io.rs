//! safetensors loading (memory-mapped, zero-copy) and atomic saving.
//!
//! Files are written by hand here (`raw_file`: the format is an 8-byte
//! little-endian header length, the JSON header, then the data), so the
//! loader is checked against the format itself, not against kael's writer;
//! the writer is checked byte for byte against a handwritten file.
mod common;

use kael_core::{DType, Device, Tensor, bf16, f16};
use kael_host::Error;
use kael_host::safetensors_io::{load, save, save_with_metadata};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

// ------------------------------------------------------------- helpers

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("kael-st-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    fn entries(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A safetensors file: length field, `header` padded with spaces to a
/// multiple of `pad` (1 = no padding), then `data`.
fn raw_file(header: &str, pad: usize, data: &[u8]) -> Vec<u8> {
    let mut h = header.as_bytes().to_vec();
    while h.len() % pad != 0 {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out
}

fn write(dir: &TempDir, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.path(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Loads `bytes` from a file and returns the error's message.
fn load_err(bytes: &[u8]) -> (Error, String) {
    let dir = TempDir::new("err");
    let p = write(&dir, "bad.safetensors", bytes);
    let e = load(&p).unwrap_err();
    let msg = e.to_string();
    (e, msg)
}

/// Resident set size of this process in bytes (Linux).
#[cfg(target_os = "linux")]
fn rss_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// The address ranges at which `file` is mapped into this process.
#[cfg(target_os = "linux")]
fn mappings_of(file: &Path) -> Vec<(usize, usize)> {
    let file = std::fs::canonicalize(file).unwrap();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter(|l| l.ends_with(file.to_str().unwrap()))
        .map(|l| {
            let range = l.split_whitespace().next().unwrap();
            let (a, b) = range.split_once('-').unwrap();
            (
                usize::from_str_radix(a, 16).unwrap(),
                usize::from_str_radix(b, 16).unwrap(),
            )
        })
        .collect()
}

/// Address of a tensor's first element.
fn data_addr(t: &Tensor) -> usize {
    t.storage().as_ptr() as usize + t.offset() * t.element_size()
}

// A two-tensor file in the layout PyTorch's safetensors writes:
// a: F32 [2, 2] = 1 2 3 4 at [0, 16), b: I64 [2] = -5 7 at [16, 32).
const TWO_HEADER: &str = r#"{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"b":{"dtype":"I64","shape":[2],"data_offsets":[16,32]},"__metadata__":{"format":"pt"}}"#;

fn two_file() -> Vec<u8> {
    let mut data = f32_bytes(&[1.0, 2.0, 3.0, 4.0]);
    data.extend((-5i64).to_le_bytes());
    data.extend(7i64.to_le_bytes());
    raw_file(TWO_HEADER, 8, &data)
}

// ------------------------------------------------------------- loading

#[test]
fn load_reads_a_handwritten_file() {
    let dir = TempDir::new("two");
    let p = write(&dir, "two.safetensors", &two_file());
    let f = load(&p).unwrap();
    assert_eq!(f.names().collect::<Vec<_>>(), ["a", "b"]);
    let a = f.tensor("a").unwrap();
    assert_eq!((a.shape(), a.dtype()), (&[2, 2][..], DType::F32));
    assert_eq!(a.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 4.0]);
    let b = f.tensor("b").unwrap();
    assert_eq!(b.to_vec::<i64>().unwrap(), [-5, 7]);
    assert_eq!(f.metadata().get("format").map(String::as_str), Some("pt"));
}

#[test]
fn loaded_tensors_lie_inside_the_files_memory_map() {
    let dir = TempDir::new("map");
    let p = write(&dir, "two.safetensors", &two_file());
    let f = load(&p).unwrap();
    let range = f.mapped_range();
    #[cfg(target_os = "linux")]
    let maps = mappings_of(&p);
    for e in f.tensors() {
        let t = e.tensor();
        assert!(e.is_zero_copy() && t.storage().is_external());
        let (start, end) = (data_addr(t), data_addr(t) + e.nbytes());
        assert!(range.start <= start && end <= range.end, "{}", e.name());
        // The kernel's own record of the mapping agrees.
        #[cfg(target_os = "linux")]
        assert!(
            maps.iter().any(|&(a, b)| a <= start && end <= b),
            "{} at {start:#x} not in {maps:x?}",
            e.name()
        );
        // Byte position in the file = 8 + header + begin.
        assert_eq!(start - range.start, 8 + f.header_len() + e.data_offsets().0);
    }
    assert_eq!(f.stats().zero_copy, 2);
    assert_eq!(f.stats().copied, 0);
    assert_eq!(f.stats().zero_copy_bytes, 32);
}

#[test]
fn all_tensors_of_a_file_share_one_storage() {
    let dir = TempDir::new("share");
    let p = write(&dir, "two.safetensors", &two_file());
    let f = load(&p).unwrap();
    let (a, b) = (f.tensor("a").unwrap(), f.tensor("b").unwrap());
    assert!(a.shares_storage(&b));
    assert_eq!(a.storage_nbytes(), f.file_len());
}

#[test]
fn loaded_tensors_outlive_the_loaded_file() {
    let dir = TempDir::new("outlive");
    let p = write(&dir, "two.safetensors", &two_file());
    let a = load(&p).unwrap().tensor("a").unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn loaded_tensors_are_read_only_until_deep_cloned() {
    let dir = TempDir::new("ro");
    let p = write(&dir, "two.safetensors", &two_file());
    let a = load(&p).unwrap().tensor("a").unwrap();
    let snap = common::snapshot(&a);
    let e = a.fill_(1.0).unwrap_err();
    assert!(e.to_string().contains("deep_clone"), "{e}");
    assert_eq!(common::snapshot(&a), snap);
    let c = a.deep_clone().unwrap();
    c.add_(&Tensor::ones(&[2, 2], DType::F32, &Device::cpu()).unwrap())
        .unwrap();
    assert_eq!(c.to_vec::<f32>().unwrap(), [2.0, 3.0, 4.0, 5.0]);
}

#[test]
fn a_tensor_misaligned_in_the_file_is_copied() {
    // No padding: the header is 107 bytes, so the data section starts at
    // byte 115 and the F32 tensor at 115 + 4 = 119, not a multiple of 4.
    let header = r#"{"u":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"f":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#;
    let mut data = vec![9u8, 8, 7, 6];
    data.extend(f32_bytes(&[1.5, -2.25]));
    let bytes = raw_file(header, 1, &data);
    let f_pos = 8 + header.len() + 4;
    assert_ne!(
        f_pos % 4,
        0,
        "test setup: the F32 tensor must be misaligned"
    );
    let dir = TempDir::new("mis");
    let p = write(&dir, "mis.safetensors", &bytes);
    let f = load(&p).unwrap();
    assert!(f.entry("u").unwrap().is_zero_copy());
    let e = f.entry("f").unwrap();
    assert!(!e.is_zero_copy() && !e.tensor().storage().is_external());
    assert_eq!(e.tensor().to_vec::<f32>().unwrap(), [1.5, -2.25]);
    assert_eq!(f.tensor("u").unwrap().to_vec::<u8>().unwrap(), [9, 8, 7, 6]);
    let s = f.stats();
    assert_eq!((s.zero_copy, s.copied, s.copied_bytes), (1, 1, 8));
}

#[test]
fn bool_bytes_other_than_0_and_1_are_copied_as_true() {
    let header = r#"{"ok":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]},"odd":{"dtype":"BOOL","shape":[3],"data_offsets":[2,5]}}"#;
    let dir = TempDir::new("bool");
    let p = write(
        &dir,
        "b.safetensors",
        &raw_file(header, 8, &[1, 0, 0, 2, 255]),
    );
    let f = load(&p).unwrap();
    assert!(f.entry("ok").unwrap().is_zero_copy());
    assert_eq!(
        f.tensor("ok").unwrap().to_vec::<bool>().unwrap(),
        [true, false]
    );
    let odd = f.entry("odd").unwrap();
    assert!(!odd.is_zero_copy());
    assert_eq!(odd.tensor().to_vec::<bool>().unwrap(), [false, true, true]);
}

#[test]
fn scalars_and_empty_tensors_load() {
    let header = r#"{"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]},"e":{"dtype":"F32","shape":[2,0,3],"data_offsets":[8,8]}}"#;
    let dir = TempDir::new("edge");
    let p = write(
        &dir,
        "e.safetensors",
        &raw_file(header, 8, &2.5f64.to_le_bytes()),
    );
    let f = load(&p).unwrap();
    assert_eq!(f.tensor("s").unwrap().item::<f64>().unwrap(), 2.5);
    let e = f.tensor("e").unwrap();
    assert_eq!((e.shape(), e.numel()), (&[2, 0, 3][..], 0));
    assert_eq!(e.to_vec::<f32>().unwrap(), Vec::<f32>::new());
}

#[test]
fn a_file_with_no_tensors_loads_empty() {
    let dir = TempDir::new("none");
    let p = write(&dir, "n.safetensors", &raw_file("{}", 8, &[]));
    let f = load(&p).unwrap();
    assert!(f.is_empty());
}

#[test]
fn missing_tensor_name_is_an_error_naming_it() {
    let dir = TempDir::new("miss");
    let p = write(&dir, "two.safetensors", &two_file());
    let e = load(&p).unwrap().tensor("wte.weight").unwrap_err();
    assert!(e.to_string().contains("'wte.weight'"), "{e}");
}

// ------------------------------------------------------ malformed files

#[test]
fn missing_file_is_an_io_error_naming_the_path() {
    let dir = TempDir::new("nofile");
    let p = dir.path("absent.safetensors");
    let e = load(&p).unwrap_err();
    assert!(matches!(e, Error::Io { op: "open", .. }), "{e:?}");
    assert!(e.to_string().contains("absent.safetensors"), "{e}");
}

#[test]
fn a_directory_is_not_a_safetensors_file() {
    let dir = TempDir::new("isdir");
    let e = load(&dir.0).unwrap_err();
    assert!(e.to_string().contains("is a directory"), "{e}");
}

#[test]
fn file_shorter_than_the_length_field_is_truncated() {
    for len in [0usize, 1, 7] {
        let (e, msg) = load_err(&vec![0u8; len]);
        assert!(matches!(e, Error::Format { .. }), "{e:?}");
        assert!(msg.contains(&format!("{len} bytes long")), "{msg}");
        assert!(msg.contains("8-byte header length"), "{msg}");
    }
}

#[test]
fn header_longer_than_the_file_is_truncated() {
    let mut bytes = 100u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}");
    let (_, msg) = load_err(&bytes);
    assert!(
        msg.contains("says 100 bytes but only 2 bytes follow"),
        "{msg}"
    );
}

#[test]
fn absurd_header_length_is_refused() {
    let mut bytes = u64::MAX.to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}");
    let (_, msg) = load_err(&bytes);
    assert!(msg.contains("more than the 100000000-byte limit"), "{msg}");
}

#[test]
fn data_shorter_than_the_offsets_is_truncated() {
    // header promises 32 data bytes; only 20 are there
    let mut bytes = two_file();
    bytes.truncate(bytes.len() - 12);
    let (_, msg) = load_err(&bytes);
    assert!(
        msg.contains("reach past the end of the 20-byte data section"),
        "{msg}"
    );
}

#[test]
fn every_truncation_of_a_valid_file_is_an_error() {
    let full = two_file();
    let dir = TempDir::new("trunc");
    for len in 0..full.len() {
        let p = write(&dir, "t.safetensors", &full[..len]);
        assert!(load(&p).is_err(), "prefix of {len} bytes loaded");
    }
}

#[test]
fn every_single_byte_corruption_loads_or_errors_without_panicking() {
    // Flip each byte of the file in turn: the loader must never panic or
    // read out of bounds; whatever loads must be readable.
    let full = two_file();
    let dir = TempDir::new("flip");
    for i in 0..full.len() {
        let mut bytes = full.clone();
        bytes[i] ^= 0x5A;
        let p = write(&dir, "f.safetensors", &bytes);
        if let Ok(f) = load(&p) {
            for e in f.tensors() {
                let t = e.tensor();
                assert!(t.to_dtype(DType::F64).unwrap().to_vec::<f64>().is_ok());
            }
        }
    }
}

#[test]
fn non_utf8_header_is_an_error() {
    let mut bytes = 4u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(&[b'{', 0xFF, 0xFE, b'}']);
    let (_, msg) = load_err(&bytes);
    assert!(msg.contains("not UTF-8"), "{msg}");
}

#[test]
fn non_json_header_is_an_error() {
    let (e, msg) = load_err(&raw_file("this is not json", 8, &[]));
    assert!(matches!(e, Error::Format { .. }));
    assert!(msg.contains("not valid JSON"), "{msg}");
}

#[test]
fn json_that_is_not_an_object_is_an_error() {
    let (_, msg) = load_err(&raw_file("[1, 2, 3]", 8, &[]));
    assert!(msg.contains("not an object"), "{msg}");
}

#[test]
fn unknown_dtype_is_unsupported_naming_it() {
    for dtype in ["F8_E4M3", "U16", "Q4_WEIRD"] {
        let header = format!(r#"{{"w":{{"dtype":"{dtype}","shape":[4],"data_offsets":[0,4]}}}}"#);
        let (e, msg) = load_err(&raw_file(&header, 8, &[0; 4]));
        match &e {
            Error::UnsupportedDType {
                tensor, dtype: d, ..
            } => {
                assert_eq!((tensor.as_str(), d.as_str()), ("w", dtype));
            }
            other => panic!("expected UnsupportedDType, got {other:?}"),
        }
        assert!(msg.contains(dtype) && msg.contains("'w'"), "{msg}");
    }
}

#[test]
fn shape_that_disagrees_with_the_byte_length_is_an_error() {
    let header = r#"{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]}}"#;
    let (_, msg) = load_err(&raw_file(header, 8, &[0; 16]));
    assert!(
        msg.contains(
            "tensor 'w': shape [2, 3] of F32 needs 24 bytes but data_offsets [0, 16] hold 16"
        ),
        "{msg}"
    );
}

#[test]
fn overlapping_offsets_are_an_error() {
    let header = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#;
    let (_, msg) = load_err(&raw_file(header, 8, &[0; 12]));
    assert!(
        msg.contains("'a'") && msg.contains("'b'") && msg.contains("overlap"),
        "{msg}"
    );
}

#[test]
fn offsets_that_end_before_they_begin_are_an_error() {
    let header = r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[8,4]}}"#;
    let (_, msg) = load_err(&raw_file(header, 8, &[0; 8]));
    assert!(
        msg.contains("data_offsets [8, 4] end before they begin"),
        "{msg}"
    );
}

#[test]
fn a_hole_in_the_data_section_is_an_error() {
    let header = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}"#;
    let (_, msg) = load_err(&raw_file(header, 8, &[0; 8]));
    assert!(
        msg.contains("bytes 0..4 of the data section belong to no tensor"),
        "{msg}"
    );
}

#[test]
fn trailing_bytes_after_the_tensors_are_an_error() {
    let header = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}"#;
    let (_, msg) = load_err(&raw_file(header, 8, &[0; 6]));
    assert!(
        msg.contains("6 bytes but the tensors cover only 4"),
        "{msg}"
    );
}

#[test]
fn entry_without_a_shape_is_an_error() {
    let header = r#"{"a":{"dtype":"U8","data_offsets":[0,4]}}"#;
    let (_, msg) = load_err(&raw_file(header, 8, &[0; 4]));
    assert!(
        msg.contains("tensor 'a'") && msg.contains("\"shape\""),
        "{msg}"
    );
}

#[test]
fn negative_dimension_is_an_error() {
    let header = r#"{"a":{"dtype":"U8","shape":[-4],"data_offsets":[0,4]}}"#;
    let (_, msg) = load_err(&raw_file(header, 8, &[0; 4]));
    assert!(
        msg.contains("\"shape\"") && msg.contains("non-negative"),
        "{msg}"
    );
}

#[test]
fn more_than_eight_dimensions_is_an_error() {
    let header = r#"{"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}}"#;
    let (_, msg) = load_err(&raw_file(header, 8, &[0; 1]));
    assert!(
        msg.contains("9 dimensions") && msg.contains("at most 8"),
        "{msg}"
    );
}

#[test]
fn shape_whose_size_overflows_is_an_error() {
    let header = r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}"#;
    let (_, msg) = load_err(&raw_file(header, 8, &[0; 4]));
    assert!(
        msg.contains("more elements than memory can address"),
        "{msg}"
    );
}

#[test]
fn metadata_that_is_not_strings_is_an_error() {
    let (_, msg) = load_err(&raw_file(r#"{"__metadata__":{"n":3}}"#, 8, &[]));
    assert!(msg.contains("__metadata__"), "{msg}");
}

// -------------------------------------------------------------- saving

#[test]
fn save_writes_the_exact_safetensors_bytes() {
    // Handwritten expectation: sorted keys, entries as {dtype, shape,
    // data_offsets}, JSON padded with spaces to a multiple of 8, F32 data
    // little-endian.
    let dev = Device::cpu();
    let dir = TempDir::new("exact");
    let p = dir.path("x.safetensors");
    let x = Tensor::from_slice(&[1.0f32, -2.0], &[2], &dev).unwrap();
    save(&p, &[("x", &x)]).unwrap();
    let header = r#"{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    let want = raw_file(header, 8, &f32_bytes(&[1.0, -2.0]));
    assert_eq!(std::fs::read(&p).unwrap(), want);
}

#[test]
fn every_dtype_round_trips_through_save_and_load() {
    let dev = Device::cpu();
    let dir = TempDir::new("dtypes");
    let p = dir.path("all.safetensors");
    let tensors = [
        (
            "f32",
            Tensor::from_slice(&[1.5f32, -0.0, 3e38], &[3], &dev).unwrap(),
        ),
        (
            "f64",
            Tensor::from_slice(&[1e-300f64, 2.0], &[2, 1], &dev).unwrap(),
        ),
        (
            "f16",
            Tensor::from_slice(&[f16::from_f32(0.5), f16::MAX], &[2], &dev).unwrap(),
        ),
        (
            "bf16",
            Tensor::from_slice(&[bf16::from_f32(-1.25)], &[1], &dev).unwrap(),
        ),
        (
            "i64",
            Tensor::from_slice(&[i64::MIN, 0, i64::MAX], &[3], &dev).unwrap(),
        ),
        (
            "i32",
            Tensor::from_slice(&[-7i32, 9], &[1, 2], &dev).unwrap(),
        ),
        (
            "u8",
            Tensor::from_slice(&[0u8, 255, 3], &[3], &dev).unwrap(),
        ),
        (
            "bool",
            Tensor::from_slice(&[true, false, true], &[3], &dev).unwrap(),
        ),
    ];
    let refs: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    save(&p, &refs).unwrap();
    let f = load(&p).unwrap();
    assert_eq!(
        f.stats().copied,
        0,
        "every tensor written by save loads zero-copy"
    );
    for (name, t) in &tensors {
        let g = f.tensor(name).unwrap();
        assert_eq!((g.shape(), g.dtype()), (t.shape(), t.dtype()), "{name}");
        let as_bytes = |x: &Tensor| x.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
        match t.dtype() {
            DType::I64 => assert_eq!(g.to_vec::<i64>().unwrap(), t.to_vec::<i64>().unwrap()),
            _ => assert_eq!(as_bytes(&g), as_bytes(t), "{name}"),
        }
    }
}

#[test]
fn save_lays_out_tensors_so_all_load_zero_copy() {
    // Odd sizes in every dtype: without ordering by element size, the
    // later wide tensors would start at odd positions.
    let dev = Device::cpu();
    let dir = TempDir::new("order");
    let p = dir.path("o.safetensors");
    let a = Tensor::zeros(&[3], DType::U8, &dev).unwrap();
    let b = Tensor::zeros(&[3], DType::F16, &dev).unwrap();
    let c = Tensor::zeros(&[3], DType::F32, &dev).unwrap();
    let d = Tensor::zeros(&[3], DType::F64, &dev).unwrap();
    save(&p, &[("a", &a), ("b", &b), ("c", &c), ("d", &d)]).unwrap();
    let f = load(&p).unwrap();
    assert_eq!(f.names().collect::<Vec<_>>(), ["d", "c", "b", "a"]);
    assert_eq!((f.stats().zero_copy, f.stats().copied), (4, 0));
}

#[test]
fn save_writes_views_in_row_major_order() {
    let dev = Device::cpu();
    let dir = TempDir::new("view");
    let p = dir.path("v.safetensors");
    // [[0,1,2],[3,4,5]]^T = [[0,3],[1,4],[2,5]]
    let t = Tensor::arange(0.0f32, 6.0, &dev)
        .unwrap()
        .reshape(&[2, 3])
        .unwrap()
        .t()
        .unwrap();
    let n = Tensor::arange(0i32, 10, &dev)
        .unwrap()
        .narrow(0, 7, 2)
        .unwrap();
    save(&p, &[("t", &t), ("n", &n)]).unwrap();
    let f = load(&p).unwrap();
    assert_eq!(f.tensor("t").unwrap().shape(), [3, 2]);
    assert_eq!(
        f.tensor("t").unwrap().to_vec::<f32>().unwrap(),
        [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
    );
    assert_eq!(f.tensor("n").unwrap().to_vec::<i32>().unwrap(), [7, 8]);
}

#[test]
fn metadata_round_trips() {
    let dev = Device::cpu();
    let dir = TempDir::new("meta");
    let p = dir.path("m.safetensors");
    let x = Tensor::zeros(&[1], DType::F32, &dev).unwrap();
    let meta = BTreeMap::from([
        ("format".to_string(), "pt".to_string()),
        ("step".to_string(), "1200".to_string()),
    ]);
    save_with_metadata(&p, &[("x", &x)], &meta).unwrap();
    assert_eq!(load(&p).unwrap().metadata(), &meta);
}

#[test]
fn saving_the_same_tensors_twice_gives_the_same_bytes() {
    let dev = Device::cpu();
    let dir = TempDir::new("det");
    let x = Tensor::arange(0.0f32, 5.0, &dev).unwrap();
    let meta = BTreeMap::from([("b".into(), "2".into()), ("a".into(), "1".into())]);
    save_with_metadata(dir.path("1"), &[("z", &x), ("y", &x)], &meta).unwrap();
    save_with_metadata(dir.path("2"), &[("y", &x), ("z", &x)], &meta).unwrap();
    assert_eq!(
        std::fs::read(dir.path("1")).unwrap(),
        std::fs::read(dir.path("2")).unwrap()
    );
}

#[test]
fn save_rejects_duplicate_names() {
    let dev = Device::cpu();
    let dir = TempDir::new("dup");
    let x = Tensor::zeros(&[1], DType::F32, &dev).unwrap();
    let e = save(dir.path("d"), &[("w", &x), ("w", &x)]).unwrap_err();
    assert!(e.to_string().contains("two tensors are named 'w'"), "{e}");
    assert!(dir.entries().is_empty());
}

#[test]
fn save_rejects_the_reserved_metadata_name() {
    let dev = Device::cpu();
    let dir = TempDir::new("res");
    let x = Tensor::zeros(&[1], DType::F32, &dev).unwrap();
    let e = save(dir.path("d"), &[("__metadata__", &x)]).unwrap_err();
    assert!(e.to_string().contains("reserved"), "{e}");
}

#[test]
fn a_save_that_fails_midway_leaves_the_old_file_and_no_temporary() {
    let dev = Device::cpu();
    let dir = TempDir::new("midway");
    let p = dir.path("w.safetensors");
    let old = Tensor::from_slice(&[1.0f32, 2.0], &[2], &dev).unwrap();
    save(&p, &[("old", &old)]).unwrap();
    let before = std::fs::read(&p).unwrap();

    // "a" (written first, 64 KiB) succeeds; reading "b" then fails because
    // another writer holds its storage: the failure comes after the header
    // and a tensor have gone to the temporary file.
    let a = Tensor::zeros(&[16384], DType::F32, &dev).unwrap();
    let b = Tensor::zeros(&[4], DType::F32, &dev).unwrap();
    let storage = b.storage();
    let guard = storage.write("test: another writer").unwrap();
    let e = save(&p, &[("a", &a), ("b", &b)]).unwrap_err();
    drop(guard);
    assert!(
        matches!(e, Error::Core(kael_core::Error::BorrowConflict { .. })),
        "{e:?}"
    );

    assert_eq!(std::fs::read(&p).unwrap(), before);
    assert_eq!(dir.entries(), ["w.safetensors"]);
}

#[test]
fn a_save_whose_rename_fails_leaves_the_target_and_no_temporary() {
    // The target is a non-empty directory: rename(file, dir) fails after
    // the temporary file was fully written and synced.
    let dev = Device::cpu();
    let dir = TempDir::new("rename");
    let target = dir.path("model.safetensors");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("keep"), b"x").unwrap();
    let x = Tensor::zeros(&[2], DType::F32, &dev).unwrap();
    let e = save(&target, &[("x", &x)]).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    assert!(e.to_string().contains("rename"), "{e}");
    assert_eq!(dir.entries(), ["model.safetensors"]);
    assert_eq!(std::fs::read(target.join("keep")).unwrap(), b"x");
}

#[test]
fn saving_over_a_loaded_file_leaves_its_tensors_intact() {
    let dev = Device::cpu();
    let dir = TempDir::new("over");
    let p = dir.path("w.safetensors");
    let v1 = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], &dev).unwrap();
    save(&p, &[("w", &v1)]).unwrap();
    let mapped = load(&p).unwrap().tensor("w").unwrap();
    let v2 = Tensor::from_slice(&[7.0f32, 8.0, 9.0], &[3], &dev).unwrap();
    save(&p, &[("w", &v2)]).unwrap();
    // The old map still shows the old file (a new inode replaced it).
    assert_eq!(mapped.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0]);
    assert_eq!(
        load(&p)
            .unwrap()
            .tensor("w")
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        [7.0, 8.0, 9.0]
    );
}

// ----------------------------------------------------- resident memory

#[cfg(target_os = "linux")]
#[test]
fn loading_a_256_mib_file_does_not_make_it_resident() {
    const MIB: usize = 1 << 20;
    const SIZE: usize = 256 * MIB;
    let dir = TempDir::new("big");
    let p = dir.path("big.safetensors");
    // 256 MiB of zeros as one F32 tensor; the data is a sparse hole, so the
    // test costs no disk and no write time.
    let header = format!(
        r#"{{"zeros":{{"dtype":"F32","shape":[{}],"data_offsets":[0,{SIZE}]}}}}"#,
        SIZE / 4
    );
    let head = raw_file(&header, 8, &[]);
    std::fs::write(&p, &head).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    file.set_len((head.len() + SIZE) as u64).unwrap();
    drop(file);

    let rss0 = rss_bytes();
    let t0 = std::time::Instant::now();
    let f = load(&p).unwrap();
    let load_time = t0.elapsed();
    let t = f.tensor("zeros").unwrap();
    let rss1 = rss_bytes();
    let grown = rss1.saturating_sub(rss0);
    assert_eq!(t.numel(), SIZE / 4);
    assert_eq!(f.stats().zero_copy_bytes, SIZE);

    // Touch one byte per page: now the pages are resident.
    let storage = t.storage();
    let guard = storage.read("test").unwrap();
    let start = t.offset() * 4;
    let bytes = &guard.bytes()[start..start + SIZE];
    let mut sum = 0u64;
    for i in (0..SIZE).step_by(4096) {
        sum += u64::from(std::hint::black_box(bytes[i]));
    }
    assert_eq!(sum, 0);
    let touched = rss_bytes().saturating_sub(rss0);
    drop(guard);
    eprintln!(
        "256 MiB file: load {load_time:?}, resident growth {} KiB after load, {} MiB after touching every page",
        grown / 1024,
        touched / MIB
    );
    assert!(grown < 16 * MIB, "loading made {grown} bytes resident");
    assert!(
        touched > 200 * MIB,
        "touching made only {touched} bytes resident"
    );
}
