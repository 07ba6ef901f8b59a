//! Fuzz target `tflite`: `quant::Model::parse` on arbitrary bytes, then
//! `Model::run` on zero inputs of the model's own sizes.
//!
//! Checks: no panic and no out-of-bounds read on any file (the flatbuffer
//! reader checks every offset); whatever parses either runs or returns an
//! `Err` with a message; a graph input larger than 64K elements, or a graph
//! of more than 20M multiply-adds, is not run (the fuzzer should not spend
//! its time on legitimately large models).
#![no_main]

use kael_core::quant::{ElementType, Model, OpKind, Value};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| run(data));

fn run(data: &[u8]) {
    let model = match Model::parse(data) {
        Ok(m) => m,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    if work(&model) > 20_000_000 {
        return;
    }
    let mut inputs = Vec::new();
    for &t in &model.inputs {
        let info = &model.tensors[t];
        let Some(n) = info.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) else {
            return;
        };
        if n > 1 << 16 {
            return;
        }
        inputs.push(match info.dtype {
            ElementType::I8 => Value::I8(vec![0; n]),
            _ => Value::F32(vec![0.0; n]),
        });
    }
    if let Err(e) = model.run(&inputs) {
        assert!(!e.to_string().is_empty());
    }
}

fn numel(shape: &[usize]) -> u128 {
    shape.iter().map(|&d| d as u128).product()
}

/// Multiply-adds (or element visits) the graph's operators declare.
fn work(model: &Model<'_>) -> u128 {
    let mut total = 0u128;
    for op in &model.operators {
        let out = numel(&model.tensors[op.outputs[0]].shape);
        let filter = op
            .inputs
            .get(1)
            .copied()
            .flatten()
            .map(|t| model.tensors[t].shape.clone())
            .unwrap_or_default();
        let per = match op.kind {
            OpKind::FullyConnected(_) => filter.get(1).copied().unwrap_or(1) as u128,
            OpKind::Conv2d(..) => numel(filter.get(1..).unwrap_or(&[])),
            OpKind::DepthwiseConv2d(..) => numel(filter.get(1..3).unwrap_or(&[])),
            OpKind::Pool2d(_, k, ..) => {
                let x = op.inputs[0]
                    .map(|t| model.tensors[t].shape.clone())
                    .unwrap_or_default();
                let h = x.get(1).copied().unwrap_or(1).min(k[0]);
                let w = x.get(2).copied().unwrap_or(1).min(k[1]);
                (h * w) as u128
            }
            _ => 1,
        };
        total = total.saturating_add(out.saturating_mul(per.max(1)));
    }
    total
}
