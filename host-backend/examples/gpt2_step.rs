//! One GPT-2 124M fine-tuning step (random N(0, 0.02) weights, no
//! download): forward over one sequence of `T` tokens, cross-entropy on the
//! next token, backward, AdamW (lr 1e-4, PyTorch's AdamW defaults). Timed
//! as `scripts/gpt2-step-torch.py` times PyTorch's: the median of `steps`
//! steps after two warm-up steps.
//!
//! ```text
//! cargo run --release -p kael-host --example gpt2_step [-- STEPS [THREADS [T [BATCH]]]]
//! ```
//!
//! Prints `gpt2 median <ms> min <ms> peak_rss_growth <MiB>`. A batch of
//! `B` sequences is `B` forwards whose losses are averaged (the model's
//! forward takes one sequence).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // an example: a panic is a failed run

use kael_core::nn::{Reduction, cross_entropy};
use kael_core::optim::{AdamConfig, AdamW, Optimizer};
use kael_core::{Rng, Tensor};
use kael_host::gpt2::{Gpt2, Gpt2Config};
use std::time::Instant;

fn rss_kib() -> (f64, f64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |k: &str| {
        s.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn main() {
    let arg = |i: usize, d: usize| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(d)
    };
    let (steps, threads, t, batch) = (arg(1, 5), arg(2, 2), arg(3, 128), arg(4, 1));
    let cap: usize = std::env::var("KAEL_CACHE_CAP_GB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let dev = kael_host::cpu_threaded::Builder::new()
        .threads(threads)
        .cache_cap(cap << 30)
        .build()
        .unwrap();
    let (before, _) = rss_kib();
    let model = Gpt2::random(Gpt2Config::gpt2_124m(), &dev, &mut Rng::new(0)).unwrap();
    let params: Vec<Tensor> = model
        .parameters()
        .into_iter()
        .map(|p| p.requires_grad_(true).unwrap())
        .collect();
    let cfg = AdamConfig {
        lr: 1e-4,
        ..AdamConfig::adamw()
    };
    let mut opt = AdamW::new(params, cfg).unwrap();
    let mut rng = Rng::new(1);
    let seqs: Vec<Vec<u32>> = (0..batch)
        .map(|_| (0..=t).map(|_| (rng.next_u64() % 50257) as u32).collect())
        .collect();
    let mut times = Vec::new();
    for _ in 0..steps + 2 {
        let t0 = Instant::now();
        opt.zero_grad();
        let mut total: Option<Tensor> = None;
        for s in &seqs {
            let logits = model.forward(&s[..t]).unwrap();
            let target: Vec<i64> = s[1..].iter().map(|&i| i64::from(i)).collect();
            let target = Tensor::from_slice(&target, &[t], &dev).unwrap();
            let loss = cross_entropy(&logits, &target, Reduction::Mean, None).unwrap();
            total = Some(match total {
                None => loss,
                Some(a) => a.add(&loss).unwrap(),
            });
        }
        let loss = total.unwrap().mul_scalar(1.0 / batch as f64).unwrap();
        loss.backward().unwrap();
        opt.step().unwrap();
        let _ = loss.item::<f32>().unwrap();
        times.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    let mut ts = times[2..].to_vec();
    ts.sort_by(f64::total_cmp);
    let (_, peak) = rss_kib();
    println!(
        "gpt2 median {:.2} min {:.2} peak_rss_growth {:.1}",
        ts[ts.len() / 2],
        ts[0],
        (peak - before) / 1024.0
    );
}
