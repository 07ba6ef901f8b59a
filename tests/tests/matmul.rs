//! Matrix products against numpy: `matmul` (every rank combination),
//! `mm`, `bmm`, `dot`, strided operands, zero sizes, dtypes, errors.
//!
//! Expected values were computed with numpy (`a @ b`, PyTorch semantics)
//! and pasted; the large cases use an f64 triple loop written here.
mod common;
use common::{assert_close, assert_close64, snapshot};
use kael_core::{DType, Device, Error, Result, Tensor, bf16, f16};

fn ar(n: usize, dev: &Device) -> Result<Tensor> {
    Tensor::arange(0.0f32, n as f32, dev)
}

/// `arange(n) + add` as f32, numpy's `np.arange(n) + add`.
fn ar_plus(n: usize, add: f32, shape: &[usize], dev: &Device) -> Result<Tensor> {
    let v: Vec<f32> = (0..n).map(|i| i as f32 + add).collect();
    Tensor::from_slice(&v, shape, dev)
}

/// Deterministic pseudo-random values in about [-1, 1).
fn pseudo(n: usize, mul: usize, modulus: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * mul) % modulus) as f32 / (modulus as f32 / 2.0) - 1.0)
        .collect()
}

/// The reference: `c[i][j] = sum_p a[i][p] * b[p][j]` in f64, row-major inputs.
fn reference(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut c = vec![0.0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0f64;
            for p in 0..k {
                s += a[i * k + p] as f64 * b[p * n + j] as f64;
            }
            c[i * n + j] = s;
        }
    }
    c.into_iter().map(|x| x as f32).collect()
}

test_device!(matmul_2d_matches_numpy, |dev: &Device| {
    // np.arange(6).reshape(2,3) @ (np.arange(12).reshape(3,4) - 5)
    let a = ar(6, dev)?.reshape(&[2, 3])?;
    let b = ar_plus(12, -5.0, &[3, 4], dev)?;
    let c = a.matmul(&b)?;
    assert_eq!(c.shape(), &[2, 4]);
    assert_eq!(
        c.to_vec::<f32>()?,
        vec![5.0, 8.0, 11.0, 14.0, -4.0, 8.0, 20.0, 32.0]
    );
    Ok(())
});

test_device!(
    matmul_of_transposed_lhs_reads_its_strides,
    |dev: &Device| {
        // at = np.arange(6).reshape(3,2); at.T @ b
        let a = ar(6, dev)?.reshape(&[3, 2])?.t()?;
        let b = ar_plus(12, -5.0, &[3, 4], dev)?;
        assert_eq!(
            a.matmul(&b)?.to_vec::<f32>()?,
            vec![10.0, 16.0, 22.0, 28.0, 7.0, 16.0, 25.0, 34.0]
        );
        Ok(())
    }
);

test_device!(
    matmul_of_transposed_rhs_reads_its_strides,
    |dev: &Device| {
        // bt = np.arange(12).reshape(4,3) - 5; a @ bt.T
        let a = ar(6, dev)?.reshape(&[2, 3])?;
        let b = ar_plus(12, -5.0, &[4, 3], dev)?.t()?;
        assert_eq!(
            a.matmul(&b)?.to_vec::<f32>()?,
            vec![-10.0, -1.0, 8.0, 17.0, -46.0, -10.0, 26.0, 62.0]
        );
        Ok(())
    }
);

test_device!(
    matmul_of_both_transposed_reads_both_strides,
    |dev: &Device| {
        // at.T @ bt.T
        let a = ar(6, dev)?.reshape(&[3, 2])?.t()?;
        let b = ar_plus(12, -5.0, &[4, 3], dev)?.t()?;
        assert_eq!(
            a.matmul(&b)?.to_vec::<f32>()?,
            vec![-20.0, -2.0, 16.0, 34.0, -32.0, -5.0, 22.0, 49.0]
        );
        Ok(())
    }
);

