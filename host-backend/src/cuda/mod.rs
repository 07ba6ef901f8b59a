//! The CUDA backend (feature `cuda`): a [`Device`] whose tensors live in GPU
//! memory.
//!
//! **Status: not yet run on a GPU.** It builds and its tests skip without
//! one; its kernel sources compile with NVRTC 13.0 (a unit test compiles
//! every module wherever libnvrtc can be loaded, no GPU needed), and their
//! PTX assembled for sm_90 with ptxas when they were written. Nothing here
//! has executed on a device: `scripts/gpu-check.sh` runs the tests and the
//! benchmark on a machine with an NVIDIA GPU, and until that has passed
//! every result of this backend is unverified.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use kael_host::core::{DType, Device, Tensor};
//! let gpu = kael_host::cuda::device(0)?; // Err when no driver or GPU is found
//! let a = Tensor::ones(&[2, 3], DType::F32, &gpu)?;
//! let b = a.add(&a)?.sum_all()?;
//! assert_eq!(b.item::<f32>()?, 12.0);
//! let back = b.to_device(&Device::cpu())?;
//! # let _ = back; Ok(()) }
//! ```
//!
//! * Loading: cudarc opens libcuda, libnvrtc and libcublas at run time, so
//!   this feature builds and its tests run (and skip) without a CUDA
//!   toolkit or GPU. [`device`] returns [`CudaInitError::NoDriver`] there.
//! * One device per ordinal per process ([`device`] returns the same
//!   backend each time): two `Device`s of one ordinal are the same device to
//!   the core, so they must share one stream and one allocator.
//! * Every kernel and copy is queued on the backend's one stream, in call
//!   order; reads back to the host (`to_vec`, `to_device(cpu)`) wait for it.
//! * Memory: [`CudaAllocator`], a caching allocator (NOTE [Caching
//!   allocator] in `alloc.rs`); [`CudaBackend::memory_stats`].
//! * Kernels: NVRTC-compiled at first use, one module per dtype, cached
//!   (NOTE [Kernel modules] in `kernels.rs`). Elementwise ops take any
//!   strides (broadcast, transposed, sliced) up to rank 8.
//! * Matmul: cuBLAS (f32, f64; f16 and bf16 with f32 accumulation through
//!   `cublasGemmStridedBatchedEx`); operands whose layout cuBLAS cannot
//!   express are first copied to contiguous device scratch. Integer matmul
//!   is a plain kernel (wrapping, as the reference backend).
//! * Every [`Backend`] method is implemented; nothing falls back to the
//!   host. Index ops read their index values back to the host to validate
//!   them before any write (so a bad index is an error with nothing
//!   written), which costs one stream synchronization each.
//! * Not here: layer_norm (not a `Backend` method yet), multi-GPU, streams
//!   chosen by the caller, CUDA graphs.

mod alloc;
mod blas;
mod index;
mod kernels;
mod ops;
mod reduce;

pub use alloc::{CudaAllocator, CudaMemStats};

use cudarc::cublas::CudaBlas;
use cudarc::driver::result::DriverError;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};
use kael_core::allocator::Allocator;
use kael_core::backend::family::Kind;
use kael_core::backend::{
    ArgReduceOp, Backend, BinaryOp, CmpOp, Dst, Family, Provenance, ReduceOp, Src, UnaryOp,
};
use kael_core::shared::Shared;
use kael_core::{DType, Device, DeviceKind, Error, Result, Storage};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

/// Locks `m`, ignoring poisoning (the data behind every lock here stays
/// consistent across a panic: counters and caches).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Error texts must be `&'static str`; CUDA's are made at run time. Each
/// distinct text is leaked once (at most [`MAX_MESSAGES`] of them).
pub(crate) fn intern(text: String) -> &'static str {
    static MESSAGES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut m = lock(&MESSAGES);
    if let Some(s) = m.iter().find(|s| **s == text) {
        return s;
    }
    if m.len() >= MAX_MESSAGES {
        return "a CUDA call failed (the text of this error was not kept: too many distinct CUDA errors in this process)";
    }
    let s: &'static str = Box::leak(text.into_boxed_str());
    m.push(s);
    s
}

