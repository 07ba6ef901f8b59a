//! movedim, flip, roll, repeat, tril, triu and masked_fill: values as
//! PyTorch documents them (hand-derived), gradients by finite differences,
//! bad arguments refused by name, on every device.
mod common;
use kael_core::testing::{GradcheckOptions, describe, gradcheck};
use kael_core::{DType, Device, Error, Result, Tensor};

fn grid(dev: &Device) -> Tensor {
    Tensor::arange(0.0f64, 6.0, dev)
        .unwrap()
        .reshape(&[2, 3])
        .unwrap()
}

test_device!(movedim_is_a_permuting_view, |dev: &Device| {
    let x = Tensor::zeros(&[2, 3, 4, 5], DType::F32, dev)?;
    assert_eq!(x.movedim(1, 3)?.shape(), &[2, 4, 5, 3]);
    assert_eq!(x.movedim(-1, 0)?.shape(), &[5, 2, 3, 4]);
    assert!(x.movedim(0, 2)?.shares_storage(&x));
    assert!(matches!(
        x.movedim(4, 0),
        Err(Error::DimOutOfRange { op: "movedim", .. })
    ));
    Ok(())
});

test_device!(flip_reverses_each_listed_dim, |dev: &Device| {
    let x = grid(dev);
    assert_eq!(
        x.flip(&[0])?.to_vec::<f64>()?,
        vec![3.0, 4.0, 5.0, 0.0, 1.0, 2.0]
    );
    assert_eq!(
        x.flip(&[0, 1])?.to_vec::<f64>()?,
        vec![5.0, 4.0, 3.0, 2.0, 1.0, 0.0]
    );
    assert_eq!(
        x.t()?.flip(&[-1])?.to_vec::<f64>()?,
        vec![3.0, 0.0, 4.0, 1.0, 5.0, 2.0]
    );
    assert!(matches!(
        x.flip(&[1, -1]),
        Err(Error::InvalidArgument { op: "flip", .. })
    ));
    Ok(())
});

test_device!(roll_wraps_around, |dev: &Device| {
    let x = grid(dev);
    assert_eq!(
        x.roll(1, 1)?.to_vec::<f64>()?,
        vec![2.0, 0.0, 1.0, 5.0, 3.0, 4.0]
    );
    assert_eq!(
        x.roll(-4, 1)?.to_vec::<f64>()?,
        vec![1.0, 2.0, 0.0, 4.0, 5.0, 3.0]
    );
    assert_eq!(x.roll(2, 0)?.to_vec::<f64>()?, x.to_vec::<f64>()?);
    Ok(())
});

test_device!(repeat_tiles_and_adds_leading_dims, |dev: &Device| {
    let x = Tensor::from_slice(&[1i64, 2, 3], &[1, 3], dev)?;
    let r = x.repeat(&[2, 1, 2])?;
    assert_eq!(r.shape(), &[2, 1, 6]);
    assert_eq!(r.to_vec::<i64>()?, vec![1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3]);
    assert!(matches!(
        x.repeat(&[2]),
        Err(Error::InvalidArgument { op: "repeat", .. })
    ));
    assert_eq!(x.repeat(&[0, 1])?.shape(), &[0, 3]);
    Ok(())
});

test_device!(tril_and_triu_keep_a_triangle, |dev: &Device| {
    let x = Tensor::arange(1.0f64, 10.0, dev)?.reshape(&[3, 3])?;
    assert_eq!(
        x.tril(0)?.to_vec::<f64>()?,
        vec![1.0, 0.0, 0.0, 4.0, 5.0, 0.0, 7.0, 8.0, 9.0]
    );
    assert_eq!(
        x.tril(-1)?.to_vec::<f64>()?,
        vec![0.0, 0.0, 0.0, 4.0, 0.0, 0.0, 7.0, 8.0, 0.0]
    );
    assert_eq!(
        x.triu(1)?.to_vec::<f64>()?,
        vec![0.0, 2.0, 3.0, 0.0, 0.0, 6.0, 0.0, 0.0, 0.0]
    );
    // batched: the last two dims
    let b = Tensor::ones(&[2, 2, 2], DType::I32, dev)?;
    assert_eq!(b.triu(0)?.to_vec::<i32>()?, vec![1, 1, 0, 1, 1, 1, 0, 1]);
    let v = Tensor::ones(&[3], DType::F32, dev)?;
    assert!(matches!(
        v.tril(0),
        Err(Error::RankMismatch { op: "tril", .. })
    ));
    Ok(())
});

test_device!(masked_fill_fills_where_the_mask_is_true, |dev: &Device| {
    let x = grid(dev);
    let m = Tensor::from_slice(&[true, false, true], &[3], dev)?; // broadcast over rows
    assert_eq!(
        x.masked_fill(&m, -1.0)?.to_vec::<f64>()?,
        vec![-1.0, 1.0, -1.0, -1.0, 4.0, -1.0]
    );
    let not_bool = Tensor::from_slice(&[1u8, 0, 1], &[3], dev)?;
    assert!(matches!(
        x.masked_fill(&not_bool, 0.0),
        Err(Error::DTypeMismatch {
            op: "masked_fill",
            ..
        })
    ));
    Ok(())
});

test_device!(
    rearranging_gradients_match_finite_differences,
    |dev: &Device| {
        let x = Tensor::from_slice(&[0.3, -1.2, 2.5, 0.7, -0.4, 1.1], &[2, 3], dev)?;
        let w = Tensor::from_slice(
            &[
                1.0, 2.0, -1.0, 0.5, 3.0, -2.0, 0.1, 4.0, 1.5, -0.7, 2.2, 0.9,
            ],
            &[2, 6],
            dev,
        )?;
        type F = fn(&Tensor, &Tensor) -> Result<Tensor>;
        let fs: [(&str, F); 6] = [
            ("movedim", |x, _| x.movedim(0, 1)?.mul(&x.t()?)),
            ("flip", |x, w| {
                x.flip(&[0, 1])?
                    .reshape(&[6])?
                    .mul(&w.narrow(0, 0, 1)?.reshape(&[6])?)
            }),
            ("roll", |x, w| {
                x.roll(2, 1)?
                    .reshape(&[6])?
                    .mul(&w.narrow(0, 1, 1)?.reshape(&[6])?)
            }),
            ("repeat", |x, w| x.repeat(&[1, 2])?.mul(w)),
            ("tril", |x, _| x.reshape(&[3, 2])?.tril(0)?.sqr()),
            ("masked_fill", |x, _| {
                let m = Tensor::from_slice(&[true, false, true], &[3], &x.device())?;
                x.masked_fill(&m, 5.0)?.sqr()
            }),
        ];
        for (name, f) in fs {
            let r = gradcheck(
                |v| f(&v[0], &w),
                std::slice::from_ref(&x),
                GradcheckOptions::default(),
            )?;
            assert!(r.is_ok(), "{name}: {}", describe(&r));
        }
        Ok(())
    }
);
