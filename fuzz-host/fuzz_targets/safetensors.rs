//! Fuzz target `safetensors`: the safetensors header parser and the
//! memory-mapped loader of kael-host (`kael_host::safetensors_io::load`).
//!
//! The input bytes are the whole file. Checks:
//! * `load` never panics; every error has a message;
//! * whatever `load` accepts, the `safetensors` crate (an independent
//!   parser) accepts too, with the same tensor names, dtypes, shapes and
//!   data bytes — so kael's zero-copy views read exactly the bytes the
//!   format puts there, whether a tensor was mapped in place or copied;
//! * every loaded tensor's reach stays inside its storage;
//! * an accepted file survives `save` then `load` with identical tensors.
#![no_main]

use kael_core::{DType, Tensor};
use kael_host::safetensors_io::{load, save};
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;

fuzz_target!(|data: &[u8]| run(data));

/// A per-process scratch path (libFuzzer may run several jobs at once).
fn scratch(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "kael-fuzz-safetensors-{}-{tag}.safetensors",
        std::process::id()
    ))
}

fn run(data: &[u8]) {
    let path = scratch("in");
    std::fs::write(&path, data).unwrap();
    let loaded = match load(&path) {
        Ok(f) => f,
        Err(e) => {
            assert!(!e.to_string().is_empty(), "an error without a message");
            return;
        }
    };
    let reference = safetensors::SafeTensors::deserialize(data)
        .unwrap_or_else(|e| panic!("kael accepted a file the safetensors crate rejects: {e}"));
    assert_eq!(loaded.len(), reference.len(), "tensor count");
    for entry in loaded.tensors() {
        let t = entry.tensor();
        let want = reference.tensor(entry.name()).unwrap_or_else(|e| {
            panic!("tensor {:?} missing from the reference: {e}", entry.name())
        });
        assert_eq!(t.shape(), want.shape(), "shape of {:?}", entry.name());
        assert_eq!(
            dtype_name(t.dtype()),
            format!("{:?}", want.dtype()),
            "dtype of {:?}",
            entry.name()
        );
        let reach = t.offset() + t.numel();
        assert!(
            t.numel() == 0 || reach * t.element_size() <= t.storage_nbytes(),
            "{:?} reaches past its storage",
            entry.name()
        );
        // A bool byte other than 0/1 reads as `true` (x != 0), as kael's casts do.
        let want_bytes: Vec<u8> = if t.dtype() == DType::Bool {
            want.data().iter().map(|&b| u8::from(b != 0)).collect()
        } else {
            want.data().to_vec()
        };
        assert_eq!(bytes_of(t), want_bytes, "bytes of {:?}", entry.name());
    }
    round_trip(&loaded);
}

/// Saves every loaded tensor to a new file and loads it back.
fn round_trip(loaded: &kael_host::safetensors_io::SafeTensorsFile) {
    let out = scratch("out");
    let pairs: Vec<(&str, &Tensor)> = loaded
        .tensors()
        .iter()
        .map(|e| (e.name(), e.tensor()))
        .collect();
    save(&out, &pairs).unwrap();
    let again = load(&out).unwrap();
    assert_eq!(again.len(), loaded.len());
    for entry in loaded.tensors() {
        let t2 = again.tensor(entry.name()).unwrap();
        assert_eq!(t2.shape(), entry.tensor().shape());
        assert_eq!(t2.dtype(), entry.tensor().dtype());
        assert_eq!(bytes_of(&t2), bytes_of(entry.tensor()));
    }
}

/// The safetensors crate's `Debug` name of a dtype.
fn dtype_name(d: DType) -> &'static str {
    match d {
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

/// A tensor's elements as little-endian bytes, in logical order.
fn bytes_of(t: &Tensor) -> Vec<u8> {
    match t.dtype() {
        DType::F32 => le(t.to_vec::<f32>().unwrap(), f32::to_le_bytes),
        DType::F64 => le(t.to_vec::<f64>().unwrap(), f64::to_le_bytes),
        DType::F16 => le(t.to_vec::<kael_core::f16>().unwrap(), |x| x.to_le_bytes()),
        DType::BF16 => le(t.to_vec::<kael_core::bf16>().unwrap(), |x| x.to_le_bytes()),
        DType::I64 => le(t.to_vec::<i64>().unwrap(), i64::to_le_bytes),
        DType::I32 => le(t.to_vec::<i32>().unwrap(), i32::to_le_bytes),
        DType::I16 => le(t.to_vec::<i16>().unwrap(), i16::to_le_bytes),
        DType::I8 => le(t.to_vec::<i8>().unwrap(), i8::to_le_bytes),
        DType::U8 => t.to_vec::<u8>().unwrap(),
        DType::Bool => t
            .to_vec::<bool>()
            .unwrap()
            .into_iter()
            .map(u8::from)
            .collect(),
    }
}

fn le<T: Copy, const N: usize>(v: Vec<T>, f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    v.into_iter().flat_map(f).collect()
}
