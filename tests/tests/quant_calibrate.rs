//! Post-training quantization: the int8 model from `QuantizedMlp::calibrate`
//! stays close to the f32 model it came from (the independent reference),
//! and each parameter follows TFLite's formulas (hand-derived cases).

use kael_core::nn::{Linear, Module};
use kael_core::quant::{
    Activation, QuantParams, QuantizedMlp, RangeObserver, quantize_bias, quantize_weights,
};
use kael_core::{DType, Device, Rng, Tensor};

#[test]
fn a_range_that_excludes_zero_is_widened_to_include_it() {
    let mut r = RangeObserver::new();
    r.observe_slice(&[2.0, 5.0]);
    assert_eq!(r.range(), (0.0, 5.0));
    let p = r.params().unwrap();
    assert_eq!((p.scale(0), p.zero_point(0)), (5.0 / 255.0, -128));
}

#[test]
fn an_all_zero_range_gets_scale_one() {
    let p = RangeObserver::new().params().unwrap();
    assert_eq!((p.scale(0), p.zero_point(0)), (1.0, 0));
}

#[test]
fn an_infinite_range_is_refused() {
    let mut r = RangeObserver::new();
    r.observe_slice(&[f32::INFINITY]);
    assert!(r.params().is_err());
}

#[test]
fn weights_land_within_half_a_step_and_each_channel_reaches_127() {
    let dev = Device::cpu();
    let w = Tensor::randn(&[8, 20], DType::F32, &dev, &mut Rng::new(3)).unwrap();
    let q = quantize_weights(&w).unwrap();
    let (wv, qv) = (
        w.to_vec::<f32>().unwrap(),
        q.values().to_vec::<i8>().unwrap(),
    );
    for c in 0..8 {
        let s = q.params().scale(c);
        assert_eq!(q.params().zero_point(c), 0);
        let row = c * 20..(c + 1) * 20;
        assert_eq!(
            qv[row.clone()].iter().map(|v| v.unsigned_abs()).max(),
            Some(127)
        );
        for i in row {
            assert!(
                (wv[i] - qv[i] as f32 * s).abs() <= s / 2.0 * 1.0001,
                "channel {c}: {} vs {}",
                wv[i],
                qv[i]
            );
        }
    }
}

#[test]
fn biases_are_quantized_at_input_scale_times_weight_scale() {
    let dev = Device::cpu();
    let b = Tensor::from_slice(&[0.3f32, -0.3], &[2], &dev).unwrap();
    let input = QuantParams::per_tensor(0.1, 5).unwrap();
    let weight = QuantParams::per_channel(&[0.01, 0.5], &[0, 0], 0).unwrap();
    // 0.3 / (0.1 * 0.01) = 300; -0.3 / (0.1 * 0.5) = -6
    assert_eq!(
        quantize_bias(&b, &input, &weight)
            .unwrap()
            .to_vec::<i32>()
            .unwrap(),
        vec![300, -6]
    );
}

#[test]
fn a_calibrated_mlp_tracks_its_f32_model_within_a_few_output_steps() {
    let dev = Device::cpu();
    let mut rng = Rng::new(11);
    let l1 = Linear::new(16, 32, true, &dev, &mut rng).unwrap();
    let l2 = Linear::new(32, 32, true, &dev, &mut rng).unwrap();
    let l3 = Linear::new(32, 4, true, &dev, &mut rng).unwrap();
    let layers = [
        (&l1, Activation::Relu),
        (&l2, Activation::Relu6),
        (&l3, Activation::None),
    ];
    let calib = Tensor::randn(&[512, 16], DType::F32, &dev, &mut rng).unwrap();
    let test = Tensor::randn(&[256, 16], DType::F32, &dev, &mut rng).unwrap();
    let q = QuantizedMlp::calibrate(&layers, &calib).unwrap();

    let f = l3
        .forward(
            &l2.forward(&l1.forward(&test).unwrap().relu().unwrap())
                .unwrap()
                .clamp(Some(0.0), Some(6.0))
                .unwrap(),
        )
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let g = q.forward(&test).unwrap().to_vec::<f32>().unwrap();
    let (lo, hi) = f
        .iter()
        .fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
    let max_err = f
        .iter()
        .zip(&g)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    let argmax = |v: &[f32]| {
        v.iter()
            .enumerate()
            .fold(0, |m, (i, &x)| if x > v[m] { i } else { m })
    };
    let agree = f
        .chunks(4)
        .zip(g.chunks(4))
        .filter(|(a, b)| argmax(a) == argmax(b))
        .count();
    let step = q.layers[2].output.scale(0);
    println!(
        "int8 vs f32 on 256 held-out inputs: max |error| {max_err:.4} = {:.1} output steps ({:.2}% of the output range {:.3}), argmax agrees on {agree}/256",
        max_err / step,
        100.0 * max_err / (hi - lo),
        hi - lo
    );
    // Three layers of rounding (weights, activations, requantization) add
    // up to a few steps of the output's quantization.
    assert!(
        max_err <= 8.0 * step,
        "max error {max_err} is {} output steps",
        max_err / step
    );
    assert!(agree >= 240, "argmax agrees on only {agree} of 256");
}

#[test]
fn calibration_on_an_integer_tensor_is_refused() {
    let dev = Device::cpu();
    let l = Linear::new(2, 2, true, &dev, &mut Rng::new(0)).unwrap();
    let x = Tensor::from_slice(&[1i32, 2], &[1, 2], &dev).unwrap();
    assert!(QuantizedMlp::calibrate(&[(&l, Activation::None)], &x).is_err());
}
