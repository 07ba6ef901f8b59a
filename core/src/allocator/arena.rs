//! A fixed arena: tensor memory from one caller-provided buffer.

use super::{AllocStats, Allocator, Usage};
use crate::error::{Error, Result};
use crate::shared::Lock;
use core::alloc::Layout as MemLayout;
use core::ptr::NonNull;

/// First-fit allocation inside a caller-provided `&'static mut [u8]`.
///
/// Block bookkeeping lives inline (at most `MAX_BLOCKS` live blocks, a
/// const generic), so the arena needs no heap at all. Freed blocks are
/// reused; running out returns [`Error::OutOfMemory`] (whose `available`
/// is the largest block that would fit now, not the total of free bytes,
/// which fragmentation can make unusable), a full block table returns
/// [`Error::AllocatorBlockLimit`] (raise `MAX_BLOCKS`), and either leaves
/// the arena fully usable.
///
/// ```
/// use kael_core::allocator::{Allocator, ArenaAllocator};
/// use core::alloc::Layout;
/// let buf: &'static mut [u8] = Box::leak(vec![0u8; 256].into_boxed_slice());
/// let arena: ArenaAllocator = ArenaAllocator::new(buf);
/// let l = Layout::from_size_align(200, 16).unwrap();
/// let p = arena.allocate(l)?;
/// assert!(arena.allocate(l).is_err()); // only 256 bytes
/// // SAFETY: `p` came from `arena.allocate(l)`.
/// unsafe { arena.deallocate(p, l) };
/// assert!(arena.allocate(l).is_ok()); // usable again
/// assert_eq!(arena.stats().peak, 200);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub struct ArenaAllocator<const MAX_BLOCKS: usize = 64> {
    base: NonNull<u8>,
    len: usize,
    state: Lock<ArenaState<MAX_BLOCKS>>,
}

struct ArenaState<const N: usize> {
    /// Live blocks as (start, len) byte offsets, sorted by start.
    blocks: heapless::Vec<(usize, usize), N>,
    usage: Usage,
}

// SAFETY: `base` points into a `&'static mut [u8]` the arena took exclusive
// ownership of; the arena only hands out disjoint sub-ranges (tracked under
// `state`'s lock), so moving or sharing the arena between threads cannot
// create aliasing access to the same bytes through the arena itself.
#[cfg(feature = "sync")]
unsafe impl<const N: usize> Send for ArenaAllocator<N> {}
// SAFETY: as above; all mutable bookkeeping is behind `Lock`.
#[cfg(feature = "sync")]
unsafe impl<const N: usize> Sync for ArenaAllocator<N> {}

impl<const MAX_BLOCKS: usize> ArenaAllocator<MAX_BLOCKS> {
    /// An arena over `buffer`, which it owns from now on.
    pub fn new(buffer: &'static mut [u8]) -> Self {
        let len = buffer.len();
        let base = NonNull::from(buffer).cast::<u8>();
        Self {
            base,
            len,
            state: Lock::new(ArenaState {
                blocks: heapless::Vec::new(),
                usage: Usage::new(),
            }),
        }
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.len
    }

    fn find_gap(
        &self,
        st: &ArenaState<MAX_BLOCKS>,
        size: usize,
        align: usize,
    ) -> Option<(usize, usize)> {
        let base_addr = self.base.as_ptr() as usize;
        let mut cursor = 0usize;
        for (i, &(start, blen)) in st
            .blocks
            .iter()
            .chain(core::iter::once(&(self.len, 0)))
            .enumerate()
        {
            let addr = base_addr.checked_add(cursor)?;
            let aligned = addr.checked_add(align - 1)? & !(align - 1);
            let candidate = aligned - base_addr;
            if candidate.checked_add(size)? <= start {
                return Some((i, candidate));
            }
            cursor = start + blen;
        }
        None
    }

    /// The largest request aligned to `align` that would fit now: the
    /// biggest gap between blocks once its start is aligned (not the total
    /// of free bytes, which fragmentation can make unusable).
    fn largest_gap(&self, st: &ArenaState<MAX_BLOCKS>, align: usize) -> usize {
        let base_addr = self.base.as_ptr() as usize;
        let mut cursor = 0usize;
        let mut largest = 0usize;
        for &(start, blen) in st.blocks.iter().chain(core::iter::once(&(self.len, 0))) {
            let aligned = base_addr
                .checked_add(cursor)
                .and_then(|a| a.checked_add(align - 1))
                .map(|a| (a & !(align - 1)) - base_addr);
            if let Some(candidate) = aligned {
                largest = largest.max(start.saturating_sub(candidate));
            }
            cursor = start.saturating_add(blen);
        }
        largest
    }
}

