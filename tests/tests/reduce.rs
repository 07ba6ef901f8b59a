//! Reductions and softmax against numpy-computed values (PyTorch semantics).
//!
//! Unless noted, `x` is `arange(24, f32).reshape(2, 3, 4)` and `m` is the
//! 3x4 matrix below; expected literals come from numpy on the same inputs.
mod common;
use common::{assert_close, assert_close64, snapshot};
use kael_core::{DType, Device, Error, Result, Tensor};

fn x24(dev: &Device) -> Result<Tensor> {
    Tensor::arange(0.0f32, 24.0, dev)?.reshape(&[2, 3, 4])
}

/// `m = [[3,-1,7,2],[0.5,9,-4,9],[6,6,1,-8]]` (f32).
fn m34(dev: &Device) -> Result<Tensor> {
    Tensor::from_slice(
        &[
            3.0f32, -1.0, 7.0, 2.0, 0.5, 9.0, -4.0, 9.0, 6.0, 6.0, 1.0, -8.0,
        ],
        &[3, 4],
        dev,
    )
}

/// `a = [[1,2,3],[-1,0.5,4]]` (f64).
fn a23(dev: &Device) -> Result<Tensor> {
    Tensor::from_slice(&[1.0f64, 2.0, 3.0, -1.0, 0.5, 4.0], &[2, 3], dev)
}

// ------------------------------------------------------------------- sum

test_device!(sum_dim_of_contiguous_input_matches_numpy, |dev: &Device| {
    let s = x24(dev)?.sum_dim(1, false)?;
    assert_eq!(s.shape(), &[2, 4]);
    assert_eq!(
        s.to_vec::<f32>()?,
        vec![12.0, 15.0, 18.0, 21.0, 48.0, 51.0, 54.0, 57.0]
    );
    Ok(())
});

test_device!(sum_keepdim_leaves_a_size_one_dim, |dev: &Device| {
    let s = x24(dev)?.sum_dim(1, true)?;
    assert_eq!(s.shape(), &[2, 1, 4]);
    assert!(s.is_contiguous() && !s.is_view());
    assert_eq!(
        s.to_vec::<f32>()?,
        vec![12.0, 15.0, 18.0, 21.0, 48.0, 51.0, 54.0, 57.0]
    );
    Ok(())
});

test_device!(
    sum_over_several_dims_accepts_negative_dims,
    |dev: &Device| {
        // numpy: x.sum((0, 2))
        let s = x24(dev)?.sum(&[-1, 0], false)?;
        assert_eq!(s.shape(), &[3]);
        assert_eq!(s.to_vec::<f32>()?, vec![60.0, 92.0, 124.0]);
        assert_eq!(x24(dev)?.sum(&[0, 2], true)?.shape(), &[1, 3, 1]);
        Ok(())
    }
);

test_device!(sum_of_transposed_input_matches_numpy, |dev: &Device| {
    // numpy: x.transpose(2, 1, 0).sum(0), shape (3, 2)
    let s = x24(dev)?.transpose(0, 2)?.sum_dim(0, false)?;
    assert_eq!(s.shape(), &[3, 2]);
    assert_eq!(s.to_vec::<f32>()?, vec![6.0, 54.0, 22.0, 70.0, 38.0, 86.0]);
    Ok(())
});

test_device!(sum_of_step_sliced_input_matches_numpy, |dev: &Device| {
    // numpy: x[:, :, 0:4:2].sum(2)
    let s = x24(dev)?.slice(2, 0, 4, 2)?.sum_dim(2, false)?;
    assert_eq!(s.to_vec::<f32>()?, vec![2.0, 10.0, 18.0, 26.0, 34.0, 42.0]);
    Ok(())
});

test_device!(sum_of_expanded_input_counts_each_repeat, |dev: &Device| {
    // [1.5, -2, 4] broadcast to 4 rows: column sums are 4x the row.
    let r = Tensor::from_slice(&[1.5f32, -2.0, 4.0], &[1, 3], dev)?.expand(&[4, 3])?;
    assert_eq!(r.sum_dim(0, false)?.to_vec::<f32>()?, vec![6.0, -8.0, 16.0]);
    assert_eq!(r.sum_all()?.item::<f32>()?, 14.0);
    Ok(())
});

