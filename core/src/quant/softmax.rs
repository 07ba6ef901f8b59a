//! int8 softmax, TFLite's reference integer kernel: gemmlowp's fixed-point
//! `exp` on the differences from each row's maximum, a fixed-point
//! reciprocal of their sum, and an output at scale 1/256, zero point -128.
//!
//! NOTE [Fixed-point softmax]
//! Every value is an `i32` raw fixed-point number with a stated number of
//! integer bits (gemmlowp's `FixedPoint<int32, N>`: `raw / 2^(31 - N)`).
//! The functions below are gemmlowp's (`exp_on_negative_values`,
//! `one_over_one_plus_x_for_x_in_0_1`, `Rescale`) and TFLite's
//! (`GetReciprocal`, `PreprocessSoftmaxScaling`, `CalculateInputRadius`)
//! step for step, constants included, so that outputs equal TFLite's bit for
//! bit; names follow theirs.

use super::fixed_point::{
    Multiplier, rounding_divide_by_pot, saturating_rounding_doubling_high_mul as mul,
};
use super::params::{Q_MAX, Q_MIN, QuantParams};
use crate::error::{Error, Result};

/// Integer bits of the scaled input differences.
const DIFF_BITS: i32 = 5;
/// Integer bits of the sum of exponentials.
const ACC_BITS: i32 = 12;

/// `x * 2^e` with saturation for `e > 0`, rounding for `e < 0`
/// (gemmlowp's `SaturatingRoundingMultiplyByPOT`).
fn mul_pot(x: i32, e: i32) -> i32 {
    if e > 0 {
        let threshold = (1i32 << (31 - e)) - 1;
        if x > threshold {
            i32::MAX
        } else if x < -threshold {
            i32::MIN
        } else {
            x << e
        }
    } else {
        rounding_divide_by_pot(x, -e)
    }
}

/// gemmlowp's `Rescale`: from `src` integer bits to `dst`.
fn rescale(x: i32, src: i32, dst: i32) -> i32 {
    mul_pot(x, src - dst)
}

/// `exp(a)` for `a` in `[-1/4, 0)`, 0 integer bits in and out.
fn exp_on_interval_between_negative_one_quarter_and_0_excl(a: i32) -> i32 {
    const CONSTANT_TERM: i32 = 1_895_147_668; // exp(-1/8)
    const ONE_THIRD: i32 = 715_827_883;
    let x = a.wrapping_add(1 << 28); // a + 1/8
    let x2 = mul(x, x);
    let x3 = mul(x2, x);
    let x4 = mul(x2, x2);
    let x4_over_4 = mul_pot(x4, -2);
    let poly = mul_pot(
        mul(x4_over_4.wrapping_add(x3), ONE_THIRD).wrapping_add(x2),
        -1,
    );
    CONSTANT_TERM.wrapping_add(mul(CONSTANT_TERM, x.wrapping_add(poly)))
}

/// gemmlowp's `exp_on_negative_values` for an input with [`DIFF_BITS`]
/// integer bits; the result has 0 integer bits.
fn exp_on_negative_values(a: i32) -> i32 {
    const FRAC: i32 = 31 - DIFF_BITS;
    let one_quarter = 1i32 << (FRAC - 2);
    let mask = one_quarter - 1;
    let a_mod_quarter_minus_one_quarter = (a & mask) - one_quarter;
    let mut result = exp_on_interval_between_negative_one_quarter_and_0_excl(rescale(
        a_mod_quarter_minus_one_quarter,
        DIFF_BITS,
        0,
    ));
    let remainder = a_mod_quarter_minus_one_quarter.wrapping_sub(a);
    // exp(-2^e) for e = -2..=4, as Q0.31 (gemmlowp's barrel shifter).
    const BARREL: [(i32, i32); 7] = [
        (-2, 1_672_461_947),
        (-1, 1_302_514_674),
        (0, 790_015_084),
        (1, 290_630_308),
        (2, 39_332_535),
        (3, 720_401),
        (4, 242),
    ];
    for (e, m) in BARREL {
        if DIFF_BITS > e && remainder & (1 << (FRAC + e)) != 0 {
            result = mul(result, m);
        }
    }
    if a == 0 { i32::MAX } else { result }
}

