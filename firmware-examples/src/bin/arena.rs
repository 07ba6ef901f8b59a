//! All tensor memory from one fixed static arena.
//!
//! The device draws every tensor buffer from an `ArenaAllocator` over a
//! static byte array; the global heap holds only metadata (tensor handles,
//! autograd nodes, `Vec`s). The example
//! 1. runs the flash MLP (weights stay in flash; activations in the arena)
//!    and a backward pass (gradients in the arena too), checking outputs;
//! 2. fills the arena until an allocation fails, and handles the
//!    `Error::OutOfMemory` (no panic, no abort);
//! 3. shows that an op whose output does not fit returns an error, and that
//!    the arena is fully usable again once the tensors are dropped.
//!
//! It prints the arena and heap peaks.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};
use cortex_m_rt::entry;
use cortex_m_semihosting::hprintln;
use kael_core::allocator::ArenaAllocator;
use kael_core::shared::Shared;
use kael_core::{DType, Device, Error, Tensor};
use kael_firmware_examples::{Fx, Mlp, TOLERANCE, compare, exit, heap, stack};

#[cfg(not(kael_m0))]
const ARENA_SIZE: usize = 8 * 1024;
#[cfg(kael_m0)]
const ARENA_SIZE: usize = 2 * 1024;
/// Most live tensor buffers at once (the arena's inline block table).
const MAX_BLOCKS: usize = 32;

/// The arena's memory, handed out once.
fn arena_memory() -> Option<&'static mut [u8]> {
    // 16-byte aligned like every tensor buffer, so no byte is lost to padding.
    #[repr(C, align(16))]
    struct Memory([u8; ARENA_SIZE]);
    static mut ARENA: Memory = Memory([0; ARENA_SIZE]);
    static TAKEN: AtomicBool = AtomicBool::new(false);
    if TAKEN.load(Ordering::Relaxed) {
        return None;
    }
    TAKEN.store(true, Ordering::Relaxed);
    // SAFETY: TAKEN makes this the only reference ever made to ARENA
    // (single-threaded firmware; no interrupt handler calls this).
    Some(unsafe { &mut (*core::ptr::addr_of_mut!(ARENA)).0 })
}

fn run() -> Result<bool, Error> {
    let buf = arena_memory().ok_or(Error::InvalidArgument {
        op: "arena_memory",
        reason: "the arena was already taken",
    })?;
    let dev = Device::cpu_with_allocator(Shared::new(ArenaAllocator::<MAX_BLOCKS>::new(buf)));
    let arena = dev.allocator();
    heap::reset_peak();
    hprintln!(
        "arena: {} B static arena, at most {} live buffers",
        ARENA_SIZE,
        MAX_BLOCKS
    );

    // 1. Inference and a backward pass, all tensor memory in the arena.
    let mlp = Mlp::from_flash(&dev)?;
    let got = mlp.forward(&mlp.x)?.to_vec::<f32>()?;
    let (max_diff, infer_ok) = compare(&got, &mlp.expected.to_vec::<f32>()?, TOLERANCE);
    let x = mlp.x.deep_clone()?.requires_grad_(true)?;
    mlp.forward(&x)?.sum_all()?.backward()?;
    let grad_ok = x.grad().is_some_and(|g| g.shape() == x.shape());
    let s = arena.stats();
    hprintln!(
        "1. inference from flash weights: max |diff| {} {}; backward {}; arena in use {} B, peak {} B",
        Fx(max_diff),
        if infer_ok { "ok" } else { "MISMATCH" },
        if grad_ok { "ok" } else { "FAILED" },
        s.in_use,
        s.peak
    );
    drop(x);

    // 2. Fill the arena with 1 KiB tensors until it refuses.
    let mut held: Vec<Tensor> = Vec::new();
    let refusal = loop {
        match Tensor::zeros(&[256], DType::F32, &dev) {
            Ok(t) => held.push(t),
            Err(e) => break e,
        }
        if held.len() > ARENA_SIZE / 1024 + 1 {
            hprintln!("2. the arena never refused an allocation");
            return Ok(false);
        }
    };
    let oom_ok = matches!(refusal, Error::OutOfMemory { .. });
    hprintln!(
        "2. after {} x 1 KiB tensors the arena refused: \"{}\" {}",
        held.len(),
        refusal,
        if oom_ok {
            "(handled)"
        } else {
            "(unexpected error)"
        }
    );

    // 3. An op whose output cannot fit fails cleanly, its inputs intact.
    let a = held.first().ok_or(Error::InvalidArgument {
        op: "arena",
        reason: "no tensor fitted in the arena; make ARENA_SIZE larger",
    })?;
    a.fill_(1.5)?;
    let op_err = a.unsqueeze(1)?.matmul(&a.unsqueeze(0)?); // [256, 256] f32 = 256 KiB
    let intact = a.to_vec::<f32>().is_ok_and(|v| v.iter().all(|&e| e == 1.5));
    hprintln!(
        "3. outer product 256x256 in a full arena: {}; input intact: {}",
        match &op_err {
            Ok(_) => "succeeded?!",
            Err(Error::OutOfMemory { .. }) => "OutOfMemory (handled)",
            Err(_) => "unexpected error",
        },
        intact
    );
    let op_ok = matches!(op_err, Err(Error::OutOfMemory { .. })) && intact;
    drop(held);
    let after = arena.stats();
    let reuse = Tensor::zeros(&[ARENA_SIZE / 4 - 64], DType::F32, &dev).is_ok();
    hprintln!(
        "   after dropping them: {} B in use; a {} B tensor fits again: {}",
        after.in_use,
        ARENA_SIZE - 256,
        reuse
    );

    let s = arena.stats();
    hprintln!(
        "arena peak {} B of {} B, {} allocations, {} refused; heap peak {} B (metadata only)",
        s.peak,
        ARENA_SIZE,
        s.allocations,
        s.failures,
        heap::peak()
    );
    Ok(infer_ok && grad_ok && oom_ok && op_ok && after.in_use == 0 && reuse)
}

#[entry]
fn main() -> ! {
    stack::paint();
    heap::init();
    match run() {
        Ok(true) => {
            hprintln!("arena: PASS");
            exit(true)
        }
        Ok(false) => {
            hprintln!("arena: FAIL");
            exit(false)
        }
        Err(e) => {
            hprintln!("arena: FAIL: {}", e);
            exit(false)
        }
    }
}
