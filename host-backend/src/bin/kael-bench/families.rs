//! The `families` section (issue 44): every kernel family and composite
//! layer a CNN, a keyword-spotting DS-CNN, ResNet-8 or a transformer uses,
//! forward and forward + backward, kael beside PyTorch in the same run
//! (`scripts/bench-families-torch.py`, run with `$KAEL_TORCH_PYTHON`, one
//! process per figure and pass, alternating with kael), with PyTorch's
//! time over kael's. Shapes are the models' (the CNN of issue 44, MLPerf
//! Tiny's DS-CNN and ResNet-8, GPT-2 124M at 128 tokens). Before the
//! table, which families the threaded device runs itself and which it
//! inherits from the reference backend.
//!
//! Run: `KAEL_TORCH_PYTHON=python3 cargo run --release -p kael-host --bin
//! kael-bench -- --only families [--figure NAME] [--threads T]`.

use super::{R, time};
use kael_core::nn::functional::{avg_pool2d, batch_norm, conv2d, layer_norm, max_pool2d};
use kael_core::nn::{Reduction, cross_entropy};
use kael_core::optim::{AdamConfig, AdamW, Optimizer};
use kael_core::{DType, Device, Rng, Tensor, no_grad};
use std::process::Command;

/// The figures: name (as the PyTorch script takes it) and label.
const FIGURES: &[(&str, &str)] = &[
    ("conv_cnn", "conv2d [64,16,14,14]->32 3x3 p1 (CNN)"),
    ("conv_kws", "conv2d [64,1,49,10]->64 10x4 s2 (DS-CNN stem)"),
    ("conv_dw", "depthwise [64,64,25,5] 3x3 p1 (DS-CNN)"),
    ("conv_pw", "pointwise [64,64,25,5]->64 1x1 (DS-CNN)"),
    ("conv_res", "conv2d [32,16,32,32]->16 3x3 p1 (ResNet-8)"),
    ("conv_res_s2", "conv2d [32,32,16,16]->64 3x3 s2 (ResNet-8)"),
    ("max_pool", "max_pool2d [64,16,28,28] 2x2"),
    ("avg_pool", "avg_pool2d [64,32,14,14] 2x2"),
    ("global_pool", "global average pool [64,64,25,5]"),
    ("batch_norm", "batch_norm train [32,16,32,32]"),
    ("layer_norm", "layer_norm [128,768] (GPT-2)"),
    ("attention", "attention 12x[128,64] causal (GPT-2)"),
    ("embedding", "embedding [50257,768], 128 ids"),
    ("cross_entropy", "cross_entropy [128,50257]"),
    ("gather", "gather [4096,1024] dim 1, 64 per row"),
    ("index_select", "index_select [50257,768] rows, 512 ids"),
    ("relu", "relu [32,16,32,32]"),
    ("gelu", "gelu tanh [128,3072]"),
    ("adamw", "AdamW step, 10M params in 8 tensors"),
    (
        "adamw_t",
        "AdamW step, 10M params in 8 transposed tensors (GPT-2's Conv1D)",
    ),
];

/// A figure's forward, a function of its inputs.
type Fwd = Box<dyn Fn(&[Tensor]) -> kael_core::Result<Tensor>>;

