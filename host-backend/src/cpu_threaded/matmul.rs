//! Matrix products through the `gemm` crate: it takes row and column
//! strides, so transposed and strided operands are read in place (no
//! copy), and it picks its kernels at run time by CPU features (AVX-512
//! with the crate's `x86-v4` feature, else AVX2/FMA, else SSE). Batches
//! run in parallel (each product single-threaded) when there are at least
//! as many as threads; otherwise each product's output is cut into one
//! block of columns (or rows, whichever side is longer) per thread, each a
//! single-threaded gemm. f32, f64 and f16; other dtypes go to the
//! reference kernel.

use super::engine::{Par, cast_slice, cast_slice_mut, outer_offset};
use kael_core::Result;
use kael_core::backend::{Dst, Src};
use kael_core::cpu::matmul as reference;
use kael_core::dtype::DType;

/// Flops below which one product runs without the pool: about 40 µs of
/// one core's work, well above a hand-off's cost (Linear 256 -> 10 at
/// batch 64, 0.3 MFLOP, ran slower split across threads than inline).
const PARALLEL_FLOPS: usize = 1 << 22;

/// The narrowest block of output rows or columns a thread is given.
const MIN_SPLIT: usize = 32;

/// The destination's base pointer, shared by the threads that write its
/// disjoint tiles.
#[derive(Clone, Copy)]
struct SharedOut<T>(*mut T);

// SAFETY: the pointer is only dereferenced (by gemm) inside `gemm_as`'s
// tiles, which concurrent threads receive disjoint, within the borrow of
// the destination's write guard that outlives the parallel section.
unsafe impl<T: Send> Send for SharedOut<T> {}
// SAFETY: as for `Send`: shared access only hands out disjoint tiles.
unsafe impl<T: Send> Sync for SharedOut<T> {}

impl<T> SharedOut<T> {
    fn get(self) -> *mut T {
        self.0
    }
}

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
    let d_ptr = SharedOut(d.as_mut_ptr());
    // Writes rows i0..i0+mi, columns j0..j0+nj of product `bi` of `d`.
    let tile = |bi: usize, i0: usize, mi: usize, j0: usize, nj: usize| {
        let ao = lhs.layout.offset()
            + outer_offset(bi, batch_shape, &ls[..rank - 2])
            + i0 * ls[rank - 2];
        let bo = rhs.layout.offset()
            + outer_offset(bi, batch_shape, &rs[..rank - 2])
            + j0 * rs[rank - 1];
        // SAFETY: the tensor layer validated both layouts against their
        // storages (TensorImpl INVARIANT 2), so every element `a[ao + i *
        // ls[r-2] + p * ls[r-1]]` for i < mi, p < k (and likewise for b
        // with columns j < nj) lies inside the slices borrowed under read
        // guards. The tile `d[bi*m*n + (i0+i)*n + j0 + j]`, i < mi, j < nj,
        // lies inside `d` (i0+mi <= m, j0+nj <= n), which is borrowed under
        // the destination's write guard and disjoint from both sources
        // (checked in `matmul`); tiles run concurrently only when they are
        // disjoint (the callers below partition rows or columns), so no
        // element is written by two threads. With `read_dst == false` gemm
        // writes every element of the tile and reads none. Strides fit in
        // isize because they index allocations.
        unsafe {
            gemm::gemm(
                mi,
                nj,
                k,
                d_ptr.get().add(bi * m * n + i0 * n + j0),
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
                gemm::Parallelism::None,
            )
        }
    };
    // A product's work is its multiply-adds, not its output size: Linear's
    // 64x784 @ 784x256 has a 16K-element output (below the element
    // threshold) but 12.8M multiply-adds, worth both threads.
    let macs = m.saturating_mul(n).saturating_mul(k);
    let flops = macs.saturating_mul(2);
    if batches > 1 && batches >= par.threads && par.parallel(batches.saturating_mul(macs)) {
        par.for_each_index(batches, |bi| tile(bi, 0, m, 0, n));
    } else if flops >= PARALLEL_FLOPS && par.parallel(macs) && m.max(n) >= 2 * MIN_SPLIT {
        // One single-threaded gemm per block of the longer output side.
        // Measured here (2 threads), this beats gemm's own Rayon mode at
        // every size from Linear's 64x784x256 (1.6x) to n=1024 (1.2x).
        let (long, by_cols) = if n >= m { (n, true) } else { (m, false) };
        let parts = par.threads.min(long / MIN_SPLIT).max(1);
        let step = long.div_ceil(parts);
        for bi in 0..batches {
            par.for_each_index(parts, |p| {
                let start = p * step;
                let len = step.min(long - start);
                if by_cols {
                    tile(bi, 0, m, start, len);
                } else {
                    tile(bi, start, len, 0, n);
                }
            });
        }
    } else {
        for bi in 0..batches {
            tile(bi, 0, m, 0, n);
        }
    }
    Ok(())
}
