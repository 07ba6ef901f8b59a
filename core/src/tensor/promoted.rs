//! Operands converted to the dtype an op computes in (NOTE [Type
//! promotion] in `promote`), before the same-dtype kernels run.

use super::Tensor;
use crate::backend::BinaryOp;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::promote::{self, Number};

/// The dtypes a binary op computes in and returns (they differ only for
/// bool arithmetic, which runs on `u8` and returns bool, as PyTorch's
/// `True + True` is `True`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BinaryDTypes {
    pub compute: DType,
    pub out: DType,
}

/// What `-` takes instead of bool operands (PyTorch refuses them too).
const SUB_BOOL: &str = "numeric dtypes (for masks use logical_not or logical_xor)";

/// Binary rows defined on bool operands: logical on 0/1 (PyTorch's
/// `+`/`*` on bool are or/and; `-` on bool is refused there too).
const fn works_on_bools(op: BinaryOp) -> bool {
    matches!(
        op,
        BinaryOp::Add
            | BinaryOp::Mul
            | BinaryOp::Maximum
            | BinaryOp::Minimum
            | BinaryOp::BitwiseAnd
            | BinaryOp::BitwiseOr
            | BinaryOp::BitwiseXor
    )
}

/// The dtypes `a op b` computes in (NOTE [Type promotion], rules 1, 2, 4).
pub(crate) fn binary_dtypes(op: BinaryOp, a: &Tensor, b: &Tensor) -> Result<BinaryDTypes> {
    if op == BinaryOp::Sub && (a.dtype() == DType::Bool || b.dtype() == DType::Bool) {
        // PyTorch refuses `-` with any bool operand, whatever the other is
        return Err(Error::UnsupportedDType {
            op: op.name(),
            dtype: DType::Bool,
            supported: SUB_BOOL,
        });
    }
    let mut r = promote::of_two(a.dtype(), a.rank(), b.dtype(), b.rank());
    if !r.is_float() && !op.works_on_ints() && op.works_on_floats() {
        r = promote::to_float(r);
    }
    if r == DType::Bool {
        if !works_on_bools(op) {
            return Err(Error::UnsupportedDType {
                op: op.name(),
                dtype: DType::Bool,
                supported: "numeric dtypes (bool takes +, *, maximum, minimum, bitwise ops)",
            });
        }
        return Ok(BinaryDTypes {
            compute: DType::U8,
            out: DType::Bool,
        });
    }
    if r.is_float() && !op.works_on_floats() {
        return Err(Error::UnsupportedDType {
            op: op.name(),
            dtype: r,
            supported: "integer and bool dtypes",
        });
    }
    Ok(BinaryDTypes { compute: r, out: r })
}

/// Whether `a op b` runs as it is: one dtype the op's kernels take.
pub(crate) fn runs_as_is(op: BinaryOp, a: DType, b: DType) -> bool {
    a == b
        && if a.is_float() {
            op.works_on_floats()
        } else {
            a.is_int() && op.works_on_ints()
        }
}

impl Tensor {
    /// `a op b` after converting both to the dtype the op computes in.
    pub(crate) fn binary_promoted(&self, op: BinaryOp, other: &Tensor) -> Result<Tensor> {
        promote::require(op.name())?;
        let d = binary_dtypes(op, self, other)?;
        let (a, b) = (self.to_dtype(d.compute)?, other.to_dtype(d.compute)?);
        debug_assert!(runs_as_is(op, a.dtype(), b.dtype()));
        a.binary_op(op, &b)?.to_dtype(d.out)
    }

    /// `n` as a 0-d tensor on this tensor's device that combines with
    /// `self` as PyTorch combines a tensor with a Python number: its dtype
    /// is the result dtype of `self` and `n` (NOTE [Type promotion]), so
    /// `int64 tensor + 2.5` computes in float32 and `int32 tensor + 2` in
    /// int32.
    ///
    /// # Errors
    /// A number the result dtype cannot hold (`uint8 tensor + 300`, which
    /// PyTorch wraps silently), named `op`.
    ///
    /// ```
    /// use kael_core::{DType, Device, Tensor};
    /// let x = Tensor::from_slice(&[1u8, 2], &[2], &Device::cpu())?;
    /// assert_eq!(x.number_operand("add", 3)?.dtype(), DType::U8);
    /// assert_eq!(x.number_operand("add", 0.5)?.dtype(), DType::F32);
    /// assert!(x.number_operand("add", 300).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn number_operand(&self, op: &'static str, n: impl Into<Number>) -> Result<Tensor> {
        let n = n.into();
        let dtype = if promote::ENABLED {
            let mut r = promote::ResultType::default();
            r.tensor(self.dtype(), self.rank());
            r.number(n);
            r.dtype().unwrap_or(self.dtype())
        } else {
            // without the feature a number must be of the tensor's kind:
            // the same answer, or a refusal (NOTE [Promotion feature])
            let d = self.dtype();
            let same_kind = match n {
                Number::Float(_) => d.is_float(),
                Number::Int(_) => d != DType::Bool,
                Number::Bool(_) => true,
            };
            if !same_kind {
                promote::require(op)?;
            }
            d
        };
        if !n.fits(dtype) {
            return Err(Error::InvalidArgument {
                op,
                reason: "the number does not fit the integer dtype (never wrapped); pass one in range or convert first (to_dtype)",
            });
        }
        let dev = self.device();
        match n {
            Number::Int(i) if dtype == DType::I64 => Tensor::scalar(i, &dev),
            _ => Tensor::full(&[], n.to_f64(), dtype, &dev),
        }
    }

    /// [`Tensor::number_operand`] for a subtraction: PyTorch refuses a
    /// bool on either side of `-`, a `true`/`false` number included.
    pub(crate) fn sub_operand(&self, op: &'static str, n: impl Into<Number>) -> Result<Tensor> {
        let n = n.into();
        if matches!(n, Number::Bool(_)) {
            return Err(Error::UnsupportedDType {
                op,
                dtype: DType::Bool,
                supported: SUB_BOOL,
            });
        }
        self.number_operand(op, n)
    }

    /// `f` of `tensors`, converted first to their common dtype when they
    /// differ (`cat`, `stack`; NOTE [Type promotion]).
    pub(crate) fn with_common_dtype<R>(
        op: &'static str,
        tensors: &[&Tensor],
        f: impl FnOnce(&[&Tensor]) -> Result<R>,
    ) -> Result<R> {
        let Some(first) = tensors.first() else {
            return f(tensors);
        };
        if tensors.iter().all(|t| t.dtype() == first.dtype()) {
            return f(tensors);
        }
        promote::require(op)?;
        let mut r = promote::ResultType::default();
        for t in tensors {
            // cat and stack promote all inputs as tensors (PyTorch).
            r.tensor(t.dtype(), 1);
        }
        let dtype = r.dtype().unwrap_or(first.dtype());
        let mut converted = alloc::vec::Vec::new();
        converted
            .try_reserve_exact(tensors.len())
            .map_err(|_| Error::OutOfMemory {
                requested: tensors.len() * core::mem::size_of::<Tensor>(),
                available: None,
            })?;
        for t in tensors {
            converted.push(t.to_dtype(dtype)?);
        }
        let refs: alloc::vec::Vec<&Tensor> = converted.iter().collect();
        f(&refs)
    }
}
