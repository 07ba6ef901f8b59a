//! The backend boundary: every kernel crosses it.
//!
//! Kernels see storages, layouts and dtypes ([`Src`], [`Dst`]), never tensors
//! or autograd. The tensor layer has already validated shapes, dims, dtypes
//! and devices, broadcast operands to the output shape (stride 0), and
//! allocated the destination.
//!
//! NOTE [Aliasing contract]
//! A source passed to a kernel either lives in a different storage from the
//! destination, or is exactly the destination (same storage *and* equal
//! layout: `a.add_(&a)`). Partially overlapping sources are copied by the
//! tensor layer first. So a kernel reading element `i` of an aliased source
//! and then writing element `i` of the destination is always correct, and
//! results never depend on write order.
//!
//! The trait's kernels come in families (copies; elementwise: unary,
//! binary, compare, where; reductions and softmax; matmul; indexing). A
//! kernel a backend does not override is inherited as its
//! [`Backend::inherit`] says (NOTE [Inherited kernels]): the reference
//! CPU kernel for a host-memory backend, a host-staged composite of its
//! byte copies for a device-memory backend, or [`Error::Unsupported`] (the
//! default), which the conformance suite reports.

pub mod contract;
pub mod declared;
pub mod family;
mod inherit;
pub use family::{Family, Provenance};
pub use inherit::Inherit;

use crate::allocator::Allocator;
use crate::device_kind::DeviceKind;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::shared::{MaybeSendSync, Shared};
use crate::storage::Storage;

/// A kernel input: a storage read through a layout as elements of a dtype.
#[derive(Clone, Copy, Debug)]
pub struct Src<'a> {
    /// The bytes.
    pub storage: &'a Storage,
    /// Where the elements are.
    pub layout: &'a Layout,
    /// How to read them.
    pub dtype: DType,
}

/// A kernel output; same fields as [`Src`], written instead of read.
pub type Dst<'a> = Src<'a>;

impl Src<'_> {
    /// Whether this operand is the destination itself (see NOTE [Aliasing contract]).
    pub fn is_exactly(&self, dst: &Dst<'_>) -> bool {
        core::ptr::eq(self.storage, dst.storage)
    }
}

pub use crate::ops::{BinaryOp, CmpOp, UnaryOp};

/// Reductions over a set of dims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// Sum (f32 sums accumulate in f64 on the reference backend).
    Sum,
    /// Maximum (NaN propagates).
    Max,
    /// Minimum (NaN propagates).
    Min,
    /// Product.
    Prod,
}

impl ReduceOp {
    /// The op's name (its `Tensor` method).
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Prod => "prod",
        }
    }
}

/// Index-of reductions along one dim; the destination is `I64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgReduceOp {
    /// Index of the (first) maximum.
    ArgMax,
    /// Index of the (first) minimum.
    ArgMin,
}

impl ArgReduceOp {
    /// The op's name (its `Tensor` method).
    pub const fn name(self) -> &'static str {
        match self {
            ArgReduceOp::ArgMax => "argmax",
            ArgReduceOp::ArgMin => "argmin",
        }
    }
}

/// One backend: allocation, copies, and every kernel family.
///
/// See NOTE [Aliasing contract]. Shapes in `Dst` are the output shape; the
/// tensor layer has already validated every argument except index *values*
/// (which only a kernel can read), and kernels report bad indices as
/// [`Error::IndexOutOfRange`].
pub trait Backend: MaybeSendSync {
    /// The device's identity.
    fn kind(&self) -> DeviceKind;

    /// Whether storage bytes are host memory the CPU may read and write.
    fn is_host_memory(&self) -> bool;

    /// Where new storage comes from.
    fn allocator(&self) -> Shared<dyn Allocator>;

    /// What the kernels this backend does not override do (NOTE [Inherited
    /// kernels]); [`Inherit::Nothing`] unless overridden.
    fn inherit(&self) -> Inherit {
        Inherit::Nothing
    }

    /// Where this backend's kernels of `family` come from (NOTE [Family
    /// table]): a backend says which families it runs itself; the default
    /// follows from [`Backend::inherit`] ([`family::inherited`]).
    fn provenance(&self, family: Family) -> Provenance {
        family::inherited(self, family)
    }

    /// Waits for queued work (no-op on synchronous backends).
    ///
    /// # Errors
    /// Backend failures.
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    /// Told, before an op computes its result on the host from a tensor's
    /// values (`sort`, `topk`, `nonzero`, ...: the ops with no kernel
    /// family), which op it is. Nothing to do for a backend that runs
    /// kernels; the plan tracer refuses such an op by name at
    /// `Plan::build`, since a replay could not recompute it.
    fn host_computed(&self, op: &'static str) {
        let _ = op;
    }

