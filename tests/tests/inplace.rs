//! Specification tests of the in-place ops (`add_ sub_ mul_ div_ fill_ zero_
//! copy_ clamp_`): values, one version bump per successful op, broadcast
//! sources, aliasing (exact and partial), refused destinations, and refused
//! ops leaving the tensor (values and version) unchanged. Expected values are
//! numpy's, where `x[...] op= y.copy()` gives the no-aliasing result.
mod common;

use common::snapshot;
use kael_core::shared::Shared;
use kael_core::{DType, Device, Error, Result, Storage, Tensor};

/// Expects `Err`, checks that its message names each of `words`, returns it.
macro_rules! refused {
    ($r:expr, $($word:expr),+ $(,)?) => {{
        let e: Error = $r.expect_err("the op must be refused");
        let msg = e.to_string();
        $(assert!(msg.contains($word), "message {msg:?} lacks {:?}", $word);)+
        e
    }};
}

fn f32s(vals: &[f32], shape: &[usize], dev: &Device) -> Result<Tensor> {
    Tensor::from_slice(vals, shape, dev)
}

/// `arange(6).reshape(2, 3)` as f32.
fn m23(dev: &Device) -> Result<Tensor> {
    Tensor::arange(0.0f32, 6.0, dev)?.reshape(&[2, 3])
}

// ------------------------------------------------------------------ values

test_device!(add_adds_and_bumps_the_version_once, |dev: &Device| {
    let x = f32s(&[1., 2., 3.], &[3], dev)?;
    x.add_(&f32s(&[10., 20., 30.], &[3], dev)?)?;
    assert_eq!(x.to_vec::<f32>()?, [11., 22., 33.]);
    assert_eq!(x.version(), 1);
    Ok(())
});

test_device!(sub_subtracts_integers, |dev: &Device| {
    let x = Tensor::from_slice(&[5i64, -2, 7], &[3], dev)?;
    x.sub_(&Tensor::from_slice(&[1i64, 3, 10], &[3], dev)?)?;
    assert_eq!(x.to_vec::<i64>()?, [4, -5, -3]);
    assert_eq!(x.version(), 1);
    // u8 wraps like numpy: 0 - 1 = 255
    let u = Tensor::from_slice(&[0u8, 5], &[2], dev)?;
    u.sub_(&Tensor::scalar(1u8, dev)?)?;
    assert_eq!(u.to_vec::<u8>()?, [255, 4]);
    Ok(())
});

test_device!(mul_multiplies, |dev: &Device| {
    let x = f32s(&[1.5, -2., 4.], &[3], dev)?;
    x.mul_(&f32s(&[2., 0.5, -0.25], &[3], dev)?)?;
    assert_eq!(x.to_vec::<f32>()?, [3., -1., -1.]);
    assert_eq!(x.version(), 1);
    Ok(())
});

test_device!(div_divides_floats, |dev: &Device| {
    let x = Tensor::from_slice(&[1.0f64, -3.0, 0.0], &[3], dev)?;
    x.div_(&Tensor::from_slice(&[4.0f64, 2.0, 0.0], &[3], dev)?)?;
    let v = x.to_vec::<f64>()?;
    assert_eq!(&v[..2], [0.25, -1.5]);
    assert!(v[2].is_nan()); // 0 / 0
    assert_eq!(x.version(), 1);
    Ok(())
});

test_device!(fill_writes_every_element_of_a_view, |dev: &Device| {
    let x = m23(dev)?;
    // x.T[1] = 7 writes column 1
    x.t()?.select(0, 1)?.fill_(7.0)?;
    assert_eq!(x.to_vec::<f32>()?, [0., 7., 2., 3., 7., 5.]);
    assert_eq!(x.version(), 1);
    Ok(())
});

test_device!(fill_converts_the_value_to_the_dtype, |dev: &Device| {
    let i = Tensor::zeros(&[2], DType::I64, dev)?;
    i.fill_(2.7)?; // truncates toward zero, like int(2.7)
    assert_eq!(i.to_vec::<i64>()?, [2, 2]);
    let b = Tensor::zeros(&[2], DType::Bool, dev)?;
    b.fill_(0.5)?; // non-zero is true
    assert_eq!(b.to_vec::<bool>()?, [true, true]);
    let h = Tensor::zeros(&[2], DType::BF16, dev)?;
    h.fill_(1.5)?;
    assert_eq!(
        h.to_vec::<kael_core::bf16>()?,
        [kael_core::bf16::from_f32(1.5); 2]
    );
    Ok(())
});

