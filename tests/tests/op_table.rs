//! The op table (NOTE [Op table] in kael_core::ops) as a specification:
//! every smooth row's gradient against central differences, and each op's
//! values against independent references (f64 libm, hand-derived cases,
//! PyTorch's documented edge semantics), on every device.
#![allow(clippy::type_complexity)]
mod common;
use kael_core::ops::{BinaryOp, Domain, UnaryOp};
use kael_core::testing::{GradcheckOptions, describe, gradcheck};
use kael_core::{DType, Device, Error, Result, Tensor};

/// Deterministic values of `domain` (f64).
fn values(domain: Domain, n: usize, seed: u64) -> Vec<f64> {
    let mut r = kael_core::Rng::new(seed);
    (0..n)
        .map(|_| {
            let u = r.uniform();
            match domain {
                Domain::Positive => 0.25 + 2.0 * u,
                Domain::NonZero => {
                    let s = if r.below(2) == 0 { -1.0 } else { 1.0 };
                    s * (0.25 + 2.0 * u)
                }
                Domain::Unit => -0.9 + 1.8 * u,
                Domain::Near1 => 0.6 + 0.8 * u,
                _ => u * 3.0 - 1.5,
            }
        })
        .collect()
}

fn t(data: &[f64], shape: &[usize], dev: &Device) -> Tensor {
    Tensor::from_slice(data, shape, dev).unwrap()
}

test_device!(
    every_smooth_unary_row_matches_finite_differences,
    |dev: &Device| {
        let mut checked = 0;
        for case in UnaryOp::CASES.iter().filter(|c| c.smooth) {
            let x = t(&values(case.domain, 12, 3), &[3, 4], dev);
            let f = case.f;
            for (how, r) in [
                (
                    "contiguous",
                    gradcheck(
                        |v| f(&v[0]),
                        std::slice::from_ref(&x),
                        GradcheckOptions::default(),
                    )?,
                ),
                (
                    "transposed",
                    gradcheck(
                        |v| f(&v[0].t()?),
                        std::slice::from_ref(&x),
                        GradcheckOptions::default(),
                    )?,
                ),
            ] {
                assert!(
                    r.is_ok(),
                    "{} {} ({how}): {}",
                    case.op,
                    case.args,
                    describe(&r)
                );
            }
            checked += 1;
        }
        assert!(checked >= 20, "only {checked} smooth unary cases");
        Ok(())
    }
);

test_device!(
    every_smooth_binary_row_matches_finite_differences,
    |dev: &Device| {
        let mut checked = 0;
        for case in BinaryOp::CASES.iter().filter(|c| c.smooth && c.floats) {
            let a = t(&values(case.domains.0, 12, 5), &[3, 4], dev);
            let b = t(&values(case.domains.1, 4, 6), &[4], dev);
            let f = case.f;
            let r = gradcheck(|v| f(&v[0], &v[1]), &[a, b], GradcheckOptions::default())?;
            assert!(r.is_ok(), "{} (broadcast rhs): {}", case.op, describe(&r));
            checked += 1;
        }
        assert!(checked >= 5, "only {checked} smooth binary cases");
        Ok(())
    }
);

/// `op` on f32 and f64 inputs against `want` computed in f64, within
/// `ulps` f32 ulps (f32) and 1e-12 relative (f64).
fn close_to(
    dev: &Device,
    xs: &[f64],
    op: impl Fn(&Tensor) -> Result<Tensor>,
    want: impl Fn(f64) -> f64,
    ulps: f32,
) -> Result<()> {
    let x64 = t(xs, &[xs.len()], dev);
    let got64 = op(&x64)?.to_vec::<f64>()?;
    let x32 = x64.to_dtype(DType::F32)?;
    let got32 = op(&x32)?.to_vec::<f32>()?;
    for (i, &x) in xs.iter().enumerate() {
        let w = want(x);
        let (g64, g32) = (got64[i], got32[i]);
        if w.is_nan() {
            assert!(
                g64.is_nan() && g32.is_nan(),
                "x={x}: want NaN, got {g64} / {g32}"
            );
            continue;
        }
        assert!(
            g64 == w || (g64 - w).abs() <= 1e-12 * w.abs().max(1e-300),
            "f64 x={x}: want {w}, got {g64}"
        );
        let w32 = w as f32;
        let ulp = (w32.abs() * f32::EPSILON).max(f32::MIN_POSITIVE);
        assert!(
            g32 == w32 || (g32 - w32).abs() <= ulps * ulp,
            "f32 x={x}: want {w32}, got {g32}"
        );
    }
    Ok(())
}

