//! Issue 16's reduction, search and indexing ops: max/min with indices,
//! prod's gradient, norm, cumsum/cumprod, sort/argsort/topk, scatter,
//! nonzero and the in-place unary methods of the op table. Values are
//! hand-derived (or PyTorch's documented results), gradients checked by
//! finite differences, bad arguments refused by name with the inputs
//! unchanged, on every device.
#![allow(clippy::type_complexity)]
mod common;
use common::snapshot;
use kael_core::ops::UnaryOp;
use kael_core::testing::{GradcheckOptions, describe, gradcheck};
use kael_core::{DType, Device, Error, Result, Tensor};

fn check_grad(name: &str, f: impl Fn(&[Tensor]) -> Result<Tensor>, x: &Tensor) -> Result<()> {
    let r = gradcheck(f, std::slice::from_ref(x), GradcheckOptions::default())?;
    assert!(r.is_ok(), "{name}: {}", describe(&r));
    Ok(())
}

/// The gradient of `sum(f(x) * w)` with respect to `x`.
fn grad_of(
    x: &[f64],
    shape: &[usize],
    dev: &Device,
    w: &[f64],
    f: impl Fn(&Tensor) -> Result<Tensor>,
) -> Result<Vec<f64>> {
    let x = Tensor::from_slice(x, shape, dev)?.requires_grad_(true)?;
    let y = f(&x)?;
    let w = Tensor::from_slice(w, y.shape(), dev)?;
    y.mul(&w)?.sum_all()?.backward()?;
    x.grad().expect("a gradient").to_vec::<f64>()
}

/// NaN-aware equality of two float vectors (Debug prints NaN as NaN).
fn same(a: &[f64], b: &[f64]) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

// ------------------------------------------------- max/min with indices

test_device!(
    max_dim_with_indices_gives_values_and_first_index,
    |dev: &Device| {
        let x = Tensor::from_slice(&[1.0f32, 5.0, 5.0, 2.0, f32::NAN, 7.0], &[2, 3], dev)?;
        let (v, i) = x.max_dim_with_indices(1, false)?;
        assert_eq!(i.dtype(), DType::I64);
        assert_eq!(i.to_vec::<i64>()?, vec![1, 1]); // tie: first; NaN wins
        let v = v.to_vec::<f32>()?;
        assert_eq!(v[0], 5.0);
        assert!(v[1].is_nan());
        let (v, i) = x.max_dim_with_indices(0, true)?;
        assert_eq!((v.shape(), i.shape()), (&[1, 3][..], &[1, 3][..]));
        assert_eq!(i.to_vec::<i64>()?, vec![1, 1, 1]); // 2 > 1, NaN, 7 > 5
        Ok(())
    }
);

test_device!(min_dim_with_indices_on_integers, |dev: &Device| {
    let x = Tensor::from_slice(&[4i32, -2, 9, -2, 0, 3], &[2, 3], dev)?;
    let (v, i) = x.min_dim_with_indices(-1, false)?;
    assert_eq!(v.to_vec::<i32>()?, vec![-2, -2]);
    assert_eq!(i.to_vec::<i64>()?, vec![1, 0]);
    Ok(())
});

test_device!(
    max_dim_with_indices_gradient_goes_to_the_index,
    |dev: &Device| {
        let g = grad_of(&[1.0, 5.0, 3.0, 2.0], &[2, 2], dev, &[10.0, 20.0], |x| {
            Ok(x.max_dim_with_indices(1, false)?.0)
        })?;
        assert_eq!(g, vec![0.0, 10.0, 20.0, 0.0]);
        let x = Tensor::from_slice(&[0.3, -1.2, 2.5, 0.7, -0.4, 1.1], &[2, 3], dev)?;
        check_grad(
            "min_dim_with_indices",
            |v| Ok(v[0].min_dim_with_indices(0, true)?.0),
            &x,
        )
    }
);

// ---------------------------------------------------------------- prod

