//! Writes the sine MLP's plans and expected values for the firmware
//! examples (`kael_tests::sine_plan`).
//!
//! Run: `cargo run -p kael-tests --example sine_plan -- firmware-examples/data`.
use kael_core::Result;

fn main() -> Result<()> {
    let a = kael_tests::sine_plan::generate()?;
    println!("inference plan: {:?}", a.infer_plan);
    println!("training plan:  {:?}", a.train_plan);
    if let Some(dir) = std::env::args().nth(1) {
        let dir = std::path::Path::new(&dir);
        let write = |name: &str, bytes: &[u8]| {
            std::fs::write(dir.join(name), bytes).map_err(|_| kael_core::Error::InvalidArgument {
                op: "sine_plan",
                reason: "cannot write to the output directory",
            })
        };
        write("sine_infer.plan", &a.infer_plan.to_bytes())?;
        write("sine_train.plan", &a.train_plan.to_bytes())?;
        write("sine_plan_io.rs", a.io_rs.as_bytes())?;
        println!(
            "wrote sine_infer.plan, sine_train.plan, sine_plan_io.rs to {}",
            dir.display()
        );
    }
    Ok(())
}
