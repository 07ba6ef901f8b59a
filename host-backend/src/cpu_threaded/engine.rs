//! The parallel driver shared by every kernel family: splits a contiguous
//! destination into disjoint chunks (inline below the parallel threshold),
//! and presents each source operand to the inner loops as a contiguous
//! slice, a broadcast scalar, the destination itself, or a strided layout
//! gathered block by block into a small buffer.

use super::pool::Pool;
use kael_core::backend::{Dst, Src};
use kael_core::cpu::elementwise::aliases;
use kael_core::layout::Layout;
use kael_core::storage::ReadGuard;
use kael_core::{Error, Result};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Elements per inner block: strided operands are gathered this many at a
/// time into a buffer that stays in L1.
pub(super) const BLOCK: usize = 2048;

/// The pool, its size and the parallel threshold of one backend.
pub(super) struct Par<'a> {
    pub(super) pool: &'a Pool,
    pub(super) threads: usize,
    pub(super) threshold: usize,
    /// Counts hand-offs to the pool (see `ThreadedCpuBackend::parallel_dispatches`).
    pub(super) dispatches: &'a AtomicUsize,
}

// NOTE [Caller participates]
// A parallel op is cut into pieces that the calling thread and the pool's
// `threads - 1` workers claim one at a time (the
// caller claims too, and returns when every piece is done; NOTE [Spinning
// pool] in `pool`). So the caller never sits idle waiting for a hand-off,
// and after the op only `threads - 1` workers spin looking for more work:
// with a pool of `threads` workers, the spinning workers took the CPU from
// the next small op running inline on the caller (on 2 vCPUs, the MLP
// step's small ops ran ~1.7x slower with 2 threads than with 1). Claiming
// pieces, rather than handing each thread a fixed share, keeps a thread
// that the machine slows down from holding up the op (each thread claims
// its own run's pieces first: NOTE [Piece affinity]).

// NOTE [Piece affinity]
// The pieces of a parallel op are dealt in contiguous runs, run `j` to
// thread `j`, and each thread claims its own run's pieces first, in order,
// then helps finish the others' runs. Claiming from one shared counter
// (before) gave a thread different pieces each op, so a mid-size op whose
// operands stay in the caches between ops (a 64K-element add reads and
// writes 768 KiB, and the caching allocator hands its output the same
// block each time) found much of its share in the other core's cache: on
// issue 17's 2-vCPU machine a pool job mapping 64K f32 took 9.8 µs on one
// thread, 8.0 µs on two threads claiming 8 pieces from one counter and
// 5.6 µs on two threads with one fixed half each. With runs each core
// finds its share where it left it, as with OpenMP's static schedule,
// and a thread the machine slows down (or a worker still asleep) still
// has its run finished by the others (NOTE [Caller participates]). Which
// thread runs a piece never changes what the piece computes.

/// One run's claim counter, alone in its cache line(s), so that the
/// threads claiming from their own runs do not share a line.
#[repr(align(128))]
struct RunCounter(AtomicUsize);

/// Pieces per thread for elementwise and row work: enough for claiming to
/// even out a slow thread, few enough that each is long.
const PIECES_PER_THREAD: usize = 4;

// NOTE [Bandwidth-bound ops go parallel later]
// An add or a copy does one instruction per element, so what a second
// thread costs is not the hand-off but the operands: written by the
// caller, they sit in its core's cache, and the other core pulls its half
// across. Measured on the 2-vCPU machine (issue 17), a 32K-element f32 add
// took 4.1 us inline and 6.0 us split in two; 64K was a wash (8.0 / 7.5);
// 128K split won (19.2 / 11.6). On the 2-vCPU AMD EPYC of 2026-12-06 the
// split won from 16K (16K: 2.2 / 2.0; 32K: 3.9 / 2.8; 64K: 9.4 / 5.0;
// 128K: 18.5 / 9.2), once the worker no longer shared the caller's CPU
// (NOTE [Workers leave the caller's CPU] in `pool`). So the elementwise
// ops of one arithmetic instruction (add, sub, mul, div, maximum, minimum,
// copies and fills) go to the pool from BANDWIDTH_BOUND times the
// device's threshold, 64K elements by default (where candle 0.11 splits
// too; it was 96K); ops with real work per element (the vector math,
// libm calls) keep the threshold.