/// How many distinct CUDA error texts [`intern`] keeps.
const MAX_MESSAGES: usize = 256;

/// A driver failure as a kael error.
pub(crate) fn driver_error(op: &'static str, e: DriverError) -> Error {
    Error::InvalidArgument {
        op,
        reason: intern(format!(
            "the CUDA driver reported {e:?}; after a kernel fault every later call fails too, so restart the process (and report the first such error)"
        )),
    }
}

/// Why a CUDA device could not be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CudaInitError {
    /// libcuda could not be loaded: no NVIDIA driver on this machine.
    NoDriver,
    /// The driver is there but has no device of this ordinal.
    NoDevice {
        /// The ordinal asked for.
        ordinal: u32,
        /// How many devices the driver reports.
        count: usize,
    },
    /// The driver is there but another CUDA library is not.
    MissingLibrary {
        /// The library (`libnvrtc`, `libcublas`).
        name: &'static str,
    },
    /// A driver, NVRTC or cuBLAS call failed while opening the device.
    Driver {
        /// The step that failed.
        during: &'static str,
        /// The library's own message.
        message: String,
    },
}

impl CudaInitError {
    /// Whether this machine simply has no CUDA GPU (no driver, or a driver
    /// without devices), as opposed to a broken installation. Tests skip on
    /// these.
    pub fn is_no_gpu(&self) -> bool {
        matches!(
            self,
            CudaInitError::NoDriver | CudaInitError::NoDevice { count: 0, .. }
        )
    }
}

impl fmt::Display for CudaInitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CudaInitError::NoDriver => write!(
                f,
                "no CUDA driver found (libcuda could not be loaded; install the NVIDIA driver or run on a machine with an NVIDIA GPU)"
            ),
            CudaInitError::NoDevice { count: 0, .. } => write!(
                f,
                "no CUDA device found (the driver is installed but reports no GPU)"
            ),
            CudaInitError::NoDevice { ordinal, count } => write!(
                f,
                "no CUDA device {ordinal}: the driver reports {count} (ordinals 0..{count}); pass one of those"
            ),
            CudaInitError::MissingLibrary { name } => write!(
                f,
                "the CUDA driver was found but {name} could not be loaded; add the folder that holds it (the CUDA toolkit's lib64, or a pip nvidia-* package's lib) to LD_LIBRARY_PATH"
            ),
            CudaInitError::Driver { during, message } => {
                write!(
                    f,
                    "opening the CUDA device failed during {during}: {message}"
                )
            }
        }
    }
}

impl std::error::Error for CudaInitError {}

impl From<CudaInitError> for Error {
    fn from(e: CudaInitError) -> Self {
        Error::InvalidArgument {
            op: "cuda::device",
            reason: intern(e.to_string()),
        }
    }
}

/// Compiled modules and looked-up functions (NOTE [Kernel modules]).
#[derive(Default)]
pub(crate) struct KernelCache {
    pub(crate) modules: HashMap<DType, Arc<CudaModule>>,
    pub(crate) functions: HashMap<(DType, &'static str), CudaFunction>,
}

/// One CUDA GPU as a kael backend. Get it through [`device`] or
/// [`backend`]; see the module docs.
pub struct CudaBackend {
    ordinal: u32,
    name: String,
    capability: (i32, i32),
    /// NVRTC's `--gpu-architecture` (`compute_90`).
    arch: String,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    allocator: Arc<CudaAllocator>,
    /// cuBLAS handles must not be used by two threads at once.
    blas: Mutex<CudaBlas>,
    kernels: Mutex<KernelCache>,
}

impl fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CudaBackend({}: {}, sm_{}{})",
            self.ordinal, self.name, self.capability.0, self.capability.1
        )
    }
}

/// Opened backends, one per ordinal (see the module docs).
static REGISTRY: Mutex<Vec<(u32, Arc<CudaBackend>)>> = Mutex::new(Vec::new());

/// The CUDA device `ordinal` as a kael [`Device`] (the same backend on
/// every call).
///
/// # Errors
/// [`CudaInitError::NoDriver`] on a machine without the NVIDIA driver,
/// [`CudaInitError::NoDevice`] for a missing ordinal, and the other
/// variants for a broken installation.
pub fn device(ordinal: u32) -> std::result::Result<Device, CudaInitError> {
    let b: Shared<dyn Backend> = backend(ordinal)?;
    Ok(Device::from_backend(b))
}

