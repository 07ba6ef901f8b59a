//! Elementwise operations with broadcasting, and operator overloads.

use super::Tensor;
use crate::autograd::SavedTensor;
use crate::autograd::rules::{self, Rule};
use crate::backend::{BinaryOp, CmpOp, UnaryOp};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::broadcast_shapes;

impl Tensor {
    /// `op(self)` into a new tensor of the same shape and dtype.
    pub(crate) fn unary_op(&self, op: UnaryOp) -> Result<Tensor> {
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
        let dev = self.device();
        // The kernel writes every element: no zeroing (NOTE in `alloc_for_overwrite`).
        let out = Tensor::alloc_for_overwrite(self.shape(), self.dtype(), &dev)?;
        self.with_src(|s| out.with_src(|d| dev.backend().unary(op, s, d)))?;
        crate::autograd::record(&out, &[self], || {
            let (need_x, need_out) = rules::unary_needs(op);
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
        self.same_dtype(op.name(), other)?;
        check_binary_dtype(op, self.dtype())?;
        let (a, b) = self.broadcast_pair(op.name(), other)?;
        let dev = a.device();
        let out = Tensor::alloc_for_overwrite(a.shape(), a.dtype(), &dev)?;
        a.with_src(|sa| b.with_src(|sb| out.with_src(|d| dev.backend().binary(op, sa, sb, d))))?;
        crate::autograd::record(&out, &[self, other], || {
            let (na, nb, no) = rules::binary_needs(op);
            Ok(Rule::Binary {
                op,
                a: na.then(|| SavedTensor::input(self)),
                b: nb.then(|| SavedTensor::input(other)),
                out: if no {
                    Some(SavedTensor::output(&out)?)
                } else {
                    None
                },
                a_shape: self.dims().clone(),
                b_shape: other.dims().clone(),
            })
        })?;
        Ok(out)
    }

    fn compare_op(&self, op: CmpOp, other: &Tensor) -> Result<Tensor> {
        self.same_dtype("compare", other)?;
        let (a, b) = self.broadcast_pair("compare", other)?;
        let dev = a.device();
        let out = Tensor::alloc_for_overwrite(a.shape(), DType::Bool, &dev)?;
        a.with_src(|sa| b.with_src(|sb| out.with_src(|d| dev.backend().compare(op, sa, sb, d))))?;
        Ok(out)
    }

    /// A rank-0 tensor of `value` with this tensor's dtype and device.
    pub(crate) fn scalar_like(&self, value: f64) -> Result<Tensor> {
        Tensor::full(&[], value, self.dtype(), &self.device())
    }
}

pub(crate) fn check_binary_dtype(op: BinaryOp, dtype: DType) -> Result<()> {
    if dtype == DType::Bool {
        return Err(Error::UnsupportedDType {
            op: op.name(),
            dtype,
            supported: "numeric dtypes",
        });
    }
    if matches!(op, BinaryOp::Div | BinaryOp::Pow) {
        dtype.require_float(op.name())?;
    }
    Ok(())
}

macro_rules! unary_methods {
    ($($(#[$m:meta])* $name:ident => $op:expr, $example:literal;)*) => {$(
        $(#[$m])*
        ///
        /// # Errors
        /// [`Error::UnsupportedDType`] for dtypes the op is not defined on.
        ///
        /// ```
        /// use kael_core::{Device, Tensor};
        /// let x = Tensor::from_slice(&[-1.0f32, 0.5, 2.0], &[3], &Device::cpu())?;
        #[doc = $example]
        /// # Ok::<(), kael_core::Error>(())
        /// ```
        pub fn $name(&self) -> Result<Tensor> {
            self.unary_op($op)
        }
    )*};
}

impl Tensor {
    unary_methods! {
        /// `-x`.
        neg => UnaryOp::Neg, "assert_eq!(x.neg()?.to_vec::<f32>()?, vec![1.0, -0.5, -2.0]);";
        /// `|x|`.
        abs => UnaryOp::Abs, "assert_eq!(x.abs()?.to_vec::<f32>()?, vec![1.0, 0.5, 2.0]);";
        /// `e^x`.
        exp => UnaryOp::Exp, "assert!((x.exp()?.to_vec::<f32>()?[2] - 7.389056).abs() < 1e-5);";
        /// Natural logarithm (NaN for negative inputs, as in PyTorch).
        log => UnaryOp::Log, "assert!(x.log()?.to_vec::<f32>()?[0].is_nan());";
        /// Square root.
        sqrt => UnaryOp::Sqrt, "assert!((x.sqrt()?.to_vec::<f32>()?[2] - 1.4142135).abs() < 1e-6);";
        /// `x * x`.
        sqr => UnaryOp::Sqr, "assert_eq!(x.sqr()?.to_vec::<f32>()?, vec![1.0, 0.25, 4.0]);";
        /// `1 / x`.
        recip => UnaryOp::Recip, "assert_eq!(x.recip()?.to_vec::<f32>()?, vec![-1.0, 2.0, 0.5]);";
        /// Hyperbolic tangent.
        tanh => UnaryOp::Tanh, "assert!((x.tanh()?.to_vec::<f32>()?[1] - 0.46211717).abs() < 1e-6);";
        /// Logistic sigmoid.
        sigmoid => UnaryOp::Sigmoid, "assert!((x.sigmoid()?.to_vec::<f32>()?[0] - 0.26894143).abs() < 1e-6);";
        /// `max(x, 0)`.
        relu => UnaryOp::Relu, "assert_eq!(x.relu()?.to_vec::<f32>()?, vec![0.0, 0.5, 2.0]);";
        /// GELU, exact erf form (PyTorch's default `approximate='none'`).
        gelu => UnaryOp::Gelu, "assert!((x.gelu()?.to_vec::<f32>()?[0] + 0.15865526).abs() < 1e-6);";
        /// GELU, tanh approximation (`approximate='tanh'`).
        gelu_tanh => UnaryOp::GeluTanh, "assert!((x.gelu_tanh()?.to_vec::<f32>()?[0] + 0.15880801).abs() < 1e-6);";
        /// `x * sigmoid(x)`.
        silu => UnaryOp::Silu, "assert!((x.silu()?.to_vec::<f32>()?[0] + 0.26894143).abs() < 1e-6);";
        /// Sine.
        sin => UnaryOp::Sin, "assert!((x.sin()?.to_vec::<f32>()?[1] - 0.47942555).abs() < 1e-6);";
        /// Cosine.
        cos => UnaryOp::Cos, "assert!((x.cos()?.to_vec::<f32>()?[1] - 0.87758255).abs() < 1e-6);";
        /// Sign: -1, 0 or 1.
        sign => UnaryOp::Sign, "assert_eq!(x.sign()?.to_vec::<f32>()?, vec![-1.0, 1.0, 1.0]);";
        /// The error function.
        erf => UnaryOp::Erf, "assert!((x.erf()?.to_vec::<f32>()?[1] - 0.5204999).abs() < 1e-6);";
    }

    /// `x ^ exponent` (float dtypes).
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for non-float dtypes.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[2.0f32, 3.0], &[2], &Device::cpu())?;
    /// assert_eq!(x.powf(2.0)?.to_vec::<f32>()?, vec![4.0, 9.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn powf(&self, exponent: f64) -> Result<Tensor> {
        self.unary_op(UnaryOp::Powf(exponent))
    }

    /// Clamps into `[min, max]`; `None` leaves that side open.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `min > max`; bool dtype.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[-2i64, 0, 5], &[3], &Device::cpu())?;
    /// assert_eq!(x.clamp(Some(-1.0), Some(3.0))?.to_vec::<i64>()?, vec![-1, 0, 3]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn clamp(&self, min: Option<f64>, max: Option<f64>) -> Result<Tensor> {
        check_clamp(min, max)?;
        self.unary_op(UnaryOp::Clamp(min, max))
    }

    /// `self * mul + add` (float dtypes).
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for non-float dtypes.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0], &[2], &Device::cpu())?;
    /// assert_eq!(x.affine(2.0, 1.0)?.to_vec::<f32>()?, vec![3.0, 5.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn affine(&self, mul: f64, add: f64) -> Result<Tensor> {
        self.unary_op(UnaryOp::Affine { mul, add })
    }

    /// Elementwise `self + other`, broadcasting.
    ///
    /// # Errors
    /// Shapes that do not broadcast; different dtypes or devices; bool.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let dev = Device::cpu();
    /// let a = Tensor::from_slice(&[1.0f32, 2.0], &[2, 1], &dev)?;
    /// let b = Tensor::from_slice(&[10.0f32, 20.0, 30.0], &[3], &dev)?;
    /// assert_eq!(a.add(&b)?.to_vec::<f32>()?, vec![11.0, 21.0, 31.0, 12.0, 22.0, 32.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn add(&self, other: &Tensor) -> Result<Tensor> {
        self.binary_op(BinaryOp::Add, other)
    }

    /// Elementwise `self - other`, broadcasting.
    ///
    /// # Errors
    /// As [`Tensor::add`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::from_slice(&[5i32, 7], &[2], &Device::cpu())?;
    /// assert_eq!(a.sub(&a)?.to_vec::<i32>()?, vec![0, 0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn sub(&self, other: &Tensor) -> Result<Tensor> {
        self.binary_op(BinaryOp::Sub, other)
    }

    /// Elementwise `self * other`, broadcasting.
    ///
    /// # Errors
    /// As [`Tensor::add`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::from_slice(&[2.0f32, 3.0], &[2], &Device::cpu())?;
    /// assert_eq!(a.mul(&a)?.to_vec::<f32>()?, vec![4.0, 9.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn mul(&self, other: &Tensor) -> Result<Tensor> {
        self.binary_op(BinaryOp::Mul, other)
    }

    /// Elementwise `self / other`, broadcasting (float dtypes; convert
    /// integers with `to_dtype` first).
    ///
    /// # Errors
    /// As [`Tensor::add`]; integer dtypes.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::from_slice(&[1.0f32, 3.0], &[2], &Device::cpu())?;
    /// assert_eq!(a.div(&a.affine(0.0, 2.0)?)?.to_vec::<f32>()?, vec![0.5, 1.5]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn div(&self, other: &Tensor) -> Result<Tensor> {
        self.binary_op(BinaryOp::Div, other)
    }

    /// Elementwise maximum (NaN propagates), broadcasting.
    ///
    /// # Errors
    /// As [`Tensor::add`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::from_slice(&[1.0f32, 5.0], &[2], &Device::cpu())?;
    /// let b = Tensor::from_slice(&[3.0f32], &[1], &Device::cpu())?;
    /// assert_eq!(a.maximum(&b)?.to_vec::<f32>()?, vec![3.0, 5.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn maximum(&self, other: &Tensor) -> Result<Tensor> {
        self.binary_op(BinaryOp::Maximum, other)
    }

    /// Elementwise minimum (NaN propagates), broadcasting.
    ///
    /// # Errors
    /// As [`Tensor::add`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::from_slice(&[1.0f32, 5.0], &[2], &Device::cpu())?;
    /// let b = Tensor::from_slice(&[3.0f32], &[1], &Device::cpu())?;
    /// assert_eq!(a.minimum(&b)?.to_vec::<f32>()?, vec![1.0, 3.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn minimum(&self, other: &Tensor) -> Result<Tensor> {
        self.binary_op(BinaryOp::Minimum, other)
    }

    /// Elementwise `self ^ other` (float dtypes), broadcasting.
    ///
    /// # Errors
    /// As [`Tensor::div`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::from_slice(&[2.0f32, 3.0], &[2], &Device::cpu())?;
    /// assert_eq!(a.pow(&a)?.to_vec::<f32>()?, vec![4.0, 27.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn pow(&self, other: &Tensor) -> Result<Tensor> {
        self.binary_op(BinaryOp::Pow, other)
    }

    /// `self + value`.
    ///
    /// # Errors
    /// As [`Tensor::add`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::from_slice(&[1i64, 2], &[2], &Device::cpu())?;
    /// assert_eq!(a.add_scalar(10.0)?.to_vec::<i64>()?, vec![11, 12]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn add_scalar(&self, value: f64) -> Result<Tensor> {
        self.add(&self.scalar_like(value)?)
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
    pub fn mul_scalar(&self, value: f64) -> Result<Tensor> {
        self.mul(&self.scalar_like(value)?)
    }
}

