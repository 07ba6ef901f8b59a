//! Optimizers, gradient clipping and the learning-rate schedule.
//!
//! Expected values come from numpy with PyTorch's update formulas (the
//! reference script is quoted at the end of this file). The model is a fixed
//! 2-layer MLP, `y = tanh(x W1ᵀ + b1) W2ᵀ + b2` with an MSE loss, every array
//! `fill(shape, seed) = float32(0.5 * sin(0.7 * i + seed))`; parameters are
//! compared flattened in the order W1, b1, W2, b2.

mod common;

use common::{assert_close, assert_close64};
use kael_core::allocator::{Allocator, GlobalAllocator};
use kael_core::backend::{ArgReduceOp, BinaryOp, CmpOp, Dst, ReduceOp, Src, UnaryOp};
use kael_core::cpu::CpuBackend;
use kael_core::nn::{Linear, Module, Reduction, Visitor, mse_loss};
use kael_core::optim::{
    Adam, AdamConfig, AdamW, Optimizer, Sgd, SgdConfig, WarmupCosine, clip_grad_norm_,
};
use kael_core::shared::Shared;
use kael_core::{Backend, DType, Device, DeviceKind, Error, Result, Storage, Tensor};

fn fill(shape: &[usize], seed: f64, dev: &Device) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| (0.5 * (0.7 * i as f64 + seed).sin()) as f32)
        .collect();
    Tensor::from_slice(&v, shape, dev)
}

fn leaf(shape: &[usize], seed: f64, dev: &Device) -> Result<Tensor> {
    fill(shape, seed, dev)?.requires_grad_(true)
}

struct Mlp {
    l1: Linear,
    l2: Linear,
}

impl Module for Mlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.l2.forward(&self.l1.forward(x)?.tanh()?)
    }
    fn visit(&self, v: &mut dyn Visitor) {
        v.module("l1", &self.l1);
        v.module("l2", &self.l2);
    }
}

fn mlp(dev: &Device) -> Result<Mlp> {
    Ok(Mlp {
        l1: Linear::from_weights(leaf(&[5, 3], 2.0, dev)?, Some(leaf(&[5], 3.0, dev)?))?,
        l2: Linear::from_weights(leaf(&[2, 5], 4.0, dev)?, Some(leaf(&[2], 5.0, dev)?))?,
    })
}

/// The MSE of the MLP on the fixed batch, on the model's current device.
fn loss(m: &Mlp) -> Result<Tensor> {
    let dev = m.l1.weight.device();
    mse_loss(
        &m.forward(&fill(&[4, 3], 1.0, &dev)?)?,
        &fill(&[4, 2], 6.0, &dev)?,
        Reduction::Mean,
    )
}

fn train(m: &Mlp, opt: &mut dyn Optimizer, steps: usize) -> Result<()> {
    for _ in 0..steps {
        opt.zero_grad();
        loss(m)?.backward()?;
        opt.step()?;
    }
    Ok(())
}

/// W1, b1, W2, b2 flattened.
fn flat(ts: &[Tensor]) -> Vec<f32> {
    ts.iter().flat_map(|t| t.to_vec::<f32>().unwrap()).collect()
}

fn flat_grads(m: &Mlp) -> Vec<f32> {
    flat(
        &m.parameters()
            .iter()
            .map(|p| p.grad().unwrap())
            .collect::<Vec<_>>(),
    )
}

// -------------------------------------------------------- a second device

/// The reference CPU kernels under another device identity, so that
/// `Module::to` really moves tensors; with `fail_sqrt`, `sqrt` fails (to
/// make an optimizer step fail midway).
struct OtherCpu {
    inner: CpuBackend,
    fail_sqrt: bool,
}

fn other_cpu(fail_sqrt: bool) -> Device {
    Device::from_backend(Shared::new(OtherCpu {
        inner: CpuBackend::new(Shared::new(GlobalAllocator::new())),
        fail_sqrt,
    }))
}

