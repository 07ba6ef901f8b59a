//! Elementwise kernels: contiguous and broadcast-scalar fast paths written
//! as slice loops the compiler vectorises, strided operands gathered per
//! block, chunks spread over the pool for large outputs. f32/f64 are
//! specialised; other dtypes and non-contiguous destinations go to the
//! reference kernels.

use super::engine::{Arg, BLOCK, Opnd, Par, cast_slice_mut, opnd, read_src};
use super::float::{Fl, maximum, minimum};
use kael_core::Result;
use kael_core::backend::{BinaryOp, CmpOp, Dst, Src, UnaryOp};
use kael_core::cpu::elementwise as reference;
use kael_core::dtype::DType;
use kael_core::layout::Layout;

/// Runs `kern` over blocks of `d`, with one operand's matching block.
fn run1<T: Copy + Send + Sync + bytemuck::Zeroable, U: Send>(
    par: &Par<'_>,
    a: Opnd<'_, T>,
    d: &mut [U],
    kern: impl Fn(&mut [U], Arg<'_, T>) + Sync,
) {
    par.for_chunks(d, |start, chunk| {
        let mut ba = [T::zeroed(); BLOCK];
        for (i, blk) in chunk.chunks_mut(BLOCK).enumerate() {
            let s = start + i * BLOCK;
            kern(blk, a.block(s, blk.len(), &mut ba));
        }
    });
}

/// Runs `kern` over blocks of `d`, with two operands' matching blocks.
fn run2<T: Copy + Send + Sync + bytemuck::Zeroable, U: Send>(
    par: &Par<'_>,
    a: Opnd<'_, T>,
    b: Opnd<'_, T>,
    d: &mut [U],
    kern: impl Fn(&mut [U], Arg<'_, T>, Arg<'_, T>) + Sync,
) {
    par.for_chunks(d, |start, chunk| {
        let mut ba = [T::zeroed(); BLOCK];
        let mut bb = [T::zeroed(); BLOCK];
        for (i, blk) in chunk.chunks_mut(BLOCK).enumerate() {
            let s = start + i * BLOCK;
            let n = blk.len();
            kern(blk, a.block(s, n, &mut ba), b.block(s, n, &mut bb));
        }
    });
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
        (S(a), S(b)) => d
            .iter_mut()
            .zip(a.iter().zip(b))
            .for_each(|(d, (&a, &b))| *d = f(a, b)),
        (S(a), K(b)) => d.iter_mut().zip(a).for_each(|(d, &a)| *d = f(a, b)),
        (K(a), S(b)) => d.iter_mut().zip(b).for_each(|(d, &b)| *d = f(a, b)),
        (K(a), K(b)) => d.fill(f(a, b)),
        (D, S(b)) => d.iter_mut().zip(b).for_each(|(d, &b)| *d = f(*d, b)),
        (S(a), D) => d.iter_mut().zip(a).for_each(|(d, &a)| *d = f(a, *d)),
        (D, K(b)) => d.iter_mut().for_each(|d| *d = f(*d, b)),
        (K(a), D) => d.iter_mut().for_each(|d| *d = f(a, *d)),
        (D, D) => d.iter_mut().for_each(|d| *d = f(*d, *d)),
    }
}

/// `d = f(a, b)` into another element type; sources are never the
/// destination here (callers route aliasing to the reference kernel).
#[inline(always)]
fn apply2_to<T: Copy, U>(d: &mut [U], a: &[T], b: &[T], f: impl Fn(T, T) -> U) {
    d.iter_mut()
        .zip(a.iter().zip(b))
        .for_each(|(d, (&a, &b))| *d = f(a, b));
}

/// Whether the kernels here can write `dst` (contiguous, host bytes).
fn dst_ok(dst: &Dst<'_>) -> bool {
    dst.layout.is_contiguous()
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
        let r = l.rank();
        let st = l.strides();
        if r >= 2 && st[r - 1] != 1 && st[r - 2] < st[r - 1] {
            copy_tiled(par, s, l, d);
            return Ok(());
        }
    }
    run1(par, a, d, |d, a| match a {
        Arg::S(a) => d.copy_from_slice(a),
        Arg::K(v) => d.fill(v),
        Arg::D => {}
    });
    Ok(())
}