/// A float-only op computes integers in float32 (NOTE [Type promotion],
/// rule 4): the values of the op on the converted tensor.
fn computes_ints_in_float32(
    dev: &Device,
    op: impl Fn(&Tensor) -> Result<Tensor>,
    name: &str,
) -> Result<()> {
    let x = Tensor::from_slice(&[1i64, 2], &[2], dev)?;
    let y = op(&x)?;
    assert_eq!(y.dtype(), DType::F32, "{name}");
    assert_eq!(
        y.to_vec::<f32>()?,
        op(&x.to_dtype(DType::F32)?)?.to_vec::<f32>()?,
        "{name}"
    );
    Ok(())
}

// ------------------------------------------------------------ log1p, expm1, rsqrt, reciprocal

const EDGES: [f64; 9] = [-2.5, -1.0, -1e-9, 0.0, 1e-9, 0.5, 1.0, 3.0, 20.0];

test_device!(log1p_matches_f64_libm_with_its_edges, |dev: &Device| {
    // -1 -> -inf, below -1 -> NaN, tiny x -> x (no cancellation)
    close_to(dev, &EDGES, Tensor::log1p, libm::log1p, 1.0)?;
    let y = t(&[-1.0, -2.0, f64::INFINITY], &[3], dev)
        .log1p()?
        .to_vec::<f64>()?;
    assert_eq!(y[0], f64::NEG_INFINITY);
    assert!(y[1].is_nan());
    assert_eq!(y[2], f64::INFINITY);
    computes_ints_in_float32(dev, Tensor::log1p, "log1p")
});

test_device!(expm1_matches_f64_libm_with_its_edges, |dev: &Device| {
    close_to(dev, &EDGES, Tensor::expm1, libm::expm1, 1.0)?;
    let y = t(&[f64::NEG_INFINITY, 1e-20], &[2], dev)
        .expm1()?
        .to_vec::<f64>()?;
    assert_eq!(y, vec![-1.0, 1e-20]);
    computes_ints_in_float32(dev, Tensor::expm1, "expm1")
});

test_device!(rsqrt_is_one_over_sqrt_with_inf_at_zero, |dev: &Device| {
    close_to(
        dev,
        &[0.25, 1.0, 2.0, 9.0, 1e-6],
        Tensor::rsqrt,
        |x| 1.0 / x.sqrt(),
        1.0,
    )?;
    let y = t(&[0.0, -0.0, -1.0], &[3], dev).rsqrt()?.to_vec::<f64>()?;
    assert_eq!((y[0], y[1]), (f64::INFINITY, f64::NEG_INFINITY));
    assert!(y[2].is_nan());
    computes_ints_in_float32(dev, Tensor::rsqrt, "rsqrt")
});

test_device!(reciprocal_is_recip, |dev: &Device| {
    let x = t(&[4.0, -0.5, 0.0], &[3], dev);
    assert_eq!(
        x.reciprocal()?.to_vec::<f64>()?,
        vec![0.25, -2.0, f64::INFINITY]
    );
    Ok(())
});

// ------------------------------------------------------------ floor, ceil, round, trunc

const HALVES: [f64; 12] = [
    -2.5, -1.5, -0.5, -0.49, -0.0, 0.0, 0.5, 1.5, 2.5, 2.7, -2.7, 1e300,
];

