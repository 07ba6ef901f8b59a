//! A number on an integer tensor is never truncated, saturated or wrapped
//! (README, "Reliability promises"): a float number promotes the tensor
//! to float as PyTorch does (NOTE [Type promotion]); an integer number the
//! dtype does not hold is an `Err` naming the method called (PyTorch wraps
//! it); an in-place form whose result the tensor cannot hold is refused
//! and leaves the tensor as it was.
//! Fills convert as PyTorch's (toward zero: torch 2.15's outputs below) and
//! refuse what would overflow, as PyTorch does.

mod common;

use kael_core::{DType, Device, Error, Tensor};

fn ints(dev: &Device) -> Tensor {
    Tensor::from_slice(&[1i64, 2, -3], &[3], dev).unwrap()
}

#[track_caller]
fn refused_by<T: std::fmt::Debug>(op: &str, r: kael_core::Result<T>) {
    match r {
        Err(e @ Error::InvalidArgument { .. }) => {
            assert_eq!(e.op(), Some(op), "{e}");
            // (clamp refuses a NaN bound on every dtype, with its own fix)
            let nan_bound = e.to_string().contains("NaN");
            assert!(
                nan_bound || e.to_string().contains("to_dtype"),
                "the fix is named: {e}"
            );
        }
        other => panic!("{op}: expected a refusal, got {other:?}"),
    }
}

test_device!(
    float_numbers_promote_integer_tensors_as_pytorch_does,
    |dev| {
        let x = ints(dev);
        // torch.tensor([1, 2, -3]) + 2.5 is float32 [3.5, 4.5, -0.5]; * 0.5
        // is [0.5, 1.0, -1.5]; >= 2.5 is all false; + nan is all nan
        assert_eq!(x.add_scalar(2.5)?.to_vec::<f32>()?, vec![3.5, 4.5, -0.5]);
        assert_eq!(x.mul_scalar(0.5)?.to_vec::<f32>()?, vec![0.5, 1.0, -1.5]);
        assert_eq!((&x - 0.5)?.to_vec::<f32>()?, vec![0.5, 1.5, -3.5]);
        assert_eq!(x.rsub(0.5)?.to_vec::<f32>()?, vec![-0.5, -1.5, 3.5]);
        let ge = x.ge(&x.number_operand("ge", 2.5)?)?;
        assert_eq!(ge.to_vec::<bool>()?, vec![false, false, false]);
        assert!(
            x.add_scalar(f64::NAN)?
                .to_vec::<f32>()?
                .iter()
                .all(|v| v.is_nan())
        );
        assert_eq!(x.add_scalar(1e30)?.to_vec::<f32>()?, vec![1e30f32; 3]);
        let x_bad = [2.5, f64::NAN, f64::INFINITY, 1e30];
        for bad in x_bad {
            if !(bad.is_finite() && bad == bad.trunc()) {
                // clamp keeps its dtype: a bound it cannot hold is refused
                refused_by("clamp", x.clamp(Some(bad), None));
                refused_by("clamp_", x.clamp_(None, Some(bad)));
            }
            // in place: the float result cannot be written into int64 (as
            // PyTorch), and the tensor keeps its values
            for r in [x.add_scalar_(bad), x.mul_scalar_(bad)] {
                let e = r.unwrap_err();
                assert!(matches!(e, Error::CannotCast { .. }), "{e}");
            }
            assert_eq!(x.to_vec::<i64>()?, vec![1, 2, -3]);
            assert_eq!(x.version(), 0);
        }
        let overflowing = [
            f64::NAN,
            f64::INFINITY,
            -f64::INFINITY,
            1e30,
            9_223_372_036_854_775_808.0,
        ];
        // fills convert as PyTorch's do (toward zero) but never overflow:
        // NaN, infinities and out-of-range values are refused, not saturated
        let mask = x.gt(&x.zeros_like()?)?;
        let idx = Tensor::from_slice(&[0i64], &[1], dev)?;
        for bad in overflowing {
            refused_by("full", Tensor::full(&[2], bad, DType::I64, dev));
            refused_by("fill_", x.fill_(bad));
            refused_by("masked_fill", x.masked_fill(&mask, bad));
            refused_by("scatter_value", x.scatter_value(0, &idx, bad));
            assert_eq!(x.to_vec::<i64>()?, vec![1, 2, -3]);
        }
        // torch.tensor([1, 2, -3]).masked_fill(x > 0, 2.5) is [2, 2, -3]
        assert_eq!(x.masked_fill(&mask, 2.5)?.to_vec::<i64>()?, vec![2, 2, -3]);
        assert_eq!(
            x.scatter_value(0, &idx, -2.5)?.to_vec::<i64>()?,
            vec![-2, 2, -3]
        );
        assert_eq!(
            Tensor::full(&[2], 2.5, DType::I64, dev)?.to_vec::<i64>()?,
            vec![2, 2]
        );
        Ok(())
    }
);

