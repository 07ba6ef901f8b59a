//! Post-training quantization of convolutional models: calibrate an f32
//! model of kael layers ([`FloatLayer`]) on sample inputs, get its int8
//! form ([`QuantizedModel`]) in TFLite's scheme, measure it against the
//! f32 model ([`Accuracy`]), and write it as a `.tflite` file that TFLite's
//! interpreter, TFLite Micro and [`Model::parse`](super::Model::parse)
//! run.
//!
//! NOTE [From NCHW layers to a TFLite graph]
//! kael's layers are PyTorch's: activations NCHW, conv weights `[out, in /
//! groups, kh, kw]`, and `Flatten` orders features channel first. TFLite
//! is NHWC with filters `[out, kh, kw, in]` (conv) and `[1, kh, kw, out]`
//! (depthwise), and its flatten orders features channel last. Calibration
//! runs the f32 layers as they are; quantization moves each weight into
//! TFLite's layout, and the first `Linear` after a `Flatten` of a feature
//! map gets its input columns permuted from `(c, h, w)` to `(h, w, c)`
//! order, so the int8 graph computes the same function. Explicit padding
//! becomes TFLite's `VALID` (padding 0) or `SAME` (when SAME puts the same
//! number of rows and columns before the first window and gives the same
//! output size); anything else has no TFLite form and is refused. Average
//! pooling with padding must exclude the padding from its divisor, as
//! TFLite's does.

use super::calibrate::{RangeObserver, quantize_bias, quantize_weights};
use super::kernels::{Padding, PoolKind, Window};
use super::params::{Activation, QuantParams};
use super::qtensor::{self, Conv2dOptions, QTensor};
use super::softmax::Softmax;
use super::tflite::ElementType;
use super::tflite::write::{GraphWriter, Options, code};
use crate::dtype::DType;
use crate::error::{ErrShape, Error, Result};
use crate::nn::{AvgPool2d, Conv2d, Linear, MaxPool2d, Module};
use crate::tensor::Tensor;
use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

const CALIBRATE: &str = "quant::QuantizedModel::calibrate";
const FORWARD: &str = "quant::QuantizedModel::forward";

/// One layer of an f32 model to quantize, in order
/// ([`QuantizedModel::calibrate`]). Activations are NCHW, as kael's (and
/// PyTorch's) layers take them.
///
/// ```
/// use kael_core::nn::{Conv2d, Linear};
/// use kael_core::quant::{Activation, FloatLayer};
/// use kael_core::{Device, Rng};
/// let (dev, mut rng) = (Device::cpu(), Rng::new(0));
/// let conv = Conv2d::new(1, 4, [3, 3], &dev, &mut rng)?;
/// let fc = Linear::new(4 * 6 * 6, 3, true, &dev, &mut rng)?;
/// let layers = [
///     FloatLayer::Conv2d(&conv, Activation::Relu),
///     FloatLayer::Flatten,
///     FloatLayer::Linear(&fc, Activation::None),
///     FloatLayer::Softmax,
/// ];
/// assert_eq!(layers.len(), 4);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Clone, Copy)]
pub enum FloatLayer<'m> {
    /// A convolution with one group (TFLite's `CONV_2D`) or one group per
    /// input channel (`DEPTHWISE_CONV_2D`), and its fused activation.
    Conv2d(&'m Conv2d, Activation),
    /// A fully-connected layer and its fused activation.
    Linear(&'m Linear, Activation),
    /// Max pooling.
    MaxPool2d(&'m MaxPool2d),
    /// Average pooling.
    AvgPool2d(&'m AvgPool2d),
    /// `[n, c, h, w]` to `[n, c·h·w]`.
    Flatten,
    /// Softmax over the features of `[n, k]`.
    Softmax,
}

fn activate(t: Tensor, act: Activation) -> Result<Tensor> {
    match act {
        Activation::None => Ok(t),
        Activation::Relu => t.relu(),
        Activation::Relu6 => t.clamp(Some(0.0), Some(6.0)),
    }
}

impl FloatLayer<'_> {
    /// The f32 layer's output for `x`.
    ///
    /// ```
    /// use kael_core::quant::FloatLayer;
    /// use kael_core::{DType, Device, Tensor};
    /// let x = Tensor::zeros(&[2, 3, 4, 5], DType::F32, &Device::cpu())?;
    /// assert_eq!(FloatLayer::Flatten.forward(&x)?.shape(), &[2, 60]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match *self {
            FloatLayer::Conv2d(c, act) => activate(c.forward(x)?, act),
            FloatLayer::Linear(l, act) => activate(l.forward(x)?, act),
            FloatLayer::MaxPool2d(p) => p.forward(x),
            FloatLayer::AvgPool2d(p) => p.forward(x),
            FloatLayer::Flatten => {
                let n = x.shape().first().copied().unwrap_or(1);
                let rest = x.shape().iter().skip(1).product::<usize>();
                x.reshape(&[n, rest])
            }
            FloatLayer::Softmax => x.softmax(-1),
        }
    }
}

