//! Softmax and log-softmax along the last dim of contiguous f32 tensors:
//! rows in parallel, each row with the widest vector unit the CPU has
//! (NOTE [Softmax rows]), and their fused backward (NOTE [Softmax backward
//! rows]). Everything else goes to the reference kernels.

use super::engine::{Par, cast_slice, cast_slice_mut, read_src};
use super::float::exp_fast;
use kael_core::Result;
use kael_core::backend::{Dst, Src, contract};
use kael_core::cpu::reduce as reference;
use kael_core::dtype::DType;

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
// the hardware prefetcher. Writing the output with streaming stores through
// a one-row scratch buffer, to skip the read-for-ownership of each output
// line, measured no faster either: 1.84-2.13 ms against 1.70-2.01 ms median
// over 300 runs of 4096x1024, interleaved; this machine's 105 MiB L3 keeps
// the 16 MiB output, which streaming stores would push out to memory.) The exp polynomial is fused multiply-adds where
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
/// writes `(x - max) - ln(sum)`: subtracting the max first keeps the
/// digits of large inputs (`x - (max + ln(sum))` rounds `max + ln(sum)` at
/// the magnitude of `max`, losing ~`ulp(max)`). `FMA`: compiled with the `fma` feature
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
        let ls = sum.ln();
        match s {
            Some(s) => o.iter_mut().zip(s).for_each(|(o, &x)| *o = (x - m) - ls),
            None => o.iter_mut().for_each(|x| *x = (*x - m) - ls),
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

/// The threaded [`Backend::softmax_backward`](kael_core::backend::Backend::softmax_backward):
/// contiguous f32 rows in parallel (NOTE [Softmax backward rows]); f64 goes
/// to the reference kernel.
pub(super) fn softmax_backward(
    par: &Par<'_>,
    grad: Src<'_>,
    out: Src<'_>,
    log: bool,
    dx: Dst<'_>,
) -> Result<()> {
    let (rows, n) = contract::softmax_backward(grad, out, dx)?;
    if out.dtype != DType::F32 || n == 0 || rows == 0 {
        return kael_core::cpu::softmax_grad::softmax_backward(grad, out, log, dx);
    }
    let op = "softmax_backward";
    let total = rows * n;
    let (gg, gy) = (grad.storage.read(op)?, out.storage.read(op)?);
    let at = |bytes, t: &Src<'_>| -> Result<&[f32]> {
        let off = t.layout.offset();
        cast_slice::<f32>(bytes)?
            .get(off..off + total)
            .ok_or(past_storage(op))
    };
    let (g, y) = (at(gg.bytes(), &grad)?, at(gy.bytes(), &out)?);
    let mut gd = dx.storage.write(op)?;
    let off = dx.layout.offset();
    let d = cast_slice_mut::<f32>(gd.bytes_mut())?
        .get_mut(off..off + total)
        .ok_or(past_storage(op))?;
    par.for_rows(d, n, |r0, out| {
        for (i, o) in out.chunks_exact_mut(n).enumerate() {
            let r = (r0 + i) * n;
            backward_row_dispatch(&g[r..r + n], &y[r..r + n], o, log);
        }
    });
    Ok(())
}

fn past_storage(op: &'static str) -> kael_core::Error {
    kael_core::Error::InvalidArgument {
        op,
        reason: "an operand's layout runs past its storage; this is a bug in the caller",
    }
}

// NOTE [Softmax backward rows]
// One row's gradient is two passes over it: the row sum (`Σ g·y`, or `Σ g`
// for log-softmax) over 16 f32 lanes, then `dx` from `g` and `y`, both still
// in L1. The composition it replaces (`g·y`, its sum, `g - s`, `y·(…)`)
// made four passes over memory and three temporaries. The lanes' sums are
// added in a fixed order, so results depend on nothing but the row, and
// the same code is compiled for AVX-512, AVX2+FMA and the baseline and
// picked at run time, as the forward's (NOTE [Softmax rows]).