test_device!(sum_with_no_dims_reduces_every_dim, |dev: &Device| {
    let s = x24(dev)?.sum(&[], false)?;
    assert_eq!(s.shape(), &[] as &[usize]);
    assert_eq!(s.item::<f32>()?, 276.0);
    assert_eq!(x24(dev)?.sum(&[], true)?.shape(), &[1, 1, 1]);
    assert_eq!(x24(dev)?.sum_all()?.item::<f32>()?, 276.0);
    Ok(())
});

test_device!(sum_over_a_zero_size_dim_is_zero, |dev: &Device| {
    let z = Tensor::zeros(&[2, 0], DType::F32, dev)?;
    let s = z.sum_dim(1, false)?;
    assert_eq!((s.shape(), s.to_vec::<f32>()?), (&[2][..], vec![0.0, 0.0]));
    assert_eq!(z.sum_dim(0, false)?.shape(), &[0]);
    assert_eq!(z.sum_all()?.item::<f32>()?, 0.0);
    Ok(())
});

test_device!(sum_of_rank0_accepts_dim_0_and_minus_1, |dev: &Device| {
    let s = Tensor::scalar(2.5f32, dev)?;
    for d in [0, -1] {
        let r = s.sum_dim(d, false)?;
        assert_eq!((r.shape(), r.item::<f32>()?), (&[][..], 2.5));
    }
    assert_eq!(s.sum_dim(0, true)?.shape(), &[] as &[usize]);
    assert_eq!(s.sum_all()?.item::<f32>()?, 2.5);
    Ok(())
});

test_device!(sum_of_i32_is_i64, |dev: &Device| {
    // numpy: [[2,3,4],[-1,5,7]].sum(0, dtype=int64)
    let x = Tensor::from_slice(&[2i32, 3, 4, -1, 5, 7], &[2, 3], dev)?;
    let s = x.sum_dim(0, false)?;
    assert_eq!(s.dtype(), DType::I64);
    assert_eq!(s.to_vec::<i64>()?, vec![1, 8, 11]);
    Ok(())
});

test_device!(sum_of_u8_does_not_wrap_at_256, |dev: &Device| {
    // 200 + 100 = 300 in I64 (PyTorch promotes uint8 sums to int64)
    let x = Tensor::from_slice(&[200u8, 100], &[2], dev)?;
    assert_eq!(x.sum_all()?.item::<i64>()?, 300);
    Ok(())
});

test_device!(sum_of_f32_accumulates_in_f64, |dev: &Device| {
    // 2^24 + 1 + 1 + 1 + 1 = 16777220, exact in f32; adding the ones one at
    // a time in f32 would lose each of them (2^24 + 1 rounds to 2^24).
    let x = Tensor::from_slice(&[16777216.0f32, 1.0, 1.0, 1.0, 1.0], &[5], dev)?;
    assert_eq!(x.sum_all()?.item::<f32>()?, 16777220.0);
    Ok(())
});

test_device!(sum_of_f64_matches_numpy, |dev: &Device| {
    // numpy: a.sum(1)
    let s = a23(dev)?.sum_dim(-1, false)?;
    assert_close64(&s.to_vec::<f64>()?, &[6.0, 3.5], 1e-15);
    Ok(())
});

// ------------------------------------------------------------------ mean

test_device!(mean_dim_matches_numpy, |dev: &Device| {
    // numpy: x.mean(1)
    let m = x24(dev)?.mean_dim(1, false)?;
    assert_eq!(m.shape(), &[2, 4]);
    assert_close(
        &m.to_vec::<f32>()?,
        &[4.0, 5.0, 6.0, 7.0, 16.0, 17.0, 18.0, 19.0],
        1e-7,
    );
    Ok(())
});

