//! Writing `.tflite` files: [`GraphWriter`] collects a graph's tensors
//! (constants with their data), operators and options, and writes them in
//! TFLite's schema (version 3, one subgraph) with the FlatBuffers
//! [`Builder`]. [`QuantizedModel::to_tflite`](crate::quant::QuantizedModel::to_tflite)
//! is its user; TFLite's own interpreter reads what it writes
//! (`tests/data/tflite/gen.py` runs it, and kael's tests compare).

use super::ElementType;
use crate::error::{Error, Result};
use crate::quant::flatbuffer_builder::{Builder, Ref};
use crate::quant::kernels::Padding;
use crate::quant::params::{Activation, QuantParams};
use crate::quant::qtensor::Conv2dOptions;
use alloc::string::String;
use alloc::vec::Vec;

const OP: &str = "quant::QuantizedModel::to_tflite";

/// TFLite builtin operator codes and the versions its converter writes
/// for int8 operators (TensorFlow 2.21).
pub(crate) mod code {
    pub(crate) const QUANTIZE: (i32, i32) = (114, 1);
    pub(crate) const DEQUANTIZE: (i32, i32) = (6, 2);
    pub(crate) const CONV_2D: (i32, i32) = (3, 3);
    pub(crate) const DEPTHWISE_CONV_2D: (i32, i32) = (4, 3);
    pub(crate) const AVERAGE_POOL_2D: (i32, i32) = (1, 2);
    pub(crate) const MAX_POOL_2D: (i32, i32) = (17, 2);
    pub(crate) const RESHAPE: (i32, i32) = (22, 1);
    pub(crate) const FULLY_CONNECTED: (i32, i32) = (9, 4);
    pub(crate) const SOFTMAX: (i32, i32) = (25, 2);
}

/// An operator's options table (TFLite's `BuiltinOptions` union).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Options {
    None,
    Conv2d(Conv2dOptions, Activation),
    DepthwiseConv2d(Conv2dOptions, Activation, usize),
    Pool2d([usize; 2], Conv2dOptions),
    FullyConnected(Activation),
    Softmax(f32),
}

struct TensorDef {
    name: String,
    shape: Vec<i32>,
    dtype: u8,
    buffer: u32,
    quant: Option<QuantParams>,
}

struct OpDef {
    code: u32,
    inputs: Vec<i32>,
    outputs: Vec<i32>,
    options: Options,
}

/// A graph being written (see the module docs).
pub(crate) struct GraphWriter {
    tensors: Vec<TensorDef>,
    /// Constant data; buffer 0 is TFLite's empty sentinel.
    buffers: Vec<Vec<u8>>,
    codes: Vec<(i32, i32)>,
    ops: Vec<OpDef>,
}

fn too_big() -> Error {
    Error::InvalidArgument {
        op: OP,
        reason: "a dimension or count exceeds what a .tflite file can hold (2^31 - 1); use smaller layers",
    }
}

fn i32_of(v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| too_big())
}

fn activation_code(a: Activation) -> u8 {
    match a {
        Activation::None => 0,
        Activation::Relu => 1,
        Activation::Relu6 => 3,
    }
}

fn padding_code(p: Padding) -> u8 {
    match p {
        Padding::Same => 0,
        Padding::Valid => 1,
    }
}

impl GraphWriter {
    pub(crate) fn new() -> GraphWriter {
        GraphWriter {
            tensors: Vec::new(),
            buffers: alloc::vec![Vec::new()],
            codes: Vec::new(),
            ops: Vec::new(),
        }
    }

    /// Adds a tensor (a constant when `data` is given, as little-endian
    /// bytes) and returns its index.
    pub(crate) fn tensor(
        &mut self,
        name: String,
        shape: &[usize],
        dtype: ElementType,
        data: Option<Vec<u8>>,
        quant: Option<&QuantParams>,
    ) -> Result<i32> {
        let shape = shape.iter().map(|&d| i32_of(d)).collect::<Result<_>>()?;
        let dtype = match dtype {
            ElementType::F32 => 0,
            ElementType::I32 => 2,
            ElementType::I8 => 9,
            ElementType::Other(c) => c,
        };
        let buffer = match data {
            Some(d) => {
                self.buffers.push(d);
                u32::try_from(self.buffers.len() - 1).map_err(|_| too_big())?
            }
            None => 0,
        };
        self.tensors.push(TensorDef {
            name,
            shape,
            dtype,
            buffer,
            quant: quant.cloned(),
        });
        i32_of(self.tensors.len() - 1)
    }

    /// Adds an operator `(code, version)` reading `inputs` and writing
    /// `outputs`.
    pub(crate) fn op(
        &mut self,
        code: (i32, i32),
        inputs: &[i32],
        outputs: &[i32],
        options: Options,
    ) -> Result<()> {
        let at = match self.codes.iter().position(|&c| c == code) {
            Some(at) => at,
            None => {
                self.codes.push(code);
                self.codes.len() - 1
            }
        };
        self.ops.push(OpDef {
            code: u32::try_from(at).map_err(|_| too_big())?,
            inputs: inputs.to_vec(),
            outputs: outputs.to_vec(),
            options,
        });
        Ok(())
    }