impl Backend for OtherCpu {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Custom(if self.fail_sqrt {
            "failing-cpu"
        } else {
            "other-cpu"
        })
    }
    fn is_host_memory(&self) -> bool {
        true
    }
    fn allocator(&self) -> Shared<dyn Allocator> {
        self.inner.allocator()
    }
    fn write_bytes(&self, dst: &Storage, off: usize, src: &[u8]) -> Result<()> {
        self.inner.write_bytes(dst, off, src)
    }
    fn read_bytes(&self, src: &Storage, off: usize, dst: &mut [u8]) -> Result<()> {
        self.inner.read_bytes(src, off, dst)
    }
    fn copy_strided(&self, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.inner.copy_strided(src, dst)
    }
    fn cast(&self, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.inner.cast(src, dst)
    }
    fn fill(&self, dst: Dst<'_>, value: f64) -> Result<()> {
        self.inner.fill(dst, value)
    }
    fn unary(&self, op: UnaryOp, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        if self.fail_sqrt && matches!(op, UnaryOp::Sqrt) {
            return Err(Error::Unsupported {
                op: "sqrt",
                device: self.kind(),
            });
        }
        self.inner.unary(op, src, dst)
    }
    fn binary(&self, op: BinaryOp, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.inner.binary(op, lhs, rhs, dst)
    }
    fn compare(&self, op: CmpOp, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.inner.compare(op, lhs, rhs, dst)
    }
    fn where_cond(&self, c: Src<'_>, t: Src<'_>, f: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.inner.where_cond(c, t, f, dst)
    }
    fn reduce(&self, op: ReduceOp, src: Src<'_>, dims: &[usize], dst: Dst<'_>) -> Result<()> {
        self.inner.reduce(op, src, dims, dst)
    }
    fn arg_reduce(&self, op: ArgReduceOp, src: Src<'_>, dim: usize, dst: Dst<'_>) -> Result<()> {
        self.inner.arg_reduce(op, src, dim, dst)
    }
    fn softmax(&self, src: Src<'_>, dim: usize, log: bool, dst: Dst<'_>) -> Result<()> {
        self.inner.softmax(src, dim, log, dst)
    }
    fn matmul(&self, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.inner.matmul(lhs, rhs, dst)
    }
    fn index_select(&self, s: Src<'_>, dim: usize, i: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.inner.index_select(s, dim, i, dst)
    }
    fn gather(&self, s: Src<'_>, dim: usize, i: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.inner.gather(s, dim, i, dst)
    }
    fn index_add(&self, dst: Dst<'_>, dim: usize, i: Src<'_>, s: Src<'_>) -> Result<()> {
        self.inner.index_add(dst, dim, i, s)
    }
    fn scatter_add(&self, dst: Dst<'_>, dim: usize, i: Src<'_>, s: Src<'_>) -> Result<()> {
        self.inner.scatter_add(dst, dim, i, s)
    }
}

// ------------------------------------------------------------- the fixture

test_device!(mlp_gradients_match_numpy, |dev| {
    let m = mlp(dev)?;
    loss(&m)?.backward()?;
    assert_close(&flat_grads(&m), &want::OPTIM_GRADS, 1e-6);
    Ok(())
});

// --------------------------------------------------------------------- sgd

test_device!(sgd_steps_match_numpy, |dev| {
    // p = p - lr * g, twice
    let m = mlp(dev)?;
    let cfg = SgdConfig {
        lr: 0.1,
        ..Default::default()
    };
    let mut opt = Sgd::new(m.parameters(), cfg)?;
    train(&m, &mut opt, 2)?;
    assert_close(&flat(&m.parameters()), &want::OPTIM_SGD, 1e-6);
    Ok(())
});

test_device!(
    sgd_nesterov_momentum_with_weight_decay_matches_numpy,
    |dev| {
        // g += wd p; b = g (step 1), b = m b + g (step 2); p -= lr (g + m b)
        let m = mlp(dev)?;
        let cfg = SgdConfig {
            lr: 0.1,
            momentum: 0.9,
            weight_decay: 0.01,
            nesterov: true,
            ..Default::default()
        };
        let mut opt = Sgd::new(m.parameters(), cfg)?;
        train(&m, &mut opt, 2)?;
        assert_close(&flat(&m.parameters()), &want::OPTIM_SGD_NESTEROV, 1e-6);
        assert!(opt.momentum_buffer(0).is_some());
        Ok(())
    }
);

