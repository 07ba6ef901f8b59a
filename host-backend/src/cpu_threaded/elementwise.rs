//! Elementwise kernels: contiguous and broadcast-scalar fast paths written
//! as slice loops the compiler vectorises, strided operands gathered per
//! block, chunks spread over the pool for large outputs. f32/f64 are
//! specialised; other dtypes and non-contiguous destinations go to the
//! reference kernels.

use super::engine::{Arg, BLOCK, Opnd, Par, cast_slice, cast_slice_mut, opnd, read_src};
use super::float::{Fl, maximum, minimum};
use super::tiles::{TILE, for_tiles, gather_tile, wants_tiles};
use super::vmath::{self, Fun, Fun2};
use kael_core::Result;
use kael_core::backend::{BinaryOp, CmpOp, Dst, Src, UnaryOp};
use kael_core::cpu::elementwise as reference;
use kael_core::dtype::DType;
use kael_core::layout::Layout;
use kael_core::ops::{BinaryKernel, CompareKernel, UnaryKernel};

/// Runs `kern` over blocks of `d`, with one operand's matching block.
fn run1<T: bytemuck::Pod + Send + Sync, U: Send>(
    par: &Par<'_>,
    a: Opnd<'_, T>,
    d: &mut [U],
    kern: impl Fn(&mut [U], Arg<'_, T>) + Sync,
) {
    if tiled(&a).is_some() {
        let none = Opnd::Scalar(T::zeroed());
        return run2_tiled(par, a, none, d, |d, a, _| kern(d, a));
    }
    par.for_chunks(d, |start, chunk| {
        if !a.is_strided() {
            // One call over the chunk (NOTE [Whole chunks]).
            return kern(chunk, a.block(start, chunk.len(), &mut []));
        }
        // A gather buffer only for a strided operand (NOTE [Gather buffers]).
        let mut store_a;
        let ba: &mut [T] = if a.is_strided() {
            store_a = [T::zeroed(); BLOCK];
            &mut store_a
        } else {
            &mut []
        };
        for (i, blk) in chunk.chunks_mut(BLOCK).enumerate() {
            let s = start + i * BLOCK;
            kern(blk, a.block(s, blk.len(), ba));
        }
    });
}

/// Runs `kern` over blocks of `d`, with two operands' matching blocks.
fn run2<T: bytemuck::Pod + Send + Sync, U: Send>(
    par: &Par<'_>,
    a: Opnd<'_, T>,
    b: Opnd<'_, T>,
    d: &mut [U],
    kern: impl Fn(&mut [U], Arg<'_, T>, Arg<'_, T>) + Sync,
) {
    if tiled(&a).is_some() || tiled(&b).is_some() {
        return run2_tiled(par, a, b, d, kern);
    }
    // NOTE [Gather buffers]
    // Only a strided operand is gathered into a block buffer; zero-filling
    // two 2048-element buffers per call was 31% of a 4-element add's time
    // (issue 17's profile), for contiguous and scalar operands that never
    // read them.
    // NOTE [Whole chunks]
    // Blocks exist for the gather buffers. Without a strided operand each
    // chunk is one kernel call: a 16K-element inline add walked 8 blocks,
    // each re-deciding the ISA and re-slicing both operands, about 1,000
    // instructions on top of the 8,000 of its loop.
    par.for_chunks(d, |start, chunk| {
        if !a.is_strided() && !b.is_strided() {
            let n = chunk.len();
            return kern(
                chunk,
                a.block(start, n, &mut []),
                b.block(start, n, &mut []),
            );
        }
        let (mut store_a, mut store_b);
        let ba: &mut [T] = if a.is_strided() {
            store_a = [T::zeroed(); BLOCK];
            &mut store_a
        } else {
            &mut []
        };
        let bb: &mut [T] = if b.is_strided() {
            store_b = [T::zeroed(); BLOCK];
            &mut store_b
        } else {
            &mut []
        };
        for (i, blk) in chunk.chunks_mut(BLOCK).enumerate() {
            let s = start + i * BLOCK;
            let n = blk.len();
            kern(blk, a.block(s, n, ba), b.block(s, n, bb));
        }
    });
}

// NOTE [Tiled operands]
// An operand whose last two dims are transposed (`a + b.t()`) is read in
// the destination's order one element per cache line when gathered block
// by block: `add` with one transposed 4096x4096 operand ran at 1.3 GB/s
// against 20-24 GB/s contiguous. So when any operand wants tiles
// (`tiles::wants_tiles`), the destination is written tile by tile: each
// such operand's tile is gathered (transposed through registers where it
// can be) into a TILE x TILE buffer, and `kern` runs on each of the
// tile's rows with the other operands' matching row segments.

/// The storage and layout of an operand that reads best in tiles.
fn tiled<'a, T>(o: &Opnd<'a, T>) -> Option<(&'a [T], &'a Layout)> {
    match *o {
        Opnd::Strided(s, l) if wants_tiles(l) => Some((s, l)),
        _ => None,
    }
}

