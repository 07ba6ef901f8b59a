//! `explain`: everything about a tensor's metadata, for debugging.

use super::Tensor;
use alloc::string::String;
use core::fmt::Write;

/// A multi-line description of `t`: shape, strides, offset, dtype, device,
/// storage bytes and reference count, version, contiguity, view root,
/// requires_grad and grad_fn.
///
/// ```
/// use kael_core::{explain, Device, Tensor};
/// let a = Tensor::arange(0.0f32, 24.0, &Device::cpu())?.reshape(&[2, 3, 4])?;
/// let s = a.slice(1, 1, 3, 1)?;
/// let text = explain(&s);
/// assert!(text.contains("shape: [2, 2, 4]"));
/// assert!(text.contains("offset: 4"));
/// assert!(text.contains("storage: 96 bytes"));
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn explain(t: &Tensor) -> String {
    let mut s = String::new();
    let storage = t.storage();
    let _ = writeln!(s, "shape: {:?}", t.shape());
    let _ = writeln!(s, "strides: {:?}", &t.strides()[..]);
    let _ = writeln!(s, "offset: {}", t.offset());
    let _ = writeln!(
        s,
        "dtype: {:?} ({} bytes/element)",
        t.dtype(),
        t.element_size()
    );
    let _ = writeln!(s, "device: {:?}", t.device().kind());
    let alloc_name = storage.allocator().map_or("external", |a| a.name());
    let _ = writeln!(
        s,
        "storage: {} bytes ({} elements, {})",
        storage.nbytes(),
        storage.nbytes() / t.element_size(),
        alloc_name
    );
    let _ = writeln!(s, "storage references: {}", t.storage_ref_count());
    let _ = writeln!(s, "version: {}", storage.version());
    let _ = writeln!(s, "contiguous: {}", t.is_contiguous());
    match t.base() {
        Some(b) => {
            let _ = writeln!(s, "view of: root with shape {:?}", b.shape());
        }
        None => {
            let _ = writeln!(s, "view of: none (owns its storage)");
        }
    }
    let _ = writeln!(s, "requires_grad: {}", t.requires_grad());
    let _ = write!(s, "grad_fn: {}", t.grad_fn_name().unwrap_or("None"));
    s
}
