//! TFLite's fixed-point requantization: a real multiplier as an `i32`
//! mantissa and a power-of-two shift, applied with gemmlowp's rounding.
//!
//! NOTE [Requantization rounding]
//! TFLite (and TFLite Micro, and CMSIS-NN) scale an `i32` accumulator by
//! a real number `m` without floats: `m = mantissa * 2^(shift - 31)` with
//! the mantissa in `[2^30, 2^31)`, computed once from `m` in `f64`
//! ([`Multiplier::from_real`], TFLite's `QuantizeMultiplier`). An
//! accumulator `x` becomes `RoundingDivideByPOT(SaturatingRoundingDoubling
//! HighMul(x << left, mantissa), right)`: two roundings, which treat ties
//! differently: the high multiply rounds them up, toward +inf (`-0.5` goes
//! to 0), the divide rounds them away from zero (`-1.5` goes to -2).
//! This is TFLite's default build (`TFLITE_SINGLE_ROUNDING` off), the one
//! its pip wheels and TFLite Micro use; results are bit-identical to it
//! only if every step here matches, so each function names its TFLite
//! counterpart and does nothing else.
//!
//! One exception, found by the data (tests/data/tflite/gen.py's `rows`
//! model, thousands of outputs): the TFLite 2.21 interpreter's int8
//! FULLY_CONNECTED rounds once (`(x * mantissa + half) >> (31 - shift)`,
//! [`Multiplier::apply_rounding_once`], as ruy and TFLite's
//! `TFLITE_SINGLE_ROUNDING` build do), while its CONV_2D, DEPTHWISE_CONV_2D
//! and ADD round twice. The two differ only at exact ties (about one output
//! in a thousand). TFLite Micro's reference fully-connected kernel rounds
//! twice, so [`Rounding`](super::Rounding) lets a layer follow either.

/// A real multiplier in TFLite's fixed-point form: `mantissa * 2^(shift -
/// 31)`, mantissa in `[2^30, 2^31)` (or 0 for a zero multiplier).
///
/// ```
/// use kael_core::quant::Multiplier;
/// let m = Multiplier::from_real(0.25);
/// assert_eq!((m.mantissa, m.shift), (1 << 30, -1));
/// assert_eq!(m.apply(400), 100);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Multiplier {
    /// The mantissa, a Q0.31 fixed-point number.
    pub mantissa: i32,
    /// The power of two: positive shifts left before the multiply,
    /// negative shifts right (rounding) after it.
    pub shift: i32,
}

/// A positive finite `f32` as `(m, e)` with `v = m * 2^e`, `m < 2^24`
/// (subnormals included); `None` for zero, negatives, infinities and NaN.
fn unpack(v: f32) -> Option<(u64, i32)> {
    if !(v > 0.0 && v.is_finite()) {
        return None;
    }
    let bits = v.to_bits();
    let (exp, frac) = ((bits >> 23) & 0xff, u64::from(bits & 0x7f_ffff));
    Some(if exp == 0 {
        (frac, -149)
    } else {
        (frac | 1 << 23, exp as i32 - 150)
    })
}

impl Multiplier {
    /// The multiplier of a non-negative real `m` (TFLite's
    /// `QuantizeMultiplier`). A negative, NaN or zero `m` gives the zero
    /// multiplier; callers validate scales before they get here (see
    /// [`QuantParams`](super::QuantParams)).
    ///
    /// ```
    /// use kael_core::quant::Multiplier;
    /// assert_eq!(Multiplier::from_real(1.0), Multiplier { mantissa: 1 << 30, shift: 1 });
    /// assert_eq!(Multiplier::from_real(0.0), Multiplier { mantissa: 0, shift: 0 });
    /// ```
    pub fn from_real(m: f64) -> Multiplier {
        if m.is_nan() || m <= 0.0 || m.is_infinite() {
            return Multiplier {
                mantissa: 0,
                shift: 0,
            };
        }
        let (q, mut shift) = libm::frexp(m);
        // TfLiteRound is std::round: halves away from zero.
        let mut fixed = libm::round(q * (1u64 << 31) as f64) as i64;
        if fixed == 1i64 << 31 {
            fixed /= 2;
            shift += 1;
        }
        if shift < -31 {
            shift = 0;
            fixed = 0;
        }
        Multiplier {
            mantissa: fixed as i32,
            shift,
        }
    }

