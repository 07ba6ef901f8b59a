//! `cuda-bench`: a short benchmark of the CUDA backend against the same
//! GPU's own figures, measured in the same run.
//!
//! * matmul 4096 x 4096 x 4096, f32 and bf16 (f32 accumulation): kael's
//!   `Tensor::matmul` against one plain `cublasGemmEx` on the same buffers,
//!   in TFLOP/s (`2 n^3` per product);
//! * elementwise add of two 64M-element f32 tensors: kael's `add` (a fresh
//!   output each time, which the core allocates zeroed) and `add_` (in
//!   place), in GB/s counting the bytes each must move (3 x 4 bytes per
//!   element), against a device-to-device `cuMemcpyDtoDAsync` of 256 MiB
//!   (2 x 4 bytes per element);
//! * one training step (forward, backward, SGD) of a 1024 -> 4096 -> 1024
//!   MLP on a batch of 1024, in ms (first step, which includes compiling
//!   the kernels, and the mean of the next ones).
//!
//! GPU times come from CUDA events on the backend's stream. Set
//! `KAEL_BENCH_QUICK=1` for small sizes (a smoke run). Written without a
//! GPU at hand: **not yet run on one**; its figures exist only once
//! `scripts/gpu-check.sh` has printed them.

use cudarc::cublas::{CudaBlas, result as blas, sys as blas_sys};
use cudarc::driver::result as drv;
use cudarc::driver::sys::CUevent_flags;
use kael_host::core::{Backend, DType, Device, Rng, Tensor, no_grad};
use kael_host::cuda::{self, CudaBackend};
use std::error::Error;
use std::ffi::c_void;
use std::process::ExitCode;
use std::time::Instant;