test_device!(floor_ceil_and_trunc_match_f64_libm, |dev: &Device| {
    close_to(dev, &HALVES[..11], Tensor::floor, libm::floor, 0.0)?;
    close_to(dev, &HALVES[..11], Tensor::ceil, libm::ceil, 0.0)?;
    close_to(dev, &HALVES[..11], Tensor::trunc, libm::trunc, 0.0)?;
    let big = t(&HALVES, &[12], dev).floor()?.to_vec::<f64>()?;
    assert_eq!(big[11], 1e300);
    Ok(())
});

test_device!(round_breaks_ties_to_even_as_pytorch, |dev: &Device| {
    // torch.round(torch.tensor([-2.5, -1.5, -0.5, -0.49, -0., 0., 0.5, 1.5, 2.5, 2.7, -2.7]))
    let want = [-2.0, -2.0, -0.0, -0.0, -0.0, 0.0, 0.0, 2.0, 2.0, 3.0, -3.0];
    for dt in [DType::F64, DType::F32] {
        let got = t(&HALVES[..11], &[11], dev)
            .to_dtype(dt)?
            .round()?
            .to_dtype(DType::F64)?;
        let got = got.to_vec::<f64>()?;
        assert_eq!(got, want, "{dt:?}");
        // the sign of zero too
        let signs: Vec<bool> = got.iter().map(|v| v.is_sign_negative()).collect();
        let want_signs: Vec<bool> = want.iter().map(|v: &f64| v.is_sign_negative()).collect();
        assert_eq!(signs, want_signs, "{dt:?}");
    }
    Ok(())
});

test_device!(rounding_keeps_integers_and_nan, |dev: &Device| {
    let i = Tensor::from_slice(&[-3i64, 0, 7], &[3], dev)?;
    for f in [Tensor::floor, Tensor::ceil, Tensor::round, Tensor::trunc] {
        assert_eq!(f(&i)?.to_vec::<i64>()?, vec![-3, 0, 7]);
        let y = f(&t(&[f64::NAN, f64::INFINITY], &[2], dev))?.to_vec::<f64>()?;
        assert!(y[0].is_nan() && y[1] == f64::INFINITY);
    }
    Ok(())
});

test_device!(rounding_gradients_are_zero, |dev: &Device| {
    for f in [Tensor::floor, Tensor::ceil, Tensor::round, Tensor::trunc] {
        let x = t(&[0.3, 1.7, -2.5], &[3], dev).requires_grad_(true)?;
        f(&x)?.mul_scalar(5.0)?.sum_all()?.backward()?;
        assert_eq!(
            x.grad().map(|g| g.to_vec::<f64>().unwrap()),
            Some(vec![0.0; 3])
        );
    }
    Ok(())
});

// ------------------------------------------------------------ softplus, hardtanh, relu6, leaky_relu, elu

/// d/dx of `f` at each of `xs`, by autograd, in f64.
fn grad_at(dev: &Device, xs: &[f64], f: impl Fn(&Tensor) -> Result<Tensor>) -> Result<Vec<f64>> {
    let x = t(xs, &[xs.len()], dev).requires_grad_(true)?;
    f(&x)?.sum_all()?.backward()?;
    Ok(x.grad()
        .map(|g| g.to_vec::<f64>())
        .transpose()?
        .unwrap_or_default())
}

test_device!(
    softplus_is_log1p_exp_and_linear_past_the_threshold,
    |dev: &Device| {
        let sp = |beta: f64, th: f64| {
            move |x: f64| {
                if x * beta > th {
                    x
                } else {
                    (x * beta).exp().ln_1p() / beta
                }
            }
        };
        close_to(
            dev,
            &[-30.0, -2.0, 0.0, 0.5, 3.0, 19.0, 25.0],
            |x| x.softplus(1.0, 20.0),
            sp(1.0, 20.0),
            2.0,
        )?;
        close_to(
            dev,
            &[-1.0, 0.4, 0.6, 2.0],
            |x| x.softplus(2.0, 1.0),
            sp(2.0, 1.0),
            2.0,
        )?;
        // the gradient: sigmoid(beta x) below the threshold, 1 above
        let g = grad_at(dev, &[0.4, 0.6], |x| x.softplus(2.0, 1.0))?;
        assert!(
            (g[0] - 1.0 / (1.0 + (-0.8f64).exp())).abs() < 1e-12 && g[1] == 1.0,
            "{g:?}"
        );
        for (beta, th) in [(0.0, 20.0), (f64::NAN, 20.0), (1.0, f64::NAN)] {
            let e = t(&[1.0], &[1], dev).softplus(beta, th).unwrap_err();
            assert!(
                matches!(e, Error::InvalidArgument { op: "softplus", .. }),
                "{e}"
            );
        }
        Ok(())
    }
);

