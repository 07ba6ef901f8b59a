//! The threaded backend's worker pool: `threads - 1` workers that help the
//! calling thread with one job at a time, spinning between jobs so that a
//! hand-off costs a cache line's trip rather than a wake-up.
//!
//! ```ignore
//! let pool = Pool::new(2)?;              // one worker beside the caller
//! let next = AtomicUsize::new(0);
//! pool.run(|| while next.fetch_add(1, Relaxed) < 100 { /* piece */ });
//! ```

use super::affinity::{self, CpuSet};
use std::any::Any;
use std::cell::{Cell, UnsafeCell};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

// NOTE [Spinning pool]
// A parallel op hands its job to workers that are usually already awake.
// rayon's workers yield for a few tens of microseconds and then sleep, and
// waking one costs a futex call on the caller and a scheduler wake-up on
// the worker; on this machine's 2 vCPUs that made a 64K-element add take
// 18.8 µs on 2 threads against 8.3 µs on 1 (PyTorch's OpenMP, which spins,
// takes 5.8 µs). Here an idle worker spins for `SPIN` after its last job
// (OpenMP runtimes spin for 0.2 ms to 200 ms by default), then yields for
// `YIELD`, then parks; a caller unparks only workers that parked.
//
// A job is a borrowed closure. The caller publishes it, runs it itself,
// then closes the job and waits until no worker is inside it, so the
// borrow outlives every use. Workers join a job by incrementing a counter
// in the same word as the job's epoch and its closed bit, with one
// compare-exchange, so a worker can only join the job that is open now:
// a late worker (still asleep when the caller finished every piece alone)
// finds the job closed and does not hold the caller up. Every piece is
// claimed from the job's own counter, so whoever joins, each piece runs
// exactly once.
//
// One caller at a time: a second thread calling into the same device
// while a job runs (or a job calling back into the pool) does not wait
// for the pool, it runs its job alone (the same pieces, in order).

/// How long an idle worker spins before yielding.
const SPIN: Duration = Duration::from_micros(300);

/// How long it then yields the CPU before parking.
const YIELD: Duration = Duration::from_millis(2);

// NOTE [A waiting caller yields]
// Once its own pieces are done, the caller waits for the workers still
// inside the job. A worker that is running finishes within microseconds;
// one that the OS has preempted (another process wants the core) does not
// run again until a core frees up, and a caller spinning on the other
// core only keeps it from running: with one core of two taken by a
// competing process, the DS-CNN step at 2 threads took 92 ms against 57
// ms at 1 thread. So the caller spins `CLOSE_SPIN_POLLS` polls (tens of
// microseconds), then yields its core between polls; and a wait past
// `STALL` and past twice the caller's own time in the job (a worker's
// last piece may run on for a while on a quiet machine: a first version
// without that condition ran the CNN step alone, 7.7 -> 13.9 ms; so did
// a 1 ms threshold on a noisy VM now and then) means
// the machine is busy, so the pool's callers run their jobs
// alone (the same pieces in the same order, so the same results) for
// `ALONE`, then try the workers again.

/// Polls a caller spins for its job's workers before it yields.
const CLOSE_SPIN_POLLS: u32 = 1024;

/// A wait for a job's workers this long, and twice as long as the
/// caller's own part of the job, means one was preempted ...
const STALL: Duration = Duration::from_millis(2);

/// ... and the callers then run their jobs alone for this long.
const ALONE: Duration = Duration::from_millis(20);

/// The state word: epoch (upper 32 bits), closed bit, workers inside.
const CLOSED: u64 = 1 << 31;
const INSIDE: u64 = CLOSED - 1;
const EPOCH: u64 = 1 << 32;

