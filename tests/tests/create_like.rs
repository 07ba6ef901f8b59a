//! `zeros_like`, `ones_like`, `full_like`, `rand_like`, `randn_like`,
//! `linspace` and `one_hot`: shapes, dtypes and devices follow the input;
//! values as PyTorch documents them (hand-derived), on every device.
mod common;
use kael_core::{DType, Device, Error, Rng, Tensor};

test_device!(
    like_constructors_keep_shape_dtype_and_device,
    |dev: &Device| {
        let x = Tensor::from_slice(&[1i32, 2, 3, 4, 5, 6], &[2, 3], dev)?.t()?;
        for (y, want) in [
            (x.zeros_like()?, 0),
            (x.ones_like()?, 1),
            (x.full_like(-4.0)?, -4),
        ] {
            assert_eq!(
                (y.shape(), y.dtype(), y.device().kind()),
                (x.shape(), DType::I32, dev.kind())
            );
            assert!(y.is_contiguous());
            assert_eq!(y.to_vec::<i32>()?, vec![want; 6]);
        }
        let f = Tensor::zeros(&[3, 2], DType::F64, dev)?;
        let (r, n) = (
            f.rand_like(&mut Rng::new(3))?,
            f.randn_like(&mut Rng::new(3))?,
        );
        assert_eq!(
            (r.shape(), n.shape(), r.dtype()),
            (f.shape(), f.shape(), DType::F64)
        );
        assert!(r.to_vec::<f64>()?.iter().all(|v| (0.0..1.0).contains(v)));
        assert!(x.rand_like(&mut Rng::new(3)).is_err()); // integers have no rand
        Ok(())
    }
);

test_device!(linspace_includes_both_ends_as_pytorch, |dev: &Device| {
    let l = |a, b, n, dt| {
        Tensor::linspace(a, b, n, dt, dev).and_then(|t| t.to_dtype(DType::F64)?.to_vec::<f64>())
    };
    // torch.linspace(-1, 1, 5) and (0, 10, 3)
    assert_eq!(
        l(-1.0, 1.0, 5, DType::F32)?,
        vec![-1.0, -0.5, 0.0, 0.5, 1.0]
    );
    assert_eq!(l(0.0, 10.0, 3, DType::F64)?, vec![0.0, 5.0, 10.0]);
    // one step is `start`, zero steps is empty, a descending range works
    assert_eq!(l(3.0, 9.0, 1, DType::F32)?, vec![3.0]);
    assert_eq!(l(3.0, 9.0, 0, DType::F32)?, Vec::<f64>::new());
    assert_eq!(l(2.0, -2.0, 3, DType::F64)?, vec![2.0, 0.0, -2.0]);
    // both ends exact even when the step is not (0.1 has no exact binary form)
    let v = l(0.0, 1.0, 11, DType::F32)?;
    assert_eq!((v[0], v[10]), (0.0, 1.0));
    assert_eq!(v[3], f64::from(0.1f32 * 3.0));
    assert_eq!(v[8], f64::from(1.0f32 - 0.1f32 * 2.0));
    assert!(matches!(
        Tensor::linspace(0.0, f64::NAN, 3, DType::F32, dev),
        Err(Error::InvalidArgument { op: "linspace", .. })
    ));
    assert!(Tensor::linspace(0.0, 1.0, 3, DType::I64, dev).is_err());
    Ok(())
});

test_device!(
    one_hot_marks_each_class_and_refuses_bad_indices,
    |dev: &Device| {
        let y = Tensor::from_slice(&[1i64, 0, 3, 1], &[2, 2], dev)?;
        let h = y.one_hot(None)?;
        assert_eq!((h.shape(), h.dtype()), (&[2, 2, 4][..], DType::I64));
        assert_eq!(
            h.to_vec::<i64>()?,
            vec![0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0]
        );
        assert_eq!(y.one_hot(Some(5))?.shape(), &[2, 2, 5]);
        for (t, n) in [
            (Tensor::from_slice(&[0i64, -1], &[2], dev)?, None),
            (Tensor::from_slice(&[0i32, 3], &[2], dev)?, Some(3)),
        ] {
            assert!(matches!(
                t.one_hot(n),
                Err(Error::IndexOutOfRange { op: "one_hot", .. })
            ));
        }
        let f = Tensor::from_slice(&[0.0f32], &[1], dev)?;
        assert!(matches!(
            f.one_hot(Some(2)),
            Err(Error::UnsupportedDType { op: "one_hot", .. })
        ));
        Ok(())
    }
);