    /// The multiplier of a layer, `input_scale * filter_scale /
    /// output_scale`, exactly as [`Multiplier::from_real`] computes it from
    /// that ratio in `f64` (TFLite's `GetQuantizedConvolutionMultipler`:
    /// the product is exact in `f64`, the quotient rounds to nearest even),
    /// but in integer arithmetic: Cortex-M cores have no double-precision
    /// unit, and the soft-float routines cost about 3 KB of flash (NOTE
    /// [Exact multiplier without f64]). A scale that is not a positive
    /// finite number gives the zero multiplier.
    ///
    /// ```
    /// use kael_core::quant::Multiplier;
    /// let (i, f, o) = (0.0235f32, 0.0041f32, 0.0517f32);
    /// assert_eq!(
    ///     Multiplier::from_scales(i, f, o),
    ///     Multiplier::from_real(i as f64 * f as f64 / o as f64)
    /// );
    /// ```
    pub fn from_scales(input: f32, filter: f32, output: f32) -> Multiplier {
        // NOTE [Exact multiplier without f64]
        // Each scale is m * 2^e with an integer m < 2^24. The f64 product
        // of two of them is exact (48 bits), so the f64 ratio is
        // P / D * 2^E rounded to 53 bits, P = m_i * m_f, D = m_o. Long
        // division gives 55 quotient bits and a sticky bit for the rest;
        // rounding those to 53 bits (ties to even) is the f64 quotient, and
        // rounding that to 31 bits (halves away from zero, as TfLiteRound)
        // is the mantissa. Checked against from_real over a million random
        // scale triples, subnormals and ties included (tests below).
        let zero = Multiplier {
            mantissa: 0,
            shift: 0,
        };
        let (Some((mi, ei)), Some((mf, ef)), Some((mo, eo))) =
            (unpack(input), unpack(filter), unpack(output))
        else {
            return zero;
        };
        let (p, d) = (mi * mf, mo);
        // Restoring division: q = floor(p / d), r = p mod d.
        let (mut q, mut r) = (0u64, 0u64);
        for bit in (0..48).rev() {
            r = (r << 1) | ((p >> bit) & 1);
            q <<= 1;
            if r >= d {
                r -= d;
                q |= 1;
            }
        }
        // More quotient bits until q holds 55 of them.
        let mut fraction_bits = 0i32;
        while q < 1 << 54 {
            r <<= 1;
            q <<= 1;
            if r >= d {
                r -= d;
                q |= 1;
            }
            fraction_bits += 1;
        }
        // To 53 bits, ties to even.
        let sticky = (q & 1) | u64::from(r != 0);
        let round = (q >> 1) & 1;
        let mut m53 = q >> 2;
        let mut exp = ei + ef - eo - fraction_bits + 2; // ratio = m53 * 2^exp
        if round == 1 && (sticky == 1 || m53 & 1 == 1) {
            m53 += 1;
            if m53 == 1 << 53 {
                m53 >>= 1;
                exp += 1;
            }
        }
        // frexp: ratio = (m53 / 2^53) * 2^shift; then round(q * 2^31).
        let mut shift = exp + 53;
        let mut fixed = (m53 + (1 << 21)) >> 22;
        if fixed == 1 << 31 {
            fixed /= 2;
            shift += 1;
        }
        if shift < -31 {
            return zero;
        }
        Multiplier {
            mantissa: fixed as i32,
            shift,
        }
    }