/// How many times the device's threshold a bandwidth-bound op needs
/// before it goes to the pool (NOTE [Bandwidth-bound ops go parallel later]).
const BANDWIDTH_BOUND: usize = 2;

impl<'a> Par<'a> {
    /// This `Par` with the threshold of bandwidth-bound ops
    /// (NOTE [Bandwidth-bound ops go parallel later]).
    pub(super) fn bandwidth_bound(&self) -> Par<'a> {
        Par {
            pool: self.pool,
            threads: self.threads,
            threshold: self.threshold.saturating_mul(BANDWIDTH_BOUND),
            dispatches: self.dispatches,
        }
    }
}

impl Par<'_> {
    /// Whether `n` elements of work go to the pool (else inline).
    pub(super) fn parallel(&self, n: usize) -> bool {
        self.threads > 1 && n >= self.threshold && n > 1
    }

    /// Runs `claim` on the caller and on up to `threads - 1` workers (no
    /// more than there are `pieces`); each call claims pieces until none
    /// are left (NOTE [Caller participates]).
    fn run(&self, pieces: usize, claim: impl Fn() + Sync) {
        self.dispatches.fetch_add(1, Ordering::Relaxed);
        if pieces <= 1 {
            claim();
            return;
        }
        self.pool.run(&claim);
    }

    /// Calls `f(i)` for every `i` in `0..n`, in parallel (the caller
    /// decided): each index is claimed by one thread, its own run's first
    /// (NOTE [Piece affinity]).
    pub(super) fn for_each_index(&self, n: usize, f: impl Fn(usize) + Sync) {
        let runs = self.threads.clamp(1, n.max(1));
        // Run `j` is `start(j)..start(j + 1)`; its counter starts at its start.
        let start = |j: usize| j * n / runs;
        let next: Vec<RunCounter> = (0..runs)
            .map(|j| RunCounter(AtomicUsize::new(start(j))))
            .collect();
        self.run(n, || {
            // The caller is thread 0, pool worker `w` is thread `w + 1`.
            let me = Pool::current_worker().map_or(0, |w| w + 1) % runs;
            for k in 0..runs {
                let j = (me + k) % runs;
                let end = start(j + 1);
                loop {
                    let i = next[j].0.fetch_add(1, Ordering::Relaxed);
                    if i >= end {
                        break;
                    }
                    f(i);
                }
            }
        });
    }

    /// Calls `f(start, chunk)` on the disjoint `chunk`-element chunks of
    /// `d`, `start` being the chunk's index in `d`, in parallel.
    fn split<U: Send>(&self, d: &mut [U], chunk: usize, f: impl Fn(usize, &mut [U]) + Sync) {
        let chunk = chunk.max(1);
        // Each slot is taken exactly once, by the thread that claimed its
        // index, so its lock is never contended.
        let slots: Vec<Mutex<Option<&mut [U]>>> =
            d.chunks_mut(chunk).map(|c| Mutex::new(Some(c))).collect();
        self.for_each_index(slots.len(), |i| {
            let taken = match slots[i].lock() {
                Ok(mut slot) => slot.take(),
                Err(poisoned) => poisoned.into_inner().take(),
            };
            if let Some(c) = taken {
                f(i * chunk, c);
            }
        });
    }

    /// Calls `f(start, chunk)` on disjoint chunks covering `d`, where `start`
    /// is the chunk's index in `d`; one inline call below the threshold.
    pub(super) fn for_chunks<U: Send>(&self, d: &mut [U], f: impl Fn(usize, &mut [U]) + Sync) {
        let n = d.len();
        if !self.parallel(n) {
            f(0, d);
            return;
        }
        self.split(d, n.div_ceil(self.threads * PIECES_PER_THREAD), f);
    }

    /// Like [`Par::for_chunks`] over rows of length `row` (`d.len()` is a
    /// multiple of it): chunks hold whole rows; `f` gets the first row index.
    pub(super) fn for_rows<U: Send>(
        &self,
        d: &mut [U],
        row: usize,
        f: impl Fn(usize, &mut [U]) + Sync,
    ) {
        let n = d.len();
        if row == 0 || !self.parallel(n) {
            f(0, d);
            return;
        }
        let per = (n / row).div_ceil(self.threads * PIECES_PER_THREAD).max(1);
        self.split(d, per * row, |start, c| f(start / row, c));
    }

    /// Calls `f(i, &mut items[i])` for every item, in parallel (the caller
    /// decided).
    pub(super) fn each_mut<U: Send>(&self, items: &mut [U], f: impl Fn(usize, &mut U) + Sync) {
        self.split(items, 1, |i, one| {
            if let [item] = one {
                f(i, item);
            }
        });
    }
}