test_device!(
    matmul_of_step_sliced_operands_matches_numpy,
    |dev: &Device| {
        // A = np.arange(40).reshape(5,8)[::2, 1::3]; B = np.arange(30).reshape(6,5)[::2]
        let a = ar(40, dev)?
            .reshape(&[5, 8])?
            .slice(0, 0, 5, 2)?
            .slice(1, 1, 8, 3)?;
        let b = ar(30, dev)?.reshape(&[6, 5])?.slice(0, 0, 6, 2)?;
        assert_eq!((a.shape(), b.shape()), (&[3, 3][..], &[3, 5][..]));
        assert_eq!(
            a.matmul(&b)?.to_vec::<f32>()?,
            vec![
                180.0, 192.0, 204.0, 216.0, 228.0, 660.0, 720.0, 780.0, 840.0, 900.0, 1140.0,
                1248.0, 1356.0, 1464.0, 1572.0
            ]
        );
        Ok(())
    }
);

test_device!(matmul_batched_3d_matches_numpy, |dev: &Device| {
    // np.arange(24).reshape(2,3,4) @ (np.arange(40).reshape(2,4,5) - 20)
    let a = ar(24, dev)?.reshape(&[2, 3, 4])?;
    let b = ar_plus(40, -20.0, &[2, 4, 5], dev)?;
    let c = a.matmul(&b)?;
    assert_eq!(c.shape(), &[2, 3, 5]);
    assert_eq!(
        c.to_vec::<f32>()?,
        vec![
            -50.0, -44.0, -38.0, -32.0, -26.0, -250.0, -228.0, -206.0, -184.0, -162.0, -450.0,
            -412.0, -374.0, -336.0, -298.0, 430.0, 484.0, 538.0, 592.0, 646.0, 550.0, 620.0, 690.0,
            760.0, 830.0, 670.0, 756.0, 842.0, 928.0, 1014.0
        ]
    );
    Ok(())
});

test_device!(matmul_broadcasts_batch_dims_like_numpy, |dev: &Device| {
    // np.arange(12).reshape(2,1,2,3) @ (np.arange(18).reshape(3,3,2) - 9) -> [2,3,2,2]
    let a = ar(12, dev)?.reshape(&[2, 1, 2, 3])?;
    let b = ar_plus(18, -9.0, &[3, 3, 2], dev)?;
    let c = a.matmul(&b)?;
    assert_eq!(c.shape(), &[2, 3, 2, 2]);
    assert_eq!(
        c.to_vec::<f32>()?,
        vec![
            -17.0, -14.0, -80.0, -68.0, 1.0, 4.0, -8.0, 4.0, 19.0, 22.0, 64.0, 76.0, -143.0,
            -122.0, -206.0, -176.0, -17.0, 4.0, -26.0, 4.0, 109.0, 130.0, 154.0, 184.0
        ]
    );
    Ok(())
});

test_device!(
    matmul_broadcast_batch_shape_follows_torch,
    |dev: &Device| {
        // torch.matmul(zeros(2,1,3,4), zeros(5,4,6)).shape == (2,5,3,6)
        let a = Tensor::ones(&[2, 1, 3, 4], DType::F32, dev)?;
        let b = Tensor::ones(&[5, 4, 6], DType::F32, dev)?;
        let c = a.matmul(&b)?;
        assert_eq!(c.shape(), &[2, 5, 3, 6]);
        assert!(c.is_contiguous() && !c.is_view());
        assert_eq!(c.to_vec::<f32>()?, vec![4.0; 180]); // each entry sums four 1*1
        // the inputs were broadcast as views, not materialised
        assert_eq!(a.version(), 0);
        Ok(())
    }
);

test_device!(matmul_of_two_vectors_is_a_rank0_dot, |dev: &Device| {
    // [1,-2,3] @ [4,5,6] = 4 - 10 + 18 = 12
    let a = Tensor::from_slice(&[1.0f32, -2.0, 3.0], &[3], dev)?;
    let b = Tensor::from_slice(&[4.0f32, 5.0, 6.0], &[3], dev)?;
    let c = a.matmul(&b)?;
    assert_eq!(c.rank(), 0);
    assert_eq!(c.item::<f32>()?, 12.0);
    Ok(())
});

