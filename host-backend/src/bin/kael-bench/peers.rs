//! The `peers` section: issue 17's figures, kael beside PyTorch in the same
//! run. Each figure is measured in passes that alternate kael and PyTorch
//! (`scripts/bench-torch.py`, run with `$KAEL_TORCH_PYTHON`, one process per
//! figure and pass, timing inside the process), and the medians of the
//! passes are compared. Without `$KAEL_TORCH_PYTHON` the kael figures are
//! printed alone. Figures are printed, never asserted.

use super::{R, time};
use crate::model::{CharGpt, Config};
use kael_core::nn::functional::layer_norm;
use kael_core::nn::{Module, Reduction, cross_entropy};
use kael_core::optim::{AdamConfig, AdamW, Optimizer, clip_grad_norm_};
use kael_core::{DType, Device, Rng, Tensor, no_grad};
use std::hint::black_box;
use std::process::Command;

/// One figure: its name (as `bench-torch.py --figure` takes it), its label,
/// and the seconds of one kael run on a device.
struct Figure {
    name: String,
    label: String,
    threads: usize,
}

/// The demo's char transformer (kael-train's defaults) at batch 16: one
/// AdamW step, as the demo's loop runs it.
fn step_seconds(dev: &Device, reps: usize) -> R<f64> {
    let mut rng = Rng::new(0);
    let cfg = Config {
        vocab: 84,
        context: 64,
        layers: 2,
        dim: 96,
        heads: 4,
    };
    let model = CharGpt::new(cfg, dev, &mut rng)?;
    let params = model.parameters();
    let adam = AdamConfig {
        lr: 3e-3,
        betas: (0.9, 0.99),
        weight_decay: 0.01,
        ..AdamConfig::default()
    };
    let mut opt = AdamW::new(params.clone(), adam)?;
    let ids: Vec<i64> = (0..16 * 64).map(|i| (i * 37 % 84) as i64).collect();
    let next: Vec<i64> = (0..16 * 64).map(|i| (i * 53 % 84) as i64).collect();
    let x = Tensor::from_slice(&ids, &[16, 64], dev)?;
    let y = Tensor::from_slice(&next, &[16 * 64], dev)?;
    time(reps, || {
        let logits = model.forward(&x)?;
        let l = cross_entropy(&logits.reshape(&[-1, 84])?, &y, Reduction::Mean, None)?;
        opt.zero_grad();
        l.backward()?;
        clip_grad_norm_(&params, 1.0)?;
        opt.step()?;
        black_box(l.item::<f32>()?);
        Ok(())
    })
}

fn kael_seconds(name: &str, dev: &Device, reps: usize) -> R<f64> {
    let mut rng = Rng::new(0);
    match name {
        "step" => step_seconds(dev, reps),
        "layer_norm" | "layer_norm_bwd" => {
            let x = Tensor::randn(&[4096, 1024], DType::F32, dev, &mut rng)?;
            let w = Tensor::randn(&[1024], DType::F32, dev, &mut rng)?;
            let b = Tensor::randn(&[1024], DType::F32, dev, &mut rng)?;
            if name == "layer_norm" {
                return time(reps, || {
                    no_grad(|| layer_norm(&x, &[1024], Some(&w), Some(&b), 1e-5))?;
                    Ok(())
                });
            }
            let (x, w, b) = (
                x.requires_grad_(true)?,
                w.requires_grad_(true)?,
                b.requires_grad_(true)?,
            );
            let g = Tensor::randn(&[4096, 1024], DType::F32, dev, &mut rng)?;
            time(reps, || {
                let y = layer_norm(&x, &[1024], Some(&w), Some(&b), 1e-5)?;
                y.mul(&g)?.sum_all()?.backward()?;
                Ok(())
            })
        }
        "gelu_tanh" | "gelu_erf" => {
            let x = Tensor::randn(&[16 << 20], DType::F32, dev, &mut rng)?;
            let tanh = name == "gelu_tanh";
            time(reps, || {
                black_box(if tanh { x.gelu_tanh()? } else { x.gelu()? });
                Ok(())
            })
        }
        "add4" | "add4_grad" => {
            let a = Tensor::randn(&[4], DType::F32, dev, &mut rng)?;
            let a = if name == "add4_grad" {
                a.requires_grad_(true)?
            } else {
                a
            };
            let b = Tensor::randn(&[4], DType::F32, dev, &mut rng)?;
            let n = 20_000;
            Ok(time(reps, || {
                for _ in 0..n {
                    black_box(a.add(&b)?);
                }
                Ok(())
            })? / n as f64)
        }
        _ if name.contains("mm") => matmul_seconds(name, dev, reps),
        _ => {
            let n: usize = name.strip_prefix("add:").unwrap_or("0").parse()?;
            let a = Tensor::randn(&[n], DType::F32, dev, &mut rng)?;
            let b = Tensor::randn(&[n], DType::F32, dev, &mut rng)?;
            let inner = (2_000_000 / n.max(1)).max(1);
            Ok(time(reps, || {
                no_grad(|| {
                    for _ in 0..inner {
                        black_box(a.add(&b)?);
                    }
                    Ok::<(), kael_core::Error>(())
                })?;
                Ok(())
            })? / inner as f64)
        }
    }
}