/// A published job, its lifetime erased (see `Pool::run`).
type Job = *const (dyn Fn() + Sync + 'static);

thread_local! {
    /// The index of the pool worker running on this thread.
    static WORKER: Cell<Option<usize>> = const { Cell::new(None) };
}

/// What the caller and the workers share.
struct Shared {
    /// Epoch, closed bit and the count of workers inside the open job.
    state: AtomicU64,
    /// The open job. Written by the caller only while the job is closed
    /// with no worker inside (no reader); read by a worker only while it is
    /// inside the open job (no writer).
    job: UnsafeCell<Option<Job>>,
    /// Per worker: whether it is parked (or about to), so needs unparking.
    parked: Vec<AtomicBool>,
    /// The first panic payload of a worker in the current job, and
    /// whether one is there (so a job without a panic takes no lock).
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    /// The CPU the caller of the latest job ran on when it opened it
    /// (NOTE [Workers leave the caller's CPU]); `usize::MAX` when unknown.
    caller_cpu: AtomicUsize,
    /// Per worker: its thread id for the affinity calls (0 until known).
    tids: Vec<AtomicI32>,
    /// Per worker: its CPU set before its caller steered it off the
    /// caller's CPU while it was parked, given back once it is awake.
    steered: Vec<Mutex<Option<CpuSet>>>,
    /// Until when (nanoseconds since `born`) callers run their jobs alone,
    /// 0 when they do not (NOTE [A waiting caller yields]).
    alone_until: AtomicU64,
    born: std::time::Instant,
}

// SAFETY: `job` is the only non-Sync field; its accesses are ordered by
// `state` as stated above it (the caller writes before a Release store that
// opens the job; a worker reads after an Acquire compare-exchange that
// joins it; the caller writes again only after an Acquire load has seen
// every worker leave with a Release decrement). The closure it points to
// is `Sync`, so calling it from several threads at once is allowed.
unsafe impl Sync for Shared {}
// SAFETY: as for Sync; the raw pointer is only dereferenced as above.
unsafe impl Send for Shared {}

/// The pool; dropping it stops and joins its workers.
pub(super) struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Held by the thread whose job is open.
    caller: Mutex<()>,
}

impl Pool {
    /// A pool of `workers` threads (0: every job runs on its caller alone).
    pub(super) fn new(workers: usize) -> std::io::Result<Pool> {
        let shared = Arc::new(Shared {
            state: AtomicU64::new(CLOSED),
            job: UnsafeCell::new(None),
            parked: (0..workers).map(|_| AtomicBool::new(false)).collect(),
            alone_until: AtomicU64::new(0),
            born: std::time::Instant::now(),
            panic: Mutex::new(None),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            caller_cpu: AtomicUsize::new(usize::MAX),
            tids: (0..workers).map(|_| AtomicI32::new(0)).collect(),
            steered: (0..workers).map(|_| Mutex::new(None)).collect(),
        });
        let mut pool = Pool {
            shared: shared.clone(),
            workers: Vec::with_capacity(workers),
            caller: Mutex::new(()),
        };
        for i in 0..workers {
            let s = shared.clone();
            let handle = thread::Builder::new()
                .name(format!("kael-cpu-{i}"))
                .spawn(move || worker(&s, i))?;
            // On an error `pool` drops here and stops the workers started.
            pool.workers.push(handle);
        }
        Ok(pool)
    }

    /// Worker threads (the caller is not counted).
    pub(super) fn workers(&self) -> usize {
        self.workers.len()
    }

    /// The index of the worker running the current thread, `None` off the pool.
    pub(super) fn current_worker() -> Option<usize> {
        WORKER.with(Cell::get)
    }