test_device!(
    mean_of_f64_over_several_dims_matches_numpy,
    |dev: &Device| {
        let y = Tensor::from_slice(&[0.5f64, 1.25, -3.0, 2.0, 7.5, 0.125], &[2, 3], dev)?;
        // numpy: y.mean((0, 1)) = 1.3958333333333333, y.mean(-1)
        assert_close64(
            &[y.mean(&[0, 1], false)?.item::<f64>()?],
            &[1.3958333333333333],
            1e-15,
        );
        assert_close64(
            &y.mean_dim(-1, false)?.to_vec::<f64>()?,
            &[-0.4166666666666667, 3.2083333333333335],
            1e-15,
        );
        // transposed input, reduced along its dim 0: the same row means
        assert_close64(
            &y.t()?.mean_dim(0, true)?.to_vec::<f64>()?,
            &[-0.4166666666666667, 3.2083333333333335],
            1e-15,
        );
        assert_close64(
            &[y.mean_all()?.item::<f64>()?],
            &[1.3958333333333333],
            1e-15,
        );
        Ok(())
    }
);

test_device!(
    mean_keepdim_keeps_dtype_and_size_one_dims,
    |dev: &Device| {
        let m = x24(dev)?.mean(&[0, 2], true)?;
        assert_eq!((m.shape(), m.dtype()), (&[1, 3, 1][..], DType::F32));
        // numpy: x.mean((0, 2)) = [7.5, 11.5, 15.5]
        assert_close(&m.to_vec::<f32>()?, &[7.5, 11.5, 15.5], 1e-7);
        Ok(())
    }
);

test_device!(mean_of_an_empty_dim_is_nan, |dev: &Device| {
    let z = Tensor::zeros(&[2, 0], DType::F32, dev)?;
    let m = z.mean_dim(1, false)?.to_vec::<f32>()?;
    assert!(m.len() == 2 && m.iter().all(|v| v.is_nan()));
    assert!(z.mean_all()?.item::<f32>()?.is_nan());
    Ok(())
});

test_device!(mean_of_f16_does_not_overflow_in_the_sum, |dev: &Device| {
    // 60000 + 60000 overflows f16 (max 65504), the mean 60000 does not.
    let v = kael_core::f16::from_f32(60000.0);
    let x = Tensor::from_slice(&[v, v], &[2], dev)?;
    let m = x.mean_all()?;
    assert_eq!(m.dtype(), DType::F16);
    assert_eq!(m.item::<kael_core::f16>()?.to_f32(), 60000.0);
    Ok(())
});

// ------------------------------------------------------------------ prod

test_device!(
    prod_dim_of_transposed_input_matches_numpy,
    |dev: &Device| {
        // p = [[1.5,-2],[3,0.5],[2,4]]; numpy: p.T.prod(1) = [9, -4]
        let p = Tensor::from_slice(&[1.5f32, -2.0, 3.0, 0.5, 2.0, 4.0], &[3, 2], dev)?;
        let r = p.t()?.prod_dim(1, false)?;
        assert_eq!(r.to_vec::<f32>()?, vec![9.0, -4.0]);
        assert_eq!(p.t()?.prod_dim(-1, true)?.shape(), &[2, 1]);
        Ok(())
    }
);

test_device!(prod_of_i32_is_i64, |dev: &Device| {
    // numpy: [[2,3,4],[-1,5,7]].prod(1, dtype=int64)
    let x = Tensor::from_slice(&[2i32, 3, 4, -1, 5, 7], &[2, 3], dev)?;
    let p = x.prod_dim(1, false)?;
    assert_eq!((p.dtype(), p.to_vec::<i64>()?), (DType::I64, vec![24, -35]));
    Ok(())
});

test_device!(prod_over_an_empty_dim_is_one, |dev: &Device| {
    let z = Tensor::zeros(&[0, 3], DType::F64, dev)?;
    assert_eq!(z.prod_dim(0, false)?.to_vec::<f64>()?, vec![1.0; 3]);
    Ok(())
});

// -------------------------------------------------------------- max, min

