//! Planned execution (NOTE [Planned execution]): a traced forward or
//! training step, replayed on an exact arena, gives the eager device's bits.

use kael_core::nn::Module;
use kael_core::nn::{Reduction, mse_loss};
use kael_core::optim::{Optimizer, Sgd, SgdConfig};
use kael_core::plan::{Accumulation, Arena, Bind, Binding, Plan, PlanRef, Replayer, Tracer};
use kael_core::{Device, Error, Result, Tensor};

use kael_tests::sine_plan::{NAMES, Sine, batch};

/// The data of each tensor.
fn data(ts: &[Tensor]) -> Result<Vec<Vec<f32>>> {
    ts.iter().map(|t| t.to_vec::<f32>()).collect()
}

struct TrainPlan {
    plan: Plan,
    initial: Vec<Vec<f32>>,
    first_loss: f32,
}

/// A traced SGD training step of `Sine` (seed 1) on batch 0 of `n`.
fn train_plan(acc: Accumulation, n: usize) -> Result<TrainPlan> {
    let t = kael_tests::sine_plan::trace_step(acc, 1, n)?;
    Ok(TrainPlan {
        plan: t.plan,
        initial: t.initial,
        first_loss: t.loss,
    })
}

/// Runs a training plan for one batch, updating `params` in place.
fn replay_step(
    plan: &PlanRef<'_>,
    arena: &mut [u8],
    params: &mut [Vec<f32>],
    x: &[f32],
    t: &[f32],
) -> Result<f32> {
    let mut loss = [0.0f32];
    let [p0, p1, p2, p3, p4, p5] = params else {
        panic!("six parameters");
    };
    plan.run(
        arena,
        &mut [
            Bind::input("x", x),
            Bind::input("t", t),
            Bind::output("loss", &mut loss),
            Bind::state(NAMES[0], p0),
            Bind::state(NAMES[1], p1),
            Bind::state(NAMES[2], p2),
            Bind::state(NAMES[3], p3),
            Bind::state(NAMES[4], p4),
            Bind::state(NAMES[5], p5),
        ],
    )?;
    Ok(loss[0])
}

/// Eager SGD training of `Sine` (seed 1) on `dev` for `steps` batches: the
/// losses and the final parameters.
fn eager_training(dev: &Device, steps: usize, n: usize) -> Result<(Vec<f32>, Vec<Vec<f32>>)> {
    let m = Sine::new(dev, 1)?;
    let mut opt = Sgd::new(
        m.params(),
        SgdConfig {
            lr: 0.05,
            ..SgdConfig::default()
        },
    )?;
    let mut losses = Vec::new();
    for i in 0..steps {
        let (bx, by) = batch(i, n);
        let x = Tensor::from_slice(&bx, &[n, 1], dev)?;
        let t = Tensor::from_slice(&by, &[n, 1], dev)?;
        opt.zero_grad();
        let loss = mse_loss(&m.forward(&x)?, &t, Reduction::Mean)?;
        loss.backward()?;
        opt.step()?;
        losses.push(loss.to_vec::<f32>()?[0]);
    }
    Ok((losses, data(&m.params())?))
}

#[test]
fn a_planned_training_step_reproduces_100_eager_steps_bit_for_bit() -> Result<()> {
    let tp = train_plan(Accumulation::F64, 16)?;
    let (eager_losses, eager_params) = eager_training(&Device::cpu(), 100, 16)?;
    assert_eq!(tp.first_loss.to_bits(), eager_losses[0].to_bits());
    let mut params = tp.initial.clone();
    let mut arena = vec![0u128; tp.plan.arena_bytes().div_ceil(16)];
    let arena: &mut [u8] = bytemuck::cast_slice_mut(&mut arena);
    for (i, want) in eager_losses.iter().enumerate() {
        let (x, t) = batch(i, 16);
        let got = replay_step(&tp.plan.as_ref(), arena, &mut params, &x, &t)?;
        assert_eq!(
            got.to_bits(),
            want.to_bits(),
            "loss of step {i}: {got} vs eager {want}"
        );
    }
    for (p, (got, want)) in params.iter().zip(&eager_params).enumerate() {
        let same = got
            .iter()
            .zip(want)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "parameter {} differs after 100 steps", NAMES[p]);
    }
    // It learned something: the loss fell.
    assert!(eager_losses[99] < eager_losses[0]);
    Ok(())
}

