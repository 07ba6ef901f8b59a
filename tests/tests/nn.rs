//! nn layers, the Module trait and losses.
//!
//! Expected values come from numpy (float64, PyTorch semantics), computed by
//! the reference script quoted at the end of this file. Layer parameters and
//! inputs are `fill(shape, seed) = float32(0.5 * sin(0.7 * i + seed))` over
//! the row-major index `i`, the same in the script and here. Gradients are
//! of `L = sum(y * R)` with `R = fill(y.shape, 9)`; the script derives them
//! by central differences of its own numpy forward (independent of kael's
//! autograd), or analytically where that is one line (linear, embedding).

mod common;

use common::assert_close;
use kael_core::nn::{
    AvgPool2d, CausalSelfAttention, Conv1d, Conv2d, Dropout, Embedding, Gelu, GeluApproximation,
    LayerNorm, Linear, MaxPool2d, Module, Reduction, Relu, RmsNorm, Sequential, Sigmoid, Silu,
    Tanh, TransformerBlock, Visitor, cross_entropy, mse_loss, nll_loss,
};
use kael_core::{DType, Device, Error, Result, Rng, Tensor};

fn fill_vec(n: usize, seed: f64) -> Vec<f32> {
    (0..n)
        .map(|i| (0.5 * (0.7 * i as f64 + seed).sin()) as f32)
        .collect()
}

fn fill(shape: &[usize], seed: f64, dev: &Device) -> Result<Tensor> {
    Tensor::from_slice(&fill_vec(shape.iter().product(), seed), shape, dev)
}

/// `fill`, as a leaf that requires grad.
fn leaf(shape: &[usize], seed: f64, dev: &Device) -> Result<Tensor> {
    fill(shape, seed, dev)?.requires_grad_(true)
}

/// `L = sum(y * R)` with `R = fill(y.shape, 9)`.
fn weighted_sum(y: &Tensor) -> Result<Tensor> {
    y.mul(&fill(y.shape(), 9.0, &y.device())?)?.sum_all()
}

fn vals(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

fn grad(t: &Tensor) -> Vec<f32> {
    vals(&t.grad().expect("gradient"))
}

fn names(m: &dyn Module) -> Vec<String> {
    m.named_parameters().into_iter().map(|(n, _)| n).collect()
}

fn entry(name: &str, t: Tensor) -> (String, Tensor) {
    (name.to_string(), t)
}

// ------------------------------------------------------------------ linear

test_device!(linear_forward_and_gradients_match_numpy, |dev| {
    let lin = Linear::from_weights(leaf(&[2, 3], 2.0, dev)?, Some(leaf(&[2], 3.0, dev)?))?;
    let x = leaf(&[2, 3], 1.0, dev)?;
    let y = lin.forward(&x)?;
    assert_close(&vals(&y), &want::LINEAR_Y, 1e-6);
    weighted_sum(&y)?.backward()?;
    assert_close(&grad(&lin.weight), &want::LINEAR_DW, 1e-6);
    assert_close(&grad(lin.bias.as_ref().unwrap()), &want::LINEAR_DB, 1e-6);
    assert_close(&grad(&x), &want::LINEAR_DX, 1e-6);
    Ok(())
});

test_device!(linear_applies_to_the_last_dim_of_any_rank, |dev| {
    let lin = Linear::from_weights(fill(&[2, 3], 2.0, dev)?, Some(fill(&[2], 3.0, dev)?))?;
    let x = fill(&[2, 3], 1.0, dev)?;
    let y3 = lin.forward(&x.reshape(&[2, 1, 3])?)?;
    assert_eq!(y3.shape(), &[2, 1, 2]);
    assert_close(&vals(&y3), &want::LINEAR_Y, 1e-6);
    let y1 = lin.forward(&x.select(0, 1)?)?;
    assert_eq!(y1.shape(), &[2]);
    assert_close(&vals(&y1), &want::LINEAR_Y[2..], 1e-6);
    Ok(())
});

test_device!(linear_rejects_wrong_in_features, |dev| {
    let lin = Linear::new(3, 2, true, dev, &mut Rng::new(0))?;
    let err = lin
        .forward(&Tensor::zeros(&[4, 5], DType::F32, dev)?)
        .unwrap_err();
    assert!(
        matches!(err, Error::ShapeMismatch { op: "Linear", .. }),
        "{err}"
    );
    Ok(())
});

test_device!(linear_default_init_is_uniform_within_fan_in_bound, |dev| {
    // PyTorch: kaiming_uniform_(a=sqrt(5)) == U(-1/sqrt(in), 1/sqrt(in)); bias the same bound.
    let lin = Linear::new(400, 50, true, dev, &mut Rng::new(7))?;
    let bound = 1.0 / 20.0;
    let w = vals(&lin.weight);
    assert!(w.iter().all(|v| v.abs() <= bound));
    let mean = w.iter().sum::<f32>() / w.len() as f32;
    let var = w.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / w.len() as f32;
    assert!(mean.abs() < 2e-3, "{mean}");
    // the variance of U(-b, b) is b^2 / 3
    assert!((var / (bound * bound / 3.0) - 1.0).abs() < 0.05, "{var}");
    let b = vals(lin.bias.as_ref().unwrap());
    assert!(b.iter().all(|v| v.abs() <= bound) && b.iter().any(|v| v.abs() > bound / 2.0));
    assert!(lin.weight.requires_grad() && lin.weight.is_leaf());
    Ok(())
});

// --------------------------------------------------------------- embedding

test_device!(embedding_rows_and_accumulated_gradient_match_numpy, |dev| {
    let emb = Embedding::from_weights(leaf(&[5, 3], 2.0, dev)?)?;
    let ids = Tensor::from_slice(&[1i64, 3, 1, 0, 4, 1], &[2, 3], dev)?;
    let y = emb.forward(&ids)?;
    assert_eq!(y.shape(), &[2, 3, 3]);
    assert_close(&vals(&y), &want::EMBEDDING_Y, 1e-6);
    weighted_sum(&y)?.backward()?;
    // row 1 is picked three times: its gradient is the sum (np.add.at); row 2 never: 0
    assert_close(&grad(&emb.weight), &want::EMBEDDING_DW, 1e-6);
    Ok(())
});

test_device!(embedding_default_init_is_standard_normal, |dev| {
    let emb = Embedding::new(200, 100, dev, &mut Rng::new(3))?;
    let w = vals(&emb.weight);
    let mean = w.iter().sum::<f32>() / w.len() as f32;
    let var = w.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / w.len() as f32;
    assert!(
        mean.abs() < 0.02 && (var - 1.0).abs() < 0.03,
        "{mean} {var}"
    );
    Ok(())
});

test_device!(embedding_rejects_out_of_range_ids, |dev| {
    let emb = Embedding::new(4, 2, dev, &mut Rng::new(0))?;
    let err = emb
        .forward(&Tensor::from_slice(&[4i64], &[1], dev)?)
        .unwrap_err();
    assert!(matches!(err, Error::IndexOutOfRange { .. }), "{err}");
    Ok(())
});

// ------------------------------------------------------------------- norms

test_device!(layer_norm_forward_and_gradients_match_numpy, |dev| {
    let mut ln = LayerNorm::new(&[4], 1e-5, true, dev)?;
    ln.weight = Some(
        fill(&[4], 2.0, dev)?
            .add_scalar(1.0)?
            .requires_grad_(true)?,
    );
    ln.bias = Some(leaf(&[4], 3.0, dev)?);
    let x = fill(&[2, 4], 1.0, dev)?
        .mul_scalar(3.0)?
        .requires_grad_(true)?;
    let y = ln.forward(&x)?;
    assert_close(&vals(&y), &want::LAYERNORM_Y, 1e-5);
    weighted_sum(&y)?.backward()?;
    assert_close(&grad(&x), &want::LAYERNORM_DX, 1e-5);
    assert_close(
        &grad(ln.weight.as_ref().unwrap()),
        &want::LAYERNORM_DW,
        1e-5,
    );
    assert_close(&grad(ln.bias.as_ref().unwrap()), &want::LAYERNORM_DB, 1e-5);
    Ok(())
});

test_device!(layer_norm_defaults_are_ones_and_zeros, |dev| {
    let ln = LayerNorm::new(&[3], 1e-5, true, dev)?;
    assert_eq!(vals(ln.weight.as_ref().unwrap()), vec![1.0; 3]);
    assert_eq!(vals(ln.bias.as_ref().unwrap()), vec![0.0; 3]);
    assert_eq!(names(&ln), ["weight", "bias"]);
    assert!(
        LayerNorm::new(&[3], 1e-5, false, dev)?
            .parameters()
            .is_empty()
    );
    Ok(())
});

test_device!(layer_norm_rejects_wrong_trailing_shape, |dev| {
    let ln = LayerNorm::new(&[4], 1e-5, true, dev)?;
    let err = ln
        .forward(&Tensor::zeros(&[4, 3], DType::F32, dev)?)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::ShapeMismatch {
                op: "LayerNorm",
                ..
            }
        ),
        "{err}"
    );
    Ok(())
});