test_device!(max_dim_and_min_dim_match_numpy, |dev: &Device| {
    let m = m34(dev)?;
    assert_eq!(m.max_dim(1, false)?.to_vec::<f32>()?, vec![7.0, 9.0, 6.0]);
    assert_eq!(
        m.min_dim(0, false)?.to_vec::<f32>()?,
        vec![0.5, -1.0, -4.0, -8.0]
    );
    assert_eq!(m.max_dim(-1, true)?.shape(), &[3, 1]);
    Ok(())
});

test_device!(max_dim_of_transposed_input_matches_numpy, |dev: &Device| {
    // numpy: m.T.max(1)
    let r = m34(dev)?.t()?.max_dim(1, false)?;
    assert_eq!(r.to_vec::<f32>()?, vec![6.0, 9.0, 7.0, 9.0]);
    Ok(())
});

test_device!(
    min_dim_of_step_sliced_input_matches_numpy,
    |dev: &Device| {
        // numpy: m[:, 1:4:2].min(1)
        let r = m34(dev)?.slice(1, 1, 4, 2)?.min_dim(1, false)?;
        assert_eq!(r.to_vec::<f32>()?, vec![-1.0, 9.0, -8.0]);
        Ok(())
    }
);

test_device!(
    max_of_expanded_input_is_the_broadcast_value,
    |dev: &Device| {
        let r = Tensor::from_slice(&[1.0f32, -5.0], &[2, 1], dev)?.expand(&[2, 3])?;
        assert_eq!(r.max_dim(1, false)?.to_vec::<f32>()?, vec![1.0, -5.0]);
        assert_eq!(r.min_all()?.item::<f32>()?, -5.0);
        Ok(())
    }
);

test_device!(max_all_and_min_all_give_rank0, |dev: &Device| {
    let m = m34(dev)?;
    let hi = m.max_all()?;
    assert_eq!((hi.shape(), hi.item::<f32>()?), (&[][..], 9.0));
    assert_eq!(m.min_all()?.item::<f32>()?, -8.0);
    let s = Tensor::scalar(4i32, dev)?;
    assert_eq!(s.max_dim(0, false)?.item::<i32>()?, 4);
    assert_eq!(s.max_all()?.item::<i32>()?, 4);
    Ok(())
});

test_device!(max_and_min_of_i64_keep_the_dtype, |dev: &Device| {
    let x = Tensor::from_slice(&[5i64, -3, 12, -7, 0, 12], &[2, 3], dev)?;
    let r = x.max_dim(-1, false)?;
    assert_eq!((r.dtype(), r.to_vec::<i64>()?), (DType::I64, vec![12, 12]));
    assert_eq!(x.min_all()?.item::<i64>()?, -7);
    Ok(())
});

test_device!(max_and_min_propagate_nan, |dev: &Device| {
    let x = Tensor::from_slice(&[1.0f32, f32::NAN, 3.0, 2.0, -1.0, 0.0], &[2, 3], dev)?;
    let hi = x.max_dim(1, false)?.to_vec::<f32>()?;
    let lo = x.min_dim(1, false)?.to_vec::<f32>()?;
    assert!(hi[0].is_nan() && hi[1] == 2.0);
    assert!(lo[0].is_nan() && lo[1] == -1.0);
    assert!(x.max_all()?.item::<f32>()?.is_nan());
    assert!(x.min_all()?.item::<f32>()?.is_nan());
    Ok(())
});

test_device!(
    max_over_a_nonempty_dim_of_an_empty_tensor_is_empty,
    |dev: &Device| {
        // PyTorch: zeros(0, 3).amax(1) has shape (0,)
        let z = Tensor::zeros(&[0, 3], DType::F32, dev)?;
        assert_eq!(z.max_dim(1, false)?.shape(), &[0]);
        Ok(())
    }
);

// -------------------------------------------------------- argmax, argmin

test_device!(argmax_and_argmin_match_numpy, |dev: &Device| {
    let m = m34(dev)?;
    let a = m.argmax(1, false)?;
    assert_eq!((a.dtype(), a.to_vec::<i64>()?), (DType::I64, vec![2, 1, 0]));
    assert_eq!(m.argmin(0, false)?.to_vec::<i64>()?, vec![1, 0, 1, 2]);
    assert_eq!(m.argmin(-1, false)?.to_vec::<i64>()?, vec![1, 2, 3]);
    Ok(())
});

