//! Tracing: a device that runs every kernel on the reference CPU backend
//! and, while recording, writes each kernel call down with its buffers.
//!
//! NOTE [Buffer identity in a trace]
//! Kernels see storages, not tensors, so a recorded operand names its
//! storage's bytes. The tracing device hands out its own allocator, which
//! tells the log about every block it allocates and frees: a block
//! allocated while recording is a new buffer from its allocation on, and
//! an address seen in a kernel call that the log does not know is a
//! storage that existed before recording started (a parameter, an input, a
//! frozen weight). A freed address that is allocated again is a new buffer,
//! so reuse by the allocator never merges two tensors.

use super::format::kernel;
use crate::allocator::{AllocStats, Allocator};
use crate::backend::{ArgReduceOp, Backend, BinaryOp, CmpOp, Dst, Family, ReduceOp, Src, UnaryOp};
use crate::cpu::CpuBackend;
use crate::device::Device;
use crate::device_kind::DeviceKind;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::shared::{Lock, Shared};
use crate::storage::Storage;
use alloc::vec::Vec;
use core::alloc::Layout as MemLayout;
use core::hash::BuildHasherDefault;
use core::ptr::NonNull;

/// Buffers by data address (the autograd engine's FNV hasher: no_std, no
/// random state).
type ByAddr = hashbrown::HashMap<usize, usize, BuildHasherDefault<crate::autograd::rules::Fnv>>;

/// How a traced reference backend accumulates f32 sums: the plan replays
/// the same arithmetic, so its results are bit-identical to the eager
/// device's (NOTE [f32 accumulation] in [`crate::cpu::reduce`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accumulation {
    /// f32 sums in f64, as [`Device::cpu`] (the reference; soft-float on a
    /// Cortex-M).
    F64,
    /// f32 sums in Kahan-compensated f32, as a firmware `CpuBackend` built
    /// with `F32_ACC`.
    F32,
}

/// One recorded kernel.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kernel {
    /// Every element of the destination set to a value.
    Fill(f64),
    /// `dst = src`.
    Copy,
    /// `dst = op(src)`.
    Unary(UnaryOp),
    /// `dst = op(lhs, rhs)`.
    Binary(BinaryOp),
    /// `dst = lhs op rhs` (bool destination).
    Compare(CmpOp),
    /// `dst = cond ? on_true : on_false`.
    Where,
    /// A reduction over the dims whose bits are set.
    Reduce(ReduceOp, u32),
    /// `dst = lhs @ rhs`.
    Matmul,
    /// Softmax (log-softmax when `true`) along a dimension.
    Softmax(usize, bool),
    /// The fused softmax backward (of log-softmax when `true`).
    SoftmaxBackward(bool),
    /// Host bytes written into the destination's storage at a byte offset
    /// (a tensor made from data while recording: a constant of the plan).
    Write(usize, Vec<u8>),
    /// `dst = src as dst.dtype`.
    Cast,
    /// Index of the max/min along a dimension (`I64` destination).
    ArgReduce(ArgReduceOp, usize),
    /// An indexing family (its plan code) along a dimension: operands
    /// `[src, index, dst]` to select and gather, `[index, src, dst]` (dst
    /// read and written) to add and scatter.
    Index(u32, usize),
    /// The fused layer norm: `[src, weight?, bias?, dst, stats]`, with
    /// eps and whether weight and bias are there.
    LayerNorm(f64, bool, bool),
    /// Its backward: `[grad, src, stats, weight?, dx, dwb]`, with whether
    /// the weight is there.
    LayerNormBackward(bool),
    /// The sorting permutation along a dimension, descending or not:
    /// `[src, dst]`.
    ArgSort(usize, bool),
    /// A declared family's step (NOTE [Declared families]) with its
    /// parameter words and output count: `[inputs.., outputs..]`.
    Declared(Family, usize, Vec<u32>, usize),
}