test_device!(
    hardtanh_clamps_with_zero_gradient_at_the_bounds,
    |dev: &Device| {
        let xs = [-2.0, -1.0, 0.0, 1.0, 2.0];
        close_to(
            dev,
            &xs,
            |x| x.hardtanh(-1.0, 1.0),
            |x| x.clamp(-1.0, 1.0),
            0.0,
        )?;
        // PyTorch 2: the gradient is 1 strictly inside, for hardtanh and
        // for clamp with scalar bounds alike
        assert_eq!(
            grad_at(dev, &xs, |x| x.hardtanh(-1.0, 1.0))?,
            vec![0.0, 0.0, 1.0, 0.0, 0.0]
        );
        assert_eq!(
            grad_at(dev, &xs, |x| x.clamp(Some(-1.0), Some(1.0)))?,
            vec![0.0, 0.0, 1.0, 0.0, 0.0]
        );
        let e = t(&[1.0], &[1], dev).hardtanh(1.0, -1.0).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { op: "hardtanh", .. }),
            "{e}"
        );
        assert!(
            t(&[f64::NAN], &[1], dev)
                .hardtanh(-1.0, 1.0)?
                .to_vec::<f64>()?[0]
                .is_nan()
        );
        Ok(())
    }
);

test_device!(relu6_is_hardtanh_zero_six, |dev: &Device| {
    let x = t(&[-1.0, 0.0, 3.0, 6.0, 7.5], &[5], dev);
    assert_eq!(x.relu6()?.to_vec::<f64>()?, vec![0.0, 0.0, 3.0, 6.0, 6.0]);
    assert_eq!(
        grad_at(dev, &[-1.0, 0.0, 3.0, 6.0, 7.5], Tensor::relu6)?,
        vec![0.0, 0.0, 1.0, 0.0, 0.0]
    );
    Ok(())
});

test_device!(
    leaky_relu_scales_the_negative_side_and_its_gradient_at_zero,
    |dev: &Device| {
        let xs = [-2.0, -0.0, 0.0, 0.5, 3.0];
        close_to(
            dev,
            &xs,
            |x| x.leaky_relu(0.01),
            |x| if x > 0.0 { x } else { 0.01 * x },
            0.0,
        )?;
        // PyTorch: the gradient at 0 is the slope
        assert_eq!(
            grad_at(dev, &xs, |x| x.leaky_relu(0.2))?,
            vec![0.2, 0.2, 0.2, 1.0, 1.0]
        );
        let e = t(&[1.0], &[1], dev).leaky_relu(f64::INFINITY).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    op: "leaky_relu",
                    ..
                }
            ),
            "{e}"
        );
        Ok(())
    }
);

test_device!(elu_is_alpha_expm1_on_the_negative_side, |dev: &Device| {
    let xs = [-5.0, -1.0, -1e-8, 0.0, 2.0];
    close_to(
        dev,
        &xs,
        |x| x.elu(1.5),
        |x| if x > 0.0 { x } else { 1.5 * x.exp_m1() },
        2.0,
    )?;
    let g = grad_at(dev, &[-1.0, 0.0, 2.0], |x| x.elu(1.5))?;
    assert!((g[0] - 1.5 * (-1.0f64).exp()).abs() < 1e-12);
    assert_eq!(&g[1..], &[1.5, 1.0]);
    computes_ints_in_float32(dev, |x| x.elu(1.0), "elu")
});
