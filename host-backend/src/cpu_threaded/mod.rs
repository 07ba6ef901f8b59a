//! The threaded CPU backend: host memory, kernels spread over its own
//! spinning worker pool for large work and run inline for small work.
//!
//! Tensors live in ordinary host memory ([`Backend::is_host_memory`]), so
//! moving them between this device and the reference CPU device shares the
//! storage instead of copying (see `Tensor::to_device`). Specialised:
//! matmul (the `gemm` crate, strided operands read in place), f32/f64
//! elementwise ops, copies of every dtype, last-dim, leading-dim and full
//! reductions, last-dim argmax/argmin, softmax and layer norm (forward and
//! backward, f32). Everything else runs the
//! reference kernels of [`kael_core::cpu`], so results are the reference's
//! on every layout.
//!
//! ```
//! use kael_core::{Device, DeviceKind, Tensor};
//! let dev = kael_host::cpu_threaded::device()?;
//! assert_eq!(dev.kind(), DeviceKind::ThreadedCpu);
//! let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[4], &dev)?;
//! assert_eq!(a.add(&a)?.to_vec::<f32>()?, vec![2.0, 4.0, 6.0, 8.0]);
//! # Ok::<(), kael_core::Error>(())
//! ```

mod adam;
mod affinity;
mod alloc;
mod batch_norm;
mod conv;
mod conv_direct;
mod declared;
mod elementwise;
mod engine;
mod float;
mod index;
mod matmul;
mod norm;
mod pool;
mod reduce;
mod softmax;
mod tiles;
mod vmath;

pub use alloc::{CachingAllocator, DEFAULT_CAP, MIN_CACHED, size_class};

use engine::Par;
use kael_core::allocator::Allocator;
use kael_core::backend::{
    ArgReduceOp, Backend, BinaryOp, CmpOp, Dst, Family, Provenance, ReduceOp, Src, UnaryOp,
};
use kael_core::cpu as reference;
use kael_core::shared::Shared;
use kael_core::storage::Storage;
use kael_core::{Device, DeviceKind, Error, Result};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Elements below which an op runs inline on the caller's thread (the
/// default parallel threshold): below ~32K elements a hand-off to the pool
/// costs more than the work (bandwidth-bound ops: below 64K, see
/// [`Builder::parallel_threshold`]).
pub const DEFAULT_THRESHOLD: usize = 1 << 15;

/// A threaded CPU device with one thread per available core.
///
/// # Errors
/// [`Error::InvalidArgument`] when the thread pool cannot be built.
pub fn device() -> Result<Device> {
    Builder::new().build()
}

/// Configures a threaded CPU device.
///
/// ```
/// use kael_host::cpu_threaded::Builder;
/// let dev = Builder::new().threads(2).parallel_threshold(1).build()?;
/// assert!(dev.is_host_memory());
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Builder {
    threads: usize,
    threshold: usize,
    cache_cap: usize,
    allocator: Option<Shared<dyn Allocator>>,
}

impl Default for Builder {
    fn default() -> Self {
        Self::new()
    }
}

impl Builder {
    /// Defaults: threads = available cores, [`DEFAULT_THRESHOLD`], a
    /// [`CachingAllocator`] holding at most [`DEFAULT_CAP`] free bytes.
    pub fn new() -> Self {
        Self {
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            threshold: DEFAULT_THRESHOLD,
            cache_cap: DEFAULT_CAP,
            allocator: None,
        }
    }

    /// Threads that run a parallel op, the calling thread included (at
    /// least 1): the pool starts `n - 1` workers.
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = n.max(1);
        self
    }

    /// Outputs with fewer elements than this (for matmul: fewer
    /// multiply-adds) run inline on the caller; bandwidth-bound ops (add,
    /// mul, copies, …) run inline below twice it (NOTE
    /// [Bandwidth-bound ops go parallel later] in `engine`).
    pub fn parallel_threshold(mut self, elements: usize) -> Self {
        self.threshold = elements.max(1);
        self
    }

    /// The most freed bytes the allocator keeps for reuse (0 disables the cache).
    pub fn cache_cap(mut self, bytes: usize) -> Self {
        self.cache_cap = bytes;
        self
    }

    /// Draws tensor memory from `allocator` instead of a new
    /// [`CachingAllocator`] (e.g. a test allocator).
    pub fn allocator(mut self, allocator: Shared<dyn Allocator>) -> Self {
        self.allocator = Some(allocator);
        self
    }

    /// The backend.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the thread pool cannot be built.
    pub fn build_backend(self) -> Result<ThreadedCpuBackend> {
        // The caller is one of the threads (NOTE [Caller participates] in
        // `engine`); a 1-thread device has no worker.
        let pool = pool::Pool::new(self.threads.saturating_sub(1)).map_err(|_| {
            Error::InvalidArgument {
                op: "cpu_threaded::Builder::build",
                reason: "the thread pool could not be started; try fewer threads",
            }
        })?;
        let cache = Shared::new(CachingAllocator::new(self.cache_cap));
        let allocator = self.allocator.unwrap_or_else(|| cache.clone());
        Ok(ThreadedCpuBackend {
            pool,
            threads: self.threads,
            threshold: self.threshold,
            allocator,
            cache,
            dispatches: AtomicUsize::new(0),
        })
    }

    /// A device over a new backend.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the thread pool cannot be built.
    pub fn build(self) -> Result<Device> {
        Ok(Device::from_backend(Shared::new(self.build_backend()?)))
    }
}

