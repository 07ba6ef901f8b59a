//! The worked examples of the seeds, one test each:
//! `kael-adr-0002-tensor-as-shared-handle.txt` (ADR) and
//! `pytorch-storage-and-tensorimpl.txt` (PT), with the PyTorch outputs the
//! seed prints pasted as the expected values.
mod common;

use common::meta;
use kael_core::shared::Shared;
use kael_core::{DType, Device, Error, Layout, Storage, Tensor};

// ADR "A worked example": write b.data_ptr<float>()[4] = 42 and read it
// through a, and through t = a.T() at [1][1] (storage index 0 + 1*1 + 1*3 = 4).
test_device!(copy_shares_data, |dev: &Device| {
    let a = Tensor::zeros(&[2, 3], DType::F32, dev)?;
    let b = a.clone();
    let t = a.t()?;
    assert!(a.is_same(&b) && !a.is_same(&t) && a.shares_storage(&t));
    // element 4 of the storage is row 1, column 1 of the [2, 3] tensor
    b.flatten(0, -1)?.narrow(0, 4, 1)?.fill_(42.0)?;
    assert_eq!(a.to_vec::<f32>()?[4], 42.0);
    assert_eq!(t.select(0, 1)?.select(0, 1)?.item::<f32>()?, 42.0);
    // and once more through copy_
    b.select(1, 1)?
        .narrow(0, 1, 1)?
        .copy_(&Tensor::scalar(43.0f32, dev)?)?;
    assert_eq!(a.to_vec::<f32>()?, [0., 0., 0., 0., 43., 0.]);
    assert_eq!(t.select(0, 1)?.select(0, 1)?.item::<f32>()?, 43.0);
    Ok(())
});

// ADR: "Read c: it still holds 0" (Tensor.CloneDoesNotShareData).
test_device!(clone_does_not_share_data, |dev: &Device| {
    let a = Tensor::zeros(&[2, 3], DType::F32, dev)?;
    let c = a.deep_clone()?;
    assert!(!a.shares_storage(&c) && !a.is_same(&c));
    a.fill_(42.0)?;
    assert_eq!(c.to_vec::<f32>()?, [0.0; 6]);
    Ok(())
});

// ADR "Deep copy is explicit": a clone of a 3-element int64 tensor at
// offset 2 of a 5-element storage has offset 0 and a 24-byte storage.
test_device!(clone_of_offset_tensor_starts_at_zero, |dev: &Device| {
    let s = Tensor::arange(0i64, 5, dev)?.narrow(0, 2, 3)?;
    assert_eq!((s.offset(), s.storage_nbytes()), (2, 40));
    let c = s.deep_clone()?;
    assert_eq!((c.offset(), c.storage_nbytes()), (0, 24));
    assert_eq!(c.to_vec::<i64>()?, [2, 3, 4]);
    Ok(())
});

// ADR "No empty handles" (Tensor.FromImplValidates): a layout reaching past
// the storage never becomes a tensor.
test_device!(from_storage_validates_the_layout, |dev: &Device| {
    let s = Shared::new(Storage::zeroed(24, dev)?); // 6 f32
    let ok = Tensor::from_storage(s.clone(), Layout::contiguous(&[2, 3])?, DType::F32)?;
    assert_eq!(ok.numel(), 6);
    let e = Tensor::from_storage(s.clone(), Layout::contiguous(&[2, 4])?, DType::F32)
        .expect_err("8 elements do not fit in 6");
    assert!(matches!(
        e,
        Error::OutOfBounds {
            reach: 8,
            storage_len: 6,
            ..
        }
    ));
    assert!(e.to_string().contains("inside the storage"));
    // an offset can push a small layout out too: 3 + 3 = 6 fits, 4 + 3 does not
    assert!(Tensor::from_storage(s.clone(), Layout::new(&[3], &[1], 3)?, DType::F32).is_ok());
    let e = Tensor::from_storage(s, Layout::new(&[3], &[1], 4)?, DType::F32)
        .expect_err("reaches element 7");
    assert!(matches!(e, Error::OutOfBounds { reach: 7, .. }));
    Ok(())
});

