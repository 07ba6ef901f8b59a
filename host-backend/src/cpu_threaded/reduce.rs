//! Reductions over the last dim or over everything (sum, max, min) and
//! softmax along the last dim, for contiguous f32/f64; rows in parallel,
//! inner loops written over lanes so they vectorise. Everything else goes
//! to the reference kernels.
//!
//! Sums accumulate in f64 (as the reference does) over 8 independent
//! lanes; the order differs from the reference's sequential sum only in
//! rounding (~1e-16 relative before the cast back).

use super::engine::{Par, cast_slice, cast_slice_mut, read_src};
use super::float::{Fl, exp_fast, maximum, minimum};
use kael_core::Result;
use kael_core::backend::{ArgReduceOp, Dst, ReduceOp, Src};
use kael_core::cpu::reduce as reference;
use kael_core::dtype::DType;

const LANES: usize = 8;

/// Sum of a row in f64 over [`LANES`] lanes.
#[inline(always)]
fn sum_f64<T: Fl>(row: &[T]) -> f64 {
    let mut acc = [0.0f64; LANES];
    let mut it = row.chunks_exact(LANES);
    for c in &mut it {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += x.to_f64();
        }
    }
    let mut s = 0.0;
    for x in it.remainder() {
        s += x.to_f64();
    }
    acc.iter().sum::<f64>() + s
}

/// Max (or min) of a non-empty row, NaN propagating.
#[inline(always)]
fn extreme<T: Fl>(row: &[T], max: bool) -> T {
    if max {
        fold_lanes(row, maximum::<T>)
    } else {
        fold_lanes(row, minimum::<T>)
    }
}

/// Folds a non-empty row with `pick` over [`LANES`] independent lanes
/// (`pick` is a generic parameter, not a pointer, so the loop vectorises).
#[inline(always)]
fn fold_lanes<T: Fl>(row: &[T], pick: impl Fn(T, T) -> T) -> T {
    let mut acc = [row[0]; LANES];
    let mut it = row.chunks_exact(LANES);
    for c in &mut it {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a = pick(*a, x);
        }
    }
    let mut m = acc[0];
    for &x in acc[1..].iter().chain(it.remainder()) {
        m = pick(m, x);
    }
    m
}

/// Reduces `dims` of `src`.
pub(super) fn reduce(
    par: &Par<'_>,
    op: ReduceOp,
    src: Src<'_>,
    dims: &[usize],
    dst: Dst<'_>,
) -> Result<()> {
    let rank = src.layout.rank();
    let last_only = rank > 0 && dims == [rank - 1];
    let all = dims.len() == rank && rank > 0;
    // dims 0..k (k < rank): e.g. a bias gradient, summed over the batch
    let leading =
        !dims.is_empty() && dims.len() < rank && dims.iter().enumerate().all(|(i, &d)| i == d);
    let fits = src.dtype == dst.dtype
        && src.layout.is_contiguous()
        && dst.layout.is_contiguous()
        && src.layout.numel() > 0
        && (last_only || all || leading)
        && matches!(op, ReduceOp::Sum | ReduceOp::Max | ReduceOp::Min)
        && !core::ptr::eq(src.storage, dst.storage);
    if !fits {
        return reference::reduce(op, src, dims, dst);
    }
    if leading && !all {
        return match src.dtype {
            DType::F32 => reduce_leading::<f32>(par, op, src, dst),
            DType::F64 => reduce_leading::<f64>(par, op, src, dst),
            _ => reference::reduce(op, src, dims, dst),
        };
    }
    let row = if all {
        src.layout.numel()
    } else {
        src.layout.shape()[rank - 1]
    };
    if dst.layout.numel() * row != src.layout.numel() {
        return reference::reduce(op, src, dims, dst);
    }
    match src.dtype {
        DType::F32 => reduce_as::<f32>(par, op, src, row, dst),
        DType::F64 => reduce_as::<f64>(par, op, src, row, dst),
        _ => reference::reduce(op, src, dims, dst),
    }
}

