//! Tests of kernel selection (NOTE [Kernel selection]): what a restricted
//! `CpuBackend` refuses, and that what it runs matches the reference.

use super::{dtypes, ops};
use crate::allocator::GlobalAllocator;
use crate::backend::{BinaryOp, UnaryOp};
use crate::cpu::CpuBackend;
use crate::shared::Shared;
use crate::{DType, Device, Error, Rng, Tensor};
use alloc::string::ToString;
use alloc::vec::Vec;

fn device<const D: u16, const O: u128, const A: bool>() -> Device {
    Device::from_backend(Shared::new(CpuBackend::<D, O, A>::with_allocator(
        Shared::new(GlobalAllocator::new()),
    )))
}

fn f32_only() -> Device {
    device::<{ dtypes::F32 }, { ops::ALL }, false>()
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

#[test]
fn cast_to_a_dtype_outside_the_set_is_an_error_naming_it_and_the_fix() {
    let dev = f32_only();
    let x = Tensor::from_slice(&[1.0f32, 2.0], &[2], &dev).unwrap();
    let e = x.to_dtype(DType::F64).unwrap_err();
    assert!(matches!(
        e,
        Error::UnsupportedDType {
            op: "to_dtype",
            dtype: DType::F64,
            ..
        }
    ));
    let msg = e.to_string();
    assert!(msg.contains("F64") && msg.contains("DTYPES"), "{msg}");
}

#[test]
fn kernel_on_a_dtype_outside_the_set_is_an_error_not_a_panic() {
    let dev = f32_only();
    // Allocation needs no kernel, so the tensor exists; every kernel refuses it.
    let a = Tensor::zeros(&[2, 2], DType::I64, &dev).unwrap();
    let refused = |r: crate::Result<Tensor>| {
        matches!(
            r,
            Err(Error::UnsupportedDType {
                dtype: DType::I64,
                ..
            })
        )
    };
    assert!(refused(a.add(&a)));
    assert!(refused(a.relu()));
    assert!(refused(a.matmul(&a)));
    assert!(refused(a.sum_all()));
    assert!(refused(a.t().unwrap().contiguous()));
}

#[test]
fn unary_op_outside_the_set_is_unsupported() {
    let dev = device::<{ dtypes::F32 }, { ops::MLP_INFERENCE }, false>();
    let x = Tensor::from_slice(&[0.5f32, -1.0], &[2], &dev).unwrap();
    let e = x.exp().unwrap_err();
    assert_eq!(
        e,
        Error::Unsupported {
            op: "exp",
            device: crate::DeviceKind::Cpu
        }
    );
    assert!(e.to_string().contains("exp"));
    assert_eq!(x.relu().unwrap().to_vec::<f32>().unwrap(), [0.5, 0.0]);
}

#[test]
fn binary_op_outside_the_set_is_unsupported() {
    let dev = device::<{ dtypes::F32 }, { ops::MLP_INFERENCE }, false>();
    let x = Tensor::from_slice(&[2.0f32, 3.0], &[2], &dev).unwrap();
    assert!(matches!(
        x.pow(&x),
        Err(Error::Unsupported { op: "pow", .. })
    ));
    assert_eq!(x.add(&x).unwrap().to_vec::<f32>().unwrap(), [4.0, 6.0]);
}

#[test]
fn kernel_family_outside_the_set_is_unsupported() {
    let dev = device::<{ dtypes::F32 }, { ops::MLP_INFERENCE }, false>();
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], &dev).unwrap();
    assert!(matches!(
        x.sum_all(),
        Err(Error::Unsupported { op: "reduce", .. })
    ));
    assert!(matches!(
        x.argmax(0, false),
        Err(Error::Unsupported { op: "argmax", .. })
    ));
}

#[test]
fn every_unary_and_binary_op_has_its_own_bit_inside_all() {
    let mut seen = 0u128;
    let mut count = 0;
    // Every row of the unary table, by its code.
    for code in 0..UnaryOp::COUNT {
        let b = 1u128 << (crate::ops::UNARY_BASE + code as u32);
        assert_eq!(b.count_ones(), 1);
        assert_eq!(seen & b, 0, "bit {b:#x} used twice");
        seen |= b;
        count += 1;
    }
    for op in BinaryOp::ALL {
        let b = ops::binary_bit(op);
        assert_eq!(b.count_ones(), 1);
        assert_eq!(seen & b, 0, "bit {b:#x} used twice");
        seen |= b;
        count += 1;
    }
    assert_eq!(count, UnaryOp::COUNT + BinaryOp::COUNT);
    assert_eq!(seen, ops::UNARY | ops::BINARY);
    assert_eq!(ops::ALL & seen, seen);
    // One bit besides for every other row of the family table (the
    // unary and binary rows take the op bits above).
    assert_eq!(
        (ops::ALL & !seen).count_ones() as usize,
        crate::backend::Family::ALL.len() - 2
    );
    // The named bits are the table's: a few spot checks.
    assert_eq!(ops::unary_bit(UnaryOp::Neg), ops::NEG);
    assert_eq!(ops::unary_bit(UnaryOp::Powf(2.0)), ops::POWF);
    assert_eq!(ops::unary_bit(UnaryOp::Clamp(None, None)), ops::CLAMP);
    assert_eq!(ops::binary_bit(BinaryOp::Pow), ops::POW);
}

