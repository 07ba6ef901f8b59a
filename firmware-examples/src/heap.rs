//! The global heap: embedded-alloc's linked-list first-fit heap over a static
//! buffer, wrapped to record its peak use.
//!
//! (embedded-alloc 0.7.0's `TlsfHeap::used()` panics, so LLFF it is.)

use core::alloc::{GlobalAlloc, Layout};
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
}

#[global_allocator]
static HEAP: PeakHeap = PeakHeap {
    heap: LlffHeap::empty(),
    peak: AtomicUsize::new(0),
};

static INIT: AtomicBool = AtomicBool::new(false);

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

// SAFETY: every call is forwarded unchanged to `LlffHeap`, a correct
// allocator; the wrapper only reads its `used()` afterwards.
unsafe impl GlobalAlloc for PeakHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
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
        // SAFETY: the caller upholds `GlobalAlloc::dealloc`'s contract.
        unsafe { self.heap.dealloc(ptr, layout) }
    }
}