test_device!(rms_norm_forward_and_gradients_match_numpy, |dev| {
    let mut n = RmsNorm::new(&[4], Some(1e-6), true, dev)?;
    n.weight = Some(
        fill(&[4], 2.0, dev)?
            .add_scalar(1.0)?
            .requires_grad_(true)?,
    );
    let x = fill(&[2, 4], 1.0, dev)?
        .mul_scalar(3.0)?
        .requires_grad_(true)?;
    let y = n.forward(&x)?;
    assert_close(&vals(&y), &want::RMSNORM_Y, 1e-5);
    weighted_sum(&y)?.backward()?;
    assert_close(&grad(&x), &want::RMSNORM_DX, 1e-5);
    assert_close(&grad(n.weight.as_ref().unwrap()), &want::RMSNORM_DW, 1e-5);
    Ok(())
});

// ----------------------------------------------------------------- dropout

test_device!(dropout_zeroes_about_p_and_scales_the_rest, |dev| {
    let d = Dropout::new(0.3, &mut Rng::new(11))?;
    let x = Tensor::ones(&[20000], DType::F32, dev)?.requires_grad_(true)?;
    let y = d.forward(&x)?;
    let v = vals(&y);
    let zeros = v.iter().filter(|&&e| e == 0.0).count() as f64 / v.len() as f64;
    assert!((zeros - 0.3).abs() < 0.015, "{zeros}");
    let scale = 1.0f32 / 0.7;
    assert!(v.iter().all(|&e| e == 0.0 || (e - scale).abs() < 1e-6));
    // dy/dx is the same mask: with x = 1 the gradient equals y
    y.sum_all()?.backward()?;
    assert_eq!(grad(&x), v);
    Ok(())
});

test_device!(dropout_is_identity_in_eval_mode_and_for_p_zero, |dev| {
    let x = fill(&[8], 1.0, dev)?;
    let d = Dropout::new(0.5, &mut Rng::new(0))?;
    d.eval();
    assert!(!d.is_training());
    assert!(d.forward(&x)?.is_same(&x));
    assert!(
        Dropout::new(0.0, &mut Rng::new(0))?
            .forward(&x)?
            .is_same(&x)
    );
    Ok(())
});

test_device!(dropout_masks_repeat_for_the_same_seed, |dev| {
    let x = Tensor::ones(&[64], DType::F32, dev)?;
    let (a, b) = (
        Dropout::new(0.5, &mut Rng::new(5))?,
        Dropout::new(0.5, &mut Rng::new(5))?,
    );
    let (a1, b1) = (vals(&a.forward(&x)?), vals(&b.forward(&x)?));
    assert_eq!(a1, b1);
    assert_ne!(vals(&a.forward(&x)?), a1, "each forward draws a new mask");
    Ok(())
});

test_device!(dropout_with_p_one_gives_zeros_and_zero_gradient, |dev| {
    let x = fill(&[4], 1.0, dev)?.requires_grad_(true)?;
    let y = Dropout::new(1.0, &mut Rng::new(0))?.forward(&x)?;
    assert_eq!(vals(&y), vec![0.0; 4]);
    y.sum_all()?.backward()?;
    assert_eq!(grad(&x), vec![0.0; 4]);
    Ok(())
});

test_device!(dropout_rejects_p_outside_unit_interval, |_dev| {
    for p in [-0.1, 1.01, f64::NAN] {
        assert!(matches!(
            Dropout::new(p, &mut Rng::new(0)),
            Err(Error::InvalidArgument { op: "Dropout", .. })
        ));
    }
    Ok(())
});

// ------------------------------------------------------------ convolutions

test_device!(conv1d_forward_and_gradients_match_numpy, |dev| {
    // in 2, out 2, kernel 3, stride 2, padding 1, x [1, 2, 5] -> [1, 2, 3]
    let conv = Conv1d::from_weights(leaf(&[2, 2, 3], 2.0, dev)?, Some(leaf(&[2], 3.0, dev)?))?
        .with_stride(2)?
        .with_padding(1);
    let x = leaf(&[1, 2, 5], 1.0, dev)?;
    let y = conv.forward(&x)?;
    assert_eq!(y.shape(), &[1, 2, 3]);
    assert_close(&vals(&y), &want::CONV1D_Y, 1e-6);
    weighted_sum(&y)?.backward()?;
    assert_close(&grad(&conv.weight), &want::CONV1D_DW, 1e-6);
    assert_close(&grad(conv.bias.as_ref().unwrap()), &want::CONV1D_DB, 1e-6);
    assert_close(&grad(&x), &want::CONV1D_DX, 1e-6);
    Ok(())
});

test_device!(conv2d_forward_and_gradients_match_numpy, |dev| {
    // in 2, out 2, kernel [2, 3], stride [2, 1], padding [1, 1], x [1, 2, 3, 4] -> [1, 2, 2, 4]
    let conv = Conv2d::from_weights(leaf(&[2, 2, 2, 3], 2.0, dev)?, Some(leaf(&[2], 3.0, dev)?))?
        .with_stride([2, 1])?
        .with_padding([1, 1]);
    let x = leaf(&[1, 2, 3, 4], 1.0, dev)?;
    let y = conv.forward(&x)?;
    assert_eq!(y.shape(), &[1, 2, 2, 4]);
    assert_close(&vals(&y), &want::CONV2D_Y, 1e-6);
    weighted_sum(&y)?.backward()?;
    assert_close(&grad(&conv.weight), &want::CONV2D_DW, 1e-6);
    assert_close(&grad(conv.bias.as_ref().unwrap()), &want::CONV2D_DB, 1e-6);
    assert_close(&grad(&x), &want::CONV2D_DX, 1e-6);
    Ok(())
});

test_device!(conv2d_accepts_unbatched_input, |dev| {
    let conv = Conv2d::from_weights(fill(&[2, 2, 2, 3], 2.0, dev)?, Some(fill(&[2], 3.0, dev)?))?
        .with_stride([2, 1])?
        .with_padding([1, 1]);
    let y = conv.forward(&fill(&[1, 2, 3, 4], 1.0, dev)?.squeeze_dim(0)?)?;
    assert_eq!(y.shape(), &[2, 2, 4]);
    assert_close(&vals(&y), &want::CONV2D_Y, 1e-6);
    Ok(())
});

test_device!(
    conv_default_init_uses_channels_times_kernel_as_fan_in,
    |dev| {
        let conv = Conv2d::new(4, 8, [3, 3], dev, &mut Rng::new(2))?;
        let bound = 1.0 / 6.0; // 1 / sqrt(4 * 3 * 3)
        let w = vals(&conv.weight);
        assert!(w.iter().all(|v| v.abs() <= bound) && w.iter().any(|v| v.abs() > 0.9 * bound));
        assert!(
            vals(conv.bias.as_ref().unwrap())
                .iter()
                .all(|v| v.abs() <= bound)
        );
        Ok(())
    }
);

