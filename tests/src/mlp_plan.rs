//! Plans for the replay variants of the firmware examples (`mlp_infer_plan`,
//! `arena_plan`, `mlp_train_plan` in `firmware-examples/`): the same models
//! as `mlp_infer`, `arena` and `mlp_train`, traced on a device that sums f32
//! in f64 (as those examples' devices do), with the eager values the
//! firmware must reproduce bit for bit.
//!
//! `cargo run -p kael-tests --example sine_plan -- firmware-examples/data`
//! writes `mlp_infer.plan`, `mlp_grad.plan`, `xor_train.plan` and
//! `mlp_plan_io.rs` beside the sine files; `tests/tests/plan.rs` checks
//! that the committed files are what this module makes.

use crate::sine_plan::bits_const;
use kael_core::plan::{Accumulation, Binding, Plan, Tracer};
use kael_core::{DType, Device, Error, Result, Rng, Tensor, no_grad};
use std::fmt::Write as _;

/// The sections of `firmware-examples/data/mlp_infer.bin` (layout in
/// `tests/tests/firmware_reference.rs`).
#[derive(Debug, Clone)]
pub struct MlpFile {
    /// In, hidden, out, samples.
    pub dims: [usize; 4],
    /// `[in, hidden]`, `[hidden]`, `[hidden, out]`, `[out]`,
    /// `[samples, in]`, `[samples, out]`, in this order.
    pub sections: [Vec<f32>; 6],
}

/// The section names, as bound in the plans.
pub const SECTIONS: [&str; 6] = ["w1", "b1", "w2", "b2", "x", "expected"];

const BAD: Error = Error::InvalidArgument {
    op: "mlp_plan::read",
    reason: "not a KAELMLP1 model file",
};

impl MlpFile {
    /// Parses the model file.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when it is malformed.
    pub fn read(bytes: &[u8]) -> Result<Self> {
        if bytes.get(..8) != Some(&b"KAELMLP1"[..]) {
            return Err(BAD);
        }
        let u = |at: usize| -> Result<usize> {
            let b = bytes.get(at..at + 4).ok_or(BAD)?;
            Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        };
        let [i, h, o, n] = [u(8)?, u(12)?, u(16)?, u(20)?];
        let mut at = 32;
        let mut section = |len: usize| -> Result<Vec<f32>> {
            let b = bytes.get(at..at + 4 * len).ok_or(BAD)?;
            at += len.div_ceil(4) * 16;
            Ok(b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect())
        };
        Ok(Self {
            dims: [i, h, o, n],
            sections: [
                section(i * h)?,
                section(h)?,
                section(h * o)?,
                section(o)?,
                section(n * i)?,
                section(n * o)?,
            ],
        })
    }

    fn shapes(&self) -> [Vec<usize>; 6] {
        let [i, h, o, n] = self.dims;
        [
            vec![i, h],
            vec![h],
            vec![h, o],
            vec![o],
            vec![n, i],
            vec![n, o],
        ]
    }

    /// The six sections as tensors on `dev`.
    fn tensors(&self, dev: &Device) -> Result<Vec<Tensor>> {
        self.sections
            .iter()
            .zip(self.shapes())
            .map(|(v, s)| Tensor::from_slice(v, &s, dev))
            .collect()
    }
}

/// `softmax(relu(x @ w1 + b1) @ w2 + b2, dim 1)`, as `mlp_infer` runs it.
///
/// # Errors
/// Shape errors.
pub fn forward(w: &[Tensor], x: &Tensor) -> Result<Tensor> {
    x.matmul(&w[0])?
        .add(&w[1])?
        .relu()?
        .matmul(&w[2])?
        .add(&w[3])?
        .softmax(1)
}

/// The class weights of the `arena_plan` loss `sum(softmax(..) * c)`.
pub const CLASS_WEIGHTS: [f32; 4] = [1.0, 2.0, 3.0, 4.0];

/// The forward and backward of [`arena_loss`]: the probabilities, the
/// loss, and the gradients with respect to `x` and `w1`.
///
/// # Errors
/// Device errors.
pub fn arena_loss(w: &[Tensor], x: &Tensor, c: &Tensor) -> Result<[Tensor; 4]> {
    let p = forward(w, x)?;
    let loss = p.mul(c)?.sum_all()?;
    loss.backward()?;
    let grad = |t: &Tensor| {
        t.grad().ok_or(Error::Autograd {
            op: "arena_loss",
            reason: "no gradient",
        })
    };
    Ok([p, loss, grad(x)?, grad(&w[0])?])
}

/// XOR training (`mlp_train`): hidden width, SGD rate, target loss and
/// epoch limit.
pub const XOR_HIDDEN: usize = 8;
/// SGD's learning rate.
pub const XOR_LR: f64 = 2.0;
/// The mean squared error to reach.
pub const XOR_TARGET: f32 = 0.01;
/// Epochs before giving up.
pub const XOR_MAX_EPOCHS: usize = 400;
/// Inputs `[4, 2]` and targets `[4, 1]`.
pub const XOR_X: [f32; 8] = [0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0];
/// The XOR targets.
pub const XOR_Y: [f32; 4] = [0.0, 1.0, 1.0, 0.0];