// PT: base = torch.arange(24.); s = base.reshape(2, 3, 4)[1:, 1:, 1:]
// prints torch.Size([1, 2, 3]) (12, 4, 1) 17 / 6 24 / 68 / True.
test_device!(
    slice_of_2x3x4_has_offset_17_over_24_elements,
    |dev: &Device| {
        let base = Tensor::arange(0.0f32, 24.0, dev)?;
        let x = base.reshape(&[2, 3, 4])?;
        let s = x
            .slice(0, 1, isize::MAX, 1)?
            .slice(1, 1, isize::MAX, 1)?
            .slice(2, 1, isize::MAX, 1)?;
        assert_eq!(meta(&s), (vec![1, 2, 3], vec![12, 4, 1], 17));
        assert_eq!(s.numel(), 6);
        assert_eq!(s.storage_nbytes() / s.element_size(), 24);
        assert_eq!(s.storage_nbytes(), 96);
        // s.data_ptr() - x.data_ptr() == 68 bytes
        assert_eq!(
            s.offset() * s.element_size() - x.offset() * x.element_size(),
            68
        );
        assert_eq!(s.storage().as_ptr(), x.storage().as_ptr());
        assert_eq!(s.to_vec::<f32>()?, [17., 18., 19., 21., 22., 23.]);
        Ok(())
    }
);

// PT: x = torch.arange(12.).reshape(3, 4); i = x.view(torch.int32)
// prints torch.int32 True / [0, 1065353216, 1073741824, 1077936128].
test_device!(view_dtype_reads_one_as_1065353216, |dev: &Device| {
    let x = Tensor::arange(0.0f32, 12.0, dev)?.reshape(&[3, 4])?;
    let i = x.view_dtype(DType::I32)?;
    assert_eq!(i.dtype(), DType::I32);
    assert!(i.shares_storage(&x));
    // same data pointer: same storage bytes, same offset
    assert_eq!(i.storage().as_ptr(), x.storage().as_ptr());
    assert_eq!(i.offset(), x.offset());
    assert_eq!(
        i.select(0, 0)?.to_vec::<i32>()?,
        [0, 1065353216, 1073741824, 1077936128]
    );
    Ok(())
});

// PT: base = arange(12.); x = base.reshape(3, 4); v = x.t(); s = v[1:]
// prints True True True / False True / True.
test_device!(base_of_a_view_chain_is_the_root, |dev: &Device| {
    let base = Tensor::arange(0.0f32, 12.0, dev)?;
    let x = base.reshape(&[3, 4])?;
    let v = x.t()?;
    let s = v.slice(0, 1, isize::MAX, 1)?;
    let is_base = |t: &Tensor| t.base().is_some_and(|b| b.is_same(&base));
    assert!(is_base(&x) && is_base(&v) && is_base(&s));
    // s._base is v: False; base._base is None: True
    assert!(!s.base().is_some_and(|b| b.is_same(&v)));
    assert!(base.base().is_none());
    // v.contiguous()._base is None: True (it copied)
    assert!(v.contiguous()?.base().is_none());
    Ok(())
});

// ADR "Alternatives considered / copy-on-write": x.slice(0, 0, 1).fill_(0)
// modifies x; here the narrow-then-zero_ form.
test_device!(narrow_then_zero_writes_through, |dev: &Device| {
    let x = Tensor::arange(0.0f32, 6.0, dev)?.reshape(&[2, 3])?;
    x.narrow(1, 1, 1)?.zero_()?;
    // [[0, 1, 2], [3, 4, 5]] -> [[0, 0, 2], [3, 0, 5]]
    assert_eq!(x.to_vec::<f32>()?, [0., 0., 2., 3., 0., 5.]);
    Ok(())
});

// DESIGN "Mutation and aliasing": a 2-element view of a 1M-element tensor
// copies 2 elements. Each Device::cpu() has its own allocator, so its stats
// see only this test's tensors.
test_device!(
    deep_clone_of_small_view_of_big_tensor_allocates_two_elements,
    |_dev: &Device| {
        let dev = Device::cpu();
        let big = Tensor::zeros(&[1_000_000], DType::F32, &dev)?;
        let view = big.narrow(0, 500_000, 2)?;
        let before = dev.allocator().stats().in_use;
        assert_eq!(before, 4_000_000);
        let c = view.deep_clone()?;
        assert_eq!(c.storage_nbytes(), 8);
        assert_eq!(dev.allocator().stats().in_use - before, 8);
        assert_eq!(meta(&c), (vec![2], vec![1], 0));
        Ok(())
    }
);

