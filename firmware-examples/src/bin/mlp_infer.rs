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
use kael_core::{Device, Error};
use kael_firmware_examples::{Fx, Mlp, TOLERANCE, compare, exit, heap};

fn run() -> Result<bool, Error> {
    let dev = Device::cpu();
    let mlp = Mlp::from_flash(&dev)?;
    let (n, n_in) = (mlp.x.shape()[0], mlp.x.shape()[1]);
    let n_out = mlp.expected.shape()[1];
    hprintln!(
        "mlp_infer: {}-{}-{} MLP, weights in flash at {:#010x}, {} samples, kael-core {} mode",
        n_in,
        mlp.w1.shape()[1],
        n_out,
        mlp.w1.storage().as_ptr() as usize,
        n,
        if cfg!(feature = "sync") {
            "sync (Arc)"
        } else {
            "Rc"
        },
    );
    let want = mlp.expected.to_vec::<f32>()?;

    // The whole batch at once.
    let got = mlp.forward(&mlp.x)?.to_vec::<f32>()?;
    let (max_diff, batch_ok) = compare(&got, &want, TOLERANCE);
    let exact = got
        .iter()
        .zip(&want)
        .all(|(g, w)| g.to_bits() == w.to_bits());
    hprintln!(
        "batch: max |firmware - host| = {} ({})",
        Fx(max_diff),
        if exact {
            "bit-identical"
        } else if batch_ok {
            "within tolerance"
        } else {
            "OUT OF TOLERANCE"
        }
    );

    // One sample at a time (a [1, in] view of the flash inputs).
    let mut all_ok = batch_ok;
    for i in 0..n {
        let p = mlp.forward(&mlp.x.narrow(0, i, 1)?)?.to_vec::<f32>()?;
        let w = &want[i * n_out..(i + 1) * n_out];
        let (_, ok) = compare(&p, w, TOLERANCE);
        all_ok &= ok;
        let class = (0..n_out).fold(0, |best, j| if p[j] > p[best] { j } else { best });
        hprintln!(
            "  sample {}: class {} p={} host p={} {}",
            i,
            class,
            Fx(p[class]),
            Fx(w[class]),
            if ok { "ok" } else { "MISMATCH" }
        );
    }
    let stats = dev.allocator().stats();
    hprintln!(
        "tensor memory peak {} B in {} allocations; heap peak {} B",
        stats.peak,
        stats.allocations,
        heap::peak()
    );
    Ok(all_ok)
}

#[entry]
fn main() -> ! {
    heap::init();
    match run() {
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
