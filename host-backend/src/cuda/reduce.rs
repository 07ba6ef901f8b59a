//! Host side of the reductions: sum/max/min/prod over dims, argmax/argmin,
//! softmax. The argument checks are the kernel contract's (NOTE [Kernel
//! contract checks] in kael_core::backend::contract), shared with the
//! reference backend.

use super::CudaBackend;
use super::kernels::{KLayout, dcode, per_element, per_row};
use super::ops::{launch, n_i64, rows_of};
use cudarc::driver::PushKernelArg;
use kael_core::Result;
use kael_core::backend::{ArgReduceOp, Dst, ReduceOp, Src, contract};

fn reduce_code(op: ReduceOp) -> (i32, &'static str) {
    match op {
        ReduceOp::Sum => (0, "sum"),
        ReduceOp::Max => (1, "max"),
        ReduceOp::Min => (2, "min"),
        ReduceOp::Prod => (3, "prod"),
    }
}

/// Reductions over fewer elements than this run one thread per output.
const SMALL_REDUCTION: usize = 64;

impl CudaBackend {
    pub(crate) fn reduce_op(
        &self,
        op: ReduceOp,
        src: Src<'_>,
        dims: &[usize],
        dst: Dst<'_>,
    ) -> Result<()> {
        let (code, name) = reduce_code(op);
        contract::reduce(op, src, dims, dst)?;
        let n_out = dst.layout.numel();
        if n_out == 0 {
            return Ok(());
        }
        let sizes: Vec<usize> = dims.iter().map(|&d| src.layout.shape()[d]).collect();
        let strides: Vec<usize> = dims.iter().map(|&d| src.layout.strides()[d]).collect();
        let n_in: usize = sizes.iter().product();
        // the reduced dims alone (offset 0); `contig` when their strides are
        // row-major among themselves (`sum(-1)` of a contiguous tensor)
        let inner = KLayout::new(&sizes, &strides, 0)?;
        // (with an empty reduced dim nothing of src is read)
        let (s, d) = (self.operand(name, &src)?, self.operand(name, &dst)?);
        let (no, ni, dc) = (n_i64(n_out)?, n_i64(n_in)?, dcode(dst.dtype));
        if n_in < SMALL_REDUCTION {
            launch!(self, src.dtype, "k_reduce_small", per_element(n_out);
                &s.kl, &d.kl, &inner, &no, &ni, &d.ptr, &dc, &s.ptr, &code)
        } else {
            launch!(self, src.dtype, "k_reduce_block", per_row(n_out);
                &s.kl, &d.kl, &inner, &no, &ni, &d.ptr, &dc, &s.ptr, &code)
        }
    }

    pub(crate) fn arg_reduce_op(
        &self,
        op: ArgReduceOp,
        src: Src<'_>,
        dim: usize,
        dst: Dst<'_>,
    ) -> Result<()> {
        let (name, code) = match op {
            ArgReduceOp::ArgMax => ("argmax", 0i32),
            ArgReduceOp::ArgMin => ("argmin", 1i32),
        };
        contract::arg_reduce(op, src, dim, dst)?;
        let rows = rows_of(src.layout, dim)?;
        let len = src.layout.shape()[dim];
        let n_rows = dst.layout.numel();
        if n_rows == 0 {
            return Ok(());
        }
        let (s, d) = (self.operand(name, &src)?, self.operand(name, &dst)?);
        let rl = KLayout::of(&rows)?;
        let (nr, nl, step) = (
            n_i64(n_rows)?,
            n_i64(len)?,
            n_i64(src.layout.strides()[dim])?,
        );
        launch!(self, src.dtype, "k_argreduce", per_row(n_rows);
            &rl, &d.kl, &nr, &nl, &step, &d.ptr, &s.ptr, &code)
    }

    pub(crate) fn softmax_op(
        &self,
        src: Src<'_>,
        dim: usize,
        log: bool,
        dst: Dst<'_>,
    ) -> Result<()> {
        let name = if log { "log_softmax" } else { "softmax" };
        contract::softmax(src, dim, log, dst)?;
        let n = src.layout.numel();
        if n == 0 {
            return Ok(());
        }
        let (s, d) = (self.operand(name, &src)?, self.operand(name, &dst)?);
        let len = src.layout.shape()[dim];
        let n_rows = n / len;
        let (sr, dr) = (
            KLayout::of(&rows_of(src.layout, dim)?)?,
            KLayout::of(&rows_of(dst.layout, dim)?)?,
        );
        let (nr, nl) = (n_i64(n_rows)?, n_i64(len)?);
        let (ss, ds) = (
            n_i64(src.layout.strides()[dim])?,
            n_i64(dst.layout.strides()[dim])?,
        );
        let lg = i32::from(log);
        launch!(self, src.dtype, "k_softmax", per_row(n_rows);
            &sr, &dr, &nr, &nl, &ss, &ds, &d.ptr, &s.ptr, &lg)
    }
}