/// Views storage bytes as `T`s (a trailing partial element is ignored).
pub(super) fn cast_slice<T: bytemuck::Pod>(bytes: &[u8]) -> Result<&[T]> {
    let n = bytes.len() / size_of::<T>();
    bytemuck::try_cast_slice(&bytes[..n * size_of::<T>()]).map_err(|_| misaligned())
}

/// Mutable [`cast_slice`].
pub(super) fn cast_slice_mut<T: bytemuck::Pod>(bytes: &mut [u8]) -> Result<&mut [T]> {
    let n = bytes.len() / size_of::<T>();
    bytemuck::try_cast_slice_mut(&mut bytes[..n * size_of::<T>()]).map_err(|_| misaligned())
}

fn misaligned() -> Error {
    Error::InvalidArgument {
        op: "threaded_cpu",
        reason: "storage bytes are misaligned for this dtype; deep_clone() the tensor",
    }
}

/// How a source reaches the inner loops.
#[derive(Clone, Copy)]
pub(super) enum Opnd<'a, T> {
    /// Contiguous, already offset: element `i` is `s[i]`.
    Contig(&'a [T]),
    /// Every element is this value (all strides 0, or one element).
    Scalar(T),
    /// Any other layout over the whole storage slice.
    Strided(&'a [T], &'a Layout),
    /// Exactly the destination (NOTE [Aliasing contract]).
    Dst,
}

/// One block of an operand for the inner loops.
#[derive(Clone, Copy)]
pub(super) enum Arg<'a, T> {
    /// Slice of the block's length.
    S(&'a [T]),
    /// Broadcast value.
    K(T),
    /// Read the destination block itself.
    D,
}

impl<'a, T: Copy> Opnd<'a, T> {
    /// Whether [`Opnd::block`] gathers this operand into its buffer (the
    /// other kinds never touch it, so they may pass an empty one).
    pub(super) fn is_strided(&self) -> bool {
        matches!(self, Opnd::Strided(..))
    }

    /// Classifies `s` (the whole storage as `T`s) read through `layout`.
    pub(super) fn of(s: &'a [T], layout: &'a Layout) -> Self {
        let n = layout.numel();
        let off = layout.offset();
        if n == 0 {
            Opnd::Contig(&[])
        } else if n == 1 || layout.strides().iter().all(|&st| st == 0) {
            Opnd::Scalar(s[off])
        } else if layout.is_contiguous() {
            Opnd::Contig(&s[off..off + n])
        } else {
            Opnd::Strided(s, layout)
        }
    }