#[test]
fn a_training_plan_traced_with_f32_sums_matches_an_f32_accumulating_device() -> Result<()> {
    use kael_core::allocator::GlobalAllocator;
    use kael_core::cpu::{CpuBackend, dtypes, ops};
    use kael_core::shared::Shared;
    let tp = train_plan(Accumulation::F32, 16)?;
    let be = CpuBackend::<{ dtypes::ALL }, { ops::ALL }, true>::with_allocator(Shared::new(
        GlobalAllocator::new(),
    ));
    let dev = Device::from_backend(Shared::new(be));
    let (eager_losses, eager_params) = eager_training(&dev, 20, 16)?;
    let mut params = tp.initial.clone();
    let mut arena = Arena::<8192>::new();
    for (i, want) in eager_losses.iter().enumerate() {
        let (x, t) = batch(i, 16);
        let got = replay_step(&tp.plan.as_ref(), arena.as_mut_slice(), &mut params, &x, &t)?;
        assert_eq!(got.to_bits(), want.to_bits(), "loss of step {i}");
    }
    assert_eq!(params, eager_params);
    Ok(())
}

/// A traced inference of `Sine` (seed 7) on a batch of `n`, weights frozen
/// into the plan.
fn infer_plan(n: usize) -> Result<(Plan, Sine, Tracer)> {
    let tracer = Tracer::new(Accumulation::F64);
    let dev = tracer.device();
    let m = Sine::new(&dev, 7)?;
    let x = Tensor::zeros(&[n, 1], kael_core::DType::F32, &dev)?;
    let (y, rec) = tracer.record(|| m.forward(&x))?;
    let plan = Plan::build(&rec, &[Binding::input("x", &x), Binding::output("y", &y)])?;
    Ok((plan, m, tracer))
}

#[test]
fn a_planned_forward_gives_the_eager_bits_with_frozen_weights() -> Result<()> {
    let (plan, m, tracer) = infer_plan(4)?;
    let dev = tracer.device();
    let mut arena = Arena::<1024>::new();
    for i in 0..10 {
        let (x, _) = batch(i, 4);
        let want = m
            .forward(&Tensor::from_slice(&x, &[4, 1], &dev)?)?
            .to_vec::<f32>()?;
        let mut got = [0.0f32; 4];
        plan.run(
            arena.as_mut_slice(),
            &mut [Bind::input("x", &x), Bind::output("y", &mut got)],
        )?;
        assert_eq!(got.to_vec(), want);
    }
    // 1-16-16-1 on 4 rows: the widest live set is two [4, 16] f32
    // activations (the first layer's, read while the second's is
    // written; the pre-activations are fused away): 2 · 256 B.
    assert_eq!(plan.arena_bytes(), 512);
    Ok(())
}

#[test]
fn each_linear_relu_layer_of_a_forward_becomes_one_flat_step() -> Result<()> {
    use kael_core::cpu::ops;
    let (plan, m, tracer) = infer_plan(4)?;
    // matmul + bias + relu, twice, then matmul + bias (NOTE [Fused
    // epilogues]); all 2-D, so no step needs the strided walker.
    assert_eq!(plan.as_ref().n_steps(), 3);
    assert!(!plan.as_ref().strided()?);
    let flat =
        Replayer::<{ ops::MATMUL | ops::ADD | ops::RELU }, false, false>::new(&plan.as_ref())?;
    let (x, _) = batch(3, 4);
    let want = m
        .forward(&Tensor::from_slice(&x, &[4, 1], &tracer.device())?)?
        .to_vec::<f32>()?;
    let mut got = [0.0f32; 4];
    let mut arena = Arena::<512>::new();
    flat.run(
        arena.as_mut_slice(),
        &mut [Bind::input("x", &x), Bind::output("y", &mut got)],
    )?;
    assert_eq!(got.to_vec(), want);
    Ok(())
}

