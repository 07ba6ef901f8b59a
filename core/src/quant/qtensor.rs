//! [`QTensor`]: int8 values with the parameters that give them meaning,
//! and the layers over them, run by the reference kernels.

use super::elementwise::{Add, Broadcast, Relu};
use super::fixed_point::Multiplier;
use super::kernels::{
    self, Conv2d, DepthwiseConv2d, FullyConnected, Geometry, Padding, Pool2d, PoolKind, Requantize,
    Rounding, Window,
};
use super::params::{Activation, QuantParams};
use crate::dtype::DType;
use crate::error::{ErrShape, Error, Result};
use crate::tensor::Tensor;
use alloc::vec;
use alloc::vec::Vec;

/// An int8 tensor and its quantization: element `q` stands for
/// `scale * (q - zero_point)`.
///
/// Invariants, checked by [`QTensor::new`] (every other constructor goes
/// through it): the values are `I8`; per-channel parameters name an axis
/// of the values with exactly one (scale, zero point) per index.
///
/// ```
/// use kael_core::quant::{QTensor, QuantParams};
/// use kael_core::{Device, Tensor};
/// let x = Tensor::from_slice(&[0.0f32, 0.5, -1.0], &[3], &Device::cpu())?;
/// let q = QTensor::quantize(&x, QuantParams::per_tensor(0.25, 1)?)?;
/// assert_eq!(q.values().to_vec::<i8>()?, vec![1, 3, -3]);
/// assert_eq!(q.dequantize()?.to_vec::<f32>()?, vec![0.0, 0.5, -1.0]);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct QTensor {
    values: Tensor,
    params: QuantParams,
}

