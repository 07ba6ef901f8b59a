//! `y = x Wᵀ + b`.

use super::functional;
use super::init;
use super::module::{Module, Visitor};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{ErrShape, Error, Result};
use crate::rng::Rng;
use crate::tensor::Tensor;

/// A fully connected layer: `y = x Wᵀ + b` over the last dimension
/// (PyTorch's `nn.Linear`).
///
/// `weight` is `[out_features, in_features]`, `bias` `[out_features]`.
/// Default init (see [`init`]): both `U(-1/√in, 1/√in)`, f32, requiring grad.
///
/// ```
/// use kael_core::nn::{Linear, Module};
/// use kael_core::{Device, Tensor};
/// let dev = Device::cpu();
/// let w = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], &dev)?;
/// let b = Tensor::from_slice(&[0.5f32, -0.5], &[2], &dev)?;
/// let lin = Linear::from_weights(w, Some(b))?;
/// let x = Tensor::from_slice(&[1.0f32, 0.0, -1.0], &[1, 3], &dev)?;
/// assert_eq!(lin.forward(&x)?.to_vec::<f32>()?, vec![-1.5, -2.5]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub struct Linear {
    /// `[out_features, in_features]`.
    pub weight: Tensor,
    /// `[out_features]`, when the layer has a bias.
    pub bias: Option<Tensor>,
}

impl Linear {
    /// A layer with PyTorch's default initialisation.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`].
    ///
    /// ```
    /// use kael_core::nn::Linear;
    /// use kael_core::{Device, Rng};
    /// let lin = Linear::new(16, 4, true, &Device::cpu(), &mut Rng::new(0))?;
    /// assert_eq!(lin.weight.shape(), &[4, 16]);
    /// assert!(lin.weight.to_vec::<f32>()?.iter().all(|w| w.abs() <= 0.25));
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn new(
        in_features: usize,
        out_features: usize,
        bias: bool,
        device: &Device,
        rng: &mut Rng,
    ) -> Result<Self> {
        Self::init(
            "Linear",
            in_features,
            out_features,
            bias,
            DType::F32,
            device,
            rng,
        )
    }

    /// [`Linear::new`] with parameters of `dtype` (drawn in that dtype
    /// directly: an f32 layer needs no f64 kernel).
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for non-float dtypes;
    /// [`Error::OutOfMemory`].
    ///
    /// ```
    /// use kael_core::nn::Linear;
    /// use kael_core::{DType, Device, Rng};
    /// let lin = Linear::new_in(3, 2, false, DType::F64, &Device::cpu(), &mut Rng::new(0))?;
    /// assert_eq!(lin.weight.dtype(), DType::F64);
    /// assert!(Linear::new_in(3, 2, false, DType::I64, &Device::cpu(), &mut Rng::new(0)).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn new_in(
        in_features: usize,
        out_features: usize,
        bias: bool,
        dtype: DType,
        device: &Device,
        rng: &mut Rng,
    ) -> Result<Self> {
        Self::init(
            "Linear::new_in",
            in_features,
            out_features,
            bias,
            dtype,
            device,
            rng,
        )
    }

    /// The constructors, naming `op` in their errors.
    fn init(
        op: &'static str,
        in_features: usize,
        out_features: usize,
        bias: bool,
        dtype: DType,
        device: &Device,
        rng: &mut Rng,
    ) -> Result<Self> {
        dtype.require_float(op)?;
        let shape = [out_features, in_features];
        crate::shape::checked_numel(op, &shape)?;
        let weight = init::fan_in_uniform_in(&shape, in_features, dtype, device, rng)?
            .requires_grad_(true)?;
        let bias = if bias {
            Some(
                init::fan_in_uniform_in(&[out_features], in_features, dtype, device, rng)?
                    .requires_grad_(true)?,
            )
        } else {
            None
        };
        Ok(Self { weight, bias })
    }

    /// A layer over given tensors (used as they are: the same handles).
    ///
    /// # Errors
    /// [`Error::RankMismatch`] unless `weight` is rank 2;
    /// [`Error::ShapeMismatch`] for a bias that is not `[out_features]`;
    /// dtype or device mismatch between them.
    ///
    /// ```
    /// use kael_core::nn::Linear;
    /// use kael_core::{DType, Device, Tensor};
    /// let w = Tensor::zeros(&[2, 3], DType::F32, &Device::cpu())?;
    /// let bad = Tensor::zeros(&[3], DType::F32, &Device::cpu())?;
    /// assert!(Linear::from_weights(w, Some(bad)).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn from_weights(weight: Tensor, bias: Option<Tensor>) -> Result<Self> {
        if weight.rank() != 2 {
            return Err(Error::RankMismatch {
                op: "Linear",
                expected: "2 (weight is [out_features, in_features])",
                got: weight.rank(),
            });
        }
        if let Some(b) = &bias {
            if b.shape() != [weight.shape()[0]] {
                return Err(Error::ShapeMismatch {
                    op: "Linear",
                    expected: ErrShape::of(&[weight.shape()[0]]),
                    got: ErrShape::of(b.shape()),
                });
            }
            weight.same_dtype("Linear", b)?;
            weight.same_device("Linear", b)?;
        }
        Ok(Self { weight, bias })
    }

    /// `in_features`.
    pub fn in_features(&self) -> usize {
        self.weight.shape()[1]
    }

    /// `out_features`.
    pub fn out_features(&self) -> usize {
        self.weight.shape()[0]
    }
}

impl Module for Linear {
    /// `input` is `[*, in_features]` (any number of leading dims); the
    /// result is `[*, out_features]`.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when the last dim is not `in_features`;
    /// [`Error::RankMismatch`] for a rank-0 input; dtype or device mismatch.
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        functional::linear_op("Linear", input, &self.weight, self.bias.as_ref())
    }

    fn visit(&self, v: &mut dyn Visitor) {
        v.param("weight", &self.weight);
        if let Some(b) = &self.bias {
            v.param("bias", b);
        }
    }
}
