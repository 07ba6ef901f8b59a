//! Specification tests of the elementwise ops: every unary and binary op
//! against numpy 2.4 values, on contiguous, transposed, step-sliced and
//! broadcast inputs, for f32, f64, f16, bf16 and (where the op applies)
//! i64, i32 and u8; comparisons, `where_cond`, NaN handling, operator
//! overloads, and refused inputs (which must leave the input unchanged).
//!
//! Unary inputs: `x = np.array([-2, -0.5, 0, 0.5, 1, 3]).reshape(2, 3)`
//! (integers: `[-2, -1, 0, 1, 2, 3]`, u8: `[0, 1, 2, 3, 200, 255]`).
//! Binary inputs: `a = [[1, -2, 3], [0.5, 4, -1]]`, `b = [[2, 0.5, -1],
//! [4, -3, 2]]`, `row = [10, 20, 30]`, `col = [[1], [2]]` (integers: `a =
//! [[1, -2, 3], [0, 4, -1]]`, `b = [[2, 5, -1], [4, -3, 2]]`; u8: `a = [[1, 2,
//! 3], [0, 250, 255]]`, `b = [[2, 5, 1], [4, 10, 2]]`, wrapping as numpy does).
//! f32 expectations are numpy's float64 result on the f32 inputs; f16/bf16
//! ones are numpy's float64 result rounded to the half type (bf16 with
//! round-to-nearest-even), checked to the half type's precision.
// The expected values are pasted from numpy; some equal std constants (e, ln 2).
#![allow(clippy::approx_constant)]

mod common;

use common::snapshot;
use kael_core::{DType, Device, Error, Result, Tensor, bf16, f16};

/// Elementwise closeness that also accepts equal infinities and NaN == NaN.
#[track_caller]
fn close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "length: got {got:?}, want {want:?}");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = g == w || (g.is_nan() && w.is_nan()) || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(
            ok,
            "element {i}: got {g}, want {w}\n got {got:?}\nwant {want:?}"
        );
    }
}

#[track_caller]
fn close64(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "length: got {got:?}, want {want:?}");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = g == w || (g.is_nan() && w.is_nan()) || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(
            ok,
            "element {i}: got {g}, want {w}\n got {got:?}\nwant {want:?}"
        );
    }
}

/// The values of a float tensor of any float dtype, as f32.
fn f32s(t: &Tensor) -> Result<Vec<f32>> {
    Ok(match t.dtype() {
        DType::F16 => t.to_vec::<f16>()?.iter().map(|h| h.to_f32()).collect(),
        DType::BF16 => t.to_vec::<bf16>()?.iter().map(|h| h.to_f32()).collect(),
        DType::F64 => t.to_vec::<f64>()?.iter().map(|&v| v as f32).collect(),
        _ => t.to_vec::<f32>()?,
    })
}

/// Expects `Err`, checks that its message names each of `words`, returns it.
macro_rules! refused {
    ($r:expr, $($word:expr),+ $(,)?) => {{
        let e: Error = $r.expect_err("the op must be refused");
        let msg = e.to_string();
        $(assert!(msg.contains($word), "message {msg:?} lacks {:?}", $word);)+
        e
    }};
}

const X: [f32; 6] = [-2.0, -0.5, 0.0, 0.5, 1.0, 3.0];
const XI: [i64; 6] = [-2, -1, 0, 1, 2, 3];
const XU: [u8; 6] = [0, 1, 2, 3, 200, 255];

const A: [f32; 6] = [1.0, -2.0, 3.0, 0.5, 4.0, -1.0];
const B: [f32; 6] = [2.0, 0.5, -1.0, 4.0, -3.0, 2.0];
const ROW: [f32; 3] = [10.0, 20.0, 30.0];
const COL: [f32; 2] = [1.0, 2.0];
const AI: [i64; 6] = [1, -2, 3, 0, 4, -1];
const BI: [i64; 6] = [2, 5, -1, 4, -3, 2];
const AU: [u8; 6] = [1, 2, 3, 0, 250, 255];
const BU: [u8; 6] = [2, 5, 1, 4, 10, 2];

/// `vals` as a [2, 3] f32 tensor.
fn m23(vals: &[f32; 6], dev: &Device) -> Result<Tensor> {
    Tensor::from_slice(vals, &[2, 3], dev)
}

/// `vals` as a [2, 3] view with strides [6, 2] over a 12-element storage
/// whose odd elements are junk (100.0).
fn gapped(vals: &[f32; 6], dev: &Device) -> Result<Tensor> {
    let mut buf = [100.0f32; 12];
    for (i, &v) in vals.iter().enumerate() {
        buf[2 * i] = v;
    }
    let g = Tensor::from_slice(&buf, &[12], dev)?
        .slice(0, 0, 12, 2)?
        .view(&[2, 3])?;
    assert_eq!((&g.strides()[..], g.is_contiguous()), (&[6, 2][..], false));
    Ok(g)
}

/// `vals` as a [2, 3] tensor of a float `dtype`.
fn m23_as(vals: &[f32; 6], dtype: DType, dev: &Device) -> Result<Tensor> {
    match dtype {
        DType::F64 => Tensor::from_slice(&vals.map(f64::from), &[2, 3], dev),
        DType::F16 => Tensor::from_slice(&vals.map(f16::from_f32), &[2, 3], dev),
        DType::BF16 => Tensor::from_slice(&vals.map(bf16::from_f32), &[2, 3], dev),
        _ => m23(vals, dev),
    }
}

/// `vals` as a [2, 3] tensor of an integer `dtype`.
fn m23_int(vals: &[i64; 6], dtype: DType, dev: &Device) -> Result<Tensor> {
    match dtype {
        DType::I32 => Tensor::from_slice(&vals.map(|v| v as i32), &[2, 3], dev),
        _ => Tensor::from_slice(vals, &[2, 3], dev),
    }
}

/// The values of an integer tensor as i64.
fn i64s(t: &Tensor) -> Result<Vec<i64>> {
    Ok(match t.dtype() {
        DType::I32 => t.to_vec::<i32>()?.iter().map(|&v| i64::from(v)).collect(),
        DType::U8 => t.to_vec::<u8>()?.iter().map(|&v| i64::from(v)).collect(),
        _ => t.to_vec::<i64>()?,
    })
}

// ------------------------------------------------------------ unary specs