test_device!(argmax_tie_gives_the_first_index, |dev: &Device| {
    // rows [0.5, 9, -4, 9] and [6, 6, 1, -8]: ties resolve to the first.
    let m = m34(dev)?;
    assert_eq!(m.argmax(1, false)?.to_vec::<i64>()?[1..], [1, 0]);
    let x = Tensor::from_slice(&[2i32, 2, 2], &[3], dev)?;
    assert_eq!(x.argmax(0, false)?.item::<i64>()?, 0);
    assert_eq!(x.argmin(0, false)?.item::<i64>()?, 0);
    Ok(())
});

test_device!(argmax_of_transposed_input_matches_numpy, |dev: &Device| {
    // numpy: m.T.argmax(1)
    let a = m34(dev)?.t()?.argmax(1, false)?;
    assert_eq!(a.to_vec::<i64>()?, vec![2, 1, 0, 1]);
    Ok(())
});

test_device!(argmax_keepdim_and_rank0, |dev: &Device| {
    let a = m34(dev)?.argmax(0, true)?;
    assert_eq!(a.shape(), &[1, 4]);
    assert_eq!(a.to_vec::<i64>()?, vec![2, 1, 0, 1]);
    let s = Tensor::scalar(3.0f32, dev)?;
    for keep in [false, true] {
        let r = s.argmax(-1, keep)?;
        assert_eq!((r.shape(), r.item::<i64>()?), (&[][..], 0));
    }
    Ok(())
});

test_device!(argmax_and_argmin_pick_the_first_nan, |dev: &Device| {
    let x = Tensor::from_slice(&[1.0f64, f64::NAN, 7.0, f64::NAN], &[4], dev)?;
    assert_eq!(x.argmax(0, false)?.item::<i64>()?, 1);
    assert_eq!(x.argmin(0, false)?.item::<i64>()?, 1);
    Ok(())
});

test_device!(argmax_of_i64_matches_numpy, |dev: &Device| {
    let x = Tensor::from_slice(&[5i64, -3, 12, -7, 0, 12], &[2, 3], dev)?;
    assert_eq!(x.argmax(-1, false)?.to_vec::<i64>()?, vec![2, 2]);
    assert_eq!(x.argmin(-1, false)?.to_vec::<i64>()?, vec![1, 0]);
    Ok(())
});

// --------------------------------------------------------------- softmax

test_device!(softmax_rows_match_numpy_and_sum_to_one, |dev: &Device| {
    let p = a23(dev)?.softmax(1)?;
    let v = p.to_vec::<f64>()?;
    assert_close64(
        &v,
        &[
            0.09003057317038046,
            0.24472847105479764,
            0.6652409557748218,
            0.00649794331566194,
            0.0291217615374784,
            0.9643802951468596,
        ],
        1e-15,
    );
    assert_close64(&p.sum_dim(1, false)?.to_vec::<f64>()?, &[1.0, 1.0], 1e-15);
    Ok(())
});

test_device!(softmax_of_transposed_input_matches_numpy, |dev: &Device| {
    // numpy: softmax(a.T, axis=1)
    let p = a23(dev)?.t()?.softmax(-1)?;
    assert_eq!(p.shape(), &[3, 2]);
    assert_close64(
        &p.to_vec::<f64>()?,
        &[
            0.8807970779778823,
            0.11920292202211755,
            0.8175744761936437,
            0.18242552380635632,
            0.2689414213699951,
            0.7310585786300049,
        ],
        1e-15,
    );
    Ok(())
});

test_device!(softmax_of_expanded_input_matches_numpy, |dev: &Device| {
    // numpy: softmax(broadcast_to([[0],[2]], (2,3)), axis=0)
    let x = Tensor::from_slice(&[0.0f64, 2.0], &[2, 1], dev)?.expand(&[2, 3])?;
    let (a, b) = (0.11920292202211755, 0.8807970779778823);
    assert_close64(&x.softmax(0)?.to_vec::<f64>()?, &[a, a, a, b, b, b], 1e-15);
    Ok(())
});