/// Side of the square tiles of [`copy_tiled`].
const TILE: usize = 32;

/// `d = src` (row-major) for a source whose last two dims are transposed
/// (the inner dim has the larger stride): copies TILE x TILE tiles so
/// both the reads and the writes stay within a few cache lines per row,
/// instead of striding through memory once per element. A plain transpose
/// of 4-byte elements (the source's rows are its columns: stride 1) moves
/// 8x8 blocks through AVX registers ([`transpose_8x8`]) where the CPU has
/// AVX.
fn copy_tiled<T: bytemuck::Pod + Send + Sync>(par: &Par<'_>, src: &[T], l: &Layout, d: &mut [T]) {
    let r = l.rank();
    let (shape, st) = (l.shape(), l.strides());
    let (rows, cols) = (shape[r - 2], shape[r - 1]);
    let (s0, s1) = (st[r - 2], st[r - 1]);
    let outer = &shape[..r - 2];
    let outer_st = &st[..r - 2];
    let blocks = s0 == 1 && core::mem::size_of::<T>() == 4 && has_avx();
    par.for_rows(d, cols, |row0, chunk| {
        let nrows = chunk.len() / cols;
        let mut i = 0;
        while i < nrows {
            let g = row0 + i; // global row: batch * rows + row in matrix
            let (b, ri) = (g / rows, g % rows);
            let base = l.offset() + offset_of(b, outer, outer_st);
            let th = TILE.min(rows - ri).min(nrows - i);
            for j0 in (0..cols).step_by(TILE) {
                let tw = TILE.min(cols - j0);
                // The tile's first source element and first destination row.
                let p = base + ri * s0 + j0 * s1;
                let dt = &mut chunk[i * cols + j0..];
                let (bh, bw) = if blocks {
                    (th / 8 * 8, tw / 8 * 8)
                } else {
                    (0, 0)
                };
                if blocks {
                    // SAFETY: `blocks` is only true where has_avx() found AVX.
                    unsafe { tile_blocks(src, p, s1, dt, cols, bh, bw) };
                }
                // What the blocks left: the rows below them, then the
                // columns right of them.
                for ii in 0..th {
                    let start = if ii < bh { bw } else { 0 };
                    let drow = &mut dt[ii * cols + start..ii * cols + tw];
                    let q = p + ii * s0 + start * s1;
                    for (jj, x) in drow.iter_mut().enumerate() {
                        *x = src[q + jj * s1];
                    }
                }
            }
            i += th;
        }
    });
}