/// The matrix size (last two dims) of a layout of rank >= 2.
fn matrix_of(l: &Layout) -> (usize, usize) {
    let (r, sh) = (l.rank(), l.shape());
    (sh[r - 2], sh[r - 1])
}

/// Per-chunk buffers of [`run2_tiled`]: one tile and one row segment per
/// operand.
struct TileScratch<T> {
    tile_a: [T; TILE * TILE],
    tile_b: [T; TILE * TILE],
    row_a: [T; TILE],
    row_b: [T; TILE],
}

/// [`run2`] tile by tile (NOTE [Tiled operands]); at least one operand
/// wants tiles, and every operand has the destination's shape.
fn run2_tiled<T: bytemuck::Pod + Send + Sync, U: Send>(
    par: &Par<'_>,
    a: Opnd<'_, T>,
    b: Opnd<'_, T>,
    d: &mut [U],
    kern: impl Fn(&mut [U], Arg<'_, T>, Arg<'_, T>) + Sync,
) {
    // Decided once per op, not per tile or row.
    let (ta, tb) = (tiled(&a), tiled(&b));
    let Some((_, l)) = ta.or(tb) else {
        return;
    };
    let (rows, cols) = matrix_of(l);
    let scratch = || TileScratch {
        tile_a: [T::zeroed(); TILE * TILE],
        tile_b: [T::zeroed(); TILE * TILE],
        row_a: [T::zeroed(); TILE],
        row_b: [T::zeroed(); TILE],
    };
    for_tiles(par, rows, cols, d, scratch, |s, t, dt| {
        let TileScratch {
            tile_a,
            tile_b,
            row_a,
            row_b,
        } = s;
        for (o, buf) in [(ta, &mut *tile_a), (tb, &mut *tile_b)] {
            if let Some((src, l)) = o {
                gather_tile(src, l, t, buf, TILE);
            }
        }
        for ii in 0..t.h {
            let start = (t.row + ii) * cols + t.col;
            let x = tile_row(&a, ta.is_some(), tile_a, ii, t.w, start, row_a);
            let y = tile_row(&b, tb.is_some(), tile_b, ii, t.w, start, row_b);
            kern(&mut dt[ii * cols..ii * cols + t.w], x, y);
        }
    });
}

/// Row `ii` (`w` elements, destination index `start`) of an operand's
/// tile: from its gathered `tile` when it is `gathered`, else its block.
fn tile_row<'b, T: Copy>(
    o: &'b Opnd<'_, T>,
    gathered: bool,
    tile: &'b [T],
    ii: usize,
    w: usize,
    start: usize,
    row: &'b mut [T],
) -> Arg<'b, T> {
    if gathered {
        Arg::S(&tile[ii * TILE..ii * TILE + w])
    } else {
        o.block(start, w, row)
    }
}

// NOTE [Loops at the vector width]
// The one-instruction loops (add, sub, mul, div, maximum, minimum, neg,
// abs, ...) are compiled three times, for AVX-512F, for AVX2 and for the
// baseline (SSE2), and each block runs the widest this CPU has, found at
// run time (`vmath::isa`, a cached load) as the vector math does. Built for
// the baseline only, an L2-resident add was load-port bound at 16 bytes per
// load.