test_device!(sgd_momentum_with_dampening_matches_numpy, |dev| {
    // b = g (step 1, undamped), b = m b + (1 - d) g (step 2); p -= lr b
    let m = mlp(dev)?;
    let cfg = SgdConfig {
        lr: 0.1,
        momentum: 0.9,
        dampening: 0.1,
        ..Default::default()
    };
    let mut opt = Sgd::new(m.parameters(), cfg)?;
    train(&m, &mut opt, 2)?;
    assert_close(&flat(&m.parameters()), &want::OPTIM_SGD_DAMPENING, 1e-6);
    Ok(())
});

// -------------------------------------------------------------------- adam

test_device!(adam_with_l2_weight_decay_matches_numpy, |dev| {
    // g += wd p; m, v moments; p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
    let m = mlp(dev)?;
    let cfg = AdamConfig {
        lr: 0.01,
        weight_decay: 0.1,
        ..Default::default()
    };
    let mut opt = Adam::new(m.parameters(), cfg)?;
    train(&m, &mut opt, 2)?;
    assert_close(&flat(&m.parameters()), &want::OPTIM_ADAM, 1e-6);
    let (m1, v1, t) = opt.moments(0).unwrap();
    assert_eq!((m1.shape(), v1.shape(), t), (&[5, 3][..], &[5, 3][..], 2));
    Ok(())
});

test_device!(adamw_with_decoupled_weight_decay_matches_numpy, |dev| {
    // p *= 1 - lr wd, then the Adam step without the L2 term
    let m = mlp(dev)?;
    let cfg = AdamConfig {
        lr: 0.01,
        weight_decay: 0.1,
        ..Default::default()
    };
    let mut opt = AdamW::new(m.parameters(), cfg)?;
    train(&m, &mut opt, 2)?;
    assert_close(&flat(&m.parameters()), &want::OPTIM_ADAMW, 1e-6);
    Ok(())
});

// ------------------------------------------------------------------ common

test_device!(optimizers_skip_parameters_without_a_gradient, |dev| {
    let (a, b) = (leaf(&[2], 1.0, dev)?, leaf(&[2], 2.0, dev)?);
    let b_before = b.to_vec::<f32>()?;
    let mut opt = Adam::new(vec![a.clone(), b.clone()], AdamConfig::default())?;
    a.sum_all()?.backward()?;
    opt.step()?;
    assert_eq!(b.to_vec::<f32>()?, b_before);
    assert!(opt.moments(0).is_some() && opt.moments(1).is_none());
    Ok(())
});

test_device!(optimizers_reject_repeated_or_derived_parameters, |dev| {
    let w = leaf(&[2], 1.0, dev)?;
    let err = Sgd::new(vec![w.clone(), w.clone()], SgdConfig::default())
        .err()
        .unwrap();
    assert!(
        matches!(err, Error::InvalidArgument { op: "Sgd", .. }),
        "{err}"
    );
    let derived = w.mul_scalar(2.0)?;
    assert!(AdamW::new(vec![derived], AdamConfig::adamw()).is_err());
    let ints = Tensor::zeros(&[2], DType::I64, dev)?;
    assert!(matches!(
        Adam::new(vec![ints], AdamConfig::default()),
        Err(Error::UnsupportedDType { .. })
    ));
    Ok(())
});

test_device!(optimizers_reject_bad_hyperparameters, |_dev| {
    let bad_sgd = [
        SgdConfig {
            lr: -1.0,
            ..Default::default()
        },
        SgdConfig {
            momentum: f64::NAN,
            ..Default::default()
        },
        SgdConfig {
            nesterov: true,
            ..Default::default()
        },
        SgdConfig {
            nesterov: true,
            momentum: 0.9,
            dampening: 0.1,
            ..Default::default()
        },
    ];
    for cfg in bad_sgd {
        assert!(Sgd::new(vec![], cfg).is_err(), "{cfg:?}");
    }
    let bad_adam = [
        AdamConfig {
            betas: (1.0, 0.999),
            ..Default::default()
        },
        AdamConfig {
            eps: -1e-8,
            ..Default::default()
        },
        AdamConfig {
            weight_decay: f64::INFINITY,
            ..Default::default()
        },
    ];
    for cfg in bad_adam {
        assert!(
            Adam::new(vec![], cfg).is_err() && AdamW::new(vec![], cfg).is_err(),
            "{cfg:?}"
        );
    }
    Ok(())
});

