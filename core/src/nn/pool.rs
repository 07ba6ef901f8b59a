//! 2-d max and average pooling over sliding windows: thin layers over
//! [`max_pool2d`](super::functional::max_pool2d),
//! [`max_pool2d_with_indices`](super::functional::max_pool2d_with_indices)
//! and [`avg_pool2d`](super::functional::avg_pool2d).
//!
//! Windows are taken as views ([`Tensor::unfold`] on H and W), flattened to
//! `[N, C, H_out, W_out, kh · kw]` (one copy) and reduced over the last dim
//! with `max_dim` / `mean_dim` (or a sum divided by the count of real
//! elements), so gradients come from those ops' rules (max: to the first
//! maximum of each window, as PyTorch's index choice in ties is
//! unspecified; mean: `1 / divisor` to every element).

use super::functional::Pool2d;
use super::module::Module;
use crate::error::Result;
use crate::tensor::Tensor;

/// The maximum of each window (PyTorch's `nn.MaxPool2d` with
/// `dilation = 1`, `ceil_mode = False`); padding counts as `-inf`.
/// [`MaxPool2d::forward_with_indices`] also returns where each maximum came
/// from (PyTorch's `return_indices=True`).
///
/// ```
/// use kael_core::nn::{MaxPool2d, Module};
/// use kael_core::{Device, Tensor};
/// let x = Tensor::arange(0.0f32, 16.0, &Device::cpu())?.reshape(&[1, 1, 4, 4])?;
/// let y = MaxPool2d::new([2, 2])?.forward(&x)?;
/// assert_eq!(y.to_vec::<f32>()?, vec![5.0, 7.0, 13.0, 15.0]);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct MaxPool2d {
    spec: Pool2d,
}

/// The mean of each window (PyTorch's `nn.AvgPool2d` with
/// `ceil_mode = False`); padding counts as 0 and, by default
/// (`count_include_pad = true`, as PyTorch), in the divisor too: see
/// [`AvgPool2d::with_count_include_pad`].
///
/// ```
/// use kael_core::nn::{AvgPool2d, Module};
/// use kael_core::{Device, Tensor};
/// let x = Tensor::arange(0.0f32, 16.0, &Device::cpu())?.reshape(&[1, 4, 4])?;
/// let y = AvgPool2d::new([2, 2])?.forward(&x)?;
/// assert_eq!((y.shape(), y.to_vec::<f32>()?), (&[1, 2, 2][..], vec![2.5, 4.5, 10.5, 12.5]));
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct AvgPool2d {
    spec: Pool2d,
    count_include_pad: bool,
}

macro_rules! pool_builders {
    ($ty:ident, $op:literal) => {
        impl $ty {
            /// Pooling over `kernel_size` windows, stride = kernel size, no
            /// padding (PyTorch's defaults).
            ///
            /// # Errors
            /// [`crate::Error::InvalidArgument`] for a zero kernel size.
            pub fn new(kernel_size: [usize; 2]) -> Result<Self> {
                Ok(Self::from_spec(Pool2d::new(
                    $op,
                    kernel_size,
                    kernel_size,
                    [0, 0],
                )?))
            }

            /// The same pooling with `stride` (height, width).
            ///
            /// # Errors
            /// [`crate::Error::InvalidArgument`] for a zero stride.
            pub fn with_stride(self, stride: [usize; 2]) -> Result<Self> {
                let s = self.spec;
                Ok(self.with_spec(Pool2d::new($op, s.kernel, stride, s.padding)?))
            }

            /// The same pooling with `padding` (height, width) on both sides.
            ///
            /// # Errors
            /// [`crate::Error::InvalidArgument`] for padding above half the
            /// kernel.
            pub fn with_padding(self, padding: [usize; 2]) -> Result<Self> {
                let s = self.spec;
                Ok(self.with_spec(Pool2d::new($op, s.kernel, s.stride, padding)?))
            }

            /// Kernel size (height, width).
            ///
            /// ```
            #[doc = concat!("use kael_core::nn::", stringify!($ty), ";")]
            #[doc = concat!("let p = ", stringify!($ty), "::new([3, 2])?.with_stride([1, 1])?.with_padding([1, 1])?;")]
            /// assert_eq!(p.kernel_size(), [3, 2]);
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            pub fn kernel_size(&self) -> [usize; 2] {
                self.spec.kernel
            }

            /// Stride (height, width).
            ///
            /// ```
            #[doc = concat!("use kael_core::nn::", stringify!($ty), ";")]
            #[doc = concat!("let p = ", stringify!($ty), "::new([3, 2])?.with_stride([1, 1])?.with_padding([1, 1])?;")]
            /// assert_eq!(p.stride(), [1, 1]);
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            pub fn stride(&self) -> [usize; 2] {
                self.spec.stride
            }

            /// Padding (height, width).
            ///
            /// ```
            #[doc = concat!("use kael_core::nn::", stringify!($ty), ";")]
            #[doc = concat!("let p = ", stringify!($ty), "::new([3, 2])?.with_stride([1, 1])?.with_padding([1, 1])?;")]
            /// assert_eq!(p.padding(), [1, 1]);
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            pub fn padding(&self) -> [usize; 2] {
                self.spec.padding
            }
        }
    };
}
pool_builders!(MaxPool2d, "MaxPool2d");
pool_builders!(AvgPool2d, "AvgPool2d");

