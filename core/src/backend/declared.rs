//! Declared families: a kernel family that is its table row and one
//! kernel type, with nothing else written for it.
//!
//! NOTE [Declared families]
//! A row of the family table (NOTE [Family table]) that names a `kernel:`
//! type implementing [`Declared`] is a *declared* family. Everything the
//! older families spell out by hand is generated for it from that row and
//! that type:
//!
//! - the backend entry: one [`Backend::declared`](super::Backend::declared)
//!   method for every declared family, with the usual default (inherit
//!   from a host device in place, else [`Error::Unsupported`], which the
//!   tensor layer answers by composing the op: NOTE [Fused families]);
//! - the reference backend's dispatch (`run_storages`): the contract
//!   ([`check`]), storage guards, the kernel on slices;
//! - the tensor layer's op: [`Tensor::declared`](crate::Tensor::declared)
//!   allocates the outputs from [`Declared::outputs`] (the family's shape
//!   function) and records the gradient the row declares (`adjoint:`, the
//!   step whose kernel is this step's adjoint, for a linear step);
//! - plans: the tracer records the call as data (family, step, parameter
//!   words), the builder gives it an arena scratch buffer of
//!   [`Declared::scratch`] bytes, the format checks its operands as every
//!   slice-level family's, and the replayer runs [`Declared::run`] on the
//!   step's buffers: the same function the eager device runs, so replay is
//!   bit-identical by construction.
//!
//! A step's parameters are `u32` words (sizes, flags, float bits), the
//! form a plan stores them in; [`Declared::arity`] says how many operands
//! a step with those words takes, inputs first, and how many of them, at
//! the end, it writes (whole, or, for a step that
//! [updates](Declared::updates) them, read first and written in place:
//! [`Tensor::declared_update`](crate::Tensor::declared_update)). Written operands never share memory with any
//! other operand (checked before any kernel runs, eager or planned).

use super::contract::Operand;
use super::{Dst, Family, Src};
use crate::dtype::DType;
use crate::error::{ErrShape, Error, Result};
use crate::layout::Layout;
use crate::shape::Dims;
use alloc::vec::Vec;

/// The most operands a declared step takes (inputs and outputs).
pub const MAX_OPERANDS: usize = 6;

/// A call of a declared family's step, as [`Backend::declared`] takes it.
///
/// [`Backend::declared`]: super::Backend::declared
#[derive(Clone, Copy, Debug)]
pub struct Call<'a> {
    /// The family (a table row with a `kernel:`).
    pub family: Family,
    /// Which of the family's steps (its `plan:` codes, in order).
    pub step: usize,
    /// The step's parameter words.
    pub params: &'a [u32],
    /// The inputs, in the kernel's order.
    pub srcs: &'a [Src<'a>],
    /// The outputs (written whole, or updated in place by a step that
    /// [updates](Declared::updates) them), in the kernel's order.
    pub dsts: &'a [Dst<'a>],
}

/// A kernel input: the whole buffer's bytes, read through `layout` as
/// `dtype` elements.
#[derive(Clone, Copy, Debug)]
pub struct In<'a> {
    /// The buffer.
    pub bytes: &'a [u8],
    /// Where the elements are (offset and strides in elements).
    pub layout: &'a Layout,
    /// Their dtype.
    pub dtype: DType,
}

/// A kernel output: as [`In`], written.
#[derive(Debug)]
pub struct Out<'a> {
    /// The buffer.
    pub bytes: &'a mut [u8],
    /// Where the elements go.
    pub layout: &'a Layout,
    /// Their dtype.
    pub dtype: DType,
}

/// Output shapes and dtypes of a step ([`Declared::outputs`]).
pub type Shapes = heapless::Vec<(Dims, DType), 2>;

/// One declared family's kernel: its operands, shape function, contract,
/// scratch and slice-level arithmetic (NOTE [Declared families]).
pub trait Declared {
    /// `(inputs, outputs)` of `step` with these parameter words; `None`
    /// for a step or a word count the family does not have.
    fn arity(step: usize, params: &[u32]) -> Option<(usize, usize)>;