test_device!(set_lr_changes_the_step_size, |dev| {
    let w = leaf(&[1], 0.0, dev)?; // 0.0 at seed 0
    let mut opt = Sgd::new(
        vec![w.clone()],
        SgdConfig {
            lr: 1.0,
            ..Default::default()
        },
    )?;
    opt.set_lr(0.25)?;
    assert_eq!(opt.lr(), 0.25);
    w.add_scalar(0.0)?.sum_all()?.backward()?; // g = 1
    opt.step()?;
    assert_eq!(w.item::<f32>()?, -0.25);
    Ok(())
});

test_device!(zero_grad_clears_every_parameter_gradient, |dev| {
    let m = mlp(dev)?;
    let opt = Sgd::new(m.parameters(), SgdConfig::default())?;
    loss(&m)?.backward()?;
    opt.zero_grad();
    assert!(opt.params().iter().all(|p| p.grad().is_none()));
    Ok(())
});

// ------------------------------------------------- Module::to and failures

test_device!(
    module_to_after_optimizer_creation_keeps_training_the_same_tensors,
    |dev| {
        // step 1 on `dev`, move the model, step 2 on the other device: the result
        // is numpy's two steps, and the momentum buffer followed the parameter
        let m = mlp(dev)?;
        let cfg = SgdConfig {
            lr: 0.1,
            momentum: 0.9,
            weight_decay: 0.01,
            nesterov: true,
            ..Default::default()
        };
        let mut opt = Sgd::new(m.parameters(), cfg)?;
        train(&m, &mut opt, 1)?;
        let other = other_cpu(false);
        m.to(&other)?;
        for (held, p) in opt.params().iter().zip(m.parameters()) {
            assert!(held.is_same(&p));
            assert_eq!(held.device().kind(), DeviceKind::Custom("other-cpu"));
            assert_eq!(
                p.grad().unwrap().device().kind(),
                DeviceKind::Custom("other-cpu")
            );
        }
        train(&m, &mut opt, 1)?;
        assert_close(&flat(&m.parameters()), &want::OPTIM_SGD_NESTEROV, 1e-6);
        assert_eq!(
            opt.momentum_buffer(0).unwrap().device().kind(),
            DeviceKind::Custom("other-cpu")
        );
        // and back: same device kind as before, same tensors
        m.to(dev)?;
        assert!(opt.params()[0].is_same(&m.l1.weight) && m.l1.weight.device().same_as(dev));
        Ok(())
    }
);

test_device!(module_to_the_same_device_keeps_every_tensor, |dev| {
    let m = mlp(dev)?;
    let mut opt = Adam::new(m.parameters(), AdamConfig::default())?;
    let storage_before = m.l1.weight.storage();
    m.to(dev)?;
    assert!(Shared::ptr_eq(&storage_before, &m.l1.weight.storage()));
    assert!(
        opt.params()
            .iter()
            .zip(m.parameters())
            .all(|(a, b)| a.is_same(&b))
    );
    let before = flat(&m.parameters());
    train(&m, &mut opt, 1)?;
    assert_ne!(flat(&m.parameters()), before);
    Ok(())
});

test_device!(a_failed_step_leaves_parameters_and_state_unchanged, |dev| {
    // parameter 0 lives on `dev`, parameter 1 on a device whose sqrt fails:
    // Adam computes parameter 0's update, then fails on parameter 1
    let a = leaf(&[3], 1.0, dev)?;
    let b = fill(&[3], 2.0, &Device::cpu())?
        .to_device(&other_cpu(true))?
        .requires_grad_(true)?;
    let mut opt = Adam::new(vec![a.clone(), b.clone()], AdamConfig::default())?;
    a.sum_all()?.backward()?;
    b.sum_all()?.backward()?;
    let (a0, b0) = (a.to_vec::<f32>()?, b.to_vec::<f32>()?);
    let (va, vb) = (a.version(), b.version());
    let err = opt.step().unwrap_err();
    assert!(
        matches!(err, Error::Unsupported { op: "sqrt", .. }),
        "{err}"
    );
    assert_eq!((a.to_vec::<f32>()?, b.to_vec::<f32>()?), (a0, b0));
    assert_eq!((a.version(), b.version()), (va, vb));
    assert!(opt.moments(0).is_none() && opt.moments(1).is_none());
    Ok(())
});