/// The 8x8 register blocks of one tile: rows `0..bh` and columns `0..bw`
/// of `dt` (row stride `cols`), transposed from `src` at `p` (whose rows
/// are `dt`'s columns, stride `s1`). Does nothing for elements that are
/// not 4 bytes.
///
/// # Safety
/// The CPU must have AVX ([`has_avx`]).
unsafe fn tile_blocks<T: bytemuck::Pod>(
    src: &[T],
    p: usize,
    s1: usize,
    dt: &mut [T],
    cols: usize,
    bh: usize,
    bw: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if let (Ok(src), Ok(dt)) = (
        bytemuck::try_cast_slice::<T, u32>(src),
        bytemuck::try_cast_slice_mut::<T, u32>(dt),
    ) {
        for ii in (0..bh).step_by(8) {
            for jj in (0..bw).step_by(8) {
                let (from, to) = (&src[p + ii + jj * s1..], &mut dt[ii * cols + jj..]);
                // SAFETY: the caller guarantees AVX.
                unsafe { transpose_8x8(from, s1, to, cols) };
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (src, p, s1, dt, cols, bh, bw);
}

/// Whether the CPU has AVX (for [`transpose_8x8`]).
fn has_avx() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `d[r * ds + c] = s[c * ss + r]` for `r, c < 8`: an 8x8 block of 4-byte
/// elements transposed through eight AVX registers (unpack, shuffle, then
/// swap 128-bit halves), as bits: a NaN's payload is kept. Does nothing
/// when either slice is too short for the block.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
fn transpose_8x8(s: &[u32], ss: usize, d: &mut [u32], ds: usize) {
    use core::arch::x86_64::{
        __m256, _mm256_loadu_ps, _mm256_permute2f128_ps, _mm256_shuffle_ps, _mm256_storeu_ps,
        _mm256_unpackhi_ps, _mm256_unpacklo_ps,
    };
    if s.len() < 7 * ss + 8 || d.len() < 7 * ds + 8 {
        return;
    }
    let sp = s.as_ptr().cast::<f32>();
    // SAFETY: row k reads s[k * ss .. k * ss + 8], inside `s` for k < 8
    // (length checked above); unaligned loads accept any address.
    let r: [__m256; 8] = core::array::from_fn(|k| unsafe { _mm256_loadu_ps(sp.add(k * ss)) });
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    // 0x44 picks elements (0, 1) of each pair, 0xEE elements (2, 3).
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    // 0x20: low halves of both operands; 0x31: high halves.
    let out = [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ];
    let dp = d.as_mut_ptr().cast::<f32>();
    for (k, v) in out.into_iter().enumerate() {
        // SAFETY: row k writes d[k * ds .. k * ds + 8], inside `d` for
        // k < 8 (length checked above); unaligned stores accept any address.
        unsafe { _mm256_storeu_ps(dp.add(k * ds), v) };
    }
}

/// Element offset of outer index `b` (row-major over `shape`) under `strides`.
fn offset_of(b: usize, shape: &[usize], strides: &[usize]) -> usize {
    let mut rest = b;
    let mut off = 0;
    for (&n, &s) in shape.iter().zip(strides).rev() {
        off += (rest % n) * s;
        rest /= n;
    }
    off
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
    par.for_chunks(d, |_, c| c.fill(v));
    Ok(())
}

/// `dst = op(src)`.
pub(super) fn unary(par: &Par<'_>, op: UnaryOp, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
    if src.dtype != dst.dtype || !dst_ok(&dst) {
        return reference::unary(op, src, dst);
    }
    match dst.dtype {
        DType::F32 => unary_as::<f32>(par, op, src, dst),
        DType::F64 => unary_as::<f64>(par, op, src, dst),
        _ => reference::unary(op, src, dst),
    }
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
            run1(par, a, d, |d, a| apply1(d, a, $f))
        };
    }
    let (z, one) = (T::ZERO, T::ONE);
    match op {
        UnaryOp::Neg => go!(|x: T| -x),
        UnaryOp::Abs => go!(|x: T| x.abs()),
        UnaryOp::Exp => go!(|x: T| x.exp()),
        UnaryOp::Log => go!(|x: T| x.ln()),
        UnaryOp::Sqrt => go!(|x: T| x.sqrt()),
        UnaryOp::Sqr => go!(|x: T| x * x),
        UnaryOp::Recip => go!(|x: T| one / x),
        UnaryOp::Tanh => go!(|x: T| x.tanh()),
        UnaryOp::Sigmoid => go!(|x: T| x.sigmoid()),
        UnaryOp::Relu => go!(|x: T| if x > z || x.is_nan() { x } else { z }),
        UnaryOp::Gelu => {
            let (half, r) = (
                T::from_f64(0.5),
                T::from_f64(core::f64::consts::FRAC_1_SQRT_2),
            );
            go!(|x: T| half * x * (one + (x * r).erf()))
        }
        UnaryOp::GeluTanh => {
            let (half, c) = (T::from_f64(0.5), T::from_f64(0.797_884_560_802_865_4));
            let k = T::from_f64(0.044715);
            go!(|x: T| half * x * (one + (c * (x + k * x * x * x)).tanh()))
        }
        UnaryOp::Silu => go!(|x: T| x * x.sigmoid()),
        UnaryOp::Sin => go!(|x: T| x.sin()),
        UnaryOp::Cos => go!(|x: T| x.cos()),
        UnaryOp::Powf(p) => go!(|x: T| T::from_f64(libm::pow(x.to_f64(), p))),
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
        UnaryOp::Affine { mul, add } => go!(|x: T| T::from_f64(x.to_f64() * mul + add)),
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
        UnaryOp::Erf => go!(|x: T| x.erf()),
    }
    Ok(())
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
    if !same || !dst_ok(&dst) {
        return reference::binary(op, lhs, rhs, dst);
    }
    match dst.dtype {
        DType::F32 => binary_as::<f32>(par, op, lhs, rhs, dst),
        DType::F64 => binary_as::<f64>(par, op, lhs, rhs, dst),
        _ => reference::binary(op, lhs, rhs, dst),
    }
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
    macro_rules! go {
        ($f:expr) => {
            run2(par, a, b, d, |d, a, b| apply2(d, a, b, $f))
        };
    }
    match op {
        BinaryOp::Add => go!(|x: T, y: T| x + y),
        BinaryOp::Sub => go!(|x: T, y: T| x - y),
        BinaryOp::Mul => go!(|x: T, y: T| x * y),
        BinaryOp::Div => go!(|x: T, y: T| x / y),
        BinaryOp::Maximum => go!(maximum::<T>),
        BinaryOp::Minimum => go!(minimum::<T>),
        BinaryOp::Pow => go!(|x: T, y: T| T::from_f64(libm::pow(x.to_f64(), y.to_f64()))),
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
    macro_rules! go {
        ($f:expr) => {
            par.for_chunks(d, |start, chunk| {
                let (mut ba, mut bb) = ([T::ZERO; BLOCK], [T::ZERO; BLOCK]);
                let (mut ka, mut kb) = ([T::ZERO; BLOCK], [T::ZERO; BLOCK]);
                for (i, blk) in chunk.chunks_mut(BLOCK).enumerate() {
                    let (s, m) = (start + i * BLOCK, blk.len());
                    let x = slice_of(a.block(s, m, &mut ba), &mut ka[..m]);
                    let y = slice_of(b.block(s, m, &mut bb), &mut kb[..m]);
                    apply2_to(blk, x, y, $f);
                }
            })
        };
    }
    match op {
        CmpOp::Eq => go!(|x: T, y: T| u8::from(x == y)),
        CmpOp::Ne => go!(|x: T, y: T| u8::from(x != y)),
        CmpOp::Lt => go!(|x: T, y: T| u8::from(x < y)),
        CmpOp::Le => go!(|x: T, y: T| u8::from(x <= y)),
        CmpOp::Gt => go!(|x: T, y: T| u8::from(x > y)),
        CmpOp::Ge => go!(|x: T, y: T| u8::from(x >= y)),
    }
    Ok(())
}

/// A block as a slice: a broadcast value is spread into `spare`. (`D`
/// never reaches here: compare's sources are never its destination.)
fn slice_of<'a, T: Copy>(a: Arg<'a, T>, spare: &'a mut [T]) -> &'a [T] {
    match a {
        Arg::S(s) => s,
        Arg::K(v) => {
            spare.fill(v);
            spare
        }
        Arg::D => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `transpose_8x8` on its own (no pool, so Miri can run it when AVX is
    /// enabled for it): a block inside larger strided rows lands
    /// transposed, and nothing outside the block is written.
    #[test]
    fn an_8x8_block_lands_transposed_and_nothing_else_is_written() {
        if !has_avx() {
            eprintln!("skipped: no AVX on this CPU (or under Miri without -C target-feature=+avx)");
            return;
        }
        let (ss, ds) = (11, 13);
        let src: Vec<u32> = (0..8 * ss as u32).map(|i| 0x7FC0_0000 | i).collect();
        let mut dst = vec![u32::MAX; 8 * ds];
        #[cfg(target_arch = "x86_64")]
        // SAFETY: has_avx() found AVX just above.
        unsafe {
            transpose_8x8(&src[2..], ss, &mut dst[1..], ds)
        };
        for r in 0..8 {
            for c in 0..ds {
                let want = if (1..9).contains(&c) {
                    src[2 + (c - 1) * ss + r]
                } else {
                    u32::MAX
                };
                assert_eq!(dst[r * ds + c], want, "row {r}, column {c}");
            }
        }
    }

    #[test]
    fn an_8x8_block_with_short_slices_writes_nothing() {
        if !has_avx() {
            eprintln!("skipped: no AVX on this CPU");
            return;
        }
        let src = vec![1u32; 7 * 8 + 7];
        let mut dst = vec![0u32; 64];
        #[cfg(target_arch = "x86_64")]
        // SAFETY: has_avx() found AVX just above.
        unsafe {
            transpose_8x8(&src, 8, &mut dst, 8)
        };
        assert!(dst.iter().all(|&x| x == 0));
    }
}
