//! Plans of every kernel family the reference backend runs in f32
//! (NOTE [Slice-level kernels]): casts, argmax/argmin, the index ops and
//! the fused layer norm, each replayed bit for bit against eager
//! execution on the tracing device, and a training step with an
//! embedding, a cross-entropy (`gather`) and a layer norm replayed for 100
//! steps against eager training.

use kael_core::backend::Family;
use kael_core::kernels::im2col::Geometry;
use kael_core::nn::functional::{avg_pool2d, conv2d, embedding, layer_norm, max_pool2d};
use kael_core::nn::{Reduction, cross_entropy};
use kael_core::optim::{Optimizer, Sgd, SgdConfig};
use kael_core::plan::{Accumulation, Bind, Binding, Plan, Tracer};
use kael_core::{DType, Error, Result, Rng, Tensor};

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn grad(t: &Tensor) -> Result<Tensor> {
    t.grad().ok_or(Error::Autograd {
        op: "test",
        reason: "no grad",
    })
}

#[test]
fn every_family_replays_the_eager_bits() -> Result<()> {
    for acc in [Accumulation::F64, Accumulation::F32] {
        let tracer = Tracer::new(acc);
        let dev = tracer.device();
        let mut rng = Rng::new(7);
        let x = Tensor::randn(&[4, 6], DType::F32, &dev, &mut rng)?;
        let table = Tensor::randn(&[5, 6], DType::F32, &dev, &mut rng)?.requires_grad_(true)?;
        let w = Tensor::randn(&[6], DType::F32, &dev, &mut rng)?.requires_grad_(true)?;
        let b = Tensor::randn(&[6], DType::F32, &dev, &mut rng)?.requires_grad_(true)?;
        let ids = Tensor::from_slice(&[3i64, 0, 3, 1], &[4], &dev)?;
        let cols = Tensor::from_slice(&[2i32, 5, 0, 1], &[4, 1], &dev)?;
        let ((y, am, picked, dt, dw, db), rec) = tracer.record(|| {
            // index_select (embedding), the fused layer norm, gather,
            // argmax and a cast.
            let h = embedding(&ids, &table, None)?.add(&x)?;
            let n = layer_norm(&h, &[6], Some(&w), Some(&b), 1e-5)?;
            let picked = n.gather(1, &cols)?;
            let am = n.argmax(1, true)?.to_dtype(DType::F32)?;
            let y = n.tanh()?;
            // Backward: scatter_add (gather's), the fused layer norm
            // backward, index_add (embedding's).
            picked.sum_all()?.add(&y.sqr()?.sum_all()?)?.backward()?;
            // (dw and db are views of the fused backward's one [2, n] result.)
            let own = |t: Tensor| t.deep_clone();
            Ok((
                y,
                am,
                picked,
                grad(&table)?,
                own(grad(&w)?)?,
                own(grad(&b)?)?,
            ))
        })?;
        let names = ["y", "am", "picked", "dt", "dw", "db"];
        let outs = [&y, &am, &picked, &dt, &dw, &db];
        let mut binds = vec![Binding::input("x", &x)];
        binds.extend(names.iter().zip(outs).map(|(n, t)| Binding::output(n, t)));
        let plan = Plan::build(&rec, &binds)?;
        let mut got: Vec<Vec<f32>> = outs.iter().map(|t| vec![0.0; t.numel()]).collect();
        let mut arena = vec![0u128; plan.arena_bytes().div_ceil(16)];
        let xv = x.to_vec::<f32>()?;
        let mut bs = vec![Bind::input("x", &xv)];
        for (n, g) in names.iter().zip(got.iter_mut()) {
            bs.push(Bind::output(n, g));
        }
        plan.run(bytemuck::cast_slice_mut(&mut arena), &mut bs)?;
        for ((n, t), g) in names.iter().zip(outs).zip(&got) {
            assert_eq!(bits(g), bits(&t.to_vec::<f32>()?), "{n} ({acc:?})");
        }
        // The plan really holds the families (none composed away).
        let ops = plan.as_ref().ops()?;
        use kael_core::cpu::ops as k;
        for bit in [
            k::INDEX_SELECT,
            k::INDEX_ADD,
            k::GATHER,
            k::SCATTER_ADD,
            k::ARG_REDUCE,
            k::CAST,
            k::LAYER_NORM,
        ] {
            assert_ne!(ops & bit, 0, "{bit:#x} not in the plan");
        }
    }
    Ok(())
}

/// A small language-model step: embedding, layer norm, a linear head,
/// cross-entropy, SGD. Returns the loss.
struct Lm {
    table: Tensor,
    w: Tensor,
    b: Tensor,
    head: Tensor,
}

impl Lm {
    /// A model on `dev` from `seed`: a `[10, 8]` table, a layer norm with
    /// its weight near 1, a `[8, 10]` head.
    fn new(dev: &kael_core::Device, seed: u64) -> Result<Self> {
        let mut rng = Rng::new(seed);
        let mut leaf = |shape: &[usize], scale: f64| -> Result<Tensor> {
            Tensor::randn(shape, DType::F32, dev, &mut rng)?
                .mul_scalar(scale)?
                .deep_clone()
        };
        let grad = |t: Tensor| t.requires_grad_(true);
        Ok(Lm {
            table: grad(leaf(&[10, 8], 1.0)?)?,
            w: grad(leaf(&[8], 0.1)?.add_scalar(1.0)?)?,
            b: grad(leaf(&[8], 0.1)?)?,
            head: grad(leaf(&[8, 10], 0.3)?)?,
        })
    }

    /// SGD over the parameters, lr 0.5.
    fn sgd(&self) -> Result<Sgd> {
        let cfg = SgdConfig {
            lr: 0.5,
            ..Default::default()
        };
        Sgd::new(self.params(), cfg)
    }

    /// The parameters' values.
    fn values(&self) -> Result<Vec<Vec<f32>>> {
        self.params().iter().map(|p| p.to_vec::<f32>()).collect()
    }

    /// One SGD step on a batch; the loss.
    fn step(&self, opt: &mut Sgd, ids: &Tensor, targets: &Tensor) -> Result<Tensor> {
        opt.zero_grad();
        let loss = self.loss(ids, targets)?;
        loss.backward()?;
        opt.step()?;
        Ok(loss)
    }

    fn params(&self) -> Vec<Tensor> {
        vec![
            self.table.clone(),
            self.w.clone(),
            self.b.clone(),
            self.head.clone(),
        ]
    }

    fn loss(&self, ids: &Tensor, targets: &Tensor) -> Result<Tensor> {
        let h = embedding(ids, &self.table, None)?;
        let n = layer_norm(&h, &[8], Some(&self.w), Some(&self.b), 1e-5)?;
        let logits = n.matmul(&self.head)?;
        cross_entropy(&logits, targets, Reduction::Mean, None)
    }
}