impl QTensor {
    /// Pairs int8 `values` with `params` (the one validating constructor).
    ///
    /// ```
    /// use kael_core::quant::{QTensor, QuantParams};
    /// use kael_core::{Device, Tensor};
    /// let w = Tensor::from_slice(&[1i8, -2, 3, 4], &[2, 2], &Device::cpu())?;
    /// assert!(QTensor::new(w.clone(), QuantParams::per_channel(&[0.1, 0.2], &[0, 0], 0)?).is_ok());
    /// assert!(QTensor::new(w, QuantParams::per_channel(&[0.1], &[0], 0)?).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn new(values: Tensor, params: QuantParams) -> Result<QTensor> {
        const OP: &str = "QTensor::new";
        if values.dtype() != DType::I8 {
            return Err(Error::DTypeMismatch {
                op: OP,
                expected: DType::I8,
                got: values.dtype(),
            });
        }
        if let Some(axis) = params.axis() {
            let shape = values.shape();
            match shape.get(axis) {
                None => {
                    return Err(Error::DimOutOfRange {
                        op: OP,
                        dim: axis as isize,
                        rank: shape.len(),
                    });
                }
                Some(&n) if n != params.channels() => {
                    return Err(Error::InvalidQuantization {
                        op: OP,
                        reason: "per-channel parameters need one scale per index of their axis; pass as many scales as the axis has channels",
                        value: params.channels() as f64,
                        channel: n,
                    });
                }
                Some(_) => {}
            }
        }
        Ok(QTensor { values, params })
    }

    /// Quantizes `x` (any float dtype, read as `f32`) with `params`:
    /// `zero_point + round(x / scale)`, clamped to int8, per tensor or per
    /// channel (TFLite's `AffineQuantize`). The values land on `x`'s device.
    pub fn quantize(x: &Tensor, params: QuantParams) -> Result<QTensor> {
        const OP: &str = "QTensor::quantize";
        if !x.dtype().is_float() {
            return Err(Error::DTypeMismatch {
                op: OP,
                expected: DType::F32,
                got: x.dtype(),
            });
        }
        let shape = x.shape().to_vec();
        let stride = channel_stride(OP, &shape, &params)?;
        let data = x.to_dtype(DType::F32)?.to_vec::<f32>()?;
        let mut out = vec![0i8; data.len()];
        for (i, (&v, d)) in data.iter().zip(out.iter_mut()).enumerate() {
            let c = channel_of(i, stride, params.channels());
            kernels::quantize_into(
                &[v],
                params.scale(c),
                params.zero_point(c),
                core::slice::from_mut(d),
            )?;
        }
        let values = Tensor::from_slice(&out, &shape, &x.device())?;
        QTensor::new(values, params)
    }

    /// The reals the values stand for, as `F32` (TFLite's `Dequantize`).
    pub fn dequantize(&self) -> Result<Tensor> {
        const OP: &str = "QTensor::dequantize";
        let shape = self.values.shape().to_vec();
        let stride = channel_stride(OP, &shape, &self.params)?;
        let q = self.values.to_vec::<i8>()?;
        let mut out = vec![0f32; q.len()];
        for (i, (&v, d)) in q.iter().zip(out.iter_mut()).enumerate() {
            let c = channel_of(i, stride, self.params.channels());
            kernels::dequantize_into(
                &[v],
                self.params.scale(c),
                self.params.zero_point(c),
                core::slice::from_mut(d),
            )?;
        }
        Tensor::from_slice(&out, &shape, &self.values.device())
    }

    /// The int8 values.
    pub fn values(&self) -> &Tensor {
        &self.values
    }

    /// The quantization parameters.
    pub fn params(&self) -> &QuantParams {
        &self.params
    }

    /// The values' shape.
    pub fn shape(&self) -> &[usize] {
        self.values.shape()
    }

    /// The same values in another shape (per-tensor parameters only, as
    /// TFLite's `Reshape`).
    ///
    /// ```
    /// use kael_core::quant::{QTensor, QuantParams};
    /// use kael_core::{Device, Tensor};
    /// let v = Tensor::from_slice(&[1i8, 2, 3, 4], &[2, 2], &Device::cpu())?;
    /// let q = QTensor::new(v, QuantParams::per_tensor(1.0, 0)?)?;
    /// assert_eq!(q.reshape(&[4])?.shape(), &[4]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn reshape(&self, shape: &[usize]) -> Result<QTensor> {
        if !self.params.is_per_tensor() {
            return Err(Error::InvalidArgument {
                op: "QTensor::reshape",
                reason: "per-channel values cannot be reshaped (their axis would lose its meaning); dequantize, or requantize per tensor first",
            });
        }
        let values = self
            .values
            .reshape(shape)
            .map_err(|e| e.renamed("QTensor::reshape"))?;
        QTensor::new(values, self.params.clone())
    }
}

/// Elements between consecutive channels of the per-channel axis (0 for
/// per-tensor parameters, where every element is channel 0).
/// A zeroed output buffer of `shape`, its size checked and its allocation
/// fallible (NOTE [Checked output sizes]): an out-of-memory is an `Err`,
/// never an abort.
fn zeroed_i8(op: &'static str, shape: &[usize]) -> Result<Vec<i8>> {
    let n = crate::shape::checked_numel(op, shape)?;
    let mut out = Vec::new();
    out.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
        requested: n,
        available: None,
    })?;
    out.resize(n, 0);
    Ok(out)
}

fn channel_stride(op: &'static str, shape: &[usize], params: &QuantParams) -> Result<usize> {
    let Some(axis) = params.axis() else {
        return Ok(0);
    };
    match shape.get(axis) {
        Some(&n) if n == params.channels() => Ok(shape[axis + 1..].iter().product()),
        Some(&n) => Err(Error::InvalidQuantization {
            op,
            reason: "per-channel parameters need one scale per index of their axis; pass as many scales as the axis has channels",
            value: params.channels() as f64,
            channel: n,
        }),
        None => Err(Error::DimOutOfRange {
            op,
            dim: axis as isize,
            rank: shape.len(),
        }),
    }
}

fn channel_of(i: usize, stride: usize, channels: usize) -> usize {
    i.checked_div(stride).map_or(0, |c| c % channels)
}

