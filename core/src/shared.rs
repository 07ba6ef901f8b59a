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

/// Reader/writer state of a storage. Rc mode: `0` free, `n > 0` readers,
/// `-1` a writer. `sync` mode: one word (the flag sits in every storage,
/// whose size is budgeted), the top bit for a writer, the count of waiting
/// writers in the next 15 bits, the count of readers below.
///
/// Acquisition never blocks indefinitely: a conflicting request fails, and
/// the caller turns that into [`crate::Error::BorrowConflict`]. Within one
/// thread kael never holds a read and a write of the same storage at once
/// (in-place ops copy a partially overlapping source first), so a conflict
/// means two threads raced.
///
/// NOTE [Writers get in]: in `sync` mode a writer that finds readers does
/// not fail at once: it counts itself waiting, which makes new readers hold
/// back, and retries for a bounded time ([`WRITER_PATIENCE_MS`] with `std`,
/// [`WRITER_PATIENCE`] spin rounds without) while the readers
/// it found finish. Readers that see a waiting or holding writer wait, also
/// boundedly, for it to get in and out. So an optimizer step among threads
/// that read its parameters continuously gets in, instead of failing every
/// time (a reader holds its borrow for one kernel); a borrow held for long
/// (a guard kept across a loop) still fails after the bound, never
/// deadlocks. A multi-tensor write announces itself on every destination
/// before its checks ([`BorrowFlag::announce_writer`], held by
/// `storage::WriteIntent`) so no reader slips in between its checks and
/// its writes. In Rc mode there is one thread, and a conflict fails at once.
#[derive(Debug, Default)]
pub struct BorrowFlag {
    #[cfg(not(feature = "sync"))]
    state: core::cell::Cell<isize>,
    #[cfg(feature = "sync")]
    state: core::sync::atomic::AtomicUsize,
}

/// `sync` mode: the bit of a writer holding the flag.
#[cfg(feature = "sync")]
const WRITER: usize = 1 << (usize::BITS - 1);
/// `sync` mode: one waiting writer, and the bits that count them.
#[cfg(feature = "sync")]
const WAIT_ONE: usize = 1 << (usize::BITS - 16);
#[cfg(feature = "sync")]
const WAITING: usize = !WRITER & !(WAIT_ONE - 1);
/// `sync` mode: the bits that count readers.
#[cfg(feature = "sync")]
const READERS: usize = WAIT_ONE - 1;

/// How long a writer (or a reader held back by one) waits before it
/// reports a conflict (NOTE [Writers get in]): with `std`, this many
/// milliseconds (spinning 64 rounds, then yielding the
/// thread), long enough to outlast a reader preempted by the OS while it
/// holds its borrow; without `std` (no clock), [`WRITER_PATIENCE`] spin
/// rounds.
#[cfg(feature = "sync")]
pub const WRITER_PATIENCE_MS: u64 = 100;

/// Spin rounds of the bounded wait without `std` (NOTE [Writers get in]);
/// fewer under Miri, which has no clock to bound the wait by and whose
/// every round is interpreted (its scheduler switches threads at each
/// yield, so a few hundred rounds let a reader finish).
#[cfg(all(feature = "sync", not(miri)))]
pub const WRITER_PATIENCE: u32 = 1 << 16;
/// (Under Miri: see above.)
#[cfg(all(feature = "sync", miri))]
pub const WRITER_PATIENCE: u32 = 1 << 9;

#[cfg(feature = "sync")]
const SPIN_ROUNDS: u32 = 64;

/// The bounded wait of NOTE [Writers get in]: `next()` is `false` once
/// the patience is spent, and otherwise backs off one round.
#[cfg(feature = "sync")]
struct Patience {
    round: u32,
    #[cfg(all(feature = "std", not(miri)))]
    deadline: Option<std::time::Instant>,
}

#[cfg(feature = "sync")]
impl Patience {
    fn new() -> Self {
        Self {
            round: 0,
            #[cfg(all(feature = "std", not(miri)))]
            deadline: None,
        }
    }

