//! `.tflite` models: [`Model::parse`] reads TFLite's flatbuffer (weights
//! stay in the file's bytes, which may be flash) and [`Model::run`] runs
//! its graph with the reference int8 kernels.

use super::fixed_point::Multiplier;
use super::flatbuffer::Table;
use super::kernels::{
    self, Conv2d, DepthwiseConv2d, FullyConnected, Geometry, Padding, Pool2d, PoolKind, Requantize,
    Rounding,
};
use super::params::{Activation, QuantParams};
use super::qtensor::{Conv2dOptions, layer_multipliers, nhwc_geometry};
use super::softmax::Softmax;
use crate::error::{ErrShape, Error, Result};
use alloc::vec;
use alloc::vec::Vec;

const PARSE: &str = "tflite::Model::parse";
const RUN: &str = "tflite::Model::run";

/// TFLite's name for a builtin operator code (for error messages).
///
/// ```
/// assert_eq!(kael_core::quant::builtin_name(25), "SOFTMAX");
/// ```
pub fn builtin_name(code: i32) -> &'static str {
    match code {
        0 => "ADD",
        1 => "AVERAGE_POOL_2D",
        2 => "CONCATENATION",
        3 => "CONV_2D",
        4 => "DEPTHWISE_CONV_2D",
        6 => "DEQUANTIZE",
        9 => "FULLY_CONNECTED",
        14 => "LOGISTIC",
        17 => "MAX_POOL_2D",
        18 => "MUL",
        19 => "RELU",
        21 => "RELU6",
        22 => "RESHAPE",
        25 => "SOFTMAX",
        28 => "TANH",
        114 => "QUANTIZE",
        _ => "an operator outside that list",
    }
}

fn bad(reason: &'static str) -> Error {
    Error::InvalidArgument { op: PARSE, reason }
}

/// Element types of the tensors a model may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ElementType {
    /// `float32`.
    F32,
    /// `int32` (biases).
    I32,
    /// `int8`.
    I8,
    /// Any other TFLite type code (refused when an operator reads it).
    Other(u8),
}

/// One tensor of the graph: its shape, type, constant data (weights and
/// biases, borrowed from the file) and quantization.
#[derive(Debug, Clone)]
pub struct TensorInfo<'a> {
    /// Dimensions.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: ElementType,
    /// The constant data, for weights and biases.
    pub data: Option<&'a [u8]>,
    /// Quantization, for int8 tensors.
    pub params: Option<QuantParams>,
}

impl TensorInfo<'_> {
    fn numel(&self) -> Option<usize> {
        self.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
    }
}

/// What an operator does, with its options.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OpKind {
    /// float to int8.
    Quantize,
    /// int8 to float.
    Dequantize,
    /// Fully connected, with its fused activation.
    FullyConnected(Activation),
    /// 2-d convolution.
    Conv2d(Conv2dOptions, Activation),
    /// Depthwise 2-d convolution.
    DepthwiseConv2d(Conv2dOptions, Activation),
    /// Pooling with its window `[h, w]`.
    Pool2d(PoolKind, [usize; 2], Conv2dOptions, Activation),
    /// Elementwise add.
    Add(Activation),
    /// Reshape (the values are unchanged).
    Reshape,
    /// Softmax over the last dimension, with TFLite's `beta`.
    Softmax(f32),
}

/// One operator: what it does and which tensors it reads and writes.
#[derive(Debug, Clone)]
pub struct Operator {
    /// The operation.
    pub kind: OpKind,
    /// Input tensor indices (`None` for an omitted optional input).
    pub inputs: Vec<Option<usize>>,
    /// Output tensor indices.
    pub outputs: Vec<usize>,
    /// What parse worked out for it (TFLite's `Prepare`).
    plan: Plan,
}

