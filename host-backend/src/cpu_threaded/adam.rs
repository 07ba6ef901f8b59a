//! The `adam` family (NOTE [One-pass Adam] in `kael_core::kernels::adam`)
//! on the threaded backend: the update in place, cut into chunks of the
//! moments across the pool, each chunk the reference kernel's slice loop
//! ([`Update::slices`], at the CPU's vector width), so the values are the
//! reference's bit for bit.
//! The gradient and the moments must be contiguous (the optimizer's own
//! tensors). A parameter whose last two dims are transposed (GPT-2's
//! Conv1D weights) is copied into a row-major image by tiles and back
//! ([`transposed`]); another strided parameter is read and written a
//! block at a time through its offsets.
//! Anything else runs the shared declared path.

use super::engine::{BLOCK, Par, cast_slice, cast_slice_mut};
use super::tiles;
use kael_core::backend::declared::Call;
use kael_core::cpu as reference;
use kael_core::dtype::DType;
use kael_core::kernels::adam::{Hyper, Update};
use kael_core::layout::Layout;
use kael_core::{Error, Result};
use std::cell::RefCell;

/// The update on the pool, or `None` where this path does not apply.
pub(super) fn adam(par: &Par<'_>, call: Call<'_>) -> Option<Result<()>> {
    let [g] = call.srcs else {
        return None;
    };
    let [p, mv] = call.dsts else {
        return None;
    };
    let f32s = call
        .srcs
        .iter()
        .chain(call.dsts)
        .all(|o| o.dtype == DType::F32);
    let dense = [g, mv].iter().all(|o| o.layout.is_contiguous());
    if !f32s || !dense || p.layout.has_internal_overlap() {
        return None;
    }
    Some((|| {
        reference::declared_contract(call)?;
        let h = Hyper::of(call.params).ok_or_else(|| bad("malformed parameters"))?;
        let u = Update::of(&h);
        let op = call.family.name();
        let n = g.layout.numel();
        let span = |l: &Layout| l.offset()..l.offset() + n;
        let gg = g.storage.read(op)?;
        let gs = slice(cast_slice::<f32>(gg.bytes())?, span(g.layout))?;
        let mut gp = p.storage.write(op)?;
        let mut gmv = mv.storage.write(op)?;
        let ps = cast_slice_mut::<f32>(gp.bytes_mut())?;
        if p.layout.reach() > ps.len() {
            return Err(bad("the parameter runs past its storage"));
        }
        let off = mv.layout.offset();
        let (ms, vs) = cast_slice_mut::<f32>(gmv.bytes_mut())?
            .get_mut(off..off + 2 * n)
            .ok_or_else(|| bad("the moments run past their storage"))?
            .split_at_mut(n);
        let p_flat = p.layout.is_contiguous().then(|| p.layout.offset());
        let v_ptr = Shared(vs.as_mut_ptr());
        if p_flat.is_none()
            && let Some(t) = swapped(p.layout)
        {
            transposed(par, &u, p.layout, &t, ps, gs, ms, v_ptr);
            return Ok(());
        }
        let p_ptr = Shared(ps.as_mut_ptr());
        // Chunks of `m`, with the same ranges of `v`, `g` and `p`.
        par.bandwidth_bound().for_chunks(ms, |start, mc| {
            let len = mc.len();
            // SAFETY: `v` is an `n`-element slice borrowed for the whole
            // call; `for_chunks` hands each call a disjoint range
            // `start..start + len` of `m`, and this is the same range of
            // `v`, so no element is written by two threads.
            let vc = unsafe { core::slice::from_raw_parts_mut(v_ptr.get().add(start), len) };
            let gc = &gs[start..start + len];
            match p_flat {
                Some(at) => {
                    // SAFETY: the parameter's elements `at..at + n` lie in
                    // its storage (its reach was checked) and this chunk
                    // touches `at + start..at + start + len` only: disjoint
                    // from every other chunk's.
                    let pc = unsafe {
                        core::slice::from_raw_parts_mut(p_ptr.get().add(at + start), len)
                    };
                    slices(&u, gc, pc, mc, vc);
                }
                None => {
                    // A strided parameter: BLOCK elements at a time, read
                    // and written back through their offsets.
                    let mut buf = [0.0f32; BLOCK];
                    let mut offs = [0usize; BLOCK];
                    let mut at = 0;
                    while at < len {
                        let k = BLOCK.min(len - at);
                        offsets(p.layout, start + at, &mut offs[..k]);
                        for (b, &o) in buf.iter_mut().zip(&offs[..k]) {
                            // SAFETY: `o` is the offset of one of this
                            // chunk's positions: below the parameter's
                            // reach (checked), and, the layout not
                            // overlapping itself (checked), an element no
                            // other chunk reads or writes.
                            *b = unsafe { p_ptr.get().add(o).read() };
                        }
                        let r = at..at + k;
                        slices(
                            &u,
                            &gc[r.clone()],
                            &mut buf[..k],
                            &mut mc[r.clone()],
                            &mut vc[r],
                        );
                        for (&b, &o) in buf.iter().zip(&offs[..k]) {
                            // SAFETY: as for the read above.
                            unsafe { p_ptr.get().add(o).write(b) };
                        }
                        at += k;
                    }
                }
            }
        });
        Ok(())
    })())
}

