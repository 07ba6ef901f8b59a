//! Matrix multiplication: batched, broadcast batch dims, cache-blocked.

use crate::backend::{Dst, Src};
use crate::device::DeviceKind;
use crate::error::{Error, Result};

/// `dst [.., m, n] = lhs [.., m, k] @ rhs [.., k, n]`.
///
/// # Errors
/// Storage access conflicts.
pub fn matmul(lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
    let _ = (lhs, rhs, dst);
    Err(Error::Unsupported {
        op: "matmul",
        device: DeviceKind::Cpu,
    })
}
