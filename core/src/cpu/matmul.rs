//! Matrix multiplication: batched, broadcast batch dims, cache-blocked.
//!
//! NOTE [Blocked matmul]
//! One `[m, k] @ [k, n]` product per batch position, in the GotoBLAS loop
//! order:
//!
//! ```text
//! for jc in 0..n step NC:            pack rhs[:, jc..jc+NC] once (panels NR wide)
//!   for ic in 0..m step MC:          C block (MC x NC) zeroed in the accumulator type
//!     for pc in 0..k step KC:        pack lhs[ic.., pc..] (panels MR tall)
//!       for each NR panel, MR panel: MR x NR register tile over KC (i-k-j order)
//!     store the C block into dst (one rounding to the element type)
//! ```
//!
//! Packing reads the operands through their strides, so transposed,
//! step-sliced and stride-0 (broadcast) operands cost nothing extra, and it
//! converts to the accumulator type once (`f16`/`bf16` accumulate in `f32`,
//! `f32` in `f32`, `f64` in `f64`, integers in their own type with
//! wrapping). Panels are zero-padded to whole tiles, so the inner kernel has
//! no edge cases; padded rows and columns are never stored. The summation
//! order depends only on the shapes, so results are deterministic.
//!
//! NOTE [Small products]
//! A product of at most `SMALL` (4,096) multiply-adds skips packing: packing and
//! zero-padding to whole tiles cost more than such a product's arithmetic
//! (a `[1, 16] @ [16, 16]` would compute a 4x8 tile for 1 useful row and
//! allocate three scratch buffers). It reads the operands through their
//! strides and sums in exactly the blocked order (per `KC`-deep block from
//! zero, blocks added to a zero total, one rounding at the store), so the
//! bits are the same as the blocked path's and the choice is invisible.
//!
//! Scratch buffers (`k * NC + MC * KC + MC * NC` accumulator elements at
//! most) are allocated fallibly before any work: running out is
//! [`Error::OutOfMemory`] with `dst` untouched.

use crate::backend::{Dst, Src, contract};
use crate::cpu::select::dtypes;
use crate::cpu::strided::{self, Strided};
use crate::dispatch_in;
use crate::dtype::{DType, Scalar};
use crate::error::{Error, Result};
use crate::layout::{Layout, walk};
use crate::storage::{typed, typed_mut};
use alloc::vec::Vec;
use half::{bf16, f16};

/// Rows of the register tile.
const MR: usize = 4;
/// Columns of the register tile.
const NR: usize = 8;
/// Rows of lhs packed per block (fits L2 with a KC-deep panel).
const MC: usize = 64;
/// Depth of one packed block (plan replay sums in the same blocks).
pub(crate) const KC: usize = 256;
/// Columns of rhs packed per block.
const NC: usize = 128;
/// Products of at most this many multiply-adds (`m * n * k`) run unpacked
/// (NOTE [Small products]).
const SMALL: usize = 4096;

/// The type a product accumulates in.
pub(crate) trait Accum: Copy + Default {
    /// `self + a * b`.
    fn mul_add(self, a: Self, b: Self) -> Self;
    /// `self + o`.
    fn plus(self, o: Self) -> Self;
}

macro_rules! float_accum {
    ($t:ty) => {
        impl Accum for $t {
            #[inline(always)]
            fn mul_add(self, a: Self, b: Self) -> Self {
                self + a * b
            }
            #[inline(always)]
            fn plus(self, o: Self) -> Self {
                self + o
            }
        }
    };
}
float_accum!(f32);
float_accum!(f64);