/// The backend; see the module docs.
pub struct ThreadedCpuBackend {
    pool: pool::Pool,
    threads: usize,
    threshold: usize,
    allocator: Shared<dyn Allocator>,
    cache: Shared<CachingAllocator>,
    dispatches: AtomicUsize,
}

impl ThreadedCpuBackend {
    /// Threads that run a parallel op: the pool's workers and the caller.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Threads that actually run a parallel op (the pool's workers plus
    /// the calling thread; 1 for a 1-thread device), for checking.
    pub fn pool_threads(&self) -> usize {
        self.pool.workers() + 1
    }

    /// The parallel threshold, in output elements.
    pub fn parallel_threshold(&self) -> usize {
        self.threshold
    }

    /// How many times a kernel handed work to the pool so far (work below
    /// the parallel threshold runs inline and does not count).
    pub fn parallel_dispatches(&self) -> usize {
        self.dispatches.load(Ordering::Relaxed)
    }

    /// The caching allocator (for its cache figures; unused when the
    /// builder was given another allocator).
    pub fn cache(&self) -> &CachingAllocator {
        &self.cache
    }

    /// The index of the threaded-backend pool worker running the caller
    /// (of any threaded device), `None` on any other thread, e.g. the
    /// caller's own (kernels below the threshold run there).
    pub fn current_thread_index() -> Option<usize> {
        pool::Pool::current_worker()
    }

    fn par(&self) -> Par<'_> {
        Par {
            pool: &self.pool,
            threads: self.threads,
            threshold: self.threshold,
            dispatches: &self.dispatches,
        }
    }
}

/// Whether a kernel has no output element to write. Empty work goes to the
/// reference kernels: the fast paths index storage at the layout's offset,
/// which an empty view (e.g. a zero-size piece of `cat`) may leave past the
/// storage's end.
fn is_empty(dst: &Dst<'_>) -> bool {
    dst.layout.numel() == 0
}

impl Backend for ThreadedCpuBackend {
    fn kind(&self) -> DeviceKind {
        DeviceKind::ThreadedCpu
    }

    fn is_host_memory(&self) -> bool {
        true
    }

    fn allocator(&self) -> Shared<dyn Allocator> {
        self.allocator.clone()
    }

    fn provenance(&self, family: Family) -> Provenance {
        // NOTE [Family table]: `where`, `index_add` and argsort call the
        // reference kernels on this backend's storages.
        match family {
            Family::Where | Family::IndexAdd | Family::ArgSort => {
                Provenance::Inherited(DeviceKind::Cpu)
            }
            Family::Conv2d | Family::Adam | Family::BatchNorm => Provenance::Own,
            f if f.is_declared() => Provenance::Inherited(DeviceKind::Cpu),
            _ => Provenance::Own,
        }
    }

    fn write_bytes(&self, dst: &Storage, byte_offset: usize, src: &[u8]) -> Result<()> {
        reference::write_host_bytes(dst, byte_offset, src)
    }

    fn read_bytes(&self, src: &Storage, byte_offset: usize, dst: &mut [u8]) -> Result<()> {
        reference::read_host_bytes(src, byte_offset, dst)
    }

    fn copy_strided(&self, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        if is_empty(&dst) {
            return reference::elementwise::copy_strided(src, dst);
        }
        elementwise::copy_strided(&self.par(), src, dst)
    }

    fn cast(&self, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        // The reference cast is instantiated per source dtype only, with a
        // per-element store chosen at run time (NOTE [Cast code size]);
        // the host keeps one monomorphic loop per pair of float dtypes,
        // the casts that mixed precision runs often.
        use kael_core::DType;
        use kael_core::dtype::Scalar;
        use kael_core::half::{bf16, f16};
        macro_rules! pairs {
            ($($s:ident => $S:ty),*) => {
                match (src.dtype, dst.dtype) {
                    $(
                        (DType::$s, DType::F32) => float_cast::<$S, f32>(src, dst),
                        (DType::$s, DType::F64) => float_cast::<$S, f64>(src, dst),
                        (DType::$s, DType::F16) => float_cast::<$S, f16>(src, dst),
                        (DType::$s, DType::BF16) => float_cast::<$S, bf16>(src, dst),
                    )*
                    _ => reference::elementwise::cast(src, dst),
                }
            };
        }
        fn float_cast<S: Scalar, D: Scalar>(src: Src<'_>, dst: Dst<'_>) -> Result<()> {
            if src.dtype == dst.dtype {
                return reference::elementwise::cast(src, dst);
            }
            reference::elementwise::map1::<S, D>("to_dtype", src, dst, |x| D::from_f64(x.to_f64()))
        }
        pairs!(F32 => f32, F64 => f64, F16 => f16, BF16 => bf16)
    }