/// [`apply1`] at the widest vector width this CPU runs (NOTE [Loops at the
/// vector width]).
#[inline(always)]
fn apply1_wide<T: Copy>(d: &mut [T], a: Arg<'_, T>, f: impl Fn(T) -> T) {
    match vmath::isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa()` found AVX-512F on this CPU.
        vmath::Isa::Avx512 => unsafe { apply1_avx512(d, a, f) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa()` found AVX2 on this CPU.
        vmath::Isa::Avx2 => unsafe { apply1_avx2(d, a, f) },
        _ => apply1(d, a, f),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn apply1_avx512<T: Copy>(d: &mut [T], a: Arg<'_, T>, f: impl Fn(T) -> T) {
    apply1(d, a, f);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn apply1_avx2<T: Copy>(d: &mut [T], a: Arg<'_, T>, f: impl Fn(T) -> T) {
    apply1(d, a, f);
}

/// [`apply2`] at the widest vector width this CPU runs (NOTE [Loops at the
/// vector width]).
#[inline(always)]
fn apply2_wide<T: Copy>(d: &mut [T], a: Arg<'_, T>, b: Arg<'_, T>, f: impl Fn(T, T) -> T) {
    match vmath::isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa()` found AVX-512F on this CPU.
        vmath::Isa::Avx512 => unsafe { apply2_avx512(d, a, b, f) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa()` found AVX2 on this CPU.
        vmath::Isa::Avx2 => unsafe { apply2_avx2(d, a, b, f) },
        _ => apply2(d, a, b, f),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn apply2_avx512<T: Copy>(d: &mut [T], a: Arg<'_, T>, b: Arg<'_, T>, f: impl Fn(T, T) -> T) {
    apply2(d, a, b, f);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn apply2_avx2<T: Copy>(d: &mut [T], a: Arg<'_, T>, b: Arg<'_, T>, f: impl Fn(T, T) -> T) {
    apply2(d, a, b, f);
}

/// `d = f(a)` over one block.
#[inline(always)]
fn apply1<T: Copy>(d: &mut [T], a: Arg<'_, T>, f: impl Fn(T) -> T) {
    match a {
        Arg::S(a) => d.iter_mut().zip(a).for_each(|(d, &a)| *d = f(a)),
        Arg::K(a) => d.fill(f(a)),
        Arg::D => d.iter_mut().for_each(|d| *d = f(*d)),
    }
}

/// `d = f(a, b)` over one block; either operand may be the block itself.
#[inline(always)]
fn apply2<T: Copy>(d: &mut [T], a: Arg<'_, T>, b: Arg<'_, T>, f: impl Fn(T, T) -> T) {
    use Arg::{D, K, S};
    match (a, b) {
        (D, S(b)) => d.iter_mut().zip(b).for_each(|(d, &b)| *d = f(*d, b)),
        (S(a), D) => d.iter_mut().zip(a).for_each(|(d, &a)| *d = f(a, *d)),
        (D, K(b)) => d.iter_mut().for_each(|d| *d = f(*d, b)),
        (K(a), D) => d.iter_mut().for_each(|d| *d = f(a, *d)),
        (D, D) => d.iter_mut().for_each(|d| *d = f(*d, *d)),
        (a, b) => apply2_to(d, a, b, f),
    }
}

/// `d = f(a, b)` for operands that are slices or scalars, into any element
/// type (`D` operands are [`apply2`]'s; compare's sources are never its
/// destination, since aliasing goes to the reference kernel).
#[inline(always)]
fn apply2_to<T: Copy, U: Copy>(d: &mut [U], a: Arg<'_, T>, b: Arg<'_, T>, f: impl Fn(T, T) -> U) {
    use Arg::{K, S};
    match (a, b) {
        (S(a), S(b)) => d
            .iter_mut()
            .zip(a.iter().zip(b))
            .for_each(|(d, (&a, &b))| *d = f(a, b)),
        (S(a), K(b)) => d.iter_mut().zip(a).for_each(|(d, &a)| *d = f(a, b)),
        (K(a), S(b)) => d.iter_mut().zip(b).for_each(|(d, &b)| *d = f(a, b)),
        (K(a), K(b)) => d.fill(f(a, b)),
        _ => {}
    }
}

/// Whether the kernels here can write `dst` (contiguous, host bytes).
fn dst_ok(dst: &Dst<'_>) -> bool {
    dst.layout.is_contiguous()
}

// NOTE [Elementwise in the output's order]
// An elementwise op's values do not depend on the order it visits the
// elements, so an output that is a permutation of a contiguous layout (a
// transposed view: GPT-2's Conv1D weights are parameters held that way)
// runs with every operand's dims permuted alike, the output then
// contiguous: the parallel path, not the reference kernel's strided walk
// (AdamW's commit into GPT-2's 85M transposed weights ran on one thread,
// 8% of a fine-tuning step).

/// The dim order that makes `dst` contiguous, when `dst` is a permutation
/// of a contiguous layout and every operand has its shape.
fn dense_order(dst: &Layout, operands: &[&Layout]) -> Option<Vec<isize>> {
    if dst.is_contiguous() || operands.iter().any(|l| l.shape() != dst.shape()) {
        return None;
    }
    let st = dst.strides();
    let mut order: Vec<usize> = (0..dst.rank()).collect();
    order.sort_by_key(|&d| core::cmp::Reverse(st[d]));
    let order: Vec<isize> = order.into_iter().map(|d| d as isize).collect();
    dst.permute(&order)
        .ok()
        .filter(Layout::is_contiguous)
        .map(|_| order)
}

/// `layout` with its dims in `order`.
fn permuted(layout: &Layout, order: &[isize]) -> Result<Layout> {
    layout.permute(order)
}

/// `dst = src` for any dtype, by element size.
pub(super) fn copy_strided(par: &Par<'_>, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
    if src.dtype != dst.dtype || !dst_ok(&dst) {
        return reference::copy_strided(src, dst);
    }
    match dst.dtype.size_in_bytes() {
        1 => copy_as::<u8>(par, src, dst),
        2 => copy_as::<u16>(par, src, dst),
        4 => copy_as::<u32>(par, src, dst),
        _ => copy_as::<u64>(par, src, dst),
    }
}

fn copy_as<T: bytemuck::Pod + Send + Sync>(
    par: &Par<'_>,
    src: Src<'_>,
    dst: Dst<'_>,
) -> Result<()> {
    let ga = match read_src(&src, &dst, "copy") {
        Ok(g) => g,
        Err(_) => return reference::copy_strided(src, dst),
    };
    if ga.is_none() {
        return Ok(()); // copying a tensor onto itself
    }
    let a = opnd::<T>(&ga, src.layout)?;
    let mut gd = dst.storage.write("copy")?;
    let n = dst.layout.numel();
    let off = dst.layout.offset();
    let d = &mut cast_slice_mut::<T>(gd.bytes_mut())?[off..off + n];
    if let Opnd::Strided(s, l) = a {
        if wants_tiles(l) {
            let (rows, cols) = matrix_of(l);
            for_tiles(
                par,
                rows,
                cols,
                d,
                || (),
                |_, t, dt| {
                    gather_tile(s, l, t, dt, cols);
                },
            );
            return Ok(());
        }
    }
    run1(&par.bandwidth_bound(), a, d, |d, a| match a {
        Arg::S(a) => d.copy_from_slice(a),
        Arg::K(v) => d.fill(v),
        Arg::D => {}
    });
    Ok(())
}

/// Sets every element; f32/f64 contiguous in parallel.
pub(super) fn fill(par: &Par<'_>, dst: Dst<'_>, value: f64) -> Result<()> {
    match dst.dtype {
        DType::F32 if dst_ok(&dst) => fill_as::<f32>(par, dst, value as f32),
        DType::F64 if dst_ok(&dst) => fill_as::<f64>(par, dst, value),
        _ => reference::fill(dst, value),
    }
}

fn fill_as<T: bytemuck::Pod + Send + Sync>(par: &Par<'_>, dst: Dst<'_>, v: T) -> Result<()> {
    let mut gd = dst.storage.write("fill")?;
    let (off, n) = (dst.layout.offset(), dst.layout.numel());
    let d = &mut cast_slice_mut::<T>(gd.bytes_mut())?[off..off + n];
    par.bandwidth_bound().for_chunks(d, |_, c| c.fill(v));
    Ok(())
}

/// `dst = op(src)`.
pub(super) fn unary(par: &Par<'_>, op: UnaryOp, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
    if src.dtype == dst.dtype
        && let Some(order) = dense_order(dst.layout, &[src.layout])
    {
        let (sl, dl) = (permuted(src.layout, &order)?, permuted(dst.layout, &order)?);
        let src = Src { layout: &sl, ..src };
        return unary(par, op, src, Dst { layout: &dl, ..dst });
    }
    if src.dtype != dst.dtype || !dst_ok(&dst) {
        return reference::unary(op, src, dst);
    }
    match dst.dtype {
        DType::F32 => match vector_fun(op) {
            Some(f) => unary_vmath(par, op, f, src, dst),
            None => unary_as::<f32>(par, op, src, dst),
        },
        DType::F64 => unary_as::<f64>(par, op, src, dst),
        _ => reference::unary(op, src, dst),
    }
}

/// The ops with a vectorised f32 function (NOTE [Vector math]).
fn vector_fun(op: UnaryOp) -> Option<Fun> {
    Some(match op {
        UnaryOp::Exp => Fun::Exp,
        UnaryOp::Expm1 => Fun::Expm1,
        UnaryOp::Log => Fun::Log,
        UnaryOp::Tanh => Fun::Tanh,
        UnaryOp::Sigmoid => Fun::Sigmoid,
        UnaryOp::Erf => Fun::Erf,
        UnaryOp::Gelu => Fun::Gelu,
        UnaryOp::GeluTanh => Fun::GeluTanh,
        UnaryOp::Silu => Fun::Silu,
        _ => return None,
    })
}

/// `dst = f(src)` for f32 with [`vmath::map`].
fn unary_vmath(par: &Par<'_>, op: UnaryOp, f: Fun, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
    let name = op.name();
    let ga = match read_src(&src, &dst, name) {
        Ok(g) => g,
        Err(_) => return reference::unary(op, src, dst),
    };
    let a = opnd::<f32>(&ga, src.layout)?;
    let mut gd = dst.storage.write(name)?;
    let (off, n) = (dst.layout.offset(), dst.layout.numel());
    let d = &mut cast_slice_mut::<f32>(gd.bytes_mut())?[off..off + n];
    let isa = vmath::isa();
    run1(par, a, d, |d, a| match a {
        Arg::S(s) => vmath::map(isa, f, Some(s), d),
        Arg::K(v) => {
            let mut one = [v];
            vmath::map(isa, f, None, &mut one);
            d.fill(one[0]);
        }
        Arg::D => vmath::map(isa, f, None, d),
    });
    Ok(())
}

fn unary_as<T: Fl>(par: &Par<'_>, op: UnaryOp, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
    let name = op.name();
    let ga = match read_src(&src, &dst, name) {
        Ok(g) => g,
        Err(_) => return reference::unary(op, src, dst),
    };
    let a = opnd::<T>(&ga, src.layout)?;
    let mut gd = dst.storage.write(name)?;
    let (off, n) = (dst.layout.offset(), dst.layout.numel());
    let d = &mut cast_slice_mut::<T>(gd.bytes_mut())?[off..off + n];
    macro_rules! go {
        ($f:expr) => {
            run1(par, a, d, |d, a| apply1_wide(d, a, $f))
        };
    }
    let (z, one) = (T::ZERO, T::ONE);
    // Arithmetic ops written here so the loops vectorise; every other op
    // runs the op table's scalar function (NOTE [Op table]).
    match op {
        UnaryOp::Neg => go!(|x: T| -x),
        UnaryOp::Abs => go!(|x: T| x.fabs()),
        UnaryOp::Sqr => go!(|x: T| x * x),
        UnaryOp::Recip => go!(|x: T| one / x),
        UnaryOp::Relu => go!(|x: T| if x > z || x.is_nan() { x } else { z }),
        UnaryOp::Clamp(lo, hi) => {
            let lo = lo.map(T::from_f64);
            let hi = hi.map(T::from_f64);
            go!(|x: T| {
                let mut y = x;
                if let Some(l) = lo {
                    if y < l {
                        y = l;
                    }
                }
                if let Some(h) = hi {
                    if y > h {
                        y = h;
                    }
                }
                y
            })
        }
        // Step and Sign as arithmetic on the comparisons, not branches: on
        // random signs (relu's backward) the branches mispredicted half
        // the time and ran ~15x slower than relu itself.
        UnaryOp::Step => go!(|x: T| T::from_f64(f64::from(u8::from(x > z)))),
        UnaryOp::Sign => go!(|x: T| {
            let s = T::from_f64(f64::from(i8::from(x > z) - i8::from(x < z)));
            // ±0 and NaN are returned as they are.
            let keep = x == z || x.is_nan();
            if keep { x } else { s }
        }),
        _ => {
            let k = Table1 { par, a, d };
            if op.map_float(k).is_none() {
                return reference::unary(op, src, dst);
            }
        }
    }
    Ok(())
}

/// The threaded default of a table op: its scalar function over blocks.
struct Table1<'p, 'a, 'd, T> {
    par: &'p Par<'p>,
    a: Opnd<'a, T>,
    d: &'d mut [T],
}

impl<T: Fl> UnaryKernel<T> for Table1<'_, '_, '_, T> {
    type Output = ();
    fn run(self, f: impl Fn(T) -> T + Copy + Send + Sync) {
        run1(self.par, self.a, self.d, |d, a| apply1(d, a, f));
    }
}

/// The threaded default of a binary table op.
struct Table2<'p, 'a, 'd, T> {
    par: &'p Par<'p>,
    a: Opnd<'a, T>,
    b: Opnd<'a, T>,
    d: &'d mut [T],
}

impl<T: Fl> BinaryKernel<T> for Table2<'_, '_, '_, T> {
    type Output = ();
    fn run(self, f: impl Fn(T, T) -> T + Copy + Send + Sync) {
        run2(self.par, self.a, self.b, self.d, |d, a, b| {
            apply2(d, a, b, f)
        });
    }
}