/// One product of a `mm*` figure (the names `bench-torch.py` documents):
/// `mm:N` (square), `mm:MxKxN`, `mm_bt:MxKxN` (rhs a transposed view of a
/// contiguous `[N, K]`, as Linear's forward `x @ w.t()`), `mm_at:MxKxN`
/// (lhs a transposed view of a contiguous `[K, M]`, as the weight gradient
/// `(g.t() @ x)`), `bmm:BxMxKxN` and `bmm_bt:BxMxKxN` (batched over `B`).
/// Returns (batches, m, k, n, lhs transposed, rhs transposed).
fn matmul_dims(name: &str) -> R<(usize, usize, usize, usize, bool, bool)> {
    let (kind, dims) = name
        .split_once(':')
        .ok_or_else(|| format!("bad matmul figure {name}"))?;
    let d: Vec<usize> = dims.split('x').map(str::parse).collect::<Result<_, _>>()?;
    let (b, m, k, n) = match (kind.starts_with("bmm"), &d[..]) {
        (false, &[n]) => (1, n, n, n),
        (false, &[m, k, n]) => (1, m, k, n),
        (true, &[b, m, k, n]) => (b, m, k, n),
        _ => return Err(format!("bad matmul figure {name}").into()),
    };
    Ok((b, m, k, n, kind.ends_with("_at"), kind.ends_with("_bt")))
}

/// Products per timed run of a `mm*` figure: about 0.4 GFLOP, so each run
/// is milliseconds long (the same count as `bench-torch.py`'s).
fn matmul_inner(b: usize, m: usize, k: usize, n: usize) -> usize {
    (400_000_000 / (2 * b * m * k * n).max(1)).clamp(1, 10_000)
}

fn matmul_seconds(name: &str, dev: &Device, reps: usize) -> R<f64> {
    let (b, m, k, n, at, bt) = matmul_dims(name)?;
    let mut rng = Rng::new(0);
    let lead = |r: usize, c: usize| if b > 1 { vec![b, r, c] } else { vec![r, c] };
    let lhs = if at {
        Tensor::randn(&lead(k, m), DType::F32, dev, &mut rng)?.transpose(-1, -2)?
    } else {
        Tensor::randn(&lead(m, k), DType::F32, dev, &mut rng)?
    };
    let rhs = if bt {
        Tensor::randn(&lead(n, k), DType::F32, dev, &mut rng)?.transpose(-1, -2)?
    } else {
        Tensor::randn(&lead(k, n), DType::F32, dev, &mut rng)?
    };
    let inner = matmul_inner(b, m, k, n);
    Ok(time(reps, || {
        no_grad(|| {
            for _ in 0..inner {
                black_box(lhs.matmul(&rhs)?);
            }
            Ok::<(), kael_core::Error>(())
        })?;
        Ok(())
    })? / inner as f64)
}

fn torch_seconds(py: &str, f: &Figure, reps: usize) -> R<f64> {
    let out = Command::new(py)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scripts/bench-torch.py"
        ))
        .args(["--figure", &f.name])
        .args(["--threads", &f.threads.to_string()])
        .args(["--reps", &reps.to_string()])
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "bench-torch.py --figure {} failed: {}",
            f.name,
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

