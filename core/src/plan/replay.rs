//! Replay: a plan's kernels run straight on the arena and the bound
//! slices, with no allocation, no reference counting and no autograd.
//!
//! This module holds no kernel of its own: each step calls the reference
//! backend's own code on the step's memory (NOTE [Slice-level kernels] in
//! [`crate::cpu::index`]): the shared elementwise walks of
//! [`crate::cpu::strided`] with the op table's scalar functions
//! ([`UnaryOp::float_fn_in`], ...), the reduction walk (NOTE [One
//! reduction walk]), the small product (NOTE [One small product]), the
//! softmax walks and rows, and the slice-level kernels of the newer
//! families. So a replay's bits are the eager device's bits by
//! construction; what is here is decoding, pointers and dispatch.
//!
//! NOTE [Replay on raw pointers]
//! [`PlanRef::new`] checked, once, that every operand's layout reaches
//! only inside its buffer, that a step's buffers are exactly equal or
//! disjoint, and that nothing writes an input or a constant; `run` checks
//! that the arena and every bound slice hold their buffers' bytes. So the
//! kernels it calls index by raw pointer without re-checking: that is the
//! "no per-op validation beyond what the plan checked once" of the design,
//! and it is what makes a replay cost about what hand-written loops cost.
//! Every pointer is derived once per run (the arena's base, each bound
//! slice's), and an exactly-in-place source is read through the same
//! pointer as its destination, so no reference ever aliases a write.

use super::Role;
#[path = "replay_family.rs"]
mod family;
use super::format::{
    ARENA_ALIGN, MAX_BINDINGS, PlanRef, Step, View, decode_unary, fused_ops, kernel, place,
};
use crate::backend::{BinaryOp, CmpOp};
use crate::cpu::matmul::small_product;
use crate::cpu::ops;
use crate::cpu::reduce::{
    Acc, Kahan32, accumulate_strided, softmax_strided_f32, softmax_strided_f64, store_strided,
};
use crate::cpu::softmax_grad::softmax_backward_rows;
use crate::cpu::strided::{self, Walk};
use crate::dtype::Scalar;
use crate::error::{Error, Result};
use crate::storage::{typed, typed_mut};

/// A slice a replay reads or writes, bound by name to one of the plan's
/// bindings ([`PlanRef::binding`]).
///
/// ```
/// use kael_core::plan::Bind;
/// let x = [1.0f32, 2.0];
/// let mut y = [0.0f32; 2];
/// let binds = [Bind::input("x", &x), Bind::output("y", &mut y)];
/// assert_eq!(binds[0].name(), "x");
/// ```
#[derive(Debug)]
pub enum Bind<'a> {
    /// Read only: an input.
    In(&'a str, &'a [f32]),
    /// Read and written: an output, or state (parameters, optimizer
    /// buffers) updated in place.
    Out(&'a str, &'a mut [f32]),
    /// Read only: an `I64` index input (token ids, class targets).
    Indices(&'a str, &'a [i64]),
    /// Read only: an `I32` index input.
    Indices32(&'a str, &'a [i32]),
    /// Read and written: `I64` state (a counter such as a batch norm's
    /// `num_batches_tracked`).
    StateI64(&'a str, &'a mut [i64]),
}

impl<'a> Bind<'a> {
    /// An input.
    pub fn input(name: &'a str, data: &'a [f32]) -> Self {
        Bind::In(name, data)
    }

    /// An output.
    pub fn output(name: &'a str, data: &'a mut [f32]) -> Self {
        Bind::Out(name, data)
    }

    /// State read and updated in place (a trained parameter).
    pub fn state(name: &'a str, data: &'a mut [f32]) -> Self {
        Bind::Out(name, data)
    }

    /// An `I64` index input (a tensor of token ids or targets bound with
    /// [`Binding::input`](super::Binding::input)): its values are checked
    /// against every index step that reads them before a replay runs.
    pub fn indices(name: &'a str, data: &'a [i64]) -> Self {
        Bind::Indices(name, data)
    }

    /// An `I32` index input, as [`Bind::indices`].
    pub fn indices_i32(name: &'a str, data: &'a [i32]) -> Self {
        Bind::Indices32(name, data)
    }

    /// `I64` state read and updated in place (a tensor bound with
    /// [`Binding::state`](super::Binding::state): a counter).
    pub fn state_i64(name: &'a str, data: &'a mut [i64]) -> Self {
        Bind::StateI64(name, data)
    }

    /// The binding's name.
    pub fn name(&self) -> &'a str {
        match self {
            Bind::In(n, _) | Bind::Out(n, _) | Bind::Indices(n, _) | Bind::Indices32(n, _) => n,
            Bind::StateI64(n, _) => n,
        }
    }
}

