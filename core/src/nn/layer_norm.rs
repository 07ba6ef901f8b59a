//! Layer normalisation over the trailing dimensions.

use super::module::{Module, Visitor};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{ErrShape, Error, Result};
use crate::shape::Dims;
use crate::tensor::Tensor;

/// `y = (x - mean) / √(var + eps) · weight + bias`, with mean and (biased)
/// variance over the trailing `normalized_shape` dims (PyTorch's
/// `nn.LayerNorm`).
///
/// Default init: weight ones, bias zeros (f32, requiring grad), `eps`
/// typically `1e-5` as in PyTorch.
///
/// ```
/// use kael_core::nn::{LayerNorm, Module};
/// use kael_core::{Device, Tensor};
/// let dev = Device::cpu();
/// let ln = LayerNorm::new(&[2], 0.0, true, &dev)?;
/// let x = Tensor::from_slice(&[1.0f32, 3.0, -2.0, 2.0], &[2, 2], &dev)?;
/// assert_eq!(ln.forward(&x)?.to_vec::<f32>()?, vec![-1.0, 1.0, -1.0, 1.0]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub struct LayerNorm {
    /// Elementwise scale of `normalized_shape`, when affine.
    pub weight: Option<Tensor>,
    /// Elementwise shift of `normalized_shape`, when affine.
    pub bias: Option<Tensor>,
    normalized_shape: Dims,
    eps: f64,
}

impl LayerNorm {
    /// A layer norm over the trailing `normalized_shape` dims; with
    /// `elementwise_affine`, a weight (ones) and a bias (zeros).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty shape or a negative or NaN
    /// `eps`; [`Error::RankTooLarge`].
    ///
    /// ```
    /// use kael_core::nn::LayerNorm;
    /// use kael_core::Device;
    /// let ln = LayerNorm::new(&[64], 1e-5, true, &Device::cpu())?;
    /// assert_eq!(ln.weight.as_ref().unwrap().shape(), &[64]);
    /// assert!(LayerNorm::new(&[], 1e-5, true, &Device::cpu()).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn new(
        normalized_shape: &[usize],
        eps: f64,
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

    /// [`LayerNorm::new`] with parameters of `dtype`.
    ///
    /// # Errors
    /// As [`LayerNorm::new`]; [`Error::UnsupportedDType`] for non-float
    /// dtypes.
    ///
    /// ```
    /// use kael_core::nn::LayerNorm;
    /// use kael_core::{DType, Device};
    /// let ln = LayerNorm::new_in(&[4], 1e-5, true, DType::F64, &Device::cpu())?;
    /// assert_eq!(ln.bias.as_ref().unwrap().dtype(), DType::F64);
    /// assert!(LayerNorm::new_in(&[4], 1e-5, true, DType::I32, &Device::cpu()).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn new_in(
        normalized_shape: &[usize],
        eps: f64,
        elementwise_affine: bool,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let normalized_shape = check_norm_args("LayerNorm", normalized_shape, eps)?;
        dtype.require_float("LayerNorm")?;
        crate::shape::checked_numel("LayerNorm", &normalized_shape)?;
        let (weight, bias) = if elementwise_affine {
            (
                Some(Tensor::ones(&normalized_shape, dtype, device)?.requires_grad_(true)?),
                Some(Tensor::zeros(&normalized_shape, dtype, device)?.requires_grad_(true)?),
            )
        } else {
            (None, None)
        };
        Ok(Self {
            weight,
            bias,
            normalized_shape,
            eps,
        })
    }

    /// The normalised trailing shape.
    pub fn normalized_shape(&self) -> &[usize] {
        &self.normalized_shape
    }
}

/// Validates a norm layer's shape and eps.
pub(super) fn check_norm_args(op: &'static str, shape: &[usize], eps: f64) -> Result<Dims> {
    if shape.is_empty() {
        return Err(Error::InvalidArgument {
            op,
            reason: "normalized_shape must name at least one trailing dim, e.g. &[hidden_size]",
        });
    }
    if eps.is_nan() || eps < 0.0 {
        return Err(Error::InvalidArgument {
            op,
            reason: "eps must be a non-negative number (PyTorch uses 1e-5)",
        });
    }
    Dims::from_slice(shape)
}

/// Checks that `x` ends in `shape` and returns the dims to reduce over.
pub(super) fn trailing_dims(op: &'static str, x: &Tensor, shape: &[usize]) -> Result<Dims> {
    let k = shape.len();
    let r = x.rank();
    if r < k || &x.shape()[r - k..] != shape {
        return Err(Error::ShapeMismatch {
            op,
            expected: ErrShape::of(shape),
            got: ErrShape::of(x.shape()),
        });
    }
    let mut dims = Dims::new();
    for d in r - k..r {
        dims.push(d)?;
    }
    Ok(dims)
}

/// `dims` as the signed list reductions take.
pub(super) fn signed(dims: &Dims) -> heapless::Vec<isize, { crate::MAX_RANK }> {
    dims.iter().map(|&d| d as isize).collect()
}

impl Module for LayerNorm {
    /// `input` is `[*, normalized_shape]`; the result has its shape.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when the trailing dims are not
    /// `normalized_shape`; non-float dtypes; dtype or device mismatch with
    /// the weights.
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        super::functional::layer_norm_op(
            "LayerNorm",
            input,
            &self.normalized_shape,
            self.weight.as_ref(),
            self.bias.as_ref(),
            self.eps,
        )
    }

    fn visit(&self, v: &mut dyn Visitor) {
        if let Some(w) = &self.weight {
            v.param("weight", w);
        }
        if let Some(b) = &self.bias {
            v.param("bias", b);
        }
    }
}
