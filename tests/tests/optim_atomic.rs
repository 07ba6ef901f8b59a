//! An optimizer step is all-or-nothing: when it is refused because of one
//! parameter, no parameter and no optimizer state (momentum buffers, Adam
//! moments, step counts) has changed, whatever the refused parameter's
//! position in the list.
//!
//! Each test builds three parameters with the bad one at position 0, 1 and
//! 2 in turn, takes one good step (the bad parameter has no gradient yet,
//! so it is skipped) so that the others have state, gives every parameter a
//! gradient, and checks that the refused step changed nothing, byte for
//! byte, for SGD (with and without momentum), Adam and AdamW.

mod common;

use common::snapshot;
use kael_core::allocator::ArenaAllocator;
use kael_core::optim::{Adam, AdamConfig, AdamW, Optimizer, Sgd, SgdConfig};
use kael_core::shared::Shared;
use kael_core::{DType, Device, Error, Layout, Result, Storage, Tensor};

type Snap = (Vec<usize>, Vec<usize>, usize, usize, Vec<u8>);

/// The four optimizers under test, with access to their state.
enum Opt {
    Sgd(Sgd),
    Adam(Adam),
    AdamW(AdamW),
}

const KINDS: [&str; 4] = ["sgd", "sgd_momentum", "adam", "adamw"];

impl Opt {
    fn new(kind: &str, params: Vec<Tensor>) -> Result<Self> {
        Ok(match kind {
            "sgd" => Opt::Sgd(Sgd::new(
                params,
                SgdConfig {
                    lr: 0.1,
                    weight_decay: 0.01,
                    ..Default::default()
                },
            )?),
            "sgd_momentum" => Opt::Sgd(Sgd::new(
                params,
                SgdConfig {
                    lr: 0.1,
                    momentum: 0.9,
                    ..Default::default()
                },
            )?),
            "adam" => Opt::Adam(Adam::new(params, AdamConfig::default())?),
            _ => Opt::AdamW(AdamW::new(params, AdamConfig::adamw())?),
        })
    }

    fn opt(&mut self) -> &mut dyn Optimizer {
        match self {
            Opt::Sgd(o) => o,
            Opt::Adam(o) => o,
            Opt::AdamW(o) => o,
        }
    }

    /// Every state tensor's bytes and every step count, per parameter.
    fn state(&self, n: usize) -> Vec<Vec<(Snap, u64)>> {
        (0..n)
            .map(|i| match self {
                Opt::Sgd(o) => o
                    .momentum_buffer(i)
                    .map(|b| vec![(snapshot(b), 0)])
                    .unwrap_or_default(),
                Opt::Adam(o) => moments(o.moments(i)),
                Opt::AdamW(o) => moments(o.moments(i)),
            })
            .collect()
    }
}

fn moments(m: Option<(&Tensor, &Tensor, u64)>) -> Vec<(Snap, u64)> {
    m.map(|(m, v, t)| vec![(snapshot(m), t), (snapshot(v), t)])
        .unwrap_or_default()
}

fn good(dev: &Device, seed: f32) -> Result<Tensor> {
    Tensor::from_slice(&[seed, -seed, 0.5 * seed, 2.0], &[4], dev)?.requires_grad_(true)
}

fn backward(params: &[Tensor]) -> Result<()> {
    for p in params {
        p.sqr()?.sum_all()?.backward()?;
    }
    Ok(())
}

/// For every optimizer and every position of the bad parameter `bad(dev)`:
/// the step is refused with `check(&err)` true, and changes nothing.
fn refused_step_changes_nothing(
    dev: &Device,
    bad: fn(&Device) -> Result<Tensor>,
    check: fn(&Error) -> bool,
) -> Result<()> {
    for kind in KINDS {
        for pos in (0..3).rev() {
            let mut params = vec![good(dev, 1.0)?, good(dev, 2.0)?];
            params.insert(pos, bad(dev)?);
            let good_params: Vec<Tensor> = (0..3)
                .filter(|&i| i != pos)
                .map(|i| params[i].clone())
                .collect();
            let mut opt = Opt::new(kind, params.clone())?;
            backward(&good_params)?;
            opt.opt().step()?; // state for the good parameters
            backward(&params)?;
            let before: Vec<Snap> = params.iter().map(snapshot).collect();
            let state = opt.state(3);
            let err = match opt.opt().step() {
                Err(e) => e,
                Ok(()) => panic!("{kind}, bad parameter at {pos}: the step was accepted"),
            };
            let after: Vec<Snap> = params.iter().map(snapshot).collect();
            assert!(
                before == after,
                "{kind}, bad parameter at {pos}: a parameter changed ({err})"
            );
            assert!(
                opt.state(3) == state,
                "{kind}, bad parameter at {pos}: the optimizer state changed ({err})"
            );
            assert!(check(&err), "{kind}, bad parameter at {pos}: {err}");
        }
    }
    Ok(())
}

