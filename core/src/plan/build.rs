//! From a [`Recording`] to plan words: bindings, constants, liveness and
//! arena offsets.
//!
//! NOTE [Arena planning]
//! Every buffer allocated while recording that is not bound lives in the
//! arena from the step that first touches it to the step that last does,
//! even when the tensor outlived the recording (a gradient, an activation
//! autograd saved): after its last step nothing a replay can observe reads
//! it, since only bound tensors outlive a replay, and every arena buffer
//! is written (or zeroed) by the replay before it is read. Offsets are assigned greedily by size, largest first, each at
//! the lowest 16-aligned offset that overlaps no placed buffer whose
//! lifetime meets its own (TFLite Micro's `GreedyMemoryPlanner`). The arena
//! size is the end of the highest buffer: exact for this assignment, and no
//! replay can fail for want of a contiguous block, because nothing is
//! allocated at replay time.

use super::format::{self, ARENA_ALIGN, HEADER, MAGIC, MAX_BINDINGS, VERSION, kernel, place};
use super::trace::{Accumulation, Kernel, Operand, Recording};
use super::{Binding, Plan, Role};
use crate::backend::ArgReduceOp;
use crate::backend::contract::Operand as ContractOperand;
use crate::backend::family::declared_rows;
use crate::dtype::DType;
use crate::error::{Error, Result};
use alloc::vec;
use alloc::vec::Vec;

fn refuse(reason: &'static str) -> Error {
    Error::InvalidArgument {
        op: "Plan::build",
        reason,
    }
}

fn word(v: usize) -> Result<u32> {
    u32::try_from(v)
        .map_err(|_| refuse("a size or offset exceeds 2^32 - 1; plans address at most 4 GiB"))
}

/// Where each recorded buffer goes.
#[derive(Clone, Copy, PartialEq)]
enum Place {
    /// Not used by any step (never written to the plan).
    Unused,
    Arena,
    Bound(usize),
    Const,
}

/// One step before encoding: kernel code, params, operands.
#[derive(Clone)]
struct Planned<'r> {
    /// Bytes a write step copies in (stored after the steps).
    data: Option<&'r [u8]>,
    kernel: u32,
    params: Vec<u32>,
    operands: Vec<Operand>,
    /// A reduction's scratch: (its buffer index, bytes).
    scratch: Option<usize>,
}