fn reduce_as<T: Fl>(
    par: &Par<'_>,
    op: ReduceOp,
    src: Src<'_>,
    row: usize,
    dst: Dst<'_>,
) -> Result<()> {
    let gs = src.storage.read("reduce")?;
    let (so, n) = (src.layout.offset(), src.layout.numel());
    let s = &cast_slice::<T>(gs.bytes())?[so..so + n];
    let mut gd = dst.storage.write("reduce")?;
    let (off, rows) = (dst.layout.offset(), dst.layout.numel());
    let d = &mut cast_slice_mut::<T>(gd.bytes_mut())?[off..off + rows];
    let one = |r: &[T]| match op {
        ReduceOp::Max => extreme(r, true),
        ReduceOp::Min => extreme(r, false),
        _ => T::from_f64(sum_f64(r)),
    };
    if rows == 1 && par.parallel(n) {
        // One long row: partial results per chunk, combined in order
        // (deterministic for a given thread count).
        let chunk = n.div_ceil(par.threads * 4);
        let piece = |i: usize| &s[i * chunk..((i + 1) * chunk).min(n)];
        let pieces = n.div_ceil(chunk);
        let v = match op {
            ReduceOp::Sum => {
                let mut parts = vec![0.0f64; pieces];
                par.each_mut(&mut parts, |i, p| *p = sum_f64(piece(i)));
                T::from_f64(parts.iter().sum())
            }
            _ => {
                let mut parts = vec![T::ZERO; pieces];
                par.each_mut(&mut parts, |i, p| *p = one(piece(i)));
                one(&parts)
            }
        };
        d[0] = v;
        return Ok(());
    }
    par.for_chunks(d, |start, out| {
        for (i, o) in out.iter_mut().enumerate() {
            let r = start + i;
            *o = one(&s[r * row..(r + 1) * row]);
        }
    });
    Ok(())
}

/// Reduces the leading dims of a contiguous `[outer, inner]` source: each
/// thread owns a run of columns and adds the rows into it (sums in f64).
fn reduce_leading<T: Fl>(par: &Par<'_>, op: ReduceOp, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
    let gs = src.storage.read("reduce")?;
    let (so, n) = (src.layout.offset(), src.layout.numel());
    let s = &cast_slice::<T>(gs.bytes())?[so..so + n];
    let mut gd = dst.storage.write("reduce")?;
    let (off, inner) = (dst.layout.offset(), dst.layout.numel());
    let d = &mut cast_slice_mut::<T>(gd.bytes_mut())?[off..off + inner];
    let outer = n / inner;
    par.for_chunks(d, |start, out| {
        let w = out.len();
        match op {
            ReduceOp::Sum => {
                let mut acc = vec![0.0f64; w];
                for i in 0..outer {
                    let row = &s[i * inner + start..i * inner + start + w];
                    for (a, &x) in acc.iter_mut().zip(row) {
                        *a += x.to_f64();
                    }
                }
                for (o, a) in out.iter_mut().zip(&acc) {
                    *o = T::from_f64(*a);
                }
            }
            _ => {
                let max = op == ReduceOp::Max;
                out.copy_from_slice(&s[start..start + w]);
                for i in 1..outer {
                    let row = &s[i * inner + start..i * inner + start + w];
                    for (o, &x) in out.iter_mut().zip(row) {
                        *o = if max { maximum(*o, x) } else { minimum(*o, x) };
                    }
                }
            }
        }
    });
    Ok(())
}

/// Index of the first max (min) along the last dim of a contiguous f32/f64
/// source, rows in parallel; a NaN wins at its first position, as in the
/// reference. Everything else goes to the reference kernel.
pub(super) fn arg_reduce(
    par: &Par<'_>,
    op: ArgReduceOp,
    src: Src<'_>,
    dim: usize,
    dst: Dst<'_>,
) -> Result<()> {
    let rank = src.layout.rank();
    let fits = rank > 0
        && dim == rank - 1
        && dst.dtype == DType::I64
        && src.layout.is_contiguous()
        && dst.layout.is_contiguous()
        && src.layout.shape()[dim] > 0
        && dst.layout.numel() * src.layout.shape()[dim] == src.layout.numel();
    match src.dtype {
        DType::F32 if fits => arg_as::<f32>(par, op, src, dst),
        DType::F64 if fits => arg_as::<f64>(par, op, src, dst),
        _ => reference::arg_reduce(op, src, dim, dst),
    }
}