impl Kernel {
    /// The name of the operation that runs this kernel, for errors
    /// (`Plan::build`'s refusals name it).
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Kernel::Fill(_) => "fill_",
            Kernel::Copy => "copy_",
            Kernel::Unary(op) => op.name(),
            Kernel::Binary(op) => op.name(),
            Kernel::Compare(op) => op.name(),
            Kernel::Where => "where",
            Kernel::Reduce(op, _) => op.name(),
            Kernel::Matmul => "matmul",
            Kernel::Softmax(_, false) => "softmax",
            Kernel::Softmax(_, true) => "log_softmax",
            Kernel::SoftmaxBackward(_) => "softmax (backward)",
            Kernel::Write(..) => "from_slice",
            Kernel::Cast => "to_dtype",
            Kernel::ArgReduce(op, _) => op.name(),
            Kernel::Index(code, _) => {
                use super::format::kernel;
                use crate::backend::Family;
                match *code {
                    kernel::INDEX_SELECT => Family::IndexSelect.name(),
                    kernel::GATHER => Family::Gather.name(),
                    kernel::INDEX_ADD => Family::IndexAdd.name(),
                    kernel::SCATTER_ADD => Family::ScatterAdd.name(),
                    _ => "indexing",
                }
            }
            Kernel::LayerNorm(..) => "layer_norm",
            Kernel::LayerNormBackward(_) => "layer_norm (backward)",
            Kernel::ArgSort(..) => "sort/argsort",
            Kernel::Declared(f, ..) => f.name(),
        }
    }

    /// How many operands, at the end, the kernel writes.
    pub(crate) fn outputs(&self) -> usize {
        match self {
            Kernel::LayerNorm(..) | Kernel::LayerNormBackward(_) => 2,
            Kernel::Declared(.., outs) => *outs,
            _ => 1,
        }
    }
}

/// One operand of a recorded kernel.
#[derive(Debug, Clone)]
pub(crate) struct Operand {
    pub(crate) buf: usize,
    pub(crate) layout: Layout,
    pub(crate) dtype: DType,
}

/// One recorded kernel call: sources, then the destination (last).
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub(crate) kernel: Kernel,
    pub(crate) operands: Vec<Operand>,
}

/// A storage seen while recording.
#[derive(Debug, Clone)]
pub(crate) struct Buffer {
    pub(crate) nbytes: usize,
    /// Allocated while recording (else it existed before: a parameter, an
    /// input or a constant).
    pub(crate) created: bool,
    /// Allocated zeroed (its zeros are part of what the trace computes).
    pub(crate) zeroed: bool,
    /// Still allocated when recording stopped.
    pub(crate) alive: bool,
    /// The data address, for matching bindings to buffers.
    pub(crate) addr: usize,
    /// For a storage from before recording: its bytes when first seen
    /// (what a constant of the plan holds); `None` when they could not be
    /// read or copied.
    pub(crate) data: Option<Vec<u8>>,
}

#[derive(Default)]
struct Log {
    recording: bool,
    calls: Vec<Call>,
    buffers: Vec<Buffer>,
    /// Data address -> buffer index, for the buffers allocated now.
    by_addr: ByAddr,
    /// The first kernel family a plan cannot replay.
    unsupported: Option<&'static str>,
    /// Set when the log could not grow (out of memory while recording).
    overflowed: bool,
}

impl Log {
    fn buffer_of(&mut self, s: &Storage) -> usize {
        let addr = s.as_ptr().addr();
        // Empty storages share one dangling address: each use is a buffer
        // of its own (it holds nothing, so no identity is lost).
        if s.nbytes() == 0 {
            self.buffers.push(Buffer {
                nbytes: 0,
                created: true,
                zeroed: false,
                alive: true,
                addr,
                data: None,
            });
            return self.buffers.len() - 1;
        }
        if let Some(&b) = self.by_addr.get(&addr) {
            return b;
        }
        let b = self.buffers.len();
        let data = s.read("Tracer::record").ok().and_then(|g| {
            let mut v = Vec::new();
            v.try_reserve_exact(g.bytes().len()).ok()?;
            v.extend_from_slice(g.bytes());
            Some(v)
        });
        self.buffers.push(Buffer {
            nbytes: s.nbytes(),
            created: false,
            zeroed: false,
            alive: true,
            addr,
            data,
        });
        self.by_addr.insert(addr, b);
        b
    }

