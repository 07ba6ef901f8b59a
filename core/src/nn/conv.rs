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
//! that overlap). Cross-correlation, as in PyTorch. Dilation takes every
//! `d`-th tap of a window of `(k - 1)·d + 1` (a strided view); groups split
//! the column matrix into `[G, M, C/G · k]` and multiply it by the weight as
//! `[G, C/G · k, O/G]` in one batched matmul. A transposed convolution is
//! the convolution of the input with `stride - 1` zeros between elements,
//! padded by `dilation·(k - 1) - padding`, with the weight flipped and its
//! channel dims swapped per group (see `functional::conv_transpose_op`).

use super::functional;
use super::init;
use super::module::{Module, Visitor};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{ErrShape, Error, Result};
use crate::rng::Rng;
use crate::tensor::Tensor;

/// A 2-d convolution (PyTorch's `nn.Conv2d` with zero padding).
///
/// `weight` is `[out_channels, in_channels / groups, kh, kw]`, `bias`
/// `[out_channels]`. Default init (see [`init`]): both
/// `U(-1/√fan_in, 1/√fan_in)` with `fan_in = in_channels / groups · kh · kw`.
/// Stride, padding, dilation and groups are set with the `with_*`
/// builders (or `groups` in [`Conv2d::new_in`]); the computation is
/// [`conv2d`](super::functional::conv2d). See NOTE [Convolution as matmul].
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
    /// `[out_channels, in_channels / groups, kh, kw]`.
    pub weight: Tensor,
    /// `[out_channels]`, when the layer has a bias.
    pub bias: Option<Tensor>,
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    groups: usize,
}

/// A 1-d convolution (PyTorch's `nn.Conv1d` with zero padding).
///
/// `weight` is `[out_channels, in_channels / groups, k]`, `bias`
/// `[out_channels]`. Default init (see [`init`]): both
/// `U(-1/√fan_in, 1/√fan_in)` with `fan_in = in_channels / groups · k`.
/// The computation is [`conv1d`](super::functional::conv1d). See NOTE
/// [Convolution as matmul].
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
    /// `[out_channels, in_channels / groups, k]`.
    pub weight: Tensor,
    /// `[out_channels]`, when the layer has a bias.
    pub bias: Option<Tensor>,
    stride: usize,
    padding: usize,
    dilation: usize,
    groups: usize,
}

/// Initialised `weight` of `shape` and `bias` of `[bias_len]`, both
/// `U(-1/√fan_in, 1/√fan_in)` with `fan_in = prod(shape[1..])` (PyTorch's
/// `_calculate_fan_in_and_fan_out` reads dim 1, for transposed
/// convolutions too).
fn conv_params(
    op: &'static str,
    shape: &[usize],
    bias_len: usize,
    dtype: DType,
    device: &Device,
    rng: &mut Rng,
) -> Result<(Tensor, Option<Tensor>)> {
    if shape.contains(&0) {
        return Err(Error::InvalidArgument {
            op,
            reason: "channels and kernel sizes must be positive; pass sizes of 1 or more",
        });
    }
    dtype.require_float(op)?;
    // Checked first: user sizes whose product overflows are an error, not
    // a debug-build panic (and then every sub-product below fits).
    crate::shape::checked_numel(op, shape)?;
    let fan_in: usize = shape[1..].iter().product();
    let weight =
        init::fan_in_uniform_in(shape, fan_in, dtype, device, rng)?.requires_grad_(true)?;
    let bias =
        init::fan_in_uniform_in(&[bias_len], fan_in, dtype, device, rng)?.requires_grad_(true)?;
    Ok((weight, Some(bias)))
}

/// Checks `groups` against the channel counts of a constructor.
fn check_groups(
    op: &'static str,
    in_channels: usize,
    out_channels: usize,
    groups: usize,
) -> Result<()> {
    if groups == 0 {
        return Err(Error::InvalidArgument {
            op,
            reason: "groups must be positive; pass 1 for an ordinary convolution",
        });
    }
    if in_channels % groups != 0 || out_channels % groups != 0 {
        return Err(Error::InvalidArgument {
            op,
            reason: "in_channels and out_channels must both be divisible by groups; change groups or the channel counts",
        });
    }
    Ok(())
}

fn check_weights(
    op: &'static str,
    rank: usize,
    expected: &'static str,
    weight: &Tensor,
    bias: &Option<Tensor>,
    bias_len: usize,
) -> Result<()> {
    if weight.rank() != rank {
        return Err(Error::RankMismatch {
            op,
            expected,
            got: weight.rank(),
        });
    }
    if let Some(b) = bias {
        if b.shape() != [bias_len] {
            return Err(Error::ShapeMismatch {
                op,
                expected: ErrShape::of(&[bias_len]),
                got: ErrShape::of(b.shape()),
            });
        }
        weight.same_dtype(op, b)?;
        weight.same_device(op, b)?;
    }
    Ok(())
}

