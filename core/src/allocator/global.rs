//! The global allocator, used by default.

use super::{AllocStats, Allocator, Usage};
use crate::error::{Error, Result};
use crate::shared::Lock;
use core::alloc::Layout as MemLayout;
use core::ptr::NonNull;

/// Tensor memory from the program's `#[global_allocator]`, fallibly.
///
/// Zero-byte requests return a dangling, well-aligned pointer without
/// touching the heap.
///
/// ```
/// use kael_core::allocator::{Allocator, GlobalAllocator};
/// let a = GlobalAllocator::new();
/// assert_eq!(a.name(), "global");
/// ```
#[derive(Debug)]
pub struct GlobalAllocator {
    usage: Lock<Usage>,
}

impl GlobalAllocator {
    /// A new handle with its own usage figures.
    pub const fn new() -> Self {
        Self {
            usage: Lock::new(Usage::new()),
        }
    }
}

impl Default for GlobalAllocator {
    fn default() -> Self {
        Self::new()
    }
}

impl Allocator for GlobalAllocator {
    fn allocate(&self, layout: MemLayout) -> Result<NonNull<u8>> {
        if layout.size() == 0 {
            // A dangling pointer aligned to `layout.align()`; never dereferenced
            // for reads or writes of non-zero length. Without provenance (not
            // an integer-to-pointer cast), so Miri's strict provenance holds.
            return NonNull::new(core::ptr::without_provenance_mut(layout.align())).ok_or(
                Error::OutOfMemory {
                    requested: 0,
                    available: None,
                },
            );
        }
        // SAFETY: `layout` has a non-zero size (checked above).
        let p = unsafe { alloc::alloc::alloc(layout) };
        match NonNull::new(p) {
            Some(p) => {
                self.usage.with(|u| u.on_alloc(layout.size()));
                Ok(p)
            }
            None => {
                self.usage.with(|u| u.on_failure());
                Err(Error::OutOfMemory {
                    requested: layout.size(),
                    available: None,
                })
            }
        }
    }

    fn allocate_zeroed(&self, layout: MemLayout) -> Result<NonNull<u8>> {
        if layout.size() == 0 {
            return self.allocate(layout);
        }
        // SAFETY: `layout` has a non-zero size (checked above).
        let p = unsafe { alloc::alloc::alloc_zeroed(layout) };
        match NonNull::new(p) {
            Some(p) => {
                self.usage.with(|u| u.on_alloc(layout.size()));
                Ok(p)
            }
            None => {
                self.usage.with(|u| u.on_failure());
                Err(Error::OutOfMemory {
                    requested: layout.size(),
                    available: None,
                })
            }
        }
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: MemLayout) {
        if layout.size() == 0 {
            return;
        }
        // SAFETY: the caller guarantees `ptr` came from `allocate(layout)`,
        // which (for non-zero sizes) is `alloc::alloc::alloc(layout)`.
        unsafe { alloc::alloc::dealloc(ptr.as_ptr(), layout) };
        self.usage.with(|u| u.on_free(layout.size()));
    }

    fn stats(&self) -> AllocStats {
        self.usage.with(|u| u.stats(None))
    }

    fn reset_peak(&self) {
        self.usage.with(|u| u.reset_peak());
    }

    fn name(&self) -> &'static str {
        "global"
    }
}