test_device!(zero_clears_a_step_slice, |dev: &Device| {
    let x = Tensor::arange(1.0f32, 7.0, dev)?;
    // x[::2] = 0
    x.slice(0, 0, 6, 2)?.zero_()?;
    assert_eq!(x.to_vec::<f32>()?, [0., 2., 0., 4., 0., 6.]);
    assert_eq!(x.version(), 1);
    Ok(())
});

test_device!(copy_writes_into_a_transposed_destination, |dev: &Device| {
    let x = Tensor::zeros(&[2, 3], DType::F32, dev)?;
    // x.T[...] = [[1, 2], [3, 4], [5, 6]]  ->  x = [[1, 3, 5], [2, 4, 6]]
    x.t()?
        .copy_(&f32s(&[1., 2., 3., 4., 5., 6.], &[3, 2], dev)?)?;
    assert_eq!(x.to_vec::<f32>()?, [1., 3., 5., 2., 4., 6.]);
    assert_eq!(x.version(), 1);
    Ok(())
});

test_device!(copy_casts_and_broadcasts, |dev: &Device| {
    let x = Tensor::zeros(&[2, 3], DType::F32, dev)?;
    // x[...] = np.array([1, 2, 3], dtype=np.int64)
    x.copy_(&Tensor::from_slice(&[1i64, 2, 3], &[3], dev)?)?;
    assert_eq!(x.to_vec::<f32>()?, [1., 2., 3., 1., 2., 3.]);
    // float -> int truncates toward zero: np.array([1.7, -2.5]).astype(np.int64)
    let i = Tensor::zeros(&[2, 2], DType::I64, dev)?;
    i.copy_(&f32s(&[1.7, -2.5], &[2, 1], dev)?)?;
    assert_eq!(i.to_vec::<i64>()?, [1, 1, -2, -2]);
    // -> bool is x != 0
    let b = Tensor::zeros(&[3], DType::Bool, dev)?;
    b.copy_(&f32s(&[0., -0.5, 2.], &[3], dev)?)?;
    assert_eq!(b.to_vec::<bool>()?, [false, true, true]);
    Ok(())
});

test_device!(
    copy_from_a_view_of_the_same_storage_with_another_dtype,
    |dev: &Device| {
        // the u8 view of [1.0f32] is [0, 0, 128, 63]; copy those bytes as values
        let x = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 0.0], &[4], dev)?;
        let bytes = x.narrow(0, 0, 1)?.view_dtype(DType::U8)?;
        x.copy_(&bytes)?;
        assert_eq!(x.to_vec::<f32>()?, [0., 0., 128., 63.]);
        Ok(())
    }
);

test_device!(clamp_limits_values, |dev: &Device| {
    let x = f32s(&[-2., 0.5, 3.], &[3], dev)?;
    x.clamp_(Some(-1.0), Some(1.0))?;
    assert_eq!(x.to_vec::<f32>()?, [-1., 0.5, 1.]);
    assert_eq!(x.version(), 1);
    let i = Tensor::from_slice(&[-5i32, 0, 9], &[3], dev)?;
    i.clamp_(Some(-1.0), None)?;
    assert_eq!(i.to_vec::<i32>()?, [-1, 0, 9]);
    Ok(())
});

// ----------------------------------------------------------------- version

test_device!(every_op_bumps_the_version_exactly_once, |dev: &Device| {
    let x = f32s(&[1., 2., 3.], &[3], dev)?;
    let y = f32s(&[1., 1., 1.], &[3], dev)?;
    let ops: [(&str, &dyn Fn() -> Result<()>); 8] = [
        ("add_", &|| x.add_(&y)),
        ("sub_", &|| x.sub_(&y)),
        ("mul_", &|| x.mul_(&y)),
        ("div_", &|| x.div_(&y)),
        ("fill_", &|| x.fill_(4.0)),
        ("zero_", &|| x.zero_()),
        ("copy_", &|| x.copy_(&y)),
        ("clamp_", &|| x.clamp_(Some(0.0), Some(0.5))),
    ];
    for (i, (name, op)) in ops.iter().enumerate() {
        op()?;
        assert_eq!(x.version(), i + 1, "{name}");
        assert_eq!(y.version(), 0, "{name}: the source is not written");
    }
    Ok(())
});

test_device!(
    a_write_through_a_view_bumps_the_shared_version,
    |dev: &Device| {
        let x = m23(dev)?;
        let t = x.t()?;
        t.narrow(0, 0, 1)?.add_(&Tensor::scalar(1.0f32, dev)?)?;
        assert_eq!((x.version(), t.version()), (1, 1));
        Ok(())
    }
);

