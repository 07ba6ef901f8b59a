//! The sine MLP's plans for the firmware examples (`sine_plan`,
//! `sine_plan_train`, `sine_loops` in `firmware-examples/`): TFLite
//! Micro's hello_world model (1-16-16-1, ReLU) in f32, traced on a device
//! that sums f32 in f32 (as firmware does), with the eager outputs and
//! training losses the firmware must reproduce bit for bit.
//!
//! `cargo run -p kael-tests --example sine_plan -- firmware-examples/data`
//! writes `sine_infer.plan`, `sine_train.plan` and `sine_plan_io.rs`;
//! `tests/tests/plan.rs` checks that the committed files are what this
//! module makes.

use kael_core::nn::{Linear, Module, Reduction, mse_loss};
use kael_core::optim::{Optimizer, Sgd, SgdConfig};
use kael_core::plan::{Accumulation, Binding, Plan, Tracer};
use kael_core::{Device, Result, Rng, Tensor, no_grad};
use std::fmt::Write as _;

/// The model: three linear layers with ReLU between them.
pub struct Sine {
    /// 1 -> 16.
    pub l1: Linear,
    /// 16 -> 16.
    pub l2: Linear,
    /// 16 -> 1.
    pub l3: Linear,
}

/// The bound names of the parameters, in [`Sine::params`] order.
pub const NAMES: [&str; 6] = ["l1.w", "l1.b", "l2.w", "l2.b", "l3.w", "l3.b"];
/// The training batch size.
pub const BATCH: usize = 16;
/// Training steps the firmware checks.
pub const STEPS: usize = 4;
/// SGD's learning rate.
pub const LR: f64 = 0.05;

impl Sine {
    /// A model with PyTorch's default initialisation from `seed`.
    ///
    /// # Errors
    /// Device errors.
    pub fn new(dev: &Device, seed: u64) -> Result<Self> {
        let mut rng = Rng::new(seed);
        Ok(Self {
            l1: Linear::new(1, 16, true, dev, &mut rng)?,
            l2: Linear::new(16, 16, true, dev, &mut rng)?,
            l3: Linear::new(16, 1, true, dev, &mut rng)?,
        })
    }

    /// `l3(relu(l2(relu(l1(x)))))`.
    ///
    /// # Errors
    /// Shape errors.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.l3
            .forward(&self.l2.forward(&self.l1.forward(x)?.relu()?)?.relu()?)
    }

    /// The parameters, in [`NAMES`] order.
    pub fn params(&self) -> Vec<Tensor> {
        [&self.l1, &self.l2, &self.l3]
            .iter()
            .flat_map(|l| l.parameters())
            .collect()
    }
}

/// Batch `i` of `n` sine samples: x in [0, 2π), target sin(x).
pub fn batch(i: usize, n: usize) -> (Vec<f32>, Vec<f32>) {
    let x: Vec<f32> = (0..n)
        .map(|k| ((i * n + k) as f32 * 0.7391).rem_euclid(std::f32::consts::TAU))
        .collect();
    let y = x.iter().map(|v| v.sin()).collect();
    (x, y)
}

/// One SGD step of `m` on batch `i`, eagerly; the loss.
///
/// # Errors
/// Device errors.
pub fn train_step(m: &Sine, opt: &mut Sgd, i: usize, dev: &Device) -> Result<Tensor> {
    let (bx, by) = batch(i, BATCH);
    let x = Tensor::from_slice(&bx, &[BATCH, 1], dev)?;
    let t = Tensor::from_slice(&by, &[BATCH, 1], dev)?;
    opt.zero_grad();
    let loss = mse_loss(&m.forward(&x)?, &t, Reduction::Mean)?;
    loss.backward()?;
    opt.step()?;
    Ok(loss)
}

/// A traced SGD training step of [`Sine`]: the plan, the parameters
/// before it, and the model and optimizer (which took the traced step
/// eagerly while recording, so training can go on from step 1).
pub struct TracedStep {
    /// The plan of one step, parameters bound as state ([`NAMES`]),
    /// inputs `x` and `t`, output `loss`.
    pub plan: Plan,
    /// The parameters before the traced step.
    pub initial: Vec<Vec<f32>>,
    /// The traced step's loss.
    pub loss: f32,
    /// The model, after the traced step.
    pub model: Sine,
    /// Its optimizer.
    pub opt: Sgd,
    /// The tracing device the model lives on.
    pub tracer: Tracer,
}