#[test]
fn a_language_model_training_step_replays_100_steps_bit_for_bit() -> Result<()> {
    let tracer = Tracer::new(Accumulation::F64);
    let dev = tracer.device();
    let lm = Lm::new(&dev, 11)?;
    let ids = Tensor::from_slice(&[1i64, 4, 4, 7, 2, 9], &[6], &dev)?;
    let targets = Tensor::from_slice(&[4i64, 4, 7, 2, 9, 1], &[6], &dev)?;
    let mut opt = lm.sgd()?;
    let initial = lm.values()?;
    let mut step = || lm.step(&mut opt, &ids, &targets);
    let (loss, rec) = tracer.record(&mut step)?;
    let names = ["table", "w", "b", "head"];
    let params = lm.params();
    let mut binds = vec![Binding::output("loss", &loss)];
    binds.extend(names.iter().zip(&params).map(|(n, p)| Binding::state(n, p)));
    let plan = Plan::build(&rec, &binds)?;
    let mut arena = vec![0u128; plan.arena_bytes().div_ceil(16)];
    let mut state = initial;
    let mut eager_loss = loss.to_vec::<f32>()?;
    let mut first_and_last = (0.0f32, 0.0f32);
    for k in 0..100 {
        if k > 0 {
            eager_loss = step()?.to_vec::<f32>()?;
        }
        let mut l = [0.0f32];
        let [t, w, b, h] = &mut state[..] else {
            unreachable!("four parameters")
        };
        plan.run(
            bytemuck::cast_slice_mut(&mut arena),
            &mut [
                Bind::output("loss", &mut l),
                Bind::state("table", t),
                Bind::state("w", w),
                Bind::state("b", b),
                Bind::state("head", h),
            ],
        )?;
        assert_eq!(bits(&l), bits(&eager_loss), "loss at step {k}");
        for ((n, p), s) in names.iter().zip(&params).zip(&state) {
            assert_eq!(bits(s), bits(&p.to_vec::<f32>()?), "{n} at step {k}");
        }
        if k == 0 {
            first_and_last.0 = l[0];
        }
        first_and_last.1 = l[0];
    }
    // And it trains.
    assert!(
        first_and_last.1 < 0.5 * first_and_last.0,
        "{first_and_last:?}"
    );
    Ok(())
}

#[test]
fn sort_argsort_and_topk_replay_the_eager_bits() -> Result<()> {
    // The argsort family and a gather (NOTE [Host-staged search]), with
    // ties, NaN and both directions, along an inner and an outer dim.
    let tracer = Tracer::new(Accumulation::F64);
    let dev = tracer.device();
    let x = Tensor::from_slice(
        &[3.0f32, f32::NAN, 1.0, 3.0, -0.0, 0.0, 2.5, -7.0],
        &[2, 4],
        &dev,
    )?;
    let ((a, b, c, d), rec) = tracer.record(|| {
        let (v, i) = x.sort(1, false)?;
        let (tv, _) = x.topk(1, 0, true, true)?;
        let j = x.argsort(0, true)?.to_dtype(DType::F32)?;
        Ok((v, i.to_dtype(DType::F32)?, tv, j))
    })?;
    let names = ["a", "b", "c", "d"];
    let outs = [&a, &b, &c, &d];
    let mut binds = vec![Binding::input("x", &x)];
    binds.extend(names.iter().zip(outs).map(|(n, t)| Binding::output(n, t)));
    let plan = Plan::build(&rec, &binds)?;
    assert_ne!(plan.as_ref().ops()? & kael_core::cpu::ops::ARGSORT, 0);
    // Replayed on other values: the plan sorts, it does not repeat.
    let other = [5.0f32, -1.0, f32::NAN, 5.0, 0.5, 9.0, 5.0, 1.0];
    let eager = {
        let y = Tensor::from_slice(&other, &[2, 4], &kael_core::Device::cpu())?;
        let (v, i) = y.sort(1, false)?;
        let (tv, _) = y.topk(1, 0, true, true)?;
        let j = y.argsort(0, true)?.to_dtype(DType::F32)?;
        [v, i.to_dtype(DType::F32)?, tv, j]
    };
    let mut got: Vec<Vec<f32>> = outs.iter().map(|t| vec![0.0; t.numel()]).collect();
    let mut arena = vec![0u128; plan.arena_bytes().div_ceil(16)];
    let mut bs = vec![Bind::input("x", &other)];
    for (n, g) in names.iter().zip(got.iter_mut()) {
        bs.push(Bind::output(n, g));
    }
    plan.run(bytemuck::cast_slice_mut(&mut arena), &mut bs)?;
    for ((n, t), g) in names.iter().zip(&eager).zip(&got) {
        assert_eq!(bits(g), bits(&t.to_vec::<f32>()?), "{n}");
    }
    // By hand: row 0 [5, -1, NaN, 5] ascending is -1, 5, 5 (stable: index
    // 0 before 3), NaN last; row 1 [0.5, 9, 5, 1] is 0.5, 1, 5, 9.
    assert_eq!(got[1], [1.0, 0.0, 3.0, 2.0, 0.0, 3.0, 2.0, 1.0]);
    Ok(())
}

#[test]
fn ops_whose_results_are_computed_on_the_host_are_refused_by_name() -> Result<()> {
    let tracer = Tracer::new(Accumulation::F64);
    let x = Tensor::from_slice(&[2.0f32, 1.0, 3.0], &[3], &tracer.device())?;
    for (op, f) in [
        (
            "nonzero",
            (|x: &Tensor| x.nonzero()) as fn(&Tensor) -> Result<Tensor>,
        ),
        // The class count from the data: a data-dependent shape.
        ("one_hot", |x: &Tensor| {
            x.to_dtype(DType::I64)?.one_hot(None)?.to_dtype(DType::F32)
        }),
    ] {
        let (y, rec) = tracer.record(|| f(&x))?;
        let e =
            Plan::build(&rec, &[Binding::input("x", &x), Binding::output("y", &y)]).unwrap_err();
        assert!(
            matches!(e, Error::Unsupported { op: o, .. } if o == op),
            "{e}"
        );
        let text = e.to_string();
        assert!(
            text.starts_with(op) && text.contains("Plan::build"),
            "{text}"
        );
    }
    Ok(())
}

#[test]
fn one_hot_with_a_class_count_and_scatter_replay_the_eager_bits() -> Result<()> {
    let tracer = Tracer::new(Accumulation::F64);
    let dev = tracer.device();
    let x = Tensor::from_slice(&[2.0f32, 1.0, 3.0, 0.5, 4.0, -1.0], &[2, 3], &dev)?;
    let ix = Tensor::from_slice(&[2i64, 0, 2, 1, 1, 1], &[2, 3], &dev)?;
    let (y, rec) = tracer.record(|| {
        let h = ix.one_hot(Some(4))?.to_dtype(DType::F32)?; // [2, 3, 4]
        // Repeated targets: the last write along dim 1 wins.
        let s = x.scatter(1, &ix, &x.mul_scalar(10.0)?)?;
        h.sum(&[2], false)?.add(&s)
    })?;
    let eager = y.to_vec::<f32>()?;
    // By hand: row 0 writes 20 to col 2, 10 to col 0, 30 to col 2 (wins);
    // row 1 writes 5, 40, -10 to col 1 (the last wins); one_hot sums to 1.
    assert_eq!(eager, [11.0, 2.0, 31.0, 1.5, -9.0, 0.0]);
    let plan = Plan::build(&rec, &[Binding::output("y", &y)])?;
    let mut arena = vec![0u128; plan.arena_bytes().div_ceil(16)];
    let mut got = [0.0f32; 6];
    plan.run(
        bytemuck::cast_slice_mut(&mut arena),
        &mut [Bind::output("y", &mut got)],
    )?;
    assert_eq!(bits(&got), bits(&eager));
    let ops = plan.as_ref().ops()?;
    assert!(ops & Family::ScatterWins.bits() != 0 && ops & Family::ScatterAdd.bits() != 0);
    // A class outside the count is an error naming one_hot, on the device.
    let bad = Tensor::from_slice(&[4i64], &[1], &kael_core::Device::cpu())?;
    let e = bad.one_hot(Some(4)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::IndexOutOfRange {
                op: "one_hot",
                index: 4,
                size: 4
            }
        ),
        "{e}"
    );
    let e = x
        .scatter(1, &Tensor::from_slice(&[3i64], &[1, 1], &dev)?, &x)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::IndexOutOfRange {
                op: "scatter",
                index: 3,
                size: 3
            }
        ),
        "{e}"
    );
    Ok(())
}

