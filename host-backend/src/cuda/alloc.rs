//! The caching allocator of device memory.
//!
//! NOTE [Caching allocator]
//! Every request is rounded up to a size class (512-byte steps up to 1 MiB,
//! 2 MiB steps above). A freed block goes onto its class's free list instead
//! of back to the driver, and the next request of that class takes it. This
//! is safe without events because the backend queues *all* its work on one
//! stream: a block freed by the host while kernels that use it are still
//! queued can only be handed out again to work queued after them, which the
//! stream runs after them. Blocks go back to the driver only in
//! [`CudaAllocator::release_cached`] (after a stream synchronize), which
//! also runs once when an allocation fails, before the request is retried.
//!
//! The pointers handed to the core are device addresses in a `NonNull<u8>`;
//! the core never dereferences storage of a device whose
//! `is_host_memory()` is false (`Storage::read`/`write` refuse it).

use super::{driver_error, lock};
use cudarc::driver::{CudaContext, CudaStream, result};
use kael_core::allocator::{AllocStats, Allocator, BUFFER_ALIGN};
use kael_core::{Error, Result};
use std::alloc::Layout as MemLayout;
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

/// Requests up to this size are rounded to [`SMALL_STEP`] bytes.
const SMALL_LIMIT: usize = 1 << 20;
/// The size-class step of small requests.
const SMALL_STEP: usize = 512;
/// The size-class step of large requests.
const LARGE_STEP: usize = 2 << 20;

/// The size class (bytes actually reserved) of a request of `n > 0` bytes.
fn size_class(n: usize) -> Option<usize> {
    let step = if n <= SMALL_LIMIT {
        SMALL_STEP
    } else {
        LARGE_STEP
    };
    n.div_ceil(step).checked_mul(step)
}

/// Usage figures of a [`CudaAllocator`], in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CudaMemStats {
    /// Bytes handed out to storages and not yet returned (requested sizes).
    pub in_use: usize,
    /// The largest `in_use` so far.
    pub peak: usize,
    /// Bytes of freed blocks kept for reuse (size-class sizes).
    pub cached: usize,
    /// Bytes held from the driver: blocks in use plus cached (size-class sizes).
    pub reserved: usize,
    /// Successful allocations so far.
    pub allocations: usize,
    /// Allocations served from the cache.
    pub reused: usize,
    /// Allocations that failed even after the cache was released.
    pub failures: usize,
}

#[derive(Default)]
struct State {
    free: HashMap<usize, Vec<u64>>,
    stats: CudaMemStats,
}

/// Device memory for tensors on one CUDA device, with a cache of freed
/// blocks (see NOTE [Caching allocator]).
pub struct CudaAllocator {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    state: Mutex<State>,
}

impl CudaAllocator {
    pub(crate) fn new(ctx: Arc<CudaContext>, stream: Arc<CudaStream>) -> Self {
        Self {
            ctx,
            stream,
            state: Mutex::new(State::default()),
        }
    }

    /// Bytes in use, cached and reserved, and counts.
    pub fn memory_stats(&self) -> CudaMemStats {
        lock(&self.state).stats
    }

    /// Returns every cached block to the driver (after waiting for queued
    /// work). Blocks in use are untouched.
    ///
    /// # Errors
    /// Driver failures.
    pub fn release_cached(&self) -> Result<()> {
        let mut st = lock(&self.state);
        self.release_locked(&mut st)
    }

    fn release_locked(&self, st: &mut State) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| driver_error("release_cached", e))?;
        self.stream
            .synchronize()
            .map_err(|e| driver_error("release_cached", e))?;
        let mut first_err = None;
        for (class, ptrs) in st.free.drain() {
            for p in ptrs {
                // SAFETY: `p` came from `malloc_sync` (below) and sits on a
                // free list, so no storage owns it; the stream was just
                // synchronized, so no queued work uses it.
                match unsafe { result::free_sync(p) } {
                    Ok(()) => {
                        st.stats.cached = st.stats.cached.saturating_sub(class);
                        st.stats.reserved = st.stats.reserved.saturating_sub(class);
                    }
                    Err(e) => {
                        first_err.get_or_insert(e);
                    }
                }
            }
        }
        match first_err {
            Some(e) => Err(driver_error("release_cached", e)),
            None => Ok(()),
        }
    }

    /// A block of `class` bytes: from the cache, else from the driver
    /// (releasing the cache and retrying once when the driver is out).
    fn take(&self, st: &mut State, class: usize, requested: usize) -> Result<u64> {
        if let Some(p) = st.free.get_mut(&class).and_then(Vec::pop) {
            st.stats.cached = st.stats.cached.saturating_sub(class);
            st.stats.reused += 1;
            return Ok(p);
        }
        self.ctx
            .bind_to_thread()
            .map_err(|e| driver_error("allocate", e))?;
        // SAFETY: a plain cuMemAlloc of `class > 0` bytes; the memory is
        // uninitialised, which is fine for device bytes the core never reads
        // directly (allocate_zeroed clears it on the stream).
        let first = unsafe { result::malloc_sync(class) };
        let p = match first {
            Ok(p) => p,
            Err(_) => {
                self.release_locked(st)?;
                // SAFETY: as above.
                match unsafe { result::malloc_sync(class) } {
                    Ok(p) => p,
                    Err(_) => {
                        st.stats.failures += 1;
                        let available = self.ctx.mem_get_info().ok().map(|(free, _)| free);
                        return Err(Error::OutOfMemory {
                            requested,
                            available,
                        });
                    }
                }
            }
        };
        st.stats.reserved = st.stats.reserved.saturating_add(class);
        Ok(p)
    }
}

