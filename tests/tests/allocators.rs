//! Specification tests of tensor memory drawn from allocators through a
//! device: the fixed arena (`ArenaAllocator` over a leaked buffer, as
//! firmware uses it) and the per-device global allocator. Running out is
//! `Error::OutOfMemory`, never an abort; a refused allocation leaves every
//! tensor and the allocator's figures as they were, and the arena usable.
//!
//! Arena blocks start at multiples of 16 bytes (`BUFFER_ALIGN`); `in_use`
//! counts the bytes requested, not the padding.
mod common;

use common::snapshot;
use kael_core::allocator::{AllocStats, ArenaAllocator, BUFFER_ALIGN};
use kael_core::shared::Shared;
use kael_core::{DType, Device, Error, Tensor};

/// A CPU device whose tensor memory is an arena of `bytes` bytes with at
/// most `N` live blocks.
fn arena<const N: usize>(bytes: usize) -> Device {
    let buf: &'static mut [u8] = Box::leak(vec![0u8; bytes].into_boxed_slice());
    Device::cpu_with_allocator(Shared::new(ArenaAllocator::<N>::new(buf)))
}

fn stats(dev: &Device) -> AllocStats {
    dev.allocator().stats()
}

test_device!(tensors_draw_their_bytes_from_the_arena, |_dev: &Device| {
    let dev = arena::<64>(1024);
    assert_eq!(stats(&dev).capacity, Some(1024));
    assert_eq!(dev.allocator().name(), "arena");
    let a = Tensor::zeros(&[4, 4], DType::F32, &dev)?; // 64 bytes
    assert_eq!((stats(&dev).in_use, stats(&dev).allocations), (64, 1));
    let b = Tensor::ones(&[8], DType::F64, &dev)?; // 64 bytes
    assert_eq!(stats(&dev).in_use, 128);
    assert_eq!(b.to_vec::<f64>()?, [1.0; 8]);
    drop(a);
    assert_eq!((stats(&dev).in_use, stats(&dev).peak), (64, 128));
    drop(b);
    assert_eq!(stats(&dev).in_use, 0);
    Ok(())
});

test_device!(views_and_handle_copies_allocate_nothing, |_dev: &Device| {
    let dev = arena::<64>(1024);
    let a = Tensor::zeros(&[4, 4], DType::F32, &dev)?;
    let before = stats(&dev);
    let views = [
        a.clone(),
        a.t()?,
        a.narrow(0, 1, 2)?,
        a.select(1, 0)?.unsqueeze(0)?.expand(&[3, 4])?,
        a.view(&[16])?,
        a.detach()?,
        a.view_dtype(DType::U8)?,
    ];
    assert_eq!(stats(&dev), before);
    drop(views);
    // copies do allocate, exactly their own elements
    let c = a.t()?.contiguous()?;
    assert_eq!(stats(&dev).in_use - before.in_use, 64);
    assert!(!c.shares_storage(&a));
    Ok(())
});

test_device!(running_out_is_out_of_memory_from_zeros, |_dev: &Device| {
    let dev = arena::<64>(256);
    let e = Tensor::zeros(&[100], DType::F32, &dev).expect_err("400 bytes do not fit in 256");
    assert!(matches!(
        e,
        Error::OutOfMemory {
            requested: 400,
            available: Some(256)
        }
    ));
    assert!(
        e.to_string()
            .contains("free tensors or give the allocator more memory")
    );
    let s = stats(&dev);
    assert_eq!((s.in_use, s.allocations, s.failures), (0, 0, 1));
    // still usable
    let t = Tensor::full(&[16], 3.0, DType::F32, &dev)?;
    assert_eq!(t.to_vec::<f32>()?, [3.0; 16]);
    Ok(())
});

test_device!(
    the_arena_is_usable_again_after_dropping_tensors,
    |_dev: &Device| {
        let dev = arena::<64>(256);
        let a = Tensor::zeros(&[50], DType::F32, &dev)?; // 200 bytes: 0..200
        let e = Tensor::zeros(&[25], DType::F32, &dev).expect_err("100 more do not fit");
        assert!(matches!(
            e,
            Error::OutOfMemory {
                requested: 100,
                available: Some(48) // 56 free, 48 from the aligned start 208
            }
        ));
        drop(a);
        let b = Tensor::zeros(&[25], DType::F32, &dev)?;
        let c = Tensor::zeros(&[25], DType::F32, &dev)?; // 0..100, 112..212
        assert_eq!(stats(&dev).in_use, 200);
        assert!(!b.shares_storage(&c));
        // distinct, 16-byte aligned blocks
        let (pb, pc) = (b.storage().as_ptr() as usize, c.storage().as_ptr() as usize);
        assert_eq!((pb % BUFFER_ALIGN, pc % BUFFER_ALIGN), (0, 0));
        assert!(pb.abs_diff(pc) >= 100);
        Ok(())
    }
);

