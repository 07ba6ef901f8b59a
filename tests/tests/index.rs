//! Joining and indexing against numpy: `cat`, `stack`, `index_select`
//! (`np.take`), `gather` (`np.take_along_axis`), `index_add` and
//! `scatter_add` (explicit loops of `+=`), `embedding` (`W[ids]`), and the
//! errors each refuses with, leaving every input unchanged.
mod common;
use common::snapshot;
use kael_core::{DType, Device, Error, Result, Tensor};

fn ar(start: f32, end: f32, shape: &[usize], dev: &Device) -> Result<Tensor> {
    Tensor::arange(start, end, dev)?.reshape(shape)
}

fn ids(v: &[i64], shape: &[usize], dev: &Device) -> Result<Tensor> {
    Tensor::from_slice(v, shape, dev)
}

// -------------------------------------------------------------------- cat

test_device!(
    cat_along_dim0_copies_non_contiguous_inputs,
    |dev: &Device| {
        // x = np.arange(6).reshape(2,3); z = np.arange(100,106).reshape(3,2).T
        let x = ar(0.0, 6.0, &[2, 3], dev)?;
        let z = ar(100.0, 106.0, &[3, 2], dev)?.t()?;
        let c = Tensor::cat(&[&x, &z], 0)?;
        assert_eq!(c.shape(), &[4, 3]);
        assert!(c.is_contiguous() && !c.shares_storage(&x));
        assert_eq!(
            c.to_vec::<f32>()?,
            vec![
                0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 100.0, 102.0, 104.0, 101.0, 103.0, 105.0
            ]
        );
        Ok(())
    }
);

test_device!(cat_along_dim1_joins_three_widths, |dev: &Device| {
    // np.concatenate([x, np.arange(6,14).reshape(2,4), z], 1)
    let x = ar(0.0, 6.0, &[2, 3], dev)?;
    let y = ar(6.0, 14.0, &[2, 4], dev)?;
    let z = ar(100.0, 106.0, &[3, 2], dev)?.t()?;
    let c = Tensor::cat(&[&x, &y, &z], 1)?;
    assert_eq!(c.shape(), &[2, 10]);
    assert_eq!(
        c.to_vec::<f32>()?,
        vec![
            0.0, 1.0, 2.0, 6.0, 7.0, 8.0, 9.0, 100.0, 102.0, 104.0, 3.0, 4.0, 5.0, 10.0, 11.0,
            12.0, 13.0, 101.0, 103.0, 105.0
        ]
    );
    Ok(())
});

test_device!(cat_negative_dim_counts_from_the_end, |dev: &Device| {
    // np.concatenate([np.arange(24).reshape(2,3,4), np.arange(200,212).reshape(2,3,2)], -1)
    let t = ar(0.0, 24.0, &[2, 3, 4], dev)?;
    let v = ar(200.0, 212.0, &[2, 3, 2], dev)?;
    let c = Tensor::cat(&[&t, &v], -1)?;
    assert_eq!(c.shape(), &[2, 3, 6]);
    assert_eq!(
        c.to_vec::<f32>()?,
        vec![
            0.0, 1.0, 2.0, 3.0, 200.0, 201.0, 4.0, 5.0, 6.0, 7.0, 202.0, 203.0, 8.0, 9.0, 10.0,
            11.0, 204.0, 205.0, 12.0, 13.0, 14.0, 15.0, 206.0, 207.0, 16.0, 17.0, 18.0, 19.0,
            208.0, 209.0, 20.0, 21.0, 22.0, 23.0, 210.0, 211.0
        ]
    );
    Ok(())
});

test_device!(
    cat_dim_minus_rank_is_dim0_with_step_sliced_input,
    |dev: &Device| {
        // u = np.arange(100,148).reshape(4,3,4)[::2]; np.concatenate([t, u], -3)
        let t = ar(0.0, 24.0, &[2, 3, 4], dev)?;
        let u = ar(100.0, 148.0, &[4, 3, 4], dev)?.slice(0, 0, 4, 2)?;
        let c = Tensor::cat(&[&t, &u], -3)?;
        assert_eq!(c.shape(), &[4, 3, 4]);
        let want: Vec<f32> = (0..24)
            .map(|i| i as f32)
            .chain((100..112).map(|i| i as f32))
            .chain((124..136).map(|i| i as f32))
            .collect();
        assert_eq!(c.to_vec::<f32>()?, want);
        Ok(())
    }
);

