//! Matrix products: cuBLAS for float dtypes, a plain kernel for integers.
//!
//! NOTE [Row-major products through cuBLAS]
//! cuBLAS is column-major. A row-major `C [m, n] = A [m, k] @ B [k, n]`
//! is the column-major `C^T [n, m] = B^T [n, k] @ A^T [k, m]`, so cuBLAS is
//! called with (m', n', k') = (n, m, k), first operand B, second A, and
//! C with `ldc = n`. A row-major operand X [rows, cols] with strides
//! (rs, cs) is, in column-major terms, either X^T stored directly (cs == 1:
//! op N, ld = rs) or the transpose of X stored directly (rs == 1: op T,
//! ld = cs); see [`gemm_form`]. Batch dims must collapse to one stride
//! ([`batch_stride`]; 0 for a broadcast operand). An operand that fits
//! neither form is copied to contiguous device scratch first; `dst` is
//! always contiguous (the tensor layer allocates it).

use super::CudaBackend;
use super::kernels::{KLayout, per_element};
use super::ops::Scratch;
use cudarc::cublas::{result as blas, sys};
use cudarc::driver::PushKernelArg;
use kael_core::backend::{Dst, Src, contract};
use kael_core::{DType, Error, Result};
use std::ffi::c_void;

const OP: &str = "matmul";

/// How cuBLAS reads the row-major matrix `[rows, cols]` with strides
/// `(rs, cs)`: `(transposed, ld)`, or `None` when it cannot (see NOTE [Row-major
/// products through cuBLAS]).
pub(crate) fn gemm_form(rows: usize, cols: usize, rs: usize, cs: usize) -> Option<(bool, usize)> {
    if cols <= 1 || cs == 1 {
        let ld = if rows <= 1 { cols.max(1) } else { rs };
        if ld >= cols.max(1) {
            return Some((false, ld));
        }
    }
    if rows <= 1 || rs == 1 {
        let ld = if cols <= 1 { rows.max(1) } else { cs };
        if ld >= rows.max(1) {
            return Some((true, ld));
        }
    }
    None
}

/// The one stride `s` with `offset(batch b) = b * s` for row-major batch
/// index `b`, if the batch dims have one (size-1 dims ignored; 0 when every
/// dim is broadcast).
pub(crate) fn batch_stride(shape: &[usize], strides: &[usize]) -> Option<usize> {
    let mut unit = None;
    let mut span = 1usize;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d != 1 {
            let u = *unit.get_or_insert(s.checked_div(span).unwrap_or(0));
            if u.checked_mul(span)? != s {
                return None;
            }
        }
        span = span.checked_mul(d)?;
    }
    Some(unit.unwrap_or(0))
}

/// One operand as cuBLAS reads it: the address of its first element, its
/// form, and the stride between batch matrices (in elements).
struct Mat {
    ptr: u64,
    trans: bool,
    ld: usize,
    stride: usize,
}

fn as_i32(v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| Error::InvalidArgument {
        op: OP,
        reason: "a matrix dimension or leading dimension is beyond cuBLAS's i32 range; split the product",
    })
}

fn as_i64(v: usize) -> Result<i64> {
    i64::try_from(v).map_err(|_| Error::InvalidArgument {
        op: OP,
        reason: "a batch stride is beyond i64; split the product",
    })
}

fn op_of(trans: bool) -> sys::cublasOperation_t {
    if trans {
        sys::cublasOperation_t::CUBLAS_OP_T
    } else {
        sys::cublasOperation_t::CUBLAS_OP_N
    }
}

fn blas_error(e: blas::CublasError) -> Error {
    Error::InvalidArgument {
        op: OP,
        reason: super::intern(format!(
            "cuBLAS reported {e:?}; check the device's state (an earlier kernel fault makes every later call fail)"
        )),
    }
}

