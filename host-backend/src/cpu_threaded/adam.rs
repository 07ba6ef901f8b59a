//! The `adam` family (NOTE [One-pass Adam] in `kael_core::kernels::adam`)
//! on the threaded backend: the update cut into chunks of the outputs
//! across the pool, each chunk the reference kernel's slice loop
//! ([`Update::slices`], at the CPU's vector width), so the values are the
//! reference's bit for bit.
//! The gradient, the moments and the outputs must be contiguous (they are
//! the optimizer's own tensors); a strided parameter (GPT-2's transposed
//! Conv1D weights) is gathered a block at a time. Anything else runs the
//! shared declared path.

use super::engine::{BLOCK, Par, cast_slice, cast_slice_mut, gather};
use kael_core::backend::declared::Call;
use kael_core::cpu as reference;
use kael_core::dtype::DType;
use kael_core::kernels::adam::{Hyper, Update};
use kael_core::{Error, Result};

/// The update on the pool, or `None` where this path does not apply.
pub(super) fn adam(par: &Par<'_>, call: Call<'_>) -> Option<Result<()>> {
    let [p, g, m, v] = call.srcs else {
        return None;
    };
    let [d, mv] = call.dsts else {
        return None;
    };
    let f32s = call
        .srcs
        .iter()
        .chain(call.dsts)
        .all(|o| o.dtype == DType::F32);
    let dense = [g, m, v, d, mv].iter().all(|o| o.layout.is_contiguous());
    if !f32s || !dense {
        return None;
    }
    Some((|| {
        reference::declared_contract(call)?;
        let h = Hyper::of(call.params).ok_or_else(|| bad("malformed parameters"))?;
        let u = Update::of(&h);
        let op = call.family.name();
        let n = d.layout.numel();
        let span = |l: &kael_core::layout::Layout| l.offset()..l.offset() + n;
        let (gp, gg) = (p.storage.read(op)?, g.storage.read(op)?);
        let (gm, gv) = (m.storage.read(op)?, v.storage.read(op)?);
        let ps = cast_slice::<f32>(gp.bytes())?;
        let gs = slice(cast_slice::<f32>(gg.bytes())?, span(g.layout))?;
        let ms = slice(cast_slice::<f32>(gm.bytes())?, span(m.layout))?;
        let vs = slice(cast_slice::<f32>(gv.bytes())?, span(v.layout))?;
        let mut gd = d.storage.write(op)?;
        let mut gmv = mv.storage.write(op)?;
        let ds = cast_slice_mut::<f32>(gd.bytes_mut())?
            .get_mut(span(d.layout))
            .ok_or_else(|| bad("the output runs past its storage"))?;
        let off = mv.layout.offset();
        let (mo, vo) = cast_slice_mut::<f32>(gmv.bytes_mut())?
            .get_mut(off..off + 2 * n)
            .ok_or_else(|| bad("the output runs past its storage"))?
            .split_at_mut(n);
        let p_flat = p.layout.is_contiguous().then(|| span(p.layout));
        if let Some(r) = &p_flat
            && ps.get(r.clone()).is_none()
        {
            return Err(bad("the parameter runs past its storage"));
        }
        // Chunks of `d`, with the same ranges of the moments' outputs.
        let mo_ptr = Shared(mo.as_mut_ptr());
        let vo_ptr = Shared(vo.as_mut_ptr());
        par.bandwidth_bound().for_chunks(ds, |start, dc| {
            let len = dc.len();
            // SAFETY: `mo` and `vo` are `n`-element slices borrowed for the
            // whole call; `for_chunks` hands each call a disjoint range
            // `start..start + len` of `d`, and these are the same ranges
            // of `mo` and `vo`, so no element is written by two threads.
            let (mc, vc) = unsafe {
                (
                    core::slice::from_raw_parts_mut(mo_ptr.get().add(start), len),
                    core::slice::from_raw_parts_mut(vo_ptr.get().add(start), len),
                )
            };
            let range = start..start + len;
            let (g, m, v) = (&gs[range.clone()], &ms[range.clone()], &vs[range.clone()]);
            match &p_flat {
                Some(r) => {
                    let pc = &ps[r.start + start..r.start + start + len];
                    slices(&u, [pc, g, m, v], dc, mc, vc);
                }
                None => {
                    // A strided parameter: BLOCK elements at a time.
                    let mut buf = [0.0f32; BLOCK];
                    let mut at = 0;
                    while at < len {
                        let k = BLOCK.min(len - at);
                        gather(ps, p.layout, start + at, &mut buf[..k]);
                        let r = at..at + k;
                        slices(
                            &u,
                            [&buf[..k], &g[r.clone()], &m[r.clone()], &v[r.clone()]],
                            &mut dc[r.clone()],
                            &mut mc[r.clone()],
                            &mut vc[r.clone()],
                        );
                        at += k;
                    }
                }
            }
        });
        Ok(())
    })())
}

/// [`Update::slices`] at the widest vector width this CPU runs, with the
/// hardware's square root (correctly rounded, as the reference's).
fn slices(u: &Update, ins: [&[f32]; 4], d: &mut [f32], mo: &mut [f32], vo: &mut [f32]) {
    match super::vmath::isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa()` found AVX-512F on this CPU.
        super::vmath::Isa::Avx512 => unsafe { slices_avx512(u, ins, d, mo, vo) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa()` found AVX2 on this CPU.
        super::vmath::Isa::Avx2 => unsafe { slices_avx2(u, ins, d, mo, vo) },
        _ => u.slices_with(f32::sqrt, ins, d, mo, vo),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn slices_avx512(u: &Update, ins: [&[f32]; 4], d: &mut [f32], mo: &mut [f32], vo: &mut [f32]) {
    u.slices_with(f32::sqrt, ins, d, mo, vo);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn slices_avx2(u: &Update, ins: [&[f32]; 4], d: &mut [f32], mo: &mut [f32], vo: &mut [f32]) {
    u.slices_with(f32::sqrt, ins, d, mo, vo);
}

/// A base pointer shared by the chunks that write disjoint ranges of it.
#[derive(Clone, Copy)]
struct Shared(*mut f32);

// SAFETY: only dereferenced inside `adam`'s chunks, which receive disjoint
// ranges, within the borrow of the output's write guard.
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
                let (mut d, mut mo, mut vo) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
                if wide {
                    slices(&u, [&p, &g, &m, &v], &mut d, &mut mo, &mut vo);
                } else {
                    u.slices([&p, &g, &m, &v], &mut d, &mut mo, &mut vo);
                }
                [d, mo, vo].map(|x| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>())
            };
            assert_eq!(run(true), run(false), "first {first}");
        }
    }
}
