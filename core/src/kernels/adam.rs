//! The `adam` family: one Adam or AdamW update of one f32 parameter in a
//! single pass over it (the composed update made about fifteen passes,
//! each a kernel over the whole parameter with an output of its size). A
//! declared family (NOTE [Declared families]) with no gradient.
//!
//! NOTE [One-pass Adam]
//! Step 0 takes the gradient `g` and updates, in place, the parameter `p`
//! and `mv` (`[2, ..]`: the first and second moments `m`, `v`), all of one
//! shape, any layouts: it reads each element of `p`, `m`, `v` and writes it
//! back once, computed with the composed update's operations in its order,
//! each rounded to f32 where a tensor op rounded it (so the two are
//! bit-identical):
//!
//! ```text
//! g' = g + p·wd                            (Adam's L2 penalty)
//! m' = m·β1 + g'·(1 - β1)                  (the scalars rounded to f32)
//! v' = v·β2 + (g'·g')·(1 - β2)
//! den = f32(f64(√v') · (1/√bc2) + eps)     (`affine`, computed in f64)
//! d  = (m' / den) · (lr / bc1) [+ p·(lr·wd)  (AdamW's decoupled decay)]
//! p' = p - d
//! ```
//!
//! On the first step (`first`), `m` and `v` are not read (the composed
//! update's `0·β + x` is exactly `x`), so `mv` may be uninitialised. The
//! step reads its outputs ([`Declared::updates`]); it allocates nothing and
//! holds no decrement, so a step over GPT-2's 124M parameters needs no
//! memory beyond the moments (PyTorch's fused AdamW does the same). The
//! optimizer checks everything that could refuse any parameter's update
//! before the first one runs (NOTE [Writers get in] in `optim`), so a
//! refused step still changes nothing.

use super::KERNEL_DTYPES;
use crate::backend::contract::Operand;
use crate::backend::declared::{Declared, In, Out, Shapes};
use crate::cpu::dtypes;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::walk;
use crate::shape::Dims;
use crate::storage::{typed, typed_mut};

/// The `adam` family's kernel (one step: the update).
pub struct Adam;

const OP: &str = "adam";

fn invalid(reason: &'static str) -> Error {
    Error::InvalidArgument { op: OP, reason }
}

/// An update's hyper-parameters, as the step's words hold them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hyper {
    /// Learning rate.
    pub lr: f64,
    /// β1.
    pub beta1: f64,
    /// β2.
    pub beta2: f64,
    /// Added to the denominator.
    pub eps: f64,
    /// L2 penalty (Adam) or decoupled decay rate (AdamW).
    pub weight_decay: f64,
    /// `1 - β1ᵗ`.
    pub bias_correction1: f64,
    /// `1 - β2ᵗ`.
    pub bias_correction2: f64,
    /// AdamW's decoupled decay (else Adam's L2 penalty).
    pub decoupled: bool,
    /// The parameter's first step: `m` and `v` are zero (and not read).
    pub first: bool,
}

/// Parameter words of a step.
pub const WORDS: usize = 15;

impl Hyper {
    /// The parameter words.
    pub fn words(&self) -> [u32; WORDS] {
        let f = [
            self.lr,
            self.beta1,
            self.beta2,
            self.eps,
            self.weight_decay,
            self.bias_correction1,
            self.bias_correction2,
        ];
        let mut w = [0u32; WORDS];
        for (i, v) in f.iter().enumerate() {
            let b = v.to_bits();
            w[2 * i] = b as u32;
            w[2 * i + 1] = (b >> 32) as u32;
        }
        w[14] = u32::from(self.decoupled) | (u32::from(self.first) << 1);
        w
    }

    /// The hyper-parameters `words` hold; `None` for another word count.
    pub fn of(words: &[u32]) -> Option<Hyper> {
        if words.len() != WORDS {
            return None;
        }
        let f = |i: usize| {
            f64::from_bits(u64::from(words[2 * i]) | (u64::from(words[2 * i + 1]) << 32))
        };
        Some(Hyper {
            lr: f(0),
            beta1: f(1),
            beta2: f(2),
            eps: f(3),
            weight_decay: f(4),
            bias_correction1: f(5),
            bias_correction2: f(6),
            decoupled: words[14] & 1 != 0,
            first: words[14] & 2 != 0,
        })
    }
}

/// The f32 constants of an update (each scalar rounded to f32 where the
/// composed update's `mul_scalar` rounded it).
#[derive(Clone, Copy, Debug)]
pub struct Update {
    b1: f32,
    one_b1: f32,
    b2: f32,
    one_b2: f32,
    inv_sqrt_bc2: f64,
    eps: f64,
    step: f32,
    l2: Option<f32>,
    decay: Option<f32>,
    first: bool,
}

impl Update {
    /// The constants of `h`.
    pub fn of(h: &Hyper) -> Update {
        let wd = h.weight_decay != 0.0;
        Update {
            b1: h.beta1 as f32,
            one_b1: (1.0 - h.beta1) as f32,
            b2: h.beta2 as f32,
            one_b2: (1.0 - h.beta2) as f32,
            inv_sqrt_bc2: 1.0 / libm::sqrt(h.bias_correction2),
            eps: h.eps,
            step: (h.lr / h.bias_correction1) as f32,
            l2: (wd && !h.decoupled).then_some(h.weight_decay as f32),
            decay: (wd && h.decoupled).then_some((h.lr * h.weight_decay) as f32),
            first: h.first,
        }
    }