/// The backend of CUDA device `ordinal`, for its memory figures, stream and
/// context (the same one [`device`] wraps).
///
/// # Errors
/// As [`device`].
pub fn backend(ordinal: u32) -> std::result::Result<Arc<CudaBackend>, CudaInitError> {
    let mut reg = lock(&REGISTRY);
    if let Some((_, b)) = reg.iter().find(|(o, _)| *o == ordinal) {
        return Ok(b.clone());
    }
    // cudarc panics on a symbol missing from the loaded library (a driver
    // older than the bindings); report that as an error too.
    let made = std::panic::catch_unwind(|| CudaBackend::open(ordinal)).unwrap_or_else(|p| {
        let message = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_string()))
            .unwrap_or_else(|| "a panic in the CUDA bindings".to_string());
        Err(CudaInitError::Driver {
            during: "loading the CUDA libraries",
            message,
        })
    });
    let b = Arc::new(made?);
    reg.push((ordinal, b.clone()));
    Ok(b)
}

/// How many CUDA devices the driver reports.
///
/// # Errors
/// [`CudaInitError::NoDriver`] without a driver; driver failures.
pub fn device_count() -> std::result::Result<usize, CudaInitError> {
    // SAFETY: only tries to dlopen libcuda under its usual names.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(CudaInitError::NoDriver);
    }
    match CudaContext::device_count() {
        Ok(n) => Ok(usize::try_from(n).unwrap_or(0)),
        Err(DriverError(cudarc::driver::sys::CUresult::CUDA_ERROR_NO_DEVICE)) => Ok(0),
        Err(e) => Err(CudaInitError::Driver {
            during: "cuInit",
            message: format!("{e:?}"),
        }),
    }
}

impl CudaBackend {
    fn open(ordinal: u32) -> std::result::Result<CudaBackend, CudaInitError> {
        let count = device_count()?;
        if ordinal as usize >= count {
            return Err(CudaInitError::NoDevice { ordinal, count });
        }
        // SAFETY: only tries to dlopen libnvrtc under its usual names.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(CudaInitError::MissingLibrary { name: "libnvrtc" });
        }
        // SAFETY: only tries to dlopen libcublas under its usual names.
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(CudaInitError::MissingLibrary { name: "libcublas" });
        }
        let drv = |during: &'static str| {
            move |e: DriverError| CudaInitError::Driver {
                during,
                message: format!("{e:?}"),
            }
        };
        let ctx = CudaContext::new(ordinal as usize).map_err(drv("creating the context"))?;
        let stream = ctx.new_stream().map_err(drv("creating the stream"))?;
        let blas = CudaBlas::new(stream.clone()).map_err(|e| CudaInitError::Driver {
            during: "creating the cuBLAS handle",
            message: format!("{e:?}"),
        })?;
        let capability = ctx
            .compute_capability()
            .map_err(drv("reading the compute capability"))?;
        let name = ctx.name().map_err(drv("reading the device name"))?;
        let allocator = Arc::new(CudaAllocator::new(ctx.clone(), stream.clone()));
        Ok(CudaBackend {
            ordinal,
            name,
            capability,
            arch: format!("compute_{}{}", capability.0, capability.1),
            ctx,
            stream,
            allocator,
            blas: Mutex::new(blas),
            kernels: Mutex::new(KernelCache::default()),
        })
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }

    /// The GPU's name, as the driver reports it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The compute capability (major, minor), e.g. (9, 0) for an H100/H200.
    pub fn compute_capability(&self) -> (i32, i32) {
        self.capability
    }

    /// The stream every operation of this backend is queued on (to time
    /// work with events, or to order other CUDA work with kael's).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The CUDA context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The caching allocator.
    pub fn caching_allocator(&self) -> &Arc<CudaAllocator> {
        &self.allocator
    }

    /// Bytes in use, cached and reserved on this device.
    pub fn memory_stats(&self) -> CudaMemStats {
        self.allocator.memory_stats()
    }

    /// Returns cached (freed) blocks to the driver.
    ///
    /// # Errors
    /// Driver failures.
    pub fn release_cached(&self) -> Result<()> {
        self.allocator.release_cached()
    }
}