impl Plan {
    /// Builds a plan from `recording`, with `bindings` naming the tensors a
    /// replay supplies (NOTE [Planned execution]).
    ///
    /// - An [`Binding::input`] existed before recording and is only read.
    /// - An [`Binding::state`] existed before recording (a parameter, an
    ///   optimizer buffer): read and written in place.
    /// - An [`Binding::output`] was made while recording and is still
    ///   alive (the prediction, the loss).
    /// - A tensor that existed before recording, is only read and is not
    ///   bound becomes a constant of the plan (a frozen weight: it lives
    ///   in the plan's bytes, e.g. in flash).
    /// - Everything else made while recording lives in the arena.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (from `Plan::build`) when the recording
    /// used a kernel or dtype a plan cannot replay, when a binding is not
    /// f32, contiguous and the whole of its storage, has the wrong role, is
    /// bound twice or was not used, or when an unbound tensor from before
    /// recording is written.
    pub fn build(recording: &Recording, bindings: &[Binding<'_>]) -> Result<Plan> {
        if let Some(op) = recording.unsupported {
            return Err(Error::Unsupported {
                op,
                device: super::trace::TRACE_KIND,
            });
        }
        if bindings.len() > MAX_BINDINGS {
            return Err(refuse(
                "more than 64 bound tensors; bind fewer (concatenate parameters into one tensor)",
            ));
        }
        let bufs = &recording.buffers;
        // Each buffer's first and last step, and whether it is written.
        let mut first = vec![usize::MAX; bufs.len()];
        let mut last = vec![0usize; bufs.len()];
        let mut written = vec![false; bufs.len()];
        for (i, c) in recording.calls.iter().enumerate() {
            for (k, o) in c.operands.iter().enumerate() {
                first[o.buf] = first[o.buf].min(i);
                last[o.buf] = i;
                if k + c.kernel.outputs() >= c.operands.len() {
                    written[o.buf] = true;
                }
                check_dtype(&c.kernel, k, o.dtype)?;
            }
        }
        let mut places = vec![Place::Unused; bufs.len()];
        for (b, buf) in bufs.iter().enumerate() {
            if first[b] == usize::MAX {
                continue;
            }
            places[b] = if buf.created {
                Place::Arena
            } else if written[b] {
                Place::Unused // must be bound as state; checked below
            } else {
                Place::Const
            };
        }
        let mut bound = Vec::with_capacity(bindings.len());
        for (i, bd) in bindings.iter().enumerate() {
            let t = bd.tensor;
            if format::binding_word(bd.role, t.dtype()).is_none() {
                return Err(refuse(
                    "a bound tensor is neither f32, an i64/i32 input nor i64 state; bind f32 tensors, index tensors (token ids, targets) as inputs, and integer counters as state",
                ));
            }
            let storage = t.storage();
            let whole = t.is_contiguous()
                && t.offset() == 0
                && t.numel().checked_mul(t.dtype().size_in_bytes()) == Some(storage.nbytes());
            if !whole {
                return Err(refuse(
                    "a bound tensor is a view or not contiguous; bind a tensor that owns all of its storage (e.g. its deep_clone(), before recording)",
                ));
            }
            let addr = storage.as_ptr().addr();
            let b = bufs
                .iter()
                .enumerate()
                .rev()
                .find(|(b, x)| {
                    x.addr == addr
                        && x.alive
                        && first[*b] != usize::MAX
                        // Empty buffers share one address (NOTE [Buffer
                        // identity in a trace]): each binds another.
                        && !(x.nbytes == 0 && matches!(places[*b], Place::Bound(_)))
                })
                .map(|(b, _)| b)
                .ok_or_else(|| refuse("a bound tensor was not used by the recorded function; bind only what it reads or writes"))?;
            if bindings[..i].iter().any(|o| o.name == bd.name) {
                return Err(refuse(
                    "two bindings have the same name; name each bound tensor once",
                ));
            }
            if matches!(places[b], Place::Bound(_)) {
                return Err(refuse("a tensor is bound twice; bind it once"));
            }
            let ok = match bd.role {
                Role::Input => !bufs[b].created && !written[b],
                Role::State => !bufs[b].created,
                Role::Output => bufs[b].created,
            };
            if !ok {
                return Err(match bd.role {
                    Role::Input if written[b] => refuse(
                        "a tensor bound as an input is written by the recorded function; bind it with Binding::state",
                    ),
                    Role::Output => refuse(
                        "a tensor bound as an output existed before recording; bind it with Binding::state (or input)",
                    ),
                    _ => refuse(
                        "a tensor bound as an input or state was made while recording; bind it with Binding::output",
                    ),
                });
            }
            places[b] = Place::Bound(i);
            bound.push(b);
        }
        for (b, p) in places.iter().enumerate() {
            if *p == Place::Unused && first[b] != usize::MAX {
                return Err(refuse(
                    "the recorded function writes a tensor that existed before recording and is not bound (a parameter or optimizer state?); bind it with Binding::state",
                ));
            }
        }

        // Steps, with zeroing of buffers allocated zeroed and reduction
        // scratch buffers (new buffers, live for their step only).
        let mut extra_sizes: Vec<usize> = Vec::new();
        let mut steps: Vec<Planned<'_>> = Vec::new();
        let mut zeroed_done = vec![false; bufs.len()];
        for c in recording.calls.iter() {
            for o in &c.operands {
                let b = &bufs[o.buf];
                if places[o.buf] == Place::Arena && b.zeroed && !zeroed_done[o.buf] {
                    zeroed_done[o.buf] = true;
                    let full_overwrite = core::ptr::eq(o, c.operands.last().unwrap_or(o))
                        && c.operands.iter().filter(|x| x.buf == o.buf).count() == 1
                        && o.layout.is_contiguous()
                        && o.layout.offset() == 0
                        && o.layout.numel().checked_mul(o.dtype.size_in_bytes()) == Some(b.nbytes)
                        && !matches!(c.kernel, Kernel::Write(..))
                        && !matches!(&c.kernel, Kernel::Declared(f, s, ..) if declared_rows::updates(*f, *s));
                    if !full_overwrite {
                        steps.push(Planned {
                            kernel: kernel::ZERO,
                            params: Vec::new(),
                            operands: vec![Operand {
                                buf: o.buf,
                                layout: crate::layout::Layout::contiguous(&[b.nbytes])?,
                                dtype: DType::U8,
                            }],
                            scratch: None,
                            data: None,
                        });
                    }
                }
            }
            let (k, params, scratch) = match &c.kernel {
                Kernel::Fill(v) => {
                    let bits = v.to_bits();
                    (kernel::FILL, vec![bits as u32, (bits >> 32) as u32], None)
                }
                Kernel::Copy => (kernel::COPY, vec![], None),
                Kernel::Unary(op) => {
                    let w = format::unary_words(*op);
                    if format::unary_of(&w) != Some(*op) {
                        return Err(Error::Unsupported {
                            op: op.name(),
                            device: super::trace::TRACE_KIND,
                        });
                    }
                    (kernel::UNARY, w.to_vec(), None)
                }
                Kernel::Binary(op) => (kernel::BINARY, vec![op.code()], None),
                Kernel::Compare(op) => (kernel::COMPARE, vec![op.code()], None),
                Kernel::Where => (kernel::WHERE, vec![], None),
                Kernel::Reduce(op, mask) => {
                    let dst = c.operands.last().map_or(0, |o| o.layout.numel());
                    let s = bufs.len() + extra_sizes.len();
                    extra_sizes.push(
                        dst.checked_mul(8)
                            .ok_or_else(|| refuse("a reduction is too large"))?,
                    );
                    (
                        kernel::REDUCE,
                        vec![format::reduce_code(*op), *mask, word(s)?],
                        Some(s),
                    )
                }
                Kernel::Matmul => (kernel::MATMUL, vec![], None),
                Kernel::SoftmaxBackward(log) => {
                    (kernel::SOFTMAX_BACKWARD, vec![u32::from(*log)], None)
                }
                Kernel::Softmax(dim, log) => {
                    (kernel::SOFTMAX, vec![word(*dim)?, u32::from(*log)], None)
                }
                Kernel::Write(off, _) => (kernel::WRITE, vec![word(*off)?, 0, 0], None),
                Kernel::Cast => (kernel::CAST, vec![], None),
                Kernel::ArgReduce(op, dim) => (
                    kernel::ARG_REDUCE,
                    vec![u32::from(*op == ArgReduceOp::ArgMin), word(*dim)?],
                    None,
                ),
                Kernel::Index(code, dim) => (*code, vec![word(*dim)?], None),
                Kernel::LayerNorm(eps, w, b) => {
                    let bits = eps.to_bits();
                    let p = vec![
                        bits as u32,
                        (bits >> 32) as u32,
                        u32::from(*w),
                        u32::from(*b),
                    ];
                    (kernel::LAYER_NORM, p, None)
                }
                Kernel::LayerNormBackward(w) => {
                    // `sums`: 2n f64 (dwb is `[2, n]`, the last operand).
                    let n = c.operands.last().map_or(0, |o| o.layout.numel() / 2);
                    let s = bufs.len() + extra_sizes.len();
                    extra_sizes.push(
                        n.checked_mul(16)
                            .ok_or_else(|| refuse("a layer norm is too large"))?,
                    );
                    (
                        kernel::LAYER_NORM_BACKWARD,
                        vec![u32::from(*w), word(s)?],
                        Some(s),
                    )
                }
                Kernel::ArgSort(dim, desc) => {
                    // Two rows of positions (`usize`, 8 bytes on any host).
                    let n = c
                        .operands
                        .first()
                        .map_or(0, |o| o.layout.shape().get(*dim).copied().unwrap_or(0));
                    let s = bufs.len() + extra_sizes.len();
                    extra_sizes.push(
                        n.checked_mul(16)
                            .ok_or_else(|| refuse("a sort is too large"))?,
                    );
                    let p = vec![word(*dim)?, u32::from(*desc), word(s)?];
                    (kernel::ARGSORT, p, Some(s))
                }
                Kernel::Declared(f, step, words, _) => {
                    // NOTE [Declared families]: the parameter words, then
                    // the scratch buffer (u32::MAX: none).
                    let code = f
                        .plan_codes()
                        .get(*step)
                        .copied()
                        .ok_or_else(|| refuse("a kernel family step without a plan code"))?;
                    let ops: Vec<ContractOperand<'_>> = c
                        .operands
                        .iter()
                        .map(|o| ContractOperand {
                            layout: &o.layout,
                            dtype: o.dtype,
                            buffer: o.buf,
                        })
                        .collect();
                    let need = declared_rows::scratch(*f, *step, words, &ops)
                        .ok_or_else(|| refuse("a kernel's scratch is too large"))?;
                    let mut p = words.clone();
                    if need > 0 {
                        let s = bufs.len() + extra_sizes.len();
                        extra_sizes.push(need);
                        p.push(word(s)?);
                        (code, p, Some(s))
                    } else {
                        p.push(u32::MAX);
                        (code, p, None)
                    }
                }
            };
            steps.push(Planned {
                data: match &c.kernel {
                    Kernel::Write(_, d) => Some(d),
                    _ => None,
                },
                kernel: k,
                params,
                operands: c.operands.clone(),
                scratch,
            });
        }

        let steps = fuse_epilogues(steps, |b| places.get(b) == Some(&Place::Arena));

        // Liveness over steps (scratch buffers live at their step only).
        let n_all = bufs.len() + extra_sizes.len();
        let mut lo = vec![usize::MAX; n_all];
        let mut hi = vec![0usize; n_all];
        for (i, s) in steps.iter().enumerate() {
            for o in &s.operands {
                lo[o.buf] = lo[o.buf].min(i);
                hi[o.buf] = i;
            }
            if let Some(b) = s.scratch {
                lo[b] = i;
                hi[b] = i;
            }
        }
        let size = |b: usize| {
            if b < bufs.len() {
                bufs[b].nbytes
            } else {
                extra_sizes[b - bufs.len()]
            }
        };
        let mut arena_bufs: Vec<usize> = (0..n_all)
            .filter(|&b| lo[b] != usize::MAX && (b >= bufs.len() || places[b] == Place::Arena))
            .collect();
        // Largest first; ties by first use, so the order is deterministic.
        arena_bufs.sort_by(|&a, &b| size(b).cmp(&size(a)).then(lo[a].cmp(&lo[b])));
        let mut offset = vec![0usize; n_all];
        let mut placed: Vec<usize> = Vec::new();
        let mut arena_bytes = 0usize;
        for &b in &arena_bufs {
            let mut taken: Vec<(usize, usize)> = placed
                .iter()
                .filter(|&&p| lo[p] <= hi[b] && lo[b] <= hi[p] && size(p) > 0)
                .map(|&p| (offset[p], offset[p] + size(p)))
                .collect();
            taken.sort_unstable();
            let mut at = 0usize;
            for (s, e) in taken {
                if at.checked_add(size(b)).is_some_and(|end| end <= s) {
                    break;
                }
                at = at.max(e.next_multiple_of(ARENA_ALIGN));
            }
            offset[b] = at;
            arena_bytes = arena_bytes.max(
                at.checked_add(size(b))
                    .ok_or_else(|| refuse("the arena exceeds the address space"))?,
            );
            placed.push(b);
        }

        // Encode.
        let mut w: Vec<u32> = vec![
            MAGIC,
            VERSION,
            if recording.accumulation == Accumulation::F32 {
                format::FLAG_F32_ACC
            } else {
                0
            },
            word(arena_bytes)?,
            word(n_all)?,
            word(bindings.len())?,
            word(steps.len())?,
            0,
        ];
        debug_assert_eq!(w.len(), HEADER);
        for (b, &off) in offset.iter().enumerate() {
            let (pl, at) = match places.get(b).copied().unwrap_or(Place::Arena) {
                Place::Arena | Place::Unused => (place::ARENA, off),
                Place::Bound(i) => (place::BOUND, i),
                Place::Const => (place::CONST, 0),
            };
            // An arena buffer no step touches (unused, or fused away) was
            // never placed: it takes no bytes.
            let unplaced = pl == place::ARENA && lo[b] == usize::MAX;
            let nbytes = if unplaced { 0 } else { size(b) };
            w.extend_from_slice(&[pl, word(at)?, word(nbytes)?]);
        }
        for (bd, &b) in bindings.iter().zip(&bound) {
            let name = bd.name.as_bytes();
            let first = format::binding_word(bd.role, bd.tensor.dtype())
                .ok_or_else(|| refuse("a bound tensor's dtype cannot be bound"))?;
            w.extend_from_slice(&[first, word(b)?, word(name.len())?]);
            for chunk in name.chunks(4) {
                let mut q = [0u8; 4];
                q[..chunk.len()].copy_from_slice(chunk);
                w.push(u32::from_le_bytes(q));
            }
        }
        let mut data_words: Vec<(usize, &[u8])> = Vec::new(); // (word of params[1], bytes)
        for s in &steps {
            let start = w.len();
            let flat = flat_operands(s)?;
            let k = if flat.is_some() {
                s.kernel | kernel::FLAT
            } else {
                s.kernel
            };
            w.extend_from_slice(&[0, k, word(s.params.len())?]);
            if let Some(d) = s.data {
                data_words.push((w.len() + 1, d));
            }
            w.extend_from_slice(&s.params);
            w.push(word(s.operands.len())?);
            if let Some(f) = flat {
                w.extend_from_slice(&f);
                w[start] = word(w.len() - start)?;
                continue;
            }
            for o in &s.operands {
                w.extend_from_slice(&[
                    word(o.buf)?,
                    format::dtype_code(o.dtype)
                        .ok_or_else(|| refuse("a dtype other than f32 and bool"))?,
                    word(o.layout.rank())?,
                    word(o.layout.offset())?,
                ]);
                for &d in o.layout.shape().iter() {
                    w.push(word(d)?);
                }
                for &d in o.layout.strides().iter() {
                    w.push(word(d)?);
                }
            }
            w[start] = word(w.len() - start)?;
        }
        // Written data and constants follow the steps.
        for (param_at, data) in data_words {
            let at = w.len();
            push_bytes(&mut w, data);
            w[param_at] = word(at)?;
            w[param_at + 1] = word(data.len())?;
        }
        for (b, buf) in bufs.iter().enumerate() {
            if places[b] == Place::Const {
                let at = w.len();
                let bytes = buf.data.as_deref().ok_or_else(|| refuse(
                    "a tensor read by the recorded function could not be captured (out of memory while recording)",
                ))?;
                push_bytes(&mut w, bytes);
                w[HEADER + 3 * b + 1] = word(at)?;
            }
        }
        w[7] = word(w.len())?;
        // The plan must read back as it was meant.
        super::PlanRef::new(&w)?;
        Ok(Plan { words: w })
    }
}

/// NOTE [Fused epilogues]
/// A matmul whose result only feeds the next step's elementwise binary op
/// (`x @ w + b`), and that op's result only the next step's unary op
/// (`relu(..)`), become one flat matmul step that applies both to each
/// sum as it is stored: `d = g(f(c, e))` (or `f(e, c)`, keeping the
/// recorded operand order). Each element sees the same f32 operations in
/// the same order as the three steps did, so the bits are the same; the
/// intermediates never reach memory and leave the arena. Only an arena
/// intermediate that no later step reads is fused away (in training, the
/// pre-activation that ReLU's backward reads keeps its step).
fn fuse_epilogues<'r>(
    steps: Vec<Planned<'r>>,
    in_arena: impl Fn(usize) -> bool,
) -> Vec<Planned<'r>> {
    let read_after = |steps: &[Planned<'_>], from: usize, buf: usize| {
        steps[from..]
            .iter()
            .any(|s| s.operands.iter().any(|o| o.buf == buf))
    };
    // The elementwise step at `i` reads exactly `t` (the previous step's
    // destination) as one source; its other operands and its destination
    // are f32 and flat-shaped like `t`.
    let reads_exactly = |s: &Planned<'_>, t: &Operand| {
        s.operands.iter().filter(|o| o.buf == t.buf).count() == 1
            && s.operands[..s.operands.len() - 1]
                .iter()
                .any(|o| o.buf == t.buf && o.layout == t.layout && o.dtype == t.dtype)
            && s.operands
                .iter()
                .all(|o| o.dtype == DType::F32 && o.layout.shape() == t.layout.shape())
    };
    let mut out: Vec<Planned<'r>> = Vec::with_capacity(steps.len());
    let mut i = 0;
    while i < steps.len() {
        let s = &steps[i];
        // A flat-able f32 matmul `[a, b, t]` (no batch dims) ...
        let mm = match &s.operands[..] {
            [a, b, t]
                if s.kernel == kernel::MATMUL
                    && s.params.is_empty()
                    && s.operands.iter().all(|o| o.dtype == DType::F32)
                    && t.layout.rank() >= 2
                    && t.layout.shape()[..t.layout.rank() - 2]
                        .iter()
                        .all(|&n| n == 1) =>
            {
                Some((a, b, t))
            }
            _ => None,
        };
        // ... whose result only the next step, a binary op, reads.
        let fused = mm.and_then(|(a, b, t)| {
            let n = steps.get(i + 1)?;
            let ok = n.kernel == kernel::BINARY
                && n.params.len() == 1
                && n.operands.len() == 3
                && reads_exactly(n, t)
                && in_arena(t.buf)
                && !read_after(&steps, i + 2, t.buf)
                && n.operands[2].buf != a.buf
                && n.operands[2].buf != b.buf;
            ok.then_some((t, n))
        });
        let Some((t, bin)) = fused else {
            out.push(steps[i].clone());
            i += 1;
            continue;
        };
        let side = u32::from(bin.operands[1].buf == t.buf);
        let e = bin.operands[1 - side as usize].clone();
        let mut d = bin.operands[2].clone();
        let mut params = vec![bin.params[0], side];
        let mut used = 2;
        if let Some(un) = steps.get(i + 2).filter(|n| {
            n.kernel == kernel::UNARY
                && n.operands.len() == 2
                && reads_exactly(n, &d)
                && in_arena(d.buf)
                && d.buf != e.buf
                && !read_after(&steps, i + 3, d.buf)
                && n.operands[1].buf != s.operands[0].buf
                && n.operands[1].buf != s.operands[1].buf
                && (n.operands[1].buf != e.buf || n.operands[1].layout == e.layout)
        }) {
            params.extend_from_slice(&un.params);
            d = un.operands[1].clone();
            used = 3;
        }
        out.push(Planned {
            data: None,
            kernel: kernel::MATMUL,
            params,
            operands: vec![s.operands[0].clone(), s.operands[1].clone(), e, d],
            scratch: None,
        });
        i += used;
    }
    out
}