test_device!(softmax_of_large_logits_does_not_overflow, |dev: &Device| {
    // e^1000 overflows; numpy (max-subtracted): [0.2689414213699951, 0.7310585786300049]
    let x = Tensor::from_slice(&[1000.0f32, 1001.0], &[2], dev)?;
    assert_close(
        &x.softmax(0)?.to_vec::<f32>()?,
        &[0.26894142, 0.7310586],
        1e-6,
    );
    Ok(())
});

test_device!(log_softmax_of_large_logits_is_stable, |dev: &Device| {
    let x = Tensor::from_slice(&[1000.0f64, 1001.0], &[2], dev)?;
    assert_close64(
        &x.log_softmax(0)?.to_vec::<f64>()?,
        &[-1.3132616875182228, -0.31326168751822286],
        1e-13,
    );
    // log(softmax) naively gives log(0) = -inf for the first entry
    let y = Tensor::from_slice(&[-1000.0f32, 0.0], &[2], dev)?;
    assert_close(&y.log_softmax(0)?.to_vec::<f32>()?, &[-1000.0, 0.0], 1e-6);
    Ok(())
});

test_device!(log_softmax_rows_match_numpy, |dev: &Device| {
    assert_close64(
        &a23(dev)?.log_softmax(1)?.to_vec::<f64>()?,
        &[
            -2.4076059644443806,
            -1.4076059644443804,
            -0.4076059644443804,
            -5.036269565124779,
            -3.5362695651247793,
            -0.03626956512477912,
        ],
        1e-14,
    );
    Ok(())
});

test_device!(softmax_handles_minus_inf_and_nan, |dev: &Device| {
    // [-inf, 0] -> [0, 1]; a row holding NaN is NaN throughout (PyTorch).
    let x = Tensor::from_slice(&[f32::NEG_INFINITY, 0.0, f32::NAN, 1.0], &[2, 2], dev)?;
    let p = x.softmax(1)?.to_vec::<f32>()?;
    assert_eq!(p[..2], [0.0, 1.0]);
    assert!(p[2].is_nan() && p[3].is_nan());
    Ok(())
});

test_device!(softmax_of_rank0_and_empty_tensors, |dev: &Device| {
    let s = Tensor::scalar(3.0f32, dev)?;
    let p = s.softmax(0)?;
    assert_eq!((p.shape(), p.item::<f32>()?), (&[][..], 1.0));
    assert_eq!(s.log_softmax(-1)?.item::<f32>()?, 0.0);
    let z = Tensor::zeros(&[0, 3], DType::F32, dev)?;
    assert_eq!(z.softmax(1)?.shape(), &[0, 3]);
    Ok(())
});

test_device!(logsumexp_matches_numpy, |dev: &Device| {
    let a = a23(dev)?;
    assert_close64(
        &a.logsumexp(1, false)?.to_vec::<f64>()?,
        &[3.4076059644443806, 4.036269565124779],
        1e-15,
    );
    let k = a.logsumexp(0, true)?;
    assert_eq!(k.shape(), &[1, 3]);
    assert_close64(
        &k.to_vec::<f64>()?,
        &[1.1269280110429725, 2.2014132779827524, 4.313261687518223],
        1e-15,
    );
    Ok(())
});

test_device!(
    logsumexp_is_stable_for_large_and_infinite_inputs,
    |dev: &Device| {
        let x = Tensor::from_slice(&[1000.0f64, 1001.0], &[2], dev)?;
        assert_close64(
            &[x.logsumexp(0, false)?.item::<f64>()?],
            &[1001.3132616875182],
            1e-15,
        );
        // PyTorch: logsumexp([-inf, -inf]) = -inf, logsumexp([inf, 1]) = inf
        let y = Tensor::from_slice(
            &[f64::NEG_INFINITY, f64::NEG_INFINITY, f64::INFINITY, 1.0],
            &[2, 2],
            dev,
        )?;
        assert_eq!(
            y.logsumexp(1, false)?.to_vec::<f64>()?,
            vec![f64::NEG_INFINITY, f64::INFINITY]
        );
        // over an empty dim: log(0) = -inf
        let z = Tensor::zeros(&[2, 0], DType::F32, dev)?;
        assert_eq!(
            z.logsumexp(1, false)?.to_vec::<f32>()?,
            vec![f32::NEG_INFINITY; 2]
        );
        Ok(())
    }
);

