//! The kernel contract's argument checks, written once for every backend.
//!
//! NOTE [Kernel contract checks]
//! The tensor layer validates what users pass; a kernel still receives
//! storages and layouts it must index safely, and its `Backend` method is
//! public. The structural checks of each family (dtypes agree, dims in
//! range, shapes as documented on the `Backend` method, no destination
//! shared with a source) live here, and the reference and CUDA kernels call
//! the same functions, so their errors cannot drift apart. Index *values*
//! are checked by each kernel, which is the only place that reads them.

use super::{ArgReduceOp, Dst, ReduceOp, Src};
use crate::dtype::DType;
use crate::error::{ErrShape, Error, Result};
use crate::layout::Layout;

/// An operand as the contract checks see it: a layout, a dtype and the
/// identity of its buffer. The eager kernels check [`Src`]s (a storage's
/// address is its identity); a planned replay checks its steps' operands
/// (a buffer index is): one set of checks for both (NOTE [Kernel contract
/// checks]).
#[derive(Debug, Clone, Copy)]
pub struct Operand<'a> {
    /// Where the elements are.
    pub layout: &'a Layout,
    /// How to read them.
    pub dtype: DType,
    /// The buffer: two operands with the same value share memory.
    pub buffer: usize,
}

impl<'a> From<Src<'a>> for Operand<'a> {
    fn from(s: Src<'a>) -> Self {
        Operand {
            layout: s.layout,
            dtype: s.dtype,
            buffer: core::ptr::from_ref(s.storage).addr(),
        }
    }
}

/// [`no_alias`] over [`Operand`]s.
fn distinct(op: &'static str, srcs: &[&Operand<'_>], dst: &Operand<'_>) -> Result<()> {
    if srcs.iter().any(|s| s.buffer == dst.buffer) {
        return Err(shared_storage(op));
    }
    Ok(())
}

/// The refusal of a destination that shares a source's storage.
fn shared_storage(op: &'static str) -> Error {
    Error::InvalidArgument {
        op,
        reason: "the destination shares storage with a source; write into a fresh tensor or deep_clone() the source",
    }
}

/// The destination must not share storage with any of `srcs`.
///
/// # Errors
/// [`Error::InvalidArgument`] naming `op` and the fix.
///
/// ```
/// use kael_core::backend::{contract, Src};
/// use kael_core::{Device, DType, Layout, Storage};
/// let s = Storage::zeroed(16, &Device::cpu())?;
/// let l = Layout::contiguous(&[4])?;
/// let x = Src { storage: &s, layout: &l, dtype: DType::F32 };
/// assert!(contract::no_alias("gather", &[&x], &x).is_err());
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn no_alias(op: &'static str, srcs: &[&Src<'_>], dst: &Src<'_>) -> Result<()> {
    if srcs.iter().any(|s| core::ptr::eq(s.storage, dst.storage)) {
        return Err(shared_storage(op));
    }
    Ok(())
}

/// A source either lives in another storage or is exactly the destination
/// (same storage, layout and dtype): NOTE [Aliasing contract]. A source
/// that shares the destination's storage in any other way is refused here,
/// by name, rather than surfacing as a storage borrow conflict.
///
/// # Errors
/// [`Error::InvalidArgument`] naming `op` and the fix.
///
/// ```
/// use kael_core::backend::{contract, Src};
/// use kael_core::{Device, DType, Layout, Storage};
/// let s = Storage::zeroed(16, &Device::cpu())?;
/// let (all, head) = (Layout::contiguous(&[4])?, Layout::contiguous(&[2])?);
/// let dst = Src { storage: &s, layout: &head, dtype: DType::F32 };
/// assert!(contract::exact_alias("exp", &dst, &dst).is_ok()); // in place
/// let other = Src { storage: &s, layout: &Layout::new(&[2], &[1], 2)?, dtype: DType::F32 };
/// assert!(contract::exact_alias("exp", &other, &dst).is_err());
/// # let _ = all;
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn exact_alias(op: &'static str, src: &Src<'_>, dst: &Src<'_>) -> Result<()> {
    if core::ptr::eq(src.storage, dst.storage)
        && !(src.layout == dst.layout && src.dtype == dst.dtype)
    {
        return Err(Error::InvalidArgument {
            op,
            reason: "a source shares the destination's storage without being the destination (the kernel contract allows only exact aliasing); call the Tensor method, which copies such sources first, or deep_clone() the source",
        });
    }
    Ok(())
}