    /// The block `start..start + len`, gathering into `buf` when strided.
    pub(super) fn block<'b>(&'b self, start: usize, len: usize, buf: &'b mut [T]) -> Arg<'b, T> {
        match *self {
            Opnd::Contig(s) => Arg::S(&s[start..start + len]),
            Opnd::Scalar(v) => Arg::K(v),
            Opnd::Dst => Arg::D,
            Opnd::Strided(s, l) => {
                gather(s, l, start, &mut buf[..len]);
                Arg::S(&buf[..len])
            }
        }
    }
}

/// Element offset of outer index `b` (row-major over `shape`, the dims
/// before a matrix) under `strides`: where batch `b` of a layout starts.
pub(super) fn outer_offset(b: usize, shape: &[usize], strides: &[usize]) -> usize {
    let mut rest = b;
    let mut off = 0;
    for (&n, &s) in shape.iter().zip(strides).rev() {
        off += (rest % n) * s;
        rest /= n;
    }
    off
}

/// Copies the elements with row-major indices `start..start + out.len()`
/// of `layout` over `src` into `out`.
///
/// Dims that walk memory as one (size-1 dims, and a dim whose stride is
/// the next one's stride times its size: a per-channel `[1, C, 1, 1]`
/// broadcast's trailing `H, W`) are merged first, so the runs are as long
/// as the layout allows (a 5-wide image's broadcast is filled 125 at a
/// time, not 5).
pub(super) fn gather<T: Copy>(src: &[T], layout: &Layout, start: usize, out: &mut [T]) {
    if out.is_empty() {
        return;
    }
    let mut merged = [(0usize, 0usize); kael_core::MAX_RANK];
    let mut rank: usize = 0;
    for (&n, &st) in layout.shape().iter().zip(layout.strides().iter()) {
        if n == 1 {
            continue;
        }
        match rank.checked_sub(1).map(|r| &mut merged[r]) {
            Some(prev) if st.checked_mul(n) == Some(prev.1) => *prev = (prev.0 * n, st),
            _ => {
                merged[rank] = (n, st);
                rank += 1;
            }
        }
    }
    let shape: [usize; kael_core::MAX_RANK] = core::array::from_fn(|d| merged[d].0);
    let strides: [usize; kael_core::MAX_RANK] = core::array::from_fn(|d| merged[d].1);
    if rank == 0 {
        out.fill(src[layout.offset()]);
        return;
    }
    let last = rank - 1;
    let mut idx = [0usize; kael_core::MAX_RANK];
    let mut rest = start;
    for d in (0..rank).rev() {
        idx[d] = rest % shape[d];
        rest /= shape[d];
    }
    let mut base = layout.offset();
    for d in 0..last {
        base += idx[d] * strides[d];
    }
    let (nl, sl) = (shape[last], strides[last]);
    let mut j = idx[last];
    let mut w = 0;
    while w < out.len() {
        let run = (nl - j).min(out.len() - w);
        let p = base + j * sl;
        let o = &mut out[w..w + run];
        match sl {
            1 => o.copy_from_slice(&src[p..p + run]),
            0 => o.fill(src[p]),
            _ => {
                for (t, x) in o.iter_mut().enumerate() {
                    *x = src[p + t * sl];
                }
            }
        }
        w += run;
        j = 0;
        for d in (0..last).rev() {
            idx[d] += 1;
            base += strides[d];
            if idx[d] < shape[d] {
                break;
            }
            base -= strides[d] * shape[d];
            idx[d] = 0;
        }
    }
}

/// The read guard of a source (`None` when it is exactly the destination),
/// or `Err(None)` when it shares the destination's storage without being
/// exactly it: the caller delegates to the reference kernel then.
pub(super) fn read_src<'a>(
    src: &Src<'a>,
    dst: &Dst<'a>,
    op: &'static str,
) -> core::result::Result<Option<ReadGuard<'a>>, Option<Error>> {
    if aliases(src, dst) {
        Ok(None)
    } else if core::ptr::eq(src.storage, dst.storage) {
        Err(None)
    } else {
        src.storage.read(op).map(Some).map_err(Some)
    }
}