impl CudaBackend {
    /// `src` as a cuBLAS operand of `rows x cols` matrices over `batch`,
    /// copying it to contiguous scratch (kept in `keep`) when its layout is
    /// not one cuBLAS can read.
    fn gemm_operand<'a>(
        &'a self,
        src: &Src<'_>,
        rows: usize,
        cols: usize,
        batch: &[usize],
        keep: &mut Vec<Scratch<'a>>,
    ) -> Result<Mat> {
        let o = self.operand(OP, src)?;
        let es = src.dtype.size_in_bytes();
        let r = src.layout.rank();
        let st = src.layout.strides();
        let form = gemm_form(rows, cols, st[r - 2], st[r - 1]);
        let bs = batch_stride(batch, &st[..r - 2]);
        if let (Some((trans, ld)), Some(stride)) = (form, bs) {
            return Ok(Mat {
                ptr: o.ptr + (src.layout.offset() * es) as u64,
                trans,
                ld,
                stride,
            });
        }
        let mut shape = batch.to_vec();
        shape.extend([rows, cols]);
        let n: usize = shape.iter().product();
        let buf = Scratch::new(self.caching_allocator(), n * es)?;
        let kl = KLayout::contiguous(&shape)?;
        let dp = buf.addr();
        super::ops::launch_copy(self, src.dtype, n, (&kl, dp), (&o.kl, o.ptr))?;
        keep.push(buf);
        Ok(Mat {
            ptr: dp,
            trans: false,
            ld: cols.max(1),
            stride: rows * cols,
        })
    }

    pub(crate) fn matmul_op(&self, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        let bad = |reason| Error::InvalidArgument { op: OP, reason };
        let contract::MatmulShape { m, k, n } = contract::matmul(lhs, rhs, dst)?;
        let r = dst.layout.rank();
        let ds = dst.layout.shape();
        if dst.layout.numel() == 0 {
            return Ok(());
        }
        if k == 0 {
            return self.fill_with(dst, 0.0);
        }
        if dst.dtype.is_int() {
            return self.matmul_int(&lhs, &rhs, &dst, k);
        }
        if !dst.layout.is_contiguous() {
            return Err(bad(
                "the CUDA matmul writes a contiguous destination; use Tensor::matmul, which allocates one",
            ));
        }
        let batch = &ds[..r - 2];
        let count: usize = batch.iter().product();
        let mut keep = Vec::new();
        let a = self.gemm_operand(&lhs, m, k, batch, &mut keep)?;
        let b = self.gemm_operand(&rhs, k, n, batch, &mut keep)?;
        let c = self.operand(OP, &dst)?;
        let es = dst.dtype.size_in_bytes() as u64;
        let c_ptr = c.ptr + c.kl.offset as u64 * es;
        // NOTE [Row-major products through cuBLAS]: C^T = B^T A^T.
        let (mm, nn, kk) = (as_i32(n)?, as_i32(m)?, as_i32(k)?);
        let (lda, ldb, ldc) = (as_i32(b.ld)?, as_i32(a.ld)?, as_i32(n.max(1))?);
        let (sa, sb, sc) = (as_i64(b.stride)?, as_i64(a.stride)?, as_i64(m * n)?);
        let batches = as_i32(count)?;
        let (ta, tb) = (op_of(b.trans), op_of(a.trans));
        self.ctx
            .bind_to_thread()
            .map_err(|e| super::driver_error(OP, e))?;
        let guard = super::lock(&self.blas);
        let h = *guard.handle();
        let pa = std::ptr::without_provenance::<c_void>(b.ptr as usize);
        let pb = std::ptr::without_provenance::<c_void>(a.ptr as usize);
        let pc = std::ptr::without_provenance_mut::<c_void>(c_ptr as usize);
        let status = match dst.dtype {
            DType::F32 => {
                let (alpha, beta) = (1.0f32, 0.0f32);
                // SAFETY: `h` is this backend's live handle, bound to its
                // stream and used under the `blas` lock; the operands are live
                // device blocks whose forms, leading dimensions and batch
                // strides were derived from their layouts (NOTE [Row-major
                // products through cuBLAS]) and stay inside their storages;
                // alpha/beta are host scalars (the default pointer mode).
                unsafe {
                    blas::sgemm_strided_batched(
                        h,
                        ta,
                        tb,
                        mm,
                        nn,
                        kk,
                        &alpha,
                        pa.cast(),
                        lda,
                        sa,
                        pb.cast(),
                        ldb,
                        sb,
                        &beta,
                        pc.cast(),
                        ldc,
                        sc,
                        batches,
                    )
                }
            }
            DType::F64 => {
                let (alpha, beta) = (1.0f64, 0.0f64);
                // SAFETY: as for f32 above.
                unsafe {
                    blas::dgemm_strided_batched(
                        h,
                        ta,
                        tb,
                        mm,
                        nn,
                        kk,
                        &alpha,
                        pa.cast(),
                        lda,
                        sa,
                        pb.cast(),
                        ldb,
                        sb,
                        &beta,
                        pc.cast(),
                        ldc,
                        sc,
                        batches,
                    )
                }
            }
            other => {
                let ty = if other == DType::F16 {
                    sys::cudaDataType::CUDA_R_16F
                } else {
                    sys::cudaDataType::CUDA_R_16BF
                };
                let (alpha, beta) = (1.0f32, 0.0f32);
                // SAFETY: as for f32 above; with f32 compute the scalars are
                // f32 (cuBLAS's rule for CUBLAS_COMPUTE_32F).
                unsafe {
                    blas::gemm_strided_batched_ex(
                        h,
                        ta,
                        tb,
                        mm,
                        nn,
                        kk,
                        (&alpha as *const f32).cast(),
                        pa,
                        ty,
                        lda,
                        sa,
                        pb,
                        ty,
                        ldb,
                        sb,
                        (&beta as *const f32).cast(),
                        pc,
                        ty,
                        ldc,
                        sc,
                        batches,
                        sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                        sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                    )
                }
            }
        };
        drop(guard);
        // `keep` (scratch copies) returns to the cache only now, after the
        // product is queued (NOTE [Caching allocator]).
        drop(keep);
        status.map_err(blas_error)
    }

    fn matmul_int(&self, lhs: &Src<'_>, rhs: &Src<'_>, dst: &Dst<'_>, k: usize) -> Result<()> {
        let (a, b, c) = (
            self.operand(OP, lhs)?,
            self.operand(OP, rhs)?,
            self.operand(OP, dst)?,
        );
        let n = dst.layout.numel();
        let (nn, kk) = (n as i64, k as i64);
        let f = self.function(dst.dtype, "k_matmul_int")?;
        let mut l = self.stream.launch_builder(&f);
        l.arg(&a.kl)
            .arg(&b.kl)
            .arg(&c.kl)
            .arg(&nn)
            .arg(&kk)
            .arg(&c.ptr)
            .arg(&a.ptr)
            .arg(&b.ptr);
        // SAFETY: the arguments match `k_matmul_int(L a, L b, L c, i64 n,
        // i64 kk, KS* pc, const KS* pa, const KS* pb)` in body.cu; the
        // operands are live blocks of this backend whose layouts stay inside
        // their storages (`operand`), the batch dims are dst's (checked by
        // the caller), and the stream orders the kernel after earlier work.
        unsafe { l.launch(per_element(n)) }
            .map(|_| ())
            .map_err(|e| super::driver_error(OP, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_major_and_transposed_matrices_have_a_form() {
        // contiguous [3, 4]: X^T stored directly, ld 4
        assert_eq!(gemm_form(3, 4, 4, 1), Some((false, 4)));
        // the transpose of a contiguous [4, 3]: strides (1, 3)
        assert_eq!(gemm_form(3, 4, 1, 3), Some((true, 3)));
        // a column slice of a wider matrix: ld is the parent's row length
        assert_eq!(gemm_form(3, 2, 10, 1), Some((false, 10)));
        // a single row with any row stride
        assert_eq!(gemm_form(1, 4, 0, 1), Some((false, 4)));
        // a contiguous column vector [k, 1]
        assert_eq!(gemm_form(5, 1, 1, 1), Some((false, 1)));
    }

    #[test]
    fn layouts_cublas_cannot_read_have_no_form() {
        // stepped in both dims
        assert_eq!(gemm_form(3, 4, 8, 2), None);
        // a broadcast (stride-0) column
        assert_eq!(gemm_form(5, 1, 0, 0), None);
        // overlapping rows (an unfold view)
        assert_eq!(gemm_form(3, 4, 2, 1), None);
    }

    #[test]
    fn batch_dims_collapse_to_one_stride_when_they_can() {
        assert_eq!(batch_stride(&[], &[]), Some(0));
        assert_eq!(batch_stride(&[2, 3], &[36, 12]), Some(12));
        assert_eq!(batch_stride(&[2, 3], &[0, 0]), Some(0)); // broadcast
        assert_eq!(batch_stride(&[1, 3], &[999, 12]), Some(12)); // size-1 dim ignored
        assert_eq!(batch_stride(&[2, 3], &[12, 36]), None); // permuted batch dims
        assert_eq!(batch_stride(&[2, 3], &[12, 0]), None); // half broadcast
    }
}