macro_rules! unary_ints {
    (refused) => {
        // a float-only row computes integers and bools in the default
        // float dtype (NOTE [Type promotion], rule 4), as PyTorch
        test_device!(computes_integers_and_bools_in_float32, |dev: &Device| {
            for x in [
                m23_int(&XI, DType::I64, dev)?,
                m23_int(&XI, DType::I32, dev)?,
                Tensor::from_slice(&XU, &[2, 3], dev)?,
                Tensor::from_slice(&[true, false, true, true, false, false], &[2, 3], dev)?,
            ] {
                let snap = snapshot(&x);
                let y = op(&x)?;
                assert_eq!(y.dtype(), DType::F32);
                let want = op(&x.to_dtype(DType::F32)?)?.to_vec::<f32>()?;
                let got = y.to_vec::<f32>()?;
                assert!(
                    got.iter()
                        .zip(&want)
                        .all(|(g, w)| g == w || (g.is_nan() && w.is_nan())),
                    "{got:?} vs {want:?}"
                );
                assert_eq!(snapshot(&x), snap);
            }
            Ok(())
        });
    };
    ($ints:expr, u8: $u8:expr) => {
        test_device!(i64_and_i32_values, |dev: &Device| {
            for dt in [DType::I64, DType::I32] {
                let y = op(&m23_int(&XI, dt, dev)?)?;
                assert_eq!(y.dtype(), dt);
                assert_eq!(i64s(&y)?, $ints, "{dt:?}");
            }
            Ok(())
        });
        test_device!(u8_values, |dev: &Device| {
            let y = op(&Tensor::from_slice(&XU, &[2, 3], dev)?)?;
            assert_eq!(y.dtype(), DType::U8);
            assert_eq!(y.to_vec::<u8>()?, $u8);
            Ok(())
        });
        test_device!(refuses_bool_unchanged, |dev: &Device| {
            let x = Tensor::from_slice(&[true, false], &[2], dev)?;
            let snap = snapshot(&x);
            let e = refused!(op(&x), "Bool", "to_dtype");
            assert!(matches!(
                e,
                Error::UnsupportedDType {
                    dtype: DType::Bool,
                    ..
                }
            ));
            assert_eq!(snapshot(&x), snap);
            Ok(())
        });
    };
}

macro_rules! unary_spec {
    ($name:ident, $op:expr, f32: $f32:expr, t: $t:expr, f64: $f64:expr, f16: $f16:expr,
     bf16: $bf16:expr, ints: $($ints:tt)+) => {
        mod $name {
            use super::*;

            fn op(t: &Tensor) -> Result<Tensor> {
                let f: fn(&Tensor) -> Result<Tensor> = $op;
                f(t)
            }

            test_device!(f32_contiguous, |dev: &Device| {
                let x = m23(&X, dev)?;
                let y = op(&x)?;
                assert_eq!((y.shape(), y.dtype()), (&[2, 3][..], DType::F32));
                close(&y.to_vec::<f32>()?, &$f32, 1e-6);
                assert!(!y.shares_storage(&x));
                assert_eq!(x.to_vec::<f32>()?, X);
                Ok(())
            });

            test_device!(f32_transposed, |dev: &Device| {
                let y = op(&m23(&X, dev)?.t()?)?;
                assert_eq!(y.shape(), &[3, 2]);
                close(&y.to_vec::<f32>()?, &$t, 1e-6);
                Ok(())
            });

            test_device!(f32_step_sliced, |dev: &Device| {
                let y = op(&gapped(&X, dev)?)?;
                close(&y.to_vec::<f32>()?, &$f32, 1e-6);
                Ok(())
            });

            test_device!(f64_values, |dev: &Device| {
                let y = op(&m23_as(&X, DType::F64, dev)?)?;
                assert_eq!(y.dtype(), DType::F64);
                close64(&y.to_vec::<f64>()?, &$f64, 1e-12);
                Ok(())
            });

            test_device!(f16_and_bf16_values, |dev: &Device| {
                let y = op(&m23_as(&X, DType::F16, dev)?)?;
                assert_eq!(y.dtype(), DType::F16);
                close(&f32s(&y)?, &$f16, 2e-3);
                let y = op(&m23_as(&X, DType::BF16, dev)?)?;
                assert_eq!(y.dtype(), DType::BF16);
                close(&f32s(&y)?, &$bf16, 1e-2);
                Ok(())
            });

            unary_ints!($($ints)+);
        }
    };
}

// ----------------------------------------------------------- binary specs

macro_rules! binary_ints {
    (refused) => {
        // a float-only row computes integers and bools in the default
        // float dtype: int64 / int64 is true division (NOTE [Type
        // promotion], rule 4), as PyTorch
        test_device!(computes_integers_and_bools_in_float32, |dev: &Device| {
            for (a, b) in [
                (
                    m23_int(&AI, DType::I64, dev)?,
                    m23_int(&BI, DType::I64, dev)?,
                ),
                (
                    m23_int(&AI, DType::I32, dev)?,
                    m23_int(&BI, DType::I32, dev)?,
                ),
                (
                    Tensor::from_slice(&AU, &[2, 3], dev)?,
                    Tensor::from_slice(&BU, &[2, 3], dev)?,
                ),
                (
                    Tensor::from_slice(&[true, false, true, true, false, true], &[2, 3], dev)?,
                    Tensor::from_slice(&[true, true, false, true, true, true], &[2, 3], dev)?,
                ),
            ] {
                let (sa, sb) = (snapshot(&a), snapshot(&b));
                let y = op(&a, &b)?;
                assert_eq!(y.dtype(), DType::F32);
                let want =
                    op(&a.to_dtype(DType::F32)?, &b.to_dtype(DType::F32)?)?.to_vec::<f32>()?;
                let got = y.to_vec::<f32>()?;
                assert!(
                    got.iter()
                        .zip(&want)
                        .all(|(g, w)| g == w || (g.is_nan() && w.is_nan())),
                    "{got:?} vs {want:?}"
                );
                assert_eq!((snapshot(&a), snapshot(&b)), (sa, sb));
            }
            Ok(())
        });
    };
    ($ints:expr, u8: $u8:expr) => {
        test_device!(i64_and_i32_values, |dev: &Device| {
            for dt in [DType::I64, DType::I32] {
                let y = op(&m23_int(&AI, dt, dev)?, &m23_int(&BI, dt, dev)?)?;
                assert_eq!(y.dtype(), dt);
                assert_eq!(i64s(&y)?, $ints, "{dt:?}");
            }
            Ok(())
        });
        test_device!(u8_values_wrap, |dev: &Device| {
            let a = Tensor::from_slice(&AU, &[2, 3], dev)?;
            let b = Tensor::from_slice(&BU, &[2, 3], dev)?;
            assert_eq!(op(&a, &b)?.to_vec::<u8>()?, $u8);
            Ok(())
        });
    };
}

