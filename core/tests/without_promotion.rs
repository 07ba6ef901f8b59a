//! kael-core built without its `promotion` feature (firmware with
//! `default-features = false`): operands of different dtypes, and numbers
//! that would promote, are refused with an error naming the feature and
//! nothing is written; same-dtype ops and numbers the dtype holds compute
//! as with the feature (NOTE [Promotion feature]).
//!
//! Run by `scripts/test.sh quick` as
//! `cargo test -p kael-core --no-default-features --test without_promotion`;
//! with the feature on (every other build) this file compiles to nothing.
#![cfg(not(feature = "promotion"))]

use kael_core::{DType, Device, Tensor};

fn names_the_feature<T: core::fmt::Debug>(r: kael_core::Result<T>) {
    let msg = r.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        msg.contains("`promotion` feature"),
        "expected a refusal naming the feature, got {msg:?}"
    );
}

#[test]
fn mixed_dtypes_are_refused_naming_the_feature() {
    let dev = Device::cpu();
    let f = Tensor::from_slice(&[1.0f32, 2.0], &[2], &dev).unwrap();
    let d = Tensor::from_slice(&[1.0f64, 2.0], &[2], &dev).unwrap();
    let i = Tensor::from_slice(&[1i64, 2], &[2], &dev).unwrap();
    names_the_feature(f.add(&d));
    names_the_feature(f.lt(&i));
    names_the_feature(i.div(&i));
    names_the_feature(i.sqrt());
    names_the_feature(i.add_scalar(0.5));
    names_the_feature(Tensor::cat(&[&f, &d], 0));
    names_the_feature(f.add_(&d));
    assert_eq!(f.to_vec::<f32>().unwrap(), [1.0, 2.0]);
    assert_eq!(f.version(), 0);
}

#[test]
fn same_dtypes_and_numbers_the_dtype_holds_compute_as_with_it() {
    let dev = Device::cpu();
    let i = Tensor::from_slice(&[1i64, 2], &[2], &dev).unwrap();
    assert_eq!(i.add_scalar(3).unwrap().to_vec::<i64>().unwrap(), [4, 5]);
    let f = Tensor::from_slice(&[1.0f32, 2.0], &[2], &dev).unwrap();
    assert_eq!(f.mul_scalar(2).unwrap().dtype(), DType::F32);
    assert_eq!(f.add(&f).unwrap().to_vec::<f32>().unwrap(), [2.0, 4.0]);
}
