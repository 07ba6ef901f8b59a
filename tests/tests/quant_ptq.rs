//! Post-training quantization of convolutional models and `.tflite`
//! writing: kael calibrates an f32 model of its own layers, quantizes it in
//! TFLite's scheme, and writes a file that TFLite's interpreter runs with
//! the same bits as kael (`tests/data/tflite/ptq.tflite`; TFLite's results
//! on it are in cases.txt, from gen.py).

use kael_core::nn::{AvgPool2d, Conv2d, Linear, MaxPool2d};
use kael_core::quant::{Activation, FloatLayer, Model, QuantizedModel, Value};
use kael_core::{DType, Device, Error, Rng, Tensor};
use kael_tests::ptq_model::PtqModel;
use kael_tests::tflite_cases::tflite_io;

const PTQ: &[u8] = include_bytes!("../data/tflite/ptq.tflite");
const CASES: &str = include_str!("../data/tflite/cases.txt");

fn quantized(dev: &Device) -> (PtqModel, QuantizedModel) {
    let model = PtqModel::new(dev).unwrap();
    let q = QuantizedModel::calibrate(&model.layers(), &PtqModel::samples(256, 1, dev).unwrap())
        .unwrap();
    (model, q)
}

#[test]
fn the_written_file_is_the_one_tflite_ran() {
    let (_, q) = quantized(&Device::cpu());
    let bytes = q.to_tflite().unwrap();
    assert!(
        bytes == PTQ,
        "to_tflite() no longer writes tests/data/tflite/ptq.tflite ({} bytes now, {} committed); \
         if the change is intended, rerun `cargo run -p kael-tests --example ptq_tflite -- \
         tests/data/tflite/ptq.tflite` and then gen.py, so TFLite's results follow",
        bytes.len(),
        PTQ.len()
    );
}

#[test]
fn forward_gives_tflites_outputs_bit_for_bit() {
    let dev = Device::cpu();
    let (_, q) = quantized(&dev);
    for run in 0..2 {
        // TFLite's input is NHWC [1, 10, 10, 2]; kael's model takes NCHW.
        let (x, want) = tflite_io(CASES, "ptq", run);
        let nchw = Tensor::from_slice(&x, &[1, 10, 10, 2], &dev)
            .unwrap()
            .permute(&[0, 3, 1, 2])
            .unwrap();
        let got = q.forward(&nchw).unwrap().to_vec::<f32>().unwrap();
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want), "run {run}");
    }
}

#[test]
fn the_int8_model_tracks_the_f32_model() {
    let dev = Device::cpu();
    let (model, q) = quantized(&dev);
    let held_out = PtqModel::samples(256, 2, &dev).unwrap();
    let acc = q.compare(&model.layers(), &held_out).unwrap();
    assert!(acc.output_range > 0.0, "{acc:?}");
    assert!(acc.max_abs_error < 0.1 * acc.output_range, "{acc:?}");
    assert!(acc.mean_abs_error < 0.03 * acc.output_range, "{acc:?}");
    assert!(acc.top1_agreement.unwrap() >= 0.95, "{acc:?}");
}

#[test]
fn an_mlp_quantizes_and_writes_too() {
    let dev = Device::cpu();
    let mut rng = Rng::new(3);
    let l1 = Linear::new(3, 8, true, &dev, &mut rng).unwrap();
    let l2 = Linear::new(8, 2, false, &dev, &mut rng).unwrap();
    let layers = [
        FloatLayer::Linear(&l1, Activation::Relu6),
        FloatLayer::Linear(&l2, Activation::None),
    ];
    let x = Tensor::randn(&[64, 3], DType::F32, &dev, &mut rng).unwrap();
    let q = QuantizedModel::calibrate(&layers, &x).unwrap();
    let bytes = q.to_tflite().unwrap();
    let model = Model::parse(&bytes).unwrap();
    let one = x.narrow(0, 5, 1).unwrap();
    let out = model
        .run(&[Value::F32(one.to_vec::<f32>().unwrap())])
        .unwrap();
    assert_eq!(
        out,
        vec![Value::F32(
            q.forward(&one).unwrap().to_vec::<f32>().unwrap()
        )]
    );
}

