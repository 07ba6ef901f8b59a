//! The reference int8 kernels: TFLite's reference integer kernels (which
//! TFLite Micro shares), one loop nest each, over slices. A layer is a
//! struct that borrows its weights (from flash, in firmware) and holds its
//! precomputed requantization; `run` checks every length once, then
//! computes. No kernel allocates or sees a `Tensor`.
//!
//! Layouts are TFLite's: activations NHWC, conv filters `[out_c, kh, kw,
//! in_c / groups]`, depthwise filters `[1, kh, kw, in_c * multiplier]`,
//! fully-connected filters `[out, in]`.
//!
//! Accumulators are `i32` and wrap as TFLite's do on the machines it runs
//! on (a layer whose products overflow `i32` is outside TFLite's scheme;
//! wrapping keeps it from panicking).

use super::dot::dot;
use super::fixed_point::Multiplier;
use super::params::{Q_MAX, Q_MIN};
use crate::error::ErrShape;
use crate::error::{Error, Result};

/// The output stage every int8 layer ends in: scale the `i32` accumulator
/// by the channel's multiplier, add the output zero point, clamp to the
/// fused activation's range.
///
/// ```
/// use kael_core::quant::{Multiplier, Requantize};
/// let m = [Multiplier::from_real(0.5)];
/// let r = Requantize { multipliers: &m, zero_point: -10, min: -128, max: 127 };
/// assert_eq!(r.apply(100, 0), 40);
/// assert_eq!(r.apply(1000, 0), 127);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Requantize<'a> {
    /// One multiplier for every channel, or one per output channel.
    pub multipliers: &'a [Multiplier],
    /// The output's zero point.
    pub zero_point: i32,
    /// The lowest output value (the fused activation's).
    pub min: i32,
    /// The highest output value.
    pub max: i32,
}

impl Requantize<'_> {
    /// The int8 output of accumulator `acc` in output channel `channel`.
    /// A multiplier list of length one serves every channel; a channel past
    /// a longer list's end takes its last entry (`check` refuses that case
    /// before any kernel runs).
    #[inline]
    pub fn apply(&self, acc: i32, channel: usize) -> i8 {
        self.apply_rounding(acc, channel, Rounding::Twice)
    }

    /// [`apply`](Self::apply) with the given rounding.
    #[inline]
    pub fn apply_rounding(&self, acc: i32, channel: usize, rounding: Rounding) -> i8 {
        let i = if self.multipliers.len() == 1 {
            0
        } else {
            channel
        };
        let m = match self.multipliers.get(i).or(self.multipliers.last()) {
            Some(m) => *m,
            None => return self.min.clamp(Q_MIN, Q_MAX) as i8,
        };
        let scaled = match rounding {
            Rounding::Twice => m.apply(acc),
            Rounding::Once => m.apply_rounding_once(acc),
        };
        let v = scaled.saturating_add(self.zero_point);
        v.clamp(self.min, self.max).clamp(Q_MIN, Q_MAX) as i8
    }

    fn check(&self, op: &'static str, channels: usize) -> Result<()> {
        let n = self.multipliers.len();
        if n != 1 && n != channels {
            return Err(Error::InvalidQuantization {
                op,
                reason: "the output stage needs one multiplier, or one per output channel; build it from the filter's per-channel scales",
                value: n as f64,
                channel: channels,
            });
        }
        if self.min > self.max || !(Q_MIN..=Q_MAX).contains(&self.zero_point) {
            return Err(Error::InvalidQuantization {
                op,
                reason: "the output stage's zero point must lie in -128..=127 and its min not above its max; take them from QuantParams and Activation::range",
                value: self.zero_point as f64,
                channel: 0,
            });
        }
        Ok(())
    }
}