/// The per-output-channel multipliers of a layer (TFLite's
/// `PopulateConvolutionQuantizationParams`: `input_scale * filter_scale /
/// output_scale` in `f64`).
pub(super) fn layer_multipliers(
    input: &QuantParams,
    filter: &QuantParams,
    output: &QuantParams,
) -> Vec<Multiplier> {
    let (si, so) = (input.scale(0), output.scale(0));
    filter
        .scales()
        .iter()
        .map(|&sf| Multiplier::from_scales(si, sf, so))
        .collect()
}

fn check_activation_params(op: &'static str, input: &QTensor, output: &QuantParams) -> Result<()> {
    if !input.params.is_per_tensor() || !output.is_per_tensor() {
        return Err(Error::InvalidArgument {
            op,
            reason: "activations are quantized per tensor in TFLite's int8 scheme; give the input and output one scale and zero point each",
        });
    }
    Ok(())
}

fn check_filter(op: &'static str, filter: &QTensor, axis: usize) -> Result<()> {
    if !filter.params.is_symmetric() {
        return Err(Error::InvalidQuantization {
            op,
            reason: "int8 weights are symmetric in TFLite's scheme (every zero point 0); quantize the weights with zero point 0",
            value: filter.params.zero_point(0) as f64,
            channel: 0,
        });
    }
    if filter.params.axis().is_some_and(|a| a != axis) {
        return Err(Error::InvalidArgument {
            op,
            reason: "per-channel weights must be quantized along the output-channel axis (0 for conv and fully connected, 3 for depthwise)",
        });
    }
    Ok(())
}

fn bias_values(
    op: &'static str,
    bias: Option<&Tensor>,
    channels: usize,
) -> Result<Option<Vec<i32>>> {
    let Some(b) = bias else { return Ok(None) };
    if b.dtype() != DType::I32 {
        return Err(Error::DTypeMismatch {
            op,
            expected: DType::I32,
            got: b.dtype(),
        });
    }
    if b.shape() != [channels] {
        return Err(Error::ShapeMismatch {
            op,
            expected: ErrShape::of(&[channels]),
            got: ErrShape::of(b.shape()),
        });
    }
    Ok(Some(b.to_vec::<i32>()?))
}

fn rank(op: &'static str, t: &QTensor, want: usize, expected: &'static str) -> Result<()> {
    if t.shape().len() != want {
        return Err(Error::RankMismatch {
            op,
            expected,
            got: t.shape().len(),
        });
    }
    Ok(())
}

fn finish(
    op: &'static str,
    out: Vec<i8>,
    shape: &[usize],
    like: &Tensor,
    params: &QuantParams,
) -> Result<QTensor> {
    let values = Tensor::from_slice(&out, shape, &like.device()).map_err(|e| e.renamed(op))?;
    QTensor::new(values, params.clone())
}