/// An arena for [`PlanRef::run`]: `N` bytes aligned as a replay needs.
///
/// ```
/// use kael_core::plan::Arena;
/// let mut arena = Arena::<64>::new();
/// assert_eq!(arena.as_mut_slice().len(), 64);
/// ```
#[repr(C, align(16))]
#[derive(Debug)]
pub struct Arena<const N: usize>(pub [u8; N]);

impl<const N: usize> Arena<N> {
    /// A zeroed arena.
    pub const fn new() -> Self {
        Self([0; N])
    }

    /// The bytes.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

impl<const N: usize> Default for Arena<N> {
    fn default() -> Self {
        Self::new()
    }
}

const RUN: &str = "PlanRef::run";

fn refuse(reason: &'static str) -> Error {
    Error::InvalidArgument { op: RUN, reason }
}

/// Runs one plan with the kernels a firmware image links: `OPS` (a set of
/// [`ops`] bits, as for [`CpuBackend`](crate::cpu::CpuBackend)) and f32
/// accumulation `F32_ACC`; with `STRIDED = false`, only the flat form of
/// copies, elementwise ops and matmuls is linked (what a plan of 2-D
/// layouts needs: [`PlanRef::strided`] says whether a plan needs more),
/// which saves a firmware image the general layout walker. [`Replayer::new`]
/// refuses, once, a plan traced on a device with another accumulation or
/// needing a kernel it lacks; each [`Replayer::run`] then checks only the
/// arena and the bindings.
///
/// ```
/// use kael_core::cpu::ops;
/// use kael_core::plan::{Accumulation, Binding, Bind, Plan, Replayer, Tracer};
/// use kael_core::Tensor;
/// let tracer = Tracer::new(Accumulation::F32);
/// let x = Tensor::from_slice(&[1.0f32, -2.0], &[2], &tracer.device())?;
/// let (y, rec) = tracer.record(|| x.relu())?;
/// let plan = Plan::build(&rec, &[Binding::input("x", &x), Binding::output("y", &y)])?;
/// let relu = Replayer::<{ ops::RELU }, true>::new(&plan.as_ref())?;
/// let mut out = [0.0f32; 2];
/// relu.run(&mut [], &mut [Bind::input("x", &[4.0, -1.0]), Bind::output("y", &mut out)])?;
/// assert_eq!(out, [4.0, 0.0]);
/// // Without relu linked, the plan is refused before it runs.
/// assert!(Replayer::<{ ops::ADD }, true>::new(&plan.as_ref()).is_err());
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Replayer<
    'p,
    const OPS: u128 = { ops::ALL },
    const F32_ACC: bool = false,
    const STRIDED: bool = true,
> {
    plan: PlanRef<'p>,
    /// The word where the steps start (found once).
    steps_at: usize,
    /// Whether an index input is bound, whose values each run checks
    /// first (found once).
    bound_indices: bool,
}

impl<'p, const OPS: u128, const F32_ACC: bool, const STRIDED: bool>
    Replayer<'p, OPS, F32_ACC, STRIDED>
{
    /// A replayer of `plan`, after checking it was traced with this
    /// accumulation and needs no op outside `OPS` (nor strided layouts,
    /// without `STRIDED`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the plan was traced with the other
    /// accumulation, or needs strided layouts and `STRIDED` is false;
    /// [`Error::Unsupported`] naming an op or family that `OPS` lacks.
    pub fn new(plan: &PlanRef<'p>) -> Result<Self> {
        if plan.f32_accumulation() != F32_ACC {
            return Err(refuse(if F32_ACC {
                "the plan was traced on a device that sums f32 in f64 (Accumulation::F64); trace it with Accumulation::F32 to replay it here, or replay with F32_ACC = false"
            } else {
                "the plan was traced on a device that sums f32 in f32 (Accumulation::F32); trace it with Accumulation::F64 to replay it here, or replay with F32_ACC = true"
            }));
        }
        if !STRIDED && plan.strided()? {
            return Err(refuse(
                "the plan has strided steps (PlanRef::strided); replay it with STRIDED = true",
            ));
        }
        plan.for_each_step(|s| {
            for (bit, name) in step_bits::<OPS>(&s)? {
                if OPS & bit != bit {
                    return Err(Error::Unsupported {
                        op: name,
                        device: crate::DeviceKind::Cpu,
                    });
                }
            }
            if OPS & family::BITS != 0 {
                family::check::<OPS>(plan, &s)?;
            }
            Ok(())
        })?;
        let mut bound_indices = false;
        if OPS & family::INDEX_BITS != 0 {
            for i in 0..plan.n_bindings() {
                bound_indices |= plan.binding_dtype(i)? != crate::DType::F32;
            }
        }
        Ok(Self {
            plan: *plan,
            steps_at: plan.steps_start()?,
            bound_indices,
        })
    }

    /// The plan this replayer runs.
    pub fn plan(&self) -> &PlanRef<'p> {
        &self.plan
    }