macro_rules! int_accum {
    ($t:ty) => {
        impl Accum for $t {
            #[inline(always)]
            fn mul_add(self, a: Self, b: Self) -> Self {
                self.wrapping_add(a.wrapping_mul(b))
            }
            #[inline(always)]
            fn plus(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
        }
    };
}
int_accum!(i64);
int_accum!(i32);
int_accum!(i16);
int_accum!(i8);
int_accum!(u8);

/// An element type of a matmul operand, with its accumulator.
pub(crate) trait MatElem: Scalar {
    type Acc: Accum;
    fn up(self) -> Self::Acc;
    fn down(a: Self::Acc) -> Self;
}

macro_rules! mat_elem_same {
    ($($t:ty),*) => {$(
        impl MatElem for $t {
            type Acc = $t;
            #[inline(always)]
            fn up(self) -> $t {
                self
            }
            #[inline(always)]
            fn down(a: $t) -> $t {
                a
            }
        }
    )*};
}
mat_elem_same!(f32, f64, i64, i32, i16, i8, u8);

macro_rules! mat_elem_half {
    ($($t:ty),*) => {$(
        impl MatElem for $t {
            type Acc = f32;
            #[inline(always)]
            fn up(self) -> f32 {
                self.to_f32()
            }
            #[inline(always)]
            fn down(a: f32) -> $t {
                <$t>::from_f32(a)
            }
        }
    )*};
}
mat_elem_half!(f16, bf16);

/// `dst [.., m, n] = lhs [.., m, k] @ rhs [.., k, n]`.
///
/// Any strides (transposed, sliced, stride-0 batch dims) are accepted for
/// the operands; `dst` must not share storage with either. See NOTE
/// [Blocked matmul].
///
/// # Errors
/// [`Error::UnsupportedDType`] for bool, [`Error::OutOfMemory`] for the
/// scratch buffers, [`Error::InvalidArgument`] for ranks or shapes that do
/// not form a matrix product or a destination aliasing a source, storage
/// access conflicts.
pub fn matmul(lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
    matmul_in::<{ dtypes::ALL }>(lhs, rhs, dst)
}

/// [`matmul`] for the dtypes in `DTYPES` only (NOTE [Kernel selection]).
///
/// # Errors
/// As [`matmul`], and [`Error::UnsupportedDType`] for a dtype outside
/// `DTYPES`.
pub fn matmul_in<const DTYPES: u16>(lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
    let mk = contract::matmul(lhs, rhs, dst)?;
    let dims = Dims3::of(&lhs, &rhs, &dst, mk)?;
    match dst.dtype {
        DType::F32 => {
            dispatch_in!(@arm DTYPES, "matmul", F32, T = f32, gemm::<T>(lhs, rhs, dst, &dims))
        }
        DType::F64 => {
            dispatch_in!(@arm DTYPES, "matmul", F64, T = f64, gemm::<T>(lhs, rhs, dst, &dims))
        }
        DType::F16 => {
            dispatch_in!(@arm DTYPES, "matmul", F16, T = f16, gemm::<T>(lhs, rhs, dst, &dims))
        }
        DType::BF16 => {
            dispatch_in!(@arm DTYPES, "matmul", BF16, T = bf16, gemm::<T>(lhs, rhs, dst, &dims))
        }
        DType::I64 => {
            dispatch_in!(@arm DTYPES, "matmul", I64, T = i64, gemm::<T>(lhs, rhs, dst, &dims))
        }
        DType::I32 => {
            dispatch_in!(@arm DTYPES, "matmul", I32, T = i32, gemm::<T>(lhs, rhs, dst, &dims))
        }
        DType::I16 => {
            dispatch_in!(@arm DTYPES, "matmul", I16, T = i16, gemm::<T>(lhs, rhs, dst, &dims))
        }
        DType::I8 => {
            dispatch_in!(@arm DTYPES, "matmul", I8, T = i8, gemm::<T>(lhs, rhs, dst, &dims))
        }
        DType::U8 => {
            dispatch_in!(@arm DTYPES, "matmul", U8, T = u8, gemm::<T>(lhs, rhs, dst, &dims))
        }
        DType::Bool => Err(Error::UnsupportedDType {
            op: "matmul",
            dtype: DType::Bool,
            supported: "f32, f64, f16, bf16, i64, i32, i16, i8, u8",
        }),
    }
}

/// Matrix sizes and strides, plus batch-only layouts of the three operands.
struct Dims3 {
    m: usize,
    k: usize,
    n: usize,
    /// lhs strides along m and k.
    a_rs: usize,
    a_cs: usize,
    /// rhs strides along k and n.
    b_rs: usize,
    b_cs: usize,
    /// dst strides along m and n.
    c_rs: usize,
    c_cs: usize,
    /// The batch dims of dst, lhs, rhs (shape of dst's batch dims, each
    /// operand's own strides and offset); `None` for a plain matrix
    /// product (rank 2: no layouts are built on that common path).
    batch: Option<[Layout; 3]>,
    /// The storage offsets of dst, lhs and rhs.
    offsets: [usize; 3],
}

impl Dims3 {
    /// The strides and batch layouts of operands that passed
    /// [`contract::matmul`].
    fn of(lhs: &Src<'_>, rhs: &Src<'_>, dst: &Dst<'_>, mk: contract::MatmulShape) -> Result<Self> {
        let contract::MatmulShape { m, k, n } = mk;
        let rank = dst.layout.rank();
        let ds = dst.layout.shape();
        let batch_of =
            |l: &Layout| Layout::new(&ds[..rank - 2], &l.strides()[..rank - 2], l.offset());
        let (a, b, c) = (
            lhs.layout.strides(),
            rhs.layout.strides(),
            dst.layout.strides(),
        );
        Ok(Self {
            m,
            k,
            n,
            a_rs: a[rank - 2],
            a_cs: a[rank - 1],
            b_rs: b[rank - 2],
            b_cs: b[rank - 1],
            c_rs: c[rank - 2],
            c_cs: c[rank - 1],
            batch: if rank > 2 {
                Some([
                    batch_of(dst.layout)?,
                    batch_of(lhs.layout)?,
                    batch_of(rhs.layout)?,
                ])
            } else {
                None
            },
            offsets: [
                dst.layout.offset(),
                lhs.layout.offset(),
                rhs.layout.offset(),
            ],
        })
    }

    /// Whether there is no product to compute (a zero-sized batch or
    /// result).
    fn is_empty(&self) -> bool {
        self.m == 0 || self.n == 0 || self.batch.as_ref().is_some_and(|b| b[0].numel() == 0)
    }

    /// Calls `f` with the storage offsets `[dst, lhs, rhs]` of every
    /// batch entry's matrices.
    fn each(&self, mut f: impl FnMut([usize; 3])) {
        match &self.batch {
            Some([bd, bl, br]) => walk([bd, bl, br], f),
            None => f(self.offsets),
        }
    }
}

/// A zero-filled scratch vector, allocated fallibly.
fn scratch<A: Copy + Default>(len: usize) -> Result<Vec<A>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| Error::OutOfMemory {
        requested: len.saturating_mul(core::mem::size_of::<A>()),
        available: None,
    })?;
    v.resize(len, A::default());
    Ok(v)
}

