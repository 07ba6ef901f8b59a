//! kael-core built without its `autograd` feature (an inference-only
//! firmware image): ops compute as usual and record nothing, and `backward`
//! says why it has nothing to run (NOTE [Autograd feature]).
//!
//! Run by `scripts/test.sh quick` as
//! `cargo test -p kael-core --no-default-features --test without_autograd`;
//! with the feature on (every other build) this file compiles to nothing.
#![cfg(not(feature = "autograd"))]

use kael_core::{Device, Tensor};

fn leaf() -> kael_core::Result<Tensor> {
    Tensor::from_slice(&[1.0f32, 2.0], &[2], &Device::cpu())?.requires_grad_(true)
}

#[test]
fn an_op_on_a_tensor_that_requires_grad_records_no_history() {
    let x = leaf().unwrap();
    let y = x.mul(&x).unwrap();
    assert!(x.requires_grad());
    assert!(y.grad_fn().is_none() && !y.requires_grad());
}

#[test]
fn an_op_still_computes_its_values() {
    // [1, 2] . [3, 4] = 11, by hand
    let x = leaf().unwrap();
    let w = Tensor::from_slice(&[3.0f32, 4.0], &[2, 1], &Device::cpu()).unwrap();
    assert_eq!(
        x.unsqueeze(0)
            .unwrap()
            .matmul(&w)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![11.0]
    );
}

#[test]
fn backward_says_the_autograd_feature_is_off() {
    let x = leaf().unwrap();
    let err = x
        .mul(&x)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap_err();
    assert!(
        err.to_string().contains("without its `autograd` feature"),
        "{err}"
    );
}
