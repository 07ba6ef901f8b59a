//! Fallible allocators for tensor memory.
//!
//! Every [`Storage`](crate::Storage) gets its bytes from an [`Allocator`]
//! (or keeps an external owner alive). Running out is
//! [`Error::OutOfMemory`](crate::Error::OutOfMemory), never an abort.
//!
//! Provided: [`GlobalAllocator`] (the `#[global_allocator]`, default) and
//! [`ArenaAllocator`] (a fixed buffer, no heap at all).

mod arena;
mod global;

pub use arena::ArenaAllocator;
pub use global::GlobalAllocator;

use crate::error::Result;
use crate::shared::MaybeSendSync;
use core::alloc::Layout as MemLayout;
use core::ptr::NonNull;

/// The alignment of every tensor buffer: enough for any dtype and for
/// 128-bit SIMD loads.
pub const BUFFER_ALIGN: usize = 16;

/// Usage figures of an allocator.
///
/// ```
/// use kael_core::allocator::{Allocator, GlobalAllocator};
/// let a = GlobalAllocator::new();
/// assert_eq!(a.stats().in_use, 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AllocStats {
    /// Bytes handed out and not yet returned.
    pub in_use: usize,
    /// The largest `in_use` ever observed.
    pub peak: usize,
    /// Number of successful allocations so far.
    pub allocations: usize,
    /// Number of refused allocations so far.
    pub failures: usize,
    /// Total capacity, when the allocator has a fixed one.
    pub capacity: Option<usize>,
}

/// A source of tensor memory. Allocation is fallible.
///
/// Implementations must return blocks aligned to `layout.align()` and valid
/// for `layout.size()` bytes until passed back to [`Allocator::deallocate`].
///
/// ```
/// use kael_core::allocator::{Allocator, GlobalAllocator};
/// use core::alloc::Layout;
/// let a = GlobalAllocator::new();
/// let l = Layout::from_size_align(64, 16).unwrap();
/// let p = a.allocate(l)?;
/// assert_eq!(a.stats().in_use, 64);
/// // SAFETY: `p` came from `a.allocate(l)` and is returned once.
/// unsafe { a.deallocate(p, l) };
/// assert_eq!(a.stats().in_use, 0);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub trait Allocator: MaybeSendSync {
    /// Allocates `layout.size()` bytes (which may be 0) aligned to `layout.align()`.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`](crate::Error::OutOfMemory) when the memory is not available.
    fn allocate(&self, layout: MemLayout) -> Result<NonNull<u8>>;

    /// Like [`Allocator::allocate`], with every byte set to zero.
    ///
    /// The default writes zeros through the pointer, which is right for host
    /// memory; an allocator of device memory must override it.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`](crate::Error::OutOfMemory) when the memory is not available.
    fn allocate_zeroed(&self, layout: MemLayout) -> Result<NonNull<u8>> {
        let p = self.allocate(layout)?;
        // SAFETY: `allocate` returned a block valid for `layout.size()` bytes.
        unsafe { core::ptr::write_bytes(p.as_ptr(), 0, layout.size()) };
        Ok(p)
    }

    /// A block whose bytes the caller will overwrite entirely before
    /// reading any of them (the output of a kernel that writes every
    /// element), so zeroing it would be wasted work.
    ///
    /// Contract: the bytes are *initialised* (never uninitialised memory,
    /// so reading them is never undefined behaviour) but may hold any
    /// values, e.g. a reused block's previous contents. The default is
    /// [`Allocator::allocate_zeroed`]; a caching allocator returns reused
    /// blocks as they are.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`](crate::Error::OutOfMemory) when the memory is not available.
    ///
    /// ```
    /// use kael_core::allocator::{Allocator, GlobalAllocator};
    /// use core::alloc::Layout;
    /// let a = GlobalAllocator::new();
    /// let l = Layout::from_size_align(64, 16).unwrap();
    /// let p = a.allocate_for_overwrite(l)?;
    /// // SAFETY: `p` came from `a` with layout `l` and is returned once.
    /// unsafe { a.deallocate(p, l) };
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    fn allocate_for_overwrite(&self, layout: MemLayout) -> Result<NonNull<u8>> {
        self.allocate_zeroed(layout)
    }

    /// Returns a block.
    ///
    /// # Safety
    /// `ptr` must come from `self.allocate(layout)` with this same `layout`,
    /// and must not be used afterwards.
    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: MemLayout);

    /// Usage figures.
    fn stats(&self) -> AllocStats;

    /// Restarts peak tracking: [`AllocStats::peak`] becomes the bytes in use
    /// now, so the next [`stats`](Allocator::stats) reports the peak of one
    /// phase (an inference, a training step) alone. Counts and `in_use` are
    /// unchanged. The default does nothing (the peak stays the all-time
    /// one, an upper bound); every allocator of kael implements it.
    ///
    /// ```
    /// use kael_core::allocator::{Allocator, ArenaAllocator};
    /// use kael_core::{shared::Shared, DType, Device, Tensor};
    /// let buf: &'static mut [u8] = Box::leak(vec![0u8; 4096].into_boxed_slice());
    /// let arena = Shared::new(ArenaAllocator::<16>::new(buf));
    /// let dev = Device::cpu_with_allocator(arena.clone());
    /// drop(Tensor::zeros(&[256], DType::F32, &dev)?); // 1 KiB, freed
    /// assert_eq!(arena.stats().peak, 1024);
    /// arena.reset_peak();
    /// let _small = Tensor::zeros(&[16], DType::F32, &dev)?;
    /// assert_eq!(arena.stats().peak, 64); // this phase only
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    fn reset_peak(&self) {}

    /// A short name for diagnostics (`explain`).
    fn name(&self) -> &'static str;
}

/// Tracks in-use and peak bytes; shared by the provided allocators.
#[derive(Debug, Default)]
pub(crate) struct Usage {
    in_use: crate::shared::Counter,
    peak: crate::shared::Counter,
    allocations: crate::shared::Counter,
    failures: crate::shared::Counter,
}

impl Usage {
    pub(crate) const fn new() -> Self {
        Self {
            in_use: crate::shared::Counter::new(0),
            peak: crate::shared::Counter::new(0),
            allocations: crate::shared::Counter::new(0),
            failures: crate::shared::Counter::new(0),
        }
    }

    // Callers hold whatever lock protects the allocator's state, or (global
    // allocator) accept that in_use/peak are updated with separate atomic
    // steps; figures are diagnostics, never used for safety.
    pub(crate) fn on_alloc(&self, bytes: usize) {
        let now = self.in_use.get().saturating_add(bytes);
        self.in_use.set(now);
        if now > self.peak.get() {
            self.peak.set(now);
        }
        self.allocations.bump();
    }

    pub(crate) fn on_free(&self, bytes: usize) {
        self.in_use.set(self.in_use.get().saturating_sub(bytes));
    }

    pub(crate) fn reset_peak(&self) {
        self.peak.set(self.in_use.get());
    }

    pub(crate) fn on_failure(&self) {
        self.failures.bump();
    }

    pub(crate) fn stats(&self, capacity: Option<usize>) -> AllocStats {
        AllocStats {
            in_use: self.in_use.get(),
            peak: self.peak.get(),
            allocations: self.allocations.get(),
            failures: self.failures.get(),
            capacity,
        }
    }
}
