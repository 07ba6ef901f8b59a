//! nn::functional and the layers of issue 16 against PyTorch.
//!
//! Expected values come from PyTorch (tests/data/nn/gen_nn.py, which writes
//! tests/data/nn/expected.rs). Inputs are
//! `fill(shape, seed) = 0.5 * sin(0.7 * i + seed)` over the row-major index
//! `i`, in f64 (f32 cases round it), the same here and in the script;
//! gradients are of `L = sum(y * fill(y.shape, 9))`. Tolerances: 1e-10 for
//! f64, 1e-5 for f32 (absolute + relative). Finite differences
//! (`testing::gradcheck`) check the gradients of the new compositions
//! independently of PyTorch.
#![allow(clippy::type_complexity)]

mod common;

#[allow(clippy::excessive_precision, clippy::approx_constant, dead_code)]
mod expected {
    include!("../data/nn/expected.rs");
}

use common::{assert_close, assert_close64, snapshot};
use expected as e;
use kael_core::nn::functional as F;
use kael_core::nn::{
    AvgPool2d, BatchNorm1d, BatchNorm2d, Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d,
    Embedding, GroupNorm, LayerNorm, Linear, MaxPool2d, Module,
};
use kael_core::testing::{GradcheckOptions, describe, gradcheck};
use kael_core::{DType, Device, Result, Rng, Tensor};

const T64: f64 = 1e-10;
const T32: f32 = 1e-5;

fn fill_vec(n: usize, seed: f64) -> Vec<f64> {
    (0..n)
        .map(|i| 0.5 * (0.7 * i as f64 + seed).sin())
        .collect()
}

fn fill(shape: &[usize], seed: f64, dtype: DType, dev: &Device) -> Result<Tensor> {
    let v = fill_vec(shape.iter().product(), seed);
    match dtype {
        DType::F32 => {
            let v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
            Tensor::from_slice(&v, shape, dev)
        }
        _ => Tensor::from_slice(&v, shape, dev),
    }
}

fn leaf(shape: &[usize], seed: f64, dtype: DType, dev: &Device) -> Result<Tensor> {
    fill(shape, seed, dtype, dev)?.requires_grad_(true)
}

/// `sum(y * fill(y.shape, 9))`, backpropagated.
fn backward(y: &Tensor) -> Result<()> {
    y.mul(&fill(y.shape(), 9.0, y.dtype(), &y.device())?)?
        .sum_all()?
        .backward()
}

