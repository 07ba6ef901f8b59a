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
// `threads - 1` workers claim one at a time from a shared counter (the
// caller claims too, and returns when every piece is done; NOTE [Spinning
// pool] in `pool`). So the caller never sits idle waiting for a hand-off,
// and after the op only `threads - 1` workers spin looking for more work:
// with a pool of `threads` workers, the spinning workers took the CPU from
// the next small op running inline on the caller (on 2 vCPUs, the MLP
// step's small ops ran ~1.7x slower with 2 threads than with 1). Claiming
// pieces, rather than dealing one equal run to each thread, keeps a
// thread that the machine slows down from holding up the op.

/// Pieces per thread for elementwise and row work: enough for claiming to
/// even out a slow thread, few enough that each is long.
const PIECES_PER_THREAD: usize = 4;

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
    /// decided): each index is claimed by one thread.
    pub(super) fn for_each_index(&self, n: usize, f: impl Fn(usize) + Sync) {
        let next = AtomicUsize::new(0);
        self.run(n, || {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                f(i);
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
pub(super) fn gather<T: Copy>(src: &[T], layout: &Layout, start: usize, out: &mut [T]) {
    let shape = layout.shape();
    let strides = layout.strides();
    let rank = shape.len();
    if out.is_empty() {
        return;
    }
    if rank == 0 {
        out[0] = src[layout.offset()];
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
}
