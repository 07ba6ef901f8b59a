//! Indexing kernels: index_select, gather and their adjoint scatters.
//!
//! Index tensors are `I64` or `I32` with any strides. Every kernel reads and
//! checks *all* index values before it writes the destination, so a bad
//! index ([`Error::IndexOutOfRange`], negative ones included, as in
//! PyTorch's `index_select`) leaves the destination untouched.
//!
//! The structural checks (dtypes, dims, ranks, shapes, aliasing) are the
//! kernel contract's, shared with every backend (NOTE [Kernel contract
//! checks] in [`crate::backend::contract`]); the kernels check index values.

use crate::backend::{Dst, Src, contract};
use crate::cpu::select::dtypes;
use crate::dispatch_in;
use crate::dtype::{DType, Scalar};
use crate::error::{Error, Result};
use crate::layout::{Layout, walk};
use crate::storage::{typed, typed_mut};

/// Index values read from an index tensor's bytes: `I64` or `I32`, at
/// any alignment (a planned replay's constants are only word-aligned).
pub(crate) enum Indices<'a> {
    I64(&'a [i64]),
    I32(&'a [i32]),
    /// Little-endian `i64`s that are not 8-byte aligned.
    Le64(&'a [u8]),
}

impl<'a> Indices<'a> {
    /// The index values in `bytes`, which hold `dtype`.
    pub(crate) fn of(op: &'static str, dtype: DType, bytes: &'a [u8]) -> Result<Self> {
        match dtype {
            DType::I64 => Ok(typed::<i64>(bytes).map_or(Indices::Le64(bytes), Indices::I64)),
            DType::I32 => Ok(Indices::I32(typed::<i32>(bytes)?)),
            other => Err(Error::UnsupportedDType {
                op,
                dtype: other,
                supported: "i64, i32 (indices)",
            }),
        }
    }

    #[inline]
    pub(crate) fn get(&self, o: usize) -> i64 {
        match self {
            Indices::I64(s) => s[o],
            Indices::I32(s) => i64::from(s[o]),
            Indices::Le64(b) => {
                let mut w = [0u8; 8];
                w.copy_from_slice(&b[8 * o..8 * o + 8]);
                i64::from_le_bytes(w)
            }
        }
    }
}

/// `v` as a position in a dimension of `size`, or [`Error::IndexOutOfRange`].
#[inline]
fn checked(op: &'static str, v: i64, size: usize) -> Result<usize> {
    match usize::try_from(v) {
        Ok(i) if i < size => Ok(i),
        _ => Err(Error::IndexOutOfRange { op, index: v, size }),
    }
}

/// Checks every value of the index tensor `ix` (laid out as `il`)
/// against `size`: the first bad one is the error.
pub(crate) fn check_all(
    op: &'static str,
    ix: &Indices<'_>,
    il: &Layout,
    size: usize,
) -> Result<()> {
    let mut bad = None;
    il.for_each_offset(|o| {
        if bad.is_none() {
            if let Err(e) = checked(op, ix.get(o), size) {
                bad = Some(e);
            }
        }
    });
    bad.map_or(Ok(()), Err)
}

/// The storage offset of the `i`-th value of a 1-D index layout.
#[inline]
fn at_1d(il: &Layout, i: usize) -> usize {
    il.offset() + i * il.strides()[0]
}

/// `layout` restricted to `shape` (each size at most the layout's), with
/// the stride of `zero_dim` (if any) set to 0.
fn restricted(layout: &Layout, shape: &[usize], zero_dim: Option<usize>) -> Result<Layout> {
    let mut strides = layout.strides().clone();
    if let Some(d) = zero_dim {
        strides[d] = 0;
    }
    Layout::new(shape, &strides, layout.offset())
}

// NOTE [Slice-level kernels]
// Each indexing family has one kernel over slices and layouts, with no
// `Storage`, no lock and no allocation (`*_slices` below). The eager
// reference backend calls it on its storages' bytes, and a planned replay
// calls it on arena and bound memory (`plan::replay`), so eager and
// replayed results are the same code's, bit for bit. The contract
// (`backend::contract`) has been checked by the caller; each kernel checks
// every index value before it writes anything.

/// [`index_select`] on slices (NOTE [Slice-level kernels]).
///
/// # Errors
/// [`Error::IndexOutOfRange`] for a bad index (nothing written).
pub(crate) fn index_select_slices<T: Copy>(
    (s, sl): (&[T], &Layout),
    dim: usize,
    (ix, il): (&Indices<'_>, &Layout),
    (d, dl): (&mut [T], &Layout),
) -> Result<()> {
    const OP: &str = "index_select";
    check_all(OP, ix, il, sl.shape()[dim])?;
    for i in 0..il.numel() {
        let j = ix.get(at_1d(il, i)) as usize;
        let from = sl.select(dim as isize, j as isize)?;
        let to = dl.select(dim as isize, i as isize)?;
        walk([&to, &from], |[od, os]| d[od] = s[os]);
    }
    Ok(())
}

/// [`gather`] on slices (NOTE [Slice-level kernels]).
///
/// # Errors
/// [`Error::IndexOutOfRange`] for a bad index (nothing written).
pub(crate) fn gather_slices<T: Copy>(
    (s, sl): (&[T], &Layout),
    dim: usize,
    (ix, il): (&Indices<'_>, &Layout),
    (d, dl): (&mut [T], &Layout),
) -> Result<()> {
    check_all("gather", ix, il, sl.shape()[dim])?;
    let base = restricted(sl, il.shape(), Some(dim))?;
    let step = sl.strides()[dim];
    // values were checked above: 0 <= index < size
    walk([dl, il, &base], |[od, oi, ob]| {
        d[od] = s[ob + ix.get(oi) as usize * step];
    });
    Ok(())
}

/// [`index_add`] on slices (NOTE [Slice-level kernels]).
///
/// # Errors
/// [`Error::IndexOutOfRange`] for a bad index (nothing written).
pub(crate) fn index_add_slices<T: Scalar>(
    (d, dl): (&mut [T], &Layout),
    dim: usize,
    (ix, il): (&Indices<'_>, &Layout),
    (s, sl): (&[T], &Layout),
) -> Result<()> {
    check_all("index_add", ix, il, dl.shape()[dim])?;
    for i in 0..il.numel() {
        let j = ix.get(at_1d(il, i)) as usize;
        let to = dl.select(dim as isize, j as isize)?;
        let from = sl.select(dim as isize, i as isize)?;
        walk([&to, &from], |[od, os]| d[od] = d[od].add(s[os]));
    }
    Ok(())
}

/// [`scatter_add`] on slices (NOTE [Slice-level kernels]).
///
/// # Errors
/// [`Error::IndexOutOfRange`] for a bad index (nothing written).
pub(crate) fn scatter_add_slices<T: Scalar>(
    (d, dl): (&mut [T], &Layout),
    dim: usize,
    (ix, il): (&Indices<'_>, &Layout),
    (s, sl): (&[T], &Layout),
) -> Result<()> {
    check_all("scatter_add", ix, il, dl.shape()[dim])?;
    let from = restricted(sl, il.shape(), None)?;
    let base = restricted(dl, il.shape(), Some(dim))?;
    let step = dl.strides()[dim];
    // values were checked above: 0 <= index < size
    walk([il, &from, &base], |[oi, os, ob]| {
        let od = ob + ix.get(oi) as usize * step;
        d[od] = d[od].add(s[os]);
    });
    Ok(())
}

/// Runs a slice-level indexing kernel on storages: the index values, the
/// source and the destination's bytes, typed as `T`.
macro_rules! on_storages {
    ($op:expr, $T:ty, $src:expr, $ix:expr, $dst:expr, |$s:ident, $i:ident, $d:ident| $body:expr) => {{
        let gi = $ix.storage.read($op)?;
        let $i = Indices::of($op, $ix.dtype, gi.bytes())?;
        let gs = $src.storage.read($op)?;
        let mut gd = $dst.storage.write($op)?;
        let $s = typed::<$T>(gs.bytes())?;
        let $d = typed_mut::<$T>(gd.bytes_mut())?;
        $body
    }};
}

/// `index_select` along `dim`: `dst` is `src` with `dim` resized to the
/// number of indices, `dst.select(dim, i) = src.select(dim, indices[i])`.
///
/// # Errors
/// [`Error::IndexOutOfRange`] for a bad index (nothing written); shape,
/// dtype and aliasing errors for arguments the tensor layer would refuse.
pub fn index_select(src: Src<'_>, dim: usize, indices: Src<'_>, dst: Dst<'_>) -> Result<()> {
    index_select_in::<{ dtypes::ALL }>(src, dim, indices, dst)
}

/// [`index_select`] for the dtypes in `DTYPES` only (NOTE [Kernel selection]).
///
/// # Errors
/// As [`index_select`], and [`Error::UnsupportedDType`] for a dtype outside
/// `DTYPES`.
pub fn index_select_in<const DTYPES: u16>(
    src: Src<'_>,
    dim: usize,
    indices: Src<'_>,
    dst: Dst<'_>,
) -> Result<()> {
    const OP: &str = "index_select";
    contract::index_select(src, dim, indices, dst)?;
    dispatch_in!(DTYPES, OP, dst.dtype, T => on_storages!(OP, T, src, indices, dst, |s, ix, d| {
        index_select_slices((s, src.layout), dim, (&ix, indices.layout), (d, dst.layout))
    }))
}

/// PyTorch `gather`: `dst[p] = src[p with dim replaced by index[p]]`, over
/// every position `p` of `index` (which has `dst`'s shape).
///
/// # Errors
/// [`Error::IndexOutOfRange`] for a bad index (nothing written); shape,
/// dtype and aliasing errors for arguments the tensor layer would refuse.
pub fn gather(src: Src<'_>, dim: usize, index: Src<'_>, dst: Dst<'_>) -> Result<()> {
    gather_in::<{ dtypes::ALL }>(src, dim, index, dst)
}

/// [`gather`] for the dtypes in `DTYPES` only (NOTE [Kernel selection]).
///
/// # Errors
/// As [`gather`], and [`Error::UnsupportedDType`] for a dtype outside
/// `DTYPES`.
pub fn gather_in<const DTYPES: u16>(
    src: Src<'_>,
    dim: usize,
    index: Src<'_>,
    dst: Dst<'_>,
) -> Result<()> {
    const OP: &str = "gather";
    contract::gather(src, dim, index, dst)?;
    dispatch_in!(DTYPES, OP, dst.dtype, T => on_storages!(OP, T, src, index, dst, |s, ix, d| {
        gather_slices((s, src.layout), dim, (&ix, index.layout), (d, dst.layout))
    }))
}

/// `dst.index_add_(dim, indices, src)`: `dst.select(dim, indices[i]) +=
/// src.select(dim, i)`, in index order (repeated indices accumulate).
///
/// # Errors
/// [`Error::IndexOutOfRange`] for a bad index (nothing written); bool;
/// shape, dtype and aliasing errors for arguments the tensor layer would
/// refuse.
pub fn index_add(dst: Dst<'_>, dim: usize, indices: Src<'_>, src: Src<'_>) -> Result<()> {
    index_add_in::<{ dtypes::ALL }>(dst, dim, indices, src)
}

/// [`index_add`] for the dtypes in `DTYPES` only (NOTE [Kernel selection]).
///
/// # Errors
/// As [`index_add`], and [`Error::UnsupportedDType`] for a dtype outside
/// `DTYPES`.
pub fn index_add_in<const DTYPES: u16>(
    dst: Dst<'_>,
    dim: usize,
    indices: Src<'_>,
    src: Src<'_>,
) -> Result<()> {
    const OP: &str = "index_add";
    contract::index_add(dst, dim, indices, src)?;
    dispatch_in!(DTYPES, OP, dst.dtype, T => on_storages!(OP, T, src, indices, dst, |s, ix, d| {
        index_add_slices((d, dst.layout), dim, (&ix, indices.layout), (s, src.layout))
    }))
}

/// `dst.scatter_add_(dim, index, src)`: `dst[p with dim replaced by
/// index[p]] += src[p]` over every position `p` of `index`, in row-major
/// order (repeated targets accumulate deterministically).
///
/// # Errors
/// [`Error::IndexOutOfRange`] for a bad index (nothing written); bool;
/// shape, dtype and aliasing errors for arguments the tensor layer would
/// refuse.
pub fn scatter_add(dst: Dst<'_>, dim: usize, index: Src<'_>, src: Src<'_>) -> Result<()> {
    scatter_add_in::<{ dtypes::ALL }>(dst, dim, index, src)
}

/// [`scatter_add`] for the dtypes in `DTYPES` only (NOTE [Kernel selection]).
///
/// # Errors
/// As [`scatter_add`], and [`Error::UnsupportedDType`] for a dtype outside
/// `DTYPES`.
pub fn scatter_add_in<const DTYPES: u16>(
    dst: Dst<'_>,
    dim: usize,
    index: Src<'_>,
    src: Src<'_>,
) -> Result<()> {
    const OP: &str = "scatter_add";
    contract::scatter_add(dst, dim, index, src)?;
    dispatch_in!(DTYPES, OP, dst.dtype, T => on_storages!(OP, T, src, index, dst, |s, ix, d| {
        scatter_add_slices((d, dst.layout), dim, (&ix, index.layout), (s, src.layout))
    }))
}