    fn record(&mut self, kernel: Kernel, operands: &[Src<'_>]) {
        if !self.recording {
            return;
        }
        if self.calls.try_reserve(1).is_err() {
            self.overflowed = true;
            return;
        }
        let operands = operands
            .iter()
            .map(|o| Operand {
                buf: self.buffer_of(o.storage),
                layout: o.layout.clone(),
                dtype: o.dtype,
            })
            .collect();
        self.calls.push(Call { kernel, operands });
    }

    fn refuse(&mut self, op: &'static str) {
        if self.recording && self.unsupported.is_none() {
            self.unsupported = Some(op);
        }
    }
}

/// The allocator of a tracing device: the inner one, telling the log
/// about every block (NOTE [Buffer identity in a trace]).
struct TracingAllocator {
    inner: Shared<dyn Allocator>,
    log: Shared<Lock<Log>>,
}

impl TracingAllocator {
    fn allocated(&self, p: NonNull<u8>, layout: MemLayout, zeroed: bool) {
        self.log.with(|log| {
            if !log.recording || layout.size() == 0 {
                return;
            }
            let b = log.buffers.len();
            log.buffers.push(Buffer {
                nbytes: layout.size(),
                created: true,
                zeroed,
                alive: true,
                addr: p.as_ptr().addr(),
                data: None,
            });
            log.by_addr.insert(p.as_ptr().addr(), b);
        });
    }
}

impl Allocator for TracingAllocator {
    fn allocate(&self, layout: MemLayout) -> Result<NonNull<u8>> {
        let p = self.inner.allocate(layout)?;
        self.allocated(p, layout, false);
        Ok(p)
    }

    fn allocate_zeroed(&self, layout: MemLayout) -> Result<NonNull<u8>> {
        let p = self.inner.allocate_zeroed(layout)?;
        self.allocated(p, layout, true);
        Ok(p)
    }

    fn allocate_for_overwrite(&self, layout: MemLayout) -> Result<NonNull<u8>> {
        let p = self.inner.allocate_for_overwrite(layout)?;
        self.allocated(p, layout, false);
        Ok(p)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: MemLayout) {
        self.log.with(|log| {
            if let Some(b) = log.by_addr.remove(&(ptr.as_ptr().addr())) {
                log.buffers[b].alive = false;
            }
        });
        // SAFETY: forwarded unchanged: the caller's guarantee about `ptr`
        // and `layout` is about the inner allocator, which allocated it.
        unsafe { self.inner.deallocate(ptr, layout) }
    }

    fn stats(&self) -> AllocStats {
        self.inner.stats()
    }

    fn reset_peak(&self) {
        self.inner.reset_peak();
    }

    fn name(&self) -> &'static str {
        "tracing"
    }
}

/// What one recording saw: the kernel calls in order and every buffer
/// they touched. Turned into a [`Plan`](super::Plan) by
/// [`Plan::build`](super::Plan::build).
pub struct Recording {
    pub(crate) calls: Vec<Call>,
    pub(crate) buffers: Vec<Buffer>,
    pub(crate) accumulation: Accumulation,
    pub(crate) unsupported: Option<&'static str>,
}

impl core::fmt::Debug for Recording {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "Recording {{ {} kernel calls, {} buffers }}",
            self.calls.len(),
            self.buffers.len()
        )
    }
}