/// A parsed `.tflite` model (its first subgraph).
///
/// ```
/// use kael_core::quant::{Model, Value};
/// // TFLite Micro's hello_world model (tests/data/tflite/gen.py).
/// let bytes: &[u8] = include_bytes!("../../../tests/data/tflite/sine.tflite");
/// let model = Model::parse(bytes)?;
/// let out = model.run(&[Value::F32(vec![1.5707964])])?;
/// let Value::F32(y) = &out[0] else { unreachable!() };
/// assert!((y[0] - 1.0).abs() < 0.1); // sin(pi / 2), to int8 precision
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Model<'a> {
    /// Every tensor of the graph.
    pub tensors: Vec<TensorInfo<'a>>,
    /// The operators, in execution order.
    pub operators: Vec<Operator>,
    /// The graph's input tensors.
    pub inputs: Vec<usize>,
    /// The graph's output tensors.
    pub outputs: Vec<usize>,
}

fn activation(code: u8) -> Result<Activation> {
    match code {
        0 => Ok(Activation::None),
        1 => Ok(Activation::Relu),
        3 => Ok(Activation::Relu6),
        _ => Err(bad(
            "a fused activation other than NONE, RELU and RELU6; convert the model without it",
        )),
    }
}

fn padding(code: u8) -> Result<Padding> {
    match code {
        0 => Ok(Padding::Same),
        1 => Ok(Padding::Valid),
        _ => Err(bad("a padding other than SAME and VALID")),
    }
}

fn positive(v: i32) -> Result<usize> {
    usize::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| bad("a stride, dilation or window size below 1"))
}

fn window_options(t: &Table<'_>, dilation_ids: Option<(usize, usize)>) -> Result<Conv2dOptions> {
    let dilation = match dilation_ids {
        Some((w, h)) => [positive(t.i32(h, 1)?)?, positive(t.i32(w, 1)?)?],
        None => [1, 1],
    };
    Ok(Conv2dOptions {
        stride: [positive(t.i32(2, 0)?)?, positive(t.i32(1, 0)?)?],
        dilation,
        padding: padding(t.u8(0, 0)?)?,
    })
}

fn indices(v: &super::flatbuffer::Vector<'_>, tensors: usize) -> Result<Vec<Option<usize>>> {
    (0..v.len())
        .map(|i| {
            let t = v.i32(i)?;
            if t < 0 {
                return Ok(None);
            }
            let t = t as usize;
            if t >= tensors {
                return Err(bad(
                    "an operator or the graph names a tensor index past the tensor list",
                ));
            }
            Ok(Some(t))
        })
        .collect()
}

fn quantization(t: &Table<'_>) -> Result<Option<QuantParams>> {
    let Some(q) = t.table(4)? else {
        return Ok(None);
    };
    let scales = q.vector(2, 4)?;
    if scales.len() == 0 {
        return Ok(None);
    }
    let zps = q.vector(3, 8)?;
    if zps.len() != scales.len() {
        return Err(bad(
            "a tensor's quantization has a different number of scales and zero points",
        ));
    }
    let mut s = Vec::with_capacity(scales.len());
    let mut z = Vec::with_capacity(scales.len());
    for i in 0..scales.len() {
        s.push(scales.f32(i)?);
        z.push(i32::try_from(zps.i64(i)?).unwrap_or(i32::MAX));
    }
    let params = if s.len() == 1 {
        QuantParams::per_tensor(s[0], z[0])
    } else {
        let axis =
            usize::try_from(q.i32(6, 0)?).map_err(|_| bad("a negative quantized dimension"))?;
        QuantParams::per_channel(&s, &z, axis)
    };
    params.map(Some).map_err(|e| e.renamed(PARSE))
}

