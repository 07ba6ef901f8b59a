//! The reference CPU backend: portable, single-threaded, strided,
//! deterministic, `no_std`. It defines correct; other backends are checked
//! against it.
//!
//! Kernels are generic functions over [`Scalar`](crate::dtype::Scalar) in the
//! submodules (public, so other host-memory backends can reuse them for the
//! ops they do not specialise).
//!
//! Each kernel also has an `_in` variant, generic over the dtypes (and, for
//! unary and binary ops, the ops) it may run: see NOTE [Kernel selection]
//! in [`select`].

pub mod elementwise;
pub mod index;
pub mod matmul;
pub mod norm;
pub mod reduce;
pub mod select;
pub mod softmax_grad;
pub mod sort;
pub(crate) mod strided;

pub use select::{dtypes, ops};

use crate::allocator::Allocator;
use crate::allocator::GlobalAllocator;
use crate::backend::family::Kind;
use crate::backend::{
    ArgReduceOp, Backend, BinaryOp, CmpOp, Dst, Family, Provenance, ReduceOp, Src, UnaryOp,
};
use crate::device::Device;
use crate::device_kind::DeviceKind;
use crate::error::{Error, Result};
use crate::shared::Shared;
use crate::storage::Storage;

/// The reference backend; see the module docs.
///
/// The const parameters choose what it links (NOTE [Kernel selection]):
/// - `DTYPES`: the dtypes its kernels run, a set of [`dtypes`] bits. Others
///   are [`Error::UnsupportedDType`].
/// - `OPS`: the kernel families and unary/binary ops it runs, a set of
///   [`ops`] bits. Others are [`Error::Unsupported`].
/// - `F32_ACC`: f32 sums and softmax computed in f32 (Kahan-compensated)
///   instead of f64 (NOTE [f32 accumulation] in [`reduce`]).
///
/// The defaults (every dtype and op, f64 accumulation) are the reference,
/// and [`Device::cpu`](crate::Device::cpu) uses them. A firmware image that
/// only runs an f32 MLP links a small subset:
///
/// ```
/// use kael_core::cpu::{dtypes, ops, CpuBackend};
/// use kael_core::allocator::GlobalAllocator;
/// use kael_core::{shared::Shared, DType, Device, Error, Tensor};
///
/// type Small = CpuBackend<{ dtypes::F32 }, { ops::MLP_INFERENCE }, true>;
/// let dev = Device::from_backend(Shared::new(Small::with_allocator(Shared::new(
///     GlobalAllocator::new(),
/// ))));
/// let x = Tensor::from_slice(&[1.0f32, -2.0], &[1, 2], &dev)?;
/// assert_eq!(x.relu()?.to_vec::<f32>()?, vec![1.0, 0.0]);
/// // f64 was left out: an error that says how to enable it, not a panic.
/// let e = x.to_dtype(DType::F64).unwrap_err();
/// assert!(matches!(e, Error::UnsupportedDType { dtype: DType::F64, .. }));
/// // so was sin
/// assert!(matches!(x.sin().unwrap_err(), Error::Unsupported { op: "sin", .. }));
/// # Ok::<(), kael_core::Error>(())
/// ```
pub struct CpuBackend<
    const DTYPES: u16 = { dtypes::ALL },
    const OPS: u128 = { ops::ALL },
    const F32_ACC: bool = false,
> {
    allocator: Shared<dyn Allocator>,
}

impl CpuBackend {
    /// The reference backend (every dtype and op) drawing memory from
    /// `allocator`.
    ///
    /// ```
    /// use kael_core::{allocator::GlobalAllocator, cpu::CpuBackend, shared::Shared, Backend};
    /// let b = CpuBackend::new(Shared::new(GlobalAllocator::new()));
    /// assert!(b.is_host_memory());
    /// ```
    pub fn new(allocator: Shared<dyn Allocator>) -> Self {
        Self { allocator }
    }
}