test_device!(
    logsumexp_over_an_empty_dim_stays_in_the_graph,
    |dev: &Device| {
        // PyTorch: torch.logsumexp(torch.zeros(2, 0, requires_grad=True), 1)
        // is [-inf, -inf] with a grad_fn; backward gives an empty [2, 0] grad.
        let z = Tensor::zeros(&[2, 0], DType::F32, dev)?.requires_grad_(true)?;
        let l = z.logsumexp(1, false)?;
        assert_eq!(l.to_vec::<f32>()?, vec![f32::NEG_INFINITY; 2]);
        assert!(l.requires_grad());
        l.sum_all()?.backward()?;
        assert_eq!(z.grad().map(|g| g.shape().to_vec()), Some(vec![2, 0]));
        Ok(())
    }
);

// ----------------------------------------------------------- bad inputs

/// Runs `$f` on `$t`, asserts it fails with a message containing `$hint`,
/// and that `$t` is unchanged afterwards; evaluates to the error. (A macro,
/// so its asserts sit inside the test function.)
macro_rules! refused {
    ($t:expr, $hint:expr, $f:expr) => {{
        let t: &Tensor = $t;
        let before = snapshot(t);
        let f: &dyn Fn(&Tensor) -> Result<Tensor> = &$f;
        let e = f(t).expect_err("the op should have been refused");
        let msg = e.to_string();
        assert!(msg.contains($hint), "message {msg:?} lacks {:?}", $hint);
        assert_eq!(snapshot(t), before);
        e
    }};
}

test_device!(
    sum_rejects_out_of_range_and_repeated_dims,
    |dev: &Device| {
        let m = m34(dev)?;
        let e = refused!(&m, "pass a dim in -2..2", |t| t.sum(&[2], false));
        assert!(matches!(
            e,
            Error::DimOutOfRange {
                op: "sum",
                dim: 2,
                rank: 2
            }
        ));
        let e = refused!(&m, "at most once", |t| t.sum(&[1, -1], false));
        assert!(matches!(e, Error::InvalidArgument { op: "sum", .. }));
        Ok(())
    }
);

// PyTorch counts the trues, in I64.
test_device!(sum_of_bool_counts_the_trues_in_i64, |dev: &Device| {
    let b = Tensor::from_slice(&[true, false, true, true], &[2, 2], dev)?;
    let s = b.sum_dim(0, false)?;
    assert_eq!(s.dtype(), DType::I64);
    assert_eq!(s.to_vec::<i64>()?, vec![2, 1]);
    assert_eq!(b.sum_all()?.item::<i64>()?, 3);
    assert_eq!(b.sum(&[1], true)?.to_vec::<i64>()?, vec![1, 2]);
    let e = b.sum_dim(2, false).unwrap_err();
    assert!(
        matches!(e, Error::DimOutOfRange { op: "sum_dim", .. }),
        "{e}"
    );
    Ok(())
});

test_device!(sum_dim_on_rank0_rejects_dim_1, |dev: &Device| {
    let s = Tensor::scalar(1.0f32, dev)?;
    let e = refused!(&s, "rank-0", |t| t.sum_dim(1, false));
    assert!(matches!(
        e,
        Error::DimOutOfRange {
            dim: 1,
            rank: 0,
            ..
        }
    ));
    Ok(())
});

test_device!(mean_rejects_integers, |dev: &Device| {
    let x = Tensor::arange(0i64, 4, dev)?;
    let e = refused!(&x, "to_dtype", |t| t.mean(&[0], false));
    assert!(matches!(
        e,
        Error::UnsupportedDType {
            op: "mean",
            dtype: DType::I64,
            ..
        }
    ));
    Ok(())
});

