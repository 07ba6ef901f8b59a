//! Layer norm's fused kernels for contiguous f32 (NOTE [Layer norm rows]):
//! blocks of rows in parallel, each row with the widest vector unit the CPU
//! has. Everything else goes to the reference kernels.

use super::engine::{Par, cast_slice, cast_slice_mut};
use kael_core::backend::{Dst, Src};
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

fn contiguous_f32(t: &Src<'_>) -> bool {
    t.dtype == DType::F32 && t.layout.is_contiguous()
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
    let shape = src.layout.shape();
    let fits = shape.len() == 2
        && [&src, &dst, &stats]
            .into_iter()
            .chain(weight.iter())
            .chain(bias.iter())
            .all(contiguous_f32)
        && dst.layout.shape() == shape
        && stats.layout.shape()[..] == [shape[0], 2]
        && weight
            .iter()
            .chain(bias.iter())
            .all(|t| t.layout.shape()[..] == [shape[1]])
        && [&src, &dst]
            .into_iter()
            .chain(weight.iter())
            .chain(bias.iter())
            .all(|t| !core::ptr::eq(t.storage, stats.storage))
        && [&src]
            .into_iter()
            .chain(weight.iter())
            .chain(bias.iter())
            .all(|t| !core::ptr::eq(t.storage, dst.storage))
        && shape[1] > 0;
    if !fits {
        return reference::layer_norm(src, weight, bias, eps, dst, stats);
    }
    let (rows, n) = (shape[0], shape[1]);
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
    let run = |r0: usize, y: &mut [f32], st: &mut [f32]| {
        let x = &x[r0 * n..r0 * n + y.len()];
        forward_dispatch(x, w, b, eps, n, y, st);
    };
    if per >= rows {
        run(0, y, st);
        return Ok(());
    }
    let pieces: Pieces<'_> = y
        .chunks_mut(per * n)
        .zip(st.chunks_mut(per * 2))
        .map(|p| Mutex::new(Some(p)))
        .collect();
    par.for_each_index(pieces.len(), |i| {
        if let Some((y, st)) = take(&pieces, i) {
            run(i * per, y, st);
        }
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

/// Σ of `f(j)` over `0..n` in `LANES` partial sums.
#[inline(always)]
fn lane_sum(n: usize, f: impl Fn(usize) -> f32) -> f32 {
    let mut acc = [0.0f32; LANES];
    let full = n - n % LANES;
    let mut j = 0;
    while j < full {
        for (l, a) in acc.iter_mut().enumerate() {
            *a += f(j + l);
        }
        j += LANES;
    }
    let mut tail = 0.0f32;
    while j < n {
        tail += f(j);
        j += 1;
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
        let mean = lane_sum(n, |j| xr[j]) * inv_n;
        let var = lane_sum(n, |j| {
            let d = xr[j] - mean;
            d * d
        }) * inv_n;
        let rstd = 1.0 / (var + eps).sqrt();
        match (w, b) {
            (Some(w), Some(b)) => {
                for j in 0..n {
                    yr[j] = (xr[j] - mean) * rstd * w[j] + b[j];
                }
            }
            (Some(w), None) => {
                for j in 0..n {
                    yr[j] = (xr[j] - mean) * rstd * w[j];
                }
            }
            (None, Some(b)) => {
                for j in 0..n {
                    yr[j] = (xr[j] - mean) * rstd + b[j];
                }
            }
            (None, None) => {
                for j in 0..n {
                    yr[j] = (xr[j] - mean) * rstd;
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
    let shape = src.layout.shape();
    let srcs = [&grad, &src, &stats];
    let fits = shape.len() == 2
        && srcs
            .into_iter()
            .chain(weight.iter())
            .chain([&dx, &dwb])
            .all(contiguous_f32)
        && grad.layout.shape() == shape
        && dx.layout.shape() == shape
        && stats.layout.shape()[..] == [shape[0], 2]
        && dwb.layout.shape()[..] == [2, shape[1]]
        && weight.iter().all(|t| t.layout.shape()[..] == [shape[1]])
        && srcs.into_iter().chain(weight.iter()).all(|t| {
            !core::ptr::eq(t.storage, dx.storage) && !core::ptr::eq(t.storage, dwb.storage)
        })
        && !core::ptr::eq(dx.storage, dwb.storage)
        && shape[1] > 0;
    if !fits {
        return reference::layer_norm_backward(grad, src, stats, weight, dx, dwb);
    }
    let (rows, n) = (shape[0], shape[1]);
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
    let run = |r0: usize, d: &mut [f32], sums: &mut [f32]| {
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
    };
    if blocks == 1 {
        run(0, d, &mut partial);
    } else {
        let pieces: Pieces<'_> = d
            .chunks_mut(per * n)
            .zip(partial.chunks_mut(2 * n))
            .map(|p| Mutex::new(Some(p)))
            .collect();
        par.for_each_index(pieces.len(), |i| {
            if let Some((d, sums)) = take(&pieces, i) {
                run(i * per, d, sums);
            }
        });
    }
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

/// The rows of [`backward_rows`], with (`W`) or without a weight; slices
/// are cut to `n` up front so the loops carry no bounds checks.
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
    let (dw, db) = (&mut dw[..n], &mut db[..n]);
    let w = if W { &w[..n] } else { w };
    let wj = |j: usize| if W { w[j] } else { 1.0 };
    for (((gr, xr), s), dr) in g
        .chunks_exact(n)
        .zip(x.chunks_exact(n))
        .zip(st.chunks_exact(2))
        .zip(d.chunks_exact_mut(n))
    {
        let (mean, rstd) = (s[0], s[1]);
        // One pass for both means: Σ ĝ and Σ ĝ·x̂, in LANES partial sums.
        let (mut a1, mut a2) = ([0.0f32; LANES], [0.0f32; LANES]);
        let full = n - n % LANES;
        let mut j = 0;
        while j < full {
            for l in 0..LANES {
                let gh = gr[j + l] * wj(j + l);
                a1[l] += gh;
                a2[l] += gh * ((xr[j + l] - mean) * rstd);
            }
            j += LANES;
        }
        let (mut t1, mut t2) = (0.0f32, 0.0f32);
        while j < n {
            let gh = gr[j] * wj(j);
            t1 += gh;
            t2 += gh * ((xr[j] - mean) * rstd);
            j += 1;
        }
        let m1 = (a1.iter().sum::<f32>() + t1) * inv_n;
        let m2 = (a2.iter().sum::<f32>() + t2) * inv_n;
        for j in 0..n {
            let xh = (xr[j] - mean) * rstd;
            dr[j] = rstd * (gr[j] * wj(j) - m1 - xh * m2);
            dw[j] += gr[j] * xh;
            db[j] += gr[j];
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