test_device!(
    prod_gradient_is_the_product_of_the_others_with_zeros,
    |dev: &Device| {
        // rows: no zero, one zero, two zeros
        let x = [2.0, 3.0, 4.0, 2.0, 0.0, 5.0, 0.0, 3.0, 0.0];
        let g = grad_of(&x, &[3, 3], dev, &[1.0, 1.0, 1.0], |t| t.prod_dim(1, false))?;
        assert_eq!(g, vec![12.0, 8.0, 6.0, 0.0, 10.0, 0.0, 0.0, 0.0, 0.0]);
        Ok(())
    }
);

test_device!(prod_gradients_match_finite_differences, |dev: &Device| {
    let x = Tensor::from_slice(
        &[0.5, -1.5, 2.0, 0.0, 1.25, -0.75, 0.0, 0.0, 1.5],
        &[3, 3],
        dev,
    )?;
    check_grad("prod_dim(1)", |v| v[0].prod_dim(1, false), &x)?;
    check_grad("prod_dim(0, keepdim)", |v| v[0].prod_dim(0, true), &x)?;
    let y = Tensor::from_slice(&[0.5, -1.5, 2.0, 1.25], &[4], dev)?;
    check_grad("prod_all", |v| v[0].prod_all(), &y)
});

test_device!(prod_all_multiplies_everything, |dev: &Device| {
    let x = Tensor::from_slice(&[1.5f32, -2.0, 2.0, 0.5], &[2, 2], dev)?;
    assert_eq!(x.prod_all()?.item::<f32>()?, -3.0);
    let i = Tensor::from_slice(&[3i32, -4, 5], &[3], dev)?;
    let p = i.prod_all()?;
    assert_eq!((p.dtype(), p.item::<i64>()?), (DType::I64, -60));
    assert_eq!(
        Tensor::from_slice::<f32>(&[], &[0], dev)?
            .prod_all()?
            .item::<f32>()?,
        1.0
    );
    let g = grad_of(&[2.0, 3.0, 0.0], &[3], dev, &[1.0], |t| t.prod_all())?;
    assert_eq!(g, vec![0.0, 0.0, 6.0]);
    Ok(())
});

// ---------------------------------------------------------------- norm

test_device!(norm_values_for_each_p, |dev: &Device| {
    let x = Tensor::from_slice(&[3.0f64, -4.0, 0.0, 0.0], &[2, 2], dev)?;
    assert_eq!(x.norm(2.0, &[], false)?.item::<f64>()?, 5.0);
    assert_eq!(x.norm(2.0, &[1], false)?.to_vec::<f64>()?, vec![5.0, 0.0]);
    assert_eq!(x.norm(1.0, &[0], true)?.to_vec::<f64>()?, vec![3.0, 4.0]);
    assert_eq!(x.norm(1.0, &[0], true)?.shape(), &[1, 2]);
    assert_eq!(x.norm(f64::INFINITY, &[], false)?.item::<f64>()?, 4.0);
    assert_eq!(
        x.norm(f64::NEG_INFINITY, &[1], false)?.to_vec::<f64>()?,
        vec![3.0, 0.0]
    );
    assert_eq!(x.norm(0.0, &[-1], false)?.to_vec::<f64>()?, vec![2.0, 0.0]);
    // p = 3: (27 + 64)^(1/3)
    let n3 = x.norm(3.0, &[], false)?.item::<f64>()?;
    assert!((n3 - 91f64.powf(1.0 / 3.0)).abs() < 1e-12, "{n3}");
    let f = Tensor::from_slice(&[3.0f32, 4.0], &[2], dev)?.to_dtype(DType::F16)?;
    let h = f.norm(2.0, &[], false)?;
    assert_eq!(
        (h.dtype(), h.to_dtype(DType::F32)?.item::<f32>()?),
        (DType::F16, 5.0)
    );
    Ok(())
});

test_device!(norm_gradient_at_zero_is_zero, |dev: &Device| {
    for p in [2.0, 3.0, 0.5] {
        let g = grad_of(&[0.0, 0.0], &[2], dev, &[1.0], |t| t.norm(p, &[], false))?;
        assert_eq!(g, vec![0.0, 0.0], "p = {p}");
    }
    // one zero element in a non-zero vector: its gradient is 0 for p < 1 too
    let g = grad_of(&[0.0, 2.0], &[2], dev, &[1.0], |t| t.norm(0.5, &[], false))?;
    assert_eq!(g, vec![0.0, 1.0]);
    let g = grad_of(&[0.0, -2.0], &[2], dev, &[1.0], |t| t.norm(0.0, &[], false))?;
    assert_eq!(g, vec![0.0, 0.0]);
    Ok(())
});

