//! View metadata at the edges (length 0, size 1, rank 0): shape, strides
//! and storage offset as PyTorch 2.15 gives them (values printed by
//! PyTorch for `torch.arange(24.).reshape(2, 3, 4)`; strides of size-0 and
//! size-1 dims are never stepped, so only the others are compared). One
//! chosen difference: an empty view's offset never exceeds its storage's length.

mod common;

use common::meta;
use kael_core::{Device, Result, Tensor};

fn x(dev: &Device) -> Result<Tensor> {
    Tensor::arange(0.0f32, 24.0, dev)?.reshape(&[2, 3, 4])
}

#[track_caller]
fn same(t: &Tensor, shape: &[usize], strides: &[usize], offset: usize) {
    let (s, st, o) = meta(t);
    assert_eq!(s, shape, "shape");
    assert_eq!(o, offset, "storage offset");
    for (d, &n) in shape.iter().enumerate() {
        if n > 1 {
            assert_eq!(
                st[d], strides[d],
                "stride of dim {d} (sizes {shape:?}, {st:?})"
            );
        }
    }
}

test_device!(narrow_of_length_zero_keeps_the_offset_of_start, |dev| {
    let x = x(dev)?;
    same(&x.narrow(1, 3, 0)?, &[2, 0, 4], &[12, 4, 1], 12);
    same(&x.narrow(2, 1, 0)?, &[2, 3, 0], &[12, 4, 1], 1);
    same(&x.narrow(0, 2, 0)?, &[0, 3, 4], &[12, 4, 1], 24);
    Ok(())
});

test_device!(empty_slices_keep_the_offset_of_start, |dev| {
    let x = x(dev)?;
    same(&x.slice(2, 4, 4, 1)?, &[2, 3, 0], &[12, 4, 1], 4);
    same(&x.slice(1, 2, 2, 1)?, &[2, 0, 4], &[12, 4, 1], 8);
    same(&x.slice(2, 1, 3, 2)?, &[2, 3, 1], &[12, 4, 2], 1);
    same(&x.slice(1, -1, 3, 1)?, &[2, 1, 4], &[12, 4, 1], 8);
    Ok(())
});

test_device!(select_and_size_one_views, |dev| {
    let x = x(dev)?;
    same(&x.select(2, -1)?, &[2, 3], &[12, 4], 3);
    same(&x.select(1, 2)?, &[2, 4], &[12, 1], 8);
    same(&x.unsqueeze(3)?, &[2, 3, 4, 1], &[12, 4, 1, 1], 0);
    same(&x.unsqueeze(0)?, &[1, 2, 3, 4], &[24, 12, 4, 1], 0);
    same(&x.narrow(1, 1, 1)?.squeeze_dim(1)?, &[2, 4], &[12, 1], 4);
    same(&x.transpose(0, 2)?, &[4, 3, 2], &[1, 4, 12], 0);
    same(
        &x.narrow(1, 1, 1)?.broadcast_to(&[2, 5, 4])?,
        &[2, 5, 4],
        &[12, 0, 1],
        4,
    );
    same(&x.unfold(2, 2, 3)?, &[2, 3, 1, 2], &[12, 4, 3, 1], 0);
    Ok(())
});

test_device!(diagonals_including_an_empty_one, |dev| {
    let x = x(dev)?;
    same(&x.diagonal(0, 1, 2)?, &[2, 3], &[12, 5], 0);
    same(&x.diagonal(1, 1, 2)?, &[2, 3], &[12, 5], 1);
    let e = x.diagonal(5, 1, 2)?;
    assert_eq!(e.shape(), &[2, 0]);
    assert_eq!(e.numel(), 0);
    Ok(())
});

test_device!(rank_zero_and_empty_tensors, |dev| {
    let s = Tensor::scalar(5.0f32, dev)?;
    same(&s.unsqueeze(0)?, &[1], &[1], 0);
    same(&s.unsqueeze(-1)?, &[1], &[1], 0);
    assert_eq!(s.unsqueeze(0)?.to_vec::<f32>()?, vec![5.0]);
    let e = Tensor::zeros(&[0, 3], kael_core::DType::F32, dev)?;
    same(&e.narrow(0, 0, 0)?, &[0, 3], &[3, 1], 0);
    // PyTorch gives offset 1 here, past the end of the 0-element storage;
    // kael clamps an empty view's offset to the storage's length (no
    // element is ever read), so it is 0.
    same(&e.narrow(1, 1, 2)?, &[0, 2], &[3, 1], 0);
    Ok(())
});
