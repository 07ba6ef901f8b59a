//! Root-mean-square normalisation over the trailing dimensions.

use super::layer_norm::{check_norm_args, signed, trailing_dims};
use super::module::{Module, Visitor};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::Result;
use crate::shape::Dims;
use crate::tensor::Tensor;

/// `y = x / √(mean(x²) + eps) · weight`, the mean over the trailing
/// `normalized_shape` dims (PyTorch's `nn.RMSNorm`).
///
/// Default init: weight ones (f32, requiring grad). `eps = None` uses the
/// machine epsilon of the input's dtype, as PyTorch does
/// (`torch.finfo(x.dtype).eps`: `1.1920929e-7` for f32).
///
/// ```
/// use kael_core::nn::{Module, RmsNorm};
/// use kael_core::{Device, Tensor};
/// let dev = Device::cpu();
/// let n = RmsNorm::new(&[2], Some(0.0), false, &dev)?;
/// let x = Tensor::from_slice(&[3.0f32, 4.0], &[1, 2], &dev)?; // rms = √12.5
/// let y = n.forward(&x)?.to_vec::<f32>()?;
/// assert!((y[0] - 0.8485281).abs() < 1e-6 && (y[1] - 1.1313709).abs() < 1e-6);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub struct RmsNorm {
    /// Elementwise scale of `normalized_shape`, when affine.
    pub weight: Option<Tensor>,
    normalized_shape: Dims,
    eps: Option<f64>,
}

impl RmsNorm {
    /// An RMS norm over the trailing `normalized_shape` dims; with
    /// `elementwise_affine`, a weight of ones.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] for an empty shape or a negative or
    /// NaN `eps`; [`crate::Error::RankTooLarge`].
    ///
    /// ```
    /// use kael_core::nn::RmsNorm;
    /// use kael_core::Device;
    /// let n = RmsNorm::new(&[8], None, true, &Device::cpu())?;
    /// assert_eq!(n.weight.as_ref().unwrap().to_vec::<f32>()?, vec![1.0; 8]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn new(
        normalized_shape: &[usize],
        eps: Option<f64>,
        elementwise_affine: bool,
        device: &Device,
    ) -> Result<Self> {
        Self::new_in(
            normalized_shape,
            eps,
            elementwise_affine,
            DType::F32,
            device,
        )
    }

    /// [`RmsNorm::new`] with a weight of `dtype`.
    ///
    /// # Errors
    /// As [`RmsNorm::new`]; [`crate::Error::UnsupportedDType`] for
    /// non-float dtypes.
    ///
    /// ```
    /// use kael_core::nn::RmsNorm;
    /// use kael_core::{DType, Device};
    /// let n = RmsNorm::new_in(&[8], None, true, DType::F64, &Device::cpu())?;
    /// assert_eq!(n.weight.as_ref().unwrap().dtype(), DType::F64);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn new_in(
        normalized_shape: &[usize],
        eps: Option<f64>,
        elementwise_affine: bool,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let normalized_shape = check_norm_args("RmsNorm", normalized_shape, eps.unwrap_or(0.0))?;
        dtype.require_float("RmsNorm")?;
        let weight = if elementwise_affine {
            Some(Tensor::ones(&normalized_shape, dtype, device)?.requires_grad_(true)?)
        } else {
            None
        };
        Ok(Self {
            weight,
            normalized_shape,
            eps,
        })
    }
}

/// `torch.finfo(dtype).eps`.
fn machine_eps(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::EPSILON,
        DType::F16 => 0.000_976_562_5,
        DType::BF16 => 0.007_812_5,
        _ => f32::EPSILON as f64,
    }
}

impl Module for RmsNorm {
    /// `input` is `[*, normalized_shape]`; the result has its shape.
    ///
    /// # Errors
    /// [`crate::Error::ShapeMismatch`] when the trailing dims are not
    /// `normalized_shape`; non-float dtypes; dtype or device mismatch with
    /// the weight.
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        let dims = trailing_dims("RmsNorm", input, &self.normalized_shape)?;
        let eps = self.eps.unwrap_or_else(|| machine_eps(input.dtype()));
        let ms = input.sqr()?.mean(&signed(&dims), true)?;
        let mut y = input.mul(&ms.add_scalar(eps)?.sqrt()?.recip()?)?;
        if let Some(w) = &self.weight {
            y = y.mul(w)?;
        }
        Ok(y)
    }

    fn visit(&self, v: &mut dyn Visitor) {
        if let Some(w) = &self.weight {
            v.param("weight", w);
        }
    }
}