/// The threaded comparison of a table op, into bytes.
struct TableCmp<'p, 'a, 'd, T> {
    par: &'p Par<'p>,
    a: Opnd<'a, T>,
    b: Opnd<'a, T>,
    d: &'d mut [u8],
}

impl<T: Fl> CompareKernel<T> for TableCmp<'_, '_, '_, T> {
    type Output = ();
    fn run(self, f: impl Fn(T, T) -> bool + Copy + Send + Sync) {
        run2(self.par, self.a, self.b, self.d, |blk, x, y| {
            apply2_to(blk, x, y, move |x, y| u8::from(f(x, y)))
        });
    }
}

/// `dst = op(lhs, rhs)`.
pub(super) fn binary(
    par: &Par<'_>,
    op: BinaryOp,
    lhs: Src<'_>,
    rhs: Src<'_>,
    dst: Dst<'_>,
) -> Result<()> {
    let same = lhs.dtype == dst.dtype && rhs.dtype == dst.dtype;
    if same
        && let Some(done) = match dst.dtype {
            DType::F32 => binary_small::<f32>(op, &lhs, &rhs, &dst),
            DType::F64 => binary_small::<f64>(op, &lhs, &rhs, &dst),
            _ => None,
        }
    {
        return done;
    }
    if same && let Some(order) = dense_order(dst.layout, &[lhs.layout, rhs.layout]) {
        let (ll, rl) = (permuted(lhs.layout, &order)?, permuted(rhs.layout, &order)?);
        let dl = permuted(dst.layout, &order)?;
        let (lhs, rhs) = (Src { layout: &ll, ..lhs }, Src { layout: &rl, ..rhs });
        return binary(par, op, lhs, rhs, Dst { layout: &dl, ..dst });
    }
    if !same || !dst_ok(&dst) {
        return reference::binary(op, lhs, rhs, dst);
    }
    match dst.dtype {
        DType::F32 if op == BinaryOp::GeluTanhBackward => {
            binary_vmath(par, op, Fun2::GeluTanhBackward, lhs, rhs, dst)
        }
        DType::F32 => binary_as::<f32>(par, op, lhs, rhs, dst),
        DType::F64 => binary_as::<f64>(par, op, lhs, rhs, dst),
        _ => reference::binary(op, lhs, rhs, dst),
    }
}

