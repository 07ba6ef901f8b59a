//! The serialised plan: little-endian `u32` words, validated once.
//!
//! NOTE [Plan words]
//! ```text
//! header    MAGIC VERSION flags arena_bytes n_buffers n_bindings n_steps n_words
//! buffers   n_buffers x [place, where, nbytes]
//!             place ARENA: where = byte offset in the arena (16-aligned)
//!             place BOUND: where = binding index
//!             place CONST: where = word index of the data in this plan
//! bindings  n_bindings x [role | dtype << 8, buffer, name_len, name bytes padded to words]
//!             dtype: 0 (f32), or 3 (i64) or 4 (i32) for an index input,
//!             or 3 for i64 state (a counter)
//! steps     n_steps x [n_words, kernel, n_params, params.., n_operands, operands..]
//!             operand = [buffer, dtype, rank, offset, shape[rank], strides[rank]]
//!           or, with kernel | FLAT (f32 copy, unary, binary, matmul):
//!             elementwise: n0 n1, then per operand [buffer, offset, s0, s1]
//!             matmul:      m n k, then per operand [buffer, offset, rows' stride, columns' stride]
//! constants the bytes of CONST buffers and of written data, word-aligned
//! ```
//! [`PlanRef::new`] checks everything a replay relies on: every range in
//! the words, every layout's reach inside its buffer (checked arithmetic),
//! every kernel's operand count, dtypes and shapes, that a step's arena
//! buffers are exactly equal or disjoint, and that nothing writes an input
//! or a constant. A replay then indexes without re-checking, so a corrupt
//! plan is an `Err` here and never reaches a kernel.

use super::Role;
use crate::backend::contract::Operand;
use crate::backend::family::{self, declared_rows};
use crate::backend::{BinaryOp, CmpOp, Family, ReduceOp, UnaryOp};
use crate::cpu::strided::{self, Strided};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::shape::{Dims, MAX_RANK};

/// The first word of every plan: `"KPLN"` read little-endian.
pub(crate) const MAGIC: u32 = u32::from_le_bytes(*b"KPLN");
/// The format version this crate writes and reads (2: flat steps).
pub(crate) const VERSION: u32 = 2;
/// Header flag: f32 sums accumulate in f32 (Kahan), not f64.
pub(crate) const FLAG_F32_ACC: u32 = 1;
/// Header length in words.
pub(crate) const HEADER: usize = 8;
/// A softmax step's parameters refused (one text for both kernels).
const BAD_SOFTMAX: &str = "a softmax step's dimension or log flag does not fit its operands";
/// Arena offsets are multiples of this (the f64 reduction scratch and any
/// dtype a kernel reads need at most it).
pub(crate) const ARENA_ALIGN: usize = 16;
/// The most bound tensors one plan may have (a replay resolves names into
/// a fixed array on the stack).
pub const MAX_BINDINGS: usize = 64;

/// Where a buffer lives.
pub(crate) mod place {
    pub(crate) const ARENA: u32 = 0;
    pub(crate) const BOUND: u32 = 1;
    pub(crate) const CONST: u32 = 2;
}

/// Step codes: the family table's (NOTE [Family table]), and the two
/// steps of the plan's own (writes of constant data, zeroing).
pub(crate) mod kernel {
    use crate::backend::Family;
    pub(crate) const FILL: u32 = Family::Fill.plan_codes()[0];
    pub(crate) const COPY: u32 = Family::Copy.plan_codes()[0];
    pub(crate) const UNARY: u32 = Family::Unary.plan_codes()[0];
    pub(crate) const BINARY: u32 = Family::Binary.plan_codes()[0];
    pub(crate) const COMPARE: u32 = Family::Compare.plan_codes()[0];
    pub(crate) const WHERE: u32 = Family::Where.plan_codes()[0];
    pub(crate) const REDUCE: u32 = Family::Reduce.plan_codes()[0];
    pub(crate) const MATMUL: u32 = Family::Matmul.plan_codes()[0];
    /// params: byte offset in the buffer, constant word index, byte length.
    pub(crate) const WRITE: u32 = 8;
    /// Zeroes the whole buffer (a storage allocated zeroed).
    pub(crate) const ZERO: u32 = 9;
    /// params: the dimension, then 1 for log-softmax (0 for softmax).
    pub(crate) const SOFTMAX: u32 = Family::Softmax.plan_codes()[0];
    /// The fused softmax backward of `[rows, n]` operands (grad, out, dx);
    /// params: 1 for log-softmax (0 for softmax).
    pub(crate) const SOFTMAX_BACKWARD: u32 = Family::SoftmaxBackward.plan_codes()[0];
    /// `dst = src as dst.dtype` (any two of the plan's dtypes).
    pub(crate) const CAST: u32 = Family::Cast.plan_codes()[0];
    /// argmax/argmin into an `I64` destination; params: 0 for argmax (1
    /// for argmin), the dimension.
    pub(crate) const ARG_REDUCE: u32 = Family::ArgReduce.plan_codes()[0];
    /// `[src, index, dst]`; params: the dimension.
    pub(crate) const INDEX_SELECT: u32 = Family::IndexSelect.plan_codes()[0];
    /// `[src, index, dst]`; params: the dimension.
    pub(crate) const GATHER: u32 = Family::Gather.plan_codes()[0];
    /// `[index, src, dst]`, dst read and written; params: the dimension.
    pub(crate) const INDEX_ADD: u32 = Family::IndexAdd.plan_codes()[0];
    /// `[index, src, dst]`, dst read and written; params: the dimension.
    pub(crate) const SCATTER_ADD: u32 = Family::ScatterAdd.plan_codes()[0];
    /// The fused layer norm, `[src, weight?, bias?, dst, stats]`; params:
    /// eps as f64 bits (two words), then 1 when weight (bias) is there.
    pub(crate) const LAYER_NORM: u32 = Family::LayerNorm.plan_codes()[0];
    /// Its backward, `[grad, src, stats, weight?, dx, dwb]`; params: 1 when
    /// the weight is there, then an arena scratch buffer of `2n` f64.
    pub(crate) const LAYER_NORM_BACKWARD: u32 = Family::LayerNorm.plan_codes()[1];
    /// `[src, dst]` (`I64`); params: the dimension, 1 when descending, an
    /// arena scratch buffer of `2n` positions (`usize`).
    pub(crate) const ARGSORT: u32 = Family::ArgSort.plan_codes()[0];
    /// Flag on COPY, UNARY, BINARY and MATMUL: the operands are f32 and
    /// flat, at most two dimensions with per-operand strides (NOTE [Plan
    /// words]); the builder writes this form whenever the layouts allow,
    /// so a replay walks them without decoding a layout.
    pub(crate) const FLAT: u32 = 1 << 8;
}