test_device!(norm_inf_gradient_is_shared_between_ties, |dev: &Device| {
    let g = grad_of(&[3.0, -3.0, 1.0], &[3], dev, &[1.0], |t| {
        t.norm(f64::INFINITY, &[], false)
    })?;
    assert_eq!(g, vec![0.5, -0.5, 0.0]);
    Ok(())
});

test_device!(norm_gradients_match_finite_differences, |dev: &Device| {
    let x = Tensor::from_slice(&[0.3, -1.2, 2.5, 0.7, -0.4, 1.1], &[2, 3], dev)?;
    for p in [2.0, 1.0, 3.0, 0.5, 1.5, f64::INFINITY, f64::NEG_INFINITY] {
        check_grad(&format!("norm p={p}"), |v| v[0].norm(p, &[1], false), &x)?;
        check_grad(&format!("norm p={p} all"), |v| v[0].norm(p, &[], true), &x)?;
    }
    Ok(())
});

// ------------------------------------------------------- cumsum/cumprod

test_device!(cumsum_values_and_integer_promotion, |dev: &Device| {
    let x = Tensor::arange(1.0f32, 7.0, dev)?.reshape(&[2, 3])?;
    assert_eq!(
        x.cumsum(1)?.to_vec::<f32>()?,
        vec![1.0, 3.0, 6.0, 4.0, 9.0, 15.0]
    );
    assert_eq!(
        x.cumsum(-2)?.to_vec::<f32>()?,
        vec![1.0, 2.0, 3.0, 5.0, 7.0, 9.0]
    );
    let long = Tensor::ones(&[37], DType::F64, dev)?
        .cumsum(0)?
        .to_vec::<f64>()?;
    assert_eq!(long, (1..=37).map(f64::from).collect::<Vec<_>>());
    let b = Tensor::from_slice(&[true, false, true], &[3], dev)?.cumsum(0)?;
    assert_eq!((b.dtype(), b.to_vec::<i64>()?), (DType::I64, vec![1, 1, 2]));
    let u = Tensor::from_slice(&[200u8, 100], &[2], dev)?.cumsum(0)?;
    assert_eq!(u.to_vec::<i64>()?, vec![200, 300]);
    let s = Tensor::scalar(2.5f32, dev)?.cumsum(0)?;
    assert_eq!((s.shape(), s.item::<f32>()?), (&[][..], 2.5));
    Ok(())
});

test_device!(cumsum_gradient_is_the_reversed_cumsum, |dev: &Device| {
    let g = grad_of(&[0.5, -1.0, 2.0], &[3], dev, &[1.0, 2.0, 3.0], |t| {
        t.cumsum(0)
    })?;
    assert_eq!(g, vec![6.0, 5.0, 3.0]);
    let x = Tensor::from_slice(&[0.3, -1.2, 2.5, 0.7, -0.4, 1.1, 0.9, 2.0], &[2, 4], dev)?;
    check_grad("cumsum", |v| v[0].cumsum(1), &x)
});

test_device!(cumprod_values_and_gradients_with_zeros, |dev: &Device| {
    let x = Tensor::from_slice(&[2i64, 3, 0, 5, -1], &[5], dev)?;
    assert_eq!(x.cumprod(0)?.to_vec::<i64>()?, vec![2, 6, 0, 0, 0]);
    // d/dx of [x0, x0 x1, x0 x1 x2] summed: [1 + x1 + x1 x2, x0 + x0 x2, x0 x1]
    let g = grad_of(&[2.0, 0.0, 4.0], &[3], dev, &[1.0, 1.0, 1.0], |t| {
        t.cumprod(0)
    })?;
    assert_eq!(g, vec![1.0, 2.0 + 8.0, 0.0]);
    let y = Tensor::from_slice(&[0.5, -1.5, 0.0, 1.25, 2.0, 0.75], &[2, 3], dev)?;
    check_grad("cumprod", |v| v[0].cumprod(-1), &y)
});