test_device!(conv_rejects_wrong_channel_count_and_small_input, |dev| {
    let conv = Conv2d::new(3, 2, [3, 3], dev, &mut Rng::new(0))?;
    let err = conv
        .forward(&Tensor::zeros(&[1, 2, 5, 5], DType::F32, dev)?)
        .unwrap_err();
    assert!(
        matches!(err, Error::ShapeMismatch { op: "Conv2d", .. }),
        "{err}"
    );
    let err = conv
        .forward(&Tensor::zeros(&[1, 3, 2, 5], DType::F32, dev)?)
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument { op: "Conv2d", .. }),
        "{err}"
    );
    Ok(())
});

// ----------------------------------------------------------------- pooling

test_device!(max_pool2d_forward_and_gradient_match_numpy, |dev| {
    let x = leaf(&[1, 2, 4, 4], 1.0, dev)?;
    let y = MaxPool2d::new([2, 2])?.forward(&x)?;
    assert_eq!(y.shape(), &[1, 2, 2, 2]);
    assert_close(&vals(&y), &want::POOL_MAX1_Y, 1e-6);
    weighted_sum(&y)?.backward()?;
    assert_close(&grad(&x), &want::POOL_MAX1_DX, 1e-6);
    Ok(())
});

test_device!(max_pool2d_with_padding_and_overlap_matches_numpy, |dev| {
    // kernel 3, stride 2, padding 1 (padding is -inf): windows overlap, and an
    // element that is the max of two windows gets both gradients
    let x = leaf(&[1, 2, 4, 4], 1.0, dev)?;
    let y = MaxPool2d::new([3, 3])?
        .with_stride([2, 2])?
        .with_padding([1, 1])?
        .forward(&x)?;
    assert_close(&vals(&y), &want::POOL_MAX2_Y, 1e-6);
    weighted_sum(&y)?.backward()?;
    assert_close(&grad(&x), &want::POOL_MAX2_DX, 1e-6);
    Ok(())
});

test_device!(avg_pool2d_forward_and_gradient_match_numpy, |dev| {
    let x = leaf(&[1, 2, 4, 4], 1.0, dev)?;
    let y = AvgPool2d::new([2, 2])?.with_stride([1, 1])?.forward(&x)?;
    assert_eq!(y.shape(), &[1, 2, 3, 3]);
    assert_close(&vals(&y), &want::POOL_AVG1_Y, 1e-6);
    weighted_sum(&y)?.backward()?;
    assert_close(&grad(&x), &want::POOL_AVG1_DX, 1e-6);
    Ok(())
});

test_device!(avg_pool2d_counts_padding_as_zeros, |dev| {
    // count_include_pad = True, PyTorch's default
    let x = leaf(&[1, 2, 4, 4], 1.0, dev)?;
    let y = AvgPool2d::new([3, 3])?
        .with_stride([2, 2])?
        .with_padding([1, 1])?
        .forward(&x)?;
    assert_close(&vals(&y), &want::POOL_AVG2_Y, 1e-6);
    weighted_sum(&y)?.backward()?;
    assert_close(&grad(&x), &want::POOL_AVG2_DX, 1e-6);
    Ok(())
});

test_device!(pooling_rejects_padding_above_half_the_kernel, |_dev| {
    assert!(MaxPool2d::new([2, 2])?.with_padding([2, 0]).is_err());
    assert!(AvgPool2d::new([0, 2]).is_err());
    Ok(())
});

// ------------------------------------------------------------- activations

test_device!(activations_match_numpy, |dev| {
    let x = Tensor::from_slice(&[-2.0f32, -0.5, 0.0, 0.7, 3.0], &[5], dev)?;
    let cases: [(&dyn Module, [f32; 5]); 6] = [
        (&Relu, want::ACT_RELU),
        (&Gelu::default(), want::ACT_GELU),
        (
            &Gelu {
                approximate: GeluApproximation::Tanh,
            },
            want::ACT_GELU_TANH,
        ),
        (&Silu, want::ACT_SILU),
        (&Tanh, want::ACT_TANH),
        (&Sigmoid, want::ACT_SIGMOID),
    ];
    for (m, want) in cases {
        assert_close(&vals(&m.forward(&x)?), &want, 1e-6);
    }
    Ok(())
});

// --------------------------------------------------------------- attention

fn attention_with_reference_weights(dev: &Device) -> Result<CausalSelfAttention> {
    let attn = CausalSelfAttention::new(4, 2, 0.0, dev, &mut Rng::new(0))?;
    attn.load_state_dict(&[
        entry("c_attn.weight", fill(&[12, 4], 2.0, dev)?),
        entry("c_attn.bias", fill(&[12], 3.0, dev)?),
        entry("c_proj.weight", fill(&[4, 4], 4.0, dev)?),
        entry("c_proj.bias", fill(&[4], 5.0, dev)?),
    ])?;
    Ok(attn)
}

test_device!(causal_self_attention_matches_numpy, |dev| {
    // numpy reference (see `attn` in the script): qkv = x Wa^T + ba; q, k, v =
    // the three C-wide thirds, each split into 2 heads of 2; softmax(q k^T / sqrt(2))
    // with -inf above the diagonal; heads merged; then x Wp^T + bp.
    let attn = attention_with_reference_weights(dev)?;
    let x = leaf(&[2, 3, 4], 1.0, dev)?;
    let y = attn.forward(&x)?;
    assert_eq!(y.shape(), &[2, 3, 4]);
    assert_close(&vals(&y), &want::ATTN_Y, 1e-5);
    weighted_sum(&y)?.backward()?;
    assert_close(&grad(&x), &want::ATTN_DX, 1e-5);
    assert_close(&grad(&attn.c_attn.weight), &want::ATTN_DWA, 1e-5);
    // the key bias gets no gradient: it shifts every score of a row equally
    assert_close(
        &grad(attn.c_attn.bias.as_ref().unwrap()),
        &want::ATTN_DBA,
        1e-5,
    );
    assert_close(&grad(&attn.c_proj.weight), &want::ATTN_DWP, 1e-5);
    assert_close(
        &grad(attn.c_proj.bias.as_ref().unwrap()),
        &want::ATTN_DBP,
        1e-5,
    );
    Ok(())
});

test_device!(causal_self_attention_ignores_later_positions, |dev| {
    let attn = attention_with_reference_weights(dev)?;
    let x = fill(&[1, 3, 4], 1.0, dev)?;
    let changed = Tensor::cat(&[&x.narrow(1, 0, 2)?, &fill(&[1, 1, 4], 7.0, dev)?], 1)?;
    let (a, b) = (attn.forward(&x)?, attn.forward(&changed)?);
    assert_eq!(vals(&a.narrow(1, 0, 2)?), vals(&b.narrow(1, 0, 2)?));
    assert_ne!(vals(&a.narrow(1, 2, 1)?), vals(&b.narrow(1, 2, 1)?));
    Ok(())
});

test_device!(
    causal_self_attention_rejects_heads_that_do_not_divide,
    |dev| {
        assert!(CausalSelfAttention::new(6, 4, 0.0, dev, &mut Rng::new(0)).is_err());
        let attn = CausalSelfAttention::new(4, 2, 0.0, dev, &mut Rng::new(0))?;
        assert!(matches!(
            attn.forward(&Tensor::zeros(&[3, 4], DType::F32, dev)?),
            Err(Error::RankMismatch { .. })
        ));
        Ok(())
    }
);

// ------------------------------------------------------------- transformer

const BLOCK_NAMES: [&str; 12] = [
    "ln_1.weight",
    "ln_1.bias",
    "attn.c_attn.weight",
    "attn.c_attn.bias",
    "attn.c_proj.weight",
    "attn.c_proj.bias",
    "ln_2.weight",
    "ln_2.bias",
    "mlp.c_fc.weight",
    "mlp.c_fc.bias",
    "mlp.c_proj.weight",
    "mlp.c_proj.bias",
];