fn check_positive(op: &'static str, values: &[usize], reason: &'static str) -> Result<()> {
    if values.contains(&0) {
        return Err(Error::InvalidArgument { op, reason });
    }
    Ok(())
}

const STRIDE: &str = "stride must be positive; pass 1 or more (1 visits every position)";
const DILATION: &str = "dilation must be positive; pass 1 for an undilated kernel";

/// `groups` for a layer over given weights: `dim0` (the weight dim that
/// counts whole channels: out for a convolution, in for a transposed one)
/// must be divisible by it.
fn set_groups(op: &'static str, dim0: usize, groups: usize) -> Result<usize> {
    if groups == 0 || dim0 % groups != 0 {
        return Err(Error::InvalidArgument {
            op,
            reason: "groups must be positive and divide the weight's dim 0 (out_channels for a convolution, in_channels for a transposed one)",
        });
    }
    Ok(groups)
}

impl Conv2d {
    /// An f32 convolution with stride 1, no padding, no dilation, one
    /// group, a bias, and PyTorch's default initialisation.
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
        Self::init(
            "Conv2d",
            in_channels,
            out_channels,
            kernel_size,
            1,
            DType::F32,
            device,
            rng,
        )
    }

    /// [`Conv2d::new`] with `groups` (the weight is
    /// `[out_channels, in_channels / groups, kh, kw]`; `groups ==
    /// in_channels` is a depthwise convolution) and parameters of `dtype`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero size or groups, or channel
    /// counts not divisible by `groups`; [`Error::UnsupportedDType`] for
    /// non-float dtypes; [`Error::OutOfMemory`].
    ///
    /// ```
    /// use kael_core::nn::Conv2d;
    /// use kael_core::{DType, Device, Rng};
    /// let dev = Device::cpu();
    /// let c = Conv2d::new_in(6, 6, [3, 3], 6, DType::F64, &dev, &mut Rng::new(0))?;
    /// assert_eq!((c.weight.shape(), c.weight.dtype()), (&[6, 1, 3, 3][..], DType::F64));
    /// assert!(Conv2d::new_in(6, 4, [3, 3], 3, DType::F32, &dev, &mut Rng::new(0)).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn new_in(
        in_channels: usize,
        out_channels: usize,
        kernel_size: [usize; 2],
        groups: usize,
        dtype: DType,
        device: &Device,
        rng: &mut Rng,
    ) -> Result<Self> {
        Self::init(
            "Conv2d::new_in",
            in_channels,
            out_channels,
            kernel_size,
            groups,
            dtype,
            device,
            rng,
        )
    }

    /// The constructors, naming `op` in their errors.
    #[allow(clippy::too_many_arguments)]
    fn init(
        op: &'static str,
        in_channels: usize,
        out_channels: usize,
        kernel_size: [usize; 2],
        groups: usize,
        dtype: DType,
        device: &Device,
        rng: &mut Rng,
    ) -> Result<Self> {
        check_groups(op, in_channels, out_channels, groups)?;
        let shape = [
            out_channels,
            in_channels / groups,
            kernel_size[0],
            kernel_size[1],
        ];
        let (weight, bias) = conv_params(op, &shape, out_channels, dtype, device, rng)?;
        Ok(Self {
            weight,
            bias,
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups,
        })
    }

    /// A convolution over given tensors (stride 1, no padding, no
    /// dilation, one group: set them with the builders).
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
        let o = weight.shape().first().copied().unwrap_or(0);
        check_weights(
            "Conv2d",
            4,
            "4 (weight is [out, in / groups, kh, kw])",
            &weight,
            &bias,
            o,
        )?;
        Ok(Self {
            weight,
            bias,
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
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
        check_positive("Conv2d::with_stride", &stride, STRIDE)?;
        self.stride = stride;
        Ok(self)
    }

    /// The same layer with zero `padding` (height, width) on both sides.
    pub fn with_padding(mut self, padding: [usize; 2]) -> Self {
        self.padding = padding;
        self
    }

    /// The same layer with `dilation` (height, width): kernel taps that
    /// many elements apart.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero dilation.
    ///
    /// ```
    /// use kael_core::nn::{Conv2d, Module};
    /// use kael_core::{DType, Device, Rng, Tensor};
    /// let dev = Device::cpu();
    /// let c = Conv2d::new(1, 1, [3, 3], &dev, &mut Rng::new(0))?.with_dilation([2, 2])?;
    /// assert_eq!(c.forward(&Tensor::zeros(&[1, 1, 7, 7], DType::F32, &dev)?)?.shape(), &[1, 1, 3, 3]);
    /// assert!(c.with_dilation([0, 1]).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn with_dilation(mut self, dilation: [usize; 2]) -> Result<Self> {
        check_positive("Conv2d::with_dilation", &dilation, DILATION)?;
        self.dilation = dilation;
        Ok(self)
    }

    /// The same layer with `groups`, reading the weight as
    /// `[out_channels, in_channels / groups, kh, kw]` (for a layer built
    /// [`from_weights`](Conv2d::from_weights); [`Conv2d::new_in`] sizes an
    /// initialised weight for its groups).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless `groups > 0` divides
    /// `out_channels`.
    ///
    /// ```
    /// use kael_core::nn::Conv2d;
    /// use kael_core::{DType, Device, Tensor};
    /// let w = Tensor::zeros(&[4, 1, 3, 3], DType::F32, &Device::cpu())?;
    /// let c = Conv2d::from_weights(w, None)?.with_groups(4)?; // depthwise over 4 channels
    /// assert_eq!(c.groups(), 4);
    /// assert!(c.with_groups(3).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn with_groups(mut self, groups: usize) -> Result<Self> {
        self.groups = set_groups("Conv2d::with_groups", self.weight.shape()[0], groups)?;
        Ok(self)
    }

    /// Stride (height, width).
    pub fn stride(&self) -> [usize; 2] {
        self.stride
    }

    /// Padding (height, width).
    pub fn padding(&self) -> [usize; 2] {
        self.padding
    }

    /// Dilation (height, width).
    ///
    /// ```
    /// use kael_core::nn::Conv2d;
    /// use kael_core::{Device, Rng};
    /// let c = Conv2d::new(2, 2, [3, 3], &Device::cpu(), &mut Rng::new(0))?;
    /// assert_eq!(c.with_dilation([2, 1])?.dilation(), [2, 1]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn dilation(&self) -> [usize; 2] {
        self.dilation
    }

    /// The number of groups.
    ///
    /// ```
    /// use kael_core::nn::Conv2d;
    /// use kael_core::{DType, Device, Rng};
    /// let c = Conv2d::new_in(4, 4, [3, 3], 4, DType::F32, &Device::cpu(), &mut Rng::new(0))?;
    /// assert_eq!(c.groups(), 4);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn groups(&self) -> usize {
        self.groups
    }
}

