//! Issue 44's whole training steps on the threaded device, timed the way
//! `scripts/train-steps-torch.py` times PyTorch's (the same models, shapes,
//! init scales, batch and Adam): `train_steps <model> [steps]` with model
//! `cnn` (conv 1->16->32, 3x3, max pools, linear; batch 64 of 1x28x28),
//! `dscnn` (MLPerf Tiny's keyword-spotting DS-CNN: conv 10x4 stride 2 to
//! 64 channels, four depthwise-separable blocks, batch norm, global average
//! pool, linear to 12; batch 64 of 1x49x10) or `resnet8` (MLPerf Tiny's
//! ResNet-8: 16-32-64 channels, batch norm, strided shortcuts; batch 32 of
//! 3x32x32). Prints `<model> median <ms> min <ms> peak_rss_growth <MiB>`:
//! the median of the steps after two warm-up steps, and how far the
//! process's peak resident set grew past its size before the model was
//! built. A third argument sets the thread count (default: every core).
//! `scripts/bench-steps.py` interleaves the two and prints ratios.
use kael_core::nn::functional::{batch_norm, conv2d, max_pool2d};
use kael_core::nn::{Reduction, cross_entropy};
use kael_core::optim::{Adam, AdamConfig, Optimizer};
use kael_core::{DType, Device, Result, Rng, Tensor};
use std::time::Instant;

/// A convolution's weight and a batch norm's parameters and statistics.
struct ConvBn {
    w: Tensor,
    gamma: Tensor,
    beta: Tensor,
    mean: Tensor,
    var: Tensor,
    stride: usize,
    pad: [usize; 2],
    groups: usize,
}

struct Init<'a> {
    dev: &'a Device,
    rng: Rng,
    params: Vec<Tensor>,
}

impl Init<'_> {
    fn leaf(&mut self, shape: &[usize], scale: f64) -> Result<Tensor> {
        let t = Tensor::randn(shape, DType::F32, self.dev, &mut self.rng)?
            .mul_scalar(scale)?
            .deep_clone()?
            .requires_grad_(true)?;
        self.params.push(t.clone());
        Ok(t)
    }

    fn conv_bn(
        &mut self,
        o: usize,
        i: usize,
        k: [usize; 2],
        stride: usize,
        pad: [usize; 2],
        groups: usize,
    ) -> Result<ConvBn> {
        let fan_in = (i / groups * k[0] * k[1]) as f64;
        let w = self.leaf(&[o, i / groups, k[0], k[1]], (2.0 / fan_in).sqrt())?;
        let gamma = Tensor::ones(&[o], DType::F32, self.dev)?.requires_grad_(true)?;
        let beta = Tensor::zeros(&[o], DType::F32, self.dev)?.requires_grad_(true)?;
        self.params.extend([gamma.clone(), beta.clone()]);
        Ok(ConvBn {
            w,
            gamma,
            beta,
            mean: Tensor::zeros(&[o], DType::F32, self.dev)?,
            var: Tensor::ones(&[o], DType::F32, self.dev)?,
            stride,
            pad,
            groups,
        })
    }
}

impl ConvBn {
    /// conv (no bias), batch norm in training mode (momentum 0.1, eps 1e-5).
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let s = self.stride;
        let y = conv2d(x, &self.w, None, [s, s], self.pad, [1, 1], self.groups)?;
        batch_norm(
            &y,
            Some(&self.mean),
            Some(&self.var),
            Some(&self.gamma),
            Some(&self.beta),
            true,
            0.1,
            1e-5,
        )
    }
}

enum Model {
    Cnn {
        w1: Tensor,
        b1: Tensor,
        w2: Tensor,
        b2: Tensor,
        wl: Tensor,
    },
    DsCnn {
        first: ConvBn,
        blocks: Vec<(ConvBn, ConvBn)>,
        wl: Tensor,
        bl: Tensor,
    },
    ResNet8 {
        first: ConvBn,
        stacks: Vec<(ConvBn, ConvBn, Option<ConvBn>)>,
        wl: Tensor,
        bl: Tensor,
    },
}

impl Model {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Model::Cnn { w1, b1, w2, b2, wl } => {
                let h = conv2d(x, w1, Some(b1), [1, 1], [1, 1], [1, 1], 1)?.relu()?;
                let h = max_pool2d(&h, [2, 2], [2, 2], [0, 0])?;
                let h = conv2d(&h, w2, Some(b2), [1, 1], [1, 1], [1, 1], 1)?.relu()?;
                let h = max_pool2d(&h, [2, 2], [2, 2], [0, 0])?;
                let n = h.shape()[0];
                h.reshape(&[n, 1568])?.matmul(wl)
            }
            Model::DsCnn {
                first,
                blocks,
                wl,
                bl,
            } => {
                let mut h = first.forward(x)?.relu()?;
                for (dw, pw) in blocks {
                    h = dw.forward(&h)?.relu()?;
                    h = pw.forward(&h)?.relu()?;
                }
                h.mean(&[2, 3], false)?.matmul(wl)?.add(bl)
            }
            Model::ResNet8 {
                first,
                stacks,
                wl,
                bl,
            } => {
                let mut h = first.forward(x)?.relu()?;
                for (a, b, short) in stacks {
                    let y = b.forward(&a.forward(&h)?.relu()?)?;
                    let s = match short {
                        Some(c) => c.forward(&h)?,
                        None => h.clone(),
                    };
                    h = y.add(&s)?.relu()?;
                }
                h.mean(&[2, 3], false)?.matmul(wl)?.add(bl)
            }
        }
    }
}

