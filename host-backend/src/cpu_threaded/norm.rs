//! Layer norm's fused kernels for contiguous f32 (NOTE [Layer norm rows]):
//! blocks of rows in parallel, each row with the widest vector unit the CPU
//! has. Everything else goes to the reference kernels.

use super::engine::{Par, cast_slice, cast_slice_mut};
use kael_core::backend::{Dst, Src, contract};
use kael_core::cpu::norm as reference;
use kael_core::dtype::DType;
use kael_core::{Error, Result};
use std::sync::Mutex;

// NOTE [Layer norm rows]
// Forward: a row is read from memory once. The mean pass brings it into L1
// (1024 f32 is 4 KiB), the centred-variance pass and the output pass read
// it from there: two-pass statistics, in f32 with 16 partial sums per pass
// (which the compiler keeps in vector registers), written as `y`, and each
// row's mean and 1/σ into `stats`. Backward: per row, one pass for
// `mean(ĝ)` and `mean(ĝ·x̂)` (x̂ recomputed from the saved stats, never
// stored), one pass writing `dx`; the weight and bias gradients (sums over
// rows) accumulate per block of rows, and the blocks' sums are added in
// block order, so results depend on the thread count only through the
// fixed partition into blocks, not on which thread ran which block.

/// Lanes of the partial sums.
const LANES: usize = 16;

/// Rows per block of the parallel split.
fn block_rows(par: &Par<'_>, rows: usize, n: usize) -> usize {
    if par.parallel(rows.saturating_mul(n)) {
        rows.div_ceil(par.threads * 4).max(1)
    } else {
        rows.max(1)
    }
}

/// `len` elements of `t` from its offset.
fn slice<'a>(bytes: &'a [u8], t: &Src<'_>, len: usize) -> Result<&'a [f32]> {
    let off = t.layout.offset();
    cast_slice::<f32>(bytes)?
        .get(off..off.saturating_add(len))
        .ok_or(Error::InvalidArgument {
            op: "layer_norm",
            reason: "an operand's layout runs past its storage; this is a bug in the caller",
        })
}

fn slice_mut<'a>(bytes: &'a mut [u8], t: &Src<'_>, len: usize) -> Result<&'a mut [f32]> {
    let off = t.layout.offset();
    cast_slice_mut::<f32>(bytes)?
        .get_mut(off..off.saturating_add(len))
        .ok_or(Error::InvalidArgument {
            op: "layer_norm",
            reason: "an operand's layout runs past its storage; this is a bug in the caller",
        })
}

/// Disjoint per-block pieces of two outputs, each claimed once.
type Pieces<'a> = Vec<Mutex<Option<(&'a mut [f32], &'a mut [f32])>>>;

fn take<'a>(pieces: &Pieces<'a>, i: usize) -> Option<(&'a mut [f32], &'a mut [f32])> {
    match pieces[i].lock() {
        Ok(mut p) => p.take(),
        Err(poisoned) => poisoned.into_inner().take(),
    }
}

/// Runs `f(r0, a, b)` on each block of `per` rows (from row `r0`), in
/// parallel when there is more than one: `a` and `b` are the block's
/// disjoint pieces of two outputs, `a_per` and `b_per` elements a block.
/// The forward and backward kernels share it (NOTE [Layer norm rows]).
fn for_row_blocks(
    par: &Par<'_>,
    per: usize,
    a: &mut [f32],
    a_per: usize,
    b: &mut [f32],
    b_per: usize,
    f: impl Fn(usize, &mut [f32], &mut [f32]) + Sync,
) {
    let (a_per, b_per) = (a_per.max(1), b_per.max(1));
    if a.len() <= a_per {
        f(0, a, b);
        return;
    }
    let pieces: Pieces<'_> = a
        .chunks_mut(a_per)
        .zip(b.chunks_mut(b_per))
        .map(|p| Mutex::new(Some(p)))
        .collect();
    par.for_each_index(pieces.len(), |i| {
        if let Some((a, b)) = take(&pieces, i) {
            f(i * per, a, b);
        }
    });
}