/// `mlp_train`'s parameters from `Rng::new(7)`: w1 `[2, 8]`, b1, w2
/// `[8, 1]` (scaled by 0.5), b2, requiring grad.
///
/// # Errors
/// Device errors.
pub fn xor_params(dev: &Device) -> Result<[Tensor; 4]> {
    let mut rng = Rng::new(7);
    Ok([
        Tensor::randn(&[2, XOR_HIDDEN], DType::F32, dev, &mut rng)?.requires_grad_(true)?,
        Tensor::zeros(&[XOR_HIDDEN], DType::F32, dev)?.requires_grad_(true)?,
        Tensor::randn(&[XOR_HIDDEN, 1], DType::F32, dev, &mut rng)?
            .mul_scalar(0.5)?
            .requires_grad_(true)?,
        Tensor::zeros(&[1], DType::F32, dev)?.requires_grad_(true)?,
    ])
}

/// `mlp_train`'s forward and loss: `sigmoid(tanh(x @ w1 + b1) @ w2 + b2)`
/// and its mean squared error; (loss, predictions).
///
/// # Errors
/// Shape errors.
pub fn xor_forward(p: &[Tensor; 4], x: &Tensor, y: &Tensor) -> Result<(Tensor, Tensor)> {
    let pred = x
        .matmul(&p[0])?
        .add(&p[1])?
        .tanh()?
        .matmul(&p[2])?
        .add(&p[3])?
        .sigmoid()?;
    let d = pred.sub(y)?;
    Ok((d.mul(&d)?.mean_all()?, pred))
}

/// `mlp_train`'s update, done by hand under `no_grad` after a backward.
///
/// # Errors
/// [`Error::Autograd`] when a parameter got no gradient.
pub fn xor_sgd(p: &[Tensor; 4]) -> Result<()> {
    no_grad(|| {
        for t in p {
            let g = t.grad().ok_or(Error::Autograd {
                op: "sgd",
                reason: "a parameter received no gradient",
            })?;
            t.sub_(&g.mul_scalar(XOR_LR)?)?;
        }
        Ok(())
    })
}

/// The eager XOR training of `mlp_train` on `dev` from `init`: the loss of
/// every epoch until one is below [`XOR_TARGET`], and the predictions of
/// that last epoch.
///
/// # Errors
/// Device errors.
pub fn xor_eager(dev: &Device, init: &[Vec<f32>]) -> Result<(Vec<f32>, Vec<f32>)> {
    let shapes: [&[usize]; 4] = [&[2, XOR_HIDDEN], &[XOR_HIDDEN], &[XOR_HIDDEN, 1], &[1]];
    let p: Vec<Tensor> = init
        .iter()
        .zip(shapes)
        .map(|(v, s)| Tensor::from_slice(v, s, dev)?.requires_grad_(true))
        .collect::<Result<_>>()?;
    let p: [Tensor; 4] = [p[0].clone(), p[1].clone(), p[2].clone(), p[3].clone()];
    let x = Tensor::from_slice(&XOR_X, &[4, 2], dev)?;
    let y = Tensor::from_slice(&XOR_Y, &[4, 1], dev)?;
    let mut losses = Vec::new();
    for _ in 0..XOR_MAX_EPOCHS {
        let (loss, pred) = xor_forward(&p, &x, &y)?;
        let l = loss.to_vec::<f32>()?[0];
        losses.push(l);
        if l < XOR_TARGET {
            return Ok((losses, pred.to_vec::<f32>()?));
        }
        for t in &p {
            t.zero_grad();
        }
        loss.backward()?;
        xor_sgd(&p)?;
    }
    Err(Error::InvalidArgument {
        op: "xor_eager",
        reason: "XOR did not converge",
    })
}

/// What the firmware examples embed.
pub struct Artifacts {
    /// One sample's forward; binds `w1 b1 w2 b2 x` (inputs), `p` (output).
    pub infer_plan: Plan,
    /// The batch's forward and backward of [`arena_loss`]; binds
    /// `w1 b1 w2 b2 x`, outputs `p loss dx dw1`.
    pub grad_plan: Plan,
    /// One XOR training step; binds `x y`, state `w1 b1 w2 b2`, outputs
    /// `loss pred`.
    pub xor_plan: Plan,
    /// Rust source of the expected bits and sizes.
    pub io_rs: String,
}

/// The weights and `x`, bound as inputs by their section names.
fn bind_weights(w: &[Tensor]) -> Vec<Binding<'_>> {
    SECTIONS[..5]
        .iter()
        .zip(w)
        .map(|(name, t)| Binding::input(name, t))
        .collect()
}

