//! Tiled traversal: a destination written in TILE x TILE tiles, for
//! operands whose last two dims are transposed (the inner dim has the
//! larger stride). Walking such an operand in the destination's order
//! touches a new cache line (and, for long rows, a new page) per element;
//! a tile touches each line once, so reads and writes both stay within a
//! few cache lines per row. A plain transpose of 4-byte elements moves 8x8
//! blocks through AVX registers ([`transpose_8x8`]) where the CPU has AVX.

use super::engine::{Par, outer_offset};
use kael_core::layout::Layout;

/// Side of the square tiles.
pub(super) const TILE: usize = 32;

/// One tile of a row-major destination: rows `row..row + h` of the
/// flattened leading dims (`row` counts across matrices) and columns
/// `col..col + w` of the last dim. A tile never crosses two matrices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Tile {
    pub(super) row: usize,
    pub(super) col: usize,
    pub(super) h: usize,
    pub(super) w: usize,
}

/// Whether `l` reads best tile by tile: rank >= 2 and its last two dims
/// are transposed (the last dim's stride is not 1 and is larger than the
/// stride of the dim before it).
pub(super) fn wants_tiles(l: &Layout) -> bool {
    let (r, st) = (l.rank(), l.strides());
    r >= 2 && st[r - 1] != 1 && st[r - 2] < st[r - 1]
}

/// Calls `f(scratch, tile, dt)` for every tile of `d`, a row-major
/// destination made of `rows x cols` matrices (`d.len()` a multiple of
/// `rows * cols`). `dt` starts at the tile's first element, with row
/// stride `cols`. Chunks of whole rows go to the pool; each chunk gets
/// its own `scratch()`.
pub(super) fn for_tiles<U: Send, S>(
    par: &Par<'_>,
    rows: usize,
    cols: usize,
    d: &mut [U],
    scratch: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, Tile, &mut [U]) + Sync,
) {
    if rows == 0 || cols == 0 {
        return;
    }
    par.for_rows(d, cols, |row0, chunk| {
        let mut s = scratch();
        let nrows = chunk.len() / cols;
        let mut i = 0;
        while i < nrows {
            let row = row0 + i;
            let h = TILE.min(rows - row % rows).min(nrows - i);
            for col in (0..cols).step_by(TILE) {
                let w = TILE.min(cols - col);
                f(
                    &mut s,
                    Tile { row, col, h, w },
                    &mut chunk[i * cols + col..],
                );
            }
            i += h;
        }
    });
}

/// Copies the elements of `tile` read through `l` (over `src`, whose shape
/// is the destination's) into `dt` with row stride `ds`: `dt[ii * ds + jj]`
/// is element `(tile.row + ii, tile.col + jj)`.
pub(super) fn gather_tile<T: bytemuck::Pod>(
    src: &[T],
    l: &Layout,
    tile: Tile,
    dt: &mut [T],
    ds: usize,
) {
    let r = l.rank();
    let (shape, st) = (l.shape(), l.strides());
    let (s0, s1) = (st[r - 2], st[r - 1]);
    let rows = shape[r - 2];
    let (b, ri) = (tile.row / rows, tile.row % rows);
    let p = l.offset() + outer_offset(b, &shape[..r - 2], &st[..r - 2]) + ri * s0 + tile.col * s1;
    let blocks = s0 == 1 && core::mem::size_of::<T>() == 4 && has_avx();
    let (bh, bw) = if blocks {
        (tile.h / 8 * 8, tile.w / 8 * 8)
    } else {
        (0, 0)
    };
    if blocks {
        // SAFETY: `blocks` is only true where has_avx() found AVX.
        unsafe { tile_blocks(src, p, s1, dt, ds, bh, bw) };
    }
    // What the blocks left: the rows below them, then the columns right
    // of them.
    for ii in 0..tile.h {
        let start = if ii < bh { bw } else { 0 };
        let drow = &mut dt[ii * ds + start..ii * ds + tile.w];
        let q = p + ii * s0 + start * s1;
        for (jj, x) in drow.iter_mut().enumerate() {
            *x = src[q + jj * s1];
        }
    }
}