/// The pointer handed out for zero-byte requests: aligned, never dereferenced.
fn dangling() -> NonNull<u8> {
    NonNull::new(std::ptr::without_provenance_mut::<u8>(BUFFER_ALIGN))
        .unwrap_or(NonNull::dangling())
}

impl Allocator for CudaAllocator {
    fn allocate(&self, layout: MemLayout) -> Result<NonNull<u8>> {
        let n = layout.size();
        if n == 0 {
            return Ok(dangling());
        }
        let oom = Error::OutOfMemory {
            requested: n,
            available: None,
        };
        // cuMemAlloc aligns to at least 256 bytes.
        if layout.align() > 256 {
            return Err(oom);
        }
        let class = size_class(n).ok_or(oom.clone())?;
        let mut st = lock(&self.state);
        let p = self.take(&mut st, class, n)?;
        let Some(ptr) = NonNull::new(std::ptr::without_provenance_mut::<u8>(p as usize)) else {
            return Err(oom);
        };
        st.stats.in_use = st.stats.in_use.saturating_add(n);
        st.stats.peak = st.stats.peak.max(st.stats.in_use);
        st.stats.allocations += 1;
        Ok(ptr)
    }

    fn allocate_zeroed(&self, layout: MemLayout) -> Result<NonNull<u8>> {
        let p = self.allocate(layout)?;
        if layout.size() == 0 {
            return Ok(p);
        }
        let cleared = self.ctx.bind_to_thread().and_then(|()| {
            // SAFETY: `p` is a live device block of at least `layout.size()`
            // bytes (just allocated); the memset is queued on the stream that
            // every use of the block is queued on.
            unsafe {
                result::memset_d8_async(
                    p.as_ptr().addr() as u64,
                    0,
                    layout.size(),
                    self.stream.cu_stream(),
                )
            }
        });
        match cleared {
            Ok(()) => Ok(p),
            Err(e) => {
                // SAFETY: `p` came from `self.allocate(layout)` just above and
                // is returned once.
                unsafe { self.deallocate(p, layout) };
                Err(driver_error("allocate_zeroed", e))
            }
        }
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: MemLayout) {
        let n = layout.size();
        let Some(class) = size_class(n).filter(|_| n > 0) else {
            return;
        };
        let mut st = lock(&self.state);
        st.free
            .entry(class)
            .or_default()
            .push(ptr.as_ptr().addr() as u64);
        st.stats.in_use = st.stats.in_use.saturating_sub(n);
        st.stats.cached = st.stats.cached.saturating_add(class);
    }

    fn stats(&self) -> AllocStats {
        let s = lock(&self.state).stats;
        AllocStats {
            in_use: s.in_use,
            peak: s.peak,
            allocations: s.allocations,
            failures: s.failures,
            capacity: self.ctx.total_mem().ok(),
        }
    }

    fn name(&self) -> &'static str {
        "cuda-caching"
    }
}

impl Drop for CudaAllocator {
    fn drop(&mut self) {
        // Storages hold the allocator alive, so only cached blocks remain.
        let mut st = std::mem::take(self.state.get_mut().unwrap_or_else(|e| e.into_inner()));
        let _ = self.release_locked(&mut st);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_round_up_to_their_step() {
        assert_eq!(size_class(1), Some(512));
        assert_eq!(size_class(512), Some(512));
        assert_eq!(size_class(513), Some(1024));
        assert_eq!(size_class(1 << 20), Some(1 << 20));
        assert_eq!(size_class((1 << 20) + 1), Some(2 << 20));
        assert_eq!(size_class(64 << 20), Some(64 << 20));
        assert_eq!(size_class(usize::MAX), None);
    }
}
