//! The float element types the threaded kernels specialise (f32, f64). Ops
//! without a specialised loop run the op table's scalar functions (libm),
//! so results match the reference backend.

use super::vmath::{LN2_HI, LN2_LO, LOG2E, MAGIC, madd, pow2i, round_k};
use core::ops::{Add, Div, Mul, Neg, Sub};

/// f32 or f64.
pub(super) trait Fl:
    kael_core::dtype::Float
    + bytemuck::Pod
    + Send
    + Sync
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
{
    /// `|x|` with a positive zero for `-0.0` (the reference's `abs` keeps
    /// the zero's sign).
    fn fabs(self) -> Self;
}

impl Fl for f32 {
    #[inline(always)]
    fn fabs(self) -> Self {
        self.abs()
    }
}

impl Fl for f64 {
    #[inline(always)]
    fn fabs(self) -> Self {
        self.abs()
    }
}

/// `max(a, b)`, NaN propagating (branch-free enough to vectorise).
#[inline(always)]
pub(super) fn maximum<T: Fl>(a: T, b: T) -> T {
    if a > b || a.is_nan() { a } else { b }
}

/// `min(a, b)`, NaN propagating.
#[inline(always)]
pub(super) fn minimum<T: Fl>(a: T, b: T) -> T {
    if a < b || a.is_nan() { a } else { b }
}

/// `e^x` for f32 without a libm call, so row loops vectorise: Cephes'
/// range reduction and degree-6 polynomial, with `2^k` built in the
/// exponent bits. Relative error under 2 ulp on `[-87, 88]`; inputs below
/// -87 (where the result would be subnormal) give exactly 0, so
/// `exp(-inf) == 0`; NaN stays NaN. `FMA` fuses each multiply-add (see
/// `vmath::madd`); Rust never contracts `a * b + c` by itself, and the
/// polynomial is a chain of them.
#[inline(always)]
pub(super) fn exp_fast<const FMA: bool>(x: f32) -> f32 {
    let x_in = x;
    let x = x.clamp(-87.0, 88.0);
    let (k, kf) = round_k(madd::<FMA>(x, LOG2E, MAGIC));
    let r = madd::<FMA>(-kf, LN2_HI, x);
    let r = madd::<FMA>(-kf, LN2_LO, r);
    let p = 1.987_569_1e-4_f32;
    let p = madd::<FMA>(p, r, 1.398_199_9e-3);
    let p = madd::<FMA>(p, r, 8.333_452e-3);
    let p = madd::<FMA>(p, r, 4.166_579_6e-2);
    let p = madd::<FMA>(p, r, 1.666_666_5e-1);
    let p = madd::<FMA>(p, r, 0.5);
    let y = madd::<FMA>(p * r, r, r) + 1.0;
    if x_in < -87.0 { 0.0 } else { y * pow2i(k) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_fast_matches_libm_within_2_ulp_fused_or_not() {
        let mut x = -87.0f32;
        while x < 88.0 {
            let want = libm::expf(x);
            for got in [exp_fast::<false>(x), exp_fast::<true>(x)] {
                assert!(
                    ((got - want) / want).abs() < 2.5e-7,
                    "x={x}: {got} vs {want}"
                );
            }
            x += 0.0137;
        }
    }

    #[test]
    fn exp_fast_keeps_nan() {
        assert!(exp_fast::<false>(f32::NAN).is_nan());
        assert!(exp_fast::<true>(f32::NAN).is_nan());
    }

    #[test]
    fn exp_fast_of_minus_infinity_is_zero() {
        assert_eq!(exp_fast::<false>(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_fast::<true>(-100.0), 0.0);
    }

    #[test]
    fn maximum_propagates_nan_from_either_side() {
        assert!(maximum(f32::NAN, 1.0).is_nan() && maximum(1.0, f32::NAN).is_nan());
        assert!(minimum(f64::NAN, 1.0).is_nan() && minimum(1.0, f64::NAN).is_nan());
        assert_eq!(maximum(1.0f32, 2.0), 2.0);
    }
}