#[test]
fn a_pre_activation_that_is_bound_is_not_fused_away() -> Result<()> {
    let tracer = Tracer::new(Accumulation::F64);
    let dev = tracer.device();
    let m = Sine::new(&dev, 3)?;
    let x = Tensor::from_slice(&[0.5f32, -1.0, 2.0], &[3, 1], &dev)?;
    let (outs, rec) = tracer.record(|| {
        let pre = m.l1.forward(&x)?;
        let y = m.l2.forward(&pre.relu()?)?;
        Ok((pre, y))
    })?;
    let (pre, y) = outs;
    let plan = Plan::build(
        &rec,
        &[
            Binding::input("x", &x),
            Binding::output("pre", &pre),
            Binding::output("y", &y),
        ],
    )?;
    // Layer 1's sum feeds the bias add only, so they fuse; the biased
    // pre-activation is an output, so its relu stays a step of its own.
    assert_eq!(plan.as_ref().n_steps(), 3);
    let (mut p, mut o) = ([0.0f32; 48], [0.0f32; 48]);
    let mut arena = Arena::<1024>::new();
    plan.run(
        arena.as_mut_slice(),
        &mut [
            Bind::input("x", &[0.5, -1.0, 2.0]),
            Bind::output("pre", &mut p),
            Bind::output("y", &mut o),
        ],
    )?;
    assert_eq!(p.to_vec(), pre.to_vec::<f32>()?);
    assert_eq!(o.to_vec(), y.to_vec::<f32>()?);
    Ok(())
}

#[test]
fn a_batched_matmul_needs_a_strided_replayer() -> Result<()> {
    use kael_core::cpu::ops;
    let tracer = Tracer::new(Accumulation::F64);
    let dev = tracer.device();
    let a = Tensor::from_slice(
        &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
        &[2, 2, 2],
        &dev,
    )?;
    let b = Tensor::from_slice(&[0.5f32, -1.0, 0.25, 2.0], &[2, 2], &dev)?;
    let (y, rec) = tracer.record(|| a.matmul(&b.expand(&[2, 2, 2])?))?;
    let plan = Plan::build(&rec, &[Binding::input("a", &a), Binding::output("y", &y)])?;
    assert!(plan.as_ref().strided()?);
    let e = Replayer::<{ ops::MATMUL }, false, false>::new(&plan.as_ref()).unwrap_err();
    assert!(e.to_string().contains("STRIDED = true"), "{e}");
    let mut out = [0.0f32; 8];
    Replayer::<{ ops::MATMUL }, false, true>::new(&plan.as_ref())?.run(
        &mut [],
        &mut [
            Bind::input("a", &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]),
            Bind::output("y", &mut out),
        ],
    )?;
    assert_eq!(out.to_vec(), y.to_vec::<f32>()?);
    // By hand: [[1, 2], [3, 4]] @ [[0.5, -1], [0.25, 2]].
    assert_eq!(out[..4], [1.0, 3.0, 2.5, 5.0]);
    Ok(())
}

