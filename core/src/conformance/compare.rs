//! Tolerances, and the element-by-element comparison of a device's result
//! with the reference's.
//!
//! An element passes when `|got - want| <= tol * (1 + |want|)` (a relative
//! bound with an absolute floor of `tol`), or both are NaN, or both are the
//! same infinity. `tol` is [`tolerance`]: a few units in the last place of
//! the dtype, times the number `k` of terms accumulated into one result
//! (matmul's inner size, a reduction's element count): a backend may sum in
//! another order (blocked, tree-shaped, in parallel), and those rounding
//! errors grow with `k`. For f16 and bf16 the factor is `sqrt(k)`: both
//! sides accumulate them in f32, so the final rounding to the half type
//! dominates. Integers and bools compare exactly.

use crate::device::Device;
use crate::dtype::DType;
use crate::error::Result;
use crate::tensor::Tensor;
use alloc::string::String;
use alloc::vec::Vec;

/// The tolerance for results of `dtype` built from `k` accumulated terms.
pub(crate) fn tolerance(dtype: DType, k: usize) -> f64 {
    let base = match dtype {
        // about 45 ulps: room for libm-versus-vendor transcendental
        // functions and fused multiply-adds
        DType::F32 => 1e-5,
        DType::F64 => 1e-12,
        // two ulps (the reference rounds once from f32; a device may round twice)
        DType::F16 => 2e-3,
        DType::BF16 => 1.6e-2,
        DType::I64 | DType::I32 | DType::I16 | DType::I8 | DType::U8 | DType::Bool => {
            return 0.0;
        }
    };
    let k = k.max(1) as f64;
    if matches!(dtype, DType::F16 | DType::BF16) {
        base * libm::sqrt(k)
    } else {
        base * k
    }
}

/// A result's values in logical order, as f64, read back on the reference CPU.
pub(crate) fn values(t: &Tensor) -> Result<Vec<f64>> {
    crate::autograd::no_grad(|| {
        t.to_device(&Device::cpu())?
            .to_dtype(DType::F64)?
            .to_vec::<f64>()
    })
}

/// How a device's result differs from the reference's.
pub(crate) struct Mismatch {
    /// Largest absolute difference (NaN when not comparable).
    pub max_abs_err: f64,
    /// The first offending element, or the shape/dtype difference.
    pub detail: String,
}

/// Compares `what` (`"output 0"`) of a check: `None` when within tolerance.
pub(crate) fn compare(what: &str, got: &Tensor, want: &Tensor, k: usize) -> Option<Mismatch> {
    let out = |detail: String| {
        Some(Mismatch {
            max_abs_err: f64::NAN,
            detail,
        })
    };
    if got.shape() != want.shape() || got.dtype() != want.dtype() {
        return out(alloc::format!(
            "{what}: {:?} {:?}, want {:?} {:?}",
            got.dtype(),
            got.shape(),
            want.dtype(),
            want.shape()
        ));
    }
    let g = match values(got) {
        Ok(v) => v,
        Err(e) => {
            return out(alloc::format!("{what}: reading it back failed: {e}"));
        }
    };
    let w = match values(want) {
        Ok(v) => v,
        Err(e) => {
            return out(alloc::format!("{what}: reading the reference failed: {e}"));
        }
    };
    let tol = tolerance(want.dtype(), k);
    let mut max_err = 0.0f64;
    let mut first_bad: Option<usize> = None;
    for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
        let same = a == b || (a.is_nan() && b.is_nan());
        let err = if same { 0.0 } else { (a - b).abs() };
        // NaN (one side only) and mismatched infinities count as infinite error
        let err = if err.is_nan() { f64::INFINITY } else { err };
        max_err = max_err.max(err);
        // false when `want` is NaN and `got` is not (the bound is NaN)
        let within = err <= tol * (1.0 + b.abs());
        if !same && !within && first_bad.is_none() {
            first_bad = Some(i);
        }
    }
    first_bad.map(|i| Mismatch {
        max_abs_err: max_err,
        detail: alloc::format!(
            "{what}, element {i} (of {}): got {}, want {} (tol {tol:.1e})",
            w.len(),
            g[i],
            w[i]
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Element;

    fn t<T: Element>(v: &[T]) -> Tensor {
        Tensor::from_slice(v, &[v.len()], &Device::cpu()).unwrap()
    }

    #[test]
    fn equal_nans_and_equal_infinities_pass() {
        let a = t(&[f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1.0]);
        assert!(compare("output 0", &a, &a.deep_clone().unwrap(), 1).is_none());
    }

    #[test]
    fn a_nan_where_the_reference_has_a_number_fails_with_infinite_error() {
        let m = compare("output 0", &t(&[1.0f32, f32::NAN]), &t(&[1.0f32, 2.0]), 1).unwrap();
        assert_eq!(m.max_abs_err, f64::INFINITY);
        assert!(m.detail.starts_with("output 0, element 1"), "{}", m.detail);
        // and the other way round: the bound is NaN, which must not pass
        assert!(compare("output 0", &t(&[2.0f32]), &t(&[f32::NAN]), 1).is_some());
    }

    #[test]
    fn f32_passes_within_its_tolerance_times_k_and_fails_beyond() {
        // want 3: bound = 1e-5 * k * (1 + 3)
        let want = t(&[3.0f64]);
        let within = t(&[3.0 + 3.9e-5]);
        let beyond = t(&[3.0 + 4.1e-5]);
        let (w32, in32, b32) = (
            want.to_dtype(DType::F32).unwrap(),
            within.to_dtype(DType::F32).unwrap(),
            beyond.to_dtype(DType::F32).unwrap(),
        );
        assert!(compare("o", &in32, &w32, 1).is_none());
        assert!(compare("o", &b32, &w32, 1).is_some());
        assert!(compare("o", &b32, &w32, 2).is_none());
    }

    #[test]
    fn integers_and_bools_compare_exactly() {
        assert!(compare("o", &t(&[5i64, 7]), &t(&[5i64, 8]), 1000).is_some());
        assert!(compare("o", &t(&[true]), &t(&[false]), 1).is_some());
        assert!(compare("o", &t(&[5i32]), &t(&[5i32]), 1).is_none());
    }

    #[test]
    fn another_shape_or_dtype_is_a_mismatch() {
        let m = compare("output 2", &t(&[1.0f32, 2.0]), &t(&[1.0f32]), 1).unwrap();
        assert!(m.max_abs_err.is_nan());
        assert!(m.detail.starts_with("output 2: F32 [2]"), "{}", m.detail);
        assert!(compare("o", &t(&[1.0f64]), &t(&[1.0f32]), 1).is_some());
    }
}
