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

    /// A layout's elements, when every one lies inside a slice of `len`
    /// elements: what a kernel checks once before it walks raw pointers.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming
    /// `op` when the layout reaches past the slice.
    pub(crate) fn within(
        op: &'static str,
        l: &'a crate::layout::Layout,
        len: usize,
    ) -> crate::error::Result<Self> {
        let v = Strided::of(l);
        if reach(&v).is_some_and(|r| r <= len) {
            Ok(v)
        } else {
            Err(crate::error::Error::InvalidArgument {
                op,
                reason: "an operand's layout reaches past its storage; pass layouts that fit their storages",
            })
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
    match plan_rows(shape, v) {
        Rows::Empty => {}
        Rows::Dense(o, inner, n) => f(o, inner, n),
        Rows::Walk(w) => w.rows(f),
    }
}

/// How [`rows`] walks: nothing, one dense row, or a [`Walk`].
enum Rows<const N: usize> {
    Empty,
    Dense([usize; N], [usize; N], usize),
    Walk(Walk<N>),
}

/// NOTE [Walks outlined]
/// The walk's set-up (the dense test, merging dimensions) and its
/// odometer are out of line and take the row callback as `&mut dyn
/// FnMut`, so they exist once per operand count and index type, not
/// once per kernel, dtype and op that walks (which cost a Device::cpu()
/// firmware image 30 KB of flash when they were inlined); only the inner
/// row loop is each caller's own.
#[inline(never)]
fn plan_rows<const N: usize, D: Dim>(shape: &[D], v: &[Strided<'_, D>; N]) -> Rows<N> {
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
        Some(0) => Rows::Empty,
        Some(n) if dense => Rows::Dense(core::array::from_fn(|k| v[k].offset), inner, n),
        _ => Rows::Walk(Walk::new(shape, v)),
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
        let mut st = [[0usize; MAX_RANK]; N];
        for (k, row) in st.iter_mut().enumerate() {
            for (d, x) in row.iter_mut().enumerate().take(shape.len()) {
                *x = stride(k, d);
            }
        }
        Self::build(shape, base, &st)
    }

    /// The walk over `shape` from `base`, operand `k` stepping `st[k][d]`
    /// along dimension `d` (NOTE [Walks outlined]).
    #[inline(never)]
    fn build<D: Dim>(shape: &[D], base: [usize; N], st_all: &[[usize; MAX_RANK]; N]) -> Self {
        let mut w = Walk {
            rank: 0,
            shape: [1; MAX_RANK],
            strides: [[0; MAX_RANK]; N],
            base,
        };
        // An empty shape walks nothing; checked before any merge, whose
        // product of the other sizes may not fit (`[2^40, 2^40, 0]`).
        if shape.iter().any(|n| n.get() == 0) {
            return w;
        }
        for (d, &n) in shape.iter().enumerate().take(MAX_RANK) {
            let n = n.get();
            if n == 1 {
                continue;
            }
            let st: [usize; N] = core::array::from_fn(|k| st_all[k][d]);
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
        self.each_dyn(outer, &mut f);
    }

    /// [`Walk::each`], out of line (NOTE [Walks outlined]).
    #[inline(never)]
    fn each_dyn(&self, outer: usize, f: &mut dyn FnMut([usize; N])) {
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

// NOTE [Shared elementwise walks]
// The loops below are the elementwise kernels' walks: each reads its
// operands through raw pointers and stores what `f` (the op table's
// scalar function, or a copy) returns, with no arithmetic of their own.
// The reference backend runs its strided elementwise paths through
// `map`, `zip`, `fill` and `select` (after checking each layout's reach
// against its slice), and a planned replay runs every elementwise step
// through them and through `grid2`/`grid3` (the flat 2-D form of a plan:
// NOTE [Plan words]), so a walk is written once.

/// `n` elements `x` from `d`, `sd` apart.
///
/// # Safety
/// `d` is valid for writes at those elements.
#[inline]
pub(crate) unsafe fn fill_row<T: Copy>(mut d: *mut T, sd: usize, n: usize, x: T) {
    for _ in 0..n {
        // SAFETY: the caller's.
        unsafe { *d = x };
        d = d.wrapping_add(sd);
    }
}

/// Every element of `dst` set to `x`.
///
/// # Safety
/// Every element `dst` reaches is valid for writes at `d`.
#[inline]
pub(crate) unsafe fn fill<T: Copy, D: Dim>(dst: Strided<'_, D>, d: *mut T, x: T) {
    rows(dst.shape, &[dst], |[od], [sd], n| {
        // SAFETY: the caller's.
        unsafe { fill_row(d.wrapping_add(od), sd, n, x) }
    });
}

/// `d = f(a)` elementwise over the destination's (the last view's)
/// shape, `a` possibly exactly `d`.
///
/// # Safety
/// Every element each view reaches is valid (reads at `a`, writes at
/// `d`), and `a` is disjoint from `d` or exactly it (the same pointer and
/// view).
#[inline]
pub(crate) unsafe fn map<T: Copy, U: Copy, D: Dim>(
    v: &[Strided<'_, D>; 2],
    a: *const T,
    d: *mut U,
    f: impl Fn(T) -> U,
) {
    rows(v[1].shape, v, |[oa, od], [sa, sd], n| {
        let (mut a, mut d) = (a.wrapping_add(oa), d.wrapping_add(od));
        for _ in 0..n {
            // SAFETY: the caller's; `a` is read before `d` is written.
            unsafe { *d = f(*a) };
            (a, d) = (a.wrapping_add(sa), d.wrapping_add(sd));
        }
    });
}

/// `d = f(a, b)` elementwise over the destination's shape, `a` or `b`
/// possibly exactly `d`.
///
/// # Safety
/// As [`map`], for both sources.
#[inline]
pub(crate) unsafe fn zip<T: Copy, U: Copy, D: Dim>(
    v: &[Strided<'_, D>; 3],
    a: *const T,
    b: *const T,
    d: *mut U,
    f: impl Fn(T, T) -> U,
) {
    rows(v[2].shape, v, |[oa, ob, od], [sa, sb, sd], n| {
        let (mut a, mut b, mut d) = (a.wrapping_add(oa), b.wrapping_add(ob), d.wrapping_add(od));
        for _ in 0..n {
            // SAFETY: the caller's; sources are read before `d` is written.
            unsafe { *d = f(*a, *b) };
            (a, b, d) = (a.wrapping_add(sa), b.wrapping_add(sb), d.wrapping_add(sd));
        }
    });
}

/// `d = c ? t : f` elementwise over the destination's shape (`c` a bool
/// byte per element).
///
/// # Safety
/// As [`map`], for the three sources; none of them is `d`.
#[inline]
pub(crate) unsafe fn select<T: Copy, D: Dim>(
    v: &[Strided<'_, D>; 4],
    c: *const u8,
    t: *const T,
    f: *const T,
    d: *mut T,
) {
    rows(v[3].shape, v, |[oc, ot, of, od], [sc, st, sf, sd], n| {
        let (mut c, mut t, mut f, mut d) = (
            c.wrapping_add(oc),
            t.wrapping_add(ot),
            f.wrapping_add(of),
            d.wrapping_add(od),
        );
        for _ in 0..n {
            // SAFETY: the caller's.
            unsafe { *d = if *c != 0 { *t } else { *f } };
            (c, t, f, d) = (
                c.wrapping_add(sc),
                t.wrapping_add(st),
                f.wrapping_add(sf),
                d.wrapping_add(sd),
            );
        }
    });
}

/// `d = f(a)` over an `n0 x n1` grid in row-major order; each operand is
/// its first element and its (rows', columns') strides.
///
/// # Safety
/// every element of the grid is valid, and
/// `a` is disjoint from `d` or exactly it.
#[inline(always)]
pub(crate) unsafe fn grid2<T: Copy>(
    [n0, n1]: [u32; 2],
    (mut a, a0, a1): (*mut T, u32, u32),
    (mut d, d0, d1): (*mut T, u32, u32),
    f: impl Fn(T) -> T,
) {
    for _ in 0..n0 {
        let (mut pa, mut pd) = (a, d);
        for _ in 0..n1 {
            // SAFETY: the caller's; `a` is read before `d` is written.
            unsafe { *pd = f(*pa) };
            pa = pa.wrapping_add(a1 as usize);
            pd = pd.wrapping_add(d1 as usize);
        }
        a = a.wrapping_add(a0 as usize);
        d = d.wrapping_add(d0 as usize);
    }
}

/// `d = f(a, b)` over an `n0 x n1` grid, as [`grid2`].
///
/// # Safety
/// As [`grid2`], for both sources.
#[inline(always)]
pub(crate) unsafe fn grid3(
    [n0, n1]: [u32; 2],
    (mut a, a0, a1): (*mut f32, u32, u32),
    (mut b, b0, b1): (*mut f32, u32, u32),
    (mut d, d0, d1): (*mut f32, u32, u32),
    f: impl Fn(f32, f32) -> f32,
) {
    for _ in 0..n0 {
        let (mut pa, mut pb, mut pd) = (a, b, d);
        for _ in 0..n1 {
            // SAFETY: the caller's; the sources are read before `d` is
            // written.
            unsafe { *pd = f(*pa, *pb) };
            pa = pa.wrapping_add(a1 as usize);
            pb = pb.wrapping_add(b1 as usize);
            pd = pd.wrapping_add(d1 as usize);
        }
        a = a.wrapping_add(a0 as usize);
        b = b.wrapping_add(b0 as usize);
        d = d.wrapping_add(d0 as usize);
    }
}
