//! `.tflite` models: [`Model::parse`] reads TFLite's flatbuffer (weights
//! stay in the file's bytes, which may be flash) and [`Model::run`] runs
//! its graph with the reference int8 kernels.

mod registry;
pub(crate) mod write;

pub use registry::OpKernel;
use registry::{Invoke, Plan, Site, Values};

use super::flatbuffer::Table;
use super::kernels::{Padding, PoolKind};
use super::params::{Activation, QuantParams};
use super::qtensor::Conv2dOptions;
use crate::error::{Error, Result};
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
    /// Elementwise add (the operands may broadcast), with its fused
    /// activation.
    Add(Activation),
    /// A standalone `RELU` ([`Activation::Relu`]) or `RELU6`
    /// ([`Activation::Relu6`]), which requantizes as it clamps.
    Relu(Activation),
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
    /// Its kernel's run step (NOTE [Kernel registration]).
    invoke: Invoke,
    /// Tensors whose last reader this operator is: [`Model::run`] drops
    /// their values after it, so only live activations take memory.
    last_reads: Vec<usize>,
}

/// A parsed `.tflite` model (its first subgraph).
///
/// ```
/// use kael_core::quant::{Model, Value};
/// // TFLite Micro's hello_world model (tests/data/tflite/gen.py).
/// let bytes: &[u8] = include_bytes!("../../../../tests/data/tflite/sine.tflite");
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
    /// Reads a `.tflite` file with every kernel kael has
    /// ([`OpKernel::ALL`]). Weights and biases stay in `bytes`; a
    /// truncated or malformed file, bad quantization parameters or an
    /// operator the interpreter does not run is an `Err` naming it.
    pub fn parse(bytes: &'a [u8]) -> Result<Model<'a>> {
        Self::parse_with(bytes, OpKernel::ALL)
    }

    /// Reads a `.tflite` file with only the operator kernels in `kernels`
    /// (NOTE [Kernel registration]): firmware links only those. An
    /// operator whose kernel is missing is an `Err` naming the kernel to
    /// add; otherwise as [`Model::parse`].
    pub fn parse_with(bytes: &'a [u8], kernels: &[OpKernel]) -> Result<Model<'a>> {
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
            let Some(kernel) = kernels.iter().find(|k| k.code() == code) else {
                // Codes, not OpKernel::ALL: that would link every kernel.
                let known = registry::CODES.contains(&code);
                return Err(if known {
                    Error::OperatorNotRegistered {
                        op: PARSE,
                        code,
                        index: i,
                    }
                } else {
                    Error::UnsupportedOperator {
                        op: PARSE,
                        code,
                        index: i,
                    }
                });
            };
            let inputs = indices(&op.vector(1, 4)?, n)?;
            let outputs: Vec<usize> = indices(&op.vector(2, 4)?, n)?
                .into_iter()
                .flatten()
                .collect();
            let Some(&output) = outputs.first() else {
                return Err(bad("an operator has no output"));
            };
            let (kind, plan) = kernel.prepare(&Site {
                tensors: &tensors,
                inputs: &inputs,
                output,
                options: op.table(4)?,
            })?;
            operators.push(Operator {
                kind,
                inputs,
                outputs,
                plan,
                invoke: kernel.invoke(),
                last_reads: Vec::new(),
            });
        }
        // Each tensor a later operator does not read (and the graph does
        // not output) is dropped after its last reader.
        for t in 0..n {
            if outputs.contains(&t) {
                continue;
            }
            if let Some(last) = operators
                .iter_mut()
                .rev()
                .find(|o| o.inputs.contains(&Some(t)))
            {
                last.last_reads.push(t);
            }
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

impl Model<'_> {
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
        // Graph inputs are read from `inputs` in place (Values::value).
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
        }
        for op in &self.operators {
            let out_t = op.outputs[0];
            let value = (op.invoke)(
                &op.plan,
                &mut Values {
                    model: self,
                    values: &mut values,
                    given: inputs,
                    inputs: &op.inputs,
                    last_reads: &op.last_reads,
                    len: self.tensors[out_t].numel().unwrap_or(0),
                },
            )?;
            for &t in &op.last_reads {
                values[t] = None;
            }
            values[out_t] = Some(value);
        }
        self.outputs
            .iter()
            .map(|&t| {
                let given = || {
                    let at = self.inputs.iter().position(|&g| g == t)?;
                    inputs.get(at).cloned()
                };
                values
                    .get(t)
                    .cloned()
                    .flatten()
                    .or_else(given)
                    .ok_or_else(|| run_err("a graph output is never written"))
            })
            .collect()
    }
}
