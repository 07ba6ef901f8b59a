//! The smallest end-to-end check that the workspace links together.
mod common;
use kael_core::{Device, Tensor};

test_device!(arange_reshape_slice_matches_pytorch, |dev: &Device| {
    let a = Tensor::arange(0.0f32, 24.0, dev)?.reshape(&[2, 3, 4])?;
    let s = a.slice(0, 1, 2, 1)?.slice(1, 1, 3, 1)?.slice(2, 1, 4, 1)?;
    assert_eq!(common::meta(&s), (vec![1, 2, 3], vec![12, 4, 1], 17));
    assert_eq!(s.to_vec::<f32>()?, vec![17.0, 18.0, 19.0, 21.0, 22.0, 23.0]);
    Ok(())
});
