//! Specification tests of the constructors (`zeros ones full from_slice
//! arange arange_step eye scalar rand randn`), reading values out (`to_vec`
//! in logical order, `item`), `to_dtype` across all 8 dtypes, and each
//! dtype's round trip through `from_slice`/`to_vec`. Expected values are
//! numpy's (`np.arange`, `np.eye`, `.astype`), or derived in a comment.
mod common;

use common::{assert_close, assert_close64, meta, snapshot};
use kael_core::{DType, Device, Element, Error, Result, Rng, Tensor, bf16, f16};

/// Expects `Err`, checks that its message names each of `words`, returns it.
macro_rules! refused {
    ($r:expr, $($word:expr),+ $(,)?) => {{
        let e: Error = $r.expect_err("the op must be refused");
        let msg = e.to_string();
        $(assert!(msg.contains($word), "message {msg:?} lacks {:?}", $word);)+
        e
    }};
}

/// Every value of any tensor, as f64.
fn as_f64(t: &Tensor) -> Result<Vec<f64>> {
    fn conv<T: Element>(t: &Tensor) -> Result<Vec<f64>> {
        Ok(t.to_vec::<T>()?.into_iter().map(Element::to_f64).collect())
    }
    match t.dtype() {
        DType::F32 => conv::<f32>(t),
        DType::F64 => conv::<f64>(t),
        DType::F16 => conv::<f16>(t),
        DType::BF16 => conv::<bf16>(t),
        DType::I64 => conv::<i64>(t),
        DType::I32 => conv::<i32>(t),
        DType::I16 => conv::<i16>(t),
        DType::I8 => conv::<i8>(t),
        DType::U8 => conv::<u8>(t),
        DType::Bool => conv::<bool>(t),
    }
}

fn mean_var(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    (mean, var)
}

// ------------------------------------------------------------ constructors

test_device!(zeros_ones_full_for_every_dtype, |dev: &Device| {
    for dt in DType::ALL {
        let z = Tensor::zeros(&[2, 3], dt, dev)?;
        assert_eq!(meta(&z), (vec![2, 3], vec![3, 1], 0), "{dt:?}");
        assert_eq!(
            (z.dtype(), z.storage_nbytes()),
            (dt, 6 * dt.size_in_bytes())
        );
        assert_eq!(as_f64(&z)?, [0.0; 6], "{dt:?}");
        assert_eq!(
            as_f64(&Tensor::ones(&[2, 3], dt, dev)?)?,
            [1.0; 6],
            "{dt:?}"
        );
        let f = Tensor::full(&[3], 2.0, dt, dev)?;
        // bool: any non-zero is true (1)
        let want = if dt == DType::Bool { 1.0 } else { 2.0 };
        assert_eq!(as_f64(&f)?, [want; 3], "{dt:?}");
        assert_eq!((z.version(), f.version()), (0, 0));
        assert!(z.base().is_none() && f.base().is_none());
    }
    Ok(())
});

test_device!(full_converts_the_value, |dev: &Device| {
    // np.full(2, 2.5).astype(np.int64) = [2, 2]; np.float16(0.1) = 0.0999755859375
    assert_eq!(
        Tensor::full(&[2], 2.5, DType::I64, dev)?.to_vec::<i64>()?,
        [2, 2]
    );
    assert_eq!(
        Tensor::full(&[1], 0.1, DType::F16, dev)?.to_vec::<f16>()?,
        [f16::from_f64(0.1)]
    );
    assert_eq!(f16::from_f64(0.1).to_f64(), 0.0999755859375);
    Ok(())
});

test_device!(zero_size_and_rank0_tensors, |dev: &Device| {
    let e = Tensor::zeros(&[2, 0, 3], DType::F32, dev)?;
    assert_eq!((e.numel(), e.storage_nbytes()), (0, 0));
    assert_eq!(e.to_vec::<f32>()?, Vec::<f32>::new());
    let s = Tensor::full(&[], 4.0, DType::F32, dev)?;
    assert_eq!((s.rank(), s.numel()), (0, 1));
    assert_eq!(s.item::<f32>()?, 4.0);
    Ok(())
});

test_device!(from_slice_keeps_row_major_order, |dev: &Device| {
    let t = Tensor::from_slice(&[1.0f32, 2., 3., 4., 5., 6.], &[3, 2], dev)?;
    assert_eq!(meta(&t), (vec![3, 2], vec![2, 1], 0));
    // t[2, 1] = 6, t[1, 0] = 3
    assert_eq!(t.select(0, 2)?.select(0, 1)?.item::<f32>()?, 6.0);
    assert_eq!(t.select(0, 1)?.select(0, 0)?.item::<f32>()?, 3.0);
    Ok(())
});

