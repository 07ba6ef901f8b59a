//! Arithmetic with a scalar on either side (`sub_scalar`, `div_scalar`,
//! `rsub`, `rdiv`) and in place (`add_scalar_`, `sub_scalar_`,
//! `mul_scalar_`, `div_scalar_`): hand-derived values, gradients by finite
//! differences, errors that name the method, on every device.
mod common;
use kael_core::testing::{GradcheckOptions, describe, gradcheck};
use kael_core::{Device, Error, Tensor};

fn t(v: &[f64], dev: &Device) -> Tensor {
    Tensor::from_slice(v, &[v.len()], dev).unwrap()
}

test_device!(scalar_on_either_side_matches_hand_values, |dev: &Device| {
    let x = t(&[1.0, -2.0, 4.0], dev);
    assert_eq!(x.sub_scalar(1.5)?.to_vec::<f64>()?, vec![-0.5, -3.5, 2.5]);
    assert_eq!(x.div_scalar(4.0)?.to_vec::<f64>()?, vec![0.25, -0.5, 1.0]);
    assert_eq!(x.rsub(1.0)?.to_vec::<f64>()?, vec![0.0, 3.0, -3.0]);
    assert_eq!(x.rdiv(2.0)?.to_vec::<f64>()?, vec![2.0, -1.0, 0.5]);
    let i = Tensor::from_slice(&[5i32, -7], &[2], dev)?;
    assert_eq!(i.sub_scalar(2)?.to_vec::<i32>()?, vec![3, -9]);
    assert_eq!(i.rsub(1)?.to_vec::<i32>()?, vec![-4, 8]);
    // a float number promotes int32 to float32 (torch: 1.0 - tensor([5, -7], dtype=int32))
    assert_eq!(i.rsub(1.0)?.to_vec::<f32>()?, vec![-4.0, 8.0]);
    Ok(())
});

test_device!(
    in_place_scalar_ops_write_through_and_bump_the_version,
    |dev: &Device| {
        let x = t(&[1.0, -2.0, 4.0, 8.0], dev);
        let v = x.narrow(0, 1, 2)?; // a view: writes reach x
        v.add_scalar_(1.0)?;
        v.mul_scalar_(2.0)?;
        v.sub_scalar_(0.5)?;
        v.div_scalar_(2.0)?;
        assert_eq!(x.to_vec::<f64>()?, vec![1.0, -1.25, 4.75, 8.0]);
        assert_eq!(x.version(), 4);
        Ok(())
    }
);

test_device!(
    scalar_op_gradients_match_finite_differences,
    |dev: &Device| {
        let x = t(&[0.7, -1.3, 2.2], dev);
        type F = fn(&Tensor) -> kael_core::Result<Tensor>;
        let fs: [(&str, F); 4] = [
            ("sub_scalar", |x| x.sub_scalar(0.3)),
            ("div_scalar", |x| x.div_scalar(-1.7)),
            ("rsub", |x| x.rsub(2.0)),
            ("rdiv", |x| x.rdiv(3.0)),
        ];
        for (name, f) in fs {
            let r = gradcheck(
                |v| f(&v[0]),
                std::slice::from_ref(&x),
                GradcheckOptions::default(),
            )?;
            assert!(r.is_ok(), "{name}: {}", describe(&r));
        }
        Ok(())
    }
);

test_device!(
    errors_name_the_scalar_method_and_change_nothing,
    |dev: &Device| {
        let i = Tensor::from_slice(&[4i64, 6], &[2], dev)?;
        let b = Tensor::from_slice(&[true, false], &[2], dev)?;
        // int64 / 2 computes (true division, float32); in place it cannot
        // be written back; bool has no `-` (PyTorch refuses both)
        assert_eq!(i.div_scalar(2)?.to_vec::<f32>()?, vec![2.0, 3.0]);
        let cases = [
            (i.div_scalar_(2), "div_scalar_"),
            (i.add_scalar_(0.5), "add_scalar_"),
            (b.add_scalar_(1), "add_scalar_"),
            (b.sub_scalar(1.0).map(|_| ()), "sub_scalar"),
            (
                i.add_scalar(1i64 << 40)
                    .and_then(|_| i.to_dtype(kael_core::DType::I32)?.add_scalar(1i64 << 40))
                    .map(|_| ()),
                "add_scalar",
            ),
        ];
        for (r, name) in cases {
            let e = r.unwrap_err();
            assert!(e.to_string().starts_with(&format!("{name}: ")), "{e}");
        }
        assert_eq!(i.to_vec::<i64>()?, vec![4, 6]);
        assert_eq!(i.version(), 0);
        // an expanded destination is refused, named
        let e = t(&[1.0], dev).expand(&[3])?.mul_scalar_(2.0).unwrap_err();
        assert!(
            matches!(e, Error::InternalOverlap { op: "mul_scalar_" }),
            "{e:?}"
        );
        Ok(())
    }
);
