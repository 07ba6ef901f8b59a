//! Specification tests of every view: metadata (shape, strides, offset in
//! elements), values, storage sharing, chains of views on non-contiguous
//! inputs, and one refused bad input per op.
//!
//! Expected values come from numpy 2.4 (`b = np.arange(24, dtype=np.float32);
//! x = b.reshape(2, 3, 4)`); numpy strides are in bytes, divided here by the
//! itemsize, and offsets are `(v.ctypes.data - b.ctypes.data) // itemsize`.
//! Where numpy and PyTorch differ (strides of size-1 dims, `chunk`), the
//! PyTorch rule is derived by hand in a comment.
mod common;

use common::{meta, snapshot};
use kael_core::{DType, Device, Error, Layout, Result, Tensor};

/// `x = arange(24).reshape(2, 3, 4)`, f32, strides [12, 4, 1].
fn x24(dev: &Device) -> Result<Tensor> {
    Tensor::arange(0.0f32, 24.0, dev)?.reshape(&[2, 3, 4])
}

/// `arange(n)` as f32.
fn ar(n: usize, dev: &Device) -> Result<Tensor> {
    Tensor::arange(0.0f32, n as f32, dev)
}

fn m(t: &Tensor) -> (Vec<usize>, Vec<usize>, usize) {
    meta(t)
}

fn v(t: &Tensor) -> Result<Vec<f32>> {
    t.to_vec::<f32>()
}

/// Expects `Err`, checks that its message names each of `words`, returns it.
macro_rules! refused {
    ($r:expr, $($word:expr),+ $(,)?) => {{
        let e: Error = $r.expect_err("the op must be refused");
        let msg = e.to_string();
        $(assert!(msg.contains($word), "message {msg:?} lacks {:?}", $word);)+
        e
    }};
}

// ------------------------------------------------------------------ narrow

test_device!(
    narrow_middle_dim_keeps_strides_and_moves_offset,
    |dev: &Device| {
        let x = x24(dev)?;
        let n = x.narrow(1, 1, 2)?;
        // x[:, 1:3, :]
        assert_eq!(m(&n), (vec![2, 2, 4], vec![12, 4, 1], 4));
        assert_eq!(
            v(&n)?,
            [
                4., 5., 6., 7., 8., 9., 10., 11., 16., 17., 18., 19., 20., 21., 22., 23.
            ]
        );
        assert!(n.shares_storage(&x));
        Ok(())
    }
);

test_device!(narrow_negative_dim_counts_from_the_end, |dev: &Device| {
    let x = x24(dev)?;
    let n = x.narrow(-1, 1, 3)?;
    // x[:, :, 1:4]
    assert_eq!(m(&n), (vec![2, 3, 3], vec![12, 4, 1], 1));
    assert_eq!(
        v(&n)?,
        [
            1., 2., 3., 5., 6., 7., 9., 10., 11., 13., 14., 15., 17., 18., 19., 21., 22., 23.
        ]
    );
    Ok(())
});

test_device!(
    narrow_refuses_bad_dim_and_range_unchanged,
    |dev: &Device| {
        let x = x24(dev)?;
        let snap = snapshot(&x);
        let e = refused!(x.narrow(3, 0, 1), "narrow", "-3..3");
        assert!(matches!(
            e,
            Error::DimOutOfRange {
                dim: 3,
                rank: 3,
                ..
            }
        ));
        // start 2 + length 2 = 4 > size 3
        let e = refused!(x.narrow(1, 2, 2), "narrow", "size 3");
        assert!(matches!(e, Error::IndexOutOfRange { size: 3, .. }));
        refused!(x.narrow(1, usize::MAX, 2), "narrow");
        assert_eq!(snapshot(&x), snap);
        Ok(())
    }
);

// ------------------------------------------------------------------- slice

test_device!(slice_with_step_and_negative_end, |dev: &Device| {
    let a = ar(10, dev)?;
    let s = a.slice(0, 1, -1, 3)?;
    // a[1:-1:3]
    assert_eq!(m(&s), (vec![3], vec![3], 1));
    assert_eq!(v(&s)?, [1., 4., 7.]);
    assert!(s.shares_storage(&a));
    Ok(())
});

test_device!(slice_clamps_out_of_range_bounds, |dev: &Device| {
    let a = ar(10, dev)?;
    // a[-100:100:4]
    let s = a.slice(0, -100, 100, 4)?;
    assert_eq!(m(&s), (vec![3], vec![4], 0));
    assert_eq!(v(&s)?, [0., 4., 8.]);
    // a[-3:] (end past the size clamps to it)
    let s = a.slice(0, -3, isize::MAX, 1)?;
    assert_eq!(m(&s), (vec![3], vec![1], 7));
    assert_eq!(v(&s)?, [7., 8., 9.]);
    Ok(())
});

test_device!(slice_with_end_before_start_is_empty, |dev: &Device| {
    let a = ar(10, dev)?;
    // a[7:3] has 0 elements
    let s = a.slice(0, 7, 3, 1)?;
    assert_eq!(s.shape(), &[0]);
    assert_eq!(v(&s)?, Vec::<f32>::new());
    Ok(())
});

test_device!(slice_inner_dim_of_rank3_with_step, |dev: &Device| {
    let x = x24(dev)?;
    let s = x.slice(2, 1, 4, 2)?;
    // x[:, :, 1:4:2]
    assert_eq!(m(&s), (vec![2, 3, 2], vec![12, 4, 2], 1));
    assert_eq!(
        v(&s)?,
        [1., 3., 5., 7., 9., 11., 13., 15., 17., 19., 21., 23.]
    );
    Ok(())
});

