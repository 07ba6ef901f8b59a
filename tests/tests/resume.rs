//! Training resumes exactly: N steps, a checkpoint of model and optimizer
//! (kael_host::checkpoint::save_training), fresh objects loaded from it, M
//! more steps, equal bit for bit to N + M uninterrupted steps; for SGD with
//! momentum, Adam and AdamW, on every device. And a refused optimizer state
//! dict changes nothing.
mod common;
use kael_core::nn::{Linear, Module, Reduction, Sequential, Tanh, mse_loss};
use kael_core::optim::{Adam, AdamConfig, AdamW, Optimizer, Sgd, SgdConfig};
use kael_core::{DType, Device, Error, Result, Rng, Tensor};
use kael_host::checkpoint;

fn model(dev: &Device, seed: u64) -> Result<Sequential> {
    let mut rng = Rng::new(seed);
    Ok(Sequential::new()
        .push(Linear::new(3, 8, true, dev, &mut rng)?)
        .push(Tanh)
        .push(Linear::new(8, 2, true, dev, &mut rng)?))
}

type MakeOpt = fn(Vec<Tensor>) -> Result<Box<dyn Optimizer>>;

const OPTIMIZERS: [(&str, MakeOpt); 3] = [
    ("sgd+momentum", |p| {
        let cfg = SgdConfig {
            lr: 0.05,
            momentum: 0.9,
            nesterov: true,
            ..Default::default()
        };
        Ok(Box::new(Sgd::new(p, cfg)?))
    }),
    ("adam", |p| {
        Ok(Box::new(Adam::new(
            p,
            AdamConfig {
                lr: 0.01,
                weight_decay: 0.01,
                ..Default::default()
            },
        )?))
    }),
    ("adamw", |p| {
        Ok(Box::new(AdamW::new(
            p,
            AdamConfig {
                lr: 0.01,
                ..AdamConfig::adamw()
            },
        )?))
    }),
];

/// One step on batch `k`; returns the loss.
fn step(m: &Sequential, opt: &mut dyn Optimizer, dev: &Device, k: u64) -> Result<f32> {
    let mut rng = Rng::new(100 + k);
    let x = Tensor::randn(&[5, 3], DType::F32, dev, &mut rng)?;
    let y = Tensor::randn(&[5, 2], DType::F32, dev, &mut rng)?;
    opt.zero_grad();
    let loss = mse_loss(&m.forward(&x)?, &y, Reduction::Mean)?;
    loss.backward()?;
    opt.step()?;
    loss.item::<f32>()
}

fn weights(m: &Sequential) -> Result<Vec<Vec<u32>>> {
    m.parameters()
        .iter()
        .map(|p| {
            Ok(p.to_dtype(DType::F32)?
                .to_vec::<f32>()?
                .iter()
                .map(|v| v.to_bits())
                .collect())
        })
        .collect()
}

fn path(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "kael-resume-{tag}-{}.safetensors",
        std::process::id()
    ))
}

test_device!(
    training_resumes_bit_for_bit_from_a_checkpoint,
    |dev: &Device| {
        let (n, extra) = (4, 3);
        for (name, make) in OPTIMIZERS {
            // uninterrupted
            let m = model(dev, 1)?;
            let mut opt = make(m.parameters())?;
            let mut losses = Vec::new();
            for k in 0..n + extra {
                losses.push(step(&m, opt.as_mut(), dev, k)?.to_bits());
            }
            let want = weights(&m)?;

            // N steps, save, fresh objects (other initial weights), load, M steps
            let m1 = model(dev, 1)?;
            let mut opt1 = make(m1.parameters())?;
            for k in 0..n {
                step(&m1, opt1.as_mut(), dev, k)?;
            }
            let p = path(&format!("{name}-{:?}", dev.kind()).replace(['(', ')', ' ', '"'], ""));
            checkpoint::save_training(&p, &m1, opt1.as_ref(), &[("step", &n.to_string())])
                .unwrap_or_else(|e| panic!("{e}"));
            let m2 = model(dev, 7)?;
            let mut opt2 = make(m2.parameters())?;
            let meta = checkpoint::load_training(&p, &m2, opt2.as_mut(), dev)
                .unwrap_or_else(|e| panic!("{e}"));
            let _ = std::fs::remove_file(&p);
            assert_eq!(meta.get("step"), Some(&n.to_string()));
            let mut resumed = Vec::new();
            for k in n..n + extra {
                resumed.push(step(&m2, opt2.as_mut(), dev, k)?.to_bits());
            }
            assert_eq!(
                resumed,
                losses[n as usize..],
                "{name}: losses after the resume"
            );
            assert_eq!(weights(&m2)?, want, "{name}: weights after N + M steps");
        }
        Ok(())
    }
);

