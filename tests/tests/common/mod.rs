//! Shared test support: device parametrisation and comparison helpers.
#![allow(dead_code)]

use kael_core::{Device, Tensor};

/// Every device available to this test run. Reference CPU always; threaded
/// CPU and CUDA join as their backends land.
pub fn devices() -> Vec<(&'static str, Device)> {
    vec![("cpu", Device::cpu())]
}

/// Writes a device-parametrised test once:
/// `test_device!(name, |dev| { ... Ok(()) });` expands into `mod name { #[test] fn cpu() }`
/// (and one test per further device as backends land).
#[macro_export]
macro_rules! test_device {
    ($name:ident, $body:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            #[test]
            fn cpu() {
                let f: fn(&kael_core::Device) -> kael_core::Result<()> = $body;
                f(&kael_core::Device::cpu()).unwrap();
            }
        }
    };
}

/// Asserts two f32 slices agree within `tol` (absolute + relative).
#[track_caller]
pub fn assert_close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "length: got {got:?}, want {want:?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || (g - w).abs() <= tol * (1.0 + w.abs());
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
        let ok = (g.is_nan() && w.is_nan()) || (g - w).abs() <= tol * (1.0 + w.abs());
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
    let bytes = t
        .storage()
        .read("snapshot")
        .map(|g| g.bytes().to_vec())
        .unwrap_or_default();
    (
        t.shape().to_vec(),
        t.strides().to_vec(),
        t.offset(),
        t.version(),
        bytes,
    )
}
