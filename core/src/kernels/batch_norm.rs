//! The `batch_norm` family: the per-channel passes of a batch
//! normalisation over `[N, C, *]` (every dim after the channel one is a
//! position), each one read of its operands. The tensor layer
//! (`nn::batch_norm_kernel`) composes a training forward from two `sums`
//! and one `affine`, and its backward from one `grad_sums` and one
//! `affine2`; the arithmetic on `[C]` vectors between them is tensor ops.
//! A declared family (NOTE [Declared families]) with no gradient of its
//! own: the op records one node whose formula calls these steps.
//!
//! No parameter words. With `x`, `g` of shape `[N, C, *]` and `M = N·Π*`
//! positions per channel:
//!
//! - step 0, `sums`: `x`, `shift [C]` to `s [2, C]`: `s[0, c] = Σ (x -
//!   shift[c])`, `s[1, c] = Σ (x - shift[c])²`, over `n`, then positions;
//! - step 1, `grad_sums`: `g`, `x`, `shift [C]` to `[2, C]`: `Σ g` and
//!   `Σ g·(x - shift[c])`;
//! - step 2, `affine`: `x`, `coef [2, C]` to `coef[0, c]·x + coef[1, c]`;
//! - step 3, `affine2`: `g`, `x`, `coef [3, C]` to `coef[0, c]·g +
//!   coef[1, c]·x + coef[2, c]`.
//!
//! The sums run in f64, each plane's in [`LANES`] interleaved partial
//! sums added at the end (an order that vectorises), and are rounded to
//! the output's dtype once.

use super::KERNEL_DTYPES;
use crate::backend::contract::Operand;
use crate::backend::declared::{Declared, In, Out, Shapes};
use crate::dispatch_in;
use crate::dtype::{DType, Scalar};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::shape::Dims;
use crate::storage::{typed, typed_mut};

/// The `batch_norm` family's kernel (steps: `sums`, `grad_sums`,
/// `affine`, `affine2`).
pub struct BatchNorm;

const OP: &str = "batch_norm";

/// Interleaved partial sums per plane.
pub const LANES: usize = 8;

fn invalid(reason: &'static str) -> Error {
    Error::InvalidArgument { op: OP, reason }
}

/// `(data operands, the [k, C] vector's rows)` of a step.
fn layout_of(step: usize) -> Option<(usize, usize)> {
    match step {
        0 => Some((1, 1)),
        1 => Some((2, 1)),
        2 => Some((1, 2)),
        3 => Some((2, 3)),
        _ => None,
    }
}

impl Declared for BatchNorm {
    fn arity(step: usize, params: &[u32]) -> Option<(usize, usize)> {
        let (data, _) = layout_of(step)?;
        params.is_empty().then_some((data + 1, 1))
    }