macro_rules! compare_methods {
    ($($name:ident => $op:expr, $sym:literal, $expect:literal;)*) => {$(
        #[doc = concat!("Elementwise `self ", $sym, " other` into a `Bool` tensor, broadcasting.")]
        ///
        /// # Errors
        /// Shapes that do not broadcast; different dtypes or devices.
        ///
        /// ```
        /// use kael_core::{Device, Tensor};
        /// let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], &Device::cpu())?;
        /// let b = Tensor::from_slice(&[2.0f32], &[1], &Device::cpu())?;
        #[doc = concat!("assert_eq!(a.", stringify!($name), "(&b)?.to_vec::<bool>()?, vec!", $expect, ");")]
        /// # Ok::<(), kael_core::Error>(())
        /// ```
        pub fn $name(&self, other: &Tensor) -> Result<Tensor> {
            self.compare_op($op, other)
        }
    )*};
}

impl Tensor {
    compare_methods! {
        eq => CmpOp::Eq, "==", "[false, true, false]";
        ne => CmpOp::Ne, "!=", "[true, false, true]";
        lt => CmpOp::Lt, "<", "[true, false, false]";
        le => CmpOp::Le, "<=", "[true, true, false]";
        gt => CmpOp::Gt, ">", "[false, false, true]";
        ge => CmpOp::Ge, ">=", "[false, true, true]";
    }

    /// `cond ? on_true : on_false` elementwise; `self` is the `Bool`
    /// condition; all three broadcast together.
    ///
    /// # Errors
    /// A non-bool condition; branch dtypes that differ; shapes that do not broadcast.
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
        on_true.same_dtype("where", on_false)?;
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
                f_shape: on_false.dims().clone(),
            })
        })?;
        Ok(out)
    }
}

pub(crate) fn check_clamp(min: Option<f64>, max: Option<f64>) -> Result<()> {
    if let (Some(lo), Some(hi)) = (min, max) {
        if lo > hi {
            return Err(Error::InvalidArgument {
                op: "clamp",
                reason: "min must not exceed max",
            });
        }
    }
    if min.is_some_and(f64::is_nan) || max.is_some_and(f64::is_nan) {
        return Err(Error::InvalidArgument {
            op: "clamp",
            reason: "bounds must not be NaN",
        });
    }
    Ok(())
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
                Tensor::$f(self, &self.scalar_like(rhs)?)
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
