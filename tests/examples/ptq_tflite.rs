//! Post-training quantization of a small convolutional model
//! (`kael_tests::ptq_model`): calibrates it on 256 samples, reports the
//! int8 model's accuracy against the f32 one on 256 others, and writes the
//! `.tflite` file that `tests/data/tflite/gen.py` runs with TFLite's
//! interpreter (its results become test cases).
//!
//! Run: `cargo run -p kael-tests --example ptq_tflite -- tests/data/tflite/ptq.tflite`.
use kael_core::quant::QuantizedModel;
use kael_core::{Device, Result};
use kael_tests::ptq_model::PtqModel;

fn main() -> Result<()> {
    let dev = Device::cpu();
    let model = PtqModel::new(&dev)?;
    let layers = model.layers();
    let q = QuantizedModel::calibrate(&layers, &PtqModel::samples(256, 1, &dev)?)?;
    let acc = q.compare(&layers, &PtqModel::samples(256, 2, &dev)?)?;
    println!("int8 vs f32 on 256 held-out inputs: {acc:?}");
    let bytes = q.to_tflite()?;
    if let Some(path) = std::env::args().nth(1) {
        std::fs::write(&path, &bytes).map_err(|_| kael_core::Error::InvalidArgument {
            op: "ptq_tflite",
            reason: "cannot write the output file",
        })?;
        println!("wrote {} bytes to {path}", bytes.len());
    }
    Ok(())
}