/// Softmax along the last dimension, log-softmax along dim 0 of a
/// transposed view (strided rows), and an extreme row (a large value, a
/// -inf) replay with the eager bits on both accumulations, and the
/// softmax rows match a hand computation.
#[test]
fn softmax_and_log_softmax_replay_with_the_eager_bits() -> Result<()> {
    use kael_core::cpu::ops;
    let x = [1.0f32, -2.0, 0.5, 3.0, 100.0, f32::NEG_INFINITY];
    for acc in [Accumulation::F64, Accumulation::F32] {
        let tracer = Tracer::new(acc);
        let t = Tensor::from_slice(&x, &[2, 3], &tracer.device())?;
        let ((p, l), rec) = tracer.record(|| Ok((t.softmax(-1)?, t.t()?.log_softmax(0)?)))?;
        let plan = Plan::build(
            &rec,
            &[
                Binding::input("x", &t),
                Binding::output("p", &p),
                Binding::output("l", &l),
            ],
        )?;
        assert_eq!(plan.as_ref().ops()?, ops::SOFTMAX);
        let (mut gp, mut gl) = ([0.0f32; 6], [0.0f32; 6]);
        let binds = &mut [
            Bind::input("x", &x),
            Bind::output("p", &mut gp),
            Bind::output("l", &mut gl),
        ];
        let mut arena = Arena::<256>::new();
        if acc == Accumulation::F64 {
            Replayer::<{ ops::SOFTMAX }, false>::new(&plan.as_ref())?
                .run(arena.as_mut_slice(), binds)?;
        } else {
            Replayer::<{ ops::SOFTMAX }, true>::new(&plan.as_ref())?
                .run(arena.as_mut_slice(), binds)?;
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&gp), bits(&p.to_vec::<f32>()?), "{acc:?}");
        assert_eq!(bits(&gl), bits(&l.to_vec::<f32>()?), "{acc:?}");
        // By hand: e^(x - max) / sum for the first row; the second is
        // [e^-97 (an f32 subnormal), 1, 0] (-inf gives 0).
        let e: Vec<f64> = x[..3].iter().map(|&v| (f64::from(v) - 1.0).exp()).collect();
        let s: f64 = e.iter().sum();
        for k in 0..3 {
            assert!((f64::from(gp[k]) - e[k] / s).abs() < 1e-6, "{acc:?} {gp:?}");
        }
        assert!(
            (f64::from(gp[3]) - (-97.0f64).exp()).abs() < 1e-44,
            "{gp:?}"
        );
        assert_eq!(gp[4..], [1.0, 0.0]);
    }
    Ok(())
}

#[test]
fn an_arena_of_exactly_arena_bytes_suffices_and_one_byte_less_is_refused() -> Result<()> {
    let tp = train_plan(Accumulation::F64, 16)?;
    let need = tp.plan.arena_bytes();
    let mut buf = vec![0u128; need.div_ceil(16) + 1];
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut buf);
    let (x, t) = batch(0, 16);
    let mut params = tp.initial.clone();
    let before = params.clone();
    let e = replay_step(
        &tp.plan.as_ref(),
        &mut bytes[..need - 1],
        &mut params,
        &x,
        &t,
    )
    .unwrap_err();
    assert!(
        matches!(e, Error::OutOfMemory { requested, available: Some(a) } if requested == need && a == need - 1),
        "{e}"
    );
    assert_eq!(params, before, "a refused replay changes nothing");
    replay_step(&tp.plan.as_ref(), &mut bytes[..need], &mut params, &x, &t)?;
    assert_ne!(params, before);
    // Misaligned arenas are refused too.
    let e = replay_step(
        &tp.plan.as_ref(),
        &mut bytes[1..need + 1],
        &mut params,
        &x,
        &t,
    )
    .unwrap_err();
    assert!(e.to_string().contains("16-byte aligned"), "{e}");
    Ok(())
}

#[test]
fn the_arena_is_smaller_than_the_eager_peak() -> Result<()> {
    // The planner reuses memory by liveness: a training step's arena is
    // well under the sum of its buffers.
    let tp = train_plan(Accumulation::F64, 16)?;
    let total: usize = 52 * 16 * 16 * 4; // a loose upper bound: 52 buffers of [16, 16]
    assert!(
        tp.plan.arena_bytes() < total / 4,
        "{}",
        tp.plan.arena_bytes()
    );
    Ok(())
}

