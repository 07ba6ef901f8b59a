//! Smaller promises of the error contract: the bool invariant, checked
//! arithmetic on user sizes, learning rates, arena messages that name the
//! real limit, and borrow conflicts that do not blame another thread.

use kael_core::allocator::{Allocator, ArenaAllocator};
use kael_core::optim::{Optimizer, Sgd, SgdConfig};
use kael_core::shared::Shared;
use kael_core::{DType, Device, Error, Tensor};

// ------------------------------------------------------------------ bool

#[test]
fn bytes_cannot_be_viewed_as_bool() {
    let bytes = Tensor::from_slice(&[1u8, 2, 255], &[3], &Device::cpu()).unwrap();
    let err = bytes.view_dtype(DType::Bool).unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidArgument {
                op: "view_dtype",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_bool_tensor_cannot_be_viewed_as_bytes() {
    // writing 2 through such a view would make a sum of three trues 258
    let b = Tensor::from_slice(&[true, true, true], &[3], &Device::cpu()).unwrap();
    assert!(matches!(
        b.view_dtype(DType::U8),
        Err(Error::InvalidArgument {
            op: "view_dtype",
            ..
        })
    ));
    assert!(b.view_dtype(DType::Bool).is_ok()); // bool as bool is fine
}

#[test]
fn a_sum_of_three_trues_is_three() {
    let b = Tensor::from_slice(&[2u8, 1, 255], &[3], &Device::cpu())
        .unwrap()
        .to_dtype(DType::Bool)
        .unwrap();
    let sum = b.to_dtype(DType::I64).unwrap().sum_all().unwrap();
    assert_eq!(sum.item::<i64>().unwrap(), 3);
}

// ---------------------------------------------------- checked arithmetic

#[test]
fn split_sizes_that_overflow_when_summed_are_refused() {
    let x = Tensor::zeros(&[2], DType::F32, &Device::cpu()).unwrap();
    let err = x.split_sizes(&[usize::MAX, 3], 0).unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidArgument {
                op: "split_sizes",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_checkpoint_whose_total_size_overflows_is_refused() {
    // two expanded views of 2^63 bytes each: each fits, their sum does not
    let dev = Device::cpu();
    let huge = Tensor::zeros(&[1], DType::F32, &dev)
        .unwrap()
        .expand(&[1usize << 61])
        .unwrap();
    let dir = std::env::temp_dir().join(format!("kael-overflow-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("huge.safetensors");
    let tensors = [("a".to_string(), huge.clone()), ("b".to_string(), huge)];
    let err = kael_host::checkpoint::save(&path, &tensors, &[]).unwrap_err();
    assert!(err.to_string().contains("overflows"), "{err}");
    assert!(!path.exists());
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "a file was left"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

// ------------------------------------------------------------ optimizers

#[test]
fn set_lr_refuses_nan_negative_and_infinite_rates() {
    let w = Tensor::ones(&[2], DType::F32, &Device::cpu())
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let mut opt = Sgd::new(vec![w], SgdConfig::default()).unwrap();
    for bad in [f64::NAN, -0.1, f64::INFINITY] {
        let err = opt.set_lr(bad).unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidArgument {
                    op: "Sgd::set_lr",
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(opt.lr(), 1e-3, "the rate changed");
    }
}

// ----------------------------------------------------------------- arena

fn leak(n: usize) -> &'static mut [u8] {
    Box::leak(vec![0u8; n].into_boxed_slice())
}

#[test]
fn a_full_block_table_says_the_block_limit_is_reached() {
    let dev = Device::cpu_with_allocator(Shared::new(ArenaAllocator::<2>::new(leak(1024))));
    let _a = Tensor::zeros(&[4], DType::F32, &dev).unwrap();
    let _b = Tensor::zeros(&[4], DType::F32, &dev).unwrap();
    let err = Tensor::zeros(&[4], DType::F32, &dev).unwrap_err();
    assert!(
        matches!(
            err,
            Error::AllocatorBlockLimit {
                requested: 16,
                max_blocks: 2
            }
        ),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("block limit") && msg.contains("raise"),
        "{msg}"
    );
}

#[test]
fn a_fragmented_arena_reports_its_largest_free_block() {
    // four 64-byte blocks; freeing the 1st and 3rd leaves 128 bytes free,
    // but no 128-byte block
    let arena = ArenaAllocator::<8>::new(leak(256));
    let l = std::alloc::Layout::from_size_align(64, 16).unwrap();
    let p: Vec<_> = (0..4).map(|_| arena.allocate(l).unwrap()).collect();
    for &q in [p[0], p[2]].iter() {
        // SAFETY: `q` came from `arena.allocate(l)` and is freed once.
        unsafe { arena.deallocate(q, l) };
    }
    let big = std::alloc::Layout::from_size_align(128, 16).unwrap();
    let err = arena.allocate(big).unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfMemory {
                requested: 128,
                available: Some(64)
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("largest free block is 64 bytes"));
}

// ---------------------------------------------------------------- borrows

#[test]
fn a_borrow_conflict_from_a_guard_on_this_thread_says_so() {
    let x = Tensor::zeros(&[2], DType::F32, &Device::cpu()).unwrap();
    let storage = x.storage();
    let guard = storage.read("test").unwrap();
    let err = x.fill_(1.0).unwrap_err();
    assert!(matches!(err, Error::BorrowConflict { .. }), "{err}");
    assert!(err.to_string().contains("this thread"), "{err}");
    drop(guard);
    x.fill_(1.0).unwrap();
}

// ------------------------------------------- layer sizes from the caller

#[test]
fn a_conv_whose_weight_size_overflows_is_refused() {
    let mut rng = kael_core::Rng::new(0);
    let err = kael_core::nn::Conv2d::new(usize::MAX, 2, [2, 2], &Device::cpu(), &mut rng)
        .err()
        .unwrap();
    assert!(
        matches!(err, Error::InvalidArgument { op: "Conv2d", .. }),
        "{err}"
    );
}

#[test]
fn attention_whose_projection_width_overflows_is_refused() {
    let mut rng = kael_core::Rng::new(0);
    let n = usize::MAX / 2;
    let err = kael_core::nn::CausalSelfAttention::new(n, 1, 0.0, &Device::cpu(), &mut rng)
        .err()
        .unwrap();
    assert!(
        matches!(
            err,
            Error::InvalidArgument {
                op: "CausalSelfAttention",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn an_mlp_whose_hidden_width_overflows_is_refused() {
    let mut rng = kael_core::Rng::new(0);
    let err = kael_core::nn::Mlp::new(usize::MAX / 2, 0.0, &Device::cpu(), &mut rng)
        .err()
        .unwrap();
    assert!(
        matches!(err, Error::InvalidArgument { op: "Mlp", .. }),
        "{err}"
    );
}