/// int8 fully connected: `input [.., in]` times `weight [out, in]`ᵀ plus
/// `bias [out]` (`I32`, at scale `input_scale * weight_scale`), requantized
/// to `output` with `act` fused (TFLite's `FULLY_CONNECTED`).
///
/// ```
/// use kael_core::quant::{fully_connected, Activation, QTensor, QuantParams};
/// use kael_core::{Device, Tensor};
/// let dev = Device::cpu();
/// let x = QTensor::new(Tensor::from_slice(&[2i8, 4], &[1, 2], &dev)?, QuantParams::per_tensor(0.5, 0)?)?;
/// let w = QTensor::new(Tensor::from_slice(&[1i8, 1], &[1, 2], &dev)?, QuantParams::per_tensor(0.5, 0)?)?;
/// let y = fully_connected(&x, &w, None, &QuantParams::per_tensor(0.25, 0)?, Activation::None)?;
/// // (1 + 2) * 0.5 = 1.5 -> 6 at scale 0.25
/// assert_eq!(y.values().to_vec::<i8>()?, vec![6]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn fully_connected(
    input: &QTensor,
    weight: &QTensor,
    bias: Option<&Tensor>,
    output: &QuantParams,
    act: Activation,
) -> Result<QTensor> {
    const OP: &str = "quant::fully_connected";
    check_activation_params(OP, input, output)?;
    check_filter(OP, weight, 0)?;
    rank(OP, weight, 2, "2 for the weight [out, in]")?;
    let (outs, ins) = (weight.shape()[0], weight.shape()[1]);
    let Some((&last, lead)) = input.shape().split_last() else {
        return Err(Error::RankMismatch {
            op: OP,
            expected: "at least 1 for the input",
            got: 0,
        });
    };
    if last != ins {
        return Err(Error::ShapeMismatch {
            op: OP,
            expected: ErrShape::of(&[ins]),
            got: ErrShape::of(&[last]),
        });
    }
    let bias = bias_values(OP, bias, outs)?;
    let multipliers = layer_multipliers(&input.params, &weight.params, output);
    let (min, max) = act.range(output);
    let x = input.values.to_vec::<i8>()?;
    let w = weight.values.to_vec::<i8>()?;
    let batches: usize = lead.iter().product();
    let mut out = vec![
        0i8;
        batches.checked_mul(outs).ok_or(Error::InvalidArgument {
            op: OP,
            reason: "the output's size overflows usize"
        })?
    ];
    FullyConnected {
        input_zero_point: input.params.zero_point(0),
        filter: &w,
        bias: bias.as_deref(),
        in_features: ins,
        out_features: outs,
        requant: Requantize {
            multipliers: &multipliers,
            zero_point: output.zero_point(0),
            min,
            max,
        },
        rounding: Rounding::Once,
    }
    .run(&x, &mut out)?;
    let mut shape = lead.to_vec();
    shape.push(outs);
    finish(OP, out, &shape, &input.values, output)
}

/// Stride, dilation and padding of a 2-d window layer (`[h, w]` pairs).
///
/// ```
/// use kael_core::quant::{Conv2dOptions, Padding};
/// let o = Conv2dOptions { stride: [2, 2], ..Conv2dOptions::default() };
/// assert_eq!((o.dilation, o.padding), ([1, 1], Padding::Valid));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2dOptions {
    /// Vertical and horizontal stride.
    pub stride: [usize; 2],
    /// Vertical and horizontal dilation.
    pub dilation: [usize; 2],
    /// Same or valid.
    pub padding: Padding,
}

impl Default for Conv2dOptions {
    fn default() -> Self {
        Conv2dOptions {
            stride: [1, 1],
            dilation: [1, 1],
            padding: Padding::Valid,
        }
    }
}

fn geometry(
    op: &'static str,
    input: &QTensor,
    kernel: [usize; 2],
    out_channels: usize,
    o: &Conv2dOptions,
) -> Result<Geometry> {
    nhwc_geometry(op, input.shape(), kernel, out_channels, o)
}

/// The geometry of a window layer over an NHWC input of `shape` (shared
/// by the tensor-level layers and the `.tflite` interpreter).
pub(super) fn nhwc_geometry(
    op: &'static str,
    shape: &[usize],
    kernel: [usize; 2],
    out_channels: usize,
    o: &Conv2dOptions,
) -> Result<Geometry> {
    let &[batch, h, w, in_channels] = shape else {
        return Err(Error::RankMismatch {
            op,
            expected: "4 for the NHWC input",
            got: shape.len(),
        });
    };
    Ok(Geometry {
        batch,
        in_channels,
        out_channels,
        h: Window::new(op, h, kernel[0], o.stride[0], o.dilation[0], o.padding)?,
        w: Window::new(op, w, kernel[1], o.stride[1], o.dilation[1], o.padding)?,
    })
}

