//! Layout: how logical positions map to storage elements.
//!
//! INVARIANTS (of every [`Layout`] held by a tensor):
//! 1. `shape.rank() == strides.rank() <= MAX_RANK`.
//! 2. Strides and `offset` count elements, not bytes, and are never negative.
//! 3. When `numel() > 0`, [`Layout::reach`] (one past the furthest element any
//!    position maps to) is at most the storage's element count; when
//!    `numel() == 0`, `offset <= ` that count. `TensorImpl` construction
//!    checks this, so kernels index storage without bounds doubts.
//!
//! Worked example: `arange(24).reshape(2,3,4)[1:,1:,1:]` has shape `[1,2,3]`,
//! strides `[12,4,1]`, offset `17`; its reach is `17 + 0*12 + 1*4 + 2*1 + 1 =
//! 24`, exactly the storage length.
//!
//! Every view transform here is pure metadata arithmetic returning a new
//! `Layout`; it follows PyTorch's shapes, strides and offsets.

use crate::error::{ErrShape, Error, Result};
use crate::shape::{
    Dims, MAX_RANK, checked_numel, contiguous_strides, resolve_dim, resolve_insert_dim,
};

/// Shape, strides and offset (in elements) of a tensor over its storage.
///
/// ```
/// use kael_core::Layout;
/// let l = Layout::contiguous(&[2, 3, 4])?;
/// let s = l.slice(0, 1, 2, 1)?.slice(1, 1, 3, 1)?.slice(2, 1, 4, 1)?;
/// assert_eq!((&s.shape()[..], &s.strides()[..], s.offset()), (&[1, 2, 3][..], &[12, 4, 1][..], 17));
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    shape: Dims,
    strides: Dims,
    offset: usize,
}

/// The largest number of positions for which
/// [`Layout::has_internal_overlap`] enumerates offsets when the stride test
/// cannot decide (a fixed stack buffer of this many `usize`); larger such
/// layouts are reported as overlapping.
pub const OVERLAP_EXACT_LIMIT: usize = 128;

impl Layout {
    /// A row-major contiguous layout at offset 0.
    ///
    /// # Errors
    /// [`Error::RankTooLarge`] for more than 8 dimensions.
    pub fn contiguous(shape: &[usize]) -> Result<Self> {
        let shape = Dims::from_slice(shape)?;
        let strides = contiguous_strides(&shape);
        Ok(Self {
            shape,
            strides,
            offset: 0,
        })
    }

    /// A layout from raw parts.
    ///
    /// # Errors
    /// [`Error::RankTooLarge`], or [`Error::InvalidArgument`] when the ranks differ.
    pub fn new(shape: &[usize], strides: &[usize], offset: usize) -> Result<Self> {
        if shape.len() != strides.len() {
            return Err(Error::InvalidArgument {
                op: "Layout::new",
                reason: "shape and strides have different lengths; pass one stride per dimension",
            });
        }
        Ok(Self {
            shape: Dims::from_slice(shape)?,
            strides: Dims::from_slice(strides)?,
            offset,
        })
    }

    /// Shape, strides and offset, moved out (no copies of the inline arrays).
    pub(crate) fn into_parts(self) -> (Dims, Dims, usize) {
        (self.shape, self.strides, self.offset)
    }

    pub(crate) fn from_dims(shape: Dims, strides: Dims, offset: usize) -> Self {
        debug_assert_eq!(shape.rank(), strides.rank());
        Self {
            shape,
            strides,
            offset,
        }
    }

    /// The sizes.
    pub fn shape(&self) -> &Dims {
        &self.shape
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &Dims {
        &self.strides
    }

    /// The offset of the first element, in elements.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.rank()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.numel()
    }

    /// One past the furthest storage element any position maps to
    /// (`offset` when the layout has no elements).
    pub fn reach(&self) -> usize {
        // Not `numel() == 0`: the product of unchecked sizes may overflow.
        if self.shape.contains(&0) {
            return self.offset;
        }
        self.shape
            .iter()
            .zip(self.strides.iter())
            .fold(self.offset, |acc, (&d, &s)| {
                acc.saturating_add((d - 1).saturating_mul(s))
            })
            .saturating_add(1)
    }