macro_rules! binary_spec {
    ($name:ident, $op:expr, f32: $f32:expr, t: $t:expr, row: $row:expr, col: $col:expr,
     scalar: $scalar:expr, f64: $f64:expr, f16: $f16:expr, bf16: $bf16:expr,
     ints: $($ints:tt)+) => {
        mod $name {
            use super::*;

            fn op(a: &Tensor, b: &Tensor) -> Result<Tensor> {
                let f: fn(&Tensor, &Tensor) -> Result<Tensor> = $op;
                f(a, b)
            }

            test_device!(f32_contiguous, |dev: &Device| {
                let (a, b) = (m23(&A, dev)?, m23(&B, dev)?);
                let y = op(&a, &b)?;
                assert_eq!((y.shape(), y.dtype()), (&[2, 3][..], DType::F32));
                close(&y.to_vec::<f32>()?, &$f32, 1e-6);
                assert_eq!((a.to_vec::<f32>()?, b.to_vec::<f32>()?), (A.to_vec(), B.to_vec()));
                Ok(())
            });

            test_device!(f32_transposed, |dev: &Device| {
                let y = op(&m23(&A, dev)?.t()?, &m23(&B, dev)?.t()?)?;
                assert_eq!(y.shape(), &[3, 2]);
                close(&y.to_vec::<f32>()?, &$t, 1e-6);
                Ok(())
            });

            test_device!(f32_step_sliced_with_contiguous, |dev: &Device| {
                let y = op(&gapped(&A, dev)?, &m23(&B, dev)?)?;
                close(&y.to_vec::<f32>()?, &$f32, 1e-6);
                let y = op(&m23(&A, dev)?, &gapped(&B, dev)?)?;
                close(&y.to_vec::<f32>()?, &$f32, 1e-6);
                Ok(())
            });

            test_device!(broadcasts_a_row, |dev: &Device| {
                let row = Tensor::from_slice(&ROW, &[3], dev)?;
                let y = op(&m23(&A, dev)?, &row)?;
                assert_eq!(y.shape(), &[2, 3]);
                close(&y.to_vec::<f32>()?, &$row, 1e-6);
                Ok(())
            });

            test_device!(broadcasts_a_column_on_the_left, |dev: &Device| {
                let col = Tensor::from_slice(&COL, &[2, 1], dev)?;
                let y = op(&col, &m23(&A, dev)?)?;
                assert_eq!(y.shape(), &[2, 3]);
                close(&y.to_vec::<f32>()?, &$col, 1e-6);
                Ok(())
            });

            test_device!(broadcasts_a_rank0_scalar, |dev: &Device| {
                let y = op(&m23(&A, dev)?, &Tensor::scalar(2.0f32, dev)?)?;
                assert_eq!(y.shape(), &[2, 3]);
                close(&y.to_vec::<f32>()?, &$scalar, 1e-6);
                Ok(())
            });

            test_device!(f64_values, |dev: &Device| {
                let y = op(&m23_as(&A, DType::F64, dev)?, &m23_as(&B, DType::F64, dev)?)?;
                assert_eq!(y.dtype(), DType::F64);
                close64(&y.to_vec::<f64>()?, &$f64, 1e-12);
                Ok(())
            });

            test_device!(f16_and_bf16_values, |dev: &Device| {
                let y = op(&m23_as(&A, DType::F16, dev)?, &m23_as(&B, DType::F16, dev)?)?;
                assert_eq!(y.dtype(), DType::F16);
                close(&f32s(&y)?, &$f16, 2e-3);
                let y = op(&m23_as(&A, DType::BF16, dev)?, &m23_as(&B, DType::BF16, dev)?)?;
                assert_eq!(y.dtype(), DType::BF16);
                close(&f32s(&y)?, &$bf16, 1e-2);
                Ok(())
            });

            // f32 with f64 computes in f64 (NOTE [Type promotion]): the
            // f64 values, either side
            test_device!(promotes_f32_with_f64_to_f64, |dev: &Device| {
                let a = m23(&A, dev)?;
                let b = m23_as(&B, DType::F64, dev)?;
                let (sa, sb) = (snapshot(&a), snapshot(&b));
                let y = op(&a, &b)?;
                assert_eq!(y.dtype(), DType::F64);
                close64(&y.to_vec::<f64>()?, &$f64, 1e-12);
                let y = op(&m23_as(&A, DType::F64, dev)?, &m23(&B, dev)?)?;
                close64(&y.to_vec::<f64>()?, &$f64, 1e-12);
                assert_eq!((snapshot(&a), snapshot(&b)), (sa, sb));
                Ok(())
            });

            test_device!(refuses_shapes_that_do_not_broadcast_unchanged, |dev: &Device| {
                let a = m23(&A, dev)?;
                let b = Tensor::from_slice(&[1.0f32, 2.0], &[2], dev)?;
                let (sa, sb) = (snapshot(&a), snapshot(&b));
                let e = refused!(op(&a, &b), "[2, 3]", "[2]", "cannot be broadcast");
                assert!(matches!(e, Error::BroadcastMismatch { .. }));
                assert_eq!((snapshot(&a), snapshot(&b)), (sa, sb));
                Ok(())
            });

            binary_ints!($($ints)+);
        }
    };
}

// ------------------------------------------------------------- unary ops