impl Module for Conv2d {
    /// `input` is `[N, C_in, H, W]` (or unbatched `[C_in, H, W]`); the
    /// result is `[N, C_out, H_out, W_out]` with
    /// `H_out = (H + 2·pad - dil·(kh - 1) - 1) / stride + 1` (likewise W).
    ///
    /// # Errors
    /// [`Error::RankMismatch`], [`Error::ShapeMismatch`] for the wrong
    /// channel count, [`Error::InvalidArgument`] for an input smaller than
    /// the kernel; dtype or device mismatch.
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        functional::conv_op(
            "Conv2d",
            input,
            &self.weight,
            self.bias.as_ref(),
            &self.stride,
            &self.padding,
            &self.dilation,
            self.groups,
        )
    }

    fn visit(&self, v: &mut dyn Visitor) {
        v.param("weight", &self.weight);
        if let Some(b) = &self.bias {
            v.param("bias", b);
        }
    }
}

impl Conv1d {
    /// An f32 convolution with stride 1, no padding, no dilation, one
    /// group, a bias, and PyTorch's default initialisation.
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
        Self::init(
            "Conv1d",
            in_channels,
            out_channels,
            kernel_size,
            1,
            DType::F32,
            device,
            rng,
        )
    }

    /// [`Conv1d::new`] with `groups` (the weight is
    /// `[out_channels, in_channels / groups, k]`) and parameters of `dtype`.
    ///
    /// # Errors
    /// As [`Conv2d::new_in`].
    ///
    /// ```
    /// use kael_core::nn::Conv1d;
    /// use kael_core::{DType, Device, Rng};
    /// let c = Conv1d::new_in(4, 8, 3, 2, DType::F64, &Device::cpu(), &mut Rng::new(0))?;
    /// assert_eq!(c.weight.shape(), &[8, 2, 3]);
    /// assert!(Conv1d::new_in(4, 8, 3, 0, DType::F64, &Device::cpu(), &mut Rng::new(0)).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn new_in(
        in_channels: usize,
        out_channels: usize,
        kernel_size: usize,
        groups: usize,
        dtype: DType,
        device: &Device,
        rng: &mut Rng,
    ) -> Result<Self> {
        Self::init(
            "Conv1d::new_in",
            in_channels,
            out_channels,
            kernel_size,
            groups,
            dtype,
            device,
            rng,
        )
    }

    /// The constructors, naming `op` in their errors.
    #[allow(clippy::too_many_arguments)]
    fn init(
        op: &'static str,
        in_channels: usize,
        out_channels: usize,
        kernel_size: usize,
        groups: usize,
        dtype: DType,
        device: &Device,
        rng: &mut Rng,
    ) -> Result<Self> {
        check_groups(op, in_channels, out_channels, groups)?;
        let shape = [out_channels, in_channels / groups, kernel_size];
        let (weight, bias) = conv_params(op, &shape, out_channels, dtype, device, rng)?;
        Ok(Self {
            weight,
            bias,
            stride: 1,
            padding: 0,
            dilation: 1,
            groups,
        })
    }

    /// A convolution over given tensors (stride 1, no padding, no
    /// dilation, one group: set them with the builders).
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
        let o = weight.shape().first().copied().unwrap_or(0);
        check_weights(
            "Conv1d",
            3,
            "3 (weight is [out, in / groups, k])",
            &weight,
            &bias,
            o,
        )?;
        Ok(Self {
            weight,
            bias,
            stride: 1,
            padding: 0,
            dilation: 1,
            groups: 1,
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
        check_positive("Conv1d::with_stride", &[stride], STRIDE)?;
        self.stride = stride;
        Ok(self)
    }

    /// The same layer with zero `padding` on both sides.
    pub fn with_padding(mut self, padding: usize) -> Self {
        self.padding = padding;
        self
    }

    /// The same layer with `dilation` (kernel taps that many elements
    /// apart).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero dilation.
    ///
    /// ```
    /// use kael_core::nn::Conv1d;
    /// use kael_core::{Device, Rng};
    /// let c = Conv1d::new(1, 1, 3, &Device::cpu(), &mut Rng::new(0))?.with_dilation(2)?;
    /// assert_eq!(c.dilation(), 2);
    /// assert!(c.with_dilation(0).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn with_dilation(mut self, dilation: usize) -> Result<Self> {
        check_positive("Conv1d::with_dilation", &[dilation], DILATION)?;
        self.dilation = dilation;
        Ok(self)
    }

    /// The same layer with `groups`, reading the weight as
    /// `[out_channels, in_channels / groups, k]` (see
    /// [`Conv2d::with_groups`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless `groups > 0` divides
    /// `out_channels`.
    ///
    /// ```
    /// use kael_core::nn::Conv1d;
    /// use kael_core::{DType, Device, Tensor};
    /// let w = Tensor::zeros(&[4, 1, 3], DType::F32, &Device::cpu())?;
    /// assert!(Conv1d::from_weights(w, None)?.with_groups(0).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn with_groups(mut self, groups: usize) -> Result<Self> {
        self.groups = set_groups("Conv1d::with_groups", self.weight.shape()[0], groups)?;
        Ok(self)
    }

    /// Stride.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// Padding.
    pub fn padding(&self) -> usize {
        self.padding
    }

    /// Dilation.
    ///
    /// ```
    /// use kael_core::nn::Conv1d;
    /// use kael_core::{Device, Rng};
    /// let c = Conv1d::new(2, 2, 3, &Device::cpu(), &mut Rng::new(0))?;
    /// assert_eq!(c.with_dilation(3)?.dilation(), 3);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn dilation(&self) -> usize {
        self.dilation
    }

    /// The number of groups.
    ///
    /// ```
    /// use kael_core::nn::Conv1d;
    /// use kael_core::{Device, Rng};
    /// let c = Conv1d::new(2, 2, 3, &Device::cpu(), &mut Rng::new(0))?;
    /// assert_eq!(c.groups(), 1);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn groups(&self) -> usize {
        self.groups
    }
}