test_device!(from_slice_refuses_a_wrong_element_count, |dev: &Device| {
    let e = refused!(
        Tensor::from_slice(&[1.0f32, 2.0], &[3], dev),
        "from_slice",
        "[3]"
    );
    assert!(matches!(e, Error::ElementCountMismatch { numel: 2, .. }));
    refused!(Tensor::from_slice(&[1i64; 4], &[2, 3], dev), "from_slice");
    refused!(
        Tensor::from_slice(&[1u8], &[1; 9], dev),
        "rank 9",
        "flatten"
    );
    Ok(())
});

test_device!(scalar_is_rank0, |dev: &Device| {
    let s = Tensor::scalar(-7i32, dev)?;
    assert_eq!(meta(&s), (vec![], vec![], 0));
    assert_eq!((s.dtype(), s.item::<i32>()?), (DType::I32, -7));
    assert!(Tensor::scalar(true, dev)?.item::<bool>()?);
    Ok(())
});

// ------------------------------------------------------------------ arange

test_device!(arange_counts_up_by_one, |dev: &Device| {
    // np.arange(0, 4), np.arange(2, 5)
    assert_eq!(
        Tensor::arange(0.0f32, 4.0, dev)?.to_vec::<f32>()?,
        [0., 1., 2., 3.]
    );
    let i = Tensor::arange(2i64, 5, dev)?;
    assert_eq!((i.dtype(), i.to_vec::<i64>()?), (DType::I64, vec![2, 3, 4]));
    // torch.arange(5, 2) raises (np.arange returns an empty array)
    assert!(matches!(
        Tensor::arange(5i32, 2, dev),
        Err(Error::InvalidArgument { op: "arange", .. })
    ));
    assert_eq!(Tensor::arange(2i32, 2, dev)?.shape(), &[0]);
    Ok(())
});

test_device!(
    arange_step_with_fractional_and_negative_steps,
    |dev: &Device| {
        // np.arange(0, 1, 0.1): 10 elements
        let t = Tensor::arange_step(0.0f64, 1.0, 0.1, dev)?;
        assert_close64(
            &t.to_vec::<f64>()?,
            &[
                0.0,
                0.1,
                0.2,
                0.30000000000000004,
                0.4,
                0.5,
                0.6000000000000001,
                0.7000000000000001,
                0.8,
                0.9,
            ],
            1e-15,
        );
        // np.arange(2.5, -1, -1.5)
        let t = Tensor::arange_step(2.5f32, -1.0, -1.5, dev)?;
        assert_eq!(t.to_vec::<f32>()?, [2.5, 1.0, -0.5]);
        // np.arange(5, 0, -2)
        assert_eq!(
            Tensor::arange_step(5i64, 0, -2.0, dev)?.to_vec::<i64>()?,
            [5, 3, 1]
        );
        // torch.arange(0, 5, -1) raises: the step points away from end
        refused!(
            Tensor::arange_step(0.0f32, 5.0, -1.0, dev),
            "arange",
            "points away from end"
        );
        Ok(())
    }
);

test_device!(arange_refuses_bad_steps_and_bool, |dev: &Device| {
    refused!(
        Tensor::arange_step(0.0f32, 1.0, 0.0, dev),
        "arange",
        "non-zero"
    );
    refused!(
        Tensor::arange_step(0.0f32, 1.0, f64::NAN, dev),
        "arange",
        "finite"
    );
    refused!(
        Tensor::arange_step(0.0f32, f32::INFINITY, 1.0, dev),
        "arange",
        "finite"
    );
    let e = refused!(Tensor::arange(false, true, dev), "arange", "Bool");
    assert!(matches!(e, Error::UnsupportedDType { .. }));
    Ok(())
});

// --------------------------------------------------------------------- eye

test_device!(eye_is_the_identity, |dev: &Device| {
    let e = Tensor::eye(3, DType::F32, dev)?;
    // np.eye(3).flatten()
    assert_eq!(e.to_vec::<f32>()?, [1., 0., 0., 0., 1., 0., 0., 0., 1.]);
    assert_eq!(meta(&e), (vec![3, 3], vec![3, 1], 0));
    assert_eq!(
        Tensor::eye(2, DType::I64, dev)?.to_vec::<i64>()?,
        [1, 0, 0, 1]
    );
    assert_eq!(Tensor::eye(0, DType::F32, dev)?.shape(), &[0, 0]);
    Ok(())
});

