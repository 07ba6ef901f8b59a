//! The `conv2d` family: a dense or grouped 2-d convolution and its two
//! gradients, one image at a time through that image's columns only (an
//! `im2col` of the whole batch holds `KH·KW` copies of every activation,
//! 19 MB for ResNet-8's first block at batch 32, and streams them through
//! memory three times per step; one image's columns stay in cache). A
//! declared family (NOTE [Declared families]) with two inputs; its row's
//! `grad: [1]` names step 1 as the input's gradient and step 2 as the
//! weight's.
//!
//! Parameter words: an [`im2col` geometry](super::im2col::Geometry)
//! (`fill` unused) and the group count `G`.
//!
//! With `x [N, C, H, W]`, `w [O, C/G, KH, KW]`, `K = C/G·KH·KW` rows per
//! group and `P = OH·OW`, image `n`'s columns are `cols[c·KH·KW + i·KW + j,
//! p·OW + q] = x[n, c, p·sh + i·dh - ph, q·sw + j·dw - pw]` (zero in the
//! padding), and output channel `o` belongs to group `o / (O/G)`:
//!
//! - step 0: `x`, `w` to `y [N, O, OH, OW]`: `y[n, o, ·] = Σ_k w[o, k] ·
//!   cols[g·K + k, ·]`, `k` ascending from zero;
//! - step 1: `x`, `w`, `gy [N, O, OH, OW]` to `dx [N, C, H, W]`:
//!   `dcols[g·K + k, ·] = Σ_o w[o, k] · gy[n, o, ·]` over the group's `o`
//!   ascending, then every `dcols` entry added (in row-major order of
//!   `dcols`) into the element of `dx` its `cols` entry was read from;
//! - step 2: `x`, `w`, `gy` to `dw [O, C/G, KH, KW]`: `dw[o, k] = Σ_n Σ_p
//!   gy[n, o, p] · cols_n[g·K + k, p]`, `n` then `p` ascending.
//!
//! A threaded backend may run the products with a blocked GEMM (another
//! summation order, the same sums): [`image_to_cols`] and
//! [`cols_to_image`] are the column walks it shares.

use super::KERNEL_DTYPES;
use super::im2col::Geometry;
use crate::backend::contract::Operand;
use crate::backend::declared::{Declared, In, Out, Shapes};
use crate::dispatch_in;
use crate::dtype::{DType, Scalar};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::shape::{Dims, checked_numel};
use crate::storage::{typed, typed_mut};
use core::ops::Range;

/// The `conv2d` family's kernel (steps: forward, input gradient, weight
/// gradient).
pub struct Conv2d;

const OP: &str = "conv2d";

fn invalid(reason: &'static str) -> Error {
    Error::InvalidArgument { op: OP, reason }
}

/// The geometry and group count the parameter words hold; `None` for
/// malformed words (a word count other than 12, zero groups).
pub fn params_of(params: &[u32]) -> Option<(Geometry, usize)> {
    let (&groups, geom) = params.split_last()?;
    let groups = usize::try_from(groups).ok().filter(|&g| g > 0)?;
    (geom.len() == 11).then_some(())?;
    Some((Geometry::of(geom)?, groups))
}

/// The sizes of one call, read from its checked operands.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// Batch, input channels, output channels, groups.
    pub n: usize,
    /// Input channels.
    pub c: usize,
    /// Output channels.
    pub o: usize,
    /// Groups.
    pub groups: usize,
    /// `(OH, OW)`.
    pub out: [usize; 2],
}

impl Sizes {
    /// Column rows of one group, `C/G·KH·KW`.
    pub fn k(&self, g: &Geometry) -> usize {
        self.c / self.groups * g.kernel[0] * g.kernel[1]
    }
    /// Output positions `OH·OW`.
    pub fn p(&self) -> usize {
        self.out[0] * self.out[1]
    }
}