/// The operand words of a step's flat form (NOTE [Plan words]), when it
/// has one: an f32 copy, unary or binary op whose operands' layouts merge
/// into at most two dimensions (size-1 dimensions dropped, dimensions
/// contiguous in every operand joined), or an f32 matmul without batch
/// dimensions.
fn flat_operands(s: &Planned<'_>) -> Result<Option<Vec<u32>>> {
    let ops = &s.operands;
    if ops.iter().any(|o| o.dtype != DType::F32) {
        return Ok(None);
    }
    let mut w = Vec::new();
    match (s.kernel, &ops[..]) {
        (kernel::MATMUL, [a, _, d] | [a, _, _, d]) => {
            let (r, shape) = (d.layout.rank(), d.layout.shape());
            if r < 2 || shape[..r - 2].iter().any(|&n| n != 1) {
                return Ok(None);
            }
            w.extend_from_slice(&[
                word(shape[r - 2])?,
                word(shape[r - 1])?,
                word(a.layout.shape()[r - 1])?,
            ]);
            for o in ops {
                let st = o.layout.strides();
                w.extend_from_slice(&[
                    word(o.buf)?,
                    word(o.layout.offset())?,
                    word(st[r - 2])?,
                    word(st[r - 1])?,
                ]);
            }
        }
        (kernel::COPY | kernel::UNARY | kernel::BINARY, [.., d]) => {
            // (size, each operand's stride) of the merged dimensions.
            let mut dims: Vec<(usize, Vec<usize>)> = Vec::new();
            for (i, &n) in d.layout.shape().iter().enumerate() {
                if n == 1 {
                    continue;
                }
                let st: Vec<usize> = ops.iter().map(|o| o.layout.strides()[i]).collect();
                if let Some((pn, ps)) = dims.last_mut()
                    && ps
                        .iter()
                        .zip(&st)
                        .all(|(&p, &s)| Some(p) == s.checked_mul(n))
                {
                    *pn *= n;
                    *ps = st;
                    continue;
                }
                dims.push((n, st));
            }
            if dims.len() > 2 {
                return Ok(None);
            }
            while dims.len() < 2 {
                dims.insert(0, (1, vec![0; ops.len()]));
            }
            w.extend_from_slice(&[word(dims[0].0)?, word(dims[1].0)?]);
            for (k, o) in ops.iter().enumerate() {
                w.extend_from_slice(&[
                    word(o.buf)?,
                    word(o.layout.offset())?,
                    word(dims[0].1[k])?,
                    word(dims[1].1[k])?,
                ]);
            }
        }
        _ => return Ok(None),
    }
    Ok(Some(w))
}

