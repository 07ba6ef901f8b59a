//! The declared families (NOTE [Declared families]) on the threaded
//! backend: the reference kernels, with a batched step (one whose dim 0
//! is a batch: `im2col`, `col2im`, the pools, the depthwise convolution)
//! run as ranges of its batch in parallel, and a summed step (a depthwise
//! weight's gradient) as ranges into partial outputs added at the end;
//! every other step runs the reference kernel inline. The `conv2d`
//! family has products of its own (NOTE [Convolution by image]), and
//! `adam` a chunked update.

use super::engine::{Par, cast_slice_mut};
use kael_core::backend::Family;
use kael_core::backend::declared::{Call, In, Out};
use kael_core::cpu as reference;
use kael_core::dtype::DType;
use kael_core::layout::Layout;
use kael_core::{Error, Result};
use std::sync::Mutex;

/// One piece's output bytes.
type Piece<'a> = Mutex<Option<Vec<&'a mut [u8]>>>;

pub(super) fn declared(par: &Par<'_>, call: Call<'_>) -> Result<()> {
    let own = match call.family {
        Family::Conv2d => super::conv::conv2d(par, call),
        Family::Adam => super::adam::adam(par, call),
        Family::BatchNorm => super::batch_norm::batch_norm(par, call),
        _ => None,
    };
    if let Some(done) = own {
        return done;
    }
    if reference::declared_summed(call.family, call.step) {
        return summed(par, call);
    }
    let batch = call
        .dsts
        .first()
        .and_then(|d| d.layout.shape().first().copied())
        .unwrap_or(0);
    let work: usize = call.dsts.iter().map(|d| d.layout.numel()).sum();
    let split = reference::declared_batched(call.family, call.step)
        && batch > 1
        && par.parallel(work)
        && call.dsts.iter().all(|d| d.layout.is_contiguous());
    if !split {
        return reference::run_declared(call);
    }
    let need = reference::declared_contract(call)?;
    let shared = reference::declared_shared_inputs(call.family, call.step);
    let op = call.family.name();
    let pieces = batch.min(par.threads * 4);
    let bound = |i: usize| i * batch / pieces;
    let reads = call
        .srcs
        .iter()
        .map(|s| s.storage.read(op))
        .collect::<Result<Vec<_>>>()?;
    let mut writes = call
        .dsts
        .iter()
        .map(|d| d.storage.write(op))
        .collect::<Result<Vec<_>>>()?;
    // Each output's elements, contiguous from its offset, cut at the
    // batch bounds: piece `i` owns rows `bound(i)..bound(i + 1)`.
    let mut per_piece: Vec<Vec<&mut [u8]>> = (0..pieces).map(|_| Vec::new()).collect();
    for (g, d) in writes.iter_mut().zip(call.dsts) {
        let es = d.dtype.size_in_bytes();
        let row = d.layout.numel() / batch * es;
        let start = d.layout.offset() * es;
        let mut rest = g.bytes_mut().get_mut(start..).ok_or_else(|| reach(op))?;
        for (i, piece) in per_piece.iter_mut().enumerate() {
            let len = (bound(i + 1) - bound(i)) * row;
            if len > rest.len() {
                return Err(reach(op));
            }
            let (head, tail) = rest.split_at_mut(len);
            piece.push(head);
            rest = tail;
        }
    }
    // Each piece's layouts: the inputs narrowed to its rows (those the step
    // shares, whole), the outputs
    // contiguous from the start of its bytes.
    let mut layouts: Vec<(Vec<Layout>, Vec<Layout>)> = Vec::with_capacity(pieces);
    for i in 0..pieces {
        let (b0, n) = (bound(i), bound(i + 1) - bound(i));
        let ins = piece_inputs(call, shared, b0, n)?;
        let outs = call
            .dsts
            .iter()
            .map(|d| {
                let mut shape = d.layout.shape().clone();
                shape.as_mut_slice()[0] = n;
                Layout::contiguous(&shape)
            })
            .collect::<Result<Vec<_>>>()?;
        layouts.push((ins, outs));
    }
    let bytes: Vec<&[u8]> = reads.iter().map(|g| g.bytes()).collect();
    let slots: Vec<Piece<'_>> = per_piece.into_iter().map(|p| Mutex::new(Some(p))).collect();
    let failed: Mutex<Option<Error>> = Mutex::new(None);
    par.for_each_index(pieces, |i| {
        let taken = match slots[i].lock() {
            Ok(mut p) => p.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        let Some(out_bytes) = taken else {
            return;
        };
        let (il, ol) = &layouts[i];
        let ins: Vec<In<'_>> = bytes
            .iter()
            .zip(il)
            .zip(call.srcs)
            .map(|((b, l), s)| In {
                bytes: b,
                layout: l,
                dtype: s.dtype,
            })
            .collect();
        let mut outs: Vec<Out<'_>> = out_bytes
            .into_iter()
            .zip(ol)
            .zip(call.dsts)
            .map(|((b, l), d)| Out {
                bytes: b,
                layout: l,
                dtype: d.dtype,
            })
            .collect();
        run_piece(call, need, &ins, &mut outs, &failed);
    });
    match failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// A step whose outputs sum over the batch (a depthwise weight's
/// gradient): ranges of the batch run into zeroed partial outputs of their
/// own, added in range order at the end (so the sum's order depends on
/// the thread count, as the parallel reductions' does). f32 outputs only;
/// anything else runs the reference kernel inline.
fn summed(par: &Par<'_>, call: Call<'_>) -> Result<()> {
    let batch = call
        .srcs
        .first()
        .and_then(|s| s.layout.shape().first().copied())
        .unwrap_or(0);
    let work: usize = call.srcs.iter().map(|s| s.layout.numel()).sum();
    let fits = call
        .dsts
        .iter()
        .all(|d| d.dtype == DType::F32 && d.layout.is_contiguous());
    if batch < 2 || !fits || !par.parallel(work) {
        return reference::run_declared(call);
    }
    let need = reference::declared_contract(call)?;
    let shared = reference::declared_shared_inputs(call.family, call.step);
    let op = call.family.name();
    let pieces = batch.min(par.threads * 2);
    let bound = |i: usize| i * batch / pieces;
    let reads = call
        .srcs
        .iter()
        .map(|s| s.storage.read(op))
        .collect::<Result<Vec<_>>>()?;
    let bytes: Vec<&[u8]> = reads.iter().map(|g| g.bytes()).collect();
    let out_layouts = call
        .dsts
        .iter()
        .map(|d| Layout::contiguous(d.layout.shape()))
        .collect::<Result<Vec<_>>>()?;
    let mut in_layouts: Vec<Vec<Layout>> = Vec::with_capacity(pieces);
    for i in 0..pieces {
        let (b0, n) = (bound(i), bound(i + 1) - bound(i));
        let ins = piece_inputs(call, shared, b0, n)?;
        in_layouts.push(ins);
    }
    let partials: Vec<Mutex<Vec<Vec<f32>>>> = (0..pieces)
        .map(|_| {
            Mutex::new(
                call.dsts
                    .iter()
                    .map(|d| vec![0.0; d.layout.numel()])
                    .collect(),
            )
        })
        .collect();
    let failed: Mutex<Option<Error>> = Mutex::new(None);
    par.for_each_index(pieces, |i| {
        let mut part = partials[i].lock().unwrap_or_else(|p| p.into_inner());
        let ins: Vec<In<'_>> = bytes
            .iter()
            .zip(&in_layouts[i])
            .zip(call.srcs)
            .map(|((b, l), s)| In {
                bytes: b,
                layout: l,
                dtype: s.dtype,
            })
            .collect();
        let mut outs: Vec<Out<'_>> = part
            .iter_mut()
            .zip(&out_layouts)
            .map(|(v, l)| Out {
                bytes: bytemuck::cast_slice_mut(v.as_mut_slice()),
                layout: l,
                dtype: DType::F32,
            })
            .collect();
        run_piece(call, need, &ins, &mut outs, &failed);
    });
    if let Some(e) = failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let parts: Vec<Vec<Vec<f32>>> = partials
        .into_iter()
        .map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
        .collect();
    for (k, d) in call.dsts.iter().enumerate() {
        let mut g = d.storage.write(op)?;
        let (off, n) = (d.layout.offset(), d.layout.numel());
        let dst = cast_slice_mut::<f32>(g.bytes_mut())?
            .get_mut(off..off + n)
            .ok_or_else(|| reach(op))?;
        for (i, part) in parts.iter().enumerate() {
            for (a, &v) in dst.iter_mut().zip(&part[k]) {
                *a = if i == 0 { v } else { *a + v };
            }
        }
    }
    Ok(())
}

/// One piece's input layouts: each input narrowed to rows `b0..b0 + n`
/// of its batch, those the step shares whole.
fn piece_inputs(call: Call<'_>, shared: u8, b0: usize, n: usize) -> Result<Vec<Layout>> {
    call.srcs
        .iter()
        .enumerate()
        .map(|(k, s)| match shared >> k & 1 {
            1 => Ok(s.layout.clone()),
            _ => s.layout.narrow(0, b0, n),
        })
        .collect()
}

/// Runs the step's reference kernel on one piece with a scratch of its
/// own; the first error of any piece is kept in `failed`.
fn run_piece(
    call: Call<'_>,
    need: usize,
    ins: &[In<'_>],
    outs: &mut [Out<'_>],
    failed: &Mutex<Option<Error>>,
) {
    let mut scratch = vec![0u128; need.div_ceil(16)];
    let r = reference::run_declared_slices(
        call.family,
        call.step,
        call.params,
        ins,
        outs,
        bytemuck::cast_slice_mut(&mut scratch),
    );
    if let Err(e) = r {
        let mut f = failed.lock().unwrap_or_else(|p| p.into_inner());
        f.get_or_insert(e);
    }
}

fn reach(op: &'static str) -> Error {
    Error::InvalidArgument {
        op,
        reason: "an operand's layout runs past its storage; this is a bug in the caller",
    }
}
