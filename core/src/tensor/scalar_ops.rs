//! Arithmetic with a scalar on either side, out of place and in place
//! (PyTorch's `x - 2`, `x / 2`, `2 - x` (`rsub`), `2 / x`, `x.add_(2)`, ...).
//!
//! The scalar is converted to the tensor's dtype (as the existing
//! `add_scalar` does), broadcast, and the binary op of the op table runs;
//! errors name the method called.

use super::Tensor;
use crate::backend::BinaryOp;
use crate::error::Result;

impl Tensor {
    /// `self - value`.
    ///
    /// # Errors
    /// As [`Tensor::sub`], named `sub_scalar`.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::from_slice(&[5i32, 7], &[2], &Device::cpu())?;
    /// assert_eq!(a.sub_scalar(2.0)?.to_vec::<i32>()?, vec![3, 5]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn sub_scalar(&self, value: f64) -> Result<Tensor> {
        self.binary_op(BinaryOp::Sub, &self.scalar_arg("sub_scalar", value)?)
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
    pub fn div_scalar(&self, value: f64) -> Result<Tensor> {
        self.binary_op(BinaryOp::Div, &self.scalar_arg("div_scalar", value)?)
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
    pub fn rsub(&self, value: f64) -> Result<Tensor> {
        self.scalar_arg("rsub", value)?
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
    pub fn rdiv(&self, value: f64) -> Result<Tensor> {
        self.scalar_arg("rdiv", value)?
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
    /// a.add_scalar_(10.0)?;
    /// assert_eq!(a.to_vec::<i64>()?, vec![11, 12]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn add_scalar_(&self, value: f64) -> Result<()> {
        self.binary_(
            BinaryOp::Add,
            "add_scalar_",
            &self.scalar_arg("add_scalar_", value)?,
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
    pub fn sub_scalar_(&self, value: f64) -> Result<()> {
        self.binary_(
            BinaryOp::Sub,
            "sub_scalar_",
            &self.scalar_arg("sub_scalar_", value)?,
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
    pub fn mul_scalar_(&self, value: f64) -> Result<()> {
        self.binary_(
            BinaryOp::Mul,
            "mul_scalar_",
            &self.scalar_arg("mul_scalar_", value)?,
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
    pub fn div_scalar_(&self, value: f64) -> Result<()> {
        self.binary_(
            BinaryOp::Div,
            "div_scalar_",
            &self.scalar_arg("div_scalar_", value)?,
        )
    }
}
