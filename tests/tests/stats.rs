//! var, std (with correction), any and all: hand-derived values (the
//! PyTorch documentation's conventions), gradients by finite differences,
//! on every device.
mod common;
use kael_core::testing::{GradcheckOptions, describe, gradcheck};
use kael_core::{Device, Tensor};

test_device!(
    var_and_std_divide_by_n_minus_the_correction,
    |dev: &Device| {
        let x = Tensor::from_slice(&[1.0f64, 2.0, 3.0, 4.0, 10.0, 20.0], &[2, 3], dev)?;
        // rows [1, 2, 3]: mean 2, squares sum 2; [4, 10, 20]: mean 34/3, squares sum 392/3
        let v1 = x.var(&[1], 1, false)?.to_vec::<f64>()?;
        assert!(
            (v1[0] - 1.0).abs() < 1e-12 && (v1[1] - 196.0 / 3.0).abs() < 1e-9,
            "{v1:?}"
        );
        let v0 = x.var(&[1], 0, true)?;
        assert_eq!(v0.shape(), &[2, 1]);
        let v0 = v0.to_vec::<f64>()?;
        assert!((v0[0] - 2.0 / 3.0).abs() < 1e-12, "{v0:?}");
        // all elements: mean 40/6, population variance
        let all = x.var(&[], 0, false)?.item::<f64>()?;
        let m = 40.0 / 6.0;
        let want = [1.0, 2.0, 3.0, 4.0, 10.0, 20.0]
            .iter()
            .map(|v: &f64| (v - m) * (v - m))
            .sum::<f64>()
            / 6.0;
        assert!((all - want).abs() < 1e-12);
        assert!((x.std(&[], 0, false)?.item::<f64>()? - want.sqrt()).abs() < 1e-12);
        // one element with correction 1: 0 / 0, as PyTorch
        assert!(
            Tensor::from_slice(&[3.0f32], &[1], dev)?
                .var(&[0], 1, false)?
                .item::<f32>()?
                .is_nan()
        );
        assert!(
            Tensor::from_slice(&[1i64, 2], &[2], dev)?
                .var(&[0], 1, false)
                .is_err()
        );
        Ok(())
    }
);

test_device!(
    var_and_std_gradients_match_finite_differences,
    |dev: &Device| {
        let x = Tensor::from_slice(&[0.3, -1.2, 2.5, 0.7, -0.4, 1.1], &[2, 3], dev)?;
        for (name, r) in [
            (
                "var",
                gradcheck(
                    |v| v[0].var(&[1], 1, false),
                    std::slice::from_ref(&x),
                    GradcheckOptions::default(),
                )?,
            ),
            (
                "std",
                gradcheck(
                    |v| v[0].std(&[0], 0, true),
                    std::slice::from_ref(&x),
                    GradcheckOptions::default(),
                )?,
            ),
        ] {
            assert!(r.is_ok(), "{name}: {}", describe(&r));
        }
        Ok(())
    }
);

test_device!(any_and_all_reduce_truthiness, |dev: &Device| {
    let x = Tensor::from_slice(&[0.0f32, f32::NAN, 0.0, 0.0, 2.0, -1.0], &[3, 2], dev)?;
    assert_eq!(
        x.any(&[1], false)?.to_vec::<bool>()?,
        vec![true, false, true]
    );
    assert_eq!(
        x.all(&[1], false)?.to_vec::<bool>()?,
        vec![false, false, true]
    );
    assert_eq!(x.any(&[], false)?.to_vec::<bool>()?, vec![true]);
    assert_eq!(x.all(&[0], true)?.shape(), &[1, 2]);
    // over an empty dim: any is false, all is true
    let e = Tensor::from_slice(&[0i32; 0], &[2, 0], dev)?;
    assert_eq!(e.any(&[1], false)?.to_vec::<bool>()?, vec![false, false]);
    assert_eq!(e.all(&[1], false)?.to_vec::<bool>()?, vec![true, true]);
    let b = Tensor::from_slice(&[true, false], &[2], dev)?;
    assert_eq!(
        (
            b.any(&[], false)?.to_vec::<bool>()?,
            b.all(&[], false)?.to_vec::<bool>()?
        ),
        (vec![true], vec![false])
    );
    Ok(())
});
