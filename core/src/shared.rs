//! The handle family: the one module that names `Rc` or `Arc`.
//!
//! NOTE [Handle family]
//! * default: [`alloc::rc::Rc`] and `Cell` counters. Works on targets with no
//!   atomic compare-and-swap (thumbv6m), smallest code, `!Send`.
//! * feature `sync`: [`alloc::sync::Arc`] and `usize`-wide atomics, so
//!   `Tensor: Send + Sync` (thumbv7em has no 64-bit atomics, hence `usize`).
//!
//! Everything else in the crate uses [`Shared`], [`Counter`], [`BorrowFlag`],
//! [`Flag`] and [`Lock`], never `Rc`/`Arc`/`Cell`/atomics directly.

#[cfg(not(feature = "sync"))]
pub use alloc::rc::{Rc as Shared, Weak as WeakShared};
#[cfg(feature = "sync")]
pub use alloc::sync::{Arc as Shared, Weak as WeakShared};

#[cfg(feature = "sync")]
use core::cell::UnsafeCell;

/// `Send + Sync` in `sync` mode; no bound at all otherwise.
///
/// Trait objects that tensors hold (backends, allocators, external owners)
/// take this as a supertrait so that `Tensor: Send + Sync` exactly when the
/// `sync` feature is on.
#[cfg(feature = "sync")]
pub trait MaybeSendSync: Send + Sync {}
#[cfg(feature = "sync")]
impl<T: Send + Sync + ?Sized> MaybeSendSync for T {}
/// `Send + Sync` in `sync` mode; no bound at all otherwise.
///
/// Trait objects that tensors hold (backends, allocators, external owners)
/// take this as a supertrait so that `Tensor: Send + Sync` exactly when the
/// `sync` feature is on.
#[cfg(not(feature = "sync"))]
pub trait MaybeSendSync {}
#[cfg(not(feature = "sync"))]
impl<T: ?Sized> MaybeSendSync for T {}

/// `Shared::new(make())` with the allocation made first, so that the value
/// is written straight into it: `Shared::new(value)` builds `value` on the
/// stack and copies it in (a `memcpy` call for an autograd node, on every
/// recorded op: NOTE [Small-op path] in `autograd`).
///
/// ```
/// use kael_core::shared::shared_in_place;
/// let s = shared_in_place(|| [7u8; 300]);
/// assert_eq!(s[299], 7);
/// ```
#[inline(always)]
pub fn shared_in_place<T>(make: impl FnOnce() -> T) -> Shared<T> {
    let slot = Shared::new(core::mem::MaybeUninit::<T>::uninit());
    let at = Shared::as_ptr(&slot).cast_mut();
    // SAFETY: `slot` was just allocated and is the only handle to it, so
    // nothing else reads or writes the value while it is written here;
    // `as_ptr` derives from the allocation's own pointer, so the write
    // stays within it. After the write the value is initialised, which is
    // what `assume_init` requires. If `make` panics, the uninitialised
    // slot is freed without dropping a value.
    unsafe {
        (*at).write(make());
        slot.assume_init()
    }
}

/// A monotonically increasing `usize` counter (storage versions, ids).
#[derive(Debug, Default)]
pub struct Counter {
    #[cfg(not(feature = "sync"))]
    value: core::cell::Cell<usize>,
    #[cfg(feature = "sync")]
    value: core::sync::atomic::AtomicUsize,
}

impl Counter {
    /// A counter starting at `v`.
    pub const fn new(v: usize) -> Self {
        Self {
            #[cfg(not(feature = "sync"))]
            value: core::cell::Cell::new(v),
            #[cfg(feature = "sync")]
            value: core::sync::atomic::AtomicUsize::new(v),
        }
    }

    /// The current value.
    pub fn get(&self) -> usize {
        #[cfg(not(feature = "sync"))]
        {
            self.value.get()
        }
        #[cfg(feature = "sync")]
        {
            self.value.load(core::sync::atomic::Ordering::Acquire)
        }
    }

    /// Adds one (wrapping) and returns the new value.
    pub fn bump(&self) -> usize {
        #[cfg(not(feature = "sync"))]
        {
            let v = self.value.get().wrapping_add(1);
            self.value.set(v);
            v
        }
        #[cfg(feature = "sync")]
        {
            self.value
                .fetch_add(1, core::sync::atomic::Ordering::AcqRel)
                .wrapping_add(1)
        }
    }

    /// Sets the value.
    pub fn set(&self, v: usize) {
        #[cfg(not(feature = "sync"))]
        self.value.set(v);
        #[cfg(feature = "sync")]
        self.value.store(v, core::sync::atomic::Ordering::Release);
    }
}

