//! The binary and comparison rows of the op table (NOTE [Op table] in
//! kael_core::ops) as a specification: values against f64 libm, Python's
//! and C's remainder conventions and PyTorch's documented results, errors
//! for bad inputs, on every device. Gradients of every smooth row are
//! checked by finite differences in `op_table.rs`.
mod common;
use kael_core::{DType, Device, Error, Result, Tensor};

fn t(data: &[f64], shape: &[usize], dev: &Device) -> Tensor {
    Tensor::from_slice(data, shape, dev).unwrap()
}

// ------------------------------------------------------------ logical_and, logical_or, logical_xor

test_device!(
    logical_ops_treat_non_zero_and_nan_as_true,
    |dev: &Device| {
        // torch.logical_and(a, b) etc. with a = [0, 1, -2, nan, 0], b = [0, 0, 3, 1, nan]
        let a = t(&[0.0, 1.0, -2.0, f64::NAN, 0.0], &[5], dev);
        let b = t(&[0.0, 0.0, 3.0, 1.0, f64::NAN], &[5], dev);
        assert_eq!(
            a.logical_and(&b)?.to_vec::<bool>()?,
            vec![false, false, true, true, false]
        );
        assert_eq!(
            a.logical_or(&b)?.to_vec::<bool>()?,
            vec![false, true, true, true, true]
        );
        assert_eq!(
            a.logical_xor(&b)?.to_vec::<bool>()?,
            vec![false, true, false, false, true]
        );
        Ok(())
    }
);

test_device!(
    logical_ops_work_on_ints_and_bools_and_broadcast,
    |dev: &Device| {
        let a = Tensor::from_slice(&[0i32, 5, -1], &[3, 1], dev)?;
        let b = Tensor::from_slice(&[0i32, 2], &[2], dev)?;
        assert_eq!(
            a.logical_and(&b)?.to_vec::<bool>()?,
            vec![false, false, false, true, false, true]
        );
        let p = Tensor::from_slice(&[true, false], &[2], dev)?;
        let yes = Tensor::full(&[], 1.0, DType::Bool, dev)?;
        assert_eq!(p.logical_xor(&yes)?.to_vec::<bool>()?, vec![false, true]);
        Ok(())
    }
);

test_device!(logical_ops_promote_mixed_dtypes, |dev: &Device| {
    // torch.logical_or(tensor([1., 0.]), tensor([0, 0])) is [True, False]
    let a = t(&[1.0, 0.0], &[2], dev);
    let b = Tensor::from_slice(&[0i64, 0], &[2], dev)?;
    assert_eq!(a.logical_or(&b)?.to_vec::<bool>()?, vec![true, false]);
    Ok(())
});

// ------------------------------------------------------------ atan2, remainder, fmod, bitwise_and, bitwise_or

/// `op(a, b)` elementwise on f64 and f32 against `want` in f64.
fn close_to2(
    dev: &Device,
    pairs: &[(f64, f64)],
    op: impl Fn(&Tensor, &Tensor) -> Result<Tensor>,
    want: impl Fn(f64, f64) -> f64,
) -> Result<()> {
    let a: Vec<f64> = pairs.iter().map(|p| p.0).collect();
    let b: Vec<f64> = pairs.iter().map(|p| p.1).collect();
    let (a, b) = (t(&a, &[a.len()], dev), t(&b, &[b.len()], dev));
    let g64 = op(&a, &b)?.to_vec::<f64>()?;
    let g32 = op(&a.to_dtype(DType::F32)?, &b.to_dtype(DType::F32)?)?.to_vec::<f32>()?;
    for (i, &(x, y)) in pairs.iter().enumerate() {
        let w = want(x, y);
        if w.is_nan() {
            assert!(g64[i].is_nan() && g32[i].is_nan(), "({x}, {y})");
            continue;
        }
        assert!(
            (g64[i] - w).abs() <= 1e-15 * w.abs().max(1.0),
            "f64 ({x}, {y}): {} vs {w}",
            g64[i]
        );
        assert!(
            (g32[i] - w as f32).abs() <= 4e-7 * (w.abs() as f32).max(1.0),
            "f32 ({x}, {y})"
        );
        assert_eq!(
            g64[i].is_sign_negative(),
            w.is_sign_negative(),
            "sign ({x}, {y})"
        );
    }
    Ok(())
}

const SIGNED_ZEROS: [(f64, f64); 8] = [
    (1.0, 1.0),
    (1.0, -1.0),
    (-1.0, -1.0),
    (0.0, -0.0),
    (-0.0, -0.0),
    (0.0, 0.0),
    (-2.0, 0.0),
    (3.0, f64::NEG_INFINITY),
];

test_device!(
    atan2_matches_f64_libm_in_every_quadrant_and_signed_zero,
    |dev: &Device| {
        close_to2(dev, &SIGNED_ZEROS, Tensor::atan2, libm::atan2)?;
        // integers compute in float32: atan2(1, 1) = pi / 4
        let i = Tensor::from_slice(&[1i64], &[1], dev)?;
        assert_eq!(
            i.atan2(&i)?.to_vec::<f32>()?,
            vec![std::f32::consts::FRAC_PI_4]
        );
        Ok(())
    }
);