test_device!(transformer_block_matches_numpy, |dev| {
    // x + attn(ln_1(x)), then + c_proj(gelu_tanh(c_fc(ln_2(.)))); parameter i of
    // BLOCK_NAMES is fill(shape, 10 + i) (+1 for the LayerNorm weights)
    let block = TransformerBlock::new(4, 2, 0.0, dev, &mut Rng::new(0))?;
    let shapes: [&[usize]; 12] = [
        &[4],
        &[4],
        &[12, 4],
        &[12],
        &[4, 4],
        &[4],
        &[4],
        &[4],
        &[16, 4],
        &[16],
        &[4, 16],
        &[4],
    ];
    let mut entries = Vec::new();
    for (i, (name, shape)) in BLOCK_NAMES.iter().zip(shapes).enumerate() {
        let mut t = fill(shape, 10.0 + i as f64, dev)?;
        if name.starts_with("ln_") && name.ends_with("weight") {
            t = t.add_scalar(1.0)?;
        }
        entries.push(entry(name, t));
    }
    block.load_state_dict(&entries)?;
    let x = leaf(&[1, 3, 4], 1.0, dev)?;
    let y = block.forward(&x)?;
    assert_close(&vals(&y), &want::BLOCK_Y, 1e-5);
    weighted_sum(&y)?.backward()?;
    assert_close(&grad(&x), &want::BLOCK_DX, 1e-5);
    assert_close(
        &grad(block.ln_1.weight.as_ref().unwrap()),
        &want::BLOCK_D_LN_1_WEIGHT,
        1e-5,
    );
    assert_close(
        &grad(block.mlp.c_fc.bias.as_ref().unwrap()),
        &want::BLOCK_D_MLP_C_FC_BIAS,
        1e-5,
    );
    Ok(())
});

test_device!(transformer_block_names_parameters_by_dotted_path, |dev| {
    let block = TransformerBlock::new(8, 2, 0.1, dev, &mut Rng::new(0))?;
    assert_eq!(names(&block), BLOCK_NAMES);
    assert_eq!(block.num_parameters(), 12 * 8 * 8 + 13 * 8);
    Ok(())
});

// ------------------------------------------------------------------ module

test_device!(sequential_chains_layers_and_names_them_by_index, |dev| {
    let mut rng = Rng::new(1);
    let l1 = Linear::from_weights(fill(&[2, 3], 2.0, dev)?, Some(fill(&[2], 3.0, dev)?))?;
    let s = Sequential::new()
        .push(l1)
        .push(Relu)
        .push(Linear::new(2, 1, false, dev, &mut rng)?);
    assert_eq!(names(&s), ["0.weight", "0.bias", "2.weight"]);
    let x = fill(&[2, 3], 1.0, dev)?;
    let w2 = vals(&s.named_parameters()[2].1);
    let h: Vec<f32> = want::LINEAR_Y.iter().map(|v: &f32| v.max(0.0)).collect();
    let want = [h[0] * w2[0] + h[1] * w2[1], h[2] * w2[0] + h[3] * w2[1]];
    assert_close(&vals(&s.forward(&x)?), &want, 1e-6);
    Ok(())
});

/// Two layers sharing one weight tensor (weight tying), registered as
/// `enc` and `dec`.
struct Tied {
    enc: Linear,
    dec: Linear,
}

impl Module for Tied {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.dec.forward(&self.enc.forward(x)?)
    }
    fn visit(&self, v: &mut dyn Visitor) {
        v.module("enc", &self.enc);
        v.module("dec", &self.dec);
    }
}

test_device!(a_parameter_registered_twice_is_listed_once, |dev| {
    let w = leaf(&[3, 3], 1.0, dev)?;
    let m = Tied {
        enc: Linear::from_weights(w.clone(), Some(leaf(&[3], 2.0, dev)?))?,
        dec: Linear::from_weights(w.clone(), None)?,
    };
    assert_eq!(names(&m), ["enc.weight", "enc.bias"]);
    assert_eq!(m.num_parameters(), 12);
    assert!(m.parameters()[0].is_same(&w));
    assert_eq!(m.state_dict().len(), 2);
    // both uses contribute to the one gradient
    m.forward(&fill(&[1, 3], 3.0, dev)?)?
        .sum_all()?
        .backward()?;
    assert!(w.grad().is_some());
    Ok(())
});

test_device!(parameters_are_identified_by_impl_not_by_storage, |dev| {
    // a detached handle shares storage but is another tensor: listed separately
    let w = leaf(&[3, 3], 1.0, dev)?;
    let m = Tied {
        enc: Linear::from_weights(w.clone(), None)?,
        dec: Linear::from_weights(w.detach()?, None)?,
    };
    assert_eq!(names(&m), ["enc.weight", "dec.weight"]);
    Ok(())
});

test_device!(train_and_eval_reach_nested_modules, |dev| {
    let block = TransformerBlock::new(4, 2, 0.5, dev, &mut Rng::new(0))?;
    assert!(block.attn.attn_dropout.is_training());
    block.eval();
    assert!(!block.attn.attn_dropout.is_training() && !block.mlp.dropout.is_training());
    // in eval mode dropout is off: two forwards agree
    let x = fill(&[1, 3, 4], 1.0, dev)?;
    assert_eq!(vals(&block.forward(&x)?), vals(&block.forward(&x)?));
    block.train(true);
    assert!(block.attn.resid_dropout.is_training());
    Ok(())
});

test_device!(load_state_dict_copies_values_into_the_same_tensors, |dev| {
    let a = Linear::new(3, 2, true, dev, &mut Rng::new(1))?;
    let b = Linear::new(3, 2, true, dev, &mut Rng::new(2))?;
    let held = b.weight.clone();
    assert_ne!(vals(&a.weight), vals(&b.weight));
    b.load_state_dict(&a.state_dict())?;
    assert_eq!(vals(&b.weight), vals(&a.weight));
    assert_eq!(
        vals(b.bias.as_ref().unwrap()),
        vals(a.bias.as_ref().unwrap())
    );
    assert!(b.weight.is_same(&held) && !b.weight.shares_storage(&a.weight));
    assert!(b.weight.requires_grad() && b.weight.is_leaf());
    Ok(())
});

test_device!(
    load_state_dict_refuses_mismatches_and_leaves_the_module_unchanged,
    |dev| {
        let m = Linear::new(3, 2, true, dev, &mut Rng::new(1))?;
        let before = (vals(&m.weight), vals(m.bias.as_ref().unwrap()));
        let w = Tensor::zeros(&[2, 3], DType::F32, dev)?;
        let missing = [entry("weight", w.clone())];
        let unexpected = [
            entry("weight", w.clone()),
            entry("bias", Tensor::zeros(&[2], DType::F32, dev)?),
            entry("scale", w.clone()),
        ];
        let wrong_shape = [
            entry("weight", w.clone()),
            entry("bias", Tensor::zeros(&[3], DType::F32, dev)?),
        ];
        let wrong_dtype = [
            entry("weight", w.clone()),
            entry("bias", Tensor::zeros(&[2], DType::F64, dev)?),
        ];
        assert_eq!(m.compare_state_dict(&missing).missing, ["bias"]);
        assert_eq!(m.compare_state_dict(&unexpected).unexpected, ["scale"]);
        assert_eq!(m.compare_state_dict(&wrong_shape).mismatched, ["bias"]);
        assert_eq!(m.compare_state_dict(&wrong_dtype).mismatched, ["bias"]);
        for bad in [&missing[..], &unexpected, &wrong_shape, &wrong_dtype] {
            let err = m.load_state_dict(bad).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::StateDictKeys {
                        op: "load_state_dict",
                        ..
                    }
                ),
                "{err}"
            );
            assert_eq!((vals(&m.weight), vals(m.bias.as_ref().unwrap())), before);
        }
        Ok(())
    }
);

test_device!(module_zero_grad_clears_every_parameter, |dev| {
    let m = Linear::new(3, 2, true, dev, &mut Rng::new(1))?;
    m.forward(&fill(&[1, 3], 1.0, dev)?)?
        .sum_all()?
        .backward()?;
    assert!(m.parameters().iter().all(|p| p.grad().is_some()));
    m.zero_grad();
    assert!(m.parameters().iter().all(|p| p.grad().is_none()));
    Ok(())
});

// ------------------------------------------------------------------ losses

fn ce_inputs(dev: &Device) -> Result<(Tensor, Tensor)> {
    let logits = fill(&[3, 4], 1.0, dev)?
        .mul_scalar(4.0)?
        .requires_grad_(true)?;
    let targets = Tensor::from_slice(&[2i64, -100, 0], &[3], dev)?;
    Ok((logits, targets))
}

