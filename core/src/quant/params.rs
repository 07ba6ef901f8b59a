//! Affine quantization parameters: `real = scale * (q - zero_point)`.

use crate::error::{Error, Result};
use alloc::vec::Vec;

/// The smallest int8 value.
pub const Q_MIN: i32 = i8::MIN as i32;
/// The largest int8 value.
pub const Q_MAX: i32 = i8::MAX as i32;

/// How int8 values stand for reals: `real = scale * (q - zero_point)`,
/// one pair for the whole tensor or one per channel along `axis`
/// (TFLite's per-channel weights).
///
/// Invariants, checked by the constructors and nowhere else: at least one
/// pair; as many zero points as scales; every scale finite and greater
/// than zero; every zero point in `-128..=127`.
///
/// ```
/// use kael_core::quant::QuantParams;
/// let p = QuantParams::per_tensor(0.5, -3)?;
/// assert_eq!((p.scale(0), p.zero_point(0)), (0.5, -3));
/// assert!(QuantParams::per_tensor(0.0, 0).is_err());
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct QuantParams {
    scales: Vec<f32>,
    zero_points: Vec<i32>,
    axis: Option<usize>,
}

fn check_pair(op: &'static str, scale: f32, zero_point: i32, channel: usize) -> Result<()> {
    if !(scale.is_finite() && scale > 0.0) {
        return Err(Error::InvalidQuantization {
            op,
            reason: "a quantization scale must be finite and greater than 0; derive it from the observed range as (max - min) / 255, or use 1.0 for a channel that is all zeros",
            value: scale as f64,
            channel,
        });
    }
    if !(Q_MIN..=Q_MAX).contains(&zero_point) {
        return Err(Error::InvalidQuantization {
            op,
            reason: "an int8 zero point must lie in -128..=127; clamp it, or widen the range it was derived from so that it includes 0",
            value: zero_point as f64,
            channel,
        });
    }
    Ok(())
}

impl QuantParams {
    /// One scale and zero point for the whole tensor (TFLite's
    /// activations).
    ///
    /// ```
    /// use kael_core::quant::QuantParams;
    /// let e = QuantParams::per_tensor(0.1, 200).unwrap_err();
    /// assert!(e.to_string().starts_with("QuantParams::per_tensor: an int8 zero point"));
    /// ```
    pub fn per_tensor(scale: f32, zero_point: i32) -> Result<QuantParams> {
        check_pair("QuantParams::per_tensor", scale, zero_point, 0)?;
        Ok(QuantParams {
            scales: alloc::vec![scale],
            zero_points: alloc::vec![zero_point],
            axis: None,
        })
    }

    /// One scale and zero point per index of dimension `axis` (TFLite's
    /// per-channel weights: axis 0 of a conv or fully-connected filter,
    /// axis 3 of a depthwise filter).
    ///
    /// ```
    /// use kael_core::quant::QuantParams;
    /// let p = QuantParams::per_channel(&[0.1, 0.2], &[0, 0], 0)?;
    /// assert_eq!((p.channels(), p.axis()), (2, Some(0)));
    /// assert!(QuantParams::per_channel(&[0.1, 0.2], &[0], 0).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn per_channel(scales: &[f32], zero_points: &[i32], axis: usize) -> Result<QuantParams> {
        const OP: &str = "QuantParams::per_channel";
        if scales.is_empty() || scales.len() != zero_points.len() {
            return Err(Error::InvalidQuantization {
                op: OP,
                reason: "per-channel parameters need one scale and one zero point per channel, and at least one channel; pass two slices of the same length (got this many zero points)",
                value: zero_points.len() as f64,
                channel: scales.len(),
            });
        }
        for (c, (&s, &z)) in scales.iter().zip(zero_points).enumerate() {
            check_pair(OP, s, z, c)?;
        }
        Ok(QuantParams {
            scales: scales.to_vec(),
            zero_points: zero_points.to_vec(),
            axis: Some(axis),
        })
    }

    /// The scale of `channel` (per-tensor parameters answer every channel
    /// with their one scale; a channel past the end answers the last).
    pub fn scale(&self, channel: usize) -> f32 {
        let i = channel.min(self.scales.len() - 1);
        self.scales[i]
    }

    /// The zero point of `channel`, as [`scale`](Self::scale) picks it.
    pub fn zero_point(&self, channel: usize) -> i32 {
        let i = channel.min(self.zero_points.len() - 1);
        self.zero_points[i]
    }

    /// Every scale (one for per-tensor parameters).
    pub fn scales(&self) -> &[f32] {
        &self.scales
    }

    /// Every zero point (one for per-tensor parameters).
    pub fn zero_points(&self) -> &[i32] {
        &self.zero_points
    }

    /// How many (scale, zero point) pairs there are.
    pub fn channels(&self) -> usize {
        self.scales.len()
    }

    /// The per-channel axis, or `None` for per-tensor parameters.
    pub fn axis(&self) -> Option<usize> {
        self.axis
    }

    /// Whether one pair covers the whole tensor.
    pub fn is_per_tensor(&self) -> bool {
        self.axis.is_none()
    }

    /// Whether every zero point is 0 (TFLite's int8 weights are
    /// symmetric).
    pub fn is_symmetric(&self) -> bool {
        self.zero_points.iter().all(|&z| z == 0)
    }
}