/// The `u32` codes of the dtypes a plan carries.
pub(crate) fn dtype_code(d: DType) -> Option<u32> {
    match d {
        DType::F32 => Some(0),
        DType::Bool => Some(1),
        DType::U8 => Some(2),
        DType::I64 => Some(3),
        DType::I32 => Some(4),
        _ => None,
    }
}

fn dtype_of(code: u32) -> Option<DType> {
    match code {
        0 => Some(DType::F32),
        1 => Some(DType::Bool),
        2 => Some(DType::U8),
        3 => Some(DType::I64),
        4 => Some(DType::I32),
        _ => None,
    }
}

pub(crate) fn role_code(r: Role) -> u32 {
    match r {
        Role::Input => 0,
        Role::Output => 1,
        Role::State => 2,
    }
}

/// A binding's first word: its role, and in bits 8.. its dtype's code
/// (0, f32, for every binding but an index input and an i64 counter in
/// the state: NOTE [Plan words]).
pub(crate) fn binding_word(r: Role, dtype: DType) -> Option<u32> {
    let d = dtype_code(dtype)?;
    let ok = dtype == DType::F32
        || (r == Role::Input && matches!(dtype, DType::I64 | DType::I32))
        || (r == Role::State && dtype == DType::I64);
    ok.then_some(role_code(r) | (d << 8))
}

fn role_of(c: u32) -> Option<Role> {
    let role = match c & 0xFF {
        0 => Role::Input,
        1 => Role::Output,
        2 => Role::State,
        _ => return None,
    };
    // f32, an i64/i32 input, or i64 state (a counter).
    match c >> 8 {
        0 => Some(role),
        3 | 4 if role == Role::Input => Some(role),
        3 if role == Role::State => Some(role),
        _ => None,
    }
}

/// The reduce ops by code.
pub(crate) const REDUCE_OPS: [ReduceOp; 4] =
    [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod];

pub(crate) fn reduce_code(op: ReduceOp) -> u32 {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Max => 1,
        ReduceOp::Min => 2,
        ReduceOp::Prod => 3,
    }
}

/// A unary op as words: code, its two parameters as f64 bits, flags.
pub(crate) fn unary_words(op: UnaryOp) -> [u32; 6] {
    let (p0, p1, fl) = op.cuda_args();
    let (a, b) = (p0.to_bits(), p1.to_bits());
    [
        op.code(),
        a as u32,
        (a >> 32) as u32,
        b as u32,
        (b >> 32) as u32,
        fl as u32,
    ]
}

/// The unary op of [`unary_words`], or `None` when the words name none
/// exactly (validation).
pub(crate) fn unary_of(w: &[u32]) -> Option<UnaryOp> {
    // Only the exact words of an op decode to it (a flag or parameter
    // that the op would not write is a corrupt plan).
    decode_unary(w).filter(|&op| unary_words(op) == *w)
}

/// The unary op words name, trusting validation ([`unary_of`]) to have
/// checked they name it exactly: a replay decodes with this.
pub(crate) fn decode_unary(w: &[u32]) -> Option<UnaryOp> {
    let [code, a0, a1, b0, b1, fl] = *w else {
        return None;
    };
    let p0 = f64::from_bits(u64::from(a0) | (u64::from(a1) << 32));
    let p1 = f64::from_bits(u64::from(b0) | (u64::from(b1) << 32));
    let fl = fl as i32;
    let op = match UnaryOp::plain_from_code(code) {
        Some(op) => op,
        None => [
            UnaryOp::Powf(p0),
            UnaryOp::Clamp((fl & 1 != 0).then_some(p0), (fl & 2 != 0).then_some(p1)),
            UnaryOp::Affine { mul: p0, add: p1 },
            UnaryOp::Softplus(p0, p1),
            UnaryOp::Hardtanh(p0, p1),
            UnaryOp::LeakyRelu(p0),
            UnaryOp::Elu(p0),
        ]
        .into_iter()
        .find(|c| c.code() == code)?,
    };
    Some(op)
}

/// NOTE [Bounded steps]
/// A layout's reach bounds what a step touches but not how long it runs: a
/// stride-0 dimension of 2^32 elements reaches one element. So validation
/// also bounds the work: a destination has no more elements than its
/// buffer (a kernel never writes an element twice), a reduction's source
/// none more than its own, and a matmul's inner dimension is at most the
/// larger of its sources' buffers. Plans the tracer writes always satisfy
/// this (destinations are fresh or exactly in place); a corrupt plan that
/// would spin for hours is refused instead.
///
/// A source read through stride-0 (broadcast) dimensions legitimately
/// does more work than its own buffer holds (`x.expand(..).sum()`), so a
/// source's work is bounded by its own buffer or [`WORK_FLOOR`] (2^26)
/// elements, whichever is more: a corrupt plan still runs for at most
/// seconds, and a plan refuses only a broadcast read of more than 2^26
/// elements from a smaller buffer.
const BOUNDED: &str = "a step does more work than its buffers hold";

/// The work (elements) any source of a step may take regardless of the
/// plan's buffers (NOTE [Bounded steps]).
const WORK_FLOOR: usize = 1 << 26;

/// The binary op, whether the sum is its second operand, and the unary
/// op (if any) of a fused matmul's epilogue (NOTE [Fused epilogues]).
pub(crate) fn fused_ops(params: &[u32]) -> Option<(BinaryOp, bool, Option<UnaryOp>)> {
    let (bin, side, un) = match params {
        [b, s] => (b, s, None),
        [b, s, u @ ..] => (b, s, Some(decode_unary(u)?)),
        _ => return None,
    };
    let side = match side {
        0 => false,
        1 => true,
        _ => return None,
    };
    Some((*BinaryOp::ALL.get(*bin as usize)?, side, un))
}

