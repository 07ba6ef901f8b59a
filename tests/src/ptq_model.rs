//! The convolutional model that post-training quantization is tested on
//! (`tests/tests/quant_ptq.rs`) and that `tests/examples/ptq_tflite.rs`
//! writes to `tests/data/tflite/ptq.tflite` for TFLite's interpreter
//! (`tests/data/tflite/gen.py`). Everything is drawn from fixed seeds, so
//! the test rebuilds the same model and file.

use kael_core::nn::{AvgPool2d, Conv2d, Linear, MaxPool2d};
use kael_core::quant::{Activation, FloatLayer};
use kael_core::{DType, Device, Result, Rng, Tensor};

/// An f32 model with every layer kind PTQ maps to TFLite: a SAME-padded
/// conv with ReLU, max pooling, a VALID depthwise conv (multiplier 2, stride
/// 2) with ReLU6, average pooling, a flatten of a 1 x 2 x 8 feature map
/// into a Linear with ReLU, a Linear, and softmax. Input `[n, 2, 10, 10]`.
pub struct PtqModel {
    conv: Conv2d,
    pool: MaxPool2d,
    depthwise: Conv2d,
    avg: AvgPool2d,
    fc1: Linear,
    fc2: Linear,
}

impl PtqModel {
    pub fn new(dev: &Device) -> Result<PtqModel> {
        let mut rng = Rng::new(20261205);
        Ok(PtqModel {
            conv: Conv2d::new(2, 4, [3, 3], dev, &mut rng)?.with_padding([1, 1]),
            pool: MaxPool2d::new([2, 2])?,
            depthwise: Conv2d::new_in(4, 8, [3, 3], 4, DType::F32, dev, &mut rng)?
                .with_stride([2, 2])?,
            avg: AvgPool2d::new([2, 1])?.with_stride([1, 1])?,
            fc1: Linear::new(16, 12, true, dev, &mut rng)?,
            fc2: Linear::new(12, 5, true, dev, &mut rng)?,
        })
    }

    pub fn layers(&self) -> Vec<FloatLayer<'_>> {
        vec![
            FloatLayer::Conv2d(&self.conv, Activation::Relu),
            FloatLayer::MaxPool2d(&self.pool),
            FloatLayer::Conv2d(&self.depthwise, Activation::Relu6),
            FloatLayer::AvgPool2d(&self.avg),
            FloatLayer::Flatten,
            FloatLayer::Linear(&self.fc1, Activation::Relu),
            FloatLayer::Linear(&self.fc2, Activation::None),
            FloatLayer::Softmax,
        ]
    }

    /// `n` inputs `[n, 2, 10, 10]`, standard normal, from `seed`.
    pub fn samples(n: usize, seed: u64, dev: &Device) -> Result<Tensor> {
        Tensor::randn(&[n, 2, 10, 10], DType::F32, dev, &mut Rng::new(seed))
    }
}
