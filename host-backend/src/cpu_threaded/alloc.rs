//! A size-class caching allocator for host memory.
//!
//! A fresh 64 MiB block costs ~16K page faults on first touch, which caps
//! an allocating 16M-element op far below memory bandwidth. Blocks of at
//! least [`MIN_CACHED`] bytes are therefore rounded up to a size class
//! (four classes per power of two, so at most 25% slack) and, when freed,
//! kept in a per-class free list instead of going back to the system, up
//! to a byte cap (default [`DEFAULT_CAP`]; beyond it frees go to the
//! system). Smaller blocks go straight to the system allocator, which
//! already caches them.
//!
//! A block from the system is zeroed (`allocate_for_overwrite` must still
//! hand out initialised bytes), and the system allocator zeroes a reused
//! heap block with a memset on the allocating thread, so [`MIN_CACHED`] is
//! low enough that every output worth a memset is reused as it is:
//! - at 256 KiB, a 32K-element f32 add spent a third of its time zeroing
//!   its 128 KiB output (9.7 µs against 6.3 µs at 64 KiB on issue 17's
//!   2-vCPU machine), and on 2 threads that memset also pulled the whole
//!   output into the caller's cache first;
//! - at 64 KiB, a 4096-element f32 add (16 KiB out) took 0.82-0.97 µs
//!   against 0.65 µs at 1 KiB, and an 8192-element one 1.48 against 1.12
//!   µs (a plain loop: 0.45 and 0.87 µs). The cached block also starts on
//!   a cache line (NOTE [Cache-line blocks]).
//!
//! Below 1 KiB the memset costs less than the free lists' mutex.
//!
//! Reused blocks hold the bytes of their previous tensor: initialised but
//! arbitrary, which is what [`Allocator::allocate_for_overwrite`] promises;
//! [`Allocator::allocate_zeroed`] zeroes them.

use kael_core::Error;
use kael_core::Result;
use kael_core::allocator::{AllocStats, Allocator};
use std::alloc::Layout;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ptr::NonNull;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Blocks below this size are not cached (see the module doc).
pub const MIN_CACHED: usize = 1024;
/// The default cap on cached (free) bytes.
pub const DEFAULT_CAP: usize = 1 << 30;

/// The free lists, under the mutex.
#[derive(Default)]
struct State {
    free: HashMap<(usize, usize), Vec<NonNull<u8>>, BuildHasherDefault<KeyHasher>>,
    cached: usize,
    hits: usize,
}

/// The free lists' hasher: a multiply-rotate over the key's two words
/// (FxHash's step). The keys are our own size classes and alignments, so
/// SipHash's resistance to chosen keys buys nothing, and it cost about 200
/// instructions per lookup, two lookups per cached block's round trip.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

// NOTE [Counters outside the lock]
// A small block (below MIN_CACHED) never touches the free lists, so its
// allocation and its free take no lock: the statistics are atomics, two
// read-modify-writes to allocate (in use, count) and one to free, where
// the mutex cost two each (lock and unlock). A 4-element op allocates and
// frees one such block (NOTE [Small-op path]). The peak is raised with a
// compare-and-swap only when a new peak is reached.
#[derive(Default)]
struct Counters {
    in_use: AtomicUsize,
    peak: AtomicUsize,
    allocations: AtomicUsize,
    failures: AtomicUsize,
}

impl Counters {
    fn allocated(&self, class: usize) {
        let now = self.in_use.fetch_add(class, Ordering::Relaxed) + class;
        if now > self.peak.load(Ordering::Relaxed) {
            self.peak.fetch_max(now, Ordering::Relaxed);
        }
        self.allocations.fetch_add(1, Ordering::Relaxed);
    }
}

/// The caching allocator; see the module docs.
///
/// ```
/// use kael_host::cpu_threaded::CachingAllocator;
/// use kael_core::allocator::Allocator;
/// let a = CachingAllocator::new(1 << 26);
/// let l = std::alloc::Layout::from_size_align(1 << 20, 16).unwrap();
/// let p = a.allocate_zeroed(l)?;
/// // SAFETY: `p` came from `a` with layout `l` and is not used again.
/// unsafe { a.deallocate(p, l) };
/// assert_eq!(a.cached_bytes(), 1 << 20);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub struct CachingAllocator {
    cap: usize,
    state: Mutex<State>,
    counters: Counters,
}

