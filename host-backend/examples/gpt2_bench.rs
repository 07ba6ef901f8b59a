//! GPT-2 124M decode speed with random weights (no download), against the
//! matmul-bound limit measured in the same run.
//!
//! ```text
//! cargo run --release -p kael-host --example gpt2_bench [-- TOKENS [PROMPT_LEN]]
//! cargo run --release -p kael-host --features cuda --example gpt2_bench
//! ```
//!
//! Single batch, greedy, KV cache. Per generated token the model does one
//! vector-matrix product per weight matrix: about `2 * params` FLOPs
//! (`params` = the block matrices plus the tied output head `wte`; the
//! attention over the cache is small for short sequences). The limit is
//! those FLOPs at the throughput of kael's own `[1, K] x [K, N]` matmul,
//! timed here on the shapes the model uses.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // an example: a panic is a failed run

use kael_core::{DType, Device, Rng, Tensor};
use kael_host::gpt2::{Decode, Gpt2, Gpt2Config, Sampler, generate};
use std::time::Instant;

/// Median seconds of `reps` runs of `f` (after one warm-up run).
fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut v: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// GFLOP/s of `a.mm(b)` for `a [m, k]`, `b [k, n]` (`b_transposed`: `b` is
/// the transposed view of a contiguous `[n, k]`, like the output head).
fn gemm(m: usize, k: usize, n: usize, b_transposed: bool, dev: &Device, reps: usize) -> f64 {
    let mut rng = Rng::new(1);
    let a = Tensor::randn(&[m, k], DType::F32, dev, &mut rng).unwrap();
    let b = if b_transposed {
        Tensor::randn(&[n, k], DType::F32, dev, &mut rng)
            .unwrap()
            .t()
            .unwrap()
    } else {
        Tensor::randn(&[k, n], DType::F32, dev, &mut rng).unwrap()
    };
    let s = time(reps, || {
        // to_vec waits for an asynchronous device
        let _ = a
            .mm(&b)
            .unwrap()
            .narrow(1, 0, 1)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
    });
    2.0 * (m * k * n) as f64 / s / 1e9
}

fn bench(name: &str, dev: &Device, tokens: usize, prompt_len: usize) {
    let cfg = Gpt2Config::gpt2_124m();
    let (c, v, l) = (cfg.n_embd, cfg.vocab_size, cfg.n_layer);
    println!("== {name} ==");
    let t = Instant::now();
    let model = Gpt2::random(cfg.clone(), dev, &mut Rng::new(0)).unwrap();
    println!(
        "model: GPT-2 124M config, {:.1}M parameters, random N(0, 0.02) weights ({:.1} s to build)",
        cfg.num_parameters() as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );

    // Throughput of the matmuls a decode step does, and a square GEMM.
    let shapes = [
        ("c_attn  [1,768]x[768,2304]", c, 3 * c, false, l),
        ("c_proj  [1,768]x[768,768]", c, c, false, l),
        ("c_fc    [1,768]x[768,3072]", c, 4 * c, false, l),
        ("mlp.c_proj [1,3072]x[3072,768]", 4 * c, c, false, l),
        ("lm head [1,768]x[50257,768]^T", c, v, true, 1),
    ];
    let mut step_s = 0.0;
    let mut flops = 0.0;
    for (label, k, n, bt, count) in shapes {
        let g = gemm(1, k, n, bt, dev, 20);
        let f = 2.0 * (k * n) as f64 * count as f64;
        step_s += f / (g * 1e9);
        flops += f;
        println!("  matmul {label:<32} {g:8.2} GFLOP/s");
    }
    let sq = gemm(768, 768, 768, false, dev, 5);
    println!("  matmul [768,768]x[768,768]        {sq:8.2} GFLOP/s (square GEMM)");
    let limit = 1.0 / step_s;
    println!(
        "per-token FLOPs (weight matmuls): {:.1} MFLOP = 2 x {:.1}M weights",
        flops / 1e6,
        flops / 2e6
    );

    let prompt: Vec<u32> = (0..prompt_len as u32)
        .map(|i| (i * 7919 + 13) % v as u32)
        .collect();
    let mut sampler = Sampler::greedy();
    let start = Instant::now();
    let mut first = None;
    let ids = generate(
        &model,
        &prompt,
        tokens,
        &mut sampler,
        Decode::Cached,
        |_| {
            first.get_or_insert_with(|| start.elapsed().as_secs_f64());
            Ok(())
        },
    )
    .unwrap();
    let total = start.elapsed().as_secs_f64();
    let first = first.unwrap_or(0.0);
    let rate = (ids.len() - 1) as f64 / (total - first);
    println!(
        "greedy decode: prompt {prompt_len} tokens, {} new tokens; prefill + first token {:.0} ms; \
         decode {rate:.2} tokens/s ({:.1} ms/token)",
        ids.len(),
        first * 1e3,
        1e3 / rate
    );
    println!(
        "matmul-bound limit (same matmuls at the throughput measured above): {limit:.2} tokens/s; \
         achieved {:.0}% of it",
        100.0 * rate / limit
    );
    println!(
        "  (for scale: at the square-GEMM throughput the limit would be {:.2} tokens/s)",
        sq * 1e9 / flops
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let tokens: usize = args
        .next()
        .map_or(32, |s| s.parse().expect("TOKENS: a number"));
    let prompt_len: usize = args
        .next()
        .map_or(8, |s| s.parse().expect("PROMPT_LEN: a number"));
    bench(
        "reference CPU (Device::cpu())",
        &Device::cpu(),
        tokens,
        prompt_len,
    );
    println!("threaded CPU: kael_host does not expose a threaded CPU device in this build");
    #[cfg(feature = "cuda")]
    match kael_host::cuda::device(0) {
        Ok(dev) => bench("CUDA device 0", &dev, tokens, prompt_len),
        Err(e) => println!("CUDA: skipped ({e})"),
    }
}