#[test]
fn every_conformance_case_a_plan_can_express_replays_the_eager_bits() {
    use kael_core::conformance::{Options, run_planned};
    for acc in [Accumulation::F64, Accumulation::F32] {
        let r = run_planned(acc, &Options::default());
        println!("{acc:?}: {r}");
        assert!(r.is_ok(), "{r}");
        let not: usize = r.not_planned.values().sum();
        println!(
            "{acc:?}: {} cases replayed bit for bit, {not} not plans",
            r.checks
        );
        // Every f32 case is a plan: what is left out is other dtypes
        // (f64, f16, ... data, or integer arithmetic).
        for why in r.not_planned.keys() {
            assert!(
                why.contains("dtype") || why.contains("integer") || why.contains("not carried"),
                "a case refused for another reason: {why}\n{r}"
            );
        }
        assert!(r.checks > 2000, "{r}");
    }
}

#[test]
fn corrupt_plans_with_every_family_are_refused_or_replay_without_panicking() -> Result<()> {
    // Every word of a plan holding each slice-level family set to values
    // that break it: refused (by PlanRef::new or by the replayer, which
    // checks these families' steps: NOTE [Family steps are checked where
    // they are linked]), or replayed to an Ok or an Err, never a panic.
    let tracer = Tracer::new(Accumulation::F64);
    let dev = tracer.device();
    let table = Tensor::from_slice(&[0.5f32, -1.0, 2.0, 0.25, 1.5, -0.5], &[3, 2], &dev)?
        .requires_grad_(true)?;
    let w = Tensor::from_slice(&[1.0f32, 0.5], &[2], &dev)?.requires_grad_(true)?;
    let ids = Tensor::from_slice(&[2i64, 0, 2], &[3], &dev)?;
    let cols = Tensor::from_slice(&[1i32, 0, 1], &[3, 1], &dev)?;
    let ((y, dt), rec) = tracer.record(|| {
        let n = layer_norm(&embedding(&ids, &table, None)?, &[2], Some(&w), None, 1e-5)?;
        // The declared families too: a convolution, a max pool (and their
        // gradients), a scatter with its arena scratch.
        let img = n.reshape(&[1, 1, 3, 2])?;
        let k = Tensor::from_slice(&[1.0f32, -0.5, 0.25, 2.0], &[1, 1, 2, 2], &img.device())?;
        let c = conv2d(&img, &k, None, [1, 1], [1, 1], [1, 1], 1)?;
        let c = max_pool2d(&c, [2, 2], [1, 1], [0, 0])?.sum_all()?;
        let sc = n.scatter(1, &cols.to_dtype(DType::I64)?, &n)?.sum_all()?;
        let y = n
            .gather(1, &cols)?
            .add(&n.argmax(1, true)?.to_dtype(DType::F32)?)?
            .add(&n.argsort(1, true)?.narrow(1, 0, 1)?.to_dtype(DType::F32)?)?
            .add(&c)?
            .add(&sc)?;
        y.sum_all()?.backward()?;
        Ok((y, grad(&table)?))
    })?;
    let plan = Plan::build(
        &rec,
        &[Binding::output("y", &y), Binding::output("dt", &dt)],
    )?;
    let words = plan.words().to_vec();
    let mut arena = vec![0u128; plan.arena_bytes().div_ceil(16) + 64];
    let (mut a, mut b) = ([0.0f32; 3], [0.0f32; 6]);
    let mut refused = 0;
    for i in 0..words.len() {
        for v in [
            0u32,
            1,
            2,
            7,
            0xFFFF_FFFF,
            words[i] ^ 0x10,
            words[i].wrapping_add(4),
        ] {
            let mut c = words.clone();
            c[i] = v;
            let Ok(p) = kael_core::plan::PlanRef::new(&c) else {
                refused += 1;
                continue;
            };
            let r = p.run(
                bytemuck::cast_slice_mut(&mut arena),
                &mut [Bind::output("y", &mut a), Bind::output("dt", &mut b)],
            );
            refused += usize::from(r.is_err());
        }
    }
    assert!(
        refused > words.len(),
        "{refused} of {} refused",
        7 * words.len()
    );
    Ok(())
}

/// Batch `k` of the bound-ids test: ids and their successors (mod 10).
fn batch(k: usize) -> ([i64; 6], [i64; 6]) {
    let ids: [i64; 6] = core::array::from_fn(|j| ((k * 7 + j * 3) % 10) as i64);
    (ids, ids.map(|i| (i + 1) % 10))
}

