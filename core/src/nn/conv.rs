//! 1-d and 2-d convolutions as im2col + matmul.
//!
//! NOTE [Convolution as matmul]
//! The input is zero-padded ([`pad_dim`], a `cat`), its sliding windows are
//! taken as views ([`Tensor::unfold`] once per spatial dim, giving
//! `[N, C, out.., k..]`), permuted to `[N, out.., C, k..]` and reshaped (one
//! copy) into the `[N · prod(out), C · prod(k)]` column matrix, which one
//! [`Tensor::mm`] multiplies by the weight viewed as `[O, C · prod(k)]`ᵀ.
//! Every step is an existing differentiable op, so the gradients of input,
//! weight and bias come from autograd (unfold's backward sums the windows
//! that overlap). Cross-correlation, as in PyTorch; no dilation or groups.

use super::init;
use super::module::{Module, Visitor};
use super::pad::pad_dim;
use crate::device::Device;
use crate::error::{ErrShape, Error, Result};
use crate::rng::Rng;
use crate::tensor::Tensor;

/// A 2-d convolution (PyTorch's `nn.Conv2d` with `dilation = 1`,
/// `groups = 1`, zero padding).
///
/// `weight` is `[out_channels, in_channels, kh, kw]`, `bias`
/// `[out_channels]`. Default init (see [`init`]): both
/// `U(-1/√fan_in, 1/√fan_in)` with `fan_in = in_channels · kh · kw`.
/// See NOTE [Convolution as matmul].
///
/// ```
/// use kael_core::nn::{Conv2d, Module};
/// use kael_core::{DType, Device, Rng, Tensor};
/// let dev = Device::cpu();
/// let conv = Conv2d::new(3, 8, [3, 3], &dev, &mut Rng::new(0))?.with_stride([2, 2])?.with_padding([1, 1]);
/// let y = conv.forward(&Tensor::zeros(&[2, 3, 16, 16], DType::F32, &dev)?)?;
/// assert_eq!(y.shape(), &[2, 8, 8, 8]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub struct Conv2d {
    /// `[out_channels, in_channels, kh, kw]`.
    pub weight: Tensor,
    /// `[out_channels]`, when the layer has a bias.
    pub bias: Option<Tensor>,
    stride: [usize; 2],
    padding: [usize; 2],
}

/// A 1-d convolution (PyTorch's `nn.Conv1d` with `dilation = 1`,
/// `groups = 1`, zero padding).
///
/// `weight` is `[out_channels, in_channels, k]`, `bias` `[out_channels]`.
/// Default init (see [`init`]): both `U(-1/√fan_in, 1/√fan_in)` with
/// `fan_in = in_channels · k`. See NOTE [Convolution as matmul].
///
/// ```
/// use kael_core::nn::{Conv1d, Module};
/// use kael_core::{Device, Tensor};
/// let dev = Device::cpu();
/// let w = Tensor::from_slice(&[1.0f32, -1.0], &[1, 1, 2], &dev)?; // a difference filter
/// let conv = Conv1d::from_weights(w, None)?;
/// let x = Tensor::from_slice(&[1.0f32, 4.0, 9.0, 16.0], &[1, 1, 4], &dev)?;
/// assert_eq!(conv.forward(&x)?.to_vec::<f32>()?, vec![-3.0, -5.0, -7.0]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub struct Conv1d {
    /// `[out_channels, in_channels, k]`.
    pub weight: Tensor,
    /// `[out_channels]`, when the layer has a bias.
    pub bias: Option<Tensor>,
    stride: usize,
    padding: usize,
}

fn conv_params(
    op: &'static str,
    shape: &[usize],
    device: &Device,
    rng: &mut Rng,
) -> Result<(Tensor, Option<Tensor>)> {
    if shape.contains(&0) {
        return Err(Error::InvalidArgument {
            op,
            reason: "channels and kernel sizes must be positive",
        });
    }
    // Checked first: user sizes whose product overflows are an error, not
    // a debug-build panic (and then every sub-product below fits).
    crate::shape::checked_numel(op, shape)?;
    let fan_in: usize = shape[1..].iter().product();
    let weight = init::fan_in_uniform(shape, fan_in, device, rng)?.requires_grad_(true)?;
    let bias = init::fan_in_uniform(&shape[..1], fan_in, device, rng)?.requires_grad_(true)?;
    Ok((weight, Some(bias)))
}

fn check_weights(
    op: &'static str,
    rank: usize,
    expected: &'static str,
    weight: &Tensor,
    bias: &Option<Tensor>,
) -> Result<()> {
    if weight.rank() != rank {
        return Err(Error::RankMismatch {
            op,
            expected,
            got: weight.rank(),
        });
    }
    if let Some(b) = bias {
        if b.shape() != [weight.shape()[0]] {
            return Err(Error::ShapeMismatch {
                op,
                expected: ErrShape::of(&weight.shape()[..1]),
                got: ErrShape::of(b.shape()),
            });
        }
        weight.same_dtype(op, b)?;
        weight.same_device(op, b)?;
    }
    Ok(())
}