test_device!(matmul_matrix_vector_drops_the_vector_dim, |dev: &Device| {
    // np.arange(6).reshape(2,3) @ [1,-2,3] = [4, 10]
    let a = ar(6, dev)?.reshape(&[2, 3])?;
    let v = Tensor::from_slice(&[1.0f32, -2.0, 3.0], &[3], dev)?;
    let c = a.matmul(&v)?;
    assert_eq!(c.shape(), &[2]);
    assert_eq!(c.to_vec::<f32>()?, vec![4.0, 10.0]);
    Ok(())
});

test_device!(matmul_vector_matrix_drops_the_vector_dim, |dev: &Device| {
    // [1,-1] @ np.arange(6).reshape(2,3) = [-3,-3,-3]
    let w = Tensor::from_slice(&[1.0f32, -1.0], &[2], dev)?;
    let a = ar(6, dev)?.reshape(&[2, 3])?;
    let c = w.matmul(&a)?;
    assert_eq!(c.shape(), &[3]);
    assert_eq!(c.to_vec::<f32>()?, vec![-3.0, -3.0, -3.0]);
    Ok(())
});

test_device!(
    matmul_vector_with_batched_matrix_broadcasts,
    |dev: &Device| {
        // [1,-2,3] @ np.arange(24).reshape(2,3,4) -> [2,4]
        let v = Tensor::from_slice(&[1.0f32, -2.0, 3.0], &[3], dev)?;
        let b = ar(24, dev)?.reshape(&[2, 3, 4])?;
        let c = v.matmul(&b)?;
        assert_eq!(c.shape(), &[2, 4]);
        assert_eq!(
            c.to_vec::<f32>()?,
            vec![16.0, 18.0, 20.0, 22.0, 40.0, 42.0, 44.0, 46.0]
        );
        Ok(())
    }
);

test_device!(
    matmul_batched_matrix_with_vector_broadcasts,
    |dev: &Device| {
        // np.arange(24).reshape(2,4,3) @ [1,-2,3] -> [2,4]
        let a = ar(24, dev)?.reshape(&[2, 4, 3])?;
        let v = Tensor::from_slice(&[1.0f32, -2.0, 3.0], &[3], dev)?;
        let c = a.matmul(&v)?;
        assert_eq!(c.shape(), &[2, 4]);
        assert_eq!(
            c.to_vec::<f32>()?,
            vec![4.0, 10.0, 16.0, 22.0, 28.0, 34.0, 40.0, 46.0]
        );
        Ok(())
    }
);

test_device!(matmul_with_k_zero_gives_zeros, |dev: &Device| {
    // an empty sum is 0: [2,0] @ [0,3] = zeros(2,3)
    let a = Tensor::zeros(&[2, 0], DType::F32, dev)?;
    let b = Tensor::zeros(&[0, 3], DType::F32, dev)?;
    let c = a.matmul(&b)?;
    assert_eq!(c.shape(), &[2, 3]);
    assert_eq!(c.to_vec::<f32>()?, vec![0.0; 6]);
    Ok(())
});

test_device!(matmul_with_m_or_n_zero_is_empty, |dev: &Device| {
    let a = Tensor::zeros(&[0, 3], DType::F32, dev)?;
    let b = Tensor::ones(&[3, 4], DType::F32, dev)?;
    assert_eq!(a.matmul(&b)?.shape(), &[0, 4]);
    let c = Tensor::ones(&[2, 3], DType::F32, dev)?;
    let d = Tensor::zeros(&[3, 0], DType::F32, dev)?;
    assert_eq!(c.matmul(&d)?.shape(), &[2, 0]);
    let e = Tensor::zeros(&[0, 2, 3], DType::F32, dev)?;
    assert_eq!(e.matmul(&b)?.shape(), &[0, 2, 4]);
    Ok(())
});

