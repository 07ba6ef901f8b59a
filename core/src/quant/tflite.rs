//! `.tflite` models: [`Model::parse`] reads TFLite's flatbuffer (weights
//! stay in the file's bytes, which may be flash) and [`Model::run`] runs
//! its graph with the reference int8 kernels.

use super::fixed_point::Multiplier;
use super::flatbuffer::Table;
use super::kernels::{
    self, Conv2d, DepthwiseConv2d, FullyConnected, Geometry, Padding, Pool2d, PoolKind, Requantize,
    Window,
};
use super::params::{Activation, QuantParams};
use super::qtensor::Conv2dOptions;
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
}

/// A parsed `.tflite` model (its first subgraph).
///
/// ```no_run
/// use kael_core::quant::{Model, Value};
/// let bytes: &[u8] = &[]; // include_bytes!("model.tflite")
/// let model = Model::parse(bytes)?;
/// let out = model.run(&[Value::F32(vec![0.5; 4])])?;
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
            operators.push(Operator {
                kind,
                inputs,
                outputs,
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

struct Env<'m, 'a> {
    model: &'m Model<'a>,
    values: Vec<Option<Value>>,
}

impl<'a> Env<'_, 'a> {
    fn info(&self, t: Option<usize>) -> Result<&TensorInfo<'a>> {
        t.and_then(|t| self.model.tensors.get(t))
            .ok_or_else(|| run_err("an operator lacks a required input"))
    }

    fn params(&self, t: Option<usize>) -> Result<&QuantParams> {
        self.info(t)?
            .params
            .as_ref()
            .ok_or_else(|| run_err("an int8 tensor has no quantization parameters"))
    }

    fn i8s(&self, t: Option<usize>) -> Result<&[i8]> {
        let info = self.info(t)?;
        if info.dtype != ElementType::I8 {
            return Err(run_err(
                "an operator reads a tensor that is not int8 where int8 is needed",
            ));
        }
        if let Some(d) = info.data {
            return Ok(bytemuck::cast_slice(d));
        }
        match t.and_then(|t| self.values.get(t)) {
            Some(Some(Value::I8(v))) => Ok(v),
            _ => Err(run_err(
                "an operator reads an int8 tensor that no earlier operator wrote",
            )),
        }
    }

    fn f32s(&self, t: Option<usize>) -> Result<&[f32]> {
        match t.and_then(|t| self.values.get(t)) {
            Some(Some(Value::F32(v))) => Ok(v),
            _ => Err(run_err(
                "an operator reads a float tensor that no earlier operator wrote",
            )),
        }
    }

    fn bias(&self, t: Option<Option<usize>>, channels: usize) -> Result<Option<Vec<i32>>> {
        let Some(Some(t)) = t else { return Ok(None) };
        let info = self.info(Some(t))?;
        let data = info
            .data
            .ok_or_else(|| run_err("a bias is not a constant"))?;
        if info.dtype != ElementType::I32 || data.len() != channels.saturating_mul(4) {
            return Err(run_err(
                "a bias must be int32 with one value per output channel",
            ));
        }
        Ok(Some(
            data.chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ))
    }

    fn out_len(&self, t: usize) -> Result<usize> {
        self.info(Some(t))?
            .numel()
            .ok_or_else(|| run_err("a tensor's size overflows usize"))
    }
}

/// An output's declared size must be what its operator computes from its
/// (already bounded) inputs before anything is allocated for it.
fn same_len(computed: usize, declared: usize) -> Result<()> {
    if computed != declared {
        return Err(run_err(
            "an operator's output tensor is declared with a size its inputs do not give; the file is corrupted",
        ));
    }
    Ok(())
}

fn multipliers(input: &QuantParams, filter: &QuantParams, output: &QuantParams) -> Vec<Multiplier> {
    let (si, so) = (input.scale(0) as f64, output.scale(0) as f64);
    filter
        .scales()
        .iter()
        .map(|&sf| Multiplier::from_real(si * sf as f64 / so))
        .collect()
}

fn geometry(
    input: &[usize],
    kernel: [usize; 2],
    out_channels: usize,
    o: &Conv2dOptions,
) -> Result<Geometry> {
    if input.len() != 4 {
        return Err(Error::RankMismatch {
            op: RUN,
            expected: "4 (NHWC) for a window operator's input",
            got: input.len(),
        });
    }
    Ok(Geometry {
        batch: input[0],
        in_channels: input[3],
        out_channels,
        h: Window::new(
            RUN,
            input[1],
            kernel[0],
            o.stride[0],
            o.dilation[0],
            o.padding,
        )?,
        w: Window::new(
            RUN,
            input[2],
            kernel[1],
            o.stride[1],
            o.dilation[1],
            o.padding,
        )?,
    })
}

fn check_out(g: &Geometry, out: &TensorInfo<'_>) -> Result<()> {
    let want = [g.batch, g.h.output, g.w.output, g.out_channels];
    if out.shape != want {
        return Err(Error::ShapeMismatch {
            op: RUN,
            expected: ErrShape::of(&want),
            got: ErrShape::of(&out.shape),
        });
    }
    Ok(())
}