// ---------------------------------------------------------------- clipping

test_device!(clip_grad_norm_scales_to_the_max_norm, |dev| {
    let m = mlp(dev)?;
    loss(&m)?.backward()?;
    let norm = clip_grad_norm_(&m.parameters(), 0.1)?;
    assert_close64(&[norm], &want::CLIP_NORM, 1e-6);
    assert_close(&flat_grads(&m), &want::CLIP_CLIPPED, 1e-6);
    let after: f32 = flat_grads(&m).iter().map(|g| g * g).sum::<f32>().sqrt();
    assert!((after - 0.1).abs() < 1e-5, "{after}");
    Ok(())
});

test_device!(clip_grad_norm_leaves_small_gradients_alone, |dev| {
    let m = mlp(dev)?;
    loss(&m)?.backward()?;
    let norm = clip_grad_norm_(&m.parameters(), 100.0)?;
    assert_close64(&[norm], &want::CLIP_NORM, 1e-6);
    assert_close(&flat_grads(&m), &want::OPTIM_GRADS, 1e-6);
    Ok(())
});

test_device!(clip_grad_norm_skips_parameters_without_gradient, |dev| {
    let (a, b) = (leaf(&[2], 1.0, dev)?, leaf(&[2], 2.0, dev)?);
    a.mul(&Tensor::from_slice(&[3.0f32, 4.0], &[2], dev)?)?
        .sum_all()?
        .backward()?;
    assert!((clip_grad_norm_(&[a, b.clone()], 1.0)? - 5.0).abs() < 1e-6);
    assert!(b.grad().is_none());
    Ok(())
});

test_device!(clip_grad_norm_rejects_a_negative_bound, |dev| {
    let a = leaf(&[2], 1.0, dev)?;
    for bad in [-1.0, f64::NAN] {
        assert!(matches!(
            clip_grad_norm_(std::slice::from_ref(&a), bad),
            Err(Error::InvalidArgument {
                op: "clip_grad_norm_",
                ..
            })
        ));
    }
    Ok(())
});

// ---------------------------------------------------------------- schedule

test_device!(warmup_cosine_matches_its_formula, |_dev| {
    // base 1e-3, min 1e-4, 5 warm-up steps, 20 in all; steps 0, 1, 4, 5, 6, 12, 19, 20, 25
    let s = WarmupCosine::new(1e-3, 1e-4, 5, 20)?;
    let got: Vec<f64> = [0, 1, 4, 5, 6, 12, 19, 20, 25]
        .iter()
        .map(|&i| s.lr(i))
        .collect();
    assert_close64(&got, &want::SCHEDULE_LRS, 1e-15);
    Ok(())
});

test_device!(warmup_cosine_rejects_bad_arguments, |_dev| {
    assert!(WarmupCosine::new(1e-3, 1e-4, 21, 20).is_err());
    assert!(WarmupCosine::new(1e-3, 1e-2, 0, 20).is_err());
    assert!(WarmupCosine::new(f64::NAN, 0.0, 0, 20).is_err());
    let flat = WarmupCosine::new(1e-3, 1e-4, 0, 0)?;
    assert_eq!(flat.lr(0), 1e-4);
    Ok(())
});