// -x
unary_spec!(
    neg,
    |t: &Tensor| t.neg(),
    f32: [2.0, 0.5, -0.0, -0.5, -1.0, -3.0],
    t: [2.0, -0.5, 0.5, -1.0, -0.0, -3.0],
    f64: [2.0, 0.5, -0.0, -0.5, -1.0, -3.0],
    f16: [2.0, 0.5, -0.0, -0.5, -1.0, -3.0],
    bf16: [2.0, 0.5, -0.0, -0.5, -1.0, -3.0],
    ints: [2, 1, 0, -1, -2, -3],
    u8: [0, 255, 254, 253, 56, 1]
);
// np.abs(x)
unary_spec!(
    abs,
    |t: &Tensor| t.abs(),
    f32: [2.0, 0.5, 0.0, 0.5, 1.0, 3.0],
    t: [2.0, 0.5, 0.5, 1.0, 0.0, 3.0],
    f64: [2.0, 0.5, 0.0, 0.5, 1.0, 3.0],
    f16: [2.0, 0.5, 0.0, 0.5, 1.0, 3.0],
    bf16: [2.0, 0.5, 0.0, 0.5, 1.0, 3.0],
    ints: [2, 1, 0, 1, 2, 3],
    u8: [0, 1, 2, 3, 200, 255]
);
// np.exp(x)
unary_spec!(
    exp,
    |t: &Tensor| t.exp(),
    f32: [0.13533528, 0.60653067, 1.0, 1.6487212, 2.7182817, 20.085537],
    t: [0.13533528, 1.6487212, 0.60653067, 2.7182817, 1.0, 20.085537],
    f64: [0.1353352832366127, 0.6065306597126334, 1.0, 1.6487212707001282, 2.718281828459045, 20.085536923187668],
    f16: [0.13537598, 0.6064453, 1.0, 1.6484375, 2.71875, 20.078125],
    bf16: [0.13574219, 0.60546875, 1.0, 1.6484375, 2.71875, 20.125],
    ints: refused
);
// np.log(x)
unary_spec!(
    log,
    |t: &Tensor| t.log(),
    f32: [f32::NAN, f32::NAN, f32::NEG_INFINITY, -0.6931472, 0.0, 1.0986123],
    t: [f32::NAN, -0.6931472, f32::NAN, 0.0, f32::NEG_INFINITY, 1.0986123],
    f64: [f64::NAN, f64::NAN, f64::NEG_INFINITY, -0.6931471805599453, 0.0, 1.0986122886681098],
    f16: [f32::NAN, f32::NAN, f32::NEG_INFINITY, -0.6933594, 0.0, 1.0986328],
    bf16: [f32::NAN, f32::NAN, f32::NEG_INFINITY, -0.69140625, 0.0, 1.1015625],
    ints: refused
);
// np.sqrt(x)
unary_spec!(
    sqrt,
    |t: &Tensor| t.sqrt(),
    f32: [f32::NAN, f32::NAN, 0.0, 0.70710677, 1.0, 1.7320508],
    t: [f32::NAN, 0.70710677, f32::NAN, 1.0, 0.0, 1.7320508],
    f64: [f64::NAN, f64::NAN, 0.0, 0.7071067811865476, 1.0, 1.7320508075688772],
    f16: [f32::NAN, f32::NAN, 0.0, 0.70703125, 1.0, 1.7324219],
    bf16: [f32::NAN, f32::NAN, 0.0, 0.70703125, 1.0, 1.734375],
    ints: refused
);
// x * x
unary_spec!(
    sqr,
    |t: &Tensor| t.sqr(),
    f32: [4.0, 0.25, 0.0, 0.25, 1.0, 9.0],
    t: [4.0, 0.25, 0.25, 1.0, 0.0, 9.0],
    f64: [4.0, 0.25, 0.0, 0.25, 1.0, 9.0],
    f16: [4.0, 0.25, 0.0, 0.25, 1.0, 9.0],
    bf16: [4.0, 0.25, 0.0, 0.25, 1.0, 9.0],
    ints: [4, 1, 0, 1, 4, 9],
    u8: [0, 1, 4, 9, 64, 1]
);
// 1 / x
unary_spec!(
    recip,
    |t: &Tensor| t.recip(),
    f32: [-0.5, -2.0, f32::INFINITY, 2.0, 1.0, 0.33333334],
    t: [-0.5, 2.0, -2.0, 1.0, f32::INFINITY, 0.33333334],
    f64: [-0.5, -2.0, f64::INFINITY, 2.0, 1.0, 0.3333333333333333],
    f16: [-0.5, -2.0, f32::INFINITY, 2.0, 1.0, 0.33325195],
    bf16: [-0.5, -2.0, f32::INFINITY, 2.0, 1.0, 0.33398438],
    ints: refused
);
// np.tanh(x)
unary_spec!(
    tanh,
    |t: &Tensor| t.tanh(),
    f32: [-0.9640276, -0.46211717, 0.0, 0.46211717, 0.7615942, 0.9950548],
    t: [-0.9640276, 0.46211717, -0.46211717, 0.7615942, 0.0, 0.9950548],
    f64: [-0.9640275800758169, -0.46211715726000974, 0.0, 0.46211715726000974, 0.7615941559557649, 0.9950547536867305],
    f16: [-0.9638672, -0.4621582, 0.0, 0.4621582, 0.76171875, 0.9951172],
    bf16: [-0.96484375, -0.46289062, 0.0, 0.46289062, 0.76171875, 0.99609375],
    ints: refused
);
// 1 / (1 + np.exp(-x))
unary_spec!(
    sigmoid,
    |t: &Tensor| t.sigmoid(),
    f32: [0.11920292, 0.37754068, 0.5, 0.62245935, 0.7310586, 0.95257413],
    t: [0.11920292, 0.62245935, 0.37754068, 0.7310586, 0.5, 0.95257413],
    f64: [0.11920292202211755, 0.3775406687981454, 0.5, 0.6224593312018546, 0.7310585786300049, 0.9525741268224334],
    f16: [0.11920166, 0.3774414, 0.5, 0.6225586, 0.73095703, 0.9526367],
    bf16: [0.119140625, 0.37695312, 0.5, 0.62109375, 0.73046875, 0.953125],
    ints: refused
);
// np.maximum(x, 0)
unary_spec!(
    relu,
    |t: &Tensor| t.relu(),
    f32: [0.0, 0.0, 0.0, 0.5, 1.0, 3.0],
    t: [0.0, 0.5, 0.0, 1.0, 0.0, 3.0],
    f64: [0.0, 0.0, 0.0, 0.5, 1.0, 3.0],
    f16: [0.0, 0.0, 0.0, 0.5, 1.0, 3.0],
    bf16: [0.0, 0.0, 0.0, 0.5, 1.0, 3.0],
    ints: [0, 0, 0, 1, 2, 3],
    u8: [0, 1, 2, 3, 200, 255]
);
// 0.5 * x * (1 + math.erf(x / math.sqrt(2)))
unary_spec!(
    gelu,
    |t: &Tensor| t.gelu(),
    f32: [-0.045500264, -0.15426877, 0.0, 0.34573123, 0.8413448, 2.9959502],
    t: [-0.045500264, 0.34573123, -0.15426877, 0.8413448, 0.0, 2.9959502],
    f64: [-0.04550026389635842, -0.15426876936299344, 0.0, 0.34573123063700656, 0.8413447460685429, 2.99595030590511],
    f16: [-0.04550171, -0.15429688, 0.0, 0.34570312, 0.8413086, 2.9960938],
    bf16: [-0.045410156, -0.15429688, 0.0, 0.34570312, 0.83984375, 3.0],
    ints: refused
);
// 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
unary_spec!(
    gelu_tanh,
    |t: &Tensor| t.gelu_tanh(),
    f32: [-0.045402307, -0.154286, 0.0, 0.345714, 0.841192, 2.9963627],
    t: [-0.045402307, 0.345714, -0.154286, 0.841192, 0.0, 2.9963627],
    f64: [-0.04540230591222494, -0.15428599017485606, 0.0, 0.34571400982514394, 0.8411919906082768, 2.996362607918227],
    f16: [-0.045410156, -0.15429688, 0.0, 0.34570312, 0.8413086, 2.9960938],
    bf16: [-0.045410156, -0.15429688, 0.0, 0.34570312, 0.83984375, 3.0],
    ints: refused
);
// x / (1 + np.exp(-x))
unary_spec!(
    silu,
    |t: &Tensor| t.silu(),
    f32: [-0.23840584, -0.18877034, 0.0, 0.31122968, 0.7310586, 2.8577223],
    t: [-0.23840584, 0.31122968, -0.18877034, 0.7310586, 0.0, 2.8577223],
    f64: [-0.2384058440442351, -0.1887703343990727, 0.0, 0.3112296656009273, 0.7310585786300049, 2.8577223804673],
    f16: [-0.23840332, -0.1887207, 0.0, 0.3112793, 0.73095703, 2.8574219],
    bf16: [-0.23828125, -0.18847656, 0.0, 0.31054688, 0.73046875, 2.859375],
    ints: refused
);
// np.sin(x)
unary_spec!(
    sin,
    |t: &Tensor| t.sin(),
    f32: [-0.9092974, -0.47942555, 0.0, 0.47942555, 0.84147096, 0.14112],
    t: [-0.9092974, 0.47942555, -0.47942555, 0.84147096, 0.0, 0.14112],
    f64: [-0.9092974268256817, -0.479425538604203, 0.0, 0.479425538604203, 0.8414709848078965, 0.1411200080598672],
    f16: [-0.9091797, -0.4794922, 0.0, 0.4794922, 0.8413086, 0.14111328],
    bf16: [-0.91015625, -0.47851562, 0.0, 0.47851562, 0.83984375, 0.14160156],
    ints: refused
);
// np.cos(x)
unary_spec!(
    cos,
    |t: &Tensor| t.cos(),
    f32: [-0.41614684, 0.87758255, 1.0, 0.87758255, 0.5403023, -0.9899925],
    t: [-0.41614684, 0.87758255, 0.87758255, 0.5403023, 1.0, -0.9899925],
    f64: [-0.4161468365471424, 0.8775825618903728, 1.0, 0.8775825618903728, 0.5403023058681398, -0.9899924966004454],
    f16: [-0.41625977, 0.8774414, 1.0, 0.8774414, 0.54052734, -0.9902344],
    bf16: [-0.41601562, 0.87890625, 1.0, 0.87890625, 0.5390625, -0.98828125],
    ints: refused
);
// np.sign(x)
unary_spec!(
    sign,
    |t: &Tensor| t.sign(),
    f32: [-1.0, -1.0, 0.0, 1.0, 1.0, 1.0],
    t: [-1.0, 1.0, -1.0, 1.0, 0.0, 1.0],
    f64: [-1.0, -1.0, 0.0, 1.0, 1.0, 1.0],
    f16: [-1.0, -1.0, 0.0, 1.0, 1.0, 1.0],
    bf16: [-1.0, -1.0, 0.0, 1.0, 1.0, 1.0],
    ints: [-1, -1, 0, 1, 1, 1],
    u8: [0, 1, 1, 1, 1, 1]
);
// np.power(x, 2.5)
unary_spec!(
    powf,
    |t: &Tensor| t.powf(2.5),
    f32: [f32::NAN, f32::NAN, 0.0, 0.17677669, 1.0, 15.588457],
    t: [f32::NAN, 0.17677669, f32::NAN, 1.0, 0.0, 15.588457],
    f64: [f64::NAN, f64::NAN, 0.0, 0.1767766952966369, 1.0, 15.588457268119896],
    f16: [f32::NAN, f32::NAN, 0.0, 0.17675781, 1.0, 15.5859375],
    bf16: [f32::NAN, f32::NAN, 0.0, 0.17675781, 1.0, 15.5625],
    ints: refused
);
// np.clip(x, -1, 2)
unary_spec!(
    clamp,
    |t: &Tensor| t.clamp(Some(-1.0), Some(2.0)),
    f32: [-1.0, -0.5, 0.0, 0.5, 1.0, 2.0],
    t: [-1.0, 0.5, -0.5, 1.0, 0.0, 2.0],
    f64: [-1.0, -0.5, 0.0, 0.5, 1.0, 2.0],
    f16: [-1.0, -0.5, 0.0, 0.5, 1.0, 2.0],
    bf16: [-1.0, -0.5, 0.0, 0.5, 1.0, 2.0],
    ints: [-1, -1, 0, 1, 2, 2],
    u8: [0, 1, 2, 2, 2, 2]
);
// x * 2 - 1.5
unary_spec!(
    affine,
    |t: &Tensor| t.affine(2.0, -1.5),
    f32: [-5.5, -2.5, -1.5, -0.5, 0.5, 4.5],
    t: [-5.5, -0.5, -2.5, 0.5, -1.5, 4.5],
    f64: [-5.5, -2.5, -1.5, -0.5, 0.5, 4.5],
    f16: [-5.5, -2.5, -1.5, -0.5, 0.5, 4.5],
    bf16: [-5.5, -2.5, -1.5, -0.5, 0.5, 4.5],
    ints: refused
);