#[test]
fn a_plan_survives_serialisation() -> Result<()> {
    let tp = train_plan(Accumulation::F64, 8)?;
    let bytes = tp.plan.to_bytes();
    let back = Plan::from_bytes(&bytes)?;
    assert_eq!(back, tp.plan);
    // Aligned bytes are read in place.
    let words: Vec<u32> = tp.plan.words().to_vec();
    let view = PlanRef::from_bytes(bytemuck::cast_slice(&words))?;
    assert_eq!(view.arena_bytes(), tp.plan.arena_bytes());
    // Misaligned ones are refused with the fix.
    let mut shifted = vec![0u8; bytes.len() + 1];
    shifted[1..].copy_from_slice(&bytes);
    let e = PlanRef::from_bytes(&shifted[1..]).unwrap_err();
    assert!(e.to_string().contains("aligned"), "{e}");
    Ok(())
}

#[test]
fn replaying_with_another_shape_is_refused_and_says_to_plan_again() -> Result<()> {
    let tp = train_plan(Accumulation::F64, 16)?;
    let (x, t) = batch(0, 8);
    let mut params = tp.initial.clone();
    let mut arena = Arena::<8192>::new();
    let e = replay_step(&tp.plan.as_ref(), arena.as_mut_slice(), &mut params, &x, &t).unwrap_err();
    assert!(e.to_string().contains("trace and plan again"), "{e}");
    assert_eq!(params, tp.initial);
    Ok(())
}

#[test]
fn missing_unknown_and_read_only_binds_are_refused() -> Result<()> {
    let (plan, _, _) = infer_plan(2)?;
    let mut arena = Arena::<1024>::new();
    let x = [0.5f32, 1.0];
    let mut y = [7.0f32; 2];
    let e = plan
        .run(arena.as_mut_slice(), &mut [Bind::input("x", &x)])
        .unwrap_err();
    assert!(e.to_string().contains("one Bind per binding"), "{e}");
    let e = plan
        .run(
            arena.as_mut_slice(),
            &mut [Bind::input("x", &x), Bind::output("z", &mut y)],
        )
        .unwrap_err();
    assert!(
        e.to_string().contains("names no binding of the plan"),
        "{e}"
    );
    let y2 = [0.0f32; 2];
    let e = plan
        .run(
            arena.as_mut_slice(),
            &mut [Bind::input("x", &x), Bind::input("y", &y2)],
        )
        .unwrap_err();
    assert!(e.to_string().contains("read-only"), "{e}");
    let e = plan
        .run(
            arena.as_mut_slice(),
            &mut [Bind::input("x", &x), Bind::input("x", &x)],
        )
        .unwrap_err();
    assert!(e.to_string().contains("same name"), "{e}");
    assert_eq!(y, [7.0; 2]);
    Ok(())
}

#[test]
fn a_plan_traced_with_other_sums_is_refused_by_a_replayer() -> Result<()> {
    use kael_core::cpu::ops;
    let tp = train_plan(Accumulation::F64, 4)?;
    let e = Replayer::<{ ops::ALL }, true>::new(&tp.plan.as_ref()).unwrap_err();
    assert!(e.to_string().contains("Accumulation::F32"), "{e}");
    Replayer::<{ ops::ALL }, false>::new(&tp.plan.as_ref())?;
    // A replayer without matmul refuses before running anything.
    let e = Replayer::<{ ops::ALL & !ops::MATMUL }, false>::new(&tp.plan.as_ref()).unwrap_err();
    assert!(matches!(e, Error::Unsupported { op: "matmul", .. }), "{e}");
    Ok(())
}

#[test]
fn ops_a_plan_cannot_replay_are_refused_when_building_it() -> Result<()> {
    // (argmax and argsort were here; plans replay them now: see
    // plan_families.rs.)
    let tracer = Tracer::new(Accumulation::F64);
    let x = Tensor::from_slice(&[1.0f32, 2.0], &[2], &tracer.device())?;
    let (y, rec) = tracer.record(|| x.nonzero()?.to_dtype(kael_core::DType::F32))?;
    let e = Plan::build(&rec, &[Binding::input("x", &x), Binding::output("y", &y)]).unwrap_err();
    assert!(matches!(e, Error::Unsupported { op: "nonzero", .. }), "{e}");
    Ok(())
}