/// Expected values, from the reference script below.
#[rustfmt::skip]
mod want {
    pub const OPTIM_GRADS: [f32; 32] = [0.000112182, 0.011702898, 0.01778956, -0.0043595135, 0.0045911213, 0.01138248, -0.0039823316, -0.0010962035, 0.002305486, -0.0017630141, -0.0073162843, -0.009428592, -0.0024373694, -0.013372235, -0.01801793, -0.039552093, -0.002671891, 0.030782463, 0.04668144, 0.051637363, -0.005037974, 0.026615668, 0.16712017, 0.15202467, 0.01676422, -0.009401211, 0.017776918, 0.18984626, 0.15940937, 0.007325349, -0.32828197, -0.34975567];
    pub const OPTIM_SGD: [f32; 32] = [0.4546016, 0.21133487, -0.13132595, -0.4082306, -0.4989304, -0.35497543, -0.040600285, 0.289653, 0.48367795, 0.45158285, 0.20776181, -0.13377286, -0.41343185, -0.49461445, -0.3431721, 0.07782021, -0.26468676, -0.48226976, -0.47220296, -0.24197432, -0.3778002, -0.50386894, -0.41819787, -0.119907096, 0.2448289, 0.47044936, 0.46833274, 0.21447054, -0.11718497, -0.38411567, -0.41829702, -0.21056007];
    pub const OPTIM_SGD_NESTEROV: [f32; 32] = [0.4524259, 0.20727687, -0.13535772, -0.40510345, -0.4976367, -0.35612363, -0.03892478, 0.28924593, 0.48137975, 0.45040002, 0.20940001, -0.1300841, -0.41091707, -0.4888856, -0.33692357, 0.08603422, -0.2635452, -0.4884511, -0.48170173, -0.2525751, -0.37587517, -0.50477266, -0.45568812, -0.15488467, 0.2423522, 0.46954772, 0.4655285, 0.16901316, -0.15331303, -0.38105434, -0.34231484, -0.1317664];
    pub const OPTIM_SGD_DAMPENING: [f32; 32] = [0.45459506, 0.21040007, -0.13274936, -0.40788543, -0.4993047, -0.35589314, -0.040296495, 0.2897193, 0.4834756, 0.45170945, 0.20832318, -0.13304074, -0.41323626, -0.49354342, -0.34172934, 0.081049405, -0.26444268, -0.48470113, -0.47594154, -0.24617074, -0.3773565, -0.50613976, -0.43172833, -0.13222697, 0.24337526, 0.47124454, 0.46675828, 0.1990899, -0.13012375, -0.38482094, -0.39158535, -0.18206276];
    pub const OPTIM_ADAM: [f32; 32] = [0.43466076, 0.19371307, -0.14734116, -0.38913774, -0.4780794, -0.33276796, -0.021541616, 0.26925093, 0.46397108, 0.43109685, 0.18613587, -0.11587982, -0.39392644, -0.47728676, -0.32677394, 0.090256974, -0.24521421, -0.45649475, -0.48196846, -0.25203598, -0.3583926, -0.47995237, -0.40636662, -0.11107885, 0.22705624, 0.44904506, 0.4504236, 0.23053776, -0.107138164, -0.3638497, -0.45946956, -0.25537226];
    pub const OPTIM_ADAMW: [f32; 32] = [0.43377295, 0.19328098, -0.14749701, -0.3883796, -0.51533103, -0.3717856, -0.021520985, 0.30777076, 0.46521008, 0.47004384, 0.22563957, -0.11560705, -0.39308295, -0.4762885, -0.32607776, 0.09039127, -0.25978523, -0.4948535, -0.4819721, -0.25181988, -0.35764956, -0.5181577, -0.40559557, -0.110884264, 0.22686455, 0.48806578, 0.4512556, 0.23004022, -0.106959276, -0.40238154, -0.45853508, -0.2548416];
    pub const CLIP_NORM: [f64; 1] = [0.5939104426641989];
    pub const CLIP_CLIPPED: [f32; 32] = [1.8888675e-05, 0.0019704786, 0.002995322, -0.0007340342, 0.0007730313, 0.0019165282, -0.0006705261, -0.00018457355, 0.00038818683, -0.00029684798, -0.0012318813, -0.0015875418, -0.0004103927, -0.0022515536, -0.003033774, -0.0066595944, -0.00044988035, 0.0051830057, 0.00786, 0.008694455, -0.0008482702, 0.0044814204, 0.028138906, 0.025597196, 0.0028226802, -0.0015829314, 0.0029931935, 0.031965416, 0.026840597, 0.0012334075, -0.055274565, -0.05889021];
    pub const SCHEDULE_LRS: [f64; 9] = [0.0002, 0.0004, 0.001, 0.001, 0.0009901664203302125, 0.0005970378084704442, 0.00010983357966978745, 0.0001, 0.0001];
}