test_device!(a_new_eye_starts_at_version_0, |dev: &Device| {
    // torch.eye(3)._version == 0: construction is not an in-place op
    assert_eq!(Tensor::eye(3, DType::F32, dev)?.version(), 0);
    Ok(())
});

// ------------------------------------------------------------- rand, randn

test_device!(rand_and_randn_are_deterministic_per_seed, |dev: &Device| {
    let a = Tensor::rand(&[64], DType::F32, dev, &mut Rng::new(7))?;
    let b = Tensor::rand(&[64], DType::F32, dev, &mut Rng::new(7))?;
    let c = Tensor::rand(&[64], DType::F32, dev, &mut Rng::new(8))?;
    assert_eq!(a.to_vec::<f32>()?, b.to_vec::<f32>()?);
    assert_ne!(a.to_vec::<f32>()?, c.to_vec::<f32>()?);
    let n1 = Tensor::randn(&[4, 3], DType::F64, dev, &mut Rng::new(1))?;
    let n2 = Tensor::randn(&[4, 3], DType::F64, dev, &mut Rng::new(1))?;
    assert_eq!(n1.to_vec::<f64>()?, n2.to_vec::<f64>()?);
    // one generator continues: two draws differ
    let mut rng = Rng::new(3);
    let d1 = Tensor::randn(&[8], DType::F32, dev, &mut rng)?;
    let d2 = Tensor::randn(&[8], DType::F32, dev, &mut rng)?;
    assert_ne!(d1.to_vec::<f32>()?, d2.to_vec::<f32>()?);
    Ok(())
});

test_device!(
    rand_stays_in_zero_one_for_every_float_dtype,
    |dev: &Device| {
        // torch.rand is in [0, 1) whatever the dtype: a value must never round
        // up to 1.0 (bf16 has 8 significand bits, so 1 - 2^-10 would)
        let mut rng = Rng::new(0);
        for dt in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            let t = Tensor::rand(&[200_000], dt, dev, &mut rng)?;
            assert_eq!(t.dtype(), dt);
            let v = as_f64(&t)?;
            assert!(
                v.iter().all(|x| (0.0..1.0).contains(x)),
                "{dt:?}: a value outside [0, 1)"
            );
        }
        Ok(())
    }
);

test_device!(rand_has_uniform_moments, |dev: &Device| {
    // U(0, 1): mean 1/2, variance 1/12; for n = 100000 the standard error
    // of the mean is 0.29 / 316 = 0.0009
    let t = Tensor::rand(&[100_000], DType::F32, dev, &mut Rng::new(11))?;
    let (mean, var) = mean_var(&as_f64(&t)?);
    assert!((mean - 0.5).abs() < 0.005, "mean {mean}");
    assert!((var - 1.0 / 12.0).abs() < 0.002, "variance {var}");
    Ok(())
});

test_device!(randn_has_standard_normal_moments, |dev: &Device| {
    // N(0, 1): mean 0 (standard error 0.0032 for n = 100000), variance 1
    let t = Tensor::randn(&[100_000], DType::F64, dev, &mut Rng::new(12))?;
    let v = as_f64(&t)?;
    let (mean, var) = mean_var(&v);
    assert!(mean.abs() < 0.015, "mean {mean}");
    assert!((var - 1.0).abs() < 0.02, "variance {var}");
    // about 68.3% within one standard deviation
    let within = v.iter().filter(|x| x.abs() < 1.0).count() as f64 / v.len() as f64;
    assert!((within - 0.6827).abs() < 0.01, "within 1 sigma: {within}");
    let h = Tensor::randn(&[1000], DType::BF16, dev, &mut Rng::new(12))?;
    assert!(as_f64(&h)?.iter().all(|x| x.is_finite()));
    Ok(())
});

test_device!(rand_and_randn_refuse_non_float_dtypes, |dev: &Device| {
    let mut rng = Rng::new(0);
    for dt in [DType::I64, DType::I32, DType::U8, DType::Bool] {
        let e = refused!(Tensor::rand(&[2], dt, dev, &mut rng), "rand", "to_dtype");
        assert!(matches!(e, Error::UnsupportedDType { .. }));
        refused!(Tensor::randn(&[2], dt, dev, &mut rng), "randn");
    }
    Ok(())
});

// ------------------------------------------------------------ to_vec, item