test_device!(cat_middle_dim_of_3d, |dev: &Device| {
    // np.concatenate([t, np.arange(300,308).reshape(2,1,4)], 1)
    let t = ar(0.0, 24.0, &[2, 3, 4], dev)?;
    let w = ar(300.0, 308.0, &[2, 1, 4], dev)?;
    let c = Tensor::cat(&[&t, &w], 1)?;
    assert_eq!(c.shape(), &[2, 4, 4]);
    let v = c.to_vec::<f32>()?;
    assert_eq!(&v[12..16], &[300.0, 301.0, 302.0, 303.0]);
    assert_eq!(&v[16..20], &[12.0, 13.0, 14.0, 15.0]);
    assert_eq!(&v[28..32], &[304.0, 305.0, 306.0, 307.0]);
    Ok(())
});

test_device!(cat_skips_empty_parts_and_keeps_dtype, |dev: &Device| {
    let a = Tensor::from_slice(&[1i32, 2], &[2], dev)?;
    let e = Tensor::zeros(&[0], DType::I32, dev)?;
    let c = Tensor::cat(&[&e, &a, &e, &a], 0)?;
    assert_eq!(c.dtype(), DType::I32);
    assert_eq!(c.to_vec::<i32>()?, vec![1, 2, 1, 2]);
    let b = Tensor::from_slice(&[true, false], &[2], dev)?;
    assert_eq!(
        Tensor::cat(&[&b, &b], 0)?.to_vec::<bool>()?,
        vec![true, false, true, false]
    );
    Ok(())
});

// All parts empty along a non-cat dim: every piece of the output is an
// empty view whose offset lies past the (empty) storage's end; kernels must
// write nothing and not index there (found by the conformance suite).
test_device!(
    cat_of_parts_empty_along_another_dim_is_empty,
    |dev: &Device| {
        let a = Tensor::zeros(&[0, 3], DType::F32, dev)?;
        let b = Tensor::zeros(&[0, 2], DType::F32, dev)?;
        let c = Tensor::cat(&[&a, &b, &a], 1)?;
        assert_eq!(c.shape(), &[0, 8]);
        assert!(c.to_vec::<f32>()?.is_empty());
        Ok(())
    }
);

test_device!(cat_of_one_tensor_is_a_copy, |dev: &Device| {
    let a = ar(0.0, 4.0, &[2, 2], dev)?;
    let c = Tensor::cat(&[&a], 1)?;
    assert!(!c.shares_storage(&a));
    assert_eq!(c.to_vec::<f32>()?, a.to_vec::<f32>()?);
    Ok(())
});

test_device!(cat_rejects_an_empty_list, |_dev: &Device| {
    let e = Tensor::cat(&[], 0).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { op: "cat", .. }));
    assert!(e.to_string().contains("pass at least one tensor"));
    Ok(())
});

test_device!(cat_rejects_sizes_that_differ_off_dim, |dev: &Device| {
    let a = ar(0.0, 6.0, &[2, 3], dev)?;
    let b = ar(0.0, 8.0, &[2, 4], dev)?;
    let (a0, b0) = (snapshot(&a), snapshot(&b));
    let e = Tensor::cat(&[&a, &b], 0).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "cat", .. }));
    let msg = e.to_string();
    assert!(
        msg.contains("[2, 3]") && msg.contains("[2, 4]") && msg.contains("make the shapes agree")
    );
    assert!(Tensor::cat(&[&a, &b], 1).is_ok()); // the fix
    assert!(matches!(
        Tensor::cat(&[&a, &b.reshape(&[8])?], 0),
        Err(Error::ShapeMismatch { .. })
    ));
    // mixed dtypes promote (torch.cat): f32 with f64 is f64
    assert_eq!(
        Tensor::cat(&[&a, &a.to_dtype(DType::F64)?], 0)?.dtype(),
        DType::F64
    );
    assert!(matches!(
        Tensor::cat(&[&a], 2),
        Err(Error::DimOutOfRange { .. })
    ));
    let s = Tensor::scalar(1.0f32, dev)?;
    assert!(matches!(
        Tensor::cat(&[&s], 0),
        Err(Error::RankMismatch { .. })
    ));
    assert_eq!((snapshot(&a), snapshot(&b)), (a0, b0));
    Ok(())
});