test_device!(cross_entropy_with_ignore_index_matches_numpy, |dev| {
    // log_softmax per row, pick the target; row 1 (target -100) is ignored:
    // mean over the 2 remaining rows
    let (logits, t) = ce_inputs(dev)?;
    let l = cross_entropy(&logits, &t, Reduction::Mean, Some(-100))?;
    assert_close(&[l.item::<f32>()?], &want::LOSS_CE_MEAN, 1e-6);
    l.backward()?;
    // softmax - onehot, divided by 2; the ignored row gets 0
    assert_close(&grad(&logits), &want::LOSS_CE_MEAN_DZ, 1e-6);
    Ok(())
});

test_device!(cross_entropy_sum_and_none_reductions_match_numpy, |dev| {
    let (logits, t) = ce_inputs(dev)?;
    let none = cross_entropy(&logits, &t, Reduction::None, Some(-100))?;
    assert_eq!(none.shape(), &[3]);
    assert_close(&vals(&none), &want::LOSS_CE_NONE, 1e-6);
    let sum = cross_entropy(&logits, &t, Reduction::Sum, Some(-100))?;
    assert_close(&[sum.item::<f32>()?], &want::LOSS_CE_SUM, 1e-6);
    Ok(())
});

test_device!(cross_entropy_without_ignore_index_matches_numpy, |dev| {
    let (logits, _) = ce_inputs(dev)?;
    let t = Tensor::from_slice(&[2i64, 1, 0], &[3], dev)?;
    let l = cross_entropy(&logits, &t, Reduction::Mean, None)?;
    assert_close(&[l.item::<f32>()?], &want::LOSS_CE_MEAN_NOIGNORE, 1e-6);
    Ok(())
});

test_device!(
    cross_entropy_takes_classes_on_dim_one_for_higher_ranks,
    |dev| {
        // logits [N=2, C=3, d=2], targets [2, 2]
        let logits = fill(&[2, 3, 2], 2.0, dev)?.mul_scalar(3.0)?;
        let t = Tensor::from_slice(&[0i64, 2, 1, 1], &[2, 2], dev)?;
        let l = cross_entropy(&logits, &t, Reduction::None, None)?;
        assert_eq!(l.shape(), &[2, 2]);
        assert_close(&vals(&l), &want::LOSS_CE_NCD_NONE, 1e-6);
        Ok(())
    }
);

test_device!(cross_entropy_is_stable_for_huge_logits, |dev| {
    // log-sum-exp: loss of [1e4, 0] for class 1 is exactly 1e4 (exp(1e4) overflows)
    let logits = Tensor::from_slice(&[1e4f32, 0.0, -1e4, 1e4], &[2, 2], dev)?;
    let t = Tensor::from_slice(&[1i64, 1], &[2], dev)?;
    let l = cross_entropy(&logits, &t, Reduction::None, None)?;
    assert_eq!(vals(&l), vec![1e4, 0.0]);
    Ok(())
});

test_device!(cross_entropy_mean_of_only_ignored_targets_is_nan, |dev| {
    // PyTorch: 0 / 0
    let logits = fill(&[2, 3], 1.0, dev)?;
    let t = Tensor::from_slice(&[-1i64, -1], &[2], dev)?;
    let l = cross_entropy(&logits, &t, Reduction::Mean, Some(-1))?;
    assert!(l.item::<f32>()?.is_nan());
    Ok(())
});

test_device!(cross_entropy_rejects_bad_targets, |dev| {
    let logits = fill(&[2, 3], 1.0, dev)?;
    // float targets are class probabilities (PyTorch): of the logits' shape
    let float_t = Tensor::from_slice(&[0.0f32, 1.0], &[2], dev)?;
    assert!(matches!(
        cross_entropy(&logits, &float_t, Reduction::Mean, None),
        Err(Error::ShapeMismatch { .. })
    ));
    let out_of_range = Tensor::from_slice(&[0i64, 3], &[2], dev)?;
    assert!(matches!(
        cross_entropy(&logits, &out_of_range, Reduction::Mean, None),
        Err(Error::IndexOutOfRange { .. })
    ));
    let wrong_shape = Tensor::from_slice(&[0i64, 1, 2], &[3], dev)?;
    assert!(matches!(
        cross_entropy(&logits, &wrong_shape, Reduction::Mean, None),
        Err(Error::ShapeMismatch { .. })
    ));
    Ok(())
});

test_device!(nll_loss_is_the_negated_picked_log_probability, |dev| {
    let lp = Tensor::from_slice(&[-0.5f32, -1.0, -2.0, -0.25], &[2, 2], dev)?;
    let t = Tensor::from_slice(&[1i32, 1], &[2], dev)?;
    assert_eq!(
        nll_loss(&lp, &t, Reduction::Mean, None)?.item::<f32>()?,
        0.625
    );
    assert_eq!(
        nll_loss(&lp, &t, Reduction::Sum, Some(0))?.item::<f32>()?,
        1.25
    );
    assert_eq!(
        vals(&nll_loss(&lp, &t, Reduction::None, Some(1))?),
        vec![0.0, 0.0]
    );
    Ok(())
});

test_device!(mse_loss_and_gradient_match_numpy, |dev| {
    let a = leaf(&[2, 3], 1.0, dev)?;
    let b = fill(&[2, 3], 2.0, dev)?;
    let mean = mse_loss(&a, &b, Reduction::Mean)?;
    assert_close(&[mean.item::<f32>()?], &want::LOSS_MSE_MEAN, 1e-6);
    assert_close(
        &[mse_loss(&a, &b, Reduction::Sum)?.item::<f32>()?],
        &want::LOSS_MSE_SUM,
        1e-6,
    );
    mean.backward()?;
    assert_close(&grad(&a), &want::LOSS_MSE_MEAN_DA, 1e-6);
    assert!(mse_loss(&a, &b.reshape(&[3, 2])?, Reduction::Mean).is_err());
    Ok(())
});