fn arg_as<T: Fl>(par: &Par<'_>, op: ArgReduceOp, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
    let name = match op {
        ArgReduceOp::ArgMax => "argmax",
        ArgReduceOp::ArgMin => "argmin",
    };
    let len = src.layout.shape()[src.layout.rank() - 1];
    let gs = src.storage.read(name)?;
    let (so, n) = (src.layout.offset(), src.layout.numel());
    let s = &cast_slice::<T>(gs.bytes())?[so..so + n];
    let mut gd = dst.storage.write(name)?;
    let (off, rows) = (dst.layout.offset(), dst.layout.numel());
    let d = &mut cast_slice_mut::<i64>(gd.bytes_mut())?[off..off + rows];
    let max = op == ArgReduceOp::ArgMax;
    par.for_chunks(d, |start, out| {
        for (i, o) in out.iter_mut().enumerate() {
            let row = &s[(start + i) * len..(start + i + 1) * len];
            let (mut best, mut idx) = (row[0], 0);
            for (k, &x) in row.iter().enumerate().skip(1) {
                if best.is_nan() {
                    break;
                }
                if x.is_nan() || (max && x > best) || (!max && x < best) {
                    best = x;
                    idx = k;
                }
            }
            *o = idx as i64;
        }
    });
    Ok(())
}

/// Softmax (or log-softmax) along `dim`.
pub(super) fn softmax(
    par: &Par<'_>,
    src: Src<'_>,
    dim: usize,
    log: bool,
    dst: Dst<'_>,
) -> Result<()> {
    let rank = src.layout.rank();
    let fits = rank > 0
        && dim == rank - 1
        && src.dtype == DType::F32
        && dst.dtype == DType::F32
        && src.layout.shape() == dst.layout.shape()
        && src.layout.is_contiguous()
        && dst.layout.is_contiguous()
        && src.layout.numel() > 0;
    if !fits {
        return reference::softmax(src, dim, log, dst);
    }
    let name = if log { "log_softmax" } else { "softmax" };
    let gs = match read_src(&src, &dst, name) {
        Ok(g) => g,
        Err(_) => return reference::softmax(src, dim, log, dst),
    };
    let row = src.layout.shape()[dim];
    let n = src.layout.numel();
    let s = match &gs {
        Some(g) => {
            let so = src.layout.offset();
            Some(&cast_slice::<f32>(g.bytes())?[so..so + n])
        }
        None => None,
    };
    let mut gd = dst.storage.write(name)?;
    let off = dst.layout.offset();
    let d = &mut cast_slice_mut::<f32>(gd.bytes_mut())?[off..off + n];
    par.for_rows(d, row, |r0, out| {
        for (i, o) in out.chunks_exact_mut(row).enumerate() {
            let r = r0 + i;
            softmax_row_dispatch(s.map(|s| &s[r * row..(r + 1) * row]), o, log);
        }
    });
    Ok(())
}

// NOTE [Softmax rows]
// A row is read from memory once: the max pass brings it into L1 (a row of
// the benchmark's 1024 f32 is 4 KiB), and the exp pass reads it from there
// and writes `dst`, so no copy of the source precedes the arithmetic.
// (Prefetching the next row in software measured slower than leaving it to
// the hardware prefetcher.) The exp polynomial is fused multiply-adds where
// the CPU has FMA (`exp_fast`). The
// max is a plain `>` fold over 16 lanes, not a NaN-propagating one (whose
// blends form a dependency chain): a NaN anywhere in the row still makes
// every output NaN, either through `m` itself or through `exp(NaN - m)` in
// the sum, as the reference does. The same code is compiled for AVX-512,
// AVX2+FMA and the baseline and picked at run time.

/// Softmax (or log-softmax) of one row into `o`, reading `s` (or `o`
/// itself, in place, when `s` is `None`), with the widest vector unit
/// available (NOTE [Softmax rows]).
fn softmax_row_dispatch(s: Option<&[f32]>, o: &mut [f32], log: bool) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports AVX-512F and FMA (checked just above).
            unsafe { softmax_row_avx512(s, o, log) };
            return;
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports AVX2 and FMA (checked just above).
            unsafe { softmax_row_avx2(s, o, log) };
            return;
        }
    }
    softmax_row::<false>(s, o, log);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