/// The 8x8 register blocks of one tile: rows `0..bh` and columns `0..bw`
/// of `dt` (row stride `cols`), transposed from `src` at `p` (whose rows
/// are `dt`'s columns, stride `s1`). Does nothing for elements that are
/// not 4 bytes.
///
/// # Safety
/// The CPU must have AVX ([`has_avx`]).
unsafe fn tile_blocks<T: bytemuck::Pod>(
    src: &[T],
    p: usize,
    s1: usize,
    dt: &mut [T],
    cols: usize,
    bh: usize,
    bw: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if let (Ok(src), Ok(dt)) = (
        bytemuck::try_cast_slice::<T, u32>(src),
        bytemuck::try_cast_slice_mut::<T, u32>(dt),
    ) {
        for ii in (0..bh).step_by(8) {
            for jj in (0..bw).step_by(8) {
                let (from, to) = (&src[p + ii + jj * s1..], &mut dt[ii * cols + jj..]);
                // SAFETY: the caller guarantees AVX.
                unsafe { transpose_8x8(from, s1, to, cols) };
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (src, p, s1, dt, cols, bh, bw);
}

/// Whether the CPU has AVX (for [`transpose_8x8`]).
fn has_avx() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `d[r * ds + c] = s[c * ss + r]` for `r, c < 8`: an 8x8 block of 4-byte
/// elements transposed through eight AVX registers (unpack, shuffle, then
/// swap 128-bit halves), as bits: a NaN's payload is kept. Does nothing
/// when either slice is too short for the block.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
fn transpose_8x8(s: &[u32], ss: usize, d: &mut [u32], ds: usize) {
    use core::arch::x86_64::{
        __m256, _mm256_loadu_ps, _mm256_permute2f128_ps, _mm256_shuffle_ps, _mm256_storeu_ps,
        _mm256_unpackhi_ps, _mm256_unpacklo_ps,
    };
    if s.len() < 7 * ss + 8 || d.len() < 7 * ds + 8 {
        return;
    }
    let sp = s.as_ptr().cast::<f32>();
    // SAFETY: row k reads s[k * ss .. k * ss + 8], inside `s` for k < 8
    // (length checked above); unaligned loads accept any address.
    let r: [__m256; 8] = core::array::from_fn(|k| unsafe { _mm256_loadu_ps(sp.add(k * ss)) });
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    // 0x44 picks elements (0, 1) of each pair, 0xEE elements (2, 3).
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    // 0x20: low halves of both operands; 0x31: high halves.
    let out = [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ];
    let dp = d.as_mut_ptr().cast::<f32>();
    for (k, v) in out.into_iter().enumerate() {
        // SAFETY: row k writes d[k * ds .. k * ds + 8], inside `d` for
        // k < 8 (length checked above); unaligned stores accept any address.
        unsafe { _mm256_storeu_ps(dp.add(k * ds), v) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `SKIPPED <test>: <why>` on the process's stderr, past the test
    /// harness's capture, so a check that could not run shows as skipped.
    fn skip(why: &str) {
        use std::io::Write;
        let name = std::thread::current().name().unwrap_or("?").to_string();
        // one write call, so the harness's output does not tear the line
        let _ = std::io::stderr().write_all(format!("\nSKIPPED {name}: {why}\n").as_bytes());
    }

    /// `transpose_8x8` on its own (no pool, so Miri can run it when AVX is
    /// enabled for it): a block inside larger strided rows lands
    /// transposed, and nothing outside the block is written.
    #[test]
    fn an_8x8_block_lands_transposed_and_nothing_else_is_written() {
        if !has_avx() {
            skip("no AVX on this CPU (or under Miri without -C target-feature=+avx)");
            return;
        }
        let (ss, ds) = (11, 13);
        let src: Vec<u32> = (0..8 * ss as u32).map(|i| 0x7FC0_0000 | i).collect();
        let mut dst = vec![u32::MAX; 8 * ds];
        #[cfg(target_arch = "x86_64")]
        // SAFETY: has_avx() found AVX just above.
        unsafe {
            transpose_8x8(&src[2..], ss, &mut dst[1..], ds)
        };
        for r in 0..8 {
            for c in 0..ds {
                let want = if (1..9).contains(&c) {
                    src[2 + (c - 1) * ss + r]
                } else {
                    u32::MAX
                };
                assert_eq!(dst[r * ds + c], want, "row {r}, column {c}");
            }
        }
    }

    /// `gather_tile` on its own (no pool, so Miri runs it, AVX blocks
    /// included when AVX is enabled): a 19x21 tile (two 8x8 blocks down,
    /// two across, then the edges) of a batched transposed layout lands in
    /// a wider buffer at the index mapping, and nothing else is written.
    #[test]
    fn a_tile_of_a_batched_transposed_layout_lands_at_the_index_mapping() {
        let (nb, rows, cols) = (2, 30, 40);
        // Element (b, i, j) of the view is store[b][j][i].
        let store: Vec<u32> = (0..(nb * rows * cols) as u32).collect();
        let l = Layout::new(&[nb, rows, cols], &[rows * cols, 1, rows], 0).unwrap();
        assert!(wants_tiles(&l));
        let tile = Tile {
            row: rows + 5, // batch 1, row 5
            col: 3,
            h: 19,
            w: 21,
        };
        let ds = 25;
        let mut dt = vec![u32::MAX; 19 * ds];
        gather_tile(&store, &l, tile, &mut dt, ds);
        for ii in 0..19 {
            for jj in 0..ds {
                let want = if jj < 21 {
                    store[rows * cols + (3 + jj) * rows + 5 + ii]
                } else {
                    u32::MAX
                };
                assert_eq!(dt[ii * ds + jj], want, "row {ii}, column {jj}");
            }
        }
    }

    #[test]
    fn an_8x8_block_with_short_slices_writes_nothing() {
        if !has_avx() {
            skip("no AVX on this CPU");
            return;
        }
        let src = vec![1u32; 7 * 8 + 7];
        let mut dst = vec![0u32; 64];
        #[cfg(target_arch = "x86_64")]
        // SAFETY: has_avx() found AVX just above.
        unsafe {
            transpose_8x8(&src, 8, &mut dst, 8)
        };
        assert!(dst.iter().all(|&x| x == 0));
    }
}