test_device!(
    to_vec_reads_non_contiguous_tensors_in_logical_order,
    |dev: &Device| {
        let x = Tensor::arange(0i32, 12, dev)?.reshape(&[3, 4])?;
        // x.T.flatten()
        assert_eq!(
            x.t()?.to_vec::<i32>()?,
            [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]
        );
        // x[1:, ::2].flatten()
        assert_eq!(
            x.slice(0, 1, 3, 1)?.slice(1, 0, 4, 2)?.to_vec::<i32>()?,
            [4, 6, 8, 10]
        );
        // np.broadcast_to(x[:, :1], (3, 2)).flatten()
        assert_eq!(
            x.narrow(1, 0, 1)?.expand(&[3, 2])?.to_vec::<i32>()?,
            [0, 0, 4, 4, 8, 8]
        );
        // np.diagonal(x, 1)
        assert_eq!(x.diagonal(1, 0, 1)?.to_vec::<i32>()?, [1, 6, 11]);
        Ok(())
    }
);

test_device!(to_vec_refuses_the_wrong_element_type, |dev: &Device| {
    let x = Tensor::arange(0.0f32, 3.0, dev)?;
    let e = refused!(x.to_vec::<f64>(), "to_vec", "F32", "F64", "to_vec::<f32>()");
    assert!(matches!(e, Error::ElementTypeMismatch { .. }));
    // bool and u8 share a storage type but not a dtype
    let b = Tensor::from_slice(&[true], &[1], dev)?;
    refused!(b.to_vec::<u8>(), "to_vec");
    Ok(())
});

test_device!(
    item_refuses_many_or_no_elements_and_wrong_type,
    |dev: &Device| {
        let x = Tensor::arange(0.0f32, 3.0, dev)?;
        let snap = snapshot(&x);
        let e = refused!(x.item::<f32>(), "item", "exactly one element");
        assert!(matches!(e, Error::InvalidArgument { .. }));
        refused!(
            Tensor::zeros(&[0], DType::F32, dev)?.item::<f32>(),
            "exactly one"
        );
        refused!(x.narrow(0, 1, 1)?.item::<i64>(), "F32", "I64");
        assert_eq!(x.narrow(0, 2, 1)?.item::<f32>()?, 2.0);
        assert_eq!(snapshot(&x), snap);
        Ok(())
    }
);

// ---------------------------------------------------------------- to_dtype

test_device!(to_dtype_from_f32_to_every_dtype, |dev: &Device| {
    let x = Tensor::from_slice(&[1.7f32, -2.5, 0.0, 3.0], &[4], dev)?;
    // np.array([1.7, -2.5, 0, 3], np.float32).astype(...): floats round to the
    // nearest representable value, ints truncate toward zero, bool is x != 0
    let cases: [(DType, [f64; 4]); 7] = [
        (DType::F32, [1.7000000476837158, -2.5, 0.0, 3.0]),
        (DType::F64, [1.7000000476837158, -2.5, 0.0, 3.0]),
        (DType::F16, [1.7001953125, -2.5, 0.0, 3.0]),
        // bf16: 1.7f32 = 0x3FD9999A rounds to 0x3FDA = 1.703125
        (DType::BF16, [1.703125, -2.5, 0.0, 3.0]),
        (DType::I64, [1.0, -2.0, 0.0, 3.0]),
        (DType::I32, [1.0, -2.0, 0.0, 3.0]),
        (DType::Bool, [1.0, 1.0, 0.0, 1.0]),
    ];
    for (dt, want) in cases {
        let y = x.to_dtype(dt)?;
        assert_eq!(y.dtype(), dt);
        assert_eq!(as_f64(&y)?, want, "{dt:?}");
    }
    // u8 for non-negative values: np.array([0.9, 2.5, 255.0]).astype(np.uint8)
    let p = Tensor::from_slice(&[0.9f32, 2.5, 255.0], &[3], dev)?;
    assert_eq!(p.to_dtype(DType::U8)?.to_vec::<u8>()?, [0, 2, 255]);
    Ok(())
});