/// The packed scratch of one matrix product.
struct Buffers<A> {
    /// rhs column block: `k` rows by `nc` (padded to NR) columns, stored as
    /// KC-deep blocks of NR-wide panels.
    b: Vec<A>,
    /// lhs block: `mc` (padded to MR) rows by `kc` columns, as MR-tall panels.
    a: Vec<A>,
    /// The C block being accumulated: `MC x NC`, row-major.
    c: Vec<A>,
}

fn gemm<T: MatElem>(lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>, d: &Dims3) -> Result<()> {
    if d.is_empty() {
        return Ok(());
    }
    let small = d.m.saturating_mul(d.n).saturating_mul(d.k) <= SMALL;
    gemm_by::<T>(small, lhs, rhs, dst, d)
}

/// [`gemm`] by the small-product loops or the blocked path (NOTE [Small
/// products]): one storage access for either.
fn gemm_by<T: MatElem>(
    small: bool,
    lhs: Src<'_>,
    rhs: Src<'_>,
    dst: Dst<'_>,
    d: &Dims3,
) -> Result<()> {
    let ga = lhs.storage.read("matmul")?;
    let gb = rhs.storage.read("matmul")?;
    let mut gd = dst.storage.write("matmul")?;
    let sa = typed::<T>(ga.bytes())?;
    let sb = typed::<T>(gb.bytes())?;
    let sd = typed_mut::<T>(gd.bytes_mut())?;
    if small {
        gemm_small::<T>(sa, sb, sd, d)
    } else {
        gemm_blocked::<T>(sa, sb, sd, d)
    }
}