#[test]
fn token_ids_and_targets_bound_as_indices_train_on_fresh_batches_bit_for_bit() -> Result<()> {
    let tracer = Tracer::new(Accumulation::F64);
    let dev = tracer.device();
    let lm = Lm::new(&dev, 5)?;
    let (i0, t0) = batch(0);
    let ids = Tensor::from_slice(&i0, &[6], &dev)?;
    let targets = Tensor::from_slice(&t0, &[6], &dev)?;
    let mut opt = lm.sgd()?;
    let mut state = lm.values()?;
    let mut step = || lm.step(&mut opt, &ids, &targets);
    let (loss, rec) = tracer.record(&mut step)?;
    let names = ["table", "w", "b", "head"];
    let params = lm.params();
    let mut binds = vec![
        Binding::input("ids", &ids),
        Binding::input("targets", &targets),
        Binding::output("loss", &loss),
    ];
    binds.extend(names.iter().zip(&params).map(|(n, p)| Binding::state(n, p)));
    let plan = Plan::build(&rec, &binds)?;
    assert_eq!(plan.as_ref().binding_dtype(0)?, DType::I64);
    let mut arena = vec![0u128; plan.arena_bytes().div_ceil(16)];
    let run = |arena: &mut [u128], state: &mut [Vec<f32>], ids: &[i64], t: &[i64]| {
        let mut l = [0.0f32];
        let [a, w, b, h] = state else {
            unreachable!("four parameters")
        };
        plan.run(
            bytemuck::cast_slice_mut(arena),
            &mut [
                Bind::indices("ids", ids),
                Bind::indices("targets", t),
                Bind::output("loss", &mut l),
                Bind::state("table", a),
                Bind::state("w", w),
                Bind::state("b", b),
                Bind::state("head", h),
            ],
        )
        .map(|()| l[0])
    };
    let mut losses = Vec::new();
    for k in 0..100 {
        let (bi, bt) = batch(k);
        let eager = if k == 0 {
            loss.to_vec::<f32>()?[0]
        } else {
            ids.copy_(&Tensor::from_slice(&bi, &[6], &dev)?)?;
            targets.copy_(&Tensor::from_slice(&bt, &[6], &dev)?)?;
            step()?.to_vec::<f32>()?[0]
        };
        let l = run(&mut arena, &mut state, &bi, &bt)?;
        assert_eq!(l.to_bits(), eager.to_bits(), "loss at step {k}");
        for ((n, p), s) in names.iter().zip(&params).zip(&state) {
            assert_eq!(bits(s), bits(&p.to_vec::<f32>()?), "{n} at step {k}");
        }
        losses.push(l);
    }
    assert!(
        losses[99] < 0.5 * losses[0],
        "{:?}",
        (losses[0], losses[99])
    );
    // A token id outside the table is refused before anything runs.
    let before = state.clone();
    let (mut bad, bt) = batch(0);
    bad[3] = 10;
    let e = run(&mut arena, &mut state, &bad, &bt).unwrap_err();
    assert!(
        matches!(
            e,
            Error::IndexOutOfRange {
                index: 10,
                size: 10,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(state, before, "a refused replay changes nothing");
    // And an index input bound as f32 data is refused with the fix.
    let f = [0.0f32; 6];
    let mut l = [0.0f32];
    let [a, w, b, h] = &mut state[..] else {
        unreachable!("four parameters")
    };
    let e = plan
        .run(
            bytemuck::cast_slice_mut(&mut arena),
            &mut [
                Bind::input("ids", &f),
                Bind::indices("targets", &bt),
                Bind::output("loss", &mut l),
                Bind::state("table", a),
                Bind::state("w", w),
                Bind::state("b", b),
                Bind::state("head", h),
            ],
        )
        .unwrap_err();
    assert!(e.to_string().contains("Bind::indices"), "{e}");
    Ok(())
}

// ------------------------------------------------ declared families: im2col

/// `im2col` by its definition, a loop per output entry (independent of
/// the kernel's offset walk): `x [n, c, h, w]` to `[n, oh, ow, c, kh, kw]`.
fn im2col_by_definition(x: &[f32], [n, c, h, w]: [usize; 4], g: &Geometry) -> Vec<f32> {
    let extent = |a: usize| g.dilation[a] * (g.kernel[a] - 1) + 1;
    let oh = (h + 2 * g.padding[0] - extent(0)) / g.stride[0] + 1;
    let ow = (w + 2 * g.padding[1] - extent(1)) / g.stride[1] + 1;
    let mut out = Vec::new();
    for b in 0..n {
        for p in 0..oh {
            for q in 0..ow {
                for ch in 0..c {
                    for i in 0..g.kernel[0] {
                        for j in 0..g.kernel[1] {
                            let r =
                                (p * g.stride[0] + i * g.dilation[0]) as i64 - g.padding[0] as i64;
                            let s =
                                (q * g.stride[1] + j * g.dilation[1]) as i64 - g.padding[1] as i64;
                            let inside = (0..h as i64).contains(&r) && (0..w as i64).contains(&s);
                            out.push(if inside {
                                x[((b * c + ch) * h + r as usize) * w + s as usize]
                            } else {
                                g.fill
                            });
                        }
                    }
                }
            }
        }
    }
    out
}

#[test]
fn im2col_matches_its_definition_and_col2im_is_its_adjoint_on_every_host_device() -> Result<()> {
    let geometries = [
        Geometry {
            kernel: [2, 3],
            stride: [2, 1],
            padding: [1, 2],
            dilation: [2, 1],
            image: [5, 4],
            fill: f32::NEG_INFINITY,
        },
        // Strided and dilated along the width, with windows that reach
        // past the image.
        Geometry {
            kernel: [3, 2],
            stride: [1, 3],
            padding: [1, 2],
            dilation: [1, 2],
            image: [5, 4],
            fill: 0.5,
        },
    ];
    let shape = [2, 3, 5, 4];
    // The threaded device with every op parallel: batches split in pieces.
    let threaded = kael_host::cpu_threaded::Builder::new()
        .threads(2)
        .parallel_threshold(1)
        .build()?;
    let devices = [kael_core::Device::cpu(), threaded];
    for (dev, g) in devices
        .iter()
        .flat_map(|d| geometries.iter().map(move |g| (d, *g)))
    {
        let dev = dev.clone();
        let words = g.words("test")?;
        let mut rng = Rng::new(3);
        let x = Tensor::randn(&shape, DType::F32, &dev, &mut rng)?;
        let cols = Tensor::declared(Family::Im2col, 0, &words, &[&x])?;
        let want = im2col_by_definition(&x.to_vec::<f32>()?, shape, &g);
        assert_eq!(bits(&cols.to_vec::<f32>()?), bits(&want));
        // Adjoint: <im2col(x), c> = <x, col2im(c)> (zero fill).
        let zero = Geometry { fill: 0.0, ..g };
        let zw = zero.words("test")?;
        let cols = Tensor::declared(Family::Im2col, 0, &zw, &[&x])?;
        let c = Tensor::randn(cols.shape(), DType::F32, &dev, &mut rng)?;
        let back = Tensor::declared(Family::Im2col, 1, &zw, &[&c])?;
        assert_eq!(back.shape(), &shape);
        let dot = |a: &Tensor, b: &Tensor| -> Result<f64> {
            let (a, b) = (a.to_vec::<f32>()?, b.to_vec::<f32>()?);
            Ok(a.iter()
                .zip(&b)
                .map(|(x, y)| f64::from(*x) * f64::from(*y))
                .sum())
        };
        let (l, r) = (dot(&cols, &c)?, dot(&x, &back)?);
        assert!((l - r).abs() < 1e-4 * l.abs().max(1.0), "{l} vs {r}");
        // Its gradient is col2im, recorded from the row's `adjoint:`.
        let xg = x.deep_clone()?.requires_grad_(true)?;
        let y = Tensor::declared(Family::Im2col, 0, &zw, &[&xg])?;
        y.mul(&c)?.sum(&[], false)?.backward()?;
        assert_eq!(
            bits(&grad(&xg)?.to_vec::<f32>()?),
            bits(&back.to_vec::<f32>()?)
        );
        // Bad words or shapes: an error naming the family; nothing made.
        let wrong = Geometry { image: [6, 4], ..g }.words("test")?;
        let e = Tensor::declared(Family::Im2col, 0, &wrong, &[&x]).unwrap_err();
        assert!(e.to_string().contains("im2col"), "{e}");
        assert!(Tensor::declared(Family::Im2col, 0, &words[..9], &[&x]).is_err());
        assert!(Tensor::declared(Family::Im2col, 2, &words, &[&x]).is_err());
    }
    Ok(())
}

#[test]
fn the_max_pool_family_takes_pytorchs_ties_and_nan_on_every_host_device() -> Result<()> {
    // PyTorch's CPU rule (`val > max || isnan(val)`): the first maximum of
    // a window takes its gradient, and a NaN beats every number (the last
    // NaN of the window). By hand: 2x2 windows, stride 2, of a 2x4 image.
    let x = [1.0f32, 3.0, 1.0, f32::NAN, 3.0, 2.0, f32::NAN, 5.0];
    let threaded = kael_host::cpu_threaded::Builder::new()
        .threads(2)
        .parallel_threshold(1)
        .build()?;
    for dev in [kael_core::Device::cpu(), threaded] {
        let xs = Tensor::from_slice(&x, &[1, 1, 2, 4], &dev)?.requires_grad_(true)?;
        let y = max_pool2d(&xs, [2, 2], [2, 2], [0, 0])?;
        let got = y.to_vec::<f32>()?;
        assert_eq!(got[0], 3.0);
        assert!(got[1].is_nan());
        y.mul_scalar(2.0)?.sum(&[], false)?.backward()?;
        // Window 0 (1, 3 / 3, 2): the first 3; window 1 (1, NaN / NaN, 5):
        // the last NaN.
        assert_eq!(
            grad(&xs)?.to_vec::<f32>()?,
            [0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0]
        );
        assert!(grad(&xs)?.device().kind() == dev.kind());
        // Overlapping windows (2x2, stride 1; the general plane loop, not
        // the 2x2-stride-2 one): 1, 3 / 3, 2 -> the first 3; 3, 1 / 2, NaN
        // -> the NaN at (1, 2); 1, NaN / NaN, 5 -> the last NaN, (1, 2).
        let xs = Tensor::from_slice(&x, &[1, 1, 2, 4], &dev)?.requires_grad_(true)?;
        let y = max_pool2d(&xs, [2, 2], [1, 1], [0, 0])?;
        let got = y.to_vec::<f32>()?;
        assert!(got[0] == 3.0 && got[1].is_nan() && got[2].is_nan());
        y.mul_scalar(2.0)?.sum(&[], false)?.backward()?;
        assert_eq!(
            grad(&xs)?.to_vec::<f32>()?,
            [0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 4.0, 0.0]
        );
        // Through a transposed view (planes not contiguous: the general
        // walk), the [4, 2] image 1, 3 / 3, 2 / 1, NaN / NaN, 5 with a 2x2
        // stride-1 pool: the first 3 is x[1, 0]; the NaN of 3, 2 / 1, NaN
        // is x[1, 2]; the last NaN of 1, NaN / NaN, 5 is x[0, 3].
        let xt = Tensor::from_slice(&x, &[1, 1, 2, 4], &dev)?.requires_grad_(true)?;
        let y = max_pool2d(&xt.transpose(2, 3)?, [2, 2], [1, 1], [0, 0])?;
        let got = y.to_vec::<f32>()?;
        assert!(got[0] == 3.0 && got[1].is_nan() && got[2].is_nan());
        y.mul_scalar(2.0)?.sum(&[], false)?.backward()?;
        assert_eq!(
            grad(&xt)?.to_vec::<f32>()?,
            [0.0, 0.0, 0.0, 2.0, 2.0, 0.0, 2.0, 0.0]
        );
        // Padding above half the kernel is refused by the family's
        // contract too, naming it.
        let g = Geometry {
            kernel: [2, 2],
            stride: [1, 1],
            padding: [2, 0],
            dilation: [1, 1],
            image: [2, 4],
            fill: 0.0,
        };
        let e = Tensor::declared(Family::MaxPool2d, 0, &g.words("test")?, &[&xs.detach()?]);
        assert!(e.unwrap_err().to_string().contains("max_pool2d"));
    }
    Ok(())
}

/// A small CNN: conv (1 -> 4, 3x3, padding 1), relu, 2x2 max pool,
/// depthwise conv (4 channels, 3x3, padding 1), conv (4 -> 6, 3x3, stride
/// 2, dilation 1), avg pool 2x2 padding 1, linear.
struct Cnn {
    c1: Tensor,
    b1: Tensor,
    dw: Tensor,
    c2: Tensor,
    head: Tensor,
}

impl Cnn {
    fn new(dev: &kael_core::Device) -> Result<Self> {
        let mut rng = Rng::new(5);
        let mut leaf = |shape: &[usize], scale: f64| -> Result<Tensor> {
            Tensor::randn(shape, DType::F32, dev, &mut rng)?
                .mul_scalar(scale)?
                .deep_clone()?
                .requires_grad_(true)
        };
        Ok(Cnn {
            c1: leaf(&[4, 1, 3, 3], 0.4)?,
            b1: leaf(&[4], 0.1)?,
            dw: leaf(&[4, 1, 3, 3], 0.4)?,
            c2: leaf(&[6, 2, 3, 3], 0.3)?,
            head: leaf(&[54, 3], 0.3)?,
        })
    }

    fn params(&self) -> Vec<Tensor> {
        vec![
            self.c1.clone(),
            self.b1.clone(),
            self.dw.clone(),
            self.c2.clone(),
            self.head.clone(),
        ]
    }

    fn loss(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        let h = conv2d(x, &self.c1, Some(&self.b1), [1, 1], [1, 1], [1, 1], 1)?.relu()?;
        let h = max_pool2d(&h, [2, 2], [2, 2], [0, 0])?;
        let h = conv2d(&h, &self.dw, None, [1, 1], [1, 1], [1, 1], 4)?;
        // Grouped (2 groups), strided.
        let h = conv2d(&h, &self.c2, None, [2, 2], [1, 1], [1, 1], 2)?.tanh()?;
        let h = avg_pool2d(&h, [2, 2], [1, 1], [1, 1], false)?;
        let n = h.shape()[0];
        let logits = h.reshape(&[n as isize, -1])?.matmul(&self.head)?;
        cross_entropy(&logits, y, Reduction::Mean, None)
    }
}

#[test]
fn a_cnn_training_step_replays_30_steps_bit_for_bit() -> Result<()> {
    let tracer = Tracer::new(Accumulation::F64);
    let dev = tracer.device();
    let cnn = Cnn::new(&dev)?;
    let mut rng = Rng::new(8);
    let x = Tensor::randn(&[3, 1, 8, 8], DType::F32, &dev, &mut rng)?;
    let y = Tensor::from_slice(&[0i64, 2, 1], &[3], &dev)?;
    let cfg = SgdConfig {
        lr: 0.2,
        ..Default::default()
    };
    let mut opt = Sgd::new(cnn.params(), cfg)?;
    let mut state: Vec<Vec<f32>> = cnn
        .params()
        .iter()
        .map(|p| p.to_vec::<f32>())
        .collect::<Result<_>>()?;
    let mut step = || -> Result<Tensor> {
        opt.zero_grad();
        let loss = cnn.loss(&x, &y)?;
        loss.backward()?;
        opt.step()?;
        Ok(loss)
    };
    let (loss, rec) = tracer.record(&mut step)?;
    let names = ["c1", "b1", "dw", "c2", "head"];
    let params = cnn.params();
    let mut binds = vec![Binding::output("loss", &loss)];
    binds.extend(names.iter().zip(&params).map(|(n, p)| Binding::state(n, p)));
    let plan = Plan::build(&rec, &binds)?;
    let mut arena = vec![0u128; plan.arena_bytes().div_ceil(16)];
    let mut eager_loss = loss.to_vec::<f32>()?;
    let mut losses = Vec::new();
    for k in 0..30 {
        if k > 0 {
            eager_loss = step()?.to_vec::<f32>()?;
        }
        let mut l = [0.0f32];
        let [a, b, dw, c, d] = &mut state[..] else {
            unreachable!("five parameters")
        };
        plan.run(
            bytemuck::cast_slice_mut(&mut arena),
            &mut [
                Bind::output("loss", &mut l),
                Bind::state("c1", a),
                Bind::state("b1", b),
                Bind::state("dw", dw),
                Bind::state("c2", c),
                Bind::state("head", d),
            ],
        )?;
        assert_eq!(bits(&l), bits(&eager_loss), "loss at step {k}");
        for ((n, p), s) in names.iter().zip(&params).zip(&state) {
            assert_eq!(bits(s), bits(&p.to_vec::<f32>()?), "{n} at step {k}");
        }
        losses.push(l[0]);
    }
    // The plan runs the im2col, max_pool2d and depthwise families (no
    // view backward), and it trains.
    let ops = plan.as_ref().ops()?;
    for f in [Family::Im2col, Family::MaxPool2d, Family::Depthwise2d] {
        assert!(ops & f.bits() != 0, "{f:?}");
    }
    assert!(losses[29] < 0.5 * losses[0], "{losses:?}");
    Ok(())
}

#[test]
fn a_batch_norm_training_step_replays_with_its_counter_as_i64_state() -> Result<()> {
    use kael_core::nn::{BatchNorm2d, Module};
    let tracer = Tracer::new(Accumulation::F64);
    let dev = tracer.device();
    let mut rng = Rng::new(4);
    let w = Tensor::randn(&[3, 2, 3, 3], DType::F32, &dev, &mut rng)?
        .mul_scalar(0.3)?
        .deep_clone()?
        .requires_grad_(true)?;
    let x = Tensor::randn(&[4, 2, 6, 6], DType::F32, &dev, &mut rng)?;
    for cumulative in [false, true] {
        let mut bn = BatchNorm2d::new(3, 1e-5, 0.1, true, DType::F32, &dev)?;
        if cumulative {
            bn = bn.with_cumulative_average(); // momentum None
        }
        let mut params = vec![w.clone()];
        params.extend(bn.parameters());
        let mut opt = Sgd::new(
            params.clone(),
            SgdConfig {
                lr: 0.1,
                ..Default::default()
            },
        )?;
        let (rm, rv) = (bn.running_mean().unwrap(), bn.running_var().unwrap());
        let n = bn.num_batches_tracked().unwrap();
        let mut step = || -> Result<Tensor> {
            opt.zero_grad();
            let h = conv2d(&x, &w, None, [1, 1], [1, 1], [1, 1], 1)?;
            let loss = bn.forward(&h)?.relu()?.sqr()?.mean(&[], false)?;
            loss.backward()?;
            opt.step()?;
            Ok(loss)
        };
        let mut f32_state: Vec<Vec<f32>> = params
            .iter()
            .chain([rm, rv])
            .map(|t| t.to_vec::<f32>())
            .collect::<Result<_>>()?;
        let mut count = n.to_vec::<i64>()?;
        let (loss, rec) = tracer.record(&mut step)?;
        let names = ["w", "g", "b", "rm", "rv"];
        let state: Vec<&Tensor> = params.iter().chain([rm, rv]).collect();
        let mut binds = vec![Binding::output("loss", &loss), Binding::state("n", n)];
        binds.extend(names.iter().zip(&state).map(|(k, t)| Binding::state(k, t)));
        let plan = Plan::build(&rec, &binds)?;
        let mut arena = vec![0u128; plan.arena_bytes().div_ceil(16)];
        let mut eager_loss = loss.to_vec::<f32>()?;
        for k in 0..10 {
            if k > 0 {
                eager_loss = step()?.to_vec::<f32>()?;
            }
            let mut l = [0.0f32];
            let [a, b, c, d, e] = &mut f32_state[..] else {
                unreachable!("five f32 states")
            };
            plan.run(
                bytemuck::cast_slice_mut(&mut arena),
                &mut [
                    Bind::output("loss", &mut l),
                    Bind::state_i64("n", &mut count),
                    Bind::state("w", a),
                    Bind::state("g", b),
                    Bind::state("b", c),
                    Bind::state("rm", d),
                    Bind::state("rv", e),
                ],
            )?;
            assert_eq!(bits(&l), bits(&eager_loss), "loss at step {k}");
            for (s, t) in f32_state.iter().zip(&state) {
                assert_eq!(bits(s), bits(&t.to_vec::<f32>()?), "step {k}");
            }
            assert_eq!(count, n.to_vec::<i64>()?);
        }
        assert_eq!(count, [10]);
    }
    Ok(())
}

/// The reference device without the convolution and pooling families:
/// `conv2d` and the pools take their composed path (views, checked against
/// numpy and PyTorch in `nn.rs`, `nn_functional.rs` and the parity suite).
fn composing_device() -> kael_core::Device {
    use kael_core::cpu::{CpuBackend, dtypes, ops};
    const WITHOUT: u128 = ops::ALL
        & !Family::Im2col.bits()
        & !Family::MaxPool2d.bits()
        & !Family::Depthwise2d.bits()
        & !Family::Conv2d.bits()
        & !Family::BatchNorm.bits();
    let be = CpuBackend::<{ dtypes::ALL }, WITHOUT>::with_allocator(
        kael_core::shared::Shared::new(kael_core::allocator::GlobalAllocator::new()),
    );
    kael_core::Device::from_backend(kael_core::shared::Shared::new(be))
}

fn close(a: &[f32], b: &[f32], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let ok = (x - y).abs() <= 1e-4 * (1.0 + y.abs()) || (x.is_nan() && y.is_nan());
        assert!(ok, "{what}[{i}]: {x} vs {y}");
    }
}

#[test]
fn convolutions_and_pools_by_kernel_match_their_composed_path_on_random_geometries() -> Result<()> {
    let threaded = kael_host::cpu_threaded::Builder::new()
        .threads(2)
        .parallel_threshold(1)
        .build()?;
    let reference = composing_device();
    let mut r = Rng::new(99);
    let mut pick = |n: u64| (r.next_u64() % n) as usize;
    let mut compared = 0;
    for case in 0..40 {
        let (n, c, groups) = (1 + pick(3), 1 + pick(2), 1 + pick(2));
        let c = c * groups;
        let (h, w) = (3 + pick(5), 3 + pick(5));
        let k = [1 + pick(3), 1 + pick(3)];
        let s = [1 + pick(2), 1 + pick(3)];
        let d = [1 + pick(2), 1 + pick(2)];
        let p = [pick(3), pick(3)];
        let o = groups * (1 + pick(2));
        let mut rng = Rng::new(case);
        let xv = Tensor::randn(&[n, c, h, w], DType::F32, &reference, &mut rng)?.to_vec::<f32>()?;
        let wv = Tensor::randn(
            &[o, c / groups, k[0], k[1]],
            DType::F32,
            &reference,
            &mut rng,
        )?
        .to_vec::<f32>()?;
        let run = |dev: &kael_core::Device| -> Result<Option<[Vec<f32>; 4]>> {
            let x = Tensor::from_slice(&xv, &[n, c, h, w], dev)?.requires_grad_(true)?;
            let wt =
                Tensor::from_slice(&wv, &[o, c / groups, k[0], k[1]], dev)?.requires_grad_(true)?;
            let y = match conv2d(&x, &wt, None, s, p, d, groups) {
                Ok(y) => y,
                Err(_) => return Ok(None), // a geometry both refuse
            };
            let pk = [1 + k[0] / 2 + 1, 1 + k[1] / 2];
            let pp = [pk[0] / 2, pk[1] / 2];
            let m = max_pool2d(&y.tanh()?, pk, s, pp);
            let a = avg_pool2d(&y, pk, [1, 1], pp, case % 2 == 0);
            let (Ok(m), Ok(a)) = (m, a) else {
                return Ok(None);
            };
            // The usual 2x2, stride 2 pool, of contiguous planes and of
            // transposed ones (NOTE [Pooling planes]'s two paths).
            let (m2, m3) = match (
                max_pool2d(&y, [2, 2], [2, 2], [0, 0]),
                max_pool2d(&y.transpose(2, 3)?, [2, 2], [2, 2], [0, 0]),
            ) {
                (Ok(m2), Ok(m3)) => (m2, m3),
                _ => return Ok(None),
            };
            let loss = m.sqr()?.sum_all()?.add(&a.sum_all()?)?;
            let loss = loss.add(&m2.sum_all()?)?.add(&m3.sqr()?.sum_all()?)?;
            loss.backward()?;
            Ok(Some([
                m.to_vec::<f32>()?,
                a.to_vec::<f32>()?,
                grad(&x)?.to_vec::<f32>()?,
                grad(&wt)?.to_vec::<f32>()?,
            ]))
        };
        let want = run(&reference)?;
        for dev in [kael_core::Device::cpu(), threaded.clone()] {
            let got = run(&dev)?;
            match (&got, &want) {
                (Some(g), Some(e)) => {
                    for (i, what) in ["max pool", "avg pool", "dx", "dw"].iter().enumerate() {
                        close(&g[i], &e[i], &format!("case {case}: {what}"));
                    }
                    compared += 1;
                }
                (None, None) => {}
                _ => panic!("case {case}: one path refused the geometry, the other did not"),
            }
        }
    }
    // (Both devices per geometry; most geometries fit.)
    assert!(compared >= 40, "only {compared} comparisons");
    Ok(())
}

/// The depthwise family (`groups == C == O`) against the composed path
/// (windows and a grouped product), forward and both gradients, with and
/// without bias, on random geometries (stride, padding, dilation, sizes),
/// contiguous and transposed inputs.
#[test]
fn depthwise_convolutions_by_kernel_match_their_composed_path_on_random_geometries() -> Result<()> {
    let threaded = kael_host::cpu_threaded::Builder::new()
        .threads(2)
        .parallel_threshold(1)
        .build()?;
    let reference = composing_device();
    let mut r = Rng::new(7);
    let mut pick = |n: u64| (r.next_u64() % n) as usize;
    let mut compared = 0;
    for case in 0..40 {
        let (n, c) = (1 + pick(3), 1 + pick(4));
        let (h, w) = (3 + pick(6), 3 + pick(6));
        let k = [1 + pick(3), 1 + pick(4)];
        let (s, d) = if case % 4 < 2 {
            // Unit stride and dilation: the padded-plane path (NOTE
            // [Depthwise on padded planes]) for contiguous planes.
            ([1, 1], [1, 1])
        } else {
            ([1 + pick(2), 1 + pick(2)], [1 + pick(2), 1 + pick(2)])
        };
        let p = [pick(3), pick(3)];
        let (bias, transposed) = (case % 2 == 0, case % 3 == 0);
        let mut rng = Rng::new(100 + case);
        let xv = Tensor::randn(&[n, c, h, w], DType::F32, &reference, &mut rng)?.to_vec::<f32>()?;
        let wv = Tensor::randn(&[c, 1, k[0], k[1]], DType::F32, &reference, &mut rng)?
            .to_vec::<f32>()?;
        let bv = Tensor::randn(&[c], DType::F32, &reference, &mut rng)?.to_vec::<f32>()?;
        let run = |dev: &kael_core::Device| -> Result<Option<[Vec<f32>; 4]>> {
            let x = Tensor::from_slice(&xv, &[n, c, h, w], dev)?.requires_grad_(true)?;
            let wt = Tensor::from_slice(&wv, &[c, 1, k[0], k[1]], dev)?.requires_grad_(true)?;
            let b = Tensor::from_slice(&bv, &[c], dev)?.requires_grad_(true)?;
            // (Transposed: the same values through planes whose columns
            // are not unit-stride.)
            let xin = if transposed {
                x.transpose(2, 3)?.contiguous()?.transpose(2, 3)?
            } else {
                x.clone()
            };
            let y = match conv2d(&xin, &wt, bias.then_some(&b), s, p, d, c) {
                Ok(y) => y,
                Err(_) => return Ok(None), // a geometry both refuse
            };
            y.sqr()?.sum_all()?.backward()?;
            Ok(Some([
                y.to_vec::<f32>()?,
                grad(&x)?.to_vec::<f32>()?,
                grad(&wt)?.to_vec::<f32>()?,
                if bias {
                    grad(&b)?.to_vec::<f32>()?
                } else {
                    vec![]
                },
            ]))
        };
        let want = run(&reference)?;
        for dev in [kael_core::Device::cpu(), threaded.clone()] {
            match (run(&dev)?, &want) {
                (Some(g), Some(e)) => {
                    for (i, what) in ["y", "dx", "dw", "db"].iter().enumerate() {
                        close(&g[i], &e[i], &format!("case {case}: {what}"));
                    }
                    compared += 1;
                }
                (None, None) => {}
                _ => panic!("case {case}: one path refused the geometry, the other did not"),
            }
        }
    }
    assert!(compared >= 60, "only {compared} comparisons");
    Ok(())
}

/// The `conv2d` family (dense and grouped) against the composed path
/// (the whole batch's windows and a product), forward and both gradients,
/// with and without bias, on random geometries (stride, padding,
/// dilation, groups, sizes), contiguous and transposed inputs, and output
/// gradients that are contiguous or transposed (the threaded backend's
/// products take contiguous operands, the others its shared path).
#[test]
fn convolutions_by_the_conv2d_kernel_match_their_composed_path_on_random_geometries() -> Result<()>
{
    let threaded = kael_host::cpu_threaded::Builder::new()
        .threads(2)
        .parallel_threshold(1)
        .build()?;
    let reference = composing_device();
    let mut r = Rng::new(11);
    let mut pick = |n: u64| (r.next_u64() % n) as usize;
    let mut compared = 0;
    for case in 0..48 {
        let groups = 1 + pick(3);
        let (mut n, c, o) = (1 + pick(3), groups * (1 + pick(3)), groups * (1 + pick(3)));
        if case % 5 == 4 {
            // Enough small images per thread's share that the threaded
            // forward multiplies several images' columns at once.
            n = 17 + pick(8);
        }
        let (h, w) = (2 + pick(7), 2 + pick(7));
        let mut k = [1 + pick(3), 1 + pick(3)];
        let mut s = [1 + pick(2), 1 + pick(3)];
        let d = [1 + pick(2), 1 + pick(2)];
        let mut p = [pick(3), pick(3)];
        if case % 3 == 2 {
            // A "same" convolution at stride 1: whole column rows as one
            // run (NOTE [Swept columns]).
            k = [1 + 2 * pick(2), 1 + 2 * pick(2)];
            s = [1, 1];
            p = [(k[0] - 1) * d[0] / 2, (k[1] - 1) * d[1] / 2];
        }
        let (bias, transposed, strided_grad) = (case % 2 == 0, case % 3 == 0, case % 4 == 1);
        let mut rng = Rng::new(300 + case);
        let xv = Tensor::randn(&[n, c, h, w], DType::F32, &reference, &mut rng)?.to_vec::<f32>()?;
        let ws = [o, c / groups, k[0], k[1]];
        let wv = Tensor::randn(&ws, DType::F32, &reference, &mut rng)?.to_vec::<f32>()?;
        let bv = Tensor::randn(&[o], DType::F32, &reference, &mut rng)?.to_vec::<f32>()?;
        let run = |dev: &kael_core::Device| -> Result<Option<[Vec<f32>; 4]>> {
            let x = Tensor::from_slice(&xv, &[n, c, h, w], dev)?.requires_grad_(true)?;
            let wt = Tensor::from_slice(&wv, &ws, dev)?.requires_grad_(true)?;
            let b = Tensor::from_slice(&bv, &[o], dev)?.requires_grad_(true)?;
            let xin = if transposed {
                x.transpose(2, 3)?.contiguous()?.transpose(2, 3)?
            } else {
                x.clone()
            };
            let y = match conv2d(&xin, &wt, bias.then_some(&b), s, p, d, groups) {
                Ok(y) => y,
                Err(_) => return Ok(None), // a geometry both refuse
            };
            // (Through a transpose, the output's gradient reaches the
            // kernel as a transposed view.)
            let yl = if strided_grad {
                y.transpose(2, 3)?
            } else {
                y.clone()
            };
            yl.sqr()?.mul_scalar(0.5)?.sum_all()?.backward()?;
            Ok(Some([
                y.to_vec::<f32>()?,
                grad(&x)?.to_vec::<f32>()?,
                grad(&wt)?.to_vec::<f32>()?,
                if bias {
                    grad(&b)?.to_vec::<f32>()?
                } else {
                    vec![]
                },
            ]))
        };
        let want = run(&reference)?;
        for dev in [kael_core::Device::cpu(), threaded.clone()] {
            match (run(&dev)?, &want) {
                (Some(g), Some(e)) => {
                    for (i, what) in ["y", "dx", "dw", "db"].iter().enumerate() {
                        close(&g[i], &e[i], &format!("case {case}: {what}"));
                    }
                    compared += 1;
                }
                (None, None) => {}
                _ => panic!("case {case}: one path refused the geometry, the other did not"),
            }
        }
    }
    assert!(compared >= 60, "only {compared} comparisons");
    Ok(())
}

/// Batch norm through the `batch_norm` family (NOTE [Batch norm in four
/// passes]) against its composed path: outputs, the three gradients and
/// the running statistics, training (momentum or cumulative) and
/// evaluation, with and without affine parameters, ranks 2 to 4,
/// contiguous and transposed inputs, on random sizes; and the second
/// derivative (`create_graph`) through the recomputed formula.
#[test]
fn batch_norm_by_kernel_matches_its_composed_path() -> Result<()> {
    use kael_core::nn::functional::batch_norm;
    let threaded = kael_host::cpu_threaded::Builder::new()
        .threads(2)
        .parallel_threshold(1)
        .build()?;
    let reference = composing_device();
    let mut r = Rng::new(21);
    let mut pick = |n: u64| (r.next_u64() % n) as usize;
    for case in 0..36 {
        let rank = 2 + case % 3;
        let mut shape = vec![2 + pick(3), 1 + pick(4)];
        for _ in 2..rank {
            shape.push(1 + pick(5));
        }
        let c = shape[1];
        let (affine, training, transposed) =
            (case % 2 == 0, case % 5 != 4, case % 3 == 0 && rank == 4);
        let mut rng = Rng::new(500 + case as u64);
        let xv = Tensor::randn(&shape, DType::F32, &reference, &mut rng)?
            .mul_scalar(2.0)?
            .add_scalar(3.0)? // (a mean far from zero)
            .to_vec::<f32>()?;
        let vecs: Vec<Vec<f32>> = (0..4)
            .map(|i| {
                let t = Tensor::randn(&[c], DType::F32, &reference, &mut rng)?;
                if i == 3 {
                    t.abs()?.add_scalar(0.5)?.to_vec()
                } else {
                    t.to_vec()
                }
            })
            .collect::<Result<_>>()?;
        let run = |dev: &kael_core::Device| -> Result<Vec<Vec<f32>>> {
            let x = Tensor::from_slice(&xv, &shape, dev)?.requires_grad_(true)?;
            let w = Tensor::from_slice(&vecs[0], &[c], dev)?.requires_grad_(true)?;
            let b = Tensor::from_slice(&vecs[1], &[c], dev)?.requires_grad_(true)?;
            let rm = Tensor::from_slice(&vecs[2], &[c], dev)?;
            let rv = Tensor::from_slice(&vecs[3], &[c], dev)?;
            let xin = if transposed {
                x.transpose(2, 3)?.contiguous()?.transpose(2, 3)?
            } else {
                x.clone()
            };
            let y = batch_norm(
                &xin,
                Some(&rm),
                Some(&rv),
                affine.then_some(&w),
                affine.then_some(&b),
                training,
                0.1,
                1e-5,
            )?;
            // A weighting, so that the gradient is not a constant.
            let wts = Tensor::arange(0.0f32, y.numel() as f32, dev)?
                .reshape(y.shape())?
                .mul_scalar(0.01)?
                .sin()?;
            y.mul(&wts)?.sum_all()?.backward()?;
            let mut out = vec![y.to_vec::<f32>()?, grad(&x)?.to_vec::<f32>()?];
            if affine {
                out.push(grad(&w)?.to_vec::<f32>()?);
                out.push(grad(&b)?.to_vec::<f32>()?);
            }
            out.push(rm.to_vec::<f32>()?);
            out.push(rv.to_vec::<f32>()?);
            Ok(out)
        };
        let want = run(&reference)?;
        for dev in [kael_core::Device::cpu(), threaded.clone()] {
            for (i, (g, e)) in run(&dev)?.iter().zip(&want).enumerate() {
                close(
                    g,
                    e,
                    &format!("case {case} ({shape:?}, training {training}): output {i}"),
                );
            }
        }
    }
    // Second order: d/dx of Σ (∂/∂x Σ y·t)² through the fused node equals
    // the composed path's.
    let second = |dev: &kael_core::Device| -> Result<Vec<f32>> {
        let mut rng = Rng::new(9);
        let xv = Tensor::randn(&[3, 2, 4], DType::F32, &reference, &mut rng)?.to_vec::<f32>()?;
        let x = Tensor::from_slice(&xv, &[3, 2, 4], dev)?.requires_grad_(true)?;
        let t = Tensor::arange(0.0f32, 24.0, dev)?
            .reshape(&[3, 2, 4])?
            .cos()?;
        let y = batch_norm(&x, None, None, None, None, true, 0.1, 1e-5)?;
        let opts = kael_core::autograd::BackwardOptions {
            create_graph: true,
            ..Default::default()
        };
        let gx = kael_core::autograd::grad(&[&y.mul(&t)?.sum_all()?], &[&x], &[None], opts)?;
        let gx = gx[0].clone().ok_or(kael_core::Error::Autograd {
            op: "test",
            reason: "no grad",
        })?;
        gx.sqr()?.sum_all()?.backward()?;
        grad(&x)?.to_vec::<f32>()
    };
    close(
        &second(&kael_core::Device::cpu())?,
        &second(&reference)?,
        "second order",
    );
    Ok(())
}

/// A data tensor needs no gradient, and the first convolution computes
/// none: its `conv2d` node runs only the weight's gradient step.
#[test]
fn a_convolution_of_data_computes_only_the_weight_gradient() -> Result<()> {
    let dev = kael_core::Device::cpu();
    let mut rng = Rng::new(5);
    let x = Tensor::randn(&[2, 3, 5, 5], DType::F32, &dev, &mut rng)?;
    let w = Tensor::randn(&[4, 3, 3, 3], DType::F32, &dev, &mut rng)?;
    let tracer = Tracer::new(Accumulation::F64);
    let tdev = tracer.device();
    let mut counts = vec![];
    for data in [true, false] {
        let xt = x.to_device(&tdev)?.requires_grad_(!data)?;
        let wt = w.to_device(&tdev)?.requires_grad_(true)?;
        let (_, rec) = tracer.record(|| {
            conv2d(&xt, &wt, None, [1, 1], [1, 1], [1, 1], 1)?
                .sqr()?
                .sum_all()?
                .backward()
        })?;
        counts.push(rec.kernel_names().filter(|&k| k == "conv2d").count());
    }
    // Forward and the weight's gradient; and the input's when it is wanted.
    assert_eq!(counts, [2, 3]);
    Ok(())
}

/// A refusal for a dtype names the recorded operation and `Plan::build`
/// (it once named `to_dtype` on the trace backend for a recorded sort).
/// The operation named is the kernel's: `sort` of i64 values is an i64
/// argsort (which plans run) and a `gather` of i64 values (which they do
/// not).
#[test]
fn a_refused_dtype_names_the_recorded_op_and_plan_build() -> Result<()> {
    let tracer = Tracer::new(Accumulation::F64);
    let dev = tracer.device();
    let x = Tensor::from_slice(&[2.0f32, 1.0, 3.0], &[3], &dev)?;
    for (dt, carried) in [(DType::I64, true), (DType::F64, false), (DType::I16, false)] {
        let (v, rec) = tracer.record(|| {
            x.to_dtype(dt)?
                .sort(0, false)
                .and_then(|(v, _)| v.to_dtype(DType::F32))
        })?;
        let e =
            Plan::build(&rec, &[Binding::input("x", &x), Binding::output("y", &v)]).unwrap_err();
        let text = e.to_string();
        assert!(
            matches!(e, Error::UnsupportedDType { dtype, .. } if dtype == dt),
            "{text}"
        );
        let named = if carried { "gather" } else { "to_dtype" };
        assert!(
            text.contains(named) && text.contains("Plan::build"),
            "{dt:?}: {text}"
        );
    }
    Ok(())
}