/// The operand for a source whose guard came from [`read_src`].
pub(super) fn opnd<'a, T: bytemuck::Pod>(
    g: &'a Option<ReadGuard<'_>>,
    layout: &'a Layout,
) -> Result<Opnd<'a, T>> {
    Ok(match g {
        Some(g) => Opnd::of(cast_slice::<T>(g.bytes())?, layout),
        None => Opnd::Dst,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `for_each_index(n)` on `threads` threads over a pool of
    /// `workers`, returning how often each index ran.
    fn index_hits(workers: usize, threads: usize, n: usize) -> Vec<usize> {
        let pool = Pool::new(workers).unwrap_or_else(|e| panic!("{e}"));
        let dispatches = AtomicUsize::new(0);
        let par = Par {
            pool: &pool,
            threads,
            threshold: 1,
            dispatches: &dispatches,
        };
        let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
        par.for_each_index(n, |i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
        });
        hits.into_iter().map(AtomicUsize::into_inner).collect()
    }

    #[test]
    fn every_index_runs_once_whatever_the_runs() {
        for threads in [1, 2, 3] {
            for n in [0, 1, 2, 3, 7, 8, 9] {
                let hits = index_hits(threads - 1, threads, n);
                assert!(
                    hits.iter().all(|&h| h == 1),
                    "{threads} threads, n = {n}: {hits:?}"
                );
            }
        }
    }

    #[test]
    fn the_caller_finishes_the_runs_of_threads_that_never_came() {
        // Three runs for three threads, but no worker: the caller claims
        // its own run, then the other two.
        assert_eq!(index_hits(0, 3, 10), vec![1; 10]);
    }

    #[test]
    fn gather_walks_a_transposed_layout_from_any_start() {
        // 2x3 row-major values 0..6 read transposed: [[0,3],[1,4],[2,5]]
        let src: Vec<u32> = (0..6).collect();
        let l = Layout::new(&[3, 2], &[1, 3], 0).unwrap();
        let mut out = [0u32; 4];
        gather(&src, &l, 1, &mut out);
        assert_eq!(out, [3, 1, 4, 2]);
    }

    #[test]
    fn gather_repeats_a_broadcast_row() {
        let src = [7u32, 8, 9];
        let l = Layout::new(&[2, 3], &[0, 1], 0).unwrap();
        let mut out = [0u32; 6];
        gather(&src, &l, 0, &mut out);
        assert_eq!(out, [7, 8, 9, 7, 8, 9]);
    }

    #[test]
    fn gather_walks_merged_dims_as_the_index_mapping_from_any_start() {
        // A per-channel broadcast ([1, 3, 1, 1] as [2, 3, 2, 5]: the
        // trailing dims merge into one stride-0 run), and a sliced layout
        // whose last two dims merge and whose size-1 dim drops.
        let src: Vec<u32> = (0..200).collect();
        let cases = [
            Layout::new(&[2, 3, 2, 5], &[0, 1, 0, 0], 4).unwrap(),
            Layout::new(&[3, 1, 4, 5], &[40, 7, 5, 1], 2).unwrap(),
        ];
        for l in &cases {
            let (shape, strides) = (l.shape(), l.strides());
            let n = l.numel();
            let want: Vec<u32> = (0..n)
                .map(|i| {
                    let mut rest = i;
                    let mut off = l.offset();
                    for d in (0..shape.len()).rev() {
                        off += (rest % shape[d]) * strides[d];
                        rest /= shape[d];
                    }
                    src[off]
                })
                .collect();
            for start in 0..n {
                for len in [1, 3, 7, n - start] {
                    let len = len.min(n - start);
                    let mut out = vec![0u32; len];
                    gather(&src, l, start, &mut out);
                    assert_eq!(out, want[start..start + len], "{shape:?} from {start}");
                }
            }
        }
    }
}