test_device!(matmul_in_f64_matches_numpy, |dev: &Device| {
    // np.array([-1,-.6,-.2,.2,.6,1.]).reshape(2,3) @ np.array([.5,.8,1.1,1.4,1.7,2.]).reshape(3,2)
    let a = Tensor::from_slice(&[-1.0f64, -0.6, -0.2, 0.2, 0.6, 1.0], &[2, 3], dev)?;
    let b = Tensor::from_slice(&[0.5f64, 0.8, 1.1, 1.4, 1.7, 2.0], &[3, 2], dev)?;
    let c = a.matmul(&b)?;
    assert_eq!(c.dtype(), DType::F64);
    assert_close64(&c.to_vec::<f64>()?, &[-1.5, -2.04, 2.46, 3.0], 1e-14);
    Ok(())
});

test_device!(
    matmul_in_f16_and_bf16_accumulates_closely,
    |dev: &Device| {
        // h = np.arange(12).reshape(3,4)/8; g = np.arange(8).reshape(4,2)/4 - .5; h @ g
        let want = [0.5f32, 0.6875, 1.0, 1.6875, 1.5, 2.6875];
        let h: Vec<f32> = (0..12).map(|i| i as f32 / 8.0).collect();
        let g: Vec<f32> = (0..8).map(|i| i as f32 / 4.0 - 0.5).collect();
        let h = Tensor::from_slice(&h, &[3, 4], dev)?;
        let g = Tensor::from_slice(&g, &[4, 2], dev)?;
        let c16 = h.to_dtype(DType::F16)?.matmul(&g.to_dtype(DType::F16)?)?;
        assert_eq!(c16.dtype(), DType::F16);
        let got: Vec<f32> = c16.to_vec::<f16>()?.iter().map(|x| x.to_f32()).collect();
        assert_close(&got, &want, 1e-2);
        let cb = h.to_dtype(DType::BF16)?.matmul(&g.to_dtype(DType::BF16)?)?;
        let got: Vec<f32> = cb.to_vec::<bf16>()?.iter().map(|x| x.to_f32()).collect();
        assert_close(&got, &want, 2e-2);
        Ok(())
    }
);

test_device!(matmul_in_f16_rounds_once_at_the_end, |dev: &Device| {
    // 4096 products of 1 * 1: an f16 running sum would stall at 2048
    // (2048 + 1 rounds back to 2048); an f32 accumulator reaches 4096.
    let a = Tensor::ones(&[1, 4096], DType::F16, dev)?;
    let b = Tensor::ones(&[4096, 1], DType::F16, dev)?;
    assert_eq!(a.matmul(&b)?.to_vec::<f16>()?, vec![f16::from_f32(4096.0)]);
    Ok(())
});

test_device!(matmul_of_integers_matches_numpy, |dev: &Device| {
    // (np.arange(6).reshape(2,3) - 2) @ (np.arange(6).reshape(3,2) * 3)
    let a = Tensor::from_slice(&[-2i64, -1, 0, 1, 2, 3], &[2, 3], dev)?;
    let b = Tensor::from_slice(&[0i64, 3, 6, 9, 12, 15], &[3, 2], dev)?;
    assert_eq!(a.matmul(&b)?.to_vec::<i64>()?, vec![-6, -15, 48, 66]);
    Ok(())
});

test_device!(matmul_large_matches_f64_triple_loop, |dev: &Device| {
    let (m, k, n) = (67, 129, 45);
    let av = pseudo(m * k, 37, 101);
    let bv = pseudo(k * n, 53, 97);
    let a = Tensor::from_slice(&av, &[m, k], dev)?;
    let b = Tensor::from_slice(&bv, &[k, n], dev)?;
    let c = a.matmul(&b)?;
    assert_eq!(c.shape(), &[m, n]);
    assert_close(&c.to_vec::<f32>()?, &reference(&av, &bv, m, k, n), 1e-5);
    Ok(())
});

