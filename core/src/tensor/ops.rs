//! Elementwise operations with broadcasting, and operator overloads.

use super::Tensor;
use crate::autograd::SavedTensor;
use crate::autograd::rules::Rule;
use crate::backend::{BinaryOp, CmpOp, Src, UnaryOp};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::promote::Number;
use crate::shape::{Dims, broadcast_into, broadcast_shapes};
use alloc::boxed::Box;

impl Tensor {
    /// `op(self)` into a new tensor of the same shape and dtype.
    pub(crate) fn unary_op(&self, op: UnaryOp) -> Result<Tensor> {
        if !op.works_on_ints() && !self.dtype().is_float() {
            // float-only rows compute integers and bools in the default
            // float dtype (NOTE [Type promotion], rule 4)
            crate::promote::require(op.name())?;
            return self
                .to_dtype(crate::promote::to_float(self.dtype()))?
                .unary_op(op);
        }
        if self.dtype() == DType::Bool {
            return Err(Error::UnsupportedDType {
                op: op.name(),
                dtype: DType::Bool,
                supported: "numeric dtypes",
            });
        }
        if !op.works_on_ints() {
            self.dtype().require_float(op.name())?;
        }
        check_unary_scalars(op, op.name(), self.dtype())?;
        // The kernel writes every element: no zeroing (NOTE in `alloc_for_overwrite`).
        let out = self.with_src_on(|s, dev| {
            Tensor::written(self.dims(), self.dtype(), dev, |d| {
                dev.backend().unary(op, s, d)
            })
        })?;
        crate::autograd::record(&out, &[self], || {
            let (need_x, need_out) = op.saves();
            Ok(Rule::Unary {
                op,
                x: need_x.then(|| SavedTensor::input(self)),
                out: if need_out {
                    Some(SavedTensor::output(&out)?)
                } else {
                    None
                },
            })
        })?;
        Ok(out)
    }

    /// Broadcast views of `self` and `other` to their common shape.
    pub(crate) fn broadcast_pair(
        &self,
        op: &'static str,
        other: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        self.same_device(op, other)?;
        if self.shape() == other.shape() {
            return Ok((self.clone(), other.clone()));
        }
        let shape = broadcast_shapes(op, self.shape(), other.shape())?;
        let a = if self.shape() == &shape[..] {
            self.clone()
        } else {
            self.broadcast_to(&shape)?
        };
        let b = if other.shape() == &shape[..] {
            other.clone()
        } else {
            other.broadcast_to(&shape)?
        };
        Ok((a, b))
    }

    /// `self op other` with broadcasting.
    pub(crate) fn binary_op(&self, op: BinaryOp, other: &Tensor) -> Result<Tensor> {
        if !super::promoted::runs_as_is(op, self.dtype(), other.dtype()) {
            // NOTE [Type promotion]
            return self.binary_promoted(op, other);
        }
        let kernel = |sa: Src<'_>, dev: &Device, sb: Src<'_>, dev_b: &Device| {
            let (lhs, rhs) = (dev.kind(), dev_b.kind());
            if lhs != rhs {
                return Err(Error::DeviceMismatch {
                    op: op.name(),
                    lhs,
                    rhs,
                });
            }
            Tensor::written(sa.layout.shape(), sa.dtype, dev, |d| {
                dev.backend().binary(op, sa, sb, d)
            })
        };
        // Equal shapes (the common case) read each operand's placement once
        // (NOTE [Small-op path]); others are broadcast to views first.
        let same_shape = self.shape() == other.shape();
        let out = if same_shape {
            self.with_src_on(|sa, dev| other.with_src_on(|sb, dev_b| kernel(sa, dev, sb, dev_b)))?
        } else {
            // Broadcast layouts, not broadcast views: no tensor is made.
            let mut shape = Dims::new();
            broadcast_into(op.name(), self.shape(), other.shape(), &mut shape)?;
            self.with_src_as(&shape, |sa, dev| {
                other.with_src_as(&shape, |sb, dev_b| kernel(sa, dev, sb, dev_b))
            })?
        };
        crate::autograd::record(&out, &[self, other], || {
            let (na, nb, no) = op.saves();
            Ok(Rule::Binary {
                op,
                a: na.then(|| SavedTensor::input(self)),
                b: nb.then(|| SavedTensor::input(other)),
                out: if no {
                    Some(SavedTensor::output(&out)?)
                } else {
                    None
                },
                shapes: (!same_shape)
                    .then(|| Box::new([self.dims().clone(), other.dims().clone()])),
            })
        })?;
        Ok(out)
    }

