//! The operator kernels a [`Model`] can be parsed with ([`OpKernel`]):
//! for each TFLite builtin, how to read its options, check it against its
//! tensors and work out its plan once (TFLite's `Prepare`), and run it.
//!
//! NOTE [Kernel registration]
//! As with TFLite Micro's `MicroMutableOpResolver`, firmware passes
//! [`Model::parse_with`] only the kernels its model uses, and only those are
//! linked: each [`OpKernel`] holds function pointers, a parsed operator
//! keeps its kernel's `invoke`, and [`Model::run`] calls it, so no code path
//! reaches a kernel that was not registered. [`Model::parse`] registers
//! [`OpKernel::ALL`]. The sine model's image drops the convolution,
//! pooling, add and softmax kernels this way (firmware-examples/README.md
//! gives the flash figures).

use super::{ElementType, Model, OpKind, TensorInfo, Value, activation, positive, window_options};
use crate::error::{ErrShape, Error, Result};
use crate::quant::elementwise::{Add, Broadcast, Relu};
use crate::quant::fixed_point::Multiplier;
use crate::quant::flatbuffer::Table;
use crate::quant::kernels::{
    self, Conv2d, DepthwiseConv2d, FullyConnected, Geometry, Pool2d, PoolKind, Requantize, Rounding,
};
use crate::quant::params::{Activation, QuantParams};
use crate::quant::qtensor::{Conv2dOptions, layer_multipliers, nhwc_geometry};
use crate::quant::softmax::Softmax;
use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

const PARSE: &str = "tflite::Model::parse";
const RUN: &str = "tflite::Model::run";

fn bad(reason: &'static str) -> Error {
    Error::InvalidArgument { op: PARSE, reason }
}

fn run_err(reason: &'static str) -> Error {
    Error::InvalidArgument { op: RUN, reason }
}

/// The builtin codes of [`OpKernel::ALL`], without the kernels.
pub(super) const CODES: [i32; 12] = [114, 6, 22, 9, 3, 4, 1, 17, 0, 25, 19, 21];

/// One operator's tensors, as its kernel's prepare step sees them.
pub(super) struct Site<'s, 'a> {
    pub(super) tensors: &'s [TensorInfo<'a>],
    pub(super) inputs: &'s [Option<usize>],
    pub(super) output: usize,
    /// The operator's options table, when the file has one.
    pub(super) options: Option<Table<'a>>,
}

impl<'a> Site<'_, 'a> {
    fn input(&self, k: usize) -> Result<&TensorInfo<'a>> {
        info(self.tensors, self.inputs.get(k).copied().flatten())
    }
    fn output(&self) -> Result<&TensorInfo<'a>> {
        info(self.tensors, Some(self.output))
    }
    fn options(&self) -> Result<&Table<'a>> {
        self.options
            .as_ref()
            .ok_or_else(|| bad("an operator lacks its options table"))
    }
}

/// What one operator reads while a model runs: the model (for constant
/// tensors) and the values computed so far.
pub(super) struct Values<'v, 'a> {
    pub(super) model: &'v Model<'a>,
    pub(super) values: &'v mut [Option<Value>],
    /// The graph's inputs as given to [`Model::run`] (read in place, not
    /// copied), in the order of `model.inputs`.
    pub(super) given: &'v [Value],
    pub(super) inputs: &'v [Option<usize>],
    /// The tensors this operator reads last (it may take their values).
    pub(super) last_reads: &'v [usize],
    /// Elements of the operator's output.
    pub(super) len: usize,
}

impl Values<'_, '_> {
    /// Input `k`'s int8 values, moved out when this operator is their
    /// last reader (no copy), copied otherwise.
    fn take_i8s(&mut self, k: usize) -> Result<Vec<i8>> {
        if let Some(t) = self.inputs.get(k).copied().flatten() {
            if self.last_reads.contains(&t) {
                if let Some(slot) = self.values.get_mut(t) {
                    if let Some(Value::I8(v)) = slot.take() {
                        return Ok(v);
                    }
                }
            }
        }
        Ok(self.i8s(k)?.to_vec())
    }