type R<T> = Result<T, Box<dyn Error>>;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cuda-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Mean GPU milliseconds of `f` over `iters` runs (after `warm` untimed
/// runs), between two events on the backend's stream.
fn time_ms(be: &CudaBackend, warm: usize, iters: usize, mut f: impl FnMut() -> R<()>) -> R<f64> {
    for _ in 0..warm {
        f()?;
    }
    let ctx = be.context();
    let start = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    let end = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    start.record(be.stream())?;
    for _ in 0..iters {
        f()?;
    }
    end.record(be.stream())?;
    Ok(f64::from(start.elapsed_ms(&end)?) / iters as f64)
}

/// The device address of a contiguous tensor's first element.
fn addr(t: &Tensor) -> u64 {
    t.storage().as_ptr().addr() as u64 + (t.offset() * t.element_size()) as u64
}

fn run() -> R<()> {
    let quick = std::env::var_os("KAEL_BENCH_QUICK").is_some();
    let be = cuda::backend(0)?;
    let dev = cuda::device(0)?;
    let (major, minor) = be.compute_capability();
    println!(
        "device: {} (compute capability {major}.{minor}){}",
        be.name(),
        if quick { ", quick sizes" } else { "" }
    );
    let n = if quick { 512 } else { 4096 };
    for dt in [DType::F32, DType::BF16] {
        matmul(&be, &dev, n, dt)?;
    }
    add(&be, &dev, if quick { 1 << 20 } else { 64 << 20 })?;
    train(&be, &dev, if quick { 128 } else { 1024 })?;
    let s = be.memory_stats();
    println!(
        "memory: in use {:.1} MiB, peak {:.1} MiB, cached {:.1} MiB, reserved {:.1} MiB, {} allocations ({} from the cache)",
        mib(s.in_use),
        mib(s.peak),
        mib(s.cached),
        mib(s.reserved),
        s.allocations,
        s.reused
    );
    Ok(())
}

fn mib(b: usize) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

fn matmul(be: &CudaBackend, dev: &Device, n: usize, dt: DType) -> R<()> {
    let mut rng = Rng::new(1);
    let a = Tensor::rand(&[n, n], DType::F32, dev, &mut rng)?.to_dtype(dt)?;
    let b = Tensor::rand(&[n, n], DType::F32, dev, &mut rng)?.to_dtype(dt)?;
    let flops = 2.0 * (n as f64).powi(3);
    let iters = 10;
    let kael = time_ms(be, 2, iters, || {
        a.matmul(&b)?;
        Ok(())
    })?;
    // cuBLAS's own figure: one plain GemmEx, row-major C = A B as the
    // column-major C^T = B^T A^T, into a buffer of our own.
    let c = Tensor::zeros(&[n, n], dt, dev)?;
    let handle = CudaBlas::new(be.stream().clone())?;
    let ty = if dt == DType::F32 {
        blas_sys::cudaDataType::CUDA_R_32F
    } else {
        blas_sys::cudaDataType::CUDA_R_16BF
    };
    let ni = i32::try_from(n)?;
    let (alpha, beta) = (1.0f32, 0.0f32);
    let (pa, pb, pc) = (addr(&a), addr(&b), addr(&c));
    let gemm = || -> R<()> {
        be.context().bind_to_thread()?;
        // SAFETY: a, b and c are live contiguous n x n tensors of dtype `ty`
        // on this device (kept alive until the end of this function); the
        // handle is bound to the backend's stream; alpha/beta are f32 host
        // scalars, as CUBLAS_COMPUTE_32F requires.
        unsafe {
            blas::gemm_ex(
                *handle.handle(),
                blas_sys::cublasOperation_t::CUBLAS_OP_N,
                blas_sys::cublasOperation_t::CUBLAS_OP_N,
                ni,
                ni,
                ni,
                (&alpha as *const f32).cast(),
                std::ptr::without_provenance::<c_void>(pb as usize),
                ty,
                ni,
                std::ptr::without_provenance::<c_void>(pa as usize),
                ty,
                ni,
                (&beta as *const f32).cast(),
                std::ptr::without_provenance_mut::<c_void>(pc as usize),
                ty,
                ni,
                blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }?;
        Ok(())
    };
    let own = time_ms(be, 2, iters, gemm)?;
    // the two products must agree
    let k = a.matmul(&b)?.to_dtype(DType::F32)?.to_vec::<f32>()?;
    let r = c.to_dtype(DType::F32)?.to_vec::<f32>()?;
    let worst = k
        .iter()
        .zip(&r)
        .map(|(x, y)| ((x - y).abs() / y.abs().max(1.0)) as f64)
        .fold(0.0f64, f64::max);
    println!(
        "matmul {n}x{n}x{n} {:>4}: kael {:7.1} TFLOP/s ({:.3} ms), cuBLAS GemmEx {:7.1} TFLOP/s ({:.3} ms), kael/cuBLAS {:.2}; max rel diff {worst:.1e}",
        dt.name(),
        flops / kael / 1e9,
        kael,
        flops / own / 1e9,
        own,
        own / kael
    );
    Ok(())
}

fn add(be: &CudaBackend, dev: &Device, n: usize) -> R<()> {
    let mut rng = Rng::new(2);
    let a = Tensor::rand(&[n], DType::F32, dev, &mut rng)?;
    let b = Tensor::rand(&[n], DType::F32, dev, &mut rng)?;
    let bytes = (n * 4) as f64;
    let iters = 20;
    let out_of_place = time_ms(be, 2, iters, || {
        a.add(&b)?;
        Ok(())
    })?;
    let acc = a.deep_clone()?;
    let in_place = time_ms(be, 2, iters, || {
        acc.add_(&b)?;
        Ok(())
    })?;
    let dst = Tensor::zeros(&[n], DType::F32, dev)?;
    let (src, to) = (addr(&a), addr(&dst));
    let copy = time_ms(be, 2, iters, || {
        be.context().bind_to_thread()?;
        // SAFETY: `a` and `dst` are live, distinct, contiguous tensors of
        // `n` f32 elements on this device; the copy is queued on the
        // backend's stream, after the work that wrote them.
        unsafe { drv::memcpy_dtod_async(to, src, n * 4, be.stream().cu_stream()) }?;
        Ok(())
    })?;
    let gbs = |moved: f64, ms: f64| moved / ms / 1e6;
    println!(
        "add {n} f32: kael add {:7.1} GB/s ({:.3} ms, 3 x 4 B/elem; +1 zeroing write of the fresh output not counted), add_ {:7.1} GB/s ({:.3} ms), memcpy DtoD {:7.1} GB/s ({:.3} ms, 2 x 4 B/elem), add_/memcpy {:.2}",
        gbs(3.0 * bytes, out_of_place),
        out_of_place,
        gbs(3.0 * bytes, in_place),
        in_place,
        gbs(2.0 * bytes, copy),
        copy,
        gbs(3.0 * bytes, in_place) / gbs(2.0 * bytes, copy)
    );
    Ok(())
}

fn train(be: &CudaBackend, dev: &Device, batch: usize) -> R<()> {
    let (d_in, d_hidden) = if batch <= 128 {
        (128, 512)
    } else {
        (1024, 4096)
    };
    let mut rng = Rng::new(3);
    let scale_in = 1.0 / (d_in as f64).sqrt();
    let scale_h = 1.0 / (d_hidden as f64).sqrt();
    let w1 = Tensor::randn(&[d_in, d_hidden], DType::F32, dev, &mut rng)?
        .mul_scalar(scale_in)?
        .requires_grad_(true)?;
    let w2 = Tensor::randn(&[d_hidden, d_in], DType::F32, dev, &mut rng)?
        .mul_scalar(scale_h)?
        .requires_grad_(true)?;
    let x = Tensor::randn(&[batch, d_in], DType::F32, dev, &mut rng)?;
    let y = x.tanh()?;
    let step = || -> R<f32> {
        let out = x.matmul(&w1)?.gelu()?.matmul(&w2)?;
        let loss = out.sub(&y)?.sqr()?.mean_all()?;
        loss.backward()?;
        no_grad(|| -> kael_host::core::Result<()> {
            for p in [&w1, &w2] {
                if let Some(g) = p.grad() {
                    p.sub_(&g.mul_scalar(0.1)?)?;
                }
                p.zero_grad();
            }
            Ok(())
        })?;
        // reading the loss waits for the step
        Ok(loss.item::<f32>()?)
    };
    let t0 = Instant::now();
    let first_loss = step()?;
    let first = t0.elapsed().as_secs_f64() * 1e3;
    let steps = 10;
    let t1 = Instant::now();
    let mut last_loss = first_loss;
    for _ in 0..steps {
        last_loss = step()?;
    }
    be.synchronize()?;
    let mean = t1.elapsed().as_secs_f64() * 1e3 / steps as f64;
    let flops = 6.0 * (batch * d_in * d_hidden * 2) as f64; // fwd + bwd of 2 matmuls
    println!(
        "train step, MLP {d_in}->{d_hidden}->{d_in}, batch {batch}, f32: first {first:.1} ms (compiles kernels), then {mean:.3} ms/step (matmul FLOPs / step time: {:.1} TFLOP/s), loss {first_loss:.4} -> {last_loss:.4}",
        flops / mean / 1e9
    );
    Ok(())
}