fn check_stride(op: &'static str, stride: &[usize]) -> Result<()> {
    if stride.contains(&0) {
        return Err(Error::InvalidArgument {
            op,
            reason: "stride must be positive",
        });
    }
    Ok(())
}

/// Adds a batch dim to an unbatched input (`rank == batched - 1`) and checks
/// the rank and channel count; returns the batched input and whether to
/// squeeze the result.
fn batched(
    op: &'static str,
    x: &Tensor,
    rank: usize,
    expected: &'static str,
    channels: usize,
) -> Result<(Tensor, bool)> {
    let (x, unbatched) = if x.rank() == rank - 1 {
        (x.unsqueeze(0)?, true)
    } else if x.rank() == rank {
        (x.clone(), false)
    } else {
        return Err(Error::RankMismatch {
            op,
            expected,
            got: x.rank(),
        });
    };
    if x.shape()[1] != channels {
        let mut want = crate::shape::Dims::from_slice(x.shape())?;
        want[1] = channels;
        return Err(Error::ShapeMismatch {
            op,
            expected: ErrShape::of(&want),
            got: ErrShape::of(x.shape()),
        });
    }
    Ok((x, unbatched))
}

/// Output length of a window of `k` with `stride` over `n` padded elements.
pub(super) fn out_len(op: &'static str, n: usize, k: usize, stride: usize) -> Result<usize> {
    if n < k {
        return Err(Error::InvalidArgument {
            op,
            reason: "the (padded) input is smaller than the kernel; use a larger input, more padding or a smaller kernel",
        });
    }
    Ok((n - k) / stride + 1)
}

impl Conv2d {
    /// A convolution with stride 1, no padding, a bias, and PyTorch's
    /// default initialisation.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero size; [`Error::OutOfMemory`].
    ///
    /// ```
    /// use kael_core::nn::Conv2d;
    /// use kael_core::{Device, Rng};
    /// let c = Conv2d::new(1, 4, [5, 5], &Device::cpu(), &mut Rng::new(0))?;
    /// assert_eq!(c.weight.shape(), &[4, 1, 5, 5]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        kernel_size: [usize; 2],
        device: &Device,
        rng: &mut Rng,
    ) -> Result<Self> {
        let shape = [out_channels, in_channels, kernel_size[0], kernel_size[1]];
        let (weight, bias) = conv_params("Conv2d", &shape, device, rng)?;
        Ok(Self {
            weight,
            bias,
            stride: [1, 1],
            padding: [0, 0],
        })
    }

    /// A convolution over given tensors (stride 1, no padding).
    ///
    /// # Errors
    /// [`Error::RankMismatch`] unless `weight` is rank 4;
    /// [`Error::ShapeMismatch`] for a bias that is not `[out_channels]`.
    ///
    /// ```
    /// use kael_core::nn::Conv2d;
    /// use kael_core::{DType, Device, Tensor};
    /// assert!(Conv2d::from_weights(Tensor::zeros(&[2, 2], DType::F32, &Device::cpu())?, None).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn from_weights(weight: Tensor, bias: Option<Tensor>) -> Result<Self> {
        check_weights(
            "Conv2d",
            4,
            "4 (weight is [out, in, kh, kw])",
            &weight,
            &bias,
        )?;
        Ok(Self {
            weight,
            bias,
            stride: [1, 1],
            padding: [0, 0],
        })
    }

    /// The same layer with `stride` (height, width).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero stride.
    ///
    /// ```
    /// use kael_core::nn::Conv2d;
    /// use kael_core::{Device, Rng};
    /// let c = Conv2d::new(1, 1, [3, 3], &Device::cpu(), &mut Rng::new(0))?;
    /// assert!(c.with_stride([0, 1]).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn with_stride(mut self, stride: [usize; 2]) -> Result<Self> {
        check_stride("Conv2d", &stride)?;
        self.stride = stride;
        Ok(self)
    }

    /// The same layer with zero `padding` (height, width) on both sides.
    pub fn with_padding(mut self, padding: [usize; 2]) -> Self {
        self.padding = padding;
        self
    }

    /// Stride (height, width).
    pub fn stride(&self) -> [usize; 2] {
        self.stride
    }

    /// Padding (height, width).
    pub fn padding(&self) -> [usize; 2] {
        self.padding
    }
}

