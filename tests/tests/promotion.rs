//! Type promotion (NOTE [Type promotion]): the dtype table against
//! PyTorch's `torch.promote_types` / `torch.can_cast` for every pair of
//! kael's ten dtypes (tests/data/parity/promote_types.txt, written by
//! gen_promote.py), and the gradients of a promoted op coming back in each
//! input's own dtype, on every device. The op-by-op values and refusals are
//! in the parity suite.

mod common;

use kael_core::promote::{ResultType, can_cast, promote_types};
use kael_core::{DType, Number, Tensor};

fn dtype(s: &str) -> DType {
    match s {
        "f32" => DType::F32,
        "f64" => DType::F64,
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        "i64" => DType::I64,
        "i32" => DType::I32,
        "i16" => DType::I16,
        "i8" => DType::I8,
        "u8" => DType::U8,
        "bool" => DType::Bool,
        other => panic!("unknown dtype {other}"),
    }
}

#[test]
fn promote_types_and_can_cast_match_pytorch_for_every_pair() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/parity/promote_types.txt");
    let text = std::fs::read_to_string(path).unwrap();
    let mut n = 0;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let t: Vec<&str> = line.split_whitespace().collect();
        let (a, b, r) = (dtype(t[0]), dtype(t[1]), dtype(t[2]));
        assert_eq!(promote_types(a, b), r, "promote_types({a:?}, {b:?})");
        assert_eq!(can_cast(a, b), t[3] == "1", "can_cast({a:?}, {b:?})");
        n += 1;
    }
    assert_eq!(n, DType::ALL.len() * DType::ALL.len());
}

#[test]
fn a_lower_class_joins_only_with_a_higher_category() {
    // torch.result_type(int32 tensor, 5) is int32; with 5.0 float32;
    // with a float64 0-d tensor float64; with an int64 0-d tensor int32
    let mut r = ResultType::default();
    r.tensor(DType::I32, 1);
    r.number(Number::Int(5));
    assert_eq!(r.dtype(), Some(DType::I32));
    r.number(Number::Float(5.0));
    assert_eq!(r.dtype(), Some(DType::F32));
    let mut r = ResultType::default();
    r.tensor(DType::I32, 2);
    r.tensor(DType::F64, 0);
    assert_eq!(r.dtype(), Some(DType::F64));
    let mut r = ResultType::default();
    r.tensor(DType::I32, 2);
    r.tensor(DType::I64, 0);
    assert_eq!(r.dtype(), Some(DType::I32));
}

#[test]
fn gradients_of_a_promoted_op_come_back_in_each_inputs_dtype() {
    for (name, dev) in common::devices() {
        let a = Tensor::from_slice(&[1.0f32, 2.0], &[2], &dev)
            .and_then(|t| t.requires_grad_(true))
            .unwrap();
        let b = Tensor::from_slice(&[3.0f64, -4.0], &[2], &dev)
            .and_then(|t| t.requires_grad_(true))
            .unwrap();
        let y = a.mul(&b).unwrap();
        assert_eq!(y.dtype(), DType::F64, "{name}");
        y.sum_all().unwrap().backward().unwrap();
        let (ga, gb) = (a.grad().unwrap(), b.grad().unwrap());
        assert_eq!(ga.dtype(), DType::F32, "{name}");
        assert_eq!(gb.dtype(), DType::F64, "{name}");
        // d(ab)/da = b, d(ab)/db = a
        assert_eq!(ga.to_vec::<f32>().unwrap(), vec![3.0, -4.0], "{name}");
        assert_eq!(gb.to_vec::<f64>().unwrap(), vec![1.0, 2.0], "{name}");
    }
}

#[test]
fn an_in_place_op_keeps_its_dtype_and_refuses_a_higher_category() {
    for (name, dev) in common::devices() {
        // float16 += float32 tensor computes in float32 and rounds once
        let h = Tensor::from_slice(&[kael_core::f16::from_f32(1.0)], &[1], &dev).unwrap();
        let f = Tensor::from_slice(&[1e-3f32], &[1], &dev).unwrap();
        h.add_(&f).unwrap();
        assert_eq!(h.dtype(), DType::F16, "{name}");
        assert_eq!(
            h.to_vec::<kael_core::f16>().unwrap()[0],
            kael_core::f16::from_f32(1.0 + 1e-3),
            "{name}"
        );
        // int64 /= int64 is true division: a float result, refused in place
        let i = Tensor::from_slice(&[4i64, 6], &[2], &dev).unwrap();
        let e = i.div_(&i).unwrap_err();
        assert!(
            matches!(e, kael_core::Error::CannotCast { .. }),
            "{name}: {e}"
        );
        assert!(e.to_string().contains("to_dtype"), "the fix is named: {e}");
        assert_eq!(i.to_vec::<i64>().unwrap(), vec![4, 6], "{name}: unchanged");
        assert_eq!(i.version(), 0, "{name}");
        // the default float dtype is where integer true division lands
        assert_eq!(
            i.div(&i).unwrap().to_vec::<f32>().unwrap(),
            vec![1.0, 1.0],
            "{name}"
        );
    }
}