/// The threaded [`Backend::layer_norm`](kael_core::backend::Backend::layer_norm).
pub(super) fn layer_norm(
    par: &Par<'_>,
    src: Src<'_>,
    weight: Option<Src<'_>>,
    bias: Option<Src<'_>>,
    eps: f64,
    dst: Dst<'_>,
    stats: Dst<'_>,
) -> Result<()> {
    let (rows, n) = contract::layer_norm(src, weight, bias, dst, stats)?;
    if src.dtype != DType::F32 || n == 0 {
        return reference::layer_norm(src, weight, bias, eps, dst, stats);
    }
    let op = "layer_norm";
    let gx = src.storage.read(op)?;
    let x = slice(gx.bytes(), &src, rows * n)?;
    let gw = weight.map(|w| w.storage.read(op)).transpose()?;
    let gb = bias.map(|b| b.storage.read(op)).transpose()?;
    let w = match (&gw, &weight) {
        (Some(g), Some(t)) => Some(slice(g.bytes(), t, n)?),
        _ => None,
    };
    let b = match (&gb, &bias) {
        (Some(g), Some(t)) => Some(slice(g.bytes(), t, n)?),
        _ => None,
    };
    let mut gy = dst.storage.write(op)?;
    let y = slice_mut(gy.bytes_mut(), &dst, rows * n)?;
    let mut gs = stats.storage.write(op)?;
    let st = slice_mut(gs.bytes_mut(), &stats, rows * 2)?;
    let per = block_rows(par, rows, n);
    let eps = eps as f32;
    for_row_blocks(par, per, y, per * n, st, per * 2, |r0, y, st| {
        let x = &x[r0 * n..r0 * n + y.len()];
        forward_dispatch(x, w, b, eps, n, y, st);
    });
    Ok(())
}

fn forward_dispatch(
    x: &[f32],
    w: Option<&[f32]>,
    b: Option<&[f32]>,
    eps: f32,
    n: usize,
    y: &mut [f32],
    st: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports AVX-512F and FMA (checked just above).
            unsafe { forward_avx512(x, w, b, eps, n, y, st) };
            return;
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports AVX2 and FMA (checked just above).
            unsafe { forward_avx2(x, w, b, eps, n, y, st) };
            return;
        }
    }
    forward_rows(x, w, b, eps, n, y, st);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
fn forward_avx512(
    x: &[f32],
    w: Option<&[f32]>,
    b: Option<&[f32]>,
    eps: f32,
    n: usize,
    y: &mut [f32],
    st: &mut [f32],
) {
    forward_rows(x, w, b, eps, n, y, st);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn forward_avx2(
    x: &[f32],
    w: Option<&[f32]>,
    b: Option<&[f32]>,
    eps: f32,
    n: usize,
    y: &mut [f32],
    st: &mut [f32],
) {
    forward_rows(x, w, b, eps, n, y, st);
}

/// Σ of `f(v)` over the elements `v` of `row`, in `LANES` partial sums
/// (lane `l` takes elements `l`, `l + LANES`, …, in order) and the tail
/// after them. Written over `chunks_exact` so that the lanes are one
/// vector register and the loop carries no bounds checks: an index loop
/// over `row[j + l]` stayed scalar (16 `addss` a step).
#[inline(always)]
fn lane_sum(row: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0.0f32; LANES];
    let mut chunks = row.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f(v);
        }
    }
    let mut tail = 0.0f32;
    for &v in chunks.remainder() {
        tail += f(v);
    }
    acc.iter().sum::<f32>() + tail
}