    /// Row-major contiguity, as PyTorch defines it (size-1 dims ignored,
    /// empty tensors contiguous).
    pub fn is_contiguous(&self) -> bool {
        if self.numel() == 0 {
            return true;
        }
        let mut expected = 1usize;
        for (&d, &s) in self.shape.iter().zip(self.strides.iter()).rev() {
            if d != 1 {
                if s != expected {
                    return false;
                }
                expected *= d;
            }
        }
        true
    }

    /// Whether two positions may map to the same element (e.g. after
    /// `expand`).
    ///
    /// Decided from shape and strides, allocating nothing (PyTorch's
    /// `has_internal_overlap`, NumPy's `solve_may_share_memory` bounds):
    /// 1. a dimension of size > 1 with stride 0 overlaps;
    /// 2. sorted by stride (size-1 dimensions skipped), if every stride
    ///    exceeds the furthest offset the smaller-stride dimensions reach,
    ///    positions are distinct (every view made by `narrow`, `permute`,
    ///    `select`, ... is decided here);
    /// 3. otherwise, more positions than offsets in the reachable span
    ///    overlap (pigeonhole);
    /// 4. otherwise a layout of at most [`OVERLAP_EXACT_LIMIT`] positions is
    ///    decided exactly, by sorting its offsets in a fixed stack buffer;
    ///    a larger one (only `as_strided` makes such layouts) is reported
    ///    as overlapping: conservative, so an in-place write into it is
    ///    refused (`deep_clone()` it first) rather than risked.
    ///
    /// Sizes and spans use checked (saturating) arithmetic, so a huge
    /// logical size costs no more than a small one.
    pub fn has_internal_overlap(&self) -> bool {
        if self.shape.contains(&0) {
            return false;
        }
        let mut dims: heapless::Vec<(usize, usize), MAX_RANK> = heapless::Vec::new();
        for (&d, &s) in self.shape.iter().zip(self.strides.iter()) {
            if d > 1 {
                if s == 0 {
                    return true;
                }
                let _ = dims.push((s, d));
            }
        }
        dims.sort_unstable();
        // Furthest offset (from the first) reachable by the dims seen so far;
        // saturating: a span past usize::MAX exceeds every stride anyway.
        let mut span = 0usize;
        let mut separated = true;
        for &(s, d) in dims.iter() {
            if s <= span {
                separated = false;
            }
            span = span.saturating_add((d - 1).saturating_mul(s));
        }
        if separated {
            return false;
        }
        let Some(n) = dims.iter().try_fold(1usize, |n, &(_, d)| n.checked_mul(d)) else {
            return true; // more positions than usize: more than any span holds
        };
        if n > span.saturating_add(1) {
            return true;
        }
        if n > OVERLAP_EXACT_LIMIT {
            return true;
        }
        let mut offs = [0usize; OVERLAP_EXACT_LIMIT];
        let mut len = 0;
        self.for_each_offset(|o| {
            if let Some(slot) = offs.get_mut(len) {
                *slot = o;
                len += 1;
            }
        });
        let offs = &mut offs[..len];
        offs.sort_unstable();
        offs.windows(2).any(|w| w[0] == w[1])
    }

    /// Calls `f` with the storage index of every position, in row-major order.
    pub fn for_each_offset(&self, mut f: impl FnMut(usize)) {
        walk([self], |[o]| f(o));
    }

    // ---------------------------------------------------------------- views

    /// `narrow(dim, start, length)`: positions `start..start+length` of `dim`.
    ///
    /// # Errors
    /// Bad `dim`, or a range that leaves the dimension.
    pub fn narrow(&self, dim: isize, start: usize, length: usize) -> Result<Self> {
        let d = resolve_dim("narrow", dim, self.rank())?;
        let size = self.shape[d];
        let end = start.saturating_add(length);
        if start > size || end > size {
            return Err(Error::IndexOutOfRange {
                op: "narrow",
                index: end as i64,
                size,
            });
        }
        let mut out = self.clone();
        out.shape[d] = length;
        // NOTE [Saturating view arithmetic]: for a layout with elements, every
        // offset and stride below is bounded by its reach (checked against the
        // storage when the view is made). Only empty layouts and size-1 dims,
        // whose strides are never stepped, can carry huge values (from
        // `as_strided`); saturating keeps those from overflowing, and an
        // empty view's offset is clamped when the tensor is made.
        if length > 0 {
            out.offset = out
                .offset
                .saturating_add(start.saturating_mul(self.strides[d]));
        }
        Ok(out)
    }