// ------------------------------------------------------ sort and topk

test_device!(sort_is_stable_and_puts_nan_last, |dev: &Device| {
    let x = Tensor::from_slice(&[2.0f64, f64::NAN, -1.0, 2.0, 0.0, f64::NAN], &[6], dev)?;
    let (v, i) = x.sort(0, false)?;
    assert_eq!(i.to_vec::<i64>()?, vec![2, 4, 0, 3, 1, 5]);
    assert!(same(
        &v.to_vec::<f64>()?,
        &[-1.0, 0.0, 2.0, 2.0, f64::NAN, f64::NAN]
    ));
    let (v, i) = x.sort(0, true)?;
    assert_eq!(i.to_vec::<i64>()?, vec![1, 5, 0, 3, 4, 2]);
    assert!(same(
        &v.to_vec::<f64>()?,
        &[f64::NAN, f64::NAN, 2.0, 2.0, 0.0, -1.0]
    ));
    Ok(())
});

test_device!(sort_along_each_dim_of_a_matrix, |dev: &Device| {
    let x = Tensor::from_slice(&[3i32, 1, 2, 0, 5, 2], &[2, 3], dev)?;
    let (v, i) = x.sort(1, false)?;
    assert_eq!(v.to_vec::<i32>()?, vec![1, 2, 3, 0, 2, 5]);
    assert_eq!(i.to_vec::<i64>()?, vec![1, 2, 0, 0, 2, 1]);
    let (v, i) = x.t()?.sort(-1, true)?;
    assert_eq!(v.to_vec::<i32>()?, vec![3, 0, 5, 1, 2, 2]);
    assert_eq!(i.to_vec::<i64>()?, vec![0, 1, 1, 0, 0, 1]);
    assert_eq!(
        x.argsort(0, false)?.to_vec::<i64>()?,
        vec![1, 0, 0, 0, 1, 1]
    );
    Ok(())
});

test_device!(sort_values_carry_the_gradient, |dev: &Device| {
    let g = grad_of(&[3.0, 1.0, 2.0], &[3], dev, &[10.0, 20.0, 30.0], |t| {
        Ok(t.sort(0, false)?.0)
    })?;
    assert_eq!(g, vec![30.0, 10.0, 20.0]);
    let x = Tensor::from_slice(&[0.3, -1.2, 2.5, 0.7, -0.4, 1.1], &[2, 3], dev)?;
    check_grad("sort", |v| Ok(v[0].sort(1, true)?.0), &x)?;
    check_grad("topk", |v| Ok(v[0].topk(2, 1, true, true)?.0), &x)
});

test_device!(topk_picks_the_k_largest_or_smallest, |dev: &Device| {
    let x = Tensor::from_slice(&[1.0f32, 7.0, 3.0, 7.0, 5.0, 0.0], &[2, 3], dev)?;
    let (v, i) = x.topk(2, 1, true, true)?;
    assert_eq!(v.to_vec::<f32>()?, vec![7.0, 3.0, 7.0, 5.0]);
    assert_eq!(i.to_vec::<i64>()?, vec![1, 2, 0, 1]);
    let (v, i) = x.topk(1, 0, false, false)?;
    assert_eq!(
        (v.shape(), v.to_vec::<f32>()?),
        (&[1, 3][..], vec![1.0, 5.0, 0.0])
    );
    assert_eq!(i.to_vec::<i64>()?, vec![0, 1, 1]);
    let (v, _) = x.topk(0, 1, true, true)?;
    assert_eq!(v.shape(), &[2, 0]);
    let n = Tensor::from_slice(&[1.0f32, f32::NAN, 3.0], &[3], dev)?;
    assert_eq!(n.topk(1, 0, true, true)?.1.to_vec::<i64>()?, vec![1]);
    assert_eq!(n.topk(2, 0, false, true)?.1.to_vec::<i64>()?, vec![0, 2]);
    Ok(())
});

// ------------------------------------------------------------- nonzero

