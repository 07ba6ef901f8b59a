//! Error texts name the public operation the user called and the fix
//! (issue 22: texts that pointed the wrong way).

use crate::nn::{Reduction, mse_loss};
use crate::{DType, Device, Error, Tensor};
use alloc::string::ToString;

#[test]
fn item_with_the_wrong_type_names_item_and_the_matching_type() {
    let t = Tensor::scalar(1.5f32, &Device::cpu()).unwrap_or_else(|e| panic!("{e}"));
    let e = t.item::<f64>().unwrap_err();
    assert_eq!(
        e,
        Error::ElementTypeMismatch {
            op: "item",
            dtype: DType::F32,
            requested: DType::F64
        }
    );
    assert_eq!(
        e.to_string(),
        "item: the tensor's dtype is F32 but item::<f64>() reads F64; call item::<f32>(), or convert first with to_dtype(DType::F64)"
    );
}

#[test]
fn to_vec_with_the_wrong_type_does_not_suggest_the_dtype_it_already_has() {
    let t = Tensor::from_slice(&[1i32, 2], &[2], &Device::cpu()).unwrap_or_else(|e| panic!("{e}"));
    let msg = t.to_vec::<i64>().unwrap_err().to_string();
    assert!(msg.starts_with("to_vec: "), "{msg}");
    assert!(msg.contains("call to_vec::<i32>()"), "{msg}");
    assert!(!msg.contains("to_dtype(DType::I32)"), "{msg}");
}

#[test]
fn mse_loss_with_mismatched_dtypes_names_mse_loss_and_the_conversion() {
    let dev = Device::cpu();
    let x = Tensor::zeros(&[3], DType::F32, &dev).unwrap_or_else(|e| panic!("{e}"));
    let y = Tensor::zeros(&[3], DType::F64, &dev).unwrap_or_else(|e| panic!("{e}"));
    let e = mse_loss(&x, &y, Reduction::Mean).unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { op: "mse_loss", .. }),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("convert with to_dtype(DType::F32)"),
        "{e}"
    );
}
