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

    fn of(params: &[u32]) -> Option<Self> {
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
        dispatch_in!(DTYPES, IM2COL, d.dtype, T => {
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

/// The 4 image and 6 column strides and offsets, and the sizes.
struct Walk<'l> {
    x: &'l Layout,
    c: &'l Layout,
}

impl Walk<'_> {
    /// Calls `f(x_offset or None for padding, cols_offset)` for every
    /// column entry, in row-major order of `cols`.
    fn each(&self, g: &Geometry, [oh, ow]: [usize; 2], mut f: impl FnMut(Option<usize>, usize)) {
        let (xs, cs) = (self.x.strides().as_slice(), self.c.strides().as_slice());
        let cshape = self.c.shape().as_slice();
        let (n, c) = (cshape[0], cshape[3]);
        let [kh, kw] = g.kernel;
        let [h, w] = g.image;
        for b in 0..n {
            for p in 0..oh {
                for q in 0..ow {
                    for ch in 0..c {
                        let xo = self.x.offset() + b * xs[0] + ch * xs[1];
                        let co = self.c.offset() + b * cs[0] + p * cs[1] + q * cs[2] + ch * cs[3];
                        for i in 0..kh {
                            // In padded coordinates; bounded by the checked
                            // padded size.
                            let y = p * g.stride[0] + i * g.dilation[0];
                            let row = y.checked_sub(g.padding[0]).filter(|&r| r < h);
                            for j in 0..kw {
                                let x = q * g.stride[1] + j * g.dilation[1];
                                let col = x.checked_sub(g.padding[1]).filter(|&v| v < w);
                                let at = match (row, col) {
                                    (Some(r), Some(v)) => Some(xo + r * xs[2] + v * xs[3]),
                                    _ => None,
                                };
                                f(at, co + i * cs[4] + j * cs[5]);
                            }
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
    Walk { x: sl, c: dl }.each(g, out, |from, to| {
        d[to] = from.map_or(fill, |f| s[f]);
    });
}

/// `col2im` on slices: `d` zeroed, then every column entry added to the
/// image element it came from.
pub(crate) fn col2im_slices<T: Scalar>(
    g: &Geometry,
    out: [usize; 2],
    (s, sl): (&[T], &Layout),
    (d, dl): (&mut [T], &Layout),
) {
    walk([dl], |[o]| d[o] = T::ZERO);
    Walk { x: dl, c: sl }.each(g, out, |to, from| {
        if let Some(t) = to {
            d[t] = d[t].add(s[from]);
        }
    });
}
