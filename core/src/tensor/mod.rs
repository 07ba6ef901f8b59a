//! The tensor handle and its impl.
//!
//! INVARIANTS (of every [`TensorImpl`] that a [`Tensor`] points to):
//! 1. The layout holds the shape, strides and offset:
//!    `shape.rank() == strides.rank() <= MAX_RANK`.
//! 2. The layout stays inside the storage: `Layout::reach() <=
//!    storage.nbytes() / dtype.size_in_bytes()` (and `offset <=` that count
//!    when the tensor is empty). `TensorImpl::new` checks 1 and 2; it is
//!    the only way an impl is made, so accessors and kernels never re-check.
//! 3. The device is the storage's device, or another host-memory device
//!    when both are host memory: `to_device` between two host-memory
//!    devices (reference CPU and threaded CPU) makes a tensor over the same
//!    storage on the new device instead of copying (see NOTE [Host-memory
//!    moves]). Views keep their parent's device.
//! 4. `base`, when set, is a root: a tensor whose own `base` is `None`
//!    (never the immediate parent of a view chain). It shares `storage`
//!    unless the root was later moved with `move_to_`.
//! 5. The layout never changes, so it is read without a lock and lent to
//!    kernels as it is (NOTE [Small-op path]). `move_to_` replaces the
//!    storage and device together (under `placement`'s lock), so every
//!    handle follows, and keeps the layout: a copy to another device holds
//!    the storage's elements up to the layout's reach, at the same offsets.
//!
//! There is no empty tensor: absence is `Option<Tensor>`.

mod advanced_index;
mod convert;
mod create;
mod create_like;
mod declared;
mod display;
mod explain;
mod index;
mod inplace;
mod linalg;
mod ops;
mod promoted;
mod readback;
mod rearrange;
mod reduce;
mod reinterpret;
mod scalar_ops;
mod search;
mod split;
mod stats;
mod view;

pub use advanced_index::Index;
pub use create::ShapeSpec;
pub use display::{PRINT_EDGE_ITEMS, PRINT_THRESHOLD};
pub use explain::explain;

use crate::autograd::AutogradSlot;
use crate::backend::Src;
use crate::device::Device;
use crate::device_kind::DeviceKind;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::shape::Dims;
use crate::shared::{Flag, Lock, Shared, WeakShared};
use crate::storage::Storage;

/// Storage and device: what `move_to_` swaps as one unit.
#[derive(Clone)]
pub(crate) struct Placement {
    pub(crate) storage: Shared<Storage>,
    /// The device whose kernels run on this tensor when it is not the
    /// storage's own (INVARIANT 3); `None` (the common case) costs no
    /// reference count when a view is made.
    pub(crate) device: Option<Device>,
}

/// What a [`Tensor`] points to. See the module's INVARIANTS.
pub struct TensorImpl {
    layout: Layout,
    dtype: DType,
    /// Whether autograd tracks this tensor: set by `requires_grad_` and when
    /// an op records history into it. Outside `autograd`'s lock so that
    /// every op can ask without taking a lock (most ask of tensors that
    /// have no autograd state at all).
    requires_grad: Flag,
    placement: Lock<Placement>,
    base: Option<Tensor>,
    autograd: Lock<AutogradSlot>,
}

impl TensorImpl {
    pub(crate) fn take_autograd(self) -> AutogradSlot {
        self.autograd.into_inner()
    }

    /// Builds a validated impl (the only constructor).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the layout reaches past the storage,
    /// [`Error::InvalidArgument`] for a base that is not a root over `storage`.
    pub(crate) fn new(
        storage: Shared<Storage>,
        layout: Layout,
        dtype: DType,
        base: Option<Tensor>,
    ) -> Result<Self> {
        Self::new_on(storage, layout, dtype, base, None)
    }

