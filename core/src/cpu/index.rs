//! Indexing kernels: index_select, gather and their adjoint scatters.
//!
//! Index tensors are `I64` or `I32` with any strides. Every kernel reads and
//! checks *all* index values before it takes the destination's write guard,
//! so a bad index ([`Error::IndexOutOfRange`], negative ones included, as in
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
use crate::storage::{ReadGuard, typed, typed_mut};
use alloc::vec::Vec;

/// Typed index values of a read-locked index tensor.
enum Indices<'a> {
    I64(&'a [i64]),
    I32(&'a [i32]),
}

impl<'a> Indices<'a> {
    fn of(op: &'static str, dtype: DType, g: &'a ReadGuard<'_>) -> Result<Self> {
        match dtype {
            DType::I64 => Ok(Indices::I64(typed::<i64>(g.bytes())?)),
            DType::I32 => Ok(Indices::I32(typed::<i32>(g.bytes())?)),
            other => Err(Error::UnsupportedDType {
                op,
                dtype: other,
                supported: "i64, i32 (indices)",
            }),
        }
    }

    #[inline]
    fn get(&self, o: usize) -> i64 {
        match self {
            Indices::I64(s) => s[o],
            Indices::I32(s) => i64::from(s[o]),
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

/// Reads a 1-D index tensor into positions checked against `size`.
fn read_1d(op: &'static str, indices: &Src<'_>, size: usize) -> Result<Vec<usize>> {
    if indices.layout.rank() != 1 {
        return Err(Error::RankMismatch {
            op,
            expected: "1",
            got: indices.layout.rank(),
        });
    }
    let g = indices.storage.read(op)?;
    let ix = Indices::of(op, indices.dtype, &g)?;
    let n = indices.layout.numel();
    let mut out = Vec::new();
    out.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
        requested: n.saturating_mul(core::mem::size_of::<usize>()),
        available: None,
    })?;
    let mut bad = None;
    indices.layout.for_each_offset(|o| {
        let v = ix.get(o);
        match checked(op, v, size) {
            Ok(i) => out.push(i),
            Err(e) => {
                bad.get_or_insert(e);
            }
        }
    });
    match bad {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Checks every value of an any-rank index tensor against `size`.
fn check_all(op: &'static str, index: &Src<'_>, size: usize) -> Result<()> {
    let g = index.storage.read(op)?;
    let ix = Indices::of(op, index.dtype, &g)?;
    let mut bad = None;
    index.layout.for_each_offset(|o| {
        if bad.is_none() {
            if let Err(e) = checked(op, ix.get(o), size) {
                bad = Some(e);
            }
        }
    });
    bad.map_or(Ok(()), Err)
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
    let ix = read_1d(OP, &indices, src.layout.shape()[dim])?;
    dispatch_in!(DTYPES, OP, dst.dtype, T => {
        let gs = src.storage.read(OP)?;
        let mut gd = dst.storage.write(OP)?;
        let s = typed::<T>(gs.bytes())?;
        let d = typed_mut::<T>(gd.bytes_mut())?;
        for (i, &j) in ix.iter().enumerate() {
            let from = src.layout.select(dim as isize, j as isize)?;
            let to = dst.layout.select(dim as isize, i as isize)?;
            walk([&to, &from], |[od, os]| d[od] = s[os]);
        }
        Ok(())
    })
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
    let ishape = index.layout.shape();
    check_all(OP, &index, src.layout.shape()[dim])?;
    let base = restricted(src.layout, ishape, Some(dim))?;
    let step = src.layout.strides()[dim];
    dispatch_in!(DTYPES, OP, dst.dtype, T => {
        let gi = index.storage.read(OP)?;
        let ix = Indices::of(OP, index.dtype, &gi)?;
        let gs = src.storage.read(OP)?;
        let mut gd = dst.storage.write(OP)?;
        let s = typed::<T>(gs.bytes())?;
        let d = typed_mut::<T>(gd.bytes_mut())?;
        // values were checked above: 0 <= index < size
        walk([dst.layout, index.layout, &base], |[od, oi, ob]| {
            d[od] = s[ob + ix.get(oi) as usize * step];
        });
        Ok(())
    })
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
    let ix = read_1d(OP, &indices, dst.layout.shape()[dim])?;
    dispatch_in!(DTYPES, OP, dst.dtype, T => {
        let gs = src.storage.read(OP)?;
        let mut gd = dst.storage.write(OP)?;
        let s = typed::<T>(gs.bytes())?;
        let d = typed_mut::<T>(gd.bytes_mut())?;
        for (i, &j) in ix.iter().enumerate() {
            let to = dst.layout.select(dim as isize, j as isize)?;
            let from = src.layout.select(dim as isize, i as isize)?;
            walk([&to, &from], |[od, os]| d[od] = d[od].add(s[os]));
        }
        Ok(())
    })
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
    let ishape = index.layout.shape();
    check_all(OP, &index, dst.layout.shape()[dim])?;
    let from = restricted(src.layout, ishape, None)?;
    let base = restricted(dst.layout, ishape, Some(dim))?;
    let step = dst.layout.strides()[dim];
    dispatch_in!(DTYPES, OP, dst.dtype, T => {
        let gi = index.storage.read(OP)?;
        let ix = Indices::of(OP, index.dtype, &gi)?;
        let gs = src.storage.read(OP)?;
        let mut gd = dst.storage.write(OP)?;
        let s = typed::<T>(gs.bytes())?;
        let d = typed_mut::<T>(gd.bytes_mut())?;
        // values were checked above: 0 <= index < size
        walk([index.layout, &from, &base], |[oi, os, ob]| {
            let od = ob + ix.get(oi) as usize * step;
            d[od] = d[od].add(s[os]);
        });
        Ok(())
    })
}
