//! The `batch_norm` family's sums (steps 0, `sums`, and 1, `grad_sums`)
//! on the threaded backend (NOTE [Batch norm sums by channel]); its
//! affine steps take the shared batched path.
//!
//! NOTE [Batch norm sums by channel]
//! The reference kernel sums each channel's planes in f64, in eight
//! interleaved lanes per plane, the planes added in batch order; compiled
//! for the baseline x86-64 it ran at about 3.6 cycles an element, 11% of
//! ResNet-8's training step at one thread. Here the channels are split
//! across the pool, and each plane is summed in AVX2 registers where the
//! CPU has them (else by the reference's own `plane_sums` /
//! `grad_plane_sums`): the same operations in the same order, so the sums are
//! bit-identical to the reference kernel's at any thread count (the
//! shared path summed ranges of the batch into partials, whose order
//! depended on the thread count).

use super::engine::{Par, cast_slice, cast_slice_mut};
use kael_core::backend::declared::Call;
use kael_core::cpu as reference;
use kael_core::dtype::DType;
use kael_core::kernels::batch_norm::{LANES, grad_plane_sums, plane_sums};
use kael_core::{Error, Result};

/// Steps 0 and 1 on the pool, or `None` where this path does not apply
/// (another step, not f32, a data operand not contiguous).
pub(super) fn batch_norm(par: &Par<'_>, call: Call<'_>) -> Option<Result<()>> {
    if call.step > 1 || call.dsts.len() != 1 {
        return None;
    }
    let data = call.step + 1;
    if call.srcs.len() != data + 1 {
        return None;
    }
    let f32s = call
        .srcs
        .iter()
        .chain(call.dsts)
        .all(|o| o.dtype == DType::F32);
    let dense = call.srcs[..data].iter().all(|s| s.layout.is_contiguous());
    if !f32s || !dense {
        return None;
    }
    Some(run(par, call, data))
}

fn run(par: &Par<'_>, call: Call<'_>, data: usize) -> Result<()> {
    reference::declared_contract(call)?; // shapes, dtypes, aliasing
    let op = call.family.name();
    let (x, v, d) = (&call.srcs[0], &call.srcs[data], &call.dsts[0]);
    let s = x.layout.shape().as_slice();
    let (n, ch) = (s[0], s[1]);
    let m: usize = s[2..].iter().product();
    let numel = x.layout.numel();
    let guards = call
        .srcs
        .iter()
        .map(|o| o.storage.read(op))
        .collect::<Result<Vec<_>>>()?;
    let slices = call.srcs[..data]
        .iter()
        .zip(&guards)
        .map(|(o, g)| {
            let off = o.layout.offset();
            cast_slice::<f32>(g.bytes())?
                .get(off..off + numel)
                .ok_or_else(|| bad("an input runs past its storage"))
        })
        .collect::<Result<Vec<_>>>()?;
    let vs = cast_slice::<f32>(guards[data].bytes())?;
    let shift = |c: usize| {
        vs.get(v.layout.offset() + c * v.layout.strides()[0])
            .map(|&s| f64::from(s))
    };
    if (0..ch).any(|c| shift(c).is_none()) {
        return Err(bad("the shift runs past its storage"));
    }
    let plane = |k: usize, c: usize| (k * ch + c) * m..(k * ch + c + 1) * m;
    // One channel's two sums, the planes added in batch order.
    let channel = |c: usize| -> (f64, f64) {
        let sh = shift(c).unwrap_or(0.0);
        let (mut s0, mut s1) = (0.0f64, 0.0f64);
        for k in 0..n {
            let (p0, p1) = match slices.as_slice() {
                [g, x] => grad_sums(&g[plane(k, c)], &x[plane(k, c)], sh),
                [x] => sums(&x[plane(k, c)], sh),
                _ => (0.0, 0.0),
            };
            s0 += p0;
            s1 += p1;
        }
        (s0, s1)
    };
    let mut out = vec![(0.0f64, 0.0f64); ch];
    if par.parallel(numel) && ch > 1 {
        par.each_mut(&mut out, |c, r| *r = channel(c));
    } else {
        for (c, r) in out.iter_mut().enumerate() {
            *r = channel(c);
        }
    }
    let mut gd = d.storage.write(op)?;
    let ds = cast_slice_mut::<f32>(gd.bytes_mut())?;
    let (off, st) = (d.layout.offset(), d.layout.strides());
    if d.layout.reach() > ds.len() {
        return Err(bad("the output runs past its storage"));
    }
    for (c, &(s0, s1)) in out.iter().enumerate() {
        ds[off + c * st[1]] = s0 as f32;
        ds[off + st[0] + c * st[1]] = s1 as f32;
    }
    Ok(())
}

/// [`plane_sums`] for this CPU's widest vector unit.
fn sums(xs: &[f32], shift: f64) -> (f64, f64) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected.
        return unsafe { sums_avx2(xs, shift) };
    }
    plane_sums(xs, shift)
}

/// [`grad_plane_sums`] for this CPU's widest vector unit.
fn grad_sums(gs: &[f32], xs: &[f32], shift: f64) -> (f64, f64) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected.
        return unsafe { grad_sums_avx2(gs, xs, shift) };
    }
    grad_plane_sums(gs, xs, shift)
}