    /// [`TensorImpl::new`] on a chosen device: `None` or the storage's own,
    /// or another host-memory device when the storage is host memory.
    ///
    /// # Errors
    /// As [`TensorImpl::new`]; [`Error::DeviceMismatch`] for a device that
    /// cannot read the storage's bytes.
    #[inline(always)]
    pub(crate) fn new_on(
        storage: Shared<Storage>,
        layout: Layout,
        dtype: DType,
        base: Option<Tensor>,
        device: Option<Device>,
    ) -> Result<Self> {
        let device = match device {
            Some(d) if d.same_as(storage.device()) => None,
            Some(d) if d.is_host_memory() && storage.device().is_host_memory() => Some(d),
            Some(d) => {
                return Err(Error::DeviceMismatch {
                    op: "TensorImpl::new",
                    lhs: d.kind(),
                    rhs: storage.device().kind(),
                });
            }
            None => None,
        };
        // Every tensor's element count fits in usize, so `numel()` (an
        // unchecked product) is exact wherever it is used.
        crate::shape::checked_numel("TensorImpl::new", layout.shape())?;
        let storage_len = storage.nbytes() / dtype.size_in_bytes();
        let reach = layout.reach();
        if reach > storage_len {
            return Err(Error::OutOfBounds {
                op: "TensorImpl::new",
                reach,
                storage_len,
            });
        }
        if let Some(b) = &base {
            if b.0.base.is_some() {
                return Err(Error::InvalidArgument {
                    op: "TensorImpl::new",
                    reason: "a view's base must be the root tensor that owns its storage",
                });
            }
        }
        Ok(Self::assemble(storage, layout, dtype, base, device))
    }

    /// The impl from checked parts (both constructors end here).
    #[inline(always)]
    fn assemble(
        storage: Shared<Storage>,
        layout: Layout,
        dtype: DType,
        base: Option<Tensor>,
        device: Option<Device>,
    ) -> Self {
        Self {
            layout,
            dtype,
            requires_grad: Flag::new(false),
            placement: Lock::new(Placement { storage, device }),
            base,
            autograd: Lock::new(AutogradSlot::EMPTY),
        }
    }

    /// The impl of a fresh contiguous tensor over `storage`, which the
    /// caller allocated for exactly `layout.numel()` elements of `dtype`
    /// with `layout` contiguous from offset 0 and a shape whose element
    /// count is known to fit (it is an existing tensor's): INVARIANTS 1
    /// and 2 hold by construction, so nothing is re-checked (NOTE
    /// [Small-op path]).
    fn fresh(storage: Shared<Storage>, layout: Layout, dtype: DType) -> Self {
        debug_assert!(layout.is_contiguous() && layout.offset() == 0);
        debug_assert!(layout.numel() * dtype.size_in_bytes() <= storage.nbytes());
        Self::assemble(storage, layout, dtype, None, None)
    }
}

/// A shared handle to a tensor: cloning it names the same tensor.
///
/// ```
/// use kael_core::{DType, Device, Tensor};
/// let a = Tensor::zeros(&[2, 3], DType::F32, &Device::cpu())?;
/// let b = a.clone();            // same tensor
/// let t = a.t()?;               // a view: new impl, same storage
/// let c = a.deep_clone()?;      // own storage
/// assert!(a.is_same(&b) && !a.is_same(&t));
/// assert!(a.shares_storage(&t) && !a.shares_storage(&c));
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Tensor(Shared<TensorImpl>);

/// A non-owning handle to a tensor: an `AccumulateGrad` node names its leaf
/// this way, so that the leaf can own the node (NOTE [Leaf accumulators]).
pub(crate) struct WeakTensor(WeakShared<TensorImpl>);

impl WeakTensor {
    /// The tensor, while some [`Tensor`] handle to it is alive.
    pub(crate) fn upgrade(&self) -> Option<Tensor> {
        self.0.upgrade().map(Tensor)
    }
}

impl Tensor {
    /// A non-owning handle to this tensor.
    pub(crate) fn downgrade(&self) -> WeakTensor {
        WeakTensor(Shared::downgrade(&self.0))
    }
}

impl Tensor {
    /// Wraps a validated impl.
    #[inline]
    pub(crate) fn from_impl(imp: TensorImpl) -> Self {
        Self(Shared::new(imp))
    }

