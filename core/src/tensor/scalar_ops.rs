//! Arithmetic with a scalar on either side, out of place and in place
//! (PyTorch's `x - 2`, `x / 2`, `2 - x` (`rsub`), `2 / x`, `x.add_(2)`, ...).
//!
//! The number becomes an operand of the dtype PyTorch gives a Python
//! number next to the tensor ([`Tensor::number_operand`], NOTE [Type
//! promotion]), broadcast, and the binary op of the op table runs; errors
//! name the method called.

use super::Tensor;
use crate::backend::BinaryOp;
use crate::error::Result;
use crate::promote::Number;

impl Tensor {
    /// `self - value`.
    ///
    /// # Errors
    /// As [`Tensor::sub`], named `sub_scalar`.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::from_slice(&[5i32, 7], &[2], &Device::cpu())?;
    /// assert_eq!(a.sub_scalar(2)?.to_vec::<i32>()?, vec![3, 5]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn sub_scalar(&self, value: impl Into<Number>) -> Result<Tensor> {
        self.binary_op(BinaryOp::Sub, &self.sub_operand("sub_scalar", value)?)
            .map_err(|e| e.renamed("sub_scalar"))
    }

    /// `self / value` (float dtypes).
    ///
    /// # Errors
    /// As [`Tensor::div`], named `div_scalar`.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::from_slice(&[1.0f32, -3.0], &[2], &Device::cpu())?;
    /// assert_eq!(a.div_scalar(2.0)?.to_vec::<f32>()?, vec![0.5, -1.5]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn div_scalar(&self, value: impl Into<Number>) -> Result<Tensor> {
        self.binary_op(BinaryOp::Div, &self.number_operand("div_scalar", value)?)
            .map_err(|e| e.renamed("div_scalar"))
    }

    /// `value - self` (PyTorch's `rsub`, `2 - x`).
    ///
    /// # Errors
    /// As [`Tensor::sub`], named `rsub`.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::from_slice(&[1.0f32, 5.0], &[2], &Device::cpu())?;
    /// assert_eq!(a.rsub(2.0)?.to_vec::<f32>()?, vec![1.0, -3.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn rsub(&self, value: impl Into<Number>) -> Result<Tensor> {
        self.sub_operand("rsub", value)?
            .binary_op(BinaryOp::Sub, self)
            .map_err(|e| e.renamed("rsub"))
    }

    /// `value / self` (float dtypes; `2 / x`).
    ///
    /// # Errors
    /// As [`Tensor::div`], named `rdiv`.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::from_slice(&[4.0f32, -0.5], &[2], &Device::cpu())?;
    /// assert_eq!(a.rdiv(2.0)?.to_vec::<f32>()?, vec![0.5, -4.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn rdiv(&self, value: impl Into<Number>) -> Result<Tensor> {
        self.number_operand("rdiv", value)?
            .binary_op(BinaryOp::Div, self)
            .map_err(|e| e.renamed("rdiv"))
    }

    /// `self += value`, in place.
    ///
    /// # Errors
    /// As [`Tensor::add_`], named `add_scalar_`; on error `self` is
    /// unchanged.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::from_slice(&[1i64, 2], &[2], &Device::cpu())?;
    /// a.add_scalar_(10)?;
    /// assert_eq!(a.to_vec::<i64>()?, vec![11, 12]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn add_scalar_(&self, value: impl Into<Number>) -> Result<()> {
        self.binary_(
            BinaryOp::Add,
            "add_scalar_",
            &self.number_operand("add_scalar_", value)?,
        )
    }

    /// `self -= value`, in place.
    ///
    /// # Errors
    /// As [`Tensor::add_scalar_`], named `sub_scalar_`.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::from_slice(&[1.0f32, 2.0], &[2], &Device::cpu())?;
    /// a.sub_scalar_(0.5)?;
    /// assert_eq!(a.to_vec::<f32>()?, vec![0.5, 1.5]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn sub_scalar_(&self, value: impl Into<Number>) -> Result<()> {
        self.binary_(
            BinaryOp::Sub,
            "sub_scalar_",
            &self.sub_operand("sub_scalar_", value)?,
        )
    }

    /// `self *= value`, in place.
    ///
    /// # Errors
    /// As [`Tensor::add_scalar_`], named `mul_scalar_`.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::from_slice(&[1.0f32, -2.0], &[2], &Device::cpu())?;
    /// a.mul_scalar_(3.0)?;
    /// assert_eq!(a.to_vec::<f32>()?, vec![3.0, -6.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn mul_scalar_(&self, value: impl Into<Number>) -> Result<()> {
        self.binary_(
            BinaryOp::Mul,
            "mul_scalar_",
            &self.number_operand("mul_scalar_", value)?,
        )
    }

    /// `self /= value`, in place (float dtypes).
    ///
    /// # Errors
    /// As [`Tensor::add_scalar_`], named `div_scalar_`; integer dtypes.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::from_slice(&[1.0f32, -3.0], &[2], &Device::cpu())?;
    /// a.div_scalar_(2.0)?;
    /// assert_eq!(a.to_vec::<f32>()?, vec![0.5, -1.5]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn div_scalar_(&self, value: impl Into<Number>) -> Result<()> {
        self.binary_(
            BinaryOp::Div,
            "div_scalar_",
            &self.number_operand("div_scalar_", value)?,
        )
    }

    /// `self ^ exponent` (Python's `x ** n`): an integer tensor to an
    /// integer power stays integer (by squaring, wrapping); a float
    /// exponent or a float tensor computes in the promoted float dtype,
    /// through [`Tensor::powf`] (whose gradient is 0 at `x = 0` for the
    /// exponent 0, as PyTorch's).
    ///
    /// # Errors
    /// As [`Tensor::pow`], named `pow_scalar`.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::from_slice(&[2i64, -3], &[2], &Device::cpu())?;
    /// assert_eq!(a.pow_scalar(3)?.to_vec::<i64>()?, vec![8, -27]);
    /// assert_eq!(a.pow_scalar(0.5)?.dtype(), kael_core::DType::F32);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn pow_scalar(&self, exponent: impl Into<Number>) -> Result<Tensor> {
        let n = exponent.into();
        if self.dtype() == crate::DType::Bool && matches!(n, Number::Bool(_)) {
            // bool ** bool stays bool (x ** true is x, x ** false is true)
            let e = Tensor::full(&[], n.to_f64(), crate::DType::U8, &self.device())?;
            return self
                .to_dtype(crate::DType::U8)?
                .binary_op(BinaryOp::Pow, &e)?
                .to_dtype(crate::DType::Bool);
        }
        let e = self.number_operand("pow_scalar", n)?;
        if let (Number::Int(i), true) = (n, e.dtype().is_int()) {
            if i < 0 {
                return Err(crate::Error::InvalidArgument {
                    op: "pow_scalar",
                    reason: "integers to negative integer powers are not allowed (as in PyTorch); pass a float exponent (e.g. -2.0) for a float result",
                });
            }
        }
        if e.dtype().is_float() {
            self.to_dtype(e.dtype())?.powf(n.to_f64())
        } else {
            self.binary_op(BinaryOp::Pow, &e)
        }
        .map_err(|e| e.renamed("pow_scalar"))
    }
}