    /// Python slicing `[start:end:step]` on `dim`: negative bounds count
    /// from the end, out-of-range bounds are clamped, `step >= 1`.
    ///
    /// # Errors
    /// Bad `dim`, or `step < 1`.
    pub fn slice(&self, dim: isize, start: isize, end: isize, step: usize) -> Result<Self> {
        let d = resolve_dim("slice", dim, self.rank())?;
        if step == 0 {
            return Err(Error::InvalidArgument {
                op: "slice",
                reason: "step must be at least 1 (negative steps are not supported; use flip)",
            });
        }
        // i128: sizes of empty `as_strided` layouts may exceed isize::MAX.
        let size = self.shape[d] as i128;
        let clamp = |i: isize| -> usize {
            let i = i as i128;
            let i = if i < 0 { i + size } else { i };
            i.clamp(0, size) as usize
        };
        let (s, e) = (clamp(start), clamp(end));
        let len = if e > s { (e - s).div_ceil(step) } else { 0 };
        let mut out = self.clone();
        out.shape[d] = len;
        if len > 0 {
            out.offset = out.offset.saturating_add(s.saturating_mul(self.strides[d]));
        }
        out.strides[d] = self.strides[d].saturating_mul(step);
        Ok(out)
    }

    /// Removes `dim` by fixing its index (negative counts from the end).
    ///
    /// # Errors
    /// Bad `dim` or `index`.
    pub fn select(&self, dim: isize, index: isize) -> Result<Self> {
        let d = resolve_dim("select", dim, self.rank())?;
        let size = self.shape[d];
        let i = if index < 0 {
            size.checked_sub(index.unsigned_abs())
        } else {
            Some(index as usize)
        };
        let Some(i) = i.filter(|&i| i < size) else {
            return Err(Error::IndexOutOfRange {
                op: "select",
                index: index as i64,
                size,
            });
        };
        let mut out = self.clone();
        out.offset = out.offset.saturating_add(i.saturating_mul(self.strides[d]));
        out.shape.remove(d);
        out.strides.remove(d);
        Ok(out)
    }

    /// Swaps two dimensions.
    ///
    /// # Errors
    /// Bad dims.
    #[inline]
    pub fn transpose(&self, dim0: isize, dim1: isize) -> Result<Self> {
        let a = resolve_dim("transpose", dim0, self.rank())?;
        let b = resolve_dim("transpose", dim1, self.rank())?;
        let mut out = self.clone();
        out.shape.swap(a, b);
        out.strides.swap(a, b);
        Ok(out)
    }

    /// Reorders dimensions: output dim `i` is input dim `dims[i]`.
    ///
    /// # Errors
    /// `dims` is not a permutation of `0..rank`.
    pub fn permute(&self, dims: &[isize]) -> Result<Self> {
        if dims.len() != self.rank() {
            return Err(Error::InvalidArgument {
                op: "permute",
                reason: "the number of dims must equal the tensor's rank; pass a permutation of 0..rank",
            });
        }
        let mut seen = [false; MAX_RANK];
        let mut out = self.clone();
        for (i, &d) in dims.iter().enumerate() {
            let d = resolve_dim("permute", d, self.rank())?;
            if seen[d] {
                return Err(Error::InvalidArgument {
                    op: "permute",
                    reason: "a dimension appears twice; pass each of 0..rank exactly once",
                });
            }
            seen[d] = true;
            out.shape[i] = self.shape[d];
            out.strides[i] = self.strides[d];
        }
        Ok(out)
    }

