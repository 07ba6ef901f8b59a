//! Stack measurement by painting: [`paint`] fills the free stack with a
//! pattern at start-up, [`peak`] finds the lowest word the program has since
//! overwritten.
//!
//! cortex-m-rt puts the stack at the top of RAM, growing down towards the
//! end of `.bss` (`__sheap`), where the static heap and arena buffers sit.
//! Nothing stops it there: a stack that grows past `__sheap` silently
//! overwrites the heap's bookkeeping (on the micro:bit, `mlp_train` once
//! failed as "RefCell already borrowed" inside embedded-alloc for exactly
//! this reason). So [`crate::exit`] reports the peak, and fails the run when
//! the stack reached its last [`GUARD`] bytes, before the overflow shows up
//! as a puzzle elsewhere.
//!
//! ```ignore
//! stack::paint(); // first thing in main
//! // ... the example ...
//! let used = stack::peak(); // bytes, from the top of RAM
//! ```

/// The pattern painted over the free stack.
const PAINT: u32 = 0xCAFE_F00D;

/// Bytes at the bottom of the stack that must stay unpainted-over: a run
/// that reaches them has no margin left and is reported as an overflow.
pub const GUARD: usize = 256;

/// Bytes just below the current stack pointer that [`paint`] leaves alone
/// (its own frame and the call that follows).
const LIVE_MARGIN: usize = 64;

unsafe extern "C" {
    /// Top of the stack (cortex-m-rt's `link.x`: end of RAM).
    static _stack_start: u32;
    /// Start of the space after `.bss`/`.uninit`, where the stack may grow
    /// down to (cortex-m-rt's `link.x`).
    static __sheap: u32;
}

/// The stack's bounds `(bottom, top)` as addresses.
fn bounds() -> (usize, usize) {
    // Only the symbols' addresses are taken; nothing is read through them.
    (
        core::ptr::addr_of!(__sheap) as usize,
        core::ptr::addr_of!(_stack_start) as usize,
    )
}

/// Bytes the stack may use: from the top of RAM down to the end of `.bss`.
pub fn size() -> usize {
    let (bottom, top) = bounds();
    top - bottom
}

/// Fills the free stack (below the current frame) with the pattern. Call it
/// once, first thing in `main`.
#[inline(never)]
pub fn paint() {
    let (bottom, _) = bounds();
    let here = 0u32;
    let sp = core::ptr::addr_of!(here) as usize;
    let end = (sp - LIVE_MARGIN) & !3;
    let mut at = (bottom + 3) & !3;
    while at < end {
        // SAFETY: `[bottom, sp - LIVE_MARGIN)` is RAM between the end of
        // `.bss` and this function's frame: the stack's free part, which no
        // Rust object occupies (the examples run no interrupt handlers), and
        // `at` is 4-byte aligned.
        unsafe { core::ptr::write_volatile(at as *mut u32, PAINT) };
        at += 4;
    }
}

/// The most stack used since [`paint`], in bytes from the top of RAM.
pub fn peak() -> usize {
    let (bottom, top) = bounds();
    let mut at = (bottom + 3) & !3;
    while at < top {
        // SAFETY: `at` is an aligned address inside the stack region, which
        // is RAM; a volatile read of a `u32` there is always valid.
        if unsafe { core::ptr::read_volatile(at as *const u32) } != PAINT {
            break;
        }
        at += 4;
    }
    top - at
}

/// Whether the stack reached its last [`GUARD`] bytes.
pub fn overflowed() -> bool {
    peak() + GUARD > size()
}