/// One row's gradient into `o`, with the widest vector unit available.
fn backward_row_dispatch(g: &[f32], y: &[f32], o: &mut [f32], log: bool) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports AVX-512F and FMA (checked just above).
            unsafe { backward_row_avx512(g, y, o, log) };
            return;
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports AVX2 and FMA (checked just above).
            unsafe { backward_row_avx2(g, y, o, log) };
            return;
        }
    }
    backward_row::<false>(g, y, o, log);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
fn backward_row_avx512(g: &[f32], y: &[f32], o: &mut [f32], log: bool) {
    backward_row::<true>(g, y, o, log);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn backward_row_avx2(g: &[f32], y: &[f32], o: &mut [f32], log: bool) {
    backward_row::<true>(g, y, o, log);
}

/// `o = y · (g - Σ g·y)`, or with `log` `o = g - e^y · Σ g`, over one row.
#[inline(always)]
fn backward_row<const FMA: bool>(g: &[f32], y: &[f32], o: &mut [f32], log: bool) {
    let mut acc = [0.0f32; SOFTMAX_LANES];
    let mut gi = g.chunks_exact(SOFTMAX_LANES);
    let mut yi = y.chunks_exact(SOFTMAX_LANES);
    for (gc, yc) in (&mut gi).zip(&mut yi) {
        for ((a, &gv), &yv) in acc.iter_mut().zip(gc).zip(yc) {
            *a += if log { gv } else { gv * yv };
        }
    }
    let mut s = acc.iter().sum::<f32>();
    for (&gv, &yv) in gi.remainder().iter().zip(yi.remainder()) {
        s += if log { gv } else { gv * yv };
    }
    if log {
        for ((o, &gv), &yv) in o.iter_mut().zip(g).zip(y) {
            *o = gv - exp_fast::<FMA>(yv) * s;
        }
    } else {
        for ((o, &gv), &yv) in o.iter_mut().zip(g).zip(y) {
            *o = yv * (gv - s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row of 37 (two full lane blocks and a tail) where softmax is
    /// uniform, y = 1/37, and g_j = j: Σ g·y = 666/37 = 18, so softmax's
    /// dx_j = (j - 18)/37; as log-softmax (y = -ln 37) Σ g = 666 and
    /// dx_j = j - e^y·666 = j - 18. Every ISA path: the dispatched one
    /// (Miri runs this with AVX2 and FMA enabled: scripts/reliability.sh)
    /// and the baseline.
    #[test]
    fn every_isa_path_gives_hand_derived_row_gradients() {
        let n = 37;
        let g: Vec<f32> = (0..n).map(|j| j as f32).collect();
        let y = vec![1.0f32 / 37.0; n];
        let ly = vec![-(37.0f32.ln()); n];
        type Row = fn(&[f32], &[f32], &mut [f32], bool);
        let paths: [Row; 2] = [backward_row_dispatch, backward_row::<false>];
        for row in paths {
            let mut dx = vec![9.0f32; n];
            row(&g, &y, &mut dx, false);
            for (j, d) in dx.iter().enumerate() {
                assert!((d - (j as f32 - 18.0) / 37.0).abs() < 1e-6, "dx[{j}] = {d}");
            }
            row(&g, &ly, &mut dx, true);
            for (j, d) in dx.iter().enumerate() {
                assert!((d - (j as f32 - 18.0)).abs() < 1e-4, "log dx[{j}] = {d}");
            }
        }
    }

    /// The forward's dispatched row on the same row: a constant row's
    /// softmax is 1/37 everywhere and its log-softmax -ln 37.
    #[test]
    fn the_dispatched_forward_row_of_a_constant_row_is_uniform() {
        let x = vec![3.0f32; 37];
        let mut y = vec![0.0f32; 37];
        softmax_row_dispatch(Some(&x), &mut y, false);
        assert!(y.iter().all(|v| (v - 1.0 / 37.0).abs() < 1e-7), "{y:?}");
        softmax_row_dispatch(Some(&x), &mut y, true);
        // 1e-5: Miri perturbs `ln` by a few ulp on purpose.
        assert!(y.iter().all(|v| (v + 37.0f32.ln()).abs() < 1e-5), "{y:?}");
    }
}
