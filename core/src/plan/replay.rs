//! Replay: a plan's kernels run straight on the arena and the bound
//! slices, with no allocation, no reference counting and no autograd.
//!
//! The kernels here are the reference CPU kernels' arithmetic on slices:
//! elementwise ops call the op table's scalar functions
//! ([`UnaryOp::float_fn_in`], ...), reductions the shared
//! [`accumulate`](crate::cpu::reduce) with the same accumulator, and the
//! matrix product sums in the same order as the blocked `matmul` (per
//! `KC`-deep block from zero, blocks added in order). So a replay's bits
//! are the eager device's bits.

use super::Role;
use super::format::{ARENA_ALIGN, MAX_BINDINGS, Opnd, PlanRef, Step, kernel, place, unary_of};
use crate::backend::{BinaryOp, CmpOp};
use crate::cpu::matmul::KC;
use crate::cpu::ops;
use crate::cpu::reduce::{Acc, Kahan32, accumulate, store_into};
use crate::dtype::Scalar;
use crate::error::{Error, Result};
use crate::layout::{Layout, walk};

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

    /// The binding's name.
    pub fn name(&self) -> &'a str {
        match self {
            Bind::In(n, _) | Bind::Out(n, _) => n,
        }
    }

    fn len(&self) -> usize {
        match self {
            Bind::In(_, d) => d.len(),
            Bind::Out(_, d) => d.len(),
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

/// Runs plans with the kernels a firmware image links: `OPS` (a set of
/// [`ops`] bits, as for [`CpuBackend`](crate::cpu::CpuBackend)) and f32
/// accumulation `F32_ACC`. A plan traced on a device with another
/// accumulation, or using an op outside `OPS`, is refused before anything
/// runs.
///
/// ```
/// use kael_core::cpu::ops;
/// use kael_core::plan::{Accumulation, Binding, Bind, Plan, Replayer, Tracer};
/// use kael_core::Tensor;
/// let tracer = Tracer::new(Accumulation::F32);
/// let x = Tensor::from_slice(&[1.0f32, -2.0], &[2], &tracer.device())?;
/// let (y, rec) = tracer.record(|| x.relu())?;
/// let plan = Plan::build(&rec, &[Binding::input("x", &x), Binding::output("y", &y)])?;
/// let mut out = [0.0f32; 2];
/// Replayer::<{ ops::RELU }, true>::run(&plan.as_ref(), &mut [], &mut [
///     Bind::input("x", &[4.0, -1.0]),
///     Bind::output("y", &mut out),
/// ])?;
/// assert_eq!(out, [4.0, 0.0]);
/// // Without relu linked, the plan is refused before it runs.
/// assert!(Replayer::<{ ops::ADD }, true>::check(&plan.as_ref()).is_err());
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug)]
pub struct Replayer<const OPS: u128 = { ops::ALL }, const F32_ACC: bool = false>;

