//! Microbenchmark of the `conv2d` family's three steps on ResNet-8's and
//! the CNN's shapes, threaded device, medians:
//! `cargo run --release -p kael-tests --example conv_mb [threads]`.
//! Prints milliseconds and GFLOP/s per step (2 flops per multiply-add).
use kael_core::backend::Family;
use kael_core::kernels::im2col::Geometry;
use kael_core::{DType, Rng, Tensor};
use std::time::Instant;

fn main() -> kael_core::Result<()> {
    let threads: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2);
    let dev = kael_host::cpu_threaded::Builder::new()
        .threads(threads)
        .build()?;
    let mut rng = Rng::new(1);
    // (n, c, h, o, k, stride, pad)
    let shapes = [
        (32, 3, 32, 16, 3, 1, 1),
        (32, 16, 32, 16, 3, 1, 1),
        (32, 16, 32, 32, 3, 2, 1),
        (32, 32, 16, 32, 3, 1, 1),
        (32, 32, 16, 64, 3, 2, 1),
        (32, 64, 8, 64, 3, 1, 1),
        (32, 16, 32, 32, 1, 2, 0),
        (64, 16, 14, 32, 3, 1, 1),
    ];
    for (n, c, h, o, k, s, p) in shapes {
        let g = Geometry {
            kernel: [k, k],
            stride: [s, s],
            padding: [p, p],
            dilation: [1, 1],
            image: [h, h],
            fill: 0.0,
        };
        let oh = g.out("mb")?[0];
        let mut words = g.words("mb")?.to_vec();
        words.push(1);
        let x = Tensor::randn(&[n, c, h, h], DType::F32, &dev, &mut rng)?;
        let w = Tensor::randn(&[o, c, k, k], DType::F32, &dev, &mut rng)?;
        let gy = Tensor::randn(&[n, o, oh, oh], DType::F32, &dev, &mut rng)?;
        let macs = (n * o * oh * oh * c * k * k) as f64;
        let mut t = [vec![], vec![], vec![]];
        for _ in 0..40 {
            for (step, ts) in t.iter_mut().enumerate() {
                let ins: Vec<&Tensor> = if step == 0 {
                    vec![&x, &w]
                } else {
                    vec![&x, &w, &gy]
                };
                let t0 = Instant::now();
                let r = Tensor::declared(Family::Conv2d, step, &words, &ins)?;
                ts.push(t0.elapsed().as_secs_f64() * 1e3);
                drop(r);
            }
        }
        let line: Vec<String> = t
            .iter_mut()
            .map(|ts| {
                ts.sort_by(f64::total_cmp);
                let ms = ts[ts.len() / 2];
                format!("{ms:7.3} ms {:5.1} GF/s", 2.0 * macs / ms / 1e6)
            })
            .collect();
        println!(
            "[{n},{c},{h},{h}] -> {o} k{k} s{s}: fwd {} | dx {} | dw {}",
            line[0], line[1], line[2]
        );
    }
    Ok(())
}