/// [`lane_sum`] of `f(u, v)` over the pairs of `a` and `b` (as long).
#[inline(always)]
fn lane_sum2(a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut acc = [0.0f32; LANES];
    let (mut ca, mut cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    for (u, v) in (&mut ca).zip(&mut cb) {
        for ((s, &u), &v) in acc.iter_mut().zip(u).zip(v) {
            *s += f(u, v);
        }
    }
    let mut tail = 0.0f32;
    for (&u, &v) in ca.remainder().iter().zip(cb.remainder()) {
        tail += f(u, v);
    }
    acc.iter().sum::<f32>() + tail
}

#[inline(always)]
fn forward_rows(
    x: &[f32],
    w: Option<&[f32]>,
    b: Option<&[f32]>,
    eps: f32,
    n: usize,
    y: &mut [f32],
    st: &mut [f32],
) {
    let inv_n = 1.0 / n as f32;
    for ((xr, yr), s) in x
        .chunks_exact(n)
        .zip(y.chunks_exact_mut(n))
        .zip(st.chunks_exact_mut(2))
    {
        let mean = lane_sum(xr, |v| v) * inv_n;
        let var = lane_sum(xr, |v| {
            let d = v - mean;
            d * d
        }) * inv_n;
        let rstd = 1.0 / (var + eps).sqrt();
        let out = yr.iter_mut().zip(xr);
        match (w, b) {
            (Some(w), Some(b)) => {
                for ((o, &v), (&w, &b)) in out.zip(w.iter().zip(b)) {
                    *o = (v - mean) * rstd * w + b;
                }
            }
            (Some(w), None) => {
                for ((o, &v), &w) in out.zip(w) {
                    *o = (v - mean) * rstd * w;
                }
            }
            (None, Some(b)) => {
                for ((o, &v), &b) in out.zip(b) {
                    *o = (v - mean) * rstd + b;
                }
            }
            (None, None) => {
                for (o, &v) in out {
                    *o = (v - mean) * rstd;
                }
            }
        }
        s[0] = mean;
        s[1] = rstd;
    }
}

/// The threaded [`Backend::layer_norm_backward`](kael_core::backend::Backend::layer_norm_backward).
pub(super) fn layer_norm_backward(
    par: &Par<'_>,
    grad: Src<'_>,
    src: Src<'_>,
    stats: Src<'_>,
    weight: Option<Src<'_>>,
    dx: Dst<'_>,
    dwb: Dst<'_>,
) -> Result<()> {
    let (rows, n) = contract::layer_norm_backward(grad, src, stats, weight, dx, dwb)?;
    if src.dtype != DType::F32 || n == 0 {
        return reference::layer_norm_backward(grad, src, stats, weight, dx, dwb);
    }
    let op = "layer_norm";
    let (gg, gx, gs) = (
        grad.storage.read(op)?,
        src.storage.read(op)?,
        stats.storage.read(op)?,
    );
    let g = slice(gg.bytes(), &grad, rows * n)?;
    let x = slice(gx.bytes(), &src, rows * n)?;
    let st = slice(gs.bytes(), &stats, rows * 2)?;
    let gw = weight.map(|w| w.storage.read(op)).transpose()?;
    let w = match (&gw, &weight) {
        (Some(gw), Some(t)) => Some(slice(gw.bytes(), t, n)?),
        _ => None,
    };
    let mut gd = dx.storage.write(op)?;
    let d = slice_mut(gd.bytes_mut(), &dx, rows * n)?;
    let mut gwb = dwb.storage.write(op)?;
    let out = slice_mut(gwb.bytes_mut(), &dwb, 2 * n)?;
    let per = block_rows(par, rows, n);
    let blocks = rows.div_ceil(per).max(1);
    // Per block: its rows' Σ g·x̂ and Σ g (`2n`), added in block order below.
    let mut partial = Vec::new();
    partial
        .try_reserve_exact(blocks.saturating_mul(2 * n))
        .map_err(|_| Error::OutOfMemory {
            requested: blocks.saturating_mul(8 * n),
            available: None,
        })?;
    partial.resize(blocks * 2 * n, 0.0f32);
    for_row_blocks(par, per, d, per * n, &mut partial, 2 * n, |r0, d, sums| {
        let r1 = r0 + d.len() / n;
        backward_dispatch(
            &g[r0 * n..r1 * n],
            &x[r0 * n..r1 * n],
            &st[r0 * 2..r1 * 2],
            w,
            n,
            d,
            sums,
        );
    });
    out.fill(0.0);
    for block in partial.chunks_exact(2 * n) {
        for (o, p) in out.iter_mut().zip(block) {
            *o += p;
        }
    }
    Ok(())
}

fn backward_dispatch(
    g: &[f32],
    x: &[f32],
    st: &[f32],
    w: Option<&[f32]>,
    n: usize,
    d: &mut [f32],
    sums: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports AVX-512F and FMA (checked just above).
            unsafe { backward_avx512(g, x, st, w, n, d, sums) };
            return;
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports AVX2 and FMA (checked just above).
            unsafe { backward_avx2(g, x, st, w, n, d, sums) };
            return;
        }
    }
    backward_rows(g, x, st, w, n, d, sums);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