test_device!(
    slice_refuses_zero_step_and_bad_dim_unchanged,
    |dev: &Device| {
        let x = x24(dev)?;
        let snap = snapshot(&x);
        let e = refused!(x.slice(0, 0, 2, 0), "slice", "step");
        assert!(matches!(e, Error::InvalidArgument { .. }));
        let e = refused!(x.slice(-4, 0, 2, 1), "slice", "-3..3");
        assert!(matches!(e, Error::DimOutOfRange { dim: -4, .. }));
        assert_eq!(snapshot(&x), snap);
        Ok(())
    }
);

// ------------------------------------------------------------------ select

test_device!(select_negative_index_drops_the_dim, |dev: &Device| {
    let x = x24(dev)?;
    let s = x.select(1, -1)?;
    // x[:, -1, :]
    assert_eq!(m(&s), (vec![2, 4], vec![12, 1], 8));
    assert_eq!(v(&s)?, [8., 9., 10., 11., 20., 21., 22., 23.]);
    // x[-1]
    let s = x.select(0, -1)?;
    assert_eq!(m(&s), (vec![3, 4], vec![4, 1], 12));
    assert!(s.shares_storage(&x));
    Ok(())
});

test_device!(select_of_a_vector_is_a_scalar, |dev: &Device| {
    let a = ar(5, dev)?;
    // a[3]
    let s = a.select(0, 3)?;
    assert_eq!(m(&s), (vec![], vec![], 3));
    assert_eq!(s.item::<f32>()?, 3.0);
    Ok(())
});

test_device!(
    select_refuses_bad_index_and_dim_unchanged,
    |dev: &Device| {
        let x = x24(dev)?;
        let snap = snapshot(&x);
        let e = refused!(x.select(1, 3), "select", "0..3");
        assert!(matches!(
            e,
            Error::IndexOutOfRange {
                index: 3,
                size: 3,
                ..
            }
        ));
        let e = refused!(x.select(1, -4), "select", "size 3");
        assert!(matches!(e, Error::IndexOutOfRange { index: -4, .. }));
        refused!(x.select(3, 0), "select", "-3..3");
        assert_eq!(snapshot(&x), snap);
        Ok(())
    }
);

// --------------------------------------------------------------- transpose

test_device!(transpose_swaps_shape_and_strides, |dev: &Device| {
    let x = x24(dev)?;
    let t = x.transpose(0, 2)?;
    // x.swapaxes(0, 2)
    assert_eq!(m(&t), (vec![4, 3, 2], vec![1, 4, 12], 0));
    assert_eq!(
        v(&t)?,
        [
            0., 12., 4., 16., 8., 20., 1., 13., 5., 17., 9., 21., 2., 14., 6., 18., 10., 22., 3.,
            15., 7., 19., 11., 23.
        ]
    );
    assert!(t.shares_storage(&x) && !t.is_contiguous());
    // negative dims name the same pair
    assert_eq!(m(&x.transpose(-1, -3)?), m(&t));
    Ok(())
});

test_device!(transpose_refuses_bad_dim_unchanged, |dev: &Device| {
    let x = x24(dev)?;
    let snap = snapshot(&x);
    refused!(x.transpose(0, 3), "transpose", "-3..3");
    refused!(x.transpose(-4, 0), "transpose", "-3..3");
    assert_eq!(snapshot(&x), snap);
    Ok(())
});

// ----------------------------------------------------------------------- t

test_device!(t_transposes_a_matrix, |dev: &Device| {
    let a = ar(6, dev)?.reshape(&[2, 3])?;
    let t = a.t()?;
    // m.T
    assert_eq!(m(&t), (vec![3, 2], vec![1, 3], 0));
    assert_eq!(v(&t)?, [0., 3., 1., 4., 2., 5.]);
    assert!(t.shares_storage(&a));
    Ok(())
});

test_device!(t_of_a_vector_is_a_view_of_the_same_shape, |dev: &Device| {
    let a = ar(3, dev)?;
    let t = a.t()?;
    assert_eq!(m(&t), (vec![3], vec![1], 0));
    assert!(t.shares_storage(&a) && !t.is_same(&a));
    Ok(())
});

test_device!(t_refuses_rank3_and_names_transpose, |dev: &Device| {
    let x = x24(dev)?;
    let snap = snapshot(&x);
    let e = refused!(x.t(), "t", "transpose");
    assert!(matches!(e, Error::RankMismatch { got: 3, .. }));
    assert_eq!(snapshot(&x), snap);
    Ok(())
});

// ----------------------------------------------------------------- permute

test_device!(permute_reorders_dims, |dev: &Device| {
    let x = x24(dev)?;
    let p = x.permute(&[2, 0, 1])?;
    // x.transpose(2, 0, 1)
    assert_eq!(m(&p), (vec![4, 2, 3], vec![1, 12, 4], 0));
    assert_eq!(
        v(&p)?,
        [
            0., 4., 8., 12., 16., 20., 1., 5., 9., 13., 17., 21., 2., 6., 10., 14., 18., 22., 3.,
            7., 11., 15., 19., 23.
        ]
    );
    // negative dims: [-1, 0, 1] is [2, 0, 1]
    assert_eq!(m(&x.permute(&[-1, 0, 1])?), m(&p));
    // x.transpose(2, 1, 0) equals swapaxes(0, 2)
    assert_eq!(
        m(&x.permute(&[2, 1, 0])?),
        (vec![4, 3, 2], vec![1, 4, 12], 0)
    );
    Ok(())
});