    /// The value of input `k`: a graph input as given, or what an
    /// earlier operator wrote.
    fn value(&self, k: usize) -> Option<&Value> {
        let t = self.inputs.get(k).copied().flatten()?;
        match self.model.inputs.iter().position(|&g| g == t) {
            Some(at) => self.given.get(at),
            None => self.values.get(t)?.as_ref(),
        }
    }

    fn i8s(&self, k: usize) -> Result<&[i8]> {
        let t = self
            .inputs
            .get(k)
            .copied()
            .flatten()
            .ok_or_else(|| run_err("an operator lacks a required input"))?;
        if let Some(d) = self.model.tensors.get(t).and_then(|i| i.data) {
            return Ok(bytemuck::cast_slice(d));
        }
        match self.value(k) {
            Some(Value::I8(v)) => Ok(v),
            _ => Err(run_err(
                "an operator reads an int8 tensor that no earlier operator wrote",
            )),
        }
    }
}

/// A kernel's prepare step: the operator's kind and plan.
type Prepare = for<'s, 'a> fn(&Site<'s, 'a>) -> Result<(OpKind, Plan)>;
/// A kernel's run step: the operator's output.
pub(super) type Invoke = for<'v, 'a> fn(&Plan, &mut Values<'v, 'a>) -> Result<Value>;

/// An operator kernel to parse a model with (NOTE [Kernel registration]):
/// TFLite's builtin code, and how to prepare and run it.
///
/// ```
/// use kael_core::quant::{Model, OpKernel, Value};
/// let bytes: &[u8] = include_bytes!("../../../../tests/data/tflite/sine.tflite");
/// // The sine model needs three kernels; an image that registers only
/// // these links no convolution, pooling, add or softmax code.
/// let kernels = [OpKernel::QUANTIZE, OpKernel::FULLY_CONNECTED, OpKernel::DEQUANTIZE];
/// let model = Model::parse_with(bytes, &kernels)?;
/// let out = model.run(&[Value::F32(vec![0.0])])?;
/// assert_eq!(out.len(), 1);
/// // Without FULLY_CONNECTED the model is refused, naming the operator.
/// let e = Model::parse_with(bytes, &kernels[..1]).unwrap_err();
/// assert!(e.to_string().contains("FULLY_CONNECTED"));
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Clone, Copy)]
pub struct OpKernel {
    code: i32,
    prepare: Prepare,
    invoke: Invoke,
}

impl core::fmt::Debug for OpKernel {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(crate::quant::builtin_name(self.code))
    }
}