/// Expected values, from the reference script below.
#[rustfmt::skip]
mod want {
    pub const LINEAR_Y: [f32; 4] = [0.3246491, -0.8031641, 0.07708815, 0.051375333];
    pub const LINEAR_DW: [f32; 6] = [0.07809104, 0.2287989, 0.27189904, -0.067508206, 0.08475736, 0.19716021];
    pub const LINEAR_DB: [f32; 2] = [-0.20785397, -0.6331566];
    pub const LINEAR_DX: [f32; 6] = [0.14927845, 0.11171237, 0.02160621, 0.015269803, 0.15923545, 0.22831015];
    pub const EMBEDDING_Y: [f32; 18] = [-0.40913856, -0.4980823, -0.35277015, 0.45108593, 0.20605925, -0.1358803, -0.40913856, -0.4980823, -0.35277015, 0.4546487, 0.21368994, -0.12777056, -0.41391322, -0.4972763, -0.34676254, -0.40913856, -0.4980823, -0.35277015];
    pub const EMBEDDING_DW: [f32; 15] = [0.1983703, -0.14395165, -0.41857088, 0.80486596, 0.83803374, 0.47706112, 0.0, 0.0, 0.0, -0.4972763, -0.34676254, -0.033160947, -0.4963297, -0.34065688, -0.02476782];
    pub const LAYERNORM_Y: [f32; 8] = [0.8904479, 0.9229871, -0.38438907, -1.4361688, 0.6837889, -1.6275649, -1.1085461, 0.3800155];
    pub const LAYERNORM_DX: [f32; 8] = [0.67406666, -0.26887408, -0.44758466, 0.04239209, -1.4369462, -0.070435494, 0.75451046, 0.75287116];
    pub const LAYERNORM_DW: [f32; 4] = [-0.03004115, -0.09576272, -0.2581344, 1.5124418];
    pub const LAYERNORM_DB: [f32; 4] = [-0.14070329, -0.16904125, -0.11787647, -0.01127255];
    pub const RMSNORM_Y: [f32; 8] = [1.6697952, 1.6418694, 0.80370814, 0.03351529, -1.1866616, -1.5818164, -1.027385, -0.2945318];
    pub const RMSNORM_DX: [f32; 8] = [0.33219665, -0.079747215, -0.28049344, -0.26426837, -0.44533056, -0.03094945, 0.2338707, 0.2570871];
    pub const RMSNORM_DW: [f32; 4] = [0.5194151, -0.14059867, -0.7300936, -0.27046937];
    pub const CONV1D_Y: [f32; 6] = [0.4963876, 0.58439016, -0.26088715, 0.05603746, -0.4367204, -0.1963764];
    pub const CONV1D_DW: [f32; 12] = [-0.075979255, 0.1674334, 0.099345855, -0.004453495, -0.25131682, -0.11218817, -0.17262553, -0.31618956, -0.25377503, 0.14800899, 0.29377386, 0.16564511];
    pub const CONV1D_DB: [f32; 2] = [-0.34373426, -0.87719977];
    pub const CONV1D_DX: [f32; 10] = [-0.09978941, -0.31436172, -0.12932688, -0.33726507, -0.098039895, -0.20510285, -0.10594732, -0.0037740506, 0.24944215, 0.19932973];
    pub const CONV2D_Y: [f32; 16] = [-0.26889578, -0.459854, -0.49042392, -0.3894151, -0.06605848, -0.11302958, -0.4003363, -0.65817463, 0.20093043, 0.34907016, 0.35209128, 0.15258926, 0.0876339, 0.4801888, 0.92706835, 0.76042885];
    pub const CONV2D_DW: [f32; 24] = [-0.34922868, -0.099327646, 0.1287929, -0.06921652, 0.10862236, -0.018047795, 0.26318976, 0.42363974, 0.07503714, 0.20691292, 0.019241113, 0.04696452, -0.017419312, 0.27268413, 0.39769614, -0.043101206, 0.095218666, -0.10193812, 0.1870254, 0.17186436, -0.23982742, 0.045282107, -0.106437765, -0.055211723];
    pub const CONV2D_DB: [f32; 2] = [-0.43889356, -0.47574112];
    pub const CONV2D_DX: [f32; 24] = [0.0788268, 0.4452703, 0.52522624, 0.19982736, 0.29863915, 0.52357346, 0.29358107, -0.07594243, 0.050648384, -0.3235194, -0.5175282, -0.26890904, -0.32392102, -0.4333207, -0.112068675, 0.21056154, -0.3497784, -0.19691844, 0.22896312, 0.34745777, 0.30252016, 0.52234644, 0.28634593, -0.08191638];
    pub const POOL_MAX1_Y: [f32; 8] = [0.4958324, 0.3377316, 0.4252183, 0.49467912, 0.32514393, 0.49338597, 0.49195334, 0.43382204];
    pub const POOL_MAX1_DX: [f32; 32] = [0.0, 0.20605925, -0.1358803, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.41391322, -0.4972763, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.033160947, -0.34676254, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.48600376, 0.29603675, 0.0, 0.0, 0.0];
    pub const POOL_MAX2_Y: [f32; 8] = [0.4958324, 0.4958324, 0.4252183, 0.49467912, 0.32514393, 0.49338597, 0.49195334, 0.43382204];
    pub const POOL_MAX2_DX: [f32; 32] = [0.0, 0.07017894, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.41391322, -0.4972763, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.033160947, -0.34676254, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.48600376, 0.29603675, 0.0, 0.0, 0.0];
    pub const POOL_AVG1_Y: [f32; 18] = [0.030468471, -0.024232097, -0.06753594, -0.053426255, -0.002648741, 0.049374517, 0.070210345, 0.029223502, -0.025507614, 0.07843703, 0.06956159, 0.027970254, -0.068928964, -0.078663655, -0.05140159, 0.051455814, 0.0786757, 0.06889317];
    pub const POOL_AVG1_DX: [f32; 32] = [0.05151481, 0.017544735, -0.13744839, -0.103478305, -0.072804265, -0.19346498, -0.23242925, -0.11176854, -0.05030989, -0.015499584, 0.13836896, 0.10355866, 0.07400919, 0.19551012, 0.23334983, 0.1118489, 0.049592573, 0.01360466, -0.14063063, -0.10464272, -0.074489854, -0.19564198, -0.2319868, -0.11083467, -0.04838994, -0.011576593, 0.14151607, 0.10470273, 0.07569248, 0.19767006, 0.23287226, 0.11089469];
    pub const POOL_AVG2_Y: [f32; 8] = [0.013541543, -0.02923071, -0.057094734, -0.12297536, 0.0348609, 0.031066649, 0.059438754, -0.042673398];
    pub const POOL_AVG2_DX: [f32; 32] = [0.022895472, 0.0077976603, -0.015097812, -0.015097812, -0.023094885, -0.09344562, -0.07035074, -0.07035074, -0.04599036, -0.10124328, -0.055252925, -0.055252925, -0.04599036, -0.10124328, -0.055252925, -0.055252925, -0.038529173, -0.04221372, -0.0036845496, -0.0036845496, -0.0056361984, 0.044679668, 0.050315868, 0.050315868, 0.032892972, 0.08689339, 0.05400042, 0.05400042, 0.032892972, 0.08689339, 0.05400042, 0.05400042];
    pub const ACT_RELU: [f32; 5] = [0.0, 0.0, 0.0, 0.7, 3.0];
    pub const ACT_GELU: [f32; 5] = [-0.045500264, -0.15426877, 0.0, 0.53062546, 2.9959502];
    pub const ACT_GELU_TANH: [f32; 5] = [-0.045402307, -0.154286, 0.0, 0.53057015, 2.9963627];
    pub const ACT_SILU: [f32; 5] = [-0.23840584, -0.18877034, 0.0, 0.46773145, 2.8577223];
    pub const ACT_TANH: [f32; 5] = [-0.9640276, -0.46211717, 0.0, 0.6043678, 0.9950548];
    pub const ACT_SIGMOID: [f32; 5] = [0.11920292, 0.37754068, 0.5, 0.6681878, 0.95257413];
    pub const ATTN_Y: [f32; 24] = [-0.49616137, -0.36454433, 0.24306925, 0.10545081, -0.50639135, -0.3997691, 0.31967834, -0.0036900113, -0.51226515, -0.38183257, 0.2917518, 0.030999497, -0.44199932, -0.44661415, 0.34356323, -0.0018547464, -0.5080274, -0.40355292, 0.32844478, -0.0164261, -0.4854646, -0.41895458, 0.33490562, -0.013199495];
    pub const ATTN_DX: [f32; 24] = [-0.019605003, -0.02040426, -0.0116070695, 0.0026491056, 0.013361811, 0.012471684, 0.005715929, -0.0037281169, -0.012479278, -0.01271352, -0.0069683935, 0.002054077, 0.004684712, 0.010637282, 0.011586971, 0.0070871254, -0.0042631845, -0.008091089, -0.008113627, -0.0043202, 0.0021413595, 0.005668753, 0.0065300423, 0.0043201507];
    pub const ATTN_DWA: [f32; 48] = [-0.0046748715, -0.0072309086, -0.006386136, -0.002537864, 0.0044870656, 0.0063342177, 0.005202288, 0.001623641, 0.0027134295, -0.0015690053, -0.0051135123, -0.0062530544, -0.002665845, 0.0015855408, 0.0050912215, 0.0062024216, 0.00018452418, -0.00093286624, -0.0016115152, -0.001532243, 0.0015398468, 0.0025323357, 0.0023338275, 0.0010376837, 0.0001850945, 0.0016632042, 0.0023590832, 0.0019454483, -0.000422729, 0.0019400263, 0.0033903571, 0.00324615, -0.0124817565, -0.0516251, -0.066488355, -0.050081093, -0.05590399, -0.14877649, -0.17167708, -0.11383525, -0.08372347, -0.2022667, -0.22568072, -0.14295357, -0.06416378, -0.13702807, -0.14544593, -0.08545828];
    pub const ATTN_DBA: [f32; 12] = [0.0055642226, -0.0053696665, -0.0044378825, 0.003805109, 0.0, 0.0, 0.0, 0.0, 0.019538078, -0.017748747, -0.04668807, -0.05366926];
    pub const ATTN_DWP: [f32; 16] = [0.20045236, -0.114022106, -0.01601739, 0.28671646, 0.03150538, -0.15429738, 0.19930862, 0.15389627, -0.15225907, -0.122004196, 0.32089666, -0.05130376, -0.26441368, -0.032330528, 0.291562, -0.23237483];
    pub const ATTN_DBP: [f32; 4] = [-0.12483734, -0.36299187, -0.4304256, -0.29542348];
    pub const BLOCK_Y: [f32; 12] = [2.071072, 1.2295195, -0.18325667, -2.3681965, 1.1551756, 0.3012196, -0.93248695, -2.6258926, 1.477508, 1.2796216, 0.085638225, -2.1238797];
    pub const BLOCK_DX: [f32; 12] = [0.3631409, -0.08587695, -0.639247, -0.47902754, -0.30941585, -0.31345716, 0.51146084, 0.5135292, 0.61214453, 0.27929786, -0.3529369, -0.45526215];
    pub const BLOCK_D_LN_1_WEIGHT: [f32; 4] = [0.010103639, -0.02474338, 0.000104188766, 0.05093866];
    pub const BLOCK_D_MLP_C_FC_BIAS: [f32; 16] = [0.0685712, 0.41195092, 0.2514339, 0.07233103, -0.12146097, -0.058814604, -0.15869217, 0.009402745, 0.047874734, 0.06938036, 0.41705528, 0.2426042, 0.06743262, -0.118870206, -0.06432637, -0.15086849];
    pub const LOSS_CE_MEAN: [f32; 1] = [1.9014429];
    pub const LOSS_CE_MEAN_DZ: [f32; 12] = [0.15291458, 0.20649315, -0.39028743, 0.030879697, 0.0, 0.0, 0.0, 0.0, -0.44917104, 0.14934468, 0.19717667, 0.10264969];
    pub const LOSS_CE_NONE: [f32; 3] = [1.5167441, 0.0, 2.2861419];
    pub const LOSS_CE_SUM: [f32; 1] = [3.8028858];
    pub const LOSS_CE_MEAN_NOIGNORE: [f32; 1] = [1.944963];
    pub const LOSS_CE_NCD_NONE: [f32; 4] = [0.20833318, 1.9899237, 0.4953866, 0.580661];
    pub const LOSS_MSE_MEAN: [f32; 1] = [0.089617185];
    pub const LOSS_MSE_SUM: [f32; 1] = [0.5377031];
    pub const LOSS_MSE_MEAN_DA: [f32; 6] = [-0.011304408, 0.094047494, 0.15516739, 0.14330962, 0.06405112, -0.04533164];
}