impl Recording {
    /// How many kernel calls were recorded.
    pub fn len(&self) -> usize {
        self.calls.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The operation each recorded kernel call runs, in order (the names
    /// `Plan::build`'s refusals use): what a step costs, call by call.
    pub fn kernel_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.calls.iter().map(|c| c.kernel.name())
    }
}

/// The backend of a tracing device: the reference CPU kernels, written
/// down while recording (NOTE [Planned execution] in [`super`]).
struct TracingBackend<const F32_ACC: bool> {
    inner: CpuBackend<{ crate::cpu::dtypes::ALL }, { crate::cpu::ops::ALL }, F32_ACC>,
    allocator: Shared<dyn Allocator>,
    log: Shared<Lock<Log>>,
}

/// The device kind of a tracing device.
pub const TRACE_KIND: DeviceKind = DeviceKind::Custom("trace");

impl<const F32_ACC: bool> TracingBackend<F32_ACC> {
    fn run(&self, kernel: Kernel, operands: &[Src<'_>], r: Result<()>) -> Result<()> {
        if r.is_ok() {
            self.log.with(|log| log.record(kernel, operands));
        }
        r
    }

    fn refuse(&self, op: &'static str) {
        self.log.with(|log| log.refuse(op));
    }
}

impl<const F32_ACC: bool> Backend for TracingBackend<F32_ACC> {
    fn kind(&self) -> DeviceKind {
        TRACE_KIND
    }

    fn is_host_memory(&self) -> bool {
        true
    }

    fn allocator(&self) -> Shared<dyn Allocator> {
        self.allocator.clone()
    }

    fn provenance(&self, family: crate::backend::Family) -> crate::backend::Provenance {
        self.inner.provenance(family)
    }

    fn write_bytes(&self, dst: &Storage, byte_offset: usize, src: &[u8]) -> Result<()> {
        self.inner.write_bytes(dst, byte_offset, src)?;
        self.log.with(|log| {
            if !log.recording {
                return;
            }
            let mut data = Vec::new();
            if data.try_reserve_exact(src.len()).is_err() || log.calls.try_reserve(1).is_err() {
                log.overflowed = true;
                return;
            }
            data.extend_from_slice(src);
            let buf = log.buffer_of(dst);
            log.calls.push(Call {
                kernel: Kernel::Write(byte_offset, data),
                operands: alloc::vec![Operand {
                    buf,
                    layout: Layout::from_dims(
                        crate::shape::Dims::new(),
                        crate::shape::Dims::new(),
                        0
                    ),
                    dtype: DType::U8,
                }],
            });
        });
        Ok(())
    }

    fn read_bytes(&self, src: &Storage, byte_offset: usize, dst: &mut [u8]) -> Result<()> {
        self.inner.read_bytes(src, byte_offset, dst)
    }

    fn copy_strided(&self, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        let r = self.inner.copy_strided(src, dst);
        self.run(Kernel::Copy, &[src, dst], r)
    }

    fn cast(&self, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        let r = self.inner.cast(src, dst);
        let k = if src.dtype == dst.dtype {
            Kernel::Copy
        } else {
            Kernel::Cast
        };
        self.run(k, &[src, dst], r)
    }

    fn fill(&self, dst: Dst<'_>, value: f64) -> Result<()> {
        let r = self.inner.fill(dst, value);
        self.run(Kernel::Fill(value), &[dst], r)
    }

    fn unary(&self, op: UnaryOp, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        let r = self.inner.unary(op, src, dst);
        self.run(Kernel::Unary(op), &[src, dst], r)
    }

    fn binary(&self, op: BinaryOp, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        let r = self.inner.binary(op, lhs, rhs, dst);
        self.run(Kernel::Binary(op), &[lhs, rhs, dst], r)
    }

    fn compare(&self, op: CmpOp, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        let r = self.inner.compare(op, lhs, rhs, dst);
        self.run(Kernel::Compare(op), &[lhs, rhs, dst], r)
    }

    fn where_cond(
        &self,
        cond: Src<'_>,
        on_true: Src<'_>,
        on_false: Src<'_>,
        dst: Dst<'_>,
    ) -> Result<()> {
        let r = self.inner.where_cond(cond, on_true, on_false, dst);
        self.run(Kernel::Where, &[cond, on_true, on_false, dst], r)
    }

    fn reduce(&self, op: ReduceOp, src: Src<'_>, dims: &[usize], dst: Dst<'_>) -> Result<()> {
        let r = self.inner.reduce(op, src, dims, dst);
        let mask = dims
            .iter()
            .fold(0u32, |m, &d| m | 1u32.checked_shl(d as u32).unwrap_or(0));
        self.run(Kernel::Reduce(op, mask), &[src, dst], r)
    }