impl OpKernel {
    /// `QUANTIZE` (float32 to int8).
    pub const QUANTIZE: OpKernel = OpKernel {
        code: 114,
        prepare: prepare_quantize,
        invoke: invoke_quantize,
    };
    /// `DEQUANTIZE` (int8 to float32).
    pub const DEQUANTIZE: OpKernel = OpKernel {
        code: 6,
        prepare: prepare_dequantize,
        invoke: invoke_dequantize,
    };
    /// `RESHAPE`.
    pub const RESHAPE: OpKernel = OpKernel {
        code: 22,
        prepare: prepare_reshape,
        invoke: invoke_reshape,
    };
    /// `FULLY_CONNECTED`, with fused NONE/RELU/RELU6.
    pub const FULLY_CONNECTED: OpKernel = OpKernel {
        code: 9,
        prepare: prepare_fully_connected,
        invoke: invoke_fully_connected,
    };
    /// `CONV_2D` (stride, dilation, SAME/VALID, groups).
    pub const CONV_2D: OpKernel = OpKernel {
        code: 3,
        prepare: prepare_conv_2d,
        invoke: invoke_conv_2d,
    };
    /// `DEPTHWISE_CONV_2D` (stride, dilation, SAME/VALID, depth multiplier).
    pub const DEPTHWISE_CONV_2D: OpKernel = OpKernel {
        code: 4,
        prepare: prepare_depthwise_conv_2d,
        invoke: invoke_depthwise_conv_2d,
    };
    /// `AVERAGE_POOL_2D`.
    pub const AVERAGE_POOL_2D: OpKernel = OpKernel {
        code: 1,
        prepare: prepare_average_pool_2d,
        invoke: invoke_pool_2d,
    };
    /// `MAX_POOL_2D`.
    pub const MAX_POOL_2D: OpKernel = OpKernel {
        code: 17,
        prepare: prepare_max_pool_2d,
        invoke: invoke_pool_2d,
    };
    /// `ADD`, with broadcasting and fused NONE/RELU/RELU6.
    pub const ADD: OpKernel = OpKernel {
        code: 0,
        prepare: prepare_add,
        invoke: invoke_add,
    };
    /// `RELU` as an operator of its own (it requantizes).
    pub const RELU: OpKernel = OpKernel {
        code: 19,
        prepare: prepare_relu,
        invoke: invoke_relu,
    };
    /// `RELU6` as an operator of its own (it requantizes).
    pub const RELU6: OpKernel = OpKernel {
        code: 21,
        prepare: prepare_relu6,
        invoke: invoke_relu,
    };
    /// `SOFTMAX` over the last dimension.
    pub const SOFTMAX: OpKernel = OpKernel {
        code: 25,
        prepare: prepare_softmax,
        invoke: invoke_softmax,
    };
    /// Every kernel kael runs ([`Model::parse`] registers these).
    pub const ALL: &'static [OpKernel] = &[
        OpKernel::QUANTIZE,
        OpKernel::DEQUANTIZE,
        OpKernel::RESHAPE,
        OpKernel::FULLY_CONNECTED,
        OpKernel::CONV_2D,
        OpKernel::DEPTHWISE_CONV_2D,
        OpKernel::AVERAGE_POOL_2D,
        OpKernel::MAX_POOL_2D,
        OpKernel::ADD,
        OpKernel::SOFTMAX,
        OpKernel::RELU,
        OpKernel::RELU6,
    ];

    /// TFLite's builtin operator code for this kernel.
    ///
    /// ```
    /// assert_eq!(kael_core::quant::OpKernel::SOFTMAX.code(), 25);
    /// ```
    pub fn code(&self) -> i32 {
        self.code
    }

    pub(super) fn prepare(&self, site: &Site<'_, '_>) -> Result<(OpKind, Plan)> {
        (self.prepare)(site)
    }

    pub(super) fn invoke(&self) -> Invoke {
        self.invoke
    }
}

/// The output stage of a layer: zero point and fused-activation clamp.
#[derive(Debug, Clone, Copy)]
pub(super) struct OutStage {
    zero_point: i32,
    min: i32,
    max: i32,
}

impl OutStage {
    fn requantize<'m>(&self, multipliers: &'m [Multiplier]) -> Requantize<'m> {
        Requantize {
            multipliers,
            zero_point: self.zero_point,
            min: self.min,
            max: self.max,
        }
    }
}

/// What a kernel's prepare step works out once per operator, so that its
/// run step only computes (TFLite's `Prepare`): multipliers in `f64`,
/// biases decoded, clamps, window geometry, and every size checked against
/// the operator's declared output.
#[derive(Debug, Clone)]
pub(super) enum Plan {
    Quantize {
        scale: f32,
        zero_point: i32,
    },
    Dequantize {
        scale: f32,
        zero_point: i32,
    },
    Reshape,
    FullyConnected {
        input_zero_point: i32,
        in_features: usize,
        out_features: usize,
        multipliers: Vec<Multiplier>,
        bias: Option<Vec<i32>>,
        out: OutStage,
    },
    Conv {
        geometry: Geometry,
        input_zero_point: i32,
        multipliers: Vec<Multiplier>,
        bias: Option<Vec<i32>>,
        out: OutStage,
    },
    Pool(Pool2d),
    /// An add, and how its operands broadcast when their shapes differ
    /// (boxed: a `Broadcast` is about 90 bytes on a 32-bit core, and every
    /// operator's plan would otherwise be that large).
    Add(Add, Option<Box<Broadcast>>),
    Relu(Relu),
    Softmax(Softmax),
}

/// A plan that is not its kernel's (cannot happen: an operator keeps the
/// plan and the invoke of one kernel).
fn wrong_plan() -> Error {
    run_err(
        "an operator's plan does not belong to its kernel; this is a bug in kael, please report it",
    )
}

