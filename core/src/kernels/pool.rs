//! The `max_pool2d` family: the maximum of each window of an image
//! (step 0) and the gradient that sends each output's gradient to its
//! window's maximum (step 1), PyTorch's CPU rule at ties and NaN: the
//! first maximum in row-major window order wins, and a NaN wins over any
//! number (the last NaN). A declared family (NOTE [Declared families])
//! whose row names step 1 as step 0's gradient (`grad:`).
//!
//! Parameter words: an [`im2col` geometry](super::im2col::Geometry)
//! (dilation and fill unused: dilation must be 1).
//!
//! - step 0: `x [N, C, H, W]` to `y [N, C, OH, OW]`;
//! - step 1: `x`, `g [N, C, OH, OW]` to `dx [N, C, H, W]`: zero, then
//!   each `g` added at its window's maximum, in row-major order of `g`.

use super::KERNEL_DTYPES;
use super::im2col::Geometry;
use crate::backend::contract::Operand;
use crate::backend::declared::{Declared, In, Out, Shapes};
use crate::dispatch_in;
use crate::dtype::{DType, Scalar};
use crate::error::{Error, Result};
use crate::layout::{Layout, walk};
use crate::shape::Dims;
use crate::storage::{typed, typed_mut};

/// The `max_pool2d` family's kernel (steps: forward, gradient).
pub struct MaxPool2d;

const OP: &str = "max_pool2d";

fn invalid(reason: &'static str) -> Error {
    Error::InvalidArgument { op: OP, reason }
}

impl Declared for MaxPool2d {
    fn arity(step: usize, params: &[u32]) -> Option<(usize, usize)> {
        match (step, params.len()) {
            (0, 11) => Some((1, 1)),
            (1, 11) => Some((2, 1)),
            _ => None,
        }
    }