/// Reader/writer state of a storage: `0` free, `n > 0` readers, `-1` a writer.
///
/// Acquisition never blocks: a conflicting request fails, and the caller turns
/// that into [`crate::Error::BorrowConflict`]. Within one thread kael never
/// holds a read and a write of the same storage at once (in-place ops copy a
/// partially overlapping source first), so a conflict means two threads raced.
#[derive(Debug, Default)]
pub struct BorrowFlag {
    #[cfg(not(feature = "sync"))]
    state: core::cell::Cell<isize>,
    #[cfg(feature = "sync")]
    state: core::sync::atomic::AtomicIsize,
}

impl BorrowFlag {
    /// A free flag.
    pub const fn new() -> Self {
        Self {
            #[cfg(not(feature = "sync"))]
            state: core::cell::Cell::new(0),
            #[cfg(feature = "sync")]
            state: core::sync::atomic::AtomicIsize::new(0),
        }
    }

    /// Takes a shared (read) borrow; `false` if a writer holds the flag.
    pub fn try_read(&self) -> bool {
        #[cfg(not(feature = "sync"))]
        {
            let s = self.state.get();
            if s < 0 || s == isize::MAX {
                return false;
            }
            self.state.set(s + 1);
            true
        }
        #[cfg(feature = "sync")]
        {
            use core::sync::atomic::Ordering;
            let mut s = self.state.load(Ordering::Relaxed);
            loop {
                if s < 0 || s == isize::MAX {
                    return false;
                }
                match self.state.compare_exchange_weak(
                    s,
                    s + 1,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return true,
                    Err(now) => s = now,
                }
            }
        }
    }

    /// Releases one shared borrow.
    pub fn release_read(&self) {
        #[cfg(not(feature = "sync"))]
        self.state.set(self.state.get() - 1);
        #[cfg(feature = "sync")]
        self.state
            .fetch_sub(1, core::sync::atomic::Ordering::Release);
    }

    /// Takes the exclusive (write) borrow; `false` if anyone holds the flag.
    pub fn try_write(&self) -> bool {
        #[cfg(not(feature = "sync"))]
        {
            if self.state.get() != 0 {
                return false;
            }
            self.state.set(-1);
            true
        }
        #[cfg(feature = "sync")]
        {
            use core::sync::atomic::Ordering;
            self.state
                .compare_exchange(0, -1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        }
    }

    /// Releases the exclusive borrow.
    pub fn release_write(&self) {
        #[cfg(not(feature = "sync"))]
        self.state.set(0);
        #[cfg(feature = "sync")]
        self.state.store(0, core::sync::atomic::Ordering::Release);
    }
}

/// A boolean that other threads may read without a lock (sync mode: an
/// `AtomicBool` with acquire loads and release stores, which thumbv6m
/// supports; Rc mode: a `Cell`).
#[derive(Debug, Default)]
pub struct Flag {
    #[cfg(not(feature = "sync"))]
    value: core::cell::Cell<bool>,
    #[cfg(feature = "sync")]
    value: core::sync::atomic::AtomicBool,
}

impl Flag {
    /// A flag holding `v`.
    pub const fn new(v: bool) -> Self {
        Self {
            #[cfg(not(feature = "sync"))]
            value: core::cell::Cell::new(v),
            #[cfg(feature = "sync")]
            value: core::sync::atomic::AtomicBool::new(v),
        }
    }

    /// The current value.
    pub fn get(&self) -> bool {
        #[cfg(not(feature = "sync"))]
        {
            self.value.get()
        }
        #[cfg(feature = "sync")]
        {
            self.value.load(core::sync::atomic::Ordering::Acquire)
        }
    }

    /// Sets the value.
    pub fn set(&self, v: bool) {
        #[cfg(not(feature = "sync"))]
        self.value.set(v);
        #[cfg(feature = "sync")]
        self.value.store(v, core::sync::atomic::Ordering::Release);
    }
}

/// A tiny reader/writer cell for short internal critical sections.
///
/// Rc mode: a [`core::cell::RefCell`]. sync mode: a spin lock with shared
/// readers. Writes ([`Lock::with`]) are a handful of loads and stores
/// (swapping a pointer, copying a layout) and never nest on the same lock:
/// callers return replaced values out of the closure and drop them
/// afterwards. Reads ([`Lock::read`]) may nest in each other and may be held
/// across a kernel (a tensor lent as an operand, NOTE [Small-op path]), but
/// never around a write to the same lock. So neither mode can block forever
/// or hit the `RefCell` reentry check; a writer waits for the readers'
/// kernels to end.
pub struct Lock<T> {
    #[cfg(not(feature = "sync"))]
    value: core::cell::RefCell<T>,
    #[cfg(feature = "sync")]
    flag: BorrowFlag,
    #[cfg(feature = "sync")]
    value: UnsafeCell<T>,
}

// SAFETY: `flag` admits one writer (`&mut T`) or any number of readers
// (`&T`, possibly on several threads at once), never both, so sharing the
// lock across threads is sound whenever `T: Send + Sync`.
#[cfg(feature = "sync")]
unsafe impl<T: Send + Sync> Sync for Lock<T> {}

impl<T> Lock<T> {
    /// A lock holding `value`.
    pub const fn new(value: T) -> Self {
        Self {
            #[cfg(not(feature = "sync"))]
            value: core::cell::RefCell::new(value),
            #[cfg(feature = "sync")]
            flag: BorrowFlag::new(),
            #[cfg(feature = "sync")]
            value: UnsafeCell::new(value),
        }
    }