/// The blocked path (NOTE [Blocked matmul]).
fn gemm_blocked<T: MatElem>(sa: &[T], sb: &[T], sd: &mut [T], d: &Dims3) -> Result<()> {
    let (m, k, n) = (d.m, d.k, d.n);
    let nc_pad = n.min(NC).next_multiple_of(NR);
    let mc_pad = m.min(MC).next_multiple_of(MR);
    let kc_max = k.min(KC);
    let mut buf = Buffers::<T::Acc> {
        b: scratch(k.saturating_mul(nc_pad))?,
        a: scratch(mc_pad * kc_max)?,
        c: scratch(m.min(MC) * n.min(NC))?,
    };
    d.each(|[od, ol, or]| {
        gemm_one::<T>(sa, ol, sb, or, sd, od, d, &mut buf);
    });
    Ok(())
}

/// Small products: no scratch, no packing (NOTE [Small products]), each
/// batch entry's product by [`small_product`] after checking that its
/// matrices lie inside the slices.
fn gemm_small<T: MatElem>(sa: &[T], sb: &[T], sd: &mut [T], d: &Dims3) -> Result<()> {
    // The lengths first: no reference to a slice is made after its
    // pointer is taken.
    let (la, lb, ld) = (sa.len(), sb.len(), sd.len());
    let (pa, pb, pd) = (sa.as_ptr(), sb.as_ptr(), sd.as_mut_ptr());
    let mut inside = true;
    d.each(|[oc, oa, ob]| {
        let fits = |offset: usize, rows: usize, rs: usize, cols: usize, cs: usize, len: usize| {
            let m = Strided {
                offset,
                shape: &[rows, cols],
                strides: &[rs, cs],
            };
            strided::reach(&m).is_some_and(|r| r <= len)
        };
        inside = inside
            && fits(oa, d.m, d.a_rs, d.k, d.a_cs, la)
            && fits(ob, d.k, d.b_rs, d.n, d.b_cs, lb)
            && fits(oc, d.m, d.c_rs, d.n, d.c_cs, ld);
        if inside {
            // SAFETY: each matrix's elements lie inside its slice (checked
            // just above), and `sd` is a `&mut` disjoint from `sa`, `sb`.
            unsafe {
                small_product::<T>(
                    [d.m, d.n, d.k],
                    (pa.wrapping_add(oa), d.a_rs, d.a_cs),
                    (pb.wrapping_add(ob), d.b_rs, d.b_cs),
                    (pd.wrapping_add(oc), d.c_rs, d.c_cs),
                    |c, _| T::down(c),
                );
            }
        }
    });
    if inside {
        Ok(())
    } else {
        Err(Error::InvalidArgument {
            op: "matmul",
            reason: "an operand's layout reaches past its storage; pass layouts that fit their storages",
        })
    }
}