impl<const OPS: u128, const F32_ACC: bool> Replayer<OPS, F32_ACC> {
    /// Whether this replayer runs `plan`: same accumulation, every op
    /// linked.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the plan was traced with the other
    /// accumulation; [`Error::Unsupported`] naming an op or family that
    /// `OPS` lacks.
    pub fn check(plan: &PlanRef<'_>) -> Result<()> {
        if plan.f32_accumulation() != F32_ACC {
            return Err(refuse(if F32_ACC {
                "the plan was traced on a device that sums f32 in f64 (Accumulation::F64); trace it with Accumulation::F32 to replay it here, or replay with F32_ACC = false"
            } else {
                "the plan was traced on a device that sums f32 in f32 (Accumulation::F32); trace it with Accumulation::F64 to replay it here, or replay with F32_ACC = true"
            }));
        }
        let missing = |op: &'static str| Error::Unsupported {
            op,
            device: crate::DeviceKind::Cpu,
        };
        plan.for_each_step(|s| {
            let (bit, name) = step_bit(&s)?;
            if OPS & bit != bit {
                return Err(missing(name));
            }
            Ok(())
        })
    }

    /// Replays `plan` on `arena` (at least [`PlanRef::arena_bytes`]
    /// bytes, 16-byte aligned: [`Arena`]) with `binds` supplying every
    /// binding by name. Everything is checked before the first kernel
    /// runs, so a refused replay changes nothing.
    ///
    /// # Errors
    /// As [`Replayer::check`]; [`Error::InvalidArgument`] when the arena
    /// is too small or misaligned, a binding is missing, unknown, read-only
    /// where the plan writes, or of another length than traced (trace and
    /// plan again for a new shape).
    pub fn run(plan: &PlanRef<'_>, arena: &mut [u8], binds: &mut [Bind<'_>]) -> Result<()> {
        Self::check(plan)?;
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
        let n = plan.n_bindings();
        if binds.len() != n {
            return Err(refuse(
                "the number of binds differs from the plan's bindings; pass one Bind per binding (PlanRef::binding lists them)",
            ));
        }
        let mut map = [0u8; MAX_BINDINGS];
        plan.for_each_binding(|i, (name, role, buf)| {
            let j = binds
                .iter()
                .position(|b| b.name() == name)
                .ok_or(refuse(
                    "a binding of the plan has no Bind of its name; bind every name PlanRef::binding lists",
                ))?;
            if role != Role::Input && matches!(binds[j], Bind::In(..)) {
                return Err(refuse(
                    "an output or state binding was given read-only; pass it with Bind::output or Bind::state",
                ));
            }
            if binds[j].len().checked_mul(4) != Some(plan.buffer(buf)?.nbytes) {
                return Err(refuse(
                    "a bound slice's length differs from the traced tensor's; trace and plan again for the new shape",
                ));
            }
            map[i] = j as u8;
            Ok(())
        })?;
        let base = arena.as_mut_ptr();
        let mut mem = Mem {
            plan,
            base,
            binds,
            map: &map,
        };
        plan.for_each_step(|s| mem.step::<OPS, F32_ACC>(&s))
    }
}

/// The kernel-selection bit a step needs and its op's name (0 for writes
/// and zeroing, which are always linked).
fn step_bit(s: &Step<'_>) -> Result<(u128, &'static str)> {
    Ok(match s.kernel {
        kernel::FILL => (ops::FILL, "fill"),
        kernel::COPY => (ops::COPY, "copy"),
        kernel::UNARY => {
            let op = unary_of(s.params).ok_or(refuse("corrupt unary step"))?;
            (op.bit(), op.name())
        }
        kernel::BINARY => {
            let op = binary_of(s)?;
            (op.bit(), op.name())
        }
        kernel::COMPARE => (ops::COMPARE, "compare"),
        kernel::WHERE => (ops::WHERE, "where"),
        kernel::REDUCE => (ops::REDUCE, "reduce"),
        kernel::MATMUL => (ops::MATMUL, "matmul"),
        _ => (0, "write"),
    })
}

fn binary_of(s: &Step<'_>) -> Result<BinaryOp> {
    s.params
        .first()
        .and_then(|&c| BinaryOp::ALL.get(c as usize).copied())
        .ok_or(refuse("corrupt binary step"))
}

fn compare_of(s: &Step<'_>) -> Result<CmpOp> {
    s.params
        .first()
        .and_then(|&c| CmpOp::ALL.get(c as usize).copied())
        .ok_or(refuse("corrupt compare step"))
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
            set |= step_bit(&s)?.0;
            Ok(())
        })?;
        Ok(set)
    }

    /// Replays the plan with every kernel linked and the accumulation it
    /// was traced with ([`Replayer::run`]).
    ///
    /// # Errors
    /// As [`Replayer::run`].
    pub fn run(&self, arena: &mut [u8], binds: &mut [Bind<'_>]) -> Result<()> {
        if self.f32_accumulation() {
            Replayer::<{ ops::ALL }, true>::run(self, arena, binds)
        } else {
            Replayer::<{ ops::ALL }, false>::run(self, arena, binds)
        }
    }
}

/// Where a replay's operands are.
struct Mem<'p, 'b, 'c> {
    plan: &'p PlanRef<'p>,
    base: *mut u8,
    binds: &'b mut [Bind<'c>],
    map: &'b [u8; MAX_BINDINGS],
}

