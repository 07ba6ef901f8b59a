//! The reference CPU backend: portable, single-threaded, strided,
//! deterministic, `no_std`. It defines correct; other backends are checked
//! against it.
//!
//! Kernels are generic functions over [`Scalar`](crate::dtype::Scalar) in the
//! submodules (public, so other host-memory backends can reuse them for the
//! ops they do not specialise).

pub mod elementwise;
pub mod index;
pub mod matmul;
pub mod reduce;

use crate::allocator::Allocator;
use crate::backend::{ArgReduceOp, Backend, BinaryOp, CmpOp, Dst, ReduceOp, Src, UnaryOp};
use crate::device::DeviceKind;
use crate::error::{Error, Result};
use crate::shared::Shared;
use crate::storage::Storage;

/// The reference backend; see the module docs.
pub struct CpuBackend {
    allocator: Shared<dyn Allocator>,
}

impl CpuBackend {
    /// A backend drawing memory from `allocator`.
    pub fn new(allocator: Shared<dyn Allocator>) -> Self {
        Self { allocator }
    }
}

/// Copies `src` into host storage `dst` at `byte_offset` (shared by every
/// host-memory backend).
///
/// # Errors
/// [`Error::OutOfBounds`] when the range leaves the storage.
pub fn write_host_bytes(dst: &Storage, byte_offset: usize, src: &[u8]) -> Result<()> {
    let mut g = dst.write("write_bytes")?;
    let bytes = g.bytes_mut();
    let end = byte_offset
        .checked_add(src.len())
        .filter(|&e| e <= bytes.len())
        .ok_or(Error::OutOfBounds {
            op: "write_bytes",
            reach: byte_offset.saturating_add(src.len()),
            storage_len: bytes.len(),
        })?;
    bytes[byte_offset..end].copy_from_slice(src);
    Ok(())
}

/// Copies host storage bytes at `byte_offset` into `dst`.
///
/// # Errors
/// [`Error::OutOfBounds`] when the range leaves the storage.
pub fn read_host_bytes(src: &Storage, byte_offset: usize, dst: &mut [u8]) -> Result<()> {
    let g = src.read("read_bytes")?;
    let bytes = g.bytes();
    let end = byte_offset
        .checked_add(dst.len())
        .filter(|&e| e <= bytes.len())
        .ok_or(Error::OutOfBounds {
            op: "read_bytes",
            reach: byte_offset.saturating_add(dst.len()),
            storage_len: bytes.len(),
        })?;
    dst.copy_from_slice(&bytes[byte_offset..end]);
    Ok(())
}

impl Backend for CpuBackend {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Cpu
    }

    fn is_host_memory(&self) -> bool {
        true
    }

    fn allocator(&self) -> Shared<dyn Allocator> {
        self.allocator.clone()
    }

    fn write_bytes(&self, dst: &Storage, byte_offset: usize, src: &[u8]) -> Result<()> {
        write_host_bytes(dst, byte_offset, src)
    }

    fn read_bytes(&self, src: &Storage, byte_offset: usize, dst: &mut [u8]) -> Result<()> {
        read_host_bytes(src, byte_offset, dst)
    }

    fn copy_strided(&self, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        elementwise::copy_strided(src, dst)
    }

    fn cast(&self, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        elementwise::cast(src, dst)
    }

    fn fill(&self, dst: Dst<'_>, value: f64) -> Result<()> {
        elementwise::fill(dst, value)
    }

    fn unary(&self, op: UnaryOp, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        elementwise::unary(op, src, dst)
    }

    fn binary(&self, op: BinaryOp, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        elementwise::binary(op, lhs, rhs, dst)
    }

    fn compare(&self, op: CmpOp, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        elementwise::compare(op, lhs, rhs, dst)
    }

    fn where_cond(
        &self,
        cond: Src<'_>,
        on_true: Src<'_>,
        on_false: Src<'_>,
        dst: Dst<'_>,
    ) -> Result<()> {
        elementwise::where_cond(cond, on_true, on_false, dst)
    }

    fn reduce(&self, op: ReduceOp, src: Src<'_>, dims: &[usize], dst: Dst<'_>) -> Result<()> {
        reduce::reduce(op, src, dims, dst)
    }

    fn arg_reduce(&self, op: ArgReduceOp, src: Src<'_>, dim: usize, dst: Dst<'_>) -> Result<()> {
        reduce::arg_reduce(op, src, dim, dst)
    }

    fn softmax(&self, src: Src<'_>, dim: usize, log: bool, dst: Dst<'_>) -> Result<()> {
        reduce::softmax(src, dim, log, dst)
    }

    fn matmul(&self, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        matmul::matmul(lhs, rhs, dst)
    }

    fn index_select(&self, src: Src<'_>, dim: usize, indices: Src<'_>, dst: Dst<'_>) -> Result<()> {
        index::index_select(src, dim, indices, dst)
    }

    fn gather(&self, src: Src<'_>, dim: usize, index: Src<'_>, dst: Dst<'_>) -> Result<()> {
        index::gather(src, dim, index, dst)
    }

    fn index_add(&self, dst: Dst<'_>, dim: usize, indices: Src<'_>, src: Src<'_>) -> Result<()> {
        index::index_add(dst, dim, indices, src)
    }

    fn scatter_add(&self, dst: Dst<'_>, dim: usize, index: Src<'_>, src: Src<'_>) -> Result<()> {
        index::scatter_add(dst, dim, index, src)
    }
}