// ------------------------------------------------------------------ reference
//
// The numpy script that produced the expected values above (run as
// `python3 nn_reference.py nn.rs.tmpl nn.rs` on a template of this file whose
// literals are `@@case.name@@` placeholders):
//
// # Reference values for tests/tests/nn.rs (numpy, float64, PyTorch semantics).
// # Usage: python3 nn_reference.py nn.rs.tmpl nn.rs
// # Parameters are fill(shape, seed) = float32(0.5*sin(0.7*i + seed)); gradients are of
// # L = sum(y * fill(y.shape, 9)), by central differences (numgrad) unless one line of algebra.
// import numpy as np, math, sys
//
// def fill(shape, seed):
//     n = int(np.prod(shape))
//     return np.array([np.float32(0.5*math.sin(0.7*i + seed)) for i in range(n)], dtype=np.float64).reshape(shape)
//
// def lit(a):
//     def one(v):  # the shortest literal that round-trips the f32 value
//         t = str(np.float32(v))
//         return t if any(c in t for c in ".en") else t + ".0"
//     return "[" + ", ".join(one(v) for v in np.asarray(a, dtype=np.float64).ravel()) + "]"
//
// VALS = {}
// def out(name, a):
//     VALS[CUR + "." + name] = lit(a)
//
// def numgrad(f, arrs, k, h=1e-6):
//     g = np.zeros_like(arrs[k])
//     it = np.nditer(arrs[k], flags=['multi_index'])
//     for _ in it:
//         i = it.multi_index
//         old = arrs[k][i]
//         arrs[k][i] = old + h; lp = f(*arrs)
//         arrs[k][i] = old - h; lm = f(*arrs)
//         arrs[k][i] = old
//         g[i] = (lp - lm) / (2*h)
//     return g
//
// def softmax(z, ax=-1):
//     z = z - z.max(axis=ax, keepdims=True); e = np.exp(z); return e / e.sum(axis=ax, keepdims=True)
//
// def gelu_tanh(x): return 0.5*x*(1+np.tanh(math.sqrt(2/math.pi)*(x+0.044715*x**3)))
// def gelu(x):
//     from math import erf
//     return np.vectorize(lambda v: 0.5*v*(1+erf(v/math.sqrt(2))))(x)
//
//
// def case_linear():
//     x = fill([2,3], 1); W = fill([2,3], 2); b = fill([2], 3); R = fill([2,2], 9)
//     y = x@W.T + b
//     out("y", y); out("dW", R.T@x); out("db", R.sum(0)); out("dx", R@W)
//
//
// def case_embedding():
//     W = fill([5,3], 2); ids = np.array([[1,3,1],[0,4,1]]); R = fill([2,3,3], 9)
//     y = W[ids]; dW = np.zeros_like(W); np.add.at(dW, ids.ravel(), R.reshape(-1,3))
//     out("y", y); out("dW", dW)
//
// def layernorm(x, w, b, eps):
//     mu = x.mean(-1, keepdims=True); var = ((x-mu)**2).mean(-1, keepdims=True)
//     return (x-mu)/np.sqrt(var+eps)*w + b
//
// def case_layernorm():
//     x = fill([2,4], 1)*3; w = fill([4], 2) + 1; b = fill([4], 3); R = fill([2,4], 9)
//     f = lambda x, w, b: (layernorm(x, w, b, 1e-5)*R).sum()
//     out("y", layernorm(x, w, b, 1e-5))
//     A = [x, w, b]
//     out("dx", numgrad(f, A, 0)); out("dw", numgrad(f, A, 1)); out("db", numgrad(f, A, 2))
//
// def rmsnorm(x, w, eps):
//     return x/np.sqrt((x**2).mean(-1, keepdims=True)+eps)*w
//
// def case_rmsnorm():
//     x = fill([2,4], 1)*3; w = fill([4], 2) + 1; R = fill([2,4], 9)
//     f = lambda x, w: (rmsnorm(x, w, 1e-6)*R).sum()
//     out("y", rmsnorm(x, w, 1e-6)); A = [x, w]
//     out("dx", numgrad(f, A, 0)); out("dw", numgrad(f, A, 1))
//
// def conv1d(x, W, b, stride, pad):
//     N, C, L = x.shape; O, _, K = W.shape
//     xp = np.pad(x, ((0,0),(0,0),(pad,pad)))
//     ol = (L + 2*pad - K)//stride + 1
//     y = np.zeros((N, O, ol))
//     for n in range(N):
//         for o in range(O):
//             for i in range(ol):
//                 y[n,o,i] = (xp[n,:,i*stride:i*stride+K]*W[o]).sum() + b[o]
//     return y
//
// def case_conv1d():
//     x = fill([1,2,5], 1); W = fill([2,2,3], 2); b = fill([2], 3)
//     y = conv1d(x, W, b, 2, 1); R = fill(y.shape, 9)
//     f = lambda x, W, b: (conv1d(x, W, b, 2, 1)*R).sum(); A = [x, W, b]
//     out("y", y); out("dW", numgrad(f, A, 1)); out("db", numgrad(f, A, 2)); out("dx", numgrad(f, A, 0))
//
// def conv2d(x, W, b, s, p):
//     N, C, H, Wd = x.shape; O, _, KH, KW = W.shape
//     xp = np.pad(x, ((0,0),(0,0),(p[0],p[0]),(p[1],p[1])))
//     oh = (H+2*p[0]-KH)//s[0]+1; ow = (Wd+2*p[1]-KW)//s[1]+1
//     y = np.zeros((N,O,oh,ow))
//     for n in range(N):
//         for o in range(O):
//             for i in range(oh):
//                 for j in range(ow):
//                     y[n,o,i,j] = (xp[n,:,i*s[0]:i*s[0]+KH, j*s[1]:j*s[1]+KW]*W[o]).sum() + b[o]
//     return y
//
// def case_conv2d():
//     x = fill([1,2,3,4], 1); W = fill([2,2,2,3], 2); b = fill([2], 3)
//     y = conv2d(x, W, b, (2,1), (1,1)); R = fill(y.shape, 9)
//     f = lambda x, W, b: (conv2d(x, W, b, (2,1), (1,1))*R).sum(); A = [x, W, b]
//     out("shape", y.shape); out("y", y); out("dW", numgrad(f, A, 1)); out("db", numgrad(f, A, 2)); out("dx", numgrad(f, A, 0))
//
// def pool(x, k, s, p, kind):
//     N, C, H, W = x.shape
//     fillv = -np.inf if kind == "max" else 0.0
//     xp = np.pad(x, ((0,0),(0,0),(p[0],p[0]),(p[1],p[1])), constant_values=fillv)
//     oh = (H+2*p[0]-k[0])//s[0]+1; ow = (W+2*p[1]-k[1])//s[1]+1
//     y = np.zeros((N,C,oh,ow))
//     for n in range(N):
//         for c in range(C):
//             for i in range(oh):
//                 for j in range(ow):
//                     win = xp[n,c,i*s[0]:i*s[0]+k[0], j*s[1]:j*s[1]+k[1]]
//                     y[n,c,i,j] = win.max() if kind == "max" else win.mean()
//     return y
//
// def case_pool():
//     x = fill([1,2,4,4], 1)
//     for tag, kind, k, s, p in [("max1", "max", (2,2), (2,2), (0,0)), ("max2", "max", (3,3), (2,2), (1,1)),
//                                ("avg1", "avg", (2,2), (1,1), (0,0)), ("avg2", "avg", (3,3), (2,2), (1,1))]:
//         y = pool(x, k, s, p, kind); R = fill(y.shape, 9)
//         f = lambda x: (pool(x, k, s, p, kind)*R).sum()
//         out(tag + ".y", y); out(tag + ".dx", numgrad(f, [x.copy()], 0))
//
//
// def case_act():
//     x = np.array([-2.0, -0.5, 0.0, 0.7, 3.0])
//     out("relu", np.maximum(x, 0)); out("gelu", gelu(x)); out("gelu_tanh", gelu_tanh(x))
//     out("silu", x/(1+np.exp(-x))); out("tanh", np.tanh(x)); out("sigmoid", 1/(1+np.exp(-x)))
//
// def attn(x, Wa, ba, Wp, bp, H):
//     B, T, C = x.shape; hd = C//H
//     qkv = x@Wa.T + ba
//     q, k, v = (qkv[..., i*C:(i+1)*C].reshape(B,T,H,hd).transpose(0,2,1,3) for i in range(3))
//     s = q@k.transpose(0,1,3,2)/math.sqrt(hd)
//     mask = np.triu(np.ones((T,T)), 1).astype(bool)
//     s = np.where(mask, -np.inf, s)
//     y = (softmax(s)@v).transpose(0,2,1,3).reshape(B,T,C)
//     return y@Wp.T + bp
//
// def case_attn():
//     x = fill([2,3,4], 1); Wa = fill([12,4], 2); ba = fill([12], 3); Wp = fill([4,4], 4); bp = fill([4], 5)
//     y = attn(x, Wa, ba, Wp, bp, 2); R = fill(y.shape, 9)
//     f = lambda *a: (attn(*a, 2)*R).sum(); A = [x, Wa, ba, Wp, bp]
//     out("y", y); out("dx", numgrad(f, A, 0)); out("dWa", numgrad(f, A, 1)); out("dba", numgrad(f, A, 2)); out("dWp", numgrad(f, A, 3)); out("dbp", numgrad(f, A, 4))
//
//
// def case_block():
//     C = 4
//     names = ["ln_1.weight","ln_1.bias","attn.c_attn.weight","attn.c_attn.bias","attn.c_proj.weight","attn.c_proj.bias","ln_2.weight","ln_2.bias","mlp.c_fc.weight","mlp.c_fc.bias","mlp.c_proj.weight","mlp.c_proj.bias"]
//     shapes = [[4],[4],[12,4],[12],[4,4],[4],[4],[4],[16,4],[16],[4,16],[4]]
//     P = [fill(s, 10+i) + (1.0 if n.endswith("ln_1.weight") or n.endswith("ln_2.weight") else 0.0) for i,(n,s) in enumerate(zip(names, shapes))]
//     x = fill([1,3,4], 1)
//     def block(x, l1w, l1b, wa, ba, wp, bp, l2w, l2b, wf, bf, wq, bq):
//         h = x + attn(layernorm(x, l1w, l1b, 1e-5), wa, ba, wp, bp, 2)
//         m = gelu_tanh(layernorm(h, l2w, l2b, 1e-5)@wf.T + bf)@wq.T + bq
//         return h + m
//     y = block(x, *P); R = fill(y.shape, 9)
//     f = lambda *a: (block(*a)*R).sum(); A = [x] + P
//     out("y", y); out("dx", numgrad(f, A, 0)); out("d ln_1.weight", numgrad(f, A, 1)); out("d mlp.c_fc.bias", numgrad(f, A, 10))
//
// def log_softmax(z, ax=-1):
//     m = z.max(axis=ax, keepdims=True); return z - m - np.log(np.exp(z-m).sum(axis=ax, keepdims=True))
//
// def case_loss():
//     z = fill([3,4], 1)*4; t = np.array([2, -100, 0])
//     def ce(z, red):
//         lp = log_softmax(z); valid = t != -100; safe = np.where(valid, t, 0)
//         l = -lp[np.arange(3), safe]*valid
//         return {"none": l, "sum": l.sum(), "mean": l.sum()/valid.sum()}[red]
//     for red in ["none", "sum", "mean"]:
//         out("ce " + red, ce(z, red))
//     out("ce mean dz", numgrad(lambda z: ce(z, "mean"), [z.copy()], 0))
//     # no ignore_index: targets [2, 1, 0]
//     t2 = np.array([2,1,0]); lp = log_softmax(z); out("ce mean noignore", -lp[np.arange(3), t2].mean())
//     # [N, C, d] = [2, 3, 2], targets [2, 2]
//     z3 = fill([2,3,2], 2)*3; t3 = np.array([[0,2],[1,1]])
//     lp3 = log_softmax(z3, 1); l3 = -np.take_along_axis(lp3, t3[:,None,:], 1)[:,0,:]
//     out("ce NCd none", l3)
//     a = fill([2,3], 1); b = fill([2,3], 2)
//     out("mse mean", ((a-b)**2).mean()); out("mse sum", ((a-b)**2).sum()); out("mse mean da", 2*(a-b)/6)
//
// # Fill the test template: every @@case.name@@ becomes want::CASE_NAME, a const
// # in a `want` module appended to the file.
// import re
// for CUR in ['linear', 'embedding', 'layernorm', 'rmsnorm', 'conv1d', 'conv2d', 'pool', 'act', 'attn', 'block', 'loss']:
//     globals()["case_" + CUR]()
// t = open(sys.argv[1]).read()
// used = []
// def const(m):
//     key = m.group(1)
//     name = re.sub(r"[^A-Za-z0-9]+", "_", key).upper()
//     if name not in [u[0] for u in used]:
//         used.append((name, VALS[key]))
//     return "want::" + name
// t = re.sub(r"@@([^@]+)@@", const, t)
// mod = ["", "/// Expected values, from the reference script below.", "#[rustfmt::skip]", "mod want {"]
// for name, v in used:
//     mod.append("    pub const %s: [f32; %d] = %s;" % (name, v.count(",") + 1, v))
// mod.append("}")
// open(sys.argv[2], "w").write(t + "\n".join(mod) + "\n")
