//! `mlp_train` (XOR, 2-8-1 MLP, tanh and sigmoid, MSE, SGD lr 2) replayed
//! from a plan of one training step, with no heap.
//!
//! The plan (traced on the host by `kael_tests::mlp_plan`, f64 sums as
//! `mlp_train`'s device) runs the forward, the loss, the backward and the
//! hand-written SGD update; the four parameters are bound as state and
//! updated in place, every intermediate lives in an arena of exactly
//! `arena_bytes()`. Starting from `mlp_train`'s initial parameters, it
//! trains until the loss is below 0.01 and exits 0 only if every epoch's
//! loss, the epoch count and the final predictions equal the host's eager
//! run bit for bit.
//!
//! `extra=N` on QEMU's command line runs N more training steps, for exact
//! instruction counts per step (scripts/firmware.sh).
#![no_std]
#![no_main]

use cortex_m_rt::entry;
use kael_core::Error;
use kael_core::cpu::ops;
use kael_core::plan::{Arena, Bind, PlanRef, Replayer};
use kael_firmware_examples::plan_data::{XOR_TRAIN_PLAN, floats, mlp_io};
use kael_firmware_examples::say::{self, Part::Int, Part::Text};
use kael_firmware_examples::{exit, extra_runs, stack};

/// The kernels a step uses (`PlanRef::ops`): only these are linked.
const XOR_OPS: u128 = ops::FILL
    | ops::REDUCE
    | ops::MATMUL
    | ops::ADD
    | ops::SUB
    | ops::MUL
    | ops::DIV
    | ops::NEG
    | ops::SQR
    | ops::TANH
    | ops::SIGMOID
    | ops::AFFINE;

type Train<'p> = Replayer<'p, XOR_OPS, false>;

/// The mean squared error to reach (as `mlp_train`).
const TARGET_LOSS: f32 = 0.01;

/// The parameters, in the plan's binding order.
struct Params {
    w1: [f32; 16],
    b1: [f32; 8],
    w2: [f32; 8],
    b2: [f32; 1],
}

fn step(
    train: &Train<'_>,
    arena: &mut [u8],
    p: &mut Params,
    pred: &mut [f32; 4],
) -> Result<f32, Error> {
    let mut loss = [0.0f32];
    train.run(
        arena,
        &mut [
            Bind::input("x", &floats(&mlp_io::XOR_X)),
            Bind::input("y", &floats(&mlp_io::XOR_Y)),
            Bind::output("loss", &mut loss),
            Bind::output("pred", pred),
            Bind::state("w1", &mut p.w1),
            Bind::state("b1", &mut p.b1),
            Bind::state("w2", &mut p.w2),
            Bind::state("b2", &mut p.b2),
        ],
    )?;
    Ok(loss[0])
}

fn run() -> Result<bool, Error> {
    let plan = PlanRef::from_bytes(&XOR_TRAIN_PLAN.0)?;
    let train = Train::new(&plan)?;
    let mut arena = Arena::<{ mlp_io::XOR_ARENA_BYTES }>::new();
    let mut p = Params {
        w1: floats(&mlp_io::XOR_W1),
        b1: floats(&mlp_io::XOR_B1),
        w2: floats(&mlp_io::XOR_W2),
        b2: floats(&mlp_io::XOR_B2),
    };
    let mut pred = [0.0f32; 4];
    let mut same = true;
    let mut epochs = 0;
    while epochs < mlp_io::XOR_LOSSES.len() + 1 {
        let loss = step(&train, arena.as_mut_slice(), &mut p, &mut pred)?;
        same &= mlp_io::XOR_LOSSES.get(epochs) == Some(&loss.to_bits());
        epochs += 1;
        if epochs % 25 == 1 || loss < TARGET_LOSS {
            say::line(&[
                Text("epoch "),
                Int(epochs),
                Text(" loss x 1e6 = "),
                Int((loss * 1.0e6) as usize),
            ]);
        }
        if loss < TARGET_LOSS {
            break;
        }
    }
    let converged = epochs == mlp_io::XOR_LOSSES.len();
    let pred_same = pred
        .iter()
        .zip(&mlp_io::XOR_PRED)
        .all(|(g, w)| g.to_bits() == *w);
    let correct = pred[0] < 0.5 && pred[1] > 0.5 && pred[2] > 0.5 && pred[3] < 0.5;
    for _ in 0..extra_runs() {
        step(&train, arena.as_mut_slice(), &mut p, &mut pred)?;
    }
    say::line(&[
        Text("mlp_train_plan: converged after "),
        Int(epochs),
        Text(" epochs (host: "),
        Int(mlp_io::XOR_LOSSES.len()),
        Text("); every loss "),
        Text(if same { "bit-identical" } else { "DIFFERENT" }),
        Text(", predictions "),
        Text(if pred_same && correct {
            "bit-identical and correct"
        } else {
            "WRONG"
        }),
        Text("; "),
        Int(plan.n_steps()),
        Text(" steps, arena "),
        Int(plan.arena_bytes()),
        Text(" B, heap peak 0 B (no heap)"),
    ]);
    Ok(same && converged && pred_same && correct)
}

#[entry]
fn main() -> ! {
    stack::paint();
    match run() {
        Ok(true) => {
            say::line(&[Text("mlp_train_plan: PASS")]);
            exit(true)
        }
        Ok(false) => {
            say::line(&[Text("mlp_train_plan: FAIL")]);
            exit(false)
        }
        Err(e) => {
            say::line(&[
                Text("mlp_train_plan: FAIL: an error in "),
                Text(e.op().unwrap_or("kael")),
            ]);
            exit(false)
        }
    }
}