    /// Broadcasts to `sizes` (stride 0 on new or size-1 dims); `-1` keeps a size.
    ///
    /// # Errors
    /// Fewer sizes than dims, or a non-1 size that differs.
    pub fn expand(&self, sizes: &[isize]) -> Result<Self> {
        let rank = self.rank();
        if sizes.len() < rank {
            return Err(Error::InvalidArgument {
                op: "expand",
                reason: "the number of sizes must be at least the tensor's rank; pass one size per dimension (-1 keeps it)",
            });
        }
        let lead = sizes.len() - rank;
        let mut shape = Dims::new();
        let mut strides = Dims::new();
        for (i, &want) in sizes.iter().enumerate() {
            if i < lead {
                if want < 0 {
                    return Err(Error::InvalidArgument {
                        op: "expand",
                        reason: "-1 is not allowed for a new leading dimension; give its size",
                    });
                }
                shape.push(want as usize)?;
                strides.push(0)?;
                continue;
            }
            let (have, st) = (self.shape[i - lead], self.strides[i - lead]);
            if want == -1 || want as usize == have {
                shape.push(have)?;
                strides.push(st)?;
            } else if want >= 0 && have == 1 {
                shape.push(want as usize)?;
                strides.push(0)?;
            } else {
                let mut w = Dims::new();
                for &s in sizes {
                    w.push(if s < 0 { have } else { s as usize })?;
                }
                return Err(Error::BroadcastMismatch {
                    op: "expand",
                    lhs: ErrShape::of(&self.shape),
                    rhs: ErrShape::of(&w),
                });
            }
        }
        Ok(Self {
            shape,
            strides,
            offset: self.offset,
        })
    }

    /// Inserts a size-1 dimension at `dim` (`-rank-1..=rank`).
    ///
    /// # Errors
    /// Bad `dim` or rank overflow.
    pub fn unsqueeze(&self, dim: isize) -> Result<Self> {
        let d = resolve_insert_dim("unsqueeze", dim, self.rank())?;
        let stride = if d >= self.rank() {
            1
        } else {
            self.strides[d].saturating_mul(self.shape[d])
        };
        let mut out = self.clone();
        out.shape.insert(d, 1)?;
        out.strides.insert(d, stride)?;
        Ok(out)
    }

    /// Removes every size-1 dimension.
    pub fn squeeze(&self) -> Self {
        let mut out = Self {
            shape: Dims::new(),
            strides: Dims::new(),
            offset: self.offset,
        };
        for (&d, &s) in self.shape.iter().zip(self.strides.iter()) {
            if d != 1 {
                let _ = out.shape.push(d);
                let _ = out.strides.push(s);
            }
        }
        out
    }

    /// Removes `dim` if its size is 1; otherwise returns the layout unchanged.
    ///
    /// # Errors
    /// Bad `dim`.
    pub fn squeeze_dim(&self, dim: isize) -> Result<Self> {
        if self.rank() == 0 && (dim == 0 || dim == -1) {
            return Ok(self.clone());
        }
        let d = resolve_dim("squeeze", dim, self.rank())?;
        let mut out = self.clone();
        if self.shape[d] == 1 {
            out.shape.remove(d);
            out.strides.remove(d);
        }
        Ok(out)
    }