/// Prints the section's table: each figure's kael and PyTorch medians over
/// `passes` alternating passes, and PyTorch's time over kael's (above 1:
/// kael is faster).
pub fn run(quick: bool, only_figure: Option<&str>) -> R<()> {
    let py = std::env::var("KAEL_TORCH_PYTHON").ok();
    let passes = if quick { 1 } else { 3 };
    let reps = if quick { 2 } else { 11 };
    let mut figures = Vec::new();
    for threads in [2, 1] {
        figures.push(Figure {
            name: "step".into(),
            label: format!("char transformer AdamW step b=16, {threads}T (ms)"),
            threads,
        });
    }
    let simple = [
        ("layer_norm", "layer_norm fwd 4096x1024 (ms)"),
        ("layer_norm_bwd", "layer_norm fwd+bwd 4096x1024 (ms)"),
        ("gelu_tanh", "GELU tanh 16M (ms)"),
        ("gelu_erf", "GELU erf 16M (ms)"),
        ("add4", "4-element add (us)"),
        ("add4_grad", "4-element add, recorded (us)"),
    ];
    for (name, label) in simple {
        figures.push(Figure {
            name: name.into(),
            label: label.into(),
            threads: 2,
        });
    }
    for n in [1usize << 10, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 24] {
        for threads in [2, 1] {
            figures.push(Figure {
                name: format!("add:{n}"),
                label: format!("add {n} elements, {threads}T (us)"),
                threads,
            });
        }
    }
    // Issue 17's small products: square n = 64..256, and the demo's
    // (kael-train's char transformer at batch 16: 1024 rows of dim 96):
    // the Linear forwards (qkv, attention projection, MLP up and down,
    // lm_head), one backward product of each kind (grad input g @ w, grad
    // weight g.t() @ x), and the two attention products per batch x head.
    let products = [
        ("mm:64", "matmul 64^3"),
        ("mm:128", "matmul 128^3"),
        ("mm:256", "matmul 256^3"),
        ("mm_bt:1024x96x288", "linear fwd [1024,96]x[96,288]"),
        ("mm_bt:1024x96x96", "linear fwd [1024,96]x[96,96]"),
        ("mm_bt:1024x96x384", "linear fwd [1024,96]x[96,384]"),
        ("mm_bt:1024x384x96", "linear fwd [1024,384]x[384,96]"),
        ("mm_bt:1024x96x84", "linear fwd [1024,96]x[96,84] (lm_head)"),
        ("mm:1024x384x96", "grad input [1024,384]x[384,96]"),
        ("mm_at:384x1024x96", "grad weight [1024,384]^T x [1024,96]"),
        ("bmm_bt:64x64x24x64", "attention q k^T 64x[64,24]x[24,64]"),
        ("bmm:64x64x64x24", "attention att v 64x[64,64]x[64,24]"),
    ];
    for (name, label) in products {
        for threads in [2, 1] {
            figures.push(Figure {
                name: name.into(),
                label: format!("{label}, {threads}T (us)"),
                threads,
            });
        }
    }
    if quick {
        figures.retain(|f| {
            (!f.name.starts_with("add:") || f.name == "add:65536")
                && (!f.name.contains("mm")
                    || (f.threads == 2 && ["mm:128", "bmm:64x64x64x24"].contains(&f.name.as_str())))
        });
    }
    if let Some(o) = only_figure {
        // `--figure products`: every `mm*` figure.
        figures.retain(|f| f.name == o || (o == "products" && f.name.contains("mm")));
    }
    println!();
    println!(
        "peers: kael against PyTorch ({}), median of {passes} alternating passes of {reps} runs",
        py.as_deref().unwrap_or("not run: set KAEL_TORCH_PYTHON")
    );
    println!("| figure | kael | PyTorch | PyTorch time / kael time |");
    println!("|---|---|---|---|");
    let devs: Vec<(usize, Device)> = [2, 1]
        .into_iter()
        .map(|t| {
            Ok((
                t,
                kael_host::cpu_threaded::Builder::new().threads(t).build()?,
            ))
        })
        .collect::<R<_>>()?;
    for f in &figures {
        let dev = devs
            .iter()
            .find(|(t, _)| *t == f.threads)
            .map(|(_, d)| d.clone())
            .ok_or("no device")?;
        let (mut k, mut p) = (Vec::new(), Vec::new());
        for _ in 0..passes {
            k.push(kael_seconds(&f.name, &dev, reps)?);
            if let Some(py) = &py {
                p.push(torch_seconds(py, f, reps)?);
            }
        }
        let scale = if f.label.ends_with("(us)") { 1e6 } else { 1e3 };
        let kael = median(k) * scale;
        if p.is_empty() {
            println!("| {:<50} | {kael:>10.3} | - | - |", f.label);
        } else {
            let torch = median(p) * scale;
            println!(
                "| {:<50} | {kael:>10.3} | {torch:>10.3} | {:>5.2} |",
                f.label,
                torch / kael
            );
        }
    }
    Ok(())
}
