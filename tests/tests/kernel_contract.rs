//! The kernel contract's checks (NOTE [Kernel contract checks] in
//! kael_core::backend::contract), called the way a kernel developer would:
//! a kernel handed arguments the contract forbids returns an error that
//! names the op and the problem, and never reports a misuse on one thread
//! as a conflict with another thread.
use kael_core::backend::{BinaryOp, Src, UnaryOp};
use kael_core::{DType, Device, Error, Layout, Storage};

/// Four f32 values in a fresh storage on the reference CPU.
fn storage(dev: &Device, v: [f32; 4]) -> Storage {
    let s = Storage::zeroed(16, dev).unwrap();
    dev.backend()
        .write_bytes(&s, 0, bytemuck::cast_slice(&v))
        .unwrap();
    s
}

fn read(dev: &Device, s: &Storage) -> Vec<f32> {
    let mut b = [0u8; 16];
    dev.backend().read_bytes(s, 0, &mut b).unwrap();
    bytemuck::cast_slice::<u8, f32>(&b).to_vec()
}

#[test]
fn a_source_overlapping_the_destination_without_being_it_is_an_aliasing_error() {
    let dev = Device::cpu();
    let s = storage(&dev, [1.0, 2.0, 3.0, 4.0]);
    let (head, tail) = (
        Layout::new(&[2], &[1], 0).unwrap(),
        Layout::new(&[2], &[1], 2).unwrap(),
    );
    let src = Src {
        storage: &s,
        layout: &tail,
        dtype: DType::F32,
    };
    let dst = Src {
        storage: &s,
        layout: &head,
        dtype: DType::F32,
    };
    for e in [
        dev.backend().unary(UnaryOp::Exp, src, dst).unwrap_err(),
        dev.backend()
            .binary(BinaryOp::Add, src, dst, dst)
            .unwrap_err(),
    ] {
        match &e {
            Error::InvalidArgument { reason, .. } => {
                assert!(
                    reason.contains("shares the destination's storage"),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(!e.to_string().contains("thread"), "{e}");
    }
    // and nothing was written
    assert_eq!(read(&dev, &s), vec![1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn a_source_that_is_exactly_the_destination_runs_in_place() {
    let dev = Device::cpu();
    let s = storage(&dev, [1.0, 4.0, 9.0, 16.0]);
    let all = Layout::contiguous(&[4]).unwrap();
    let d = Src {
        storage: &s,
        layout: &all,
        dtype: DType::F32,
    };
    dev.backend().unary(UnaryOp::Sqrt, d, d).unwrap();
    assert_eq!(read(&dev, &s), vec![1.0, 2.0, 3.0, 4.0]);
    dev.backend().binary(BinaryOp::Mul, d, d, d).unwrap();
    assert_eq!(read(&dev, &s), vec![1.0, 4.0, 9.0, 16.0]);
}