#[test]
fn bad_bindings_are_refused_when_building() -> Result<()> {
    let tracer = Tracer::new(Accumulation::F64);
    let dev = tracer.device();
    let x = Tensor::from_slice(&[1.0f32, -2.0], &[2], &dev)?;
    let w = Tensor::from_slice(&[3.0f32, 4.0], &[2], &dev)?;
    let (y, rec) = tracer.record(|| {
        let y = x.mul(&w)?;
        w.add_(&x)?;
        Ok(y)
    })?;
    // w is written: unbound, it cannot be a constant.
    let e = Plan::build(&rec, &[Binding::input("x", &x), Binding::output("y", &y)]).unwrap_err();
    assert!(e.to_string().contains("Binding::state"), "{e}");
    // ... nor an input.
    let e = Plan::build(
        &rec,
        &[
            Binding::input("x", &x),
            Binding::input("w", &w),
            Binding::output("y", &y),
        ],
    )
    .unwrap_err();
    assert!(e.to_string().contains("Binding::state"), "{e}");
    // An output must have been made while recording.
    let e = Plan::build(
        &rec,
        &[
            Binding::output("x", &x),
            Binding::state("w", &w),
            Binding::output("y", &y),
        ],
    )
    .unwrap_err();
    assert!(e.to_string().contains("existed before recording"), "{e}");
    // Names are unique.
    let e = Plan::build(
        &rec,
        &[
            Binding::input("x", &x),
            Binding::state("x", &w),
            Binding::output("y", &y),
        ],
    )
    .unwrap_err();
    assert!(e.to_string().contains("same name"), "{e}");
    // A view is not a whole storage.
    let v = x.narrow(0, 0, 1)?;
    let e = Plan::build(
        &rec,
        &[
            Binding::input("x", &v),
            Binding::state("w", &w),
            Binding::output("y", &y),
        ],
    )
    .unwrap_err();
    assert!(e.to_string().contains("view"), "{e}");
    let plan = Plan::build(
        &rec,
        &[
            Binding::input("x", &x),
            Binding::state("w", &w),
            Binding::output("y", &y),
        ],
    )?;
    let mut wd = [3.0f32, 4.0];
    let mut yd = [0.0f32; 2];
    plan.run(
        &mut [],
        &mut [
            Bind::input("x", &[1.0, -2.0]),
            Bind::state("w", &mut wd),
            Bind::output("y", &mut yd),
        ],
    )?;
    assert_eq!((yd, wd), ([3.0, -8.0], [4.0, 2.0]));
    Ok(())
}

#[test]
fn in_place_ops_replay_in_place() -> Result<()> {
    let tracer = Tracer::new(Accumulation::F64);
    let dev = tracer.device();
    let x = Tensor::from_slice(&[1.0f32, -2.0, 3.0], &[3], &dev)?;
    let (y, rec) = tracer.record(|| {
        let y = x.mul_scalar(2.0)?;
        y.add_(&y)?; // exactly in place: 4x
        y.relu_()?;
        Ok(y)
    })?;
    let plan = Plan::build(&rec, &[Binding::input("x", &x), Binding::output("y", &y)])?;
    assert_eq!(y.to_vec::<f32>()?, vec![4.0, 0.0, 12.0]);
    let mut out = [0.0f32; 3];
    plan.run(
        Arena::<64>::new().as_mut_slice(),
        &mut [
            Bind::input("x", &[0.5, 1.0, -1.0]),
            Bind::output("y", &mut out),
        ],
    )?;
    assert_eq!(out, [2.0, 4.0, 0.0]);
    Ok(())
}