/// NOTE [One small product]
/// `d = out(a @ b)` for one `[m, k] @ [k, n]` product, each matrix given
/// by its first element and its (rows', columns') strides, summing as the
/// blocked path does (NOTE [Blocked matmul]): per `KC`-deep block from
/// zero, the blocks added to a zero total in order. `out(c, [i, j])` makes
/// the stored value from the sum (`T::down`, or a plan's fused epilogue:
/// NOTE [Fused epilogues]). The eager small-product path and every matmul
/// step of a planned replay call this one function, so their bits agree by
/// construction.
///
/// # Safety
/// Every element of the three matrices is valid to read (`a`, `b`) and
/// write (`d`), and `d` is disjoint from `a` and `b`.
#[inline(always)]
pub(crate) unsafe fn small_product<T: MatElem>(
    [m, n, k]: [usize; 3],
    (a, ars, acs): (*const T, usize, usize),
    (b, brs, bcs): (*const T, usize, usize),
    (d, drs, dcs): (*mut T, usize, usize),
    mut out: impl FnMut(T::Acc, [usize; 2]) -> T,
) {
    for i in 0..m {
        let (arow, drow) = (a.wrapping_add(i * ars), d.wrapping_add(i * drs));
        for j in 0..n {
            let bcol = b.wrapping_add(j * bcs);
            let mut c = T::Acc::default();
            let mut p0 = 0;
            while p0 < k {
                let len = (k - p0).min(KC);
                let (mut pa, mut pb) = (arow.wrapping_add(p0 * acs), bcol.wrapping_add(p0 * brs));
                let mut t = T::Acc::default();
                let mut left = len;
                // Counted down, so the loop is one test per product; the
                // unit-stride copy of it loads with post-increment.
                if acs == 1 && brs == 1 {
                    loop {
                        // SAFETY: the caller's (`p0 + len <= k`, `len >= 1`).
                        t = t.mul_add(unsafe { (*pa).up() }, unsafe { (*pb).up() });
                        (pa, pb) = (pa.wrapping_add(1), pb.wrapping_add(1));
                        left -= 1;
                        if left == 0 {
                            break;
                        }
                    }
                } else {
                    loop {
                        // SAFETY: as above.
                        t = t.mul_add(unsafe { (*pa).up() }, unsafe { (*pb).up() });
                        (pa, pb) = (pa.wrapping_add(acs), pb.wrapping_add(brs));
                        left -= 1;
                        if left == 0 {
                            break;
                        }
                    }
                }
                c = c.plus(t);
                p0 += len;
            }
            let v = out(c, [i, j]);
            // SAFETY: the caller's.
            unsafe { *drow.wrapping_add(j * dcs) = v };
        }
    }
}

/// One `[m, k] @ [k, n]` product, operands at offsets `oa`/`ob`, result at `oc`.
#[allow(clippy::too_many_arguments)]
fn gemm_one<T: MatElem>(
    sa: &[T],
    oa: usize,
    sb: &[T],
    ob: usize,
    sc: &mut [T],
    oc: usize,
    d: &Dims3,
    buf: &mut Buffers<T::Acc>,
) {
    let (m, k, n) = (d.m, d.k, d.n);
    for jc in (0..n).step_by(NC) {
        let nc = NC.min(n - jc);
        let nc_pad = nc.next_multiple_of(NR);
        pack_b::<T>(sb, ob + jc * d.b_cs, d, nc, &mut buf.b);
        for ic in (0..m).step_by(MC) {
            let mc = MC.min(m - ic);
            let cblk = &mut buf.c[..mc * nc];
            cblk.fill(T::Acc::default());
            for pc in (0..k).step_by(KC) {
                let kc = KC.min(k - pc);
                pack_a::<T>(sa, oa + ic * d.a_rs + pc * d.a_cs, d, mc, kc, &mut buf.a);
                let bblk = &buf.b[pc * nc_pad..(pc + kc) * nc_pad];
                for jr in (0..nc).step_by(NR) {
                    let nr = NR.min(nc - jr);
                    let bpanel = &bblk[jr * kc..(jr + NR) * kc];
                    for ir in (0..mc).step_by(MR) {
                        let mr = MR.min(mc - ir);
                        let apanel = &buf.a[ir * kc..(ir + MR) * kc];
                        let tile = micro_kernel(kc, apanel, bpanel);
                        for (i, row) in tile.iter().enumerate().take(mr) {
                            let crow = &mut cblk[(ir + i) * nc + jr..(ir + i) * nc + jr + nr];
                            for (c, &t) in crow.iter_mut().zip(row.iter()) {
                                *c = c.plus(t);
                            }
                        }
                    }
                }
            }
            for i in 0..mc {
                let row = oc + (ic + i) * d.c_rs + jc * d.c_cs;
                for (j, &c) in cblk[i * nc..(i + 1) * nc].iter().enumerate() {
                    sc[row + j * d.c_cs] = T::down(c);
                }
            }
        }
    }
}