    /// Runs `f` with exclusive access to the value.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        #[cfg(not(feature = "sync"))]
        {
            f(&mut self.value.borrow_mut())
        }
        #[cfg(feature = "sync")]
        {
            let _release = Held::take(&self.flag, true);
            // SAFETY: the exclusive flag is held until `_release` drops, so no
            // other reference to `value` exists while `f` runs.
            let value = unsafe { &mut *self.value.get() };
            f(value)
        }
    }

    /// Runs `f` with shared access to the value: other readers may hold it
    /// at the same time, writers wait.
    pub fn read<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        #[cfg(not(feature = "sync"))]
        {
            f(&self.value.borrow())
        }
        #[cfg(feature = "sync")]
        {
            let _release = Held::take(&self.flag, false);
            // SAFETY: a read flag is held until `_release` drops, so no
            // writer (the only source of `&mut T`) is active while `f` runs;
            // other readers only hold `&T`.
            let value = unsafe { &*self.value.get() };
            f(value)
        }
    }

    /// The value, through exclusive access to the lock itself: no flag is
    /// taken (a drop, for instance, is the only user left).
    ///
    /// ```
    /// use kael_core::shared::Lock;
    /// let mut l = Lock::new(1);
    /// *l.get_mut() += 1;
    /// assert_eq!(l.read(|v| *v), 2);
    /// ```
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    /// Consumes the lock and returns the value.
    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }
}

/// A [`Lock`]'s flag, taken (spinning until it is free) and released on
/// drop: the write side when `write`, else one read.
#[cfg(feature = "sync")]
struct Held<'a> {
    flag: &'a BorrowFlag,
    write: bool,
}

#[cfg(feature = "sync")]
impl<'a> Held<'a> {
    fn take(flag: &'a BorrowFlag, write: bool) -> Self {
        let try_take = || {
            if write {
                flag.try_write()
            } else {
                flag.try_read()
            }
        };
        while !try_take() {
            core::hint::spin_loop();
        }
        Self { flag, write }
    }
}

#[cfg(feature = "sync")]
impl Drop for Held<'_> {
    fn drop(&mut self) {
        if self.write {
            self.flag.release_write();
        } else {
            self.flag.release_read();
        }
    }
}

impl<T> core::fmt::Debug for Lock<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Lock(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_in_place_holds_the_value_and_drops_it_once() {
        let dropped = Counter::new(0);
        struct Loud<'a>([u64; 40], &'a Counter);
        impl Drop for Loud<'_> {
            fn drop(&mut self) {
                self.1.bump();
            }
        }
        let s = shared_in_place(|| Loud([3; 40], &dropped));
        let t = s.clone();
        assert_eq!(t.0.iter().sum::<u64>(), 120);
        drop(s);
        assert_eq!(dropped.get(), 0);
        drop(t);
        assert_eq!(dropped.get(), 1);
    }

    #[test]
    fn flag_reads_what_was_set() {
        let f = Flag::new(false);
        assert!(!f.get());
        f.set(true);
        assert!(f.get());
    }

    #[test]
    fn counter_bumps_and_reads() {
        let c = Counter::new(0);
        assert_eq!(c.bump(), 1);
        assert_eq!(c.bump(), 2);
        assert_eq!(c.get(), 2);
    }

    #[test]
    fn borrow_flag_excludes_writer_while_reading() {
        let f = BorrowFlag::new();
        assert!(f.try_read());
        assert!(f.try_read());
        assert!(!f.try_write());
        f.release_read();
        f.release_read();
        assert!(f.try_write());
        assert!(!f.try_read());
        f.release_write();
        assert!(f.try_read());
    }

    #[test]
    fn lock_gives_exclusive_access() {
        let l = Lock::new(5);
        assert_eq!(
            l.with(|v| {
                *v += 1;
                *v
            }),
            6
        );
        assert_eq!(l.into_inner(), 6);
    }

    #[test]
    fn lock_reads_nest_and_see_the_last_write() {
        let l = Lock::new(1);
        l.with(|v| *v = 7);
        assert_eq!(l.read(|a| l.read(|b| *a + *b)), 14);
    }
}