    /// Runs `claim` on the calling thread and on every worker that joins
    /// before the caller's own call returns; returns when no call is left
    /// running. `claim` claims pieces of work from a counter of its own
    /// until none is left (NOTE [Spinning pool]). A panic in any call is
    /// resumed here.
    pub(super) fn run(&self, claim: &(dyn Fn() + Sync)) {
        let _turn = match self.caller.try_lock() {
            Ok(guard) if !self.workers.is_empty() => guard,
            // Busy (another thread's job, or a job calling back into the
            // pool), poisoned, or no workers: do it all here.
            Ok(_) | Err(TryLockError::WouldBlock) | Err(TryLockError::Poisoned(_)) => {
                claim();
                return;
            }
        };
        let s = &*self.shared;
        let until = s.alone_until.load(Ordering::Relaxed);
        if until != 0 {
            if (s.born.elapsed().as_nanos() as u64) < until {
                // Recently kept waiting by a preempted worker: alone.
                claim();
                return;
            }
            s.alone_until.store(0, Ordering::Relaxed);
        }
        // SAFETY: only the lifetime is erased. The pointer is read by
        // workers only inside the open job, and `Close` (below) closes the
        // job and waits until no worker is inside before this function
        // returns or unwinds, so no use outlives `claim`'s borrow.
        let job: Job = unsafe {
            core::mem::transmute::<*const (dyn Fn() + Sync + '_), Job>(claim as *const _)
        };
        if s.panicked.swap(false, Ordering::Relaxed) {
            // Left by a job whose caller unwound first: not this job's.
            take_panic(s);
        }
        let closed = s.state.load(Ordering::Acquire);
        // SAFETY: the job is closed with no worker inside (the previous
        // `Close` waited for that, and we hold the caller lock), so nobody
        // reads `job` now.
        unsafe { *s.job.get() = Some(job) };
        let open = ((closed & !(CLOSED | INSIDE)).wrapping_add(EPOCH)) & !INSIDE;
        // Published before the job opens, so a worker that joins sees it.
        let cpu = affinity::current_cpu();
        s.caller_cpu.store(cpu, Ordering::Relaxed);
        s.state.store(open, Ordering::SeqCst);
        for (i, p) in s.parked.iter().enumerate() {
            if p.swap(false, Ordering::SeqCst) {
                steer(s, i, cpu);
                self.workers[i].thread().unpark();
            }
        }
        let mut close = Close(s, None);
        let t0 = std::time::Instant::now();
        claim();
        close.1 = Some(t0.elapsed());
        drop(close);
        if s.panicked.swap(false, Ordering::Relaxed) {
            if let Some(payload) = take_panic(s) {
                resume_unwind(payload);
            }
        }
    }
}

/// `m`'s value; a poisoned lock only means a panic elsewhere while it was
/// held, and the value (a CPU set) stays usable.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Takes the stored worker panic, if any.
fn take_panic(s: &Shared) -> Option<Box<dyn Any + Send>> {
    match s.panic.lock() {
        Ok(mut p) => p.take(),
        Err(poisoned) => poisoned.into_inner().take(),
    }
}

/// Closes the open job and waits until no worker is inside it, also when
/// the caller's own call unwinds.
struct Close<'a>(&'a Shared, Option<Duration>);

impl Drop for Close<'_> {
    fn drop(&mut self) {
        let s = self.0;
        s.state.fetch_or(CLOSED, Ordering::AcqRel);
        // NOTE [A waiting caller yields]
        let mut polls = 0u32;
        let mut since = None;
        while s.state.load(Ordering::Acquire) & INSIDE != 0 {
            if polls < CLOSE_SPIN_POLLS {
                polls += 1;
                std::hint::spin_loop();
            } else {
                let t = *since.get_or_insert_with(std::time::Instant::now);
                // (A worker's last piece may legitimately run on after
                // the caller's work: a stall is long against both.)
                let busy = self.1.unwrap_or(Duration::MAX);
                if t.elapsed() > STALL.max(busy.saturating_mul(2)) {
                    let now = s.born.elapsed() + ALONE;
                    s.alone_until
                        .store(now.as_nanos() as u64, Ordering::Relaxed);
                }
                thread::yield_now();
            }
        }
        // SAFETY: closed with no worker inside: no reader of `job`.
        unsafe { *s.job.get() = None };
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        for w in &self.workers {
            w.thread().unpark();
        }
        for w in self.workers.drain(..) {
            // A worker never panics outside `catch_unwind`; nothing to report.
            let _ = w.join();
        }
    }
}