    fn outputs(step: usize, _params: &[u32], ins: &[Operand<'_>]) -> Result<Shapes> {
        let (data, rows) = layout_of(step).ok_or(invalid("no such step"))?;
        let x = ins.first().ok_or(invalid("missing inputs"))?;
        let s = x.layout.shape().as_slice();
        if s.len() < 2 || x.dtype == DType::Bool || !x.dtype.is_float() {
            return Err(invalid("the input must be a float [N, C, *]"));
        }
        for d in &ins[1..data.min(ins.len())] {
            if d.layout.shape().as_slice() != s || d.dtype != x.dtype {
                return Err(invalid("the data operands must have one shape and dtype"));
            }
        }
        let v = ins.get(data).ok_or(invalid("missing inputs"))?;
        let want: &[usize] = if rows == 1 { &[s[1]] } else { &[rows, s[1]] };
        if v.layout.shape().as_slice() != want || v.dtype != x.dtype {
            return Err(invalid(
                "the per-channel operand must be [C] (sums) or [k, C] (affine) of the input's dtype",
            ));
        }
        let out: &[usize] = if step < 2 { &[2, s[1]] } else { s };
        let mut v = Shapes::new();
        let _ = v.push((Dims::from_slice(out)?, x.dtype));
        Ok(v)
    }

    fn batched(step: usize) -> bool {
        step >= 2
    }

    fn summed(step: usize) -> bool {
        step < 2
    }

    fn shared_inputs(step: usize) -> u8 {
        // The per-channel vector, after the data operands.
        layout_of(step).map_or(0, |(data, _)| 1 << data)
    }

    fn run<const DTYPES: u16>(
        step: usize,
        _params: &[u32],
        ins: &[In<'_>],
        outs: &mut [Out<'_>],
        _scratch: &mut [u8],
    ) -> Result<()> {
        let (data, _) = layout_of(step).ok_or(invalid("no such step"))?;
        let (Some(x0), Some(v), Some(d)) = (ins.first(), ins.get(data), outs.first_mut()) else {
            return Err(invalid("missing operands"));
        };
        let x1 = ins.get(1).filter(|_| data == 2);
        // f32 only (NOTE [Declared kernels' dtypes]).
        dispatch_in!(DTYPES & KERNEL_DTYPES, OP, d.dtype, T => {
            let a = (typed::<T>(x0.bytes)?, x0.layout);
            let b = match x1 {
                Some(x) => Some((typed::<T>(x.bytes)?, x.layout)),
                None => None,
            };
            let vs = (typed::<T>(v.bytes)?, v.layout);
            let o = (typed_mut::<T>(d.bytes)?, d.layout);
            if step < 2 {
                sums(a, b, vs, o);
            } else {
                affine(a, b, vs, o);
            }
            Ok(())
        })
    }
}

/// The planes of a `[N, C, *]` layout: `(n, c, offset)` of each, in
/// order, with the positions' layout (one plane's) for walking it.
struct Planes<'l> {
    l: &'l Layout,
    /// Positions per plane.
    m: usize,
    /// Whether every plane is one contiguous run.
    flat: bool,
}

impl<'l> Planes<'l> {
    fn of(l: &'l Layout) -> Planes<'l> {
        let s = l.shape().as_slice();
        let st = l.strides().as_slice();
        let m: usize = s[2..].iter().product();
        // Contiguous positions: the trailing dims row-major with unit step.
        let mut want = 1;
        let mut flat = true;
        for (&d, &t) in s[2..].iter().zip(&st[2..]).rev() {
            if d != 1 && t != want {
                flat = false;
            }
            want *= d;
        }
        Planes { l, m, flat }
    }

    fn offset(&self, n: usize, c: usize) -> usize {
        let st = self.l.strides().as_slice();
        self.l.offset() + n * st[0] + c * st[1]
    }

    /// The element offset of position `i` of a plane (row-major over the
    /// trailing dims), for the strided walk.
    fn at(&self, i: usize) -> usize {
        let s = self.l.shape().as_slice();
        let st = self.l.strides().as_slice();
        let (mut rest, mut off) = (i, 0);
        for (&d, &t) in s[2..].iter().zip(&st[2..]).rev() {
            off += rest % d * t;
            rest /= d;
        }
        off
    }

    /// Plane `(n, c)`'s values as a contiguous slice: the source's own
    /// run, or gathered into `buf`.
    fn read<'a, T: Copy>(
        &self,
        src: &'a [T],
        n: usize,
        c: usize,
        buf: &'a mut alloc::vec::Vec<T>,
    ) -> &'a [T] {
        let o = self.offset(n, c);
        if self.flat {
            return &src[o..o + self.m];
        }
        buf.clear();
        buf.extend((0..self.m).map(|i| src[o + self.at(i)]));
        buf
    }
}

/// Steps 0 and 1: per channel `Σ a` (or `Σ (a - v)`) and `Σ (a - v)·b`
/// (`b` absent: `a` itself).
fn sums<T: Scalar>(
    (a, al): (&[T], &Layout),
    b: Option<(&[T], &Layout)>,
    (v, vl): (&[T], &Layout),
    (d, dl): (&mut [T], &Layout),
) {
    let pa = Planes::of(al);
    let pb = b.map(|(_, l)| Planes::of(l));
    let s = al.shape().as_slice();
    let (n, ch) = (s[0], s[1]);
    let (vs, ds) = (vl.strides()[0], dl.strides().as_slice());
    let (mut ba, mut bb) = (alloc::vec::Vec::new(), alloc::vec::Vec::new());
    for c in 0..ch {
        let shift = v[vl.offset() + c * vs].to_f64();
        let (mut s0, mut s1) = (0.0f64, 0.0f64);
        for k in 0..n {
            let xa = pa.read(a, k, c, &mut ba);
            let (p0, p1) = match (b, &pb) {
                // grad_sums: Σ g, Σ g·(x - shift)
                (Some((bv, _)), Some(pb)) => grad_plane_sums(xa, pb.read(bv, k, c, &mut bb), shift),
                // sums: Σ (x - shift), Σ (x - shift)²
                _ => plane_sums(xa, shift),
            };
            s0 += p0;
            s1 += p1;
        }
        d[dl.offset() + c * ds[1]] = T::from_f64(s0);
        d[dl.offset() + ds[0] + c * ds[1]] = T::from_f64(s1);
    }
}

/// `(Σ (x - shift), Σ (x - shift)²)` over a plane, in [`LANES`]
/// interleaved partial sums (element `i` into lane `i % LANES`), the lanes
/// added in order at the end. Public: a host backend's vector version of
/// these sums is held to it, bit for bit (the same operations per lane in
/// the same order; Rust never fuses a multiply and an add).
pub fn plane_sums<T: Scalar>(xs: &[T], shift: f64) -> (f64, f64) {
    let (mut p0, mut p1) = ([0.0f64; LANES], [0.0f64; LANES]);
    let mut it = xs.chunks_exact(LANES);
    for ch in &mut it {
        for (l, v) in ch.iter().enumerate() {
            let t = v.to_f64() - shift;
            p0[l] += t;
            p1[l] += t * t;
        }
    }
    for (l, v) in it.remainder().iter().enumerate() {
        let t = v.to_f64() - shift;
        p0[l] += t;
        p1[l] += t * t;
    }
    (p0.iter().sum(), p1.iter().sum())
}

/// `(Σ g, Σ g·(x - shift))` over a plane, as [`plane_sums`].
pub fn grad_plane_sums<T: Scalar>(gs: &[T], xs: &[T], shift: f64) -> (f64, f64) {
    let (mut p0, mut p1) = ([0.0f64; LANES], [0.0f64; LANES]);
    let mut it = gs.chunks_exact(LANES).zip(xs.chunks_exact(LANES));
    for (gc, xc) in &mut it {
        for (l, (g, x)) in gc.iter().zip(xc).enumerate() {
            let g = g.to_f64();
            p0[l] += g;
            p1[l] += g * (x.to_f64() - shift);
        }
    }
    let full = gs.len() / LANES * LANES;
    for (l, (g, x)) in gs[full..].iter().zip(&xs[full..]).enumerate() {
        let g = g.to_f64();
        p0[l] += g;
        p1[l] += g * (x.to_f64() - shift);
    }
    (p0.iter().sum(), p1.iter().sum())
}

/// Steps 2 and 3: `coef[0]·a + coef[1]` or `coef[0]·a + coef[1]·b +
/// coef[2]`, per channel.
fn affine<T: Scalar>(
    (a, al): (&[T], &Layout),
    b: Option<(&[T], &Layout)>,
    (v, vl): (&[T], &Layout),
    (d, dl): (&mut [T], &Layout),
) {
    let pa = Planes::of(al);
    let pb = b.map(|(_, l)| Planes::of(l));
    let pd = Planes::of(dl);
    let s = al.shape().as_slice();
    let (n, ch) = (s[0], s[1]);
    let vst = vl.strides().as_slice();
    let coef = |r: usize, c: usize| v[vl.offset() + r * vst[0] + c * vst[1]];
    let (mut ba, mut bb) = (alloc::vec::Vec::new(), alloc::vec::Vec::new());
    for k in 0..n {
        for c in 0..ch {
            let xa = pa.read(a, k, c, &mut ba);
            let o = pd.offset(k, c);
            let (c0, c1) = (coef(0, c), coef(1, c));
            match (b, &pb) {
                (Some((bv, _)), Some(pb)) => {
                    let xb = pb.read(bv, k, c, &mut bb);
                    let c2 = coef(2, c);
                    if pd.flat {
                        let out = &mut d[o..o + pd.m];
                        for ((y, &g), &x) in out.iter_mut().zip(xa).zip(xb) {
                            *y = c0.mul(g).add(c1.mul(x)).add(c2);
                        }
                    } else {
                        for (i, (&g, &x)) in xa.iter().zip(xb).enumerate() {
                            d[o + pd.at(i)] = c0.mul(g).add(c1.mul(x)).add(c2);
                        }
                    }
                }
                _ => {
                    if pd.flat {
                        let out = &mut d[o..o + pd.m];
                        for (y, &x) in out.iter_mut().zip(xa) {
                            *y = c0.mul(x).add(c1);
                        }
                    } else {
                        for (i, &x) in xa.iter().enumerate() {
                            d[o + pd.at(i)] = c0.mul(x).add(c1);
                        }
                    }
                }
            }
        }
    }
}
