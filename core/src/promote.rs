//! Type promotion: which dtype an op on operands of different dtypes
//! computes in (PyTorch's `torch.result_type`).
//!
//! NOTE [Type promotion]
//! Every op that combines operands (the binary and comparison rows, the
//! scalar forms, `where`, `cat`, `stack` and the in-place forms) picks one
//! dtype with [`ResultType`] at the API boundary, converts the operands to
//! it (`to_dtype`, which records a cast, so each input's gradient comes back
//! in its own dtype), and runs the same-dtype kernel: kernels never see
//! mixed dtypes, and firmware images carry no promotion code in kernels.
//! The rules are PyTorch's:
//! 1. Categories: bool < integer < float. Among dtypes of one category the
//!    wider wins (`uint8` with `int8` gives `int16`; `float16` with
//!    `bfloat16` gives `float32`).
//! 2. Operands come in three classes: tensors with at least one dimension,
//!    0-d tensors, and numbers ([`Number`], PyTorch's Python scalars). A
//!    class of operands takes part in the result only when its category is
//!    higher than that of every class above it: `int32 tensor + int64 0-d
//!    tensor` is `int32`, but `int32 tensor + float64 0-d tensor` is
//!    `float64`, and `int64 tensor + 2.5` is the default float dtype.
//! 3. A float number counts as the default float dtype
//!    ([`default_float_dtype`], `float32` unless changed), an integer as
//!    `int64`, `true`/`false` as `bool`.
//! 4. Ops whose table row has no integer function (`div`, `atan2`, the
//!    float-only unary rows such as `sqrt`) compute integer and bool
//!    operands in the default float dtype: `int64 / int64` is true division.
//! 5. An in-place op keeps its destination's dtype; it refuses a result
//!    dtype of a higher category than the destination's ([`can_cast`]:
//!    `int64 += 2.5` is an `Err`, as in PyTorch), and otherwise computes in
//!    the result dtype and converts back (`float16 += float32 tensor` rounds
//!    once).
//!
//! Where kael is stricter: a number the result dtype cannot hold
//! (`uint8 + 300`, `int8 + -129`, which PyTorch wraps silently) is
//! refused, never wrapped.

use crate::dtype::DType;
use crate::error::{Error, Result};
use core::sync::atomic::{AtomicU8, Ordering};

/// A plain number operand (PyTorch's Python scalar): `x + 2` is
/// `Number::Int(2)`, `x + 2.0` is `Number::Float(2.0)`; they promote
/// differently (NOTE [Type promotion], rule 3).
///
/// ```
/// use kael_core::{DType, Device, Number, Tensor};
/// let x = Tensor::from_slice(&[1i64, 2], &[2], &Device::cpu())?;
/// assert_eq!(x.add_scalar(2)?.dtype(), DType::I64);
/// assert_eq!(x.add_scalar(2.5)?.to_vec::<f32>()?, vec![3.5, 4.5]);
/// assert_eq!(Number::from(true), Number::Bool(true));
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    /// `true` or `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
}

impl Number {
    /// The dtype the number counts as in promotion (rule 3).
    pub fn promotion_dtype(self) -> DType {
        match self {
            Number::Bool(_) => DType::Bool,
            Number::Int(_) => DType::I64,
            Number::Float(_) => default_float_dtype(),
        }
    }

    /// The value as f64 (exact except for integers beyond 2^53).
    pub fn to_f64(self) -> f64 {
        match self {
            Number::Bool(b) => f64::from(u8::from(b)),
            Number::Int(i) => i as f64,
            Number::Float(f) => f,
        }
    }

    /// Whether `dtype` holds the number without changing it: any value for
    /// a float dtype (rounded to its precision), an integer in range for an
    /// integer dtype, `0`/`1`/`true`/`false` for bool.
    pub fn fits(self, dtype: DType) -> bool {
        match (self, dtype) {
            (Number::Bool(_), _) => true,
            (_, d) if d.is_float() => true,
            (Number::Int(i), DType::Bool) => i == 0 || i == 1,
            (Number::Int(_), DType::I64) => true,
            (Number::Int(i), d) => d.holds(i as f64),
            (Number::Float(f), d) => d.holds(f),
        }
    }
}

macro_rules! number_from {
    ($($t:ty => $v:ident),* $(,)?) => {
        $(impl From<$t> for Number {
            fn from(x: $t) -> Number {
                Number::$v(x.into())
            }
        })*
    };
}
number_from!(bool => Bool, i64 => Int, i32 => Int, i16 => Int, i8 => Int, u8 => Int, u16 => Int, u32 => Int, f64 => Float, f32 => Float);