impl Module for Conv1d {
    /// `input` is `[N, C_in, L]` (or unbatched `[C_in, L]`); the result is
    /// `[N, C_out, L_out]` with
    /// `L_out = (L + 2·pad - dil·(k - 1) - 1) / stride + 1`.
    ///
    /// # Errors
    /// [`Error::RankMismatch`], [`Error::ShapeMismatch`] for the wrong
    /// channel count, [`Error::InvalidArgument`] for an input shorter than
    /// the kernel; dtype or device mismatch.
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        functional::conv_op(
            "Conv1d",
            input,
            &self.weight,
            self.bias.as_ref(),
            &[self.stride],
            &[self.padding],
            &[self.dilation],
            self.groups,
        )
    }

    fn visit(&self, v: &mut dyn Visitor) {
        v.param("weight", &self.weight);
        if let Some(b) = &self.bias {
            v.param("bias", b);
        }
    }
}

macro_rules! conv_transpose {
    ($ty:ident, $name:literal, $new_in:literal, $sizes:ty, $one:expr, $zero:expr,
     $kernel:ty, $shape:expr, $rank:literal, $rank_msg:literal, $slice:expr, $fwd:literal,
     $doc:literal, $example:literal, $new_example:literal,
     $k:literal, $s2:literal, $s0:literal, $wshape:literal) => {
        #[doc = $doc]
        ///
        /// `weight` is `[in_channels, out_channels / groups, k…]`, `bias`
        /// `[out_channels]`. Default init (PyTorch's): both
        /// `U(-1/√fan_in, 1/√fan_in)` with `fan_in = out_channels / groups ·
        /// prod(k)` (PyTorch reads weight dim 1). Stride, padding,
        /// output padding and dilation are set with the `with_*` builders.
        ///
        /// ```
        #[doc = $example]
        /// # Ok::<(), kael_core::Error>(())
        /// ```
        pub struct $ty {
            /// `[in_channels, out_channels / groups, k…]`.
            pub weight: Tensor,
            /// `[out_channels]`, when the layer has a bias.
            pub bias: Option<Tensor>,
            stride: $sizes,
            padding: $sizes,
            output_padding: $sizes,
            dilation: $sizes,
            groups: usize,
        }

        impl $ty {
            /// An f32 layer with stride 1, no padding, one group, a bias,
            /// and PyTorch's default initialisation.
            ///
            /// # Errors
            /// [`Error::InvalidArgument`] for a zero size;
            /// [`Error::OutOfMemory`].
            ///
            /// ```
            #[doc = concat!("use kael_core::nn::", stringify!($ty), ";")]
            /// use kael_core::{Device, Rng};
            #[doc = concat!("let up = ", stringify!($ty), "::new(2, 2, ", $k, ", &Device::cpu(), &mut Rng::new(0))?;")]
            #[doc = concat!("assert_eq!(up.weight.shape(), ", $wshape, ");")]
            /// assert_eq!(up.groups(), 1);
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            pub fn new(
                in_channels: usize,
                out_channels: usize,
                kernel_size: $kernel,
                device: &Device,
                rng: &mut Rng,
            ) -> Result<Self> {
                Self::new_in(
                    in_channels,
                    out_channels,
                    kernel_size,
                    1,
                    DType::F32,
                    device,
                    rng,
                )
            }

            /// The layer with `groups` and parameters of `dtype`.
            ///
            /// # Errors
            /// [`Error::InvalidArgument`] for a zero size or groups, or
            /// channel counts not divisible by `groups`;
            /// [`Error::UnsupportedDType`] for non-float dtypes;
            /// [`Error::OutOfMemory`].
            ///
            /// ```
            #[doc = $new_example]
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            #[allow(clippy::too_many_arguments)]
            pub fn new_in(
                in_channels: usize,
                out_channels: usize,
                kernel_size: $kernel,
                groups: usize,
                dtype: DType,
                device: &Device,
                rng: &mut Rng,
            ) -> Result<Self> {
                const OP: &str = $new_in;
                check_groups(OP, in_channels, out_channels, groups)?;
                let k = kernel_size;
                let shape = $shape(in_channels, out_channels / groups, k);
                let (weight, bias) = conv_params(OP, &shape, out_channels, dtype, device, rng)?;
                Ok(Self {
                    weight,
                    bias,
                    stride: $one,
                    padding: $zero,
                    output_padding: $zero,
                    dilation: $one,
                    groups,
                })
            }

            /// A layer over given tensors (stride 1, no padding, one
            /// group). The bias is `[out_channels]`, which is
            /// `[weight.shape()[1] · groups]`: its length is checked by
            /// [`with_groups`](Self::with_groups) and the forward, since the
            /// groups are set after this.
            ///
            /// # Errors
            /// [`Error::RankMismatch`] for the wrong weight rank;
            /// [`Error::ShapeMismatch`] for a bias that is not rank 1;
            /// dtype or device mismatch between them.
            ///
            /// ```
            #[doc = concat!("use kael_core::nn::", stringify!($ty), ";")]
            /// use kael_core::{DType, Device, Tensor};
            /// let dev = Device::cpu();
            #[doc = concat!("let w = Tensor::zeros(&", $wshape, ", DType::F32, &dev)?;")]
            #[doc = concat!("assert!(", stringify!($ty), "::from_weights(w.clone(), Some(Tensor::zeros(&[2], DType::F32, &dev)?)).is_ok());")]
            #[doc = concat!("assert!(", stringify!($ty), "::from_weights(w, Some(Tensor::zeros(&[2, 1], DType::F32, &dev)?)).is_err());")]
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            pub fn from_weights(weight: Tensor, bias: Option<Tensor>) -> Result<Self> {
                // Any rank-1 bias passes here (its length depends on the
                // groups); a bias of another rank is compared with `[out]`.
                let o = match &bias {
                    Some(b) if b.rank() == 1 => b.shape()[0],
                    _ => weight.shape().get(1).copied().unwrap_or(0),
                };
                check_weights($name, $rank, $rank_msg, &weight, &bias, o)?;
                Ok(Self {
                    weight,
                    bias,
                    stride: $one,
                    padding: $zero,
                    output_padding: $zero,
                    dilation: $one,
                    groups: 1,
                })
            }

            /// The same layer with `stride`.
            ///
            /// # Errors
            /// [`Error::InvalidArgument`] for a zero stride.
            ///
            /// ```
            #[doc = concat!("use kael_core::nn::", stringify!($ty), ";")]
            /// use kael_core::{Device, Rng};
            #[doc = concat!("let up = ", stringify!($ty), "::new(2, 2, ", $k, ", &Device::cpu(), &mut Rng::new(0))?;")]
            #[doc = concat!("assert_eq!(up.with_stride(", $s2, ")?.stride(), ", $s2, ");")]
            #[doc = concat!("let up = ", stringify!($ty), "::new(2, 2, ", $k, ", &Device::cpu(), &mut Rng::new(0))?;")]
            #[doc = concat!("assert!(up.with_stride(", $s0, ").is_err());")]
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            pub fn with_stride(mut self, stride: $sizes) -> Result<Self> {
                check_positive(concat!($name, "::with_stride"), $slice(&stride), STRIDE)?;
                self.stride = stride;
                Ok(self)
            }

            /// The same layer with `padding` (removed from both sides of
            /// the full output).
            ///
            /// ```
            #[doc = concat!("use kael_core::nn::", stringify!($ty), ";")]
            /// use kael_core::{Device, Rng};
            #[doc = concat!("let up = ", stringify!($ty), "::new(2, 2, ", $k, ", &Device::cpu(), &mut Rng::new(0))?;")]
            #[doc = concat!("assert_eq!(up.with_padding(", $s2, ").padding(), ", $s2, ");")]
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            pub fn with_padding(mut self, padding: $sizes) -> Self {
                self.padding = padding;
                self
            }

            /// The same layer with `output_padding` (added to one side of
            /// the output; must be below the stride or the dilation, which
            /// the forward checks).
            ///
            /// ```
            #[doc = concat!("use kael_core::nn::", stringify!($ty), ";")]
            /// use kael_core::{Device, Rng};
            #[doc = concat!("let up = ", stringify!($ty), "::new(2, 2, ", $k, ", &Device::cpu(), &mut Rng::new(0))?;")]
            #[doc = concat!("assert_eq!(up.with_output_padding(", $s2, ").output_padding(), ", $s2, ");")]
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            pub fn with_output_padding(mut self, output_padding: $sizes) -> Self {
                self.output_padding = output_padding;
                self
            }

            /// The same layer with `dilation`.
            ///
            /// # Errors
            /// [`Error::InvalidArgument`] for a zero dilation.
            ///
            /// ```
            #[doc = concat!("use kael_core::nn::", stringify!($ty), ";")]
            /// use kael_core::{Device, Rng};
            #[doc = concat!("let up = ", stringify!($ty), "::new(2, 2, ", $k, ", &Device::cpu(), &mut Rng::new(0))?;")]
            #[doc = concat!("assert_eq!(up.with_dilation(", $s2, ")?.dilation(), ", $s2, ");")]
            #[doc = concat!("let up = ", stringify!($ty), "::new(2, 2, ", $k, ", &Device::cpu(), &mut Rng::new(0))?;")]
            #[doc = concat!("assert!(up.with_dilation(", $s0, ").is_err());")]
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            pub fn with_dilation(mut self, dilation: $sizes) -> Result<Self> {
                check_positive(
                    concat!($name, "::with_dilation"),
                    $slice(&dilation),
                    DILATION,
                )?;
                self.dilation = dilation;
                Ok(self)
            }

            /// The same layer with `groups`, reading the weight as
            /// `[in_channels, out_channels / groups, k…]`.
            ///
            /// # Errors
            /// [`Error::InvalidArgument`] unless `groups > 0` divides
            /// `in_channels` and the bias (if any) has
            /// `weight.shape()[1] · groups` elements.
            ///
            /// ```
            #[doc = concat!("use kael_core::nn::", stringify!($ty), ";")]
            /// use kael_core::{DType, Device, Tensor};
            /// let dev = Device::cpu();
            #[doc = concat!("let w = Tensor::zeros(&", $wshape, ", DType::F32, &dev)?;")]
            /// let b4 = Tensor::zeros(&[4], DType::F32, &dev)?; // 2 · 2 output channels
            #[doc = concat!("let up = ", stringify!($ty), "::from_weights(w.clone(), Some(b4))?;")]
            /// assert_eq!(up.with_groups(2)?.groups(), 2);
            /// let b2 = Tensor::zeros(&[2], DType::F32, &dev)?;
            #[doc = concat!("let up = ", stringify!($ty), "::from_weights(w, Some(b2))?;")]
            /// assert!(up.with_groups(2).is_err()); // the bias is not [2 · 2]
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            pub fn with_groups(mut self, groups: usize) -> Result<Self> {
                const OP: &str = concat!($name, "::with_groups");
                let groups = set_groups(OP, self.weight.shape()[0], groups)?;
                if let Some(b) = &self.bias {
                    if Some(b.shape()[0]) != self.weight.shape()[1].checked_mul(groups) {
                        return Err(Error::InvalidArgument {
                            op: OP,
                            reason: "the bias must have out_channels = weight.shape()[1] · groups elements; pass a matching bias to from_weights or other groups",
                        });
                    }
                }
                self.groups = groups;
                Ok(self)
            }

            /// Stride.
            ///
            /// ```
            #[doc = concat!("use kael_core::nn::", stringify!($ty), ";")]
            /// use kael_core::{Device, Rng};
            #[doc = concat!("let up = ", stringify!($ty), "::new(2, 2, ", $k, ", &Device::cpu(), &mut Rng::new(0))?;")]
            #[doc = concat!("assert_eq!(up.with_stride(", $s2, ")?.stride(), ", $s2, ");")]
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            pub fn stride(&self) -> $sizes {
                self.stride
            }

            /// Padding.
            ///
            /// ```
            #[doc = concat!("use kael_core::nn::", stringify!($ty), ";")]
            /// use kael_core::{Device, Rng};
            #[doc = concat!("let up = ", stringify!($ty), "::new(2, 2, ", $k, ", &Device::cpu(), &mut Rng::new(0))?;")]
            #[doc = concat!("assert_eq!(up.with_padding(", $s2, ").padding(), ", $s2, ");")]
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            pub fn padding(&self) -> $sizes {
                self.padding
            }

            /// Output padding.
            ///
            /// ```
            #[doc = concat!("use kael_core::nn::", stringify!($ty), ";")]
            /// use kael_core::{Device, Rng};
            #[doc = concat!("let up = ", stringify!($ty), "::new(2, 2, ", $k, ", &Device::cpu(), &mut Rng::new(0))?;")]
            #[doc = concat!("assert_eq!(up.with_output_padding(", $s2, ").output_padding(), ", $s2, ");")]
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            pub fn output_padding(&self) -> $sizes {
                self.output_padding
            }

            /// Dilation.
            ///
            /// ```
            #[doc = concat!("use kael_core::nn::", stringify!($ty), ";")]
            /// use kael_core::{Device, Rng};
            #[doc = concat!("let up = ", stringify!($ty), "::new(2, 2, ", $k, ", &Device::cpu(), &mut Rng::new(0))?;")]
            #[doc = concat!("assert_eq!(up.with_dilation(", $s2, ")?.dilation(), ", $s2, ");")]
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            pub fn dilation(&self) -> $sizes {
                self.dilation
            }

            /// The number of groups.
            ///
            /// ```
            #[doc = concat!("use kael_core::nn::", stringify!($ty), ";")]
            /// use kael_core::{Device, Rng};
            #[doc = concat!("let up = ", stringify!($ty), "::new(2, 2, ", $k, ", &Device::cpu(), &mut Rng::new(0))?;")]
            /// assert_eq!(up.groups(), 1);
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            pub fn groups(&self) -> usize {
                self.groups
            }
        }

        impl Module for $ty {
            #[doc = $fwd]
            ///
            /// # Errors
            /// [`Error::RankMismatch`], [`Error::ShapeMismatch`] for the
            /// wrong channel count, [`Error::InvalidArgument`] for an
            /// output padding not below stride or dilation or padding
            /// that leaves no output; dtype or device mismatch.
            fn forward(&self, input: &Tensor) -> Result<Tensor> {
                functional::conv_transpose_op(
                    $name,
                    input,
                    &self.weight,
                    self.bias.as_ref(),
                    $slice(&self.stride),
                    $slice(&self.padding),
                    $slice(&self.output_padding),
                    self.groups,
                    $slice(&self.dilation),
                )
            }

            fn visit(&self, v: &mut dyn Visitor) {
                v.param("weight", &self.weight);
                if let Some(b) = &self.bias {
                    v.param("bias", b);
                }
            }
        }
    };
}