    /// Copies host bytes into a storage at `byte_offset`.
    ///
    /// # Errors
    /// Out-of-range ranges, backend failures.
    fn write_bytes(&self, dst: &Storage, byte_offset: usize, src: &[u8]) -> Result<()> {
        if let Inherit::From(from) = self.inherit() {
            return from.backend().write_bytes(dst, byte_offset, src);
        }
        Err(Error::Unsupported {
            op: "write_bytes",
            device: self.kind(),
        })
    }

    /// Copies storage bytes at `byte_offset` into host memory.
    ///
    /// # Errors
    /// Out-of-range ranges, backend failures.
    fn read_bytes(&self, src: &Storage, byte_offset: usize, dst: &mut [u8]) -> Result<()> {
        if let Inherit::From(from) = self.inherit() {
            return from.backend().read_bytes(src, byte_offset, dst);
        }
        Err(Error::Unsupported {
            op: "read_bytes",
            device: self.kind(),
        })
    }

    /// `dst = src` elementwise, same dtype, any layouts of one shape.
    ///
    /// # Errors
    /// Backend failures.
    fn copy_strided(&self, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        inherit::run(self, "copy", [src, dst], |k, [s, d]| k.copy_strided(s, d))
    }

    /// `dst = src as dst.dtype` elementwise.
    ///
    /// # Errors
    /// Backend failures.
    fn cast(&self, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        inherit::run(self, "to_dtype", [src, dst], |k, [s, d]| k.cast(s, d))
    }

    /// Sets every element of `dst` to `value` (converted to its dtype).
    ///
    /// NOTE [Overlapping fills]
    /// `dst` may name one element at several positions (`fill_` on
    /// `unfold` windows or a sliding `as_strided` view, as PyTorch allows):
    /// a backend writes the same value there more than once. The reference
    /// kernel writes through raw pointers in sequence; the threaded backend
    /// splits only contiguous destinations (which cannot overlap) across
    /// threads; a CUDA thread per position stores the same value.
    ///
    /// # Errors
    /// Backend failures.
    fn fill(&self, dst: Dst<'_>, value: f64) -> Result<()> {
        inherit::run(self, "fill", [dst], |k, [d]| k.fill(d, value))
    }

    /// `dst = op(src)`; `src` may be exactly `dst` (in-place).
    ///
    /// # Errors
    /// Backend failures.
    fn unary(&self, op: UnaryOp, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        inherit::run(self, op.name(), [src, dst], |k, [s, d]| k.unary(op, s, d))
    }

    /// `dst = op(lhs, rhs)`; either source may be exactly `dst`.
    ///
    /// # Errors
    /// Backend failures.
    fn binary(&self, op: BinaryOp, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        inherit::run(self, op.name(), [lhs, rhs, dst], |k, [a, b, d]| {
            k.binary(op, a, b, d)
        })
    }

    /// `dst = lhs op rhs` into a `Bool` destination.
    ///
    /// # Errors
    /// Backend failures.
    fn compare(&self, op: CmpOp, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        inherit::run(self, "compare", [lhs, rhs, dst], |k, [a, b, d]| {
            k.compare(op, a, b, d)
        })
    }

    /// `dst = cond ? on_true : on_false` (cond is `Bool`).
    ///
    /// # Errors
    /// Backend failures.
    fn where_cond(
        &self,
        cond: Src<'_>,
        on_true: Src<'_>,
        on_false: Src<'_>,
        dst: Dst<'_>,
    ) -> Result<()> {
        inherit::run(
            self,
            "where",
            [cond, on_true, on_false, dst],
            |k, [c, t, f, d]| k.where_cond(c, t, f, d),
        )
    }

    /// Reduces `dims` (sorted, distinct) of `src`; `dst` has src's rank with
    /// those dims set to 1.
    ///
    /// # Errors
    /// Backend failures.
    fn reduce(&self, op: ReduceOp, src: Src<'_>, dims: &[usize], dst: Dst<'_>) -> Result<()> {
        inherit::run(self, "reduce", [src, dst], |k, [s, d]| {
            k.reduce(op, s, dims, d)
        })
    }

    /// Index of the max/min along `dim`; `dst` (`I64`) has that dim set to 1.
    ///
    /// # Errors
    /// Backend failures.
    fn arg_reduce(&self, op: ArgReduceOp, src: Src<'_>, dim: usize, dst: Dst<'_>) -> Result<()> {
        inherit::run(self, "argmax", [src, dst], |k, [s, d]| {
            k.arg_reduce(op, s, dim, d)
        })
    }

