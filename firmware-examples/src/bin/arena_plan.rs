//! The `arena` example's model, forward and backward, replayed from a plan
//! on an arena of exactly `arena_bytes()`: nothing to fragment, no heap.
//!
//! The plan (traced on the host by `kael_tests::mlp_plan`, f64 sums as the
//! `arena` example's device) runs the flash MLP on the whole batch and the
//! backward of `sum(p * [1, 2, 3, 4])`, giving the probabilities, the loss
//! and the gradients with respect to the inputs and `w1`. Every
//! intermediate has an offset fixed by the plan's liveness, so the arena
//! is sized once (`GRAD_ARENA_BYTES`, the plan's `arena_bytes()`) and
//! never fails by fragmentation, however many times it replays. The
//! example shows
//! 1. an arena 16 bytes too small is refused (`OutOfMemory`) before any
//!    kernel runs, leaving the outputs untouched;
//! 2. the exact arena gives the host's eager values bit for bit;
//! 3. 100 more replays on the same arena give the same bits.
#![no_std]
#![no_main]

use cortex_m_rt::entry;
use kael_core::Error;
use kael_core::cpu::ops;
use kael_core::plan::{Arena, Bind, PlanRef, Replayer};
use kael_firmware_examples::plan_data::{MLP_GRAD_PLAN, mlp_io};
use kael_firmware_examples::say::{self, Part::Int, Part::Text};
use kael_firmware_examples::{exit, mlp_sections, stack};

/// The kernels the plan uses (`PlanRef::ops`).
const GRAD_OPS: u128 = ops::FILL
    | ops::REDUCE
    | ops::SOFTMAX
    | ops::SOFTMAX_BACKWARD
    | ops::MATMUL
    | ops::ADD
    | ops::MUL
    | ops::RELU
    | ops::STEP;

type Grad<'p> = Replayer<'p, GRAD_OPS, false>;

/// The arena: exactly the plan's `arena_bytes()`.
const ARENA: usize = mlp_io::GRAD_ARENA_BYTES;

/// The outputs, in the plan's shapes.
struct Outputs {
    p: [f32; mlp_io::GRAD_P.len()],
    loss: [f32; 1],
    dx: [f32; mlp_io::GRAD_DX.len()],
    dw1: [f32; mlp_io::GRAD_DW1.len()],
}

fn replay(plan: &Grad<'_>, arena: &mut [u8], o: &mut Outputs) -> Result<(), Error> {
    let ([w1, b1, w2, b2, x, _], _) = mlp_sections()?;
    plan.run(
        arena,
        &mut [
            Bind::input("w1", w1),
            Bind::input("b1", b1),
            Bind::input("w2", w2),
            Bind::input("b2", b2),
            Bind::input("x", x),
            Bind::output("p", &mut o.p),
            Bind::output("loss", &mut o.loss),
            Bind::output("dx", &mut o.dx),
            Bind::output("dw1", &mut o.dw1),
        ],
    )
}

fn same<const N: usize>(got: &[f32; N], want: &[u32; N]) -> bool {
    got.iter().zip(want).all(|(g, w)| g.to_bits() == *w)
}

fn matches_host(o: &Outputs) -> bool {
    same(&o.p, &mlp_io::GRAD_P)
        && same(&o.loss, &mlp_io::GRAD_LOSS)
        && same(&o.dx, &mlp_io::GRAD_DX)
        && same(&o.dw1, &mlp_io::GRAD_DW1)
}

fn run() -> Result<bool, Error> {
    let plan = PlanRef::from_bytes(&MLP_GRAD_PLAN.0)?;
    let grad = Grad::new(&plan)?;
    let mut arena = Arena::<ARENA>::new();
    let sentinel = f32::from_bits(0x7fc0_dead);
    let mut o = Outputs {
        p: [sentinel; mlp_io::GRAD_P.len()],
        loss: [sentinel],
        dx: [sentinel; mlp_io::GRAD_DX.len()],
        dw1: [sentinel; mlp_io::GRAD_DW1.len()],
    };

    // 1. Too small: refused before anything runs.
    let small = arena
        .as_mut_slice()
        .get_mut(..ARENA - 16)
        .unwrap_or_default();
    let refused = matches!(replay(&grad, small, &mut o), Err(Error::OutOfMemory { .. }));
    let untouched = o.dx.iter().all(|v| v.to_bits() == sentinel.to_bits());
    say::line(&[
        Text("1. an arena of "),
        Int(ARENA - 16),
        Text(" B: "),
        Text(if refused {
            "refused (OutOfMemory)"
        } else {
            "NOT REFUSED"
        }),
        Text(if untouched {
            ", outputs untouched"
        } else {
            ", OUTPUTS CHANGED"
        }),
    ]);

    // 2. Exactly arena_bytes().
    replay(&grad, arena.as_mut_slice(), &mut o)?;
    let exact = matches_host(&o);
    say::line(&[
        Text("2. an arena of exactly "),
        Int(plan.arena_bytes()),
        Text(" B ("),
        Int(plan.n_steps()),
        Text(" steps): probabilities, loss and gradients "),
        Text(if exact {
            "equal the host's eager values bit for bit"
        } else {
            "DIFFER from the host's"
        }),
    ]);

    // 3. The same arena, 100 more times.
    let mut stable = true;
    for _ in 0..100 {
        replay(&grad, arena.as_mut_slice(), &mut o)?;
        stable &= matches_host(&o);
    }
    say::line(&[
        Text("3. 100 more replays on the same arena: "),
        Text(if stable { "same bits" } else { "CHANGED" }),
        Text("; heap peak 0 B (no heap)"),
    ]);
    Ok(refused && untouched && exact && stable)
}

#[entry]
fn main() -> ! {
    stack::paint();
    match run() {
        Ok(true) => {
            say::line(&[Text("arena_plan: PASS")]);
            exit(true)
        }
        Ok(false) => {
            say::line(&[Text("arena_plan: FAIL")]);
            exit(false)
        }
        Err(e) => {
            say::line(&[
                Text("arena_plan: FAIL: an error in "),
                Text(e.op().unwrap_or("kael")),
            ]);
            exit(false)
        }
    }
}