// ------------------------------------------------------------------ stack

test_device!(
    stack_inserts_the_new_dim_at_each_position,
    |dev: &Device| {
        // a = np.arange(6).reshape(2,3); b = np.arange(10,16).reshape(3,2).T
        let a = ar(0.0, 6.0, &[2, 3], dev)?;
        let b = ar(10.0, 16.0, &[3, 2], dev)?.t()?;
        let outer = vec![
            0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 12.0, 14.0, 11.0, 13.0, 15.0,
        ];
        let mid = vec![
            0.0, 1.0, 2.0, 10.0, 12.0, 14.0, 3.0, 4.0, 5.0, 11.0, 13.0, 15.0,
        ];
        let inner = vec![
            0.0, 10.0, 1.0, 12.0, 2.0, 14.0, 3.0, 11.0, 4.0, 13.0, 5.0, 15.0,
        ];
        let cases: [(isize, [usize; 3], &Vec<f32>); 5] = [
            (0, [2, 2, 3], &outer),
            (1, [2, 2, 3], &mid),
            (2, [2, 3, 2], &inner),
            (-1, [2, 3, 2], &inner),
            (-3, [2, 2, 3], &outer),
        ];
        for (dim, shape, want) in cases {
            let s = Tensor::stack(&[&a, &b], dim)?;
            assert_eq!(s.shape(), &shape, "dim {dim}");
            assert_eq!(&s.to_vec::<f32>()?, want, "dim {dim}");
        }
        Ok(())
    }
);

test_device!(stack_of_scalars_is_a_vector, |dev: &Device| {
    let a = Tensor::scalar(1.0f32, dev)?;
    let b = Tensor::scalar(2.0f32, dev)?;
    let s = Tensor::stack(&[&a, &b], 0)?;
    assert_eq!(s.shape(), &[2]);
    assert_eq!(s.to_vec::<f32>()?, vec![1.0, 2.0]);
    Ok(())
});

test_device!(stack_rejects_unequal_shapes_and_bad_dims, |dev: &Device| {
    let a = ar(0.0, 6.0, &[2, 3], dev)?;
    let b = ar(0.0, 6.0, &[3, 2], dev)?;
    let (a0, b0) = (snapshot(&a), snapshot(&b));
    let e = Tensor::stack(&[&a, &b], 0).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "stack", .. }));
    assert!(e.to_string().contains("make the shapes agree"));
    let e = Tensor::stack(&[&a, &a], 3).unwrap_err();
    assert!(matches!(
        e,
        Error::DimOutOfRange {
            op: "stack",
            dim: 3,
            ..
        }
    ));
    assert!(e.to_string().contains("-3..3"));
    assert!(matches!(
        Tensor::stack(&[], 0),
        Err(Error::InvalidArgument { op: "stack", .. })
    ));
    assert_eq!(
        Tensor::stack(&[&a, &a.to_dtype(DType::I64)?], 0)?.dtype(),
        a.dtype()
    );
    assert_eq!((snapshot(&a), snapshot(&b)), (a0, b0));
    Ok(())
});

// ----------------------------------------------------------- index_select

test_device!(
    index_select_dim0_repeats_and_reorders_rows,
    |dev: &Device| {
        // np.take(np.arange(12).reshape(3,4), [2,0,2], 0)
        let x = ar(0.0, 12.0, &[3, 4], dev)?;
        let y = x.index_select(0, &ids(&[2, 0, 2], &[3], dev)?)?;
        assert_eq!(y.shape(), &[3, 4]);
        assert_eq!(
            y.to_vec::<f32>()?,
            vec![
                8.0, 9.0, 10.0, 11.0, 0.0, 1.0, 2.0, 3.0, 8.0, 9.0, 10.0, 11.0
            ]
        );
        Ok(())
    }
);