    /// `x * m`, rounded as TFLite rounds it (its
    /// `MultiplyByQuantizedMultiplier`, NOTE [Requantization rounding]).
    ///
    /// ```
    /// use kael_core::quant::Multiplier;
    /// let m = Multiplier::from_real(0.5);
    /// // The high multiply takes ties up: 1.5 -> 2, -1.5 -> -1.
    /// assert_eq!((m.apply(3), m.apply(-3)), (2, -1));
    /// ```
    #[inline]
    pub fn apply(self, x: i32) -> i32 {
        let left = if self.shift > 0 { self.shift } else { 0 };
        let right = if self.shift > 0 { 0 } else { -self.shift };
        // TFLite multiplies in int (wrapping in practice); a left shift is
        // only taken for multipliers above 1, which int8 layers do not use.
        let shifted = x.wrapping_mul(1i32.wrapping_shl(left as u32));
        rounding_divide_by_pot(
            saturating_rounding_doubling_high_mul(shifted, self.mantissa),
            right,
        )
    }

    /// `x * m` rounded once, half up: `(x * mantissa + 2^(30 - shift)) >>
    /// (31 - shift)` in `i64` (TFLite's `MultiplyByQuantizedMultiplier`
    /// built with `TFLITE_SINGLE_ROUNDING`, and ruy's multiplier, which the
    /// TFLite interpreter's fully-connected layers go through; NOTE
    /// [Requantization rounding]).
    ///
    /// ```
    /// use kael_core::quant::Multiplier;
    /// let m = Multiplier::from_real(0.125);
    /// // 11 * 0.125 = 1.375: once-rounded 1, where `apply` gives 2.
    /// assert_eq!((m.apply_rounding_once(11), m.apply(11)), (1, 2));
    /// ```
    #[inline]
    pub fn apply_rounding_once(self, x: i32) -> i32 {
        let total = 31 - self.shift as i64;
        if !(1..=62).contains(&total) {
            return 0;
        }
        let round = 1i64 << (total - 1);
        ((x as i64 * self.mantissa as i64 + round) >> total) as i32
    }

    /// `x * m` for a multiplier below one, whose shift is never positive
    /// (TFLite's `MultiplyByQuantizedMultiplierSmallerThanOneExp`, used by
    /// its int8 add).
    ///
    /// ```
    /// use kael_core::quant::Multiplier;
    /// assert_eq!(Multiplier::from_real(0.25).apply_below_one(-10), -3);
    /// ```
    #[inline]
    pub fn apply_below_one(self, x: i32) -> i32 {
        rounding_divide_by_pot(
            saturating_rounding_doubling_high_mul(x, self.mantissa),
            -self.shift,
        )
    }
}

/// gemmlowp's `SaturatingRoundingDoublingHighMul`: the high 32 bits of
/// `2 * a * b`, rounded to nearest with ties up, saturating the one overflow
/// (`i32::MIN * i32::MIN`).
///
/// ```
/// use kael_core::quant::saturating_rounding_doubling_high_mul as mul;
/// assert_eq!(mul(1 << 30, 1 << 30), 1 << 29);
/// assert_eq!(mul(i32::MIN, i32::MIN), i32::MAX);
/// ```
#[inline]
pub fn saturating_rounding_doubling_high_mul(a: i32, b: i32) -> i32 {
    if a == b && a == i32::MIN {
        return i32::MAX;
    }
    let ab = a as i64 * b as i64;
    let nudge: i64 = if ab >= 0 { 1 << 30 } else { 1 - (1 << 30) };
    // C's division truncates toward zero, as Rust's does.
    ((ab + nudge) / (1i64 << 31)) as i32
}