// ------------------------------------------------------------ binary ops

// np.add(a, b): contiguous, a.T with b.T, a with row [3], col [2, 1] with a, a with 2.0
binary_spec!(
    add,
    |a: &Tensor, b: &Tensor| a.add(b),
    f32: [3.0, -1.5, 2.0, 4.5, 1.0, 1.0],
    t: [3.0, 4.5, -1.5, 1.0, 2.0, 1.0],
    row: [11.0, 18.0, 33.0, 10.5, 24.0, 29.0],
    col: [2.0, -1.0, 4.0, 2.5, 6.0, 1.0],
    scalar: [3.0, 0.0, 5.0, 2.5, 6.0, 1.0],
    f64: [3.0, -1.5, 2.0, 4.5, 1.0, 1.0],
    f16: [3.0, -1.5, 2.0, 4.5, 1.0, 1.0],
    bf16: [3.0, -1.5, 2.0, 4.5, 1.0, 1.0],
    ints: [3, 3, 2, 4, 1, 1],
    u8: [3, 7, 4, 4, 4, 1]
);
// np.subtract(a, b): contiguous, a.T with b.T, a with row [3], col [2, 1] with a, a with 2.0
binary_spec!(
    sub,
    |a: &Tensor, b: &Tensor| a.sub(b),
    f32: [-1.0, -2.5, 4.0, -3.5, 7.0, -3.0],
    t: [-1.0, -3.5, -2.5, 7.0, 4.0, -3.0],
    row: [-9.0, -22.0, -27.0, -9.5, -16.0, -31.0],
    col: [0.0, 3.0, -2.0, 1.5, -2.0, 3.0],
    scalar: [-1.0, -4.0, 1.0, -1.5, 2.0, -3.0],
    f64: [-1.0, -2.5, 4.0, -3.5, 7.0, -3.0],
    f16: [-1.0, -2.5, 4.0, -3.5, 7.0, -3.0],
    bf16: [-1.0, -2.5, 4.0, -3.5, 7.0, -3.0],
    ints: [-1, -7, 4, -4, 7, -3],
    u8: [255, 253, 2, 252, 240, 253]
);
// np.multiply(a, b): contiguous, a.T with b.T, a with row [3], col [2, 1] with a, a with 2.0
binary_spec!(
    mul,
    |a: &Tensor, b: &Tensor| a.mul(b),
    f32: [2.0, -1.0, -3.0, 2.0, -12.0, -2.0],
    t: [2.0, 2.0, -1.0, -12.0, -3.0, -2.0],
    row: [10.0, -40.0, 90.0, 5.0, 80.0, -30.0],
    col: [1.0, -2.0, 3.0, 1.0, 8.0, -2.0],
    scalar: [2.0, -4.0, 6.0, 1.0, 8.0, -2.0],
    f64: [2.0, -1.0, -3.0, 2.0, -12.0, -2.0],
    f16: [2.0, -1.0, -3.0, 2.0, -12.0, -2.0],
    bf16: [2.0, -1.0, -3.0, 2.0, -12.0, -2.0],
    ints: [2, -10, -3, 0, -12, -2],
    u8: [2, 10, 3, 0, 196, 254]
);
// np.divide(a, b): contiguous, a.T with b.T, a with row [3], col [2, 1] with a, a with 2.0
binary_spec!(
    div,
    |a: &Tensor, b: &Tensor| a.div(b),
    f32: [0.5, -4.0, -3.0, 0.125, -1.3333334, -0.5],
    t: [0.5, 0.125, -4.0, -1.3333334, -3.0, -0.5],
    row: [0.1, -0.1, 0.1, 0.05, 0.2, -0.033333335],
    col: [1.0, -0.5, 0.33333334, 4.0, 0.5, -2.0],
    scalar: [0.5, -1.0, 1.5, 0.25, 2.0, -0.5],
    f64: [0.5, -4.0, -3.0, 0.125, -1.3333333333333333, -0.5],
    f16: [0.5, -4.0, -3.0, 0.125, -1.3330078, -0.5],
    bf16: [0.5, -4.0, -3.0, 0.125, -1.3359375, -0.5],
    ints: refused
);
// np.maximum(a, b): contiguous, a.T with b.T, a with row [3], col [2, 1] with a, a with 2.0
binary_spec!(
    maximum,
    |a: &Tensor, b: &Tensor| a.maximum(b),
    f32: [2.0, 0.5, 3.0, 4.0, 4.0, 2.0],
    t: [2.0, 4.0, 0.5, 4.0, 3.0, 2.0],
    row: [10.0, 20.0, 30.0, 10.0, 20.0, 30.0],
    col: [1.0, 1.0, 3.0, 2.0, 4.0, 2.0],
    scalar: [2.0, 2.0, 3.0, 2.0, 4.0, 2.0],
    f64: [2.0, 0.5, 3.0, 4.0, 4.0, 2.0],
    f16: [2.0, 0.5, 3.0, 4.0, 4.0, 2.0],
    bf16: [2.0, 0.5, 3.0, 4.0, 4.0, 2.0],
    ints: [2, 5, 3, 4, 4, 2],
    u8: [2, 5, 3, 4, 250, 255]
);
// np.minimum(a, b): contiguous, a.T with b.T, a with row [3], col [2, 1] with a, a with 2.0
binary_spec!(
    minimum,
    |a: &Tensor, b: &Tensor| a.minimum(b),
    f32: [1.0, -2.0, -1.0, 0.5, -3.0, -1.0],
    t: [1.0, 0.5, -2.0, -3.0, -1.0, -1.0],
    row: [1.0, -2.0, 3.0, 0.5, 4.0, -1.0],
    col: [1.0, -2.0, 1.0, 0.5, 2.0, -1.0],
    scalar: [1.0, -2.0, 2.0, 0.5, 2.0, -1.0],
    f64: [1.0, -2.0, -1.0, 0.5, -3.0, -1.0],
    f16: [1.0, -2.0, -1.0, 0.5, -3.0, -1.0],
    bf16: [1.0, -2.0, -1.0, 0.5, -3.0, -1.0],
    ints: [1, -2, -1, 0, -3, -1],
    u8: [1, 2, 1, 0, 10, 2]
);
// np.power(a, b): contiguous, a.T with b.T, a with row [3], col [2, 1] with a, a with 2.0
binary_spec!(
    pow,
    |a: &Tensor, b: &Tensor| a.pow(b),
    f32: [1.0, f32::NAN, 0.33333334, 0.0625, 0.015625, 1.0],
    t: [1.0, 0.0625, f32::NAN, 0.015625, 0.33333334, 1.0],
    row: [1.0, 1.048576e+06, 2.0589114e+14, 0.0009765625, 1.0995116e+12, 1.0],
    col: [1.0, 1.0, 1.0, 1.4142135, 16.0, 0.5],
    scalar: [1.0, 4.0, 9.0, 0.25, 16.0, 1.0],
    f64: [1.0, f64::NAN, 0.3333333333333333, 0.0625, 0.015625, 1.0],
    f16: [1.0, f32::NAN, 0.33325195, 0.0625, 0.015625, 1.0],
    bf16: [1.0, f32::NAN, 0.33398438, 0.0625, 0.015625, 1.0],
    // torch.pow on int64 / uint8 (a negative exponent gives 0 unless the
    // base is 1 or -1; uint8 wraps)
    ints: [1, -32, 0, 0, 0, 1],
    u8: [1, 32, 3, 0, 0, 1]
);