// ADR "Shared mutable state needs guards" / candle's deadlock: an in-place
// op that reads its own destination terminates with the right values.
test_device!(
    self_aliasing_add_terminates_with_right_values,
    |dev: &Device| {
        let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], dev)?;
        a.add_(&a)?;
        assert_eq!(a.to_vec::<f32>()?, [2., 4., 6.]);
        assert_eq!(a.version(), 1);
        // a transposed tensor aliasing itself exactly
        let m = Tensor::arange(0.0f32, 6.0, dev)?.reshape(&[2, 3])?.t()?;
        m.mul_(&m)?;
        assert_eq!(m.to_vec::<f32>()?, [0., 9., 1., 16., 4., 25.]);
        Ok(())
    }
);

// ADR "A worked example", the reference counts:
// a = zeros(2, 3)  impl #1 (refs 1), storage S (refs 1)
// b = a            impl #1 (refs 2), storage S (refs 1)
// t = a.T()        impl #2 (refs 1), storage S (refs 2)
// c = a.clone()    impl #3 (refs 1), storage S2 (refs 1)
test_device!(refcount_trace, |dev: &Device| {
    let a = Tensor::zeros(&[2, 3], DType::F32, dev)?;
    assert_eq!((a.handle_count(), a.storage_ref_count()), (1, 1));
    let b = a.clone();
    assert_eq!((a.handle_count(), a.storage_ref_count()), (2, 1));
    assert!(b.is_same(&a));
    let t = a.t()?;
    assert_eq!(a.storage_ref_count(), 2);
    assert_eq!(t.handle_count(), 1);
    // kael's view also keeps its root alive (PyTorch's `_base`), so impl #1
    // gains the handle held by t.base()
    assert_eq!(a.handle_count(), 3);
    let c = a.deep_clone()?;
    assert_eq!((c.handle_count(), c.storage_ref_count()), (1, 1));
    assert_eq!(a.storage_ref_count(), 2);
    drop(t);
    assert_eq!((a.handle_count(), a.storage_ref_count()), (2, 1));
    Ok(())
});

// ADR "The overlap check" (InPlace.ExpandedTensorThrows): the error says to
// clone first (kael: deep_clone).
test_device!(expand_then_in_place_is_refused, |dev: &Device| {
    let x = Tensor::from_slice(&[1.0f32, 2.0], &[2, 1], dev)?;
    let e = x.expand(&[2, 3])?;
    let snap = common::snapshot(&x);
    let err = e
        .add_(&Tensor::scalar(1.0f32, dev)?)
        .expect_err("stride 0 destination");
    assert!(matches!(err, Error::InternalOverlap { .. }));
    assert!(err.to_string().contains("deep_clone"));
    assert!(e.mul_(&Tensor::scalar(2.0f32, dev)?).is_err());
    assert_eq!(common::snapshot(&x), snap);
    // the suggested fix works
    let d = e.deep_clone()?;
    d.add_(&Tensor::scalar(1.0f32, dev)?)?;
    assert_eq!(d.to_vec::<f32>()?, [2., 2., 2., 3., 3., 3.]);
    Ok(())
});

// ADR "The version counter": it lives on the storage, so a write through any
// view or through detach() is seen by every handle
// (AutogradVersion.ModifyingSavedOutputThroughDetachThrows).
test_device!(
    version_counter_counts_writes_through_views_and_detach,
    |dev: &Device| {
        let constant = Tensor::from_slice(&[3.0f32, 4.0], &[2], dev)?;
        assert_eq!(constant.version(), 0);
        constant.add_(&Tensor::scalar(1.0f32, dev)?)?;
        assert_eq!(constant.to_vec::<f32>()?, [4., 5.]);
        assert_eq!(constant.version(), 1);
        constant.narrow(0, 1, 1)?.fill_(0.0)?;
        assert_eq!(constant.version(), 2);
        let d = constant.detach()?;
        d.mul_(&Tensor::scalar(2.0f32, dev)?)?;
        assert_eq!(constant.version(), 3);
        assert_eq!(d.version(), 3);
        assert_eq!(constant.to_vec::<f32>()?, [8., 0.]);
        Ok(())
    }
);