/// One int8 layer of a [`QuantizedModel`], in TFLite's layouts.
#[derive(Debug, Clone)]
enum Step {
    Conv {
        filter: QTensor,
        bias: Option<Tensor>,
        options: Conv2dOptions,
        /// `Some(depth multiplier)` for a depthwise convolution.
        depthwise: Option<usize>,
        output: QuantParams,
        act: Activation,
    },
    FullyConnected {
        weight: QTensor,
        bias: Option<Tensor>,
        output: QuantParams,
        act: Activation,
    },
    Pool {
        kind: PoolKind,
        window: [usize; 2],
        options: Conv2dOptions,
    },
    Flatten,
    Softmax,
}

/// An f32 model quantized after training, in TFLite's int8 scheme (NOTE
/// [TFLite int8 scheme], NOTE [From NCHW layers to a TFLite graph]):
/// symmetric per-channel weights, asymmetric per-tensor activations from
/// the ranges seen in calibration, `i32` biases.
/// [`QuantizedModel::forward`] runs it on kael's int8 kernels;
/// [`QuantizedModel::to_tflite`] writes it for TFLite and firmware.
///
/// ```
/// use kael_core::nn::{Conv2d, Linear, MaxPool2d};
/// use kael_core::quant::{Activation, FloatLayer, Model, QuantizedModel, Value};
/// use kael_core::{DType, Device, Rng, Tensor};
/// let (dev, mut rng) = (Device::cpu(), Rng::new(0));
/// let conv = Conv2d::new(1, 4, [3, 3], &dev, &mut rng)?;
/// let pool = MaxPool2d::new([2, 2])?;
/// let fc = Linear::new(4 * 3 * 3, 3, true, &dev, &mut rng)?;
/// let layers = [
///     FloatLayer::Conv2d(&conv, Activation::Relu),
///     FloatLayer::MaxPool2d(&pool),
///     FloatLayer::Flatten,
///     FloatLayer::Linear(&fc, Activation::None),
/// ];
/// let samples = Tensor::randn(&[32, 1, 8, 8], DType::F32, &dev, &mut rng)?;
/// let q = QuantizedModel::calibrate(&layers, &samples)?;
/// let acc = q.compare(&layers, &samples)?;
/// assert!(acc.max_abs_error < 0.2 * acc.output_range);
/// // The same model as a .tflite file, run by kael's TFLite interpreter.
/// let bytes = q.to_tflite()?;
/// let model = Model::parse(&bytes)?;
/// let one = samples.narrow(0, 0, 1)?;
/// let nhwc = one.permute(&[0, 2, 3, 1])?.contiguous()?.to_vec::<f32>()?;
/// let out = model.run(&[Value::F32(nhwc)])?;
/// assert_eq!(out[0], Value::F32(q.forward(&one)?.to_vec::<f32>()?));
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct QuantizedModel {
    /// One sample's shape as the f32 model takes it (`[c, h, w]` or
    /// `[features]`).
    sample_shape: Vec<usize>,
    /// The input's quantization.
    input: QuantParams,
    steps: Vec<Step>,
}

/// How close a [`QuantizedModel`] comes to its f32 model on some inputs
/// ([`QuantizedModel::compare`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Accuracy {
    /// The largest `|int8 - f32|` over all outputs.
    pub max_abs_error: f32,
    /// The mean `|int8 - f32|`.
    pub mean_abs_error: f32,
    /// `max - min` of the f32 outputs (to read the errors against).
    pub output_range: f32,
    /// For `[n, k]` outputs, the fraction of rows whose largest output is
    /// the same entry in both.
    pub top1_agreement: Option<f32>,
}