/// How an output stage rounds (NOTE [Requantization rounding]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Rounding {
    /// Two roundings ([`Multiplier::apply`]): TFLite's convolutions and
    /// add, and every layer in TFLite Micro.
    #[default]
    Twice,
    /// One rounding ([`Multiplier::apply_rounding_once`]): the TFLite
    /// interpreter's fully-connected layers.
    Once,
}

/// How a window covers the input's border (TFLite's two paddings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Padding {
    /// Pad so that the output has `ceil(in / stride)` positions, the extra
    /// row or column (when the total is odd) at the bottom or right.
    Same,
    /// No padding: only windows wholly inside the input.
    Valid,
}

/// One spatial dimension of a sliding window: input size, window size,
/// stride and dilation, and what they give (TFLite's `ComputeOutSize` and
/// `ComputePaddingHeightWidth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Window {
    /// Input positions.
    pub input: usize,
    /// Window taps.
    pub taps: usize,
    /// Step between windows.
    pub stride: usize,
    /// Step between taps.
    pub dilation: usize,
    /// Output positions.
    pub output: usize,
    /// Padding before the first input position.
    pub pad: usize,
}

impl Window {
    /// The window of `taps` taps over `input` positions.
    ///
    /// ```
    /// use kael_core::quant::{Padding, Window};
    /// let w = Window::new("conv", 9, 3, 2, 1, Padding::Same)?;
    /// assert_eq!((w.output, w.pad), (5, 1));
    /// let v = Window::new("conv", 9, 3, 2, 1, Padding::Valid)?;
    /// assert_eq!((v.output, v.pad), (4, 0));
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn new(
        op: &'static str,
        input: usize,
        taps: usize,
        stride: usize,
        dilation: usize,
        padding: Padding,
    ) -> Result<Window> {
        if taps == 0 || stride == 0 || dilation == 0 {
            return Err(Error::InvalidArgument {
                op,
                reason: "window size, stride and dilation must be at least 1",
            });
        }
        let overflow = Error::InvalidArgument {
            op,
            reason: "the window's extent (taps - 1) * dilation + 1 overflows usize; use a smaller window or dilation",
        };
        let effective = (taps - 1)
            .checked_mul(dilation)
            .and_then(|e| e.checked_add(1))
            .ok_or(overflow.clone())?;
        let output = match padding {
            Padding::Same => input.div_ceil(stride),
            Padding::Valid if input >= effective => (input - effective) / stride + 1,
            Padding::Valid => 0,
        };
        // TFLite: total = (output - 1) * stride + effective - input, at
        // least 0; the pad before is total / 2.
        let reach = output
            .saturating_sub(1)
            .checked_mul(stride)
            .and_then(|r| r.checked_add(effective))
            .ok_or(overflow)?;
        let pad = reach.saturating_sub(input) / 2;
        Ok(Window {
            input,
            taps,
            stride,
            dilation,
            output,
            pad,
        })
    }

    /// The input position of tap `tap` of window `out`, or `None` where it
    /// falls in the padding.
    #[inline(always)]
    fn at(&self, out: usize, tap: usize) -> Option<usize> {
        let p = (out * self.stride + tap * self.dilation).checked_sub(self.pad)?;
        (p < self.input).then_some(p)
    }

    /// The taps of window `out` that fall inside the input, for a window
    /// without dilation (TFLite's pooling clips its loops the same way, so
    /// a window far larger than the input costs no more than the input).
    #[inline]
    fn inside(&self, out: usize) -> core::ops::Range<usize> {
        let origin = out * self.stride;
        let start = self.pad.saturating_sub(origin);
        let end = (self.input + self.pad)
            .saturating_sub(origin)
            .min(self.taps);
        start..end.max(start)
    }
}

pub(super) fn length(op: &'static str, want: Option<usize>, got: usize) -> Result<()> {
    match want {
        Some(w) if w == got => Ok(()),
        Some(w) => Err(Error::ShapeMismatch {
            op,
            expected: ErrShape::of(&[w]),
            got: ErrShape::of(&[got]),
        }),
        None => Err(Error::InvalidArgument {
            op,
            reason: "the layer's sizes overflow usize; check the shapes it was built with",
        }),
    }
}