fn info<'t, 'a>(tensors: &'t [TensorInfo<'a>], t: Option<usize>) -> Result<&'t TensorInfo<'a>> {
    t.and_then(|t| tensors.get(t))
        .ok_or_else(|| bad("an operator lacks a required input"))
}

fn params<'t>(t: &'t TensorInfo<'_>) -> Result<&'t QuantParams> {
    t.params
        .as_ref()
        .ok_or_else(|| bad("an int8 tensor has no quantization parameters"))
}

fn numel(t: &TensorInfo<'_>) -> Result<usize> {
    t.numel()
        .ok_or_else(|| bad("a tensor's size overflows usize"))
}

fn int8(t: &TensorInfo<'_>) -> Result<()> {
    if t.dtype != ElementType::I8 {
        return Err(bad(
            "an operator reads or writes a tensor that is not int8 where int8 is needed",
        ));
    }
    Ok(())
}

/// An output's declared size must be what its operator computes from its
/// inputs' declared sizes.
fn same_len(computed: usize, declared: usize) -> Result<()> {
    if computed != declared {
        return Err(bad(
            "an operator's output tensor is declared with a size its inputs do not give; the file is corrupted",
        ));
    }
    Ok(())
}

fn bias(
    tensors: &[TensorInfo<'_>],
    t: Option<&Option<usize>>,
    channels: usize,
) -> Result<Option<Vec<i32>>> {
    let Some(Some(t)) = t else { return Ok(None) };
    let b = info(tensors, Some(*t))?;
    let data = b.data.ok_or_else(|| bad("a bias is not a constant"))?;
    if b.dtype != ElementType::I32 || data.len() != channels.saturating_mul(4) {
        return Err(bad(
            "a bias must be int32 with one value per output channel",
        ));
    }
    Ok(Some(
        data.chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    ))
}

fn out_stage(act: Activation, out: &QuantParams) -> OutStage {
    let (min, max) = act.range(out);
    OutStage {
        zero_point: out.zero_point(0),
        min,
        max,
    }
}

fn check_out(g: &Geometry, out: &TensorInfo<'_>) -> Result<()> {
    let want = [g.batch, g.h.output, g.w.output, g.out_channels];
    if out.shape != want {
        return Err(Error::ShapeMismatch {
            op: PARSE,
            expected: ErrShape::of(&want),
            got: ErrShape::of(&out.shape),
        });
    }
    Ok(())
}

fn quantize_params(p: &QuantParams) -> (f32, i32) {
    (p.scale(0), p.zero_point(0))
}

fn prepare_quantize(s: &Site<'_, '_>) -> Result<(OpKind, Plan)> {
    let (x, out) = (s.input(0)?, s.output()?);
    int8(out)?;
    if x.dtype != ElementType::F32 {
        return Err(bad(
            "QUANTIZE from a type other than float32 (requantization) is not supported yet",
        ));
    }
    same_len(numel(x)?, numel(out)?)?;
    let (scale, zero_point) = quantize_params(params(out)?);
    Ok((OpKind::Quantize, Plan::Quantize { scale, zero_point }))
}

fn invoke_quantize(plan: &Plan, v: &mut Values<'_, '_>) -> Result<Value> {
    let Plan::Quantize { scale, zero_point } = plan else {
        return Err(wrong_plan());
    };
    let src = match v.value(0) {
        Some(Value::F32(x)) => x,
        _ => {
            return Err(run_err(
                "QUANTIZE reads a float tensor that no earlier operator wrote",
            ));
        }
    };
    let mut out = vec![0i8; v.len];
    kernels::quantize_into(src, *scale, *zero_point, &mut out)?;
    Ok(Value::I8(out))
}

fn prepare_dequantize(s: &Site<'_, '_>) -> Result<(OpKind, Plan)> {
    let (x, out) = (s.input(0)?, s.output()?);
    int8(x)?;
    if out.dtype != ElementType::F32 {
        return Err(bad(
            "DEQUANTIZE to a type other than float32 is not supported",
        ));
    }
    same_len(numel(x)?, numel(out)?)?;
    let (scale, zero_point) = quantize_params(params(x)?);
    Ok((OpKind::Dequantize, Plan::Dequantize { scale, zero_point }))
}

fn invoke_dequantize(plan: &Plan, v: &mut Values<'_, '_>) -> Result<Value> {
    let Plan::Dequantize { scale, zero_point } = plan else {
        return Err(wrong_plan());
    };
    let mut out = vec![0f32; v.len];
    kernels::dequantize_into(v.i8s(0)?, *scale, *zero_point, &mut out)?;
    Ok(Value::F32(out))
}

fn prepare_reshape(s: &Site<'_, '_>) -> Result<(OpKind, Plan)> {
    let (x, out) = (s.input(0)?, s.output()?);
    int8(x)?;
    int8(out)?;
    same_len(numel(x)?, numel(out)?)?;
    Ok((OpKind::Reshape, Plan::Reshape))
}

fn invoke_reshape(_: &Plan, v: &mut Values<'_, '_>) -> Result<Value> {
    Ok(Value::I8(v.take_i8s(0)?))
}

fn prepare_fully_connected(s: &Site<'_, '_>) -> Result<(OpKind, Plan)> {
    let act = activation(s.options()?.u8(0, 0)?)?;
    let (x, w, out) = (s.input(0)?, s.input(1)?, s.output()?);
    int8(x)?;
    int8(w)?;
    int8(out)?;
    if w.shape.len() != 2 || w.data.is_none() {
        return Err(bad("a fully-connected weight must be a constant [out, in]"));
    }
    let (outs, ins) = (w.shape[0], w.shape[1]);
    let rows = numel(x)?.checked_div(ins).unwrap_or(0);
    same_len(rows.saturating_mul(ins), numel(x)?)?;
    same_len(rows.saturating_mul(outs), numel(out)?)?;
    let (px, pw, po) = (params(x)?, params(w)?, params(out)?);
    if pw.channels() != 1 && pw.channels() != outs {
        return Err(bad(
            "a fully-connected weight's per-channel scales do not match its output channels",
        ));
    }
    let plan = Plan::FullyConnected {
        input_zero_point: px.zero_point(0),
        in_features: ins,
        out_features: outs,
        multipliers: layer_multipliers(px, pw, po),
        bias: bias(s.tensors, s.inputs.get(2), outs)?,
        out: out_stage(act, po),
    };
    Ok((OpKind::FullyConnected(act), plan))
}

fn invoke_fully_connected(plan: &Plan, v: &mut Values<'_, '_>) -> Result<Value> {
    let Plan::FullyConnected {
        input_zero_point,
        in_features,
        out_features,
        multipliers,
        bias,
        out,
    } = plan
    else {
        return Err(wrong_plan());
    };
    let mut dst = vec![0i8; v.len];
    FullyConnected {
        input_zero_point: *input_zero_point,
        filter: v.i8s(1)?,
        bias: bias.as_deref(),
        in_features: *in_features,
        out_features: *out_features,
        requant: out.requantize(multipliers),
        rounding: Rounding::Once,
    }
    .run(v.i8s(0)?, &mut dst)?;
    Ok(Value::I8(dst))
}

/// Conv and depthwise conv share their checks: the filter's output
/// channels are its dimension 0 for a conv, 3 for a depthwise conv.
fn prepare_window_layer(
    s: &Site<'_, '_>,
    depthwise: bool,
) -> Result<(Conv2dOptions, Activation, Plan)> {
    let t = s.options()?;
    let (o, act) = if depthwise {
        (window_options(t, Some((5, 6)))?, activation(t.u8(4, 0)?)?)
    } else {
        (window_options(t, Some((4, 5)))?, activation(t.u8(3, 0)?)?)
    };
    let (x, w, out) = (s.input(0)?, s.input(1)?, s.output()?);
    int8(x)?;
    int8(w)?;
    int8(out)?;
    let fs = &w.shape;
    if fs.len() != 4 || w.data.is_none() {
        return Err(bad("a convolution filter must be a constant of rank 4"));
    }
    let out_c = if depthwise { fs[3] } else { fs[0] };
    let g = nhwc_geometry(PARSE, &x.shape, [fs[1], fs[2]], out_c, &o)?;
    check_out(&g, out)?;
    let (px, pw, po) = (params(x)?, params(w)?, params(out)?);
    if pw.channels() != 1 && pw.channels() != out_c {
        return Err(bad(
            "a convolution filter's per-channel scales do not match its output channels",
        ));
    }
    let plan = Plan::Conv {
        geometry: g,
        input_zero_point: px.zero_point(0),
        multipliers: layer_multipliers(px, pw, po),
        bias: bias(s.tensors, s.inputs.get(2), out_c)?,
        out: out_stage(act, po),
    };
    Ok((o, act, plan))
}

fn prepare_conv_2d(s: &Site<'_, '_>) -> Result<(OpKind, Plan)> {
    let (o, act, plan) = prepare_window_layer(s, false)?;
    Ok((OpKind::Conv2d(o, act), plan))
}

fn prepare_depthwise_conv_2d(s: &Site<'_, '_>) -> Result<(OpKind, Plan)> {
    let (o, act, plan) = prepare_window_layer(s, true)?;
    Ok((OpKind::DepthwiseConv2d(o, act), plan))
}

// The conv and depthwise invokes stay two functions: one that picked the
// kernel from the plan would link both kernels into an image that
// registers only one of them (NOTE [Kernel registration]).
fn invoke_conv_2d(plan: &Plan, v: &mut Values<'_, '_>) -> Result<Value> {
    let Plan::Conv {
        geometry,
        input_zero_point,
        multipliers,
        bias,
        out,
    } = plan
    else {
        return Err(wrong_plan());
    };
    let mut dst = vec![0i8; v.len];
    Conv2d {
        geometry: *geometry,
        input_zero_point: *input_zero_point,
        filter: v.i8s(1)?,
        bias: bias.as_deref(),
        requant: out.requantize(multipliers),
    }
    .run(v.i8s(0)?, &mut dst)?;
    Ok(Value::I8(dst))
}

fn invoke_depthwise_conv_2d(plan: &Plan, v: &mut Values<'_, '_>) -> Result<Value> {
    let Plan::Conv {
        geometry,
        input_zero_point,
        multipliers,
        bias,
        out,
    } = plan
    else {
        return Err(wrong_plan());
    };
    let mut dst = vec![0i8; v.len];
    DepthwiseConv2d {
        geometry: *geometry,
        input_zero_point: *input_zero_point,
        filter: v.i8s(1)?,
        bias: bias.as_deref(),
        requant: out.requantize(multipliers),
    }
    .run(v.i8s(0)?, &mut dst)?;
    Ok(Value::I8(dst))
}

fn prepare_pool_2d(s: &Site<'_, '_>, kind: PoolKind) -> Result<(OpKind, Plan)> {
    let t = s.options()?;
    let window = [positive(t.i32(4, 0)?)?, positive(t.i32(3, 0)?)?];
    let (o, act) = (window_options(t, None)?, activation(t.u8(5, 0)?)?);
    let (x, out) = (s.input(0)?, s.output()?);
    int8(x)?;
    int8(out)?;
    let g = nhwc_geometry(
        PARSE,
        &x.shape,
        window,
        x.shape.get(3).copied().unwrap_or(0),
        &o,
    )?;
    check_out(&g, out)?;
    let (min, max) = act.range(params(out)?);
    let plan = Plan::Pool(Pool2d {
        geometry: g,
        kind,
        min,
        max,
    });
    Ok((OpKind::Pool2d(kind, window, o, act), plan))
}

fn prepare_average_pool_2d(s: &Site<'_, '_>) -> Result<(OpKind, Plan)> {
    prepare_pool_2d(s, PoolKind::Average)
}

fn prepare_max_pool_2d(s: &Site<'_, '_>) -> Result<(OpKind, Plan)> {
    prepare_pool_2d(s, PoolKind::Max)
}

fn invoke_pool_2d(plan: &Plan, v: &mut Values<'_, '_>) -> Result<Value> {
    let Plan::Pool(pool) = plan else {
        return Err(wrong_plan());
    };
    let mut dst = vec![0i8; v.len];
    pool.run(v.i8s(0)?, &mut dst)?;
    Ok(Value::I8(dst))
}

fn prepare_softmax(s: &Site<'_, '_>) -> Result<(OpKind, Plan)> {
    let beta = s.options()?.f32(0, 0.0)?;
    let (x, out) = (s.input(0)?, s.output()?);
    int8(x)?;
    int8(out)?;
    same_len(numel(x)?, numel(out)?)?;
    if params(out)? != &Softmax::output_params()? {
        return Err(bad(
            "an int8 SOFTMAX output must be quantized at scale 1/256 with zero point -128, as TFLite requires",
        ));
    }
    let plan = Plan::Softmax(Softmax::new(
        beta,
        params(x)?,
        x.shape.last().copied().unwrap_or(1),
    )?);
    Ok((OpKind::Softmax(beta), plan))
}

fn invoke_softmax(plan: &Plan, v: &mut Values<'_, '_>) -> Result<Value> {
    let Plan::Softmax(sm) = plan else {
        return Err(wrong_plan());
    };
    let mut dst = vec![0i8; v.len];
    sm.run(v.i8s(0)?, &mut dst)?;
    Ok(Value::I8(dst))
}

fn prepare_add(s: &Site<'_, '_>) -> Result<(OpKind, Plan)> {
    let act = activation(s.options()?.u8(0, 0)?)?;
    let (x, y, out) = (s.input(0)?, s.input(1)?, s.output()?);
    int8(x)?;
    int8(y)?;
    int8(out)?;
    let broadcast = if x.shape == y.shape {
        same_len(numel(x)?, numel(out)?)?;
        None
    } else {
        let b = Broadcast::new(&x.shape, &y.shape).map_err(|e| e.renamed(PARSE))?;
        if b.shape() != out.shape.as_slice() {
            return Err(Error::ShapeMismatch {
                op: PARSE,
                expected: ErrShape::of(b.shape()),
                got: ErrShape::of(&out.shape),
            });
        }
        Some(Box::new(b))
    };
    let add = Add::new(params(x)?, params(y)?, params(out)?, act).map_err(|e| e.renamed(PARSE))?;
    Ok((OpKind::Add(act), Plan::Add(add, broadcast)))
}

fn invoke_add(plan: &Plan, v: &mut Values<'_, '_>) -> Result<Value> {
    let Plan::Add(add, broadcast) = plan else {
        return Err(wrong_plan());
    };
    let mut dst = vec![0i8; v.len];
    match broadcast {
        None => add.run(v.i8s(0)?, v.i8s(1)?, &mut dst)?,
        Some(b) => add.run_broadcast(v.i8s(0)?, v.i8s(1)?, b, &mut dst)?,
    }
    Ok(Value::I8(dst))
}

fn prepare_relu_x(s: &Site<'_, '_>, act: Activation) -> Result<(OpKind, Plan)> {
    let (x, out) = (s.input(0)?, s.output()?);
    int8(x)?;
    int8(out)?;
    same_len(numel(x)?, numel(out)?)?;
    let relu = Relu::new(params(x)?, params(out)?, act).map_err(|e| e.renamed(PARSE))?;
    Ok((OpKind::Relu(act), Plan::Relu(relu)))
}

fn prepare_relu(s: &Site<'_, '_>) -> Result<(OpKind, Plan)> {
    prepare_relu_x(s, Activation::Relu)
}

fn prepare_relu6(s: &Site<'_, '_>) -> Result<(OpKind, Plan)> {
    prepare_relu_x(s, Activation::Relu6)
}

fn invoke_relu(plan: &Plan, v: &mut Values<'_, '_>) -> Result<Value> {
    let Plan::Relu(relu) = plan else {
        return Err(wrong_plan());
    };
    let mut dst = vec![0i8; v.len];
    relu.run(v.i8s(0)?, &mut dst)?;
    Ok(Value::I8(dst))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_the_codes_of_every_kernel() {
        let all: Vec<i32> = OpKernel::ALL.iter().map(|k| k.code()).collect();
        assert_eq!(all, CODES);
    }
}