/// Whether operands of different dtypes promote: kael-core's `promotion`
/// feature, on by default. Firmware built with `default-features = false`
/// leaves it off (NOTE [Promotion feature]): ops on mixed dtypes are then
/// refused as before promotion existed (never computed differently), and
/// the conversion code is not linked.
///
/// NOTE [Promotion feature]
/// Every promotion path starts with `promote::require`, a constant `Err`
/// without the feature, so the paths compile away and an eager firmware
/// image keeps its size. Same-dtype ops, and numbers the tensor's dtype
/// holds, behave the same with and without the feature.
pub const ENABLED: bool = cfg!(feature = "promotion");

/// `Ok` when [`ENABLED`]; else the refusal of an op that would promote.
///
/// # Errors
/// The `promotion` feature is off.
#[inline(always)]
pub(crate) fn require(op: &'static str) -> Result<()> {
    if ENABLED {
        Ok(())
    } else {
        Err(Error::InvalidArgument {
            op,
            reason: "mixed dtypes need kael-core's `promotion` feature; convert first (to_dtype)",
        })
    }
}

/// `DType` codes for the default float dtype's atomic.
const DEFAULT_F32: u8 = 0;
const DEFAULT_F64: u8 = 1;
const DEFAULT_F16: u8 = 2;
const DEFAULT_BF16: u8 = 3;

static DEFAULT_FLOAT: AtomicU8 = AtomicU8::new(DEFAULT_F32);

/// The dtype a float number and integer true division compute in
/// (PyTorch's `torch.get_default_dtype()`), `F32` unless changed with
/// [`set_default_float_dtype`]. One setting for the whole program.
pub fn default_float_dtype() -> DType {
    match DEFAULT_FLOAT.load(Ordering::Relaxed) {
        DEFAULT_F64 => DType::F64,
        DEFAULT_F16 => DType::F16,
        DEFAULT_BF16 => DType::BF16,
        _ => DType::F32,
    }
}

/// Sets the default float dtype (PyTorch's `torch.set_default_dtype`).
///
/// # Errors
/// A dtype that is not a float dtype; nothing changes.
///
/// ```
/// use kael_core::{promote, DType};
/// assert!(promote::set_default_float_dtype(DType::I64).is_err());
/// assert_eq!(promote::default_float_dtype(), DType::F32);
/// ```
pub fn set_default_float_dtype(dtype: DType) -> Result<()> {
    let code = match dtype {
        DType::F32 => DEFAULT_F32,
        DType::F64 => DEFAULT_F64,
        DType::F16 => DEFAULT_F16,
        DType::BF16 => DEFAULT_BF16,
        _ => {
            return Err(Error::UnsupportedDType {
                op: "set_default_float_dtype",
                dtype,
                supported: "float32, float64, float16, bfloat16",
            });
        }
    };
    DEFAULT_FLOAT.store(code, Ordering::Relaxed);
    Ok(())
}

/// 0 for bool, 1 for integers, 2 for floats (rule 1).
const fn category(d: DType) -> u8 {
    if d.is_float() {
        2
    } else if d.is_int() {
        1
    } else {
        0
    }
}

/// The smallest dtype that holds both `a` and `b` (PyTorch's
/// `torch.promote_types`; rule 1).
///
/// ```
/// use kael_core::{promote::promote_types, DType};
/// assert_eq!(promote_types(DType::U8, DType::I8), DType::I16);
/// assert_eq!(promote_types(DType::F16, DType::BF16), DType::F32);
/// assert_eq!(promote_types(DType::I64, DType::F16), DType::F16);
/// assert_eq!(promote_types(DType::Bool, DType::U8), DType::U8);
/// ```
pub const fn promote_types(a: DType, b: DType) -> DType {
    use DType::*;
    let (ca, cb) = (category(a), category(b));
    if ca != cb {
        return if ca > cb { a } else { b };
    }
    match (a, b) {
        (F16, BF16) | (BF16, F16) => F32,
        (U8, I8) | (I8, U8) => I16,
        _ => {
            if rank_in_category(a) >= rank_in_category(b) {
                a
            } else {
                b
            }
        }
    }
}

/// Width order inside a category (`U8` sits with `I16` for signed
/// partners; the pairs that need a third dtype are handled above).
const fn rank_in_category(d: DType) -> u8 {
    match d {
        DType::Bool | DType::I8 | DType::U8 => 0,
        DType::I16 | DType::F16 | DType::BF16 => 1,
        DType::I32 | DType::F32 => 2,
        DType::I64 | DType::F64 => 3,
    }
}

