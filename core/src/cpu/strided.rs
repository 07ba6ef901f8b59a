//! Raw strided walks: the element offsets of `N` operands laid out by
//! shape and strides, walked together in row-major order with size-1
//! dimensions dropped and dimensions contiguous in every operand merged.
//! The reference kernels' reductions and a planned replay's steps walk
//! with these (NOTE [Slice-level kernels] in [`super::index`]); shapes and
//! strides come as `usize` (a [`Layout`](crate::layout::Layout)) or as a
//! plan's `u32` words ([`Dim`]).

use crate::shape::MAX_RANK;

/// A dimension size or stride: `usize`, or a plan's `u32` word.
pub(crate) trait Dim: Copy {
    /// The value.
    fn get(self) -> usize;
}

impl Dim for usize {
    #[inline(always)]
    fn get(self) -> usize {
        self
    }
}

impl Dim for u32 {
    #[inline(always)]
    fn get(self) -> usize {
        self as usize
    }
}

/// One operand's elements: its offset, shape and strides.
#[derive(Clone, Copy)]
pub(crate) struct Strided<'a, D> {
    /// The first element.
    pub(crate) offset: usize,
    /// The sizes.
    pub(crate) shape: &'a [D],
    /// The steps, in elements.
    pub(crate) strides: &'a [D],
}

impl<'a> Strided<'a, usize> {
    /// A layout's elements.
    pub(crate) fn of(l: &'a crate::layout::Layout) -> Self {
        Strided {
            offset: l.offset(),
            shape: l.shape(),
            strides: l.strides(),
        }
    }
}

/// One past the furthest element `v` reaches (0 when it has none), or
/// `None` on overflow.
pub(crate) fn reach<D: Dim>(v: &Strided<'_, D>) -> Option<usize> {
    if v.shape.iter().any(|d| d.get() == 0) {
        return Some(0);
    }
    v.shape
        .iter()
        .zip(v.strides)
        .try_fold(v.offset, |acc, (&d, &s)| {
            acc.checked_add((d.get() - 1).checked_mul(s.get())?)
        })?
        .checked_add(1)
}

/// `N` operands' element offsets walked together in the destination's
/// row-major order, with dimensions of size 1 dropped and dimensions that
/// are contiguous in every operand merged, so a contiguous elementwise op
/// is one row.
pub(crate) struct Walk<const N: usize> {
    /// Dimensions after merging; 0 when the shape has no elements.
    pub(crate) rank: usize,
    shape: [usize; MAX_RANK],
    strides: [[usize; MAX_RANK]; N],
    base: [usize; N],
}

/// Calls `f(offsets, inner strides, length)` for every row of the
/// elementwise walk over `shape`: one row when every operand is row-major
/// contiguous or a broadcast scalar (the common case, without building a
/// [`Walk`]), else [`Walk::rows`].
#[inline]
pub(crate) fn rows<const N: usize, D: Dim>(
    shape: &[D],
    v: &[Strided<'_, D>; N],
    mut f: impl FnMut([usize; N], [usize; N], usize),
) {
    let mut inner = [0usize; N];
    let numel = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d.get()));
    let dense = v.iter().zip(inner.iter_mut()).all(|(v, inner)| {
        // Row-major contiguous, ignoring size-1 dims: stride 1 inner.
        let mut want = 1usize;
        let contiguous = v.shape.iter().zip(v.strides).rev().all(|(&d, &s)| {
            let ok = d.get() == 1 || s.get() == want;
            want = want.wrapping_mul(d.get());
            ok
        });
        *inner = usize::from(contiguous);
        contiguous
            || v.strides
                .iter()
                .zip(v.shape)
                .all(|(&s, &d)| s.get() == 0 || d.get() == 1)
    });
    match numel {
        Some(0) => {}
        Some(n) if dense => f(core::array::from_fn(|k| v[k].offset), inner, n),
        _ => Walk::new(shape, v).rows(f),
    }
}

impl<const N: usize> Walk<N> {
    /// The walk over `shape` (a prefix of the operands' dimensions).
    #[inline(always)]
    pub(crate) fn new<D: Dim>(shape: &[D], v: &[Strided<'_, D>; N]) -> Self {
        Self::from_fn(shape, core::array::from_fn(|k| v[k].offset), |k, d| {
            v[k].strides.get(d).map_or(0, |&s| s.get())
        })
    }

    /// The walk over `shape` from `base`, operand `k` stepping
    /// `stride(k, d)` along dimension `d`.
    #[inline(always)]
    pub(crate) fn from_fn<D: Dim>(
        shape: &[D],
        base: [usize; N],
        stride: impl Fn(usize, usize) -> usize,
    ) -> Self {
        let mut w = Walk {
            rank: 0,
            shape: [1; MAX_RANK],
            strides: [[0; MAX_RANK]; N],
            base,
        };
        for (d, &n) in shape.iter().enumerate() {
            let n = n.get();
            if n == 0 {
                w.rank = 0;
                return w;
            }
            if n == 1 {
                continue;
            }
            let st: [usize; N] = core::array::from_fn(|k| stride(k, d));
            let last = w.rank.wrapping_sub(1);
            if w.rank > 0 && (0..N).all(|k| w.strides[k][last] == st[k].wrapping_mul(n)) {
                w.shape[last] *= n;
                for (ws, &s) in w.strides.iter_mut().zip(&st) {
                    ws[last] = s;
                }
            } else if w.rank < MAX_RANK {
                w.shape[w.rank] = n;
                for (ws, &s) in w.strides.iter_mut().zip(&st) {
                    ws[w.rank] = s;
                }
                w.rank += 1;
            }
        }
        // All dimensions of size 1 (or none): one element.
        w.rank = w.rank.max(1);
        w
    }

    /// Calls `f(offsets)` at every position of the first `outer`
    /// dimensions.
    #[inline]
    pub(crate) fn each(&self, outer: usize, mut f: impl FnMut([usize; N])) {
        if self.rank == 0 {
            return;
        }
        let mut idx = [0usize; MAX_RANK];
        let mut off = self.base;
        loop {
            f(off);
            let mut d = outer;
            loop {
                if d == 0 {
                    return;
                }
                d -= 1;
                idx[d] += 1;
                if idx[d] < self.shape[d] {
                    for (o, s) in off.iter_mut().zip(&self.strides) {
                        *o = o.wrapping_add(s[d]);
                    }
                    break;
                }
                for (o, s) in off.iter_mut().zip(&self.strides) {
                    *o = o.wrapping_sub(s[d].wrapping_mul(self.shape[d] - 1));
                }
                idx[d] = 0;
            }
        }
    }

    /// Calls `f(offsets, inner strides, length)` for every row (the last
    /// merged dimension).
    #[inline]
    pub(crate) fn rows(&self, mut f: impl FnMut([usize; N], [usize; N], usize)) {
        let last = self.rank.saturating_sub(1);
        let inner = core::array::from_fn(|k| self.strides[k][last]);
        let n = self.shape[last];
        self.each(last, |o| f(o, inner, n));
    }
}