    /// `(p', m', v')` of one element (NOTE [One-pass Adam]).
    #[inline(always)]
    pub fn at(&self, p: f32, g: f32, m: f32, v: f32) -> (f32, f32, f32) {
        self.at_with(libm::sqrtf, p, g, m, v)
    }

    /// [`Update::at`] with the square root given (IEEE's, correctly
    /// rounded: a host passes the hardware's, which vectorises).
    #[inline(always)]
    pub fn at_with(
        &self,
        sqrt: impl Fn(f32) -> f32,
        p: f32,
        g: f32,
        m: f32,
        v: f32,
    ) -> (f32, f32, f32) {
        let g = match self.l2 {
            Some(wd) => g + p * wd,
            None => g,
        };
        let (m, v) = if self.first {
            (g * self.one_b1, (g * g) * self.one_b2)
        } else {
            (
                m * self.b1 + g * self.one_b1,
                v * self.b2 + (g * g) * self.one_b2,
            )
        };
        let den = (f64::from(sqrt(v)) * self.inv_sqrt_bc2 + self.eps) as f32;
        let d = (m / den) * self.step;
        let d = match self.decay {
            Some(c) => d + p * c,
            None => d,
        };
        (p - d, m, v)
    }

    /// The update over slices of one length, in place: `p`, `m`, `v`
    /// from themselves and `g` (on the first step `m` and `v` are not
    /// read).
    pub fn slices(&self, g: &[f32], p: &mut [f32], m: &mut [f32], v: &mut [f32]) {
        self.slices_with(libm::sqrtf, g, p, m, v);
    }

    /// [`Update::slices`] with the square root given (as [`Update::at_with`]).
    #[inline(always)]
    pub fn slices_with(
        &self,
        sqrt: impl Fn(f32) -> f32 + Copy,
        g: &[f32],
        p: &mut [f32],
        m: &mut [f32],
        v: &mut [f32],
    ) {
        if self.first {
            for (((p, m), v), &g) in p.iter_mut().zip(m).zip(v).zip(g) {
                (*p, *m, *v) = self.at_with(sqrt, *p, g, 0.0, 0.0);
            }
            return;
        }
        for (((p, m), v), &g) in p.iter_mut().zip(m).zip(v).zip(g) {
            (*p, *m, *v) = self.at_with(sqrt, *p, g, *m, *v);
        }
    }
}

impl Declared for Adam {
    fn arity(step: usize, params: &[u32]) -> Option<(usize, usize)> {
        (step == 0 && params.len() == WORDS).then_some((1, 2))
    }

    fn updates(_step: usize) -> bool {
        true
    }

    fn outputs(_step: usize, params: &[u32], ins: &[Operand<'_>]) -> Result<Shapes> {
        Hyper::of(params).ok_or(invalid("malformed parameters"))?;
        let g = ins.first().ok_or(invalid("missing inputs"))?;
        if g.dtype != DType::F32 {
            return Err(Error::UnsupportedDType {
                op: OP,
                dtype: g.dtype,
                supported: "f32 (other dtypes take the composed update)",
            });
        }
        let shape = g.layout.shape().as_slice();
        let mut both = Dims::from_slice(&[2])?;
        for &d in shape {
            both.push(d)?;
        }
        crate::shape::checked_numel(OP, both.as_slice())?;
        let mut v = Shapes::new();
        let _ = v.push((Dims::from_slice(shape)?, DType::F32));
        let _ = v.push((both, DType::F32));
        Ok(v)
    }

    fn run<const DTYPES: u16>(
        _step: usize,
        params: &[u32],
        ins: &[In<'_>],
        outs: &mut [Out<'_>],
        _scratch: &mut [u8],
    ) -> Result<()> {
        if DTYPES & KERNEL_DTYPES & dtypes::F32 == 0 {
            return Err(crate::cpu::select::not_enabled(OP, DType::F32));
        }
        let h = Hyper::of(params).ok_or(invalid("malformed parameters"))?;
        let u = Update::of(&h);
        let [g] = ins else {
            return Err(invalid("missing operands"));
        };
        let [p, mv] = outs else {
            return Err(invalid("missing operands"));
        };
        let (ml, vl) = (mv.layout.select(0, 0)?, mv.layout.select(0, 1)?);
        let gs = typed::<f32>(g.bytes)?;
        let ps = typed_mut::<f32>(p.bytes)?;
        let mvs = typed_mut::<f32>(mv.bytes)?;
        walk([g.layout, p.layout, &ml, &vl], |[ig, ip, im, iv]| {
            let (mm, vv) = if u.first {
                (0.0, 0.0)
            } else {
                (mvs[im], mvs[iv])
            };
            (ps[ip], mvs[im], mvs[iv]) = u.at(ps[ip], gs[ig], mm, vv);
        });
        Ok(())
    }
}
