//! The global heap: embedded-alloc's linked-list first-fit heap over a static
//! buffer, wrapped to record its peak use.
//!
//! (embedded-alloc 0.7.0's `TlsfHeap::used()` panics, so LLFF it is.)
//!
//! NOTE [Small-block cache]
//! The eager path allocates and frees a few small blocks per op (a tensor
//! impl, a storage record, the elements), and LLFF's first-fit search and
//! hole merging cost about 400 instructions per alloc/free pair on the M4F.
//! [`init_cached`] puts free lists in front of it: blocks of at most
//! [`CACHED_MAX`] bytes and alignment at most 16 are sized up to a
//! multiple of 8 (one list per size) and allocated 16-aligned (tensor
//! buffers ask for 16), freed blocks go onto their size's list instead of back to LLFF, and an
//! allocation of that size pops one (a few instructions). A cached block
//! stays counted as in use, so [`peak`] includes the cache: after the first
//! op of each shape, a steady loop of eager ops allocates nothing new from
//! LLFF. The choice is made once, before the first allocation (a block's
//! size class must not depend on when it was allocated); `sine_eager` uses
//! it, the other examples keep plain LLFF.

use core::alloc::{GlobalAlloc, Layout};
use core::mem::MaybeUninit;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use embedded_alloc::LlffHeap;

/// Heap size: 32 KiB of the 64 KiB RAM on the Cortex-M4 machine, 8.5 KiB
/// of the micro:bit's 16 KiB.
#[cfg(not(kael_m0))]
pub const HEAP_SIZE: usize = 32 * 1024;
/// Heap size: 32 KiB of the 64 KiB RAM on the Cortex-M4 machine, 8.5 KiB
/// of the micro:bit's 16 KiB. `mlp_train` needs both: a 6.9 KB heap peak
/// and a 6.2 KB stack peak (backward through the graph), and the stack gets
/// the 7.4 KiB left after `.bss`. With a 10 KiB heap the stack ran into it
/// (see the `stack` module).
#[cfg(kael_m0)]
pub const HEAP_SIZE: usize = 8 * 1024 + 512;

/// A [`LlffHeap`] that remembers the largest number of bytes in use.
///
/// Only loads and stores on the atomics (no compare-and-swap), so it builds
/// for thumbv6m; the firmware is single-threaded and allocates from no
/// interrupt handler, so the load-then-store of the peak cannot race.
pub struct PeakHeap {
    heap: LlffHeap,
    peak: AtomicUsize,
    /// Whether small blocks go through the free lists (NOTE [Small-block
    /// cache]); set once, before the first allocation.
    cached: AtomicBool,
    /// The free lists: `free[i]` heads a list of free blocks of `8 * (i + 1)`
    /// bytes, each holding the next block's address in its first word.
    free: [AtomicPtr<u8>; CLASSES],
}

/// The largest block the cache keeps (NOTE [Small-block cache]).
pub const CACHED_MAX: usize = 128;
/// One free list per multiple of 8 bytes up to [`CACHED_MAX`].
const CLASSES: usize = CACHED_MAX / 8;
/// The alignment of every cached block: kael's tensor buffers ask for 16
/// bytes ([`kael_core::allocator::BUFFER_ALIGN`]), its handles for 4 or 8,
/// so all of them come from the free lists.
const CACHED_ALIGN: usize = 16;

#[global_allocator]
static HEAP: PeakHeap = PeakHeap {
    heap: LlffHeap::empty(),
    peak: AtomicUsize::new(0),
    cached: AtomicBool::new(false),
    free: [const { AtomicPtr::new(null_mut()) }; CLASSES],
};

static INIT: AtomicBool = AtomicBool::new(false);

/// [`init`] with the small-block cache in front of LLFF (NOTE [Small-block
/// cache]). Call once, first thing in `main`, instead of `init`.
pub fn init_cached() {
    if !INIT.load(Ordering::Relaxed) {
        HEAP.cached.store(true, Ordering::Relaxed);
    }
    init();
}

/// Hands the heap its memory. Call once, first thing in `main`; later calls
/// do nothing.
pub fn init() {
    static mut MEMORY: [MaybeUninit<u8>; HEAP_SIZE] = [MaybeUninit::uninit(); HEAP_SIZE];
    if INIT.load(Ordering::Relaxed) {
        return;
    }
    INIT.store(true, Ordering::Relaxed);
    // SAFETY: runs once (INIT, single-threaded start-up), before any
    // allocation; MEMORY is used by nothing else, so the heap owns it.
    unsafe {
        HEAP.heap
            .init(core::ptr::addr_of_mut!(MEMORY) as usize, HEAP_SIZE)
    }
}

/// Bytes in use now.
pub fn used() -> usize {
    HEAP.heap.used()
}

/// The most bytes ever in use (since start-up or [`reset_peak`]).
pub fn peak() -> usize {
    HEAP.peak.load(Ordering::Relaxed)
}

/// Restarts peak tracking from the current use.
pub fn reset_peak() {
    HEAP.peak.store(used(), Ordering::Relaxed);
}

impl PeakHeap {
    /// The free list for blocks of `layout`, and the size LLFF allocates
    /// them with (aligned to [`CACHED_ALIGN`]), when the cache is on and the
    /// block is small enough. Inlined: it runs on every allocation and free.
    #[inline(always)]
    fn class(&self, layout: Layout) -> Option<(&AtomicPtr<u8>, usize)> {
        if !self.cached.load(Ordering::Relaxed)
            || layout.size() > CACHED_MAX
            || layout.align() > CACHED_ALIGN
        {
            return None;
        }
        let size = layout.size().max(1).next_multiple_of(8);
        Some((self.free.get(size / 8 - 1)?, size))
    }
}

// SAFETY: every block comes from `LlffHeap`, a correct allocator. A cached
// block is only handed out again for a layout of its own size class (size
// rounded up to 8 bytes, alignment 16, as it was allocated with), and a free
// block's first word (it has at least 8 bytes) holds the list link while
// nobody owns it. The firmware is single-threaded and allocates from no
// interrupt handler, so the lists' load-then-store cannot race.
unsafe impl GlobalAlloc for PeakHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let class = self.class(layout);
        if let Some((list, _)) = class {
            let head = list.load(Ordering::Relaxed);
            if !head.is_null() {
                // SAFETY: `head` is a free block of this class (above); its
                // first word is the next free block's address.
                list.store(unsafe { head.cast::<*mut u8>().read() }, Ordering::Relaxed);
                return head;
            }
        }
        let layout = match class.map(|(_, size)| Layout::from_size_align(size, CACHED_ALIGN)) {
            Some(Ok(rounded)) => rounded,
            Some(Err(_)) => return null_mut(),
            None => layout,
        };
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, and
        // the rounded layout is at least as large and as aligned.
        let p = unsafe { self.heap.alloc(layout) };
        if !p.is_null() {
            let now = self.heap.used();
            if now > self.peak.load(Ordering::Relaxed) {
                self.peak.store(now, Ordering::Relaxed);
            }
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if let Some((list, _)) = self.class(layout) {
            // SAFETY: `ptr` is a block of this class (allocated above with
            // the rounded layout: the cache is on for every allocation or
            // for none), at least 8 bytes and 16-aligned, and now free.
            unsafe { ptr.cast::<*mut u8>().write(list.load(Ordering::Relaxed)) };
            list.store(ptr, Ordering::Relaxed);
            return;
        }
        // SAFETY: the caller upholds `GlobalAlloc::dealloc`'s contract.
        unsafe { self.heap.dealloc(ptr, layout) }
    }
}