test_device!(to_dtype_from_every_dtype_to_f32, |dev: &Device| {
    let sources = [
        Tensor::from_slice(&[1.5f64, -2.0], &[2], dev)?,
        Tensor::from_slice(&[f16::from_f32(1.5), f16::from_f32(-2.0)], &[2], dev)?,
        Tensor::from_slice(&[bf16::from_f32(1.5), bf16::from_f32(-2.0)], &[2], dev)?,
        Tensor::from_slice(&[3i64, -2], &[2], dev)?,
        Tensor::from_slice(&[3i32, -2], &[2], dev)?,
        Tensor::from_slice(&[3u8, 200], &[2], dev)?,
        Tensor::from_slice(&[true, false], &[2], dev)?,
    ];
    let want: [[f32; 2]; 7] = [
        [1.5, -2.0],
        [1.5, -2.0],
        [1.5, -2.0],
        [3.0, -2.0],
        [3.0, -2.0],
        [3.0, 200.0],
        [1.0, 0.0],
    ];
    for (s, w) in sources.iter().zip(want) {
        let y = s.to_dtype(DType::F32)?;
        assert_eq!(y.to_vec::<f32>()?, w, "{:?}", s.dtype());
        assert!(!y.shares_storage(s));
    }
    Ok(())
});

test_device!(
    to_dtype_of_the_same_dtype_is_the_same_tensor,
    |dev: &Device| {
        let x = Tensor::arange(0.0f32, 3.0, dev)?;
        assert!(x.to_dtype(DType::F32)?.is_same(&x));
        Ok(())
    }
);

test_device!(
    to_dtype_of_a_transpose_is_contiguous_in_logical_order,
    |dev: &Device| {
        let x = Tensor::arange(0i64, 6, dev)?.reshape(&[2, 3])?.t()?;
        let y = x.to_dtype(DType::F64)?;
        assert_eq!(meta(&y), (vec![3, 2], vec![2, 1], 0));
        assert_close64(&y.to_vec::<f64>()?, &[0., 3., 1., 4., 2., 5.], 0.0);
        Ok(())
    }
);

test_device!(to_dtype_int_to_int_and_bool, |dev: &Device| {
    let x = Tensor::from_slice(&[-3i64, 0, 7], &[3], dev)?;
    assert_eq!(x.to_dtype(DType::I32)?.to_vec::<i32>()?, [-3, 0, 7]);
    assert_eq!(
        x.to_dtype(DType::Bool)?.to_vec::<bool>()?,
        [true, false, true]
    );
    assert_close(
        &x.to_dtype(DType::F16)?
            .to_dtype(DType::F32)?
            .to_vec::<f32>()?,
        &[-3., 0., 7.],
        0.0,
    );
    Ok(())
});

// ------------------------------------------------------ dtype round trips

fn round_trip<T: Element>(vals: &[T], dt: DType, dev: &Device) -> Result<()> {
    let t = Tensor::from_slice(vals, &[vals.len()], dev)?;
    assert_eq!(t.dtype(), dt);
    assert_eq!(t.element_size(), dt.size_in_bytes());
    assert_eq!(t.storage_nbytes(), vals.len() * dt.size_in_bytes());
    assert_eq!(t.to_vec::<T>()?, vals, "{dt:?}");
    Ok(())
}

test_device!(
    every_dtype_round_trips_through_from_slice,
    |dev: &Device| {
        round_trip(
            &[1.5f32, -0.0, f32::MAX, f32::MIN_POSITIVE],
            DType::F32,
            dev,
        )?;
        round_trip(&[1.5f64, -1e300, f64::EPSILON], DType::F64, dev)?;
        round_trip(
            &[f16::from_f32(0.5), f16::MAX, f16::from_f32(-3.25)],
            DType::F16,
            dev,
        )?;
        round_trip(
            &[bf16::from_f32(0.5), bf16::MAX, bf16::from_f32(-3.25)],
            DType::BF16,
            dev,
        )?;
        round_trip(&[i64::MIN, -1, i64::MAX], DType::I64, dev)?;
        round_trip(&[i32::MIN, 0, i32::MAX], DType::I32, dev)?;
        round_trip(&[0u8, 128, 255], DType::U8, dev)?;
        round_trip(&[true, false, true], DType::Bool, dev)?;
        Ok(())
    }
);

test_device!(half_types_store_their_bits, |dev: &Device| {
    // f16 1.0 = 0x3C00, bf16 1.0 = 0x3F80 (little endian bytes)
    let h = Tensor::from_slice(&[f16::ONE], &[1], dev)?;
    assert_eq!(h.view_dtype(DType::U8)?.to_vec::<u8>()?, [0x00, 0x3C]);
    let b = Tensor::from_slice(&[bf16::ONE], &[1], dev)?;
    assert_eq!(b.view_dtype(DType::U8)?.to_vec::<u8>()?, [0x80, 0x3F]);
    Ok(())
});
