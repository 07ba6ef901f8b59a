//! Every differentiable op's backward checked against central differences
//! in f64 (kael_core::testing::gradcheck), with non-contiguous and broadcast
//! operands built inside the checked function.
#![allow(clippy::type_complexity, clippy::cloned_ref_to_slice_refs)]
mod common;
use kael_core::testing::{GradcheckOptions, describe, gradcheck};
use kael_core::{Device, Result, Tensor};

fn t(data: &[f64], shape: &[usize], dev: &Device) -> Tensor {
    Tensor::from_slice(data, shape, dev).unwrap()
}

/// Deterministic, distinct, non-symmetric values in roughly [-1.5, 1.5].
fn vals(n: usize, seed: u64) -> Vec<f64> {
    let mut r = kael_core::Rng::new(seed);
    (0..n).map(|_| r.uniform() * 3.0 - 1.5).collect()
}

fn positive(n: usize, seed: u64) -> Vec<f64> {
    vals(n, seed).iter().map(|v| v.abs() + 0.2).collect()
}

#[track_caller]
fn check(f: impl Fn(&[Tensor]) -> Result<Tensor>, inputs: &[Tensor]) {
    let r = gradcheck(f, inputs, GradcheckOptions::default()).unwrap();
    assert!(r.is_ok(), "{}", describe(&r));
}

macro_rules! unary_grad {
    ($($name:ident, $pos:expr, |$x:ident| $e:expr;)*) => {$(
        test_device!($name, |dev: &Device| {
            let data = if $pos { positive(12, 1) } else { vals(12, 1) };
            let x0 = t(&data, &[3, 4], dev);
            // contiguous
            check(|v| { let $x = v[0].clone(); $e }, &[x0.clone()]);
            // transposed and step-sliced operands
            check(|v| { let $x = v[0].t()?; $e }, &[x0.clone()]);
            check(|v| { let $x = v[0].slice(1, 0, 4, 2)?; $e }, &[x0]);
            Ok(())
        });
    )*};
}

unary_grad! {
    neg, false, |x| x.neg();
    abs, false, |x| x.abs();
    exp, false, |x| x.exp();
    log, true, |x| x.log();
    sqrt, true, |x| x.sqrt();
    sqr, false, |x| x.sqr();
    recip, true, |x| x.recip();
    tanh, false, |x| x.tanh();
    sigmoid, false, |x| x.sigmoid();
    relu, false, |x| x.relu();
    gelu, false, |x| x.gelu();
    gelu_tanh, false, |x| x.gelu_tanh();
    silu, false, |x| x.silu();
    sin, false, |x| x.sin();
    cos, false, |x| x.cos();
    erf, false, |x| x.erf();
    powf, true, |x| x.powf(2.5);
    clamp, false, |x| x.clamp(Some(-0.5), Some(0.7));
    affine, false, |x| x.affine(-1.5, 0.25);
}

macro_rules! binary_grad {
    ($($name:ident, $pos:expr, |$a:ident, $b:ident| $e:expr;)*) => {$(
        test_device!($name, |dev: &Device| {
            let make = |n, s| if $pos { positive(n, s) } else { vals(n, s) };
            let a0 = t(&make(6, 2), &[2, 3], dev);
            let b0 = t(&make(6, 3), &[2, 3], dev);
            check(|v| { let ($a, $b) = (v[0].clone(), v[1].clone()); $e }, &[a0.clone(), b0.clone()]);
            // broadcast: [2,3] with [3] and [2,1]
            let row = t(&make(3, 4), &[3], dev);
            let col = t(&make(2, 5), &[2, 1], dev);
            check(|v| { let ($a, $b) = (v[0].clone(), v[1].clone()); $e }, &[a0.clone(), row]);
            check(|v| { let ($a, $b) = (v[0].clone(), v[1].clone()); $e }, &[col, b0.clone()]);
            // transposed operand
            check(|v| { let ($a, $b) = (v[0].t()?, v[1].t()?); $e }, &[a0, b0]);
            Ok(())
        });
    )*};
}

binary_grad! {
    add, false, |a, b| a.add(&b);
    sub, false, |a, b| a.sub(&b);
    mul, false, |a, b| a.mul(&b);
    div, true, |a, b| a.div(&b);
    maximum, false, |a, b| a.maximum(&b);
    minimum, false, |a, b| a.minimum(&b);
    pow, true, |a, b| a.pow(&b);
}