/// Whether a plan can replay `kernel` on `dtype` as its operand `k`:
/// casts take every dtype a plan carries, copies f32, bool, i64 and i32,
/// the index ops i64 or i32 indices (`argmax` an i64 result), and every
/// other operand is f32 (or the bool of a comparison, `where` and `fill`).
fn check_dtype(kernel: &Kernel, k: usize, dtype: DType) -> Result<()> {
    use DType::{Bool, F32, I32, I64};
    let index_at = |code: u32| usize::from(matches!(code, kernel::INDEX_ADD | kernel::SCATTER_ADD));
    let ok = match kernel {
        Kernel::Write(..) => true,
        Kernel::Cast | Kernel::Declared(..) => format::dtype_code(dtype).is_some(),
        Kernel::Copy => matches!(dtype, F32 | Bool | I64 | I32),
        Kernel::Index(code, _) if k == 1 - index_at(*code) => matches!(dtype, I64 | I32),
        Kernel::ArgReduce(..) | Kernel::ArgSort(..) if k == 1 => dtype == I64,
        Kernel::ArgSort(..) => matches!(dtype, F32 | I64 | I32),
        Kernel::Compare(_) if k == 2 => dtype == Bool,
        Kernel::Where if k == 0 => dtype == Bool,
        Kernel::Fill(_) => matches!(dtype, F32 | Bool),
        _ => dtype == F32,
    };
    // The refusal names the recorded operation and Plan::build.
    if ok {
        Ok(())
    } else if format::dtype_code(dtype).is_none() {
        Err(Error::UnsupportedDType {
            op: kernel.name(),
            dtype,
            supported: "in a plan (Plan::build), f32 models with bool masks and i64/i32 indices; f64, f16, bf16, i16 and i8 are not carried",
        })
    } else {
        Err(Error::UnsupportedDType {
            op: kernel.name(),
            dtype,
            supported: "in a plan (Plan::build), f32 for this kernel (integer and bool data only as indices, masks and counters): compute these values outside the recorded function, or cast them to f32",
        })
    }
}

fn push_bytes(w: &mut Vec<u32>, data: &[u8]) {
    for chunk in data.chunks(4) {
        let mut q = [0u8; 4];
        q[..chunk.len()].copy_from_slice(chunk);
        w.push(u32::from_le_bytes(q));
    }
}
