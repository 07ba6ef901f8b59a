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

mod views;

use crate::error::{Error, Result};
use crate::shape::{Dims, MAX_RANK, contiguous_strides};

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

    pub(crate) fn from_dims(shape: Dims, strides: Dims, offset: usize) -> Self {
        debug_assert_eq!(shape.rank(), strides.rank());
        Self {
            shape,
            strides,
            offset,
        }
    }

    /// A layout of `shape` whose strides and offset are still to be
    /// placed (all 0) by one of the `place` methods. These build a layout
    /// in place, copying each `Dims` once: on Cortex-M every copy or move
    /// of a `Dims` is a memcpy call, and the small-op path is mostly that
    /// (NOTE [Small-op path]).
    #[inline]
    pub(crate) fn of_shape(shape: &Dims) -> Self {
        Self {
            shape: shape.clone(),
            strides: Dims::zeros_like(shape),
            offset: 0,
        }
    }

    /// Sets row-major contiguous strides at offset 0.
    pub(crate) fn place_contiguous(&mut self) {
        let mut acc = 1usize;
        for (st, &d) in self.strides.iter_mut().zip(self.shape.iter()).rev() {
            *st = acc;
            acc = acc.saturating_mul(d.max(1));
        }
        self.offset = 0;
    }

    /// Sets the strides and offset of a tensor with `shape`, `strides` and
    /// `offset` read broadcast to this layout's shape, which
    /// [`broadcast_shapes`] made from `shape` and another (so it has at
    /// least `shape`'s rank, and every size of `shape` equals its trailing
    /// size or is 1): new leading dims and stretched size-1 dims get stride
    /// 0. No tensor is made, so a broadcasting op allocates no views.
    ///
    /// [`broadcast_shapes`]: crate::shape::broadcast_shapes
    pub(crate) fn place_broadcast(&mut self, shape: &Dims, strides: &Dims, offset: usize) {
        let lead = self.rank().saturating_sub(shape.rank());
        for (i, (o, &want)) in self.strides.iter_mut().zip(self.shape.iter()).enumerate() {
            *o = match i.checked_sub(lead) {
                Some(j) if shape[j] == want => strides[j],
                _ => 0,
            };
        }
        self.offset = offset;
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
        // One pass; the emptiness test runs only on a mismatch (an empty
        // layout is contiguous whatever its strides). Every op asks this of
        // its operands, so it is kept short (NOTE [Small-op path]). A size-1
        // dim leaves `expected` as it is; the product cannot wrap for a
        // non-empty layout (its element count fits, invariant 3).
        let mut expected = 1usize;
        for (&d, &s) in self.shape.iter().zip(self.strides.iter()).rev() {
            if d != 1 && s != expected {
                return self.shape.contains(&0);
            }
            expected = expected.wrapping_mul(d);
        }
        true
    }

    /// The storage elements a contiguous layout covers, `offset..offset +
    /// numel()`, or `None` when it is not contiguous: contiguity and the
    /// element count in one pass, for kernels that take a slice when they
    /// can.
    ///
    /// ```
    /// use kael_core::Layout;
    /// let l = Layout::contiguous(&[2, 3])?;
    /// assert_eq!(l.slice(0, 1, 2, 1)?.contiguous_span(), Some(3..6));
    /// assert_eq!(l.transpose(0, 1)?.contiguous_span(), None);
    /// assert_eq!(Layout::contiguous(&[0, 3])?.transpose(0, 1)?.contiguous_span(), Some(0..0));
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn contiguous_span(&self) -> Option<core::ops::Range<usize>> {
        let (shape, strides) = (self.shape.padded(), self.strides.padded());
        let mut n = 1usize;
        // Indexed over the padded arrays: no bounds checks, and none of the
        // length bookkeeping of a reversed zip (called three times per
        // small binary op: NOTE [Small-op path]).
        for i in (0..self.shape.rank().min(MAX_RANK)).rev() {
            let (d, s) = (shape[i], strides[i]);
            if d != 1 && s != n {
                // An empty layout is contiguous whatever its strides.
                return self.shape.contains(&0).then_some(self.offset..self.offset);
            }
            n = n.wrapping_mul(d);
        }
        // `n` is the element count: it fits for a non-empty layout
        // (invariant 3), and an empty one makes it 0.
        Some(self.offset..self.offset.wrapping_add(n))
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
    fn a_contiguous_span_is_exactly_the_offsets_of_a_contiguous_layout() {
        // Against the offsets the layout walks: a span exists exactly when
        // they are consecutive (PyTorch's contiguity: size-1 dims ignored,
        // empty layouts contiguous), and it is those offsets.
        let base = Layout::contiguous(&[4, 1, 3]).unwrap();
        let views = [
            base.clone(),
            base.slice(0, 1, 3, 1).unwrap(),
            base.slice(0, 0, 4, 2).unwrap(),
            base.slice(2, 1, 3, 1).unwrap(),
            base.transpose(0, 2).unwrap(),
            base.transpose(0, 1).unwrap(),
            base.select(0, 2).unwrap(),
            base.expand(&[4, 5, 3]).unwrap(),
            base.slice(0, 2, 2, 1).unwrap().transpose(0, 2).unwrap(),
            Layout::contiguous(&[]).unwrap(),
        ];
        for l in &views {
            let walked = offsets(l);
            let consecutive = walked.windows(2).all(|w| w[1] == w[0] + 1);
            let span = l.contiguous_span();
            assert_eq!(span.is_some(), consecutive, "{l:?}");
            assert_eq!(l.is_contiguous(), consecutive, "{l:?}");
            if let (Some(span), Some(&first)) = (span.clone(), walked.first()) {
                assert_eq!(span, first..first + walked.len(), "{l:?}");
            }
        }
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
    fn expand_refuses_a_shape_whose_element_count_overflows() {
        let l = Layout::contiguous(&[3]).unwrap();
        let huge = 1isize << (isize::BITS - 2);
        let e = l.expand(&[huge, huge, 3]).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { op: "expand", .. }));
        assert!(l.expand(&[huge, 4, 3]).is_err());
        assert_eq!(l.expand(&[huge, 3]).unwrap().numel(), (huge as usize) * 3);
        assert_eq!(l.expand(&[2, 3]).unwrap().numel(), 6);
    }

    #[test]
    fn narrow_past_the_end_reports_the_end_without_wrapping() {
        let l = Layout::contiguous(&[3]).unwrap();
        let e = l.narrow(0, usize::MAX / 2, usize::MAX / 2 + 2).unwrap_err();
        assert!(matches!(
            e,
            Error::IndexOutOfRange {
                op: "narrow",
                index: i64::MAX,
                size: 3
            }
        ));
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