/// gemmlowp's `one_over_one_plus_x_for_x_in_0_1`: `1 / (1 + a)` by three
/// Newton-Raphson steps, 0 integer bits in and out.
fn one_over_one_plus_x_for_x_in_0_1(a: i32) -> i32 {
    // RoundingHalfSum(a, One)
    let sum = a as i64 + i32::MAX as i64;
    let half_denominator = ((sum + if sum >= 0 { 1 } else { -1 }) / 2) as i32;
    const C48_17: i32 = 1_515_870_810; // 48/17, 2 integer bits
    const CNEG32_17: i32 = -1_010_580_540; // -32/17, 2 integer bits
    let mut x = C48_17.wrapping_add(mul(half_denominator, CNEG32_17));
    const ONE_F2: i32 = 1 << 29;
    for _ in 0..3 {
        let half_denominator_times_x = mul(half_denominator, x);
        let one_minus = ONE_F2.wrapping_sub(half_denominator_times_x);
        x = x.wrapping_add(rescale(mul(x, one_minus), 4, 2));
    }
    // ExactMulByPot<-1> keeps the raw value with 1 integer bit.
    rescale(x, 1, 0)
}

/// TFLite's `GetReciprocal`: `1 / x` for `x` with `integer_bits`, as a Q0.31
/// mantissa and the number of bits above one it dropped.
fn reciprocal(x: i32, integer_bits: i32) -> (i32, i32) {
    let headroom_plus_one = (x as u32).leading_zeros() as i32;
    let bits_over_unit = integer_bits - headroom_plus_one;
    let shifted_sum_minus_one =
        ((x as u32).wrapping_shl(headroom_plus_one as u32)).wrapping_sub(1u32 << 31) as i32;
    (
        one_over_one_plus_x_for_x_in_0_1(shifted_sum_minus_one),
        bits_over_unit,
    )
}

/// An int8 softmax over the last dimension (`depth` values per row), as
/// TFLite's reference kernel computes it; the output is quantized at scale
/// 1/256 with zero point -128.
///
/// ```
/// use kael_core::quant::{QuantParams, Softmax};
/// let sm = Softmax::new(1.0, &QuantParams::per_tensor(0.1, 0)?, 2)?;
/// let mut out = [0i8; 2];
/// sm.run(&[0, 0], &mut out)?;
/// assert_eq!(out, [0, 0]); // 0.5 each: 128 / 256 - 128 = 0
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Softmax {
    /// `beta * input_scale` as a multiplier above one.
    pub input_multiplier: Multiplier,
    /// Differences below this are treated as `exp = 0`.
    pub diff_min: i32,
    /// Values per row.
    pub depth: usize,
}