/// gemmlowp's `RoundingDivideByPOT`: `x / 2^exponent`, rounded to nearest
/// with ties away from zero. `exponent` is clamped to `0..=31`.
///
/// ```
/// use kael_core::quant::rounding_divide_by_pot as div;
/// assert_eq!((div(5, 1), div(-5, 1), div(6, 2), div(-6, 2)), (3, -3, 2, -2));
/// ```
#[inline]
pub fn rounding_divide_by_pot(x: i32, exponent: i32) -> i32 {
    let e = exponent.clamp(0, 31) as u32;
    let mask = ((1i64 << e) - 1) as i32;
    let remainder = x & mask;
    let threshold = (mask >> 1) + i32::from(x < 0);
    (x >> e) + i32::from(remainder > threshold)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exact rational `x * m`, rounded half away from zero: what the
    /// two-step fixed-point product approximates. For mantissas with few
    /// significant bits the two roundings cannot differ from one.
    fn exact(x: i32, m: Multiplier) -> i64 {
        let num = x as i128 * m.mantissa as i128;
        let den_log = 31 - m.shift;
        let den = 1i128 << den_log;
        let q = num / den;
        let r = num % den;
        let adj = if 2 * r.abs() >= den { num.signum() } else { 0 };
        (q + adj) as i64
    }

    /// `from_scales` against `from_real` on the f64 ratio (the host's
    /// IEEE double arithmetic is the reference).
    fn check_scales(i: f32, f: f32, o: f32) {
        assert_eq!(
            Multiplier::from_scales(i, f, o),
            Multiplier::from_real(i as f64 * f as f64 / o as f64),
            "scales {i:e} ({:#x}) {f:e} ({:#x}) {o:e} ({:#x})",
            i.to_bits(),
            f.to_bits(),
            o.to_bits()
        );
    }

    #[test]
    fn from_scales_equals_from_real_on_random_scales() {
        let mut s = 0x2545_f491u32;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s
        };
        let n = if cfg!(miri) { 200 } else { 1_000_000 };
        for k in 0..n {
            // Any positive finite bits; every 8th triple in the usual scale
            // range (1e-6..1), where the mantissa bits matter most.
            let mut scale = || {
                let bits = next() & 0x7fff_ffff;
                let v = f32::from_bits(if k % 8 == 0 {
                    0x3000_0000 | (bits & 0x0fff_ffff)
                } else {
                    bits
                });
                if v.is_finite() && v > 0.0 { v } else { 1.0e-3 }
            };
            check_scales(scale(), scale(), scale());
        }
    }

    #[test]
    fn from_scales_equals_from_real_at_ties_and_edges() {
        // (1 + 2^-23) * 511 has 32 significant bits: a tie at 31 bits,
        // which rounds away from zero.
        let one_ulp = f32::from_bits(0x3f80_0001);
        check_scales(one_ulp, 511.0, 1.0);
        check_scales(one_ulp, 511.0, 2.0);
        check_scales(one_ulp, 1023.0, 3.0);
        // A mantissa that rounds up to 2^31 (TFLite halves it).
        check_scales(f32::from_bits(0x3f7f_ffff), 1.0, 1.0);
        check_scales(1.0, 1.0, 1.0);
        check_scales(0.5, 0.25, 3.0);
        // Subnormal scales, and ratios below 2^-31 (the zero multiplier).
        check_scales(f32::from_bits(1), 1.0, 1.0);
        check_scales(f32::from_bits(0x007f_ffff), 3.0e-5, 7.0);
        check_scales(1.0e-20, 1.0e-20, 1.0);
        check_scales(3.0e38, 3.0e38, f32::from_bits(1));
        // Not positive finite: the zero multiplier, as from_real.
        for bad in [0.0, -1.0, f32::NAN, f32::INFINITY] {
            assert_eq!(Multiplier::from_scales(bad, 1.0, 1.0).mantissa, 0);
            assert_eq!(Multiplier::from_scales(1.0, 1.0, bad).mantissa, 0);
        }
    }

    #[test]
    fn from_real_matches_hand_derived_mantissas_and_shifts() {
        // 0.75 = 0.75 * 2^0: mantissa round(0.75 * 2^31).
        assert_eq!(
            Multiplier::from_real(0.75),
            Multiplier {
                mantissa: 1_610_612_736,
                shift: 0
            }
        );
        // 3.0 = 0.75 * 2^2.
        assert_eq!(Multiplier::from_real(3.0).shift, 2);
        // 1e-3 = 0.512 * 2^-9: round(0.512 * 2^31) = 1099511628.
        assert_eq!(
            Multiplier::from_real(1e-3),
            Multiplier {
                mantissa: 1_099_511_628,
                shift: -9
            }
        );
    }

    #[test]
    fn a_mantissa_that_rounds_up_to_two_to_the_31_moves_into_the_shift() {
        // 1 - 2^-40 has frexp mantissa 1 - 2^-40, which rounds to 2^31.
        let m = Multiplier::from_real(1.0 - libm::ldexp(1.0, -40));
        assert_eq!(
            m,
            Multiplier {
                mantissa: 1 << 30,
                shift: 1
            }
        );
    }

    #[test]
    fn multipliers_below_two_to_the_minus_32_become_zero() {
        assert_eq!(
            Multiplier::from_real(1e-12),
            Multiplier {
                mantissa: 0,
                shift: 0
            }
        );
        assert_eq!(
            Multiplier::from_real(-1.0),
            Multiplier {
                mantissa: 0,
                shift: 0
            }
        );
        assert_eq!(
            Multiplier::from_real(f64::NAN),
            Multiplier {
                mantissa: 0,
                shift: 0
            }
        );
    }

    #[test]
    fn apply_rounds_ties_up_in_the_multiply_and_away_from_zero_in_the_divide() {
        // 0.5 has shift 0: only the high multiply rounds, ties up.
        let half = Multiplier::from_real(0.5);
        for (x, want) in [
            (1, 1),
            (-1, 0),
            (2, 1),
            (3, 2),
            (-3, -1),
            (0, 0),
            (i32::MAX, 1 << 30),
        ] {
            assert_eq!(half.apply(x), want, "{x} * 0.5");
        }
        // 0.125 has shift -2: the multiply halves exactly, the divide by 4
        // rounds.
        let eighth = Multiplier::from_real(0.125);
        assert_eq!(eighth.apply(12), 2); // 1.5 -> 2
        assert_eq!(eighth.apply(-12), -2); // -1.5 -> -2
        // 1.375: the multiply gives 5.5 -> 6, the divide 6 / 4 = 1.5 -> 2;
        // two roundings, as TFLite rounds.
        assert_eq!(eighth.apply(11), 2);
    }

    #[test]
    // NOTE [Miri runs the unsafe code]: arithmetic over thousands of
    // values, no unsafe code (minutes under Miri); it runs natively.
    #[cfg_attr(miri, ignore)]
    fn apply_agrees_with_the_exact_product_when_the_high_multiply_is_exact() {
        // With the mantissa a multiple of 2^16 and x a multiple of 2^15,
        // x * mantissa is a multiple of 2^31: the high multiply is exact and
        // the only rounding left is the divide's, so the result is the
        // exact product rounded once, half away from zero.
        for &real in &[0.3, 0.0071, 0.9, 0.000_123] {
            let mut m = Multiplier::from_real(real);
            m.mantissa &= !0xFFFF;
            for j in (-65_535..65_536).step_by(7) {
                let x = j << 15;
                assert_eq!(m.apply(x) as i64, exact(x, m), "x={x} m={m:?}");
            }
        }
    }

    #[test]
    fn apply_below_one_equals_apply_for_non_positive_shifts() {
        let m = Multiplier::from_real(0.0123);
        for x in [-1_000_000, -77, 0, 5, 123_456_789] {
            assert_eq!(m.apply_below_one(x), m.apply(x));
        }
    }

    #[test]
    fn rounding_divide_by_pot_clamps_its_exponent() {
        assert_eq!(rounding_divide_by_pot(7, -3), 7);
        assert_eq!(rounding_divide_by_pot(i32::MIN, 40), -1);
        assert_eq!(rounding_divide_by_pot(i32::MAX, 31), 1);
    }
}