/// int8 2-d convolution over an NHWC `input` with an `[out_c, kh, kw,
/// in_c / groups]` filter (TFLite's `CONV_2D`, per-channel weights).
///
/// ```
/// use kael_core::quant::{conv2d, Activation, Conv2dOptions, QTensor, QuantParams};
/// use kael_core::{Device, Tensor};
/// let dev = Device::cpu();
/// let p = QuantParams::per_tensor(1.0, 0)?;
/// let x = QTensor::new(Tensor::from_slice(&[1i8, 2, 3, 4], &[1, 2, 2, 1], &dev)?, p.clone())?;
/// let f = QTensor::new(Tensor::from_slice(&[1i8, 0, 0, 1], &[1, 2, 2, 1], &dev)?, p.clone())?;
/// let y = conv2d(&x, &f, None, &Conv2dOptions::default(), &p, Activation::None)?;
/// assert_eq!(y.values().to_vec::<i8>()?, vec![5]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn conv2d(
    input: &QTensor,
    filter: &QTensor,
    bias: Option<&Tensor>,
    options: &Conv2dOptions,
    output: &QuantParams,
    act: Activation,
) -> Result<QTensor> {
    const OP: &str = "quant::conv2d";
    check_activation_params(OP, input, output)?;
    check_filter(OP, filter, 0)?;
    rank(OP, filter, 4, "4 for the filter [out_c, kh, kw, in_c]")?;
    let fs = filter.shape();
    let g = geometry(OP, input, [fs[1], fs[2]], fs[0], options)?;
    if fs[3] == 0 || g.in_channels % fs[3] != 0 {
        return Err(Error::ShapeMismatch {
            op: OP,
            expected: ErrShape::of(&[g.in_channels]),
            got: ErrShape::of(&[fs[3]]),
        });
    }
    convolve(OP, false, g, input, filter, bias, output, act)
}

/// int8 depthwise convolution over an NHWC `input` with a `[1, kh, kw,
/// in_c * multiplier]` filter (TFLite's `DEPTHWISE_CONV_2D`).
///
/// ```
/// use kael_core::quant::{depthwise_conv2d, Activation, Conv2dOptions, QTensor, QuantParams};
/// use kael_core::{Device, Tensor};
/// let dev = Device::cpu();
/// let p = QuantParams::per_tensor(1.0, 0)?;
/// let x = QTensor::new(Tensor::from_slice(&[1i8, 10, 2, 20], &[1, 1, 2, 2], &dev)?, p.clone())?;
/// let f = QTensor::new(Tensor::from_slice(&[1i8, -1, 1, -1], &[1, 1, 2, 2], &dev)?, p.clone())?;
/// let y = depthwise_conv2d(&x, &f, None, &Conv2dOptions::default(), &p, Activation::None)?;
/// assert_eq!(y.values().to_vec::<i8>()?, vec![3, -30]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn depthwise_conv2d(
    input: &QTensor,
    filter: &QTensor,
    bias: Option<&Tensor>,
    options: &Conv2dOptions,
    output: &QuantParams,
    act: Activation,
) -> Result<QTensor> {
    const OP: &str = "quant::depthwise_conv2d";
    check_activation_params(OP, input, output)?;
    check_filter(OP, filter, 3)?;
    rank(OP, filter, 4, "4 for the filter [1, kh, kw, out_c]")?;
    let fs = filter.shape();
    if fs[0] != 1 {
        return Err(Error::ShapeMismatch {
            op: OP,
            expected: ErrShape::of(&[1, fs[1], fs[2], fs[3]]),
            got: ErrShape::of(fs),
        });
    }
    let g = geometry(OP, input, [fs[1], fs[2]], fs[3], options)?;
    convolve(OP, true, g, input, filter, bias, output, act)
}