    fn write_options(b: &mut Builder, options: &Options) -> Result<Option<(u8, Ref)>> {
        let mut t = b.start_table();
        let kind = match *options {
            Options::None => return Ok(None),
            Options::Conv2d(o, act) => {
                b.field_u8(&mut t, 0, padding_code(o.padding));
                b.field_i32(&mut t, 1, i32_of(o.stride[1])?);
                b.field_i32(&mut t, 2, i32_of(o.stride[0])?);
                b.field_u8(&mut t, 3, activation_code(act));
                b.field_i32(&mut t, 4, i32_of(o.dilation[1])?);
                b.field_i32(&mut t, 5, i32_of(o.dilation[0])?);
                1
            }
            Options::DepthwiseConv2d(o, act, multiplier) => {
                b.field_u8(&mut t, 0, padding_code(o.padding));
                b.field_i32(&mut t, 1, i32_of(o.stride[1])?);
                b.field_i32(&mut t, 2, i32_of(o.stride[0])?);
                b.field_i32(&mut t, 3, i32_of(multiplier)?);
                b.field_u8(&mut t, 4, activation_code(act));
                b.field_i32(&mut t, 5, i32_of(o.dilation[1])?);
                b.field_i32(&mut t, 6, i32_of(o.dilation[0])?);
                2
            }
            Options::Pool2d(window, o) => {
                b.field_u8(&mut t, 0, padding_code(o.padding));
                b.field_i32(&mut t, 1, i32_of(o.stride[1])?);
                b.field_i32(&mut t, 2, i32_of(o.stride[0])?);
                b.field_i32(&mut t, 3, i32_of(window[1])?);
                b.field_i32(&mut t, 4, i32_of(window[0])?);
                b.field_u8(&mut t, 5, 0);
                5
            }
            Options::FullyConnected(act) => {
                b.field_u8(&mut t, 0, activation_code(act));
                8
            }
            Options::Softmax(beta) => {
                b.field_f32(&mut t, 0, beta);
                9
            }
        };
        Ok(Some((kind, b.end_table(t))))
    }

    fn write_quant(b: &mut Builder, q: &QuantParams) -> Ref {
        let scales = b.f32s(q.scales());
        let zps: Vec<i64> = q.zero_points().iter().map(|&z| z as i64).collect();
        let zps = b.i64s(&zps);
        let mut t = b.start_table();
        b.field_offset(&mut t, 2, scales);
        b.field_offset(&mut t, 3, zps);
        b.field_i32(&mut t, 6, q.axis().unwrap_or(0) as i32);
        b.end_table(t)
    }

    /// The finished file, its graph reading `inputs` and writing
    /// `outputs`.
    pub(crate) fn finish(self, inputs: &[i32], outputs: &[i32]) -> Result<Vec<u8>> {
        let mut b = Builder::new();
        let mut buffers = Vec::with_capacity(self.buffers.len());
        for data in &self.buffers {
            let d = (!data.is_empty()).then(|| b.bytes(data, 16));
            let mut t = b.start_table();
            if let Some(d) = d {
                b.field_offset(&mut t, 0, d);
            }
            buffers.push(b.end_table(t));
        }
        let buffers = b.offsets(&buffers);
        let mut tensors = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            let shape = b.i32s(&t.shape);
            let name = b.string(&t.name);
            let quant = t.quant.as_ref().map(|q| Self::write_quant(&mut b, q));
            let mut tt = b.start_table();
            b.field_offset(&mut tt, 0, shape);
            b.field_u8(&mut tt, 1, t.dtype);
            b.field_u32(&mut tt, 2, t.buffer);
            b.field_offset(&mut tt, 3, name);
            if let Some(q) = quant {
                b.field_offset(&mut tt, 4, q);
            }
            tensors.push(b.end_table(tt));
        }
        let tensors = b.offsets(&tensors);
        let mut ops = Vec::with_capacity(self.ops.len());
        for op in &self.ops {
            let ins = b.i32s(&op.inputs);
            let outs = b.i32s(&op.outputs);
            let options = Self::write_options(&mut b, &op.options)?;
            let mut t = b.start_table();
            b.field_u32(&mut t, 0, op.code);
            b.field_offset(&mut t, 1, ins);
            b.field_offset(&mut t, 2, outs);
            if let Some((kind, table)) = options {
                b.field_u8(&mut t, 3, kind);
                b.field_offset(&mut t, 4, table);
            }
            ops.push(b.end_table(t));
        }
        let ops = b.offsets(&ops);
        let graph_inputs = b.i32s(inputs);
        let graph_outputs = b.i32s(outputs);
        let name = b.string("main");
        let mut g = b.start_table();
        b.field_offset(&mut g, 0, tensors);
        b.field_offset(&mut g, 1, graph_inputs);
        b.field_offset(&mut g, 2, graph_outputs);
        b.field_offset(&mut g, 3, ops);
        b.field_offset(&mut g, 4, name);
        let graph = b.end_table(g);
        let graphs = b.offsets(&[graph]);
        let mut codes = Vec::with_capacity(self.codes.len());
        for &(code, version) in &self.codes {
            let mut t = b.start_table();
            // Codes past 127 keep 127 (PLACEHOLDER_FOR_GREATER_OP_CODES)
            // in the old byte field, as TFLite's schema asks.
            b.field_u8(&mut t, 0, code.clamp(0, 127) as u8);
            b.field_i32(&mut t, 2, version);
            b.field_i32(&mut t, 3, code);
            codes.push(b.end_table(t));
        }
        let codes = b.offsets(&codes);
        let description = b.string("kael post-training quantization");
        let mut m = b.start_table();
        b.field_u32(&mut m, 0, 3);
        b.field_offset(&mut m, 1, codes);
        b.field_offset(&mut m, 2, graphs);
        b.field_offset(&mut m, 3, description);
        b.field_offset(&mut m, 4, buffers);
        let root = b.end_table(m);
        Ok(b.finish(root, b"TFL3"))
    }
}