// ------------------------------------------------------------ comparisons

macro_rules! compare_spec {
    ($name:ident, $op:expr, nan: $nan:expr, bcast: $bcast:expr, t: $t:expr, i64: $i64:expr) => {
        mod $name {
            use super::*;

            fn op(a: &Tensor, b: &Tensor) -> Result<Tensor> {
                let f: fn(&Tensor, &Tensor) -> Result<Tensor> = $op;
                f(a, b)
            }

            // np.<op>([1, nan, 3, -1], [1, 2, nan, 0.5]): NaN compares false (ne: true)
            test_device!(f32_with_nan_gives_bool, |dev: &Device| {
                let a = Tensor::from_slice(&[1.0f32, f32::NAN, 3.0, -1.0], &[4], dev)?;
                let b = Tensor::from_slice(&[1.0f32, 2.0, f32::NAN, 0.5], &[4], dev)?;
                let y = op(&a, &b)?;
                assert_eq!(y.dtype(), DType::Bool);
                assert_eq!(y.to_vec::<bool>()?, $nan);
                Ok(())
            });

            // np.<op>(a, [1, 2, 3])
            test_device!(broadcasts_a_row, |dev: &Device| {
                let r = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], dev)?;
                let y = op(&m23(&A, dev)?, &r)?;
                assert_eq!(y.shape(), &[2, 3]);
                assert_eq!(y.to_vec::<bool>()?, $bcast);
                Ok(())
            });

            // np.<op>(a.T, b.T)
            test_device!(transposed_inputs, |dev: &Device| {
                let y = op(&m23(&A, dev)?.t()?, &m23(&B, dev)?.t()?)?;
                assert_eq!(y.to_vec::<bool>()?, $t);
                Ok(())
            });

            test_device!(i64_inputs, |dev: &Device| {
                let y = op(
                    &m23_int(&AI, DType::I64, dev)?,
                    &m23_int(&BI, DType::I64, dev)?,
                )?;
                assert_eq!(y.to_vec::<bool>()?, $i64);
                Ok(())
            });

            test_device!(
                promotes_mixed_dtypes_and_refuses_bad_shapes_unchanged,
                |dev: &Device| {
                    let a = m23(&A, dev)?;
                    let snap = snapshot(&a);
                    // float32 with int64 compares in float32 (NOTE [Type
                    // promotion]): AI as floats against BI as integers
                    let af = m23(&AI.map(|v| v as f32), dev)?;
                    let y = op(&af, &m23_int(&BI, DType::I64, dev)?)?;
                    assert_eq!(y.to_vec::<bool>()?, $i64);
                    refused!(
                        op(&a, &Tensor::zeros(&[2], DType::F32, dev)?),
                        "cannot be broadcast"
                    );
                    assert_eq!(snapshot(&a), snap);
                    Ok(())
                }
            );
        }
    };
}

compare_spec!(eq, |a: &Tensor, b: &Tensor| a.eq(b),
    nan: [true, false, false, false],
    bcast: [true, false, true, false, false, false],
    t: [false, false, false, false, false, false],
    i64: [false, false, false, false, false, false]);
compare_spec!(ne, |a: &Tensor, b: &Tensor| a.ne(b),
    nan: [false, true, true, true],
    bcast: [false, true, false, true, true, true],
    t: [true, true, true, true, true, true],
    i64: [true, true, true, true, true, true]);
compare_spec!(lt, |a: &Tensor, b: &Tensor| a.lt(b),
    nan: [false, false, false, true],
    bcast: [false, true, false, true, false, true],
    t: [true, true, true, false, false, true],
    i64: [true, true, false, true, false, true]);
compare_spec!(le, |a: &Tensor, b: &Tensor| a.le(b),
    nan: [true, false, false, true],
    bcast: [true, true, true, true, false, true],
    t: [true, true, true, false, false, true],
    i64: [true, true, false, true, false, true]);
compare_spec!(gt, |a: &Tensor, b: &Tensor| a.gt(b),
    nan: [false, false, false, false],
    bcast: [false, false, false, false, true, false],
    t: [false, false, false, true, true, false],
    i64: [false, false, true, false, true, false]);
