//! Replay of the slice-level families (casts, argmax/argmin, the index
//! ops, the fused layer norm and its backward): the reference backend's
//! own kernels, called on the step's buffers as slices (NOTE [Slice-level
//! kernels] in [`crate::cpu::index`]), so no arithmetic of these families
//! lives in the plan module and a replay's bits are the eager device's
//! by construction.

use super::{Mem, refuse};
use crate::backend::contract::{self, Operand};
use crate::backend::declared::{In, Out};
use crate::backend::family::{declared_rows, is_declared_code};
use crate::backend::{ArgReduceOp, Family};
use crate::cpu::dtypes;
use crate::cpu::elementwise::{cast_ints, cast_slices};
use crate::cpu::index::{
    Indices, check_all, gather_slices, index_add_slices, index_select_slices, scatter_add_slices,
};
use crate::cpu::norm::{layer_norm_backward_rows, layer_norm_rows};
use crate::cpu::ops;
use crate::cpu::reduce::arg_reduce_slices;
use crate::cpu::sort::argsort_slices;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::plan::format::{Opnd, PlanRef, Step, declared_of, family_arity, kernel, place};
use crate::storage::{typed, typed_mut};

/// The contract's view of a decoded operand.
fn operand(o: &Opnd) -> Operand<'_> {
    Operand {
        layout: &o.layout,
        dtype: o.dtype,
        buffer: o.buf,
    }
}

/// Every ops bit of the slice-level families: a replayer without any
/// links none of this module.
pub(super) const BITS: u128 = Family::Cast.bits()
    | Family::ArgReduce.bits()
    | Family::IndexSelect.bits()
    | Family::Gather.bits()
    | Family::IndexAdd.bits()
    | Family::ScatterAdd.bits()
    | Family::LayerNorm.bits()
    | Family::ArgSort.bits()
    | declared_rows::BITS;

/// Whether a step code is a slice-level family's (this module's).
pub(super) fn is_family_code(k: u32) -> bool {
    matches!(
        k,
        kernel::CAST..=kernel::LAYER_NORM_BACKWARD | kernel::ARGSORT
    ) || is_declared_code(k)
}

/// The dtypes a plan carries, for the declared kernels a replay runs.
const PLAN_DTYPES: u16 = dtypes::F32 | dtypes::BOOL | dtypes::U8 | dtypes::I64 | dtypes::I32;

/// The ops bit a family's step needs, with the family's name (its row
/// of the family table: NOTE [Family table]). A match on the step codes,
/// so a firmware image links constants, not the table.
pub(super) fn family_bit(s: &Step<'_>) -> Option<(u128, &'static str)> {
    let f = match s.kernel {
        kernel::CAST => Family::Cast,
        kernel::ARG_REDUCE => Family::ArgReduce,
        kernel::INDEX_SELECT => Family::IndexSelect,
        kernel::GATHER => Family::Gather,
        kernel::INDEX_ADD => Family::IndexAdd,
        kernel::SCATTER_ADD => Family::ScatterAdd,
        kernel::LAYER_NORM | kernel::LAYER_NORM_BACKWARD => Family::LayerNorm,
        kernel::ARGSORT => Family::ArgSort,
        k => Family::of_code(k)?.0,
    };
    Some((f.bits(), f.name()))
}

fn arg_op(s: &Step<'_>) -> ArgReduceOp {
    if s.params.first() == Some(&1) {
        ArgReduceOp::ArgMin
    } else {
        ArgReduceOp::ArgMax
    }
}

/// The operands of a family step, decoded.
fn decode(s: &Step<'_>) -> Result<([Opnd; 6], usize)> {
    let (n, _) = family_arity(s).ok_or_else(|| refuse("corrupt step"))?;
    Ok((s.operands_n(n)?, n))
}