// NOTE [Small contiguous ops]
// An arithmetic op of at most `SMALL` elements whose operands and output
// are contiguous, in storages other than the output's, runs here as one
// slice loop: no operand classification, no blocks, no pool. Below the
// pool's threshold the general path computes the same loop, but its setup
// (operand kinds, block walk, chunking) was most of a 4-element add's
// kernel time (issue 17). The decision reads only the three layouts.
const SMALL: usize = 4096;

/// `dst = lhs op rhs` by NOTE [Small contiguous ops], or `None` when the
/// note does not apply (the general path runs then).
fn binary_small<T: Fl>(
    op: BinaryOp,
    lhs: &Src<'_>,
    rhs: &Src<'_>,
    dst: &Dst<'_>,
) -> Option<Result<()>> {
    let arithmetic = matches!(
        op,
        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div
    );
    if !arithmetic
        || core::ptr::eq(lhs.storage, dst.storage)
        || core::ptr::eq(rhs.storage, dst.storage)
    {
        return None;
    }
    let rd = dst.layout.contiguous_span()?;
    let n = rd.len();
    // The limit first: a large op walks no operand layout here.
    if n > SMALL {
        return None;
    }
    let (ra, rb) = (lhs.layout.contiguous_span()?, rhs.layout.contiguous_span()?);
    if ra.len() != n || rb.len() != n {
        return None;
    }
    let name = op.name();
    Some((|| {
        let (ga, gb) = (lhs.storage.read(name)?, rhs.storage.read(name)?);
        let mut gd = dst.storage.write(name)?;
        let (a, b, d) = (
            cast_slice::<T>(ga.bytes())?.get(ra),
            cast_slice::<T>(gb.bytes())?.get(rb),
            cast_slice_mut::<T>(gd.bytes_mut())?.get_mut(rd),
        );
        // Invariant 3 of `Layout` puts every range inside its storage.
        let (Some(a), Some(b), Some(d)) = (a, b, d) else {
            return Err(kael_core::Error::InvalidArgument {
                op: name,
                reason: "a layout reaches past its storage; deep_clone() the tensor",
            });
        };
        let (a, b) = (Arg::S(a), Arg::S(b));
        match op {
            BinaryOp::Add => apply2_wide(d, a, b, |x: T, y: T| x + y),
            BinaryOp::Sub => apply2_wide(d, a, b, |x: T, y: T| x - y),
            BinaryOp::Mul => apply2_wide(d, a, b, |x: T, y: T| x * y),
            _ => apply2_wide(d, a, b, |x: T, y: T| x / y),
        }
        Ok(())
    })())
}