fn v64(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

fn g64(t: &Tensor) -> Vec<f64> {
    v64(&t.grad().expect("a gradient"))
}

/// Compares `t` (f64 or f32) with PyTorch's values at the dtype's tolerance.
#[track_caller]
fn close(t: &Tensor, want: &[f64]) {
    match t.dtype() {
        DType::F32 => {
            let want: Vec<f32> = want.iter().map(|&x| x as f32).collect();
            assert_close(&t.to_vec::<f32>().unwrap(), &want, T32);
        }
        _ => assert_close64(&v64(t), want, T64),
    }
}

/// Runs `f` on leaves `fill(shape, seed)`, checks the output's shape and
/// values and each leaf's gradient against PyTorch's.
#[track_caller]
fn case(
    dev: &Device,
    dtype: DType,
    inputs: &[(&[usize], f64)],
    f: impl Fn(&[Tensor]) -> Result<Tensor>,
    shape: &[usize],
    want: &[f64],
    grads: &[&[f64]],
) -> Result<()> {
    let leaves: Vec<Tensor> = inputs
        .iter()
        .map(|(s, seed)| leaf(s, *seed, dtype, dev))
        .collect::<Result<_>>()?;
    let y = f(&leaves)?;
    assert_eq!(y.shape(), shape);
    assert_eq!(y.dtype(), dtype);
    close(&y, want);
    backward(&y)?;
    for (l, g) in leaves.iter().zip(grads) {
        match dtype {
            DType::F32 => {
                let g32: Vec<f32> = g.iter().map(|&x| x as f32).collect();
                assert_close(&l.grad().unwrap().to_vec::<f32>()?, &g32, T32);
            }
            _ => assert_close64(&g64(l), g, T64),
        }
    }
    Ok(())
}

/// f32 constants from the f32 PyTorch runs, as f64 for [`case`].
fn w(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

#[track_caller]
fn grad_ok(f: impl Fn(&[Tensor]) -> Result<Tensor>, inputs: &[Tensor]) {
    let r = gradcheck(f, inputs, GradcheckOptions::default()).unwrap();
    assert!(r.is_ok(), "{}", describe(&r));
}

// ------------------------------------------------------------------ linear

test_device!(linear_matches_pytorch, |dev| {
    let ins: &[(&[usize], f64)] = &[(&[2, 3, 4], 1.0), (&[5, 4], 2.0), (&[5], 3.0)];
    let f = |v: &[Tensor]| F::linear(&v[0], &v[1], Some(&v[2]));
    case(
        dev,
        DType::F64,
        ins,
        f,
        e::LINEAR_SHAPE,
        e::LINEAR,
        &[e::LINEAR_DX, e::LINEAR_DW, e::LINEAR_DB],
    )?;
    let (y, dx, dw, db) = (
        w(e::LINEAR_F32),
        w(e::LINEAR_F32_DX),
        w(e::LINEAR_F32_DW),
        w(e::LINEAR_F32_DB),
    );
    case(
        dev,
        DType::F32,
        ins,
        f,
        e::LINEAR_F32_SHAPE,
        &y,
        &[&dx, &dw, &db],
    )?;
    // The layer is the functional form.
    let lin = Linear::from_weights(
        fill(&[5, 4], 2.0, DType::F64, dev)?,
        Some(fill(&[5], 3.0, DType::F64, dev)?),
    )?;
    close(
        &lin.forward(&fill(&[2, 3, 4], 1.0, DType::F64, dev)?)?,
        e::LINEAR,
    );
    Ok(())
});

test_device!(layer_norm_records_one_node, |dev| {
    let x = leaf(&[2, 3, 4], 1.0, DType::F64, dev)?;
    let w = leaf(&[4], 2.0, DType::F64, dev)?;
    let y = F::layer_norm(&x, &[4], Some(&w), None, 1e-5)?;
    assert_eq!(y.grad_fn_name(), Some("NativeLayerNormBackward"));
    // Values are the unrecorded composition's, bit for bit.
    let plain = kael_core::no_grad(|| F::layer_norm(&x, &[4], Some(&w), None, 1e-5))?;
    assert_eq!(v64(&y), v64(&plain));
    Ok(())
});

test_device!(
    layer_norm_gradients_match_finite_differences_with_and_without_affine,
    |dev| {
        let x = fill(&[3, 2, 5], 1.0, DType::F64, dev)?;
        let w = fill(&[2, 5], 2.0, DType::F64, dev)?.affine(1.0, 1.0)?;
        let b = fill(&[2, 5], 3.0, DType::F64, dev)?;
        grad_ok(
            |v| F::layer_norm(&v[0], &[2, 5], Some(&v[1]), Some(&v[2]), 1e-5),
            &[x.clone(), w, b],
        );
        grad_ok(|v| F::layer_norm(&v[0], &[5], None, None, 1e-5), &[x]);
        // No leading dims: the weight's gradient sums nothing.
        let x1 = fill(&[5], 4.0, DType::F64, dev)?;
        let w1 = fill(&[5], 5.0, DType::F64, dev)?;
        grad_ok(
            |v| F::layer_norm(&v[0], &[5], Some(&v[1]), None, 1e-5),
            &[x1, w1],
        );
        Ok(())
    }
);

test_device!(
    layer_norm_second_derivatives_match_finite_differences,
    |dev| {
        use kael_core::autograd::{BackwardOptions, grad};
        // f(x, w) = ∂/∂x sum(layer_norm(x, w) * c): its gradients are second
        // derivatives, which create_graph must get right through the node.
        let c = fill(&[2, 4], 7.0, DType::F64, dev)?;
        // gradcheck's finite differences call it on plain tensors (grad mode
        // off): then x is made a leaf here, so the inner gradient exists.
        let first = |v: &[Tensor]| -> Result<Tensor> {
            kael_core::enable_grad(|| {
                let x = if v[0].requires_grad() {
                    v[0].clone()
                } else {
                    v[0].detach()?.requires_grad_(true)?
                };
                let y = F::layer_norm(&x, &[4], Some(&v[1]), None, 1e-5)?;
                let l = y.mul(&c)?.sum_all()?;
                let opts = BackwardOptions {
                    create_graph: true,
                    ..BackwardOptions::default()
                };
                let g = grad(&[&l], &[&x], &[], opts)?;
                g.into_iter()
                    .next()
                    .flatten()
                    .ok_or(kael_core::Error::Autograd {
                        op: "test",
                        reason: "no gradient",
                    })
            })
        };
        let x = fill(&[2, 4], 1.0, DType::F64, dev)?;
        let w = fill(&[4], 2.0, DType::F64, dev)?.affine(1.0, 1.0)?;
        grad_ok(first, &[x, w]);
        Ok(())
    }
);

test_device!(layer_norm_matches_pytorch, |dev| {
    let ins: &[(&[usize], f64)] = &[(&[2, 3, 4], 1.0), (&[3, 4], 2.0), (&[3, 4], 3.0)];
    let f = |v: &[Tensor]| F::layer_norm(&v[0], &[3, 4], Some(&v[1]), Some(&v[2]), 1e-5);
    case(
        dev,
        DType::F64,
        ins,
        f,
        e::LAYER_NORM_SHAPE,
        e::LAYER_NORM,
        &[e::LAYER_NORM_DX, e::LAYER_NORM_DW, e::LAYER_NORM_DB],
    )?;
    let mut ln = LayerNorm::new_in(&[3, 4], 1e-5, true, DType::F64, dev)?;
    ln.weight = Some(fill(&[3, 4], 2.0, DType::F64, dev)?);
    ln.bias = Some(fill(&[3, 4], 3.0, DType::F64, dev)?);
    close(
        &ln.forward(&fill(&[2, 3, 4], 1.0, DType::F64, dev)?)?,
        e::LAYER_NORM,
    );
    Ok(())
});

// ------------------------------------------------------------- convolution

test_device!(conv1d_groups_dilation_stride_padding_match_pytorch, |dev| {
    let ins: &[(&[usize], f64)] = &[(&[2, 4, 9], 1.0), (&[6, 2, 3], 2.0), (&[6], 3.0)];
    let f = |v: &[Tensor]| F::conv1d(&v[0], &v[1], Some(&v[2]), 2, 1, 2, 2);
    case(
        dev,
        DType::F64,
        ins,
        f,
        e::CONV1D_SHAPE,
        e::CONV1D,
        &[e::CONV1D_DX, e::CONV1D_DW, e::CONV1D_DB],
    )?;
    let conv = Conv1d::from_weights(
        fill(&[6, 2, 3], 2.0, DType::F64, dev)?,
        Some(fill(&[6], 3.0, DType::F64, dev)?),
    )?
    .with_groups(2)?
    .with_stride(2)?
    .with_padding(1)
    .with_dilation(2)?;
    close(
        &conv.forward(&fill(&[2, 4, 9], 1.0, DType::F64, dev)?)?,
        e::CONV1D,
    );
    // unbatched input
    let y = conv.forward(&fill(&[2, 4, 9], 1.0, DType::F64, dev)?.select(0, 1)?)?;
    let half = e::CONV1D.len() / 2;
    close(&y, &e::CONV1D[half..]);
    Ok(())
});

test_device!(conv2d_depthwise_matches_pytorch, |dev| {
    let ins: &[(&[usize], f64)] = &[(&[2, 4, 7, 6], 1.0), (&[4, 1, 3, 2], 2.0), (&[4], 3.0)];
    let f = |v: &[Tensor]| F::conv2d(&v[0], &v[1], Some(&v[2]), [2, 1], [1, 2], [2, 1], 4);
    case(
        dev,
        DType::F64,
        ins,
        f,
        e::CONV2D_DW_SHAPE,
        e::CONV2D_DW,
        &[e::CONV2D_DW_DX, e::CONV2D_DW_DW, e::CONV2D_DW_DB],
    )?;
    let conv = Conv2d::from_weights(
        fill(&[4, 1, 3, 2], 2.0, DType::F64, dev)?,
        Some(fill(&[4], 3.0, DType::F64, dev)?),
    )?
    .with_groups(4)?
    .with_stride([2, 1])?
    .with_padding([1, 2])
    .with_dilation([2, 1])?;
    close(
        &conv.forward(&fill(&[2, 4, 7, 6], 1.0, DType::F64, dev)?)?,
        e::CONV2D_DW,
    );
    Ok(())
});

// Stride 1 with rows of 8 or more outputs, in f32: on an AVX2 host the
// threaded device runs these (forward and input gradient) in its direct
// kernel, not through columns; every tile shape is reached (two vectors
// and a ragged third per row, one vector per row, output channels past
// the last whole tile), and the weight gradient's (16 rows of 5 vectors).
test_device!(conv2d_wide_rows_f32_match_pytorch, |dev| {
    let ins: &[(&[usize], f64)] = &[(&[2, 3, 5, 19], 1.0), (&[7, 3, 3, 3], 2.0), (&[7], 3.0)];
    let f = |v: &[Tensor]| F::conv2d(&v[0], &v[1], Some(&v[2]), [1, 1], [1, 1], [1, 1], 1);
    let grads = [
        w(e::CONV2D_WIDE_F32_DX),
        w(e::CONV2D_WIDE_F32_DW),
        w(e::CONV2D_WIDE_F32_DB),
    ];
    let g: Vec<&[f64]> = grads.iter().map(|g| g.as_slice()).collect();
    let y = w(e::CONV2D_WIDE_F32);
    case(dev, DType::F32, ins, f, e::CONV2D_WIDE_F32_SHAPE, &y, &g)?;
    let ins: &[(&[usize], f64)] = &[(&[2, 4, 6, 21], 1.0), (&[9, 4, 3, 2], 2.0)];
    let f = |v: &[Tensor]| F::conv2d(&v[0], &v[1], None, [1, 1], [2, 1], [2, 1], 1);
    let (dx, dw) = (w(e::CONV2D_WIDE_DIL_F32_DX), w(e::CONV2D_WIDE_DIL_F32_DW));
    let y = w(e::CONV2D_WIDE_DIL_F32);
    case(
        dev,
        DType::F32,
        ins,
        f,
        e::CONV2D_WIDE_DIL_F32_SHAPE,
        &y,
        &[&dx, &dw],
    )?;
    let ins: &[(&[usize], f64)] = &[(&[1, 2, 16, 33], 1.0), (&[5, 2, 3, 3], 2.0)];
    let f = |v: &[Tensor]| F::conv2d(&v[0], &v[1], None, [1, 1], [1, 1], [1, 1], 1);
    let (dx, dw) = (w(e::CONV2D_BIG_F32_DX), w(e::CONV2D_BIG_F32_DW));
    let y = w(e::CONV2D_BIG_F32);
    case(
        dev,
        DType::F32,
        ins,
        f,
        e::CONV2D_BIG_F32_SHAPE,
        &y,
        &[&dx, &dw],
    )?;
    let ins: &[(&[usize], f64)] = &[(&[1, 2, 4, 10], 1.0), (&[10, 2, 3, 3], 2.0)];
    let f = |v: &[Tensor]| F::conv2d(&v[0], &v[1], None, [1, 1], [0, 0], [1, 1], 1);
    let (dx, dw) = (w(e::CONV2D_ROW8_F32_DX), w(e::CONV2D_ROW8_F32_DW));
    let y = w(e::CONV2D_ROW8_F32);
    case(
        dev,
        DType::F32,
        ins,
        f,
        e::CONV2D_ROW8_F32_SHAPE,
        &y,
        &[&dx, &dw],
    )
});

test_device!(conv2d_groups_f32_and_dilation_match_pytorch, |dev| {
    let ins: &[(&[usize], f64)] = &[(&[2, 4, 5, 7], 1.0), (&[6, 2, 2, 3], 2.0), (&[6], 3.0)];
    let f = |v: &[Tensor]| F::conv2d(&v[0], &v[1], Some(&v[2]), [1, 2], [1, 0], [1, 2], 2);
    let (y, dx, dw, db) = (
        w(e::CONV2D_G2_F32),
        w(e::CONV2D_G2_F32_DX),
        w(e::CONV2D_G2_F32_DW),
        w(e::CONV2D_G2_F32_DB),
    );
    case(
        dev,
        DType::F32,
        ins,
        f,
        e::CONV2D_G2_F32_SHAPE,
        &y,
        &[&dx, &dw, &db],
    )?;
    let ins: &[(&[usize], f64)] = &[(&[1, 3, 6, 6], 1.0), (&[2, 3, 2, 2], 2.0)];
    let f = |v: &[Tensor]| F::conv2d(&v[0], &v[1], None, [1, 1], [0, 0], [2, 2], 1);
    case(
        dev,
        DType::F64,
        ins,
        f,
        e::CONV2D_DIL_SHAPE,
        e::CONV2D_DIL,
        &[e::CONV2D_DIL_DX, e::CONV2D_DIL_DW],
    )
});

test_device!(conv_transpose_matches_pytorch, |dev| {
    let ins: &[(&[usize], f64)] = &[(&[2, 4, 5], 1.0), (&[4, 3, 3], 2.0), (&[6], 3.0)];
    let f = |v: &[Tensor]| F::conv_transpose1d(&v[0], &v[1], Some(&v[2]), 2, 1, 1, 2, 2);
    case(
        dev,
        DType::F64,
        ins,
        f,
        e::CONVT1D_SHAPE,
        e::CONVT1D,
        &[e::CONVT1D_DX, e::CONVT1D_DW, e::CONVT1D_DB],
    )?;

    let ins: &[(&[usize], f64)] = &[(&[1, 2, 3, 4], 1.0), (&[2, 3, 3, 2], 2.0), (&[3], 3.0)];
    let f = |v: &[Tensor]| {
        F::conv_transpose2d(&v[0], &v[1], Some(&v[2]), [2, 3], [1, 0], [1, 2], 1, [1, 1])
    };
    case(
        dev,
        DType::F64,
        ins,
        f,
        e::CONVT2D_SHAPE,
        e::CONVT2D,
        &[e::CONVT2D_DX, e::CONVT2D_DW, e::CONVT2D_DB],
    )?;
    let (y, dx, dw, db) = (
        w(e::CONVT2D_F32),
        w(e::CONVT2D_F32_DX),
        w(e::CONVT2D_F32_DW),
        w(e::CONVT2D_F32_DB),
    );
    case(
        dev,
        DType::F32,
        ins,
        f,
        e::CONVT2D_F32_SHAPE,
        &y,
        &[&dx, &dw, &db],
    )?;

    let ins: &[(&[usize], f64)] = &[(&[2, 4, 4, 3], 1.0), (&[4, 1, 2, 2], 2.0)];
    let f =
        |v: &[Tensor]| F::conv_transpose2d(&v[0], &v[1], None, [1, 2], [2, 1], [1, 0], 2, [2, 1]);
    case(
        dev,
        DType::F64,
        ins,
        f,
        e::CONVT2D_CROP_SHAPE,
        e::CONVT2D_CROP,
        &[e::CONVT2D_CROP_DX, e::CONVT2D_CROP_DW],
    )?;

    // A crop beyond the input that output_padding makes up (n = 1, k = 1,
    // padding 2, dilation 5, output_padding 4): PyTorch's one element, 0.
    let x = fill(&[1, 1, 1], 1.0, DType::F64, dev)?;
    let k = Tensor::full(&[1, 1, 1], 2.0, DType::F64, dev)?;
    let y = F::conv_transpose1d(&x, &k, None, 1, 2, 4, 1, 5)?;
    assert_eq!((y.shape(), v64(&y)), (&[1, 1, 1][..], vec![0.0]));

    // The layers are the functional forms.
    let up = ConvTranspose2d::from_weights(
        fill(&[2, 3, 3, 2], 2.0, DType::F64, dev)?,
        Some(fill(&[3], 3.0, DType::F64, dev)?),
    )?
    .with_stride([2, 3])?
    .with_padding([1, 0])
    .with_output_padding([1, 2]);
    close(
        &up.forward(&fill(&[1, 2, 3, 4], 1.0, DType::F64, dev)?)?,
        e::CONVT2D,
    );
    let up = ConvTranspose1d::from_weights(
        fill(&[4, 3, 3], 2.0, DType::F64, dev)?,
        Some(fill(&[6], 3.0, DType::F64, dev)?),
    )?
    .with_groups(2)?
    .with_stride(2)?
    .with_padding(1)
    .with_output_padding(1)
    .with_dilation(2)?;
    close(
        &up.forward(&fill(&[2, 4, 5], 1.0, DType::F64, dev)?)?,
        e::CONVT1D,
    );
    let short = ConvTranspose1d::from_weights(
        fill(&[4, 3, 3], 2.0, DType::F64, dev)?,
        Some(fill(&[3], 3.0, DType::F64, dev)?),
    )?;
    assert!(short.with_groups(2).is_err());
    let up = ConvTranspose1d::from_weights(fill(&[4, 3, 3], 2.0, DType::F64, dev)?, None)?
        .with_groups(2)?
        .with_stride(2)?
        .with_padding(1)
        .with_output_padding(1)
        .with_dilation(2)?;
    let y = up.forward(&fill(&[2, 4, 5], 1.0, DType::F64, dev)?)?;
    assert_eq!(y.shape(), e::CONVT1D_SHAPE);
    // minus the bias, which this layer lacks
    let b = fill_vec(6, 3.0);
    let l = e::CONVT1D_SHAPE[2];
    let want: Vec<f64> = e::CONVT1D
        .iter()
        .enumerate()
        .map(|(i, &v)| v - b[(i / l) % 6])
        .collect();
    close(&y, &want);
    Ok(())
});

test_device!(conv_gradients_match_finite_differences, |dev| {
    let x = fill(&[1, 4, 7], 1.0, DType::F64, dev)?;
    let wt = fill(&[4, 2, 2], 2.0, DType::F64, dev)?;
    let b = fill(&[4], 3.0, DType::F64, dev)?;
    grad_ok(
        |v| F::conv1d(&v[0], &v[1], Some(&v[2]), 2, 2, 3, 2),
        &[x, wt, b],
    );
    let x = fill(&[2, 4, 5, 5], 1.0, DType::F64, dev)?;
    let wt = fill(&[4, 1, 2, 3], 2.0, DType::F64, dev)?;
    grad_ok(
        |v| F::conv2d(&v[0], &v[1], None, [2, 1], [1, 1], [2, 2], 4),
        &[x.clone(), wt],
    );
    let wt = fill(&[4, 2, 3, 2], 4.0, DType::F64, dev)?;
    grad_ok(
        |v| F::conv_transpose2d(&v[0], &v[1], None, [2, 1], [1, 1], [1, 0], 2, [1, 2]),
        &[x, wt],
    );
    Ok(())
});

// ---------------------------------------------------------- embedding, pool

test_device!(embedding_padding_idx_gets_no_gradient_as_pytorch, |dev| {
    let wt = leaf(&[5, 3], 2.0, DType::F64, dev)?;
    let ids = Tensor::from_slice(&[0i64, 2, 0, 4, 2, 1], &[2, 3], dev)?;
    let y = F::embedding(&ids, &wt, Some(2))?;
    assert_eq!(y.shape(), e::EMBEDDING_SHAPE);
    close(&y, e::EMBEDDING);
    backward(&y)?;
    assert_close64(&g64(&wt), e::EMBEDDING_DW, T64);
    // The layer
    let emb = Embedding::from_weights(leaf(&[5, 3], 2.0, DType::F64, dev)?)?.with_padding_idx(2)?;
    assert_eq!(emb.padding_idx(), Some(2));
    backward(&emb.forward(&ids)?)?;
    assert_close64(&g64(&emb.weight), e::EMBEDDING_DW, T64);
    Ok(())
});

test_device!(max_pool_with_indices_matches_pytorch, |dev| {
    let x = leaf(&[2, 3, 5, 6], 1.0, DType::F64, dev)?;
    let (y, idx) = F::max_pool2d_with_indices(&x, [3, 2], [2, 2], [1, 1])?;
    assert_eq!(y.shape(), e::MAXPOOL_SHAPE);
    assert_eq!((idx.shape(), idx.dtype()), (e::MAXPOOL_SHAPE, DType::I64));
    close(&y, e::MAXPOOL);
    assert_eq!(idx.to_vec::<i64>()?, e::MAXPOOL_IDX);
    backward(&y)?;
    assert_close64(&g64(&x), e::MAXPOOL_DX, T64);
    let y2 = F::max_pool2d(&x, [3, 2], [2, 2], [1, 1])?;
    close(&y2, e::MAXPOOL);
    let pool = MaxPool2d::new([3, 2])?
        .with_stride([2, 2])?
        .with_padding([1, 1])?;
    let (y3, idx3) = pool.forward_with_indices(&x.select(0, 1)?)?;
    let half = e::MAXPOOL.len() / 2;
    close(&y3, &e::MAXPOOL[half..]);
    assert_eq!(idx3.to_vec::<i64>()?, &e::MAXPOOL_IDX[half..]);
    Ok(())
});

test_device!(avg_pool_count_include_pad_matches_pytorch, |dev| {
    let ins: &[(&[usize], f64)] = &[(&[1, 2, 5, 5], 1.0)];
    let f = |v: &[Tensor]| F::avg_pool2d(&v[0], [3, 3], [2, 2], [1, 1], false);
    case(
        dev,
        DType::F64,
        ins,
        f,
        e::AVGPOOL_EXCL_SHAPE,
        e::AVGPOOL_EXCL,
        &[e::AVGPOOL_EXCL_DX],
    )?;
    let f = |v: &[Tensor]| F::avg_pool2d(&v[0], [3, 3], [2, 2], [1, 1], true);
    case(
        dev,
        DType::F64,
        ins,
        f,
        e::AVGPOOL_INCL_SHAPE,
        e::AVGPOOL_INCL,
        &[e::AVGPOOL_INCL_DX],
    )?;
    let pool = AvgPool2d::new([3, 3])?
        .with_stride([2, 2])?
        .with_padding([1, 1])?;
    assert!(pool.count_include_pad());
    let x = fill(&[1, 2, 5, 5], 1.0, DType::F64, dev)?;
    close(&pool.forward(&x)?, e::AVGPOOL_INCL);
    close(
        &pool.with_count_include_pad(false).forward(&x)?,
        e::AVGPOOL_EXCL,
    );
    Ok(())
});

// --------------------------------------------------------------- attention

test_device!(scaled_dot_product_attention_matches_pytorch, |dev| {
    let ins: &[(&[usize], f64)] = &[(&[2, 3, 4], 1.0), (&[2, 5, 4], 2.0), (&[2, 5, 3], 3.0)];
    let f = |v: &[Tensor]| F::scaled_dot_product_attention(&v[0], &v[1], &v[2], None, false, None);
    case(
        dev,
        DType::F64,
        ins,
        f,
        e::SDPA_SHAPE,
        e::SDPA,
        &[e::SDPA_DQ, e::SDPA_DK, e::SDPA_DV],
    )?;
    let keep = [
        true, false, true, true, false, false, false, true, false, false, true, true, true, true,
        true,
    ];
    let mask = Tensor::from_slice(&keep, &[3, 5], dev)?;
    let f = |v: &[Tensor]| {
        F::scaled_dot_product_attention(&v[0], &v[1], &v[2], Some(&mask), false, None)
    };
    case(
        dev,
        DType::F64,
        ins,
        f,
        e::SDPA_BOOL_SHAPE,
        e::SDPA_BOOL,
        &[e::SDPA_BOOL_DQ, e::SDPA_BOOL_DK, e::SDPA_BOOL_DV],
    )?;
    let mut dead = keep;
    dead[5..10].fill(false);
    let mask = Tensor::from_slice(&dead, &[3, 5], dev)?;
    let f = |v: &[Tensor]| {
        F::scaled_dot_product_attention(&v[0], &v[1], &v[2], Some(&mask), false, None)
    };
    case(
        dev,
        DType::F64,
        ins,
        f,
        e::SDPA_DEAD_SHAPE,
        e::SDPA_DEAD,
        &[e::SDPA_DEAD_DQ, e::SDPA_DEAD_DK, e::SDPA_DEAD_DV],
    )?;
    let fmask = fill(&[2, 3, 5], 4.0, DType::F64, dev)?;
    let f = |v: &[Tensor]| {
        F::scaled_dot_product_attention(&v[0], &v[1], &v[2], Some(&fmask), false, Some(0.3))
    };
    case(
        dev,
        DType::F64,
        ins,
        f,
        e::SDPA_FLOAT_SHAPE,
        e::SDPA_FLOAT,
        &[e::SDPA_FLOAT_DQ, e::SDPA_FLOAT_DK, e::SDPA_FLOAT_DV],
    )?;
    let ins: &[(&[usize], f64)] = &[
        (&[2, 2, 4, 4], 1.0),
        (&[2, 2, 4, 4], 2.0),
        (&[2, 2, 4, 3], 3.0),
    ];
    let f = |v: &[Tensor]| F::scaled_dot_product_attention(&v[0], &v[1], &v[2], None, true, None);
    case(
        dev,
        DType::F64,
        ins,
        f,
        e::SDPA_CAUSAL_SHAPE,
        e::SDPA_CAUSAL,
        &[e::SDPA_CAUSAL_DQ, e::SDPA_CAUSAL_DK, e::SDPA_CAUSAL_DV],
    )?;
    let (y, dq, dk, dv) = (
        w(e::SDPA_CAUSAL_F32),
        w(e::SDPA_CAUSAL_F32_DQ),
        w(e::SDPA_CAUSAL_F32_DK),
        w(e::SDPA_CAUSAL_F32_DV),
    );
    case(
        dev,
        DType::F32,
        ins,
        f,
        e::SDPA_CAUSAL_F32_SHAPE,
        &y,
        &[&dq, &dk, &dv],
    )
});

// ------------------------------------------------------------- batch norm

fn bn_case(dev: &Device, dtype: DType, shape: &[usize], want: [&[f64]; 8]) -> Result<()> {
    let [y_t, rm_t, rv_t, dx_t, dw_t, db_t, y_e, dx_e] = want;
    let c = shape[1];
    let x = leaf(shape, 1.0, dtype, dev)?;
    let wt = leaf(&[c], 2.0, dtype, dev)?;
    let b = leaf(&[c], 3.0, dtype, dev)?;
    let rm = fill(&[c], 5.0, dtype, dev)?;
    let rv = fill(&[c], 6.0, dtype, dev)?.sqr()?.add_scalar(1.0)?;
    let y = F::batch_norm(
        &x,
        Some(&rm),
        Some(&rv),
        Some(&wt),
        Some(&b),
        true,
        0.1,
        1e-5,
    )?;
    close(&y, y_t);
    close(&rm, rm_t);
    close(&rv, rv_t);
    backward(&y)?;
    close(&x.grad().unwrap(), dx_t);
    close(&wt.grad().unwrap(), dw_t);
    close(&b.grad().unwrap(), db_t);
    let x = leaf(shape, 1.0, dtype, dev)?;
    let y = F::batch_norm(
        &x,
        Some(&rm),
        Some(&rv),
        Some(&wt),
        Some(&b),
        false,
        0.1,
        1e-5,
    )?;
    close(&y, y_e);
    close(&rm, rm_t); // evaluation leaves the statistics alone
    backward(&y)?;
    close(&x.grad().unwrap(), dx_e);
    Ok(())
}

test_device!(batch_norm_matches_pytorch, |dev| {
    bn_case(
        dev,
        DType::F64,
        &[4, 3, 2, 2],
        [
            e::BN2D,
            e::BN2D_RM,
            e::BN2D_RV,
            e::BN2D_DX,
            e::BN2D_DW,
            e::BN2D_DB,
            e::BN2D_EVAL,
            e::BN2D_EVAL_DX,
        ],
    )?;
    bn_case(
        dev,
        DType::F64,
        &[5, 3],
        [
            e::BN1D,
            e::BN1D_RM,
            e::BN1D_RV,
            e::BN1D_DX,
            e::BN1D_DW,
            e::BN1D_DB,
            e::BN1D_EVAL,
            e::BN1D_EVAL_DX,
        ],
    )?;
    let f32s = [
        w(e::BN2D_F32),
        w(e::BN2D_F32_RM),
        w(e::BN2D_F32_RV),
        w(e::BN2D_F32_DX),
        w(e::BN2D_F32_DW),
        w(e::BN2D_F32_DB),
        w(e::BN2D_F32_EVAL),
        w(e::BN2D_F32_EVAL_DX),
    ];
    let refs: [&[f64]; 8] = core::array::from_fn(|i| f32s[i].as_slice());
    bn_case(dev, DType::F32, &[4, 3, 2, 2], refs)
});

test_device!(batch_norm_layer_tracks_running_stats_as_pytorch, |dev| {
    let bn = BatchNorm1d::new(3, 1e-5, 0.1, true, DType::F64, dev)?;
    assert!(bn.is_training());
    bn.forward(&fill(&[4, 3, 2], 1.0, DType::F64, dev)?)?;
    bn.forward(&fill(&[4, 3, 2], 7.0, DType::F64, dev)?)?;
    close(bn.running_mean().unwrap(), e::BN1D_LAYER_RM);
    close(bn.running_var().unwrap(), e::BN1D_LAYER_RV);
    assert_eq!(bn.num_batches_tracked().unwrap().to_vec::<i64>()?, [2]);
    bn.eval();
    close(
        &bn.forward(&fill(&[2, 3, 2], 8.0, DType::F64, dev)?)?,
        e::BN1D_LAYER_EVAL,
    );
    close(bn.running_mean().unwrap(), e::BN1D_LAYER_RM);
    // Buffers are state, not parameters; the names are PyTorch's.
    let keys: Vec<String> = bn.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(keys, e::BN_STATE_DICT_KEYS);
    let params: Vec<String> = bn.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(params, ["weight", "bias"]);
    // load_state_dict restores the running statistics
    let fresh = BatchNorm1d::new(3, 1e-5, 0.1, true, DType::F64, dev)?;
    fresh.load_state_dict(&bn.state_dict())?;
    close(fresh.running_var().unwrap(), e::BN1D_LAYER_RV);
    // 2-d
    let bn2 = BatchNorm2d::new(3, 1e-5, 0.1, true, DType::F64, dev)?;
    let x = fill(&[4, 3, 2, 2], 1.0, DType::F64, dev)?;
    bn2.forward(&x)?;
    assert_close64(
        &v64(bn2.running_mean().unwrap()),
        &v64(&{
            let rm = fill(&[3], 5.0, DType::F64, dev)?.mul_scalar(0.0)?;
            F::batch_norm(
                &x,
                Some(&rm),
                Some(&Tensor::ones(&[3], DType::F64, dev)?),
                None,
                None,
                true,
                0.1,
                1e-5,
            )?;
            rm
        }),
        T64,
    );
    assert!(
        bn2.forward(&fill(&[4, 3, 2], 1.0, DType::F64, dev)?)
            .is_err()
    );
    // momentum=None: the cumulative average
    let bn = BatchNorm1d::new(3, 1e-5, 0.1, true, DType::F64, dev)?.with_cumulative_average();
    for seed in [1.0, 7.0, 3.0] {
        bn.forward(&fill(&[4, 3, 2], seed, DType::F64, dev)?)?;
    }
    close(bn.running_mean().unwrap(), e::BN1D_CMA_RM);
    close(bn.running_var().unwrap(), e::BN1D_CMA_RV);
    // track_running_stats=False: batch statistics in eval too, no buffers
    let bn = BatchNorm1d::new(3, 1e-5, 0.1, true, DType::F64, dev)?.without_running_stats();
    bn.eval();
    close(
        &bn.forward(&fill(&[2, 3, 2], 8.0, DType::F64, dev)?)?,
        e::BN1D_NOTRACK_EVAL,
    );
    let keys: Vec<String> = bn.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(keys, e::BN_NOTRACK_KEYS);
    Ok(())
});

test_device!(group_norm_matches_pytorch, |dev| {
    let ins: &[(&[usize], f64)] = &[(&[2, 6, 3, 2], 1.0), (&[6], 2.0), (&[6], 3.0)];
    let f = |v: &[Tensor]| F::group_norm(&v[0], 3, Some(&v[1]), Some(&v[2]), 1e-5);
    case(
        dev,
        DType::F64,
        ins,
        f,
        e::GROUP_NORM_SHAPE,
        e::GROUP_NORM,
        &[e::GROUP_NORM_DX, e::GROUP_NORM_DW, e::GROUP_NORM_DB],
    )?;
    let (y, dx, dw, db) = (
        w(e::GROUP_NORM_F32),
        w(e::GROUP_NORM_F32_DX),
        w(e::GROUP_NORM_F32_DW),
        w(e::GROUP_NORM_F32_DB),
    );
    case(
        dev,
        DType::F32,
        ins,
        f,
        e::GROUP_NORM_F32_SHAPE,
        &y,
        &[&dx, &dw, &db],
    )?;
    let mut gn = GroupNorm::new(3, 6, 1e-5, true, DType::F64, dev)?;
    gn.weight = Some(fill(&[6], 2.0, DType::F64, dev)?);
    gn.bias = Some(fill(&[6], 3.0, DType::F64, dev)?);
    close(
        &gn.forward(&fill(&[2, 6, 3, 2], 1.0, DType::F64, dev)?)?,
        e::GROUP_NORM,
    );
    Ok(())
});

test_device!(norm_gradients_match_finite_differences, |dev| {
    let x = fill(&[3, 4, 2], 1.0, DType::F64, dev)?;
    let wt = fill(&[4], 2.0, DType::F64, dev)?;
    let b = fill(&[4], 3.0, DType::F64, dev)?;
    grad_ok(
        |v| F::batch_norm(&v[0], None, None, Some(&v[1]), Some(&v[2]), true, 0.1, 1e-5),
        &[x.clone(), wt.clone(), b.clone()],
    );
    let rm = fill(&[4], 5.0, DType::F64, dev)?;
    let rv = fill(&[4], 6.0, DType::F64, dev)?.sqr()?.add_scalar(1.0)?;
    grad_ok(
        |v| {
            F::batch_norm(
                &v[0],
                Some(&v[3]),
                Some(&v[4]),
                Some(&v[1]),
                Some(&v[2]),
                false,
                0.1,
                1e-5,
            )
        },
        &[x.clone(), wt.clone(), b.clone(), rm, rv],
    );
    grad_ok(
        |v| F::group_norm(&v[0], 2, Some(&v[1]), Some(&v[2]), 1e-5),
        &[x, wt, b],
    );
    Ok(())
});

// ----------------------------------------------------------------- dropout

test_device!(dropout_is_seeded_and_matches_the_layer, |dev| {
    let x = fill(&[64], 1.0, DType::F32, dev)?;
    let a = F::dropout(&x, 0.25, true, &mut Rng::new(4))?.to_vec::<f32>()?;
    let b = F::dropout(&x, 0.25, true, &mut Rng::new(4))?.to_vec::<f32>()?;
    assert_eq!(a, b);
    let xs = x.to_vec::<f32>()?;
    assert!(
        a.iter()
            .zip(&xs)
            .all(|(y, x)| *y == 0.0 || (y - x / 0.75).abs() <= 1e-6)
    );
    assert!(a.iter().filter(|&&y| y == 0.0).count() > 4);
    assert!(F::dropout(&x, 0.25, false, &mut Rng::new(4))?.is_same(&x));
    assert_eq!(
        F::dropout(&x, 1.0, true, &mut Rng::new(4))?.to_vec::<f32>()?,
        vec![0.0; 64]
    );
    // The layer draws one u64 from its generator and seeds the mask with it.
    let mut seed = Rng::new(9);
    let layer = kael_core::nn::Dropout::new(0.25, &mut Rng::new(9))?;
    let mut fork = Rng::new(seed.next_u64());
    let want = F::dropout(&x, 0.25, true, &mut Rng::new(fork.next_u64()))?;
    assert_eq!(layer.forward(&x)?.to_vec::<f32>()?, want.to_vec::<f32>()?);
    Ok(())
});

// ------------------------------------------------------------------ dtypes

test_device!(constructors_take_a_dtype, |dev| {
    let mut rng = Rng::new(0);
    for dtype in [DType::F32, DType::F64] {
        let lin = Linear::new_in(3, 2, true, dtype, dev, &mut rng)?;
        assert_eq!(
            (lin.weight.dtype(), lin.bias.as_ref().unwrap().dtype()),
            (dtype, dtype)
        );
        assert_eq!(
            Conv2d::new_in(4, 8, [3, 3], 2, dtype, dev, &mut rng)?
                .weight
                .shape(),
            &[8, 2, 3, 3]
        );
        assert_eq!(
            Conv1d::new_in(4, 4, 3, 4, dtype, dev, &mut rng)?
                .weight
                .dtype(),
            dtype
        );
        assert_eq!(
            ConvTranspose2d::new_in(4, 6, [2, 2], 2, dtype, dev, &mut rng)?
                .weight
                .shape(),
            &[4, 3, 2, 2]
        );
        assert_eq!(
            Embedding::new_in(5, 2, dtype, dev, &mut rng)?
                .weight
                .dtype(),
            dtype
        );
        assert_eq!(
            LayerNorm::new_in(&[3], 1e-5, true, dtype, dev)?
                .weight
                .unwrap()
                .dtype(),
            dtype
        );
        assert_eq!(
            BatchNorm2d::new(3, 1e-5, 0.1, true, dtype, dev)?
                .running_var()
                .unwrap()
                .dtype(),
            dtype
        );
        assert_eq!(
            GroupNorm::new(1, 3, 1e-5, true, dtype, dev)?
                .weight
                .unwrap()
                .dtype(),
            dtype
        );
        // forward in that dtype
        let y = lin.forward(&Tensor::ones(&[1, 3], dtype, dev)?)?;
        assert_eq!(y.dtype(), dtype);
    }
    // Same seed, same draws: the f64 layer is the f32 layer's values unrounded.
    let a = Linear::new_in(5, 4, true, DType::F64, dev, &mut Rng::new(3))?;
    let b = Linear::new(5, 4, true, dev, &mut Rng::new(3))?;
    let a32: Vec<f32> = v64(&a.weight).iter().map(|&x| x as f32).collect();
    assert_eq!(a32, b.weight.to_vec::<f32>()?);
    Ok(())
});

#[test]
fn f32_layers_initialise_on_a_backend_without_f64_kernels() {
    use kael_core::allocator::GlobalAllocator;
    use kael_core::cpu::{CpuBackend, dtypes, ops};
    use kael_core::shared::Shared;
    let dev = Device::from_backend(Shared::new(CpuBackend::<
        { dtypes::F32 | dtypes::I64 | dtypes::BOOL },
        { ops::ALL },
        false,
    >::with_allocator(Shared::new(
        GlobalAllocator::new(),
    ))));
    let mut rng = Rng::new(0);
    let lin = Linear::new(4, 3, true, &dev, &mut rng).unwrap();
    assert!(
        lin.weight
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .all(|w| w.abs() <= 0.5)
    );
    Conv2d::new(2, 2, [3, 3], &dev, &mut rng).unwrap();
    Embedding::new(4, 2, &dev, &mut rng).unwrap();
    let y = lin
        .forward(&Tensor::ones(&[2, 4], DType::F32, &dev).unwrap())
        .unwrap();
    assert_eq!(y.shape(), &[2, 3]);
}

// -------------------------------------------------------------- bad inputs

test_device!(
    bad_inputs_are_errors_naming_the_function_and_fix_and_change_nothing,
    |dev| {
        let x = fill(&[2, 4, 6, 6], 1.0, DType::F32, dev)?;
        let w4 = fill(&[4, 2, 3, 3], 2.0, DType::F32, dev)?;
        let w3 = fill(&[4, 2, 3], 2.0, DType::F32, dev)?;
        let x3 = fill(&[2, 4, 6], 1.0, DType::F32, dev)?;
        let rm = fill(&[4], 5.0, DType::F32, dev)?;
        let rv = Tensor::ones(&[4], DType::F32, dev)?;
        let ids = Tensor::from_slice(&[0i64, 1], &[2], dev)?;
        let table = fill(&[3, 2], 1.0, DType::F32, dev)?;
        let before: Vec<_> = [&x, &w4, &w3, &x3, &rm, &rv, &ids, &table]
            .iter()
            .map(|t| snapshot(t))
            .collect();
        let cases: Vec<(Result<Tensor>, &str, &str)> = vec![
            (
                F::conv2d(&x, &w4, None, [1, 1], [0, 0], [1, 1], 3),
                "conv2d",
                "divisible by groups",
            ),
            (
                F::conv2d(&x, &w4, None, [1, 1], [0, 0], [1, 1], 1),
                "conv2d",
                "[2, 2, 6, 6]",
            ),
            (
                F::conv2d(&x, &w4, None, [0, 1], [0, 0], [1, 1], 2),
                "conv2d",
                "stride must be positive",
            ),
            (
                F::conv2d(&x, &w4, None, [1, 1], [0, 0], [0, 1], 2),
                "conv2d",
                "dilation must be positive",
            ),
            (
                F::conv2d(&x, &w4, None, [1, 1], [0, 0], [3, 3], 2),
                "conv2d",
                "use a larger input",
            ),
            (
                F::conv2d(&x, &w4, None, [1, 1], [0, 0], [1, usize::MAX], 2),
                "conv2d",
                "overflows",
            ),
            (
                F::conv2d(&x, &w3, None, [1, 1], [0, 0], [1, 1], 2),
                "conv2d",
                "weight is [out_channels",
            ),
            (
                F::conv1d(&x3, &w3, None, 1, 0, 1, 0),
                "conv1d",
                "groups must be positive",
            ),
            (
                F::conv1d(&x3, &w3, Some(&rm.narrow(0, 0, 3)?), 1, 0, 1, 2),
                "conv1d",
                "[4]",
            ),
            (
                F::conv_transpose1d(&x3, &w3, None, 2, 0, 2, 1, 1),
                "conv_transpose1d",
                "output_padding must be smaller",
            ),
            (
                F::conv_transpose1d(&x3, &w3, None, 1, 5, 0, 1, 1),
                "conv_transpose1d",
                "use less padding",
            ),
            (
                F::batch_norm(&x, Some(&rm), None, None, None, true, 0.1, 1e-5),
                "batch_norm",
                "pass both or neither",
            ),
            (
                F::batch_norm(&x, None, None, None, None, false, 0.1, 1e-5),
                "batch_norm",
                "evaluation mode",
            ),
            (
                F::batch_norm(
                    &x.narrow(0, 0, 1)?.narrow(2, 0, 1)?.narrow(3, 0, 1)?,
                    Some(&rm),
                    Some(&rv),
                    None,
                    None,
                    true,
                    0.1,
                    1e-5,
                ),
                "batch_norm",
                "more than one value per channel",
            ),
            (
                F::batch_norm(&x, Some(&rm), Some(&rv), None, None, true, 1.5, 1e-5),
                "batch_norm",
                "momentum must be in [0, 1]",
            ),
            (
                F::batch_norm(&x, Some(&rm), Some(&rv), None, None, true, 0.1, -1.0),
                "batch_norm",
                "eps must be",
            ),
            (
                F::group_norm(&x, 3, None, None, 1e-5),
                "group_norm",
                "divide the channel count",
            ),
            (
                F::group_norm(&x, 2, Some(&rm.narrow(0, 0, 2)?), None, 1e-5),
                "group_norm",
                "[4]",
            ),
            (
                F::embedding(&ids, &table, Some(3)),
                "embedding",
                "padding_idx must be a row",
            ),
            (
                F::layer_norm(&x, &[5], None, None, 1e-5),
                "layer_norm",
                "[5]",
            ),
            (
                F::linear(&x, &w3, None),
                "linear",
                "weight is [out_features",
            ),
            (
                F::dropout(&x, 1.5, true, &mut Rng::new(0)),
                "dropout",
                "p must be in [0, 1]",
            ),
            (
                F::max_pool2d(&x, [4, 4], [1, 1], [3, 3]),
                "max_pool2d",
                "at most half the kernel",
            ),
            (
                F::max_pool2d(&x3.select(0, 0)?, [2, 2], [2, 2], [0, 0]),
                "max_pool2d",
                "[N, C, H, W]",
            ),
            (
                F::avg_pool2d(&x, [2, 0], [1, 1], [0, 0], true),
                "avg_pool2d",
                "kernel sizes must be positive",
            ),
            (
                F::max_pool2d_with_indices(&x, [8, 8], [1, 1], [0, 0]).map(|(y, _)| y),
                "max_pool2d_with_indices",
                "use a larger input",
            ),
            (
                F::scaled_dot_product_attention(&x3, &x3, &x3, Some(&ids.eq(&ids)?), true, None),
                "scaled_dot_product_attention",
                "exclusive",
            ),
            (
                F::scaled_dot_product_attention(&x3, &x3.narrow(2, 0, 5)?, &x3, None, false, None),
                "scaled_dot_product_attention",
                "same last dim",
            ),
            (
                F::scaled_dot_product_attention(&x3, &x3, &x3.narrow(1, 0, 3)?, None, false, None),
                "scaled_dot_product_attention",
                "same sequence length",
            ),
            (
                F::scaled_dot_product_attention(
                    &x3,
                    &x3,
                    &x3,
                    Some(&rm.narrow(0, 0, 3)?),
                    false,
                    None,
                ),
                "scaled_dot_product_attention",
                "broadcast",
            ),
            (
                F::scaled_dot_product_attention(&x3, &x3, &x3, None, false, Some(f64::NAN)),
                "scaled_dot_product_attention",
                "scale must be finite",
            ),
        ];
        for (i, (r, op, text)) in cases.into_iter().enumerate() {
            let msg = match r {
                Ok(_) => panic!("case {i} ({op}, {text}) succeeded"),
                Err(err) => err.to_string(),
            };
            assert!(msg.starts_with(op) && msg.contains(text), "case {i}: {msg}");
            if std::env::var_os("KAEL_PRINT_ERRORS").is_some() {
                eprintln!("{msg}");
            }
        }
        let after: Vec<_> = [&x, &w4, &w3, &x3, &rm, &rv, &ids, &table]
            .iter()
            .map(|t| snapshot(t))
            .collect();
        assert!(before == after, "a refused call changed an input");
        // Constructors
        let mut rng = Rng::new(0);
        let msgs = [
            Conv2d::new_in(4, 6, [3, 3], 4, DType::F32, dev, &mut rng)
                .err()
                .map(|e| e.to_string()),
            Conv1d::new_in(4, 4, 0, 1, DType::F32, dev, &mut rng)
                .err()
                .map(|e| e.to_string()),
            ConvTranspose2d::new_in(4, 4, [2, 2], 3, DType::F32, dev, &mut rng)
                .err()
                .map(|e| e.to_string()),
            Linear::new_in(2, 2, true, DType::I64, dev, &mut rng)
                .err()
                .map(|e| e.to_string()),
            BatchNorm1d::new(0, 1e-5, 0.1, true, DType::F32, dev)
                .err()
                .map(|e| e.to_string()),
            BatchNorm2d::new(3, f64::NAN, 0.1, true, DType::F32, dev)
                .err()
                .map(|e| e.to_string()),
            GroupNorm::new(0, 4, 1e-5, true, DType::F32, dev)
                .err()
                .map(|e| e.to_string()),
            Embedding::new(3, 2, dev, &mut rng)?
                .with_padding_idx(3)
                .err()
                .map(|e| e.to_string()),
            Conv2d::from_weights(w4.clone(), None)?
                .with_groups(3)
                .err()
                .map(|e| e.to_string()),
            Conv2d::from_weights(w4.clone(), None)?
                .with_dilation([1, 0])
                .err()
                .map(|e| e.to_string()),
        ];
        let names = [
            "Conv2d::new_in",
            "Conv1d::new_in",
            "ConvTranspose2d::new_in",
            "Linear::new_in",
            "BatchNorm1d::new",
            "BatchNorm2d::new",
            "GroupNorm::new",
            "Embedding::with_padding_idx",
            "Conv2d::with_groups",
            "Conv2d::with_dilation",
        ];
        for (m, name) in msgs.iter().zip(names) {
            let m = m
                .as_deref()
                .unwrap_or_else(|| panic!("{name} accepted a bad argument"));
            assert!(m.starts_with(name), "{m}");
        }
        // A refused batch-norm forward leaves the running statistics alone.
        let bn = BatchNorm2d::new(4, 1e-5, 0.1, true, DType::F32, dev)?;
        assert!(
            bn.forward(&x.narrow(0, 0, 1)?.narrow(2, 0, 1)?.narrow(3, 0, 1)?)
                .is_err()
        );
        assert_eq!(bn.running_mean().unwrap().to_vec::<f32>()?, vec![0.0; 4]);
        assert_eq!(bn.num_batches_tracked().unwrap().to_vec::<i64>()?, [0]);
        let bn = bn.with_cumulative_average();
        assert!(
            bn.forward(&x.narrow(0, 0, 1)?.narrow(2, 0, 1)?.narrow(3, 0, 1)?)
                .is_err()
        );
        assert_eq!(bn.num_batches_tracked().unwrap().to_vec::<i64>()?, [0]);
        Ok(())
    }
);

/// A reference CPU device without the fused layer norm kernels (NOTE
/// [Fused families]): layer norm is composed from primitives there.
fn composing_cpu() -> Device {
    use kael_core::cpu::{CpuBackend, dtypes, ops};
    let be = CpuBackend::<{ dtypes::ALL }, { ops::ALL & !ops::LAYER_NORM }>::with_allocator(
        kael_core::shared::Shared::new(kael_core::allocator::GlobalAllocator::new()),
    );
    Device::from_backend(kael_core::shared::Shared::new(be))
}

/// Layer norm of `x` (`[4, 3, 7]`) over its last two dims with and
/// without affine parameters, and the gradients of `Σ y·c` for a fixed `c`,
/// all read back as f64.
fn layer_norm_and_grads(dev: &Device, affine: bool) -> Result<Vec<Vec<f64>>> {
    let mut rng = Rng::new(3);
    let cpu = Device::cpu();
    // Made on `dev` itself: `to_device` between two devices of one kind
    // keeps a tensor where it is, so it would never reach the composing one.
    let values = |shape: &[usize], rng: &mut Rng| -> Result<Tensor> {
        let v = Tensor::randn(shape, DType::F64, &cpu, rng)?.to_vec::<f64>()?;
        Tensor::from_slice(&v, shape, dev)
    };
    let make = |shape: &[usize], rng: &mut Rng| -> Result<Tensor> {
        values(shape, rng)?.requires_grad_(true)
    };
    let x = make(&[4, 3, 7], &mut rng)?;
    let (w, b) = (make(&[3, 7], &mut rng)?, make(&[3, 7], &mut rng)?);
    let c = values(&[4, 3, 7], &mut rng)?;
    let y = if affine {
        F::layer_norm(&x, &[3, 7], Some(&w), Some(&b), 1e-5)?
    } else {
        F::layer_norm(&x, &[3, 7], None, None, 1e-5)?
    };
    y.mul(&c)?.sum_all()?.backward()?;
    let mut out = vec![v64(&y), v64(&x.grad().expect("x has a gradient"))];
    if affine {
        out.push(v64(&w.grad().expect("w has a gradient")));
        out.push(v64(&b.grad().expect("b has a gradient")));
    }
    Ok(out)
}

test_device!(
    layer_norm_fused_kernels_equal_the_composition_with_and_without_affine,
    |dev| {
        for affine in [true, false] {
            let fused = layer_norm_and_grads(dev, affine)?;
            let composed = layer_norm_and_grads(&composing_cpu(), affine)?;
            for (f, c) in fused.iter().zip(&composed) {
                assert_close64(f, c, 1e-12);
            }
        }
        Ok(())
    }
);