impl Backend for CudaBackend {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Cuda(self.ordinal)
    }

    fn is_host_memory(&self) -> bool {
        false
    }

    fn allocator(&self) -> Shared<dyn Allocator> {
        self.allocator.clone()
    }

    fn synchronize(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .and_then(|()| self.stream.synchronize())
            .map_err(|e| driver_error("synchronize", e))
    }

    fn provenance(&self, family: Family) -> Provenance {
        // Every primitive family has a CUDA kernel; the fused ones are
        // composed from them (NOTE [Fused families]).
        match family.kind() {
            Kind::Primitive => Provenance::Own,
            Kind::Fused => Provenance::Composed,
        }
    }

    fn write_bytes(&self, dst: &Storage, byte_offset: usize, src: &[u8]) -> Result<()> {
        self.write_storage(dst, byte_offset, src)
    }

    fn read_bytes(&self, src: &Storage, byte_offset: usize, dst: &mut [u8]) -> Result<()> {
        self.read_storage(src, byte_offset, dst)
    }

    fn copy_strided(&self, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.copy(src, dst)
    }

    fn cast(&self, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.cast_to(src, dst)
    }

    fn fill(&self, dst: Dst<'_>, value: f64) -> Result<()> {
        self.fill_with(dst, value)
    }

    fn unary(&self, op: UnaryOp, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.unary_op(op, src, dst)
    }

    fn binary(&self, op: BinaryOp, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.binary_op(op, lhs, rhs, dst)
    }

    fn compare(&self, op: CmpOp, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.compare_op(op, lhs, rhs, dst)
    }

    fn where_cond(
        &self,
        cond: Src<'_>,
        on_true: Src<'_>,
        on_false: Src<'_>,
        dst: Dst<'_>,
    ) -> Result<()> {
        self.where_op(cond, on_true, on_false, dst)
    }

    fn reduce(&self, op: ReduceOp, src: Src<'_>, dims: &[usize], dst: Dst<'_>) -> Result<()> {
        self.reduce_op(op, src, dims, dst)
    }

    fn arg_reduce(&self, op: ArgReduceOp, src: Src<'_>, dim: usize, dst: Dst<'_>) -> Result<()> {
        self.arg_reduce_op(op, src, dim, dst)
    }

    fn softmax(&self, src: Src<'_>, dim: usize, log: bool, dst: Dst<'_>) -> Result<()> {
        self.softmax_op(src, dim, log, dst)
    }

    fn matmul(&self, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.matmul_op(lhs, rhs, dst)
    }

    fn index_select(&self, src: Src<'_>, dim: usize, indices: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.index_select_op(src, dim, indices, dst)
    }

    fn gather(&self, src: Src<'_>, dim: usize, index: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.gather_op(src, dim, index, dst)
    }

    fn index_add(&self, dst: Dst<'_>, dim: usize, indices: Src<'_>, src: Src<'_>) -> Result<()> {
        self.index_add_op(dst, dim, indices, src)
    }

    fn scatter_add(&self, dst: Dst<'_>, dim: usize, index: Src<'_>, src: Src<'_>) -> Result<()> {
        self.scatter_add_op(dst, dim, index, src)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intern_keeps_one_copy_per_text() {
        let a = intern("kael test message".to_string());
        let b = intern("kael test message".to_string());
        assert!(std::ptr::eq(a, b));
    }

    #[test]
    fn no_driver_reads_as_a_skip_reason() {
        let e = CudaInitError::NoDriver;
        assert!(e.is_no_gpu());
        assert!(e.to_string().starts_with("no CUDA driver found ("));
        assert!(!CudaInitError::MissingLibrary { name: "libnvrtc" }.is_no_gpu());
    }

    /// On a machine without a driver, opening a device is an error, never a
    /// panic; with one, it succeeds or names the problem.
    #[test]
    fn opening_device_zero_returns_instead_of_panicking() {
        match device(0) {
            Ok(d) => assert_eq!(d.kind(), DeviceKind::Cuda(0)),
            Err(e) => println!("skipped: {e}"),
        }
    }
}