/// `got` must be `expected`.
///
/// # Errors
/// [`Error::DTypeMismatch`].
///
/// ```
/// use kael_core::{backend::contract, DType};
/// assert!(contract::same_dtype("gather", DType::F32, DType::F64).is_err());
/// ```
pub fn same_dtype(op: &'static str, expected: DType, got: DType) -> Result<()> {
    if expected == got {
        Ok(())
    } else {
        Err(Error::DTypeMismatch { op, expected, got })
    }
}

/// `dim` must be a dim of `l`.
///
/// # Errors
/// [`Error::DimOutOfRange`].
///
/// ```
/// use kael_core::{backend::contract, Layout};
/// assert!(contract::check_dim("gather", 2, &Layout::contiguous(&[3, 4])?).is_err());
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn check_dim(op: &'static str, dim: usize, l: &Layout) -> Result<()> {
    if dim < l.rank() {
        Ok(())
    } else {
        Err(Error::DimOutOfRange {
            op,
            dim: isize::try_from(dim).unwrap_or(isize::MAX),
            rank: l.rank(),
        })
    }
}

/// The accumulating families refuse bool.
///
/// # Errors
/// [`Error::UnsupportedDType`] for `Bool`.
///
/// ```
/// use kael_core::{backend::contract, DType};
/// assert!(contract::refuse_bool("index_add", DType::Bool).is_err());
/// ```
pub fn refuse_bool(op: &'static str, dtype: DType) -> Result<()> {
    if dtype == DType::Bool {
        Err(Error::UnsupportedDType {
            op,
            dtype,
            supported: "f32, f64, f16, bf16, i64, i32, u8",
        })
    } else {
        Ok(())
    }
}

fn shape_err(op: &'static str, expected: &[usize], got: &[usize]) -> Error {
    Error::ShapeMismatch {
        op,
        expected: ErrShape::of(expected),
        got: ErrShape::of(got),
    }
}

/// Whether `inner` has `outer`'s rank and is no larger in each dim except
/// `skip`.
fn fits(inner: &[usize], outer: &[usize], skip: Option<usize>) -> bool {
    inner.len() == outer.len()
        && inner
            .iter()
            .zip(outer)
            .enumerate()
            .all(|(d, (&i, &o))| Some(d) == skip || i <= o)
}

fn indices_1d(op: &'static str, indices: &Operand<'_>) -> Result<usize> {
    if indices.layout.rank() != 1 {
        return Err(Error::RankMismatch {
            op,
            expected: "1",
            got: indices.layout.rank(),
        });
    }
    Ok(indices.layout.numel())
}

/// `l`'s shape with `dim` (checked to be in range) set to `len`.
fn with_dim(l: &Layout, dim: usize, len: usize) -> crate::shape::Dims {
    let mut want = l.shape().clone();
    want[dim] = len;
    want
}

/// [`Backend::argsort`](super::Backend::argsort)'s contract: `dim` in
/// range, an `I64` destination of the source's shape, not the source.
///
/// # Errors
/// As the checks above name.
///
/// ```
/// # use kael_core::{backend::{contract, Src}, Device, DType, Layout, Storage};
/// # let dev = Device::cpu();
/// # let (s, d) = (Storage::zeroed(24, &dev)?, Storage::zeroed(48, &dev)?);
/// # let l = Layout::contiguous(&[3, 2])?;
/// let src = Src { storage: &s, layout: &l, dtype: DType::F32 };
/// let dst = Src { storage: &d, layout: &l, dtype: DType::I64 };
/// contract::argsort(src, 1, dst)?;
/// assert!(contract::argsort(src, 2, dst).is_err());
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn argsort(src: Src<'_>, dim: usize, dst: Dst<'_>) -> Result<()> {
    argsort_of(src.into(), dim, dst.into())
}

/// [`argsort`] over [`Operand`]s (a planned replay's steps).
///
/// # Errors
/// As [`argsort`].
pub(crate) fn argsort_of(src: Operand<'_>, dim: usize, dst: Operand<'_>) -> Result<()> {
    const OP: &str = "argsort";
    check_dim(OP, dim, src.layout)?;
    same_dtype(OP, DType::I64, dst.dtype)?;
    refuse_bool(OP, src.dtype)?;
    if src.layout.shape() != dst.layout.shape() {
        return Err(shape_err(OP, src.layout.shape(), dst.layout.shape()));
    }
    distinct(OP, &[&src], &dst)
}