fn one(x: &usize) -> &[usize] {
    core::slice::from_ref(x)
}

fn two(x: &[usize; 2]) -> &[usize] {
    x
}

conv_transpose!(
    ConvTranspose1d,
    "ConvTranspose1d",
    "ConvTranspose1d::new_in",
    usize,
    1,
    0,
    usize,
    |i, o, k| [i, o, k],
    3,
    "3 (weight is [in, out / groups, k])",
    one,
    "`input` is `[N, C_in, L]` or `[C_in, L]`; the result is `[N, C_out, L_out]` with `L_out = (L - 1)·stride - 2·pad + dil·(k - 1) + output_padding + 1`.",
    "A 1-d transposed convolution (PyTorch's `nn.ConvTranspose1d`), computed by [`conv_transpose1d`](super::functional::conv_transpose1d).",
    "use kael_core::nn::{ConvTranspose1d, Module};\nuse kael_core::{DType, Device, Rng, Tensor};\nlet dev = Device::cpu();\nlet up = ConvTranspose1d::new(4, 2, 4, &dev, &mut Rng::new(0))?.with_stride(2)?.with_padding(1);\nassert_eq!(up.forward(&Tensor::zeros(&[1, 4, 8], DType::F32, &dev)?)?.shape(), &[1, 2, 16]);",
    "use kael_core::nn::ConvTranspose1d;\nuse kael_core::{DType, Device, Rng};\nlet up = ConvTranspose1d::new_in(4, 6, 3, 2, DType::F64, &Device::cpu(), &mut Rng::new(0))?;\nassert_eq!(up.weight.shape(), &[4, 3, 3]);\nassert!(ConvTranspose1d::new_in(4, 5, 3, 2, DType::F64, &Device::cpu(), &mut Rng::new(0)).is_err());",
    "3",
    "2",
    "0",
    "[2, 2, 3]"
);