fn build(name: &str, dev: &Device) -> Result<(Model, Vec<Tensor>, Tensor, Tensor)> {
    let mut init = Init {
        dev,
        rng: Rng::new(1),
        params: Vec::new(),
    };
    let mut data = Rng::new(2);
    let (model, x, classes) = match name {
        "cnn" => {
            let w1 = init.leaf(&[16, 1, 3, 3], 0.3)?;
            let b1 = init.leaf(&[16], 0.1)?;
            let w2 = init.leaf(&[32, 16, 3, 3], 0.08)?;
            let b2 = init.leaf(&[32], 0.1)?;
            let wl = init.leaf(&[1568, 10], 0.02)?;
            let x = Tensor::randn(&[64, 1, 28, 28], DType::F32, dev, &mut data)?;
            (Model::Cnn { w1, b1, w2, b2, wl }, x, 10)
        }
        "dscnn" => {
            let first = init.conv_bn(64, 1, [10, 4], 2, [5, 1], 1)?;
            let mut blocks = Vec::new();
            for _ in 0..4 {
                let dw = init.conv_bn(64, 64, [3, 3], 1, [1, 1], 64)?;
                let pw = init.conv_bn(64, 64, [1, 1], 1, [0, 0], 1)?;
                blocks.push((dw, pw));
            }
            let wl = init.leaf(&[64, 12], 0.125)?;
            let bl = init.leaf(&[12], 0.0)?;
            let x = Tensor::randn(&[64, 1, 49, 10], DType::F32, dev, &mut data)?;
            (
                Model::DsCnn {
                    first,
                    blocks,
                    wl,
                    bl,
                },
                x,
                12,
            )
        }
        "resnet8" => {
            let first = init.conv_bn(16, 3, [3, 3], 1, [1, 1], 1)?;
            let mut stacks = Vec::new();
            for (i, o, s) in [(16, 16, 1), (16, 32, 2), (32, 64, 2)] {
                let a = init.conv_bn(o, i, [3, 3], s, [1, 1], 1)?;
                let b = init.conv_bn(o, o, [3, 3], 1, [1, 1], 1)?;
                let short = if s == 1 {
                    None
                } else {
                    Some(init.conv_bn(o, i, [1, 1], s, [0, 0], 1)?)
                };
                stacks.push((a, b, short));
            }
            let wl = init.leaf(&[64, 10], 0.125)?;
            let bl = init.leaf(&[10], 0.0)?;
            let x = Tensor::randn(&[32, 3, 32, 32], DType::F32, dev, &mut data)?;
            (
                Model::ResNet8 {
                    first,
                    stacks,
                    wl,
                    bl,
                },
                x,
                10,
            )
        }
        _ => {
            return Err(kael_core::Error::InvalidArgument {
                op: "train_steps",
                reason: "the model must be cnn, dscnn or resnet8",
            });
        }
    };
    let n = x.shape()[0];
    let y = Tensor::from_slice(
        &(0..n as i64).map(|i| i % classes).collect::<Vec<i64>>(),
        &[n],
        dev,
    )?;
    Ok((model, init.params, x, y))
}

/// The process's resident set now and at its peak, in KiB (Linux).
fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let name = args.get(1).map_or("cnn", String::as_str);
    let steps: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(30);
    let dev = match args.get(3).and_then(|s| s.parse().ok()) {
        Some(t) => kael_host::cpu_threaded::Builder::new().threads(t).build()?,
        None => kael_host::cpu_threaded::device()?,
    };
    let (before, _) = rss_kib();
    let (model, params, x, y) = build(name, &dev)?;
    let mut opt = Adam::new(params, AdamConfig::default())?;
    let mut times = Vec::new();
    for _ in 0..steps + 2 {
        let t = Instant::now();
        opt.zero_grad();
        let loss = cross_entropy(&model.forward(&x)?, &y, Reduction::Mean, None)?;
        loss.backward()?;
        opt.step()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let mut t = times.split_off(2);
    t.sort_by(f64::total_cmp);
    let (_, peak) = rss_kib();
    println!(
        "{name} median {:.2} min {:.2} peak_rss_growth {:.1}",
        t[t.len() / 2],
        t[0],
        peak.saturating_sub(before) as f64 / 1024.0
    );
    Ok(())
}
