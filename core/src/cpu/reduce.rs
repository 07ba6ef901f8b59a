//! Reduction kernels: sum/max/min/prod over dims, argmax/argmin, softmax.

use crate::backend::{ArgReduceOp, Dst, ReduceOp, Src};
use crate::device::DeviceKind;
use crate::error::{Error, Result};

/// Reduces `dims` of `src` into `dst` (same rank, those dims of size 1).
///
/// # Errors
/// Storage access conflicts.
pub fn reduce(op: ReduceOp, src: Src<'_>, dims: &[usize], dst: Dst<'_>) -> Result<()> {
    let _ = (op, src, dims, dst);
    Err(Error::Unsupported {
        op: "reduce",
        device: DeviceKind::Cpu,
    })
}

/// Index of the first max/min along `dim` into an `I64` `dst`.
///
/// # Errors
/// Storage access conflicts.
pub fn arg_reduce(op: ArgReduceOp, src: Src<'_>, dim: usize, dst: Dst<'_>) -> Result<()> {
    let _ = (op, src, dim, dst);
    Err(Error::Unsupported {
        op: "argmax",
        device: DeviceKind::Cpu,
    })
}

/// Softmax or log-softmax along `dim`.
///
/// # Errors
/// Storage access conflicts.
pub fn softmax(src: Src<'_>, dim: usize, log: bool, dst: Dst<'_>) -> Result<()> {
    let _ = (src, dim, log, dst);
    Err(Error::Unsupported {
        op: "softmax",
        device: DeviceKind::Cpu,
    })
}
