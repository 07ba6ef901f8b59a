//! Sizing a tensor arena for a firmware model, on the host
//! (docs/firmware-guide.md, "Sizing an arena").
//!
//! The arena's accounting is the same code on the host as on the device,
//! so the figures carry over when the dtypes and the program are the same.
//! Two numbers matter:
//! - the **peak** of bytes in use (`stats().peak`, after `reset_peak()` to
//!   measure one phase alone): a lower bound;
//! - the **smallest arena that works**, found here by bisection, which is
//!   larger when freed blocks leave gaps (fragmentation); size the firmware
//!   arena from this one, plus a margin.
//!
//! Also printed: the most blocks live at once, which `MAX_BLOCKS` (the
//! arena's block table, 8 bytes per entry on a 32-bit MCU) must cover.
//!
//! Run: `cargo run -p kael-tests --example arena_sizing`.
use kael_core::allocator::{Allocator, ArenaAllocator, GlobalAllocator};
use kael_core::nn::{Linear, Module, Reduction, Relu, Sequential, mse_loss};
use kael_core::optim::{Optimizer, Sgd, SgdConfig};
use kael_core::shared::Shared;
use kael_core::{DType, Device, Error, Result, Rng, Tensor};

/// The program to size: one SGD training step of a 4-16-16-2 MLP on a
/// batch of 8, after an inference pass.
fn program(dev: &Device) -> Result<()> {
    let mut rng = Rng::new(0);
    let model = Sequential::new()
        .push(Linear::new(4, 16, true, dev, &mut rng)?)
        .push(Relu)
        .push(Linear::new(16, 16, true, dev, &mut rng)?)
        .push(Relu)
        .push(Linear::new(16, 2, true, dev, &mut rng)?);
    let mut opt = Sgd::new(
        model.parameters(),
        SgdConfig {
            lr: 0.01,
            ..Default::default()
        },
    )?;
    let x = Tensor::randn(&[8, 4], DType::F32, dev, &mut rng)?;
    let y = Tensor::randn(&[8, 2], DType::F32, dev, &mut rng)?;
    kael_core::no_grad(|| model.forward(&x))?;
    let loss = mse_loss(&model.forward(&x)?, &y, Reduction::Mean)?;
    loss.backward()?;
    opt.step()
}

/// Runs `program` in an arena of `bytes` with a 256-entry block table;
/// `Ok(peak)` when it fits.
fn try_in(bytes: usize) -> Result<usize> {
    let buf: &'static mut [u8] = Box::leak(vec![0u8; bytes].into_boxed_slice());
    let arena = Shared::new(ArenaAllocator::<256>::new(buf));
    let dev = Device::cpu_with_allocator(arena.clone());
    program(&dev)?;
    Ok(arena.stats().peak)
}

/// The most blocks live at once: the arena's peak block count, measured by
/// shrinking the block table until the program no longer fits.
fn blocks_needed() -> usize {
    fn fits<const N: usize>() -> bool {
        let buf: &'static mut [u8] = Box::leak(vec![0u8; 1 << 20].into_boxed_slice());
        let dev = Device::cpu_with_allocator(Shared::new(ArenaAllocator::<N>::new(buf)));
        program(&dev).is_ok()
    }
    let candidates: [(usize, fn() -> bool); 8] = [
        (8, fits::<8>),
        (12, fits::<12>),
        (16, fits::<16>),
        (24, fits::<24>),
        (32, fits::<32>),
        (48, fits::<48>),
        (64, fits::<64>),
        (128, fits::<128>),
    ];
    candidates
        .iter()
        .find(|(_, f)| f())
        .map_or(usize::MAX, |(n, _)| *n)
}

fn main() -> Result<()> {
    // 1. The peak of bytes in use, with the global allocator (no limit).
    let global = Shared::new(GlobalAllocator::new());
    program(&Device::cpu_with_allocator(global.clone()))?;
    let peak = global.stats().peak;
    // 2. The smallest arena that runs it: between the peak and 4x the peak.
    let (mut lo, mut hi) = (peak, peak.saturating_mul(4).max(256));
    if try_in(hi).is_err() {
        return Err(Error::InvalidArgument {
            op: "arena_sizing",
            reason: "the program does not fit in 4x its peak; raise the bound",
        });
    }
    while hi - lo > 16 {
        let mid = lo + (hi - lo) / 2;
        if try_in(mid).is_ok() {
            hi = mid
        } else {
            lo = mid
        }
    }
    let blocks = blocks_needed();
    println!("peak bytes in use:        {peak}");
    println!(
        "smallest arena that works: {hi} bytes ({:.2}x the peak)",
        hi as f64 / peak as f64
    );
    println!("block table:               MAX_BLOCKS >= {blocks} (first size tried that fits)");
    assert!(hi >= peak, "an arena smaller than the peak cannot work");
    Ok(())
}