test_device!(
    matmul_large_transposed_operands_cross_block_edges,
    |dev: &Device| {
        // m, k, n past the kernel's row, depth and column blocks, both operands
        // read through transposed strides
        let (m, k, n) = (70, 260, 130);
        let av = pseudo(m * k, 41, 103);
        let bv = pseudo(k * n, 29, 89);
        // store a^T and b^T row-major, then view them transposed
        let mut at = vec![0.0f32; m * k];
        for i in 0..m {
            for p in 0..k {
                at[p * m + i] = av[i * k + p];
            }
        }
        let mut bt = vec![0.0f32; k * n];
        for p in 0..k {
            for j in 0..n {
                bt[j * k + p] = bv[p * n + j];
            }
        }
        let a = Tensor::from_slice(&at, &[k, m], dev)?.t()?;
        let b = Tensor::from_slice(&bt, &[n, k], dev)?.t()?;
        assert_close(
            &a.matmul(&b)?.to_vec::<f32>()?,
            &reference(&av, &bv, m, k, n),
            1e-5,
        );
        Ok(())
    }
);

test_device!(matmul_is_deterministic, |dev: &Device| {
    let av = pseudo(33 * 300, 37, 101);
    let a = Tensor::from_slice(&av, &[33, 300], dev)?;
    let b = a.t()?;
    let c1 = a.matmul(&b)?.to_vec::<f32>()?;
    let c2 = a.matmul(&b)?.to_vec::<f32>()?;
    assert_eq!(
        c1.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        c2.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
    Ok(())
});

test_device!(mm_multiplies_two_matrices, |dev: &Device| {
    // [[1,2],[3,4]] @ [[1,2],[3,4]] = [[7,10],[15,22]]
    let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], dev)?;
    assert_eq!(a.mm(&a)?.to_vec::<f32>()?, vec![7.0, 10.0, 15.0, 22.0]);
    Ok(())
});

test_device!(bmm_multiplies_each_batch, |dev: &Device| {
    // same data as matmul_batched_3d_matches_numpy
    let a = ar(24, dev)?.reshape(&[2, 3, 4])?;
    let b = ar_plus(40, -20.0, &[2, 4, 5], dev)?;
    let c = a.bmm(&b)?;
    assert_eq!(c.shape(), &[2, 3, 5]);
    let v = c.to_vec::<f32>()?;
    assert_eq!((v[0], v[14], v[15], v[29]), (-50.0, -298.0, 430.0, 1014.0));
    Ok(())
});

test_device!(dot_of_two_vectors_is_rank0, |dev: &Device| {
    let a = Tensor::from_slice(&[1.0f64, -2.0, 3.0], &[3], dev)?;
    let b = Tensor::from_slice(&[4.0f64, 5.0, 6.0], &[3], dev)?;
    let c = a.dot(&b)?;
    assert_eq!((c.rank(), c.item::<f64>()?), (0, 12.0));
    Ok(())
});

// ------------------------------------------------------------------ errors

test_device!(matmul_rejects_a_rank0_operand, |dev: &Device| {
    let s = Tensor::scalar(2.0f32, dev)?;
    let v = ar(3, dev)?;
    let (s0, v0) = (snapshot(&s), snapshot(&v));
    let e = s.matmul(&v).unwrap_err();
    assert!(matches!(
        e,
        Error::RankMismatch {
            op: "matmul",
            got: 0,
            ..
        }
    ));
    assert!(e.to_string().contains("unsqueeze"));
    assert!(matches!(v.matmul(&s), Err(Error::RankMismatch { .. })));
    assert_eq!((snapshot(&s), snapshot(&v)), (s0, v0));
    Ok(())
});