    fn outputs(step: usize, params: &[u32], ins: &[Operand<'_>]) -> Result<Shapes> {
        let g = Geometry::of(params).ok_or(invalid("malformed parameters"))?;
        if g.dilation != [1, 1] {
            return Err(invalid("dilation must be 1"));
        }
        if g.padding[0] > g.kernel[0] / 2 || g.padding[1] > g.kernel[1] / 2 {
            // (So that every window holds an image element.)
            return Err(invalid(
                "padding must be at most half the kernel size (as in PyTorch); lower the padding or enlarge the kernel",
            ));
        }
        let [oh, ow] = g.out(OP)?;
        let x = ins.first().ok_or(invalid("no input"))?;
        let [n, c, h, w] = *x.layout.shape().as_slice() else {
            return Err(invalid("the input must be [N, C, H, W]"));
        };
        if [h, w] != g.image {
            return Err(invalid("the input's size is not the geometry's"));
        }
        if x.dtype == DType::Bool {
            return Err(Error::UnsupportedDType {
                op: OP,
                dtype: x.dtype,
                supported: "numeric dtypes",
            });
        }
        let shape = if step == 0 {
            [n, c, oh, ow]
        } else {
            let gr = ins.get(1).ok_or(invalid("no gradient"))?;
            if gr.layout.shape().as_slice() != [n, c, oh, ow] || gr.dtype != x.dtype {
                return Err(invalid(
                    "the gradient must have the output's shape and the input's dtype",
                ));
            }
            [n, c, h, w]
        };
        let mut v = Shapes::new();
        let _ = v.push((Dims::from_slice(&shape)?, x.dtype));
        Ok(v)
    }

    fn batched(_step: usize) -> bool {
        true
    }

    fn run<const DTYPES: u16>(
        step: usize,
        params: &[u32],
        ins: &[In<'_>],
        outs: &mut [Out<'_>],
        _scratch: &mut [u8],
    ) -> Result<()> {
        let g = Geometry::of(params).ok_or(invalid("malformed parameters"))?;
        let out = g.out(OP)?;
        let (Some(x), Some(d)) = (ins.first(), outs.first_mut()) else {
            return Err(invalid("missing operands"));
        };
        // f32 only (NOTE [Declared kernels' dtypes]).
        dispatch_in!(DTYPES & KERNEL_DTYPES, OP, d.dtype, T => {
            let xs = (typed::<T>(x.bytes)?, x.layout);
            let o = typed_mut::<T>(d.bytes)?;
            if step == 0 {
                pool_slices(&g, out, xs, (o, d.layout));
            } else {
                let gr = ins.get(1).ok_or(invalid("missing operands"))?;
                let gs = (typed::<T>(gr.bytes)?, gr.layout);
                pool_grad_slices(&g, out, xs, gs, (o, d.layout));
            }
            Ok(())
        })
    }
}

/// Calls `f([b, ch, p, q], (row, column) of the maximum, maximum)` for
/// every window, in row-major order of the output.
fn windows<T: Scalar>(
    g: &Geometry,
    [oh, ow]: [usize; 2],
    (x, xl): (&[T], &Layout),
    mut f: impl FnMut([usize; 4], (usize, usize), T),
) {
    let s = xl.strides().as_slice();
    let (n, c) = (xl.shape()[0], xl.shape()[1]);
    let [h, w] = g.image;
    let lo = T::from_f64(f64::NEG_INFINITY);
    let range = |o: usize, a: usize, len: usize| {
        // Image positions `o·s - p + 0..k` inside `0..len`.
        let start = o * g.stride[a];
        let first = start.saturating_sub(g.padding[a]);
        let end = (start + g.kernel[a]).saturating_sub(g.padding[a]).min(len);
        first..end.max(first)
    };
    for b in 0..n {
        for ch in 0..c {
            let plane = xl.offset() + b * s[0] + ch * s[1];
            for p in 0..oh {
                let rows = range(p, 0, h);
                for q in 0..ow {
                    let cols = range(q, 1, w);
                    // PyTorch's: the first in-image position, then any
                    // larger value or any NaN.
                    let mut at = (rows.start, cols.start);
                    let mut best = lo;
                    for r in rows.clone() {
                        let row = plane + r * s[2];
                        if s[3] == 1 {
                            // A unit-stride row: one slice, one bounds check.
                            // Selects, not branches: on data a branch
                            // mispredicts every other element.
                            let taps = &x[row + cols.start..row + cols.end];
                            for (k, &v) in taps.iter().enumerate() {
                                let take = (v > best) | v.is_nan();
                                best = if take { v } else { best };
                                at = if take { (r, cols.start + k) } else { at };
                            }
                        } else {
                            for col in cols.clone() {
                                let v = x[row + col * s[3]];
                                if v > best || v.is_nan() {
                                    best = v;
                                    at = (r, col);
                                }
                            }
                        }
                    }
                    f([b, ch, p, q], at, best);
                }
            }
        }
    }
}

/// Step 0 on slices (NOTE [Slice-level kernels] in `cpu::index`).
pub(crate) fn pool_slices<T: Scalar>(
    g: &Geometry,
    out: [usize; 2],
    x: (&[T], &Layout),
    (d, dl): (&mut [T], &Layout),
) {
    if let Some(planes) = Planes::of(x.1, dl, None) {
        for (xp, dp, _) in planes.iter() {
            let y = &mut d[dp..dp + out[0] * out[1]];
            plane_windows(g, out, &x.0[xp..xp + planes.image], |i, _, v| y[i] = v);
        }
        return;
    }
    let s = dl.strides().as_slice();
    windows(g, out, x, |[b, ch, p, q], _, v| {
        d[dl.offset() + b * s[0] + ch * s[1] + p * s[2] + q * s[3]] = v;
    });
}

/// Step 1 on slices: `d` (laid out as `x`) zeroed, then each gradient
/// added at its window's maximum.
pub(crate) fn pool_grad_slices<T: Scalar>(
    g: &Geometry,
    out: [usize; 2],
    (x, xl): (&[T], &Layout),
    (gr, gl): (&[T], &Layout),
    (d, dl): (&mut [T], &Layout),
) {
    match dl.contiguous_span() {
        Some(span) => d[span].fill(T::ZERO),
        None => walk([dl], |[o]| d[o] = T::ZERO),
    }
    if let Some(planes) = Planes::of(xl, gl, Some(dl)) {
        // (Here the second layout is the gradient's, the third the result's.)
        let n = out[0] * out[1];
        let w = g.image[1];
        let halves = g.kernel == [2, 2] && g.stride == [2, 2] && g.padding == [0, 0];
        for (xp, gp, dp) in planes.iter() {
            if halves {
                let (x, gp) = (&x[xp..xp + planes.image], &gr[gp..gp + n]);
                let y = &mut d[dp..dp + planes.image];
                for p in 0..out[0] {
                    let r = 2 * p * w..(2 * p + 2) * w;
                    grad_2x2_rows(
                        &x[r.clone()],
                        &gp[p * out[1]..(p + 1) * out[1]],
                        &mut y[r],
                        w,
                    );
                }
                continue;
            }
            let (gp, y) = (&gr[gp..gp + n], &mut d[dp..dp + planes.image]);
            plane_windows(g, out, &x[xp..xp + planes.image], |i, at, _| {
                y[at] = y[at].add(gp[i]);
            });
        }
        return;
    }
    let (gs, ds) = (gl.strides(), dl.strides());
    let [h, w] = g.image;
    windows(g, out, (x, xl), |[b, ch, p, q], (r, col), _| {
        if r >= h || col >= w {
            return; // a window of padding alone (refused by the contract)
        }
        let to = dl.offset() + b * ds[0] + ch * ds[1] + r * ds[2] + col * ds[3];
        let v = gr[gl.offset() + b * gs[0] + ch * gs[1] + p * gs[2] + q * gs[3]];
        d[to] = d[to].add(v);
    });
}

// NOTE [Pooling planes]
// The usual operands (contiguous tensors, or a batch range of them on the
// threaded backend) have every `H x W` plane contiguous. Such a pool runs
// plane by plane on subslices (`plane_windows`): no per-element stride
// arithmetic or bounds check, and for the common 2x2, stride 2, unpadded
// pool four loads and three selects per window. Values, ties and NaN are
// the general walk's: both visit a window's taps in row-major order and
// take a larger value or a NaN.

/// Where the planes of up to three `[N, C, ., .]` operands start, when
/// each one's last two dims are one contiguous plane (NOTE [Pooling
/// planes]).
struct Planes<'a> {
    layouts: [&'a Layout; 3],
    /// The first operand's plane size `H · W`.
    image: usize,
}

impl<'a> Planes<'a> {
    fn of(a: &'a Layout, b: &'a Layout, c: Option<&'a Layout>) -> Option<Self> {
        let flat = |l: &Layout| {
            let (sh, st) = (l.shape().as_slice(), l.strides().as_slice());
            // (Empty operands take the general walk, which visits nothing.)
            sh.len() == 4
                && l.numel() > 0
                && (st[3] == 1 || sh[3] == 1)
                && (st[2] == sh[3] || sh[2] == 1)
        };
        let c = c.unwrap_or(b);
        let ok = [a, b, c].iter().all(|l| flat(l));
        let image = a.shape().as_slice().iter().skip(2).product();
        ok.then_some(Planes {
            layouts: [a, b, c],
            image,
        })
    }

    /// Each plane's start in the three operands, in row-major order of
    /// `[N, C]`.
    fn iter(&self) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        let sh = self.layouts[0].shape().as_slice();
        let (n, c) = (sh[0], sh[1]);
        let at = |l: &Layout, b: usize, ch: usize| {
            let s = l.strides().as_slice();
            l.offset() + b * s[0] + ch * s[1]
        };
        (0..n).flat_map(move |b| {
            (0..c).map(move |ch| {
                let [x, y, z] = self.layouts;
                (at(x, b, ch), at(y, b, ch), at(z, b, ch))
            })
        })
    }
}

/// Calls `f(output index, input index of the maximum, maximum)` for every
/// window of one contiguous `H x W` plane, in row-major order of the
/// output (NOTE [Pooling planes]).
fn plane_windows<T: Scalar>(
    g: &Geometry,
    [oh, ow]: [usize; 2],
    x: &[T],
    mut f: impl FnMut(usize, usize, T),
) {
    let [h, w] = g.image;
    let lo = T::from_f64(f64::NEG_INFINITY);
    if g.kernel == [2, 2] && g.stride == [2, 2] && g.padding == [0, 0] {
        // Here `2·OH <= H` and `2·OW <= W`.
        for p in 0..oh {
            let r0 = 2 * p * w;
            let (top, bottom) = (&x[r0..r0 + 2 * ow], &x[r0 + w..r0 + w + 2 * ow]);
            for (q, (t, b)) in top.chunks_exact(2).zip(bottom.chunks_exact(2)).enumerate() {
                let c0 = r0 + 2 * q;
                let mut best = lo;
                let mut at = c0;
                for (v, i) in [
                    (t[0], c0),
                    (t[1], c0 + 1),
                    (b[0], c0 + w),
                    (b[1], c0 + w + 1),
                ] {
                    let take = (v > best) | v.is_nan();
                    best = if take { v } else { best };
                    at = if take { i } else { at };
                }
                f(p * ow + q, at, best);
            }
        }
        return;
    }
    let range = |o: usize, a: usize, len: usize| {
        let start = o * g.stride[a];
        let first = start.saturating_sub(g.padding[a]);
        let end = (start + g.kernel[a]).saturating_sub(g.padding[a]).min(len);
        first..end.max(first)
    };
    for p in 0..oh {
        let rows = range(p, 0, h);
        for q in 0..ow {
            let cols = range(q, 1, w);
            let mut at = rows.start * w + cols.start;
            let mut best = lo;
            for r in rows.clone() {
                let row = r * w + cols.start;
                for (k, &v) in x[row..r * w + cols.end].iter().enumerate() {
                    let take = (v > best) | v.is_nan();
                    best = if take { v } else { best };
                    at = if take { row + k } else { at };
                }
            }
            f(p * ow + q, at, best);
        }
    }
}

/// The 2x2, stride 2 gradient of one pair of image rows (`x` and `y` hold
/// `2·W` elements, `g` the `OW` gradients of that output row): each
/// window's four taps written at once, its gradient at the winner (PyTorch's
/// rule, as [`plane_windows`]) and zero beside it, so no store lands at a
/// data-dependent address and no branch depends on the data. The windows do not overlap, so every tap is
/// written once; a last odd column keeps the zero of the fill.
fn grad_2x2_rows<T: Scalar>(x: &[T], g: &[T], y: &mut [T], w: usize) {
    let (xt, xb) = x.split_at(w);
    let (yt, yb) = y.split_at_mut(w);
    let pairs = xt
        .chunks_exact(2)
        .zip(xb.chunks_exact(2))
        .zip(yt.chunks_exact_mut(2).zip(yb.chunks_exact_mut(2)))
        .zip(g);
    for (((t, b), (ot, ob)), &gv) in pairs {
        let k = winner_of_4([t[0], t[1], b[0], b[1]]);
        let at = |i: u8| if k == i { gv } else { T::ZERO };
        ot[0] = at(0);
        ot[1] = at(1);
        ob[0] = at(2);
        ob[1] = at(3);
    }
}

/// Which of four taps in row-major order wins under PyTorch's rule (the
/// last NaN if there is one, else the first maximum), without a branch on
/// the data: a sequential `v > best || v.is_nan()` chain compiles to
/// branches that mispredict on every other window, so the maximum is a
/// tournament of strict comparisons (an earlier tap keeps a tie) and the
/// NaN case an integer select over it.
fn winner_of_4<T: Scalar>(v: [T; 4]) -> u8 {
    let right01 = v[1] > v[0];
    let right23 = v[3] > v[2];
    let (k01, m01) = (u8::from(right01), if right01 { v[1] } else { v[0] });
    let (k23, m23) = (2 + u8::from(right23), if right23 { v[3] } else { v[2] });
    let k = if m23 > m01 { k23 } else { k01 };
    let nan = [v[0].is_nan(), v[1].is_nan(), v[2].is_nan(), v[3].is_nan()];
    let mut last = k;
    for (i, &n) in nan.iter().enumerate() {
        last = if n { i as u8 } else { last };
    }
    last
}

#[cfg(test)]
mod tests {
    use super::winner_of_4;

    /// PyTorch's CPU loop, as written there: `if val > max || isnan(val)`
    /// over the taps in order, the first tap the start.
    fn sequential(v: [f32; 4]) -> u8 {
        let (mut best, mut at) = (f32::NEG_INFINITY, 0);
        for (i, &x) in v.iter().enumerate() {
            if x > best || x.is_nan() {
                best = x;
                at = i as u8;
            }
        }
        at
    }

    #[test]
    fn the_branch_free_winner_is_pytorchs_on_every_pattern_of_ties_nans_and_infinities() {
        let vals = [f32::NEG_INFINITY, 1.0, 2.0, f32::NAN, f32::INFINITY];
        let mut seen = 0;
        for a in vals {
            for b in vals {
                for c in vals {
                    for d in vals {
                        let v = [a, b, c, d];
                        assert_eq!(winner_of_4(v), sequential(v), "{v:?}");
                        seen += 1;
                    }
                }
            }
        }
        assert_eq!(seen, 625);
    }
}