test_device!(index_select_dim1_with_i32_indices, |dev: &Device| {
    // np.take(np.arange(12).reshape(3,4), [3,1], 1)
    let x = ar(0.0, 12.0, &[3, 4], dev)?;
    let i = Tensor::from_slice(&[3i32, 1], &[2], dev)?;
    let y = x.index_select(-1, &i)?;
    assert_eq!(y.shape(), &[3, 2]);
    assert_eq!(y.to_vec::<f32>()?, vec![3.0, 1.0, 7.0, 5.0, 11.0, 9.0]);
    Ok(())
});

test_device!(
    index_select_reads_strided_indices_and_source,
    |dev: &Device| {
        // indices np.array([3,9,0,9,1,9])[::2] = [3,0,1]; source transposed twice
        let x = ar(0.0, 12.0, &[4, 3], dev)?.t()?; // [3,4], strides [1,3]
        assert!(!x.is_contiguous());
        let i = ids(&[3, 9, 0, 9, 1, 9], &[6], dev)?.slice(0, 0, 6, 2)?;
        let y = x.index_select(1, &i)?;
        // x = np.arange(12).reshape(4,3).T; np.take(x, [3,0,1], 1)
        assert_eq!(
            y.to_vec::<f32>()?,
            vec![9.0, 0.0, 3.0, 10.0, 1.0, 4.0, 11.0, 2.0, 5.0]
        );
        Ok(())
    }
);

test_device!(index_select_with_no_indices_is_empty, |dev: &Device| {
    let x = ar(0.0, 12.0, &[3, 4], dev)?;
    let y = x.index_select(0, &Tensor::zeros(&[0], DType::I64, dev)?)?;
    assert_eq!(y.shape(), &[0, 4]);
    Ok(())
});

test_device!(
    index_select_rejects_out_of_range_and_negative_indices,
    |dev: &Device| {
        let x = ar(0.0, 12.0, &[3, 4], dev)?;
        let x0 = snapshot(&x);
        let e = x.index_select(0, &ids(&[0, 3], &[2], dev)?).unwrap_err();
        assert_eq!(
            e,
            Error::IndexOutOfRange {
                op: "index_select",
                index: 3,
                size: 3
            }
        );
        assert!(e.to_string().contains("pass an index in 0..3"));
        let e = x.index_select(1, &ids(&[-1], &[1], dev)?).unwrap_err();
        assert_eq!(
            e,
            Error::IndexOutOfRange {
                op: "index_select",
                index: -1,
                size: 4
            }
        );
        let e = x
            .index_select(0, &Tensor::zeros(&[1], DType::F32, dev)?)
            .unwrap_err();
        assert!(matches!(
            e,
            Error::UnsupportedDType {
                op: "index_select",
                ..
            }
        ));
        assert!(e.to_string().contains("to_dtype"));
        let e = x.index_select(0, &ids(&[0, 1], &[1, 2], dev)?).unwrap_err();
        assert!(matches!(
            e,
            Error::RankMismatch {
                op: "index_select",
                got: 2,
                ..
            }
        ));
        assert_eq!(snapshot(&x), x0);
        Ok(())
    }
);

// ----------------------------------------------------------------- gather

test_device!(gather_dim0_follows_take_along_axis, |dev: &Device| {
    // np.take_along_axis(np.arange(12).reshape(3,4), [[2,0,1,2],[0,0,0,1]], 0)
    let x = ar(0.0, 12.0, &[3, 4], dev)?;
    let i = ids(&[2, 0, 1, 2, 0, 0, 0, 1], &[2, 4], dev)?;
    let y = x.gather(0, &i)?;
    assert_eq!(y.shape(), &[2, 4]);
    assert_eq!(
        y.to_vec::<f32>()?,
        vec![8.0, 1.0, 6.0, 11.0, 0.0, 1.0, 2.0, 7.0]
    );
    Ok(())
});

test_device!(gather_dim1_follows_take_along_axis, |dev: &Device| {
    // np.take_along_axis(np.arange(12).reshape(3,4), [[3,0],[1,1],[0,2]], 1)
    let x = ar(0.0, 12.0, &[3, 4], dev)?;
    let i = Tensor::from_slice(&[3i32, 0, 1, 1, 0, 2], &[3, 2], dev)?;
    assert_eq!(
        x.gather(-1, &i)?.to_vec::<f32>()?,
        vec![3.0, 0.0, 5.0, 5.0, 8.0, 10.0]
    );
    Ok(())
});