test_device!(
    permute_refuses_non_permutations_unchanged,
    |dev: &Device| {
        let x = x24(dev)?;
        let snap = snapshot(&x);
        refused!(x.permute(&[0, 1]), "permute", "rank");
        refused!(x.permute(&[0, 0, 1]), "permute", "exactly once");
        refused!(x.permute(&[0, 1, 3]), "permute", "-3..3");
        assert_eq!(snapshot(&x), snap);
        Ok(())
    }
);

// ------------------------------------------------------ expand/broadcast_to

test_device!(
    expand_with_minus_one_keeps_a_size_and_uses_stride_zero,
    |dev: &Device| {
        let y = ar(3, dev)?.reshape(&[3, 1])?;
        let e = y.expand(&[2, -1, 4])?;
        // np.broadcast_to(y, (2, 3, 4))
        assert_eq!(m(&e), (vec![2, 3, 4], vec![0, 1, 0], 0));
        assert_eq!(
            v(&e)?,
            [
                0., 0., 0., 0., 1., 1., 1., 1., 2., 2., 2., 2., 0., 0., 0., 0., 1., 1., 1., 1., 2.,
                2., 2., 2.
            ]
        );
        assert!(e.shares_storage(&y));
        Ok(())
    }
);

test_device!(broadcast_to_matches_expand, |dev: &Device| {
    let y = ar(3, dev)?.reshape(&[3, 1])?;
    let b = y.broadcast_to(&[2, 3, 4])?;
    assert_eq!(m(&b), (vec![2, 3, 4], vec![0, 1, 0], 0));
    assert_eq!(v(&b)?, v(&y.expand(&[2, 3, 4])?)?);
    // a vector broadcast to rows: np.broadcast_to(arange(3), (2, 3))
    let r = ar(3, dev)?.broadcast_to(&[2, 3])?;
    assert_eq!(m(&r), (vec![2, 3], vec![0, 1], 0));
    assert_eq!(v(&r)?, [0., 1., 2., 0., 1., 2.]);
    Ok(())
});

test_device!(
    expand_refuses_incompatible_sizes_unchanged,
    |dev: &Device| {
        let y = ar(3, dev)?.reshape(&[3, 1])?;
        let snap = snapshot(&y);
        // size 3 cannot become 5
        let e = refused!(y.expand(&[5, 4]), "expand", "cannot be broadcast");
        assert!(matches!(e, Error::BroadcastMismatch { .. }));
        refused!(y.expand(&[-1, 3, 4]), "expand", "leading");
        refused!(y.expand(&[4]), "expand", "at least the tensor's rank");
        refused!(y.broadcast_to(&[3, 2, 2]), "expand", "cannot be broadcast");
        assert_eq!(snapshot(&y), snap);
        Ok(())
    }
);

// --------------------------------------------------------------- unsqueeze

test_device!(
    unsqueeze_inserts_size_one_with_pytorch_strides,
    |dev: &Device| {
        let x = x24(dev)?;
        // PyTorch: the new stride is size[d] * stride[d], or 1 at the end.
        // dim 0: 2*12 = 24; dim 1: 3*4 = 12; dim -1 (= 3): 1.
        assert_eq!(
            m(&x.unsqueeze(0)?),
            (vec![1, 2, 3, 4], vec![24, 12, 4, 1], 0)
        );
        assert_eq!(
            m(&x.unsqueeze(1)?),
            (vec![2, 1, 3, 4], vec![12, 12, 4, 1], 0)
        );
        assert_eq!(
            m(&x.unsqueeze(-1)?),
            (vec![2, 3, 4, 1], vec![12, 4, 1, 1], 0)
        );
        // -4 is the insertion point before dim 0
        assert_eq!(m(&x.unsqueeze(-4)?), m(&x.unsqueeze(0)?));
        let u = x.unsqueeze(-2)?; // dim 2: 4*1 = 4
        assert_eq!(m(&u), (vec![2, 3, 1, 4], vec![12, 4, 4, 1], 0));
        assert_eq!(v(&u)?, v(&x)?);
        assert!(u.shares_storage(&x));
        Ok(())
    }
);

test_device!(unsqueeze_refuses_bad_dim_unchanged, |dev: &Device| {
    let x = x24(dev)?;
    let snap = snapshot(&x);
    refused!(x.unsqueeze(4), "unsqueeze", "-4..4");
    refused!(x.unsqueeze(-5), "unsqueeze", "-4..4");
    assert_eq!(snapshot(&x), snap);
    Ok(())
});

// ----------------------------------------------------------------- squeeze

test_device!(squeeze_removes_every_size_one_dim, |dev: &Device| {
    let z = ar(6, dev)?.reshape(&[1, 3, 1, 2])?;
    let s = z.squeeze()?;
    // np.squeeze(z)
    assert_eq!(m(&s), (vec![3, 2], vec![2, 1], 0));
    assert_eq!(v(&s)?, [0., 1., 2., 3., 4., 5.]);
    assert!(s.shares_storage(&z));
    // nothing to squeeze: same shape
    assert_eq!(m(&x24(dev)?.squeeze()?), (vec![2, 3, 4], vec![12, 4, 1], 0));
    Ok(())
});

test_device!(squeeze_dim_removes_only_a_size_one_dim, |dev: &Device| {
    let z = ar(6, dev)?.reshape(&[1, 3, 1, 2])?;
    assert_eq!(z.squeeze_dim(0)?.shape(), &[3, 1, 2]);
    assert_eq!(z.squeeze_dim(-2)?.shape(), &[1, 3, 2]);
    // size 3: unchanged (PyTorch squeeze(dim) is a no-op there)
    assert_eq!(m(&z.squeeze_dim(1)?), m(&z));
    Ok(())
});