fn prod(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

/// An int8 fully-connected layer: `out[b, o] = requant(sum_i (in[b, i] -
/// zp_in) * w[o, i] + bias[o])`, TFLite's `FullyConnected` (per-tensor or
/// per-channel weights, which are symmetric).
///
/// ```
/// use kael_core::quant::{FullyConnected, Multiplier, Requantize, Rounding};
/// let m = [Multiplier::from_real(0.5)];
/// let fc = FullyConnected {
///     input_zero_point: 1,
///     filter: &[1, 2, -1, 0],
///     bias: Some(&[4, -4]),
///     in_features: 2,
///     out_features: 2,
///     requant: Requantize { multipliers: &m, zero_point: 0, min: -128, max: 127 },
///     rounding: Rounding::Once,
/// };
/// let mut out = [0i8; 2];
/// fc.run(&[3, 5], &mut out)?;
/// // (2*1 + 4*2 + 4) / 2 = 7; (2*-1 + 0 - 4) / 2 = -3
/// assert_eq!(out, [7, -3]);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct FullyConnected<'a> {
    /// The input's zero point.
    pub input_zero_point: i32,
    /// `[out_features, in_features]` weights.
    pub filter: &'a [i8],
    /// `[out_features]` biases (scale `input_scale * filter_scale`).
    pub bias: Option<&'a [i32]>,
    /// Inputs per row.
    pub in_features: usize,
    /// Outputs per row.
    pub out_features: usize,
    /// The output stage.
    pub requant: Requantize<'a>,
    /// How the output stage rounds: [`Rounding::Once`] as the TFLite
    /// interpreter, [`Rounding::Twice`] as TFLite Micro.
    pub rounding: Rounding,
}

impl FullyConnected<'_> {
    /// Runs the layer over `input` (`[batches, in_features]`, batches taken
    /// from its length) into `out` (`[batches, out_features]`).
    pub fn run(&self, input: &[i8], out: &mut [i8]) -> Result<()> {
        const OP: &str = "quant::fully_connected";
        self.requant.check(OP, self.out_features)?;
        length(
            OP,
            self.in_features.checked_mul(self.out_features),
            self.filter.len(),
        )?;
        if let Some(b) = self.bias {
            length(OP, Some(self.out_features), b.len())?;
        }
        if self.in_features == 0 || self.out_features == 0 {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: "a fully-connected layer needs at least one input and one output feature",
            });
        }
        let batches = input.len() / self.in_features;
        length(OP, batches.checked_mul(self.in_features), input.len())?;
        length(OP, batches.checked_mul(self.out_features), out.len())?;
        let offset = -self.input_zero_point;
        for (row, out_row) in input
            .chunks_exact(self.in_features)
            .zip(out.chunks_exact_mut(self.out_features))
        {
            for (o, (w_row, dst)) in self
                .filter
                .chunks_exact(self.in_features)
                .zip(out_row.iter_mut())
                .enumerate()
            {
                let mut acc = dot(row, w_row, offset);
                if let Some(b) = self.bias {
                    acc = acc.wrapping_add(b[o]);
                }
                *dst = self.requant.apply_rounding(acc, o, self.rounding);
            }
        }
        Ok(())
    }
}

/// The spatial geometry of a 2-d window layer over an NHWC input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Geometry {
    /// Batch size.
    pub batch: usize,
    /// Input channels.
    pub in_channels: usize,
    /// Output channels.
    pub out_channels: usize,
    /// The vertical window.
    pub h: Window,
    /// The horizontal window.
    pub w: Window,
}

impl Geometry {
    fn input_len(&self) -> Option<usize> {
        prod(&[self.batch, self.h.input, self.w.input, self.in_channels])
    }
    fn output_len(&self) -> Option<usize> {
        prod(&[self.batch, self.h.output, self.w.output, self.out_channels])
    }
}

