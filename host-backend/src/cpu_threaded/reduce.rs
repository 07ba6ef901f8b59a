//! Reductions over the last dim, the leading dims, every dim around one
//! block of kept dims, or everything (sum, max, min), and arg-reductions, for contiguous f32/f64; rows in parallel,
//! inner loops written over lanes so they vectorise. Everything else goes
//! to the reference kernels.
//!
//! Sums accumulate in f64 (as the reference does) over 8 independent
//! lanes; the order differs from the reference's sequential sum only in
//! rounding (~1e-16 relative before the cast back).

use super::engine::{Par, cast_slice, cast_slice_mut};
use super::float::{Fl, maximum, minimum};
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
        // (A public op reduces several dims only to sum them.)
        if let (ReduceOp::Sum, Some(split)) = (op, middle(src, dims, dst)) {
            return match src.dtype {
                DType::F32 => sum_middle::<f32>(par, src, split, dst),
                DType::F64 => sum_middle::<f64>(par, src, split, dst),
                _ => reference::reduce(op, src, dims, dst),
            };
        }
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

/// `[outer, keep, inner]` when `dims` are every dim but one block of
/// consecutive kept dims with reduced dims on both sides (a batch norm's
/// statistics: `[N, C, H, W]` over `0, 2, 3`) or after them (a global
/// average pool: over `2, 3`), of a contiguous f32/f64 source into a
/// contiguous destination of its own.
fn middle(src: Src<'_>, dims: &[usize], dst: Dst<'_>) -> Option<[usize; 3]> {
    let shape = src.layout.shape().as_slice();
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !dims.contains(d)).collect();
    let (&first, &last) = (kept.first()?, kept.last()?);
    let block = last - first + 1 == kept.len() && last + 1 < shape.len();
    let fits = block
        && src.dtype == dst.dtype
        && matches!(src.dtype, DType::F32 | DType::F64)
        && src.layout.is_contiguous()
        && dst.layout.is_contiguous()
        && src.layout.numel() > 0
        && !core::ptr::eq(src.storage, dst.storage);
    let product = |r: &[usize]| r.iter().product::<usize>();
    let split = [
        product(&shape[..first]),
        product(&shape[first..=last]),
        product(&shape[last + 1..]),
    ];
    (fits && dst.layout.numel() == split[1]).then_some(split)
}

/// Sums a contiguous `[outer, keep, inner]` source over `outer` and
/// `inner`: each thread owns a run of kept indices and sums their rows
/// (in f64, in row order).
fn sum_middle<T: Fl>(
    par: &Par<'_>,
    src: Src<'_>,
    [outer, keep, inner]: [usize; 3],
    dst: Dst<'_>,
) -> Result<()> {
    let gs = src.storage.read("reduce")?;
    let (so, n) = (src.layout.offset(), src.layout.numel());
    let s = &cast_slice::<T>(gs.bytes())?[so..so + n];
    let mut gd = dst.storage.write("reduce")?;
    let off = dst.layout.offset();
    let d = &mut cast_slice_mut::<T>(gd.bytes_mut())?[off..off + keep];
    let row = |o: usize, m: usize| &s[(o * keep + m) * inner..(o * keep + m + 1) * inner];
    par.for_chunks(d, |start, out| {
        for (i, v) in out.iter_mut().enumerate() {
            let m = start + i;
            *v = T::from_f64((0..outer).map(|o| sum_f64(row(o, m))).sum());
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
