//! Indexing kernels: index_select, gather and their adjoint scatters.

use crate::backend::{Dst, Src};
use crate::device::DeviceKind;
use crate::error::{Error, Result};

/// `index_select` along `dim`.
///
/// # Errors
/// [`Error::IndexOutOfRange`] for a bad index.
pub fn index_select(src: Src<'_>, dim: usize, indices: Src<'_>, dst: Dst<'_>) -> Result<()> {
    let _ = (src, dim, indices, dst);
    Err(Error::Unsupported {
        op: "index_select",
        device: DeviceKind::Cpu,
    })
}

/// `gather` along `dim`.
///
/// # Errors
/// [`Error::IndexOutOfRange`] for a bad index.
pub fn gather(src: Src<'_>, dim: usize, index: Src<'_>, dst: Dst<'_>) -> Result<()> {
    let _ = (src, dim, index, dst);
    Err(Error::Unsupported {
        op: "gather",
        device: DeviceKind::Cpu,
    })
}

/// `dst.index_add_(dim, indices, src)`.
///
/// # Errors
/// [`Error::IndexOutOfRange`] for a bad index.
pub fn index_add(dst: Dst<'_>, dim: usize, indices: Src<'_>, src: Src<'_>) -> Result<()> {
    let _ = (dst, dim, indices, src);
    Err(Error::Unsupported {
        op: "index_add",
        device: DeviceKind::Cpu,
    })
}

/// `dst.scatter_add_(dim, index, src)`.
///
/// # Errors
/// [`Error::IndexOutOfRange`] for a bad index.
pub fn scatter_add(dst: Dst<'_>, dim: usize, index: Src<'_>, src: Src<'_>) -> Result<()> {
    let _ = (dst, dim, index, src);
    Err(Error::Unsupported {
        op: "scatter_add",
        device: DeviceKind::Cpu,
    })
}