/// [`Backend::cast`](super::Backend::cast)'s contract: one shape, and a
/// destination that is not the source (a cast is never in place).
///
/// # Errors
/// [`Error::ShapeMismatch`], [`Error::InvalidArgument`].
///
/// ```
/// # use kael_core::{backend::{contract, Src}, Device, DType, Layout, Storage};
/// # let dev = Device::cpu();
/// # let (s, d) = (Storage::zeroed(24, &dev)?, Storage::zeroed(48, &dev)?);
/// # let (ls, ld) = (Layout::contiguous(&[3, 2])?, Layout::contiguous(&[2, 3])?);
/// let src = Src { storage: &s, layout: &ls, dtype: DType::F32 };
/// let dst = Src { storage: &d, layout: &ld, dtype: DType::F64 };
/// assert!(contract::cast(src, dst).is_err()); // [3, 2] into [2, 3]
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn cast(src: Src<'_>, dst: Dst<'_>) -> Result<()> {
    cast_of(src.into(), dst.into())
}

/// [`cast`] over [`Operand`]s (a planned replay's steps).
///
/// # Errors
/// As [`cast`].
pub(crate) fn cast_of(src: Operand<'_>, dst: Operand<'_>) -> Result<()> {
    if src.layout.shape() != dst.layout.shape() {
        return Err(shape_err(
            "to_dtype",
            dst.layout.shape(),
            src.layout.shape(),
        ));
    }
    distinct("to_dtype", &[&src], &dst)
}

/// The sizes of a batched product `[.., m, k] @ [.., k, n]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatmulShape {
    /// Rows of lhs and dst.
    pub m: usize,
    /// The contracted dim.
    pub k: usize,
    /// Columns of rhs and dst.
    pub n: usize,
}