    pub(crate) fn compare_op(&self, op: CmpOp, other: &Tensor) -> Result<Tensor> {
        if self.dtype() != other.dtype() {
            // NOTE [Type promotion]: compared in the common dtype
            crate::promote::require(op.name())?;
            let r = crate::promote::of_two(self.dtype(), self.rank(), other.dtype(), other.rank());
            return self.to_dtype(r)?.compare_op(op, &other.to_dtype(r)?);
        }
        let (a, b) = self.broadcast_pair(op.name(), other)?;
        a.with_src_on(|sa, dev| {
            b.with_src(|sb| {
                Tensor::written(a.dims(), DType::Bool, dev, |d| {
                    dev.backend().compare(op, sa, sb, d)
                })
            })
        })
    }

    /// A rank-0 tensor of `value` with this tensor's dtype and device.
    /// A value the dtype does not hold exactly (2.5, NaN or 1e30 for an
    /// integer tensor) is refused, never truncated ([`check_scalar`]);
    /// callers name the public operation by renaming the error.
    pub(crate) fn scalar_like(&self, value: f64) -> Result<Tensor> {
        self.scalar_arg("scalar operand", value)
    }

    /// A rank-0 fill value for `op` (`masked_fill`, `scatter_value`),
    /// converted as PyTorch's fills convert ([`check_fill`]).
    pub(crate) fn fill_arg(&self, op: &'static str, value: f64) -> Result<Tensor> {
        check_fill(op, self.dtype(), value)?;
        Tensor::full(&[], value, self.dtype(), &self.device())
    }

    /// [`Tensor::scalar_like`] for a scalar the user passed to `op`, which
    /// the error names.
    pub(crate) fn scalar_arg(&self, op: &'static str, value: f64) -> Result<Tensor> {
        check_scalar(op, self.dtype(), value)?;
        Tensor::full(&[], value, self.dtype(), &self.device())
    }
}

/// Refuses a value a fill (`full`, `fill_`, `masked_fill`,
/// `scatter_value`) cannot convert to `dtype`: PyTorch converts toward zero
/// for an integer dtype (`full((2,), 2.5, dtype=int64)` is `[2, 2]`, an
/// explicit conversion to the dtype named) but refuses NaN, infinities and
/// values out of range, which would otherwise saturate or wrap.
pub(crate) fn check_fill(op: &'static str, dtype: DType, value: f64) -> Result<()> {
    if dtype.holds_cast(value) {
        return Ok(());
    }
    Err(Error::InvalidArgument {
        op,
        reason: "the value cannot be converted to the tensor's dtype without overflow (NaN, infinite or out of range for an integer dtype); pass a value in range, or cast the tensor to a float dtype first (to_dtype)",
    })
}

/// Refuses a scalar that `dtype` does not hold exactly: an integer tensor
/// with a non-integral, non-finite or out-of-range scalar would otherwise
/// be truncated or saturated silently. PyTorch promotes such a pair to
/// float; until kael does (the type-promotion issue), it is an error.
pub(crate) fn check_scalar(op: &'static str, dtype: DType, value: f64) -> Result<()> {
    if dtype.holds(value) {
        return Ok(());
    }
    Err(Error::InvalidArgument {
        op,
        reason: "the scalar is not a value of the tensor's dtype (an integer tensor takes only integral, finite, in-range scalars; it is never truncated); cast the tensor to a float dtype first (to_dtype), or pass an integral value",
    })
}

/// Refuses a unary op's bound (clamp's and hardtanh's) that is not an
/// integer on an integer tensor: `clamp(0.5)` on an integer tensor is not
/// `clamp(0)` (PyTorch promotes to float), nor is `clamp(max=inf)` integer
/// in PyTorch. An integral bound past the dtype's range is kept: clamping
/// to it saturates to the range, which is exactly the clamp (`u8` clamped
/// to `[-1, 2]` is `[0, 2]`, as in PyTorch).
pub(crate) fn check_unary_scalars(op: UnaryOp, name: &'static str, dtype: DType) -> Result<()> {
    let (lo, hi) = match op {
        UnaryOp::Clamp(lo, hi) => (lo, hi),
        UnaryOp::Hardtanh(lo, hi) => (Some(lo), Some(hi)),
        _ => return Ok(()),
    };
    for b in [lo, hi].into_iter().flatten() {
        if dtype.is_int() && !(b.is_finite() && b == libm::trunc(b)) {
            return check_scalar(name, dtype, b);
        }
    }
    Ok(())
}