test_device!(
    nonzero_lists_coordinates_in_row_major_order,
    |dev: &Device| {
        let x = Tensor::from_slice(&[0.0f32, 1.0, 0.0, f32::NAN, 0.0, -2.0], &[2, 3], dev)?;
        let nz = x.nonzero()?;
        assert_eq!((nz.dtype(), nz.shape()), (DType::I64, &[3, 2][..]));
        assert_eq!(nz.to_vec::<i64>()?, vec![0, 1, 1, 0, 1, 2]);
        assert_eq!(x.t()?.nonzero()?.to_vec::<i64>()?, vec![0, 1, 1, 0, 2, 1]);
        let b = Tensor::from_slice(&[false, true, true], &[3], dev)?.nonzero()?;
        assert_eq!((b.shape(), b.to_vec::<i64>()?), (&[2, 1][..], vec![1, 2]));
        assert_eq!(
            Tensor::zeros(&[2, 2], DType::I32, dev)?.nonzero()?.shape(),
            &[0, 2]
        );
        assert_eq!(Tensor::scalar(3i64, dev)?.nonzero()?.shape(), &[1, 0]);
        Ok(())
    }
);

// ------------------------------------------------------------- scatter

test_device!(
    scatter_writes_src_and_the_last_duplicate_wins,
    |dev: &Device| {
        let x = Tensor::from_slice(&[9.0f32; 6], &[2, 3], dev)?;
        let i = Tensor::from_slice(&[2i64, 0, 1, 1], &[2, 2], dev)?;
        let s = Tensor::from_slice(&[1.0f32, 2.0, -0.0, 3.0, 4.0, 5.0], &[2, 3], dev)?;
        let y = x.scatter(1, &i, &s)?;
        // row 0: col 2 <- 1, col 0 <- 2; row 1: col 1 <- 3 then 4 (4 wins)
        assert_eq!(y.to_vec::<f32>()?, vec![2.0, 9.0, 1.0, 9.0, 4.0, 9.0]);
        assert_eq!(x.to_vec::<f32>()?, vec![9.0; 6]);
        // -0.0 keeps its sign
        let z = x.scatter(
            1,
            &Tensor::from_slice(&[1i32], &[1, 1], dev)?,
            &s.narrow(1, 2, 1)?,
        )?;
        assert!(z.to_vec::<f32>()?[1].is_sign_negative());
        let b = Tensor::from_slice(&[false; 3], &[3], dev)?;
        let bi = Tensor::from_slice(&[1i64], &[1], dev)?;
        let bs = Tensor::from_slice(&[true], &[1], dev)?;
        assert_eq!(
            b.scatter(0, &bi, &bs)?.to_vec::<bool>()?,
            vec![false, true, false]
        );
        Ok(())
    }
);

test_device!(scatter_value_fills_the_indexed_positions, |dev: &Device| {
    let x = Tensor::arange(0i64, 6, dev)?.reshape(&[3, 2])?;
    let i = Tensor::from_slice(&[2i64, 0], &[1, 2], dev)?;
    let y = x.scatter_value(0, &i, -1.0)?;
    assert_eq!(y.to_vec::<i64>()?, vec![0, -1, 2, 3, -1, 5]);
    Ok(())
});

test_device!(
    scatter_gradients_mask_self_and_gather_src,
    |dev: &Device| {
        let i = Tensor::from_slice(&[2i64, 0], &[1, 2], dev)?;
        // the gradient of sum(scatter(x, 0, i, s) * w)
        let w = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let gx = grad_of(&[0.0; 6], &[3, 2], dev, &w, |x| {
            x.scatter(0, &i, &Tensor::ones(&[1, 2], DType::F64, dev)?)
        })?;
        // written: (2, 0) and (0, 1)
        assert_eq!(gx, vec![1.0, 0.0, 3.0, 4.0, 0.0, 6.0]);
        let gs = grad_of(&[7.0, 8.0], &[1, 2], dev, &w, |s| {
            Tensor::zeros(&[3, 2], DType::F64, dev)?.scatter(0, &i, s)
        })?;
        assert_eq!(gs, vec![5.0, 2.0]);
        let gv = grad_of(&[0.0; 6], &[3, 2], dev, &w, |x| x.scatter_value(0, &i, 1.0))?;
        assert_eq!(gv, vec![1.0, 0.0, 3.0, 4.0, 0.0, 6.0]);
        let x = Tensor::from_slice(&[0.3, -1.2, 2.5, 0.7, -0.4, 1.1], &[3, 2], dev)?;
        let s = Tensor::from_slice(&[1.5, -0.5], &[1, 2], dev)?;
        let r = gradcheck(
            |v| v[0].scatter(0, &i, &v[1]),
            &[x, s],
            GradcheckOptions::default(),
        )?;
        assert!(r.is_ok(), "scatter: {}", describe(&r));
        Ok(())
    }
);