/// Whether a result of dtype `from` may be written into a tensor of dtype
/// `to` by an in-place op (PyTorch's `torch.can_cast`): never into a lower
/// category (float into an integer tensor, a number into bool).
///
/// ```
/// use kael_core::{promote::can_cast, DType};
/// assert!(can_cast(DType::F64, DType::F16) && can_cast(DType::I64, DType::F32));
/// assert!(!can_cast(DType::F32, DType::I64) && !can_cast(DType::I32, DType::Bool));
/// ```
pub const fn can_cast(from: DType, to: DType) -> bool {
    category(from) <= category(to)
}

/// The result dtype of a set of operands (NOTE [Type promotion], rule 2):
/// feed each operand, then [`ResultType::dtype`].
///
/// ```
/// use kael_core::{promote::ResultType, DType, Number};
/// let mut r = ResultType::default();
/// r.tensor(DType::I32, 1);
/// r.tensor(DType::I64, 0);
/// assert_eq!(r.dtype(), Some(DType::I32));
/// r.number(Number::Float(0.5));
/// assert_eq!(r.dtype(), Some(DType::F32));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct ResultType {
    dim: Option<DType>,
    zero: Option<DType>,
    number: Option<DType>,
}

fn fold(acc: &mut Option<DType>, d: DType) {
    *acc = Some(match *acc {
        None => d,
        Some(a) => promote_types(a, d),
    });
}

/// A higher class's dtype, joined by a lower class's only when the lower
/// one's category is higher (PyTorch's `combine_categories`).
fn combine(higher: Option<DType>, lower: Option<DType>) -> Option<DType> {
    match (higher, lower) {
        (None, l) => l,
        (h, None) => h,
        (Some(h), Some(l)) => Some(if category(l) > category(h) {
            promote_types(h, l)
        } else {
            h
        }),
    }
}

impl ResultType {
    /// A tensor operand of dtype `dtype` and rank `rank`.
    pub fn tensor(&mut self, dtype: DType, rank: usize) {
        if rank == 0 {
            fold(&mut self.zero, dtype);
        } else {
            fold(&mut self.dim, dtype);
        }
    }

    /// A number operand.
    pub fn number(&mut self, n: Number) {
        fold(&mut self.number, n.promotion_dtype());
    }

    /// The result dtype; `None` when no operand was fed.
    pub fn dtype(&self) -> Option<DType> {
        combine(self.dim, combine(self.zero, self.number))
    }
}

/// The result dtype of two tensor operands of dtypes and ranks
/// `(a, ra)`, `(b, rb)`.
pub(crate) fn of_two(a: DType, ra: usize, b: DType, rb: usize) -> DType {
    if a == b {
        return a;
    }
    let mut r = ResultType::default();
    r.tensor(a, ra);
    r.tensor(b, rb);
    r.dtype().unwrap_or(a)
}

/// `dtype`, or the default float dtype for an integer or bool `dtype`
/// (rule 4).
pub(crate) fn to_float(dtype: DType) -> DType {
    if dtype.is_float() {
        dtype
    } else {
        default_float_dtype()
    }
}

/// Refuses an in-place write of a `result` dtype into `dest` (rule 5).
pub(crate) fn check_inplace(op: &'static str, result: DType, dest: DType) -> Result<()> {
    if can_cast(result, dest) {
        Ok(())
    } else {
        Err(Error::CannotCast { op, result, dest })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_join_only_with_a_higher_category() {
        // int32 tensor + int64 0-d: int32; + float64 0-d: float64
        assert_eq!(of_two(DType::I32, 1, DType::I64, 0), DType::I32);
        assert_eq!(of_two(DType::I32, 1, DType::F64, 0), DType::F64);
        // two 0-d tensors promote as tensors do
        assert_eq!(of_two(DType::I32, 0, DType::I64, 0), DType::I64);
        // bool tensor + int 0-d: the int
        assert_eq!(of_two(DType::Bool, 2, DType::U8, 0), DType::U8);
        let mut r = ResultType::default();
        r.tensor(DType::F16, 1);
        r.number(Number::Float(1.0));
        assert_eq!(r.dtype(), Some(DType::F16));
        let mut r = ResultType::default();
        r.tensor(DType::Bool, 1);
        r.number(Number::Int(3));
        assert_eq!(r.dtype(), Some(DType::I64));
        let mut r = ResultType::default();
        r.tensor(DType::U8, 1);
        r.number(Number::Int(3));
        assert_eq!(r.dtype(), Some(DType::U8));
    }

    #[test]
    fn numbers_that_do_not_fit_are_found() {
        assert!(!Number::Int(300).fits(DType::U8));
        assert!(!Number::Int(-1).fits(DType::U8));
        assert!(Number::Int(i64::MAX).fits(DType::I64));
        assert!(Number::Float(f64::NAN).fits(DType::F16));
        assert!(!Number::Float(2.5).fits(DType::I32));
    }
}