/// An int8 2-d convolution, TFLite's `ConvPerChannel` (grouped when the
/// filter's input depth divides the input's channels).
///
/// ```
/// use kael_core::quant::{Conv2d, Geometry, Multiplier, Padding, Requantize, Window};
/// // One 2x2 input channel, one 2x2 filter of ones, valid: one output.
/// let m = [Multiplier::from_real(1.0 / 4.0)];
/// let h = Window::new("doc", 2, 2, 1, 1, Padding::Valid)?;
/// let conv = Conv2d {
///     geometry: Geometry { batch: 1, in_channels: 1, out_channels: 1, h, w: h },
///     input_zero_point: 0,
///     filter: &[1, 1, 1, 1],
///     bias: None,
///     requant: Requantize { multipliers: &m, zero_point: 0, min: -128, max: 127 },
/// };
/// let mut out = [0i8; 1];
/// conv.run(&[4, 8, 12, 16], &mut out)?;
/// assert_eq!(out, [10]);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Conv2d<'a> {
    /// Sizes and windows.
    pub geometry: Geometry,
    /// The input's zero point.
    pub input_zero_point: i32,
    /// `[out_c, kh, kw, in_c / groups]` weights.
    pub filter: &'a [i8],
    /// `[out_c]` biases.
    pub bias: Option<&'a [i32]>,
    /// The output stage.
    pub requant: Requantize<'a>,
}

