//! Post-training quantization: calibrate an f32 model on sample inputs and
//! produce its int8 form in TFLite's scheme (symmetric per-channel weights,
//! asymmetric per-tensor activations from observed ranges, `i32` biases).

use super::params::{Activation, QuantParams};
use super::qtensor::{QTensor, fully_connected};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::nn::{Linear, Module};
use crate::tensor::Tensor;
use alloc::vec::Vec;

/// The range of values seen over calibration batches.
///
/// ```
/// use kael_core::quant::RangeObserver;
/// let mut r = RangeObserver::new();
/// r.observe_slice(&[-1.0, 3.0]);
/// let p = r.params()?;
/// // TFLite's asymmetric parameters: scale (3 - -1) / 255, zero point
/// // round(-128 + 1 / scale) = round(-64.25) = -64.
/// assert_eq!((p.scale(0), p.zero_point(0)), (4.0 / 255.0, -64));
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RangeObserver {
    min: f32,
    max: f32,
}

impl RangeObserver {
    /// An observer that has seen nothing (its range is `[0, 0]`, which
    /// always holds zero, as TFLite's ranges must).
    pub fn new() -> RangeObserver {
        RangeObserver { min: 0.0, max: 0.0 }
    }

    /// Widens the range to cover `values` (NaN is skipped).
    pub fn observe_slice(&mut self, values: &[f32]) {
        for &v in values {
            if v < self.min {
                self.min = v;
            }
            if v > self.max {
                self.max = v;
            }
        }
    }

    /// Widens the range to cover a tensor's values (any float dtype).
    pub fn observe(&mut self, t: &Tensor) -> Result<()> {
        let v = t.to_dtype(DType::F32)?.to_vec::<f32>()?;
        self.observe_slice(&v);
        Ok(())
    }

    /// The range seen, zero included.
    pub fn range(&self) -> (f32, f32) {
        (self.min, self.max)
    }

    /// Asymmetric int8 parameters for the range (TFLite's
    /// `GetAsymmetricQuantizationParams`, in `f32`: `scale = (max - min) /
    /// 255`, `zero_point = round(-128 - min / scale)` clamped to int8). An
    /// empty range (all zeros) gets scale 1.
    pub fn params(&self) -> Result<QuantParams> {
        if !(self.min.is_finite() && self.max.is_finite()) {
            return Err(Error::InvalidQuantization {
                op: "RangeObserver::params",
                reason: "the observed range is not finite; calibrate on finite values",
                value: if self.min.is_finite() {
                    self.max as f64
                } else {
                    self.min as f64
                },
                channel: 0,
            });
        }
        let scale = (self.max - self.min) / 255.0;
        if scale == 0.0 {
            return QuantParams::per_tensor(1.0, 0);
        }
        let from_min = -128.0 - self.min / scale;
        let zp = if from_min < -128.0 {
            -128
        } else if from_min > 127.0 {
            127
        } else {
            libm::roundf(from_min) as i32
        };
        QuantParams::per_tensor(scale, zp)
    }
}

/// Symmetric per-channel int8 weights along axis 0 (TFLite's
/// `SymmetricPerChannelQuantization`): channel `c` gets scale `max |w_c| /
/// 127` (1 for an all-zero channel) and values `round(w / scale)` in
/// `-127..=127`.
///
/// ```
/// use kael_core::quant::quantize_weights;
/// use kael_core::{Device, Tensor};
/// let w = Tensor::from_slice(&[0.5f32, -1.27, 0.0, 0.02], &[2, 2], &Device::cpu())?;
/// let q = quantize_weights(&w)?;
/// assert_eq!(q.params().scales(), &[1.27f32 / 127.0, 0.02 / 127.0]);
/// assert_eq!(q.values().to_vec::<i8>()?, vec![50, -127, 0, 127]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn quantize_weights(w: &Tensor) -> Result<QTensor> {
    const OP: &str = "quant::quantize_weights";
    let shape = w.shape().to_vec();
    let Some(&channels) = shape.first() else {
        return Err(Error::RankMismatch {
            op: OP,
            expected: "at least 1 (axis 0 holds the output channels)",
            got: 0,
        });
    };
    if !w.dtype().is_float() {
        return Err(Error::DTypeMismatch {
            op: OP,
            expected: DType::F32,
            got: w.dtype(),
        });
    }
    let data = w.to_dtype(DType::F32)?.to_vec::<f32>()?;
    let per = data.len().checked_div(channels).unwrap_or(0);
    let mut scales = Vec::with_capacity(channels);
    let mut q = Vec::with_capacity(data.len());
    for c in 0..channels {
        let row = &data[c * per..(c + 1) * per];
        let max_abs = row.iter().fold(0.0f32, |m, v| m.max(libm::fabsf(*v)));
        if !max_abs.is_finite() {
            return Err(Error::InvalidQuantization {
                op: OP,
                reason: "a weight is not finite; quantize finite weights",
                value: max_abs as f64,
                channel: c,
            });
        }
        let scale = if max_abs == 0.0 { 1.0 } else { max_abs / 127.0 };
        scales.push(scale);
        q.extend(
            row.iter()
                .map(|v| libm::roundf(v / scale).clamp(-127.0, 127.0) as i8),
        );
    }
    let zps = alloc::vec![0; channels];
    let params = QuantParams::per_channel(&scales, &zps, 0).map_err(|e| e.renamed(OP))?;
    QTensor::new(Tensor::from_slice(&q, &shape, &w.device())?, params)
}