/// The NHWC shape, without the batch, of an NCHW (or `[n, f]`) shape.
fn nhwc(shape: &[usize]) -> Vec<usize> {
    match shape {
        [_, c, h, w] => vec![*h, *w, *c],
        [_, rest @ ..] => rest.to_vec(),
        [] => Vec::new(),
    }
}

/// TFLite's padding for PyTorch's explicit `pad` along one dimension, or
/// `None` when TFLite has no equal one.
fn padding_for(
    input: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
    pad: usize,
) -> Option<Padding> {
    if pad == 0 {
        return Some(Padding::Valid);
    }
    let w = Window::new(CALIBRATE, input, kernel, stride, dilation, Padding::Same).ok()?;
    let span = dilation
        .checked_mul(kernel.checked_sub(1)?)?
        .checked_add(1)?;
    let padded = input.checked_add(pad.checked_mul(2)?)?;
    let out = padded.checked_sub(span)? / stride + 1;
    (w.pad == pad && w.output == out).then_some(Padding::Same)
}

fn options_for(
    hw: [usize; 2],
    kernel: [usize; 2],
    stride: [usize; 2],
    dilation: [usize; 2],
    pad: [usize; 2],
) -> Result<Conv2dOptions> {
    let ph = padding_for(hw[0], kernel[0], stride[0], dilation[0], pad[0]);
    let pw = padding_for(hw[1], kernel[1], stride[1], dilation[1], pad[1]);
    match (ph, pw) {
        (Some(a), Some(b)) if a == b => Ok(Conv2dOptions {
            stride,
            dilation,
            padding: a,
        }),
        _ => Err(Error::InvalidArgument {
            op: CALIBRATE,
            reason: "a layer's padding has no TFLite equivalent (TFLite pads VALID or SAME); use padding 0, or the padding SAME gives (e.g. (k - 1) / 2 for an odd kernel at stride 1), in both dimensions",
        }),
    }
}

/// `[o, i, kh, kw]` values to `[o, kh, kw, i]`.
fn ohwi(v: &[i8], s: [usize; 4]) -> Vec<i8> {
    let [o, i, kh, kw] = s;
    let mut out = vec![0; v.len()];
    for a in 0..o {
        for c in 0..i {
            for y in 0..kh {
                for x in 0..kw {
                    out[((a * kh + y) * kw + x) * i + c] = v[((a * i + c) * kh + y) * kw + x];
                }
            }
        }
    }
    out
}

/// `[o, 1, kh, kw]` values to `[1, kh, kw, o]`.
fn hwo(v: &[i8], s: [usize; 4]) -> Vec<i8> {
    let [o, _, kh, kw] = s;
    let mut out = vec![0; v.len()];
    for a in 0..o {
        for t in 0..kh * kw {
            out[t * o + a] = v[a * kh * kw + t];
        }
    }
    out
}

/// A `Linear` weight `[out, c·h·w]` whose columns follow a channel-first
/// flatten, with its columns reordered for a channel-last one.
fn columns_channel_last(w: &Tensor, chw: [usize; 3]) -> Result<Tensor> {
    let [c, h, wd] = chw;
    let outs = w.shape()[0];
    let src = w.to_dtype(DType::F32)?.to_vec::<f32>()?;
    let ins = c * h * wd;
    let mut dst = vec![0f32; src.len()];
    for o in 0..outs {
        for ch in 0..c {
            for y in 0..h {
                for x in 0..wd {
                    dst[o * ins + (y * wd + x) * c + ch] = src[o * ins + (ch * h + y) * wd + x];
                }
            }
        }
    }
    Tensor::from_slice(&dst, &[outs, ins], &w.device())
}

fn observed(t: &Tensor) -> Result<QuantParams> {
    let mut r = RangeObserver::new();
    r.observe(t)?;
    r.params()
}

fn rank_error(expected: &'static str, got: usize) -> Error {
    Error::RankMismatch {
        op: CALIBRATE,
        expected,
        got,
    }
}