/// An activation fused into a layer's requantization, as TFLite fuses it:
/// the output is clamped to the quantized image of the activation's range.
///
/// ```
/// use kael_core::quant::{Activation, QuantParams};
/// let out = QuantParams::per_tensor(0.05, -128)?;
/// assert_eq!(Activation::Relu6.range(&out), (-128, -8));
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Activation {
    /// No clamp beyond int8's own range.
    #[default]
    None,
    /// `max(x, 0)`.
    Relu,
    /// `min(max(x, 0), 6)`.
    Relu6,
}

impl Activation {
    /// The `(min, max)` int8 range of the activation at the output's
    /// (per-tensor) parameters (TFLite's `CalculateActivationRangeQuantized`:
    /// `zero_point + round(real / scale)`, the division in `f32`).
    pub fn range(self, output: &QuantParams) -> (i32, i32) {
        let (scale, zp) = (output.scale(0), output.zero_point(0));
        let q = |real: f32| zp.saturating_add(libm::roundf(real / scale) as i32);
        match self {
            Activation::None => (Q_MIN, Q_MAX),
            Activation::Relu => (Q_MIN.max(q(0.0)), Q_MAX),
            Activation::Relu6 => (Q_MIN.max(q(0.0)), Q_MAX.min(q(6.0))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn per_tensor_refuses_zero_negative_and_non_finite_scales() {
        for s in [0.0, -1.0, f32::NAN, f32::INFINITY] {
            let e = QuantParams::per_tensor(s, 0).unwrap_err();
            assert!(
                matches!(e, Error::InvalidQuantization { channel: 0, .. }),
                "{s}: {e:?}"
            );
        }
    }

    #[test]
    fn per_tensor_refuses_zero_points_outside_int8() {
        for z in [-129, 128, i32::MAX, i32::MIN] {
            assert!(QuantParams::per_tensor(1.0, z).is_err(), "{z}");
        }
        assert!(QuantParams::per_tensor(1.0, -128).is_ok());
        assert!(QuantParams::per_tensor(1.0, 127).is_ok());
    }

    #[test]
    fn per_channel_names_the_bad_channel() {
        let e = QuantParams::per_channel(&[0.1, 0.2, 0.0], &[0, 0, 0], 0).unwrap_err();
        assert!(
            matches!(e, Error::InvalidQuantization { channel: 2, .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("at channel 2"), "{e}");
    }

    #[test]
    fn per_channel_refuses_mismatched_and_empty_lists() {
        assert!(QuantParams::per_channel(&[0.1], &[0, 0], 0).is_err());
        assert!(QuantParams::per_channel(&[], &[], 0).is_err());
    }

    #[test]
    fn activation_ranges_follow_the_output_zero_point() {
        let p = QuantParams::per_tensor(0.1, 10).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(Activation::None.range(&p), (-128, 127));
        assert_eq!(Activation::Relu.range(&p), (10, 127));
        // 6 / 0.1 = 60 (in f32: 59.999996 rounds to 60), 10 + 60 = 70.
        assert_eq!(Activation::Relu6.range(&p), (10, 70));
        // A zero point below -128 cannot exist; a large scale makes relu6's
        // top collapse onto the zero point.
        let wide = QuantParams::per_tensor(100.0, -128).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(Activation::Relu6.range(&wide), (-128, -128));
    }
}