// ------------------------------------------------------------------ reference
//
// The numpy script that produced the expected values above (run as
// `python3 optim_reference.py optim.rs.tmpl optim.rs` on a template of this
// file whose literals are `@@case.name@@` placeholders):
//
// # Reference values for tests/tests/optim.rs (numpy, float64, PyTorch's update formulas).
// # Usage: python3 optim_reference.py optim.rs.tmpl optim.rs
// # The model is a fixed 2-layer MLP: h = tanh(x W1^T + b1), y = h W2^T + b2,
// # L = mean((y - target)^2), with every array fill(shape, seed) = float32(0.5*sin(0.7*i + seed)).
// import numpy as np, math, sys, re
//
// def fill(shape, seed):
//     n = int(np.prod(shape))
//     return np.array([np.float32(0.5*math.sin(0.7*i + seed)) for i in range(n)], dtype=np.float64).reshape(shape)
//
// def lit(a):
//     def one(v):  # the shortest literal that round-trips the f32 value
//         t = str(np.float32(v))
//         return t if any(c in t for c in ".en") else t + ".0"
//     return "[" + ", ".join(one(v) for v in np.asarray(a, dtype=np.float64).ravel()) + "]"
//
// def lit64(a):
//     return "[" + ", ".join(repr(float(v)) for v in np.asarray(a, dtype=np.float64).ravel()) + "]"
//
// VALS = {}
// def out(name, a, f64=False):
//     VALS[CUR + "." + name] = (lit64(a) if f64 else lit(a), "f64" if f64 else "f32")
//
// X, T = fill([4,3], 1), fill([4,2], 6)
// def init():
//     return [fill([5,3], 2), fill([5], 3), fill([2,5], 4), fill([2], 5)]
//
// def grads(P):
//     W1, b1, W2, b2 = P
//     h = np.tanh(X@W1.T + b1); y = h@W2.T + b2
//     dy = 2*(y - T)/y.size
//     dh = dy@W2; dz = dh*(1 - h**2)
//     return [dz.T@X, dz.sum(0), dy.T@h, dy.sum(0)]
//
// def flat(P): return np.concatenate([p.ravel() for p in P])
//
// def sgd(steps, lr, momentum=0.0, dampening=0.0, wd=0.0, nesterov=False):
//     P = init(); B = [None]*4
//     for _ in range(steps):
//         G = grads(P)
//         for i in range(4):
//             g = G[i] + wd*P[i]
//             if momentum != 0:
//                 B[i] = g.copy() if B[i] is None else momentum*B[i] + (1 - dampening)*g
//                 g = g + momentum*B[i] if nesterov else B[i]
//             P[i] = P[i] - lr*g
//     return flat(P)
//
// def adam(steps, lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.0, decoupled=False):
//     P = init(); M = [np.zeros_like(p) for p in P]; V = [np.zeros_like(p) for p in P]
//     for t in range(1, steps + 1):
//         G = grads(P)
//         for i in range(4):
//             g = G[i]
//             if decoupled: P[i] = P[i]*(1 - lr*wd)
//             elif wd: g = g + wd*P[i]
//             M[i] = b1*M[i] + (1 - b1)*g; V[i] = b2*V[i] + (1 - b2)*g*g
//             denom = np.sqrt(V[i])/math.sqrt(1 - b2**t) + eps
//             P[i] = P[i] - lr/(1 - b1**t)*M[i]/denom
//     return flat(P)
//
// def case_optim():
//     out("grads", flat(grads(init())))
//     out("sgd", sgd(2, 0.1))
//     out("sgd nesterov", sgd(2, 0.1, momentum=0.9, wd=0.01, nesterov=True))
//     out("sgd dampening", sgd(2, 0.1, momentum=0.9, dampening=0.1))
//     out("adam", adam(2, 0.01, wd=0.1))
//     out("adamw", adam(2, 0.01, wd=0.1, decoupled=True))
//
// def case_clip():
//     G = grads(init()); norm = math.sqrt(sum((g**2).sum() for g in G))
//     coef = 0.1/(norm + 1e-6)
//     out("norm", [norm], f64=True); out("clipped", flat([g*coef for g in G]))
//
// def case_schedule():
//     base, lo, warm, total = 1e-3, 1e-4, 5, 20
//     def lr(s):
//         if s < warm: return base*(s + 1)/warm
//         p = min(1.0, (s - warm)/(total - warm))
//         return lo + 0.5*(base - lo)*(1 + math.cos(math.pi*p))
//     out("lrs", [lr(s) for s in [0, 1, 4, 5, 6, 12, 19, 20, 25]], f64=True)
//
// # Fill the test template: every @@case.name@@ becomes want::CASE_NAME, a const
// # in a `want` module appended to the file.
// for CUR in ["optim", "clip", "schedule"]:
//     globals()["case_" + CUR]()
// t = open(sys.argv[1]).read()
// used = []
// def const(m):
//     key = m.group(1)
//     name = re.sub(r"[^A-Za-z0-9]+", "_", key).upper()
//     if name not in [u[0] for u in used]:
//         used.append((name, VALS[key]))
//     return "want::" + name
// t = re.sub(r"@@([^@]+)@@", const, t)
// mod = ["", "/// Expected values, from the reference script below.", "#[rustfmt::skip]", "mod want {"]
// for name, (v, ty) in used:
//     mod.append("    pub const %s: [%s; %d] = %s;" % (name, ty, v.count(",") + 1, v))
// mod.append("}")
// open(sys.argv[2], "w").write(t + "\n".join(mod) + "\n")