/// An `i32` bias at scale `input_scale * weight_scale_c` (TFLite's bias
/// quantization): `round(b_c / (input_scale * weight_scale_c))`, saturated.
pub fn quantize_bias(b: &Tensor, input: &QuantParams, weight: &QuantParams) -> Result<Tensor> {
    let v = b.to_dtype(DType::F32)?.to_vec::<f32>()?;
    let q: Vec<i32> = v
        .iter()
        .enumerate()
        .map(|(c, &x)| libm::roundf(x / (input.scale(0) * weight.scale(c))) as i32)
        .collect();
    Tensor::from_slice(&q, b.shape(), &b.device())
}

/// One int8 fully-connected layer of a [`QuantizedMlp`].
#[derive(Debug, Clone)]
pub struct QuantizedLinear {
    /// Symmetric per-channel weights `[out, in]`.
    pub weight: QTensor,
    /// `i32` biases, when the layer has them.
    pub bias: Option<Tensor>,
    /// The output's (post-activation) quantization.
    pub output: QuantParams,
    /// The fused activation.
    pub activation: Activation,
}

/// An MLP of `Linear` layers (each followed by ReLU, ReLU6 or nothing)
/// quantized after training: its int8 layers run on the reference kernels.
///
/// ```
/// use kael_core::nn::Linear;
/// use kael_core::quant::{Activation, QuantizedMlp};
/// use kael_core::{DType, Device, Rng, Tensor};
/// let dev = Device::cpu();
/// let mut rng = Rng::new(0);
/// let (l1, l2) = (Linear::new(4, 8, true, &dev, &mut rng)?, Linear::new(8, 2, true, &dev, &mut rng)?);
/// let layers = [(&l1, Activation::Relu), (&l2, Activation::None)];
/// let samples = Tensor::randn(&[64, 4], DType::F32, &dev, &mut rng)?;
/// let q = QuantizedMlp::calibrate(&layers, &samples)?;
/// let y = q.forward(&samples)?; // f32 in, f32 out, int8 inside
/// assert_eq!(y.shape(), &[64, 2]);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct QuantizedMlp {
    /// The input's quantization.
    pub input: QuantParams,
    /// The layers, in order.
    pub layers: Vec<QuantizedLinear>,
}

fn apply_activation(t: Tensor, act: Activation) -> Result<Tensor> {
    match act {
        Activation::None => Ok(t),
        Activation::Relu => t.relu(),
        Activation::Relu6 => t.clamp(Some(0.0), Some(6.0)),
    }
}

impl QuantizedMlp {
    /// Runs the f32 `layers` on `samples` (`[n, in]`), records the range of
    /// the input and of every layer's output after its activation, and
    /// quantizes each layer: weights per channel, biases to `i32`, outputs
    /// per tensor from their ranges.
    pub fn calibrate(layers: &[(&Linear, Activation)], samples: &Tensor) -> Result<QuantizedMlp> {
        let mut observer = RangeObserver::new();
        observer.observe(samples)?;
        let input = observer.params()?;
        let mut x = samples.clone();
        let mut in_params = input.clone();
        let mut out = Vec::with_capacity(layers.len());
        for &(lin, act) in layers {
            x = apply_activation(lin.forward(&x)?, act)?;
            let mut r = RangeObserver::new();
            r.observe(&x)?;
            let output = r.params()?;
            let weight = quantize_weights(&lin.weight)?;
            let bias = match &lin.bias {
                Some(b) => Some(quantize_bias(b, &in_params, weight.params())?),
                None => None,
            };
            out.push(QuantizedLinear {
                weight,
                bias,
                output: output.clone(),
                activation: act,
            });
            in_params = output;
        }
        Ok(QuantizedMlp { input, layers: out })
    }

    /// Quantizes `x` (f32 `[n, in]`), runs the int8 layers, and returns the
    /// dequantized output.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_int8(&QTensor::quantize(x, self.input.clone())?)?
            .dequantize()
    }

    /// Runs the int8 layers on an already quantized input.
    pub fn forward_int8(&self, x: &QTensor) -> Result<QTensor> {
        let mut h = x.clone();
        for l in &self.layers {
            h = fully_connected(&h, &l.weight, l.bias.as_ref(), &l.output, l.activation)?;
        }
        Ok(h)
    }
}