fn backward_avx512(
    g: &[f32],
    x: &[f32],
    st: &[f32],
    w: Option<&[f32]>,
    n: usize,
    d: &mut [f32],
    sums: &mut [f32],
) {
    backward_rows(g, x, st, w, n, d, sums);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn backward_avx2(
    g: &[f32],
    x: &[f32],
    st: &[f32],
    w: Option<&[f32]>,
    n: usize,
    d: &mut [f32],
    sums: &mut [f32],
) {
    backward_rows(g, x, st, w, n, d, sums);
}

#[inline(always)]
fn backward_rows(
    g: &[f32],
    x: &[f32],
    st: &[f32],
    w: Option<&[f32]>,
    n: usize,
    d: &mut [f32],
    sums: &mut [f32],
) {
    match w {
        Some(w) => backward_rows_w::<true>(g, x, st, w, n, d, sums),
        None => backward_rows_w::<false>(g, x, st, &[], n, d, sums),
    }
}

/// The rows of [`backward_rows`], with (`W`) or without a weight. The
/// loops run over `chunks_exact` and zipped slices (no indices), so they
/// carry no bounds checks and the lane sums are vector registers.
#[inline(always)]
fn backward_rows_w<const W: bool>(
    g: &[f32],
    x: &[f32],
    st: &[f32],
    w: &[f32],
    n: usize,
    d: &mut [f32],
    sums: &mut [f32],
) {
    let inv_n = 1.0 / n as f32;
    let (dw, db) = sums.split_at_mut(n);
    for (((gr, xr), s), dr) in g
        .chunks_exact(n)
        .zip(x.chunks_exact(n))
        .zip(st.chunks_exact(2))
        .zip(d.chunks_exact_mut(n))
    {
        let (mean, rstd) = (s[0], s[1]);
        // ĝ into the output row first (it is overwritten below), then the
        // two means from it, each a lane sum over one or two slices (the
        // form that vectorises: one loop over four zipped chunk iterators
        // stayed scalar).
        if W {
            for ((o, &gv), &wv) in dr.iter_mut().zip(gr).zip(w) {
                *o = gv * wv;
            }
        } else {
            dr.copy_from_slice(gr);
        }
        let m1 = lane_sum(dr, |gh| gh) * inv_n;
        let m2 = lane_sum2(dr, xr, |gh, xv| gh * ((xv - mean) * rstd)) * inv_n;
        let cols = dr.iter_mut().zip(gr.iter().zip(xr));
        for ((o, (&gv, &xv)), (dwj, dbj)) in cols.zip(dw.iter_mut().zip(db.iter_mut())) {
            let xh = (xv - mean) * rstd;
            *o = rstd * (*o - m1 - xh * m2);
            *dwj += gv * xh;
            *dbj += gv;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows of 37 (two full lane blocks and a tail) and their hand-derived
    /// statistics: row r is `j - 18 + r` for j < 37, so mean `r`, variance
    /// `(37² - 1) / 12 = 114`.
    #[test]
    fn every_isa_path_gives_the_rows_statistics_and_gradients() {
        let n = 37;
        let x: Vec<f32> = (0..2 * n)
            .map(|i| (i % n) as f32 - 18.0 + (i / n) as f32)
            .collect();
        let w: Vec<f32> = (0..n).map(|j| 1.0 + j as f32 / 8.0).collect();
        let b = vec![0.5f32; n];
        let (mut y, mut st) = (vec![0.0f32; 2 * n], vec![0.0f32; 4]);
        forward_dispatch(&x, Some(&w), Some(&b), 0.0, n, &mut y, &mut st);
        let rstd = 1.0 / 114.0f32.sqrt();
        for r in 0..2 {
            assert!((st[2 * r] - r as f32).abs() < 1e-5);
            assert!((st[2 * r + 1] - rstd).abs() < 1e-6);
            for j in 0..n {
                let want = (j as f32 - 18.0) * rstd * w[j] + 0.5;
                assert!((y[r * n + j] - want).abs() < 1e-5, "y[{r}][{j}]");
            }
        }
        // With g = 1 and no weight: dx = 0 (a constant shift of every
        // output), Σ g·x̂ = 2 x̂ per column, Σ g = 2.
        let g = vec![1.0f32; 2 * n];
        let (mut dx, mut sums) = (vec![9.0f32; 2 * n], vec![0.0f32; 2 * n]);
        backward_dispatch(&g, &x, &st, None, n, &mut dx, &mut sums);
        assert!(dx.iter().all(|d| d.abs() < 1e-5), "{dx:?}");
        for j in 0..n {
            assert!((sums[j] - 2.0 * (j as f32 - 18.0) * rstd).abs() < 1e-5);
            assert_eq!(sums[n + j], 2.0);
        }
    }
}