/// Only f32 data (with integer indices) is replayed by these families.
fn f32_data(op: &'static str, d: DType) -> Result<()> {
    if d == DType::F32 {
        Ok(())
    } else {
        Err(Error::UnsupportedDType {
            op,
            dtype: d,
            supported: "f32 (a plan's index, argmax and layer norm steps replay f32 data)",
        })
    }
}

/// A family step's operands (NOTE [Family steps are checked where they
/// are linked]) and its kernel contract (`backend::contract`, the checks
/// every backend's kernels make), run once by `Replayer::new` for the
/// families `OPS` links.
pub(super) fn check<const OPS: u128>(plan: &PlanRef<'_>, s: &Step<'_>) -> Result<()> {
    let Some((bit, name)) = family_bit(s) else {
        return Ok(());
    };
    if OPS & bit == 0 {
        return Ok(()); // refused by the caller's bit check
    }
    plan.validate_family(s)?;
    let (o, n) = decode(s)?;
    let dim = s.params.first().copied().unwrap_or(0) as usize;
    if let Some((f, step, words)) = declared_of(s) {
        let ops: [Operand<'_>; 6] = core::array::from_fn(|i| operand(&o[i]));
        return declared_rows::check(f, step, words, &ops[..n]);
    }
    match s.kernel {
        kernel::CAST => contract::cast_of(operand(&o[0]), operand(&o[1])),
        kernel::ARG_REDUCE => {
            f32_data(name, o[0].dtype)?;
            let dim = s.params.get(1).copied().unwrap_or(0) as usize;
            contract::arg_reduce_of(arg_op(s), operand(&o[0]), dim, operand(&o[1]))
        }
        kernel::INDEX_SELECT => {
            f32_data(name, o[2].dtype)?;
            contract::index_select_of(operand(&o[0]), dim, operand(&o[1]), operand(&o[2]))
        }
        kernel::GATHER => {
            f32_data(name, o[2].dtype)?;
            contract::gather_of(operand(&o[0]), dim, operand(&o[1]), operand(&o[2]))
        }
        kernel::INDEX_ADD => {
            f32_data(name, o[2].dtype)?;
            contract::index_add_of(operand(&o[2]), dim, operand(&o[0]), operand(&o[1]))
        }
        kernel::SCATTER_ADD => {
            f32_data(name, o[2].dtype)?;
            contract::scatter_add_of(operand(&o[2]), dim, operand(&o[0]), operand(&o[1]))
        }
        kernel::ARGSORT => contract::argsort_of(operand(&o[0]), dim, operand(&o[1])),
        kernel::LAYER_NORM => {
            f32_data(name, o[0].dtype)?;
            let (w, b) = (s.params[2] != 0, s.params[3] != 0);
            let wo = w.then(|| operand(&o[1]));
            let bo = b.then(|| operand(&o[1 + usize::from(w)]));
            contract::layer_norm_of(
                operand(&o[0]),
                wo,
                bo,
                operand(&o[n - 2]),
                operand(&o[n - 1]),
            )
            .map(|_| ())
        }
        _ => {
            f32_data(name, o[0].dtype)?;
            let wo = (s.params[0] != 0).then(|| operand(&o[3]));
            let [g, x, st] = [&o[0], &o[1], &o[2]].map(operand);
            contract::layer_norm_backward_of(g, x, st, wo, operand(&o[n - 2]), operand(&o[n - 1]))
                .map(|_| ())
        }
    }
}

/// The index families' bits: a replayer with any checks bound index
/// inputs before it runs.
pub(super) const INDEX_BITS: u128 = Family::IndexSelect.bits()
    | Family::Gather.bits()
    | Family::IndexAdd.bits()
    | Family::ScatterAdd.bits();

impl Mem<'_, '_> {
    /// Checks every bound index input's values against each index step
    /// that reads it, before any step runs, so a bad token id is an
    /// [`Error::IndexOutOfRange`] and the replay changes nothing.
    pub(super) fn check_bound_indices(&self) -> Result<()> {
        self.plan.for_each_step(|s| {
            let (at, of, op) = match s.kernel {
                kernel::INDEX_SELECT => (1, 0, "index_select"),
                kernel::GATHER => (1, 0, "gather"),
                kernel::INDEX_ADD => (0, 2, "index_add"),
                kernel::SCATTER_ADD => (0, 2, "scatter_add"),
                _ => return Ok(()),
            };
            let (o, _) = decode(&s)?;
            if self.plan.buffer(o[at].buf)?.place != place::BOUND {
                return Ok(());
            }
            let dim = s.params.first().copied().unwrap_or(0) as usize;
            let size = o[of]
                .layout
                .shape()
                .get(dim)
                .copied()
                .ok_or_else(|| refuse("corrupt index step"))?;
            // SAFETY: a bound input is only read, and nothing runs yet.
            let ix = Indices::of(op, o[at].dtype, unsafe { self.bytes(o[at].buf)? })?;
            check_all(op, &ix, &o[at].layout, size)
        })
    }

    /// Buffer `b`'s bytes.
    ///
    /// # Safety
    /// No `&mut` to the buffer is live (validation: a step's written
    /// buffers are disjoint from every other operand).
    pub(super) unsafe fn bytes(&self, b: usize) -> Result<&[u8]> {
        let n = self.plan.buffer(b)?.nbytes;
        // SAFETY: NOTE [Replay on raw pointers]: `ptr(b)` is valid for
        // the buffer's `nbytes`; the caller's for aliasing.
        Ok(unsafe { core::slice::from_raw_parts(self.ptr(b)?, n) })
    }

    /// Buffer `b`'s bytes, to write.
    ///
    /// # Safety
    /// No other reference to the buffer is live while the slice is, and
    /// the buffer is writable (validation).
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn bytes_mut(&self, b: usize) -> Result<&mut [u8]> {
        let n = self.plan.buffer(b)?.nbytes;
        // SAFETY: as for `bytes`, and the caller's.
        Ok(unsafe { core::slice::from_raw_parts_mut(self.ptr(b)?, n) })
    }

    /// `len` f32s of operand `o` from its offset (a contiguous layout).
    ///
    /// # Safety
    /// As [`Mem::bytes`].
    unsafe fn f32s(&self, o: &Opnd, len: usize) -> Result<&[f32]> {
        // SAFETY: the caller's.
        let all = typed::<f32>(unsafe { self.bytes(o.buf)? })?;
        let at = o.layout.offset();
        all.get(at..at.saturating_add(len))
            .ok_or_else(|| refuse("corrupt layer norm step"))
    }

    /// Mutable [`Mem::f32s`].
    ///
    /// # Safety
    /// As [`Mem::bytes_mut`].
    #[allow(clippy::mut_from_ref)]
    unsafe fn f32s_mut(&self, o: &Opnd, len: usize) -> Result<&mut [f32]> {
        // SAFETY: the caller's.
        let all = typed_mut::<f32>(unsafe { self.bytes_mut(o.buf)? })?;
        let at = o.layout.offset();
        all.get_mut(at..at.saturating_add(len))
            .ok_or_else(|| refuse("corrupt layer norm step"))
    }

    /// Runs one step of the slice-level families (contract checked by
    /// `Replayer::new`, operands by `PlanRef::new`).
    pub(super) fn family<const OPS: u128>(&self, s: &Step<'_>) -> Result<()> {
        let (o, n) = decode(s)?;
        let p0 = s.params.first().copied().unwrap_or(0) as usize;
        // SAFETY: (every `bytes`/`bytes_mut` below) validation made each
        // written operand's buffer disjoint from every other operand of
        // the step, so the one `&mut` per written buffer aliases nothing.
        unsafe {
            if let Some((f, step, words)) = declared_of(s) {
                let (ni, _) =
                    declared_rows::arity(f, step, words).ok_or_else(|| refuse("corrupt step"))?;
                let mut ins: heapless::Vec<In<'_>, 6> = heapless::Vec::new();
                let mut outs: heapless::Vec<Out<'_>, 6> = heapless::Vec::new();
                for (i, x) in o.iter().take(n).enumerate() {
                    if i < ni {
                        let a = In {
                            bytes: self.bytes(x.buf)?,
                            layout: &x.layout,
                            dtype: x.dtype,
                        };
                        ins.push(a).map_err(|_| refuse("corrupt step"))?;
                    } else {
                        let d = Out {
                            bytes: self.bytes_mut(x.buf)?,
                            layout: &x.layout,
                            dtype: x.dtype,
                        };
                        outs.push(d).map_err(|_| refuse("corrupt step"))?;
                    }
                }
                let scratch = match s.params.last() {
                    Some(&b) if b != u32::MAX => self.bytes_mut(b as usize)?,
                    _ => &mut [],
                };
                return declared_rows::run::<PLAN_DTYPES, OPS>(
                    f, step, words, &ins, &mut outs, scratch,
                );
            }
            match s.kernel {
                kernel::CAST if OPS & ops::CAST != 0 => {
                    let (a, d) = (&o[0], &o[1]);
                    let (sb, db) = (self.bytes(a.buf)?, self.bytes_mut(d.buf)?);
                    let to = (db, d.dtype, &d.layout);
                    match a.dtype {
                        DType::F32 => cast_slices((typed::<f32>(sb)?, &a.layout), to),
                        DType::I64 | DType::I32 => {
                            let ix = Indices::of("to_dtype", a.dtype, sb)?;
                            cast_ints((|o| ix.get(o), &a.layout), to)
                        }
                        _ => cast_slices((sb, &a.layout), to),
                    }
                }
                kernel::ARG_REDUCE if OPS & ops::ARG_REDUCE != 0 => {
                    let (a, d) = (&o[0], &o[1]);
                    let sa = typed::<f32>(self.bytes(a.buf)?)?;
                    let sd = typed_mut::<i64>(self.bytes_mut(d.buf)?)?;
                    let dim = s.params.get(1).copied().unwrap_or(0) as usize;
                    arg_reduce_slices(arg_op(s), (sa, &a.layout), dim, (sd, &d.layout));
                    Ok(())
                }
                kernel::INDEX_SELECT | kernel::GATHER
                    if OPS & (ops::INDEX_SELECT | ops::GATHER) != 0 =>
                {
                    let (a, i, d) = (&o[0], &o[1], &o[2]);
                    let ix = Indices::of("index_select", i.dtype, self.bytes(i.buf)?)?;
                    let sa = typed::<f32>(self.bytes(a.buf)?)?;
                    let sd = typed_mut::<f32>(self.bytes_mut(d.buf)?)?;
                    let args = ((sa, &a.layout), p0, (&ix, &i.layout), (sd, &d.layout));
                    if s.kernel == kernel::GATHER && OPS & ops::GATHER != 0 {
                        gather_slices(args.0, args.1, args.2, args.3)
                    } else if OPS & ops::INDEX_SELECT != 0 {
                        index_select_slices(args.0, args.1, args.2, args.3)
                    } else {
                        Err(refuse("corrupt step"))
                    }
                }
                kernel::INDEX_ADD | kernel::SCATTER_ADD
                    if OPS & (ops::INDEX_ADD | ops::SCATTER_ADD) != 0 =>
                {
                    let (i, a, d) = (&o[0], &o[1], &o[2]);
                    let ix = Indices::of("index_add", i.dtype, self.bytes(i.buf)?)?;
                    let sa = typed::<f32>(self.bytes(a.buf)?)?;
                    let sd = typed_mut::<f32>(self.bytes_mut(d.buf)?)?;
                    let args = ((sd, &d.layout), p0, (&ix, &i.layout), (sa, &a.layout));
                    if s.kernel == kernel::SCATTER_ADD && OPS & ops::SCATTER_ADD != 0 {
                        scatter_add_slices(args.0, args.1, args.2, args.3)
                    } else if OPS & ops::INDEX_ADD != 0 {
                        index_add_slices(args.0, args.1, args.2, args.3)
                    } else {
                        Err(refuse("corrupt step"))
                    }
                }
                kernel::LAYER_NORM if OPS & ops::LAYER_NORM != 0 => {
                    let eps =
                        f64::from_bits(u64::from(s.params[0]) | (u64::from(s.params[1]) << 32));
                    let (w, b) = (s.params[2] != 0, s.params[3] != 0);
                    let x = &o[0];
                    let (rows, cols) = rows_cols(x);
                    let total = rows.saturating_mul(cols);
                    let wv = if w {
                        Some(self.f32s(&o[1], cols)?)
                    } else {
                        None
                    };
                    let bv = if b {
                        Some(self.f32s(&o[1 + usize::from(w)], cols)?)
                    } else {
                        None
                    };
                    let xv = self.f32s(x, total)?;
                    let y = self.f32s_mut(&o[n - 2], total)?;
                    let st = self.f32s_mut(&o[n - 1], rows.saturating_mul(2))?;
                    layer_norm_rows(xv, wv, bv, eps, y, st, rows, cols);
                    Ok(())
                }
                kernel::LAYER_NORM_BACKWARD if OPS & ops::LAYER_NORM != 0 => {
                    let (rows, cols) = rows_cols(&o[1]);
                    let total = rows.saturating_mul(cols);
                    let g = self.f32s(&o[0], total)?;
                    let x = self.f32s(&o[1], total)?;
                    let st = self.f32s(&o[2], rows.saturating_mul(2))?;
                    let w = if s.params[0] != 0 {
                        Some(self.f32s(&o[3], cols)?)
                    } else {
                        None
                    };
                    let dx = self.f32s_mut(&o[n - 2], total)?;
                    let dwb = self.f32s_mut(&o[n - 1], cols.saturating_mul(2))?;
                    let sums = typed_mut::<f64>(self.bytes_mut(s.params[1] as usize)?)?;
                    let sums = sums
                        .get_mut(..cols.saturating_mul(2))
                        .ok_or_else(|| refuse("corrupt layer norm step"))?;
                    layer_norm_backward_rows([g, x, st], w, dx, dwb, sums, rows, cols);
                    Ok(())
                }
                kernel::ARGSORT if OPS & ops::ARGSORT != 0 => {
                    let (a, d) = (&o[0], &o[1]);
                    let n = a.layout.shape().get(p0).copied().unwrap_or(0);
                    let sd = typed_mut::<i64>(self.bytes_mut(d.buf)?)?;
                    let scratch = typed_mut::<usize>(self.bytes_mut(s.params[2] as usize)?)?;
                    let scratch = scratch
                        .get_mut(..n.saturating_mul(2))
                        .ok_or_else(|| refuse("corrupt sort step"))?;
                    let (desc, dl) = (s.params[1] != 0, (sd, &d.layout));
                    let sb = self.bytes(a.buf)?;
                    match a.dtype {
                        DType::F32 => {
                            argsort_slices((typed::<f32>(sb)?, &a.layout), p0, desc, dl, scratch)
                        }
                        DType::I64 => {
                            argsort_slices((typed::<i64>(sb)?, &a.layout), p0, desc, dl, scratch)
                        }
                        _ => argsort_slices((typed::<i32>(sb)?, &a.layout), p0, desc, dl, scratch),
                    }
                    Ok(())
                }
                _ => Err(refuse("corrupt step")),
            }
        }
    }
}

/// A `[rows, n]` operand's sizes.
fn rows_cols(o: &Opnd) -> (usize, usize) {
    match *o.layout.shape().as_slice() {
        [r, n] => (r, n),
        _ => (0, 0),
    }
}
