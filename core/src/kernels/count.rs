//! The `add_int` family: `i64`s plus a constant, wrapping (as the eager
//! integer add), into a new tensor. Plans carry f32 arithmetic only; this
//! family is how a plan carries an integer counter, such as a batch
//! norm's `num_batches_tracked`. A declared family (NOTE [Declared
//! families]).
//!
//! Parameter words: the constant, an `i64` as two words (low, high).

use crate::backend::contract::Operand;
use crate::backend::declared::{Declared, In, Out, Shapes};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::walk;
use crate::shape::Dims;
use crate::storage::typed_mut;

/// The `add_int` family's kernel (one step).
pub struct AddInt;

const OP: &str = "add_int";

/// The parameter words of `+ c`.
pub fn words(c: i64) -> [u32; 2] {
    [c as u32, (c >> 32) as u32]
}

impl Declared for AddInt {
    fn arity(step: usize, params: &[u32]) -> Option<(usize, usize)> {
        (step == 0 && params.len() == 2).then_some((1, 1))
    }

    fn outputs(_step: usize, _params: &[u32], ins: &[Operand<'_>]) -> Result<Shapes> {
        let x = ins.first().ok_or(Error::InvalidArgument {
            op: OP,
            reason: "no input",
        })?;
        if x.dtype != DType::I64 {
            return Err(Error::UnsupportedDType {
                op: OP,
                dtype: x.dtype,
                supported: "i64 (counters)",
            });
        }
        let mut v = Shapes::new();
        let _ = v.push((Dims::from_slice(x.layout.shape())?, x.dtype));
        Ok(v)
    }

    fn run<const DTYPES: u16>(
        _step: usize,
        params: &[u32],
        ins: &[In<'_>],
        outs: &mut [Out<'_>],
        _scratch: &mut [u8],
    ) -> Result<()> {
        let bad = || Error::InvalidArgument {
            op: OP,
            reason: "malformed operands",
        };
        let (Some(x), Some(d), [lo, hi]) = (ins.first(), outs.first_mut(), params) else {
            return Err(bad());
        };
        let c = i64::from(*lo) | (i64::from(*hi) << 32);
        // (Index values: a plan's constants are only word-aligned.)
        let s = crate::cpu::index::Indices::of(OP, x.dtype, x.bytes)?;
        let o = typed_mut::<i64>(d.bytes)?;
        walk([d.layout, x.layout], |[od, os]| {
            o[od] = s.get(os).wrapping_add(c)
        });
        Ok(())
    }
}
