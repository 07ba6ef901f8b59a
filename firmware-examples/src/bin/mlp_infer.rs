//! Inference with a small MLP whose weights stay in flash.
//!
//! `data/mlp_infer.bin` (weights, test inputs and the outputs kael computes
//! for them on the host; see `tests/tests/firmware_reference.rs`) is
//! `include_bytes!`-ed into flash and wrapped as external, read-only tensor
//! storage: the weights are never copied to RAM. The example runs the batch,
//! then each sample alone, and exits 0 only if every output matches the host
//! values.
#![no_std]
#![no_main]

extern crate alloc;

use cortex_m_rt::entry;
use cortex_m_semihosting::hprintln;
use kael_core::Device;
use kael_firmware_examples::{exit, heap, infer, stack};

#[entry]
fn main() -> ! {
    stack::paint();
    heap::init();
    match infer::run("mlp_infer", &Device::cpu()) {
        Ok(true) => {
            hprintln!("mlp_infer: PASS");
            exit(true)
        }
        Ok(false) => {
            hprintln!("mlp_infer: FAIL (outputs differ from the host values)");
            exit(false)
        }
        Err(e) => {
            hprintln!("mlp_infer: FAIL: {}", e);
            exit(false)
        }
    }
}