impl MaxPool2d {
    fn from_spec(spec: Pool2d) -> Self {
        Self { spec }
    }

    fn with_spec(self, spec: Pool2d) -> Self {
        Self { spec }
    }

    /// The pooled values and, as `I64` of the same shape, the flat index
    /// (`row · W + col`) of each maximum in its input plane (PyTorch's
    /// `return_indices=True`; see
    /// [`max_pool2d_with_indices`](super::functional::max_pool2d_with_indices)).
    ///
    /// # Errors
    /// As [`Module::forward`].
    ///
    /// ```
    /// use kael_core::nn::MaxPool2d;
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::arange(0.0f32, 16.0, &Device::cpu())?.reshape(&[1, 1, 4, 4])?;
    /// let (y, idx) = MaxPool2d::new([2, 2])?.forward_with_indices(&x)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![5.0, 7.0, 13.0, 15.0]);
    /// assert_eq!(idx.to_vec::<i64>()?, vec![5, 7, 13, 15]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn forward_with_indices(&self, input: &Tensor) -> Result<(Tensor, Tensor)> {
        self.spec.max_with_indices("MaxPool2d", input)
    }
}

impl AvgPool2d {
    fn from_spec(spec: Pool2d) -> Self {
        Self {
            spec,
            count_include_pad: true,
        }
    }

    fn with_spec(self, spec: Pool2d) -> Self {
        Self { spec, ..self }
    }

    /// The same pooling, dividing by `kh · kw` (`true`, the default) or by
    /// the number of input (non-padding) elements in each window (`false`).
    ///
    /// ```
    /// use kael_core::nn::{AvgPool2d, Module};
    /// use kael_core::{DType, Device, Tensor};
    /// let x = Tensor::ones(&[1, 2, 2], DType::F32, &Device::cpu())?;
    /// let pool = AvgPool2d::new([2, 2])?.with_padding([1, 1])?;
    /// assert_eq!(pool.forward(&x)?.to_vec::<f32>()?, vec![0.25; 4]);
    /// let pool = pool.with_count_include_pad(false);
    /// assert_eq!(pool.forward(&x)?.to_vec::<f32>()?, vec![1.0; 4]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn with_count_include_pad(self, count_include_pad: bool) -> Self {
        Self {
            count_include_pad,
            ..self
        }
    }

    /// Whether padding counts in the divisor.
    ///
    /// ```
    /// use kael_core::nn::AvgPool2d;
    /// assert!(AvgPool2d::new([2, 2])?.count_include_pad());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn count_include_pad(&self) -> bool {
        self.count_include_pad
    }
}

impl Module for MaxPool2d {
    /// `input` is `[N, C, H, W]` or `[C, H, W]`; the result
    /// `[N, C, H_out, W_out]` with `H_out = (H + 2·pad - kh) / stride + 1`.
    ///
    /// # Errors
    /// [`crate::Error::RankMismatch`]; [`crate::Error::InvalidArgument`] for
    /// an input smaller than the window.
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        self.spec.max("MaxPool2d", input)
    }
}

impl Module for AvgPool2d {
    /// `input` is `[N, C, H, W]` or `[C, H, W]`; the result
    /// `[N, C, H_out, W_out]` with `H_out = (H + 2·pad - kh) / stride + 1`.
    ///
    /// # Errors
    /// [`crate::Error::RankMismatch`]; [`crate::Error::InvalidArgument`] for
    /// an input smaller than the window; non-float dtypes.
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        self.spec.avg("AvgPool2d", input, self.count_include_pad)
    }
}