/// The part of [`conv2d`] and [`depthwise_conv2d`] after their filter
/// checks: biases, multipliers, the kernel run, the output.
#[allow(clippy::too_many_arguments)]
fn convolve(
    op: &'static str,
    depthwise: bool,
    g: Geometry,
    input: &QTensor,
    filter: &QTensor,
    bias: Option<&Tensor>,
    output: &QuantParams,
    act: Activation,
) -> Result<QTensor> {
    let bias = bias_values(op, bias, g.out_channels)?;
    let multipliers = layer_multipliers(&input.params, &filter.params, output);
    let (min, max) = act.range(output);
    let x = input.values.to_vec::<i8>()?;
    let w = filter.values.to_vec::<i8>()?;
    let shape = [g.batch, g.h.output, g.w.output, g.out_channels];
    let mut out = zeroed_i8(op, &shape)?;
    let requant = Requantize {
        multipliers: &multipliers,
        zero_point: output.zero_point(0),
        min,
        max,
    };
    let (input_zero_point, bias) = (input.params.zero_point(0), bias.as_deref());
    if depthwise {
        DepthwiseConv2d {
            geometry: g,
            input_zero_point,
            filter: &w,
            bias,
            requant,
        }
        .run(&x, &mut out)?;
    } else {
        Conv2d {
            geometry: g,
            input_zero_point,
            filter: &w,
            bias,
            requant,
        }
        .run(&x, &mut out)?;
    }
    finish(op, out, &shape, &input.values, output)
}

/// int8 2-d pooling over an NHWC `input`; the output keeps the input's
/// quantization (TFLite's `AVERAGE_POOL_2D` / `MAX_POOL_2D`).
///
/// ```
/// use kael_core::quant::{pool2d, Activation, Conv2dOptions, PoolKind, QTensor, QuantParams};
/// use kael_core::{Device, Tensor};
/// let p = QuantParams::per_tensor(1.0, 0)?;
/// let x = QTensor::new(Tensor::from_slice(&[1i8, 7, -3, 2], &[1, 2, 2, 1], &Device::cpu())?, p)?;
/// let y = pool2d(&x, PoolKind::Max, [2, 2], &Conv2dOptions::default(), Activation::None)?;
/// assert_eq!(y.values().to_vec::<i8>()?, vec![7]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn pool2d(
    input: &QTensor,
    kind: PoolKind,
    kernel: [usize; 2],
    options: &Conv2dOptions,
    act: Activation,
) -> Result<QTensor> {
    const OP: &str = "quant::pool2d";
    check_activation_params(OP, input, &input.params)?;
    let s = input.shape();
    let channels = s.get(3).copied().unwrap_or(0);
    let g = geometry(OP, input, kernel, channels, options)?;
    let (min, max) = act.range(&input.params);
    let x = input.values.to_vec::<i8>()?;
    let shape = [g.batch, g.h.output, g.w.output, g.out_channels];
    let mut out = zeroed_i8(OP, &shape)?;
    Pool2d {
        geometry: g,
        kind,
        min,
        max,
    }
    .run(&x, &mut out)?;
    finish(OP, out, &shape, &input.values, &input.params)
}