#[test]
fn every_dtype_has_its_own_bit_inside_all() {
    let all = DType::ALL.iter().fold(0u16, |acc, &d| {
        assert_eq!(acc & dtypes::bit(d), 0);
        acc | dtypes::bit(d)
    });
    assert_eq!(all, dtypes::ALL);
}

/// The f32 ops of an MLP's forward and backward on both devices.
fn f32_program(dev: &Device) -> Vec<Vec<u32>> {
    let mut rng = Rng::new(7);
    let mut randn = |shape: &[usize]| {
        let n = shape.iter().product::<usize>();
        let v: Vec<f32> = (0..n).map(|_| rng.normal() as f32).collect();
        Tensor::from_slice(&v, shape, dev).unwrap()
    };
    let x = randn(&[5, 7]);
    let w = randn(&[7, 3]);
    let b = randn(&[3]);
    let h = x.matmul(&w).unwrap().add(&b).unwrap();
    let idx = Tensor::from_slice(&[2i64, 0], &[2], dev).unwrap();
    [
        h.clone(),
        h.relu().unwrap(),
        h.tanh().unwrap(),
        h.exp().unwrap(),
        h.mul(&h).unwrap().sub(&h).unwrap(),
        h.softmax(1).unwrap(),
        h.log_softmax(0).unwrap(),
        h.sum_dim(0, false).unwrap(),
        h.max_dim(1, false).unwrap(),
        h.t().unwrap().contiguous().unwrap(),
        h.index_select(0, &idx).unwrap(),
        x.t().unwrap().matmul(&h).unwrap(),
    ]
    .iter()
    .map(bits)
    .collect()
}

#[test]
fn f32_only_backend_gives_the_reference_bits_on_f32_ops() {
    assert_eq!(f32_program(&f32_only()), f32_program(&Device::cpu()));
}

#[test]
fn f32_accumulating_softmax_is_within_1e_5_of_the_reference() {
    // The f32 path rounds `x - max` to f32 before `expf`, so its relative
    // error is about |x - max| * eps (NOTE [f32 accumulation]); with
    // |x - max| up to about 50 here that is under 1e-5.
    let mut rng = Rng::new(3);
    let data: Vec<f32> = (0..200).map(|_| 8.0 * rng.normal() as f32).collect();
    let reference = Tensor::from_slice(&data, &[4, 50], &Device::cpu()).unwrap();
    let acc = device::<{ dtypes::F32 }, { ops::ALL }, true>();
    let x = Tensor::from_slice(&data, &[4, 50], &acc).unwrap();
    let pairs = [
        (reference.softmax(1), x.softmax(1), 0.0),
        // log-softmax values are differences of numbers up to ~50: an
        // absolute error of 1e-5 is the f32 rounding of those
        (reference.log_softmax(1), x.log_softmax(1), 1.0),
    ];
    for (want, got, abs) in pairs {
        let want = want.unwrap().to_vec::<f32>().unwrap();
        let got = got.unwrap().to_vec::<f32>().unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1.0e-5 * (abs + w.abs()), "{g} vs {w}");
        }
    }
}

#[test]
fn f32_accumulating_sum_is_compensated() {
    // 1 + 10000 * 1e-4: a plain f32 loop drifts by about 1e-4 here (each
    // addition of 1e-4 to a number near 1.5 rounds by up to 6e-8); Kahan
    // summation keeps the error within 2 ulp of the f64 sum.
    let mut data = alloc::vec![1.0e-4f32; 10_001];
    data[0] = 1.0;
    let exact: f64 = data.iter().map(|&x| x as f64).sum();
    let naive = data.iter().fold(0.0f32, |s, &x| s + x);
    assert!(
        (naive as f64 - exact).abs() > 1.0e-5,
        "the case must defeat plain f32"
    );
    let dev = device::<{ dtypes::F32 }, { ops::ALL }, true>();
    let x = Tensor::from_slice(&data, &[data.len()], &dev).unwrap();
    let got = x.sum_all().unwrap().to_vec::<f32>().unwrap()[0];
    assert!(
        (got as f64 - exact).abs() <= 2.0 * f32::EPSILON as f64 * exact,
        "{got} vs {exact}"
    );
}

#[test]
fn randn_and_rand_work_on_an_f32_only_backend_with_the_reference_values() {
    let dev = f32_only();
    let a = Tensor::randn(&[3, 5], DType::F32, &dev, &mut Rng::new(11)).unwrap();
    let b = Tensor::randn(&[3, 5], DType::F32, &Device::cpu(), &mut Rng::new(11)).unwrap();
    assert_eq!(bits(&a), bits(&b));
    let a = Tensor::rand(&[7], DType::F32, &dev, &mut Rng::new(2)).unwrap();
    let b = Tensor::rand(&[7], DType::F32, &Device::cpu(), &mut Rng::new(2)).unwrap();
    assert_eq!(bits(&a), bits(&b));
}