    fn fill(&self, dst: Dst<'_>, value: f64) -> Result<()> {
        if is_empty(&dst) {
            return reference::elementwise::fill(dst, value);
        }
        elementwise::fill(&self.par(), dst, value)
    }

    fn unary(&self, op: UnaryOp, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        if is_empty(&dst) {
            return reference::elementwise::unary(op, src, dst);
        }
        elementwise::unary(&self.par(), op, src, dst)
    }

    fn binary(&self, op: BinaryOp, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        if is_empty(&dst) {
            return reference::elementwise::binary(op, lhs, rhs, dst);
        }
        elementwise::binary(&self.par(), op, lhs, rhs, dst)
    }

    fn compare(&self, op: CmpOp, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        if is_empty(&dst) {
            return reference::elementwise::compare(op, lhs, rhs, dst);
        }
        elementwise::compare(&self.par(), op, lhs, rhs, dst)
    }

    fn where_cond(
        &self,
        cond: Src<'_>,
        on_true: Src<'_>,
        on_false: Src<'_>,
        dst: Dst<'_>,
    ) -> Result<()> {
        reference::elementwise::where_cond(cond, on_true, on_false, dst)
    }

    fn reduce(&self, op: ReduceOp, src: Src<'_>, dims: &[usize], dst: Dst<'_>) -> Result<()> {
        if is_empty(&dst) {
            return reference::reduce::reduce(op, src, dims, dst);
        }
        reduce::reduce(&self.par(), op, src, dims, dst)
    }

    fn arg_reduce(&self, op: ArgReduceOp, src: Src<'_>, dim: usize, dst: Dst<'_>) -> Result<()> {
        if is_empty(&dst) {
            return reference::reduce::arg_reduce(op, src, dim, dst);
        }
        reduce::arg_reduce(&self.par(), op, src, dim, dst)
    }

    fn softmax(&self, src: Src<'_>, dim: usize, log: bool, dst: Dst<'_>) -> Result<()> {
        if is_empty(&dst) {
            return reference::reduce::softmax(src, dim, log, dst);
        }
        softmax::softmax(&self.par(), src, dim, log, dst)
    }

    fn softmax_backward(&self, grad: Src<'_>, out: Src<'_>, log: bool, dx: Dst<'_>) -> Result<()> {
        softmax::softmax_backward(&self.par(), grad, out, log, dx)
    }

    fn layer_norm(
        &self,
        src: Src<'_>,
        weight: Option<Src<'_>>,
        bias: Option<Src<'_>>,
        eps: f64,
        dst: Dst<'_>,
        stats: Dst<'_>,
    ) -> Result<()> {
        norm::layer_norm(&self.par(), src, weight, bias, eps, dst, stats)
    }

    fn layer_norm_backward(
        &self,
        grad: Src<'_>,
        src: Src<'_>,
        stats: Src<'_>,
        weight: Option<Src<'_>>,
        dx: Dst<'_>,
        dwb: Dst<'_>,
    ) -> Result<()> {
        norm::layer_norm_backward(&self.par(), grad, src, stats, weight, dx, dwb)
    }

    fn matmul(&self, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        if is_empty(&dst) {
            return reference::matmul::matmul(lhs, rhs, dst);
        }
        matmul::matmul(&self.par(), lhs, rhs, dst)
    }

    fn index_select(&self, src: Src<'_>, dim: usize, indices: Src<'_>, dst: Dst<'_>) -> Result<()> {
        index::index_select(&self.par(), src, dim, indices, dst)
    }

    fn gather(&self, src: Src<'_>, dim: usize, index: Src<'_>, dst: Dst<'_>) -> Result<()> {
        index::gather(&self.par(), src, dim, index, dst)
    }

    fn index_add(&self, dst: Dst<'_>, dim: usize, indices: Src<'_>, src: Src<'_>) -> Result<()> {
        reference::index::index_add(dst, dim, indices, src)
    }

    fn scatter_add(&self, dst: Dst<'_>, dim: usize, index: Src<'_>, src: Src<'_>) -> Result<()> {
        index::scatter_add(&self.par(), dst, dim, index, src)
    }

    fn argsort(&self, src: Src<'_>, dim: usize, descending: bool, dst: Dst<'_>) -> Result<()> {
        reference::sort::argsort(src, dim, descending, dst)
    }

    fn declared(&self, call: kael_core::backend::declared::Call<'_>) -> Result<()> {
        // NOTE [Declared families]: the reference kernels on this
        // backend's storages, a batched step's batch split across threads.
        declared::declared(&self.par(), call)
    }
}
