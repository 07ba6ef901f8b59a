//! The int8 elementwise kernels: [`Add`] (with NumPy broadcasting, laid
//! out by [`Broadcast`]) and [`Relu`], TFLite's standalone `RELU` and
//! `RELU6` operators, which requantize as they clamp. Like every kernel
//! here they run over slices and never allocate.

use super::fixed_point::Multiplier;
use super::kernels::length;
use super::params::{Activation, Q_MAX, Q_MIN, QuantParams};
use crate::error::{ErrShape, Error, Result};

/// The most dimensions [`Broadcast`] lines up (TFLite's limit).
const MAX: usize = 6;

/// How the two operands of an elementwise op line up with its output:
/// NumPy's and PyTorch's broadcasting, as TFLite's `BroadcastAdd6DSlow`
/// does it. Shapes are aligned at their last dimension, and a dimension of
/// 1 (or a missing leading one) repeats along the other operand's. Up to
/// [`Broadcast::MAX_RANK`] dimensions; it holds fixed arrays, so building
/// and walking one never allocates.
///
/// ```
/// use kael_core::quant::Broadcast;
/// let b = Broadcast::new(&[2, 1, 3], &[4, 1])?;
/// assert_eq!(b.shape(), &[2, 4, 3]);
/// assert_eq!(b.len(), 24);
/// assert!(Broadcast::new(&[2, 3], &[4]).is_err());
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Broadcast {
    /// The output's rank.
    rank: usize,
    /// The output's dimensions, right-aligned (the leading `MAX - rank`
    /// are 1).
    dims: [usize; MAX],
    /// Each operand's element stride along each output dimension, 0 where
    /// it repeats.
    strides: [[usize; MAX]; 2],
    /// Each operand's element count.
    lens: [usize; 2],
    /// The output's element count.
    len: usize,
}

impl Broadcast {
    /// The most dimensions an operand may have.
    pub const MAX_RANK: usize = MAX;

    /// Lines up operands of shapes `a` and `b`. Shapes that do not
    /// broadcast, more than [`Broadcast::MAX_RANK`] dimensions, and sizes
    /// that overflow `usize` are errors.
    pub fn new(a: &[usize], b: &[usize]) -> Result<Broadcast> {
        const OP: &str = "quant::Broadcast::new";
        let rank = a.len().max(b.len());
        if rank > MAX {
            return Err(Error::RankMismatch {
                op: OP,
                expected: "at most 6 (TFLite broadcasts up to 6 dimensions)",
                got: rank,
            });
        }
        let mut padded = [[1usize; MAX]; 2];
        padded[0][MAX - a.len()..].copy_from_slice(a);
        padded[1][MAX - b.len()..].copy_from_slice(b);
        let mut dims = [1usize; MAX];
        for (d, out) in dims.iter_mut().enumerate() {
            let (x, y) = (padded[0][d], padded[1][d]);
            *out = if x == y || y == 1 {
                x
            } else if x == 1 {
                y
            } else {
                return Err(Error::BroadcastMismatch {
                    op: OP,
                    lhs: ErrShape::of(a),
                    rhs: ErrShape::of(b),
                });
            };
        }
        let overflow = || Error::InvalidArgument {
            op: OP,
            reason: "the broadcast shape's element count overflows usize; use smaller shapes",
        };
        let mut strides = [[0usize; MAX]; 2];
        let mut lens = [1usize; 2];
        for k in 0..2 {
            for d in (0..MAX).rev() {
                if padded[k][d] != 1 {
                    strides[k][d] = lens[k];
                }
                lens[k] = lens[k].checked_mul(padded[k][d]).ok_or_else(overflow)?;
            }
        }
        let len = dims
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .ok_or_else(overflow)?;
        Ok(Broadcast {
            rank,
            dims,
            strides,
            lens,
            len,
        })
    }

    /// The output's shape.
    pub fn shape(&self) -> &[usize] {
        &self.dims[MAX - self.rank..]
    }