impl<const DTYPES: u16, const OPS: u128, const F32_ACC: bool> CpuBackend<DTYPES, OPS, F32_ACC> {
    /// A backend with this selection of dtypes and ops, drawing memory from
    /// `allocator` (see the type's docs).
    ///
    /// ```
    /// use kael_core::{allocator::GlobalAllocator, cpu::{dtypes, ops, CpuBackend}, shared::Shared};
    /// let b = CpuBackend::<{ dtypes::F32 }, { ops::ALL }>::with_allocator(Shared::new(
    ///     GlobalAllocator::new(),
    /// ));
    /// # let _ = b;
    /// ```
    pub fn with_allocator(allocator: Shared<dyn Allocator>) -> Self {
        Self { allocator }
    }

    /// `Ok` when `OPS` holds the family `bit`, else [`Error::Unsupported`].
    fn family(&self, bit: u128, op: &'static str) -> Result<()> {
        if OPS & bit != 0 {
            Ok(())
        } else {
            Err(Error::Unsupported {
                op,
                device: self.kind(),
            })
        }
    }
}

/// Runs a declared family's step (NOTE [Declared families]) with the
/// reference kernels, for every declared family and dtype: what a host
/// backend that does not override
/// [`Backend::declared`] calls on its
/// own storages (the threaded backend does).
///
/// # Errors
/// The family's contract; storage borrow conflicts; the kernel's.
pub fn run_declared(call: crate::backend::declared::Call<'_>) -> Result<()> {
    crate::backend::family::declared_rows::run_storages::<{ dtypes::ALL }, { ops::ALL }>(call)
}

/// Whether a declared family's step splits along a batch dimension
/// ([`Declared::batched`](crate::backend::declared::Declared::batched)).
pub fn declared_batched(family: crate::backend::Family, step: usize) -> bool {
    crate::backend::family::declared_rows::batched(family, step)
}

/// Whether a declared step's outputs are sums over a batch of the step
/// on its ranges
/// ([`Declared::summed`](crate::backend::declared::Declared::summed)).
pub fn declared_summed(family: crate::backend::Family, step: usize) -> bool {
    crate::backend::family::declared_rows::summed(family, step)
}

/// The inputs of a batched declared step that every range of the batch
/// reads whole
/// ([`Declared::shared_inputs`](crate::backend::declared::Declared::shared_inputs)).
pub fn declared_shared_inputs(family: crate::backend::Family, step: usize) -> u8 {
    crate::backend::family::declared_rows::shared_inputs(family, step)
}

/// A declared step's contract on `call`'s operands
/// ([`check`](crate::backend::declared::check)), and the scratch bytes it
/// needs: what a backend checks before it runs the step's kernel on
/// slices itself ([`run_declared_slices`]).
///
/// # Errors
/// The family's contract.
pub fn declared_contract(call: crate::backend::declared::Call<'_>) -> Result<usize> {
    use crate::backend::contract::Operand;
    use crate::backend::family::declared_rows;
    let op = call.family.name();
    let ops: alloc::vec::Vec<Operand<'_>> = call
        .srcs
        .iter()
        .chain(call.dsts)
        .map(|s| Operand::from(*s))
        .collect();
    declared_rows::check(call.family, call.step, call.params, &ops)?;
    declared_rows::scratch(call.family, call.step, call.params, &ops).ok_or(
        Error::InvalidArgument {
            op,
            reason: "the kernel's scratch size overflows usize; use smaller sizes",
        },
    )
}

