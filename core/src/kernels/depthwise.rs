//! The `depthwise_conv2d` family: a convolution whose every channel has
//! its own `KH x KW` filter (`groups == C == O`), computed directly on the
//! image, with no `im2col` columns (which hold `KH·KW` copies of the image
//! and feed a product of `C` one-column matrices). A declared family (NOTE
//! [Declared families]) with two inputs; its row's `grad: [1]` names step
//! 1 as the input's gradient and step 2 as the weight's.
//!
//! Parameter words: an [`im2col` geometry](super::im2col::Geometry)
//! (`fill` unused).
//!
//! - step 0: `x [N, C, H, W]`, `w [C, 1, KH, KW]` to `y [N, C, OH, OW]`,
//!   `y[n, c, p, q] = Σ_ij w[c, 0, i, j] · x[n, c, p·sh + i·dh - ph,
//!   q·sw + j·dw - pw]` (taps in the padding read zero), summed over
//!   `(i, j)` in row-major order;
//! - step 1: `x`, `w`, `g [N, C, OH, OW]` to `dx [N, C, H, W]`: each
//!   `w[c, 0, i, j] · g[n, c, p, q]` added where step 0 read it, for
//!   `p`, `i`, `j`, `q` in that nesting;
//! - step 2: `x`, `w`, `g` to `dw [C, 1, KH, KW]`: `Σ_npq g[n, c, p, q] ·
//!   x[n, c, ..]`, summed over `n`, then `p`, then `q`.

use super::KERNEL_DTYPES;
use super::depthwise_unit as unit;
use super::im2col::Geometry;
use crate::backend::contract::Operand;
use crate::backend::declared::{Declared, In, Out, Shapes};
use crate::dispatch_in;
use crate::dtype::{DType, Scalar};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::shape::Dims;
use crate::storage::{typed, typed_mut};
use core::ops::Range;

/// The `depthwise_conv2d` family's kernel (steps: forward, input
/// gradient, weight gradient).
pub struct Depthwise2d;

const OP: &str = "depthwise_conv2d";

fn invalid(reason: &'static str) -> Error {
    Error::InvalidArgument { op: OP, reason }
}

impl Declared for Depthwise2d {
    fn arity(step: usize, params: &[u32]) -> Option<(usize, usize)> {
        match (step, params.len()) {
            (0, 11) => Some((2, 1)),
            (1 | 2, 11) => Some((3, 1)),
            _ => None,
        }
    }