test_device!(each_integer_dtype_takes_exactly_its_range, |dev| {
    let cases: [(DType, f64, f64); 5] = [
        (DType::U8, 0.0, 255.0),
        (DType::I8, -128.0, 127.0),
        (DType::I16, -32768.0, 32767.0),
        (DType::I32, -2_147_483_648.0, 2_147_483_647.0),
        // i64::MAX is not an f64; the largest f64 below 2^63 is
        (
            DType::I64,
            -9_223_372_036_854_775_808.0,
            9_223_372_036_854_774_784.0,
        ),
    ];
    // an integer number the tensor's dtype does not hold is refused, where
    // PyTorch wraps it (uint8 + 300 is 44 there)
    for (dtype, lo, hi) in cases {
        let x = Tensor::zeros(&[1], dtype, dev)?;
        let (lo, hi) = (lo as i64, hi as i64);
        for ok in [lo, hi, 0] {
            let got = x.add_scalar(ok)?;
            assert_eq!(got.dtype(), dtype);
            assert_eq!(
                got.to_dtype(DType::F64)?.to_vec::<f64>()?,
                vec![ok as f64],
                "{dtype:?} + {ok}"
            );
        }
        if dtype != DType::I64 {
            for bad in [lo - 1, hi + 1] {
                refused_by("add_scalar", x.add_scalar(bad));
            }
        }
    }
    Ok(())
});

test_device!(
    integral_scalars_still_compute_and_float_tensors_take_any_scalar,
    |dev| {
        let x = ints(dev);
        assert_eq!(x.add_scalar(2)?.to_vec::<i64>()?, vec![3, 4, -1]);
        assert_eq!(x.mul_scalar(-3)?.to_vec::<i64>()?, vec![-3, -6, 9]);
        assert_eq!(
            x.clamp(Some(0.0), Some(1.0))?.to_vec::<i64>()?,
            vec![1, 1, 0]
        );
        // an integral bound past the range clamps exactly (torch: u8 [0, 1,
        // 2, 3, 200].clamp(-1, 2) is [0, 1, 2, 2, 2])
        let u = Tensor::from_slice(&[0u8, 1, 2, 3, 200], &[5], dev)?;
        assert_eq!(
            u.clamp(Some(-1.0), Some(2.0))?.to_vec::<u8>()?,
            vec![0, 1, 2, 2, 2]
        );
        assert_eq!(
            u.clamp(Some(0.0), Some(300.0))?.to_vec::<u8>()?,
            vec![0, 1, 2, 3, 200]
        );
        let f = Tensor::from_slice(&[1.0f32, 2.0], &[2], dev)?;
        assert_eq!(f.add_scalar(2.5)?.to_vec::<f32>()?, vec![3.5, 4.5]);
        assert!(
            f.add_scalar(f64::NAN)?
                .to_vec::<f32>()?
                .iter()
                .all(|v| v.is_nan())
        );
        // bool: any non-NaN value (non-zero is true, as a cast)
        let b = Tensor::full(&[2], 2.0, DType::Bool, dev)?;
        assert_eq!(b.to_vec::<bool>()?, vec![true, true]);
        Ok(())
    }
);