// --------------------------------------------------------------- broadcast

test_device!(broadcast_source_row_column_and_scalar, |dev: &Device| {
    let x = m23(dev)?;
    // x += [10, 20, 30]
    x.add_(&f32s(&[10., 20., 30.], &[3], dev)?)?;
    assert_eq!(x.to_vec::<f32>()?, [10., 21., 32., 13., 24., 35.]);
    // x *= [[1], [-1]]
    x.mul_(&f32s(&[1., -1.], &[2, 1], dev)?)?;
    assert_eq!(x.to_vec::<f32>()?, [10., 21., 32., -13., -24., -35.]);
    // x -= 1 (rank 0)
    x.sub_(&Tensor::scalar(1.0f32, dev)?)?;
    assert_eq!(x.to_vec::<f32>()?, [9., 20., 31., -14., -25., -36.]);
    assert_eq!(x.version(), 3);
    Ok(())
});

test_device!(
    refuses_a_source_that_would_broadcast_the_destination_unchanged,
    |dev: &Device| {
        let x = f32s(&[1., 2., 3.], &[3], dev)?;
        let snap = snapshot(&x);
        // x (3,) += ones((2, 3)) would need a (2, 3) destination
        let e = refused!(
            x.add_(&Tensor::ones(&[2, 3], DType::F32, dev)?),
            "add",
            "[3]",
            "[2, 3]"
        );
        assert!(matches!(e, Error::ShapeMismatch { .. }));
        let one = f32s(&[1.], &[1], dev)?;
        let s1 = snapshot(&one);
        refused!(one.copy_(&x), "copy_", "[1]", "[3]");
        assert_eq!(snapshot(&one), s1);
        // shapes that do not broadcast at all
        let e = refused!(x.mul_(&f32s(&[1., 2.], &[2], dev)?), "cannot be broadcast");
        assert!(matches!(e, Error::BroadcastMismatch { .. }));
        assert_eq!(snapshot(&x), snap);
        Ok(())
    }
);

// ---------------------------------------------------------------- aliasing

test_device!(
    partially_overlapping_source_acts_as_a_copy,
    |dev: &Device| {
        let x = Tensor::arange(0.0f32, 4.0, dev)?;
        // x[1:4] += x[0:3].copy()  ->  [0, 1, 3, 5]
        x.narrow(0, 1, 3)?.add_(&x.narrow(0, 0, 3)?)?;
        assert_eq!(x.to_vec::<f32>()?, [0., 1., 3., 5.]);
        assert_eq!(x.version(), 1);
        Ok(())
    }
);

test_device!(
    partially_overlapping_copy_shifts_without_smearing,
    |dev: &Device| {
        let x = Tensor::arange(0.0f32, 4.0, dev)?;
        // x[1:4] = x[0:3]  ->  [0, 0, 1, 2] (not [0, 0, 0, 0])
        x.narrow(0, 1, 3)?.copy_(&x.narrow(0, 0, 3)?)?;
        assert_eq!(x.to_vec::<f32>()?, [0., 0., 1., 2.]);
        // and the other direction: x[0:3] = x[1:4]
        let y = Tensor::arange(0.0f32, 4.0, dev)?;
        y.narrow(0, 0, 3)?.copy_(&y.narrow(0, 1, 3)?)?;
        assert_eq!(y.to_vec::<f32>()?, [1., 2., 3., 3.]);
        Ok(())
    }
);

test_device!(source_is_own_transpose, |dev: &Device| {
    let m = Tensor::arange(0.0f32, 4.0, dev)?.reshape(&[2, 2])?;
    // m += m.T.copy(): [[0, 1], [2, 3]] + [[0, 2], [1, 3]]
    m.add_(&m.t()?)?;
    assert_eq!(m.to_vec::<f32>()?, [0., 3., 3., 6.]);
    Ok(())
});

test_device!(
    broadcast_source_from_the_destination_itself,
    |dev: &Device| {
        let x = f32s(&[1., 2., 3.], &[3], dev)?;
        // x += x[0] uses the value before the op: [2, 3, 4]
        x.add_(&x.narrow(0, 0, 1)?)?;
        assert_eq!(x.to_vec::<f32>()?, [2., 3., 4.]);
        // x *= x[-1] (rank 0): 4 -> [8, 12, 16]
        x.mul_(&x.select(0, -1)?)?;
        assert_eq!(x.to_vec::<f32>()?, [8., 12., 16.]);
        Ok(())
    }
);