    /// The outputs' shapes and dtypes from the inputs' (the tensor layer
    /// allocates them; the contract checks a caller's against them).
    ///
    /// # Errors
    /// Parameters or input shapes the family refuses, naming its op.
    fn outputs(step: usize, params: &[u32], ins: &[Operand<'_>]) -> Result<Shapes>;

    /// Scratch bytes the step needs beside its operands (a plan gives it
    /// arena bytes; eager execution a heap buffer). `None`: too large.
    fn scratch(step: usize, params: &[u32], ops: &[Operand<'_>]) -> Option<usize> {
        let _ = (step, params, ops);
        Some(0)
    }

    /// Whether dim 0 of every operand of `step` (but the
    /// [shared](Declared::shared_inputs) inputs) is one batch dimension,
    /// and the step on a range of it is the step on that range: a
    /// threaded backend may then run ranges of the batch in parallel.
    fn batched(step: usize) -> bool {
        let _ = step;
        false
    }

    /// Whether `step`'s outputs are sums over a batch (dim 0 of every
    /// input but the shared ones) of the step on its ranges: a threaded
    /// backend may then run ranges into partial outputs and add them (a
    /// weight's gradient). Such a step is not `batched`.
    fn summed(step: usize) -> bool {
        let _ = step;
        false
    }

    /// The inputs of a batched (or summed) step that are not split (bit `i`: input
    /// `i`): every range of the batch reads them whole (a depthwise
    /// convolution's weight).
    fn shared_inputs(step: usize) -> u8 {
        let _ = step;
        0
    }

    /// Whether `step` reads its outputs before it writes them (an update
    /// in place: the `adam` family's parameter and moments). The other
    /// steps write every output element without reading it, so a plan
    /// need not zero an output buffer before them.
    fn updates(step: usize) -> bool {
        let _ = step;
        false
    }

    /// Runs the step on slices. Called only after [`check`] passed for
    /// these operands (and, in a plan, after every reach was checked), so
    /// it may index without re-checking; it still returns an error rather
    /// than panic on anything it reads from data (index values).
    ///
    /// # Errors
    /// A dtype outside `DTYPES`; bad values in the data.
    fn run<const DTYPES: u16>(
        step: usize,
        params: &[u32],
        ins: &[In<'_>],
        outs: &mut [Out<'_>],
        scratch: &mut [u8],
    ) -> Result<()>;
}

/// The contract of every declared step: the operand count, the outputs
/// exactly as [`Declared::outputs`] computes them, and written operands
/// sharing memory with no other.
///
/// # Errors
/// [`Error::InvalidArgument`] or [`Error::ShapeMismatch`] naming `op`.
pub fn check<K: Declared>(
    op: &'static str,
    step: usize,
    params: &[u32],
    ops: &[Operand<'_>],
) -> Result<()> {
    check_with(op, step, params, ops, K::arity(step, params), K::outputs)
}

/// [`check`] with the kernel's arity and shape function passed in: one
/// copy of the checks for every family.
#[inline(never)]
fn check_with(
    op: &'static str,
    step: usize,
    params: &[u32],
    ops: &[Operand<'_>],
    arity: Option<(usize, usize)>,
    outputs: fn(usize, &[u32], &[Operand<'_>]) -> Result<Shapes>,
) -> Result<()> {
    let (ni, no) = arity.ok_or(Error::InvalidArgument {
        op,
        reason: "the step or its parameter count is not one of this kernel family's; call it through its tensor op",
    })?;
    if ops.len() != ni + no {
        return Err(Error::InvalidArgument {
            op,
            reason: "the kernel got the wrong number of operands; call it through its tensor op",
        });
    }
    let (ins, outs) = ops.split_at(ni);
    let want = outputs(step, params, ins)?;
    for (o, (shape, dtype)) in outs.iter().zip(want.iter()) {
        if o.layout.shape() != shape.as_slice() {
            return Err(Error::ShapeMismatch {
                op,
                expected: ErrShape::of(shape.as_slice()),
                got: ErrShape::of(o.layout.shape()),
            });
        }
        if o.dtype != *dtype {
            return Err(Error::DTypeMismatch {
                op,
                expected: *dtype,
                got: o.dtype,
            });
        }
    }
    for (i, o) in ops.iter().enumerate().skip(ni) {
        if ops
            .iter()
            .enumerate()
            .any(|(j, x)| j != i && x.buffer == o.buffer)
        {
            return Err(Error::InvalidArgument {
                op,
                reason: "an output shares storage with another operand; write into a fresh tensor",
            });
        }
    }
    Ok(())
}

/// A declared kernel's functions as pointers, so the storage glue of
/// [`run_storages`] is one function for every family (generic, it was
/// one copy per family, 1.5 KB each on a Cortex-M4).
pub(crate) struct Fns {
    /// [`check`] for the kernel.
    pub(crate) check: fn(&'static str, usize, &[u32], &[Operand<'_>]) -> Result<()>,
    /// [`Declared::scratch`].
    pub(crate) scratch: fn(usize, &[u32], &[Operand<'_>]) -> Option<usize>,
    /// [`Declared::run`] for a dtype set.
    pub(crate) run: RunFn,
}

/// [`Declared::run`] as a pointer: `(step, params, ins, outs, scratch)`.
pub(crate) type RunFn = fn(usize, &[u32], &[In<'_>], &mut [Out<'_>], &mut [u8]) -> Result<()>;

impl Fns {
    /// `K`'s functions, its kernel built for `DTYPES`.
    pub(crate) const fn of<K: Declared, const DTYPES: u16>() -> Fns {
        Fns {
            check: check::<K>,
            scratch: K::scratch,
            run: K::run::<DTYPES>,
        }
    }
}

/// Runs a declared step on storages (the reference backend's
/// [`Backend::declared`](super::Backend::declared)): the contract, then
/// the kernel on the storages' bytes, with a heap scratch buffer.
///
/// # Errors
/// The contract's; storage borrow conflicts; the kernel's.
#[inline(never)]
pub(crate) fn run_storages(call: Call<'_>, k: &Fns) -> Result<()> {
    let op = call.family.name();
    let mut ops: heapless::Vec<Operand<'_>, MAX_OPERANDS> = heapless::Vec::new();
    for s in call.srcs.iter().chain(call.dsts) {
        ops.push(Operand::from(*s)).map_err(|_| too_many(op))?;
    }
    (k.check)(op, call.step, call.params, &ops)?;
    let need = (k.scratch)(call.step, call.params, &ops).ok_or(Error::InvalidArgument {
        op,
        reason: "the kernel's scratch size overflows usize; use smaller sizes",
    })?;
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
    let ins: Vec<In<'_>> = reads
        .iter()
        .zip(call.srcs)
        .map(|(g, s)| In {
            bytes: g.bytes(),
            layout: s.layout,
            dtype: s.dtype,
        })
        .collect();
    let mut outs: Vec<Out<'_>> = writes
        .iter_mut()
        .zip(call.dsts)
        .map(|(g, d)| Out {
            bytes: g.bytes_mut(),
            layout: d.layout,
            dtype: d.dtype,
        })
        .collect();
    // 16-byte units, so any dtype a kernel keeps there is aligned.
    let mut scratch: Vec<u128> = alloc::vec![0; need.div_ceil(16)];
    let scratch = bytemuck::cast_slice_mut::<u128, u8>(&mut scratch);
    (k.run)(call.step, call.params, &ins, &mut outs, scratch)
}

fn too_many(op: &'static str) -> Error {
    Error::InvalidArgument {
        op,
        reason: "more operands than a kernel family takes (6); call it through its tensor op",
    }
}