/// [`Backend::matmul`](super::Backend::matmul)'s contract: one dtype (not
/// bool), one rank >= 2, shapes `[.., m, k] @ [.., k, n] -> [.., m, n]`
/// with batch dims already broadcast to dst's, and a destination that is
/// not an operand.
///
/// # Errors
/// [`Error::DTypeMismatch`], [`Error::UnsupportedDType`] for bool,
/// [`Error::InvalidArgument`] naming what to use instead.
///
/// ```
/// use kael_core::backend::{contract, Src};
/// use kael_core::{Device, DType, Layout, Storage};
/// let dev = Device::cpu();
/// let (a, b, c) = (Storage::zeroed(24, &dev)?, Storage::zeroed(48, &dev)?, Storage::zeroed(32, &dev)?);
/// let (la, lb, lc) = (Layout::contiguous(&[2, 3])?, Layout::contiguous(&[3, 4])?, Layout::contiguous(&[2, 4])?);
/// let src = |s, l| Src { storage: s, layout: l, dtype: DType::F32 };
/// let mk = contract::matmul(src(&a, &la), src(&b, &lb), src(&c, &lc))?;
/// assert_eq!((mk.m, mk.k, mk.n), (2, 3, 4));
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn matmul(lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<MatmulShape> {
    const OP: &str = "matmul";
    for s in [&lhs, &rhs] {
        same_dtype(OP, dst.dtype, s.dtype)?;
    }
    refuse_bool(OP, dst.dtype)?;
    let bad = |reason| Error::InvalidArgument { op: OP, reason };
    let r = dst.layout.rank();
    if r < 2 || lhs.layout.rank() != r || rhs.layout.rank() != r {
        return Err(bad(
            "the kernel needs lhs, rhs and dst of one rank >= 2; use Tensor::matmul, which broadcasts",
        ));
    }
    let (ls, rs, ds) = (lhs.layout.shape(), rhs.layout.shape(), dst.layout.shape());
    let (m, k, n) = (ls[r - 2], ls[r - 1], rs[r - 1]);
    if rs[r - 2] != k || ds[r - 2] != m || ds[r - 1] != n {
        return Err(bad(
            "shapes must be lhs [.., m, k], rhs [.., k, n], dst [.., m, n]; use Tensor::matmul",
        ));
    }
    if ls[..r - 2] != ds[..r - 2] || rs[..r - 2] != ds[..r - 2] {
        return Err(bad(
            "batch dims must already be broadcast to dst's; use Tensor::matmul",
        ));
    }
    if core::ptr::eq(lhs.storage, dst.storage) || core::ptr::eq(rhs.storage, dst.storage) {
        return Err(bad(
            "the destination shares storage with an operand; write into a fresh tensor",
        ));
    }
    Ok(MatmulShape { m, k, n })
}

/// [`Backend::index_select`](super::Backend::index_select)'s contract:
/// one dtype, `dim` in range, 1-D indices, dst of src's shape with `dim`
/// the number of indices, dst not src.
///
/// # Errors
/// As the checks above name.
///
/// ```
/// # use kael_core::{backend::{contract, Src}, Device, DType, Layout, Storage};
/// # let dev = Device::cpu();
/// # let (s, i, d) = (Storage::zeroed(24, &dev)?, Storage::zeroed(16, &dev)?, Storage::zeroed(16, &dev)?);
/// # let (ls, li, ld) = (Layout::contiguous(&[3, 2])?, Layout::contiguous(&[2])?, Layout::contiguous(&[2, 2])?);
/// let (src, idx, dst) = (
///     Src { storage: &s, layout: &ls, dtype: DType::F32 },
///     Src { storage: &i, layout: &li, dtype: DType::I64 },
///     Src { storage: &d, layout: &ld, dtype: DType::F32 },
/// );
/// contract::index_select(src, 0, idx, dst)?; // [3, 2] rows 2 of them -> [2, 2]
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn index_select(src: Src<'_>, dim: usize, indices: Src<'_>, dst: Dst<'_>) -> Result<()> {
    index_select_of(src.into(), dim, indices.into(), dst.into())
}

/// [`index_select`] over [`Operand`]s (a planned replay's steps).
///
/// # Errors
/// As [`index_select`].
pub(crate) fn index_select_of(
    src: Operand<'_>,
    dim: usize,
    indices: Operand<'_>,
    dst: Operand<'_>,
) -> Result<()> {
    const OP: &str = "index_select";
    same_dtype(OP, dst.dtype, src.dtype)?;
    check_dim(OP, dim, src.layout)?;
    let n = indices_1d(OP, &indices)?;
    let want = with_dim(src.layout, dim, n);
    if dst.layout.shape() != &want {
        return Err(shape_err(OP, &want, dst.layout.shape()));
    }
    distinct(OP, &[&src], &dst)
}

/// [`Backend::gather`](super::Backend::gather)'s contract: one dtype,
/// `dim` in range, dst of the index's shape, the index no larger than src
/// outside `dim`, dst neither src nor the index.
///
/// # Errors
/// As the checks above name.
///
/// ```
/// # use kael_core::{backend::{contract, Src}, Device, DType, Layout, Storage};
/// # let dev = Device::cpu();
/// # let (s, i, d) = (Storage::zeroed(24, &dev)?, Storage::zeroed(16, &dev)?, Storage::zeroed(8, &dev)?);
/// # let (ls, li) = (Layout::contiguous(&[3, 2])?, Layout::contiguous(&[1, 2])?);
/// let (src, idx, dst) = (
///     Src { storage: &s, layout: &ls, dtype: DType::F32 },
///     Src { storage: &i, layout: &li, dtype: DType::I64 },
///     Src { storage: &d, layout: &li, dtype: DType::F32 },
/// );
/// contract::gather(src, 0, idx, dst)?;
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn gather(src: Src<'_>, dim: usize, index: Src<'_>, dst: Dst<'_>) -> Result<()> {
    gather_of(src.into(), dim, index.into(), dst.into())
}

/// [`gather`] over [`Operand`]s (a planned replay's steps).
///
/// # Errors
/// As [`gather`].
pub(crate) fn gather_of(
    src: Operand<'_>,
    dim: usize,
    index: Operand<'_>,
    dst: Operand<'_>,
) -> Result<()> {
    const OP: &str = "gather";
    same_dtype(OP, dst.dtype, src.dtype)?;
    check_dim(OP, dim, src.layout)?;
    let ishape = index.layout.shape();
    if dst.layout.shape() != ishape {
        return Err(shape_err(OP, ishape, dst.layout.shape()));
    }
    if !fits(ishape, src.layout.shape(), Some(dim)) {
        return Err(shape_err(OP, src.layout.shape(), ishape));
    }
    distinct(OP, &[&src, &index], &dst)
}

/// [`Backend::index_add`](super::Backend::index_add)'s contract: a
/// numeric dtype shared by dst and src, `dim` in range, 1-D indices, src of
/// dst's shape with `dim` the number of indices, dst neither src nor the
/// indices.
///
/// # Errors
/// As the checks above name.
///
/// ```
/// # use kael_core::{backend::{contract, Src}, Device, DType, Layout, Storage};
/// # let dev = Device::cpu();
/// # let (s, i, d) = (Storage::zeroed(8, &dev)?, Storage::zeroed(8, &dev)?, Storage::zeroed(24, &dev)?);
/// # let (ls, li, ld) = (Layout::contiguous(&[1, 2])?, Layout::contiguous(&[1])?, Layout::contiguous(&[3, 2])?);
/// let (dst, idx, src) = (
///     Src { storage: &d, layout: &ld, dtype: DType::F32 },
///     Src { storage: &i, layout: &li, dtype: DType::I64 },
///     Src { storage: &s, layout: &ls, dtype: DType::F32 },
/// );
/// contract::index_add(dst, 0, idx, src)?;
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn index_add(dst: Dst<'_>, dim: usize, indices: Src<'_>, src: Src<'_>) -> Result<()> {
    index_add_of(dst.into(), dim, indices.into(), src.into())
}

/// [`index_add`] over [`Operand`]s (a planned replay's steps).
///
/// # Errors
/// As [`index_add`].
pub(crate) fn index_add_of(
    dst: Operand<'_>,
    dim: usize,
    indices: Operand<'_>,
    src: Operand<'_>,
) -> Result<()> {
    const OP: &str = "index_add";
    refuse_bool(OP, dst.dtype)?;
    same_dtype(OP, dst.dtype, src.dtype)?;
    check_dim(OP, dim, dst.layout)?;
    let n = indices_1d(OP, &indices)?;
    let want = with_dim(dst.layout, dim, n);
    if src.layout.shape() != &want {
        return Err(shape_err(OP, &want, src.layout.shape()));
    }
    distinct(OP, &[&src, &indices], &dst)
}

/// [`Backend::scatter_add`](super::Backend::scatter_add)'s contract: a
/// numeric dtype shared by dst and src, `dim` in range, the index no
/// larger than src anywhere nor than dst outside `dim`, dst neither src
/// nor the index.
///
/// # Errors
/// As the checks above name.
///
/// ```
/// # use kael_core::{backend::{contract, Src}, Device, DType, Layout, Storage};
/// # let dev = Device::cpu();
/// # let (s, i, d) = (Storage::zeroed(8, &dev)?, Storage::zeroed(16, &dev)?, Storage::zeroed(24, &dev)?);
/// # let (li, ld) = (Layout::contiguous(&[1, 2])?, Layout::contiguous(&[3, 2])?);
/// let (dst, idx, src) = (
///     Src { storage: &d, layout: &ld, dtype: DType::F32 },
///     Src { storage: &i, layout: &li, dtype: DType::I64 },
///     Src { storage: &s, layout: &li, dtype: DType::F32 },
/// );
/// contract::scatter_add(dst, 0, idx, src)?;
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn scatter_add(dst: Dst<'_>, dim: usize, index: Src<'_>, src: Src<'_>) -> Result<()> {
    scatter_add_of(dst.into(), dim, index.into(), src.into())
}

/// [`scatter_add`] over [`Operand`]s (a planned replay's steps).
///
/// # Errors
/// As [`scatter_add`].
pub(crate) fn scatter_add_of(
    dst: Operand<'_>,
    dim: usize,
    index: Operand<'_>,
    src: Operand<'_>,
) -> Result<()> {
    const OP: &str = "scatter_add";
    refuse_bool(OP, dst.dtype)?;
    same_dtype(OP, dst.dtype, src.dtype)?;
    check_dim(OP, dim, dst.layout)?;
    let ishape = index.layout.shape();
    if !fits(ishape, src.layout.shape(), None) {
        return Err(shape_err(OP, src.layout.shape(), ishape));
    }
    if !fits(ishape, dst.layout.shape(), Some(dim)) {
        return Err(shape_err(OP, dst.layout.shape(), ishape));
    }
    distinct(OP, &[&src, &index], &dst)
}

/// The reason a max/min/argmax/argmin over an empty dim is refused.
pub const EMPTY_DIM: &str = "cannot reduce a dimension of size 0: max, min, argmax and argmin have no identity value; reduce a non-empty dimension (sum and prod accept empty ones)";

/// `dims` sorted, distinct and in range, and `dst` of `src`'s shape with
/// those dims set to 1.
fn reduced_shape(op: &'static str, src: &Layout, dims: &[usize], dst: &Layout) -> Result<()> {
    let rank = src.rank();
    if dims.windows(2).any(|w| w[0] >= w[1]) {
        return Err(Error::InvalidArgument {
            op,
            reason: "the reduced dims must be sorted and distinct; sort them and remove duplicates",
        });
    }
    if let Some(&d) = dims.last().filter(|&&d| d >= rank) {
        return Err(Error::DimOutOfRange {
            op,
            dim: isize::try_from(d).unwrap_or(isize::MAX),
            rank,
        });
    }
    let mut want = src.shape().clone();
    for &d in dims {
        want[d] = 1;
    }
    if dst.shape() != &want {
        return Err(shape_err(op, &want, dst.shape()));
    }
    Ok(())
}

/// [`Backend::reduce`](super::Backend::reduce)'s contract: sorted,
/// distinct dims in range, dst of src's shape with them set to 1, no bool,
/// and no max/min over an empty dim.
///
/// # Errors
/// As the checks above name.
///
/// ```
/// # use kael_core::{backend::{contract, ReduceOp, Src}, Device, DType, Layout, Storage};
/// # let dev = Device::cpu();
/// # let (s, d) = (Storage::zeroed(24, &dev)?, Storage::zeroed(8, &dev)?);
/// # let (ls, ld) = (Layout::contiguous(&[3, 2])?, Layout::contiguous(&[1, 2])?);
/// let (src, dst) = (
///     Src { storage: &s, layout: &ls, dtype: DType::F32 },
///     Src { storage: &d, layout: &ld, dtype: DType::F32 },
/// );
/// contract::reduce(ReduceOp::Sum, src, &[0], dst)?;
/// assert!(contract::reduce(ReduceOp::Sum, src, &[1, 0], dst).is_err()); // unsorted
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn reduce(op: ReduceOp, src: Src<'_>, dims: &[usize], dst: Dst<'_>) -> Result<()> {
    let name = op.name();
    reduced_shape(name, src.layout, dims, dst.layout)?;
    refuse_bool(name, src.dtype)?;
    refuse_bool(name, dst.dtype)?;
    let empty_dim = dims.iter().any(|&d| src.layout.shape()[d] == 0);
    if matches!(op, ReduceOp::Max | ReduceOp::Min) && empty_dim && dst.layout.numel() > 0 {
        return Err(Error::InvalidArgument {
            op: name,
            reason: EMPTY_DIM,
        });
    }
    Ok(())
}

/// [`Backend::arg_reduce`](super::Backend::arg_reduce)'s contract: `dim`
/// in range, dst (`I64`) of src's shape with `dim` set to 1, no bool
/// source, a non-empty `dim` unless dst is empty.
///
/// # Errors
/// As the checks above name.
///
/// ```
/// # use kael_core::{backend::{contract, ArgReduceOp, Src}, Device, DType, Layout, Storage};
/// # let dev = Device::cpu();
/// # let (s, d) = (Storage::zeroed(24, &dev)?, Storage::zeroed(16, &dev)?);
/// # let (ls, ld) = (Layout::contiguous(&[3, 2])?, Layout::contiguous(&[1, 2])?);
/// let (src, dst) = (
///     Src { storage: &s, layout: &ls, dtype: DType::F32 },
///     Src { storage: &d, layout: &ld, dtype: DType::I64 },
/// );
/// contract::arg_reduce(ArgReduceOp::ArgMax, src, 0, dst)?;
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn arg_reduce(op: ArgReduceOp, src: Src<'_>, dim: usize, dst: Dst<'_>) -> Result<()> {
    arg_reduce_of(op, src.into(), dim, dst.into())
}

/// [`arg_reduce`] over [`Operand`]s (a planned replay's steps).
///
/// # Errors
/// As [`arg_reduce`].
pub(crate) fn arg_reduce_of(
    op: ArgReduceOp,
    src: Operand<'_>,
    dim: usize,
    dst: Operand<'_>,
) -> Result<()> {
    let name = op.name();
    reduced_shape(name, src.layout, &[dim], dst.layout)?;
    refuse_bool(name, src.dtype)?;
    same_dtype(name, DType::I64, dst.dtype)?;
    if src.layout.shape()[dim] == 0 && dst.layout.numel() > 0 {
        return Err(Error::InvalidArgument {
            op: name,
            reason: EMPTY_DIM,
        });
    }
    Ok(())
}

/// [`Backend::softmax`](super::Backend::softmax)'s contract: `dim` in
/// range, dst of src's shape and dtype, a float dtype.
///
/// # Errors
/// As the checks above name.
///
/// ```
/// # use kael_core::{backend::{contract, Src}, Device, DType, Layout, Storage};
/// # let dev = Device::cpu();
/// # let s = Storage::zeroed(24, &dev)?;
/// # let l = Layout::contiguous(&[3, 2])?;
/// let x = Src { storage: &s, layout: &l, dtype: DType::F32 };
/// contract::softmax(x, 1, false, x)?; // in place is allowed
/// assert!(contract::softmax(x, 2, false, x).is_err());
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn softmax(src: Src<'_>, dim: usize, log: bool, dst: Dst<'_>) -> Result<()> {
    let name = if log { "log_softmax" } else { "softmax" };
    check_dim(name, dim, src.layout)?;
    if src.layout.shape() != dst.layout.shape() {
        return Err(shape_err(name, src.layout.shape(), dst.layout.shape()));
    }
    same_dtype(name, src.dtype, dst.dtype)?;
    if !src.dtype.is_float() {
        return Err(Error::UnsupportedDType {
            op: name,
            dtype: src.dtype,
            supported: "f32, f64, f16, bf16",
        });
    }
    Ok(())
}

/// `(rows, n)` of a contiguous `[rows, n]` f32 or f64 layer-norm source.
fn norm_rows(op: &'static str, src: &Operand<'_>) -> Result<(usize, usize)> {
    let shape = src.layout.shape();
    if shape.len() != 2 || !src.layout.is_contiguous() {
        return Err(Error::InvalidArgument {
            op,
            reason: "the kernel takes a contiguous [rows, n] source; call contiguous() and reshape first",
        });
    }
    if !matches!(src.dtype, DType::F32 | DType::F64) {
        return Err(Error::UnsupportedDType {
            op,
            dtype: src.dtype,
            supported: "f32, f64",
        });
    }
    Ok((shape[0], shape[1]))
}

/// `t` must be a contiguous operand of `shape` and `dtype`.
fn norm_operand(op: &'static str, t: &Operand<'_>, shape: &[usize], dtype: DType) -> Result<()> {
    if t.layout.shape() != shape || !t.layout.is_contiguous() || t.dtype != dtype {
        return Err(Error::InvalidArgument {
            op,
            reason: "an operand of the fused layer norm kernel has the wrong shape, dtype or layout; pass contiguous [rows, n] data, [n] weight and bias, [rows, 2] stats",
        });
    }
    Ok(())
}

/// [`Backend::layer_norm`](super::Backend::layer_norm)'s contract: a
/// contiguous `[rows, n]` f32 or f64 source, contiguous `[n]` weight and
/// bias, `[rows, n]` dst and `[rows, 2]` stats, all of the source's dtype,
/// and neither output sharing storage with an operand (or each other).
/// Returns `(rows, n)`.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the fix, [`Error::UnsupportedDType`]
/// for dtypes other than f32 and f64.
///
/// ```
/// # use kael_core::{backend::{contract, Src}, Device, DType, Layout, Storage};
/// # let dev = Device::cpu();
/// # let (x, y, st) = (Storage::zeroed(24, &dev)?, Storage::zeroed(24, &dev)?, Storage::zeroed(24, &dev)?);
/// # let (l, ls) = (Layout::contiguous(&[3, 2])?, Layout::contiguous(&[3, 2])?);
/// let f = |s, l| Src { storage: s, layout: l, dtype: DType::F32 };
/// assert_eq!(contract::layer_norm(f(&x, &l), None, None, f(&y, &l), f(&st, &ls))?, (3, 2));
/// assert!(contract::layer_norm(f(&x, &l), None, None, f(&x, &l), f(&st, &ls)).is_err());
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn layer_norm(
    src: Src<'_>,
    weight: Option<Src<'_>>,
    bias: Option<Src<'_>>,
    dst: Dst<'_>,
    stats: Dst<'_>,
) -> Result<(usize, usize)> {
    layer_norm_of(
        src.into(),
        weight.map(Into::into),
        bias.map(Into::into),
        dst.into(),
        stats.into(),
    )
}

/// [`layer_norm`] over [`Operand`]s (a planned replay's steps).
///
/// # Errors
/// As [`layer_norm`].
pub(crate) fn layer_norm_of(
    src: Operand<'_>,
    weight: Option<Operand<'_>>,
    bias: Option<Operand<'_>>,
    dst: Operand<'_>,
    stats: Operand<'_>,
) -> Result<(usize, usize)> {
    let op = "layer_norm";
    let (rows, n) = norm_rows(op, &src)?;
    for t in weight.iter().chain(bias.iter()) {
        norm_operand(op, t, &[n], src.dtype)?;
        distinct(op, &[t], &dst)?;
        distinct(op, &[t], &stats)?;
    }
    norm_operand(op, &dst, &[rows, n], src.dtype)?;
    norm_operand(op, &stats, &[rows, 2], src.dtype)?;
    distinct(op, &[&src], &dst)?;
    distinct(op, &[&src, &dst], &stats)?;
    Ok((rows, n))
}

/// [`Backend::layer_norm_backward`](super::Backend::layer_norm_backward)'s
/// contract: `grad`, `src` and `dx` contiguous `[rows, n]`, `stats`
/// `[rows, 2]`, the weight `[n]`, `dwb` `[2, n]`, all of the source's dtype
/// (f32 or f64), and neither output sharing storage with an operand (or
/// each other). Returns `(rows, n)`.
///
/// # Errors
/// As [`layer_norm`].
pub fn layer_norm_backward(
    grad: Src<'_>,
    src: Src<'_>,
    stats: Src<'_>,
    weight: Option<Src<'_>>,
    dx: Dst<'_>,
    dwb: Dst<'_>,
) -> Result<(usize, usize)> {
    layer_norm_backward_of(
        grad.into(),
        src.into(),
        stats.into(),
        weight.map(Into::into),
        dx.into(),
        dwb.into(),
    )
}

/// [`layer_norm_backward`] over [`Operand`]s (a planned replay's steps).
///
/// # Errors
/// As [`layer_norm_backward`].
pub(crate) fn layer_norm_backward_of(
    grad: Operand<'_>,
    src: Operand<'_>,
    stats: Operand<'_>,
    weight: Option<Operand<'_>>,
    dx: Operand<'_>,
    dwb: Operand<'_>,
) -> Result<(usize, usize)> {
    let op = "layer_norm";
    let (rows, n) = norm_rows(op, &src)?;
    norm_operand(op, &grad, &[rows, n], src.dtype)?;
    norm_operand(op, &stats, &[rows, 2], src.dtype)?;
    if let Some(w) = &weight {
        norm_operand(op, w, &[n], src.dtype)?;
    }
    norm_operand(op, &dx, &[rows, n], src.dtype)?;
    norm_operand(op, &dwb, &[2, n], src.dtype)?;
    for dst in [&dx, &dwb] {
        distinct(op, &[&grad, &src, &stats], dst)?;
        if let Some(w) = &weight {
            distinct(op, &[w], dst)?;
        }
    }
    distinct(op, &[&dx], &dwb)?;
    Ok((rows, n))
}

/// [`Backend::softmax_backward`](super::Backend::softmax_backward)'s
/// contract: `grad`, `out` and `dx` contiguous `[rows, n]` of one dtype
/// (f32 or f64), and `dx` sharing storage with neither operand. Returns
/// `(rows, n)`.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the fix, [`Error::UnsupportedDType`]
/// for dtypes other than f32 and f64.
///
/// ```
/// # use kael_core::{backend::{contract, Src}, Device, DType, Layout, Storage};
/// # let dev = Device::cpu();
/// # let (g, y, dx) = (Storage::zeroed(24, &dev)?, Storage::zeroed(24, &dev)?, Storage::zeroed(24, &dev)?);
/// # let l = Layout::contiguous(&[3, 2])?;
/// let f = |s, l| Src { storage: s, layout: l, dtype: DType::F32 };
/// assert_eq!(contract::softmax_backward(f(&g, &l), f(&y, &l), f(&dx, &l))?, (3, 2));
/// assert!(contract::softmax_backward(f(&g, &l), f(&y, &l), f(&y, &l)).is_err());
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn softmax_backward(grad: Src<'_>, out: Src<'_>, dx: Dst<'_>) -> Result<(usize, usize)> {
    let op = "softmax_backward";
    let (rows, n) = norm_rows(op, &Operand::from(out))?;
    for t in [&grad, &dx] {
        if t.layout.shape() != out.layout.shape()
            || !t.layout.is_contiguous()
            || t.dtype != out.dtype
        {
            return Err(Error::InvalidArgument {
                op,
                reason: "grad, out and dx of the fused softmax backward must all be contiguous [rows, n] of one dtype; call contiguous() first",
            });
        }
    }
    no_alias(op, &[&grad, &out], &dx)?;
    Ok((rows, n))
}
