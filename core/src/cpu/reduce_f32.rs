//! f32 accumulation for the reduction kernels (NOTE [f32 accumulation]):
//! a Kahan-compensated f32 accumulator and an f32 softmax, used only by a
//! backend built with `F32_ACC`.

use super::{Acc, Elem};
use crate::backend::{Dst, ReduceOp, Src};
use crate::cpu::elementwise::aliases;
use crate::cpu::strided::Strided;
use crate::error::Result;
use crate::storage::{typed, typed_mut};

/// An f32 accumulator with Kahan-compensated sums, for f32 sources on a
/// backend built with `F32_ACC` (NOTE [f32 accumulation]).
#[derive(Clone, Copy)]
#[repr(C)]
pub(crate) struct Kahan32 {
    pub(super) sum: f32,
    /// The low-order part lost by the last addition.
    pub(super) comp: f32,
}

impl Acc for Kahan32 {
    fn load<T: Elem>(x: T) -> Self {
        Kahan32 {
            sum: x.to_f32(),
            comp: 0.0,
        }
    }
    fn store<T: Elem>(self) -> T {
        T::from_f32(self.sum)
    }
    fn identity(op: ReduceOp) -> Self {
        let sum = match op {
            ReduceOp::Sum => 0.0,
            ReduceOp::Prod => 1.0,
            ReduceOp::Max => f32::NEG_INFINITY,
            ReduceOp::Min => f32::INFINITY,
        };
        Kahan32 { sum, comp: 0.0 }
    }
    fn combine(self, op: ReduceOp, x: Self) -> Self {
        match op {
            ReduceOp::Sum => kahan_add(self, x.sum),
            _ => Kahan32 {
                sum: f32::combine(self.sum, op, x.sum),
                comp: 0.0,
            },
        }
    }
}

/// One compensated addition: `acc + x` keeping the rounding error in `comp`.
fn kahan_add(acc: Kahan32, x: f32) -> Kahan32 {
    let y = x - acc.comp;
    let t = acc.sum + y;
    Kahan32 {
        comp: (t - acc.sum) - y,
        sum: t,
    }
}

impl Acc for f32 {
    fn load<T: Elem>(x: T) -> Self {
        x.to_f32()
    }
    fn store<T: Elem>(self) -> T {
        T::from_f32(self)
    }
    fn identity(op: ReduceOp) -> Self {
        Kahan32::identity(op).sum
    }
    fn combine(self, op: ReduceOp, x: Self) -> Self {
        match op {
            ReduceOp::Sum => self + x,
            ReduceOp::Prod => self * x,
            ReduceOp::Max => {
                if x.is_nan() || x > self {
                    x
                } else {
                    self
                }
            }
            ReduceOp::Min => {
                if x.is_nan() || x < self {
                    x
                } else {
                    self
                }
            }
        }
    }
}

/// One softmax row in f32 arithmetic (NOTE [One softmax row]): `expf`,
/// `logf` and a Kahan-compensated sum.
#[inline]
pub(crate) fn softmax_row_f32(
    len: usize,
    log: bool,
    x: impl Fn(usize) -> f32,
    mut y: impl FnMut(usize, f32),
) {
    let mut m = f32::NEG_INFINITY;
    for k in 0..len {
        let v = x(k);
        if v.is_nan() || v > m {
            m = v;
        }
    }
    let mut sum = Kahan32 {
        sum: 0.0,
        comp: 0.0,
    };
    for k in 0..len {
        sum = kahan_add(sum, libm::expf(x(k) - m));
    }
    if log {
        let log_sum = libm::logf(sum.sum);
        for k in 0..len {
            y(k, (x(k) - m) - log_sum);
        }
    } else {
        for k in 0..len {
            y(k, libm::expf(x(k) - m) / sum.sum);
        }
    }
}

/// Softmax of f32 rows in f32 arithmetic (NOTE [f32 accumulation]): the
/// same steps as [`softmax_typed`], with `expf`/`logf` and a compensated
/// row sum.
pub(super) fn softmax_f32(
    name: &'static str,
    src: Src<'_>,
    dim: usize,
    log: bool,
    dst: Dst<'_>,
) -> Result<()> {
    let gs = if aliases(&src, &dst) {
        None
    } else {
        Some(src.storage.read(name)?)
    };
    let mut gd = dst.storage.write(name)?;
    let d = typed_mut::<f32>(gd.bytes_mut())?;
    let s = gs.as_ref().map(|g| typed::<f32>(g.bytes())).transpose()?;
    let v = [
        Strided::within(name, src.layout, s.map_or(d.len(), <[f32]>::len))?,
        Strided::within(name, dst.layout, d.len())?,
    ];
    let pd = d.as_mut_ptr();
    let pa = s.map_or(pd.cast_const(), <[f32]>::as_ptr);
    // SAFETY: NOTE [One softmax walk]: both views lie inside their slices,
    // and the source is another storage's or exactly the destination
    // (read through its pointer); `dim` passed the contract.
    unsafe { super::softmax_strided_f32(&v, dim, log, pa, pd) };
    Ok(())
}
