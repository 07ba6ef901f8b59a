//! `mlp_infer` replayed from a plan, with no heap: the same flash MLP
//! (`softmax(relu(x @ w1 + b1) @ w2 + b2)`), one sample at a time.
//!
//! The plan was traced on the host (`kael_tests::mlp_plan`) on a device
//! that sums f32 in f64, as `mlp_infer`'s `Device::cpu()` does. It binds
//! the weights by name, and the replay reads them in place from the model
//! file in flash (`mlp_sections`: slices, no tensors), so the weights are
//! stored once. The arena is `arena_bytes()` on the stack; the image has
//! no heap. It exits 0 only if every sample's class probabilities equal
//! the host's eager outputs (the model file's `expected`) bit for bit.
//!
//! `extra=N` on QEMU's command line runs N more inferences, for exact
//! instruction counts per inference (scripts/firmware.sh).
#![no_std]
#![no_main]

use cortex_m_rt::entry;
use kael_core::Error;
use kael_core::cpu::ops;
use kael_core::plan::{Arena, Bind, PlanRef, Replayer};
use kael_firmware_examples::plan_data::{MLP_INFER_PLAN, mlp_io};
use kael_firmware_examples::say::{self, Part::Int, Part::Text};
use kael_firmware_examples::{exit, extra_runs, mlp_sections, stack};

/// The kernels the plan uses (`PlanRef::ops`), f64 sums as traced, flat
/// layouts only: nothing else is linked.
type Infer<'p> = Replayer<'p, { ops::MATMUL | ops::ADD | ops::RELU | ops::SOFTMAX }, false, false>;

/// The most classes this example prints.
const MAX_OUT: usize = 16;

const BAD: Error = Error::InvalidArgument {
    op: "mlp_infer_plan",
    reason: "the model file does not match the plan; regenerate both (kael_tests::mlp_plan)",
};

fn run() -> Result<bool, Error> {
    let ([w1, b1, w2, b2, x, expected], [n_in, _, n_out, n]) = mlp_sections()?;
    let plan = PlanRef::from_bytes(&MLP_INFER_PLAN.0)?;
    let model = Infer::new(&plan)?;
    let mut arena = Arena::<{ mlp_io::INFER_ARENA_BYTES }>::new();
    let mut infer = |i: usize, p: &mut [f32]| -> Result<(), Error> {
        let xi = x.get(i * n_in..(i + 1) * n_in).ok_or(BAD)?;
        model.run(
            arena.as_mut_slice(),
            &mut [
                Bind::input("w1", w1),
                Bind::input("b1", b1),
                Bind::input("w2", w2),
                Bind::input("b2", b2),
                Bind::input("x", xi),
                Bind::output("p", p),
            ],
        )
    };
    let mut buf = [0.0f32; MAX_OUT];
    let p = buf.get_mut(..n_out).ok_or(BAD)?;
    let mut same = 0;
    for i in 0..n {
        infer(i, p)?;
        let want = expected.get(i * n_out..(i + 1) * n_out).ok_or(BAD)?;
        let exact = p.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits());
        same += usize::from(exact);
        let class = (0..n_out).fold(0, |best, j| if p[j] > p[best] { j } else { best });
        say::line(&[
            Text("  sample "),
            Int(i),
            Text(": class "),
            Int(class),
            Text(if exact {
                " (bit-identical to the host)"
            } else {
                " MISMATCH"
            }),
        ]);
    }
    for _ in 0..extra_runs() {
        infer(0, p)?;
    }
    say::line(&[
        Text("mlp_infer_plan: "),
        Int(MLP_INFER_PLAN.0.len()),
        Text(" plan bytes in flash, "),
        Int(plan.n_steps()),
        Text(" steps, weights read in place; arena "),
        Int(plan.arena_bytes()),
        Text(" B; heap peak 0 B (no heap)"),
    ]);
    Ok(same == n)
}

#[entry]
fn main() -> ! {
    stack::paint();
    match run() {
        Ok(true) => {
            say::line(&[Text(
                "mlp_infer_plan: PASS (every sample equals the host's eager output bit for bit)",
            )]);
            exit(true)
        }
        Ok(false) => {
            say::line(&[Text(
                "mlp_infer_plan: FAIL (outputs differ from the host's)",
            )]);
            exit(false)
        }
        Err(e) => {
            say::line(&[
                Text("mlp_infer_plan: FAIL: an error in "),
                Text(e.op().unwrap_or("kael")),
            ]);
            exit(false)
        }
    }
}