// SAFETY: the raw pointers in the free lists are owned blocks nobody else
// references; all access goes through the mutex.
unsafe impl Send for CachingAllocator {}
// SAFETY: as above.
unsafe impl Sync for CachingAllocator {}

/// The size class of a request: itself below [`MIN_CACHED`], else rounded
/// up to a multiple of a quarter of its power of two.
pub fn size_class(size: usize) -> usize {
    if size < MIN_CACHED {
        return size;
    }
    let step = (1usize << (usize::BITS - 1 - size.leading_zeros())) / 4;
    size.div_ceil(step) * step
}

impl CachingAllocator {
    /// A cache holding at most `cap` free bytes.
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            state: Mutex::new(State::default()),
            counters: Counters::default(),
        }
    }

    /// Free bytes currently kept for reuse.
    pub fn cached_bytes(&self) -> usize {
        self.lock().cached
    }

    /// How many allocations were served from the cache.
    pub fn cache_hits(&self) -> usize {
        self.lock().hits
    }

    /// Returns every cached block to the system.
    pub fn trim(&self) {
        let mut st = self.lock();
        for ((class, align), list) in st.free.drain() {
            for p in list {
                // SAFETY: every cached block came from `std::alloc` with
                // exactly this class size and alignment, and is unused.
                unsafe { std::alloc::dealloc(p.as_ptr(), layout_of(class, align)) };
            }
        }
        st.cached = 0;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A poisoned lock only means a panic elsewhere while holding it; the
        // counters stay usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A block for `layout`, and whether it came from the cache.
    fn get(&self, layout: Layout, zeroed: bool) -> Result<(NonNull<u8>, bool)> {
        let size = layout.size();
        if size == 0 {
            // A dangling pointer aligned to `layout.align()`; never dereferenced.
            return NonNull::new(layout.align() as *mut u8)
                .map(|p| (p, false))
                .ok_or(Error::OutOfMemory {
                    requested: 0,
                    available: None,
                });
        }
        let class = size_class(size);
        let key = (class, layout.align());
        // A small block never comes from the cache, and takes no lock
        // (NOTE [Counters outside the lock]).
        let reused = if class >= MIN_CACHED {
            let mut st = self.lock();
            let p = st.free.get_mut(&key).and_then(|l| l.pop());
            if p.is_some() {
                st.cached -= class;
                st.hits += 1;
            }
            p
        } else {
            None
        };
        let (p, hit) = match reused {
            Some(p) => (p, true),
            None => match fresh_block(layout_of(class, layout.align())) {
                Some(p) => (p, false),
                None => {
                    self.counters.failures.fetch_add(1, Ordering::Relaxed);
                    return Err(Error::OutOfMemory {
                        requested: size,
                        available: None,
                    });
                }
            },
        };
        self.counters.allocated(class);
        if hit && zeroed {
            // SAFETY: the block is valid for `class >= size` bytes and ours.
            unsafe { std::ptr::write_bytes(p.as_ptr(), 0, size) };
        }
        Ok((p, hit))
    }
}

/// Blocks of at least this many bytes are placed on huge-page boundaries
/// and offered huge pages (NOTE [Huge pages]).
pub const HUGE_PAGE: usize = 2 << 20;

// NOTE [Huge pages]
// A tensor read against its layout (`a + b.t()`, `b.t().contiguous()`)
// visits a new 4 KiB page every few elements once its rows are a few KiB
// long: at 4096x4096 f32 every element of a transposed operand's tile is on
// another page, and each page-table walk costs hundreds of cycles under a
// hypervisor's nested paging. Measured on the 2-vCPU VM: `b.t().contiguous()`
// ran at 2.7-3.1 GB/s at n=4096 against 13-16 GB/s at n=1024 (whose pages
// the TLB still covers). So blocks of at least HUGE_PAGE bytes are aligned
// to 2 MiB and, on Linux, advised `MADV_HUGEPAGE` before their first touch
// (THP in `madvise` mode, the usual default, grants huge pages only to
// advised ranges); a 64 MiB block then also takes 32 page faults, not 16K.
// Where the kernel declines, the block simply stays on 4 KiB pages.

