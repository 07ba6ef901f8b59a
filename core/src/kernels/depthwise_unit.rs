//! The depthwise convolution's unit-stride path (NOTE [Depthwise on
//! padded planes]): stride 1, dilation 1, every plane contiguous.

use crate::dtype::Scalar;
use crate::layout::Layout;

// NOTE [Depthwise on padded planes]
// A depthwise plane is small (DS-CNN's are 25x5), so walking it a tap and
// an output row at a time runs loops of 5 elements behind per-row
// bookkeeping. At stride 1 and dilation 1 each plane is instead copied
// into a zero-padded scratch plane of row stride `W' = W + 2·pw`, where
// tap `(i, j)` reads at a constant offset `i·W' + j` from every output
// position laid out with the same row stride: one flat loop of about
// `OH·W'` elements per tap, which vectorises. Positions in the padding
// read zeros (adding `w·0`, which leaves every sum as it was), and the
// `W' - OW` columns past each output row are scratch, dropped when the
// rows are copied out. The input gradient is the correlation of the
// output gradient (placed with `K - 1` zeros around it) with the flipped
// kernel, the same flat loops; the weight gradient a flat dot product per
// tap (eight partial sums, then in order). Each output's sum in steps 0
// and 1 runs over the taps in row-major order.

/// The element counts of the scratch each step needs (`None`: overflow).
pub(crate) fn scratch_elems(
    step: usize,
    [kh, kw]: [usize; 2],
    [h, w]: [usize; 2],
    [ph, pw]: [usize; 2],
    [oh, ow]: [usize; 2],
) -> Option<usize> {
    let (hp, wp) = (
        h.checked_add(ph.checked_mul(2)?)?,
        w.checked_add(pw.checked_mul(2)?)?,
    );
    match step {
        // the padded input and the output at its row stride
        0 | 2 => hp.checked_mul(wp)?.checked_add(oh.checked_mul(wp)?),
        // the padded gradient and the input gradient at its row stride
        _ => {
            let gw = ow.checked_add(kw.checked_sub(1)?.checked_mul(2)?)?;
            let gh = oh.checked_add(kh.checked_sub(1)?.checked_mul(2)?)?;
            gh.checked_mul(gw)?.checked_add(h.checked_mul(gw)?)
        }
    }
}

/// A unit-stride depthwise plane's sizes.
#[derive(Clone, Copy)]
pub(crate) struct Sizes {
    pub(crate) kernel: [usize; 2],
    pub(crate) image: [usize; 2],
    pub(crate) padding: [usize; 2],
    pub(crate) out: [usize; 2],
}

/// Whether every `[., ., rows, cols]` layout has contiguous planes.
pub(crate) fn flat_planes(ls: &[&Layout]) -> bool {
    ls.iter().all(|l| {
        let (sh, st) = (l.shape().as_slice(), l.strides().as_slice());
        sh.len() == 4 && (st[3] == 1 || sh[3] == 1) && (st[2] == sh[3] || sh[2] == 1)
    })
}

/// Copies `rows x cols` from `src` (row stride `cols`) into `dst` (row
/// stride `stride`) at `(top, left)`; `dst` zeroed first.
fn place<T: Scalar>(
    src: &[T],
    [rows, cols]: [usize; 2],
    dst: &mut [T],
    stride: usize,
    [top, left]: [usize; 2],
) {
    dst.fill(T::ZERO);
    for (r, row) in src.chunks_exact(cols.max(1)).take(rows).enumerate() {
        let at = (top + r) * stride + left;
        dst[at..at + cols].copy_from_slice(row);
    }
}

/// `acc[k] += wv · src[k]` over the shorter of the two.
/// (Not inlined: as a function its two slices are known not to overlap,
/// so the loop vectorises; inlined into a caller whose two slices come
/// from one scratch buffer it stayed scalar.)
#[inline(never)]
fn axpy<T: Scalar>(acc: &mut [T], wv: T, src: &[T]) {
    for (a, &v) in acc.iter_mut().zip(src) {
        *a = a.add(wv.mul(v));
    }
}