test_device!(
    where_cond_routes_gradients_to_the_chosen_branch,
    |dev: &Device| {
        let a = t(&vals(6, 7), &[2, 3], dev);
        let b = t(&vals(3, 8), &[3], dev);
        check(
            |v| {
                v[0].gt(&v[1].broadcast_to(&[2, 3])?)?
                    .where_cond(&v[0], &v[1])
            },
            &[a, b],
        );
        Ok(())
    }
);

test_device!(views_have_exact_gradients, |dev: &Device| {
    let x = t(&vals(24, 9), &[2, 3, 4], dev);
    let cases: Vec<Box<dyn Fn(&Tensor) -> Result<Tensor>>> = vec![
        Box::new(|x| x.narrow(2, 1, 2)),
        Box::new(|x| x.slice(2, 0, 4, 3)),
        Box::new(|x| x.slice(1, -2, 3, 1)),
        Box::new(|x| x.select(1, -1)),
        Box::new(|x| x.transpose(0, 2)),
        Box::new(|x| x.permute(&[1, 2, 0])),
        Box::new(|x| x.narrow(0, 0, 1)?.expand(&[3, 2, 3, 4])),
        Box::new(|x| x.reshape(&[4, 6])),
        Box::new(|x| x.view(&[6, -1])),
        Box::new(|x| x.unsqueeze(1)?.squeeze()),
        Box::new(|x| x.flatten(0, 1)),
        Box::new(|x| x.unfold(2, 3, 1)), // overlapping windows
        Box::new(|x| x.diagonal(1, 1, 2)),
        Box::new(|x| x.diagonal(-1, 0, 2)),
        Box::new(|x| x.as_strided(&[3, 3], &[2, 1], 1)), // overlapping
        Box::new(|x| Ok(x.chunk(2, 2)?.remove(1))),
        Box::new(|x| Ok(x.split(2, 1)?.remove(1))),
        Box::new(|x| x.t_last()),
        Box::new(|x| x.permute(&[2, 0, 1])?.contiguous()),
        Box::new(|x| x.transpose(1, 2)?.reshape(&[-1])), // reshape that copies
    ];
    for (i, c) in cases.iter().enumerate() {
        let r = gradcheck(
            |v| c(&v[0])?.mul(&c(&v[0])?.sin()?),
            &[x.clone()],
            GradcheckOptions::default(),
        )?;
        assert!(r.is_ok(), "case {i}: {}", describe(&r));
    }
    Ok(())
});

trait TLast {
    fn t_last(&self) -> Result<Tensor>;
}
impl TLast for Tensor {
    fn t_last(&self) -> Result<Tensor> {
        self.transpose(-1, -2)
    }
}

test_device!(reductions_have_exact_gradients, |dev: &Device| {
    let x = t(&vals(24, 10), &[2, 3, 4], dev);
    let cases: Vec<Box<dyn Fn(&Tensor) -> Result<Tensor>>> = vec![
        Box::new(|x| x.sum(&[1], false)),
        Box::new(|x| x.sum(&[0, 2], true)),
        Box::new(|x| x.sum_all()),
        Box::new(|x| x.mean(&[-1], false)),
        Box::new(|x| x.mean_all()),
        Box::new(|x| x.max_dim(1, false)),
        Box::new(|x| x.min_dim(-1, true)),
        Box::new(|x| x.max_all()),
        Box::new(|x| x.min_all()),
        Box::new(|x| x.softmax(-1)),
        Box::new(|x| x.softmax(0)),
        Box::new(|x| x.log_softmax(1)),
        Box::new(|x| x.logsumexp(2, false)),
        Box::new(|x| x.t_last()?.sum(&[1], false)),
        Box::new(|x| x.t_last()?.softmax(1)),
    ];
    for (i, c) in cases.iter().enumerate() {
        let r = gradcheck(|v| c(&v[0]), &[x.clone()], GradcheckOptions::default())?;
        assert!(r.is_ok(), "case {i}: {}", describe(&r));
    }
    Ok(())
});

test_device!(matmul_has_exact_gradients, |dev: &Device| {
    let a = t(&vals(12, 11), &[3, 4], dev);
    let b = t(&vals(20, 12), &[4, 5], dev);
    check(|v| v[0].matmul(&v[1]), &[a.clone(), b.clone()]);
    check(|v| v[1].t()?.matmul(&v[0].t()?), &[a.clone(), b.clone()]); // transposed operands
    let batched = t(&vals(24, 13), &[2, 3, 4], dev);
    check(|v| v[0].matmul(&v[1]), &[batched.clone(), b.clone()]); // broadcast batch
    let vec4 = t(&vals(4, 14), &[4], dev);
    check(|v| v[0].matmul(&v[1]), &[a.clone(), vec4.clone()]); // matrix-vector
    check(|v| v[1].matmul(&v[0]), &[b, vec4.clone()]); // vector-matrix
    check(|v| v[0].matmul(&v[1]), &[vec4.clone(), vec4]); // dot
    Ok(())
});

