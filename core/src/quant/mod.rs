//! Int8 quantization in TFLite's scheme: [`QuantParams`] and [`QTensor`],
//! the fixed-point requantization ([`Multiplier`]), and the reference int8
//! kernels ([`FullyConnected`], [`Conv2d`], [`DepthwiseConv2d`],
//! [`Pool2d`], [`Add`] (with [`Broadcast`]), [`Relu`], [`Softmax`], [`quantize_into`], [`dequantize_into`]) with
//! post-training quantization ([`QuantizedMlp::calibrate`],
//! [`RangeObserver`], [`quantize_weights`]), tensor-level layers
//! ([`fully_connected`], [`conv2d`],
//! [`depthwise_conv2d`], [`pool2d`], [`add`], [`relu`], [`softmax`]), and `.tflite` models
//! ([`Model::parse`], [`Model::run`]).
//!
//! NOTE [TFLite int8 scheme]
//! Weights are symmetric int8 (zero point 0), per output channel or per
//! tensor; activations are asymmetric int8, per tensor; biases are `i32` at
//! scale `input_scale * weight_scale`. A layer accumulates `(x - zp_x) * w`
//! in `i32` and scales the sum to the output with a fixed-point multiplier
//! (NOTE [Requantization rounding]), fusing ReLU/ReLU6 into the clamp.
//! Every kernel here is TFLite's *reference* integer kernel (the one
//! TFLite Micro runs), step for step, so outputs are bit-identical to
//! TFLite's: `tests/tests/quant_tflite.rs` replays every operator of three
//! models converted and run by TFLite itself (`tests/data/tflite/gen.py`)
//! and compares every output byte.
//!
//! The slice kernels borrow their weights and take precomputed
//! multipliers, so firmware can keep both in flash and run without a heap;
//! the tensor-level layers compute the multipliers and run the same
//! kernels on the host.
//!
//! ```
//! use kael_core::quant::{fully_connected, Activation, QTensor, QuantParams};
//! use kael_core::{Device, Tensor};
//! let dev = Device::cpu();
//! let x = QTensor::quantize(&Tensor::from_slice(&[0.5f32, -0.25], &[1, 2], &dev)?, QuantParams::per_tensor(1.0 / 128.0, 0)?)?;
//! let w = QTensor::quantize(&Tensor::from_slice(&[1.0f32, 1.0], &[1, 2], &dev)?, QuantParams::per_tensor(1.0 / 127.0, 0)?)?;
//! let y = fully_connected(&x, &w, None, &QuantParams::per_tensor(1.0 / 64.0, 0)?, Activation::None)?;
//! assert_eq!(y.dequantize()?.to_vec::<f32>()?, vec![0.25]);
//! # Ok::<(), kael_core::Error>(())
//! ```

mod calibrate;
mod dot;
mod elementwise;
mod fixed_point;
mod flatbuffer;
mod flatbuffer_builder;
mod kernels;
mod params;
mod ptq;
mod qtensor;
mod softmax;
mod tflite;

pub use calibrate::{
    QuantizedLinear, QuantizedMlp, RangeObserver, quantize_bias, quantize_weights,
};
pub use dot::dot;
pub use elementwise::{Add, Broadcast, Relu};
pub use fixed_point::{Multiplier, rounding_divide_by_pot, saturating_rounding_doubling_high_mul};
pub use kernels::{
    Conv2d, DepthwiseConv2d, FullyConnected, Geometry, Padding, Pool2d, PoolKind, Requantize,
    Rounding, Window, dequantize_into, quantize_into,
};
pub use params::{Activation, Q_MAX, Q_MIN, QuantParams};
pub use ptq::{Accuracy, FloatLayer, QuantizedModel};
pub use qtensor::{
    Conv2dOptions, QTensor, add, conv2d, depthwise_conv2d, fully_connected, pool2d, relu, softmax,
};
pub use softmax::Softmax;
pub use tflite::{ElementType, Model, OpKernel, OpKind, Operator, TensorInfo, Value, builtin_name};