/// A corrupt-plan error.
pub(crate) fn corrupt(reason: &'static str) -> Error {
    Error::InvalidArgument {
        op: "PlanRef::new",
        reason,
    }
}

/// A decoded operand: its buffer and layout.
pub(crate) struct Opnd {
    pub(crate) buf: usize,
    pub(crate) dtype: DType,
    pub(crate) layout: Layout,
}

/// One decoded step.
#[derive(Clone, Copy)]
pub(crate) struct Step<'a> {
    pub(crate) kernel: u32,
    pub(crate) params: &'a [u32],
    /// The operand words, decoded by [`Step::operand`].
    pub(crate) operand_words: &'a [u32],
    pub(crate) n_operands: usize,
}

impl Step<'_> {
    /// The first `n` (at most 6) operands, decoded into the front of the
    /// array (a step whose operand count its parameters give).
    pub(crate) fn operands_n(&self, n: usize) -> Result<[Opnd; 6]> {
        let mut out: [Opnd; 6] = core::array::from_fn(|_| Opnd {
            buf: usize::MAX,
            dtype: DType::U8,
            layout: Layout::from_dims(Dims::new(), Dims::new(), 0),
        });
        if self.n_operands != n || n > 6 {
            return Err(corrupt("a step has the wrong number of operands"));
        }
        let mut at = 0usize;
        for o in out.iter_mut().take(n) {
            at += decode_operand(self.operand_words.get(at..).unwrap_or(&[]), o)?;
        }
        Ok(out)
    }

    /// The operands, in order (sources, then the destination).
    pub(crate) fn operands<const N: usize>(&self) -> Result<[Opnd; N]> {
        if self.n_operands != N {
            return Err(corrupt("a step has the wrong number of operands"));
        }
        let mut out: [Opnd; N] = core::array::from_fn(|_| Opnd {
            buf: usize::MAX,
            dtype: DType::U8,
            layout: Layout::from_dims(Dims::new(), Dims::new(), 0),
        });
        let mut at = 0usize;
        for o in out.iter_mut() {
            at += decode_operand(self.operand_words.get(at..).unwrap_or(&[]), o)?;
        }
        Ok(out)
    }
}

/// An operand as a replay reads it: borrowed from the plan's words, no
/// [`Layout`] built (validation already checked it).
#[derive(Clone, Copy)]
pub(crate) struct View<'a> {
    pub(crate) buf: usize,
    pub(crate) dtype: u32,
    pub(crate) offset: usize,
    pub(crate) shape: &'a [u32],
    pub(crate) strides: &'a [u32],
}

impl<'a> View<'a> {
    /// The operand's elements, for the shared walks.
    #[inline(always)]
    pub(crate) fn strided(&self) -> crate::cpu::strided::Strided<'a, u32> {
        crate::cpu::strided::Strided {
            offset: self.offset,
            shape: self.shape,
            strides: self.strides,
        }
    }
}

impl<'a> Step<'a> {
    /// The operands as [`View`]s, in order (sources, then the destination).
    #[inline]
    pub(crate) fn views<const N: usize>(&self) -> Result<[View<'a>; N]> {
        let bad = || corrupt("a step's operands run past it");
        if self.n_operands != N {
            return Err(bad());
        }
        let mut w = self.operand_words;
        let mut out = [View {
            buf: 0,
            dtype: 0,
            offset: 0,
            shape: &[],
            strides: &[],
        }; N];
        for v in out.iter_mut() {
            let [buf, dtype, rank, offset, rest @ ..] = w else {
                return Err(bad());
            };
            let rank = *rank as usize;
            let (shape, rest) = rest.split_at_checked(rank).ok_or_else(bad)?;
            let (strides, rest) = rest.split_at_checked(rank).ok_or_else(bad)?;
            *v = View {
                buf: *buf as usize,
                dtype: *dtype,
                offset: *offset as usize,
                shape,
                strides,
            };
            w = rest;
        }
        Ok(out)
    }
}

/// Decodes one operand into `out`; the words it used.
#[inline(never)]
fn decode_operand(w: &[u32], out: &mut Opnd) -> Result<usize> {
    let bad = || corrupt("an operand runs past its step");
    let (&buf, &dt, &rank, &offset) = match w {
        [a, b, c, d, ..] => (a, b, c, d),
        _ => return Err(bad()),
    };
    let rank = rank as usize;
    if rank > MAX_RANK {
        return Err(corrupt("an operand has more than 8 dimensions"));
    }
    let dims = w.get(4..4 + 2 * rank).ok_or_else(bad)?;
    let mut shape = Dims::new();
    let mut strides = Dims::new();
    for i in 0..rank {
        shape.push(dims[i] as usize)?;
        strides.push(dims[rank + i] as usize)?;
    }
    out.dtype = dtype_of(dt).ok_or_else(|| corrupt("an operand has an unknown dtype"))?;
    out.buf = buf as usize;
    out.layout = Layout::from_dims(shape, strides, offset as usize);
    Ok(4 + 2 * rank)
}

/// A buffer's entry.
#[derive(Clone, Copy)]
pub(crate) struct BufEntry {
    pub(crate) place: u32,
    pub(crate) at: usize,
    pub(crate) nbytes: usize,
}

/// A validated plan, borrowed: what a replay reads (NOTE [Plan words]).
///
/// ```
/// use kael_core::plan::{Accumulation, Binding, Bind, Plan, PlanRef, Tracer};
/// use kael_core::Tensor;
/// let tracer = Tracer::new(Accumulation::F64);
/// let x = Tensor::from_slice(&[1.0f32, -2.0], &[2], &tracer.device())?;
/// let (y, rec) = tracer.record(|| x.relu())?;
/// let plan = Plan::build(&rec, &[Binding::input("x", &x), Binding::output("y", &y)])?;
/// let words = plan.words();
/// let view = PlanRef::new(words)?;
/// let mut arena = [0u8; 0];
/// let mut out = [0.0f32; 2];
/// view.run(&mut arena, &mut [Bind::input("x", &[-1.0, 3.0]), Bind::output("y", &mut out)])?;
/// assert_eq!(out, [0.0, 3.0]);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct PlanRef<'a> {
    pub(crate) words: &'a [u32],
}