compare_spec!(ge, |a: &Tensor, b: &Tensor| a.ge(b),
    nan: [true, false, false, false],
    bcast: [true, false, true, false, true, false],
    t: [false, false, false, true, true, false],
    i64: [false, false, true, false, true, false]);

// ------------------------------------------------------------- where_cond

test_device!(where_cond_picks_elementwise, |dev: &Device| {
    let (a, b) = (m23(&A, dev)?, m23(&B, dev)?);
    let zero = Tensor::scalar(0.0f32, dev)?;
    // np.where(a > 0, a, b)
    let y = a.gt(&zero)?.where_cond(&a, &b)?;
    assert_eq!(y.to_vec::<f32>()?, [1.0, 0.5, 3.0, 0.5, 4.0, 2.0]);
    // np.where(a > 0, a, 0): a rank-0 branch broadcasts
    let y = a.gt(&zero)?.where_cond(&a, &zero)?;
    assert_eq!(y.to_vec::<f32>()?, [1.0, 0.0, 3.0, 0.5, 4.0, 0.0]);
    Ok(())
});

test_device!(where_cond_broadcasts_all_three, |dev: &Device| {
    // np.where([[True], [False]], row, -row)
    let cond = Tensor::from_slice(&[true, false], &[2, 1], dev)?;
    let row = Tensor::from_slice(&ROW, &[3], dev)?;
    let y = cond.where_cond(&row, &row.neg()?)?;
    assert_eq!(y.shape(), &[2, 3]);
    assert_eq!(y.to_vec::<f32>()?, [10., 20., 30., -10., -20., -30.]);
    Ok(())
});

test_device!(where_cond_on_transposed_inputs, |dev: &Device| {
    let (a, b) = (m23(&A, dev)?.t()?, m23(&B, dev)?.t()?);
    // np.where(a.T > 0, a.T, b.T)
    let y = a.gt(&Tensor::scalar(0.0f32, dev)?)?.where_cond(&a, &b)?;
    assert_eq!(y.to_vec::<f32>()?, [1.0, 0.5, 0.5, 4.0, 3.0, 2.0]);
    // integer branches
    let (ai, bi) = (
        m23_int(&AI, DType::I64, dev)?,
        m23_int(&BI, DType::I64, dev)?,
    );
    let y = ai.gt(&bi)?.where_cond(&ai, &bi)?;
    // np.maximum(ai, bi)
    assert_eq!(y.to_vec::<i64>()?, [2, 5, 3, 4, 4, 2]);
    Ok(())
});

test_device!(where_cond_refuses_bad_inputs_unchanged, |dev: &Device| {
    let (a, b) = (m23(&A, dev)?, m23(&B, dev)?);
    let (sa, sb) = (snapshot(&a), snapshot(&b));
    // a float condition
    let e = refused!(a.where_cond(&a, &b), "where", "Bool");
    assert!(matches!(e, Error::DTypeMismatch { .. }));
    let cond = a.gt(&b)?;
    // branches of different dtypes promote (torch.where): f32 with f64
    let y = cond.where_cond(&a, &m23_as(&B, DType::F64, dev)?)?;
    assert_eq!(y.dtype(), DType::F64);
    assert_eq!(y.to_vec::<f64>()?, [2.0, 0.5, 3.0, 4.0, 4.0, 2.0]);
    refused!(
        cond.where_cond(&a, &Tensor::zeros(&[2], DType::F32, dev)?),
        "cannot be broadcast"
    );
    assert_eq!((snapshot(&a), snapshot(&b)), (sa, sb));
    Ok(())
});

// ---------------------------------------------------------- NaN handling

test_device!(
    maximum_and_minimum_propagate_nan_from_either_side,
    |dev: &Device| {
        let a = Tensor::from_slice(&[f32::NAN, 1.0, 2.0], &[3], dev)?;
        let b = Tensor::from_slice(&[0.0f32, f32::NAN, 3.0], &[3], dev)?;
        // np.maximum([nan, 1, 2], [0, nan, 3]) = [nan, nan, 3]
        close(
            &a.maximum(&b)?.to_vec::<f32>()?,
            &[f32::NAN, f32::NAN, 3.0],
            0.0,
        );
        // np.minimum(...) = [nan, nan, 2]
        close(
            &a.minimum(&b)?.to_vec::<f32>()?,
            &[f32::NAN, f32::NAN, 2.0],
            0.0,
        );
        Ok(())
    }
);

test_device!(relu_and_clamp_keep_nan, |dev: &Device| {
    let x = Tensor::from_slice(&[f32::NAN, -1.0, 5.0], &[3], dev)?;
    // torch.relu(nan) = nan; torch.clamp(nan, 0, 1) = nan
    close(&x.relu()?.to_vec::<f32>()?, &[f32::NAN, 0.0, 5.0], 0.0);
    close(
        &x.clamp(Some(0.0), Some(1.0))?.to_vec::<f32>()?,
        &[f32::NAN, 0.0, 1.0],
        0.0,
    );
    Ok(())
});

test_device!(arithmetic_propagates_nan_and_inf, |dev: &Device| {
    let a = Tensor::from_slice(&[f32::NAN, f32::INFINITY, 1.0], &[3], dev)?;
    let b = Tensor::from_slice(&[1.0f32, f32::INFINITY, 0.0], &[3], dev)?;
    // [nan + 1, inf - inf, 1 / 0] = [nan, nan, inf]
    close(
        &a.add(&b)?.to_vec::<f32>()?,
        &[f32::NAN, f32::INFINITY, 1.0],
        0.0,
    );
    close(
        &a.sub(&b)?.to_vec::<f32>()?,
        &[f32::NAN, f32::NAN, 1.0],
        0.0,
    );
    close(
        &a.div(&b)?.to_vec::<f32>()?,
        &[f32::NAN, f32::NAN, f32::INFINITY],
        0.0,
    );
    Ok(())
});

test_device!(sigmoid_tanh_exp_at_extreme_inputs, |dev: &Device| {
    let x = Tensor::from_slice(&[-100.0f32, 100.0], &[2], dev)?;
    // 1 / (1 + np.exp(100)) = 3.72e-44 (a subnormal f32)
    close(&x.sigmoid()?.to_vec::<f32>()?, &[3.72e-44, 1.0], 1e-6);
    // np.tanh(+-100) = +-1; np.exp(np.float32(100)) = inf
    assert_eq!(x.tanh()?.to_vec::<f32>()?, [-1.0, 1.0]);
    assert_eq!(x.exp()?.to_vec::<f32>()?[1], f32::INFINITY);
    Ok(())
});

// ------------------------------------------------------- scalars, clamps

test_device!(add_scalar_and_mul_scalar, |dev: &Device| {
    let a = m23(&A, dev)?;
    // a + 10, a * -2
    assert_eq!(
        a.add_scalar(10.0)?.to_vec::<f32>()?,
        [11., 8., 13., 10.5, 14., 9.]
    );
    assert_eq!(
        a.mul_scalar(-2.0)?.to_vec::<f32>()?,
        [-2., 4., -6., -1., -8., 2.]
    );
    let ai = m23_int(&AI, DType::I64, dev)?;
    assert_eq!(ai.add_scalar(10)?.to_vec::<i64>()?, [11, 8, 13, 10, 14, 9]);
    assert_eq!(ai.mul_scalar(3)?.to_vec::<i64>()?, [3, -6, 9, 0, 12, -3]);
    // a float number promotes the integers to float32, as in PyTorch
    assert_eq!(
        ai.add_scalar(0.5)?.to_vec::<f32>()?,
        [1.5, -1.5, 3.5, 0.5, 4.5, -0.5]
    );
    assert_eq!(
        ai.mul_scalar(2.0)?.to_vec::<f32>()?,
        [2., -4., 6., 0., 8., -2.]
    );
    // on a transpose: (a.T + 10).flatten()
    assert_eq!(
        a.t()?.add_scalar(10.0)?.to_vec::<f32>()?,
        [11., 10.5, 8., 14., 13., 9.]
    );
    Ok(())
});