/// The shape checks of [`Declared::outputs`], returning the sizes.
fn sizes(step: usize, params: &[u32], ins: &[Operand<'_>]) -> Result<(Geometry, Sizes)> {
    let (g, groups) = params_of(params).ok_or(invalid("malformed parameters"))?;
    let out = g.out(OP)?;
    let (Some(x), Some(w)) = (ins.first(), ins.get(1)) else {
        return Err(invalid("missing inputs"));
    };
    let [n, c, h, wd] = *x.layout.shape().as_slice() else {
        return Err(invalid("the input must be [N, C, H, W]"));
    };
    if [h, wd] != g.image {
        return Err(invalid("the input's size is not the geometry's"));
    }
    let [o, cg, kh, kw] = *w.layout.shape().as_slice() else {
        return Err(invalid("the weight must be [O, C/groups, KH, KW]"));
    };
    if cg.checked_mul(groups) != Some(c) || o % groups != 0 || [kh, kw] != g.kernel {
        return Err(invalid(
            "the weight must be [O, C/groups, KH, KW] with O divisible by groups",
        ));
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
        if gr.layout.shape().as_slice() != [n, o, out[0], out[1]] || gr.dtype != x.dtype {
            return Err(invalid(
                "the gradient must have the output's shape and the input's dtype",
            ));
        }
    }
    Ok((
        g,
        Sizes {
            n,
            c,
            o,
            groups,
            out,
        },
    ))
}

impl Declared for Conv2d {
    fn arity(step: usize, params: &[u32]) -> Option<(usize, usize)> {
        match (step, params.len()) {
            (0, 12) => Some((2, 1)),
            (1 | 2, 12) => Some((3, 1)),
            _ => None,
        }
    }

    fn outputs(step: usize, params: &[u32], ins: &[Operand<'_>]) -> Result<Shapes> {
        let (g, s) = sizes(step, params, ins)?;
        let [kh, kw] = g.kernel;
        let [h, w] = g.image;
        let shape = match step {
            0 => [s.n, s.o, s.out[0], s.out[1]],
            1 => [s.n, s.c, h, w],
            _ => [s.o, s.c / s.groups, kh, kw],
        };
        checked_numel(OP, &shape)?;
        let dtype = ins.first().map_or(DType::F32, |x| x.dtype);
        let mut v = Shapes::new();
        let _ = v.push((Dims::from_slice(&shape)?, dtype));
        Ok(v)
    }

    fn batched(step: usize) -> bool {
        step < 2 // (the weight's gradient sums over the batch)
    }

    fn summed(step: usize) -> bool {
        step == 2
    }

    fn shared_inputs(_step: usize) -> u8 {
        0b10 // the weight: every range of the batch reads it whole
    }

    fn scratch(step: usize, params: &[u32], ops: &[Operand<'_>]) -> Option<usize> {
        // One image's columns and one plane: `(C·KH·KW + 1)·P` elements.
        let (g, s) = sizes(step, params, ops).ok()?;
        let rows = s.c.checked_mul(g.kernel[0])?.checked_mul(g.kernel[1])?;
        rows.checked_add(1)?
            .checked_mul(s.p())?
            .checked_mul(core::mem::size_of::<f32>())
    }

    fn run<const DTYPES: u16>(
        step: usize,
        params: &[u32],
        ins: &[In<'_>],
        outs: &mut [Out<'_>],
        scratch: &mut [u8],
    ) -> Result<()> {
        let mut ops: heapless::Vec<Operand<'_>, 3> = heapless::Vec::new();
        for i in ins {
            ops.push(Operand {
                layout: i.layout,
                dtype: i.dtype,
                buffer: 0,
            })
            .map_err(|_| invalid("too many operands"))?;
        }
        let (g, s) = sizes(step, params, &ops)?;
        let (Some(x), Some(w), Some(d)) = (ins.first(), ins.get(1), outs.first_mut()) else {
            return Err(invalid("missing operands"));
        };
        // f32 only (NOTE [Declared kernels' dtypes]).
        dispatch_in!(DTYPES & KERNEL_DTYPES, OP, d.dtype, T => {
            let rows = s.c * g.kernel[0] * g.kernel[1];
            let need = (rows + 1) * s.p();
            let buf = typed_mut::<T>(scratch)
                .ok()
                .and_then(|b| b.get_mut(..need))
                .ok_or(invalid("the scratch buffer is smaller than the kernel asked"))?;
            let (cols, plane) = buf.split_at_mut(rows * s.p());
            let xs = (typed::<T>(x.bytes)?, x.layout);
            let ws = (typed::<T>(w.bytes)?, w.layout);
            let o = (typed_mut::<T>(d.bytes)?, d.layout);
            match (step, ins.get(2)) {
                (0, _) => forward(&g, &s, xs, ws, o, cols, plane),
                (1, Some(gr)) => {
                    input_grad(&g, &s, ws, (typed::<T>(gr.bytes)?, gr.layout), o, cols, plane)
                }
                (_, Some(gr)) => {
                    weight_grad(&g, &s, xs, (typed::<T>(gr.bytes)?, gr.layout), o, cols, plane)
                }
                _ => return Err(invalid("missing operands")),
            }
            Ok(())
        })
    }
}

/// Where one image lies: its first element and its channel, row and
/// column strides.
#[derive(Clone, Copy, Debug)]
pub struct Image {
    /// Offset of element `[c = 0, r = 0, q = 0]`.
    pub offset: usize,
    /// Channel, row and column strides.
    pub strides: [usize; 3],
}

impl Image {
    /// Image `n` of a rank-4 layout.
    pub fn of(l: &Layout, n: usize) -> Image {
        let s = l.strides().as_slice();
        Image {
            offset: l.offset() + n * s[0],
            strides: [s[1], s[2], s[3]],
        }
    }
}

/// The output columns `q0..q1` whose image column `q·sw + j·dw - pw`
/// (for tap `j`) lies inside the image, and the image column of `q0`.
fn span(g: &Geometry, ow: usize, j: usize) -> (usize, usize, usize) {
    let (sw, pw, w) = (g.stride[1], g.padding[1], g.image[1]);
    let shift = j * g.dilation[1];
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
    (q0.min(q1), q1, (q0 * sw + shift).saturating_sub(pw))
}

/// Calls `f(row of cols, output row p, image row, (q0, q1, first image
/// column))` for every row segment of one image's columns, in row-major
/// order of `cols [c·KH·KW, OH·OW]`; the image row is `None` where the
/// segment lies in the padding.
fn each_segment(
    g: &Geometry,
    [oh, ow]: [usize; 2],
    c: usize,
    mut f: impl FnMut(usize, usize, Option<usize>, (usize, usize, usize)),
) {
    let [kh, kw] = g.kernel;
    let mut k = 0;
    for _ch in 0..c {
        for i in 0..kh {
            for j in 0..kw {
                let sp = span(g, ow, j);
                for p in 0..oh {
                    let r = (p * g.stride[0] + i * g.dilation[0])
                        .checked_sub(g.padding[0])
                        .filter(|&r| r < g.image[0] && sp.0 < sp.1);
                    f(k, p, r, sp);
                }
                k += 1;
            }
        }
    }
}

/// Image `x`'s columns `[c·KH·KW, OH·OW]` into the contiguous `cols`
/// (the first `c·KH·KW·OH·OW` elements), zero in the padding.
pub fn image_to_cols<T: Scalar>(
    g: &Geometry,
    out: [usize; 2],
    c: usize,
    x: (&[T], Image),
    cols: &mut [T],
) {
    let (xs, im) = x;
    let [rs, cs] = [im.strides[1], im.strides[2]];
    if let Some(rows) = Sweep::of(g, out, im) {
        rows.each(c, |k, run, s, edges| {
            let row = &mut cols[k * rows.p..(k + 1) * rows.p];
            row[..run.start].fill(T::ZERO);
            row[run.end..].fill(T::ZERO);
            row[run.clone()].copy_from_slice(&xs[s..s + run.len()]);
            for (a, b) in edges {
                row[a..b].fill(T::ZERO);
            }
        });
        return;
    }
    let (ow, p_all, kk) = (out[1], out[0] * out[1], g.kernel[0] * g.kernel[1]);
    let step = g.stride[1] * cs;
    each_segment(g, out, c, |k, p, r, (q0, q1, c0)| {
        let seg = &mut cols[k * p_all + p * ow..k * p_all + (p + 1) * ow];
        let Some(r) = r else {
            seg.fill(T::ZERO);
            return;
        };
        seg[..q0].fill(T::ZERO);
        seg[q1..].fill(T::ZERO);
        let from = im.offset + (k / kk) * im.strides[0] + r * rs + c0 * cs;
        if step == 1 {
            seg[q0..q1].copy_from_slice(&xs[from..from + (q1 - q0)]);
        } else {
            for (t, a) in seg[q0..q1].iter_mut().enumerate() {
                *a = xs[from + t * step];
            }
        }
    });
}

/// Every entry of `cols [c·KH·KW, OH·OW]` added, in row-major order, into
/// the element of image `dx` that [`image_to_cols`] read it from (`dx` is
/// not zeroed here). `cols`' entries that lie in the padding may be
/// zeroed on the way (NOTE [Swept columns]).
pub fn cols_to_image<T: Scalar>(
    g: &Geometry,
    out: [usize; 2],
    c: usize,
    cols: &mut [T],
    dx: (&mut [T], Image),
) {
    let (ds, im) = dx;
    let [rs, cs] = [im.strides[1], im.strides[2]];
    if let Some(rows) = Sweep::of(g, out, im) {
        rows.each(c, |k, run, s, edges| {
            let row = &mut cols[k * rows.p..(k + 1) * rows.p];
            // The padding's entries inside the run add nothing.
            for (a, b) in edges {
                row[a..b].fill(T::ZERO);
            }
            for (a, &v) in ds[s..s + run.len()].iter_mut().zip(&row[run]) {
                *a = a.add(v);
            }
        });
        return;
    }
    let (ow, p_all, kk) = (out[1], out[0] * out[1], g.kernel[0] * g.kernel[1]);
    let step = g.stride[1] * cs;
    each_segment(g, out, c, |k, p, r, (q0, q1, c0)| {
        let Some(r) = r else {
            return;
        };
        let seg = &cols[k * p_all + p * ow + q0..k * p_all + p * ow + q1];
        let to = im.offset + (k / kk) * im.strides[0] + r * rs + c0 * cs;
        if step == 1 {
            for (a, &v) in ds[to..to + seg.len()].iter_mut().zip(seg) {
                *a = a.add(v);
            }
        } else {
            for (t, &v) in seg.iter().enumerate() {
                let a = &mut ds[to + t * step];
                *a = a.add(v);
            }
        }
    });
}

// NOTE [Swept columns]
// Where one output row's step through the image (`sh` image rows) is
// exactly `OW` elements and the columns step by one (stride 1 across,
// unit column stride, `sh · row stride = OW`: a "same" convolution of a
// contiguous image), a whole column row `k` is one run of the image
// plane, shifted by the tap: `cols[k, t] = x[c, t + shift]` from the
// first output position whose tap lies inside the image to the last.
// So each row is one copy (or one add) of about `OH·OW` elements instead
// of `OH` copies of `OW`, and only the padding's entries inside the run
// (for a 3-tap kernel, one column at one end of each output row) are
// fixed afterwards. Each image element receives at most one entry of a
// row, so `cols_to_image`'s sums keep their order.

/// A walk of one image's column rows as runs (NOTE [Swept columns]).
struct Sweep<'g> {
    g: &'g Geometry,
    out: [usize; 2],
    im: Image,
    /// `OH·OW`.
    p: usize,
    /// [`span`] of each tap `j`.
    spans: [(usize, usize, usize); MAX_SWEPT_TAPS],
}

/// The widest kernel the sweep takes.
const MAX_SWEPT_TAPS: usize = 8;

impl<'g> Sweep<'g> {
    fn of(g: &'g Geometry, out: [usize; 2], im: Image) -> Option<Sweep<'g>> {
        let [_, rs, cs] = im.strides;
        let fits = g.stride[1] == 1
            && cs == 1
            && g.stride[0].checked_mul(rs) == Some(out[1])
            && g.kernel[1] <= MAX_SWEPT_TAPS;
        if !fits {
            return None;
        }
        let mut spans = [(0, 0, 0); MAX_SWEPT_TAPS];
        for (j, sp) in spans.iter_mut().enumerate().take(g.kernel[1]) {
            *sp = span(g, out[1], j);
        }
        Some(Sweep {
            g,
            out,
            im,
            p: out[0] * out[1],
            spans,
        })
    }

    /// Calls `f(k, the run in row k, the run's first image element, the
    /// padding's entries inside the run)` for every column row `k` of `c`
    /// channels, in order; a row with no entry inside the image gets an
    /// empty run.
    fn each(&self, c: usize, mut f: impl FnMut(usize, Range<usize>, usize, Edges)) {
        let g = self.g;
        let [oh, ow] = self.out;
        let [kh, kw] = g.kernel;
        let mut k = 0;
        for ch in 0..c {
            for i in 0..kh {
                // The output rows whose tap row `i` lies inside the image.
                let shift = i * g.dilation[0];
                let p0 = if shift >= g.padding[0] {
                    0
                } else {
                    (g.padding[0] - shift).div_ceil(g.stride[0])
                };
                let p1 = if g.image[0] + g.padding[0] > shift {
                    (g.image[0] + g.padding[0] - shift)
                        .div_ceil(g.stride[0])
                        .min(oh)
                } else {
                    0
                };
                for &(q0, q1, c0) in &self.spans[..kw] {
                    if p0 >= p1 || q0 >= q1 {
                        f(k, 0..0, 0, Edges::none());
                        k += 1;
                        continue;
                    }
                    // From (p0, q0) to (p1 - 1, q1 - 1), inclusive.
                    let run = p0 * ow + q0..(p1 - 1) * ow + q1;
                    let r0 = p0 * g.stride[0] + shift - g.padding[0];
                    let s = self.im.offset + ch * self.im.strides[0] + r0 * self.im.strides[1] + c0;
                    let edges = Edges {
                        rows: p0..p1 - 1,
                        ow,
                        q0,
                        q1,
                    };
                    f(k, run, s, edges);
                    k += 1;
                }
            }
        }
    }
}

/// The padding's entries inside a swept run: for each output row but the
/// run's last, columns `q1..OW` of it and `0..q0` of the next.
struct Edges {
    rows: Range<usize>,
    ow: usize,
    q0: usize,
    q1: usize,
}

impl Edges {
    fn none() -> Edges {
        Edges {
            rows: 0..0,
            ow: 0,
            q0: 0,
            q1: 0,
        }
    }
}

impl Iterator for Edges {
    type Item = (usize, usize);
    fn next(&mut self) -> Option<(usize, usize)> {
        let p = self.rows.next()?;
        Some((p * self.ow + self.q1, (p + 1) * self.ow + self.q0))
    }
}

/// `(offset, [row stride, column stride])` of plane `[n, ch]`.
fn plane_at(l: &Layout, n: usize, ch: usize) -> (usize, [usize; 2]) {
    let s = l.strides().as_slice();
    (l.offset() + n * s[0] + ch * s[1], [s[2], s[3]])
}

/// Plane `[n, ch]` of `src` (`rows x cols`) as a contiguous slice: itself
/// where it is one, else copied into `buf`.
fn read_plane<'a, T: Scalar>(
    (src, l): (&'a [T], &Layout),
    n: usize,
    ch: usize,
    [r, q]: [usize; 2],
    buf: &'a mut [T],
) -> &'a [T] {
    let (off, [rs, cs]) = plane_at(l, n, ch);
    if cs == 1 && (rs == q || r <= 1) {
        return &src[off..off + r * q];
    }
    for a in 0..r {
        for b in 0..q {
            buf[a * q + b] = src[off + a * rs + b * cs];
        }
    }
    &buf[..r * q]
}

/// The offset of `w[o, k]` (`k` a column row of the group).
fn weight_at(wl: &Layout, g: &Geometry, o: usize, k: usize) -> usize {
    let s = wl.strides().as_slice();
    let [kh, kw] = g.kernel;
    let (cl, i, j) = (k / (kh * kw), k / kw % kh, k % kw);
    wl.offset() + o * s[0] + cl * s[1] + i * s[2] + j * s[3]
}

fn forward<T: Scalar>(
    g: &Geometry,
    s: &Sizes,
    (x, xl): (&[T], &Layout),
    (w, wl): (&[T], &Layout),
    (y, yl): (&mut [T], &Layout),
    cols: &mut [T],
    acc: &mut [T],
) {
    let (k, p, og) = (s.k(g), s.p(), s.o / s.groups);
    for n in 0..s.n {
        image_to_cols(g, s.out, s.c, (x, Image::of(xl, n)), cols);
        for o in 0..s.o {
            let base = o / og * k;
            acc.fill(T::ZERO);
            for kk in 0..k {
                let wv = w[weight_at(wl, g, o, kk)];
                let row = &cols[(base + kk) * p..(base + kk + 1) * p];
                for (a, &v) in acc.iter_mut().zip(row) {
                    *a = a.add(wv.mul(v));
                }
            }
            let (off, [rs, cs]) = plane_at(yl, n, o);
            for (t, &v) in acc.iter().enumerate() {
                y[off + t / s.out[1] * rs + t % s.out[1] * cs] = v;
            }
        }
    }
}

fn input_grad<T: Scalar>(
    g: &Geometry,
    s: &Sizes,
    (w, wl): (&[T], &Layout),
    gy: (&[T], &Layout),
    (dx, dl): (&mut [T], &Layout),
    dcols: &mut [T],
    buf: &mut [T],
) {
    let (k, p, og) = (s.k(g), s.p(), s.o / s.groups);
    let [h, wd] = g.image;
    for n in 0..s.n {
        dcols.fill(T::ZERO);
        for o in 0..s.o {
            let base = o / og * k;
            let gp = read_plane(gy, n, o, s.out, buf);
            for kk in 0..k {
                let wv = w[weight_at(wl, g, o, kk)];
                let row = &mut dcols[(base + kk) * p..(base + kk + 1) * p];
                for (a, &v) in row.iter_mut().zip(gp) {
                    *a = a.add(wv.mul(v));
                }
            }
        }
        let im = Image::of(dl, n);
        for ch in 0..s.c {
            for r in 0..h {
                for q in 0..wd {
                    dx[im.offset + ch * im.strides[0] + r * im.strides[1] + q * im.strides[2]] =
                        T::ZERO;
                }
            }
        }
        cols_to_image(g, s.out, s.c, dcols, (dx, im));
    }
}

fn weight_grad<T: Scalar>(
    g: &Geometry,
    s: &Sizes,
    (x, xl): (&[T], &Layout),
    gy: (&[T], &Layout),
    (dw, wl): (&mut [T], &Layout),
    cols: &mut [T],
    buf: &mut [T],
) {
    let (k, p, og) = (s.k(g), s.p(), s.o / s.groups);
    for o in 0..s.o {
        for kk in 0..k {
            dw[weight_at(wl, g, o, kk)] = T::ZERO;
        }
    }
    for n in 0..s.n {
        image_to_cols(g, s.out, s.c, (x, Image::of(xl, n)), cols);
        for o in 0..s.o {
            let base = o / og * k;
            let gp = read_plane(gy, n, o, s.out, buf);
            for kk in 0..k {
                let row = &cols[(base + kk) * p..(base + kk + 1) * p];
                let at = weight_at(wl, g, o, kk);
                let mut a = dw[at];
                for (&gv, &v) in gp.iter().zip(row) {
                    a = a.add(gv.mul(v));
                }
                dw[at] = a;
            }
        }
    }
}