/// A source: its own slice, or the destination itself (exactly in place).
enum In<'a, T> {
    Slice(&'a [T]),
    Dst,
}

impl Mem<'_, '_, '_> {
    /// The address and byte length of buffer `b`.
    fn locate(&mut self, b: usize) -> Result<(*mut u8, usize)> {
        let e = self.plan.buffer(b)?;
        Ok(match e.place {
            place::ARENA => {
                // SAFETY: validation put `at + nbytes` inside the plan's
                // arena bytes, and `run` checked the arena holds them.
                (unsafe { self.base.add(e.at) }, e.nbytes)
            }
            place::BOUND => {
                let j = usize::from(self.map[e.at]);
                match &mut self.binds[j] {
                    Bind::In(_, d) => (d.as_ptr().cast_mut().cast(), e.nbytes),
                    Bind::Out(_, d) => (d.as_mut_ptr().cast(), e.nbytes),
                }
            }
            _ => (
                self.plan.constant(e.at, e.nbytes)?.as_ptr().cast_mut(),
                e.nbytes,
            ),
        })
    }

    /// The destination's elements.
    ///
    /// # Safety
    /// No other live reference may overlap the buffer (validation: a step's
    /// buffers are exactly equal or disjoint, and destinations are never
    /// inputs or constants, so the pointer came from writable memory).
    unsafe fn dst<'x, T: bytemuck::Pod>(&mut self, o: &Opnd) -> Result<&'x mut [T]> {
        let (p, n) = self.locate(o.buf)?;
        // SAFETY: `p` is valid for `n` bytes and aligned for `T` (arena
        // offsets are 16-aligned, bound slices are f32, constants words,
        // and bool/u8 need 1); the caller guarantees exclusivity.
        Ok(unsafe { core::slice::from_raw_parts_mut(p.cast::<T>(), n / size_of::<T>()) })
    }

    /// A source's elements, or [`In::Dst`] when it is the destination.
    ///
    /// # Safety
    /// The buffer is not written while the slice lives, unless it is the
    /// destination (then no slice is made).
    unsafe fn src<'x, T: bytemuck::Pod>(&mut self, o: &Opnd, dst: &Opnd) -> Result<In<'x, T>> {
        if o.buf == dst.buf {
            return Ok(In::Dst);
        }
        let (p, n) = self.locate(o.buf)?;
        // SAFETY: as in `dst`; the caller guarantees nothing writes it.
        Ok(In::Slice(unsafe {
            core::slice::from_raw_parts(p.cast_const().cast::<T>(), n / size_of::<T>())
        }))
    }

    fn scratch<'x, A>(&mut self, b: usize, n: usize) -> Result<&'x mut [A]> {
        let (p, bytes) = self.locate(b)?;
        if n.checked_mul(size_of::<A>())
            .is_none_or(|need| need > bytes)
        {
            return Err(refuse("corrupt reduction scratch"));
        }
        // SAFETY: an arena buffer (validated) of at least `n` elements of
        // `A` (8 bytes, align ≤ 8: f64 or Kahan32), 16-aligned, disjoint
        // from the step's operands (validated); every bit pattern is a
        // valid f64/f32 pair, and the caller initialises it first.
        Ok(unsafe { core::slice::from_raw_parts_mut(p.cast::<A>(), n) })
    }

    #[inline(never)]
    fn step<const OPS: u128, const F32_ACC: bool>(&mut self, s: &Step<'_>) -> Result<()> {
        // SAFETY: (every `dst`/`src` below) PlanRef validation made each
        // step's buffers exactly equal or disjoint and its destination
        // writable; a source equal to the destination comes back as
        // `In::Dst`, so no slice overlaps the `&mut` destination.
        unsafe {
            match s.kernel {
                kernel::FILL if OPS & ops::FILL != 0 => {
                    let [d] = s.operands::<1>()?;
                    let v = f64::from_bits(u64::from(s.params[0]) | (u64::from(s.params[1]) << 32));
                    if d.dtype == crate::DType::Bool {
                        let x = u8::from(v != 0.0);
                        let dd = self.dst::<u8>(&d)?;
                        walk([&d.layout], |[od]| dd[od] = x);
                    } else {
                        let x = <f32 as Scalar>::from_f64(v);
                        let dd = self.dst::<f32>(&d)?;
                        walk([&d.layout], |[od]| dd[od] = x);
                    }
                }
                kernel::ZERO => {
                    let [d] = s.operands::<1>()?;
                    self.dst::<u8>(&d)?.fill(0);
                }
                kernel::WRITE => {
                    let [d] = s.operands::<1>()?;
                    let (off, at, len) = (
                        s.params[0] as usize,
                        s.params[1] as usize,
                        s.params[2] as usize,
                    );
                    let data = self.plan.constant(at, len)?;
                    let dd = self.dst::<u8>(&d)?;
                    dd.get_mut(off..off + len)
                        .ok_or(refuse("corrupt write step"))?
                        .copy_from_slice(data);
                }
                kernel::COPY if OPS & ops::COPY != 0 => {
                    let [a, d] = s.operands::<2>()?;
                    if d.dtype == crate::DType::F32 {
                        map1::<f32>(
                            self.src(&a, &d)?,
                            &a.layout,
                            self.dst(&d)?,
                            &d.layout,
                            |x| x,
                        );
                    } else {
                        map1::<u8>(
                            self.src(&a, &d)?,
                            &a.layout,
                            self.dst(&d)?,
                            &d.layout,
                            |x| x,
                        );
                    }
                }
                kernel::UNARY if OPS & ops::UNARY != 0 => {
                    let [a, d] = s.operands::<2>()?;
                    let op = unary_of(s.params).ok_or(refuse("corrupt unary step"))?;
                    let f = op.float_fn_in::<f32, OPS>();
                    map1::<f32>(self.src(&a, &d)?, &a.layout, self.dst(&d)?, &d.layout, f);
                }
                kernel::BINARY if OPS & ops::BINARY != 0 => {
                    let [a, b, d] = s.operands::<3>()?;
                    let f = binary_of(s)?.float_fn_in::<f32, OPS>();
                    let (sa, sb) = (self.src::<f32>(&a, &d)?, self.src::<f32>(&b, &d)?);
                    let dd = self.dst::<f32>(&d)?;
                    walk([&d.layout, &a.layout, &b.layout], |[od, oa, ob]| {
                        let x = match &sa {
                            In::Slice(s) => s[oa],
                            In::Dst => dd[oa],
                        };
                        let y = match &sb {
                            In::Slice(s) => s[ob],
                            In::Dst => dd[ob],
                        };
                        dd[od] = f(x, y);
                    });
                }
                kernel::COMPARE if OPS & ops::COMPARE != 0 => {
                    let [a, b, d] = s.operands::<3>()?;
                    let f = compare_of(s)?.fn_of::<f32>();
                    let (In::Slice(sa), In::Slice(sb)) =
                        (self.src::<f32>(&a, &d)?, self.src::<f32>(&b, &d)?)
                    else {
                        return Err(refuse("corrupt compare step"));
                    };
                    let dd = self.dst::<u8>(&d)?;
                    walk([&d.layout, &a.layout, &b.layout], |[od, oa, ob]| {
                        dd[od] = u8::from(f(sa[oa], sb[ob]));
                    });
                }
                kernel::WHERE if OPS & ops::WHERE != 0 => {
                    let [c, t, f, d] = s.operands::<4>()?;
                    let (In::Slice(sc), In::Slice(st), In::Slice(sf)) = (
                        self.src::<u8>(&c, &d)?,
                        self.src::<f32>(&t, &d)?,
                        self.src::<f32>(&f, &d)?,
                    ) else {
                        return Err(refuse("corrupt where step"));
                    };
                    let dd = self.dst::<f32>(&d)?;
                    walk(
                        [&d.layout, &c.layout, &t.layout, &f.layout],
                        |[od, oc, ot, of]| dd[od] = if sc[oc] != 0 { st[ot] } else { sf[of] },
                    );
                }
                kernel::REDUCE if OPS & ops::REDUCE != 0 => {
                    let [a, d] = s.operands::<2>()?;
                    if F32_ACC {
                        self.reduce::<Kahan32>(s, &a, &d)?;
                    } else {
                        self.reduce::<f64>(s, &a, &d)?;
                    }
                }
                kernel::MATMUL if OPS & ops::MATMUL != 0 => {
                    let [a, b, d] = s.operands::<3>()?;
                    let (In::Slice(sa), In::Slice(sb)) =
                        (self.src::<f32>(&a, &d)?, self.src::<f32>(&b, &d)?)
                    else {
                        return Err(refuse("corrupt matmul step"));
                    };
                    matmul(sa, &a.layout, sb, &b.layout, self.dst(&d)?, &d.layout)?;
                }
                // A kernel this replayer was built without (`check` refused
                // such plans) links no code.
                _ => return Err(refuse("corrupt step")),
            }
        }
        Ok(())
    }

    fn reduce<A: Acc>(&mut self, s: &Step<'_>, a: &Opnd, d: &Opnd) -> Result<()> {
        let op = super::format::REDUCE_OPS
            .get(s.params[0] as usize)
            .copied()
            .ok_or(refuse("corrupt reduce step"))?;
        let mask = s.params[1];
        let mut dims = [0usize; crate::MAX_RANK];
        let mut nd = 0;
        for (k, slot) in (0..a.layout.rank())
            .filter(|&k| mask & (1 << k) != 0)
            .zip(dims.iter_mut())
        {
            *slot = k;
            nd += 1;
        }
        let acc = self.scratch::<A>(s.params[2] as usize, d.layout.numel())?;
        acc.fill(A::identity(op));
        // SAFETY: the source and destination are distinct buffers of this
        // step (validation refuses a reduction in place), disjoint from the
        // scratch.
        let (In::Slice(sa), dd) = (unsafe { self.src::<f32>(a, d)? }, unsafe {
            self.dst::<f32>(d)?
        }) else {
            return Err(refuse("corrupt reduce step"));
        };
        accumulate(op, sa, &a.layout, &d.layout, &dims[..nd], acc);
        store_into(acc, dd, &d.layout);
        Ok(())
    }
}

