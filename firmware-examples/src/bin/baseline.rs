//! The size baseline: the same runtime as the examples (cortex-m-rt, the
//! semihosting output and exit, the heap, the panic handler) and no kael.
//! `mlp_infer` minus `baseline` is what kael and the model add.
#![no_std]
#![no_main]

extern crate alloc;

use cortex_m_rt::entry;
use cortex_m_semihosting::hprintln;
use kael_firmware_examples::{Fx, exit, heap, stack};

#[entry]
fn main() -> ! {
    stack::paint();
    heap::init();
    let v: alloc::vec::Vec<f32> = (0..4).map(|i| i as f32 * 0.25).collect();
    hprintln!(
        "baseline: {} {} heap peak {} B",
        v.len(),
        Fx(v[3]),
        heap::peak()
    );
    exit(v.len() == 4)
}