/// Traces the three plans from the model file's bytes and computes the
/// eager values.
///
/// # Errors
/// Device errors; a malformed model file.
pub fn generate(mlp_bin: &[u8]) -> Result<Artifacts> {
    let file = MlpFile::read(mlp_bin)?;
    let [n_in, _, _, n] = file.dims;
    let mut io = String::from(
        "// Generated by `cargo run -p kael-tests --example sine_plan -- firmware-examples/data`\n\
         // (tests/src/mlp_plan.rs): f32 values as bits. Do not edit.\n\n",
    );

    // One sample's inference.
    let tracer = Tracer::new(Accumulation::F64);
    let w = file.tensors(&tracer.device())?;
    let x = Tensor::zeros(&[1, n_in], DType::F32, &tracer.device())?;
    let (p, rec) = tracer.record(|| no_grad(|| forward(&w, &x)))?;
    let wx = [&w[..4], std::slice::from_ref(&x)].concat();
    let mut binds = bind_weights(&wx);
    binds.push(Binding::output("p", &p));
    let infer_plan = Plan::build(&rec, &binds)?;
    let _ = writeln!(
        io,
        "pub const INFER_ARENA_BYTES: usize = {};",
        infer_plan.arena_bytes()
    );

    // The batch's forward and backward, for the arena example.
    let tracer = Tracer::new(Accumulation::F64);
    let dev = tracer.device();
    let mut w = file.tensors(&dev)?;
    w[0] = w[0].clone().requires_grad_(true)?;
    w[4] = w[4].clone().requires_grad_(true)?;
    let c = Tensor::from_slice(&CLASS_WEIGHTS, &[CLASS_WEIGHTS.len()], &dev)?;
    let (outs, rec) = tracer.record(|| arena_loss(&w, &w[4], &c))?;
    let mut binds = bind_weights(&w);
    for (name, t) in ["p", "loss", "dx", "dw1"].iter().zip(&outs) {
        binds.push(Binding::output(name, t));
    }
    let grad_plan = Plan::build(&rec, &binds)?;
    // The eager values, on the reference device.
    let cpu = Device::cpu();
    let mut w = file.tensors(&cpu)?;
    w[0] = w[0].clone().requires_grad_(true)?;
    w[4] = w[4].clone().requires_grad_(true)?;
    let c = Tensor::from_slice(&CLASS_WEIGHTS, &[CLASS_WEIGHTS.len()], &cpu)?;
    let [p, loss, dx, dw1] = arena_loss(&w, &w[4], &c)?;
    bits_const(&mut io, "GRAD_P", &p.to_vec::<f32>()?);
    bits_const(&mut io, "GRAD_LOSS", &loss.to_vec::<f32>()?);
    bits_const(&mut io, "GRAD_DX", &dx.to_vec::<f32>()?);
    bits_const(&mut io, "GRAD_DW1", &dw1.to_vec::<f32>()?);
    let _ = writeln!(
        io,
        "pub const GRAD_ARENA_BYTES: usize = {};",
        grad_plan.arena_bytes()
    );
    let _ = writeln!(io, "pub const SAMPLES: usize = {n};");

    // One XOR training step.
    let tracer = Tracer::new(Accumulation::F64);
    let dev = tracer.device();
    let params = xor_params(&dev)?;
    let init: Vec<Vec<f32>> = params
        .iter()
        .map(|t| t.to_vec::<f32>())
        .collect::<Result<_>>()?;
    let x = Tensor::from_slice(&XOR_X, &[4, 2], &dev)?;
    let y = Tensor::from_slice(&XOR_Y, &[4, 1], &dev)?;
    let ((loss, pred), rec) = tracer.record(|| {
        let (loss, pred) = xor_forward(&params, &x, &y)?;
        for t in &params {
            t.zero_grad();
        }
        loss.backward()?;
        xor_sgd(&params)?;
        Ok((loss, pred))
    })?;
    let mut binds = vec![
        Binding::input("x", &x),
        Binding::input("y", &y),
        Binding::output("loss", &loss),
        Binding::output("pred", &pred),
    ];
    for (name, t) in SECTIONS[..4].iter().zip(&params) {
        binds.push(Binding::state(name, t));
    }
    let xor_plan = Plan::build(&rec, &binds)?;
    let (losses, preds) = xor_eager(&cpu, &init)?;
    for (name, v) in ["XOR_W1", "XOR_B1", "XOR_W2", "XOR_B2"].iter().zip(&init) {
        bits_const(&mut io, name, v);
    }
    bits_const(&mut io, "XOR_X", &XOR_X);
    bits_const(&mut io, "XOR_Y", &XOR_Y);
    bits_const(&mut io, "XOR_LOSSES", &losses);
    bits_const(&mut io, "XOR_PRED", &preds);
    let _ = writeln!(
        io,
        "pub const XOR_ARENA_BYTES: usize = {};",
        xor_plan.arena_bytes()
    );
    Ok(Artifacts {
        infer_plan,
        grad_plan,
        xor_plan,
        io_rs: io,
    })
}