test_device!(
    gather_with_an_index_smaller_than_the_input,
    |dev: &Device| {
        // torch.gather(arange(12).view(3,4), 1, [[1,3],[0,0]]) = [[1,3],[4,4]]
        let x = ar(0.0, 12.0, &[3, 4], dev)?;
        let i = ids(&[1, 3, 0, 0], &[2, 2], dev)?;
        assert_eq!(x.gather(1, &i)?.to_vec::<f32>()?, vec![1.0, 3.0, 4.0, 4.0]);
        Ok(())
    }
);

test_device!(gather_3d_along_the_middle_dim, |dev: &Device| {
    // out[i,j,k] = arange(24).reshape(2,3,4)[i, idx[i,j,k], k]
    let x = ar(0.0, 24.0, &[2, 3, 4], dev)?;
    let i = ids(&[2, 1, 0, 2, 0, 0, 1, 1], &[2, 1, 4], dev)?;
    let y = x.gather(1, &i)?;
    assert_eq!(y.shape(), &[2, 1, 4]);
    assert_eq!(
        y.to_vec::<f32>()?,
        vec![8.0, 5.0, 2.0, 11.0, 12.0, 13.0, 18.0, 19.0]
    );
    Ok(())
});

test_device!(
    gather_rejects_bad_index_values_and_shapes,
    |dev: &Device| {
        let x = ar(0.0, 12.0, &[3, 4], dev)?;
        let x0 = snapshot(&x);
        let e = x.gather(1, &ids(&[0, 4], &[1, 2], dev)?).unwrap_err();
        assert_eq!(
            e,
            Error::IndexOutOfRange {
                op: "gather",
                index: 4,
                size: 4
            }
        );
        assert!(e.to_string().contains("0..4"));
        let e = x.gather(0, &ids(&[-1], &[1, 1], dev)?).unwrap_err();
        assert!(matches!(e, Error::IndexOutOfRange { index: -1, .. }));
        let e = x.gather(1, &ids(&[0, 1], &[2], dev)?).unwrap_err();
        assert!(matches!(
            e,
            Error::RankMismatch {
                op: "gather",
                got: 1,
                ..
            }
        ));
        let e = x.gather(1, &ids(&[0; 4], &[4, 1], dev)?).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { op: "gather", .. }));
        assert!(e.to_string().contains("narrow the index"));
        assert_eq!(snapshot(&x), x0);
        Ok(())
    }
);

// -------------------------------------------------------------- index_add

test_device!(index_add_adds_rows_out_of_place, |dev: &Device| {
    // r = np.arange(12).reshape(3,4); r[2] += s[0]; r[0] += s[1]; s = np.arange(8).reshape(2,4)*10
    let x = ar(0.0, 12.0, &[3, 4], dev)?;
    let s = Tensor::arange(0.0f32, 80.0, dev)?;
    let s = s.slice(0, 0, 80, 10)?.reshape(&[2, 4])?; // 0,10,..,70
    let x0 = snapshot(&x);
    let y = x.index_add(0, &ids(&[2, 0], &[2], dev)?, &s)?;
    assert_eq!(
        y.to_vec::<f32>()?,
        vec![
            40.0, 51.0, 62.0, 73.0, 4.0, 5.0, 6.0, 7.0, 8.0, 19.0, 30.0, 41.0
        ]
    );
    assert_eq!(snapshot(&x), x0); // out of place
    Ok(())
});

test_device!(index_add_accumulates_repeated_columns, |dev: &Device| {
    // for i, j in enumerate([1,3,1]): r[:, j] += (np.arange(9).reshape(3,3)+1)[:, i]
    let x = ar(0.0, 12.0, &[3, 4], dev)?;
    let s = ar(1.0, 10.0, &[3, 3], dev)?;
    let i = Tensor::from_slice(&[1i32, 3, 1], &[3], dev)?;
    let y = x.index_add(1, &i, &s)?;
    assert_eq!(
        y.to_vec::<f32>()?,
        vec![
            0.0, 5.0, 2.0, 5.0, 4.0, 15.0, 6.0, 12.0, 8.0, 25.0, 10.0, 19.0
        ]
    );
    Ok(())
});