#[test]
fn corrupt_plans_are_refused_and_never_panic() -> Result<()> {
    // Every word of a small training plan set to values that break it:
    // either the plan is refused, or (a word whose value does not matter
    // to validity, like a float) it replays without panicking.
    let tp = train_plan(Accumulation::F64, 2)?;
    let words = tp.plan.words().to_vec();
    let mut arena = Arena::<4096>::new();
    let (x, t) = batch(0, 2);
    let mut refused = 0;
    for i in 0..words.len() {
        for v in [
            0u32,
            1,
            7,
            0xFFFF_FFFF,
            words[i] ^ 0x10,
            words[i].wrapping_add(4),
        ] {
            let mut w = words.clone();
            w[i] = v;
            match PlanRef::new(&w) {
                Err(_) => refused += 1,
                Ok(p) => {
                    let mut params = tp.initial.clone();
                    let _ = replay_step(&p, arena.as_mut_slice(), &mut params, &x, &t);
                }
            }
        }
    }
    assert!(
        refused > words.len(),
        "{refused} of {} corruptions refused",
        words.len() * 6
    );
    // Truncations too.
    for n in 0..words.len() {
        assert!(PlanRef::new(&words[..n]).is_err());
    }
    Ok(())
}

#[test]
fn the_firmware_examples_plans_are_current() -> Result<()> {
    // firmware-examples/ embeds these files; regenerate them with
    // `cargo run -p kael-tests --example sine_plan -- firmware-examples/data`.
    let a = kael_tests::sine_plan::generate()?;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../firmware-examples/data");
    let read = |f: &str| std::fs::read(dir.join(f)).unwrap_or_default();
    assert!(
        read("sine_infer.plan") == a.infer_plan.to_bytes(),
        "sine_infer.plan is stale"
    );
    assert!(
        read("sine_train.plan") == a.train_plan.to_bytes(),
        "sine_train.plan is stale"
    );
    assert!(
        read("sine_plan_io.rs") == a.io_rs.as_bytes(),
        "sine_plan_io.rs is stale"
    );
    let m = kael_tests::mlp_plan::generate(&read("mlp_infer.bin"))?;
    for (file, bytes) in [
        ("mlp_infer.plan", m.infer_plan.to_bytes()),
        ("mlp_grad.plan", m.grad_plan.to_bytes()),
        ("xor_train.plan", m.xor_plan.to_bytes()),
        ("mlp_plan_io.rs", m.io_rs.clone().into_bytes()),
    ] {
        assert!(read(file) == bytes, "{file} is stale");
    }
    // The firmware replayers link exactly these kernels.
    use kael_core::cpu::ops;
    assert_eq!(
        a.infer_plan.as_ref().ops()?,
        ops::MATMUL | ops::ADD | ops::RELU
    );
    let train = ops::FILL
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
    assert_eq!(a.train_plan.as_ref().ops()?, train);
    assert_eq!(
        a.train_plan.arena_bytes(),
        5252,
        "sine_plan_train.rs sizes its arena with this"
    );
    Ok(())
}