test_device!(mean_dim_rejects_out_of_range_dim, |dev: &Device| {
    let m = m34(dev)?;
    let e = refused!(&m, "-2..2", |t| t.mean_dim(-3, false));
    assert!(matches!(
        e,
        Error::DimOutOfRange {
            op: "mean_dim",
            dim: -3,
            ..
        }
    ));
    Ok(())
});

test_device!(mean_all_rejects_integers, |dev: &Device| {
    let x = Tensor::from_slice(&[1u8, 2], &[2], dev)?;
    let e = refused!(&x, "to_dtype", |t| t.mean_all());
    assert!(matches!(e, Error::UnsupportedDType { op: "mean_all", .. }));
    Ok(())
});

test_device!(prod_dim_rejects_out_of_range_dim, |dev: &Device| {
    let m = m34(dev)?;
    let e = refused!(&m, "-2..2", |t| t.prod_dim(2, false));
    assert!(matches!(e, Error::DimOutOfRange { op: "prod_dim", .. }));
    Ok(())
});

test_device!(max_dim_rejects_an_empty_dim, |dev: &Device| {
    let z = Tensor::zeros(&[3, 0], DType::F32, dev)?;
    let e = refused!(&z, "reduce a non-empty dimension", |t| t.max_dim(1, false));
    assert!(matches!(e, Error::InvalidArgument { op: "max_dim", .. }));
    Ok(())
});

test_device!(min_dim_rejects_bool, |dev: &Device| {
    let b = Tensor::from_slice(&[true, false], &[2], dev)?;
    let e = refused!(&b, "to_dtype", |t| t.min_dim(0, false));
    assert!(matches!(e, Error::UnsupportedDType { op: "min_dim", .. }));
    Ok(())
});

test_device!(max_all_rejects_an_empty_tensor, |dev: &Device| {
    let z = Tensor::zeros(&[0], DType::I64, dev)?;
    let e = refused!(&z, "non-empty", |t| t.max_all());
    assert!(matches!(e, Error::InvalidArgument { op: "max_all", .. }));
    Ok(())
});

test_device!(min_all_rejects_an_empty_tensor, |dev: &Device| {
    let z = Tensor::zeros(&[2, 0], DType::F64, dev)?;
    let e = refused!(&z, "non-empty", |t| t.min_all());
    assert!(matches!(e, Error::InvalidArgument { op: "min_all", .. }));
    Ok(())
});

test_device!(argmax_rejects_an_empty_dim, |dev: &Device| {
    let z = Tensor::zeros(&[0, 2], DType::F32, dev)?;
    let e = refused!(&z, "non-empty", |t| t.argmax(0, false));
    assert!(matches!(e, Error::InvalidArgument { op: "argmax", .. }));
    Ok(())
});

test_device!(argmin_rejects_out_of_range_dim, |dev: &Device| {
    let m = m34(dev)?;
    let e = refused!(&m, "-2..2", |t| t.argmin(5, false));
    assert!(matches!(
        e,
        Error::DimOutOfRange {
            op: "argmin",
            dim: 5,
            ..
        }
    ));
    Ok(())
});

test_device!(softmax_rejects_integers, |dev: &Device| {
    let x = Tensor::arange(0i32, 3, dev)?;
    let e = refused!(&x, "to_dtype", |t| t.softmax(0));
    assert!(matches!(
        e,
        Error::UnsupportedDType {
            op: "softmax",
            dtype: DType::I32,
            ..
        }
    ));
    Ok(())
});

test_device!(log_softmax_rejects_out_of_range_dim, |dev: &Device| {
    let m = m34(dev)?;
    let e = refused!(&m, "-2..2", |t| t.log_softmax(2));
    assert!(matches!(
        e,
        Error::DimOutOfRange {
            op: "log_softmax",
            ..
        }
    ));
    Ok(())
});

test_device!(logsumexp_rejects_integers, |dev: &Device| {
    let x = Tensor::arange(0i64, 3, dev)?;
    let e = refused!(&x, "to_dtype", |t| t.logsumexp(0, false));
    assert!(matches!(
        e,
        Error::UnsupportedDType {
            op: "logsumexp",
            ..
        }
    ));
    Ok(())
});
