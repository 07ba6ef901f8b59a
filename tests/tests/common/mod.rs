//! Shared test support: device parametrisation and comparison helpers.
#![allow(dead_code)]

use kael_core::{Device, Tensor};
use std::io::Write;

/// Says, where a user sees it, that a test passed without running its
/// check: writes `SKIPPED <test>: <why>` on a line of its own straight to
/// the process's stderr, past the test harness's output capture
/// (`println!` in a passing test is swallowed), so the line shows in
/// `cargo test` output and `scripts/test.sh` lists it in its summary.
pub fn skip(why: &str) {
    let name = std::thread::current().name().unwrap_or("?").to_string();
    say(&format!("\nSKIPPED {name}: {why}\n"));
}

/// One `write` call, so the line is not torn by the harness's output.
fn say(line: &str) {
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// [`skip`] once per test binary for a reason every case shares (no CUDA
/// driver: one line, not one per device test).
pub fn skip_once(why: &str) {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        say(&format!(
            "\nSKIPPED every cuda case of this test binary: {why}\n"
        ));
    });
}

/// The threaded CPU device with its defaults (threads = cores, the default
/// parallel threshold): small test inputs run inline.
pub fn threaded() -> Device {
    kael_host::cpu_threaded::device().unwrap()
}

/// The threaded CPU device with a parallel threshold of 1 element and 2
/// threads, so every parallel path (chunking, gathering, per-thread
/// partial results) runs on the small inputs of the tests.
pub fn threaded_chunked() -> Device {
    kael_host::cpu_threaded::Builder::new()
        .threads(2)
        .parallel_threshold(1)
        .build()
        .unwrap()
}

/// CUDA device 0 (feature `cuda`), or `None` after printing one line
/// saying why the test is skipped. With `KAEL_REQUIRE_CUDA` set (as
/// `scripts/gpu-check.sh` does) a missing GPU fails the test instead.
#[cfg(feature = "cuda")]
pub fn cuda() -> Option<Device> {
    match kael_host::cuda::device(0) {
        Ok(d) => Some(d),
        Err(e) if e.is_no_gpu() && std::env::var_os("KAEL_REQUIRE_CUDA").is_none() => {
            skip_once(&format!("{e}"));
            None
        }
        Err(e) => panic!("CUDA device 0 could not be opened: {e}"),
    }
}

/// Every device available to this test run: the reference CPU, the
/// threaded CPU with its defaults, the threaded CPU with a tiny parallel
/// threshold, and CUDA device 0 when the `cuda` feature is on and a GPU is
/// present.
pub fn devices() -> Vec<(&'static str, Device)> {
    #[allow(unused_mut)]
    let mut devs = vec![
        ("cpu", Device::cpu()),
        ("threaded_cpu", threaded()),
        ("threaded_chunked", threaded_chunked()),
    ];
    #[cfg(feature = "cuda")]
    if let Some(d) = cuda() {
        devs.push(("cuda", d));
    }
    devs
}

/// Writes a device-parametrised test once:
/// `test_device!(name, |dev| { ... Ok(()) });` expands into
/// `mod name { #[test] fn cpu() #[test] fn threaded_cpu() #[test] fn threaded_chunked() }`,
/// one test per device of [`devices`], plus `fn cuda()` with the `cuda`
/// feature (which skips, printing one line, when no GPU is present).
#[macro_export]
macro_rules! test_device {
    // `test_device!(cuda: name, |dev| { ... })`: CUDA device 0 only (feature
    // `cuda`; skips with one printed line when no GPU is present), for what
    // is specific to the CUDA backend.
    (cuda: $name:ident, |$dev:ident| $body:block) => {
        #[test]
        fn $name() {
            if let Some($dev) = $crate::common::cuda() {
                let run = |$dev: &kael_core::Device| -> kael_core::Result<()> { $body };
                run(&$dev).unwrap();
            }
        }
    };
    ($name:ident, $body:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            #[test]
            fn cpu() {
                let f: fn(&kael_core::Device) -> kael_core::Result<()> = $body;
                f(&kael_core::Device::cpu()).unwrap();
            }
            // Not under Miri: the device's rayon pool starts worker threads,
            // and crossbeam-epoch (under rayon) casts integers to pointers,
            // which Miri's strict provenance refuses. The threaded backend's
            // own unsafe code (its caching allocator) runs under Miri in
            // kael-host's unit tests; its kernels are checked against the
            // reference by the conformance suite.
            #[test]
            #[cfg_attr(miri, ignore)]
            fn threaded_cpu() {
                let f: fn(&kael_core::Device) -> kael_core::Result<()> = $body;
                f(&kael_host::cpu_threaded::device().unwrap()).unwrap();
            }
            #[test]
            #[cfg_attr(miri, ignore)] // see `threaded_cpu`
            fn threaded_chunked() {
                let f: fn(&kael_core::Device) -> kael_core::Result<()> = $body;
                f(&kael_host::cpu_threaded::Builder::new()
                    .threads(2)
                    .parallel_threshold(1)
                    .build()
                    .unwrap())
                .unwrap();
            }
            #[cfg(feature = "cuda")]
            #[test]
            fn cuda() {
                let f: fn(&kael_core::Device) -> kael_core::Result<()> = $body;
                if let Some(dev) = $crate::common::cuda() {
                    f(&dev).unwrap();
                }
            }
        }
    };
}

/// Asserts two f32 slices agree within `tol` (absolute + relative); equal
/// infinities and NaN against NaN agree.
#[track_caller]
pub fn assert_close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "length: got {got:?}, want {want:?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = g == w || (g.is_nan() && w.is_nan()) || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(
            ok,
            "element {i}: got {g}, want {w}\n got {got:?}\nwant {want:?}"
        );
    }
}

/// Asserts two f64 slices agree within `tol` (absolute + relative).
#[track_caller]
pub fn assert_close64(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "length: got {got:?}, want {want:?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = g == w || (g.is_nan() && w.is_nan()) || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(
            ok,
            "element {i}: got {g}, want {w}\n got {got:?}\nwant {want:?}"
        );
    }
}

/// Shape, strides and offset of `t`.
pub fn meta(t: &Tensor) -> (Vec<usize>, Vec<usize>, usize) {
    (t.shape().to_vec(), t.strides().to_vec(), t.offset())
}

/// A snapshot of everything observable about a tensor, to check that a
/// refused operation left it unchanged.
pub fn snapshot(t: &Tensor) -> (Vec<usize>, Vec<usize>, usize, usize, Vec<u8>) {
    // Through the backend, so device memory (CUDA) is read too.
    let storage = t.storage();
    let mut bytes = vec![0u8; storage.nbytes()];
    storage
        .device()
        .backend()
        .read_bytes(&storage, 0, &mut bytes)
        .unwrap();
    (
        t.shape().to_vec(),
        t.strides().to_vec(),
        t.offset(),
        t.version(),
        bytes,
    )
}