impl Conv2d<'_> {
    /// Runs the convolution from `input` (NHWC) into `out` (NHWC).
    pub fn run(&self, input: &[i8], out: &mut [i8]) -> Result<()> {
        const OP: &str = "quant::conv2d";
        let g = &self.geometry;
        self.requant.check(OP, g.out_channels)?;
        length(OP, g.input_len(), input.len())?;
        length(OP, g.output_len(), out.len())?;
        let taps = prod(&[g.out_channels, g.h.taps, g.w.taps]);
        let depth = match taps {
            Some(t) if t > 0 && self.filter.len() % t == 0 => self.filter.len() / t,
            _ => 0,
        };
        if depth == 0
            || g.in_channels == 0
            || g.in_channels % depth != 0
            || g.out_channels % (g.in_channels / depth) != 0
        {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: "the filter must be [out_c, kh, kw, in_c / groups] with groups dividing both in_c and out_c; check the filter's length against the layer's channels and window",
            });
        }
        if let Some(b) = self.bias {
            length(OP, Some(g.out_channels), b.len())?;
        }
        let per_group = g.out_channels / (g.in_channels / depth);
        let offset = -self.input_zero_point;
        let mut dst = out.iter_mut();
        for b in 0..g.batch {
            for oy in 0..g.h.output {
                for ox in 0..g.w.output {
                    for oc in 0..g.out_channels {
                        let group = oc / per_group;
                        let mut acc = 0i32;
                        for fy in 0..g.h.taps {
                            let Some(iy) = g.h.at(oy, fy) else { continue };
                            for fx in 0..g.w.taps {
                                let Some(ix) = g.w.at(ox, fx) else { continue };
                                let x0 = ((b * g.h.input + iy) * g.w.input + ix) * g.in_channels
                                    + group * depth;
                                let f0 = ((oc * g.h.taps + fy) * g.w.taps + fx) * depth;
                                acc = acc.wrapping_add(dot(
                                    &input[x0..x0 + depth],
                                    &self.filter[f0..f0 + depth],
                                    offset,
                                ));
                            }
                        }
                        if let Some(bias) = self.bias {
                            acc = acc.wrapping_add(bias[oc]);
                        }
                        if let Some(d) = dst.next() {
                            *d = self.requant.apply(acc, oc);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// An int8 depthwise convolution, TFLite's `DepthwiseConvPerChannel`:
/// output channel `c * multiplier + m` filters input channel `c`.
///
/// ```
/// use kael_core::quant::{DepthwiseConv2d, Geometry, Multiplier, Padding, Requantize, Window};
/// let m = [Multiplier::from_real(1.0)];
/// let one = Window::new("doc", 1, 1, 1, 1, Padding::Valid)?;
/// let dw = DepthwiseConv2d {
///     geometry: Geometry { batch: 1, in_channels: 2, out_channels: 4, h: one, w: one },
///     input_zero_point: 0,
///     filter: &[1, 2, 3, 4],
///     bias: None,
///     requant: Requantize { multipliers: &m, zero_point: 0, min: -128, max: 127 },
/// };
/// let mut out = [0i8; 4];
/// dw.run(&[10, 20], &mut out)?;
/// assert_eq!(out, [10, 20, 60, 80]);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct DepthwiseConv2d<'a> {
    /// Sizes and windows; `out_channels` is `in_channels * multiplier`.
    pub geometry: Geometry,
    /// The input's zero point.
    pub input_zero_point: i32,
    /// `[1, kh, kw, out_c]` weights.
    pub filter: &'a [i8],
    /// `[out_c]` biases.
    pub bias: Option<&'a [i32]>,
    /// The output stage.
    pub requant: Requantize<'a>,
}

/// One tap of a depthwise window into output channels `c0..c0 +
/// acc.len()`: output channel `c` reads input channel `c / mult`
/// (NOTE [Depthwise loop order]).
#[inline(always)]
fn depthwise_tap(
    acc: &mut [i32],
    fs: &[i8],
    xs: &[i8],
    c0: (usize, usize),
    mult: usize,
    offset: i32,
) {
    // c0 = (ic, m): the chunk's first channel is ic * mult + m.
    let (mut ic, m0) = c0;
    if mult == 1 {
        let xs = xs.get(ic..).unwrap_or(&[]);
        for ((a, &f), &x) in acc.iter_mut().zip(fs).zip(xs) {
            *a = a.wrapping_add((x as i32 + offset).wrapping_mul(f as i32));
        }
        return;
    }
    // Runs of channels that read one input channel, its value hoisted.
    let (mut done, mut m) = (0, m0);
    while done < acc.len() {
        let run = (mult - m).min(acc.len() - done);
        let x = xs.get(ic).copied().unwrap_or(0) as i32 + offset;
        for (a, &f) in acc[done..done + run].iter_mut().zip(&fs[done..]) {
            *a = a.wrapping_add(x.wrapping_mul(f as i32));
        }
        done += run;
        (ic, m) = (ic + 1, 0);
    }
}

impl DepthwiseConv2d<'_> {
    /// Runs the convolution from `input` (NHWC) into `out` (NHWC).
    pub fn run(&self, input: &[i8], out: &mut [i8]) -> Result<()> {
        const OP: &str = "quant::depthwise_conv2d";
        let g = &self.geometry;
        self.requant.check(OP, g.out_channels)?;
        if g.in_channels == 0 || g.out_channels % g.in_channels != 0 {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: "a depthwise layer's output channels must be a multiple of its input channels (in_c * depth multiplier)",
            });
        }
        length(OP, g.input_len(), input.len())?;
        length(OP, g.output_len(), out.len())?;
        length(
            OP,
            prod(&[g.h.taps, g.w.taps, g.out_channels]),
            self.filter.len(),
        )?;
        if let Some(b) = self.bias {
            length(OP, Some(g.out_channels), b.len())?;
        }
        // NOTE [Depthwise loop order]
        // TFLite's reference loop nest puts the taps innermost, which
        // recomputes two input and one filter index per multiply-add. Here
        // the output channels are innermost, in chunks of CHUNK `i32`
        // accumulators on the stack: for each tap inside the input, one
        // contiguous run of filter values (NHWC filters keep a tap's
        // output channels together) against the input pixel's channels.
        // Integer sums are exact, so the order changes no bit of the output;
        // on Cortex-M this is several times fewer instructions.
        const CHUNK: usize = 32;
        let mult = g.out_channels / g.in_channels;
        let offset = -self.input_zero_point;
        let mut dst = out.iter_mut();
        let mut acc = [0i32; CHUNK];
        for b in 0..g.batch {
            for oy in 0..g.h.output {
                for ox in 0..g.w.output {
                    let mut c0 = 0;
                    while c0 < g.out_channels {
                        let len = CHUNK.min(g.out_channels - c0);
                        let first = (c0 / mult, c0 % mult);
                        let acc = &mut acc[..len];
                        match self.bias {
                            Some(bias) => acc.copy_from_slice(&bias[c0..c0 + len]),
                            None => acc.fill(0),
                        }
                        for fy in 0..g.h.taps {
                            let Some(iy) = g.h.at(oy, fy) else { continue };
                            for fx in 0..g.w.taps {
                                let Some(ix) = g.w.at(ox, fx) else { continue };
                                let x0 = ((b * g.h.input + iy) * g.w.input + ix) * g.in_channels;
                                let xs = &input[x0..x0 + g.in_channels];
                                let f0 = (fy * g.w.taps + fx) * g.out_channels + c0;
                                let fs = &self.filter[f0..f0 + len];
                                depthwise_tap(acc, fs, xs, first, mult, offset);
                            }
                        }
                        for (j, &a) in acc.iter().enumerate() {
                            if let Some(d) = dst.next() {
                                *d = self.requant.apply(a, c0 + j);
                            }
                        }
                        c0 += len;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Which reduction a pooling layer takes over its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PoolKind {
    /// The mean of the taps inside the input, rounded half away from zero.
    Average,
    /// The largest tap.
    Max,
}

/// An int8 pooling layer (TFLite's `AveragePool` / `MaxPool`: the output
/// keeps the input's quantization; padding taps are left out, not
/// counted as zeros).
///
/// ```
/// use kael_core::quant::{Geometry, Padding, Pool2d, PoolKind, Window};
/// let w = Window::new("doc", 2, 2, 2, 1, Padding::Valid)?;
/// let g = Geometry { batch: 1, in_channels: 1, out_channels: 1, h: w, w };
/// let mut out = [0i8; 1];
/// Pool2d { geometry: g, kind: PoolKind::Average, min: -128, max: 127 }.run(&[1, 2, 3, 5], &mut out)?;
/// assert_eq!(out, [3]); // 11 / 4 = 2.75
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Pool2d {
    /// Sizes and windows (`out_channels == in_channels`).
    pub geometry: Geometry,
    /// Average or max.
    pub kind: PoolKind,
    /// The fused activation's lowest output.
    pub min: i32,
    /// The fused activation's highest output.
    pub max: i32,
}

impl Pool2d {
    /// Pools `input` (NHWC) into `out` (NHWC).
    pub fn run(&self, input: &[i8], out: &mut [i8]) -> Result<()> {
        const OP: &str = "quant::pool2d";
        let g = &self.geometry;
        if g.in_channels != g.out_channels || g.h.dilation != 1 || g.w.dilation != 1 {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: "pooling keeps the channels and takes no dilation; build its geometry with out_channels == in_channels and dilation 1",
            });
        }
        length(OP, g.input_len(), input.len())?;
        length(OP, g.output_len(), out.len())?;
        let mut dst = out.iter_mut();
        for b in 0..g.batch {
            for oy in 0..g.h.output {
                for ox in 0..g.w.output {
                    for c in 0..g.in_channels {
                        let (mut acc, mut count) = (0i32, 0i32);
                        let mut best = Q_MIN;
                        for fy in g.h.inside(oy) {
                            let iy = oy * g.h.stride + fy - g.h.pad;
                            for fx in g.w.inside(ox) {
                                let ix = ox * g.w.stride + fx - g.w.pad;
                                let x = input
                                    [((b * g.h.input + iy) * g.w.input + ix) * g.in_channels + c]
                                    as i32;
                                acc = acc.wrapping_add(x);
                                best = best.max(x);
                                count += 1;
                            }
                        }
                        let v = match self.kind {
                            PoolKind::Max => best,
                            // TFLite: a window with no taps inside is an error.
                            PoolKind::Average if count == 0 => {
                                return Err(Error::InvalidArgument {
                                    op: OP,
                                    reason: "a pooling window lies wholly in the padding; use a window larger than the padding",
                                });
                            }
                            PoolKind::Average if acc > 0 => (acc + count / 2) / count,
                            PoolKind::Average => (acc - count / 2) / count,
                        };
                        if let Some(d) = dst.next() {
                            *d = v.clamp(self.min, self.max).clamp(Q_MIN, Q_MAX) as i8;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// `f32` to int8 (TFLite's reference `AffineQuantize`: `zero_point +
/// round(x / scale)`, the division in `f32`, clamped; NaN becomes the zero
/// point).
///
/// ```
/// use kael_core::quant::quantize_into;
/// let mut q = [0i8; 3];
/// quantize_into(&[0.26, -1.0, 1e9], 0.1, 2, &mut q)?;
/// assert_eq!(q, [5, -8, 127]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn quantize_into(x: &[f32], scale: f32, zero_point: i32, out: &mut [i8]) -> Result<()> {
    length("quant::quantize", Some(x.len()), out.len())?;
    for (&v, d) in x.iter().zip(out.iter_mut()) {
        let q = (libm::roundf(v / scale) as i32).saturating_add(zero_point);
        *d = q.clamp(Q_MIN, Q_MAX) as i8;
    }
    Ok(())
}

/// int8 to `f32` (TFLite's reference `Dequantize`: `scale * (q -
/// zero_point)` in `f64`, rounded once to `f32`). Computed in `f32`, with
/// the same result: `q - zero_point` has at most 9 significant bits, so the
/// `f64` product is exact and both round the exact product once (and
/// Cortex-M4F multiplies `f32` in hardware, `f64` in 0.8 KB of software).
///
/// ```
/// use kael_core::quant::dequantize_into;
/// let mut x = [0f32; 2];
/// dequantize_into(&[5, -8], 0.1, 2, &mut x)?;
/// assert_eq!(x, [0.3f32, -1.0]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn dequantize_into(q: &[i8], scale: f32, zero_point: i32, out: &mut [f32]) -> Result<()> {
    length("quant::dequantize", Some(q.len()), out.len())?;
    for (&v, d) in q.iter().zip(out.iter_mut()) {
        *d = scale * (v as i32 - zero_point) as f32;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    // NOTE [Miri runs the unsafe code]: arithmetic over thousands of
    // values, no unsafe code (minutes under Miri); it runs natively.
    #[cfg_attr(miri, ignore)]
    fn dequantize_in_f32_equals_tflites_f64_formula() {
        // Every int8 value and zero point, over scales from subnormal
        // results to huge ones (random bits plus the usual range).
        let mut s = 0x9e37_79b9u32;
        let q: alloc::vec::Vec<i8> = (-128..=127).map(|v| v as i8).collect();
        let mut out = [0f32; 256];
        for k in 0..4000 {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            let bits = if k % 2 == 0 {
                0x3000_0000 | (s & 0x0fff_ffff)
            } else {
                s & 0x7f7f_ffff
            };
            let scale = f32::from_bits(bits);
            let zero_point = k % 256 - 128;
            dequantize_into(&q, scale, zero_point, &mut out).unwrap();
            for (&v, &got) in q.iter().zip(&out) {
                let want = (scale as f64 * (v as i32 - zero_point) as f64) as f32;
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "scale {scale:e}, q {v}, zp {zero_point}"
                );
            }
        }
    }
}