test_device!(index_add_on_a_transposed_integer_tensor, |dev: &Device| {
    // x = np.arange(6).reshape(3,2).T = [[0,2,4],[1,3,5]]; x[:, 2] += [10, 20]
    let x = Tensor::arange(0i64, 6, dev)?.reshape(&[3, 2])?.t()?;
    let s = ids(&[10, 20], &[2, 1], dev)?;
    let y = x.index_add(1, &ids(&[2], &[1], dev)?, &s)?;
    assert!(y.is_contiguous());
    assert_eq!(y.to_vec::<i64>()?, vec![0, 2, 14, 1, 3, 25]);
    Ok(())
});

test_device!(
    index_add_rejects_bad_indices_leaving_input_unchanged,
    |dev: &Device| {
        let x = ar(0.0, 12.0, &[3, 4], dev)?;
        let s = Tensor::ones(&[2, 4], DType::F32, dev)?;
        let i = ids(&[0, 3], &[2], dev)?;
        let (x0, s0, i0) = (snapshot(&x), snapshot(&s), snapshot(&i));
        let e = x.index_add(0, &i, &s).unwrap_err();
        assert_eq!(
            e,
            Error::IndexOutOfRange {
                op: "index_add",
                index: 3,
                size: 3
            }
        );
        assert!(e.to_string().contains("pass an index in 0..3"));
        let e = x.index_add(0, &ids(&[0], &[1], dev)?, &s).unwrap_err();
        assert!(matches!(
            e,
            Error::ShapeMismatch {
                op: "index_add",
                ..
            }
        ));
        assert!(e.to_string().contains("[1, 4]"));
        let e = x
            .index_add(0, &ids(&[0, 1], &[2], dev)?, &s.to_dtype(DType::F64)?)
            .unwrap_err();
        assert!(matches!(
            e,
            Error::DTypeMismatch {
                op: "index_add",
                ..
            }
        ));
        let b = Tensor::zeros(&[3], DType::Bool, dev)?;
        let e = b
            .index_add(0, &ids(&[0], &[1], dev)?, &b.narrow(0, 0, 1)?)
            .unwrap_err();
        assert!(matches!(
            e,
            Error::UnsupportedDType {
                op: "index_add",
                ..
            }
        ));
        assert_eq!((snapshot(&x), snapshot(&s), snapshot(&i)), (x0, s0, i0));
        Ok(())
    }
);

// ------------------------------------------------------------ scatter_add

test_device!(scatter_add_dim0_accumulates_collisions, |dev: &Device| {
    // r = zeros(3,4); r[idx[i,j], j] += (np.arange(1,9).reshape(2,4))[i,j]
    let x = Tensor::zeros(&[3, 4], DType::F32, dev)?;
    let i = ids(&[0, 1, 2, 0, 2, 2, 1, 0], &[2, 4], dev)?;
    let s = ar(1.0, 9.0, &[2, 4], dev)?;
    let y = x.scatter_add(0, &i, &s)?;
    assert_eq!(
        y.to_vec::<f32>()?,
        vec![1.0, 0.0, 0.0, 12.0, 0.0, 2.0, 7.0, 0.0, 5.0, 6.0, 3.0, 0.0]
    );
    assert_eq!(x.to_vec::<f32>()?, vec![0.0; 12]);
    Ok(())
});

test_device!(
    scatter_add_dim1_reads_only_the_index_region_of_src,
    |dev: &Device| {
        // r = ones(3,4); r[i, idx[i,j]] += (np.arange(1,13).reshape(3,4))[i,j] for j < 2
        let x = Tensor::ones(&[3, 4], DType::F32, dev)?;
        let i = Tensor::from_slice(&[3i32, 3, 0, 1, 2, 2], &[3, 2], dev)?;
        let s = ar(1.0, 13.0, &[3, 4], dev)?;
        let y = x.scatter_add(1, &i, &s)?;
        assert_eq!(
            y.to_vec::<f32>()?,
            vec![1.0, 1.0, 1.0, 4.0, 6.0, 7.0, 1.0, 1.0, 1.0, 1.0, 20.0, 1.0]
        );
        Ok(())
    }
);