    fn arg_reduce(&self, op: ArgReduceOp, src: Src<'_>, dim: usize, dst: Dst<'_>) -> Result<()> {
        let r = self.inner.arg_reduce(op, src, dim, dst);
        self.run(Kernel::ArgReduce(op, dim), &[src, dst], r)
    }

    fn softmax(&self, src: Src<'_>, dim: usize, log: bool, dst: Dst<'_>) -> Result<()> {
        let r = self.inner.softmax(src, dim, log, dst);
        self.run(Kernel::Softmax(dim, log), &[src, dst], r)
    }

    fn softmax_backward(&self, grad: Src<'_>, out: Src<'_>, log: bool, dx: Dst<'_>) -> Result<()> {
        let r = self.inner.softmax_backward(grad, out, log, dx);
        self.run(Kernel::SoftmaxBackward(log), &[grad, out, dx], r)
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
        let r = self.inner.layer_norm(src, weight, bias, eps, dst, stats);
        let mut ops: heapless::Vec<Src<'_>, 5> = heapless::Vec::new();
        for o in [Some(src), weight, bias, Some(dst), Some(stats)]
            .into_iter()
            .flatten()
        {
            let _ = ops.push(o);
        }
        let k = Kernel::LayerNorm(eps, weight.is_some(), bias.is_some());
        self.run(k, &ops, r)
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
        let r = self
            .inner
            .layer_norm_backward(grad, src, stats, weight, dx, dwb);
        let mut ops: heapless::Vec<Src<'_>, 6> = heapless::Vec::new();
        for o in [
            Some(grad),
            Some(src),
            Some(stats),
            weight,
            Some(dx),
            Some(dwb),
        ]
        .into_iter()
        .flatten()
        {
            let _ = ops.push(o);
        }
        self.run(Kernel::LayerNormBackward(weight.is_some()), &ops, r)
    }

    fn matmul(&self, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        let r = self.inner.matmul(lhs, rhs, dst);
        self.run(Kernel::Matmul, &[lhs, rhs, dst], r)
    }

    fn index_select(&self, src: Src<'_>, dim: usize, indices: Src<'_>, dst: Dst<'_>) -> Result<()> {
        let r = self.inner.index_select(src, dim, indices, dst);
        let k = Kernel::Index(kernel::INDEX_SELECT, dim);
        self.run(k, &[src, indices, dst], r)
    }

    fn gather(&self, src: Src<'_>, dim: usize, index: Src<'_>, dst: Dst<'_>) -> Result<()> {
        let r = self.inner.gather(src, dim, index, dst);
        self.run(Kernel::Index(kernel::GATHER, dim), &[src, index, dst], r)
    }

    fn index_add(&self, dst: Dst<'_>, dim: usize, indices: Src<'_>, src: Src<'_>) -> Result<()> {
        let r = self.inner.index_add(dst, dim, indices, src);
        let k = Kernel::Index(kernel::INDEX_ADD, dim);
        self.run(k, &[indices, src, dst], r)
    }

    fn scatter_add(&self, dst: Dst<'_>, dim: usize, index: Src<'_>, src: Src<'_>) -> Result<()> {
        let r = self.inner.scatter_add(dst, dim, index, src);
        let k = Kernel::Index(kernel::SCATTER_ADD, dim);
        self.run(k, &[index, src, dst], r)
    }

    fn argsort(&self, src: Src<'_>, dim: usize, descending: bool, dst: Dst<'_>) -> Result<()> {
        let r = self.inner.argsort(src, dim, descending, dst);
        self.run(Kernel::ArgSort(dim, descending), &[src, dst], r)
    }

    fn host_computed(&self, op: &'static str) {
        self.refuse(op);
    }