/// A worker's loop: join each open job once, idle between jobs.
fn worker(s: &Shared, index: usize) {
    WORKER.with(|w| w.set(Some(index)));
    let mut last_epoch = None;
    let mut idle_since = Instant::now();
    let mut polls = 0u32;
    // Whether this worker may still move off the caller's CPU (NOTE
    // [Workers leave the caller's CPU]): false once it found no other.
    let mut may_move = true;
    s.tids[index].store(affinity::thread_id(), Ordering::Release);
    loop {
        let state = s.state.load(Ordering::Acquire);
        let epoch = state >> 32;
        if state & CLOSED == 0 && last_epoch != Some(epoch) {
            if s.state
                .compare_exchange_weak(state, state + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                last_epoch = Some(epoch);
                if may_move {
                    may_move = leave_caller_cpu(s);
                }
                // SAFETY: inside the open job (joined above): the caller
                // does not write `job` until this worker leaves, and the
                // closure it points to lives until then (NOTE [Spinning pool]).
                let job = unsafe { *s.job.get() };
                if let Some(job) = job {
                    // SAFETY: as above; the closure is Sync.
                    let call = unsafe { &*job };
                    if let Err(payload) = catch_unwind(AssertUnwindSafe(call)) {
                        let mut p = match s.panic.lock() {
                            Ok(p) => p,
                            Err(poisoned) => poisoned.into_inner(),
                        };
                        p.get_or_insert(payload);
                        s.panicked.store(true, Ordering::Relaxed);
                    }
                }
                s.state.fetch_sub(1, Ordering::Release);
                idle_since = Instant::now();
                polls = 0;
            }
            continue;
        }
        if s.shutdown.load(Ordering::Acquire) {
            return;
        }
        // Idle: spin, then yield, then park. The clock is read every 64 polls.
        polls = polls.wrapping_add(1);
        if polls % 64 != 0 {
            std::hint::spin_loop();
            continue;
        }
        if may_move {
            may_move = leave_caller_cpu(s);
        }
        let idle = idle_since.elapsed();
        if idle < SPIN {
            std::hint::spin_loop();
        } else if idle < SPIN + YIELD {
            thread::yield_now();
        } else {
            s.parked[index].store(true, Ordering::SeqCst);
            // Re-check after announcing: either the caller sees `parked`
            // and unparks, or this load sees its new job.
            let now = s.state.load(Ordering::SeqCst);
            if (now & CLOSED == 0 && last_epoch != Some(now >> 32))
                || s.shutdown.load(Ordering::SeqCst)
            {
                s.parked[index].store(false, Ordering::SeqCst);
            } else {
                thread::park();
            }
            // Steered while announcing itself parked: its CPUs back.
            if let Some(set) = lock(&s.steered[index]).take() {
                set.apply(0);
            }
            idle_since = Instant::now();
        }
    }
}

// NOTE [Workers leave the caller's CPU]
// A worker woken from `park` can be placed by the kernel on the CPU of
// the thread that woke it, and stay there: on the 2-vCPU Firecracker VM
// of issue 17 (whose kernel packs threads onto busy vCPUs), after a 5 ms
// pause the caller and its one worker were both on one vCPU in most
// trials, and a 64K-element add then took 8.2 us (the caller doing every
// piece while the worker waited its turn) against 4.4 us with the two
// apart, which is where they stay while jobs keep coming. So the caller
// publishes its CPU with each job, and
// * before unparking a worker, restricts the worker's CPU set to the
//   others (`steer`), so it cannot wake there; awake, the worker gives
//   itself its previous set back;
// * a worker that finds itself on the caller's CPU when it joins a job or
//   polls while idle moves off it the same way (`leave_caller_cpu`), and
//   stops trying if its set has no other CPU.
// Both only change where our own worker threads run, for a moment, and
// only on Linux (`affinity`). Measured in `peer-bench`, whose blocks each
// start after a 5 ms pause: a 64K-element add went from 8.1-8.5 us in
// most runs to 4.3-4.6 us in most (candle: 4.2-5.1 us).