impl Model<'_> {
    /// Runs the graph on `inputs` (one per graph input, in order) and
    /// returns the graph's outputs. Values are TFLite's bit for bit
    /// (NOTE [TFLite int8 scheme]).
    pub fn run(&self, inputs: &[Value]) -> Result<Vec<Value>> {
        if inputs.len() != self.inputs.len() {
            return Err(run_err(
                "give one value per graph input, in the model's order",
            ));
        }
        let mut env = Env {
            model: self,
            values: vec![None; self.tensors.len()],
        };
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
            env.values[t] = Some(v.clone());
        }
        for op in &self.operators {
            let out_t = op.outputs[0];
            let out_info = env.info(Some(out_t))?;
            let n = env.out_len(out_t)?;
            let x = op.inputs.first().copied().flatten();
            let value = match op.kind {
                OpKind::Quantize => {
                    let p = env.params(Some(out_t))?;
                    let src = env.f32s(x)?;
                    same_len(src.len(), n)?;
                    let mut out = vec![0i8; n];
                    kernels::quantize_into(src, p.scale(0), p.zero_point(0), &mut out)?;
                    Value::I8(out)
                }
                OpKind::Dequantize => {
                    let p = env.params(x)?;
                    let src = env.i8s(x)?;
                    same_len(src.len(), n)?;
                    let mut out = vec![0f32; n];
                    kernels::dequantize_into(src, p.scale(0), p.zero_point(0), &mut out)?;
                    Value::F32(out)
                }
                OpKind::Reshape => {
                    let v = env.i8s(x)?;
                    if v.len() != n {
                        return Err(run_err("a reshape changes the number of elements"));
                    }
                    Value::I8(v.to_vec())
                }
                OpKind::FullyConnected(act) => {
                    let w = op.inputs.get(1).copied().flatten();
                    let wi = env.info(w)?;
                    if wi.shape.len() != 2 {
                        return Err(run_err("a fully-connected weight must be [out, in]"));
                    }
                    let (outs, ins) = (wi.shape[0], wi.shape[1]);
                    let out_p = env.params(Some(out_t))?;
                    let m = multipliers(env.params(x)?, env.params(w)?, out_p);
                    let (min, max) = act.range(out_p);
                    let bias = env.bias(op.inputs.get(2).copied(), outs)?;
                    let rows = env.i8s(x)?.len().checked_div(ins).unwrap_or(0);
                    same_len(rows.saturating_mul(outs), n)?;
                    let mut out = vec![0i8; n];
                    FullyConnected {
                        input_zero_point: env.params(x)?.zero_point(0),
                        filter: env.i8s(w)?,
                        bias: bias.as_deref(),
                        in_features: ins,
                        out_features: outs,
                        requant: Requantize {
                            multipliers: &m,
                            zero_point: out_p.zero_point(0),
                            min,
                            max,
                        },
                    }
                    .run(env.i8s(x)?, &mut out)?;
                    Value::I8(out)
                }
                OpKind::Conv2d(o, act) | OpKind::DepthwiseConv2d(o, act) => {
                    let w = op.inputs.get(1).copied().flatten();
                    let fs = &env.info(w)?.shape;
                    if fs.len() != 4 {
                        return Err(run_err("a convolution filter must have rank 4"));
                    }
                    let depthwise = matches!(op.kind, OpKind::DepthwiseConv2d(..));
                    let out_c = if depthwise { fs[3] } else { fs[0] };
                    let g = geometry(&env.info(x)?.shape, [fs[1], fs[2]], out_c, &o)?;
                    check_out(&g, out_info)?;
                    let out_p = env.params(Some(out_t))?;
                    let m = multipliers(env.params(x)?, env.params(w)?, out_p);
                    let (min, max) = act.range(out_p);
                    let bias = env.bias(op.inputs.get(2).copied(), out_c)?;
                    let requant = Requantize {
                        multipliers: &m,
                        zero_point: out_p.zero_point(0),
                        min,
                        max,
                    };
                    let (input_zero_point, filter) = (env.params(x)?.zero_point(0), env.i8s(w)?);
                    let mut out = vec![0i8; n];
                    if depthwise {
                        DepthwiseConv2d {
                            geometry: g,
                            input_zero_point,
                            filter,
                            bias: bias.as_deref(),
                            requant,
                        }
                        .run(env.i8s(x)?, &mut out)?;
                    } else {
                        Conv2d {
                            geometry: g,
                            input_zero_point,
                            filter,
                            bias: bias.as_deref(),
                            requant,
                        }
                        .run(env.i8s(x)?, &mut out)?;
                    }
                    Value::I8(out)
                }
                OpKind::Pool2d(kind, kernel, o, act) => {
                    let shape = &env.info(x)?.shape;
                    let g = geometry(shape, kernel, shape.get(3).copied().unwrap_or(0), &o)?;
                    check_out(&g, out_info)?;
                    let (min, max) = act.range(env.params(Some(out_t))?);
                    let mut out = vec![0i8; n];
                    Pool2d {
                        geometry: g,
                        kind,
                        min,
                        max,
                    }
                    .run(env.i8s(x)?, &mut out)?;
                    Value::I8(out)
                }
                OpKind::Add(act) => {
                    let y = op.inputs.get(1).copied().flatten();
                    if env.info(x)?.shape != env.info(y)?.shape {
                        return Err(run_err(
                            "ADD with broadcasting is not supported yet; give both inputs the same shape",
                        ));
                    }
                    let layer = kernels::Add::new(
                        env.params(x)?,
                        env.params(y)?,
                        env.params(Some(out_t))?,
                        act,
                    )?;
                    same_len(env.i8s(x)?.len(), n)?;
                    let mut out = vec![0i8; n];
                    layer.run(env.i8s(x)?, env.i8s(y)?, &mut out)?;
                    Value::I8(out)
                }
            };
            env.values[out_t] = Some(value);
        }
        self.outputs
            .iter()
            .map(|&t| {
                env.values
                    .get(t)
                    .cloned()
                    .flatten()
                    .ok_or_else(|| run_err("a graph output is never written"))
            })
            .collect()
    }
}