test_device!(exact_alias_squares_in_place, |dev: &Device| {
    let a = f32s(&[1., -2., 3.], &[3], dev)?;
    a.mul_(&a)?;
    assert_eq!(a.to_vec::<f32>()?, [1., 4., 9.]);
    assert_eq!(a.version(), 1);
    // the same through two handles of one non-contiguous view
    let t = m23(dev)?.t()?;
    let t2 = t.clone();
    t.sub_(&t2)?;
    assert_eq!(t.to_vec::<f32>()?, [0.0; 6]);
    // and through two distinct views with equal layouts
    let x = m23(dev)?;
    x.t()?.add_(&x.t()?)?;
    assert_eq!(x.to_vec::<f32>()?, [0., 2., 4., 6., 8., 10.]);
    Ok(())
});

// ------------------------------------------------------ refused destinations

test_device!(
    stride_zero_destination_is_refused_for_every_read_modify_write_op_unchanged,
    |dev: &Device| {
        let base = f32s(&[1., 2.], &[2, 1], dev)?;
        let e = base.expand(&[2, 3])?;
        let one = Tensor::scalar(1.0f32, dev)?;
        let snap = snapshot(&base);
        let results = [
            e.add_(&one),
            e.sub_(&one),
            e.mul_(&one),
            e.div_(&one),
            e.copy_(&Tensor::zeros(&[2, 3], DType::F32, dev)?),
            e.clamp_(Some(0.0), None),
        ];
        for r in results {
            let err = refused!(r, "deep_clone");
            assert!(matches!(err, Error::InternalOverlap { .. }));
        }
        assert_eq!(snapshot(&base), snap);
        assert_eq!(base.version(), 0);
        Ok(())
    }
);

test_device!(
    overlapping_as_strided_destination_is_refused,
    |dev: &Device| {
        let x = Tensor::arange(0.0f32, 4.0, dev)?;
        // windows [0, 1], [1, 2], [2, 3]: element 1 appears twice
        let w = x.as_strided(&[3, 2], &[1, 1], 0)?;
        let snap = snapshot(&x);
        let e = refused!(w.add_(&Tensor::scalar(1.0f32, dev)?), "deep_clone");
        assert!(matches!(e, Error::InternalOverlap { .. }));
        assert_eq!(snapshot(&x), snap);
        // a non-overlapping as_strided destination is fine
        x.as_strided(&[2], &[2], 0)?.fill_(9.0)?;
        assert_eq!(x.to_vec::<f32>()?, [9., 1., 9., 3.]);
        Ok(())
    }
);

test_device!(
    fill_and_zero_write_overlapping_windows_as_pytorch_does,
    |dev: &Device| {
        // torch.zeros(6).unfold(0, 3, 2).fill_(1): windows [0..3], [2..5]
        let x = Tensor::zeros(&[6], DType::F32, dev)?;
        x.unfold(0, 3, 2)?.fill_(1.0)?;
        assert_eq!(x.to_vec::<f32>()?, [1., 1., 1., 1., 1., 0.]);
        assert_eq!(x.version(), 1);
        // torch.arange(6.).as_strided((3, 3), (1, 1)).zero_(): elements 0..5
        let y = Tensor::arange(0.0f32, 6.0, dev)?;
        y.as_strided(&[3, 3], &[1, 1], 0)?.zero_()?;
        assert_eq!(y.to_vec::<f32>()?, [0., 0., 0., 0., 0., 5.]);
        // an integer dtype, from an offset
        let z = Tensor::arange(0i64, 6, dev)?;
        z.as_strided(&[2, 2], &[1, 1], 3)?.fill_(-1.0)?;
        assert_eq!(z.to_vec::<i64>()?, [0, 1, 2, -1, -1, -1]);
        Ok(())
    }
);

test_device!(
    refuses_a_result_of_a_higher_category_unchanged,
    |dev: &Device| {
        // int64 op= float: the float result cannot be written into int64
        // (NOTE [Type promotion], rule 5; PyTorch refuses the same)
        let x = Tensor::from_slice(&[1i64, 2], &[2], dev)?;
        let snap = snapshot(&x);
        let y = Tensor::from_slice(&[1.0f64, 2.0], &[2], dev)?;
        for r in [x.add_(&y), x.sub_(&y), x.mul_(&y), x.div_(&y)] {
            let e = refused!(r, "float64", "int64", "to_dtype");
            assert!(matches!(e, Error::CannotCast { .. }));
        }
        assert_eq!(snapshot(&x), snap);
        // float32 op= float64 computes in float64 and keeps float32
        let f = f32s(&[1., 2.], &[2], dev)?;
        f.mul_(&y)?;
        assert_eq!((f.dtype(), f.to_vec::<f32>()?), (DType::F32, vec![1., 4.]));
        Ok(())
    }
);