test_device!(squeeze_dim_refuses_bad_dim_unchanged, |dev: &Device| {
    let z = ar(6, dev)?.reshape(&[1, 3, 1, 2])?;
    let snap = snapshot(&z);
    refused!(z.squeeze_dim(4), "squeeze", "-4..4");
    assert_eq!(snapshot(&z), snap);
    Ok(())
});

// -------------------------------------------------------------------- view

test_device!(view_infers_minus_one, |dev: &Device| {
    let r = ar(12, dev)?;
    let w = r.view(&[3, -1])?;
    // r.reshape(3, -1)
    assert_eq!(m(&w), (vec![3, 4], vec![4, 1], 0));
    assert!(w.shares_storage(&r));
    Ok(())
});

test_device!(
    view_of_a_transpose_splits_a_dim_without_copying,
    |dev: &Device| {
        // t = arange(24).reshape(4, 6).T: shape [6, 4], strides [1, 6]
        let t = ar(24, dev)?.reshape(&[4, 6])?.t()?;
        let w = t.view(&[2, 3, 4])?;
        // t.reshape(2, 3, 4) shares memory in numpy too
        assert_eq!(m(&w), (vec![2, 3, 4], vec![3, 1, 6], 0));
        assert_eq!(
            v(&w)?,
            [
                0., 6., 12., 18., 1., 7., 13., 19., 2., 8., 14., 20., 3., 9., 15., 21., 4., 10.,
                16., 22., 5., 11., 17., 23.
            ]
        );
        assert!(w.shares_storage(&t));
        Ok(())
    }
);

test_device!(view_of_a_step_slice_merges_dims, |dev: &Device| {
    let x = x24(dev)?;
    // x[:, :, ::2] has strides [12, 4, 2]; reshape(6, 2) is a view
    let w = x.slice(2, 0, 4, 2)?.view(&[6, 2])?;
    assert_eq!(m(&w), (vec![6, 2], vec![4, 2], 0));
    assert_eq!(
        v(&w)?,
        [0., 2., 4., 6., 8., 10., 12., 14., 16., 18., 20., 22.]
    );
    Ok(())
});

test_device!(view_of_a_scalar_adds_size_one_dims, |dev: &Device| {
    let s = Tensor::scalar(5.0f32, dev)?;
    let w = s.view(&[1, 1])?;
    assert_eq!(m(&w), (vec![1, 1], vec![1, 1], 0));
    assert_eq!(v(&w)?, [5.0]);
    assert_eq!(s.view(&[-1])?.shape(), &[1]);
    Ok(())
});

test_device!(
    view_that_needs_a_copy_is_refused_with_view_not_possible,
    |dev: &Device| {
        let t = ar(24, dev)?.reshape(&[4, 6])?.t()?;
        let snap = snapshot(&t);
        let e = refused!(t.view(&[24]), "view", "reshape", "contiguous");
        assert!(matches!(e, Error::ViewNotPossible { .. }));
        assert_eq!(snapshot(&t), snap);
        Ok(())
    }
);

test_device!(view_refuses_bad_sizes_unchanged, |dev: &Device| {
    let r = ar(12, dev)?;
    let snap = snapshot(&r);
    let e = refused!(r.view(&[5, -1]), "view", "product is 12");
    assert!(matches!(e, Error::ElementCountMismatch { numel: 12, .. }));
    refused!(r.view(&[5, 2]), "view", "product is 12");
    refused!(r.view(&[-1, -1]), "view", "only one");
    refused!(r.view(&[-2, 6]), "view", "non-negative");
    assert_eq!(snapshot(&r), snap);
    Ok(())
});

// ----------------------------------------------------------------- reshape

test_device!(reshape_of_contiguous_is_a_view, |dev: &Device| {
    let b = ar(12, dev)?;
    let r = b.reshape(&[3, 4])?;
    assert_eq!(m(&r), (vec![3, 4], vec![4, 1], 0));
    assert!(r.shares_storage(&b));
    assert!(r.base().is_some_and(|root| root.is_same(&b)));
    Ok(())
});

test_device!(reshape_of_a_transpose_copies, |dev: &Device| {
    let a = ar(6, dev)?.reshape(&[2, 3])?;
    let r = a.t()?.reshape(&[6])?;
    // m.T.reshape(6) is a copy in numpy too
    assert_eq!(m(&r), (vec![6], vec![1], 0));
    assert_eq!(v(&r)?, [0., 3., 1., 4., 2., 5.]);
    assert!(!r.shares_storage(&a));
    Ok(())
});

test_device!(reshape_of_a_scalar_to_one_element, |dev: &Device| {
    let s = Tensor::scalar(5.0f32, dev)?;
    let r = s.reshape(&[1])?;
    assert_eq!(r.shape(), &[1]);
    assert!(r.shares_storage(&s));
    Ok(())
});

test_device!(
    reshape_refuses_wrong_element_count_unchanged,
    |dev: &Device| {
        let x = x24(dev)?;
        let snap = snapshot(&x);
        let e = refused!(x.reshape(&[5, 5]), "reshape", "product is 24");
        assert!(matches!(e, Error::ElementCountMismatch { .. }));
        refused!(x.transpose(0, 1)?.reshape(&[7, -1]), "reshape", "24");
        assert_eq!(snapshot(&x), snap);
        Ok(())
    }
);

// ----------------------------------------------------------------- flatten

test_device!(flatten_contiguous_dims_is_a_view, |dev: &Device| {
    let x = x24(dev)?;
    let f = x.flatten(1, -1)?;
    // x.reshape(2, 12)
    assert_eq!(m(&f), (vec![2, 12], vec![12, 1], 0));
    assert!(f.shares_storage(&x));
    assert_eq!(m(&x.flatten(0, 1)?), (vec![6, 4], vec![4, 1], 0));
    assert_eq!(m(&x.flatten(0, -1)?), (vec![24], vec![1], 0));
    Ok(())
});