test_device!(
    scatter_add_rejects_bad_indices_leaving_input_unchanged,
    |dev: &Device| {
        let x = Tensor::zeros(&[3, 4], DType::F32, dev)?;
        let s = Tensor::ones(&[2, 4], DType::F32, dev)?;
        // the bad value is last: nothing before it may be written either
        let i = ids(&[0, 1, 2, 0, 2, 2, 1, 5], &[2, 4], dev)?;
        let (x0, s0, i0) = (snapshot(&x), snapshot(&s), snapshot(&i));
        let e = x.scatter_add(0, &i, &s).unwrap_err();
        assert_eq!(
            e,
            Error::IndexOutOfRange {
                op: "scatter_add",
                index: 5,
                size: 3
            }
        );
        assert!(e.to_string().contains("0..3"));
        let e = x
            .scatter_add(0, &ids(&[0; 3], &[3, 1], dev)?, &s)
            .unwrap_err();
        assert!(matches!(
            e,
            Error::InvalidArgument {
                op: "scatter_add",
                ..
            }
        ));
        assert!(e.to_string().contains("narrow the index"));
        let e = x.scatter_add(0, &ids(&[0], &[1], dev)?, &s).unwrap_err();
        assert!(matches!(
            e,
            Error::RankMismatch {
                op: "scatter_add",
                ..
            }
        ));
        assert_eq!((snapshot(&x), snapshot(&s), snapshot(&i)), (x0, s0, i0));
        Ok(())
    }
);

// -------------------------------------------------------------- embedding

test_device!(embedding_looks_up_rows_for_any_id_shape, |dev: &Device| {
    // W = np.arange(10).reshape(5,2); W[[[4,0,1],[1,1,3]]]
    let w = ar(0.0, 10.0, &[5, 2], dev)?;
    let i = ids(&[4, 0, 1, 1, 1, 3], &[2, 3], dev)?;
    let e = Tensor::embedding(&w, &i)?;
    assert_eq!(e.shape(), &[2, 3, 2]);
    assert!(!e.is_view());
    assert_eq!(
        e.to_vec::<f32>()?,
        vec![8.0, 9.0, 0.0, 1.0, 2.0, 3.0, 2.0, 3.0, 2.0, 3.0, 6.0, 7.0]
    );
    // transposed i32 ids: [[4,1],[0,1],[1,3]]
    let it = i.to_dtype(DType::I32)?.t()?;
    let e = Tensor::embedding(&w, &it)?;
    assert_eq!(e.shape(), &[3, 2, 2]);
    assert_eq!(
        e.to_vec::<f32>()?,
        vec![8.0, 9.0, 2.0, 3.0, 0.0, 1.0, 2.0, 3.0, 2.0, 3.0, 6.0, 7.0]
    );
    Ok(())
});

test_device!(embedding_of_a_scalar_id_is_one_row, |dev: &Device| {
    let w = ar(0.0, 10.0, &[5, 2], dev)?;
    let e = Tensor::embedding(&w, &Tensor::scalar(3i64, dev)?)?;
    assert_eq!(e.shape(), &[2]);
    assert_eq!(e.to_vec::<f32>()?, vec![6.0, 7.0]);
    Ok(())
});

test_device!(embedding_rejects_bad_ids_and_weights, |dev: &Device| {
    let w = ar(0.0, 10.0, &[5, 2], dev)?;
    let i = ids(&[0, 5], &[2], dev)?;
    let (w0, i0) = (snapshot(&w), snapshot(&i));
    let e = Tensor::embedding(&w, &i).unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: "embedding",
            index: 5,
            size: 5
        }
    );
    assert!(e.to_string().contains("pass an index in 0..5"));
    let e = Tensor::embedding(&w.reshape(&[10])?, &i).unwrap_err();
    assert!(matches!(
        e,
        Error::RankMismatch {
            op: "embedding",
            got: 1,
            ..
        }
    ));
    let e = Tensor::embedding(&w, &w).unwrap_err();
    assert!(matches!(
        e,
        Error::UnsupportedDType {
            op: "embedding",
            ..
        }
    ));
    assert_eq!((snapshot(&w), snapshot(&i)), (w0, i0));
    Ok(())
});
