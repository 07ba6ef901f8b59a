//! Host side of the indexing kernels: index_select, gather, index_add,
//! scatter_add. Index values are read back and checked on the host before
//! any write (so a bad index is an error with nothing written), then
//! uploaded as one contiguous i64 array.

use super::CudaBackend;
use super::kernels::{KLayout, per_element};
use super::ops::{Scratch, launch, n_i64, rows_of};
use cudarc::driver::PushKernelArg;
use kael_core::backend::{Dst, Src, contract};
use kael_core::{DType, Error, Layout, Result};

impl CudaBackend {
    /// The values of an I64/I32 index tensor, in row-major order, on the host.
    fn index_values(&self, op: &'static str, idx: &Src<'_>) -> Result<Vec<i64>> {
        let es = match idx.dtype {
            DType::I64 => 8,
            DType::I32 => 4,
            other => {
                return Err(Error::UnsupportedDType {
                    op,
                    dtype: other,
                    supported: "i64, i32 (indices)",
                });
            }
        };
        let o = self.operand(op, idx)?;
        let n = idx.layout.numel();
        if n == 0 {
            return Ok(Vec::new());
        }
        let (lo, hi) = (idx.layout.offset(), idx.layout.reach());
        let mut bytes = vec![0u8; (hi - lo) * es];
        self.download(op, o.ptr + (lo * es) as u64, &mut bytes)?;
        let rel = Layout::new(idx.layout.shape(), idx.layout.strides(), 0)?;
        let mut out = Vec::with_capacity(n);
        let mut bad = false;
        rel.for_each_offset(|k| match bytes.get(k * es..k * es + es) {
            Some(b) if es == 8 => {
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                out.push(i64::from_le_bytes(a));
            }
            Some(b) => {
                let mut a = [0u8; 4];
                a.copy_from_slice(b);
                out.push(i64::from(i32::from_le_bytes(a)));
            }
            None => bad = true,
        });
        if bad {
            return Err(Error::OutOfBounds {
                op,
                reach: hi,
                storage_len: idx.storage.nbytes() / es,
            });
        }
        Ok(out)
    }

    /// Checks index values against `size` (the first bad one is the error)
    /// and uploads them as a contiguous i64 array.
    fn upload_indices(&self, op: &'static str, values: &[i64], size: usize) -> Result<Scratch<'_>> {
        if let Some(&v) = values
            .iter()
            .find(|&&v| usize::try_from(v).map_or(true, |i| i >= size))
        {
            return Err(Error::IndexOutOfRange { op, index: v, size });
        }
        let buf = Scratch::new(&self.allocator, values.len() * 8)?;
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.upload(op, buf.addr(), &bytes)?;
        Ok(buf)
    }

    pub(crate) fn index_select_op(
        &self,
        src: Src<'_>,
        dim: usize,
        indices: Src<'_>,
        dst: Dst<'_>,
    ) -> Result<()> {
        const OP: &str = "index_select";
        contract::index_select(src, dim, indices, dst)?;
        let values = self.index_values(OP, &indices)?;
        let size = src.layout.shape()[dim];
        let ix = self.upload_indices(OP, &values, size)?;
        let n = dst.layout.numel();
        if n == 0 {
            return Ok(());
        }
        let (s, d) = (self.operand(OP, &src)?, self.operand(OP, &dst)?);
        let (nn, dm, ip) = (n_i64(n)?, dim as i32, ix.addr());
        launch!(self, dst.dtype, "k_index_select", per_element(n);
            &d.kl, &s.kl, &nn, &dm, &ip, &d.ptr, &s.ptr)
    }

    pub(crate) fn gather_op(
        &self,
        src: Src<'_>,
        dim: usize,
        index: Src<'_>,
        dst: Dst<'_>,
    ) -> Result<()> {
        const OP: &str = "gather";
        contract::gather(src, dim, index, dst)?;
        let sshape = src.layout.shape();
        let values = self.index_values(OP, &index)?;
        let ix = self.upload_indices(OP, &values, sshape[dim])?;
        let n = dst.layout.numel();
        if n == 0 {
            return Ok(());
        }
        let (s, d) = (self.operand(OP, &src)?, self.operand(OP, &dst)?);
        let (nn, dm, ip) = (n_i64(n)?, dim as i32, ix.addr());
        launch!(self, dst.dtype, "k_gather", per_element(n);
            &d.kl, &s.kl, &nn, &dm, &ip, &d.ptr, &s.ptr)
    }

    pub(crate) fn index_add_op(
        &self,
        dst: Dst<'_>,
        dim: usize,
        indices: Src<'_>,
        src: Src<'_>,
    ) -> Result<()> {
        const OP: &str = "index_add";
        contract::index_add(dst, dim, indices, src)?;
        let values = self.index_values(OP, &indices)?;
        let ix = self.upload_indices(OP, &values, dst.layout.shape()[dim])?;
        let n_idx = values.len();
        if src.layout.numel() == 0 {
            return Ok(());
        }
        let n_cols = src.layout.numel() / n_idx;
        let (s, d) = (self.operand(OP, &src)?, self.operand(OP, &dst)?);
        let cols = KLayout::of(&rows_of(src.layout, dim)?)?;
        let (nc, ni, dm, ip) = (n_i64(n_cols)?, n_i64(n_idx)?, dim as i32, ix.addr());
        launch!(self, dst.dtype, "k_index_add", per_element(n_cols);
            &d.kl, &s.kl, &cols, &nc, &ni, &dm, &ip, &d.ptr, &s.ptr)
    }

    pub(crate) fn scatter_add_op(
        &self,
        dst: Dst<'_>,
        dim: usize,
        index: Src<'_>,
        src: Src<'_>,
    ) -> Result<()> {
        const OP: &str = "scatter_add";
        contract::scatter_add(dst, dim, index, src)?;
        let ishape = index.layout.shape();
        let values = self.index_values(OP, &index)?;
        let ix = self.upload_indices(OP, &values, dst.layout.shape()[dim])?;
        let n = index.layout.numel();
        if n == 0 {
            return Ok(());
        }
        // src restricted to the index's shape, same strides
        let from = Layout::new(ishape, src.layout.strides(), src.layout.offset())?;
        let s = self.operand(
            OP,
            &Src {
                storage: src.storage,
                layout: &from,
                dtype: src.dtype,
            },
        )?;
        let d = self.operand(OP, &dst)?;
        let len = ishape[dim];
        let n_cols = n / len;
        let cols = KLayout::of(&rows_of(index.layout, dim)?)?;
        let il = KLayout::contiguous(ishape)?;
        let (nc, nl, dm, ip) = (n_i64(n_cols)?, n_i64(len)?, dim as i32, ix.addr());
        launch!(self, dst.dtype, "k_scatter_add", per_element(n_cols);
            &d.kl, &s.kl, &cols, &il, &nc, &nl, &dm, &ip, &d.ptr, &s.ptr)
    }
}