impl<'a> PlanRef<'a> {
    /// Validates `words` (NOTE [Plan words]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming what is wrong when the words are
    /// not a plan this version of kael wrote.
    pub fn new(words: &'a [u32]) -> Result<Self> {
        let p = Self { words };
        p.validate()?;
        Ok(p)
    }

    /// [`PlanRef::new`] over bytes (e.g. `include_bytes!`), which must be
    /// 4-byte aligned.
    ///
    /// # Errors
    /// As [`PlanRef::new`]; [`Error::InvalidArgument`] when the bytes are
    /// not 4-byte aligned or not whole words.
    pub fn from_bytes(bytes: &'a [u8]) -> Result<Self> {
        let words = bytemuck::try_cast_slice::<u8, u32>(bytes).map_err(|_| Error::InvalidArgument {
            op: "PlanRef::from_bytes",
            reason: "the plan bytes are not whole, 4-byte aligned words; embed them aligned (e.g. in a #[repr(align(4))] struct) or use Plan::from_bytes, which copies",
        })?;
        Self::new(words)
    }

    #[inline]
    fn word(&self, i: usize) -> Result<u32> {
        self.words
            .get(i)
            .copied()
            .ok_or_else(|| corrupt("the plan is shorter than its header says"))
    }

    /// The arena bytes a replay needs: exactly the peak of the buffers the
    /// planner placed there.
    pub fn arena_bytes(&self) -> usize {
        self.words.get(3).copied().unwrap_or(0) as usize
    }

    /// Whether the plan was traced with f32 accumulation.
    pub fn f32_accumulation(&self) -> bool {
        self.words.get(2).copied().unwrap_or(0) & FLAG_F32_ACC != 0
    }

    pub(crate) fn n_buffers(&self) -> usize {
        self.words.get(4).copied().unwrap_or(0) as usize
    }

    /// How many tensors are bound.
    pub fn n_bindings(&self) -> usize {
        self.words.get(5).copied().unwrap_or(0) as usize
    }

    /// How many kernel steps the plan runs.
    pub fn n_steps(&self) -> usize {
        self.words.get(6).copied().unwrap_or(0) as usize
    }

    #[inline]
    pub(crate) fn buffer(&self, b: usize) -> Result<BufEntry> {
        let entry = (b < self.n_buffers())
            .then(|| b.checked_mul(3)?.checked_add(HEADER))
            .flatten()
            .and_then(|i| self.words.get(i..)?.get(..3));
        match entry {
            Some(&[place, at, nbytes]) => Ok(BufEntry {
                place,
                at: at as usize,
                nbytes: nbytes as usize,
            }),
            _ => Err(corrupt("an operand names a buffer the plan does not have")),
        }
    }

    fn bindings_start(&self) -> usize {
        HEADER + 3 * self.n_buffers()
    }

    /// The bound tensors in order: name, role, buffer index and element
    /// count (f32).
    ///
    /// # Errors
    /// A corrupt binding table (never for a validated plan).
    pub fn binding(&self, i: usize) -> Result<(&'a str, Role, usize)> {
        let mut at = self.bindings_start();
        for _ in 0..i {
            at = self.binding_at(at)?.1;
        }
        Ok(self.binding_at(at)?.0)
    }