/// `dst = f(lhs, rhs)` for f32 with [`vmath::map2`].
fn binary_vmath(
    par: &Par<'_>,
    op: BinaryOp,
    f: Fun2,
    lhs: Src<'_>,
    rhs: Src<'_>,
    dst: Dst<'_>,
) -> Result<()> {
    let name = op.name();
    let (ga, gb) = match (read_src(&lhs, &dst, name), read_src(&rhs, &dst, name)) {
        (Ok(a), Ok(b)) => (a, b),
        _ => return reference::binary(op, lhs, rhs, dst),
    };
    let a = opnd::<f32>(&ga, lhs.layout)?;
    let b = opnd::<f32>(&gb, rhs.layout)?;
    let mut gd = dst.storage.write(name)?;
    let (off, n) = (dst.layout.offset(), dst.layout.numel());
    let d = &mut cast_slice_mut::<f32>(gd.bytes_mut())?[off..off + n];
    let isa = vmath::isa();
    run2(par, a, b, d, |d, a, b| vmath::map2(isa, f, a, b, d));
    Ok(())
}

fn binary_as<T: Fl>(
    par: &Par<'_>,
    op: BinaryOp,
    lhs: Src<'_>,
    rhs: Src<'_>,
    dst: Dst<'_>,
) -> Result<()> {
    let name = op.name();
    let (ga, gb) = match (read_src(&lhs, &dst, name), read_src(&rhs, &dst, name)) {
        (Ok(a), Ok(b)) => (a, b),
        _ => return reference::binary(op, lhs, rhs, dst),
    };
    let a = opnd::<T>(&ga, lhs.layout)?;
    let b = opnd::<T>(&gb, rhs.layout)?;
    let mut gd = dst.storage.write(name)?;
    let (off, n) = (dst.layout.offset(), dst.layout.numel());
    let d = &mut cast_slice_mut::<T>(gd.bytes_mut())?[off..off + n];
    let cheap = par.bandwidth_bound();
    macro_rules! go {
        ($f:expr) => {
            run2(&cheap, a, b, d, |d, a, b| apply2_wide(d, a, b, $f))
        };
    }
    match op {
        BinaryOp::Add => go!(|x: T, y: T| x + y),
        BinaryOp::Sub => go!(|x: T, y: T| x - y),
        BinaryOp::Mul => go!(|x: T, y: T| x * y),
        BinaryOp::Div => go!(|x: T, y: T| x / y),
        BinaryOp::Maximum => go!(maximum::<T>),
        BinaryOp::Minimum => go!(minimum::<T>),
        _ => {
            let k = Table2 { par, a, b, d };
            if op.map_float(k).is_none() {
                return reference::binary(op, lhs, rhs, dst);
            }
        }
    }
    Ok(())
}