test_device!(peak_is_the_largest_in_use_seen, |_dev: &Device| {
    let dev = arena::<64>(1024);
    let a = Tensor::zeros(&[16], DType::F32, &dev)?; // 64
    let b = Tensor::zeros(&[32], DType::F32, &dev)?; // 128 -> in use 192
    drop(a); // 128
    let c = Tensor::zeros(&[8], DType::F32, &dev)?; // 32 -> 160
    let s = stats(&dev);
    assert_eq!((s.in_use, s.peak, s.allocations), (160, 192, 3));
    drop((b, c));
    let s = stats(&dev);
    assert_eq!((s.in_use, s.peak), (0, 192));
    Ok(())
});

test_device!(
    an_op_whose_output_does_not_fit_fails_cleanly,
    |_dev: &Device| {
        let dev = arena::<64>(256);
        let a = Tensor::full(&[24], 1.0, DType::F32, &dev)?; // 96 bytes: 0..96
        let b = Tensor::full(&[24], 2.0, DType::F32, &dev)?; // 96 bytes: 96..192
        let (sa, sb) = (snapshot(&a), snapshot(&b));
        let before = stats(&dev);
        let e = a
            .add(&b)
            .expect_err("a third 96-byte block does not fit in 64");
        assert!(matches!(
            e,
            Error::OutOfMemory {
                requested: 96,
                available: Some(64)
            }
        ));
        for r in [
            a.mul(&b),
            a.exp(),
            a.deep_clone(),
            a.to_dtype(DType::F64),
            a.view(&[4, 6])?.t()?.contiguous(),
        ] {
            assert!(matches!(r, Err(Error::OutOfMemory { .. })));
        }
        // nothing leaked, nothing written
        assert_eq!(stats(&dev).in_use, before.in_use);
        assert_eq!((snapshot(&a), snapshot(&b)), (sa, sb));
        assert_eq!(stats(&dev).failures, before.failures + 6);
        // with room again, an op works
        drop(b);
        assert_eq!(a.add(&a)?.to_vec::<f32>()?, [2.0; 24]);
        Ok(())
    }
);

test_device!(
    an_in_place_op_whose_temporary_copy_does_not_fit_fails_cleanly,
    |_dev: &Device| {
        // x takes 0..24; the next block would start at 32, leaving 8 bytes
        let dev = arena::<64>(40);
        let x = Tensor::from_slice(&[0.0f32, 1., 2., 3., 4., 5.], &[6], &dev)?;
        let snap = snapshot(&x);
        // the overlapping source must be copied first (20 bytes): out of memory
        let e = x
            .narrow(0, 1, 5)?
            .add_(&x.narrow(0, 0, 5)?)
            .expect_err("no room for the copy of the source");
        assert!(matches!(e, Error::OutOfMemory { requested: 20, .. }));
        assert_eq!(snapshot(&x), snap);
        assert_eq!(x.version(), 0);
        // ops that need no copy still work in the full arena
        x.add_(&x)?;
        x.narrow(0, 0, 2)?.fill_(-1.0)?;
        assert_eq!(x.to_vec::<f32>()?, [-1., -1., 4., 6., 8., 10.]);
        assert_eq!(x.version(), 2);
        Ok(())
    }
);

test_device!(a_full_block_table_is_the_block_limit, |_dev: &Device| {
    let dev = arena::<4>(4096);
    let mut live = Vec::new();
    for _ in 0..4 {
        live.push(Tensor::zeros(&[4], DType::F32, &dev)?);
    }
    let e = Tensor::zeros(&[4], DType::F32, &dev).expect_err("only 4 blocks");
    assert!(matches!(
        e,
        Error::AllocatorBlockLimit {
            requested: 16,
            max_blocks: 4
        }
    ));
    live.pop();
    live.push(Tensor::zeros(&[4], DType::F32, &dev)?);
    assert_eq!(stats(&dev).in_use, 64);
    Ok(())
});

test_device!(empty_tensors_need_no_arena_memory, |_dev: &Device| {
    let dev = arena::<64>(16);
    let _full = Tensor::zeros(&[4], DType::F32, &dev)?;
    let e = Tensor::zeros(&[0, 3], DType::F32, &dev)?;
    assert_eq!((e.numel(), e.storage_nbytes()), (0, 0));
    assert_eq!(stats(&dev).allocations, 1);
    Ok(())
});

test_device!(
    each_cpu_device_has_its_own_global_allocator_figures,
    |_dev: &Device| {
        let (d1, d2) = (Device::cpu(), Device::cpu());
        let t = Tensor::zeros(&[10], DType::F64, &d1)?;
        assert_eq!(d1.allocator().name(), "global");
        assert_eq!((stats(&d1).in_use, stats(&d2).in_use), (80, 0));
        assert_eq!(stats(&d1).capacity, None);
        drop(t);
        assert_eq!((stats(&d1).in_use, stats(&d1).peak), (0, 80));
        Ok(())
    }
);
