//! On-device training: a 2-8-1 MLP learns XOR with kael's autograd and plain
//! SGD, printing the loss every epoch, until the loss is below a threshold.
//!
//! kael-core's `nn` and `optim` modules are not written yet, so the layers
//! are spelled out with tensor ops and the SGD step is done here by hand,
//! under `no_grad`: `p.sub_(&p.grad().mul_scalar(lr))`.
//!
//! The device is the reference CPU backend built for f32 only, with every
//! op but the image families (`CpuBackend<{ dtypes::F32 }, { ops::ALL &
//! !ops::IMAGE }>`: no convolution, pooling or batch-norm kernels, which an
//! MLP does not call; f64 accumulation as on the host): the same results
//! as `Device::cpu()`, in about half the flash, so that training fits the
//! micro:bit's 256 KiB too (NOTE [Kernel selection] in kael-core's
//! `cpu::select`).
#![no_std]
#![no_main]

extern crate alloc;

use cortex_m_rt::entry;
use cortex_m_semihosting::hprintln;
use kael_core::allocator::GlobalAllocator;
use kael_core::cpu::{CpuBackend, dtypes, ops};
use kael_core::shared::Shared;
use kael_core::{DType, Device, Error, Rng, Tensor, no_grad};
use kael_firmware_examples::{Fx, exit, heap, stack};

const HIDDEN: usize = 8;
const LR: f64 = 2.0;
/// Mean squared error to reach.
const TARGET_LOSS: f32 = 0.01;
const MAX_EPOCHS: usize = 400;

fn run() -> Result<bool, Error> {
    let backend = CpuBackend::<{ dtypes::F32 }, { ops::ALL & !ops::IMAGE }>::with_allocator(
        Shared::new(GlobalAllocator::new()),
    );
    let dev = Device::from_backend(Shared::new(backend));
    let mut rng = Rng::new(7);
    let x = Tensor::from_slice(&[0.0f32, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0], &[4, 2], &dev)?;
    let y = Tensor::from_slice(&[0.0f32, 1.0, 1.0, 0.0], &[4, 1], &dev)?;
    let w1 = Tensor::randn(&[2, HIDDEN], DType::F32, &dev, &mut rng)?.requires_grad_(true)?;
    let b1 = Tensor::zeros(&[HIDDEN], DType::F32, &dev)?.requires_grad_(true)?;
    let w2 = Tensor::randn(&[HIDDEN, 1], DType::F32, &dev, &mut rng)?
        .mul_scalar(0.5)?
        .requires_grad_(true)?;
    let b2 = Tensor::zeros(&[1], DType::F32, &dev)?.requires_grad_(true)?;
    let params = [&w1, &b1, &w2, &b2];
    hprintln!(
        "mlp_train: XOR, 2-{}-1 MLP (tanh, sigmoid), MSE, SGD lr={}, until loss < {}",
        HIDDEN,
        Fx(LR as f32),
        Fx(TARGET_LOSS)
    );

    for epoch in 1..=MAX_EPOCHS {
        let pred = x
            .matmul(&w1)?
            .add(&b1)?
            .tanh()?
            .matmul(&w2)?
            .add(&b2)?
            .sigmoid()?;
        let d = pred.sub(&y)?;
        let loss = d.mul(&d)?.mean_all()?;
        let l: f32 = loss.item()?;
        hprintln!("epoch {} loss {}", epoch, Fx(l));
        if l.is_nan() {
            hprintln!("loss is NaN");
            return Ok(false);
        }
        if l < TARGET_LOSS {
            let p = pred.to_vec::<f32>()?;
            hprintln!(
                "converged after {} epochs: predictions {} {} {} {} for targets 0 1 1 0",
                epoch,
                Fx(p[0]),
                Fx(p[1]),
                Fx(p[2]),
                Fx(p[3])
            );
            let correct = p[0] < 0.5 && p[1] > 0.5 && p[2] > 0.5 && p[3] < 0.5;
            let stats = dev.allocator().stats();
            hprintln!(
                "tensor memory peak {} B in {} allocations; heap peak {} B",
                stats.peak,
                stats.allocations,
                heap::peak()
            );
            return Ok(correct);
        }
        for p in params {
            p.zero_grad();
        }
        loss.backward()?;
        // The optimizer step: in-place updates of leaves need no_grad.
        no_grad(|| -> Result<(), Error> {
            for p in params {
                let g = p.grad().ok_or(Error::Autograd {
                    op: "sgd",
                    reason: "a parameter received no gradient; check that it is used in the loss",
                })?;
                p.sub_(&g.mul_scalar(LR)?)?;
            }
            Ok(())
        })?;
    }
    hprintln!("no convergence in {} epochs", MAX_EPOCHS);
    Ok(false)
}

#[entry]
fn main() -> ! {
    stack::paint();
    heap::init();
    match run() {
        Ok(true) => {
            hprintln!("mlp_train: PASS");
            exit(true)
        }
        Ok(false) => {
            hprintln!("mlp_train: FAIL");
            exit(false)
        }
        Err(e) => {
            hprintln!("mlp_train: FAIL: {}", e);
            exit(false)
        }
    }
}