conv_transpose!(
    ConvTranspose2d,
    "ConvTranspose2d",
    "ConvTranspose2d::new_in",
    [usize; 2],
    [1, 1],
    [0, 0],
    [usize; 2],
    |i, o, k: [usize; 2]| [i, o, k[0], k[1]],
    4,
    "4 (weight is [in, out / groups, kh, kw])",
    two,
    "`input` is `[N, C_in, H, W]` or `[C_in, H, W]`; the result is `[N, C_out, H_out, W_out]` with `H_out = (H - 1)·stride - 2·pad + dil·(kh - 1) + output_padding + 1` (likewise W).",
    "A 2-d transposed convolution (PyTorch's `nn.ConvTranspose2d`), computed by [`conv_transpose2d`](super::functional::conv_transpose2d).",
    "use kael_core::nn::{ConvTranspose2d, Module};\nuse kael_core::{DType, Device, Rng, Tensor};\nlet dev = Device::cpu();\nlet up = ConvTranspose2d::new(4, 2, [3, 3], &dev, &mut Rng::new(0))?\n    .with_stride([2, 2])?.with_padding([1, 1]).with_output_padding([1, 1]);\nassert_eq!(up.forward(&Tensor::zeros(&[1, 4, 5, 5], DType::F32, &dev)?)?.shape(), &[1, 2, 10, 10]);",
    "use kael_core::nn::ConvTranspose2d;\nuse kael_core::{DType, Device, Rng};\nlet up = ConvTranspose2d::new_in(4, 4, [3, 3], 4, DType::F32, &Device::cpu(), &mut Rng::new(0))?;\nassert_eq!(up.weight.shape(), &[4, 1, 3, 3]);",
    "[3, 3]",
    "[2, 2]",
    "[0, 1]",
    "[2, 2, 3, 3]"
);