/// Python's `%` on floats: the sign of the divisor.
fn py_mod(a: f64, b: f64) -> f64 {
    let m = a % b;
    if m != 0.0 && ((b < 0.0) != (m < 0.0)) {
        m + b
    } else {
        m
    }
}

test_device!(
    remainder_takes_the_divisors_sign_and_fmod_the_dividends,
    |dev: &Device| {
        let pairs = [
            (-7.0, 3.0),
            (7.0, -3.0),
            (-7.0, -3.0),
            (7.5, 2.0),
            (-0.5, 2.0),
            (5.0, 0.0),
            (1.0, f64::INFINITY),
        ];
        close_to2(dev, &pairs[..6], Tensor::remainder, py_mod)?;
        close_to2(dev, &pairs, Tensor::fmod, |a, b| a % b)?;
        // integers: Python's values (-7 % 3 == 2, 7 % -3 == -2), and C's for fmod
        let a = Tensor::from_slice(&[-7i64, 7, -7, i64::MIN], &[4], dev)?;
        let b = Tensor::from_slice(&[3i64, -3, -3, -1], &[4], dev)?;
        assert_eq!(a.remainder(&b)?.to_vec::<i64>()?, vec![2, -2, -1, 0]);
        assert_eq!(a.fmod(&b)?.to_vec::<i64>()?, vec![-1, 1, -1, 0]);
        let u = Tensor::from_slice(&[200u8, 7], &[2], dev)?;
        assert_eq!(
            u.remainder(&Tensor::from_slice(&[255u8, 3], &[2], dev)?)?
                .to_vec::<u8>()?,
            vec![200, 1]
        );
        Ok(())
    }
);

test_device!(
    integer_division_by_zero_is_an_error_that_changes_nothing,
    |dev: &Device| {
        let a = Tensor::from_slice(&[5i32, 6], &[2], dev)?;
        let zero = Tensor::from_slice(&[1i32, 0], &[2], dev)?;
        for (name, r) in [("remainder", a.remainder(&zero)), ("fmod", a.fmod(&zero))] {
            match r {
                Err(Error::InvalidArgument { op, reason }) => {
                    assert_eq!(op, name);
                    assert!(reason.contains("division by zero"), "{reason}");
                }
                other => panic!("{name}: {other:?}"),
            }
        }
        assert_eq!(a.to_vec::<i32>()?, vec![5, 6]);
        Ok(())
    }
);

test_device!(
    remainder_and_fmod_gradients_follow_pytorch,
    |dev: &Device| {
        // d/db remainder(a, b) = -floor(a / b); d/db fmod(a, b) = -trunc(a / b)
        let a = t(&[-7.0, 7.5], &[2], dev).requires_grad_(true)?;
        let b = t(&[3.0, 2.0], &[2], dev).requires_grad_(true)?;
        a.remainder(&b)?.sum_all()?.backward()?;
        assert_eq!(
            a.grad().map(|g| g.to_vec::<f64>().unwrap()),
            Some(vec![1.0, 1.0])
        );
        assert_eq!(
            b.grad().map(|g| g.to_vec::<f64>().unwrap()),
            Some(vec![3.0, -3.0])
        );
        let a = t(&[-7.0, 7.5], &[2], dev).requires_grad_(true)?;
        let b = t(&[3.0, 2.0], &[2], dev).requires_grad_(true)?;
        a.fmod(&b)?.sum_all()?.backward()?;
        assert_eq!(
            b.grad().map(|g| g.to_vec::<f64>().unwrap()),
            Some(vec![2.0, -3.0])
        );
        Ok(())
    }
);

test_device!(
    bitwise_ops_on_every_integer_dtype_and_not_on_floats,
    |dev: &Device| {
        let a = Tensor::from_slice(&[12i64, -1, 0], &[3], dev)?;
        let b = Tensor::from_slice(&[10i64, 6, 5], &[3], dev)?;
        assert_eq!(a.bitwise_and(&b)?.to_vec::<i64>()?, vec![8, 6, 0]);
        assert_eq!(a.bitwise_or(&b)?.to_vec::<i64>()?, vec![14, -1, 5]);
        let u = Tensor::from_slice(&[0b1100u8, 0xF0], &[2], dev)?;
        let v = Tensor::from_slice(&[0b1010u8], &[1], dev)?;
        assert_eq!(u.bitwise_and(&v)?.to_vec::<u8>()?, vec![0b1000, 0]);
        assert_eq!(
            u.to_dtype(DType::I32)?
                .bitwise_or(&v.to_dtype(DType::I32)?)?
                .to_vec::<i32>()?,
            vec![14, 0xFA]
        );
        let f = t(&[1.0], &[1], dev);
        match f.bitwise_and(&f) {
            Err(Error::UnsupportedDType { op, supported, .. }) => {
                assert_eq!(op, "bitwise_and");
                assert!(supported.contains("integer"), "{supported}");
            }
            other => panic!("{other:?}"),
        }
        Ok(())
    }
);