/// Traces one SGD step (lr [`LR`]) of a `Sine` from `seed` on batch 0 of
/// `n` samples, on a device that accumulates as `acc` says.
///
/// # Errors
/// Device errors.
pub fn trace_step(acc: Accumulation, seed: u64, n: usize) -> Result<TracedStep> {
    let tracer = Tracer::new(acc);
    let dev = tracer.device();
    let m = Sine::new(&dev, seed)?;
    let params = m.params();
    let initial = params
        .iter()
        .map(|p| p.to_vec::<f32>())
        .collect::<Result<_>>()?;
    let mut opt = Sgd::new(
        params.clone(),
        SgdConfig {
            lr: LR,
            ..SgdConfig::default()
        },
    )?;
    let (bx, by) = batch(0, n);
    let x = Tensor::from_slice(&bx, &[n, 1], &dev)?;
    let t = Tensor::from_slice(&by, &[n, 1], &dev)?;
    let (loss, rec) = tracer.record(|| {
        opt.zero_grad();
        let loss = mse_loss(&m.forward(&x)?, &t, Reduction::Mean)?;
        loss.backward()?;
        opt.step()?;
        Ok(loss)
    })?;
    let mut binds = vec![
        Binding::input("x", &x),
        Binding::input("t", &t),
        Binding::output("loss", &loss),
    ];
    for (name, p) in NAMES.iter().zip(&params) {
        binds.push(Binding::state(name, p));
    }
    let plan = Plan::build(&rec, &binds)?;
    Ok(TracedStep {
        plan,
        initial,
        loss: loss.to_vec::<f32>()?[0],
        model: m,
        opt,
        tracer,
    })
}

/// What the firmware examples embed.
pub struct Artifacts {
    /// The inference plan (weights frozen into it).
    pub infer_plan: Plan,
    /// The training-step plan (parameters bound as state).
    pub train_plan: Plan,
    /// Rust source of the inputs, weights and expected bits.
    pub io_rs: String,
}

pub(crate) fn bits_const(out: &mut String, name: &str, v: &[f32]) {
    let _ = write!(out, "pub const {name}: [u32; {}] = [", v.len());
    for (i, x) in v.iter().enumerate() {
        let _ = write!(
            out,
            "{}0x{:08x}",
            if i == 0 { "" } else { ", " },
            x.to_bits()
        );
    }
    out.push_str("];\n");
}

/// Traces both plans and computes the expected values.
///
/// # Errors
/// Device errors.
pub fn generate() -> Result<Artifacts> {
    let mut io = String::from(
        "// Generated by `cargo run -p kael-tests --example sine_plan -- firmware-examples/data`\n\
         // (tests/src/sine_plan.rs): f32 values as bits. Do not edit.\n\n",
    );
    // Inference: a model trained for 300 eager steps, so it draws a sine.
    let tracer = Tracer::new(Accumulation::F32);
    let dev = tracer.device();
    let m = Sine::new(&dev, 11)?;
    let mut opt = Sgd::new(
        m.params(),
        SgdConfig {
            lr: LR,
            ..SgdConfig::default()
        },
    )?;
    for i in 0..300 {
        train_step(&m, &mut opt, i, &dev)?;
    }
    let x = Tensor::zeros(&[1, 1], kael_core::DType::F32, &dev)?;
    let (y, rec) = tracer.record(|| no_grad(|| m.forward(&x)))?;
    let infer_plan = Plan::build(&rec, &[Binding::input("x", &x), Binding::output("y", &y)])?;
    let inputs: Vec<f32> = (0..16)
        .map(|i| i as f32 * std::f32::consts::TAU / 16.0)
        .collect();
    let mut outputs = Vec::new();
    for &v in &inputs {
        let y = no_grad(|| m.forward(&Tensor::from_slice(&[v], &[1, 1], &dev)?))?;
        outputs.push(y.to_vec::<f32>()?[0]);
    }
    bits_const(&mut io, "INFER_INPUTS", &inputs);
    bits_const(&mut io, "INFER_OUTPUTS", &outputs);
    for (name, p) in ["W1", "B1", "W2", "B2", "W3", "B3"].iter().zip(m.params()) {
        bits_const(&mut io, name, &p.to_vec::<f32>()?);
    }

    // Training: a fresh model; the plan of one step, traced on batch 0.
    let TracedStep {
        plan: train_plan,
        initial,
        loss,
        model: m,
        mut opt,
        tracer,
    } = trace_step(Accumulation::F32, 3, BATCH)?;
    for (name, p) in ["T_W1", "T_B1", "T_W2", "T_B2", "T_W3", "T_B3"]
        .iter()
        .zip(&initial)
    {
        bits_const(&mut io, name, p);
    }
    let dev = tracer.device();
    let mut losses = vec![loss];
    for i in 1..STEPS {
        losses.push(train_step(&m, &mut opt, i, &dev)?.to_vec::<f32>()?[0]);
    }
    let (mut xs, mut ts) = (Vec::new(), Vec::new());
    for i in 0..STEPS {
        let (bx, by) = batch(i, BATCH);
        xs.extend(bx);
        ts.extend(by);
    }
    bits_const(&mut io, "TRAIN_X", &xs);
    bits_const(&mut io, "TRAIN_T", &ts);
    bits_const(&mut io, "TRAIN_LOSSES", &losses);
    for (name, p) in ["F_W1", "F_B1", "F_W2", "F_B2", "F_W3", "F_B3"]
        .iter()
        .zip(&m.params())
    {
        bits_const(&mut io, name, &p.to_vec::<f32>()?);
    }
    Ok(Artifacts {
        infer_plan,
        train_plan,
        io_rs: io,
    })
}
