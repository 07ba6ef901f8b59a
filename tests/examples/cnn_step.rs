//! Issue 44's small CNN training step on the threaded device, timed: conv
//! 1->16->32 (3x3, padding 1), ReLU, 2x2 max pool, linear 1568->10,
//! cross-entropy, Adam, batch 64 of 1x28x28; prints the median of 60
//! steps. `cargo run --release -p kael-tests --example cnn_step`
use kael_core::nn::functional::{conv2d, max_pool2d};
use kael_core::nn::{Reduction, cross_entropy};
use kael_core::optim::{Adam, AdamConfig, Optimizer};
use kael_core::{DType, Rng, Tensor};
use std::time::Instant;

fn main() -> kael_core::Result<()> {
    let dev = kael_host::cpu_threaded::device()?;
    let mut rng = Rng::new(1);
    let mut leaf = |s: &[usize], k: f64| -> kael_core::Result<Tensor> {
        Tensor::randn(s, DType::F32, &dev, &mut rng)?
            .mul_scalar(k)?
            .deep_clone()?
            .requires_grad_(true)
    };
    let w1 = leaf(&[16, 1, 3, 3], 0.3)?;
    let b1 = leaf(&[16], 0.1)?;
    let w2 = leaf(&[32, 16, 3, 3], 0.08)?;
    let b2 = leaf(&[32], 0.1)?;
    let wl = leaf(&[1568, 10], 0.02)?;
    let mut rng2 = Rng::new(2);
    let x = Tensor::randn(&[64, 1, 28, 28], DType::F32, &dev, &mut rng2)?;
    let y = Tensor::from_slice(&(0..64).map(|i| i % 10).collect::<Vec<i64>>(), &[64], &dev)?;
    let mut opt = Adam::new(
        vec![w1.clone(), b1.clone(), w2.clone(), b2.clone(), wl.clone()],
        AdamConfig::default(),
    )?;
    let mut times = Vec::new();
    for _ in 0..60 {
        let t = Instant::now();
        opt.zero_grad();
        let h = conv2d(&x, &w1, Some(&b1), [1, 1], [1, 1], [1, 1], 1)?.relu()?;
        let h = max_pool2d(&h, [2, 2], [2, 2], [0, 0])?;
        let h = conv2d(&h, &w2, Some(&b2), [1, 1], [1, 1], [1, 1], 1)?.relu()?;
        let h = max_pool2d(&h, [2, 2], [2, 2], [0, 0])?;
        let loss = cross_entropy(
            &h.reshape(&[64, 1568])?.matmul(&wl)?,
            &y,
            Reduction::Mean,
            None,
        )?;
        loss.backward()?;
        opt.step()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("cnn step median {:.1} ms (min {:.1})", times[30], times[0]);
    Ok(())
}
