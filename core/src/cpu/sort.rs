//! The argsort family ([`Backend::argsort`](crate::backend::Backend::argsort)):
//! the indices that sort each fiber of a tensor along one dimension,
//! stably, with NaN after every number (PyTorch's order). `sort`, `topk`
//! and `argsort` are this family and a `gather`.
//!
//! ```
//! use kael_core::{Device, Tensor};
//! let x = Tensor::from_slice(&[3.0f32, f32::NAN, 1.0, 3.0], &[4], &Device::cpu())?;
//! assert_eq!(x.argsort(0, false)?.to_vec::<i64>()?, vec![2, 0, 3, 1]);
//! # Ok::<(), kael_core::Error>(())
//! ```

use crate::backend::{Dst, Src, contract};
use crate::cpu::select::dtypes;
use crate::dispatch_in;
use crate::dtype::Scalar;
use crate::error::{Error, Result};
use crate::layout::{Layout, walk};
use crate::storage::{typed, typed_mut};
use alloc::vec::Vec;
use core::cmp::Ordering;

/// The reference argsort.
///
/// # Errors
/// As [`contract::argsort`]; [`Error::OutOfMemory`] for the scratch.
pub fn argsort(src: Src<'_>, dim: usize, descending: bool, dst: Dst<'_>) -> Result<()> {
    argsort_in::<{ dtypes::ALL }>(src, dim, descending, dst)
}

/// [`argsort`] for sources with a dtype in `DTYPES` only (NOTE [Kernel
/// selection]).
///
/// # Errors
/// As [`argsort`], and [`Error::UnsupportedDType`] outside `DTYPES`.
pub fn argsort_in<const DTYPES: u16>(
    src: Src<'_>,
    dim: usize,
    descending: bool,
    dst: Dst<'_>,
) -> Result<()> {
    const OP: &str = "argsort";
    contract::argsort(src, dim, dst)?;
    let n = src.layout.shape()[dim];
    let mut scratch = Vec::new();
    scratch
        .try_reserve_exact(n.saturating_mul(2))
        .map_err(|_| Error::OutOfMemory {
            requested: n.saturating_mul(16),
            available: None,
        })?;
    scratch.resize(n.saturating_mul(2), 0usize);
    let gs = src.storage.read(OP)?;
    let mut gd = dst.storage.write(OP)?;
    let d = typed_mut::<i64>(gd.bytes_mut())?;
    dispatch_in!(DTYPES, OP, src.dtype, T => {
        argsort_slices((typed::<T>(gs.bytes())?, src.layout), dim, descending, (d, dst.layout), &mut scratch);
        Ok(())
    })
}

/// How two keys order: NaN after every number and equal to NaN, so the
/// order is total and a stable sort's result is unique.
#[inline]
fn order<T: Scalar>(x: T, y: T) -> Ordering {
    if T::DTYPE.is_float() {
        let (x, y) = (x.to_f64(), y.to_f64());
        match (x.is_nan(), y.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
        }
    } else {
        x.as_i64().cmp(&y.as_i64())
    }
}

/// [`argsort`] on slices (NOTE [Slice-level kernels] in
/// [`super::index`]): each fiber along `dim` sorted stably (a bottom-up
/// merge sort in `scratch`, `2 * n` positions), its permutation written
/// along `dim` of `d`. The eager kernel and a plan's replay run it. The
/// contract has been checked by the caller; `scratch` shorter than `2 *
/// n` leaves `d` unwritten.
pub(crate) fn argsort_slices<T: Scalar>(
    (s, sl): (&[T], &Layout),
    dim: usize,
    descending: bool,
    (d, dl): (&mut [i64], &Layout),
    scratch: &mut [usize],
) {
    let n = sl.shape()[dim];
    let (ss, ds) = (sl.strides()[dim], dl.strides()[dim]);
    let Some(scratch) = scratch.get_mut(..n.saturating_mul(2)) else {
        return;
    };
    let (mut a, mut b) = scratch.split_at_mut(n);
    let fibers = |l: &Layout| {
        let mut shape = l.shape().clone();
        shape[dim] = 1;
        Layout::from_dims(shape, l.strides().clone(), l.offset())
    };
    let key = |base: usize, j: usize| s[base + j * ss];
    walk([&fibers(sl), &fibers(dl)], |[bs, bd]| {
        let cmp = |x: usize, y: usize| {
            let c = order(key(bs, x), key(bs, y));
            if descending { c.reverse() } else { c }
        };
        for (j, p) in a.iter_mut().enumerate() {
            *p = j;
        }
        let mut width = 1;
        while width < n {
            let mut lo = 0;
            while lo < n {
                let mid = (lo + width).min(n);
                let hi = (lo + 2 * width).min(n);
                let (mut i, mut j) = (lo, mid);
                for out in b[lo..hi].iter_mut() {
                    // Stable: the left run's element wins a tie.
                    let left = i < mid && (j >= hi || cmp(a[i], a[j]) != Ordering::Greater);
                    if left {
                        *out = a[i];
                        i += 1;
                    } else {
                        *out = a[j];
                        j += 1;
                    }
                }
                lo = hi;
            }
            core::mem::swap(&mut a, &mut b);
            width *= 2;
        }
        for (j, &p) in a.iter().enumerate() {
            d[bd + j * ds] = p as i64;
        }
    });
}