test_device!(flatten_of_unmergeable_dims_copies, |dev: &Device| {
    let x = x24(dev)?;
    // xt = x.swapaxes(0, 1): [3, 2, 4] strides [4, 12, 1]; xt.reshape(6, 4) copies
    let f = x.transpose(0, 1)?.flatten(0, 1)?;
    assert_eq!(m(&f), (vec![6, 4], vec![4, 1], 0));
    assert_eq!(
        v(&f)?,
        [
            0., 1., 2., 3., 12., 13., 14., 15., 4., 5., 6., 7., 16., 17., 18., 19., 8., 9., 10.,
            11., 20., 21., 22., 23.
        ]
    );
    assert!(!f.shares_storage(&x));
    Ok(())
});

test_device!(flatten_of_a_scalar_has_shape_one, |dev: &Device| {
    // torch.tensor(5.).flatten().shape == (1,)
    let s = Tensor::scalar(5.0f32, dev)?;
    let f = s.flatten(0, -1)?;
    assert_eq!(f.shape(), &[1]);
    assert_eq!(v(&f)?, [5.0]);
    Ok(())
});

test_device!(
    flatten_refuses_start_after_end_and_bad_dim_unchanged,
    |dev: &Device| {
        let x = x24(dev)?;
        let snap = snapshot(&x);
        refused!(x.flatten(2, 0), "flatten", "start dim");
        refused!(x.flatten(0, 3), "flatten", "-3..3");
        assert_eq!(snapshot(&x), snap);
        Ok(())
    }
);

// ------------------------------------------------------------------ unfold

test_device!(unfold_makes_windows_with_a_step, |dev: &Device| {
    let a = ar(7, dev)?;
    let u = a.unfold(0, 2, 3)?;
    // sliding_window_view(a, 2)[::3]
    assert_eq!(m(&u), (vec![2, 2], vec![3, 1], 0));
    assert_eq!(v(&u)?, [0., 1., 3., 4.]);
    assert!(u.shares_storage(&a));
    Ok(())
});

test_device!(unfold_along_inner_and_outer_dims, |dev: &Device| {
    let a = ar(12, dev)?.reshape(&[3, 4])?;
    let u = a.unfold(1, 2, 1)?;
    // sliding_window_view(m34, 2, axis=1)
    assert_eq!(m(&u), (vec![3, 3, 2], vec![4, 1, 1], 0));
    assert_eq!(
        v(&u)?,
        [
            0., 1., 1., 2., 2., 3., 4., 5., 5., 6., 6., 7., 8., 9., 9., 10., 10., 11.
        ]
    );
    let u = a.unfold(0, 3, 1)?;
    // sliding_window_view(m34, 3, axis=0)
    assert_eq!(m(&u), (vec![1, 4, 3], vec![4, 1, 4], 0));
    assert_eq!(v(&u)?, [0., 4., 8., 1., 5., 9., 2., 6., 10., 3., 7., 11.]);
    Ok(())
});

test_device!(
    unfold_refuses_oversized_window_zero_step_bad_dim_unchanged,
    |dev: &Device| {
        let a = ar(7, dev)?;
        let snap = snapshot(&a);
        let e = refused!(a.unfold(0, 8, 1), "unfold", "size 7");
        assert!(matches!(e, Error::IndexOutOfRange { .. }));
        refused!(a.unfold(0, 2, 0), "unfold", "step");
        refused!(a.unfold(1, 2, 1), "unfold", "-1..1");
        assert_eq!(snapshot(&a), snap);
        Ok(())
    }
);

// ---------------------------------------------------------------- diagonal

test_device!(
    diagonal_with_positive_and_negative_offsets,
    |dev: &Device| {
        let a = ar(12, dev)?.reshape(&[3, 4])?;
        // np.diagonal(m34, 0)
        let d = a.diagonal(0, 0, 1)?;
        assert_eq!(m(&d), (vec![3], vec![5], 0));
        assert_eq!(v(&d)?, [0., 5., 10.]);
        // np.diagonal(m34, 1)
        let d = a.diagonal(1, 0, 1)?;
        assert_eq!(m(&d), (vec![3], vec![5], 1));
        assert_eq!(v(&d)?, [1., 6., 11.]);
        // np.diagonal(m34, -1)
        let d = a.diagonal(-1, 0, 1)?;
        assert_eq!(m(&d), (vec![2], vec![5], 4));
        assert_eq!(v(&d)?, [4., 9.]);
        assert!(d.shares_storage(&a));
        Ok(())
    }
);

test_device!(diagonal_offset_past_the_end_is_empty, |dev: &Device| {
    let a = ar(12, dev)?.reshape(&[3, 4])?;
    assert_eq!(a.diagonal(5, 0, 1)?.shape(), &[0]);
    assert_eq!(a.diagonal(-3, 0, 1)?.shape(), &[0]);
    Ok(())
});

test_device!(diagonal_of_non_adjacent_dims_on_rank3, |dev: &Device| {
    let x = x24(dev)?;
    // np.diagonal(x, 0, 0, 2): the kept dim 1, then the diagonal (stride 12 + 1)
    let d = x.diagonal(0, 0, 2)?;
    assert_eq!(m(&d), (vec![3, 2], vec![4, 13], 0));
    assert_eq!(v(&d)?, [0., 13., 4., 17., 8., 21.]);
    // np.diagonal(x, 1, 0, 2)
    let d = x.diagonal(1, 0, 2)?;
    assert_eq!(m(&d), (vec![3, 2], vec![4, 13], 1));
    assert_eq!(v(&d)?, [1., 14., 5., 18., 9., 22.]);
    // np.diagonal(x, -1, 2, 0): the same elements, reached from the other side
    let d = x.diagonal(-1, 2, 0)?;
    assert_eq!(m(&d), (vec![3, 2], vec![4, 13], 1));
    assert_eq!(v(&d)?, [1., 14., 5., 18., 9., 22.]);
    Ok(())
});