/// `d = f(a)` elementwise, `a` possibly `d` itself.
fn map1<T: Copy>(a: In<'_, T>, la: &Layout, d: &mut [T], ld: &Layout, f: impl Fn(T) -> T) {
    match a {
        In::Slice(s) => walk([ld, la], |[od, oa]| d[od] = f(s[oa])),
        In::Dst => walk([ld], |[od]| d[od] = f(d[od])),
    }
}

/// `d = a @ b` (batch dims already broadcast), summing as the blocked
/// reference kernel does: per `KC`-deep block from zero, blocks added to a
/// zero total in order (NOTE [Blocked matmul]).
fn matmul(
    a: &[f32],
    la: &Layout,
    b: &[f32],
    lb: &Layout,
    d: &mut [f32],
    ld: &Layout,
) -> Result<()> {
    let r = ld.rank();
    let (m, n, k) = (ld.shape()[r - 2], ld.shape()[r - 1], la.shape()[r - 1]);
    let (ars, acs) = (la.strides()[r - 2], la.strides()[r - 1]);
    let (brs, bcs) = (lb.strides()[r - 2], lb.strides()[r - 1]);
    let (drs, dcs) = (ld.strides()[r - 2], ld.strides()[r - 1]);
    let batch = |l: &Layout| Layout::new(&ld.shape()[..r - 2], &l.strides()[..r - 2], l.offset());
    let (bd, ba, bb) = (batch(ld)?, batch(la)?, batch(lb)?);
    if m == 0 || n == 0 {
        return Ok(());
    }
    walk([&bd, &ba, &bb], |[od, oa, ob]| {
        for i in 0..m {
            let arow = oa + i * ars;
            for j in 0..n {
                let bcol = ob + j * bcs;
                let mut c = 0.0f32;
                let mut p0 = 0;
                while p0 < k {
                    let end = (p0 + KC).min(k);
                    let mut t = 0.0f32;
                    for p in p0..end {
                        t += a[arow + p * acs] * b[bcol + p * brs];
                    }
                    c += t;
                    p0 = end;
                }
                d[od + i * drs + j * dcs] = c;
            }
        }
    });
    Ok(())
}
