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

/// A Linear(3 -> 2) with bias, for the state-dict texts.
fn linear() -> crate::nn::Linear {
    crate::nn::Linear::new(3, 2, true, &Device::cpu(), &mut crate::Rng::new(0))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn entry(name: &str, shape: &[usize], dtype: DType) -> (alloc::string::String, Tensor) {
    let t = Tensor::zeros(shape, dtype, &Device::cpu()).unwrap_or_else(|e| panic!("{e}"));
    (name.into(), t)
}

#[test]
fn load_state_dict_lists_missing_unexpected_and_mismatched_entries_with_shapes() {
    use crate::nn::Module;
    let entries = [
        entry("weight", &[3, 2], DType::F32),
        entry("scale", &[2], DType::F64),
    ];
    let e = linear().load_state_dict(&entries).unwrap_err();
    assert_eq!(
        e.to_string(),
        "load_state_dict: the state dict does not match the module: missing 1 (bias [2] F32); \
         unexpected 1 (scale [2] F64); shape or dtype differs for 1 (weight: module [2, 3] F32, \
         given [3, 2] F32); load a state dict saved from a model of this architecture, or rename, \
         drop or convert those entries first"
    );
}

#[test]
fn load_state_dict_names_a_dtype_difference() {
    use crate::nn::Module;
    let entries = [
        entry("weight", &[2, 3], DType::F32),
        entry("bias", &[2], DType::F64),
    ];
    let e = linear().load_state_dict(&entries).unwrap_err();
    assert!(
        matches!(&e, Error::StateDictKeys { op: "load_state_dict", missing, unexpected, mismatched }
            if missing.is_empty() && unexpected.is_empty() && mismatched.len() == 1),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .contains("bias: module [2] F32, given [2] F64"),
        "{e}"
    );
}

#[test]
fn a_long_key_list_is_cut_after_eight_entries() {
    use crate::nn::Module;
    let mut entries: alloc::vec::Vec<_> = (0..11)
        .map(|i| entry(&alloc::format!("extra{i}"), &[1], DType::F32))
        .collect();
    entries.push(entry("weight", &[2, 3], DType::F32));
    entries.push(entry("bias", &[2], DType::F32));
    let msg = linear().load_state_dict(&entries).unwrap_err().to_string();
    assert!(msg.contains("unexpected 11 (extra0 [1] F32, "), "{msg}");
    assert!(msg.contains("extra7 [1] F32, and 3 more)"), "{msg}");
    assert!(!msg.contains("extra8"), "{msg}");
}

#[test]
fn in_place_arithmetic_errors_name_the_in_place_method() {
    let dev = Device::cpu();
    let f = Tensor::from_slice(&[1.0f32, 2.0], &[2], &dev).unwrap_or_else(|e| panic!("{e}"));
    let d = Tensor::from_slice(&[1.0f64, 2.0], &[2], &dev).unwrap_or_else(|e| panic!("{e}"));
    let i = Tensor::from_slice(&[1i64, 2], &[2], &dev).unwrap_or_else(|e| panic!("{e}"));
    // int64 += float: the float result cannot be written into int64
    // (NOTE [Type promotion], rule 5); int64 / int64 is true division
    for (got, want) in [
        (i.add_(&f), "add_"),
        (i.sub_(&d), "sub_"),
        (i.mul_(&f), "mul_"),
        (i.div_(&i), "div_"),
        (i.add_scalar_(0.5), "add_scalar_"),
    ] {
        let e = got.unwrap_err();
        assert!(
            e.to_string().starts_with(&alloc::format!("{want}: ")),
            "{e}"
        );
    }
    // and the tensors are unchanged
    assert_eq!(i.to_vec::<i64>().unwrap_or_else(|e| panic!("{e}")), [1, 2]);
    // float32 += float64 computes in float64 and keeps float32, as PyTorch
    f.add_(&d).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        f.to_vec::<f32>().unwrap_or_else(|e| panic!("{e}")),
        [2.0, 4.0]
    );
}

#[test]
fn an_op_left_out_of_a_firmware_backend_names_the_bit_to_add() {
    use crate::allocator::GlobalAllocator;
    use crate::cpu::{CpuBackend, dtypes, ops};
    use crate::shared::Shared;
    type Small = CpuBackend<{ dtypes::F32 }, { ops::MLP_INFERENCE }, true>;
    let dev = Device::from_backend(Shared::new(Small::with_allocator(Shared::new(
        GlobalAllocator::new(),
    ))));
    let x = Tensor::from_slice(&[1.0f32, -2.0], &[2], &dev).unwrap_or_else(|e| panic!("{e}"));
    for (e, bit) in [
        (x.gelu_tanh().unwrap_err(), "ops::GELU_TANH"),
        (x.sum_all().unwrap_err(), "ops::REDUCE"),
        (x.argmax(0, false).unwrap_err(), "ops::ARG_REDUCE"),
    ] {
        let msg = e.to_string();
        assert!(
            msg.contains(bit) && msg.contains("add that bit to OPS"),
            "{msg}"
        );
        assert!(!msg.contains("not implemented on"), "{msg}");
    }
}

#[test]
fn quantization_errors_print_their_value_without_float_formatting() {
    use crate::quant::QuantParams;
    let text = |s: f32| QuantParams::per_tensor(s, 0).unwrap_err().to_string();
    assert!(text(0.0).ends_with("(got 0 at channel 0)"), "{}", text(0.0));
    assert!(
        text(-0.25).ends_with("(got -2.5e-1 at channel 0)"),
        "{}",
        text(-0.25)
    );
    assert!(
        text(-3.0e-12).ends_with("(got -3e-12 at channel 0)"),
        "{}",
        text(-3.0e-12)
    );
    assert!(text(f32::NAN).ends_with("(got NaN at channel 0)"));
    assert!(text(f32::NEG_INFINITY).ends_with("(got -inf at channel 0)"));
    let z = QuantParams::per_tensor(1.0, 300).unwrap_err().to_string();
    assert!(z.ends_with("(got 300 at channel 0)"), "{z}");
}