impl QuantizedModel {
    /// Runs the f32 `layers` on `samples` (`[n, c, h, w]`, or `[n,
    /// features]` for a model that starts with `Linear`), records the range
    /// of the input and of every layer's output (after its activation),
    /// and quantizes each layer (NOTE [From NCHW layers to a TFLite
    /// graph]). Pooling and flattening keep their input's quantization;
    /// softmax's output is TFLite's fixed 1/256.
    ///
    /// # Errors
    /// A layer TFLite cannot express (grouped convolution other than
    /// depthwise, padding without a TFLite equivalent, average pooling that
    /// counts padding, softmax over a feature map), a layer that does not
    /// fit its input, or non-finite values.
    pub fn calibrate(layers: &[FloatLayer<'_>], samples: &Tensor) -> Result<QuantizedModel> {
        let input = observed(samples)?;
        let sample_shape = samples.shape().get(1..).unwrap_or(&[]).to_vec();
        let mut x = samples.clone();
        let mut in_params = input.clone();
        // The channel-first [c, h, w] of a flatten that a Linear has not
        // yet absorbed.
        let mut flattened: Option<[usize; 3]> = None;
        let mut steps = Vec::with_capacity(layers.len());
        for layer in layers {
            let shape = x.shape().to_vec();
            let y = layer.forward(&x).map_err(|e| e.renamed(CALIBRATE))?;
            let step = match *layer {
                FloatLayer::Conv2d(conv, act) => {
                    let &[_, cin, h, w] = shape.as_slice() else {
                        return Err(rank_error(
                            "4 ([n, c, h, w]) before a convolution",
                            shape.len(),
                        ));
                    };
                    let ws = conv.weight.shape();
                    let s = [ws[0], ws[1], ws[2], ws[3]];
                    let options = options_for(
                        [h, w],
                        [s[2], s[3]],
                        conv.stride(),
                        conv.dilation(),
                        conv.padding(),
                    )?;
                    let output = observed(&y)?;
                    let q = quantize_weights(&conv.weight)?;
                    let bias = match &conv.bias {
                        Some(b) => Some(quantize_bias(b, &in_params, q.params())?),
                        None => None,
                    };
                    let v = q.values().to_vec::<i8>()?;
                    let scales = q.params().scales().to_vec();
                    let zeros = vec![0; scales.len()];
                    let (filter, depthwise) = if conv.groups() == 1 {
                        let values = Tensor::from_slice(
                            &ohwi(&v, s),
                            &[s[0], s[2], s[3], s[1]],
                            &x.device(),
                        )?;
                        (
                            QTensor::new(values, QuantParams::per_channel(&scales, &zeros, 0)?)?,
                            None,
                        )
                    } else if conv.groups() == cin && s[1] == 1 {
                        let values =
                            Tensor::from_slice(&hwo(&v, s), &[1, s[2], s[3], s[0]], &x.device())?;
                        let multiplier = s[0] / cin;
                        (
                            QTensor::new(values, QuantParams::per_channel(&scales, &zeros, 3)?)?,
                            Some(multiplier),
                        )
                    } else {
                        return Err(Error::InvalidArgument {
                            op: CALIBRATE,
                            reason: "TFLite runs convolutions with one group (CONV_2D) or one group per input channel (DEPTHWISE_CONV_2D); split a grouped convolution into those",
                        });
                    };
                    Step::Conv {
                        filter,
                        bias,
                        options,
                        depthwise,
                        output,
                        act,
                    }
                }
                FloatLayer::Linear(lin, act) => {
                    let weight = match flattened.take() {
                        Some(chw) if chw[1] * chw[2] > 1 => columns_channel_last(&lin.weight, chw)?,
                        _ => lin.weight.clone(),
                    };
                    let output = observed(&y)?;
                    let weight = quantize_weights(&weight)?;
                    let bias = match &lin.bias {
                        Some(b) => Some(quantize_bias(b, &in_params, weight.params())?),
                        None => None,
                    };
                    Step::FullyConnected {
                        weight,
                        bias,
                        output,
                        act,
                    }
                }
                FloatLayer::MaxPool2d(p) => Self::pool(
                    &shape,
                    PoolKind::Max,
                    p.kernel_size(),
                    p.stride(),
                    p.padding(),
                )?,
                FloatLayer::AvgPool2d(p) => {
                    if p.padding() != [0, 0] && p.count_include_pad() {
                        return Err(Error::InvalidArgument {
                            op: CALIBRATE,
                            reason: "TFLite's average pooling leaves padding out of the divisor; build the layer with with_count_include_pad(false) or without padding",
                        });
                    }
                    Self::pool(
                        &shape,
                        PoolKind::Average,
                        p.kernel_size(),
                        p.stride(),
                        p.padding(),
                    )?
                }
                FloatLayer::Flatten => {
                    if let &[_, c, h, w] = shape.as_slice() {
                        flattened = Some([c, h, w]);
                    }
                    Step::Flatten
                }
                FloatLayer::Softmax => {
                    if shape.len() != 2 {
                        return Err(rank_error(
                            "2 ([n, k]) before softmax; flatten first",
                            shape.len(),
                        ));
                    }
                    Step::Softmax
                }
            };
            in_params = match &step {
                Step::Conv { output, .. } | Step::FullyConnected { output, .. } => output.clone(),
                Step::Softmax => Softmax::output_params()?,
                Step::Pool { .. } | Step::Flatten => in_params,
            };
            steps.push(step);
            x = y;
        }
        if flattened.is_some_and(|[_, h, w]| h * w > 1) {
            return Err(Error::InvalidArgument {
                op: CALIBRATE,
                reason: "a Flatten of a feature map must be followed by a Linear (TFLite flattens channels last, and the Linear's columns absorb the difference); end the model with a Linear",
            });
        }
        Ok(QuantizedModel {
            sample_shape,
            input,
            steps,
        })
    }

    fn pool(
        shape: &[usize],
        kind: PoolKind,
        window: [usize; 2],
        stride: [usize; 2],
        pad: [usize; 2],
    ) -> Result<Step> {
        let &[_, _, h, w] = shape else {
            return Err(rank_error("4 ([n, c, h, w]) before pooling", shape.len()));
        };
        let options = options_for([h, w], window, stride, [1, 1], pad)?;
        Ok(Step::Pool {
            kind,
            window,
            options,
        })
    }

    /// The input's quantization.
    pub fn input_params(&self) -> &QuantParams {
        &self.input
    }

    /// Quantizes `x` (f32, shaped as the calibration samples but for the
    /// batch), runs the int8 layers on kael's kernels, and returns the
    /// dequantized output, shaped as the f32 model's.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if x.shape().get(1..) != Some(self.sample_shape.as_slice()) {
            let mut want = vec![x.shape().first().copied().unwrap_or(1)];
            want.extend_from_slice(&self.sample_shape);
            return Err(Error::ShapeMismatch {
                op: FORWARD,
                expected: ErrShape::of(&want),
                got: ErrShape::of(x.shape()),
            });
        }
        let n = x.shape()[0];
        let x = if x.shape().len() == 4 {
            x.permute(&[0, 2, 3, 1])?.contiguous()?
        } else {
            x.clone()
        };
        let mut h = QTensor::quantize(&x.to_dtype(DType::F32)?, self.input.clone())?;
        for step in &self.steps {
            h = match step {
                Step::Conv {
                    filter,
                    bias,
                    options,
                    depthwise,
                    output,
                    act,
                } => match depthwise {
                    None => qtensor::conv2d(&h, filter, bias.as_ref(), options, output, *act)?,
                    Some(_) => {
                        qtensor::depthwise_conv2d(&h, filter, bias.as_ref(), options, output, *act)?
                    }
                },
                Step::FullyConnected {
                    weight,
                    bias,
                    output,
                    act,
                } => qtensor::fully_connected(&h, weight, bias.as_ref(), output, *act)?,
                Step::Pool {
                    kind,
                    window,
                    options,
                } => qtensor::pool2d(&h, *kind, *window, options, Activation::None)?,
                Step::Flatten => {
                    let rest = h.shape().iter().skip(1).product::<usize>();
                    h.reshape(&[n, rest])?
                }
                Step::Softmax => qtensor::softmax(&h, 1.0)?,
            };
        }
        let y = h.dequantize()?;
        if y.shape().len() == 4 {
            y.permute(&[0, 3, 1, 2])?.contiguous()
        } else {
            Ok(y)
        }
    }

    /// Runs the f32 `layers` and this model on `samples` and measures how
    /// far apart their outputs are.
    pub fn compare(&self, layers: &[FloatLayer<'_>], samples: &Tensor) -> Result<Accuracy> {
        let mut x = samples.clone();
        for l in layers {
            x = l.forward(&x)?;
        }
        let q = self.forward(samples)?;
        if q.shape() != x.shape() {
            return Err(Error::ShapeMismatch {
                op: "quant::QuantizedModel::compare",
                expected: ErrShape::of(x.shape()),
                got: ErrShape::of(q.shape()),
            });
        }
        let (f, g) = (x.to_dtype(DType::F32)?.to_vec::<f32>()?, q.to_vec::<f32>()?);
        let errors = f.iter().zip(&g).map(|(a, b)| libm::fabsf(a - b));
        let max_abs_error = errors.clone().fold(0.0f32, f32::max);
        let mean_abs_error = errors.sum::<f32>() / f.len().max(1) as f32;
        let lo = f.iter().copied().fold(f32::INFINITY, f32::min);
        let hi = f.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let top1_agreement = match x.shape() {
            &[n, k] if n > 0 && k > 0 => {
                let argmax =
                    |v: &[f32]| (0..k).fold(0, |best, j| if v[j] > v[best] { j } else { best });
                let same = (0..n)
                    .filter(|&r| argmax(&f[r * k..(r + 1) * k]) == argmax(&g[r * k..(r + 1) * k]))
                    .count();
                Some(same as f32 / n as f32)
            }
            _ => None,
        };
        Ok(Accuracy {
            max_abs_error,
            mean_abs_error,
            output_range: (hi - lo).max(0.0),
            top1_agreement,
        })
    }

    /// The model as a `.tflite` file (TFLite's schema, one subgraph, batch
    /// 1): float32 NHWC input (`[1, h, w, c]`, or `[1, features]`), a
    /// `QUANTIZE`, the int8 layers, and a `DEQUANTIZE` to a float32 output
    /// (`[1, k]`, or NHWC). TFLite's interpreter runs it and gives the same
    /// bits as [`QuantizedModel::forward`] (`tests/tests/quant_ptq.rs`).
    pub fn to_tflite(&self) -> Result<Vec<u8>> {
        let mut g = GraphWriter::new();
        let mut shape = vec![1];
        shape.extend(nhwc(&{
            let mut s = vec![1];
            s.extend_from_slice(&self.sample_shape);
            s
        }));
        let input = g.tensor("input".into(), &shape, ElementType::F32, None, None)?;
        let mut cur = g.tensor(
            "input_int8".into(),
            &shape,
            ElementType::I8,
            None,
            Some(&self.input),
        )?;
        g.op(code::QUANTIZE, &[input], &[cur], Options::None)?;
        let mut params = self.input.clone();
        for (i, step) in self.steps.iter().enumerate() {
            let (next_shape, next_params, op, inputs, options) = match step {
                Step::Conv {
                    filter,
                    bias,
                    options,
                    depthwise,
                    output,
                    act,
                } => {
                    let fs = filter.shape();
                    let out_c = if depthwise.is_some() { fs[3] } else { fs[0] };
                    let geo = qtensor::nhwc_geometry(
                        "quant::QuantizedModel::to_tflite",
                        &shape,
                        [fs[1], fs[2]],
                        out_c,
                        options,
                    )?;
                    let ins = Self::layer_inputs(&mut g, i, cur, filter, bias.as_ref(), &params)?;
                    let (op, opts) = match depthwise {
                        None => (code::CONV_2D, Options::Conv2d(*options, *act)),
                        Some(m) => (
                            code::DEPTHWISE_CONV_2D,
                            Options::DepthwiseConv2d(*options, *act, *m),
                        ),
                    };
                    (
                        vec![1, geo.h.output, geo.w.output, out_c],
                        output.clone(),
                        op,
                        ins,
                        opts,
                    )
                }
                Step::FullyConnected {
                    weight,
                    bias,
                    output,
                    act,
                } => {
                    let ins = Self::layer_inputs(&mut g, i, cur, weight, bias.as_ref(), &params)?;
                    let outs = weight.shape()[0];
                    (
                        vec![1, outs],
                        output.clone(),
                        code::FULLY_CONNECTED,
                        ins,
                        Options::FullyConnected(*act),
                    )
                }
                Step::Pool {
                    kind,
                    window,
                    options,
                } => {
                    let c = shape.get(3).copied().unwrap_or(0);
                    let geo = qtensor::nhwc_geometry(
                        "quant::QuantizedModel::to_tflite",
                        &shape,
                        *window,
                        c,
                        options,
                    )?;
                    let op = match kind {
                        PoolKind::Max => code::MAX_POOL_2D,
                        PoolKind::Average => code::AVERAGE_POOL_2D,
                    };
                    (
                        vec![1, geo.h.output, geo.w.output, c],
                        params.clone(),
                        op,
                        vec![cur],
                        Options::Pool2d(*window, *options),
                    )
                }
                Step::Flatten => {
                    let rest = shape.iter().skip(1).product::<usize>();
                    let features = i32::try_from(rest).map_err(|_| Error::InvalidArgument {
                        op: "quant::QuantizedModel::to_tflite",
                        reason: "a flattened feature count exceeds 2^31 - 1, more than a .tflite file holds; use smaller layers",
                    })?;
                    let new_shape: Vec<u8> =
                        [1, features].iter().flat_map(|v| v.to_le_bytes()).collect();
                    let s = g.tensor(
                        format!("layer{i}_shape"),
                        &[2],
                        ElementType::I32,
                        Some(new_shape),
                        None,
                    )?;
                    (
                        vec![1, rest],
                        params.clone(),
                        code::RESHAPE,
                        vec![cur, s],
                        Options::None,
                    )
                }
                Step::Softmax => (
                    shape.clone(),
                    Softmax::output_params()?,
                    code::SOFTMAX,
                    vec![cur],
                    Options::Softmax(1.0),
                ),
            };
            let out = g.tensor(
                format!("layer{i}"),
                &next_shape,
                ElementType::I8,
                None,
                Some(&next_params),
            )?;
            g.op(op, &inputs, &[out], options)?;
            cur = out;
            shape = next_shape;
            params = next_params;
        }
        let output = g.tensor("output".into(), &shape, ElementType::F32, None, None)?;
        g.op(code::DEQUANTIZE, &[cur], &[output], Options::None)?;
        g.finish(&[input], &[output])
    }

    /// A layer's inputs: `cur`, its weight constant and, when it has one,
    /// its bias constant.
    fn layer_inputs(
        g: &mut GraphWriter,
        layer: usize,
        cur: i32,
        weight: &QTensor,
        bias: Option<&Tensor>,
        input: &QuantParams,
    ) -> Result<Vec<i32>> {
        let bytes: Vec<u8> = weight
            .values()
            .to_vec::<i8>()?
            .iter()
            .map(|&v| v as u8)
            .collect();
        let w = g.tensor(
            format!("layer{layer}_weight"),
            weight.shape(),
            ElementType::I8,
            Some(bytes),
            Some(weight.params()),
        )?;
        let mut ins = vec![cur, w];
        if let Some(b) = bias {
            ins.push(Self::bias(
                g,
                format!("layer{layer}_bias"),
                b,
                input,
                weight,
            )?);
        }
        Ok(ins)
    }

    /// A bias constant, quantized at `input_scale * weight_scale` per
    /// channel as TFLite declares it.
    fn bias(
        g: &mut GraphWriter,
        name: alloc::string::String,
        b: &Tensor,
        input: &QuantParams,
        weight: &QTensor,
    ) -> Result<i32> {
        let v = b.to_vec::<i32>()?;
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let scales: Vec<f32> = (0..v.len())
            .map(|c| input.scale(0) * weight.params().scale(c))
            .collect();
        let zeros = vec![0; v.len()];
        let q = QuantParams::per_channel(&scales, &zeros, 0)?;
        g.tensor(name, b.shape(), ElementType::I32, Some(bytes), Some(&q))
    }
}