/// int8 elementwise add into `output`'s quantization (TFLite's int8
/// `ADD`). The operands broadcast as in NumPy and PyTorch ([`Broadcast`],
/// up to 6 dimensions).
///
/// ```
/// use kael_core::quant::{add, Activation, QTensor, QuantParams};
/// use kael_core::{Device, Tensor};
/// let dev = Device::cpu();
/// let a = QTensor::new(Tensor::from_slice(&[10i8, -4], &[2], &dev)?, QuantParams::per_tensor(0.1, 0)?)?;
/// let b = QTensor::new(Tensor::from_slice(&[3i8, 3], &[2], &dev)?, QuantParams::per_tensor(0.2, 1)?)?;
/// let y = add(&a, &b, &QuantParams::per_tensor(0.1, 0)?, Activation::Relu)?;
/// // 1.0 + 0.4 = 1.4 -> 14; -0.4 + 0.4 = 0 -> 0
/// assert_eq!(y.values().to_vec::<i8>()?, vec![14, 0]);
/// // A [2, 1] column plus the [2] row broadcasts to [2, 2].
/// let col = QTensor::new(Tensor::from_slice(&[0i8, 20], &[2, 1], &dev)?, QuantParams::per_tensor(0.1, 0)?)?;
/// let y = add(&col, &a, &QuantParams::per_tensor(0.1, 0)?, Activation::None)?;
/// assert_eq!(y.shape(), &[2, 2]);
/// assert_eq!(y.values().to_vec::<i8>()?, vec![10, -4, 30, 16]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn add(a: &QTensor, b: &QTensor, output: &QuantParams, act: Activation) -> Result<QTensor> {
    const OP: &str = "quant::add";
    let layer = Add::new(&a.params, &b.params, output, act)?;
    let (x, y) = (a.values.to_vec::<i8>()?, b.values.to_vec::<i8>()?);
    if a.shape() == b.shape() {
        let mut out = vec![0i8; x.len()];
        layer.run(&x, &y, &mut out)?;
        return finish(OP, out, a.shape(), &a.values, output);
    }
    let shape = Broadcast::new(a.shape(), b.shape()).map_err(|e| e.renamed(OP))?;
    let mut out = vec![0i8; shape.len()];
    layer.run_broadcast(&x, &y, &shape, &mut out)?;
    finish(OP, out, shape.shape(), &a.values, output)
}

/// int8 ReLU (`act` [`Activation::Relu`]) or ReLU6 ([`Activation::Relu6`])
/// as a layer of its own, into `output`'s quantization (TFLite's
/// standalone `RELU` and `RELU6`, [`Relu`]): unlike an activation fused
/// into a layer, it requantizes from the input's scale to the output's.
///
/// ```
/// use kael_core::quant::{relu, Activation, QTensor, QuantParams};
/// use kael_core::{Device, Tensor};
/// let x = QTensor::new(Tensor::from_slice(&[-50i8, 12, 100], &[3], &Device::cpu())?, QuantParams::per_tensor(0.1, 0)?)?;
/// let y = relu(&x, Activation::Relu6, &QuantParams::per_tensor(6.0 / 255.0, -128)?)?;
/// // -5.0 -> 0 (-128); 1.2 -> 51 steps of 6/255 (-77); 10.0 -> 6 (127).
/// assert_eq!(y.values().to_vec::<i8>()?, vec![-128, -77, 127]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn relu(input: &QTensor, act: Activation, output: &QuantParams) -> Result<QTensor> {
    const OP: &str = "quant::relu";
    check_activation_params(OP, input, output)?;
    let layer = Relu::new(&input.params, output, act)?;
    let x = input.values.to_vec::<i8>()?;
    let mut out = vec![0i8; x.len()];
    layer.run(&x, &mut out)?;
    finish(OP, out, input.shape(), &input.values, output)
}

/// int8 softmax over the last dimension (TFLite's int8 `SOFTMAX`): the
/// output is quantized at scale 1/256 with zero point -128, as TFLite
/// requires.
///
/// ```
/// use kael_core::quant::{softmax, QTensor, QuantParams};
/// use kael_core::{Device, Tensor};
/// let x = QTensor::new(Tensor::from_slice(&[0i8, 0, 0, 0], &[1, 4], &Device::cpu())?, QuantParams::per_tensor(0.5, 0)?)?;
/// let y = softmax(&x, 1.0)?;
/// assert_eq!(y.dequantize()?.to_vec::<f32>()?, vec![0.25; 4]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn softmax(input: &QTensor, beta: f32) -> Result<QTensor> {
    const OP: &str = "quant::softmax";
    let out_params = super::Softmax::output_params()?;
    check_activation_params(OP, input, &out_params)?;
    let depth = input.shape().last().copied().unwrap_or(1);
    let layer = super::Softmax::new(beta, &input.params, depth)?;
    let x = input.values.to_vec::<i8>()?;
    let mut out = vec![0i8; x.len()];
    layer.run(&x, &mut out)?;
    finish(OP, out, input.shape(), &input.values, &out_params)
}
