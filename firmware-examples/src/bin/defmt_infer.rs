//! `mlp_infer` with defmt logging (kael-core's `defmt` feature): log frames
//! go over semihosting (defmt-semihosting) and are decoded on the host by
//! defmt-print (`qemu-run.sh` pipes them through it when it is installed).
//! kael's `Error` is logged with its `defmt::Format` impl; floats are
//! formatted on the host, so none of core's float formatting is in flash.
//!
//! Build: `cargo build --release --features defmt --bin defmt_infer`.
#![no_std]
#![no_main]

extern crate alloc;

use cortex_m_rt::entry;
use defmt_semihosting as _;
use kael_core::{Device, Error};
use kael_firmware_examples::{Mlp, TOLERANCE, compare, exit, heap, stack};

fn run() -> Result<bool, Error> {
    let dev = Device::cpu();
    let mlp = Mlp::from_flash(&dev)?;
    let want = mlp.expected.to_vec::<f32>()?;
    let got = mlp.forward(&mlp.x)?.to_vec::<f32>()?;
    let (max_diff, ok) = compare(&got, &want, TOLERANCE);
    let n_out = mlp.expected.shape()[1];
    defmt::info!(
        "defmt_infer: {}x{} outputs, max |firmware - host| = {}",
        mlp.expected.shape()[0],
        n_out,
        max_diff
    );
    defmt::info!("first sample: {}", &got[..n_out]);
    let stats = dev.allocator().stats();
    defmt::info!("tensor memory {}; heap peak {} B", stats, heap::peak());
    // A refused op, logged through kael's defmt::Format for Error.
    if let Err(e) = mlp.w1.matmul(&mlp.w1) {
        defmt::info!("expected refusal: {}", e);
    }
    Ok(ok)
}

#[entry]
fn main() -> ! {
    stack::paint();
    heap::init();
    match run() {
        Ok(true) => {
            defmt::info!("defmt_infer: PASS");
            exit(true)
        }
        Ok(false) => {
            defmt::error!("defmt_infer: FAIL (outputs differ from the host values)");
            exit(false)
        }
        Err(e) => {
            defmt::error!("defmt_infer: FAIL: {}", e);
            exit(false)
        }
    }
}