impl<'a> Model<'a> {
    /// Reads a `.tflite` file. Weights and biases stay in `bytes`; a
    /// truncated or malformed file, bad quantization parameters or an
    /// operator the interpreter does not run is an `Err` naming it.
    pub fn parse(bytes: &'a [u8]) -> Result<Model<'a>> {
        if bytes.len() < 8 || &bytes[4..8] != b"TFL3" {
            return Err(bad(
                "the file does not carry TFLite's identifier TFL3 at bytes 4..8; pass a .tflite file",
            ));
        }
        let root = Table::root(bytes)?;
        let codes = root.vector(1, 4)?;
        let graphs = root.vector(2, 4)?;
        let buffers = root.vector(4, 4)?;
        if graphs.len() == 0 {
            return Err(bad("the model has no subgraph"));
        }
        let g = graphs.table(0)?;
        let tv = g.vector(0, 4)?;
        let mut tensors = Vec::with_capacity(tv.len().min(4096));
        for i in 0..tv.len() {
            let t = tv.table(i)?;
            let sv = t.vector(0, 4)?;
            let mut shape = Vec::with_capacity(sv.len().min(crate::MAX_RANK));
            for d in 0..sv.len() {
                shape.push(usize::try_from(sv.i32(d)?).map_err(|_| bad("a tensor dimension is negative (dynamic shapes are not supported); convert with fixed shapes"))?);
            }
            let dtype = match t.u8(1, 0)? {
                0 => ElementType::F32,
                2 => ElementType::I32,
                9 => ElementType::I8,
                c => ElementType::Other(c),
            };
            let b = t.u32(2, 0)? as usize;
            let data = if b < buffers.len() {
                let bytes = buffers.table(b)?.vector(0, 1)?.bytes();
                (!bytes.is_empty()).then_some(bytes)
            } else {
                return Err(bad("a tensor names a buffer past the buffer list"));
            };
            let info = TensorInfo {
                shape,
                dtype,
                data,
                params: quantization(&t)?,
            };
            let size = match dtype {
                ElementType::F32 | ElementType::I32 => Some(4),
                ElementType::I8 => Some(1),
                ElementType::Other(_) => None,
            };
            if let (Some(d), Some(size)) = (info.data, size) {
                if info.numel().and_then(|n| n.checked_mul(size)) != Some(d.len()) {
                    return Err(bad(
                        "a constant tensor's data length differs from its shape; the file is corrupted",
                    ));
                }
            }
            tensors.push(info);
        }
        let n = tensors.len();
        let inputs: Vec<usize> = indices(&g.vector(1, 4)?, n)?
            .into_iter()
            .flatten()
            .collect();
        let outputs: Vec<usize> = indices(&g.vector(2, 4)?, n)?
            .into_iter()
            .flatten()
            .collect();
        let ov = g.vector(3, 4)?;
        let mut operators = Vec::with_capacity(ov.len().min(4096));
        for i in 0..ov.len() {
            let op = ov.table(i)?;
            let ci = op.u32(0, 0)? as usize;
            if ci >= codes.len() {
                return Err(bad("an operator names an operator code past the code list"));
            }
            let c = codes.table(ci)?;
            let code = (c.u8(0, 0)? as i8 as i32).max(c.i32(3, 0)?);
            let opts = op.table(4)?;
            let o = |f: &dyn Fn(&Table<'a>) -> Result<OpKind>| -> Result<OpKind> {
                match &opts {
                    Some(t) => f(t),
                    None => Err(bad("an operator lacks its options table")),
                }
            };
            let kind = match code {
                114 => OpKind::Quantize,
                6 => OpKind::Dequantize,
                22 => OpKind::Reshape,
                25 => o(&|t| Ok(OpKind::Softmax(t.f32(0, 0.0)?)))?,
                9 => o(&|t| Ok(OpKind::FullyConnected(activation(t.u8(0, 0)?)?)))?,
                0 => o(&|t| Ok(OpKind::Add(activation(t.u8(0, 0)?)?)))?,
                3 => o(&|t| {
                    Ok(OpKind::Conv2d(
                        window_options(t, Some((4, 5)))?,
                        activation(t.u8(3, 0)?)?,
                    ))
                })?,
                4 => o(&|t| {
                    Ok(OpKind::DepthwiseConv2d(
                        window_options(t, Some((5, 6)))?,
                        activation(t.u8(4, 0)?)?,
                    ))
                })?,
                1 | 17 => {
                    let kind = if code == 1 {
                        PoolKind::Average
                    } else {
                        PoolKind::Max
                    };
                    o(&|t| {
                        Ok(OpKind::Pool2d(
                            kind,
                            [positive(t.i32(4, 0)?)?, positive(t.i32(3, 0)?)?],
                            window_options(t, None)?,
                            activation(t.u8(5, 0)?)?,
                        ))
                    })?
                }
                _ => {
                    return Err(Error::UnsupportedOperator {
                        op: PARSE,
                        code,
                        index: i,
                    });
                }
            };
            let inputs = indices(&op.vector(1, 4)?, n)?;
            let outputs: Vec<usize> = indices(&op.vector(2, 4)?, n)?
                .into_iter()
                .flatten()
                .collect();
            if outputs.is_empty() {
                return Err(bad("an operator has no output"));
            }
            let plan = plan(&tensors, kind, &inputs, outputs[0])?;
            operators.push(Operator {
                kind,
                inputs,
                outputs,
                plan,
            });
        }
        Ok(Model {
            tensors,
            operators,
            inputs,
            outputs,
        })
    }
}

/// The values of one tensor while a model runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Float values.
    F32(Vec<f32>),
    /// int8 values.
    I8(Vec<i8>),
}