test_device!(refuses_integer_div_unchanged, |dev: &Device| {
    let x = Tensor::from_slice(&[4i64, 6], &[2], dev)?;
    let snap = snapshot(&x);
    // int64 / int64 is true division (a float32 result)
    let e = refused!(x.div_(&Tensor::scalar(2i64, dev)?), "div", "to_dtype");
    assert!(matches!(
        e,
        Error::CannotCast {
            result: DType::F32,
            dest: DType::I64,
            ..
        }
    ));
    assert_eq!(snapshot(&x), snap);
    Ok(())
});

test_device!(
    refuses_bool_arithmetic_and_clamp_unchanged,
    |dev: &Device| {
        let b = Tensor::from_slice(&[true, false], &[2], dev)?;
        let snap = snapshot(&b);
        refused!(b.sub_(&b), "Bool");
        refused!(b.add_scalar_(1), "int64", "bool");
        refused!(b.clamp_(Some(0.0), Some(1.0)), "Bool");
        assert_eq!(snapshot(&b), snap);
        // bool += bool is logical or, *= logical and (PyTorch)
        let c = Tensor::from_slice(&[true, false], &[2], dev)?;
        c.add_(&Tensor::from_slice(&[false, true], &[2], dev)?)?;
        assert_eq!(c.to_vec::<bool>()?, [true, true]);
        c.mul_(&Tensor::from_slice(&[false, true], &[2], dev)?)?;
        assert_eq!(c.to_vec::<bool>()?, [false, true]);
        // fill_ and copy_ are fine on bool
        b.fill_(0.0)?;
        assert_eq!(b.to_vec::<bool>()?, [false, false]);
        Ok(())
    }
);

test_device!(refuses_inverted_clamp_bounds_unchanged, |dev: &Device| {
    let x = f32s(&[1., 2.], &[2], dev)?;
    let snap = snapshot(&x);
    refused!(
        x.clamp_(Some(1.0), Some(0.0)),
        "clamp",
        "min must not exceed max"
    );
    refused!(x.clamp_(None, Some(f64::NAN)), "clamp", "NaN");
    assert_eq!(snapshot(&x), snap);
    Ok(())
});

#[repr(align(16))]
struct Aligned([u8; 8]);
impl AsRef<[u8]> for Aligned {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

test_device!(
    external_read_only_storage_is_refused_unchanged,
    |dev: &Device| {
        let s = Shared::new(Storage::from_owner(Aligned([0; 8]), dev)?);
        let x = Tensor::from_storage(s, kael_core::Layout::contiguous(&[2])?, DType::F32)?;
        let snap = snapshot(&x);
        refused!(x.fill_(1.0), "read-only", "deep_clone");
        refused!(x.add_(&x), "read-only", "deep_clone");
        assert_eq!(snapshot(&x), snap);
        // the fix the message names
        let c = x.deep_clone()?;
        c.fill_(1.0)?;
        assert_eq!(c.to_vec::<f32>()?, [1., 1.]);
        Ok(())
    }
);

// PyTorch allows writes that do not read the destination on an expanded
// (stride-0) destination; read-modify-write ops and copy_ stay refused.
test_device!(
    fill_and_zero_accept_an_expanded_destination,
    |dev: &Device| {
        let one = Tensor::from_slice(&[1.0f32, 2.0], &[2, 1], dev)?;
        let ex = one.broadcast_to(&[2, 3])?;
        ex.fill_(4.5)?;
        assert_eq!(one.to_vec::<f32>()?, vec![4.5, 4.5]);
        assert_eq!(one.version(), 1);
        ex.zero_()?;
        assert_eq!(one.to_vec::<f32>()?, vec![0.0, 0.0]);
        let before = one.version();
        for e in [
            ex.add_scalar_(1.0).unwrap_err(),
            ex.mul_(&Tensor::ones(&[2, 3], kael_core::DType::F32, dev)?)
                .unwrap_err(),
            ex.copy_(&Tensor::ones(&[2, 3], kael_core::DType::F32, dev)?)
                .unwrap_err(),
            ex.clamp_(Some(0.0), None).unwrap_err(),
        ] {
            assert!(matches!(e, kael_core::Error::InternalOverlap { .. }), "{e}");
        }
        assert_eq!(one.version(), before);
        Ok(())
    }
);