/// NOTE [One-pass Adam]: the `adam` family's update (the reference kernel
/// on `Device::cpu()`, the chunked one on the threaded device) equals the
/// composed update of a device without the family bit for bit, for Adam
/// and AdamW with and without weight decay, over several steps, for a
/// contiguous parameter and a transposed view (a strided parameter); and
/// it runs there (a trace of the step records it).
#[test]
fn the_one_pass_adam_update_equals_the_composed_one_bit_for_bit() -> Result<()> {
    use kael_core::backend::Family;
    use kael_core::cpu::{dtypes, ops};
    const WITHOUT: u128 = ops::ALL & !Family::Adam.bits();
    let composing = Device::from_backend(Shared::new(
        CpuBackend::<{ dtypes::ALL }, WITHOUT>::with_allocator(Shared::new(GlobalAllocator::new())),
    ));
    let threaded = kael_host::cpu_threaded::Builder::new()
        .threads(2)
        .parallel_threshold(1)
        .build()?;
    let run = |dev: &Device, decoupled: bool, wd: f64| -> Result<Vec<Vec<u32>>> {
        let a = leaf(&[37, 23], 0.3, dev)?;
        // A transposed view of a contiguous [23, 37], as a leaf.
        let b = fill(&[23, 37], 1.1, dev)?.t()?.requires_grad_(true)?;
        let params = vec![a.clone(), b.clone()];
        let cfg = AdamConfig {
            lr: 0.05,
            weight_decay: wd,
            ..AdamConfig::default()
        };
        let mut opt: Box<dyn Optimizer> = if decoupled {
            Box::new(AdamW::new(params.clone(), cfg)?)
        } else {
            Box::new(Adam::new(params.clone(), cfg)?)
        };
        // Gradients every device computes exactly alike (c_k + 2p), so
        // that only the update can differ.
        for k in 0..4 {
            opt.zero_grad();
            let c = fill(&[37, 23], k as f64, dev)?;
            let l = a.mul(&c)?.sum_all()?.add(&a.sqr()?.sum_all()?)?;
            l.add(&b.mul(&c)?.sum_all()?)?
                .add(&b.sqr()?.sum_all()?)?
                .backward()?;
            opt.step()?;
        }
        params
            .iter()
            .map(|p| Ok(p.to_vec::<f32>()?.iter().map(|v| v.to_bits()).collect()))
            .collect()
    };
    for (decoupled, wd) in [(false, 0.0), (false, 0.1), (true, 0.0), (true, 0.01)] {
        let want = run(&composing, decoupled, wd)?;
        for dev in [Device::cpu(), threaded.clone()] {
            assert_eq!(
                run(&dev, decoupled, wd)?,
                want,
                "decoupled {decoupled}, weight decay {wd}, {:?}",
                dev.kind()
            );
        }
    }
    // The step runs the family (one call per parameter).
    let tracer = kael_core::plan::Tracer::new(kael_core::plan::Accumulation::F64);
    let tdev = tracer.device();
    let w = leaf(&[4, 3], 0.2, &tdev)?;
    w.sum_all()?.backward()?;
    let mut opt = AdamW::new(vec![w], AdamConfig::adamw())?;
    let (_, rec) = tracer.record(|| opt.step())?;
    assert_eq!(rec.kernel_names().filter(|&k| k == "adam").count(), 1);
    Ok(())
}