fn names_the_step(e: &Error) -> bool {
    e.to_string().contains("::step")
}

/// A leaf made by `expand`: several positions share one element.
fn expanded(dev: &Device) -> Result<Tensor> {
    Tensor::ones(&[1], DType::F32, dev)?
        .expand(&[4])?
        .requires_grad_(true)
}

test_device!(an_expanded_parameter_refuses_the_whole_step, |dev| {
    refused_step_changes_nothing(dev, expanded, names_the_step)
});

#[repr(align(16))]
struct Aligned([u8; 16]);
impl AsRef<[u8]> for Aligned {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// A parameter over external, read-only bytes (as a memory map gives).
fn read_only(dev: &Device) -> Result<Tensor> {
    let bytes: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
        .iter()
        .flat_map(|x| x.to_ne_bytes())
        .collect();
    let storage = Storage::from_owner(Aligned(bytes.try_into().unwrap()), dev)?;
    Tensor::from_storage(Shared::new(storage), Layout::contiguous(&[4])?, DType::F32)?
        .requires_grad_(true)
}

test_device!(a_read_only_parameter_refuses_the_whole_step, |dev| {
    if !dev.is_host_memory() {
        return Ok(()); // external bytes are host memory
    }
    refused_step_changes_nothing(dev, read_only, names_the_step)
});

/// A parameter whose bytes are borrowed (a read guard the caller holds
/// across the step; leaked here so that it outlives the step).
fn borrowed(dev: &Device) -> Result<Tensor> {
    let p = good(dev, 3.0)?;
    let storage: &'static Shared<Storage> = Box::leak(Box::new(p.storage()));
    std::mem::forget(storage.read("test")?);
    Ok(p)
}

test_device!(a_borrowed_parameter_refuses_the_whole_step, |dev| {
    if !dev.is_host_memory() {
        return Ok(()); // guards are for host bytes
    }
    refused_step_changes_nothing(dev, borrowed, |e| {
        matches!(e, Error::BorrowConflict { .. }) && names_the_step(e)
    })
});

// ------------------------------------------------------------ out of memory

/// An arena device of 64 KiB with room for 4096 live blocks.
fn arena() -> Device {
    let buf: &'static mut [u8] = Box::leak(vec![0u8; 64 * 1024].into_boxed_slice());
    Device::cpu_with_allocator(Shared::new(ArenaAllocator::<4096>::new(buf)))
}

#[test]
fn an_arena_out_of_memory_mid_step_changes_nothing() {
    // Parameters of 4 elements and one of 1024; after backward, the arena
    // is filled with 16-byte tensors and 64 of them are freed again:
    // 1 KiB free, scattered, enough for every temporary of the small
    // parameters but not for one of the big parameter's (4 KiB), so the
    // step runs out of memory at the big parameter's position. SGD's
    // steps allocate at every step (the refused one is the second); Adam
    // and AdamW update in place (NOTE [One-pass Adam]) and allocate only
    // their moments, at the first step (the refused one), and a later step
    // goes through with no memory free at all.
    for kind in KINDS {
        let in_place = kind.starts_with("adam");
        for pos in 0..3 {
            let dev = arena();
            let mut params = vec![good(&dev, 1.0).unwrap(), good(&dev, 2.0).unwrap()];
            let big = Tensor::ones(&[1024], DType::F32, &dev)
                .unwrap()
                .requires_grad_(true)
                .unwrap();
            params.insert(pos, big);
            let mut opt = Opt::new(kind, params.clone()).unwrap();
            if !in_place {
                backward(&params).unwrap();
                opt.opt().step().unwrap(); // state for every parameter
            }
            backward(&params).unwrap();
            let mut ballast = Vec::new();
            while let Ok(t) = Tensor::zeros(&[4], DType::F32, &dev) {
                ballast.push(t);
            }
            ballast.truncate(ballast.len() - 64);
            let before: Vec<Snap> = params.iter().map(snapshot).collect();
            let state = opt.state(3);
            let err = opt.opt().step().unwrap_err();
            assert!(
                matches!(err, Error::OutOfMemory { .. }),
                "{kind}, big parameter at {pos}: {err}"
            );
            let after: Vec<Snap> = params.iter().map(snapshot).collect();
            assert!(before == after, "{kind}, at {pos}: a parameter changed");
            assert!(opt.state(3) == state, "{kind}, at {pos}: the state changed");
            drop(ballast);
            opt.opt().step().unwrap(); // with memory back, the step goes through
            if in_place {
                let mut full = Vec::new();
                while let Ok(t) = Tensor::zeros(&[1], DType::F32, &dev) {
                    full.push(t);
                }
                let before: Vec<Snap> = params.iter().map(snapshot).collect();
                opt.opt().step().unwrap(); // no memory needed
                let after: Vec<Snap> = params.iter().map(snapshot).collect();
                assert!(
                    before != after,
                    "{kind}, at {pos}: the step changed nothing"
                );
            }
        }
    }
}