/// Blocks of at least [`MIN_CACHED`] bytes start on a cache line (NOTE
/// [Cache-line blocks]).
pub const CACHE_LINE: usize = 64;

// NOTE [Cache-line blocks]
// The elementwise loops run at the CPU's vector width (NOTE [Loops at the
// vector width] in elementwise.rs): a 64-byte AVX-512 store to a block
// that starts 16 bytes into a cache line (where the system allocator puts
// large blocks) writes two lines, every store. Aligning the cached blocks
// to a line costs at most 48 bytes of a block of 1 KiB or more.

fn layout_of(class: usize, align: usize) -> Layout {
    let align = if class >= HUGE_PAGE {
        align.max(HUGE_PAGE)
    } else if class >= MIN_CACHED {
        align.max(CACHE_LINE)
    } else {
        align
    };
    // Valid: `class` came from a valid layout's size rounded up by less than
    // 25%, far below isize::MAX for any size the system could allocate, and
    // `align` is a power of two (a valid layout's, or HUGE_PAGE).
    Layout::from_size_align(class, align).unwrap_or(Layout::new::<u8>())
}

/// A zeroed block for `l` (non-zero size) from the system, or `None`.
/// Huge blocks are advised huge pages before they are first written.
fn fresh_block(l: Layout) -> Option<NonNull<u8>> {
    if l.size() < MIN_CACHED {
        // glibc's `calloc` skips the per-thread cache that `malloc` takes
        // its small blocks from (a third of a 4-element add's allocation
        // time went to it), and a small block comes from the recycled heap
        // anyway, where `calloc` clears it with the same memset. LLVM folds
        // an allocation followed by a zeroing memset back into `calloc`
        // (callgrind showed every small block still going through it), so
        // the pointer passes through `black_box` between the two.
        // SAFETY: `l` has a non-zero size.
        let p = NonNull::new(std::hint::black_box(unsafe { std::alloc::alloc(l) }))?;
        // SAFETY: the block is valid for `l.size()` bytes and ours.
        unsafe { std::ptr::write_bytes(p.as_ptr(), 0, l.size()) };
        return Some(p);
    }
    if l.size() < HUGE_PAGE {
        // SAFETY: `l` has a non-zero size. A fresh block is always zeroed
        // (calloc-backed: untouched pages are mapped lazily), so even
        // `allocate_for_overwrite` returns initialised bytes.
        return NonNull::new(unsafe { std::alloc::alloc_zeroed(l) });
    }
    // SAFETY: `l` has a non-zero size.
    let p = NonNull::new(unsafe { std::alloc::alloc(l) })?;
    #[cfg(all(target_os = "linux", not(miri)))]
    // SAFETY: `p..p + l.size()` is the block just allocated, aligned to
    // HUGE_PAGE (a multiple of the page size, as madvise requires); the
    // advice changes how pages are backed, never their contents. A failure
    // (kernel without THP) leaves 4 KiB pages, so the result is ignored.
    unsafe {
        libc::madvise(p.as_ptr().cast(), l.size(), libc::MADV_HUGEPAGE);
    }
    // SAFETY: the block is valid for `l.size()` bytes and ours.
    unsafe { std::ptr::write_bytes(p.as_ptr(), 0, l.size()) };
    Some(p)
}

impl Default for CachingAllocator {
    fn default() -> Self {
        Self::new(DEFAULT_CAP)
    }
}

impl Allocator for CachingAllocator {
    fn allocate(&self, layout: Layout) -> Result<NonNull<u8>> {
        self.get(layout, false).map(|(p, _)| p)
    }

    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<u8>> {
        self.get(layout, true).map(|(p, _)| p)
    }