// -------------------------------------------------------------- errors

/// Asserts `r` is refused by `op` with a message naming it.
fn refused<T: std::fmt::Debug>(r: Result<T>, op: &str) -> Error {
    let e = r.expect_err("the op must be refused");
    let msg = e.to_string();
    assert!(msg.starts_with(op), "message {msg:?} does not name {op}");
    e
}

test_device!(bad_dims_are_refused_by_name, |dev: &Device| {
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], dev)?;
    let snap = snapshot(&x);
    for (op, r) in [
        ("sort", x.sort(2, false).map(|_| ())),
        ("argsort", x.argsort(-3, false).map(|_| ())),
        ("topk", x.topk(1, 5, true, true).map(|_| ())),
        ("cumsum", x.cumsum(2).map(|_| ())),
        ("cumprod", x.cumprod(-3).map(|_| ())),
        (
            "max_dim_with_indices",
            x.max_dim_with_indices(2, false).map(|_| ()),
        ),
        (
            "min_dim_with_indices",
            x.min_dim_with_indices(-3, true).map(|_| ()),
        ),
        ("norm", x.norm(2.0, &[2], false).map(|_| ())),
        ("prod_dim", x.prod_dim(2, false).map(|_| ())),
        (
            "scatter",
            x.scatter(2, &Tensor::zeros(&[1, 1], DType::I64, dev)?, &x)
                .map(|_| ()),
        ),
    ] {
        let e = refused(r, op);
        assert!(matches!(e, Error::DimOutOfRange { .. }), "{op}: {e}");
    }
    assert_eq!(snapshot(&x), snap);
    Ok(())
});

test_device!(topk_refuses_k_larger_than_the_dim, |dev: &Device| {
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], dev)?;
    let snap = snapshot(&x);
    let e = refused(x.topk(4, 0, true, true), "topk");
    assert!(matches!(e, Error::InvalidArgument { .. }));
    assert!(e.to_string().contains("k <="));
    assert_eq!(snapshot(&x), snap);
    Ok(())
});

test_device!(norm_refuses_bad_p_and_integer_inputs, |dev: &Device| {
    let x = Tensor::from_slice(&[1.0f32, 2.0], &[2], dev)?;
    for p in [-1.0, -0.5, f64::NAN] {
        refused(x.norm(p, &[], false), "norm");
    }
    refused(x.norm(2.0, &[0, -1], false), "norm");
    let i = Tensor::from_slice(&[1i64, 2], &[2], dev)?;
    assert!(matches!(
        refused(i.norm(2.0, &[], false), "norm"),
        Error::UnsupportedDType { .. }
    ));
    let e = Tensor::zeros(&[0], DType::F32, dev)?;
    refused(e.norm(f64::INFINITY, &[], false), "norm");
    Ok(())
});

test_device!(
    empty_dims_refused_by_the_index_reductions,
    |dev: &Device| {
        let e = Tensor::zeros(&[2, 0], DType::F32, dev)?;
        refused(e.max_dim_with_indices(1, false), "max_dim_with_indices");
        refused(e.min_dim_with_indices(1, false), "min_dim_with_indices");
        Ok(())
    }
);