    /// Calls `f` with each binding in order (one pass over the table).
    pub(crate) fn for_each_binding(
        &self,
        mut f: impl FnMut(usize, (&'a str, Role, usize)) -> Result<()>,
    ) -> Result<()> {
        let mut at = self.bindings_start();
        for i in 0..self.n_bindings() {
            let (b, next) = self.binding_at(at)?;
            f(i, b)?;
            at = next;
        }
        Ok(())
    }

    /// The binding whose entry starts at word `at`, and the word after it.
    fn binding_at(&self, at: usize) -> Result<((&'a str, Role, usize), usize)> {
        let past = || corrupt("a binding's name runs past the plan");
        let role =
            role_of(self.word(at)?).ok_or_else(|| corrupt("a binding has an unknown role"))?;
        let buf = self.word(at + 1)? as usize;
        let len = self.word(at + 2)? as usize;
        let next = (at + 3).checked_add(len.div_ceil(4)).ok_or_else(past)?;
        let name_words = self.words.get(at + 3..next).ok_or_else(past)?;
        let bytes: &'a [u8] = bytemuck::cast_slice(name_words);
        let name = core::str::from_utf8(bytes.get(..len).unwrap_or(&[]))
            .map_err(|_| corrupt("a binding's name is not UTF-8"))?;
        Ok(((name, role, buf), next))
    }

    /// The dtype of binding `i`: f32, or i64/i32 for an index input.
    ///
    /// # Errors
    /// A corrupt binding table (never for a validated plan).
    pub fn binding_dtype(&self, i: usize) -> Result<DType> {
        let mut at = self.bindings_start();
        for _ in 0..i {
            at = self.binding_at(at)?.1;
        }
        dtype_of(self.word(at)? >> 8).ok_or_else(|| corrupt("a binding has an unknown dtype"))
    }

    /// The index, role, buffer and dtype code of the binding named
    /// `name`, comparing bytes (validation checked the names once).
    pub(crate) fn find_binding(&self, name: &str) -> Result<Option<(usize, Role, usize, u32)>> {
        let past = || corrupt("a binding's name runs past the plan");
        let mut at = self.bindings_start();
        for i in 0..self.n_bindings() {
            let len = self.word(at + 2)? as usize;
            let next = (at + 3).checked_add(len.div_ceil(4)).ok_or_else(past)?;
            let words = self.words.get(at + 3..next).ok_or_else(past)?;
            let bytes: &[u8] = bytemuck::cast_slice(words);
            // Compared by hand: names are short, and a call to `memcmp`
            // costs more than the loop.
            let same = len == name.len()
                && bytes
                    .iter()
                    .zip(name.as_bytes())
                    .try_for_each(|(a, b)| if a == b { Some(()) } else { None })
                    .is_some();
            if same {
                let w = self.word(at)?;
                let role = role_of(w).ok_or_else(|| corrupt("a binding has an unknown role"))?;
                return Ok(Some((i, role, self.word(at + 1)? as usize, w >> 8)));
            }
            at = next;
        }
        Ok(None)
    }

    pub(crate) fn steps_start(&self) -> Result<usize> {
        let mut at = self.bindings_start();
        for _ in 0..self.n_bindings() {
            at = self.binding_at(at)?.1;
        }
        Ok(at)
    }

    /// Calls `f` with each step in order.
    pub(crate) fn for_each_step(&self, f: impl FnMut(Step<'a>) -> Result<()>) -> Result<()> {
        self.for_each_step_from(self.steps_start()?, f)
    }

    /// [`PlanRef::for_each_step`] with the steps' start known
    /// ([`PlanRef::steps_start`]).
    #[inline]
    pub(crate) fn for_each_step_from(
        &self,
        mut at: usize,
        mut f: impl FnMut(Step<'a>) -> Result<()>,
    ) -> Result<()> {
        for _ in 0..self.n_steps() {
            let len = self.word(at)? as usize;
            let end = at
                .checked_add(len)
                .filter(|&e| e <= self.words.len() && len >= 4)
                .ok_or_else(|| corrupt("a step runs past the plan"))?;
            let w = &self.words[at..end];
            let kernel = w[1];
            let n_params = w[2] as usize;
            let params = w
                .get(3..3 + n_params)
                .ok_or_else(|| corrupt("a step's parameters run past it"))?;
            let n_operands = *w
                .get(3 + n_params)
                .ok_or_else(|| corrupt("a step's parameters run past it"))?
                as usize;
            f(Step {
                kernel,
                params,
                operand_words: &w[4 + n_params..],
                n_operands,
            })?;
            at = end;
        }
        Ok(())
    }

    /// The constant words at `at` holding `nbytes`.
    pub(crate) fn constant(&self, at: usize, nbytes: usize) -> Result<&'a [u8]> {
        let words = self
            .words
            .get(at..at.saturating_add(nbytes.div_ceil(4)))
            .ok_or_else(|| corrupt("a constant runs past the plan"))?;
        let bytes: &'a [u8] = bytemuck::cast_slice(words);
        bytes
            .get(..nbytes)
            .ok_or_else(|| corrupt("a constant runs past the plan"))
    }

    #[inline(never)]
    fn validate(&self) -> Result<()> {
        if self.words.len() < HEADER || self.words[0] != MAGIC {
            return Err(corrupt(
                "these bytes are not a kael plan (no KPLN header); pass what Plan::to_bytes wrote",
            ));
        }
        if self.words[1] != VERSION {
            return Err(corrupt(
                "the plan was written by another version of kael's plan format; build it again with this version",
            ));
        }
        if self.words[2] & !FLAG_F32_ACC != 0 {
            return Err(corrupt("the plan header has unknown flags"));
        }
        if self.words[7] as usize != self.words.len() {
            return Err(corrupt(
                "the plan's length differs from its header's (truncated or padded bytes)",
            ));
        }
        let arena = self.arena_bytes();
        for b in 0..self.n_buffers() {
            let e = self.buffer(b)?;
            match e.place {
                place::ARENA => {
                    if e.at % ARENA_ALIGN != 0
                        || e.at.checked_add(e.nbytes).is_none_or(|end| end > arena)
                    {
                        return Err(corrupt("an arena buffer lies outside the arena"));
                    }
                }
                place::BOUND => {
                    if e.at >= self.n_bindings() || self.binding(e.at)?.2 != b {
                        return Err(corrupt("a bound buffer and its binding disagree"));
                    }
                }
                place::CONST => {
                    self.constant(e.at, e.nbytes)?;
                    if e.at < HEADER {
                        return Err(corrupt("a constant overlaps the header"));
                    }
                }
                _ => return Err(corrupt("a buffer has an unknown place")),
            }
        }
        if self.n_bindings() > MAX_BINDINGS {
            return Err(corrupt("the plan binds more than 64 tensors"));
        }
        self.for_each_binding(|i, (name, _, buf)| {
            let e = self.buffer(buf)?;
            // Whole 4-byte words (an i64 binding's length in elements is
            // checked against its bytes by each run).
            if e.place != place::BOUND || e.at != i || e.nbytes % 4 != 0 {
                return Err(corrupt("a binding names a buffer that is not bound to it"));
            }
            self.for_each_binding(|j, (other, _, _)| {
                if j < i && other == name {
                    return Err(corrupt("two bindings have the same name"));
                }
                Ok(())
            })
        })?;
        self.for_each_step(|s| self.validate_step(&s))
    }

    fn validate_step(&self, s: &Step<'_>) -> Result<()> {
        use kernel::*;
        // A declared family's step: checked where it is linked, as the
        // other slice-level families' (its words end with its scratch).
        if family::is_declared_code(s.kernel) && !s.params.is_empty() {
            return Ok(());
        }
        if s.kernel & FLAT != 0 {
            return self.validate_flat(s);
        }
        let np = s.params.len();
        match (s.kernel, np) {
            (FILL, 2) | (COPY, 0) | (WHERE, 0) | (MATMUL, 0) | (ZERO, 0) => {}
            (UNARY, 6) => {
                unary_of(s.params).ok_or_else(|| corrupt("a unary step names no unary op"))?;
            }
            (BINARY, 1) => {
                BinaryOp::ALL
                    .get(s.params[0] as usize)
                    .ok_or_else(|| corrupt("a binary step names no binary op"))?;
            }
            (COMPARE, 1) => {
                CmpOp::ALL
                    .get(s.params[0] as usize)
                    .ok_or_else(|| corrupt("a compare step names no comparison"))?;
            }
            (REDUCE, 3) => {
                REDUCE_OPS
                    .get(s.params[0] as usize)
                    .ok_or_else(|| corrupt("a reduce step names no reduction"))?;
            }
            (WRITE, 3) => {}
            (SOFTMAX_BACKWARD, 1) | (SOFTMAX, 2) => {}
            (CAST, 0) | (ARG_REDUCE, 2) | (LAYER_NORM, 4) | (LAYER_NORM_BACKWARD, 2) => {}
            (ARGSORT, 3) => {}
            (INDEX_SELECT..=SCATTER_ADD, 1) => {}
            _ => return Err(corrupt("a step has an unknown kernel or parameter count")),
        }
        match s.kernel {
            // Checked by the replayer that links the family (NOTE
            // [Family steps are checked where they are linked]).
            CAST..=LAYER_NORM_BACKWARD | ARGSORT => Ok(()),
            FILL | ZERO => {
                let [d] = s.operands::<1>()?;
                self.check_operands(s.kernel, 0, &[], &d)
            }
            WRITE => {
                let [d] = s.operands::<1>()?;
                let e = self.buffer(d.buf)?;
                self.check_writable(e)?;
                let (off, at, len) = (
                    s.params[0] as usize,
                    s.params[1] as usize,
                    s.params[2] as usize,
                );
                self.constant(at, len)?;
                if off.checked_add(len).is_none_or(|end| end > e.nbytes) {
                    return Err(corrupt("a write runs past its buffer"));
                }
                Ok(())
            }
            COPY | UNARY => {
                let [a, d] = s.operands::<2>()?;
                self.check_operands(s.kernel, 0, &[&a], &d)
            }
            SOFTMAX_BACKWARD | SOFTMAX => self.validate_softmax(s),
            BINARY | COMPARE => {
                let [a, b, d] = s.operands::<3>()?;
                self.check_operands(s.kernel, 0, &[&a, &b], &d)
            }
            WHERE => {
                let [c, t, f, d] = s.operands::<4>()?;
                self.check_operands(s.kernel, 0, &[&c, &t, &f], &d)
            }
            REDUCE => {
                let [a, d] = s.operands::<2>()?;
                self.check_operands(s.kernel, s.params[1], &[&a], &d)?;
                let scratch = self.buffer(s.params[2] as usize)?;
                let need = d.layout.numel().checked_mul(8);
                if scratch.place != place::ARENA || need.is_none_or(|n| n > scratch.nbytes) {
                    return Err(corrupt(
                        "a reduction's scratch buffer is missing or too small",
                    ));
                }
                for o in [&a, &d] {
                    let e = self.buffer(o.buf)?;
                    if e.place == place::ARENA && overlaps(e, scratch) {
                        return Err(corrupt("a reduction's scratch overlaps an operand"));
                    }
                }
                Ok(())
            }
            _ => {
                let [a, b, d] = s.operands::<3>()?;
                self.check_operands(s.kernel, 0, &[&a, &b], &d)
            }
        }
    }

    /// A softmax or fused softmax backward step: the dimension and log
    /// flag, then the operands as any step's. Kept out of line: its
    /// operands would otherwise widen every step's validation frame.
    #[inline(never)]
    fn validate_softmax(&self, s: &Step<'_>) -> Result<()> {
        if s.kernel == kernel::SOFTMAX_BACKWARD {
            let [g, y, d] = s.operands::<3>()?;
            if d.layout.shape().rank() != 2 || s.params[0] > 1 {
                return Err(corrupt(BAD_SOFTMAX));
            }
            self.check_operands(s.kernel, 0, &[&g, &y], &d)
        } else {
            let [a, d] = s.operands::<2>()?;
            if s.params[0] as usize >= d.layout.shape().rank() || s.params[1] > 1 {
                return Err(corrupt(BAD_SOFTMAX));
            }
            self.check_operands(s.kernel, 0, &[&a], &d)
        }
    }

    /// NOTE [Family steps are checked where they are linked]
    /// A step of the families that run the reference kernels on slices
    /// (NOTE [Slice-level kernels] in `cpu::index`) is checked here: every
    /// operand's reach inside its buffer, writable destinations disjoint
    /// from every other operand, and the work bounded (NOTE [Bounded
    /// steps]); its shapes, dims and dtypes are the kernel contract's
    /// (`backend::contract`). [`PlanRef::new`] checks only its kernel code
    /// and parameter count: [`Replayer::new`], which every replay goes
    /// through, runs this and the contract once for each such step, when
    /// it links the family, so a firmware image without these families
    /// links none of their checks (1.5 KB on a Cortex-M4).
    ///
    /// [`Replayer::new`]: super::Replayer::new
    #[inline(never)]
    pub(crate) fn validate_family(&self, s: &Step<'_>) -> Result<()> {
        let (n, outs) =
            family_arity(s).ok_or_else(|| corrupt("a step has the wrong number of operands"))?;
        if s.n_operands != n {
            return Err(corrupt("a step has the wrong number of operands"));
        }
        let all = s.operands_n(n)?;
        let ops = all
            .get(..n)
            .ok_or_else(|| corrupt("a step has the wrong number of operands"))?;
        for (i, o) in ops.iter().enumerate() {
            let e = self.buffer(o.buf)?;
            let reach = strided::reach(&Strided::of(&o.layout))
                .and_then(|r| r.checked_mul(o.dtype.size_in_bytes()));
            if reach.is_none_or(|r| r > e.nbytes) {
                return Err(corrupt("an operand's layout reaches past its buffer"));
            }
            let own = e.nbytes / o.dtype.size_in_bytes();
            if o.layout.numel() > own && o.layout.numel() > WORK_FLOOR {
                return Err(corrupt(BOUNDED));
            }
            if i + outs >= n {
                self.check_writable(e)?;
                for (j, other) in ops.iter().enumerate() {
                    let oe = self.buffer(other.buf)?;
                    let shared = other.buf == o.buf
                        || (e.place == place::ARENA && oe.place == place::ARENA && overlaps(e, oe));
                    if j != i && shared {
                        return Err(corrupt(
                            "a step reads its destination other than exactly in place",
                        ));
                    }
                }
            }
        }
        let scratch_need = match s.kernel {
            kernel::LAYER_NORM_BACKWARD => {
                let cols = ops[n - 1].layout.shape().last().copied().unwrap_or(0);
                Some((1, cols.checked_mul(16)))
            }
            kernel::ARGSORT => {
                let len = ops[0].layout.shape().get(s.params[0] as usize).copied();
                let need = len.and_then(|l| l.checked_mul(2 * size_of::<usize>()));
                Some((2, need))
            }
            k => declared_scratch(k, s.params, ops),
        };
        // A declared step without scratch names none (its replay would
        // otherwise take a buffer it named as its scratch: NOTE [Declared
        // families]).
        let unneeded = family::is_declared_code(s.kernel)
            && scratch_need.is_none()
            && s.params.last() != Some(&u32::MAX);
        if unneeded {
            return Err(corrupt("a step names a scratch buffer it does not need"));
        }
        if let Some((at, need)) = scratch_need {
            let scratch = self.buffer(s.params[at] as usize)?;
            if scratch.place != place::ARENA || need.is_none_or(|x| x > scratch.nbytes) {
                return Err(corrupt("a step's scratch buffer is missing or too small"));
            }
            for o in ops {
                let e = self.buffer(o.buf)?;
                if e.place == place::ARENA && overlaps(e, scratch) {
                    return Err(corrupt("a step's scratch overlaps an operand"));
                }
            }
        }
        Ok(())
    }

    /// A flat step (NOTE [Plan words]): its op, the reach of each f32
    /// operand, a writable destination, and sources exactly in place
    /// (elementwise only) or disjoint from it.
    fn validate_flat(&self, s: &Step<'_>) -> Result<()> {
        use kernel::*;
        let kernel = s.kernel & !FLAT;
        let (n_ops, n_dims) = match (kernel, s.params.len()) {
            (COPY, 0) => (2, 2),
            (UNARY, 6) => {
                unary_of(s.params).ok_or_else(|| corrupt("a unary step names no unary op"))?;
                (2, 2)
            }
            (BINARY, 1) => {
                BinaryOp::ALL
                    .get(s.params[0] as usize)
                    .ok_or_else(|| corrupt("a binary step names no binary op"))?;
                (3, 2)
            }
            (MATMUL, 0) => (3, 3),
            // NOTE [Fused epilogues]: binary op and side, then a unary op.
            (MATMUL, 2 | 8) => {
                if fused_ops(s.params).is_none()
                    || s.params
                        .get(2..)
                        .is_some_and(|u| !u.is_empty() && unary_of(u).is_none())
                {
                    return Err(corrupt("a matmul's epilogue names no op"));
                }
                (4, 3)
            }
            _ => {
                return Err(corrupt(
                    "a flat step has a kernel or parameter count it cannot",
                ));
            }
        };
        if s.n_operands != n_ops || s.operand_words.len() != n_dims + 4 * n_ops {
            return Err(corrupt("a step's operands run past it"));
        }
        let (dims, ops) = s.operand_words.split_at(n_dims);
        let dim = |i: usize| dims.get(i).map_or(0, |&d| d as usize);
        let mut dst = BufEntry {
            place: place::ARENA,
            at: 0,
            nbytes: 0,
        };
        for (i, o) in ops.chunks_exact(4).enumerate() {
            let (rows, cols) = match (kernel, i) {
                (MATMUL, 0) => (dim(0), dim(2)),
                (MATMUL, 1) => (dim(2), dim(1)),
                _ => (dim(0), dim(1)),
            };
            let e = self.buffer(o[0] as usize)?;
            let reach = if rows == 0 || cols == 0 {
                Some(0)
            } else {
                (rows - 1)
                    .checked_mul(o[2] as usize)
                    .zip((cols - 1).checked_mul(o[3] as usize))
                    .and_then(|(r, c)| r.checked_add(c)?.checked_add(o[1] as usize)?.checked_add(1))
                    .and_then(|n| n.checked_mul(4))
            };
            if reach.is_none_or(|r| r > e.nbytes) {
                return Err(corrupt("an operand's layout reaches past its buffer"));
            }
            dst = e;
        }
        // NOTE [Bounded steps]
        let elems =
            |i: usize| -> Result<usize> { Ok(self.buffer(ops[4 * i] as usize)?.nbytes / 4) };
        let bounded = if kernel == MATMUL {
            dim(0)
                .checked_mul(dim(1))
                .is_some_and(|n| n <= dst.nbytes / 4)
                && dim(2) <= elems(0)?.max(elems(1)?)
        } else {
            dim(0)
                .checked_mul(dim(1))
                .is_some_and(|n| n <= dst.nbytes / 4)
        };
        if !bounded {
            return Err(corrupt(BOUNDED));
        }
        self.check_writable(dst)?;
        let d = &ops[4 * (n_ops - 1)..];
        for (i, o) in ops.chunks_exact(4).take(n_ops - 1).enumerate() {
            if o[0] == d[0] {
                // A matmul's epilogue operand (the third) may be exactly
                // the destination; its factors never.
                if (kernel == MATMUL && i < 2) || o != d {
                    return Err(corrupt(
                        "a step reads its destination other than exactly in place",
                    ));
                }
            } else {
                let e = self.buffer(o[0] as usize)?;
                if e.place == place::ARENA && dst.place == place::ARENA && overlaps(e, dst) {
                    return Err(corrupt("a step's source and destination share arena bytes"));
                }
            }
        }
        Ok(())
    }

    fn check_writable(&self, e: BufEntry) -> Result<()> {
        if e.place == place::CONST {
            return Err(corrupt("a step writes a constant"));
        }
        if e.place == place::BOUND && self.binding(e.at)?.1 == Role::Input {
            return Err(corrupt("a step writes an input"));
        }
        Ok(())
    }

    fn check_operands(&self, kernel: u32, mask: u32, srcs: &[&Opnd], dst: &Opnd) -> Result<()> {
        let de = self.buffer(dst.buf)?;
        self.check_writable(de)?;
        for o in srcs.iter().copied().chain([dst]) {
            let e = self.buffer(o.buf)?;
            let size = o.dtype.size_in_bytes();
            let reach = strided::reach(&Strided::of(&o.layout)).and_then(|r| r.checked_mul(size));
            if reach.is_none_or(|r| r > e.nbytes) {
                return Err(corrupt("an operand's layout reaches past its buffer"));
            }
        }
        // The work a step does is bounded by its buffers (NOTE [Bounded
        // steps]).
        let elems = |o: &Opnd| -> Result<usize> {
            Ok(self.buffer(o.buf)?.nbytes / o.dtype.size_in_bytes())
        };
        let numel = |o: &Opnd| -> Option<usize> {
            o.layout
                .shape()
                .iter()
                .try_fold(1usize, |n, &d| n.checked_mul(d))
        };
        if numel(dst).is_none_or(|n| n > elems(dst).unwrap_or(0)) {
            return Err(corrupt(BOUNDED));
        }
        if kernel == kernel::REDUCE {
            let own = elems(srcs[0]).unwrap_or(0);
            if numel(srcs[0]).is_none_or(|n| n > own && n > WORK_FLOOR) {
                return Err(corrupt(BOUNDED));
            }
        } else if kernel == kernel::MATMUL {
            let k = srcs[0].layout.shape().last().copied().unwrap_or(0);
            if k > elems(srcs[0])?.max(elems(srcs[1])?) && k > WORK_FLOOR {
                return Err(corrupt(BOUNDED));
            }
        }
        let want = |o: &Opnd, d: DType| -> Result<()> {
            if o.dtype == d {
                Ok(())
            } else {
                Err(corrupt("an operand has a dtype its kernel does not take"))
            }
        };
        let same_shape = |o: &Opnd| -> Result<()> {
            if o.layout.shape() == dst.layout.shape() {
                Ok(())
            } else {
                Err(corrupt("an elementwise step's operands differ in shape"))
            }
        };
        use kernel::*;
        match kernel {
            FILL => {
                if dst.dtype != DType::F32 && dst.dtype != DType::Bool {
                    return Err(corrupt("an operand has a dtype its kernel does not take"));
                }
            }
            ZERO => want(dst, DType::U8)?,
            COPY => {
                same_shape(srcs[0])?;
                want(srcs[0], dst.dtype)?;
                if dst.dtype == DType::U8 {
                    return Err(corrupt("an operand has a dtype its kernel does not take"));
                }
            }
            UNARY | BINARY | REDUCE | SOFTMAX | SOFTMAX_BACKWARD => {
                want(dst, DType::F32)?;
                for s in srcs {
                    want(s, DType::F32)?;
                    if kernel != REDUCE {
                        same_shape(s)?;
                    }
                }
                if kernel == REDUCE {
                    let (a, d) = (srcs[0].layout.shape(), dst.layout.shape());
                    let reduced = |k: usize| mask & (1 << k) != 0;
                    if a.rank() != d.rank()
                        || mask >> a.rank() != 0
                        || a.iter()
                            .zip(d.iter())
                            .enumerate()
                            .any(|(k, (&x, &y))| if reduced(k) { y != 1 } else { y != x })
                    {
                        return Err(corrupt(
                            "a reduction's destination does not match its source",
                        ));
                    }
                }
            }
            COMPARE => {
                want(dst, DType::Bool)?;
                for s in srcs {
                    want(s, DType::F32)?;
                    same_shape(s)?;
                }
            }
            WHERE => {
                want(srcs[0], DType::Bool)?;
                want(dst, DType::F32)?;
                for s in srcs {
                    same_shape(s)?;
                }
                want(srcs[1], DType::F32)?;
                want(srcs[2], DType::F32)?;
            }
            _ => {
                // matmul
                for o in srcs.iter().copied().chain([dst]) {
                    want(o, DType::F32)?;
                }
                let (a, b, d) = (
                    srcs[0].layout.shape(),
                    srcs[1].layout.shape(),
                    dst.layout.shape(),
                );
                let r = d.rank();
                if r < 2
                    || a.rank() != r
                    || b.rank() != r
                    || a[..r - 2] != d[..r - 2]
                    || b[..r - 2] != d[..r - 2]
                    || a[r - 2] != d[r - 2]
                    || b[r - 1] != d[r - 1]
                    || a[r - 1] != b[r - 2]
                {
                    return Err(corrupt("a matmul's operand shapes do not agree"));
                }
            }
        }
        // Aliasing: every source either is the destination exactly (an
        // elementwise kernel only) or shares no arena bytes with it, and
        // sources never partly overlap each other.
        for s in srcs {
            let se = self.buffer(s.buf)?;
            if s.buf == dst.buf {
                let exact = s.layout == dst.layout && s.dtype == dst.dtype;
                if !exact || !matches!(kernel, COPY | UNARY | BINARY | SOFTMAX) {
                    return Err(corrupt(
                        "a step reads its destination other than exactly in place",
                    ));
                }
            } else if se.place == place::ARENA && de.place == place::ARENA && overlaps(se, de) {
                return Err(corrupt("a step's source and destination share arena bytes"));
            }
        }
        Ok(())
    }
}

/// A declared step's family, step and parameter words (its last word is
/// the scratch buffer: NOTE [Declared families]).
pub(crate) fn declared_of<'a>(s: &Step<'a>) -> Option<(Family, usize, &'a [u32])> {
    let (f, step) = Family::of_code(s.kernel)?;
    let (_, words) = s.params.split_last()?;
    Some((f, step, words))
}

/// A declared step's scratch: the parameter word that names it and the
/// bytes it needs, when it needs any.
fn declared_scratch(code: u32, params: &[u32], ops: &[Opnd]) -> Option<(usize, Option<usize>)> {
    let (f, step) = Family::of_code(code)?;
    let (_, words) = params.split_last()?;
    let mut o: heapless::Vec<Operand<'_>, 6> = heapless::Vec::new();
    for x in ops {
        o.push(Operand {
            layout: &x.layout,
            dtype: x.dtype,
            buffer: x.buf,
        })
        .ok()?;
    }
    match declared_rows::scratch(f, step, words, &o) {
        Some(0) => None,
        need => Some((params.len() - 1, need)),
    }
}

/// The operand count and how many of them (at the end) are written, of
/// a step of the slice-level families, from its kernel and parameters.
pub(crate) fn family_arity(s: &Step<'_>) -> Option<(usize, usize)> {
    let flag = |i: usize| s.params.get(i).map(|&p| usize::from(p != 0));
    if let Some((f, step, words)) = declared_of(s) {
        let (i, o) = declared_rows::arity(f, step, words)?;
        return Some((i.checked_add(o)?, o));
    }
    Some(match s.kernel {
        kernel::CAST | kernel::ARG_REDUCE | kernel::ARGSORT => (2, 1),
        kernel::INDEX_SELECT..=kernel::SCATTER_ADD => (3, 1),
        kernel::LAYER_NORM => (3 + flag(2)? + flag(3)?, 2),
        kernel::LAYER_NORM_BACKWARD => (5 + flag(0)?, 2),
        _ => return None,
    })
}

/// Whether two arena buffers share a byte.
fn overlaps(a: BufEntry, b: BufEntry) -> bool {
    a.nbytes > 0
        && b.nbytes > 0
        && a.at < b.at.saturating_add(b.nbytes)
        && b.at < a.at.saturating_add(a.nbytes)
}