    /// A tensor over `storage` with `layout`, validated against the storage.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the layout would read past the storage.
    ///
    /// ```
    /// use kael_core::{DType, Device, Layout, Storage, Tensor};
    /// use kael_core::shared::Shared;
    /// let s = Shared::new(Storage::zeroed(24, &Device::cpu())?); // 6 f32
    /// assert!(Tensor::from_storage(s.clone(), Layout::contiguous(&[2, 3])?, DType::F32).is_ok());
    /// assert!(Tensor::from_storage(s, Layout::contiguous(&[2, 4])?, DType::F32).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn from_storage(storage: Shared<Storage>, layout: Layout, dtype: DType) -> Result<Self> {
        Ok(Self::from_impl(TensorImpl::new(
            storage, layout, dtype, None,
        )?))
    }

    pub(crate) fn placement(&self) -> Placement {
        self.0.placement.read(|p| p.clone())
    }

    pub(crate) fn replace_placement(&self, new: Placement) -> Placement {
        self.0.placement.with(|p| core::mem::replace(p, new))
    }

    /// The sizes of the dimensions.
    pub fn shape(&self) -> &[usize] {
        self.0.layout.shape()
    }

    /// The sizes, as [`Dims`].
    pub fn dims(&self) -> &Dims {
        self.0.layout.shape()
    }

    /// The strides, in elements.
    pub fn strides(&self) -> Dims {
        self.0.layout.strides().clone()
    }

    /// The storage offset of the first element, in elements.
    pub fn offset(&self) -> usize {
        self.0.layout.offset()
    }

    /// Shape, strides and offset together.
    pub fn layout(&self) -> Layout {
        self.0.layout.clone()
    }

    /// Shape, strides and offset, borrowed (INVARIANT 5: they never change).
    pub(crate) fn layout_ref(&self) -> &Layout {
        &self.0.layout
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.0.dtype
    }

    /// The device whose kernels run on this tensor: the storage's device,
    /// or another host-memory device after a zero-copy `to_device`.
    pub fn device(&self) -> Device {
        self.0
            .placement
            .read(|p| p.device.as_ref().unwrap_or(p.storage.device()).clone())
    }

    /// The storage.
    pub fn storage(&self) -> Shared<Storage> {
        self.0.placement.read(|p| p.storage.clone())
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.0.layout.rank()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.0.layout.shape().numel()
    }

    /// Size of `dim` (negative counts from the end).
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`].
    pub fn size(&self, dim: isize) -> Result<usize> {
        Ok(self.shape()[crate::shape::resolve_dim("size", dim, self.rank())?])
    }

    /// Whether `self` and `other` are the same tensor (same impl).
    pub fn is_same(&self, other: &Tensor) -> bool {
        Shared::ptr_eq(&self.0, &other.0)
    }

    /// Whether writes through one can be visible through the other.
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        Shared::ptr_eq(&self.storage(), &other.storage())
    }

    /// The root tensor whose storage this view shares; `None` for a tensor
    /// that owns its storage (PyTorch's `_base`).
    pub fn base(&self) -> Option<Tensor> {
        self.0.base.clone()
    }

    /// Whether this tensor is a view of another.
    pub fn is_view(&self) -> bool {
        self.0.base.is_some()
    }

    /// The root of this tensor's view chain: `base()` or `self`.
    pub(crate) fn root(&self) -> Tensor {
        self.0.base.clone().unwrap_or_else(|| self.clone())
    }

    /// The storage's version counter (bumped by every in-place op).
    pub fn version(&self) -> usize {
        self.0.placement.read(|p| p.storage.version())
    }

    /// Bytes in the storage (not just this tensor's elements).
    pub fn storage_nbytes(&self) -> usize {
        self.0.placement.read(|p| p.storage.nbytes())
    }

    /// How many impls and other owners hold the storage.
    pub fn storage_ref_count(&self) -> usize {
        // subtract the temporary clone made by `storage()`
        Shared::strong_count(&self.storage()) - 1
    }

    /// How many handles name this tensor.
    pub fn handle_count(&self) -> usize {
        Shared::strong_count(&self.0)
    }

    /// Row-major contiguity (PyTorch's `is_contiguous`).
    pub fn is_contiguous(&self) -> bool {
        self.layout().is_contiguous()
    }

    /// Element size in bytes.
    pub fn element_size(&self) -> usize {
        self.0.dtype.size_in_bytes()
    }

    /// Whether autograd tracks this tensor.
    pub fn requires_grad(&self) -> bool {
        self.0.requires_grad.get()
    }

    pub(crate) fn requires_grad_flag(&self) -> &Flag {
        &self.0.requires_grad
    }

    /// Sets `requires_grad` and returns the handle (builder style).
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for non-float tensors.
    pub fn requires_grad_(self, on: bool) -> Result<Self> {
        if on {
            self.dtype().require_float("requires_grad_")?;
        }
        if !self.is_leaf() {
            return Err(Error::Autograd {
                op: "requires_grad_",
                reason: "requires_grad can only be changed on leaf tensors; call detach() to get a leaf",
            });
        }
        self.0.requires_grad.set(on);
        Ok(self)
    }

    /// The accumulated gradient, if any.
    pub fn grad(&self) -> Option<Tensor> {
        self.0
            .autograd
            .with(|s| s.meta.as_ref().and_then(|m| m.grad.clone()))
    }

    /// The name of the op that produced this tensor in the autograd graph.
    pub fn grad_fn_name(&self) -> Option<&'static str> {
        self.grad_fn().map(|n| n.name())
    }

    pub(crate) fn autograd_slot(&self) -> &Lock<AutogradSlot> {
        &self.0.autograd
    }

    /// The impl, when this is its only handle.
    pub(crate) fn into_unique_impl(self) -> Option<TensorImpl> {
        Shared::try_unwrap(self.0).ok()
    }

    // ------------------------------------------------------------ internals

    /// Runs `f` with this tensor as a kernel operand.
    /// [`Tensor::with_src`] with the stride-0 (expanded) dims reduced to
    /// size 1: the distinct elements, each once. For writes that do not
    /// read the destination (`fill_`), whose result does not depend on how
    /// often an element is written.
    pub(crate) fn with_distinct_src<R>(&self, f: impl FnOnce(Src<'_>) -> R) -> R {
        let own = &self.0.layout;
        let mut shape = own.shape().clone();
        for (n, &st) in shape.iter_mut().zip(own.strides().iter()) {
            if st == 0 {
                *n = (*n).min(1);
            }
        }
        let layout = Layout::from_dims(shape, own.strides().clone(), own.offset());
        self.lend(&layout, |src, _| f(src))
    }

    pub(crate) fn with_src<R>(&self, f: impl FnOnce(Src<'_>) -> R) -> R {
        self.with_src_on(|src, _| f(src))
    }

    /// [`Tensor::with_src`] that also lends the device whose kernels run on
    /// this tensor: one read of the placement gives both, no device handle
    /// is cloned and the layout is lent as it is (INVARIANT 5; NOTE
    /// [Small-op path]).
    pub(crate) fn with_src_on<R>(&self, f: impl FnOnce(Src<'_>, &Device) -> R) -> R {
        self.lend(&self.0.layout, f)
    }

    /// [`Tensor::with_src_on`] with the layout broadcast to `shape` (a
    /// [`broadcast_shapes`](crate::shape::broadcast_shapes) result of this
    /// tensor's shape and another): stride 0 along new and stretched dims.
    /// When `shape` is this tensor's own, the layout is lent as it is.
    pub(crate) fn with_src_as<R>(&self, shape: &Dims, f: impl FnOnce(Src<'_>, &Device) -> R) -> R {
        let own = &self.0.layout;
        if shape == own.shape() {
            return self.lend(own, f);
        }
        let mut layout = Layout::of_shape(shape);
        layout.place_broadcast(own.shape(), own.strides(), own.offset());
        self.lend(&layout, f)
    }

    /// Lends this tensor's storage through `layout` as a kernel operand,
    /// with the device whose kernels run on it. The placement is
    /// read-locked while `f` runs, so its storage and device are lent as
    /// they are, with no reference count taken (NOTE [Small-op path]); a
    /// `move_to_` of this tensor on another thread waits for `f` to end.
    #[inline(always)]
    fn lend<R>(&self, layout: &Layout, f: impl FnOnce(Src<'_>, &Device) -> R) -> R {
        self.0.placement.read(|p| {
            f(
                Src {
                    storage: &p.storage,
                    layout,
                    dtype: self.0.dtype,
                },
                p.device.as_ref().unwrap_or(p.storage.device()),
            )
        })
    }

    /// A new contiguous tensor of `shape` and `dtype` on `device`, every
    /// element of which `kernel` writes (its bytes are arbitrary before:
    /// see [`Tensor::alloc_for_overwrite`]). The kernel writes through the
    /// output's [`Dst`] before the handle exists, so no lock is taken and no
    /// layout is rebuilt for it (NOTE [Small-op path]). `shape`'s element
    /// count was checked by whoever built it (NOTE [Checked output
    /// sizes]); its byte size is checked here.
    pub(crate) fn written(
        shape: &Dims,
        dtype: DType,
        device: &Device,
        kernel: impl FnOnce(Src<'_>) -> Result<()>,
    ) -> Result<Tensor> {
        // (`shape` is an existing tensor's or was checked by the op that
        // built it, so its element count fits: only the bytes can overflow.)
        let nbytes =
            shape
                .numel()
                .checked_mul(dtype.size_in_bytes())
                .ok_or(Error::OutOfMemory {
                    requested: usize::MAX,
                    available: None,
                })?;
        let storage = Storage::shared_for_overwrite(nbytes, device)?;
        let mut layout = Layout::of_shape(shape);
        layout.place_contiguous();
        kernel(Src {
            storage: &storage,
            layout: &layout,
            dtype,
        })?;
        Ok(Tensor::from_impl(TensorImpl::fresh(storage, layout, dtype)))
    }

    /// Errors unless `other` is on the same device.
    pub(crate) fn same_device(&self, op: &'static str, other: &Tensor) -> Result<()> {
        // Kinds, read in place: no device handle is cloned (this runs on
        // every binary op; see NOTE [Small-op path]).
        let (lhs, rhs) = (self.device_kind(), other.device_kind());
        if lhs == rhs {
            Ok(())
        } else {
            Err(Error::DeviceMismatch { op, lhs, rhs })
        }
    }

    /// The kind of the device, without cloning its handle.
    pub(crate) fn device_kind(&self) -> DeviceKind {
        self.0
            .placement
            .read(|p| p.device.as_ref().unwrap_or(p.storage.device()).kind())
    }

    /// Errors unless `other` has the same dtype.
    pub(crate) fn same_dtype(&self, op: &'static str, other: &Tensor) -> Result<()> {
        if self.dtype() == other.dtype() {
            Ok(())
        } else {
            Err(Error::DTypeMismatch {
                op,
                expected: self.dtype(),
                got: other.dtype(),
            })
        }
    }

    /// Errors unless `T` matches the dtype (`op` reads elements as `T`).
    pub(crate) fn check_element<T: Element>(&self, op: &'static str) -> Result<()> {
        if T::DTYPE == self.dtype() {
            Ok(())
        } else {
            Err(Error::ElementTypeMismatch {
                op,
                dtype: self.dtype(),
                requested: T::DTYPE,
            })
        }
    }
}

impl core::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "Tensor({:?}, {:?}, {:?})",
            self.shape(),
            self.dtype(),
            self.device().kind()
        )
    }
}

// NOTE [Size budgets]
// A view allocates exactly one TensorImpl (shape and strides are inline), so
// its size is the per-view memory cost. Measured (rustc 1.95) and enforced:
//
//   target            Tensor  TensorImpl  Storage  Layout  Error
//   64-bit (x86_64)      8        216        80      152     96
//   32-bit (thumbv7em)   4        108        40       76     88
//
// TensorImpl grew by one `Device` handle (a fat pointer: 16 bytes on
// 64-bit, 8 on 32-bit) when the device moved into `Placement` for
// zero-copy host-memory moves (NOTE [Host-memory moves]); it was 200/100.
// PyTorch's TensorImpl budget is 26 words (208 bytes) on 64-bit; this is
// 27. The assertions below fail the build if a field change exceeds the
// budget.
const _: () = {
    use core::mem::size_of;
    assert!(size_of::<Tensor>() == size_of::<usize>());
    #[cfg(target_pointer_width = "64")]
    {
        assert!(size_of::<TensorImpl>() <= 216);
        assert!(size_of::<Storage>() <= 80);
        assert!(size_of::<Error>() <= 96);
    }
    #[cfg(target_pointer_width = "32")]
    {
        assert!(size_of::<TensorImpl>() <= 108);
        assert!(size_of::<Storage>() <= 40);
        assert!(size_of::<Error>() <= 88);
    }
};