    fn next(&mut self) -> bool {
        self.round = self.round.saturating_add(1);
        #[cfg(all(feature = "std", not(miri)))]
        if self.round > SPIN_ROUNDS {
            // the clock is read only once spinning did not suffice
            let now = std::time::Instant::now();
            let deadline = *self
                .deadline
                .get_or_insert(now + std::time::Duration::from_millis(WRITER_PATIENCE_MS));
            if now >= deadline {
                return false;
            }
            std::thread::yield_now();
            return true;
        }
        if self.round > WRITER_PATIENCE {
            return false;
        }
        #[cfg(feature = "std")]
        if self.round > SPIN_ROUNDS {
            std::thread::yield_now();
            return true;
        }
        core::hint::spin_loop();
        true
    }
}

impl BorrowFlag {
    /// A free flag.
    pub const fn new() -> Self {
        Self {
            #[cfg(not(feature = "sync"))]
            state: core::cell::Cell::new(0),
            #[cfg(feature = "sync")]
            state: core::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Takes a shared (read) borrow; `false` if a writer holds the flag
    /// (in `sync` mode: after a bounded wait, NOTE [Writers get in]).
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
            let mut patience = Patience::new();
            while self.state.load(Ordering::Acquire) & (WRITER | WAITING) != 0 && patience.next() {}
            let mut s = self.state.load(Ordering::Relaxed);
            loop {
                if s & WRITER != 0 || s & READERS == READERS {
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

    /// Takes the exclusive (write) borrow; `false` if anyone holds the flag
    /// (in `sync` mode: still holds it after a bounded wait, NOTE [Writers
    /// get in]).
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
            if self.take_write() {
                return true;
            }
            let announced = self.announce_writer();
            let mut got = false;
            let mut patience = Patience::new();
            while patience.next() {
                if self.take_write() {
                    got = true;
                    break;
                }
            }
            if announced {
                self.withdraw_writer();
            }
            got
        }
    }

    /// One attempt at the write borrow: no writer, no reader (waiting
    /// writers, this one among them, are kept).
    #[cfg(feature = "sync")]
    fn take_write(&self) -> bool {
        use core::sync::atomic::Ordering;
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & (WRITER | READERS) != 0 {
                return false;
            }
            match self.state.compare_exchange_weak(
                s,
                s | WRITER,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
    }

    /// Announces a writer that will come: new readers hold back, boundedly,
    /// until it is withdrawn (NOTE [Writers get in]). `false` (nothing to
    /// withdraw) in Rc mode, and when the count of waiting writers is full.
    pub fn announce_writer(&self) -> bool {
        #[cfg(not(feature = "sync"))]
        {
            false
        }
        #[cfg(feature = "sync")]
        {
            use core::sync::atomic::Ordering;
            let mut s = self.state.load(Ordering::Relaxed);
            loop {
                if s & WAITING == WAITING {
                    return false;
                }
                match self.state.compare_exchange_weak(
                    s,
                    s + WAIT_ONE,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return true,
                    Err(now) => s = now,
                }
            }
        }
    }

    /// Withdraws one [`BorrowFlag::announce_writer`] that returned `true`.
    pub fn withdraw_writer(&self) {
        #[cfg(feature = "sync")]
        self.state
            .fetch_sub(WAIT_ONE, core::sync::atomic::Ordering::AcqRel);
    }

    /// Releases the exclusive borrow.
    pub fn release_write(&self) {
        #[cfg(not(feature = "sync"))]
        self.state.set(0);
        #[cfg(feature = "sync")]
        self.state
            .fetch_and(!WRITER, core::sync::atomic::Ordering::Release);
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

    /// NOTE [Writers get in]: an announced writer holds new readers back
    /// only boundedly (they still get in once it is withdrawn, or after
    /// the wait), waiting writers do not count as holders, and the count
    /// of announcements is kept apart from the readers'.
    #[test]
    fn an_announced_writer_is_kept_apart_from_readers_and_holders() {
        let f = BorrowFlag::new();
        let announced = f.announce_writer();
        assert_eq!(announced, cfg!(feature = "sync"));
        // a reader after the bounded wait (nobody holds the flag) gets in
        assert!(f.try_read());
        assert!(!f.try_write(), "a reader holds it");
        f.release_read();
        // waiting writers are not holders: a writer takes it
        assert!(f.try_write());
        assert!(!f.try_read());
        f.release_write();
        if announced {
            f.withdraw_writer();
        }
        assert!(f.try_read() && f.try_read());
        f.release_read();
        f.release_read();
        assert!(f.try_write());
        f.release_write();
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