    fn declared(&self, call: crate::backend::declared::Call<'_>) -> Result<()> {
        let r = self.inner.declared(call);
        let operands: Vec<Src<'_>> = call.srcs.iter().chain(call.dsts).copied().collect();
        let k = Kernel::Declared(
            call.family,
            call.step,
            call.params.to_vec(),
            call.dsts.len(),
        );
        self.run(k, &operands, r)
    }
}

/// A device that runs the reference CPU kernels and can record what a
/// function of tensors does, for [`Plan::build`](super::Plan::build).
///
/// Build the model, its inputs and its optimizer on [`Tracer::device`],
/// run the step once eagerly if you like, then [`Tracer::record`] it.
///
/// ```
/// use kael_core::plan::{Accumulation, Tracer};
/// use kael_core::Tensor;
/// let tracer = Tracer::new(Accumulation::F64);
/// let x = Tensor::from_slice(&[1.0f32, -2.0], &[2], &tracer.device())?;
/// let (y, rec) = tracer.record(|| x.relu())?;
/// assert_eq!(y.to_vec::<f32>()?, vec![1.0, 0.0]);
/// assert_eq!(rec.len(), 1);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub struct Tracer {
    device: Device,
    log: Shared<Lock<Log>>,
    accumulation: Accumulation,
}

impl core::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Tracer({:?})", self.accumulation)
    }
}

impl Tracer {
    /// A tracing device over the reference CPU kernels with the global
    /// allocator, accumulating as `accumulation` says.
    pub fn new(accumulation: Accumulation) -> Self {
        Self::with_allocator(
            accumulation,
            Shared::new(crate::allocator::GlobalAllocator::new()),
        )
    }

    /// [`Tracer::new`] drawing tensor memory from `allocator`.
    pub fn with_allocator(accumulation: Accumulation, allocator: Shared<dyn Allocator>) -> Self {
        let log: Shared<Lock<Log>> = Shared::new(Lock::new(Log::default()));
        let tracing: Shared<dyn Allocator> = Shared::new(TracingAllocator {
            inner: allocator.clone(),
            log: log.clone(),
        });
        let backend: Shared<dyn Backend> = match accumulation {
            Accumulation::F64 => Shared::new(TracingBackend::<false> {
                inner: CpuBackend::with_allocator(allocator),
                allocator: tracing,
                log: log.clone(),
            }),
            Accumulation::F32 => Shared::new(TracingBackend::<true> {
                inner: CpuBackend::with_allocator(allocator),
                allocator: tracing,
                log: log.clone(),
            }),
        };
        Self {
            device: Device::from_backend(backend),
            log,
            accumulation,
        }
    }

    /// The device to build the model and its tensors on.
    pub fn device(&self) -> Device {
        self.device.clone()
    }

    /// How this device accumulates f32 sums.
    pub fn accumulation(&self) -> Accumulation {
        self.accumulation
    }

    /// Runs `f` once, eagerly, recording every kernel it launches; returns
    /// its result and the [`Recording`].
    ///
    /// The plan replays the kernels, not `f`: host control flow that
    /// depends on tensor values (reading a loss to decide something) is
    /// frozen as it went in this run.
    ///
    /// # Errors
    /// `f`'s error; [`Error::InvalidArgument`] when a recording is already
    /// running on this device; [`Error::OutOfMemory`] when the log could
    /// not grow.
    pub fn record<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<(T, Recording)> {
        let started = self.log.with(|log| {
            if log.recording {
                return false;
            }
            *log = Log {
                recording: true,
                ..Log::default()
            };
            // Storages that already exist are found by address when used.
            true
        });
        if !started {
            return Err(Error::InvalidArgument {
                op: "Tracer::record",
                reason: "a recording is already running on this device; record one function at a time (do not call record inside the recorded function)",
            });
        }
        let out = f();
        let log = self.log.with(|log| {
            log.recording = false;
            core::mem::take(log)
        });
        let out = out?;
        if log.overflowed {
            return Err(Error::OutOfMemory {
                requested: log.calls.len().saturating_add(1),
                available: None,
            });
        }
        Ok((
            out,
            Recording {
                calls: log.calls,
                buffers: log.buffers,
                accumulation: self.accumulation,
                unsupported: log.unsupported,
            },
        ))
    }
}