/// Before waking parked worker `i`: restricts it to its CPUs other than
/// `cpu`, the caller's, so that the kernel does not wake it there (NOTE
/// [Workers leave the caller's CPU]); it allows them all again once awake.
fn steer(s: &Shared, i: usize, cpu: usize) {
    let Some(tid) = s.tids.get(i).map(|t| t.load(Ordering::Acquire)) else {
        return;
    };
    if tid <= 0 || cpu == usize::MAX {
        return;
    }
    let Some(set) = CpuSet::of(tid) else { return };
    if let Some(others) = set.without(cpu) {
        others.apply(tid);
        *lock(&s.steered[i]) = Some(set);
    }
}

/// Moves the calling worker off the CPU its pool's caller last ran on when
/// it runs there (NOTE [Workers leave the caller's CPU]): for a moment its
/// CPU set lacks that CPU, then it is whole again. `false` when it never
/// can (its set holds that CPU alone, or cannot be read).
fn leave_caller_cpu(s: &Shared) -> bool {
    let cpu = s.caller_cpu.load(Ordering::Relaxed);
    if cpu == usize::MAX || affinity::current_cpu() != cpu {
        return true;
    }
    let Some(allowed) = CpuSet::of(0) else {
        return false;
    };
    match allowed.without(cpu) {
        Some(others) => {
            others.apply(0);
            allowed.apply(0);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Runs `pieces` pieces through `pool`, each adding its index once.
    fn sum_pieces(pool: &Pool, pieces: usize) -> (usize, Vec<usize>) {
        let next = AtomicUsize::new(0);
        let hits: Vec<AtomicUsize> = (0..pieces).map(|_| AtomicUsize::new(0)).collect();
        let total = AtomicUsize::new(0);
        pool.run(&|| {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= pieces {
                    break;
                }
                hits[i].fetch_add(1, Ordering::Relaxed);
                total.fetch_add(i, Ordering::Relaxed);
            }
        });
        (
            total.into_inner(),
            hits.into_iter().map(AtomicUsize::into_inner).collect(),
        )
    }

    #[test]
    fn every_piece_runs_exactly_once_across_many_jobs() {
        let pool = Pool::new(2).unwrap_or_else(|e| panic!("{e}"));
        for pieces in [0usize, 1, 2, 3, 7, 16] {
            for _ in 0..4 {
                let (total, hits) = sum_pieces(&pool, pieces);
                assert_eq!(total, pieces * pieces.saturating_sub(1) / 2);
                assert!(hits.iter().all(|&h| h == 1), "{hits:?}");
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)] // (sleeps; Miri's clock makes it slow, not wrong)
    fn a_caller_kept_waiting_by_a_stalled_worker_runs_the_next_jobs_alone() {
        let pool = Pool::new(1).unwrap_or_else(|e| panic!("{e}"));
        // A worker that stalls inside the job (as a preempted one would):
        // the caller waits past STALL for it.
        let joined = AtomicBool::new(false);
        pool.run(&|| {
            if Pool::current_worker().is_some() {
                joined.store(true, Ordering::SeqCst);
                // (Long against STALL and against the caller's wait for
                // this worker to join, on a loaded machine too.)
                thread::sleep(STALL * 100);
            } else {
                while !joined.load(Ordering::SeqCst) {
                    std::hint::spin_loop();
                }
            }
        });
        assert!(pool.shared.alone_until.load(Ordering::Relaxed) != 0);
        // The next jobs run every piece on the caller, and still right.
        let on_worker = AtomicBool::new(false);
        pool.run(&|| on_worker.store(Pool::current_worker().is_some(), Ordering::SeqCst));
        // (Unless ALONE had already run out before this job began.)
        let alone = pool.shared.alone_until.load(Ordering::Relaxed) != 0;
        assert!(!(alone && on_worker.load(Ordering::SeqCst)));
        let (total, hits) = sum_pieces(&pool, 16);
        assert_eq!(total, 120);
        assert!(hits.iter().all(|&h| h == 1), "{hits:?}");
        // After ALONE the workers are asked again.
        thread::sleep(ALONE + Duration::from_millis(5));
        let _ = sum_pieces(&pool, 4);
        assert_eq!(pool.shared.alone_until.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn workers_take_part_in_a_job() {
        let pool = Pool::new(1).unwrap_or_else(|e| panic!("{e}"));
        // The caller waits inside the job until a worker has joined it.
        let seen_worker = AtomicBool::new(false);
        pool.run(&|| {
            if Pool::current_worker().is_some() {
                seen_worker.store(true, Ordering::SeqCst);
            } else {
                while !seen_worker.load(Ordering::SeqCst) {
                    thread::yield_now();
                }
            }
        });
        assert!(seen_worker.load(Ordering::SeqCst));
    }

    #[test]
    fn a_job_that_calls_the_pool_again_runs_the_inner_job_alone() {
        let pool = Pool::new(1).unwrap_or_else(|e| panic!("{e}"));
        let inner_total = AtomicUsize::new(0);
        let outer_next = AtomicUsize::new(0);
        pool.run(&|| {
            while outer_next.fetch_add(1, Ordering::Relaxed) < 3 {
                let (t, hits) = sum_pieces(&pool, 5);
                assert!(hits.iter().all(|&h| h == 1));
                inner_total.fetch_add(t, Ordering::Relaxed);
            }
        });
        assert_eq!(inner_total.into_inner(), 3 * 10);
    }

    #[test]
    fn a_pool_without_workers_runs_jobs_on_the_caller() {
        let pool = Pool::new(0).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(pool.workers(), 0);
        let (total, _) = sum_pieces(&pool, 10);
        assert_eq!(total, 45);
    }

    #[test]
    fn a_panicking_piece_reaches_the_caller_and_the_pool_still_works() {
        let pool = Pool::new(1).unwrap_or_else(|e| panic!("{e}"));
        let next = AtomicUsize::new(0);
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.run(&|| {
                if next.fetch_add(1, Ordering::Relaxed) < 4 {
                    panic!("piece failed");
                }
            })
        }));
        assert!(r.is_err());
        let (total, hits) = sum_pieces(&pool, 6);
        assert_eq!(total, 15);
        assert!(hits.iter().all(|&h| h == 1));
    }

    #[test]
    fn a_worker_that_parked_is_woken_for_the_next_job() {
        let pool = Pool::new(1).unwrap_or_else(|e| panic!("{e}"));
        // Wait until the idle worker has parked, then hand it a job that
        // only completes once a worker took part.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !pool.shared.parked[0].load(Ordering::SeqCst) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(1));
        }
        assert!(pool.shared.parked[0].load(Ordering::SeqCst), "never parked");
        let seen_worker = AtomicBool::new(false);
        pool.run(&|| {
            if Pool::current_worker().is_some() {
                seen_worker.store(true, Ordering::SeqCst);
            } else {
                while !seen_worker.load(Ordering::SeqCst) {
                    thread::yield_now();
                }
            }
        });
        assert!(seen_worker.load(Ordering::SeqCst));
    }

    #[test]
    fn two_callers_at_once_each_get_every_piece_once() {
        let pool = Pool::new(1).unwrap_or_else(|e| panic!("{e}"));
        thread::scope(|sc| {
            for _ in 0..2 {
                sc.spawn(|| {
                    for _ in 0..3 {
                        let (total, hits) = sum_pieces(&pool, 9);
                        assert_eq!(total, 36);
                        assert!(hits.iter().all(|&h| h == 1));
                    }
                });
            }
        });
    }
}
