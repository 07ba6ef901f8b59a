//! Host side of the reductions: sum/max/min/prod over dims, argmax/argmin,
//! softmax. Checks mirror the reference backend's (core/src/cpu/reduce.rs).

use super::CudaBackend;
use super::kernels::{KLayout, dcode, per_element, per_row};
use super::ops::{check_dim, launch, n_i64, refuse_bool, rows_of, same_dtype, same_shape};
use cudarc::driver::PushKernelArg;
use kael_core::backend::{ArgReduceOp, Dst, ReduceOp, Src};
use kael_core::{DType, Error, Result};

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

const EMPTY_DIM: &str = "cannot reduce a dimension of size 0: max, min, argmax and argmin have no identity value; reduce a non-empty dimension (sum and prod accept empty ones)";

impl CudaBackend {
    pub(crate) fn reduce_op(
        &self,
        op: ReduceOp,
        src: Src<'_>,
        dims: &[usize],
        dst: Dst<'_>,
    ) -> Result<()> {
        let (code, name) = reduce_code(op);
        let rank = src.layout.rank();
        if dims.windows(2).any(|w| w[0] >= w[1]) {
            return Err(Error::InvalidArgument {
                op: name,
                reason: "the reduced dims must be sorted and distinct; sort them and remove duplicates",
            });
        }
        if let Some(&d) = dims.last().filter(|&&d| d >= rank) {
            return Err(Error::DimOutOfRange {
                op: name,
                dim: d as isize,
                rank,
            });
        }
        let mut want = src.layout.shape().to_vec();
        for &d in dims {
            want[d] = 1;
        }
        if dst.layout.shape()[..] != want[..] {
            return Err(Error::ShapeMismatch {
                op: name,
                expected: kael_core::error::ErrShape::of(&want),
                got: kael_core::error::ErrShape::of(dst.layout.shape()),
            });
        }
        refuse_bool(name, src.dtype)?;
        refuse_bool(name, dst.dtype)?;
        let n_out = dst.layout.numel();
        let empty_dim = dims.iter().any(|&d| src.layout.shape()[d] == 0);
        if matches!(op, ReduceOp::Max | ReduceOp::Min) && empty_dim && n_out > 0 {
            return Err(Error::InvalidArgument {
                op: name,
                reason: EMPTY_DIM,
            });
        }
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
        check_dim(name, dim, src.layout)?;
        let rows = rows_of(src.layout, dim)?;
        same_shape(name, &rows, dst.layout)?;
        refuse_bool(name, src.dtype)?;
        same_dtype(name, DType::I64, dst.dtype)?;
        let len = src.layout.shape()[dim];
        let n_rows = dst.layout.numel();
        if len == 0 && n_rows > 0 {
            return Err(Error::InvalidArgument {
                op: name,
                reason: EMPTY_DIM,
            });
        }
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
        check_dim(name, dim, src.layout)?;
        same_shape(name, src.layout, dst.layout)?;
        same_dtype(name, src.dtype, dst.dtype)?;
        if !src.dtype.is_float() {
            return Err(Error::UnsupportedDType {
                op: name,
                dtype: src.dtype,
                supported: "f32, f64, f16, bf16",
            });
        }
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