test_device!(
    scalar_ops_on_bool_promote_and_refuse_subtraction,
    |dev: &Device| {
        let b = Tensor::from_slice(&[true, false], &[2], dev)?;
        let snap = snapshot(&b);
        // torch: True + 1 is int64, True * 2.0 float32, True + True bool
        assert_eq!(b.add_scalar(1)?.to_vec::<i64>()?, [2, 1]);
        assert_eq!(b.mul_scalar(2.0)?.to_vec::<f32>()?, [2.0, 0.0]);
        assert_eq!(b.add(&b)?.to_vec::<bool>()?, [true, false]);
        // and refuses `-` with a bool operand
        refused!(b.sub_scalar(1), "Bool");
        refused!(b.rsub(1), "Bool");
        assert_eq!(snapshot(&b), snap);
        Ok(())
    }
);

test_device!(clamp_with_one_open_side, |dev: &Device| {
    let x = m23(&X, dev)?;
    // np.clip(x, None, 0.5) and np.clip(x, 0, None)
    assert_eq!(
        x.clamp(None, Some(0.5))?.to_vec::<f32>()?,
        [-2., -0.5, 0., 0.5, 0.5, 0.5]
    );
    assert_eq!(
        x.clamp(Some(0.0), None)?.to_vec::<f32>()?,
        [0., 0., 0., 0.5, 1., 3.]
    );
    assert_eq!(x.clamp(None, None)?.to_vec::<f32>()?, X);
    Ok(())
});

test_device!(
    clamp_refuses_inverted_or_nan_bounds_unchanged,
    |dev: &Device| {
        let x = m23(&X, dev)?;
        let snap = snapshot(&x);
        refused!(
            x.clamp(Some(2.0), Some(1.0)),
            "clamp",
            "min must not exceed max"
        );
        refused!(x.clamp(Some(f64::NAN), None), "clamp", "NaN");
        assert_eq!(snapshot(&x), snap);
        Ok(())
    }
);

// ------------------------------------------------------------- operators

test_device!(operator_overloads_match_the_methods, |dev: &Device| {
    let (a, b) = (m23(&A, dev)?, m23(&B, dev)?);
    // a + b, a - b, a * b, a / b (numpy)
    assert_eq!((&a + &b)?.to_vec::<f32>()?, [3.0, -1.5, 2.0, 4.5, 1.0, 1.0]);
    assert_eq!(
        (&a - &b)?.to_vec::<f32>()?,
        [-1.0, -2.5, 4.0, -3.5, 7.0, -3.0]
    );
    assert_eq!(
        (&a * &b)?.to_vec::<f32>()?,
        [2.0, -1.0, -3.0, 2.0, -12.0, -2.0]
    );
    close(
        &(&a / &b)?.to_vec::<f32>()?,
        &[0.5, -4.0, -3.0, 0.125, -1.3333334, -0.5],
        1e-6,
    );
    // owned operands
    assert_eq!(
        (a.clone() + b.clone())?.to_vec::<f32>()?,
        [3.0, -1.5, 2.0, 4.5, 1.0, 1.0]
    );
    // with an f64 scalar: a * 2, a + 10, a - 1, a / 2
    assert_eq!(
        (&a * 2.0)?.to_vec::<f32>()?,
        [2.0, -4.0, 6.0, 1.0, 8.0, -2.0]
    );
    assert_eq!((&a + 10.0)?.to_vec::<f32>()?, [11., 8., 13., 10.5, 14., 9.]);
    assert_eq!((&a - 1.0)?.to_vec::<f32>()?, [0., -3., 2., -0.5, 3., -2.]);
    assert_eq!(
        (&a / 2.0)?.to_vec::<f32>()?,
        [0.5, -1.0, 1.5, 0.25, 2.0, -0.5]
    );
    // -a
    assert_eq!((-&a)?.to_vec::<f32>()?, [-1.0, 2.0, -3.0, -0.5, -4.0, 1.0]);
    Ok(())
});

test_device!(operator_overloads_return_errors, |dev: &Device| {
    let a = m23(&A, dev)?;
    let snap = snapshot(&a);
    let e = (&a + &Tensor::zeros(&[4], DType::F32, dev)?).expect_err("shapes [2,3] and [4]");
    assert!(matches!(e, Error::BroadcastMismatch { .. }));
    // integer / float number is true division in float32, as in PyTorch
    let ai = m23_int(&AI, DType::I64, dev)?;
    assert_eq!(
        (&ai / 2.0)?.to_vec::<f32>()?,
        [0.5, -1.0, 1.5, 0.0, 2.0, -0.5]
    );
    // `-` with a bool operand is refused, as in PyTorch
    let m = Tensor::from_slice(&[true, false], &[2], dev)?;
    let e = (&m - 1.0).expect_err("bool - 1.0");
    assert!(matches!(
        e,
        Error::UnsupportedDType {
            dtype: DType::Bool,
            ..
        }
    ));
    assert_eq!(snapshot(&a), snap);
    Ok(())
});

test_device!(sign_of_zeros_nan_and_infinities, |dev: &Device| {
    let x = Tensor::from_slice(
        &[
            -2.0f32,
            -0.0,
            0.0,
            3.0,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ],
        &[7],
        dev,
    )?;
    // torch.sign: -1, -0., 0., 1, nan, 1, -1 (zeros keep their sign bit)
    let got = x.sign()?.to_vec::<f32>()?;
    close(&got, &[-1.0, -0.0, 0.0, 1.0, f32::NAN, 1.0, -1.0], 0.0);
    assert!(got[1].is_sign_negative() && got[2].is_sign_positive());
    Ok(())
});

test_device!(
    relu_gradient_is_one_only_where_the_input_is_positive,
    |dev: &Device| {
        // Random signs over more than one parallel chunk, and the edge values:
        // torch gives relu'(0) = relu'(-0.) = 0 and relu'(nan) = 0.
        let mut data: Vec<f32> = (0..70_000)
            .map(|i| ((i * 7919) % 201) as f32 - 100.0)
            .collect();
        data[..4].copy_from_slice(&[0.0, -0.0, f32::NAN, f32::INFINITY]);
        let x = Tensor::from_slice(&data, &[data.len()], dev)?.requires_grad_(true)?;
        x.relu()?.sum_all()?.backward()?;
        let g = x.grad().expect("a gradient").to_vec::<f32>()?;
        let want: Vec<f32> = data
            .iter()
            .map(|&v| if v > 0.0 { 1.0 } else { 0.0 })
            .collect();
        assert_eq!(g, want);
        Ok(())
    }
);