/// `Σ_k a[k] · b[k]` over the shorter of the two: eight partial sums
/// (so the loop vectorises), then added in order. Not inlined, for the
/// reason [`axpy`] is not.
#[inline(never)]
fn dot<T: Scalar>(a: &[T], b: &[T]) -> T {
    let mut lanes = [T::ZERO; 8];
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for ((l, &u), &v) in lanes.iter_mut().zip(x).zip(y) {
            *l = l.add(u.mul(v));
        }
    }
    let mut acc = T::ZERO;
    for l in lanes {
        acc = acc.add(l);
    }
    for (&u, &v) in ca.remainder().iter().zip(cb.remainder()) {
        acc = acc.add(u.mul(v));
    }
    acc
}

/// Step 0 of one plane: `y [OH, OW]` from `x [H, W]` and the taps `wt(i, j)`.
pub(crate) fn forward_plane<T: Scalar>(
    x: &[T],
    y: &mut [T],
    wt: impl Fn(usize, usize) -> T,
    sz: Sizes,
    scratch: &mut [T],
) {
    let Sizes {
        kernel: [kh, kw],
        image: [h, w],
        padding: [ph, pw],
        out: [oh, ow],
    } = sz;
    let wp = w + 2 * pw;
    let (xp, rest) = scratch.split_at_mut((h + 2 * ph) * wp);
    place(x, [h, w], xp, wp, [ph, pw]);
    let len = (oh - 1) * wp + ow;
    let yp = &mut rest[..len];
    yp.fill(T::ZERO);
    for i in 0..kh {
        for j in 0..kw {
            let off = i * wp + j;
            axpy(yp, wt(i, j), &xp[off..off + len]);
        }
    }
    for (p, row) in y.chunks_exact_mut(ow).take(oh).enumerate() {
        row.copy_from_slice(&yp[p * wp..p * wp + ow]);
    }
}

/// Step 1 of one plane: `dx [H, W]` from `g [OH, OW]` and the taps.
pub(crate) fn input_grad_plane<T: Scalar>(
    g: &[T],
    dx: &mut [T],
    wt: impl Fn(usize, usize) -> T,
    sz: Sizes,
    scratch: &mut [T],
) {
    let Sizes {
        kernel: [kh, kw],
        image: [h, w],
        padding: [ph, pw],
        out: [oh, ow],
    } = sz;
    // `g` placed at `(kh - 1, kw - 1)` in a plane of row stride `gw`:
    // `dx[r, c] = Σ_ij w[i, j] · gp[r + a_i, c + b_j]` with
    // `a_i = ph + kh - 1 - i`, `b_j = pw + kw - 1 - j`.
    let gw = ow + 2 * (kw - 1);
    let (gp, rest) = scratch.split_at_mut((oh + 2 * (kh - 1)) * gw);
    place(g, [oh, ow], gp, gw, [kh - 1, kw - 1]);
    let len = (h - 1) * gw + w;
    let dp = &mut rest[..len];
    dp.fill(T::ZERO);
    for i in 0..kh {
        for j in 0..kw {
            let off = (ph + kh - 1 - i) * gw + (pw + kw - 1 - j);
            axpy(dp, wt(i, j), &gp[off..off + len]);
        }
    }
    for (r, row) in dx.chunks_exact_mut(w).take(h).enumerate() {
        row.copy_from_slice(&dp[r * gw..r * gw + w]);
    }
}

/// Step 2 of one plane: adds each tap's `Σ_pq g[p, q] · x[..]` to `dw(i, j)`.
pub(crate) fn weight_grad_plane<T: Scalar>(
    x: &[T],
    g: &[T],
    mut dw: impl FnMut(usize, usize, T),
    sz: Sizes,
    scratch: &mut [T],
) {
    let Sizes {
        kernel: [kh, kw],
        image: [h, w],
        padding: [ph, pw],
        out: [oh, ow],
    } = sz;
    let wp = w + 2 * pw;
    let (xp, rest) = scratch.split_at_mut((h + 2 * ph) * wp);
    place(x, [h, w], xp, wp, [ph, pw]);
    let gs = &mut rest[..oh * wp];
    place(g, [oh, ow], gs, wp, [0, 0]);
    let len = (oh - 1) * wp + ow;
    let gs = &gs[..len];
    for i in 0..kh {
        for j in 0..kw {
            let off = i * wp + j;
            let acc = dot(gs, &xp[off..off + len]);
            dw(i, j, acc);
        }
    }
}