/// The plans of the `mlp_infer_plan`, `arena_plan` and `mlp_train_plan`
/// firmware examples, replayed on the host with the replayers those
/// examples build, give the eager examples' values bit for bit: each
/// sample's class probabilities (the model file's `expected`, computed
/// eagerly as a batch), the batch's loss and gradients, and every epoch's
/// XOR loss until convergence.
#[test]
fn the_mlp_example_plans_replay_the_eager_examples_bit_for_bit() -> Result<()> {
    use kael_core::cpu::ops;
    use kael_tests::mlp_plan::{self, MlpFile, XOR_TARGET, XOR_X, XOR_Y};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../firmware-examples/data");
    let bin = std::fs::read(dir.join("mlp_infer.bin")).unwrap();
    let file = MlpFile::read(&bin)?;
    let [w1, b1, w2, b2, x, expected] = &file.sections;
    let [n_in, _, n_out, n] = file.dims;
    let a = mlp_plan::generate(&bin)?;
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();

    // Inference, one sample at a time, flat steps only.
    let infer = a.infer_plan.as_ref();
    assert!(!infer.strided()?);
    let r = Replayer::<{ ops::MATMUL | ops::ADD | ops::RELU | ops::SOFTMAX }, false, false>::new(
        &infer,
    )?;
    let mut arena = Arena::<512>::new();
    for i in 0..n {
        let mut p = vec![0.0f32; n_out];
        r.run(
            arena.as_mut_slice(),
            &mut [
                Bind::input("w1", w1),
                Bind::input("b1", b1),
                Bind::input("w2", w2),
                Bind::input("b2", b2),
                Bind::input("x", &x[i * n_in..(i + 1) * n_in]),
                Bind::output("p", &mut p),
            ],
        )?;
        assert_eq!(
            bits(&p),
            bits(&expected[i * n_out..(i + 1) * n_out]),
            "sample {i}"
        );
    }

    // The batch's forward and backward, against the reference device.
    let cpu = Device::cpu();
    let t = |v: &[f32], s: &[usize]| Tensor::from_slice(v, s, &cpu);
    let mut w = vec![
        t(w1, &[n_in, w1.len() / n_in])?.requires_grad_(true)?,
        t(b1, &[b1.len()])?,
        t(w2, &[b1.len(), n_out])?,
        t(b2, &[n_out])?,
        t(x, &[n, n_in])?.requires_grad_(true)?,
    ];
    let c = t(&mlp_plan::CLASS_WEIGHTS, &[n_out])?;
    let xw = w.remove(4);
    w.push(xw.clone());
    let want = mlp_plan::arena_loss(&w, &xw, &c)?;
    let mut got = [
        vec![0.0f32; n * n_out],
        vec![0.0f32; 1],
        vec![0.0f32; n * n_in],
        vec![0.0f32; w1.len()],
    ];
    let [gp, gl, gx, gw] = &mut got;
    let mut arena = vec![0u8; a.grad_plan.arena_bytes() + 16];
    let at = arena.as_ptr().align_offset(16);
    Replayer::<{ ops::ALL }, false>::new(&a.grad_plan.as_ref())?.run(
        &mut arena[at..],
        &mut [
            Bind::input("w1", w1),
            Bind::input("b1", b1),
            Bind::input("w2", w2),
            Bind::input("b2", b2),
            Bind::input("x", x),
            Bind::output("p", gp),
            Bind::output("loss", gl),
            Bind::output("dx", gx),
            Bind::output("dw1", gw),
        ],
    )?;
    for (g, e) in got.iter().zip(&want) {
        assert_eq!(bits(g), bits(&e.to_vec::<f32>()?));
    }

    // XOR training, every epoch's loss.
    let mut p: Vec<Vec<f32>> = mlp_plan::xor_params(&cpu)?
        .iter()
        .map(|t| t.to_vec::<f32>())
        .collect::<Result<_>>()?;
    let (losses, preds) = mlp_plan::xor_eager(&cpu, &p)?;
    let r = Replayer::<{ ops::ALL }, false>::new(&a.xor_plan.as_ref())?;
    let mut arena = vec![0u8; a.xor_plan.arena_bytes() + 16];
    let at = arena.as_ptr().align_offset(16);
    let (mut loss, mut pred) = ([0.0f32], [0.0f32; 4]);
    for (epoch, &want) in losses.iter().enumerate() {
        let [w1, b1, w2, b2] = &mut p[..] else {
            unreachable!()
        };
        r.run(
            &mut arena[at..],
            &mut [
                Bind::input("x", &XOR_X),
                Bind::input("y", &XOR_Y),
                Bind::output("loss", &mut loss),
                Bind::output("pred", &mut pred),
                Bind::state("w1", w1),
                Bind::state("b1", b1),
                Bind::state("w2", w2),
                Bind::state("b2", b2),
            ],
        )?;
        assert_eq!(loss[0].to_bits(), want.to_bits(), "epoch {}", epoch + 1);
    }
    assert!(loss[0] < XOR_TARGET);
    assert_eq!(bits(&pred), bits(&preds));
    Ok(())
}