impl Tensor {
    /// `self + value`; the number promotes as PyTorch's Python numbers do
    /// (`int64 + 10` is int64, `int64 + 0.5` float32; NOTE [Type
    /// promotion]).
    ///
    /// # Errors
    /// As [`Tensor::add`]; a number the result dtype cannot hold
    /// (`uint8 + 300`).
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::from_slice(&[1i64, 2], &[2], &Device::cpu())?;
    /// assert_eq!(a.add_scalar(10)?.to_vec::<i64>()?, vec![11, 12]);
    /// assert_eq!(a.add_scalar(0.5)?.to_vec::<f32>()?, vec![1.5, 2.5]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn add_scalar(&self, value: impl Into<Number>) -> Result<Tensor> {
        self.number_operand("add_scalar", value)
            .and_then(|s| self.add(&s))
            .map_err(|e| e.renamed("add_scalar"))
    }

    /// `self * value`.
    ///
    /// # Errors
    /// As [`Tensor::mul`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::from_slice(&[1.0f32, 2.0], &[2], &Device::cpu())?;
    /// assert_eq!(a.mul_scalar(-2.0)?.to_vec::<f32>()?, vec![-2.0, -4.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn mul_scalar(&self, value: impl Into<Number>) -> Result<Tensor> {
        self.number_operand("mul_scalar", value)
            .and_then(|s| self.mul(&s))
            .map_err(|e| e.renamed("mul_scalar"))
    }
}

impl Tensor {
    /// `cond ? on_true : on_false` elementwise; `self` is the `Bool`
    /// condition; all three broadcast together.
    ///
    /// # Errors
    /// A non-bool condition; shapes that do not broadcast. Branches of
    /// different dtypes promote (NOTE [Type promotion]).
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let dev = Device::cpu();
    /// let x = Tensor::from_slice(&[-1.0f32, 2.0], &[2], &dev)?;
    /// let zero = Tensor::scalar(0.0f32, &dev)?;
    /// assert_eq!(x.gt(&zero)?.where_cond(&x, &zero)?.to_vec::<f32>()?, vec![0.0, 2.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn where_cond(&self, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
        if self.dtype() != DType::Bool {
            return Err(Error::DTypeMismatch {
                op: "where",
                expected: DType::Bool,
                got: self.dtype(),
            });
        }
        if on_true.dtype() != on_false.dtype() {
            // NOTE [Type promotion]
            crate::promote::require("where")?;
            let r = crate::promote::of_two(
                on_true.dtype(),
                on_true.rank(),
                on_false.dtype(),
                on_false.rank(),
            );
            return self.where_cond(&on_true.to_dtype(r)?, &on_false.to_dtype(r)?);
        }
        self.same_device("where", on_true)?;
        self.same_device("where", on_false)?;
        let shape = broadcast_shapes("where", self.shape(), on_true.shape())?;
        let shape = broadcast_shapes("where", &shape, on_false.shape())?;
        let (c, t, f) = (
            self.broadcast_to(&shape)?,
            on_true.broadcast_to(&shape)?,
            on_false.broadcast_to(&shape)?,
        );
        let dev = self.device();
        let out = Tensor::alloc_for_overwrite(&shape, on_true.dtype(), &dev)?;
        c.with_src(|sc| {
            t.with_src(|st| {
                f.with_src(|sf| out.with_src(|d| dev.backend().where_cond(sc, st, sf, d)))
            })
        })?;
        crate::autograd::record(&out, &[self, on_true, on_false], || {
            Ok(Rule::Where {
                cond: self.clone(),
                t_shape: on_true.dims().clone(),
                f_shape: Box::new(on_false.dims().clone()),
            })
        })?;
        Ok(out)
    }
}

// ------------------------------------------------------------ operators

macro_rules! binop_overload {
    ($tr:ident, $m:ident, $f:ident) => {
        impl core::ops::$tr<&Tensor> for &Tensor {
            type Output = Result<Tensor>;
            fn $m(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::$f(self, rhs)
            }
        }
        impl core::ops::$tr<Tensor> for Tensor {
            type Output = Result<Tensor>;
            fn $m(self, rhs: Tensor) -> Result<Tensor> {
                Tensor::$f(&self, &rhs)
            }
        }
        impl core::ops::$tr<f64> for &Tensor {
            type Output = Result<Tensor>;
            fn $m(self, rhs: f64) -> Result<Tensor> {
                Tensor::$f(self, &self.number_operand(stringify!($f), rhs)?)
            }
        }
    };
}
binop_overload!(Add, add, add);
binop_overload!(Sub, sub, sub);
binop_overload!(Mul, mul, mul);
binop_overload!(Div, div, div);

impl core::ops::Neg for &Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(self)
    }
}