test_device!(
    scatter_refuses_bad_indices_and_shapes_unchanged,
    |dev: &Device| {
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], dev)?;
        let s = Tensor::from_slice(&[5.0f32, 6.0], &[1, 2], dev)?;
        let (sx, ss) = (snapshot(&x), snapshot(&s));
        let float_index = Tensor::zeros(&[1, 2], DType::F32, dev)?;
        assert!(matches!(
            refused(x.scatter(0, &float_index, &s), "scatter"),
            Error::UnsupportedDType { .. }
        ));
        for bad in [2i64, -1] {
            let i = Tensor::from_slice(&[0i64, bad], &[1, 2], dev)?;
            assert!(matches!(
                refused(x.scatter(0, &i, &s), "scatter"),
                Error::IndexOutOfRange { .. }
            ));
            refused(x.scatter_value(0, &i, 1.0), "scatter_value");
        }
        // an index larger than src
        let big = Tensor::zeros(&[2, 2], DType::I64, dev)?;
        assert!(matches!(
            refused(x.scatter(0, &big, &s), "scatter"),
            Error::InvalidArgument { .. }
        ));
        // ranks differ
        let flat = Tensor::zeros(&[2], DType::I64, dev)?;
        assert!(matches!(
            refused(x.scatter(0, &flat, &s), "scatter"),
            Error::RankMismatch { .. }
        ));
        // dtypes differ
        let s64 = s.to_dtype(DType::F64)?;
        refused(
            x.scatter(0, &Tensor::zeros(&[1, 2], DType::I64, dev)?, &s64),
            "scatter",
        );
        assert_eq!((snapshot(&x), snapshot(&s)), (sx, ss));
        Ok(())
    }
);

// ---------------------------------------------------- in-place unary ops

test_device!(every_inplace_unary_method_matches_its_op, |dev: &Device| {
    assert_eq!(UnaryOp::INPLACE_CASES.len(), UnaryOp::COUNT);
    let vals = [-1.5, -0.25, 0.0, 0.5, 2.0];
    for case in UnaryOp::INPLACE_CASES {
        for dtype in [DType::F64, DType::F32, DType::I64] {
            if dtype == DType::I64 && !case.ints {
                continue;
            }
            let x = Tensor::from_slice(&vals, &[5], dev)?.to_dtype(dtype)?;
            let want = (case.out_of_place)(&x)?;
            let y = x.deep_clone()?;
            (case.inplace)(&y)?;
            assert_eq!(y.version(), 1, "{}", case.op);
            let (got, want) = (
                y.to_dtype(DType::F64)?.to_vec::<f64>()?,
                want.to_dtype(DType::F64)?.to_vec::<f64>()?,
            );
            assert!(
                same(&got, &want),
                "{} {dtype:?}: {got:?} vs {want:?}",
                case.op
            );
        }
    }
    Ok(())
});

test_device!(
    inplace_unary_refuses_leaves_that_require_grad,
    |dev: &Device| {
        for case in UnaryOp::INPLACE_CASES {
            let x = Tensor::from_slice(&[0.5f64, 2.0], &[2], dev)?.requires_grad_(true)?;
            let snap = snapshot(&x);
            let e = refused((case.inplace)(&x), case.op);
            assert!(matches!(e, Error::Autograd { .. }), "{}: {e}", case.op);
            assert_eq!((snapshot(&x), x.version()), (snap, 0), "{}", case.op);
        }
        // integer-only refusals name the in-place method too
        let i = Tensor::from_slice(&[1i64, 2], &[2], dev)?;
        refused(i.exp_(), "exp_");
        Ok(())
    }
);

test_device!(
    inplace_unary_gradients_match_finite_differences,
    |dev: &Device| {
        let x = Tensor::from_slice(&[0.3, 1.2, 2.5, 0.7], &[4], dev)?;
        let cases: [(&str, fn(&Tensor) -> Result<()>); 6] = [
            ("exp_", |t| t.exp_()),
            ("sqrt_", |t| t.sqrt_()),
            ("sigmoid_", |t| t.sigmoid_()),
            ("tanh_", |t| t.tanh_()),
            ("clamp_", |t| t.clamp_(Some(0.5), Some(2.0))),
            ("powf_", |t| t.powf_(2.5)),
        ];
        for (name, op) in cases {
            check_grad(
                name,
                |v| {
                    let y = v[0].mul_scalar(1.0)?;
                    op(&y)?;
                    Ok(y)
                },
                &x,
            )?;
        }
        Ok(())
    }
);