test_device!(matmul_rejects_mismatched_inner_dims, |dev: &Device| {
    // [2,3] @ [2,3]: rhs should be [3, n] (transpose one operand)
    let a = ar(6, dev)?.reshape(&[2, 3])?;
    let a0 = snapshot(&a);
    let e = a.matmul(&a).unwrap_err();
    let Error::ShapeMismatch { op, expected, got } = e.clone() else {
        panic!("{e:?}")
    };
    assert_eq!(op, "matmul");
    assert_eq!(
        (expected.as_slice(), got.as_slice()),
        (&[3u32, 3][..], &[2u32, 3][..])
    );
    assert!(e.to_string().contains("make the shapes agree"));
    assert!(a.matmul(&a.t()?).is_ok()); // the fix
    assert_eq!(snapshot(&a), a0);
    Ok(())
});

test_device!(matmul_rejects_vector_length_mismatch, |dev: &Device| {
    let a = ar(3, dev)?;
    let b = ar(4, dev)?;
    let e = a.matmul(&b).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "matmul", .. }));
    assert!(e.to_string().contains("[3]") && e.to_string().contains("[4]"));
    Ok(())
});

test_device!(
    matmul_rejects_batch_dims_that_do_not_broadcast,
    |dev: &Device| {
        let a = Tensor::zeros(&[2, 3, 4], DType::F32, dev)?;
        let b = Tensor::zeros(&[3, 4, 5], DType::F32, dev)?;
        let (a0, b0) = (snapshot(&a), snapshot(&b));
        let e = a.matmul(&b).unwrap_err();
        assert!(matches!(e, Error::BroadcastMismatch { op: "matmul", .. }));
        let msg = e.to_string();
        assert!(msg.contains("[2, 3, 4]") && msg.contains("expand"), "{msg}");
        assert_eq!((snapshot(&a), snapshot(&b)), (a0, b0));
        Ok(())
    }
);

test_device!(matmul_rejects_mixed_dtypes, |dev: &Device| {
    let a = Tensor::zeros(&[2, 2], DType::F32, dev)?;
    let b = Tensor::zeros(&[2, 2], DType::F64, dev)?;
    let e = a.matmul(&b).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { op: "matmul", .. }));
    assert!(e.to_string().contains("to_dtype"));
    Ok(())
});

test_device!(matmul_rejects_bool, |dev: &Device| {
    let a = Tensor::zeros(&[2, 2], DType::Bool, dev)?;
    let e = a.matmul(&a).unwrap_err();
    assert!(matches!(
        e,
        Error::UnsupportedDType {
            op: "matmul",
            dtype: DType::Bool,
            ..
        }
    ));
    assert!(e.to_string().contains("to_dtype"));
    Ok(())
});

test_device!(mm_rejects_non_matrices, |dev: &Device| {
    let a = Tensor::zeros(&[2, 2], DType::F32, dev)?;
    let v = Tensor::zeros(&[2], DType::F32, dev)?;
    let e = a.mm(&v).unwrap_err();
    assert!(matches!(
        e,
        Error::RankMismatch {
            op: "mm",
            got: 1,
            ..
        }
    ));
    assert!(e.to_string().contains("reshape or unsqueeze"));
    Ok(())
});

test_device!(bmm_rejects_different_batch_sizes, |dev: &Device| {
    let a = Tensor::zeros(&[2, 3, 4], DType::F32, dev)?;
    let b = Tensor::zeros(&[1, 4, 5], DType::F32, dev)?;
    let e = a.bmm(&b).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "bmm", .. }));
    assert!(e.to_string().contains("[2, 4, 5]"));
    assert!(matches!(
        a.bmm(&a.select(0, 0)?),
        Err(Error::RankMismatch { op: "bmm", .. })
    ));
    Ok(())
});

test_device!(dot_rejects_different_lengths, |dev: &Device| {
    let a = ar(3, dev)?;
    let b = ar(4, dev)?;
    let e = a.dot(&b).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "dot", .. }));
    assert!(matches!(
        a.dot(&a.reshape(&[1, 3])?),
        Err(Error::RankMismatch { op: "dot", .. })
    ));
    Ok(())
});