test_device!(
    diagonal_refuses_equal_or_bad_dims_unchanged,
    |dev: &Device| {
        let x = x24(dev)?;
        let snap = snapshot(&x);
        refused!(x.diagonal(0, 1, 1), "diagonal", "distinct");
        refused!(x.diagonal(0, 1, -4), "diagonal", "-3..3");
        assert_eq!(snapshot(&x), snap);
        Ok(())
    }
);

// ----------------------------------------------------- chunk, split, sizes

test_device!(chunk_uneven_gives_a_smaller_last_piece, |dev: &Device| {
    let a = ar(5, dev)?;
    // PyTorch: pieces of ceil(5 / 2) = 3
    let c = a.chunk(2, 0)?;
    assert_eq!(c.len(), 2);
    assert_eq!(
        (m(&c[0]), m(&c[1])),
        ((vec![3], vec![1], 0), (vec![2], vec![1], 3))
    );
    assert_eq!((v(&c[0])?, v(&c[1])?), (vec![0., 1., 2.], vec![3., 4.]));
    assert!(c.iter().all(|p| p.shares_storage(&a)));
    // ceil(5 / 3) = 2: [2, 2, 1]
    let c = a.chunk(3, 0)?;
    let sizes: Vec<usize> = c.iter().map(|p| p.shape()[0]).collect();
    assert_eq!(sizes, [2, 2, 1]);
    Ok(())
});

test_device!(chunk_may_return_fewer_pieces, |dev: &Device| {
    // PyTorch: torch.arange(5).chunk(4) has 3 pieces of ceil(5 / 4) = 2
    let c = ar(5, dev)?.chunk(4, 0)?;
    let sizes: Vec<usize> = c.iter().map(|p| p.shape()[0]).collect();
    assert_eq!(sizes, [2, 2, 1]);
    Ok(())
});

test_device!(
    chunk_of_an_empty_dim_gives_chunks_empty_pieces,
    |dev: &Device| {
        // PyTorch: torch.empty(0).chunk(3) has 3 empty pieces
        let c = Tensor::zeros(&[0, 2], DType::F32, dev)?.chunk(3, 0)?;
        assert_eq!(c.len(), 3);
        assert!(c.iter().all(|p| p.shape() == [0, 2]));
        Ok(())
    }
);

test_device!(chunk_along_dim1_of_a_matrix, |dev: &Device| {
    let a = ar(12, dev)?.reshape(&[3, 4])?;
    let c = a.chunk(2, -1)?;
    // m34[:, 2:]
    assert_eq!(m(&c[1]), (vec![3, 2], vec![4, 1], 2));
    assert_eq!(v(&c[1])?, [2., 3., 6., 7., 10., 11.]);
    Ok(())
});

test_device!(
    chunk_refuses_zero_chunks_and_bad_dim_unchanged,
    |dev: &Device| {
        let a = ar(5, dev)?;
        let snap = snapshot(&a);
        refused!(a.chunk(0, 0), "chunk", "at least 1");
        refused!(a.chunk(2, 1), "chunk", "-1..1");
        assert_eq!(snapshot(&a), snap);
        Ok(())
    }
);

test_device!(split_gives_equal_pieces_and_a_remainder, |dev: &Device| {
    let a = ar(5, dev)?;
    let s = a.split(2, 0)?;
    assert_eq!(s.len(), 3);
    let metas: Vec<_> = s.iter().map(m).collect();
    assert_eq!(
        metas,
        [
            (vec![2], vec![1], 0),
            (vec![2], vec![1], 2),
            (vec![1], vec![1], 4)
        ]
    );
    assert_eq!(v(&s[2])?, [4.]);
    Ok(())
});

test_device!(split_of_a_transpose_keeps_its_strides, |dev: &Device| {
    // t = arange(6).reshape(2, 3).T: [3, 2] strides [1, 3]; t[2:] = [[2, 5]]
    let t = ar(6, dev)?.reshape(&[2, 3])?.t()?;
    let s = t.split(2, 0)?;
    assert_eq!(m(&s[1]), (vec![1, 2], vec![1, 3], 2));
    assert_eq!(v(&s[1])?, [2., 5.]);
    Ok(())
});

test_device!(
    split_refuses_zero_size_and_bad_dim_unchanged,
    |dev: &Device| {
        let a = ar(5, dev)?;
        let snap = snapshot(&a);
        refused!(a.split(0, 0), "split", "at least 1");
        refused!(a.split(2, -2), "split", "-1..1");
        assert_eq!(snapshot(&a), snap);
        Ok(())
    }
);

test_device!(split_sizes_gives_the_requested_pieces, |dev: &Device| {
    let a = ar(5, dev)?;
    let s = a.split_sizes(&[1, 4], 0)?;
    assert_eq!(
        (m(&s[0]), m(&s[1])),
        ((vec![1], vec![1], 0), (vec![4], vec![1], 1))
    );
    assert_eq!(v(&s[1])?, [1., 2., 3., 4.]);
    // zero-length pieces are allowed
    assert_eq!(a.split_sizes(&[0, 5], 0)?[0].shape(), &[0]);
    Ok(())
});