    /// Replays the plan on `arena` (at least [`PlanRef::arena_bytes`]
    /// bytes, 16-byte aligned: [`Arena`]) with `binds` supplying every
    /// binding by name. Everything is checked before the first kernel
    /// runs, so a refused replay changes nothing.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the arena is too small;
    /// [`Error::InvalidArgument`] when it is misaligned, or a binding is
    /// missing, unknown, bound twice, read-only where the plan writes, or
    /// of another length than traced (trace and plan again for a new
    /// shape).
    pub fn run(&self, arena: &mut [u8], binds: &mut [Bind<'_>]) -> Result<()> {
        let plan = &self.plan;
        if arena.len() < plan.arena_bytes() {
            return Err(Error::OutOfMemory {
                requested: plan.arena_bytes(),
                available: Some(arena.len()),
            });
        }
        if plan.arena_bytes() > 0 && arena.as_ptr().addr() % ARENA_ALIGN != 0 {
            return Err(refuse(
                "the arena is not 16-byte aligned; use kael_core::plan::Arena",
            ));
        }
        if binds.len() != plan.n_bindings() {
            return Err(refuse(
                "the number of binds differs from the plan's bindings; pass one Bind per binding (PlanRef::binding lists them)",
            ));
        }
        // Each bound slice gives its pointer once (NOTE [Replay on raw
        // pointers]); `binds.len()` distinct names fill every slot.
        let mut bound = [core::ptr::null_mut::<u8>(); MAX_BINDINGS];
        for b in binds.iter_mut() {
            let (i, role, buf, dt) = plan.find_binding(b.name())?.ok_or_else(|| {
                refuse(
                    "a Bind names no binding of the plan; bind exactly the names PlanRef::binding lists",
                )
            })?;
            let slot = bound
                .get_mut(i)
                .ok_or_else(|| refuse("corrupt binding table"))?;
            if !slot.is_null() {
                return Err(refuse(
                    "two Binds have the same name; bind each of the plan's names once",
                ));
            }
            let (bytes, ptr): (Option<usize>, *mut u8) = match b {
                Bind::In(_, d) if role == Role::Input && dt == F32 => {
                    (d.len().checked_mul(4), d.as_ptr().cast_mut().cast())
                }
                Bind::In(..) if dt == F32 => {
                    return Err(refuse(
                        "an output or state binding was given read-only; pass it with Bind::output or Bind::state",
                    ));
                }
                Bind::Out(_, d) if dt == F32 => (d.len().checked_mul(4), d.as_mut_ptr().cast()),
                // Read-only slices for inputs only (a state is written).
                Bind::Indices(_, d) if dt == I64 && role == Role::Input => {
                    (d.len().checked_mul(8), d.as_ptr().cast_mut().cast())
                }
                Bind::Indices32(_, d) if dt == I32 && role == Role::Input => {
                    (d.len().checked_mul(4), d.as_ptr().cast_mut().cast())
                }
                Bind::StateI64(_, d) if dt == I64 && role == Role::State => {
                    (d.len().checked_mul(8), d.as_mut_ptr().cast())
                }
                _ => {
                    return Err(refuse(
                        "a Bind's type is not its binding's; use Bind::indices for index inputs and Bind::state_i64 for i64 state",
                    ));
                }
            };
            if bytes != Some(plan.buffer(buf)?.nbytes) {
                return Err(refuse(
                    "a bound slice's length differs from the traced tensor's; trace and plan again for the new shape",
                ));
            }
            *slot = ptr;
        }
        let mem = Mem {
            plan: *plan,
            base: arena.as_mut_ptr(),
            bound: &bound,
        };
        if OPS & family::INDEX_BITS != 0 && self.bound_indices {
            mem.check_bound_indices()?;
        }
        plan.for_each_step_from(self.steps_at, |s| mem.step::<OPS, F32_ACC, STRIDED>(&s))
    }
}

/// The kernel-selection bits a step needs, each with its op's name (0
/// for writes and zeroing, which are always linked).
fn step_bits<const OPS: u128>(s: &Step<'_>) -> Result<[(u128, &'static str); 3]> {
    const NONE: (u128, &str) = (0, "write");
    let one = |b: (u128, &'static str)| [b, NONE, NONE];
    Ok(match s.kernel & !kernel::FLAT {
        kernel::FILL => one((ops::FILL, "fill")),
        kernel::COPY => one((ops::COPY, "copy")),
        kernel::UNARY => {
            let op = decode_unary(s.params).ok_or_else(|| refuse("corrupt unary step"))?;
            one((op.bit(), op.name()))
        }
        kernel::BINARY => {
            let op = binary_of(s)?;
            one((op.bit(), op.name()))
        }
        kernel::COMPARE => one((ops::COMPARE, "compare")),
        kernel::WHERE => one((ops::WHERE, "where")),
        kernel::REDUCE => one((ops::REDUCE, "reduce")),
        kernel::SOFTMAX if s.params.get(1) == Some(&1) => one((ops::SOFTMAX, "log_softmax")),
        kernel::SOFTMAX => one((ops::SOFTMAX, "softmax")),
        kernel::SOFTMAX_BACKWARD => one((ops::SOFTMAX_BACKWARD, "softmax_backward")),
        kernel::MATMUL if s.params.is_empty() => one((ops::MATMUL, "matmul")),
        kernel::MATMUL => {
            let (bin, _, un) = fused_ops(s.params).ok_or_else(|| refuse("corrupt matmul step"))?;
            [
                (ops::MATMUL, "matmul"),
                (bin.bit(), bin.name()),
                un.map_or(NONE, |u| (u.bit(), u.name())),
            ]
        }
        // A replayer without any slice-level family refuses their steps
        // without linking their names.
        k if OPS & family::BITS == 0 && family::is_family_code(k) => {
            one((family::BITS, "a kernel family"))
        }
        _ if OPS & family::BITS == 0 => one(NONE),
        _ => one(family::family_bit(s).unwrap_or(NONE)),
    })
}

fn binary_of(s: &Step<'_>) -> Result<BinaryOp> {
    s.params
        .first()
        .and_then(|&c| BinaryOp::ALL.get(c as usize).copied())
        .ok_or_else(|| refuse("corrupt binary step"))
}

fn compare_of(s: &Step<'_>) -> Result<CmpOp> {
    s.params
        .first()
        .and_then(|&c| CmpOp::ALL.get(c as usize).copied())
        .ok_or_else(|| refuse("corrupt compare step"))
}

impl PlanRef<'_> {
    /// The kernel-selection bits ([`ops`]) a [`Replayer`] needs to run
    /// this plan: the `OPS` to build a firmware image's replayer with.
    ///
    /// ```
    /// use kael_core::cpu::ops;
    /// use kael_core::plan::{Accumulation, Binding, Plan, Tracer};
    /// use kael_core::Tensor;
    /// let tracer = Tracer::new(Accumulation::F32);
    /// let x = Tensor::from_slice(&[1.0f32, -2.0], &[2], &tracer.device())?;
    /// let (y, rec) = tracer.record(|| x.relu())?;
    /// let plan = Plan::build(&rec, &[Binding::input("x", &x), Binding::output("y", &y)])?;
    /// assert_eq!(plan.as_ref().ops()?, ops::RELU);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// A corrupt step (never for a validated plan).
    pub fn ops(&self) -> Result<u128> {
        let mut set = 0u128;
        self.for_each_step(|s| {
            for (bit, _) in step_bits::<{ ops::ALL }>(&s)? {
                set |= bit;
            }
            Ok(())
        })?;
        Ok(set)
    }

    /// Whether a step needs the general layout walker: a copy, elementwise
    /// op or matmul not in flat form (a batched matmul, or operands that
    /// do not merge into two dimensions). A plan without such steps
    /// replays on a `Replayer` with `STRIDED = false`.
    ///
    /// # Errors
    /// A corrupt step (never for a validated plan).
    pub fn strided(&self) -> Result<bool> {
        let mut strided = false;
        self.for_each_step(|s| {
            strided |= s.kernel & kernel::FLAT == 0
                && matches!(
                    s.kernel,
                    kernel::COPY | kernel::UNARY | kernel::BINARY | kernel::MATMUL
                );
            Ok(())
        })?;
        Ok(strided)
    }

    /// Replays the plan with every kernel linked and the accumulation it
    /// was traced with ([`Replayer::run`]).
    ///
    /// # Errors
    /// As [`Replayer::new`] and [`Replayer::run`].
    pub fn run(&self, arena: &mut [u8], binds: &mut [Bind<'_>]) -> Result<()> {
        if self.f32_accumulation() {
            Replayer::<{ ops::ALL }, true>::new(self)?.run(arena, binds)
        } else {
            Replayer::<{ ops::ALL }, false>::new(self)?.run(arena, binds)
        }
    }
}

/// Where a replay's buffers are: the arena's base, each binding's pointer
/// (by binding index), and the plan's constants.
struct Mem<'p, 'b> {
    plan: PlanRef<'p>,
    base: *mut u8,
    bound: &'b [*mut u8; MAX_BINDINGS],
}

impl Mem<'_, '_> {
    /// The address of buffer `b`'s first byte.
    #[inline]
    fn ptr(&self, b: usize) -> Result<*mut u8> {
        let e = self.plan.buffer(b)?;
        Ok(match e.place {
            // Validation put `at + nbytes` inside the arena bytes, which
            // `run` checked the arena holds.
            place::ARENA => self.base.wrapping_add(e.at),
            place::BOUND => *self
                .bound
                .get(e.at)
                .ok_or_else(|| refuse("corrupt bound buffer"))?,
            // Validation put the constant's words inside the plan.
            _ => self
                .plan
                .words
                .as_ptr()
                .wrapping_add(e.at)
                .cast_mut()
                .cast(),
        })
    }

    /// Typed pointers to a step's operands: `N - 1` sources, then the
    /// destination.
    #[inline]
    fn ptrs<T, const N: usize>(&self, v: &[View<'_>; N]) -> Result<[*mut T; N]> {
        let mut out = [core::ptr::null_mut(); N];
        for (o, v) in out.iter_mut().zip(v) {
            *o = self.ptr(v.buf)?.cast();
        }
        Ok(out)
    }

    /// An f32 operand's first element in a flat step.
    #[inline]
    fn at(&self, buf: u32, offset: u32) -> Result<*mut f32> {
        Ok(self
            .ptr(buf as usize)?
            .cast::<f32>()
            .wrapping_add(offset as usize))
    }

    /// A flat step (NOTE [Plan words]).
    fn flat<const OPS: u128>(&self, s: &Step<'_>) -> Result<()> {
        // NOTE [Replay on raw pointers]: validation checked each flat
        // operand's reach for its dimensions, so every pointer below stays
        // inside its buffer.
        {
            match (s.kernel & !kernel::FLAT, s.operand_words) {
                (kernel::MATMUL, &[m, n, k, ab, ao, ar, ac, bb, bo, br, bc, ref rest @ ..])
                    if OPS & ops::MATMUL != 0 =>
                {
                    let u = |x: u32| x as usize;
                    let mnk = [u(m), u(n), u(k)];
                    let a = (self.at(ab, ao)?.cast_const(), u(ar), u(ac));
                    let b = (self.at(bb, bo)?.cast_const(), u(br), u(bc));
                    match *rest {
                        [db, d_o, dr, dc] => {
                            let d = (self.at(db, d_o)?, u(dr), u(dc));
                            // SAFETY: the note's; `d` is disjoint from `a`
                            // and `b` (validated).
                            unsafe { small_product::<f32>(mnk, a, b, d, |c, _| c) };
                        }
                        // NOTE [Fused epilogues]
                        [eb, eo, er, ec, db, d_o, dr, dc] => {
                            let (bin, swap, un) =
                                fused_ops(s.params).ok_or_else(|| refuse("corrupt matmul step"))?;
                            let f = bin.float_fn_in::<f32, OPS>();
                            let g = un.map(|u| u.float_fn_in::<f32, OPS>());
                            let (pe, er, ec) = (self.at(eb, eo)?, u(er), u(ec));
                            let d = (self.at(db, d_o)?, u(dr), u(dc));
                            let out = |c, [i, j]: [usize; 2]| {
                                // SAFETY: the note's: `e` is `[m, n]` like
                                // `d`, read before `d` is written.
                                let e = unsafe { *pe.wrapping_add(i * er + j * ec) };
                                let v = if swap { f(e, c) } else { f(c, e) };
                                g.map_or(v, |g| g(v))
                            };
                            // SAFETY: as above.
                            unsafe { small_product::<f32>(mnk, a, b, d, out) };
                        }
                        _ => return Err(refuse("corrupt flat step")),
                    }
                }
                (kernel::BINARY, &[n0, n1, ab, ao, a0, a1, bb, bo, b0, b1, db, d_o, d0, d1])
                    if OPS & ops::BINARY != 0 =>
                {
                    let f = binary_of(s)?.float_fn_in::<f32, OPS>();
                    let (a, b, d) = (self.at(ab, ao)?, self.at(bb, bo)?, self.at(db, d_o)?);
                    // SAFETY: the note's; sources are read before the
                    // destination is written (exactly in place at most).
                    unsafe { strided::grid3([n0, n1], (a, a0, a1), (b, b0, b1), (d, d0, d1), f) };
                }
                (kernel::UNARY, &[n0, n1, ab, ao, a0, a1, db, d_o, d0, d1])
                    if OPS & ops::UNARY != 0 =>
                {
                    let f = decode_unary(s.params)
                        .ok_or_else(|| refuse("corrupt unary step"))?
                        .float_fn_in::<f32, OPS>();
                    let (a, d) = (self.at(ab, ao)?, self.at(db, d_o)?);
                    // SAFETY: as for binary.
                    unsafe { strided::grid2([n0, n1], (a, a0, a1), (d, d0, d1), f) };
                }
                (kernel::COPY, &[n0, n1, ab, ao, a0, a1, db, d_o, d0, d1])
                    if OPS & ops::COPY != 0 =>
                {
                    let (a, d) = (self.at(ab, ao)?, self.at(db, d_o)?);
                    // SAFETY: as for binary.
                    unsafe { strided::grid2([n0, n1], (a, a0, a1), (d, d0, d1), |x| x) };
                }
                _ => return Err(refuse("corrupt flat step")),
            }
        }
        Ok(())
    }

    /// [`strided::map`] over a step's two views (`a` exactly `d` or
    /// disjoint: validated).
    ///
    /// # Safety
    /// NOTE [Replay on raw pointers] for the step's operands.
    #[inline]
    unsafe fn map<T: Copy, F: Fn(T) -> T>(&self, v: &[View<'_>; 2], f: F) -> Result<()> {
        let [a, d] = self.ptrs::<T, 2>(v)?;
        // SAFETY: the caller's.
        unsafe { strided::map(&v.map(|x| x.strided()), a.cast_const(), d, f) };
        Ok(())
    }

    fn step<const OPS: u128, const F32_ACC: bool, const STRIDED: bool>(
        &self,
        s: &Step<'_>,
    ) -> Result<()> {
        if s.kernel & kernel::FLAT != 0 {
            return self.flat::<OPS>(s);
        }
        // SAFETY: (every kernel call below) NOTE [Replay on raw pointers]:
        // each operand's walk stays inside its buffer, the pointers are
        // valid for those bytes and aligned for their dtype (arena offsets
        // 16-aligned, bound slices f32, constants words, bool/u8 align 1),
        // sources are disjoint from the destination or exactly it, and the
        // destination is writable memory.
        unsafe {
            match s.kernel {
                kernel::FILL if OPS & ops::FILL != 0 => {
                    let v @ [d] = s.views::<1>()?;
                    let x = f64::from_bits(u64::from(s.params[0]) | (u64::from(s.params[1]) << 32));
                    if d.dtype == BOOL {
                        let [pd] = self.ptrs::<u8, 1>(&v)?;
                        strided::fill(d.strided(), pd, u8::from(x != 0.0));
                    } else {
                        let [pd] = self.ptrs::<f32, 1>(&v)?;
                        strided::fill(d.strided(), pd, <f32 as Scalar>::from_f64(x));
                    }
                }
                kernel::ZERO => {
                    let [d] = s.views::<1>()?;
                    let n = self.plan.buffer(d.buf)?.nbytes;
                    core::ptr::write_bytes(self.ptr(d.buf)?, 0, n);
                }
                kernel::WRITE => {
                    let [d] = s.views::<1>()?;
                    let (off, at, len) = (
                        s.params[0] as usize,
                        s.params[1] as usize,
                        s.params[2] as usize,
                    );
                    let data = self.plan.constant(at, len)?;
                    // Validation: `off + len` lies inside the buffer.
                    core::ptr::copy_nonoverlapping(
                        data.as_ptr(),
                        self.ptr(d.buf)?.wrapping_add(off),
                        len,
                    );
                }
                kernel::COPY if STRIDED && OPS & ops::COPY != 0 => {
                    let v @ [_, d] = s.views::<2>()?;
                    // Copies move bits: an i32 as an f32 word, an i64 as
                    // two words (its constants are only word-aligned).
                    match d.dtype {
                        F32 | I32 => self.map::<f32, _>(&v, |x| x)?,
                        I64 => self.map::<[u32; 2], _>(&v, |x| x)?,
                        _ => self.map::<u8, _>(&v, |x| x)?,
                    }
                }
                kernel::UNARY if STRIDED && OPS & ops::UNARY != 0 => {
                    let v = s.views::<2>()?;
                    let op = decode_unary(s.params).ok_or_else(|| refuse("corrupt unary step"))?;
                    self.map::<f32, _>(&v, op.float_fn_in::<f32, OPS>())?;
                }
                kernel::BINARY if STRIDED && OPS & ops::BINARY != 0 => {
                    let v = s.views::<3>()?;
                    let f = binary_of(s)?.float_fn_in::<f32, OPS>();
                    let [a, b, d] = self.ptrs::<f32, 3>(&v)?;
                    strided::zip(
                        &v.map(|x| x.strided()),
                        a.cast_const(),
                        b.cast_const(),
                        d,
                        f,
                    );
                }
                kernel::COMPARE if OPS & ops::COMPARE != 0 => {
                    let v = s.views::<3>()?;
                    let f = compare_of(s)?.fn_of::<f32>();
                    let [a, b, _] = self.ptrs::<f32, 3>(&v)?;
                    let [_, _, d] = self.ptrs::<u8, 3>(&v)?;
                    let vs = v.map(|x| x.strided());
                    strided::zip(&vs, a.cast_const(), b.cast_const(), d, |x, y| {
                        u8::from(f(x, y))
                    });
                }
                kernel::WHERE if OPS & ops::WHERE != 0 => {
                    let v = s.views::<4>()?;
                    let [c, _, _, _] = self.ptrs::<u8, 4>(&v)?;
                    let [_, t, f, d] = self.ptrs::<f32, 4>(&v)?;
                    let vs = v.map(|x| x.strided());
                    strided::select(&vs, c.cast_const(), t.cast_const(), f.cast_const(), d);
                }
                kernel::REDUCE if OPS & ops::REDUCE != 0 => {
                    if F32_ACC {
                        self.reduce::<Kahan32>(s)?;
                    } else {
                        self.reduce::<f64>(s)?;
                    }
                }
                kernel::MATMUL if STRIDED && OPS & ops::MATMUL != 0 => {
                    let v = s.views::<3>()?;
                    matmul(&v, self.ptrs(&v)?);
                }
                kernel::SOFTMAX if OPS & ops::SOFTMAX != 0 => self.softmax::<F32_ACC>(s)?,
                kernel::SOFTMAX_BACKWARD if OPS & ops::SOFTMAX_BACKWARD != 0 => {
                    self.softmax_backward(s)?;
                }
                k if OPS & family::BITS != 0 && family::is_family_code(k) => {
                    self.family::<OPS>(s)?;
                }
                // A kernel this replayer was built without (`new` refused
                // such plans) links no code.
                _ => return Err(refuse("corrupt step")),
            }
        }
        Ok(())
    }

    /// Softmax rows with the eager kernel's row arithmetic (NOTE [One
    /// softmax row]), read straight from the source: a row's element `k`
    /// is written only after its last read, so an exactly-in-place step
    /// is safe.
    fn softmax<const F32_ACC: bool>(&self, s: &Step<'_>) -> Result<()> {
        let v @ [a, _] = s.views::<2>()?;
        let (dim, log) = (s.params[0] as usize, s.params[1] != 0);
        if dim >= a.shape.len() {
            return Err(refuse("corrupt softmax step"));
        }
        let [pa, pd] = self.ptrs::<f32, 2>(&v)?;
        let vs = v.map(|x| x.strided());
        // SAFETY: NOTE [Replay on raw pointers]: the views' walks stay
        // inside their buffers, which are disjoint or exactly the same
        // (validated), and `dim` is a dimension of both.
        unsafe {
            if F32_ACC {
                softmax_strided_f32(&vs, dim, log, pa.cast_const(), pd);
            } else {
                softmax_strided_f64(&vs, dim, log, pa.cast_const(), pd);
            }
        }
        Ok(())
    }

    /// The fused softmax backward of contiguous `[rows, n]` operands: the
    /// reference kernel's own rows (NOTE [Slice-level kernels]).
    fn softmax_backward(&self, s: &Step<'_>) -> Result<()> {
        let [g, y, d] = s.views::<3>()?;
        let log = s.params[0] != 0;
        let total = match *d.shape {
            [r, n] => (r as usize).saturating_mul(n as usize),
            _ => return Err(refuse("corrupt softmax backward step")),
        };
        let n = d.shape.get(1).map_or(0, |&n| n as usize);
        // SAFETY: the sources are disjoint from the destination (validated),
        // so the one `&mut` aliases nothing.
        let (gs, ys, ds) = unsafe {
            (
                typed::<f32>(self.bytes(g.buf)?)?,
                typed::<f32>(self.bytes(y.buf)?)?,
                typed_mut::<f32>(self.bytes_mut(d.buf)?)?,
            )
        };
        let run = |x: &View<'_>| x.offset..x.offset.saturating_add(total);
        let bad = || refuse("corrupt softmax backward step");
        softmax_backward_rows(
            gs.get(run(&g)).ok_or_else(bad)?,
            ys.get(run(&y)).ok_or_else(bad)?,
            ds.get_mut(run(&d)).ok_or_else(bad)?,
            n,
            log,
        );
        Ok(())
    }

    /// A reduction: the reference backend's own walk (NOTE [One
    /// reduction walk]) on the step's buffers, the accumulators in the
    /// step's arena scratch.
    fn reduce<A: Acc>(&self, s: &Step<'_>) -> Result<()> {
        let v @ [a, d] = s.views::<2>()?;
        let op = super::format::REDUCE_OPS
            .get(s.params[0] as usize)
            .copied()
            .ok_or_else(|| refuse("corrupt reduce step"))?;
        let n = d
            .shape
            .iter()
            .fold(1usize, |n, &x| n.saturating_mul(x as usize));
        let scratch = self.plan.buffer(s.params[2] as usize)?.nbytes;
        if n.checked_mul(size_of::<A>())
            .is_none_or(|need| need > scratch)
        {
            return Err(refuse("corrupt reduction scratch"));
        }
        let [pa, pd] = self.ptrs::<f32, 2>(&v)?;
        let ps = self.ptr(s.params[2] as usize)?;
        // SAFETY: NOTE [Replay on raw pointers]: the scratch is an arena
        // buffer (16-aligned) of at least `n` accumulators, disjoint from
        // the operands (validated), and every bit pattern is a valid `A`
        // (f64, or two f32); it is filled before it is read. The source's
        // and the destination's walks stay inside their buffers, which
        // are disjoint.
        unsafe {
            let acc = core::slice::from_raw_parts_mut(ps.cast::<A>(), n);
            acc.fill(A::identity(op));
            accumulate_strided(op, pa.cast_const(), a.strided(), d.shape, s.params[1], acc);
            store_strided(acc, pd, d.strided());
        }
        Ok(())
    }
}

/// The plan's dtype codes the kernels tell apart (format.rs `dtype_code`).
const F32: u32 = 0;
const BOOL: u32 = 1;
const I64: u32 = 3;
const I32: u32 = 4;

/// [`Walk::new`] over a step's views.
#[inline(always)]
fn walk_of<const N: usize>(shape: &[u32], v: &[View<'_>; N]) -> Walk<N> {
    Walk::new(shape, &v.map(|x| x.strided()))
}

/// `d = a @ b` (batch dims already broadcast), summing as the blocked
/// reference kernel does: per `KC`-deep block from zero, blocks added to a
/// zero total in order (NOTE [Blocked matmul]).
///
/// # Safety
/// NOTE [Replay on raw pointers]; validation checked the shapes agree
/// (rank ≥ 2, `a` is `[.., m, k]`, `b` `[.., k, n]`, `d` `[.., m, n]`) and
/// that `d` is disjoint from `a` and `b`.
unsafe fn matmul(v: &[View<'_>; 3], [a, b, d]: [*mut f32; 3]) {
    let [va, vb, vd] = v;
    let r = vd.shape.len();
    let dim = |v: &View<'_>, i: usize| -> (usize, usize) {
        (
            v.shape.get(i).map_or(0, |&x| x as usize),
            v.strides.get(i).map_or(0, |&x| x as usize),
        )
    };
    let ((m, drs), (n, dcs)) = (dim(vd, r.wrapping_sub(2)), dim(vd, r.wrapping_sub(1)));
    let ((_, ars), (k, acs)) = (dim(va, r.wrapping_sub(2)), dim(va, r.wrapping_sub(1)));
    let ((_, brs), (_, bcs)) = (dim(vb, r.wrapping_sub(2)), dim(vb, r.wrapping_sub(1)));
    let batch = vd.shape.get(..r.saturating_sub(2)).unwrap_or(&[]);
    let body = |[oa, ob, od]: [usize; 3]| {
        // SAFETY: the caller's, for this batch entry's matrices.
        unsafe {
            small_product::<f32>(
                [m, n, k],
                (a.wrapping_add(oa).cast_const(), ars, acs),
                (b.wrapping_add(ob).cast_const(), brs, bcs),
                (d.wrapping_add(od), drs, dcs),
                |c, _| c,
            );
        }
    };
    if batch.is_empty() {
        body([va.offset, vb.offset, vd.offset]);
    } else {
        let w = walk_of(batch, v);
        w.each(w.rank, body);
    }
}
