//! TFLite Micro's hello_world model (1-16-16-1, f32) replayed from a plan,
//! with no heap.
//!
//! The plan was traced on the host (`kael_tests::sine_plan`) on a device
//! that sums f32 in f32, as this replayer does; its weights are constants
//! inside the plan, so the whole model sits in flash and is read in place
//! (`PlanRef::from_bytes`). The replay runs on a 128 B arena on the stack,
//! sized by `arena_bytes()`, and allocates nothing: this image has no heap
//! (no `heap::init`, and the heap module's buffer is not linked; the size
//! table shows 0 B of heap). It exits 0 only if all 16 outputs equal the
//! host's eager outputs bit for bit.
//!
//! `extra=N` on QEMU's command line runs N more inferences, for exact
//! instruction counts per inference (scripts/firmware.sh).
#![no_std]
#![no_main]

use cortex_m_rt::entry;
use kael_core::cpu::ops;
use kael_core::plan::{Arena, Bind, PlanRef, Replayer};
use kael_firmware_examples::plan_data::{INFER_PLAN, floats, io};
use kael_firmware_examples::say::{self, Part::Int, Part::Text};
use kael_firmware_examples::{exit, extra_runs, stack};

/// The kernels the plan uses, and only the flat layouts it has
/// (`plan.strided()` is false on the host): only these are linked.
type Infer<'p> = Replayer<'p, { ops::MATMUL | ops::ADD | ops::RELU }, true, false>;

/// The arena: `arena_bytes()` of the plan, checked at run time.
const ARENA: usize = 128;

fn infer(model: &Infer<'_>, arena: &mut [u8], x: f32) -> Result<f32, kael_core::Error> {
    let mut y = [0.0f32];
    model.run(
        arena,
        &mut [Bind::input("x", &[x]), Bind::output("y", &mut y)],
    )?;
    Ok(y[0])
}

fn run() -> Result<usize, kael_core::Error> {
    let plan = PlanRef::from_bytes(&INFER_PLAN.0)?;
    let model = Infer::new(&plan)?;
    let mut arena = Arena::<ARENA>::new();
    let want = io::INFER_OUTPUTS;
    let mut same = 0;
    for (x, w) in floats(&io::INFER_INPUTS).into_iter().zip(want) {
        if infer(&model, arena.as_mut_slice(), x)?.to_bits() == w {
            same += 1;
        }
    }
    for _ in 0..extra_runs() {
        infer(&model, arena.as_mut_slice(), 1.0)?;
    }
    say::line(&[
        Text("sine_plan: "),
        Int(INFER_PLAN.0.len()),
        Text(" plan bytes in flash, "),
        Int(plan.n_steps()),
        Text(" steps; arena peak "),
        Int(plan.arena_bytes()),
        Text(" B; heap peak 0 B (no heap)"),
    ]);
    Ok(same)
}

#[entry]
fn main() -> ! {
    stack::paint();
    let total = io::INFER_INPUTS.len();
    match run() {
        Ok(n) if n == total => {
            say::line(&[Text(
                "sine_plan: PASS (16 outputs equal the host's eager outputs bit for bit)",
            )]);
            exit(true)
        }
        Ok(n) => {
            say::line(&[
                Text("sine_plan: FAIL ("),
                Int(n),
                Text(" of 16 outputs equal the host's)"),
            ]);
            exit(false)
        }
        Err(e) => {
            say::line(&[
                Text("sine_plan: FAIL: an error in "),
                Text(e.op().unwrap_or("kael")),
            ]);
            exit(false)
        }
    }
}