test_device!(split_sizes_refuses_a_wrong_sum_unchanged, |dev: &Device| {
    let a = ar(5, dev)?;
    let snap = snapshot(&a);
    refused!(a.split_sizes(&[2, 2], 0), "split_sizes", "sum");
    refused!(a.split_sizes(&[5], 1), "split_sizes", "-1..1");
    assert_eq!(snapshot(&a), snap);
    Ok(())
});

// -------------------------------------------------------------- as_strided

test_device!(as_strided_reads_any_in_bounds_layout, |dev: &Device| {
    let a = ar(6, dev)?;
    let w = a.as_strided(&[2, 3], &[1, 2], 0)?;
    // as_strided(a6, (2, 3), (4, 8))
    assert_eq!(m(&w), (vec![2, 3], vec![1, 2], 0));
    assert_eq!(v(&w)?, [0., 2., 4., 1., 3., 5.]);
    assert!(w.shares_storage(&a));
    Ok(())
});

test_device!(
    as_strided_offset_is_absolute_in_the_storage,
    |dev: &Device| {
        // PyTorch: storage_offset counts from the storage start, not the view's
        let a = ar(6, dev)?;
        let w = a.narrow(0, 2, 2)?.as_strided(&[3], &[1], 1)?;
        assert_eq!(v(&w)?, [1., 2., 3.]);
        // overlapping windows are fine for reading
        let w = a.as_strided(&[3, 2], &[1, 1], 0)?;
        assert_eq!(v(&w)?, [0., 1., 1., 2., 2., 3.]);
        Ok(())
    }
);

test_device!(
    as_strided_refuses_out_of_bounds_and_rank_mismatch_unchanged,
    |dev: &Device| {
        let a = ar(6, dev)?;
        let snap = snapshot(&a);
        // reach = 1 + 1*1 + 2*2 + 1 = 7 > 6
        let e = refused!(a.as_strided(&[2, 3], &[1, 2], 1), "as_strided", "storage");
        assert!(matches!(
            e,
            Error::OutOfBounds {
                reach: 7,
                storage_len: 6,
                ..
            }
        ));
        refused!(a.as_strided(&[2, 3], &[1], 0), "stride");
        assert_eq!(snapshot(&a), snap);
        Ok(())
    }
);

// -------------------------------------------------------------- view_dtype

test_device!(
    view_dtype_f32_as_u8_multiplies_the_last_dim,
    |dev: &Device| {
        let a = ar(12, dev)?.reshape(&[3, 4])?;
        let u = a.view_dtype(DType::U8)?;
        // m34.view(np.uint8)
        assert_eq!(m(&u), (vec![3, 16], vec![16, 1], 0));
        assert_eq!(
            u.select(0, 0)?.to_vec::<u8>()?,
            [0, 0, 0, 0, 0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64]
        );
        assert!(u.shares_storage(&a));
        Ok(())
    }
);

test_device!(
    view_dtype_of_a_narrowed_matrix_scales_offset_and_strides,
    |dev: &Device| {
        let a = ar(12, dev)?.reshape(&[3, 4])?;
        let u = a.narrow(1, 1, 2)?.view_dtype(DType::U8)?;
        // m34[:, 1:3].view(np.uint8): offset 4 bytes
        assert_eq!(m(&u), (vec![3, 8], vec![16, 1], 4));
        assert_eq!(
            u.to_vec::<u8>()?,
            [
                0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 160, 64, 0, 0, 192, 64, 0, 0, 16, 65, 0, 0, 32,
                65
            ]
        );
        Ok(())
    }
);

test_device!(view_dtype_u8_as_f32_divides_the_last_dim, |dev: &Device| {
    let b = Tensor::from_slice(&[0u8, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64], &[12], dev)?;
    let f = b.view_dtype(DType::F32)?;
    // bb.view(np.float32)
    assert_eq!(m(&f), (vec![3], vec![1], 0));
    assert_eq!(v(&f)?, [1.0, 2.0, 3.0]);
    // offset 4 bytes -> 1 element
    let f = b.narrow(0, 4, 8)?.view_dtype(DType::F32)?;
    assert_eq!(m(&f), (vec![2], vec![1], 1));
    assert_eq!(v(&f)?, [2.0, 3.0]);
    Ok(())
});

test_device!(view_dtype_same_size_keeps_the_layout, |dev: &Device| {
    let t = ar(6, dev)?.reshape(&[2, 3])?.t()?;
    let i = t.view_dtype(DType::I32)?;
    assert_eq!(m(&i), (vec![3, 2], vec![1, 3], 0));
    // 1.0f32 = 0x3F800000 = 1065353216
    assert_eq!(
        i.select(1, 0)?.to_vec::<i32>()?,
        [0, 1065353216, 1073741824]
    );
    Ok(())
});

test_device!(
    view_dtype_refuses_indivisible_layouts_unchanged,
    |dev: &Device| {
        let b = Tensor::from_slice(&[0u8; 12], &[12], dev)?;
        let snap = snapshot(&b);
        // last dim 6 is not a multiple of 4
        refused!(
            b.narrow(0, 0, 6)?.view_dtype(DType::F32),
            "view_dtype",
            "divisible"
        );
        // offset 1 byte is not a multiple of 4
        refused!(
            b.narrow(0, 1, 8)?.view_dtype(DType::F32),
            "view_dtype",
            "divisible"
        );
        // row stride 6 is not a multiple of 4
        refused!(
            b.reshape(&[2, 6])?.narrow(1, 0, 4)?.view_dtype(DType::F32),
            "divisible"
        );
        assert_eq!(snapshot(&b), snap);
        Ok(())
    }
);

