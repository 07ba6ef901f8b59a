//! 2-d max and average pooling over sliding windows.
//!
//! Windows are taken as views ([`Tensor::unfold`] on H and W), flattened to
//! `[N, C, H_out, W_out, kh · kw]` (one copy) and reduced over the last dim
//! with `max_dim` / `mean_dim`, so gradients come from those ops' rules
//! (max: to the first maximum of each window, as PyTorch's index choice in
//! ties is unspecified; mean: `1 / (kh · kw)` to every element).

use super::conv::out_len;
use super::module::Module;
use super::pad::pad_dim;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

#[derive(Debug, Clone, Copy)]
struct Spec {
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
}

impl Spec {
    fn new(op: &'static str, kernel: [usize; 2]) -> Result<Self> {
        if kernel.contains(&0) {
            return Err(Error::InvalidArgument {
                op,
                reason: "kernel sizes must be positive",
            });
        }
        Ok(Self {
            kernel,
            stride: kernel,
            padding: [0, 0],
        })
    }

    fn with_stride(mut self, op: &'static str, stride: [usize; 2]) -> Result<Self> {
        if stride.contains(&0) {
            return Err(Error::InvalidArgument {
                op,
                reason: "stride must be positive",
            });
        }
        self.stride = stride;
        Ok(self)
    }

    fn with_padding(mut self, op: &'static str, padding: [usize; 2]) -> Result<Self> {
        if padding[0] > self.kernel[0] / 2 || padding[1] > self.kernel[1] / 2 {
            return Err(Error::InvalidArgument {
                op,
                reason: "padding must be at most half the kernel size (as in PyTorch)",
            });
        }
        self.padding = padding;
        Ok(self)
    }

    /// `[N, C, H_out, W_out, kh · kw]` windows of `x` padded with `fill`,
    /// and whether the input was unbatched.
    fn windows(&self, op: &'static str, x: &Tensor, fill: f64) -> Result<(Tensor, bool)> {
        let (x, unbatched) = match x.rank() {
            3 => (x.unsqueeze(0)?, true),
            4 => (x.clone(), false),
            r => {
                return Err(Error::RankMismatch {
                    op,
                    expected: "4 ([N, C, H, W]) or 3 ([C, H, W])",
                    got: r,
                });
            }
        };
        let [kh, kw] = self.kernel;
        let x = pad_dim(&x, 2, self.padding[0], self.padding[0], fill)?;
        let x = pad_dim(&x, 3, self.padding[1], self.padding[1], fill)?;
        let (n, c) = (x.shape()[0], x.shape()[1]);
        let oh = out_len(op, x.shape()[2], kh, self.stride[0])?;
        let ow = out_len(op, x.shape()[3], kw, self.stride[1])?;
        let w = x
            .unfold(2, kh, self.stride[0])?
            .unfold(3, kw, self.stride[1])?
            .reshape(&[n, c, oh, ow, kh * kw])?;
        Ok((w, unbatched))
    }
}

fn finish(y: Tensor, unbatched: bool) -> Result<Tensor> {
    if unbatched { y.squeeze_dim(0) } else { Ok(y) }
}

/// The maximum of each window (PyTorch's `nn.MaxPool2d` with
/// `dilation = 1`, `ceil_mode = False`); padding counts as `-inf`.
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
    spec: Spec,
}

/// The mean of each window (PyTorch's `nn.AvgPool2d` with
/// `ceil_mode = False`, `count_include_pad = True`); padding counts as 0.
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
    spec: Spec,
}

macro_rules! pool_builders {
    ($ty:ident, $op:literal) => {
        impl $ty {
            /// Pooling over `kernel_size` windows, stride = kernel size, no
            /// padding (PyTorch's defaults).
            ///
            /// # Errors
            /// [`Error::InvalidArgument`] for a zero kernel size.
            pub fn new(kernel_size: [usize; 2]) -> Result<Self> {
                Ok(Self {
                    spec: Spec::new($op, kernel_size)?,
                })
            }

            /// The same pooling with `stride` (height, width).
            ///
            /// # Errors
            /// [`Error::InvalidArgument`] for a zero stride.
            pub fn with_stride(self, stride: [usize; 2]) -> Result<Self> {
                Ok(Self {
                    spec: self.spec.with_stride($op, stride)?,
                })
            }

            /// The same pooling with `padding` (height, width) on both sides.
            ///
            /// # Errors
            /// [`Error::InvalidArgument`] for padding above half the kernel.
            pub fn with_padding(self, padding: [usize; 2]) -> Result<Self> {
                Ok(Self {
                    spec: self.spec.with_padding($op, padding)?,
                })
            }
        }
    };
}
pool_builders!(MaxPool2d, "MaxPool2d");
pool_builders!(AvgPool2d, "AvgPool2d");

impl Module for MaxPool2d {
    /// `input` is `[N, C, H, W]` or `[C, H, W]`; the result
    /// `[N, C, H_out, W_out]` with `H_out = (H + 2·pad - kh) / stride + 1`.
    ///
    /// # Errors
    /// [`Error::RankMismatch`]; [`Error::InvalidArgument`] for an input
    /// smaller than the window.
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        let (w, unbatched) = self.spec.windows("MaxPool2d", input, f64::NEG_INFINITY)?;
        finish(w.max_dim(-1, false)?, unbatched)
    }
}

impl Module for AvgPool2d {
    /// `input` is `[N, C, H, W]` or `[C, H, W]`; the result
    /// `[N, C, H_out, W_out]` with `H_out = (H + 2·pad - kh) / stride + 1`.
    ///
    /// # Errors
    /// [`Error::RankMismatch`]; [`Error::InvalidArgument`] for an input
    /// smaller than the window; non-float dtypes.
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        let (w, unbatched) = self.spec.windows("AvgPool2d", input, 0.0)?;
        finish(w.mean_dim(-1, false)?, unbatched)
    }
}
