//! Fuzz target `tflite`: `quant::Model::parse` on arbitrary bytes, then
//! `Model::run` on zero inputs of the model's own sizes.
//!
//! Checks: no panic and no out-of-bounds read on any file (the flatbuffer
//! reader checks every offset); whatever parses either runs or returns an
//! `Err` with a message; a graph input larger than 64K elements is not run
//! (the fuzzer should not spend its time allocating).
#![no_main]

use kael_core::quant::{ElementType, Model, Value};
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