fn softmax_row_avx512(s: Option<&[f32]>, o: &mut [f32], log: bool) {
    softmax_row::<true>(s, o, log);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn softmax_row_avx2(s: Option<&[f32]>, o: &mut [f32], log: bool) {
    softmax_row::<true>(s, o, log);
}

/// Softmax of one row: max, then `exp(x - max)` stored and summed in one
/// pass, then one scale; log-softmax sums the exps without storing them and
/// writes `x - max - ln(sum)`. `FMA`: compiled with the `fma` feature
/// (see `exp_fast`).
#[inline(always)]
fn softmax_row<const FMA: bool>(s: Option<&[f32]>, o: &mut [f32], log: bool) {
    let m = match s {
        Some(s) => max_lanes(s),
        None => max_lanes(o),
    };
    if log {
        let sum = match s {
            Some(s) => exp_sum::<FMA>(s, m),
            None => exp_sum::<FMA>(o, m),
        };
        let lse = m + sum.ln();
        match s {
            Some(s) => o.iter_mut().zip(s).for_each(|(o, &x)| *o = x - lse),
            None => o.iter_mut().for_each(|x| *x -= lse),
        }
    } else {
        let sum = match s {
            Some(s) => exp_store_sum::<FMA>(s, o, m),
            None => exp_in_place_sum::<FMA>(o, m),
        };
        let inv = 1.0 / sum;
        o.iter_mut().for_each(|x| *x *= inv);
    }
}

/// Lanes of the softmax folds: 16 f32, one AVX-512 register or two AVX2.
const SOFTMAX_LANES: usize = 16;

/// Largest element of a non-empty row by `>` over [`SOFTMAX_LANES`] lanes
/// (NaN-safe for softmax: NOTE [Softmax rows]).
#[inline(always)]
fn max_lanes(v: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; SOFTMAX_LANES];
    let mut it = v.chunks_exact(SOFTMAX_LANES);
    for c in &mut it {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a = if x > *a { x } else { *a };
        }
    }
    let mut m = f32::NEG_INFINITY;
    for &x in acc.iter().chain(it.remainder()) {
        m = if x > m || x.is_nan() { x } else { m };
    }
    m
}

/// `Σ exp(x - m)` over [`SOFTMAX_LANES`] lanes.
#[inline(always)]
fn exp_sum<const FMA: bool>(v: &[f32], m: f32) -> f32 {
    let mut acc = [0.0f32; SOFTMAX_LANES];
    let mut it = v.chunks_exact(SOFTMAX_LANES);
    for c in &mut it {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += exp_fast::<FMA>(x - m);
        }
    }
    acc.iter().sum::<f32>()
        + it.remainder()
            .iter()
            .map(|&x| exp_fast::<FMA>(x - m))
            .sum::<f32>()
}

/// `o = exp(s - m)`, returning `Σ o`, over [`SOFTMAX_LANES`] lanes.
#[inline(always)]
fn exp_store_sum<const FMA: bool>(s: &[f32], o: &mut [f32], m: f32) -> f32 {
    let mut acc = [0.0f32; SOFTMAX_LANES];
    let mut si = s.chunks_exact(SOFTMAX_LANES);
    let mut oi = o.chunks_exact_mut(SOFTMAX_LANES);
    for (sc, oc) in (&mut si).zip(&mut oi) {
        for ((a, o), &x) in acc.iter_mut().zip(oc).zip(sc) {
            *o = exp_fast::<FMA>(x - m);
            *a += *o;
        }
    }
    let mut sum = acc.iter().sum::<f32>();
    for (o, &x) in oi.into_remainder().iter_mut().zip(si.remainder()) {
        *o = exp_fast::<FMA>(x - m);
        sum += *o;
    }
    sum
}

/// `o = exp(o - m)` in place, returning `Σ o`, over [`SOFTMAX_LANES`] lanes.
#[inline(always)]
fn exp_in_place_sum<const FMA: bool>(o: &mut [f32], m: f32) -> f32 {
    let mut acc = [0.0f32; SOFTMAX_LANES];
    let mut oi = o.chunks_exact_mut(SOFTMAX_LANES);
    for oc in &mut oi {
        for (a, o) in acc.iter_mut().zip(oc) {
            *o = exp_fast::<FMA>(*o - m);
            *a += *o;
        }
    }
    let mut sum = acc.iter().sum::<f32>();
    for o in oi.into_remainder() {
        *o = exp_fast::<FMA>(*o - m);
        sum += *o;
    }
    sum
}
