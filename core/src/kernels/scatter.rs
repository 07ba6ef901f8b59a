//! The `scatter_wins` family: which writes of a `scatter` land. For an
//! index tensor and a dimension, `true` at every position whose write to
//! its target is the last one along its line (PyTorch's CPU `scatter`
//! writes in row-major order, so the last write to a target wins). The
//! tensor layer then writes the winners with `where` and `scatter_add`,
//! on the device and differentiably, so `scatter` needs no readback and
//! a plan replays it. A declared family (NOTE [Declared families]).
//!
//! Parameter words: `[dim, size]`: the dimension and the target's size
//! along it. Every index value is checked against `size` before anything
//! is written. Scratch: `size` bytes of flags.

use crate::backend::contract::Operand;
use crate::backend::declared::{Declared, In, Out, Shapes};
use crate::cpu::index::{Indices, check_all};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::walk;
use crate::shape::Dims;

/// The `scatter_wins` family's kernel (one step).
pub struct ScatterWins;

const OP: &str = "scatter";

fn words(params: &[u32]) -> Option<(usize, usize)> {
    match *params {
        [dim, size] => Some((dim as usize, size as usize)),
        _ => None,
    }
}

impl Declared for ScatterWins {
    fn arity(step: usize, params: &[u32]) -> Option<(usize, usize)> {
        (step == 0 && params.len() == 2).then_some((1, 1))
    }

    fn outputs(_step: usize, params: &[u32], ins: &[Operand<'_>]) -> Result<Shapes> {
        let (dim, _) = words(params).ok_or(Error::InvalidArgument {
            op: OP,
            reason: "malformed parameters",
        })?;
        let ix = ins.first().ok_or(Error::InvalidArgument {
            op: OP,
            reason: "no index operand",
        })?;
        if !matches!(ix.dtype, DType::I64 | DType::I32) {
            return Err(Error::UnsupportedDType {
                op: OP,
                dtype: ix.dtype,
                supported: "i64, i32 (indices)",
            });
        }
        let shape = ix.layout.shape();
        if dim >= shape.rank() {
            return Err(Error::DimOutOfRange {
                op: OP,
                dim: isize::try_from(dim).unwrap_or(isize::MAX),
                rank: shape.rank(),
            });
        }
        let mut v = Shapes::new();
        let _ = v.push((Dims::from_slice(shape)?, DType::Bool));
        Ok(v)
    }

    fn scratch(_step: usize, params: &[u32], _ops: &[Operand<'_>]) -> Option<usize> {
        words(params).map(|(_, size)| size)
    }

    fn run<const DTYPES: u16>(
        _step: usize,
        params: &[u32],
        ins: &[In<'_>],
        outs: &mut [Out<'_>],
        scratch: &mut [u8],
    ) -> Result<()> {
        let bad = || Error::InvalidArgument {
            op: OP,
            reason: "malformed operands",
        };
        let (dim, size) = words(params).ok_or_else(bad)?;
        let (Some(a), Some(d)) = (ins.first(), outs.first_mut()) else {
            return Err(bad());
        };
        let ix = Indices::of(OP, a.dtype, a.bytes)?;
        check_all(OP, &ix, a.layout, size)?;
        let m = a.layout.shape()[dim];
        if a.layout.numel() == 0 {
            return Ok(());
        }
        let seen = scratch.get_mut(..size).ok_or_else(bad)?;
        seen.fill(0);
        let (sa, sd) = (a.layout.strides()[dim], d.layout.strides()[dim]);
        // The lines' first positions (`dim` at 0).
        let il = a.layout.select(dim as isize, 0)?;
        let ol = d.layout.select(dim as isize, 0)?;
        let out = &mut *d.bytes;
        // Values checked above: every `v` is below `size`.
        walk([&il, &ol], |[io, oo]| {
            for j in (0..m).rev() {
                let v = ix.get(io + j * sa) as usize;
                out[oo + j * sd] = u8::from(seen[v] == 0);
                seen[v] = 1;
            }
            for j in 0..m {
                seen[ix.get(io + j * sa) as usize] = 0;
            }
        });
        Ok(())
    }
}
