//! Bad quantized input returns an `Err` that names the operation, never a
//! panic, and builds nothing.

use kael_core::quant::{self, Activation, Conv2dOptions, Padding, PoolKind, QTensor, QuantParams};
use kael_core::{Device, Error, Tensor};

fn dev() -> Device {
    Device::cpu()
}

fn q(values: &[i8], shape: &[usize], scale: f32, zp: i32) -> QTensor {
    QTensor::new(
        Tensor::from_slice(values, shape, &dev()).unwrap(),
        QuantParams::per_tensor(scale, zp).unwrap(),
    )
    .unwrap()
}

fn unit() -> QuantParams {
    QuantParams::per_tensor(1.0, 0).unwrap()
}

#[test]
fn qtensor_new_refuses_values_that_are_not_int8() {
    let f = Tensor::zeros(&[2], kael_core::DType::F32, &dev()).unwrap();
    let e = QTensor::new(f, unit()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                op: "QTensor::new",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn qtensor_new_refuses_a_per_channel_axis_past_the_rank() {
    let v = Tensor::from_slice(&[1i8, 2], &[2], &dev()).unwrap();
    let e = QTensor::new(
        v,
        QuantParams::per_channel(&[1.0, 1.0], &[0, 0], 1).unwrap(),
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::DimOutOfRange {
                op: "QTensor::new",
                dim: 1,
                rank: 1
            }
        ),
        "{e:?}"
    );
}

#[test]
fn quantize_refuses_integer_input() {
    let i = Tensor::from_slice(&[1i32, 2], &[2], &dev()).unwrap();
    let e = QTensor::quantize(&i, unit()).unwrap_err();
    assert!(e.to_string().starts_with("QTensor::quantize: "), "{e}");
}

#[test]
fn fully_connected_refuses_asymmetric_weights() {
    let x = q(&[1, 2], &[1, 2], 1.0, 0);
    let w = q(&[1, 2], &[1, 2], 1.0, 3);
    let e = quant::fully_connected(&x, &w, None, &unit(), Activation::None).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidQuantization {
                op: "quant::fully_connected",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("zero point 0"), "{e}");
}

#[test]
fn fully_connected_refuses_a_feature_count_mismatch() {
    let x = q(&[1, 2, 3], &[1, 3], 1.0, 0);
    let w = q(&[1, 2], &[1, 2], 1.0, 0);
    let e = quant::fully_connected(&x, &w, None, &unit(), Activation::None).unwrap_err();
    assert!(
        matches!(
            e,
            Error::ShapeMismatch {
                op: "quant::fully_connected",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn fully_connected_refuses_a_bias_that_is_not_i32_per_output() {
    let x = q(&[1, 2], &[1, 2], 1.0, 0);
    let w = q(&[1, 2], &[1, 2], 1.0, 0);
    let f32_bias = Tensor::zeros(&[1], kael_core::DType::F32, &dev()).unwrap();
    assert!(matches!(
        quant::fully_connected(&x, &w, Some(&f32_bias), &unit(), Activation::None).unwrap_err(),
        Error::DTypeMismatch {
            op: "quant::fully_connected",
            ..
        }
    ));
    let long_bias = Tensor::from_slice(&[1i32, 2], &[2], &dev()).unwrap();
    assert!(matches!(
        quant::fully_connected(&x, &w, Some(&long_bias), &unit(), Activation::None).unwrap_err(),
        Error::ShapeMismatch {
            op: "quant::fully_connected",
            ..
        }
    ));
}

#[test]
fn conv2d_refuses_a_filter_depth_that_does_not_divide_the_channels() {
    let x = q(&[0; 12], &[1, 2, 2, 3], 1.0, 0);
    let f = q(&[0; 8], &[1, 2, 2, 2], 1.0, 0);
    let e = quant::conv2d(
        &x,
        &f,
        None,
        &Conv2dOptions::default(),
        &unit(),
        Activation::None,
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::ShapeMismatch {
                op: "quant::conv2d",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn conv2d_refuses_zero_stride_and_overflowing_dilation() {
    let x = q(&[0; 4], &[1, 2, 2, 1], 1.0, 0);
    let f = q(&[0; 4], &[1, 2, 2, 1], 1.0, 0);
    let zero = Conv2dOptions {
        stride: [0, 1],
        ..Conv2dOptions::default()
    };
    assert!(matches!(
        quant::conv2d(&x, &f, None, &zero, &unit(), Activation::None).unwrap_err(),
        Error::InvalidArgument {
            op: "quant::conv2d",
            ..
        }
    ));
    let huge = Conv2dOptions {
        dilation: [usize::MAX, 1],
        padding: Padding::Same,
        ..Conv2dOptions::default()
    };
    assert!(matches!(
        quant::conv2d(&x, &f, None, &huge, &unit(), Activation::None).unwrap_err(),
        Error::InvalidArgument {
            op: "quant::conv2d",
            ..
        }
    ));
}

#[test]
fn conv2d_refuses_per_channel_activations() {
    let v = Tensor::from_slice(&[0i8; 4], &[1, 2, 2, 1], &dev()).unwrap();
    let x = QTensor::new(v, QuantParams::per_channel(&[1.0], &[0], 3).unwrap()).unwrap();
    let f = q(&[0; 4], &[1, 2, 2, 1], 1.0, 0);
    let e = quant::conv2d(
        &x,
        &f,
        None,
        &Conv2dOptions::default(),
        &unit(),
        Activation::None,
    )
    .unwrap_err();
    assert!(e.to_string().contains("per tensor"), "{e}");
}

#[test]
fn depthwise_refuses_weights_quantized_along_the_wrong_axis() {
    let x = q(&[0; 4], &[1, 2, 2, 1], 1.0, 0);
    let v = Tensor::from_slice(&[0i8; 4], &[1, 2, 2, 1], &dev()).unwrap();
    let f = QTensor::new(
        v,
        QuantParams::per_channel(&[1.0, 1.0], &[0, 0], 1).unwrap(),
    )
    .unwrap();
    let e = quant::depthwise_conv2d(
        &x,
        &f,
        None,
        &Conv2dOptions::default(),
        &unit(),
        Activation::None,
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                op: "quant::depthwise_conv2d",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn pool2d_refuses_a_non_nhwc_input() {
    let x = q(&[0; 4], &[2, 2], 1.0, 0);
    let e = quant::pool2d(
        &x,
        PoolKind::Max,
        [2, 2],
        &Conv2dOptions::default(),
        Activation::None,
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::RankMismatch {
                op: "quant::pool2d",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn add_refuses_shapes_that_do_not_broadcast_and_a_too_small_output_scale() {
    let a = q(&[1, 2], &[2], 1.0, 0);
    let b = q(&[1, 2, 3], &[3], 1.0, 0);
    let e = quant::add(&a, &b, &unit(), Activation::None).unwrap_err();
    assert!(
        matches!(
            e,
            Error::BroadcastMismatch {
                op: "quant::add",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("cannot be broadcast"), "{e}");
    let seven = q(&[1], &[1, 1, 1, 1, 1, 1, 1], 1.0, 0);
    assert!(matches!(
        quant::add(&seven, &a, &unit(), Activation::None).unwrap_err(),
        Error::RankMismatch {
            op: "quant::add",
            ..
        }
    ));
    let tiny = QuantParams::per_tensor(1e-9, 0).unwrap();
    let e = quant::add(&a, &a, &tiny, Activation::None).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidQuantization {
                op: "quant::add",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn relu_refuses_per_channel_params_and_absurd_scale_ratios() {
    let x = q(&[1, -2], &[2], 1.0, 0);
    let per_channel = QuantParams::per_channel(&[1.0, 2.0], &[0, 0], 0).unwrap();
    assert!(matches!(
        quant::relu(&x, Activation::Relu, &per_channel).unwrap_err(),
        Error::InvalidArgument {
            op: "quant::relu",
            ..
        }
    ));
    let tiny = QuantParams::per_tensor(1e-30, 0).unwrap();
    let e = quant::relu(&x, Activation::Relu6, &tiny).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidQuantization {
                op: "quant::relu",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn broadcasting_add_refuses_buffers_of_the_wrong_length() {
    let p = unit();
    let add = quant::Add::new(&p, &p, &p, Activation::None).unwrap();
    let shape = quant::Broadcast::new(&[2, 1], &[3]).unwrap();
    let mut out = [0i8; 6];
    assert!(
        add.run_broadcast(&[1], &[1, 2, 3], &shape, &mut out)
            .is_err()
    );
    assert!(
        add.run_broadcast(&[1, 2], &[1, 2], &shape, &mut out)
            .is_err()
    );
    assert!(
        add.run_broadcast(&[1, 2], &[1, 2, 3], &shape, &mut out[..5])
            .is_err()
    );
    assert_eq!(out, [0; 6], "a refused add writes nothing");
}

#[test]
fn slice_kernels_refuse_short_buffers() {
    let m = [quant::Multiplier::from_real(0.5)];
    let fc = quant::FullyConnected {
        input_zero_point: 0,
        filter: &[1, 2, 3, 4],
        bias: None,
        in_features: 2,
        out_features: 2,
        requant: quant::Requantize {
            multipliers: &m,
            zero_point: 0,
            min: -128,
            max: 127,
        },
        rounding: quant::Rounding::Once,
    };
    let mut out = [0i8; 1];
    assert!(matches!(
        fc.run(&[1, 2], &mut out).unwrap_err(),
        Error::ShapeMismatch {
            op: "quant::fully_connected",
            ..
        }
    ));
    let wrong_multipliers = quant::FullyConnected {
        requant: quant::Requantize {
            multipliers: &[m[0], m[0], m[0]],
            ..fc.requant
        },
        ..fc
    };
    let mut out2 = [0i8; 2];
    assert!(matches!(
        wrong_multipliers.run(&[1, 2], &mut out2).unwrap_err(),
        Error::InvalidQuantization { .. }
    ));
    assert_eq!(out2, [0, 0], "a refused layer writes nothing");
}

#[test]
fn empty_layers_are_refused_not_divided_by_zero() {
    let m = [quant::Multiplier::from_real(0.5)];
    let requant = quant::Requantize {
        multipliers: &m,
        zero_point: 0,
        min: -128,
        max: 127,
    };
    let fc = quant::FullyConnected {
        input_zero_point: 0,
        filter: &[],
        bias: None,
        in_features: 2,
        out_features: 0,
        requant,
        rounding: quant::Rounding::Once,
    };
    assert!(fc.run(&[1, 2], &mut []).is_err());
    let one = quant::Window::new("test", 1, 1, 1, 1, Padding::Valid).unwrap();
    let conv = quant::Conv2d {
        geometry: quant::Geometry {
            batch: 1,
            in_channels: 0,
            out_channels: 1,
            h: one,
            w: one,
        },
        input_zero_point: 0,
        filter: &[1],
        bias: None,
        requant,
    };
    assert!(conv.run(&[], &mut [0]).is_err());
}

#[test]
fn a_pooling_window_far_larger_than_its_input_only_visits_the_input() {
    // SAME padding with a billion-tap window: every output averages the
    // whole 4x1 input (the loops are clipped to the input, as TFLite's are).
    let x = q(&[1, 2, 3, 6], &[1, 4, 1, 1], 1.0, 0);
    let o = Conv2dOptions {
        padding: Padding::Same,
        ..Conv2dOptions::default()
    };
    let y = quant::pool2d(
        &x,
        PoolKind::Average,
        [1_000_000_000, 1],
        &o,
        Activation::None,
    )
    .unwrap();
    assert_eq!(y.values().to_vec::<i8>().unwrap(), vec![3, 3, 3, 3]);
}