/// Packs `rhs[0..k, jc..jc+nc]` (starting at storage offset `o`): for each
/// KC-deep block, NR-wide panels, each `kc` rows of NR values (zero-padded).
fn pack_b<T: MatElem>(sb: &[T], o: usize, d: &Dims3, nc: usize, out: &mut [T::Acc]) {
    let nc_pad = nc.next_multiple_of(NR);
    for pc in (0..d.k).step_by(KC) {
        let kc = KC.min(d.k - pc);
        let blk = &mut out[pc * nc_pad..(pc + kc) * nc_pad];
        for jr in (0..nc_pad).step_by(NR) {
            let panel = &mut blk[jr * kc..(jr + NR) * kc];
            for p in 0..kc {
                let src = o + (pc + p) * d.b_rs;
                for j in 0..NR {
                    panel[p * NR + j] = if jr + j < nc {
                        sb[src + (jr + j) * d.b_cs].up()
                    } else {
                        T::Acc::default()
                    };
                }
            }
        }
    }
}

/// Packs `lhs[0..mc, 0..kc]` (starting at storage offset `o`) into MR-tall
/// panels, each `kc` columns of MR values (zero-padded).
fn pack_a<T: MatElem>(sa: &[T], o: usize, d: &Dims3, mc: usize, kc: usize, out: &mut [T::Acc]) {
    let mc_pad = mc.next_multiple_of(MR);
    for ir in (0..mc_pad).step_by(MR) {
        let panel = &mut out[ir * kc..(ir + MR) * kc];
        for i in 0..MR {
            if ir + i < mc {
                let src = o + (ir + i) * d.a_rs;
                for p in 0..kc {
                    panel[p * MR + i] = sa[src + p * d.a_cs].up();
                }
            } else {
                for p in 0..kc {
                    panel[p * MR + i] = T::Acc::default();
                }
            }
        }
    }
}

