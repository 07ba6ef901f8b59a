//! Host-side training of a small MLP, with save and load: the program to
//! copy when you start your own.
//!
//! ```text
//! cargo run --release -p kael-host --example train_mlp
//! cargo run --release -p kael-host --example train_mlp -- /tmp/mlp.safetensors
//! ```
//!
//! It fits `y = sin(3x)` on `[-1, 1]` with a 1-32-32-1 tanh MLP and AdamW
//! on the threaded CPU device, saves the trained weights with metadata
//! (kael-host's safetensors checkpoint), loads them into a freshly built
//! model and checks that it gives the identical loss. It exits non-zero
//! unless the loss fell below a tenth of its start and the reload
//! reproduced it exactly. The test tiers run it.

use kael_core::nn::{Linear, Module, Reduction, Sequential, Tanh, mse_loss};
use kael_core::optim::{AdamConfig, AdamW, Optimizer};
use kael_core::{Device, Rng, Tensor, no_grad};
use kael_host::checkpoint;
use std::error::Error;
use std::path::PathBuf;

/// The model: every layer of the architecture, in one place, so a fresh
/// copy to load into is built the same way.
fn mlp(device: &Device, rng: &mut Rng) -> kael_core::Result<Sequential> {
    Ok(Sequential::new()
        .push(Linear::new(1, 32, true, device, rng)?)
        .push(Tanh)
        .push(Linear::new(32, 32, true, device, rng)?)
        .push(Tanh)
        .push(Linear::new(32, 1, true, device, rng)?))
}

/// `n` points of `y = sin(3x)` on an even grid over `[-1, 1]`, as `[n, 1]`.
fn data(n: usize, device: &Device) -> kael_core::Result<(Tensor, Tensor)> {
    let xs: Vec<f32> = (0..n)
        .map(|i| -1.0 + 2.0 * i as f32 / (n - 1) as f32)
        .collect();
    let ys: Vec<f32> = xs.iter().map(|x| (3.0 * x).sin()).collect();
    Ok((
        Tensor::from_slice(&xs, &[n, 1], device)?,
        Tensor::from_slice(&ys, &[n, 1], device)?,
    ))
}

fn loss(model: &Sequential, x: &Tensor, y: &Tensor) -> kael_core::Result<f32> {
    no_grad(|| mse_loss(&model.forward(x)?, y, Reduction::Mean))?.item::<f32>()
}

fn main() -> Result<(), Box<dyn Error>> {
    let out = match std::env::args_os().nth(1) {
        Some(p) => PathBuf::from(p),
        None => {
            std::env::temp_dir().join(format!("kael-train-mlp-{}.safetensors", std::process::id()))
        }
    };
    let device = kael_host::cpu_threaded::device()?;
    let mut rng = Rng::new(0);
    let model = mlp(&device, &mut rng)?;
    let (x, y) = data(128, &device)?;

    let mut opt = AdamW::new(
        model.parameters(),
        AdamConfig {
            lr: 1e-2,
            ..AdamConfig::default()
        },
    )?;
    let start = loss(&model, &x, &y)?;
    for step in 1..=300 {
        let l = mse_loss(&model.forward(&x)?, &y, Reduction::Mean)?;
        opt.zero_grad();
        l.backward()?;
        opt.step()?;
        if step % 100 == 0 {
            println!("step {step:>3}: loss {:.5}", l.item::<f32>()?);
        }
    }
    let end = loss(&model, &x, &y)?;
    println!("loss {start:.5} -> {end:.5}");

    // Save the weights with a little metadata, then load them into a new
    // model built by the same function (other random init).
    checkpoint::save(
        &out,
        &model.state_dict(),
        &[("model", "mlp 1-32-32-1 tanh")],
    )?;
    let ck = checkpoint::load(&out, &device)?;
    let fresh = mlp(&device, &mut Rng::new(1))?;
    fresh.load_state_dict(&ck.tensors)?;
    let reloaded = loss(&fresh, &x, &y)?;
    println!(
        "saved {} ({} tensors, model = {:?}); reloaded loss {reloaded:.5}",
        out.display(),
        ck.tensors.len(),
        ck.metadata.get("model")
    );
    let half = Tensor::from_slice(&[0.5f32], &[1, 1], &device)?;
    println!(
        "prediction at x = 0.5 (sin 1.5 = 0.9975):\n{}",
        fresh.forward(&half)?
    );
    if std::env::args_os().nth(1).is_none() {
        std::fs::remove_file(&out)?;
    }

    if reloaded.to_bits() != end.to_bits() {
        return Err(format!("the reloaded model's loss {reloaded} differs from {end}").into());
    }
    if end > start / 10.0 {
        return Err(format!("loss fell only from {start} to {end}; training is broken").into());
    }
    Ok(())
}