fn refused(layers: &[FloatLayer<'_>], shape: &[usize]) -> Error {
    let dev = Device::cpu();
    let x = Tensor::randn(shape, DType::F32, &dev, &mut Rng::new(0)).unwrap();
    let e = QuantizedModel::calibrate(layers, &x).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("quant::QuantizedModel::calibrate"),
        "{e}"
    );
    e
}

#[test]
fn layers_tflite_cannot_express_are_refused_with_the_fix() {
    let dev = Device::cpu();
    let mut rng = Rng::new(0);
    let grouped = Conv2d::new_in(4, 4, [3, 3], 2, DType::F32, &dev, &mut rng).unwrap();
    let e = refused(
        &[FloatLayer::Conv2d(&grouped, Activation::None)],
        &[2, 4, 6, 6],
    );
    assert!(e.to_string().contains("DEPTHWISE_CONV_2D"), "{e}");
    let wide = Conv2d::new(1, 2, [3, 3], &dev, &mut rng)
        .unwrap()
        .with_padding([2, 2]);
    let e = refused(
        &[FloatLayer::Conv2d(&wide, Activation::None)],
        &[2, 1, 6, 6],
    );
    assert!(e.to_string().contains("VALID or SAME"), "{e}");
    let avg = AvgPool2d::new([3, 3])
        .unwrap()
        .with_stride([1, 1])
        .unwrap()
        .with_padding([1, 1])
        .unwrap();
    let e = refused(&[FloatLayer::AvgPool2d(&avg)], &[2, 1, 6, 6]);
    assert!(e.to_string().contains("count_include_pad"), "{e}");
    let e = refused(&[FloatLayer::Softmax], &[2, 1, 3, 3]);
    assert!(matches!(e, Error::RankMismatch { .. }), "{e}");
    let e = refused(&[FloatLayer::Flatten], &[2, 1, 3, 3]);
    assert!(e.to_string().contains("followed by a Linear"), "{e}");
}

#[test]
fn padding_tflite_can_express_is_accepted() {
    let dev = Device::cpu();
    let mut rng = Rng::new(0);
    // SAME at stride 1 (3x3, pad 1) and max pooling with SAME padding.
    let conv = Conv2d::new(1, 2, [3, 3], &dev, &mut rng)
        .unwrap()
        .with_padding([1, 1]);
    let pool = MaxPool2d::new([3, 3])
        .unwrap()
        .with_stride([1, 1])
        .unwrap()
        .with_padding([1, 1])
        .unwrap();
    let avg = AvgPool2d::new([3, 3])
        .unwrap()
        .with_stride([1, 1])
        .unwrap()
        .with_padding([1, 1])
        .unwrap()
        .with_count_include_pad(false);
    let layers = [
        FloatLayer::Conv2d(&conv, Activation::None),
        FloatLayer::MaxPool2d(&pool),
        FloatLayer::AvgPool2d(&avg),
    ];
    let x = Tensor::randn(&[8, 1, 5, 5], DType::F32, &dev, &mut rng).unwrap();
    let q = QuantizedModel::calibrate(&layers, &x).unwrap();
    let acc = q.compare(&layers, &x).unwrap();
    assert!(acc.max_abs_error < 0.05 * acc.output_range, "{acc:?}");
    // A feature-map output comes back NCHW, and the file runs the same.
    let one = x.narrow(0, 0, 1).unwrap();
    let y = q.forward(&one).unwrap();
    assert_eq!(y.shape(), &[1, 2, 5, 5]);
    let bytes = q.to_tflite().unwrap();
    let model = Model::parse(&bytes).unwrap();
    let nhwc = one.permute(&[0, 2, 3, 1]).unwrap().contiguous().unwrap();
    let out = model
        .run(&[Value::F32(nhwc.to_vec::<f32>().unwrap())])
        .unwrap();
    let want = y.permute(&[0, 2, 3, 1]).unwrap().contiguous().unwrap();
    assert_eq!(out, vec![Value::F32(want.to_vec::<f32>().unwrap())]);
}

#[test]
fn forward_refuses_an_input_of_another_shape() {
    let dev = Device::cpu();
    let (_, q) = quantized(&dev);
    let x = Tensor::zeros(&[1, 2, 9, 10], DType::F32, &dev).unwrap();
    let e = q.forward(&x).unwrap_err();
    assert!(
        matches!(
            e,
            Error::ShapeMismatch {
                op: "quant::QuantizedModel::forward",
                ..
            }
        ),
        "{e}"
    );
}