/// The MR x NR register tile of `a_panel (MR x kc) @ b_panel (kc x NR)`,
/// accumulated in i-k-j order over the packed panels.
#[inline(always)]
fn micro_kernel<A: Accum>(kc: usize, a: &[A], b: &[A]) -> [[A; NR]; MR] {
    let mut acc = [[A::default(); NR]; MR];
    for (ap, bp) in a.chunks_exact(MR).zip(b.chunks_exact(NR)).take(kc) {
        for i in 0..MR {
            let ai = ap[i];
            for j in 0..NR {
                acc[i][j] = acc[i][j].mul_add(ai, bp[j]);
            }
        }
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::shared::Shared;
    use crate::storage::Storage;

    fn storage_of(v: &[f64]) -> Shared<Storage> {
        let s = Storage::zeroed(v.len() * 8, &Device::cpu()).unwrap();
        {
            let mut g = s.write("t").unwrap();
            typed_mut::<f64>(g.bytes_mut()).unwrap().copy_from_slice(v);
        }
        Shared::new(s)
    }

    fn naive(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut c = alloc::vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                for p in 0..k {
                    c[i * n + j] += a[i * k + p] * b[p * n + j];
                }
            }
        }
        c
    }

    #[test]
    // ~10^7 multiply-adds: minutes under Miri; the small-matrix tests cover
    // the same code paths there.
    #[cfg_attr(miri, ignore)]
    fn blocked_product_crosses_every_block_edge() {
        // m, k, n just past MC, KC, NC so every loop has a ragged last block.
        let (m, k, n) = (MC + 3, KC + 5, NC + 9);
        let a: Vec<f64> = (0..m * k).map(|i| ((i * 7) % 13) as f64 - 6.0).collect();
        let b: Vec<f64> = (0..k * n).map(|i| ((i * 5) % 11) as f64 - 5.0).collect();
        let (sa, sb) = (storage_of(&a), storage_of(&b));
        let sc = storage_of(&alloc::vec![0.0; m * n]);
        let (la, lb, lc) = (
            Layout::contiguous(&[m, k]).unwrap(),
            Layout::contiguous(&[k, n]).unwrap(),
            Layout::contiguous(&[m, n]).unwrap(),
        );
        let src = |s, l| Src {
            storage: s,
            layout: l,
            dtype: DType::F64,
        };
        matmul(src(&sa, &la), src(&sb, &lb), src(&sc, &lc)).unwrap();
        let g = sc.read("t").unwrap();
        // small integers: the f64 sums are exact, so equality is expected
        assert_eq!(
            typed::<f64>(g.bytes()).unwrap(),
            &naive(&a, &b, m, k, n)[..]
        );
    }

    /// Runs one path of `gemm` for f32 operands (`b_t`: rhs given as its
    /// transpose's storage) and returns dst's bits.
    fn product_bits(
        small: bool,
        a: &[f32],
        b: &[f32],
        [m, k, n]: [usize; 3],
        b_t: bool,
    ) -> Vec<u32> {
        let store = |v: &[f32]| {
            let s = Storage::zeroed(v.len() * 4, &Device::cpu()).unwrap();
            typed_mut::<f32>(s.write("t").unwrap().bytes_mut())
                .unwrap()
                .copy_from_slice(v);
            Shared::new(s)
        };
        let (sa, sb, sc) = (store(a), store(b), store(&alloc::vec![0.0; m * n]));
        let la = Layout::contiguous(&[m, k]).unwrap();
        let lb = if b_t {
            Layout::new(&[k, n], &[1, k], 0).unwrap()
        } else {
            Layout::contiguous(&[k, n]).unwrap()
        };
        let lc = Layout::contiguous(&[m, n]).unwrap();
        let src = |s, l| Src {
            storage: s,
            layout: l,
            dtype: DType::F32,
        };
        let (a, b, c) = (src(&sa, &la), src(&sb, &lb), src(&sc, &lc));
        let d = Dims3::of(&a, &b, &c, contract::matmul(a, b, c).unwrap()).unwrap();
        gemm_by::<f32>(small, a, b, c, &d).unwrap();
        let g = sc.read("t").unwrap();
        typed::<f32>(g.bytes())
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect()
    }

    #[test]
    fn small_products_have_the_blocked_products_bits() {
        // Inexact f32 sums, so any change of summation order shows; k past
        // KC checks the per-block partial sums.
        let val = |i: usize| ((i * 2_654_435_761) % 1000) as f32 / 7.0 - 71.3;
        for (mkn, b_t) in [
            ([1, 16, 16], true),
            ([3, 5, 7], false),
            ([1, KC + 9, 2], false),
            ([2, 1, 1], true),
        ] {
            let [m, k, n] = mkn;
            let a: Vec<f32> = (0..m * k).map(val).collect();
            let b: Vec<f32> = (0..k * n).map(|i| val(i + 7)).collect();
            assert!(m * k * n <= SMALL);
            assert_eq!(
                product_bits(true, &a, &b, mkn, b_t),
                product_bits(false, &a, &b, mkn, b_t),
                "{mkn:?}"
            );
        }
    }

    #[test]
    fn destination_aliasing_an_operand_is_refused() {
        let s = storage_of(&[1.0, 2.0, 3.0, 4.0]);
        let l = Layout::contiguous(&[2, 2]).unwrap();
        let src = Src {
            storage: &s,
            layout: &l,
            dtype: DType::F64,
        };
        assert!(matches!(
            matmul(src, src, src),
            Err(Error::InvalidArgument { op: "matmul", .. })
        ));
    }
}