    fn outputs(step: usize, params: &[u32], ins: &[Operand<'_>]) -> Result<Shapes> {
        let g = Geometry::of(params).ok_or(invalid("malformed parameters"))?;
        let [oh, ow] = g.out(OP)?;
        let (Some(x), Some(w)) = (ins.first(), ins.get(1)) else {
            return Err(invalid("missing inputs"));
        };
        let [n, c, h, wd] = *x.layout.shape().as_slice() else {
            return Err(invalid("the input must be [N, C, H, W]"));
        };
        if [h, wd] != g.image {
            return Err(invalid("the input's size is not the geometry's"));
        }
        if w.layout.shape().as_slice() != [c, 1, g.kernel[0], g.kernel[1]] {
            return Err(invalid("the weight must be [C, 1, KH, KW]"));
        }
        if x.dtype == DType::Bool || w.dtype != x.dtype {
            return Err(Error::UnsupportedDType {
                op: OP,
                dtype: x.dtype,
                supported: "numeric dtypes, the weight's the input's",
            });
        }
        if step > 0 {
            let gr = ins.get(2).ok_or(invalid("no gradient"))?;
            if gr.layout.shape().as_slice() != [n, c, oh, ow] || gr.dtype != x.dtype {
                return Err(invalid(
                    "the gradient must have the output's shape and the input's dtype",
                ));
            }
        }
        let shape = match step {
            0 => [n, c, oh, ow],
            1 => [n, c, h, wd],
            _ => [c, 1, g.kernel[0], g.kernel[1]],
        };
        let mut v = Shapes::new();
        let _ = v.push((Dims::from_slice(&shape)?, x.dtype));
        Ok(v)
    }

    fn batched(step: usize) -> bool {
        step < 2 // (the weight's gradient sums over the batch)
    }

    fn scratch(step: usize, params: &[u32], _ops: &[Operand<'_>]) -> Option<usize> {
        // The unit-stride path's planes (NOTE [Depthwise on padded planes]),
        // in elements of the widest scalar.
        let g = Geometry::of(params)?;
        if g.stride != [1, 1] || g.dilation != [1, 1] {
            return Some(0);
        }
        let out = g.out(OP).ok()?;
        unit::scratch_elems(step, g.kernel, g.image, g.padding, out)?
            .checked_mul(core::mem::size_of::<f64>())
    }

    fn summed(step: usize) -> bool {
        step == 2
    }

    fn shared_inputs(_step: usize) -> u8 {
        0b10 // the weight: every range of the batch reads it whole
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
        let (Some(x), Some(w), Some(d)) = (ins.first(), ins.get(1), outs.first_mut()) else {
            return Err(invalid("missing operands"));
        };
        // f32 only (NOTE [Declared kernels' dtypes]).
        dispatch_in!(DTYPES & KERNEL_DTYPES, OP, d.dtype, T => {
            if unit_path::<T>(&g, out, step, ins, d, _scratch)? {
                return Ok(());
            }
            let xs = (typed::<T>(x.bytes)?, x.layout);
            let ws = (typed::<T>(w.bytes)?, w.layout);
            let o = (typed_mut::<T>(d.bytes)?, d.layout);
            match (step, ins.get(2)) {
                (0, _) => forward(&g, out, xs, ws, o),
                (1, Some(gr)) => input_grad(&g, out, ws, (typed::<T>(gr.bytes)?, gr.layout), o),
                (_, Some(gr)) => weight_grad(&g, out, xs, (typed::<T>(gr.bytes)?, gr.layout), o),
                _ => return Err(invalid("missing operands")),
            }
            Ok(())
        })
    }
}

/// Runs `step` on the unit-stride path (NOTE [Depthwise on padded
/// planes]) when it applies: stride 1, dilation 1, contiguous non-empty
/// planes, and an aligned scratch of the size [`Declared::scratch`] asked.
/// `Ok(false)`: it does not apply (the general path runs).
fn unit_path<T: Scalar>(
    g: &Geometry,
    out: [usize; 2],
    step: usize,
    ins: &[In<'_>],
    d: &mut Out<'_>,
    scratch: &mut [u8],
) -> Result<bool> {
    let (Some(x), Some(w)) = (ins.first(), ins.get(1)) else {
        return Ok(false);
    };
    let gr = ins.get(2);
    let planes = [x.layout, d.layout];
    let with_g = [x.layout, d.layout, gr.map_or(x.layout, |g| g.layout)];
    let ls: &[&Layout] = if step == 0 { &planes } else { &with_g };
    let need = unit::scratch_elems(step, g.kernel, g.image, g.padding, out);
    let buf = match scratch.len() % core::mem::size_of::<T>() {
        0 => typed_mut::<T>(scratch).ok(),
        _ => None,
    };
    let (Some(need), Some(buf)) = (need, buf) else {
        return Ok(false);
    };
    let fits = g.stride == [1, 1]
        && g.dilation == [1, 1]
        && unit::flat_planes(ls)
        && ls.iter().all(|l| l.numel() > 0)
        && buf.len() >= need;
    if !fits {
        return Ok(false);
    }
    let buf = &mut buf[..need];
    let (xs, ws) = (typed::<T>(x.bytes)?, typed::<T>(w.bytes)?);
    let (n, ch) = (x.layout.shape()[0], x.layout.shape()[1]);
    let (k, img) = (g.kernel, g.image);
    let sz = unit::Sizes {
        kernel: k,
        image: img,
        padding: g.padding,
        out,
    };
    let (xn, on) = (img[0] * img[1], out[0] * out[1]);
    let dd = typed_mut::<T>(d.bytes)?;
    let gs = match gr {
        Some(g) => Some((typed::<T>(g.bytes)?, g.layout)),
        None => None,
    };
    if step == 2 {
        let Some((gs, gl)) = gs else {
            return Ok(false);
        };
        for c in 0..ch {
            let (wo, [wr, wc]) = plane(d.layout, c, 0);
            for i in 0..k[0] {
                for j in 0..k[1] {
                    dd[wo + i * wr + j * wc] = T::ZERO;
                }
            }
            for b in 0..n {
                let (xo, _) = plane(x.layout, b, c);
                let (go, _) = plane(gl, b, c);
                let add = |i: usize, j: usize, v: T| {
                    let a = &mut dd[wo + i * wr + j * wc];
                    *a = a.add(v);
                };
                unit::weight_grad_plane(&xs[xo..xo + xn], &gs[go..go + on], add, sz, buf);
            }
        }
        return Ok(true);
    }
    for b in 0..n {
        for c in 0..ch {
            let (wo, [wr, wc]) = plane(w.layout, c, 0);
            let tap = |i: usize, j: usize| ws[wo + i * wr + j * wc];
            let (dof, _) = plane(d.layout, b, c);
            if step == 0 {
                let (xo, _) = plane(x.layout, b, c);
                let y = &mut dd[dof..dof + on];
                unit::forward_plane(&xs[xo..xo + xn], y, tap, sz, buf);
            } else {
                let Some((gs, gl)) = gs else {
                    return Ok(false);
                };
                let (go, _) = plane(gl, b, c);
                let dx = &mut dd[dof..dof + xn];
                unit::input_grad_plane(&gs[go..go + on], dx, tap, sz, buf);
            }
        }
    }
    Ok(true)
}

/// For one plane, calls `f(p, r, i, j, qs, c0)` for every output row `p`
/// and tap `(i, j)` whose image row `r` is inside the image, with the
/// output columns `qs` whose image column `q·sw + j·dw - pw` is inside
/// (`c0` that of `qs.start`); in the nesting `p`, `i`, `j`.
fn each_tap(
    g: &Geometry,
    [oh, ow]: [usize; 2],
    mut f: impl FnMut(usize, usize, usize, usize, Range<usize>, usize),
) {
    let [h, w] = g.image;
    let ([sh, sw], [dh, dw], [ph, pw]) = (g.stride, g.dilation, g.padding);
    // The columns of tap `j`, `(q0, q1, image column of q0)`, are the same
    // for every row: computed once for up to `HOISTED` taps (a wider
    // kernel computes them per row).
    const HOISTED: usize = 16;
    let span = |j: usize| {
        let shift = j * dw;
        let q0 = if shift >= pw {
            0
        } else {
            (pw - shift).div_ceil(sw)
        };
        let q1 = if w + pw > shift {
            (w + pw - shift).div_ceil(sw).min(ow)
        } else {
            0
        };
        (q0, q1, (q0 * sw + shift).saturating_sub(pw))
    };
    let kw = g.kernel[1];
    let mut spans = [(0, 0, 0); HOISTED];
    for (j, s) in spans.iter_mut().enumerate().take(kw) {
        *s = span(j);
    }
    for p in 0..oh {
        for i in 0..g.kernel[0] {
            let Some(r) = (p * sh + i * dh).checked_sub(ph).filter(|&r| r < h) else {
                continue;
            };
            for j in 0..kw {
                let (q0, q1, c0) = spans.get(j).copied().unwrap_or_else(|| span(j));
                if q0 < q1 {
                    f(p, r, i, j, q0..q1, c0);
                }
            }
        }
    }
}

/// `(offset, strides)` of `l`'s `[b, c]` plane of a rank-4 layout.
fn plane(l: &Layout, b: usize, c: usize) -> (usize, [usize; 2]) {
    let s = l.strides().as_slice();
    (l.offset() + b * s[0] + c * s[1], [s[2], s[3]])
}

fn forward<T: Scalar>(
    g: &Geometry,
    out: [usize; 2],
    (x, xl): (&[T], &Layout),
    (w, wl): (&[T], &Layout),
    (y, yl): (&mut [T], &Layout),
) {
    let sh = yl.shape().as_slice();
    let sw = g.stride[1];
    for b in 0..sh[0] {
        for c in 0..sh[1] {
            let (xo, [xr, xc]) = plane(xl, b, c);
            let (yo, [yr, yc]) = plane(yl, b, c);
            let (wo, [wr, wc]) = plane(wl, c, 0);
            for p in 0..out[0] {
                for q in 0..out[1] {
                    y[yo + p * yr + q * yc] = T::ZERO;
                }
            }
            each_tap(g, out, |p, r, i, j, qs, c0| {
                let wv = w[wo + i * wr + j * wc];
                let (yrow, xrow) = (yo + p * yr, xo + r * xr);
                if yc == 1 && xc == 1 && sw == 1 {
                    let n = qs.len();
                    let ys = &mut y[yrow + qs.start..yrow + qs.end];
                    for (a, &v) in ys.iter_mut().zip(&x[xrow + c0..xrow + c0 + n]) {
                        *a = a.add(wv.mul(v));
                    }
                } else {
                    for (k, q) in qs.enumerate() {
                        let a = &mut y[yrow + q * yc];
                        *a = a.add(wv.mul(x[xrow + (c0 + k * sw) * xc]));
                    }
                }
            });
        }
    }
}

fn input_grad<T: Scalar>(
    g: &Geometry,
    out: [usize; 2],
    (w, wl): (&[T], &Layout),
    (gr, gl): (&[T], &Layout),
    (d, dl): (&mut [T], &Layout),
) {
    let sh = dl.shape().as_slice();
    let sw = g.stride[1];
    for b in 0..sh[0] {
        for c in 0..sh[1] {
            let (go, [gr_, gc]) = plane(gl, b, c);
            let (dox, [dr, dc]) = plane(dl, b, c);
            let (wo, [wr, wc]) = plane(wl, c, 0);
            for r in 0..sh[2] {
                for col in 0..sh[3] {
                    d[dox + r * dr + col * dc] = T::ZERO;
                }
            }
            each_tap(g, out, |p, r, i, j, qs, c0| {
                let wv = w[wo + i * wr + j * wc];
                let (grow, drow) = (go + p * gr_, dox + r * dr);
                if gc == 1 && dc == 1 && sw == 1 {
                    let n = qs.len();
                    let ds = &mut d[drow + c0..drow + c0 + n];
                    for (a, &v) in ds.iter_mut().zip(&gr[grow + qs.start..grow + qs.end]) {
                        *a = a.add(wv.mul(v));
                    }
                } else {
                    for (k, q) in qs.enumerate() {
                        let a = &mut d[drow + (c0 + k * sw) * dc];
                        *a = a.add(wv.mul(gr[grow + q * gc]));
                    }
                }
            });
        }
    }
}

fn weight_grad<T: Scalar>(
    g: &Geometry,
    out: [usize; 2],
    (x, xl): (&[T], &Layout),
    (gr, gl): (&[T], &Layout),
    (d, dl): (&mut [T], &Layout),
) {
    let (n, ch) = (xl.shape()[0], xl.shape()[1]);
    let sw = g.stride[1];
    for c in 0..ch {
        let (wo, [wr, wc]) = plane(dl, c, 0);
        for i in 0..g.kernel[0] {
            for j in 0..g.kernel[1] {
                d[wo + i * wr + j * wc] = T::ZERO;
            }
        }
        for b in 0..n {
            let (xo, [xr, xc]) = plane(xl, b, c);
            let (go, [gr_, gc]) = plane(gl, b, c);
            each_tap(g, out, |p, r, i, j, qs, c0| {
                let (grow, xrow) = (go + p * gr_, xo + r * xr);
                let mut acc = T::ZERO;
                if gc == 1 && xc == 1 && sw == 1 {
                    let n = qs.len();
                    let gs = &gr[grow + qs.start..grow + qs.end];
                    for (&a, &v) in gs.iter().zip(&x[xrow + c0..xrow + c0 + n]) {
                        acc = acc.add(a.mul(v));
                    }
                } else {
                    for (k, q) in qs.enumerate() {
                        acc = acc.add(gr[grow + q * gc].mul(x[xrow + (c0 + k * sw) * xc]));
                    }
                }
                let a = &mut d[wo + i * wr + j * wc];
                *a = a.add(acc);
            });
        }
    }
}