impl Module for Conv2d {
    /// `input` is `[N, C_in, H, W]` (or unbatched `[C_in, H, W]`); the
    /// result is `[N, C_out, H_out, W_out]` with
    /// `H_out = (H + 2·pad - kh) / stride + 1` (likewise W).
    ///
    /// # Errors
    /// [`Error::RankMismatch`], [`Error::ShapeMismatch`] for the wrong
    /// channel count, [`Error::InvalidArgument`] for an input smaller than
    /// the kernel; dtype or device mismatch.
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        const OP: &str = "Conv2d";
        let ws = self.weight.shape();
        let (o, c, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
        let (x, unbatched) = batched(OP, input, 4, "4 ([N, C, H, W]) or 3 ([C, H, W])", c)?;
        let x = pad_dim(&x, 2, self.padding[0], self.padding[0], 0.0)?;
        let x = pad_dim(&x, 3, self.padding[1], self.padding[1], 0.0)?;
        let n = x.shape()[0];
        let oh = out_len(OP, x.shape()[2], kh, self.stride[0])?;
        let ow = out_len(OP, x.shape()[3], kw, self.stride[1])?;
        let cols = x
            .unfold(2, kh, self.stride[0])?
            .unfold(3, kw, self.stride[1])?
            .permute(&[0, 2, 3, 1, 4, 5])?
            .reshape(&[n * oh * ow, c * kh * kw])?;
        let mut y = cols.mm(&self.weight.reshape(&[o, c * kh * kw])?.t()?)?;
        if let Some(b) = &self.bias {
            y = y.add(b)?;
        }
        let y = y
            .reshape(&[n, oh, ow, o])?
            .permute(&[0, 3, 1, 2])?
            .contiguous()?;
        if unbatched { y.squeeze_dim(0) } else { Ok(y) }
    }

    fn visit(&self, v: &mut dyn Visitor) {
        v.param("weight", &self.weight);
        if let Some(b) = &self.bias {
            v.param("bias", b);
        }
    }
}

impl Conv1d {
    /// A convolution with stride 1, no padding, a bias, and PyTorch's
    /// default initialisation.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero size; [`Error::OutOfMemory`].
    ///
    /// ```
    /// use kael_core::nn::Conv1d;
    /// use kael_core::{Device, Rng};
    /// let c = Conv1d::new(2, 4, 3, &Device::cpu(), &mut Rng::new(0))?;
    /// assert_eq!(c.weight.shape(), &[4, 2, 3]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        kernel_size: usize,
        device: &Device,
        rng: &mut Rng,
    ) -> Result<Self> {
        let shape = [out_channels, in_channels, kernel_size];
        let (weight, bias) = conv_params("Conv1d", &shape, device, rng)?;
        Ok(Self {
            weight,
            bias,
            stride: 1,
            padding: 0,
        })
    }

    /// A convolution over given tensors (stride 1, no padding).
    ///
    /// # Errors
    /// [`Error::RankMismatch`] unless `weight` is rank 3;
    /// [`Error::ShapeMismatch`] for a bias that is not `[out_channels]`.
    ///
    /// ```
    /// use kael_core::nn::Conv1d;
    /// use kael_core::{DType, Device, Tensor};
    /// assert!(Conv1d::from_weights(Tensor::zeros(&[2, 2], DType::F32, &Device::cpu())?, None).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn from_weights(weight: Tensor, bias: Option<Tensor>) -> Result<Self> {
        check_weights("Conv1d", 3, "3 (weight is [out, in, k])", &weight, &bias)?;
        Ok(Self {
            weight,
            bias,
            stride: 1,
            padding: 0,
        })
    }

    /// The same layer with `stride`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero stride.
    ///
    /// ```
    /// use kael_core::nn::Conv1d;
    /// use kael_core::{Device, Rng};
    /// assert!(Conv1d::new(1, 1, 3, &Device::cpu(), &mut Rng::new(0))?.with_stride(0).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn with_stride(mut self, stride: usize) -> Result<Self> {
        check_stride("Conv1d", &[stride])?;
        self.stride = stride;
        Ok(self)
    }

    /// The same layer with zero `padding` on both sides.
    pub fn with_padding(mut self, padding: usize) -> Self {
        self.padding = padding;
        self
    }

    /// Stride.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// Padding.
    pub fn padding(&self) -> usize {
        self.padding
    }
}

impl Module for Conv1d {
    /// `input` is `[N, C_in, L]` (or unbatched `[C_in, L]`); the result is
    /// `[N, C_out, L_out]` with `L_out = (L + 2·pad - k) / stride + 1`.
    ///
    /// # Errors
    /// [`Error::RankMismatch`], [`Error::ShapeMismatch`] for the wrong
    /// channel count, [`Error::InvalidArgument`] for an input shorter than
    /// the kernel; dtype or device mismatch.
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        const OP: &str = "Conv1d";
        let ws = self.weight.shape();
        let (o, c, k) = (ws[0], ws[1], ws[2]);
        let (x, unbatched) = batched(OP, input, 3, "3 ([N, C, L]) or 2 ([C, L])", c)?;
        let x = pad_dim(&x, 2, self.padding, self.padding, 0.0)?;
        let n = x.shape()[0];
        let ol = out_len(OP, x.shape()[2], k, self.stride)?;
        let cols = x
            .unfold(2, k, self.stride)?
            .permute(&[0, 2, 1, 3])?
            .reshape(&[n * ol, c * k])?;
        let mut y = cols.mm(&self.weight.reshape(&[o, c * k])?.t()?)?;
        if let Some(b) = &self.bias {
            y = y.add(b)?;
        }
        let y = y.reshape(&[n, ol, o])?.permute(&[0, 2, 1])?.contiguous()?;
        if unbatched { y.squeeze_dim(0) } else { Ok(y) }
    }

    fn visit(&self, v: &mut dyn Visitor) {
        v.param("weight", &self.weight);
        if let Some(b) = &self.bias {
            v.param("bias", b);
        }
    }
}