/// Seconds of one forward (`bwd`: forward and backward) of figure `name`.
fn kael_seconds(name: &str, bwd: bool, dev: &Device, reps: usize) -> R<f64> {
    let mut rng = Rng::new(0);
    let mut r = |s: &[usize]| -> R<Tensor> {
        Ok(Tensor::randn(s, DType::F32, dev, &mut rng)?.requires_grad_(bwd)?)
    };
    // A forward as a function of the inputs; the backward sums the output
    // against a fixed random weighting.
    let conv = |x: [usize; 4], o: usize, k: [usize; 2], s: usize, p: [usize; 2], g: usize| {
        let (xs, ws) = (x, [o, x[1] / g, k[0], k[1]]);
        (xs, ws, s, p, g)
    };
    let (inputs, f): (Vec<Tensor>, Fwd) = match name {
        n if n.starts_with("conv_") => {
            let (xs, ws, s, p, g) = match n {
                "conv_cnn" => conv([64, 16, 14, 14], 32, [3, 3], 1, [1, 1], 1),
                "conv_kws" => conv([64, 1, 49, 10], 64, [10, 4], 2, [5, 1], 1),
                "conv_dw" => conv([64, 64, 25, 5], 64, [3, 3], 1, [1, 1], 64),
                "conv_pw" => conv([64, 64, 25, 5], 64, [1, 1], 1, [0, 0], 1),
                "conv_res" => conv([32, 16, 32, 32], 16, [3, 3], 1, [1, 1], 1),
                _ => conv([32, 32, 16, 16], 64, [3, 3], 2, [1, 1], 1),
            };
            (
                vec![r(&xs)?, r(&ws)?],
                Box::new(move |t: &[Tensor]| conv2d(&t[0], &t[1], None, [s, s], p, [1, 1], g)),
            )
        }
        "max_pool" => (
            vec![r(&[64, 16, 28, 28])?],
            Box::new(|t: &[Tensor]| max_pool2d(&t[0], [2, 2], [2, 2], [0, 0])),
        ),
        "avg_pool" => (
            vec![r(&[64, 32, 14, 14])?],
            Box::new(|t: &[Tensor]| avg_pool2d(&t[0], [2, 2], [2, 2], [0, 0], true)),
        ),
        "global_pool" => (
            vec![r(&[64, 64, 25, 5])?],
            Box::new(|t: &[Tensor]| t[0].mean(&[2, 3], false)),
        ),
        "batch_norm" => (
            vec![r(&[32, 16, 32, 32])?, r(&[16])?, r(&[16])?],
            Box::new(|t: &[Tensor]| {
                batch_norm(&t[0], None, None, Some(&t[1]), Some(&t[2]), true, 0.1, 1e-5)
            }),
        ),
        "layer_norm" => (
            vec![r(&[128, 768])?, r(&[768])?, r(&[768])?],
            Box::new(|t: &[Tensor]| layer_norm(&t[0], &[768], Some(&t[1]), Some(&t[2]), 1e-5)),
        ),
        "attention" => {
            let mask = {
                let q = Tensor::arange(0i64, 128, dev)?.unsqueeze(1)?;
                let k = Tensor::arange(0i64, 128, dev)?.unsqueeze(0)?;
                let zero = Tensor::full(&[], 0.0, DType::F32, dev)?;
                let neg = Tensor::full(&[], f64::NEG_INFINITY, DType::F32, dev)?;
                k.le(&q)?.where_cond(&zero, &neg)?
            };
            (
                vec![r(&[12, 128, 64])?, r(&[12, 128, 64])?, r(&[12, 128, 64])?],
                Box::new(move |t: &[Tensor]| {
                    let s = t[0].mul_scalar(0.125)?.matmul(&t[1].transpose(-2, -1)?)?;
                    s.add(&mask)?.softmax(-1)?.matmul(&t[2])
                }),
            )
        }
        "embedding" | "index_select" => {
            let (n, v) = if name == "embedding" {
                (128, 50257)
            } else {
                (512, 50257)
            };
            let ids: Vec<i64> = (0..n).map(|i| (i * 7919 % v) as i64).collect();
            let ids = Tensor::from_slice(&ids, &[n], dev)?;
            (
                vec![r(&[v, 768])?],
                Box::new(move |t: &[Tensor]| Tensor::embedding(&t[0], &ids)),
            )
        }
        "cross_entropy" => {
            let y: Vec<i64> = (0..128).map(|i| (i * 7919 % 50257) as i64).collect();
            let y = Tensor::from_slice(&y, &[128], dev)?;
            (
                vec![r(&[128, 50257])?],
                Box::new(move |t: &[Tensor]| cross_entropy(&t[0], &y, Reduction::Mean, None)),
            )
        }
        "gather" => {
            let idx: Vec<i64> = (0..4096 * 64).map(|i| (i * 37 % 1024) as i64).collect();
            let idx = Tensor::from_slice(&idx, &[4096, 64], dev)?;
            (
                vec![r(&[4096, 1024])?],
                Box::new(move |t: &[Tensor]| t[0].gather(1, &idx)),
            )
        }
        "relu" => (
            vec![r(&[32, 16, 32, 32])?],
            Box::new(|t: &[Tensor]| t[0].relu()),
        ),
        "gelu" => (
            vec![r(&[128, 3072])?],
            Box::new(|t: &[Tensor]| t[0].gelu_tanh()),
        ),
        "adamw" => return adamw_seconds(dev, reps, false),
        "adamw_t" => return adamw_seconds(dev, reps, true),
        _ => return Err(format!("unknown family figure {name}").into()),
    };
    if !bwd {
        return time(reps, || {
            no_grad(|| f(&inputs))?;
            Ok(())
        });
    }
    let y0 = no_grad(|| f(&inputs))?;
    let weights = Tensor::randn(y0.shape(), DType::F32, dev, &mut Rng::new(5))?;
    time(reps, || {
        for t in &inputs {
            t.zero_grad();
        }
        let y = f(&inputs)?;
        let l = if y.rank() == 0 {
            y
        } else {
            y.mul(&weights)?.sum_all()?
        };
        l.backward()?;
        Ok(())
    })
}

