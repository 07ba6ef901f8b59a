//! Scalar helpers of the op table's rows (NOTE [Op table]): the functions
//! several rows or dtype classes share, and the parameter checks of the
//! parametrised ops.

use crate::dtype::Scalar;
use crate::error::{Error, Result};

pub(super) fn sigmoid32(x: f32) -> f32 {
    if x >= 0.0 {
        1.0 / (1.0 + libm::expf(-x))
    } else {
        let e = libm::expf(x);
        e / (1.0 + e)
    }
}

pub(super) fn sigmoid64(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + libm::exp(-x))
    } else {
        let e = libm::exp(x);
        e / (1.0 + e)
    }
}

pub(super) fn gelu32(x: f32) -> f32 {
    0.5 * x * (1.0 + libm::erff(x * core::f32::consts::FRAC_1_SQRT_2))
}

pub(super) fn gelu64(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::erf(x * core::f64::consts::FRAC_1_SQRT_2))
}

pub(super) const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
pub(super) const FRAC_1_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

pub(super) fn gelu_tanh32(x: f32) -> f32 {
    0.5 * x * (1.0 + libm::tanhf(SQRT_2_OVER_PI as f32 * (x + 0.044715 * x * x * x)))
}

pub(super) fn gelu_tanh64(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
}

/// `g · d/dx gelu_tanh(x)`, PyTorch's `gelu_backward(approximate='tanh')`
/// formula: `0.5(1 + t) + 0.5·x·(1 - t²)·c(1 + 3a·x²)`, `t = tanh(c(x + a·x³))`.
pub(super) fn gelu_tanh_backward32(g: f32, x: f32) -> f32 {
    let c = SQRT_2_OVER_PI as f32;
    let t = libm::tanhf(c * (x + 0.044715 * x * x * x));
    let right = 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
    g * (0.5 * (1.0 + t) + right)
}

/// [`gelu_tanh_backward32`] in f64.
pub(super) fn gelu_tanh_backward64(g: f64, x: f64) -> f64 {
    let c = SQRT_2_OVER_PI;
    let t = libm::tanh(c * (x + 0.044715 * x * x * x));
    let right = 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
    g * (0.5 * (1.0 + t) + right)
}

pub(super) fn clamp<T: Scalar>(x: T, lo: Option<f64>, hi: Option<f64>) -> T {
    if x.is_nan() {
        return x;
    }
    let mut y = x;
    if let Some(l) = lo {
        let l = T::from_f64(l);
        if y < l {
            y = l;
        }
    }
    if let Some(h) = hi {
        let h = T::from_f64(h);
        if y > h {
            y = h;
        }
    }
    y
}

pub(super) fn sign<T: Scalar>(x: T) -> T {
    if x > T::ZERO {
        T::ONE
    } else if x < T::ZERO {
        T::ONE.neg()
    } else {
        x
    }
}

pub(super) fn step<T: Scalar>(x: T) -> T {
    if x > T::ZERO { T::ONE } else { T::ZERO }
}

/// `min <= max` and neither NaN, for `clamp`-like ops.
pub(crate) fn check_bounds(op: &'static str, min: Option<f64>, max: Option<f64>) -> Result<()> {
    if let (Some(lo), Some(hi)) = (min, max) {
        if lo > hi {
            return Err(Error::InvalidArgument {
                op,
                reason: "min must not exceed max",
            });
        }
    }
    if min.is_some_and(f64::is_nan) || max.is_some_and(f64::is_nan) {
        return Err(Error::InvalidArgument {
            op,
            reason: "bounds must not be NaN",
        });
    }
    Ok(())
}

/// A parameter that must be a finite number.
pub(super) fn check_finite(op: &'static str, v: f64) -> Result<()> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(Error::InvalidArgument {
            op,
            reason: "the parameter must be a finite number",
        })
    }
}

/// Softplus's `beta` (finite, not 0) and `threshold` (not NaN).
pub(super) fn check_softplus(beta: f64, threshold: f64) -> Result<()> {
    if !beta.is_finite() || beta == 0.0 || threshold.is_nan() {
        return Err(Error::InvalidArgument {
            op: "softplus",
            reason: "beta must be finite and non-zero and threshold not NaN (PyTorch's defaults: beta 1, threshold 20)",
        });
    }
    Ok(())
}