    fn allocate_for_overwrite(&self, layout: Layout) -> Result<NonNull<u8>> {
        self.get(layout, false).map(|(p, _)| p)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        if layout.size() == 0 {
            return;
        }
        let class = size_class(layout.size());
        self.counters.in_use.fetch_sub(class, Ordering::Relaxed);
        if class >= MIN_CACHED {
            let mut st = self.lock();
            if st.cached + class <= self.cap {
                st.cached += class;
                st.free
                    .entry((class, layout.align()))
                    .or_default()
                    .push(ptr);
                return;
            }
        }
        // SAFETY: `ptr` came from `get` with this layout, i.e. from
        // `std::alloc` with `(class, align)`, and the caller gives it up.
        unsafe { std::alloc::dealloc(ptr.as_ptr(), layout_of(class, layout.align())) };
    }

    fn stats(&self) -> AllocStats {
        let c = &self.counters;
        AllocStats {
            in_use: c.in_use.load(Ordering::Relaxed),
            peak: c.peak.load(Ordering::Relaxed),
            allocations: c.allocations.load(Ordering::Relaxed),
            failures: c.failures.load(Ordering::Relaxed),
            capacity: None,
        }
    }

    fn reset_peak(&self) {
        let c = &self.counters;
        c.peak
            .store(c.in_use.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    fn name(&self) -> &'static str {
        "caching"
    }
}

impl Drop for CachingAllocator {
    fn drop(&mut self) {
        self.trim();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(n: usize) -> Layout {
        Layout::from_size_align(n, 16).unwrap()
    }

    #[test]
    fn size_classes_round_up_by_at_most_a_quarter() {
        assert_eq!(size_class(100), 100);
        assert_eq!(size_class(1 << 20), 1 << 20);
        assert_eq!(size_class((1 << 20) + 1), (1 << 20) + (1 << 18));
        for n in [MIN_CACHED, 300_000, 5_000_000, 64 << 20] {
            let c = size_class(n);
            assert!(c >= n && c - n <= n / 4, "{n} -> {c}");
        }
    }

    #[test]
    fn reset_peak_starts_a_new_phase_at_the_bytes_in_use() {
        let a = CachingAllocator::new(1 << 28);
        let p = a.allocate_zeroed(l(4096)).unwrap();
        let q = a.allocate_zeroed(l(8192)).unwrap();
        // SAFETY: from `a`, same layout, not used again.
        unsafe { a.deallocate(q, l(8192)) };
        assert_eq!(a.stats().peak, 4096 + 8192);
        a.reset_peak();
        assert_eq!(a.stats().peak, 4096);
        // SAFETY: as above.
        unsafe { a.deallocate(p, l(4096)) };
    }

    #[test]
    fn small_blocks_are_counted_zeroed_and_never_cached() {
        let a = CachingAllocator::new(1 << 28);
        let blocks: Vec<_> = (0..3)
            .map(|_| a.allocate_for_overwrite(l(48)).unwrap())
            .collect();
        for p in &blocks {
            // SAFETY: `p` is valid for 48 bytes (just allocated).
            let bytes = unsafe { std::slice::from_raw_parts(p.as_ptr(), 48) };
            assert!(
                bytes.iter().all(|&b| b == 0),
                "a fresh small block is zeroed"
            );
        }
        let s = a.stats();
        assert_eq!((s.in_use, s.peak, s.allocations), (144, 144, 3));
        for p in blocks {
            // SAFETY: from `a`, same layout, not used again.
            unsafe { a.deallocate(p, l(48)) };
        }
        let s = a.stats();
        assert_eq!((s.in_use, s.peak, s.allocations), (0, 144, 3));
        assert_eq!(a.cached_bytes(), 0);
        assert_eq!(a.cache_hits(), 0);
    }

    #[test]
    fn a_freed_large_block_is_reused_for_the_same_class() {
        let a = CachingAllocator::new(1 << 28);
        let p = a.allocate_zeroed(l(1 << 20)).unwrap();
        // SAFETY: from `a`, same layout, not used again.
        unsafe { a.deallocate(p, l(1 << 20)) };
        let q = a.allocate_for_overwrite(l((1 << 20) - 16)).unwrap();
        assert_eq!(p, q);
        assert_eq!(a.cache_hits(), 1);
        // SAFETY: as above.
        unsafe { a.deallocate(q, l((1 << 20) - 16)) };
    }

    #[test]
    fn a_mid_size_block_is_reused_on_a_cache_line_with_its_old_bytes() {
        // 16 KiB: a 4096-element f32 output, cached since MIN_CACHED is 1 KiB.
        let a = CachingAllocator::new(1 << 28);
        let p = a.allocate_for_overwrite(l(16 << 10)).unwrap();
        assert_eq!(p.as_ptr() as usize % CACHE_LINE, 0);
        // SAFETY: the block is valid for 16 KiB and ours.
        unsafe { std::ptr::write_bytes(p.as_ptr(), 0x5A, 16 << 10) };
        // SAFETY: from `a`, same layout, not used again.
        unsafe { a.deallocate(p, l(16 << 10)) };
        assert_eq!(a.cached_bytes(), 16 << 10);
        let q = a.allocate_for_overwrite(l(16 << 10)).unwrap();
        assert_eq!((p, a.cache_hits()), (q, 1));
        // SAFETY: valid and initialised (written above) for 16 KiB.
        let bytes = unsafe { std::slice::from_raw_parts(q.as_ptr(), 16 << 10) };
        assert!(
            bytes.iter().all(|&b| b == 0x5A),
            "an overwrite request is not zeroed again"
        );
        // SAFETY: as above.
        unsafe { a.deallocate(q, l(16 << 10)) };
        let s = a.stats();
        assert_eq!((s.in_use, s.allocations), (0, 2));
    }

    #[test]
    fn a_reused_block_is_zeroed_by_allocate_zeroed() {
        let a = CachingAllocator::new(1 << 28);
        let p = a.allocate_for_overwrite(l(1 << 20)).unwrap();
        // SAFETY: the block is valid for 1 MiB and ours.
        unsafe { std::ptr::write_bytes(p.as_ptr(), 0xAB, 1 << 20) };
        // SAFETY: from `a`, same layout.
        unsafe { a.deallocate(p, l(1 << 20)) };
        let q = a.allocate_zeroed(l(1 << 20)).unwrap();
        // SAFETY: valid, initialised (zeroed) block of 1 MiB.
        let bytes = unsafe { std::slice::from_raw_parts(q.as_ptr(), 1 << 20) };
        // Every byte natively; a sample under Miri, where a 1 MiB loop took
        // 164 s.
        let step = if cfg!(miri) { 4093 } else { 1 };
        assert!(bytes.iter().step_by(step).all(|&b| b == 0));
        // SAFETY: as above.
        unsafe { a.deallocate(q, l(1 << 20)) };
    }

    #[test]
    fn a_fresh_huge_block_is_zeroed_and_on_a_huge_page_boundary() {
        let a = CachingAllocator::new(1 << 28);
        let n = HUGE_PAGE + 100;
        let p = a.allocate_for_overwrite(l(n)).unwrap();
        assert_eq!(p.as_ptr() as usize % HUGE_PAGE, 0);
        // SAFETY: valid, initialised block of at least `n` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(p.as_ptr(), n) };
        // Every byte natively; a sample under Miri, where a 2 MiB loop is slow.
        let step = if cfg!(miri) { 4093 } else { 1 };
        assert!(bytes.iter().step_by(step).all(|&b| b == 0));
        assert_eq!(bytes[n - 1], 0);
        // SAFETY: from `a`, same layout; freed to the system through the
        // huge-page layout it was allocated with (a mismatch is UB that Miri
        // reports).
        unsafe { a.deallocate(p, l(n)) };
        a.trim();
    }

    #[test]
    fn the_cache_never_holds_more_than_its_cap() {
        let a = CachingAllocator::new(1 << 20);
        let ps: Vec<_> = (0..3).map(|_| a.allocate(l(1 << 20)).unwrap()).collect();
        for p in ps {
            // SAFETY: from `a`, same layout.
            unsafe { a.deallocate(p, l(1 << 20)) };
        }
        assert_eq!(a.cached_bytes(), 1 << 20);
        assert_eq!(a.stats().in_use, 0);
        assert_eq!(a.stats().peak, 3 << 20);
    }
}