impl<const MAX_BLOCKS: usize> Allocator for ArenaAllocator<MAX_BLOCKS> {
    fn allocate(&self, layout: MemLayout) -> Result<NonNull<u8>> {
        if layout.size() == 0 {
            return NonNull::new(core::ptr::without_provenance_mut(layout.align())).ok_or(
                Error::OutOfMemory {
                    requested: 0,
                    available: None,
                },
            );
        }
        self.state.with(|st| {
            let fail = |st: &mut ArenaState<MAX_BLOCKS>| {
                st.usage.on_failure();
                Err(Error::OutOfMemory {
                    requested: layout.size(),
                    available: Some(self.largest_gap(st, layout.align())),
                })
            };
            let blocks_full = |st: &mut ArenaState<MAX_BLOCKS>| {
                st.usage.on_failure();
                Err(Error::AllocatorBlockLimit {
                    requested: layout.size(),
                    max_blocks: MAX_BLOCKS,
                })
            };
            if st.blocks.is_full() {
                return blocks_full(st);
            }
            match self.find_gap(st, layout.size(), layout.align()) {
                Some((i, start)) => {
                    if st.blocks.insert(i, (start, layout.size())).is_err() {
                        return blocks_full(st);
                    }
                    st.usage.on_alloc(layout.size());
                    // SAFETY: `start + size <= len` (find_gap), so the result
                    // stays inside the buffer `base` points to.
                    let p = unsafe { self.base.as_ptr().add(start) };
                    NonNull::new(p).ok_or(Error::OutOfMemory {
                        requested: layout.size(),
                        available: None,
                    })
                }
                None => fail(st),
            }
        })
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: MemLayout) {
        if layout.size() == 0 {
            return;
        }
        let start = ptr.as_ptr() as usize - self.base.as_ptr() as usize;
        self.state.with(|st| {
            if let Ok(i) = st.blocks.binary_search_by_key(&start, |b| b.0) {
                st.blocks.remove(i);
                st.usage.on_free(layout.size());
            }
        });
    }

    fn stats(&self) -> AllocStats {
        self.state.with(|st| st.usage.stats(Some(self.len)))
    }

    fn reset_peak(&self) {
        self.state.with(|st| st.usage.reset_peak());
    }

    fn name(&self) -> &'static str {
        "arena"
    }
}

impl<const N: usize> core::fmt::Debug for ArenaAllocator<N> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ArenaAllocator")
            .field("capacity", &self.len)
            .field("stats", &self.stats())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::boxed::Box;
    use alloc::vec;

    /// An arena over `n` bytes (a multiple of 16) that start 16-aligned, so
    /// the figures below do not depend on where the allocator put the buffer
    /// (Miri places a byte buffer at any address).
    fn arena(n: usize) -> ArenaAllocator<8> {
        let words: &'static mut [u128] = Box::leak(vec![0u128; n / 16].into_boxed_slice());
        ArenaAllocator::new(bytemuck::cast_slice_mut(words))
    }

    fn l(n: usize) -> MemLayout {
        MemLayout::from_size_align(n, 16).unwrap()
    }

    #[test]
    fn exhausting_the_arena_is_an_error_not_an_abort() {
        let a = arena(128);
        let p = a.allocate(l(100)).unwrap();
        let e = a.allocate(l(64)).unwrap_err();
        assert!(matches!(
            e,
            Error::OutOfMemory {
                requested: 64,
                available: Some(16) // 28 bytes free, 16 of them from an aligned start
            }
        ));
        // SAFETY: p came from a.allocate(l(100)).
        unsafe { a.deallocate(p, l(100)) };
        assert!(a.allocate(l(64)).is_ok());
    }

    #[test]
    fn reset_peak_starts_a_new_phase_at_the_bytes_in_use() {
        let a = arena(1024);
        let p1 = a.allocate(l(100)).unwrap();
        let p2 = a.allocate(l(400)).unwrap();
        // SAFETY: p2 came from a.allocate(l(400)).
        unsafe { a.deallocate(p2, l(400)) };
        assert_eq!(a.stats().peak, 500);
        a.reset_peak();
        assert_eq!((a.stats().peak, a.stats().in_use), (100, 100));
        let p3 = a.allocate(l(50)).unwrap();
        assert_eq!(a.stats().peak, 150);
        assert_eq!(a.stats().allocations, 3, "counts are kept");
        // SAFETY: p1 and p3 came from this arena with these layouts.
        unsafe {
            a.deallocate(p1, l(100));
            a.deallocate(p3, l(50));
        }
    }

    #[test]
    fn use_and_peak_are_reported() {
        let a = arena(1024);
        let p1 = a.allocate(l(100)).unwrap();
        let p2 = a.allocate(l(200)).unwrap();
        assert_eq!(a.stats().in_use, 300);
        // SAFETY: p1 came from a.allocate(l(100)).
        unsafe { a.deallocate(p1, l(100)) };
        let s = a.stats();
        assert_eq!(
            (s.in_use, s.peak, s.allocations, s.capacity),
            (200, 300, 2, Some(1024))
        );
        // SAFETY: p2 came from a.allocate(l(200)).
        unsafe { a.deallocate(p2, l(200)) };
        assert_eq!(a.stats().in_use, 0);
    }

    #[test]
    fn freed_gaps_are_reused_first_fit() {
        let a = arena(256);
        let p1 = a.allocate(l(64)).unwrap();
        let _p2 = a.allocate(l(64)).unwrap();
        // SAFETY: p1 came from a.allocate(l(64)).
        unsafe { a.deallocate(p1, l(64)) };
        let p3 = a.allocate(l(48)).unwrap();
        assert_eq!(p3, p1);
    }

    #[test]
    fn blocks_are_aligned() {
        let a = arena(256);
        let _ = a
            .allocate(MemLayout::from_size_align(3, 1).unwrap())
            .unwrap();
        let p = a.allocate(l(16)).unwrap();
        assert_eq!(p.as_ptr() as usize % 16, 0);
    }

    #[test]
    fn block_table_full_is_the_block_limit() {
        let a = arena(4096);
        for _ in 0..8 {
            a.allocate(l(16)).unwrap();
        }
        assert!(matches!(
            a.allocate(l(16)),
            Err(Error::AllocatorBlockLimit {
                requested: 16,
                max_blocks: 8
            })
        ));
    }
}
