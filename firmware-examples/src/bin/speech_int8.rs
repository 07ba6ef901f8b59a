//! A keyword-spotting model the size of TFLite Micro's micro_speech, in
//! int8, from its `.tflite` file.
//!
//! `tests/data/tflite/speech.tflite` (a 49x40 int8 spectrogram, a 10x8
//! depthwise convolution with 8 filters at stride 2 and ReLU, flatten, a
//! fully-connected layer to 4 keywords, softmax; int8 input and output as
//! TFLite Micro deploys it; `tests/data/tflite/gen.py`) is
//! `include_bytes!`-ed into flash and parsed in place with only the four
//! kernels it uses. The example exits 0 only if all four keyword scores
//! of each of four spectrograms equal, bit for bit, what TFLite's own
//! interpreter (reference kernels) produced (`tests/data/tflite/
//! speech_io.rs`). On Cortex-M4 the convolution and fully-connected dot
//! products run on the DSP extension (NOTE [DSP dot product] in kael-core).
//!
//! `extra=N` on QEMU's command line runs N more inferences, for
//! instruction counts (as in `sine_int8`).
#![no_std]
#![no_main]

extern crate alloc;

use cortex_m_rt::entry;
use kael_core::Error;
use kael_core::quant::{Model, OpKernel, Value};
use kael_firmware_examples::say::{self, Part::Int, Part::Text};
use kael_firmware_examples::{exit, extra_runs, heap, stack};

mod io {
    include!("../../../tests/data/tflite/speech_io.rs");
}

static MODEL: &[u8] = include_bytes!("../../../tests/data/tflite/speech.tflite");

/// The kernels the model uses: only these are linked.
const KERNELS: [OpKernel; 4] = [
    OpKernel::DEPTHWISE_CONV_2D,
    OpKernel::RESHAPE,
    OpKernel::FULLY_CONNECTED,
    OpKernel::SOFTMAX,
];

/// How many spectrograms' scores equal TFLite's.
fn run(model: &Model<'_>) -> Result<usize, Error> {
    let mut same = 0;
    for (k, (x, want)) in io::INPUTS.iter().zip(io::OUTPUTS.iter()).enumerate() {
        let out = model.run(&[Value::I8(x.to_vec())])?;
        match out.first() {
            Some(Value::I8(y)) if y[..] == want[..] => same += 1,
            _ => say::line(&[
                Text("speech_int8: spectrogram "),
                Int(k),
                Text(": scores differ from TFLite's"),
            ]),
        }
    }
    Ok(same)
}

#[entry]
fn main() -> ! {
    stack::paint();
    heap::init();
    let result = Model::parse_with(MODEL, &KERNELS).and_then(|model| {
        let same = run(&model)?;
        for _ in 0..extra_runs() {
            model.run(&[Value::I8(io::INPUTS[0].to_vec())])?;
        }
        Ok(same)
    });
    say::line(&[
        Text("speech_int8: "),
        Int(MODEL.len()),
        Text(" model bytes in flash; heap peak "),
        Int(heap::peak()),
        Text(" B"),
    ]);
    let total = io::INPUTS.len();
    match result {
        Ok(n) if n == total => {
            say::line(&[
                Text("speech_int8: PASS (the keyword scores of "),
                Int(n),
                Text(" spectrograms equal TFLite's bit for bit)"),
            ]);
            exit(true)
        }
        Ok(n) => {
            say::line(&[
                Text("speech_int8: FAIL ("),
                Int(n),
                Text(" of "),
                Int(total),
                Text(" spectrograms' scores equal TFLite's)"),
            ]);
            exit(false)
        }
        Err(e) => {
            say::line(&[
                Text("speech_int8: FAIL: an error in "),
                Text(e.op().unwrap_or("kael")),
            ]);
            exit(false)
        }
    }
}
