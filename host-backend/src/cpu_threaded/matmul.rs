//! Matrix products through the `gemm` crate: it takes row and column
//! strides, so transposed and strided operands are read in place (no
//! copy), and it picks its kernels at run time by CPU features (AVX-512
//! with the crate's `x86-v4` feature, else AVX2/FMA, else SSE). Batches
//! run in parallel (each product single-threaded) when there are at least
//! as many as threads; otherwise each product uses the pool. f32, f64 and
//! f16; other dtypes go to the reference kernel.

use super::engine::{Par, cast_slice, cast_slice_mut};
use kael_core::Result;
use kael_core::backend::{Dst, Src};
use kael_core::cpu::matmul as reference;
use kael_core::dtype::DType;
use rayon::prelude::*;

/// Flops below which one product runs without the pool.
const PARALLEL_FLOPS: usize = 1 << 18;

/// `dst [.., m, n] = lhs [.., m, k] @ rhs [.., k, n]`.
pub(super) fn matmul(par: &Par<'_>, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
    let rank = dst.layout.rank();
    let fits = rank >= 2
        && lhs.layout.rank() == rank
        && rhs.layout.rank() == rank
        && lhs.dtype == dst.dtype
        && rhs.dtype == dst.dtype
        && dst.layout.is_contiguous()
        && !core::ptr::eq(lhs.storage, dst.storage)
        && !core::ptr::eq(rhs.storage, dst.storage)
        && lhs.layout.shape()[rank - 1] == rhs.layout.shape()[rank - 2]
        && lhs.layout.shape()[rank - 2] == dst.layout.shape()[rank - 2]
        && rhs.layout.shape()[rank - 1] == dst.layout.shape()[rank - 1]
        && lhs.layout.shape()[..rank - 2] == dst.layout.shape()[..rank - 2]
        && rhs.layout.shape()[..rank - 2] == dst.layout.shape()[..rank - 2];
    if !fits {
        return reference::matmul(lhs, rhs, dst);
    }
    match dst.dtype {
        DType::F32 => gemm_as::<f32>(par, lhs, rhs, dst, 0.0, 1.0),
        DType::F64 => gemm_as::<f64>(par, lhs, rhs, dst, 0.0, 1.0),
        DType::F16 => gemm_as::<gemm::f16>(
            par,
            lhs,
            rhs,
            dst,
            gemm::f16::from_f32(0.0),
            gemm::f16::from_f32(1.0),
        ),
        _ => reference::matmul(lhs, rhs, dst),
    }
}

/// Element offsets of batch `b` (row-major over `shape`) under `strides`.
fn batch_offset(b: usize, shape: &[usize], strides: &[usize]) -> usize {
    let mut rest = b;
    let mut off = 0;
    for (&n, &s) in shape.iter().zip(strides).rev() {
        off += (rest % n) * s;
        rest /= n;
    }
    off
}

fn gemm_as<T: bytemuck::Pod + Send + Sync + 'static>(
    par: &Par<'_>,
    lhs: Src<'_>,
    rhs: Src<'_>,
    dst: Dst<'_>,
    zero: T,
    one: T,
) -> Result<()> {
    let rank = dst.layout.rank();
    let shape = dst.layout.shape();
    let (m, n) = (shape[rank - 2], shape[rank - 1]);
    let k = lhs.layout.shape()[rank - 1];
    let batch_shape = &shape[..rank - 2];
    let batches: usize = batch_shape.iter().product();
    let (ls, rs) = (lhs.layout.strides(), rhs.layout.strides());
    let ga = lhs.storage.read("matmul")?;
    let gb = rhs.storage.read("matmul")?;
    let a = cast_slice::<T>(ga.bytes())?;
    let b = cast_slice::<T>(gb.bytes())?;
    let mut gd = dst.storage.write("matmul")?;
    let off = dst.layout.offset();
    let d = &mut cast_slice_mut::<T>(gd.bytes_mut())?[off..off + batches * m * n];
    if m * n == 0 {
        return Ok(());
    }
    if k == 0 {
        d.fill(zero);
        return Ok(());
    }
    let one_product = |bi: usize, out: &mut [T], parallelism: gemm::Parallelism| {
        let ao = lhs.layout.offset() + batch_offset(bi, batch_shape, &ls[..rank - 2]);
        let bo = rhs.layout.offset() + batch_offset(bi, batch_shape, &rs[..rank - 2]);
        // SAFETY: the tensor layer validated both layouts against their
        // storages (TensorImpl INVARIANT 2), so every element `a[ao + i *
        // ls[r-2] + p * ls[r-1]]` for i < m, p < k (and likewise for b)
        // lies inside the slices borrowed under read guards; `out` is an
        // exclusive m*n row-major block of the destination under its write
        // guard, disjoint from both sources (checked in `matmul`). With
        // `read_dst == false` gemm writes every element of `out` and reads
        // none of it. Strides fit in isize because they index allocations.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                out.as_mut_ptr(),
                1,
                n as isize,
                false,
                a.as_ptr().add(ao),
                ls[rank - 1] as isize,
                ls[rank - 2] as isize,
                b.as_ptr().add(bo),
                rs[rank - 1] as isize,
                rs[rank - 2] as isize,
                zero,
                one,
                false,
                false,
                false,
                parallelism,
            )
        }
    };
    let flops = 2 * m * n * k;
    if batches > 1 && batches >= par.threads && par.parallel(batches * m * n) {
        par.install(|| {
            d.par_chunks_mut(m * n)
                .enumerate()
                .for_each(|(bi, out)| one_product(bi, out, gemm::Parallelism::None))
        });
    } else {
        let parallelism = if par.threads > 1 && flops >= PARALLEL_FLOPS && par.parallel(m * n) {
            gemm::Parallelism::Rayon(par.threads)
        } else {
            gemm::Parallelism::None
        };
        for (bi, out) in d.chunks_mut(m * n).enumerate() {
            match parallelism {
                gemm::Parallelism::None => one_product(bi, out, parallelism),
                _ => par.install(|| one_product(bi, out, parallelism)),
            }
        }
    }
    Ok(())
}