impl Softmax {
    /// The softmax of rows of `depth` int8 values quantized as `input`,
    /// with TFLite's `beta` (TFLite's `Prepare`: `PreprocessSoftmaxScaling`
    /// with 5 integer bits and `CalculateInputRadius`).
    pub fn new(beta: f32, input: &QuantParams, depth: usize) -> Result<Softmax> {
        const OP: &str = "quant::softmax";
        if !(beta.is_finite() && beta > 0.0) || depth == 0 {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: "softmax needs a finite beta above 0 and rows of at least one value",
            });
        }
        let max_real = ((1u64 << 31) - 1) as f64;
        let real =
            (beta as f64 * input.scale(0) as f64 * (1u64 << (31 - DIFF_BITS)) as f64).min(max_real);
        let input_multiplier = Multiplier::from_real(real);
        if input_multiplier.shift < 0 {
            return Err(Error::InvalidQuantization {
                op: OP,
                reason: "beta * input scale is too small for int8 softmax (below 2^-27); widen the input's range",
                value: input.scale(0) as f64,
                channel: 0,
            });
        }
        // CalculateInputRadius(5, shift): floor((2^5 - 1) * 2^26 / 2^shift).
        let radius = libm::floor(
            ((1i64 << DIFF_BITS) - 1) as f64 * (1i64 << (31 - DIFF_BITS)) as f64
                / (1i64 << input_multiplier.shift.min(62)) as f64,
        );
        Ok(Softmax {
            input_multiplier,
            diff_min: -(radius as i32),
            depth,
        })
    }

    /// The output quantization TFLite's int8 softmax requires.
    pub fn output_params() -> Result<QuantParams> {
        QuantParams::per_tensor(1.0 / 256.0, -128)
    }

    fn scaled(&self, diff: i32) -> i32 {
        // MultiplyByQuantizedMultiplierGreaterThanOne.
        mul(
            diff.wrapping_mul(1i32.wrapping_shl(self.input_multiplier.shift as u32)),
            self.input_multiplier.mantissa,
        )
    }

    /// Runs over `input` (rows of `depth`) into `out`.
    pub fn run(&self, input: &[i8], out: &mut [i8]) -> Result<()> {
        const OP: &str = "quant::softmax";
        if input.len() != out.len() || input.len() % self.depth != 0 {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: "softmax's input and output must have the same length, a whole number of rows",
            });
        }
        for (row, dst) in input
            .chunks_exact(self.depth)
            .zip(out.chunks_exact_mut(self.depth))
        {
            let max = row.iter().copied().max().unwrap_or(i8::MIN) as i32;
            let mut sum = 0i32;
            for &v in row {
                let diff = v as i32 - max;
                if diff >= self.diff_min {
                    sum = sum.wrapping_add(rescale(
                        exp_on_negative_values(self.scaled(diff)),
                        0,
                        ACC_BITS,
                    ));
                }
            }
            let (scale, bits_over_unit) = reciprocal(sum, ACC_BITS);
            for (&v, d) in row.iter().zip(dst.iter_mut()) {
                let diff = v as i32 - max;
                *d = if diff >= self.diff_min {
                    let e = exp_on_negative_values(self.scaled(diff));
                    let unsat = rounding_divide_by_pot(mul(scale, e), bits_over_unit + 31 - 8);
                    (unsat + Q_MIN).clamp(Q_MIN, Q_MAX) as i8
                } else {
                    i8::MIN
                };
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(raw: i32, int_bits: i32) -> f64 {
        raw as f64 / (1u64 << (31 - int_bits)) as f64
    }

    #[test]
    fn exp_on_negative_values_is_within_a_few_ulp_of_exp() {
        for i in 0..2000 {
            let x = -(i as f64) / 100.0; // 0 .. -20
            let raw = (x * (1u64 << (31 - DIFF_BITS)) as f64) as i32;
            let got = q(exp_on_negative_values(raw), 0);
            let want = libm::exp(q(raw, DIFF_BITS));
            assert!(
                (got - want).abs() < 1e-7 + want * 1e-6,
                "exp({x}) = {got}, want {want}"
            );
        }
    }

    #[test]
    fn reciprocal_is_within_a_few_ulp_of_one_over_x() {
        for i in 1..500 {
            let x = i as f64 * 0.731; // 0.73 .. 365 in Q12.19
            let raw = (x * (1u64 << (31 - ACC_BITS)) as f64) as i32;
            let (m, over) = reciprocal(raw, ACC_BITS);
            let got = q(m, 0) / libm::pow(2.0, over as f64);
            let want = 1.0 / q(raw, ACC_BITS);
            assert!(
                (got - want).abs() <= want * 1e-6,
                "1/{x} = {got}, want {want}"
            );
        }
    }
}