    /// The layout of `view(shape)`, when the strides allow it without a copy
    /// (PyTorch's `computeStride`); `None` when they do not.
    pub fn view_strides(&self, new_shape: &[usize]) -> Option<Dims> {
        let old_shape = &self.shape;
        let old_strides = &self.strides;
        let numel = self.numel();
        let mut new_strides = Dims::from_slice(new_shape).ok()?;
        if numel == 0 || old_shape.is_empty() {
            // no elements, or the one element of a rank-0 tensor: any shape
            // with the same numel is a view with contiguous strides (all 1
            // for a scalar, as PyTorch's computeStride gives)
            return Some(contiguous_strides(new_shape));
        }
        let mut view_d = new_shape.len() as isize - 1;
        let mut chunk_base_stride = old_strides.last().copied().unwrap_or(1);
        let mut tensor_numel = 1usize;
        let mut view_numel = 1usize;
        for tensor_d in (0..old_shape.len()).rev() {
            tensor_numel *= old_shape[tensor_d];
            if tensor_d == 0
                || (old_shape[tensor_d - 1] != 1
                    && old_strides[tensor_d - 1] != tensor_numel.saturating_mul(chunk_base_stride))
            {
                while view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d as usize] == 1)
                {
                    new_strides[view_d as usize] = view_numel.saturating_mul(chunk_base_stride);
                    view_numel *= new_shape[view_d as usize];
                    view_d -= 1;
                }
                if view_numel != tensor_numel {
                    return None;
                }
                if tensor_d > 0 {
                    chunk_base_stride = old_strides[tensor_d - 1];
                    tensor_numel = 1;
                    view_numel = 1;
                }
            }
        }
        if view_d != -1 {
            return None;
        }
        Some(new_strides)
    }

    /// `view(shape)` without copying.
    ///
    /// # Errors
    /// [`Error::ElementCountMismatch`], or [`Error::ViewNotPossible`] when the
    /// strides cannot express the new shape (use `reshape`).
    pub fn view(&self, new_shape: &[usize]) -> Result<Self> {
        let shape = Dims::from_slice(new_shape)?;
        if checked_numel("view", &shape).ok() != Some(self.numel()) {
            return Err(Error::ElementCountMismatch {
                op: "view",
                numel: self.numel(),
                shape: ErrShape::of(&shape),
            });
        }
        match self.view_strides(new_shape) {
            Some(strides) => Ok(Self {
                shape,
                strides,
                offset: self.offset,
            }),
            None => Err(Error::ViewNotPossible {
                op: "view",
                shape: ErrShape::of(&self.shape),
                strides: ErrShape::of(&self.strides),
            }),
        }
    }

    /// Sliding windows: `dim` becomes `(size_d - size) / step + 1` windows and a
    /// new last dimension of length `size` is appended.
    ///
    /// # Errors
    /// Bad `dim`, `size` larger than the dimension, `step == 0`, or more
    /// windows than `usize` counts (`size == 0` over a dimension of `usize::MAX`).
    pub fn unfold(&self, dim: isize, size: usize, step: usize) -> Result<Self> {
        let (d, extent, stride) = if self.rank() == 0 {
            if dim != 0 && dim != -1 {
                return Err(Error::DimOutOfRange {
                    op: "unfold",
                    dim,
                    rank: 0,
                });
            }
            (0, 1, 1)
        } else {
            let d = resolve_dim("unfold", dim, self.rank())?;
            (d, self.shape[d], self.strides[d])
        };
        if step == 0 {
            bail_step()?;
        }
        if size > extent {
            return Err(Error::IndexOutOfRange {
                op: "unfold",
                index: size as i64,
                size: extent,
            });
        }
        let mut out = self.clone();
        if self.rank() == 0 {
            out.shape.push(size)?;
            out.strides.push(1)?;
            return Ok(out);
        }
        out.shape[d] = ((extent - size) / step)
            .checked_add(1)
            .ok_or(Error::InvalidArgument {
                op: "unfold",
                reason: "the number of windows overflows usize; use a window size of at least 1",
            })?;
        out.strides[d] = stride.saturating_mul(step);
        out.shape.push(size)?;
        out.strides.push(stride)?;
        Ok(out)
    }

    /// The diagonal of `dim1`/`dim2` shifted by `offset`, appended as the last dimension.
    ///
    /// # Errors
    /// Bad dims, or `dim1 == dim2`.
    pub fn diagonal(&self, offset: isize, dim1: isize, dim2: isize) -> Result<Self> {
        let a = resolve_dim("diagonal", dim1, self.rank())?;
        let b = resolve_dim("diagonal", dim2, self.rank())?;
        if a == b {
            return Err(Error::InvalidArgument {
                op: "diagonal",
                reason: "dim1 and dim2 must differ; pass two distinct dimensions",
            });
        }
        let (sa, sb) = (self.shape[a], self.shape[b]);
        let len = if offset >= 0 {
            sa.min(sb.saturating_sub(offset.unsigned_abs()))
        } else {
            sa.saturating_sub(offset.unsigned_abs()).min(sb)
        };
        let mut off = self.offset;
        if len > 0 {
            if offset >= 0 {
                off = off.saturating_add((offset as usize).saturating_mul(self.strides[b]));
            } else {
                off = off.saturating_add(offset.unsigned_abs().saturating_mul(self.strides[a]));
            }
        }
        let stride = self.strides[a].saturating_add(self.strides[b]);
        let mut shape = Dims::new();
        let mut strides = Dims::new();
        for i in 0..self.rank() {
            if i != a && i != b {
                shape.push(self.shape[i])?;
                strides.push(self.strides[i])?;
            }
        }
        shape.push(len)?;
        strides.push(stride)?;
        Ok(Self {
            shape,
            strides,
            offset: off,
        })
    }
}

