//! On-device training of the sine MLP (1-16-16-1, f32, batch 16, SGD)
//! replayed from a plan, with no heap.
//!
//! The plan of one whole training step (forward, backward, SGD update)
//! was traced on the host (`kael_tests::sine_plan`); the six parameters
//! are bound as state and live in RAM, updated in place by each replay,
//! and every intermediate (activations, gradients, reduction scratch)
//! sits in one arena of exactly `arena_bytes()`. The example trains 4
//! steps and exits 0 only if every loss and every final parameter equals
//! the host's eager training run bit for bit.
//!
//! `extra=N` on QEMU's command line runs N more training steps, for exact
//! instruction counts per step (scripts/firmware.sh).
#![no_std]
#![no_main]

use cortex_m_rt::entry;
use kael_core::cpu::ops;
use kael_core::plan::{Arena, Bind, PlanRef, Replayer};
use kael_firmware_examples::plan_data::{TRAIN_PLAN, floats, io};
use kael_firmware_examples::say::{self, Part::Int, Part::Text};
use kael_firmware_examples::{exit, extra_runs, stack};

/// The kernels a training step uses (`PlanRef::ops`): only these are linked.
pub const TRAIN_OPS: u128 = ops::FILL
    | ops::REDUCE
    | ops::MATMUL
    | ops::ADD
    | ops::SUB
    | ops::MUL
    | ops::DIV
    | ops::NEG
    | ops::SQR
    | ops::RELU
    | ops::STEP;

type Train<'p> = Replayer<'p, TRAIN_OPS, true>;

/// The arena: the plan's `arena_bytes()` (checked at run time).
const ARENA: usize = 5252;
const BATCH: usize = 16;

/// The parameters, in the plan's binding order.
struct Params {
    w1: [f32; 16],
    b1: [f32; 16],
    w2: [f32; 256],
    b2: [f32; 16],
    w3: [f32; 16],
    b3: [f32; 1],
}

fn step(
    train: &Train<'_>,
    arena: &mut [u8],
    p: &mut Params,
    x: &[f32],
    t: &[f32],
) -> Result<f32, kael_core::Error> {
    let mut loss = [0.0f32];
    train.run(
        arena,
        &mut [
            Bind::input("x", x),
            Bind::input("t", t),
            Bind::output("loss", &mut loss),
            Bind::state("l1.w", &mut p.w1),
            Bind::state("l1.b", &mut p.b1),
            Bind::state("l2.w", &mut p.w2),
            Bind::state("l2.b", &mut p.b2),
            Bind::state("l3.w", &mut p.w3),
            Bind::state("l3.b", &mut p.b3),
        ],
    )?;
    Ok(loss[0])
}

fn same<const N: usize>(got: &[f32; N], want: &[u32; N]) -> bool {
    got.iter().zip(want).all(|(g, w)| g.to_bits() == *w)
}

fn run() -> Result<bool, kael_core::Error> {
    let plan = PlanRef::from_bytes(&TRAIN_PLAN.0)?;
    let train = Train::new(&plan)?;
    let mut arena = Arena::<ARENA>::new();
    let mut p = Params {
        w1: floats(&io::T_W1),
        b1: floats(&io::T_B1),
        w2: floats(&io::T_W2),
        b2: floats(&io::T_B2),
        w3: floats(&io::T_W3),
        b3: floats(&io::T_B3),
    };
    let (xs, ts) = (floats(&io::TRAIN_X), floats(&io::TRAIN_T));
    let mut ok = true;
    for (i, want) in io::TRAIN_LOSSES.iter().enumerate() {
        let b = i * BATCH..(i + 1) * BATCH;
        let loss = step(&train, arena.as_mut_slice(), &mut p, &xs[b.clone()], &ts[b])?;
        if loss.to_bits() != *want {
            say::line(&[
                Text("sine_plan_train: the loss of step "),
                Int(i),
                Text(" differs from the host's"),
            ]);
            ok = false;
        }
    }
    ok &= same(&p.w1, &io::F_W1)
        && same(&p.b1, &io::F_B1)
        && same(&p.w2, &io::F_W2)
        && same(&p.b2, &io::F_B2)
        && same(&p.w3, &io::F_W3)
        && same(&p.b3, &io::F_B3);
    for _ in 0..extra_runs() {
        step(
            &train,
            arena.as_mut_slice(),
            &mut p,
            &xs[..BATCH],
            &ts[..BATCH],
        )?;
    }
    say::line(&[
        Text("sine_plan_train: "),
        Int(TRAIN_PLAN.0.len()),
        Text(" plan bytes in flash, "),
        Int(plan.n_steps()),
        Text(" steps; arena peak "),
        Int(plan.arena_bytes()),
        Text(" B; heap peak 0 B (no heap)"),
    ]);
    Ok(ok)
}

#[entry]
fn main() -> ! {
    stack::paint();
    match run() {
        Ok(true) => {
            say::line(&[Text(
                "sine_plan_train: PASS (4 losses and the trained parameters equal the host's eager run bit for bit)",
            )]);
            exit(true)
        }
        Ok(false) => {
            say::line(&[Text(
                "sine_plan_train: FAIL (differs from the host's eager run)",
            )]);
            exit(false)
        }
        Err(e) => {
            say::line(&[
                Text("sine_plan_train: FAIL: an error in "),
                Text(e.op().unwrap_or("kael")),
            ]);
            exit(false)
        }
    }
}