    /// Softmax (or log-softmax) along `dim`, numerically stable.
    ///
    /// # Errors
    /// Backend failures.
    fn softmax(&self, src: Src<'_>, dim: usize, log: bool, dst: Dst<'_>) -> Result<()> {
        inherit::run(self, "softmax", [src, dst], |k, [s, d]| {
            k.softmax(s, dim, log, d)
        })
    }

    /// Softmax's (or, with `log`, log-softmax's) backward along the rows
    /// of `out` (`[rows, n]`, contiguous; the tensor layer moves nothing,
    /// it only takes this path for the last dim): from the forward's output
    /// `out` = y and the gradient `grad`, `dx = y · (grad - Σ grad·y)` for
    /// softmax and `dx = grad - e^y · Σ grad` for log-softmax, the sums per
    /// row. f32 and f64; `grad` and `dx` contiguous `[rows, n]`.
    ///
    /// A fused family (NOTE [Fused families]), as [`Backend::layer_norm`]:
    /// without it the tensor layer composes the backward.
    ///
    /// # Errors
    /// [`Error::Unsupported`] as for [`Backend::layer_norm`]; backend failures.
    ///
    /// ```
    /// use kael_core::{backend::Src, Device, DType, Layout, Storage};
    /// let dev = Device::cpu();
    /// let f = |v: [f32; 2]| -> kael_core::Result<Storage> {
    ///     let s = Storage::zeroed(8, &dev)?;
    ///     dev.backend().write_bytes(&s, 0, bytemuck::cast_slice(&v))?;
    ///     Ok(s)
    /// };
    /// let (g, y, dx) = (f([1.0, 0.0])?, f([0.5, 0.5])?, f([0.0, 0.0])?);
    /// let l = Layout::contiguous(&[1, 2])?;
    /// let at = |s| Src { storage: s, layout: &l, dtype: DType::F32 };
    /// dev.backend().softmax_backward(at(&g), at(&y), false, at(&dx))?;
    /// let mut out = [0u8; 8];
    /// dev.backend().read_bytes(&dx, 0, &mut out)?;
    /// // y · (g - Σ g·y) = 0.5 · ([1, 0] - 0.5)
    /// assert_eq!(bytemuck::cast_slice::<u8, f32>(&out), &[0.25, -0.25]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    fn softmax_backward(&self, grad: Src<'_>, out: Src<'_>, log: bool, dx: Dst<'_>) -> Result<()> {
        match self.inherit() {
            Inherit::From(from) => from.backend().softmax_backward(grad, out, log, dx),
            _ => Err(Error::Unsupported {
                op: "softmax_backward",
                device: self.kind(),
            }),
        }
    }

    /// Layer norm of each row of `src` (`[rows, n]`, contiguous; the
    /// tensor layer flattens the normalised dims): `dst = (src - mean) ·
    /// rstd · weight + bias` (`weight`, `bias`: `[n]`, or absent), and
    /// `stats[r] = [mean, rstd]` (`[rows, 2]`), `rstd = 1/sqrt(var + eps)`
    /// with the biased variance. f32 and f64; `dst`, `stats` contiguous.
    ///
    /// A fused family (NOTE [Fused families]): a backend that neither
    /// overrides it nor inherits from a host device in place
    /// ([`Inherit::From`]) returns [`Error::Unsupported`], and the tensor
    /// layer composes the op from the backend's own primitives instead.
    ///
    /// # Errors
    /// [`Error::Unsupported`] as above; backend failures.
    #[allow(clippy::too_many_arguments)]
    fn layer_norm(
        &self,
        src: Src<'_>,
        weight: Option<Src<'_>>,
        bias: Option<Src<'_>>,
        eps: f64,
        dst: Dst<'_>,
        stats: Dst<'_>,
    ) -> Result<()> {
        match self.inherit() {
            Inherit::From(from) => from
                .backend()
                .layer_norm(src, weight, bias, eps, dst, stats),
            _ => Err(Error::Unsupported {
                op: "layer_norm",
                device: self.kind(),
            }),
        }
    }

    /// Layer norm's backward for `grad`, `src` (`[rows, n]`, contiguous),
    /// the forward's `stats` and `weight` (`[n]`, or absent): `dx`
    /// (`[rows, n]`) `= rstd · (ĝ - mean(ĝ) - x̂ · mean(ĝ · x̂))` per row,
    /// with `x̂ = (x - mean) · rstd` and `ĝ = grad · weight`, and `dwb`
    /// (`[2, n]`) `= [Σ_r grad · x̂, Σ_r grad]`. A fused family, like
    /// [`Backend::layer_norm`].
    ///
    /// # Errors
    /// [`Error::Unsupported`] as for [`Backend::layer_norm`]; backend failures.
    #[allow(clippy::too_many_arguments)]
    fn layer_norm_backward(
        &self,
        grad: Src<'_>,
        src: Src<'_>,
        stats: Src<'_>,
        weight: Option<Src<'_>>,
        dx: Dst<'_>,
        dwb: Dst<'_>,
    ) -> Result<()> {
        match self.inherit() {
            Inherit::From(from) => from
                .backend()
                .layer_norm_backward(grad, src, stats, weight, dx, dwb),
            _ => Err(Error::Unsupported {
                op: "layer_norm",
                device: self.kind(),
            }),
        }
    }

    /// The stable permutation that sorts each fiber of `src` along `dim`
    /// (ascending, or `descending`; NaN after every number), into the
    /// `I64` `dst` of `src`'s shape: `sort`, `argsort` and `topk` gather
    /// by it. Optional, like the fused families (NOTE [Fused families]):
    /// without it the tensor layer computes the permutation on the host.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when neither overridden nor inherited from a
    /// host device in place; backend failures.
    fn argsort(&self, src: Src<'_>, dim: usize, descending: bool, dst: Dst<'_>) -> Result<()> {
        match self.inherit() {
            Inherit::From(from) => from.backend().argsort(src, dim, descending, dst),
            _ => Err(Error::Unsupported {
                op: "argsort",
                device: self.kind(),
            }),
        }
    }

    /// A step of a declared family (NOTE [Declared families]): one entry
    /// for every family whose table row names its kernel. Optional, like
    /// the fused families: the tensor layer composes the op from
    /// primitives on a backend without it.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when neither overridden nor inherited from a
    /// host device in place; the family's contract; backend failures.
    fn declared(&self, call: declared::Call<'_>) -> Result<()> {
        match self.inherit() {
            Inherit::From(from) => from.backend().declared(call),
            _ => Err(Error::Unsupported {
                op: call.family.name(),
                device: self.kind(),
            }),
        }
    }

    /// Batched matrix product: `lhs [.., m, k] @ rhs [.., k, n] -> dst [.., m, n]`.
    /// Batch dims of `lhs`/`rhs` are already broadcast to `dst`'s (stride 0
    /// allowed); `dst` is contiguous.
    ///
    /// # Errors
    /// Backend failures.
    fn matmul(&self, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        inherit::run(self, "matmul", [lhs, rhs, dst], |k, [a, b, d]| {
            k.matmul(a, b, d)
        })
    }

    /// `dst` = slices of `src` along `dim` picked by the 1-D `indices` (I64/I32).
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] for an index outside `src`'s dim.
    fn index_select(&self, src: Src<'_>, dim: usize, indices: Src<'_>, dst: Dst<'_>) -> Result<()> {
        inherit::run(self, "index_select", [src, indices, dst], |k, [s, i, d]| {
            k.index_select(s, dim, i, d)
        })
    }

    /// `dst[i][j][k] = src[index[i][j][k]][j][k]` (for `dim == 0`), PyTorch `gather`.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] for an index outside `src`'s dim.
    fn gather(&self, src: Src<'_>, dim: usize, index: Src<'_>, dst: Dst<'_>) -> Result<()> {
        inherit::run(self, "gather", [src, index, dst], |k, [s, i, d]| {
            k.gather(s, dim, i, d)
        })
    }

    /// `dst.index_add_(dim, indices, src)`: slices of `src` added into `dst`
    /// at the positions `indices` (the backward of `index_select`).
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] for an index outside `dst`'s dim.
    fn index_add(&self, dst: Dst<'_>, dim: usize, indices: Src<'_>, src: Src<'_>) -> Result<()> {
        inherit::run(self, "index_add", [indices, src, dst], |k, [i, s, d]| {
            k.index_add(d, dim, i, s)
        })
    }

    /// `dst.scatter_add_(dim, index, src)` (the backward of `gather`).
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] for an index outside `dst`'s dim.
    fn scatter_add(&self, dst: Dst<'_>, dim: usize, index: Src<'_>, src: Src<'_>) -> Result<()> {
        inherit::run(self, "scatter_add", [index, src, dst], |k, [i, s, d]| {
            k.scatter_add(d, dim, i, s)
        })
    }
}