/// One AdamW step over 8 tensors of 1.25M parameters with gradients
/// (`transposed`: each parameter `[1250, 1000]` a transposed view of a
/// contiguous `[1000, 1250]`).
fn adamw_seconds(dev: &Device, reps: usize, transposed: bool) -> R<f64> {
    let mut rng = Rng::new(0);
    let params = (0..8)
        .map(|_| {
            let p = if transposed {
                Tensor::randn(&[1000, 1250], DType::F32, dev, &mut rng)?.t()?
            } else {
                Tensor::randn(&[1250, 1000], DType::F32, dev, &mut rng)?
            };
            let p = p.requires_grad_(true)?;
            p.sum_all()?.backward()?;
            Ok(p)
        })
        .collect::<R<Vec<_>>>()?;
    let mut opt = AdamW::new(params, AdamConfig::adamw())?;
    time(reps, || {
        opt.step()?;
        Ok(())
    })
}

fn torch_seconds(py: &str, name: &str, bwd: bool, threads: usize, reps: usize) -> R<f64> {
    let out = Command::new(py)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scripts/bench-families-torch.py"
        ))
        .args(["--figure", name])
        .args(["--threads", &threads.to_string()])
        .args(["--reps", &reps.to_string()])
        .args(if bwd { &["--backward"][..] } else { &[][..] })
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "bench-families-torch.py --figure {name} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().parse()?)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Prints the section: the threaded device's family report, then each
/// figure's kael and PyTorch medians (ms) over alternating passes, and
/// PyTorch's time over kael's (above 1: kael is faster).
pub fn run(quick: bool, only_figure: Option<&str>, threads: usize) -> R<()> {
    let py = std::env::var("KAEL_TORCH_PYTHON").ok();
    let passes = if quick { 1 } else { 3 };
    let reps = if quick { 2 } else { 9 };
    let dev = kael_host::cpu_threaded::Builder::new()
        .threads(threads)
        .build()?;
    println!();
    println!(
        "families: kael ({threads} threads) against PyTorch ({}), median of {passes} alternating passes of {reps} runs",
        py.as_deref().unwrap_or("not run: set KAEL_TORCH_PYTHON")
    );
    println!(
        "threaded device: {}",
        kael_core::backend::family::report(dev.backend())
    );
    println!("| family | pass | kael ms | PyTorch ms | PyTorch / kael |");
    println!("|---|---|---|---|---|");
    for &(name, label) in FIGURES {
        if only_figure.is_some_and(|o| o != name) {
            continue;
        }
        let kinds: &[bool] = if name.starts_with("adamw") {
            &[false]
        } else {
            &[false, true]
        };
        for &bwd in kinds {
            let (mut k, mut p) = (Vec::new(), Vec::new());
            for _ in 0..passes {
                k.push(kael_seconds(name, bwd, &dev, reps)?);
                if let Some(py) = &py {
                    p.push(torch_seconds(py, name, bwd, threads, reps)?);
                }
            }
            let pass = match (name, bwd) {
                ("adamw" | "adamw_t", _) => "step",
                (_, false) => "fwd",
                _ => "fwd+bwd",
            };
            let kael = median(k) * 1e3;
            if p.is_empty() {
                println!("| {label} | {pass} | {kael:.3} | - | - |");
            } else {
                let torch = median(p) * 1e3;
                println!(
                    "| {label} | {pass} | {kael:.3} | {torch:.3} | {:.2} |",
                    torch / kael
                );
            }
        }
    }
    Ok(())
}