/// Runs a declared step's reference kernel on slices, every dtype: for a
/// backend that splits the step itself (the threaded backend runs ranges
/// of a batched step's batch in parallel), after [`declared_contract`]
/// passed for the whole call.
///
/// # Errors
/// The kernel's (bad values in the data).
pub fn run_declared_slices(
    family: crate::backend::Family,
    step: usize,
    params: &[u32],
    ins: &[crate::backend::declared::In<'_>],
    outs: &mut [crate::backend::declared::Out<'_>],
    scratch: &mut [u8],
) -> Result<()> {
    crate::backend::family::declared_rows::run::<{ dtypes::ALL }, { ops::ALL }>(
        family, step, params, ins, outs, scratch,
    )
}

impl Device {
    /// The reference CPU backend with the global allocator.
    pub fn cpu() -> Self {
        Self::cpu_with_allocator(Shared::new(GlobalAllocator::new()))
    }

    /// The reference CPU backend drawing tensor memory from `allocator`
    /// (e.g. an [`ArenaAllocator`](crate::allocator::ArenaAllocator)).
    ///
    /// ```
    /// use kael_core::{allocator::ArenaAllocator, shared::Shared, DType, Device, Tensor};
    /// let buf: &'static mut [u8] = Box::leak(vec![0u8; 1024].into_boxed_slice());
    /// let dev = Device::cpu_with_allocator(Shared::new(ArenaAllocator::<16>::new(buf)));
    /// let t = Tensor::zeros(&[4, 4], DType::F32, &dev)?;
    /// assert_eq!(dev.allocator().stats().in_use, 64);
    /// drop(t);
    /// assert_eq!(dev.allocator().stats().in_use, 0);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn cpu_with_allocator(allocator: Shared<dyn Allocator>) -> Self {
        Self::from_backend(Shared::new(CpuBackend::new(allocator)))
    }
}

/// Copies `src` into host storage `dst` at `byte_offset` (shared by every
/// host-memory backend).
///
/// # Errors
/// [`Error::OutOfBounds`] when the range leaves the storage.
pub fn write_host_bytes(dst: &Storage, byte_offset: usize, src: &[u8]) -> Result<()> {
    let mut g = dst.write("write_bytes")?;
    let bytes = g.bytes_mut();
    let end = byte_offset
        .checked_add(src.len())
        .filter(|&e| e <= bytes.len())
        .ok_or(Error::OutOfBounds {
            op: "write_bytes",
            reach: byte_offset.saturating_add(src.len()),
            storage_len: bytes.len(),
        })?;
    bytes[byte_offset..end].copy_from_slice(src);
    Ok(())
}

/// Copies host storage bytes at `byte_offset` into `dst`.
///
/// # Errors
/// [`Error::OutOfBounds`] when the range leaves the storage.
pub fn read_host_bytes(src: &Storage, byte_offset: usize, dst: &mut [u8]) -> Result<()> {
    let g = src.read("read_bytes")?;
    let bytes = g.bytes();
    let end = byte_offset
        .checked_add(dst.len())
        .filter(|&e| e <= bytes.len())
        .ok_or(Error::OutOfBounds {
            op: "read_bytes",
            reach: byte_offset.saturating_add(dst.len()),
            storage_len: bytes.len(),
        })?;
    dst.copy_from_slice(&bytes[byte_offset..end]);
    Ok(())
}

impl<const DTYPES: u16, const OPS: u128, const F32_ACC: bool> Backend
    for CpuBackend<DTYPES, OPS, F32_ACC>
{
    fn kind(&self) -> DeviceKind {
        DeviceKind::Cpu
    }

    fn is_host_memory(&self) -> bool {
        true
    }

    fn allocator(&self) -> Shared<dyn Allocator> {
        self.allocator.clone()
    }

    fn provenance(&self, family: Family) -> Provenance {
        match (OPS & family.bits() != 0, family.kind()) {
            (true, _) => Provenance::Own,
            (false, Kind::Fused) => Provenance::Composed,
            (false, Kind::Primitive) => Provenance::Unsupported,
        }
    }

    fn write_bytes(&self, dst: &Storage, byte_offset: usize, src: &[u8]) -> Result<()> {
        write_host_bytes(dst, byte_offset, src)
    }

    fn read_bytes(&self, src: &Storage, byte_offset: usize, dst: &mut [u8]) -> Result<()> {
        read_host_bytes(src, byte_offset, dst)
    }

    fn copy_strided(&self, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.family(ops::COPY, "copy")?;
        elementwise::copy_strided_in::<DTYPES>(src, dst)
    }

    fn cast(&self, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.family(ops::CAST, "to_dtype")?;
        elementwise::cast_in::<DTYPES>(src, dst)
    }

    fn fill(&self, dst: Dst<'_>, value: f64) -> Result<()> {
        self.family(ops::FILL, "fill")?;
        elementwise::fill_in::<DTYPES>(dst, value)
    }

    fn unary(&self, op: UnaryOp, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        elementwise::unary_in::<DTYPES, OPS>(op, src, dst)
    }

    fn binary(&self, op: BinaryOp, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        elementwise::binary_in::<DTYPES, OPS>(op, lhs, rhs, dst)
    }

    fn compare(&self, op: CmpOp, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.family(ops::COMPARE, "compare")?;
        elementwise::compare_in::<DTYPES>(op, lhs, rhs, dst)
    }

    fn where_cond(
        &self,
        cond: Src<'_>,
        on_true: Src<'_>,
        on_false: Src<'_>,
        dst: Dst<'_>,
    ) -> Result<()> {
        self.family(ops::WHERE, "where")?;
        elementwise::where_cond_in::<DTYPES>(cond, on_true, on_false, dst)
    }

    fn reduce(&self, op: ReduceOp, src: Src<'_>, dims: &[usize], dst: Dst<'_>) -> Result<()> {
        self.family(ops::REDUCE, "reduce")?;
        reduce::reduce_in::<DTYPES, F32_ACC>(op, src, dims, dst)
    }

    fn arg_reduce(&self, op: ArgReduceOp, src: Src<'_>, dim: usize, dst: Dst<'_>) -> Result<()> {
        self.family(ops::ARG_REDUCE, "argmax")?;
        reduce::arg_reduce_in::<DTYPES>(op, src, dim, dst)
    }

    fn softmax(&self, src: Src<'_>, dim: usize, log: bool, dst: Dst<'_>) -> Result<()> {
        self.family(ops::SOFTMAX, "softmax")?;
        reduce::softmax_in::<DTYPES, F32_ACC>(src, dim, log, dst)
    }

    fn softmax_backward(&self, grad: Src<'_>, out: Src<'_>, log: bool, dx: Dst<'_>) -> Result<()> {
        self.family(ops::SOFTMAX_BACKWARD, "softmax_backward")?;
        softmax_grad::softmax_backward(grad, out, log, dx)
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
        self.family(ops::LAYER_NORM, "layer_norm")?;
        norm::layer_norm(src, weight, bias, eps, dst, stats)
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
        self.family(ops::LAYER_NORM, "layer_norm")?;
        norm::layer_norm_backward(grad, src, stats, weight, dx, dwb)
    }

    fn matmul(&self, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.family(ops::MATMUL, "matmul")?;
        matmul::matmul_in::<DTYPES>(lhs, rhs, dst)
    }

    fn index_select(&self, src: Src<'_>, dim: usize, indices: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.family(ops::INDEX_SELECT, "index_select")?;
        index::index_select_in::<DTYPES>(src, dim, indices, dst)
    }

    fn gather(&self, src: Src<'_>, dim: usize, index: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.family(ops::GATHER, "gather")?;
        index::gather_in::<DTYPES>(src, dim, index, dst)
    }

    fn index_add(&self, dst: Dst<'_>, dim: usize, indices: Src<'_>, src: Src<'_>) -> Result<()> {
        self.family(ops::INDEX_ADD, "index_add")?;
        index::index_add_in::<DTYPES>(dst, dim, indices, src)
    }

    fn scatter_add(&self, dst: Dst<'_>, dim: usize, index: Src<'_>, src: Src<'_>) -> Result<()> {
        self.family(ops::SCATTER_ADD, "scatter_add")?;
        index::scatter_add_in::<DTYPES>(dst, dim, index, src)
    }

    fn argsort(&self, src: Src<'_>, dim: usize, descending: bool, dst: Dst<'_>) -> Result<()> {
        self.family(ops::ARGSORT, "argsort")?;
        sort::argsort_in::<DTYPES>(src, dim, descending, dst)
    }

    fn declared(&self, call: crate::backend::declared::Call<'_>) -> Result<()> {
        use crate::backend::family::declared_rows;
        // A constant test first, so an image selecting no declared family
        // links none of their dispatch (NOTE [Kernel selection]).
        self.family(declared_rows::BITS, call.family.name())?;
        declared_rows::run_storages::<DTYPES, OPS>(call)
    }
}