test_device!(
    a_fresh_optimizer_without_the_state_does_not_resume_exactly,
    |dev: &Device| {
        // What the test above guards against: the same weights with a fresh
        // optimizer take a different next step.
        let m = model(dev, 1)?;
        let mut opt = Adam::new(
            m.parameters(),
            AdamConfig {
                lr: 0.01,
                ..Default::default()
            },
        )?;
        for k in 0..4 {
            step(&m, &mut opt, dev, k)?;
        }
        let m2 = model(dev, 1)?;
        m2.load_state_dict(&m.state_dict())?;
        let mut fresh = Adam::new(
            m2.parameters(),
            AdamConfig {
                lr: 0.01,
                ..Default::default()
            },
        )?;
        step(&m, &mut opt, dev, 4)?;
        step(&m2, &mut fresh, dev, 4)?;
        assert_ne!(weights(&m)?, weights(&m2)?);
        Ok(())
    }
);

test_device!(
    a_refused_optimizer_state_dict_changes_nothing,
    |dev: &Device| {
        let m = model(dev, 1)?;
        let mut opt = Adam::new(m.parameters(), AdamConfig::default())?;
        step(&m, &mut opt, dev, 0)?;
        let before = opt.state_dict()?;
        let snapshot: Vec<Vec<u32>> = before
            .iter()
            .map(|(_, t)| {
                t.to_dtype(DType::F64)
                    .and_then(|t| t.to_vec::<f64>())
                    .map(|v| v.iter().map(|x| *x as f32).map(f32::to_bits).collect())
            })
            .collect::<Result<_>>()?;
        let bad_cases: Vec<Vec<(String, Tensor)>> = vec![
            // a wrong shape for parameter 0's first moment
            before
                .iter()
                .map(|(n, t)| {
                    if n == "state.0.exp_avg" {
                        (
                            n.clone(),
                            Tensor::zeros(&[1], t.dtype(), &t.device()).unwrap(),
                        )
                    } else {
                        (n.clone(), t.clone())
                    }
                })
                .collect(),
            // an index past the parameter list
            vec![("state.99.exp_avg".into(), before[1].1.clone())],
            // SGD's field given to Adam
            vec![("state.0.momentum_buffer".into(), before[1].1.clone())],
            // an incomplete parameter state
            vec![("state.0.exp_avg".into(), before[1].1.clone())],
            // a bad learning rate
            vec![("lr".into(), Tensor::scalar(f64::NAN, &Device::cpu())?)],
        ];
        for bad in bad_cases {
            match opt.load_state_dict(&bad) {
                Err(Error::InvalidArgument { op, .. }) => assert_eq!(op, "Adam::load_state_dict"),
                other => panic!("{other:?}"),
            }
            let now: Vec<Vec<u32>> = opt
                .state_dict()?
                .iter()
                .map(|(_, t)| {
                    t.to_dtype(DType::F64)
                        .and_then(|t| t.to_vec::<f64>())
                        .map(|v| v.iter().map(|x| *x as f32).map(f32::to_bits).collect())
                })
                .collect::<Result<_>>()?;
            assert_eq!(now, snapshot);
        }
        Ok(())
    }
);
