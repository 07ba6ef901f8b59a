//! Microbenchmark of the max-pool and im2col families alone (forward and
//! gradient steps through `Tensor::declared`), reference and threaded
//! devices, medians of 50: `cargo run --release -p kael-tests --example pool_mb`.
use kael_core::backend::Family;
use kael_core::kernels::im2col::Geometry;
use kael_core::{DType, Rng, Tensor};
use std::time::Instant;
fn main() -> kael_core::Result<()> {
    let mut rng = Rng::new(1);
    for dev in [kael_core::Device::cpu(), kael_host::cpu_threaded::device()?] {
        for shape in [[64usize, 16, 28, 28], [64, 32, 14, 14]] {
            let g = Geometry {
                kernel: [2, 2],
                stride: [2, 2],
                padding: [0, 0],
                dilation: [1, 1],
                image: [shape[2], shape[3]],
                fill: 0.0,
            };
            let w = g.words("mb")?;
            let x = Tensor::randn(&shape, DType::F32, &dev, &mut rng)?;
            let gr = Tensor::randn(
                &[shape[0], shape[1], shape[2] / 2, shape[3] / 2],
                DType::F32,
                &dev,
                &mut rng,
            )?;
            let mut tf = Vec::new();
            let mut tb = Vec::new();
            for _ in 0..50 {
                let t = Instant::now();
                let y = Tensor::declared(Family::MaxPool2d, 0, &w, &[&x])?;
                tf.push(t.elapsed().as_secs_f64() * 1e3);
                let t = Instant::now();
                let d = Tensor::declared(Family::MaxPool2d, 1, &w, &[&x, &gr])?;
                tb.push(t.elapsed().as_secs_f64() * 1e3);
                drop((y, d));
            }
            tf.sort_by(|a, b| a.partial_cmp(b).unwrap());
            tb.sort_by(|a, b| a.partial_cmp(b).unwrap());
            println!("{shape:?}: fwd {:.3} ms, bwd {:.3} ms", tf[25], tb[25]);
        }
    }
    for dev in [kael_core::Device::cpu(), kael_host::cpu_threaded::device()?] {
        let g = Geometry {
            kernel: [3, 3],
            stride: [1, 1],
            padding: [1, 1],
            dilation: [1, 1],
            image: [25, 5],
            fill: 0.0,
        };
        let w = g.words("mb")?;
        let x = Tensor::randn(&[64, 64, 25, 5], DType::F32, &dev, &mut rng)?;
        let k = Tensor::randn(&[64, 1, 3, 3], DType::F32, &dev, &mut rng)?;
        let gr = Tensor::randn(&[64, 64, 25, 5], DType::F32, &dev, &mut rng)?;
        let mut t = [vec![], vec![], vec![]];
        for _ in 0..30 {
            for (step, ts) in t.iter_mut().enumerate() {
                let ins: Vec<&Tensor> = if step == 0 {
                    vec![&x, &k]
                } else {
                    vec![&x, &k, &gr]
                };
                let s = Instant::now();
                let y = Tensor::declared(Family::Depthwise2d, step, &w, &ins)?;
                ts.push(s.elapsed().as_secs_f64() * 1e3);
                drop(y);
            }
        }
        for ts in &mut t {
            ts.sort_by(f64::total_cmp);
        }
        println!(
            "depthwise [64,64,25,5] 3x3: forward {:.3} ms, input grad {:.3} ms, weight grad {:.3} ms",
            t[0][15], t[1][15], t[2][15]
        );
    }
    for dev in [kael_core::Device::cpu(), kael_host::cpu_threaded::device()?] {
        for shape in [[64usize, 1, 28, 28], [64, 16, 14, 14]] {
            let g = Geometry {
                kernel: [3, 3],
                stride: [1, 1],
                padding: [1, 1],
                dilation: [1, 1],
                image: [shape[2], shape[3]],
                fill: 0.0,
            };
            let w = g.words("mb")?;
            let x = Tensor::randn(&shape, DType::F32, &dev, &mut rng)?;
            let cols = Tensor::randn(
                &[shape[0], shape[2], shape[3], shape[1], 3, 3],
                DType::F32,
                &dev,
                &mut rng,
            )?;
            let mut tf = Vec::new();
            let mut tb = Vec::new();
            for _ in 0..50 {
                let t = Instant::now();
                let y = Tensor::declared(Family::Im2col, 0, &w, &[&x])?;
                tf.push(t.elapsed().as_secs_f64() * 1e3);
                let t = Instant::now();
                let d = Tensor::declared(Family::Im2col, 1, &w, &[&cols])?;
                tb.push(t.elapsed().as_secs_f64() * 1e3);
                drop((y, d));
            }
            tf.sort_by(|a, b| a.partial_cmp(b).unwrap());
            tb.sort_by(|a, b| a.partial_cmp(b).unwrap());
            println!(
                "im2col {shape:?}: im2col {:.3} ms, col2im {:.3} ms",
                tf[25], tb[25]
            );
        }
    }
    Ok(())
}
