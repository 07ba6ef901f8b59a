//! TFLite Micro's hello_world model in int8, from its `.tflite` file.
//!
//! `tests/data/tflite/sine.tflite` (1-16-16-1, trained on sin(x), converted
//! by TFLite with full-integer quantization; `tests/data/tflite/gen.py`) is
//! `include_bytes!`-ed into flash. `kael_core::quant::Model::parse` reads it
//! in place (weights stay in flash) and `Model::run` runs it with the
//! reference int8 kernels, for 16 inputs across [0, 2 pi). The example
//! exits 0 only if every output equals, bit for bit, what TFLite's own
//! interpreter (reference kernels) produced for that input
//! (`tests/data/tflite/sine_io.rs`). No `Device` or `Tensor` is involved,
//! so none of the float backend is linked.
//!
//! For instruction counts, QEMU's command line can ask for `extra=N` more
//! inferences (`-append "extra=N"`, read through semihosting): everything
//! else the run does is the same for every N, so scripts/firmware.sh takes
//! the difference of two runs' instruction counts (N = 0 and 16) and divides
//! it by 16 for an exact figure per inference.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec;
use cortex_m_rt::entry;
use kael_core::Error;
use kael_core::quant::{Model, OpKernel, Value};
use kael_firmware_examples::say::{self, Part::Hex, Part::Int, Part::Text};
use kael_firmware_examples::{exit, extra_runs, heap, stack};

mod io {
    include!("../../../tests/data/tflite/sine_io.rs");
}

static MODEL: &[u8] = include_bytes!("../../../tests/data/tflite/sine.tflite");

/// The kernels the model uses: only these are linked.
const KERNELS: [OpKernel; 3] = [
    OpKernel::QUANTIZE,
    OpKernel::FULLY_CONNECTED,
    OpKernel::DEQUANTIZE,
];

/// How many outputs equal TFLite's.
fn run() -> Result<usize, Error> {
    let model = Model::parse_with(MODEL, &KERNELS)?;
    let mut same = 0;
    for (&x, &want) in io::INPUT_BITS.iter().zip(io::OUTPUT_BITS.iter()) {
        let x = f32::from_bits(x);
        let out = model.run(&[Value::F32(vec![x])])?;
        match out.first() {
            Some(Value::F32(y)) if y.len() == 1 && y[0].to_bits() == want => same += 1,
            _ => say::line(&[
                Text("sine_int8: input bits "),
                Hex(x.to_bits()),
                Text(": output differs from TFLite's "),
                Hex(want),
            ]),
        }
    }
    Ok(same)
}

#[entry]
fn main() -> ! {
    stack::paint();
    heap::init();
    let result = run();
    let extra = extra_runs();
    if let Ok(model) = Model::parse_with(MODEL, &KERNELS) {
        for _ in 0..extra {
            let _ = model.run(&[Value::F32(vec![1.0])]);
        }
    }
    say::line(&[
        Text("sine_int8: "),
        Int(MODEL.len()),
        Text(" model bytes in flash; heap peak "),
        Int(heap::peak()),
        Text(" B"),
    ]);
    let total = io::INPUT_BITS.len();
    match result {
        Ok(n) if n == total => {
            say::line(&[
                Text("sine_int8: PASS ("),
                Int(n),
                Text(" outputs equal TFLite's bit for bit)"),
            ]);
            exit(true)
        }
        Ok(n) => {
            say::line(&[
                Text("sine_int8: FAIL ("),
                Int(n),
                Text(" of "),
                Int(total),
                Text(" outputs equal TFLite's)"),
            ]);
            exit(false)
        }
        Err(e) => {
            // The operation's name, not the whole message: Error's Display
            // would link core::fmt (run the model on the host for the text).
            say::line(&[
                Text("sine_int8: FAIL: an error in "),
                Text(e.op().unwrap_or("kael")),
            ]);
            exit(false)
        }
    }
}