fn run_err(reason: &'static str) -> Error {
    Error::InvalidArgument { op: RUN, reason }
}

/// The output stage of a layer: zero point and fused-activation clamp.
#[derive(Debug, Clone, Copy)]
struct OutStage {
    zero_point: i32,
    min: i32,
    max: i32,
}

/// What [`Model::parse`] works out once per operator, so that
/// [`Model::run`] only computes (TFLite's `Prepare`): multipliers in `f64`,
/// biases decoded, clamps, window geometry, and every size checked against
/// the operator's declared output.
#[derive(Debug, Clone)]
enum Plan {
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
        depthwise: bool,
        geometry: Geometry,
        input_zero_point: i32,
        multipliers: Vec<Multiplier>,
        bias: Option<Vec<i32>>,
        out: OutStage,
    },
    Pool(Pool2d),
    Add(kernels::Add),
    Softmax(Softmax),
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

/// Checks one operator against its tensors and works out its plan.
fn plan(
    tensors: &[TensorInfo<'_>],
    kind: OpKind,
    inputs: &[Option<usize>],
    out_t: usize,
) -> Result<Plan> {
    let x = info(tensors, inputs.first().copied().flatten())?;
    let out = info(tensors, Some(out_t))?;
    let n = numel(out)?;
    Ok(match kind {
        OpKind::Quantize => {
            int8(out)?;
            if x.dtype != ElementType::F32 {
                return Err(bad(
                    "QUANTIZE from a type other than float32 (requantization) is not supported yet",
                ));
            }
            same_len(numel(x)?, n)?;
            let p = params(out)?;
            Plan::Quantize {
                scale: p.scale(0),
                zero_point: p.zero_point(0),
            }
        }
        OpKind::Dequantize => {
            int8(x)?;
            if out.dtype != ElementType::F32 {
                return Err(bad(
                    "DEQUANTIZE to a type other than float32 is not supported",
                ));
            }
            same_len(numel(x)?, n)?;
            let p = params(x)?;
            Plan::Dequantize {
                scale: p.scale(0),
                zero_point: p.zero_point(0),
            }
        }
        OpKind::Reshape => {
            int8(x)?;
            int8(out)?;
            same_len(numel(x)?, n)?;
            Plan::Reshape
        }
        OpKind::FullyConnected(act) => {
            let w = info(tensors, inputs.get(1).copied().flatten())?;
            int8(x)?;
            int8(w)?;
            int8(out)?;
            if w.shape.len() != 2 || w.data.is_none() {
                return Err(bad("a fully-connected weight must be a constant [out, in]"));
            }
            let (outs, ins) = (w.shape[0], w.shape[1]);
            let rows = numel(x)?.checked_div(ins).unwrap_or(0);
            same_len(rows.saturating_mul(ins), numel(x)?)?;
            same_len(rows.saturating_mul(outs), n)?;
            let (px, pw, po) = (params(x)?, params(w)?, params(out)?);
            if pw.channels() != 1 && pw.channels() != outs {
                return Err(bad(
                    "a fully-connected weight's per-channel scales do not match its output channels",
                ));
            }
            Plan::FullyConnected {
                input_zero_point: px.zero_point(0),
                in_features: ins,
                out_features: outs,
                multipliers: layer_multipliers(px, pw, po),
                bias: bias(tensors, inputs.get(2), outs)?,
                out: out_stage(act, po),
            }
        }
        OpKind::Conv2d(o, act) | OpKind::DepthwiseConv2d(o, act) => {
            let w = info(tensors, inputs.get(1).copied().flatten())?;
            int8(x)?;
            int8(w)?;
            int8(out)?;
            let fs = &w.shape;
            if fs.len() != 4 || w.data.is_none() {
                return Err(bad("a convolution filter must be a constant of rank 4"));
            }
            let depthwise = matches!(kind, OpKind::DepthwiseConv2d(..));
            let out_c = if depthwise { fs[3] } else { fs[0] };
            let g = nhwc_geometry(PARSE, &x.shape, [fs[1], fs[2]], out_c, &o)?;
            check_out(&g, out)?;
            let (px, pw, po) = (params(x)?, params(w)?, params(out)?);
            if pw.channels() != 1 && pw.channels() != out_c {
                return Err(bad(
                    "a convolution filter's per-channel scales do not match its output channels",
                ));
            }
            Plan::Conv {
                depthwise,
                geometry: g,
                input_zero_point: px.zero_point(0),
                multipliers: layer_multipliers(px, pw, po),
                bias: bias(tensors, inputs.get(2), out_c)?,
                out: out_stage(act, po),
            }
        }
        OpKind::Pool2d(kind, kernel, o, act) => {
            int8(x)?;
            int8(out)?;
            let g = nhwc_geometry(
                PARSE,
                &x.shape,
                kernel,
                x.shape.get(3).copied().unwrap_or(0),
                &o,
            )?;
            check_out(&g, out)?;
            let (min, max) = act.range(params(out)?);
            Plan::Pool(Pool2d {
                geometry: g,
                kind,
                min,
                max,
            })
        }
        OpKind::Softmax(beta) => {
            int8(x)?;
            int8(out)?;
            same_len(numel(x)?, n)?;
            if params(out)? != &Softmax::output_params()? {
                return Err(bad(
                    "an int8 SOFTMAX output must be quantized at scale 1/256 with zero point -128, as TFLite requires",
                ));
            }
            Plan::Softmax(Softmax::new(
                beta,
                params(x)?,
                x.shape.last().copied().unwrap_or(1),
            )?)
        }
        OpKind::Add(act) => {
            let y = info(tensors, inputs.get(1).copied().flatten())?;
            int8(x)?;
            int8(y)?;
            int8(out)?;
            if x.shape != y.shape {
                return Err(bad(
                    "ADD with broadcasting is not supported yet; give both inputs the same shape",
                ));
            }
            same_len(numel(x)?, n)?;
            Plan::Add(kernels::Add::new(
                params(x)?,
                params(y)?,
                params(out)?,
                act,
            )?)
        }
    })
}

impl Model<'_> {
    fn i8s<'v>(&'v self, values: &'v [Option<Value>], t: Option<usize>) -> Result<&'v [i8]> {
        let t = t.ok_or_else(|| run_err("an operator lacks a required input"))?;
        if let Some(d) = self.tensors.get(t).and_then(|i| i.data) {
            return Ok(bytemuck::cast_slice(d));
        }
        match values.get(t) {
            Some(Some(Value::I8(v))) => Ok(v),
            _ => Err(run_err(
                "an operator reads an int8 tensor that no earlier operator wrote",
            )),
        }
    }

    /// Runs the graph on `inputs` (one per graph input, in order) and
    /// returns the graph's outputs. Values are TFLite's bit for bit
    /// (NOTE [TFLite int8 scheme]); every size was checked by `parse`.
    pub fn run(&self, inputs: &[Value]) -> Result<Vec<Value>> {
        if inputs.len() != self.inputs.len() {
            return Err(run_err(
                "give one value per graph input, in the model's order",
            ));
        }
        let mut values: Vec<Option<Value>> = vec![None; self.tensors.len()];
        for (&t, v) in self.inputs.iter().zip(inputs) {
            let (len, ok) = match v {
                Value::F32(x) => (x.len(), self.tensors[t].dtype == ElementType::F32),
                Value::I8(x) => (x.len(), self.tensors[t].dtype == ElementType::I8),
            };
            if !ok || Some(len) != self.tensors[t].numel() {
                return Err(run_err(
                    "an input's type or length differs from the model's input tensor; check model.tensors[model.inputs[i]]",
                ));
            }
            values[t] = Some(v.clone());
        }
        for op in &self.operators {
            let out_t = op.outputs[0];
            let n = self.tensors[out_t].numel().unwrap_or(0);
            let x = op.inputs.first().copied().flatten();
            let w = op.inputs.get(1).copied().flatten();
            let value = match &op.plan {
                Plan::Quantize { scale, zero_point } => {
                    let src = match x.and_then(|x| values.get(x)) {
                        Some(Some(Value::F32(v))) => v,
                        _ => {
                            return Err(run_err(
                                "QUANTIZE reads a float tensor that no earlier operator wrote",
                            ));
                        }
                    };
                    let mut out = vec![0i8; n];
                    kernels::quantize_into(src, *scale, *zero_point, &mut out)?;
                    Value::I8(out)
                }
                Plan::Dequantize { scale, zero_point } => {
                    let mut out = vec![0f32; n];
                    kernels::dequantize_into(self.i8s(&values, x)?, *scale, *zero_point, &mut out)?;
                    Value::F32(out)
                }
                Plan::Reshape => Value::I8(self.i8s(&values, x)?.to_vec()),
                Plan::FullyConnected {
                    input_zero_point,
                    in_features,
                    out_features,
                    multipliers,
                    bias,
                    out,
                } => {
                    let mut dst = vec![0i8; n];
                    FullyConnected {
                        input_zero_point: *input_zero_point,
                        filter: self.i8s(&values, w)?,
                        bias: bias.as_deref(),
                        in_features: *in_features,
                        out_features: *out_features,
                        requant: Requantize {
                            multipliers,
                            zero_point: out.zero_point,
                            min: out.min,
                            max: out.max,
                        },
                        rounding: Rounding::Once,
                    }
                    .run(self.i8s(&values, x)?, &mut dst)?;
                    Value::I8(dst)
                }
                Plan::Conv {
                    depthwise,
                    geometry,
                    input_zero_point,
                    multipliers,
                    bias,
                    out,
                } => {
                    let requant = Requantize {
                        multipliers,
                        zero_point: out.zero_point,
                        min: out.min,
                        max: out.max,
                    };
                    let (filter, input) = (self.i8s(&values, w)?, self.i8s(&values, x)?);
                    let mut dst = vec![0i8; n];
                    if *depthwise {
                        DepthwiseConv2d {
                            geometry: *geometry,
                            input_zero_point: *input_zero_point,
                            filter,
                            bias: bias.as_deref(),
                            requant,
                        }
                        .run(input, &mut dst)?;
                    } else {
                        Conv2d {
                            geometry: *geometry,
                            input_zero_point: *input_zero_point,
                            filter,
                            bias: bias.as_deref(),
                            requant,
                        }
                        .run(input, &mut dst)?;
                    }
                    Value::I8(dst)
                }
                Plan::Pool(pool) => {
                    let mut dst = vec![0i8; n];
                    pool.run(self.i8s(&values, x)?, &mut dst)?;
                    Value::I8(dst)
                }
                Plan::Softmax(sm) => {
                    let mut dst = vec![0i8; n];
                    sm.run(self.i8s(&values, x)?, &mut dst)?;
                    Value::I8(dst)
                }
                Plan::Add(add) => {
                    let mut dst = vec![0i8; n];
                    add.run(self.i8s(&values, x)?, self.i8s(&values, w)?, &mut dst)?;
                    Value::I8(dst)
                }
            };
            values[out_t] = Some(value);
        }
        self.outputs
            .iter()
            .map(|&t| {
                values
                    .get(t)
                    .cloned()
                    .flatten()
                    .ok_or_else(|| run_err("a graph output is never written"))
            })
            .collect()
    }
}