thread_local! {
    /// This thread's image of a transposed parameter, kept between calls
    /// (a fresh one per call paid its page faults every step).
    static IMAGE: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `l` with its last two dims swapped, where that is contiguous (`l` is
/// a transpose of a row-major tensor: GPT-2's Conv1D weights); else
/// `None`.
fn swapped(l: &Layout) -> Option<Layout> {
    let r = l.rank();
    if r < 2 || !tiles::wants_tiles(l) {
        return None;
    }
    let (mut shape, mut st) = (l.shape().clone(), l.strides().clone());
    shape.swap(r - 2, r - 1);
    st.swap(r - 2, r - 1);
    let t = Layout::new(&shape, &st, l.offset()).ok()?;
    t.is_contiguous().then_some(t)
}

/// The update of a transposed parameter `p` (layout `l`, its swap `t`
/// contiguous): `p` copied into a row-major image by tiles (NOTE in
/// `tiles`: each cache line touched once, 8x8 register transposes), the
/// contiguous update run on the image with `g`, `m` (`ms`) and `v` (at
/// `v_ptr`, `ms.len()` elements), and the image copied back by tiles.
/// Element by element, reading and writing `p` across its rows, a
/// transposed 85M-parameter AdamW step took 0.93 s against 64 ms
/// contiguous (every access a cache miss the prefetchers did not see
/// coming).
#[allow(clippy::too_many_arguments)]
fn transposed(
    par: &Par<'_>,
    u: &Update,
    l: &Layout,
    t: &Layout,
    ps: &mut [f32],
    gs: &[f32],
    ms: &mut [f32],
    v_ptr: Shared,
) {
    let r = l.rank();
    let n = ms.len();
    let (rows, cols) = (l.shape()[r - 2], l.shape()[r - 1]);
    if rows == 0 || cols == 0 {
        return;
    }
    IMAGE.with(|cell| {
        let mut image = cell.borrow_mut();
        if image.len() < n {
            image.resize(n, 0.0);
        }
        let img = &mut image[..n];
        tiles::for_tiles(
            par,
            rows,
            cols,
            img,
            || (),
            |_, tile, dt| {
                tiles::gather_tile(ps, l, tile, dt, cols);
            },
        );
        let p_ptr = Shared(img.as_mut_ptr());
        par.bandwidth_bound().for_chunks(ms, |start, mc| {
            let len = mc.len();
            // SAFETY: `v` and the image are `n`-element slices borrowed for
            // the whole call; `for_chunks` hands each call a disjoint
            // range `start..start + len` of `m`, and this is the same
            // range of them, so no element is written by two threads.
            let (vc, pc) = unsafe {
                (
                    core::slice::from_raw_parts_mut(v_ptr.get().add(start), len),
                    core::slice::from_raw_parts_mut(p_ptr.get().add(start), len),
                )
            };
            slices(u, &gs[start..start + len], pc, mc, vc);
        });
        // Back: `p`'s memory is row-major in `t`'s shape (its dims
        // swapped); the image read through the same swap.
        let mut ist = kael_core::shape::contiguous_strides(l.shape());
        ist.swap(r - 2, r - 1);
        let Ok(il) = Layout::new(t.shape(), &ist, 0) else {
            return;
        };
        let dst = &mut ps[t.offset()..t.offset() + n];
        let img: &[f32] = &image[..n];
        tiles::for_tiles(
            par,
            cols,
            rows,
            dst,
            || (),
            |_, tile, dt| {
                tiles::gather_tile(img, &il, tile, dt, rows);
            },
        );
    });
}

/// The storage offsets of `layout`'s positions `start..start + out.len()`
/// (row-major), into `out`: a run along the last dim at a time.
fn offsets(layout: &Layout, start: usize, out: &mut [usize]) {
    let (shape, strides) = (layout.shape(), layout.strides());
    let Some(last) = shape.len().checked_sub(1) else {
        out.fill(layout.offset());
        return;
    };
    let mut idx = [0usize; kael_core::MAX_RANK];
    let mut rest = start;
    for d in (0..=last).rev() {
        idx[d] = rest % shape[d];
        rest /= shape[d];
    }
    let (nl, sl) = (shape[last], strides[last]);
    let mut w = 0;
    while w < out.len() {
        let base = layout.offset() + (0..last).map(|d| idx[d] * strides[d]).sum::<usize>();
        let j = idx[last];
        let run = (nl - j).min(out.len() - w);
        for (k, o) in out[w..w + run].iter_mut().enumerate() {
            *o = base + (j + k) * sl;
        }
        w += run;
        // The next run: the dims before the last step, carrying.
        idx[last] = 0;
        for d in (0..last).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// [`Update::slices`] at the widest vector width this CPU runs, with the
/// hardware's square root (correctly rounded, as the reference's).
fn slices(u: &Update, g: &[f32], p: &mut [f32], m: &mut [f32], v: &mut [f32]) {
    match super::vmath::isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa()` found AVX-512F on this CPU.
        super::vmath::Isa::Avx512 => unsafe { slices_avx512(u, g, p, m, v) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa()` found AVX2 on this CPU.
        super::vmath::Isa::Avx2 => unsafe { slices_avx2(u, g, p, m, v) },
        _ => u.slices_with(f32::sqrt, g, p, m, v),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn slices_avx512(u: &Update, g: &[f32], p: &mut [f32], m: &mut [f32], v: &mut [f32]) {
    u.slices_with(f32::sqrt, g, p, m, v);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn slices_avx2(u: &Update, g: &[f32], p: &mut [f32], m: &mut [f32], v: &mut [f32]) {
    u.slices_with(f32::sqrt, g, p, m, v);
}

/// A base pointer shared by the chunks that write disjoint ranges of it.
#[derive(Clone, Copy)]
struct Shared(*mut f32);

// SAFETY: only dereferenced inside `adam`'s chunks, which touch disjoint
// elements, within the borrow of the outputs' write guards.
unsafe impl Send for Shared {}
// SAFETY: as for `Send`.
unsafe impl Sync for Shared {}

impl Shared {
    fn get(self) -> *mut f32 {
        self.0
    }
}

fn slice(s: &[f32], r: core::ops::Range<usize>) -> Result<&[f32]> {
    s.get(r)
        .ok_or_else(|| bad("an operand runs past its storage"))
}

fn bad(reason: &'static str) -> Error {
    Error::InvalidArgument { op: "adam", reason }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kael_core::kernels::adam::{Hyper, Update};

    /// The vector-width update (the feature-compiled loops, taken under
    /// Miri with AVX2 enabled) equals the reference's slice loop bit for
    /// bit, first step and later; and the pool's chunked update through a
    /// device equals it too (the raw per-chunk slices of the moments).
    #[test]
    fn the_dispatched_and_chunked_updates_equal_the_reference_loop() {
        let n = 45;
        let f = |k: usize| {
            (0..n)
                .map(|i| ((i * 7 + k) % 11) as f32 * 0.1 - 0.4)
                .collect::<Vec<_>>()
        };
        let (p, g, m, v) = (
            f(1),
            f(2),
            f(3),
            f(4).iter().map(|x| x.abs()).collect::<Vec<_>>(),
        );
        for first in [true, false] {
            let h = Hyper {
                lr: 0.01,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.1,
                bias_correction1: 0.1,
                bias_correction2: 0.001,
                decoupled: true,
                first,
            };
            let u = Update::of(&h);
            let run = |wide: bool| {
                let (mut p, mut m, mut v) = (p.clone(), m.clone(), v.clone());
                if wide {
                    slices(&u, &g, &mut p, &mut m, &mut v);
                } else {
                    u.slices(&g, &mut p, &mut m, &mut v);
                }
                [p, m, v].map(|x| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>())
            };
            assert_eq!(run(true), run(false), "first {first}");
        }
    }

    /// The pool's in-place update (raw per-chunk writes of the moments,
    /// of a transposed parameter through its image, of a strided one through its
    /// offsets) on a two-thread device equals the reference device's, bit
    /// for bit, first step and later.
    #[test]
    fn the_pooled_update_in_place_equals_the_reference() {
        use kael_core::backend::Family;
        use kael_core::{DType, Device, Tensor};
        fn ok<T>(r: Result<T>) -> T {
            r.unwrap_or_else(|e| panic!("{e}"))
        }
        let dev = ok(crate::cpu_threaded::Builder::new()
            .threads(2)
            .parallel_threshold(1)
            .build());
        let cpu = Device::cpu();
        let (r, c) = (35, 33);
        let vals = |k: usize| -> Vec<f32> {
            (0..r * c)
                .map(|i| ((i * 7 + k) % 11) as f32 * 0.1 - 0.4)
                .collect()
        };
        // (0: contiguous; 1: transposed, through an image; 2: a column-sliced
        // transpose's narrow, by offsets)
        let run = |d: &Device, kind: usize| -> Vec<u32> {
            let p = match kind {
                0 => ok(Tensor::from_slice(&vals(1), &[r, c], d)),
                1 => ok(ok(Tensor::from_slice(&vals(1), &[c, r], d)).t()),
                _ => {
                    let wide = ok(Tensor::from_slice(&vals(1), &[r, c], d));
                    let w2 = ok(Tensor::cat(&[&wide, &wide], 1));
                    ok(w2.slice(1, 0, (2 * c) as isize, 2))
                }
            };
            let mv = ok(Tensor::zeros(&[2, r, c], DType::F32, d));
            for (k, first) in [(2, true), (3, false)] {
                let g = ok(Tensor::from_slice(&vals(k), &[r, c], d));
                let h = Hyper {
                    lr: 0.01,
                    beta1: 0.9,
                    beta2: 0.999,
                    eps: 1e-8,
                    weight_decay: 0.1,
                    bias_correction1: 0.1,
                    bias_correction2: 0.001,
                    decoupled: true,
                    first,
                };
                ok(Tensor::declared_update(
                    Family::Adam,
                    0,
                    &h.words(),
                    &[&g],
                    &[&p, &mv],
                ));
            }
            let mut out = ok(p.to_vec::<f32>());
            out.extend(ok(mv.to_vec::<f32>()));
            out.iter().map(|v| v.to_bits()).collect()
        };
        for kind in 0..3 {
            assert_eq!(run(&dev, kind), run(&cpu, kind), "layout {kind}");
        }
    }

    /// `offsets` lists a transposed layout's positions from any start.
    #[test]
    fn offsets_follow_the_layout_row_major() {
        let l = Layout::new(&[3, 2], &[1, 3], 4).unwrap_or_else(|e| panic!("{e}"));
        let mut out = [0usize; 4];
        offsets(&l, 1, &mut out);
        assert_eq!(out, [7, 5, 8, 6]);
        let mut all = [0usize; 6];
        offsets(&l, 0, &mut all);
        assert_eq!(all, [4, 7, 5, 8, 6, 9]);
        let scalar = Layout::new(&[], &[], 3).unwrap_or_else(|e| panic!("{e}"));
        let mut one = [0usize; 1];
        offsets(&scalar, 0, &mut one);
        assert_eq!(one, [3]);
    }
}
