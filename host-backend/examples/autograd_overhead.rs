//! Backward overhead per node on a chain of tiny ops.
//!
//! Builds `y = x`, then `y = y * 1 + 1` n times on a one-element tensor,
//! and times the forward pass (with recording), the same forward under
//! `no_grad` (the baseline: kernel + allocation cost alone), and backward.
//! Prints medians of several runs, in ns per op, and the ratios.
//!
//! Run: `cargo run --release -p kael-host --example autograd_overhead`

use kael_core::{DType, Device, Tensor, no_grad};
use std::time::Instant;

fn chain(x: &Tensor, n: usize) -> Result<Tensor, kael_core::Error> {
    let mut y = x.clone();
    for _ in 0..n {
        y = y.affine(1.0, 1.0)?;
    }
    Ok(y)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dev = Device::cpu();
    let n = 100_000;
    let runs = 7;
    let (mut plain, mut fwd, mut bwd) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let x = Tensor::ones(&[1], DType::F32, &dev)?.requires_grad_(true)?;
        let t = Instant::now();
        let _ = no_grad(|| chain(&x, n))?;
        plain.push(t.elapsed().as_secs_f64() * 1e9 / n as f64);
        let t = Instant::now();
        let y = chain(&x, n)?;
        fwd.push(t.elapsed().as_secs_f64() * 1e9 / n as f64);
        let t = Instant::now();
        y.backward()?;
        bwd.push(t.elapsed().as_secs_f64() * 1e9 / n as f64);
        assert_eq!(
            x.grad().map(|g| g.to_vec::<f32>()).transpose()?,
            Some(vec![1.0])
        );
    }
    let (p, f, b) = (median(plain), median(fwd), median(bwd));
    println!("chain of {n} one-element affine ops, median of {runs} runs");
    println!("forward, no_grad (baseline)   {p:8.0} ns/op");
    println!(
        "forward, recording            {f:8.0} ns/op   ({:.2}x baseline)",
        f / p
    );
    println!(
        "backward                      {b:8.0} ns/node ({:.2}x baseline)",
        b / p
    );
    Ok(())
}
