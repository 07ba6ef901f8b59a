//! The `im2col` family: a 2-d convolution's (or pooling's) windows laid
//! out as rows (`im2col`, step 0) and its adjoint, the windows summed
//! back into the image (`col2im`, step 1). A declared family (NOTE
//! [Declared families]): this file and its table row are all of it.
//!
//! Parameter words: `[kh, kw, sh, sw, ph, pw, dh, dw, h, w, fill]`
//! (kernel, stride, padding, dilation, the image's height and width, and
//! the padding's value as `f32` bits: 0 for a convolution, `-inf` for a
//! max pool).
//!
//! - `im2col`: `x [N, C, H, W]` to `cols [N, OH, OW, C, KH, KW]` with
//!   `cols[n, p, q, c, i, j] = x[n, c, p·sh + i·dh - ph, q·sw + j·dw - pw]`,
//!   `fill` where that falls in the padding. `OH = (H + 2·ph - dh·(kh-1) - 1)
//!   / sh + 1` (likewise `OW`). A convolution is then one matrix product
//!   of `cols` as `[N·OH·OW, C·KH·KW]` rows.
//! - `col2im`: `cols` to `x`: each element of `x` the sum, in row-major
//!   order of `cols`, of the entries `im2col` copied from it.

use super::KERNEL_DTYPES;
use crate::backend::contract::Operand;
use crate::backend::declared::{Declared, In, Out, Shapes};
use crate::dispatch_in;
use crate::dtype::{DType, Scalar};
use crate::error::{Error, Result};
use crate::layout::{Layout, walk};
use crate::shape::{Dims, checked_numel};
use crate::storage::{typed, typed_mut};

/// The `im2col` family's kernel (steps: `im2col`, `col2im`).
pub struct Im2col;

/// The geometry the parameter words hold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Geometry {
    /// Kernel height and width.
    pub kernel: [usize; 2],
    /// Stride.
    pub stride: [usize; 2],
    /// Zero padding on each side.
    pub padding: [usize; 2],
    /// Dilation.
    pub dilation: [usize; 2],
    /// The image's height and width.
    pub image: [usize; 2],
    /// The value of padded positions (`im2col` only).
    pub fill: f32,
}

impl Geometry {
    /// The parameter words.
    ///
    /// # Errors
    /// A size above `u32::MAX`.
    pub fn words(&self, op: &'static str) -> Result<[u32; 11]> {
        let all = [
            self.kernel,
            self.stride,
            self.padding,
            self.dilation,
            self.image,
        ];
        let mut w = [0u32; 11];
        for (i, v) in all.iter().flatten().enumerate() {
            w[i] = u32::try_from(*v).map_err(|_| Error::InvalidArgument {
                op,
                reason: "a convolution size is above 2^32 - 1; use smaller sizes",
            })?;
        }
        w[10] = self.fill.to_bits();
        Ok(w)
    }

    pub(crate) fn of(params: &[u32]) -> Option<Self> {
        let p = |i: usize| params.get(i).map(|&v| v as usize);
        if params.len() != 11 {
            return None;
        }
        Some(Geometry {
            kernel: [p(0)?, p(1)?],
            stride: [p(2)?, p(3)?],
            padding: [p(4)?, p(5)?],
            dilation: [p(6)?, p(7)?],
            image: [p(8)?, p(9)?],
            fill: f32::from_bits(params[10]),
        })
    }

    /// `(OH, OW)`, checking every size on the way.
    ///
    /// # Errors
    /// A zero kernel, stride or dilation, an overflowing size, or a window
    /// larger than the padded image.
    pub fn out(&self, op: &'static str) -> Result<[usize; 2]> {
        let mut o = [0; 2];
        for (a, out) in o.iter_mut().enumerate() {
            if self.kernel[a] == 0 || self.stride[a] == 0 || self.dilation[a] == 0 {
                return Err(invalid(op, "kernel, stride and dilation must be positive"));
            }
            let extent = (self.kernel[a] - 1)
                .checked_mul(self.dilation[a])
                .and_then(|e| e.checked_add(1));
            let padded = self.padding[a]
                .checked_mul(2)
                .and_then(|p| p.checked_add(self.image[a]));
            let (Some(e), Some(p)) = (extent, padded) else {
                return Err(invalid(
                    op,
                    "a size computed from the arguments overflows usize; use smaller sizes",
                ));
            };
            if p < e {
                return Err(invalid(
                    op,
                    "the (padded) input is smaller than the (dilated) kernel; use a larger input, more padding or a smaller kernel",
                ));
            }
            *out = (p - e) / self.stride[a] + 1;
        }
        Ok(o)
    }
}