test_device!(
    view_dtype_refuses_a_strided_last_dim_and_a_scalar,
    |dev: &Device| {
        let t = ar(6, dev)?.reshape(&[2, 3])?.t()?;
        let snap = snapshot(&t);
        refused!(t.view_dtype(DType::U8), "view_dtype", "contiguous()");
        let s = Tensor::scalar(1.0f32, dev)?;
        refused!(s.view_dtype(DType::U8), "view_dtype", "unsqueeze");
        assert_eq!(snapshot(&t), snap);
        Ok(())
    }
);

// ------------------------------------------------------ detach, contiguous

test_device!(detach_shares_storage_with_no_base, |dev: &Device| {
    let a = ar(6, dev)?.reshape(&[2, 3])?;
    let t = a.t()?;
    let d = t.detach()?;
    assert_eq!(m(&d), m(&t));
    assert!(d.shares_storage(&a) && !d.is_same(&t));
    assert!(d.base().is_none() && !d.requires_grad());
    d.select(0, 1)?.fill_(9.0)?; // column 1 of a
    assert_eq!(v(&a)?, [0., 9., 2., 3., 9., 5.]);
    Ok(())
});

test_device!(
    contiguous_returns_the_same_tensor_when_contiguous,
    |dev: &Device| {
        let a = x24(dev)?;
        assert!(a.contiguous()?.is_same(&a));
        // a narrow of the outer dim is contiguous too (offset aside)
        let n = a.narrow(0, 1, 1)?;
        assert!(n.contiguous()?.is_same(&n));
        Ok(())
    }
);

test_device!(
    contiguous_of_a_transpose_copies_in_logical_order,
    |dev: &Device| {
        let a = ar(6, dev)?.reshape(&[2, 3])?;
        let c = a.t()?.contiguous()?;
        assert_eq!(m(&c), (vec![3, 2], vec![2, 1], 0));
        assert_eq!(v(&c)?, [0., 3., 1., 4., 2., 5.]);
        assert!(!c.shares_storage(&a) && c.base().is_none());
        Ok(())
    }
);

// ------------------------------------------------------------------ chains

test_device!(chain_permute_then_step_slice_then_unfold, |dev: &Device| {
    let x = x24(dev)?;
    let u = x.permute(&[2, 0, 1])?.slice(0, 1, 4, 2)?.unfold(2, 2, 1)?;
    // sliding_window_view(x.transpose(2, 0, 1)[1:4:2], 2, axis=2)
    assert_eq!(m(&u), (vec![2, 2, 2, 2], vec![2, 12, 4, 4], 1));
    assert_eq!(
        v(&u)?,
        [
            1., 5., 5., 9., 13., 17., 17., 21., 3., 7., 7., 11., 15., 19., 19., 23.
        ]
    );
    // base() is the root arange, not an intermediate view
    let root = x.base();
    assert!(
        u.base()
            .is_some_and(|b| root.is_some_and(|r| r.is_same(&b)))
    );
    Ok(())
});

test_device!(chain_transpose_then_select_then_t, |dev: &Device| {
    let x = x24(dev)?;
    let s = x.transpose(0, 2)?.select(1, 1)?;
    // x.swapaxes(0, 2)[:, 1]
    assert_eq!(m(&s), (vec![4, 2], vec![1, 12], 4));
    assert_eq!(v(&s)?, [4., 16., 5., 17., 6., 18., 7., 19.]);
    let t = s.t()?;
    // ... .T
    assert_eq!(m(&t), (vec![2, 4], vec![12, 1], 4));
    assert_eq!(v(&t)?, [4., 5., 6., 7., 16., 17., 18., 19.]);
    Ok(())
});

test_device!(
    chain_step_slice_then_transpose_then_narrow,
    |dev: &Device| {
        let x = x24(dev)?;
        let c = x.slice(1, 0, 3, 2)?.transpose(0, 1)?.narrow(2, 1, 2)?;
        // x[:, ::2].transpose(1, 0, 2)[..., 1:3]
        assert_eq!(m(&c), (vec![2, 2, 2], vec![8, 12, 1], 1));
        assert_eq!(v(&c)?, [1., 2., 13., 14., 9., 10., 21., 22.]);
        Ok(())
    }
);

test_device!(chain_permute_then_diagonal, |dev: &Device| {
    let x = x24(dev)?;
    let d = x.permute(&[2, 0, 1])?.diagonal(0, 0, 2)?;
    // np.diagonal(x.transpose(2, 0, 1), 0, 0, 2)
    assert_eq!(m(&d), (vec![2, 3], vec![12, 5], 0));
    assert_eq!(v(&d)?, [0., 5., 10., 12., 17., 22.]);
    Ok(())
});

test_device!(chain_writes_through_to_the_root, |dev: &Device| {
    let x = x24(dev)?;
    // x.transpose(2, 0, 1)[1:4:2][..., 0] = -1 writes x[:, 0, 1] and x[:, 0, 3]
    x.permute(&[2, 0, 1])?
        .slice(0, 1, 4, 2)?
        .select(2, 0)?
        .fill_(-1.0)?;
    let got = v(&x)?;
    for (i, &g) in got.iter().enumerate() {
        let want = if [1, 3, 13, 15].contains(&i) {
            -1.0
        } else {
            i as f32
        };
        assert_eq!(g, want, "element {i}");
    }
    Ok(())
});

test_device!(layout_view_transforms_match_tensor_views, |dev: &Device| {
    // the Layout arithmetic alone gives the seed slice
    let l = Layout::contiguous(&[2, 3, 4])?
        .slice(0, 1, 2, 1)?
        .slice(1, 1, 3, 1)?
        .slice(2, 1, 4, 1)?;
    let s = x24(dev)?
        .slice(0, 1, 2, 1)?
        .slice(1, 1, 3, 1)?
        .slice(2, 1, 4, 1)?;
    assert_eq!(s.layout(), l);
    Ok(())
});