fn bail_step() -> Result<()> {
    Err(Error::InvalidArgument {
        op: "unfold",
        reason: "step must be at least 1",
    })
}

/// Walks `N` layouts of one shape in row-major order, calling `f` with the
/// storage index of each layout at every position.
///
/// The shapes must be equal (callers broadcast first); only the first
/// layout's shape is read.
pub fn walk<const N: usize>(layouts: [&Layout; N], mut f: impl FnMut([usize; N])) {
    let shape = layouts[0].shape();
    let rank = shape.rank();
    if shape.numel() == 0 {
        return;
    }
    let mut base: [usize; N] = core::array::from_fn(|k| layouts[k].offset);
    if rank == 0 {
        f(base);
        return;
    }
    let inner = shape[rank - 1];
    let inner_strides: [usize; N] = core::array::from_fn(|k| layouts[k].strides[rank - 1]);
    let mut idx = [0usize; MAX_RANK];
    // Offsets are only ever stepped to positions that exist, so no sum
    // overflows even for huge strides on size-1 dims (`as_strided`); the
    // one step past a row's end is wrapping and never used.
    loop {
        let mut cur = base;
        for _ in 0..inner {
            f(cur);
            for k in 0..N {
                cur[k] = cur[k].wrapping_add(inner_strides[k]);
            }
        }
        // advance the outer multi-index
        let mut d = rank - 1;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            if idx[d] + 1 < shape[d] {
                idx[d] += 1;
                for k in 0..N {
                    base[k] += layouts[k].strides[d];
                }
                break;
            }
            for k in 0..N {
                base[k] -= layouts[k].strides[d] * idx[d];
            }
            idx[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    fn offsets(l: &Layout) -> Vec<usize> {
        let mut v = Vec::new();
        l.for_each_offset(|o| v.push(o));
        v
    }

    #[test]
    fn walk_visits_transposed_positions_in_row_major_order() {
        let l = Layout::contiguous(&[2, 3])
            .unwrap()
            .transpose(0, 1)
            .unwrap();
        assert_eq!(offsets(&l), [0, 3, 1, 4, 2, 5]);
    }

    #[test]
    fn reach_of_the_seed_slice_is_the_storage_length() {
        let l = Layout::contiguous(&[2, 3, 4]).unwrap();
        let s = l
            .slice(0, 1, 2, 1)
            .unwrap()
            .slice(1, 1, 3, 1)
            .unwrap()
            .slice(2, 1, 4, 1)
            .unwrap();
        assert_eq!(s.reach(), 24);
    }

    #[test]
    fn expanded_layout_overlaps_and_transposed_does_not() {
        let l = Layout::contiguous(&[1, 3]).unwrap();
        assert!(l.expand(&[4, 3]).unwrap().has_internal_overlap());
        assert!(
            !Layout::contiguous(&[3, 4])
                .unwrap()
                .transpose(0, 1)
                .unwrap()
                .has_internal_overlap()
        );
        assert!(
            Layout::new(&[2, 2], &[1, 1], 0)
                .unwrap()
                .has_internal_overlap()
        );
        assert!(
            !Layout::new(&[2, 2], &[3, 2], 0)
                .unwrap()
                .has_internal_overlap()
        );
    }

    #[test]
    fn view_strides_follow_compute_stride() {
        let t = Layout::contiguous(&[4, 6])
            .unwrap()
            .transpose(0, 1)
            .unwrap(); // [6,4] strides [1,6]
        assert!(t.view_strides(&[24]).is_none());
        assert_eq!(t.view_strides(&[2, 3, 4]).unwrap(), [3, 1, 6]);
        let s = Layout::contiguous(&[4, 6])
            .unwrap()
            .slice(1, 0, 6, 2)
            .unwrap(); // [4,3] strides [6,2]
        assert_eq!(s.view_strides(&[12]).unwrap(), [2]); // 6 == 3*2: rows merge
        assert_eq!(s.view_strides(&[4, 3, 1]).unwrap(), [6, 2, 2]);
        let u = Layout::contiguous(&[4, 5])
            .unwrap()
            .slice(1, 0, 5, 2)
            .unwrap(); // [4,3] strides [5,2]
        assert!(u.view_strides(&[12]).is_none());
    }
}