/// [`plane_sums`] in AVX2 registers: lanes 0-3 of the eight in one
/// vector of f64, lanes 4-7 in another, the same subtractions, products
/// and additions per lane in the same order, the tail and the final
/// lane sum by the reference's own code.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn sums_avx2(xs: &[f32], shift: f64) -> (f64, f64) {
    use std::arch::x86_64::{
        _mm256_add_pd, _mm256_castps256_ps128, _mm256_cvtps_pd, _mm256_extractf128_ps,
        _mm256_loadu_ps, _mm256_mul_pd, _mm256_set1_pd, _mm256_setzero_pd, _mm256_storeu_pd,
        _mm256_sub_pd,
    };
    let sh = _mm256_set1_pd(shift);
    let (mut a0, mut a1, mut b0, mut b1) = (
        _mm256_setzero_pd(),
        _mm256_setzero_pd(),
        _mm256_setzero_pd(),
        _mm256_setzero_pd(),
    );
    let mut it = xs.chunks_exact(LANES);
    for ch in &mut it {
        // SAFETY: `ch` holds LANES = 8 floats.
        let v = unsafe { _mm256_loadu_ps(ch.as_ptr()) };
        let lo = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), sh);
        let hi = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps::<1>(v)), sh);
        a0 = _mm256_add_pd(a0, lo);
        a1 = _mm256_add_pd(a1, hi);
        b0 = _mm256_add_pd(b0, _mm256_mul_pd(lo, lo));
        b1 = _mm256_add_pd(b1, _mm256_mul_pd(hi, hi));
    }
    let (mut p0, mut p1) = ([0.0f64; LANES], [0.0f64; LANES]);
    // SAFETY: each array holds 8 f64, two vectors' worth.
    unsafe {
        _mm256_storeu_pd(p0.as_mut_ptr(), a0);
        _mm256_storeu_pd(p0.as_mut_ptr().add(4), a1);
        _mm256_storeu_pd(p1.as_mut_ptr(), b0);
        _mm256_storeu_pd(p1.as_mut_ptr().add(4), b1);
    }
    for (l, &v) in it.remainder().iter().enumerate() {
        let t = f64::from(v) - shift;
        p0[l] += t;
        p1[l] += t * t;
    }
    (p0.iter().sum(), p1.iter().sum())
}

/// [`grad_plane_sums`] in AVX2 registers, as [`sums_avx2`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn grad_sums_avx2(gs: &[f32], xs: &[f32], shift: f64) -> (f64, f64) {
    use std::arch::x86_64::{
        __m256d, _mm256_add_pd, _mm256_castps256_ps128, _mm256_cvtps_pd, _mm256_extractf128_ps,
        _mm256_loadu_ps, _mm256_mul_pd, _mm256_set1_pd, _mm256_setzero_pd, _mm256_storeu_pd,
        _mm256_sub_pd,
    };
    let n = gs.len().min(xs.len());
    let sh = _mm256_set1_pd(shift);
    let z = _mm256_setzero_pd();
    let (mut a, mut b): ([__m256d; 2], [__m256d; 2]) = ([z, z], [z, z]);
    let full = n / LANES * LANES;
    for (gc, xc) in gs[..full]
        .chunks_exact(LANES)
        .zip(xs[..full].chunks_exact(LANES))
    {
        // SAFETY: `gc` and `xc` hold LANES = 8 floats each.
        let (g, x) = unsafe { (_mm256_loadu_ps(gc.as_ptr()), _mm256_loadu_ps(xc.as_ptr())) };
        let g2 = [
            _mm256_cvtps_pd(_mm256_castps256_ps128(g)),
            _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(g)),
        ];
        let x2 = [
            _mm256_cvtps_pd(_mm256_castps256_ps128(x)),
            _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(x)),
        ];
        for h in 0..2 {
            a[h] = _mm256_add_pd(a[h], g2[h]);
            b[h] = _mm256_add_pd(b[h], _mm256_mul_pd(g2[h], _mm256_sub_pd(x2[h], sh)));
        }
    }
    let (mut p0, mut p1) = ([0.0f64; LANES], [0.0f64; LANES]);
    // SAFETY: each array holds 8 f64, two vectors' worth.
    unsafe {
        _mm256_storeu_pd(p0.as_mut_ptr(), a[0]);
        _mm256_storeu_pd(p0.as_mut_ptr().add(4), a[1]);
        _mm256_storeu_pd(p1.as_mut_ptr(), b[0]);
        _mm256_storeu_pd(p1.as_mut_ptr().add(4), b[1]);
    }
    for (l, (&g, &x)) in gs[full..n].iter().zip(&xs[full..n]).enumerate() {
        let g = f64::from(g);
        p0[l] += g;
        p1[l] += g * (f64::from(x) - shift);
    }
    (p0.iter().sum(), p1.iter().sum())
}

fn bad(reason: &'static str) -> Error {
    Error::InvalidArgument {
        op: "batch_norm",
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The AVX2 build of the reference's plane sums is the reference's
    // arithmetic: bit-identical on values whose sums round at every step
    // (lengths with and without a ragged tail of lanes).
    #[test]
    fn the_vector_plane_sums_are_the_reference_bit_for_bit() {
        for len in [0, 1, 7, 8, 9, 61, 256] {
            let xs: Vec<f32> = (0..len)
                .map(|i| ((i * 7919 % 1013) as f32 - 500.0) / 3.0)
                .collect();
            let gs: Vec<f32> = (0..len)
                .map(|i| ((i * 104_729 % 997) as f32).sqrt())
                .collect();
            let bits = |(a, b): (f64, f64)| (a.to_bits(), b.to_bits());
            assert_eq!(bits(sums(&xs, 0.37)), bits(plane_sums(&xs, 0.37)), "{len}");
            assert_eq!(
                bits(grad_sums(&gs, &xs, -1.25)),
                bits(grad_plane_sums(&gs, &xs, -1.25)),
                "{len}"
            );
        }
    }
}