/// `dst = lhs op rhs` into `Bool`.
pub(super) fn compare(
    par: &Par<'_>,
    op: CmpOp,
    lhs: Src<'_>,
    rhs: Src<'_>,
    dst: Dst<'_>,
) -> Result<()> {
    let ok = lhs.dtype == rhs.dtype && dst.dtype == DType::Bool && dst_ok(&dst);
    match lhs.dtype {
        DType::F32 if ok => compare_as::<f32>(par, op, lhs, rhs, dst),
        DType::F64 if ok => compare_as::<f64>(par, op, lhs, rhs, dst),
        _ => reference::compare(op, lhs, rhs, dst),
    }
}

fn compare_as<T: Fl>(
    par: &Par<'_>,
    op: CmpOp,
    lhs: Src<'_>,
    rhs: Src<'_>,
    dst: Dst<'_>,
) -> Result<()> {
    let (ga, gb) = match (
        read_src(&lhs, &dst, "compare"),
        read_src(&rhs, &dst, "compare"),
    ) {
        (Ok(Some(a)), Ok(Some(b))) => (Some(a), Some(b)),
        _ => return reference::compare(op, lhs, rhs, dst),
    };
    let a = opnd::<T>(&ga, lhs.layout)?;
    let b = opnd::<T>(&gb, rhs.layout)?;
    let mut gd = dst.storage.write("compare")?;
    let (off, n) = (dst.layout.offset(), dst.layout.numel());
    let d = &mut cast_slice_mut::<u8>(gd.bytes_mut())?[off..off + n];
    op.map(TableCmp { par, a, b, d });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every operand form of the wide loops, on 37 values (a whole number
    /// of vectors and a remainder at every width), against a scalar loop.
    /// Run by Miri with AVX2 enabled (scripts/reliability.sh), where the
    /// feature-compiled instantiations are taken.
    #[test]
    fn the_wide_loops_match_a_scalar_loop_for_every_operand_form() {
        let xs: Vec<f32> = (0..37).map(|i| (i as f32 - 18.0) * 0.37).collect();
        let ys: Vec<f32> = (0..37).map(|i| 1.0 + (i as f32) * 0.11).collect();
        let f = |x: f32, y: f32| x * y - y;
        type Case = (fn(&[f32], &[f32]) -> Vec<f32>, &'static str);
        let cases: [Case; 4] = [
            (
                |x, y| {
                    let mut d = vec![0.0; x.len()];
                    apply2_wide(&mut d, Arg::S(x), Arg::S(y), |x, y| x * y - y);
                    d
                },
                "slice, slice",
            ),
            (
                |x, y| {
                    let mut d = x.to_vec();
                    apply2_wide(&mut d, Arg::D, Arg::S(y), |x, y| x * y - y);
                    d
                },
                "destination, slice",
            ),
            (
                |x, y| {
                    let mut d = y.to_vec();
                    apply2_wide(&mut d, Arg::S(x), Arg::D, |x, y| x * y - y);
                    d
                },
                "slice, destination",
            ),
            (
                |x, _| {
                    let mut d = vec![0.0; x.len()];
                    apply2_wide(&mut d, Arg::S(x), Arg::K(2.5), |x, y| x * y - y);
                    d
                },
                "slice, scalar",
            ),
        ];
        for (run, form) in cases {
            let got = run(&xs, &ys);
            for i in 0..xs.len() {
                let y = if form.ends_with("scalar") { 2.5 } else { ys[i] };
                assert_eq!(got[i].to_bits(), f(xs[i], y).to_bits(), "{form} at {i}");
            }
        }
        let mut neg = vec![0.0f32; xs.len()];
        apply1_wide(&mut neg, Arg::S(&xs), |x| -x);
        let mut in_place = xs.clone();
        apply1_wide(&mut in_place, Arg::D, |x| -x);
        for i in 0..xs.len() {
            assert_eq!(neg[i], -xs[i]);
            assert_eq!(in_place[i], -xs[i]);
        }
    }
}