test_device!(
    cat_stack_and_indexing_have_exact_gradients,
    |dev: &Device| {
        let a = t(&vals(6, 15), &[2, 3], dev);
        let b = t(&vals(9, 16), &[3, 3], dev);
        check(|v| Tensor::cat(&[&v[0], &v[1]], 0), &[a.clone(), b.clone()]);
        check(
            |v| Tensor::cat(&[&v[0].t()?, &v[1].t()?], -1),
            &[a.clone(), b.clone()],
        );
        check(
            |v| Tensor::stack(&[&v[0], &v[1].narrow(0, 0, 2)?], 1),
            &[a.clone(), b.clone()],
        );
        let idx = Tensor::from_slice(&[2i64, 0, 2], &[3], dev)?; // repeated index: gradients add
        check(|v| v[0].index_select(1, &idx), &[a.clone()]);
        let gi = Tensor::from_slice(&[0i64, 2, 1, 1, 0, 0], &[2, 3], dev)?;
        check(|v| v[0].gather(1, &gi), &[a.clone()]);
        let ids = Tensor::from_slice(&[1i64, 0, 1, 2], &[2, 2], dev)?;
        check(|v| Tensor::embedding(&v[0], &ids), &[b.clone()]);
        let src = t(&vals(6, 17), &[2, 3], dev);
        let rows = Tensor::from_slice(&[2i64, 2], &[2], dev)?;
        check(
            |v| v[0].index_add(0, &rows, &v[1]),
            &[b.clone(), src.clone()],
        );
        let si = Tensor::from_slice(&[0i64, 1, 2, 2, 1, 0], &[2, 3], dev)?;
        check(|v| v[0].scatter_add(0, &si, &v[1]), &[b, src]);
        Ok(())
    }
);

test_device!(copies_and_casts_pass_gradients_through, |dev: &Device| {
    let a = t(&vals(6, 18), &[2, 3], dev);
    check(|v| v[0].t()?.deep_clone(), &[a.clone()]);
    check(|v| v[0].t()?.contiguous(), &[a.clone()]);
    check(|v| v[0].to_device(&Device::cpu()), &[a.clone()]);
    // through f32 and back: exact for this step size only with loose tolerance
    let loose = GradcheckOptions {
        eps: 1e-2,
        atol: 1e-3,
        rtol: 1e-3,
        ..Default::default()
    };
    let r = gradcheck(
        |v| {
            v[0].to_dtype(kael_core::DType::F32)?
                .to_dtype(kael_core::DType::F64)
        },
        &[a],
        loose,
    )?;
    assert!(r.is_ok(), "{}", describe(&r));
    Ok(())
});

test_device!(
    inplace_ops_on_non_leaves_have_exact_gradients,
    |dev: &Device| {
        let a = t(&vals(6, 19), &[2, 3], dev);
        let b = t(&positive(3, 20), &[3], dev);
        let cases: Vec<Box<dyn Fn(&Tensor, &Tensor) -> Result<Tensor>>> = vec![
            Box::new(|a, b| {
                let y = a.mul_scalar(2.0)?;
                y.add_(b)?;
                y.mul(&y)
            }),
            Box::new(|a, b| {
                let y = a.sin()?;
                y.sub_(b)?;
                Ok(y)
            }),
            Box::new(|a, b| {
                let y = a.affine(1.0, 0.0)?;
                y.mul_(b)?;
                y.exp()
            }),
            Box::new(|a, b| {
                let y = a.affine(1.0, 0.0)?;
                y.div_(b)?;
                y.sqr()
            }),
            Box::new(|a, _| {
                let y = a.affine(1.0, 0.0)?;
                y.clamp_(Some(-0.3), Some(0.4))?;
                y.mul(a)
            }),
            Box::new(|a, b| {
                let y = a.affine(1.0, 0.0)?;
                y.copy_(b)?;
                y.mul(a)
            }),
            Box::new(|a, _| {
                let y = a.affine(1.0, 0.0)?;
                y.fill_(0.5)?;
                y.mul(a)
            }),
        ];
        for (i, c) in cases.iter().enumerate() {
            let r = gradcheck(
                |v| c(&v[0], &v[1]),
                &[a.clone(), b.clone()],
                GradcheckOptions::default(),
            )?;
            assert!(r.is_ok(), "case {i}: {}", describe(&r));
        }
        Ok(())
    }
);
