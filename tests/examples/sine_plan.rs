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
        let m =
            kael_tests::mlp_plan::generate(&std::fs::read(dir.join("mlp_infer.bin")).map_err(
                |_| kael_core::Error::InvalidArgument {
                    op: "sine_plan",
                    reason: "cannot read mlp_infer.bin in the output directory",
                },
            )?)?;
        for (name, plan) in [
            ("mlp_infer", &m.infer_plan),
            ("mlp_grad", &m.grad_plan),
            ("xor_train", &m.xor_plan),
        ] {
            println!("{name}: {plan:?}, ops {:#x}", plan.as_ref().ops()?);
        }
        write("mlp_infer.plan", &m.infer_plan.to_bytes())?;
        write("mlp_grad.plan", &m.grad_plan.to_bytes())?;
        write("xor_train.plan", &m.xor_plan.to_bytes())?;
        write("mlp_plan_io.rs", m.io_rs.as_bytes())?;
        println!(
            "wrote mlp_infer.plan, mlp_grad.plan, xor_train.plan, mlp_plan_io.rs and sine_infer.plan, sine_train.plan, sine_plan_io.rs to {}",
            dir.display()
        );
    }
    Ok(())
}