    /// The output's element count.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the output is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Calls `f(output, a, b)` with the element indices of every output
    /// element, in order, and the operands' elements it lines up.
    fn for_each(&self, mut f: impl FnMut(usize, usize, usize)) {
        let [d0, d1, d2, d3, d4, d5] = self.dims;
        let [sa, sb] = self.strides;
        let mut o = 0;
        for i0 in 0..d0 {
            let (a0, b0) = (i0 * sa[0], i0 * sb[0]);
            for i1 in 0..d1 {
                let (a1, b1) = (a0 + i1 * sa[1], b0 + i1 * sb[1]);
                for i2 in 0..d2 {
                    let (a2, b2) = (a1 + i2 * sa[2], b1 + i2 * sb[2]);
                    for i3 in 0..d3 {
                        let (a3, b3) = (a2 + i3 * sa[3], b2 + i3 * sb[3]);
                        for i4 in 0..d4 {
                            let (a4, b4) = (a3 + i4 * sa[4], b3 + i4 * sb[4]);
                            for i5 in 0..d5 {
                                f(o, a4 + i5 * sa[5], b4 + i5 * sb[5]);
                                o += 1;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// An int8 elementwise add, TFLite's int8 `Add`: both inputs are brought
/// to a common scale with 20 bits of headroom (`LEFT_SHIFT`), summed, and
/// requantized. [`Add::run`] adds two operands of one shape,
/// [`Add::run_broadcast`] two that broadcast.
///
/// ```
/// use kael_core::quant::{Add, QuantParams, Activation};
/// let p = QuantParams::per_tensor(0.5, 0)?;
/// let add = Add::new(&p, &p, &p, Activation::None)?;
/// let mut out = [0i8; 2];
/// add.run(&[3, -4], &[5, 1], &mut out)?;
/// assert_eq!(out, [8, -3]);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Add {
    /// The inputs' zero points.
    pub zero_points: [i32; 2],
    /// The inputs' multipliers onto the common scale.
    pub input_multipliers: [Multiplier; 2],
    /// The common scale's multiplier onto the output's.
    pub output_multiplier: Multiplier,
    /// The output's zero point.
    pub output_zero_point: i32,
    /// The fused activation's lowest output.
    pub min: i32,
    /// The fused activation's highest output.
    pub max: i32,
}

impl Add {
    /// TFLite's headroom for the sum.
    pub const LEFT_SHIFT: u32 = 20;

    /// The add of inputs quantized as `a` and `b` into `out`'s
    /// quantization (TFLite's `Prepare` for int8 add: the multipliers in
    /// `f64`, from `2 * max(scale_a, scale_b)`). All three are per-tensor.
    pub fn new(
        a: &super::QuantParams,
        b: &super::QuantParams,
        out: &super::QuantParams,
        act: super::Activation,
    ) -> Result<Add> {
        const OP: &str = "quant::add";
        if !(a.is_per_tensor() && b.is_per_tensor() && out.is_per_tensor()) {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: "int8 add takes per-tensor quantization on both inputs and the output; requantize per-channel values first",
            });
        }
        let (sa, sb, so) = (a.scale(0) as f64, b.scale(0) as f64, out.scale(0) as f64);
        let twice_max = 2.0 * sa.max(sb);
        let output_multiplier =
            Multiplier::from_real(twice_max / ((1u64 << Self::LEFT_SHIFT) as f64 * so));
        if output_multiplier.shift > 0 {
            return Err(Error::InvalidQuantization {
                op: OP,
                reason: "the output scale is too small for int8 add (it must exceed 2 * max(input scales) / 2^20); widen the output's range",
                value: so,
                channel: 0,
            });
        }
        let (min, max) = act.range(out);
        Ok(Add {
            zero_points: [a.zero_point(0), b.zero_point(0)],
            input_multipliers: [
                Multiplier::from_real(sa / twice_max),
                Multiplier::from_real(sb / twice_max),
            ],
            output_multiplier,
            output_zero_point: out.zero_point(0),
            min,
            max,
        })
    }

    /// One output element (TFLite's `AddFunc`).
    #[inline]
    fn one(&self, x: i8, y: i8) -> i8 {
        let [ma, mb] = self.input_multipliers;
        let xa = (x as i32 - self.zero_points[0]) << Self::LEFT_SHIFT;
        let yb = (y as i32 - self.zero_points[1]) << Self::LEFT_SHIFT;
        let sum = ma.apply_below_one(xa).wrapping_add(mb.apply_below_one(yb));
        let v = self
            .output_multiplier
            .apply_below_one(sum)
            .saturating_add(self.output_zero_point);
        v.clamp(self.min, self.max).clamp(Q_MIN, Q_MAX) as i8
    }

    /// Adds `a` and `b` elementwise into `out` (all of one length).
    pub fn run(&self, a: &[i8], b: &[i8], out: &mut [i8]) -> Result<()> {
        const OP: &str = "quant::add";
        length(OP, Some(a.len()), b.len())?;
        length(OP, Some(a.len()), out.len())?;
        for ((&x, &y), d) in a.iter().zip(b).zip(out.iter_mut()) {
            *d = self.one(x, y);
        }
        Ok(())
    }

    /// Adds `a` and `b`, laid out as `shape` says, into `out` (of
    /// `shape.len()` elements), each output element from the elements the
    /// broadcast lines up with it (TFLite's `BroadcastAdd6DSlow`).
    ///
    /// ```
    /// use kael_core::quant::{Activation, Add, Broadcast, QuantParams};
    /// let p = QuantParams::per_tensor(0.5, 0)?;
    /// let add = Add::new(&p, &p, &p, Activation::None)?;
    /// let shape = Broadcast::new(&[2, 1], &[3])?; // a column plus a row
    /// let mut out = [0i8; 6];
    /// add.run_broadcast(&[0, 10], &[1, 2, 3], &shape, &mut out)?;
    /// assert_eq!(out, [1, 2, 3, 11, 12, 13]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn run_broadcast(
        &self,
        a: &[i8],
        b: &[i8],
        shape: &Broadcast,
        out: &mut [i8],
    ) -> Result<()> {
        const OP: &str = "quant::add";
        length(OP, Some(shape.lens[0]), a.len())?;
        length(OP, Some(shape.lens[1]), b.len())?;
        length(OP, Some(shape.len), out.len())?;
        shape.for_each(|o, i, j| {
            if let (Some(d), Some(&x), Some(&y)) = (out.get_mut(o), a.get(i), b.get(j)) {
                *d = self.one(x, y);
            }
        });
        Ok(())
    }
}

/// TFLite's standalone int8 `RELU` and `RELU6` operators (its `ReluX`):
/// each value is requantized from the input's scale to the output's (the
/// two differ: calibration gives the output a range from 0) and clamped to
/// the activation's range. [`Activation::None`] only requantizes.
///
/// ```
/// use kael_core::quant::{Activation, QuantParams, Relu};
/// let input = QuantParams::per_tensor(0.1, 0)?;
/// let output = QuantParams::per_tensor(0.05, -128)?;
/// let relu = Relu::new(&input, &output, Activation::Relu)?;
/// let mut out = [0i8; 3];
/// relu.run(&[-20, 3, 100], &mut out)?;
/// // -2.0 -> 0; 0.3 -> 6 steps of 0.05; 10.0 -> 200 steps.
/// assert_eq!(out, [-128, -122, 72]);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Relu {
    /// The input's zero point.
    pub input_zero_point: i32,
    /// The input's scale over the output's.
    pub multiplier: Multiplier,
    /// The output's zero point.
    pub output_zero_point: i32,
    /// The activation's lowest output.
    pub min: i32,
    /// The activation's highest output.
    pub max: i32,
}

impl Relu {
    /// The activation from `input`'s quantization to `output`'s (TFLite's
    /// `ReluPrepare`: the ratio of the scales divided in `f32`, then made a
    /// multiplier in `f64`). Both must be per-tensor, and the ratio below
    /// 2^30.
    pub fn new(input: &QuantParams, output: &QuantParams, act: Activation) -> Result<Relu> {
        const OP: &str = "quant::relu";
        if !(input.is_per_tensor() && output.is_per_tensor()) {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: "int8 ReLU takes per-tensor quantization on its input and output; requantize per-channel values first",
            });
        }
        let (si, so) = (input.scale(0), output.scale(0));
        let multiplier = Multiplier::from_real((si / so) as f64);
        if multiplier.shift > 30 || multiplier.mantissa == 0 {
            return Err(Error::InvalidQuantization {
                op: OP,
                reason: "the input's scale over the output's must be a finite ratio between 2^-31 and 2^30; quantize the output to a range comparable with the input's",
                value: so as f64,
                channel: 0,
            });
        }
        let (min, max) = act.range(output);
        Ok(Relu {
            input_zero_point: input.zero_point(0),
            multiplier,
            output_zero_point: output.zero_point(0),
            min,
            max,
        })
    }

    /// Runs the activation from `x` into `out` (of one length).
    pub fn run(&self, x: &[i8], out: &mut [i8]) -> Result<()> {
        length("quant::relu", Some(x.len()), out.len())?;
        for (&v, d) in x.iter().zip(out.iter_mut()) {
            let scaled = self.multiplier.apply(v as i32 - self.input_zero_point);
            let q = scaled.saturating_add(self.output_zero_point);
            *d = q.clamp(self.min, self.max).clamp(Q_MIN, Q_MAX) as i8;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// Output index to operand indices, by the definition: unravel the
    /// output index, drop leading dimensions, clamp repeated ones to 0.
    fn by_definition(out: &[usize], operand: &[usize], o: usize) -> usize {
        let mut idx = Vec::new();
        let mut rest = o;
        for &d in out.iter().rev() {
            idx.push(rest % d);
            rest /= d;
        }
        idx.reverse();
        let skip = out.len() - operand.len();
        let mut flat = 0;
        for (k, &d) in operand.iter().enumerate() {
            let i = if d == 1 { 0 } else { idx[skip + k] };
            flat = flat * d + i;
        }
        flat
    }

    #[test]
    // NOTE [Miri runs the unsafe code]: arithmetic over thousands of
    // values, no unsafe code (minutes under Miri); it runs natively.
    #[cfg_attr(miri, ignore)]
    fn broadcast_walks_every_output_element_to_the_operands_elements() {
        let shapes: [(&[usize], &[usize]); 7] = [
            (&[2, 3], &[2, 3]),
            (&[2, 4, 1, 3], &[2, 1, 5, 3]),
            (&[2, 4, 5, 3], &[3]),
            (&[3], &[2, 4, 5, 3]),
            (&[2, 4, 5, 3], &[2, 1, 1, 3]),
            (&[1, 2, 1, 3, 1, 2], &[2, 1, 4, 1, 5, 1]),
            (&[], &[4, 2]),
        ];
        for (a, b) in shapes {
            let bc = Broadcast::new(a, b).unwrap();
            let out = bc.shape().to_vec();
            let mut seen = 0;
            bc.for_each(|o, i, j| {
                assert_eq!(o, seen, "{a:?} {b:?}: order");
                assert_eq!(i, by_definition(&out, a, o), "{a:?} {b:?}: a at {o}");
                assert_eq!(j, by_definition(&out, b, o), "{a:?} {b:?}: b at {o}");
                seen += 1;
            });
            assert_eq!(seen, bc.len(), "{a:?} {b:?}");
        }
    }

    #[test]
    fn broadcast_refuses_mismatched_and_oversized_shapes() {
        assert!(matches!(
            Broadcast::new(&[2, 3], &[4, 3]),
            Err(Error::BroadcastMismatch { .. })
        ));
        assert!(matches!(
            Broadcast::new(&[1; 7], &[1]),
            Err(Error::RankMismatch { .. })
        ));
        let huge = usize::MAX / 2;
        assert!(Broadcast::new(&[huge, 1], &[1, 4]).is_err());
    }

    #[test]
    fn relu_refuses_absurd_scale_ratios() {
        let tiny = QuantParams::per_tensor(1e-30, 0).unwrap();
        let one = QuantParams::per_tensor(1.0, 0).unwrap();
        assert!(Relu::new(&one, &tiny, Activation::Relu).is_err());
        assert!(Relu::new(&tiny, &one, Activation::Relu).is_err());
        assert!(Relu::new(&one, &one, Activation::Relu6).is_ok());
    }
}