fn invalid(op: &'static str, reason: &'static str) -> Error {
    Error::InvalidArgument { op, reason }
}

const IM2COL: &str = "im2col";

impl Declared for Im2col {
    fn arity(step: usize, params: &[u32]) -> Option<(usize, usize)> {
        (step < 2 && params.len() == 11).then_some((1, 1))
    }

    fn outputs(step: usize, params: &[u32], ins: &[Operand<'_>]) -> Result<Shapes> {
        let g = Geometry::of(params).ok_or(invalid(IM2COL, "malformed parameters"))?;
        let [oh, ow] = g.out(IM2COL)?;
        let [kh, kw] = g.kernel;
        let [h, w] = g.image;
        let x = ins.first().ok_or(invalid(IM2COL, "no input"))?;
        let s = x.layout.shape().as_slice();
        let shape = match (step, s) {
            (0, &[n, c, hh, ww]) if [hh, ww] == [h, w] => [n, oh, ow, c, kh, kw],
            (1, &[n, p, q, c, i, j]) if [p, q, i, j] == [oh, ow, kh, kw] => {
                if x.dtype == DType::Bool {
                    return Err(Error::UnsupportedDType {
                        op: "col2im",
                        dtype: x.dtype,
                        supported: "numeric dtypes (col2im adds)",
                    });
                }
                let out = [n, c, h, w];
                checked_numel(IM2COL, &out)?;
                let mut v = Shapes::new();
                let _ = v.push((Dims::from_slice(&out)?, x.dtype));
                return Ok(v);
            }
            _ => {
                return Err(invalid(
                    IM2COL,
                    "the operand's shape does not match the geometry: im2col takes [N, C, H, W], col2im [N, OH, OW, C, KH, KW]",
                ));
            }
        };
        checked_numel(IM2COL, &shape)?;
        let mut v = Shapes::new();
        let _ = v.push((Dims::from_slice(&shape)?, x.dtype));
        Ok(v)
    }

    fn batched(_step: usize) -> bool {
        true // every image of the batch has its own rows
    }

    fn run<const DTYPES: u16>(
        step: usize,
        params: &[u32],
        ins: &[In<'_>],
        outs: &mut [Out<'_>],
        _scratch: &mut [u8],
    ) -> Result<()> {
        let g = Geometry::of(params).ok_or(invalid(IM2COL, "malformed parameters"))?;
        let (Some(a), Some(d)) = (ins.first(), outs.first_mut()) else {
            return Err(invalid(IM2COL, "missing operands"));
        };
        let out = g.out(IM2COL)?;
        // f32 only (NOTE [Declared kernels' dtypes]).
        dispatch_in!(DTYPES & KERNEL_DTYPES, IM2COL, d.dtype, T => {
            let s = typed::<T>(a.bytes)?;
            let o = typed_mut::<T>(d.bytes)?;
            if step == 0 {
                im2col_slices(&g, out, (s, a.layout), (o, d.layout));
            } else {
                col2im_slices(&g, out, (s, a.layout), (o, d.layout));
            }
            Ok(())
        })
    }
}

/// One kernel row of one window: the column entries `(b, p, q, ch, i, ..)`.
struct Row {
    /// Offset of the image row the window's row `i` reads (`None`: the
    /// row is padding).
    x: Option<usize>,
    /// Offset of the first column entry, `j = 0`.
    c: usize,
    /// Offset, inside the image row, of the element tap `j0` reads.
    x_col: usize,
    /// The taps `j0..j1` read the image; the others read padding.
    taps: core::ops::Range<usize>,
}

/// The walk over the column entries, one kernel row at a time, in
/// row-major order of `cols` (so `col2im`'s sums have one order).
struct Walk<'l> {
    x: &'l Layout,
    c: &'l Layout,
}

/// The taps `j` of a kernel row whose column `q·s + j·d - p` falls inside
/// `0..w`, for output column `q` (every product is bounded by the checked
/// padded size).
fn taps(q: usize, s: usize, d: usize, p: usize, w: usize, k: usize) -> core::ops::Range<usize> {
    let start = q * s;
    let j0 = if start >= p {
        0
    } else {
        (p - start).div_ceil(d)
    };
    let j1 = if start >= p + w {
        0
    } else {
        (p + w - start).div_ceil(d).min(k)
    };
    j0.min(j1)..j1
}

impl Walk<'_> {
    fn each_row(&self, g: &Geometry, [oh, ow]: [usize; 2], mut f: impl FnMut(&Row)) {
        let (xs, cs) = (self.x.strides().as_slice(), self.c.strides().as_slice());
        let cshape = self.c.shape().as_slice();
        let (n, c) = (cshape[0], cshape[3]);
        let [h, w] = g.image;
        for b in 0..n {
            for p in 0..oh {
                for q in 0..ow {
                    let t = taps(q, g.stride[1], g.dilation[1], g.padding[1], w, g.kernel[1]);
                    // The image column tap `t.start` reads.
                    let col =
                        (q * g.stride[1] + t.start * g.dilation[1]).saturating_sub(g.padding[1]);
                    for ch in 0..c {
                        let xo = self.x.offset() + b * xs[0] + ch * xs[1];
                        let co = self.c.offset() + b * cs[0] + p * cs[1] + q * cs[2] + ch * cs[3];
                        for i in 0..g.kernel[0] {
                            let y = p * g.stride[0] + i * g.dilation[0];
                            let row = y.checked_sub(g.padding[0]).filter(|&r| r < h);
                            f(&Row {
                                x: row.map(|r| xo + r * xs[2]),
                                c: co + i * cs[4],
                                x_col: col * xs[3],
                                taps: t.clone(),
                            });
                        }
                    }
                }
            }
        }
    }
}

/// `im2col` on slices (NOTE [Slice-level kernels] in `cpu::index`).
pub(crate) fn im2col_slices<T: Scalar>(
    g: &Geometry,
    out: [usize; 2],
    (s, sl): (&[T], &Layout),
    (d, dl): (&mut [T], &Layout),
) {
    let fill = T::from_f64(f64::from(g.fill));
    if let Some(span) = flat_rows(g, sl, dl) {
        flat_walk(
            g,
            out,
            sl,
            |from, t, dst: &mut [T]| {
                match from {
                    Some(from) => {
                        let n = t.end - t.start;
                        if let (Ok(dst), Ok(src)) = (
                            <&mut [T; 3]>::try_from(&mut *dst),
                            <&[T; 3]>::try_from(&s[from..from + n]),
                        ) {
                            *dst = *src; // a whole 3-tap row: three moves
                            return;
                        }
                        dst[..t.start].fill(fill);
                        for (a, v) in dst[t.start..t.end].iter_mut().zip(&s[from..from + n]) {
                            *a = *v;
                        }
                        dst[t.end..].fill(fill);
                    }
                    None => dst.fill(fill),
                }
            },
            &mut d[span],
        );
        return;
    }
    let (kw, cj) = (g.kernel[1], dl.strides()[5]);
    let xj = g.dilation[1] * sl.strides()[3];
    Walk { x: sl, c: dl }.each_row(g, out, |r| {
        let put = |d: &mut [T], j: usize, v: T| d[r.c + j * cj] = v;
        match r.x {
            Some(_) if r.taps.is_empty() => (0..kw).for_each(|j| put(d, j, fill)),
            None => (0..kw).for_each(|j| put(d, j, fill)),
            Some(x) => {
                let from = x + r.x_col;
                (0..r.taps.start).for_each(|j| put(d, j, fill));
                if cj == 1 && xj == 1 {
                    // (A loop, not `copy_from_slice`: a 3-tap row is too
                    // short for a call to `memmove`.)
                    let n = r.taps.len();
                    let to = &mut d[r.c + r.taps.start..r.c + r.taps.end];
                    for (t, f) in to.iter_mut().zip(&s[from..from + n]) {
                        *t = *f;
                    }
                } else {
                    for (k, j) in r.taps.clone().enumerate() {
                        put(d, j, s[from + k * xj]);
                    }
                }
                (r.taps.end..kw).for_each(|j| put(d, j, fill));
            }
        }
    });
}

/// `col2im` on slices: `d` zeroed, then every column entry added to the
/// image element it came from, in row-major order of the columns.
pub(crate) fn col2im_slices<T: Scalar>(
    g: &Geometry,
    out: [usize; 2],
    (s, sl): (&[T], &Layout),
    (d, dl): (&mut [T], &Layout),
) {
    match dl.contiguous_span() {
        Some(span) => d[span].fill(T::ZERO),
        None => walk([dl], |[o]| d[o] = T::ZERO),
    }
    if let Some(span) = flat_rows(g, dl, sl) {
        flat_walk(
            g,
            out,
            dl,
            |from, t, src: &[T]| {
                if let Some(from) = from {
                    let n = t.end - t.start;
                    if let (Ok(to), Ok(src)) = (
                        <&mut [T; 3]>::try_from(&mut d[from..from + n]),
                        <&[T; 3]>::try_from(src),
                    ) {
                        // A whole 3-tap row: three adds, in the general order.
                        to[0] = to[0].add(src[0]);
                        to[1] = to[1].add(src[1]);
                        to[2] = to[2].add(src[2]);
                        return;
                    }
                    for (a, v) in d[from..from + n].iter_mut().zip(&src[t.start..t.end]) {
                        *a = a.add(*v);
                    }
                }
            },
            &s[span],
        );
        return;
    }
    let cj = sl.strides()[5];
    let xj = g.dilation[1] * dl.strides()[3];
    Walk { x: dl, c: sl }.each_row(g, out, |r| {
        if let Some(x) = r.x {
            let to = x + r.x_col;
            for (k, j) in r.taps.clone().enumerate() {
                let t = to + k * xj;
                d[t] = d[t].add(s[r.c + j * cj]);
            }
        }
    });
}

// NOTE [Flat im2col rows]
// The usual operands (an image whose rows are unit-stride, columns
// contiguous, no column dilation) walk the columns front to back as
// `KW`-element chunks: each chunk is one kernel row of one window, read
// from (or added into) one image row. No per-element stride arithmetic;
// a whole 3-tap row is three moves. The order of the columns is the
// general walk's, so `col2im`'s sums are the same sums in the same order.

/// The span of the columns' elements when [`flat_walk`] applies (NOTE
/// [Flat im2col rows]): `x`'s rows unit-stride, the columns contiguous,
/// no column dilation, and neither empty.
fn flat_rows(g: &Geometry, x: &Layout, cols: &Layout) -> Option<core::ops::Range<usize>> {
    let xs = x.strides().as_slice();
    let unit = xs.get(3) == Some(&1) || x.shape().as_slice().get(3) == Some(&1);
    let ok = unit && g.dilation[1] == 1 && x.numel() > 0 && cols.numel() > 0;
    ok.then(|| cols.contiguous_span()).flatten()
}

/// Calls `f(start of the image row's taps, taps, chunk)` for every
/// `KW`-element chunk of `cols` in order; the start is `None` for a row of
/// padding (NOTE [Flat im2col rows]).
fn flat_walk<C>(
    g: &Geometry,
    [oh, ow]: [usize; 2],
    xl: &Layout,
    mut f: impl FnMut(Option<usize>, core::ops::Range<usize>, C),
    cols: impl ChunksOf<Item = C>,
) {
    let xs = xl.strides().as_slice();
    let (n, c) = (xl.shape()[0], xl.shape()[1]);
    let [kh, kw] = g.kernel;
    let [h, w] = g.image;
    let mut chunks = cols.chunks(kw);
    for b in 0..n {
        for p in 0..oh {
            for q in 0..ow {
                let t = taps(q, g.stride[1], 1, g.padding[1], w, kw);
                // The image column tap `t.start` reads.
                let col = (q * g.stride[1] + t.start).saturating_sub(g.padding[1]);
                for ch in 0..c {
                    let xo = xl.offset() + b * xs[0] + ch * xs[1] + col;
                    for i in 0..kh {
                        let Some(chunk) = chunks.next() else {
                            return; // (not reached: the contract sized `cols`)
                        };
                        let y = p * g.stride[0] + i * g.dilation[0];
                        // (A window whose columns are all padding reads
                        // no image row.)
                        let row = y
                            .checked_sub(g.padding[0])
                            .filter(|&r| r < h && !t.is_empty());
                        f(row.map(|r| xo + r * xs[2]), t.clone(), chunk);
                    }
                }
            }
        }
    }
}

/// `chunks_exact` of a shared or a mutable slice, for [`flat_walk`].
trait ChunksOf {
    type Item;
    fn chunks(self, k: usize) -> impl Iterator<Item = Self::Item>;
}

impl<'a, T> ChunksOf for &'a [T] {
    type Item = &'a [T];
    fn chunks(self, k: usize) -> impl Iterator<Item = &'a [T]> {
        self.chunks_exact(k.max(1))
    }
}

impl<'a, T> ChunksOf for &'a mut [T] {
    type Item = &'a mut [T];
    fn chunks(self, k: usize) -> impl Iterator<Item = &'a mut [T]> {
        self.chunks_exact_mut(k.max(1))
    }
}
