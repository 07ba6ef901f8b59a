//! `mlp_infer` on a reference CPU backend that links only what the model
//! needs (NOTE [Kernel selection] in kael-core's `cpu::select`): f32 only,
//! the op families and unary/binary ops of an MLP forward pass
//! (`ops::MLP_INFERENCE`), and f32 accumulation for softmax (no soft-float
//! f64 on the M4F's single-precision FPU; NOTE [f32 accumulation]).
//!
//! Same model, inputs and checks as `mlp_infer`. The outputs match the host
//! values within the 1e-5 tolerance, not bit for bit: the host computes
//! softmax in f64, this backend in f32. The example also asks for a cast
//! to f64 and for `exp`, which this backend leaves out, and exits 0 only if
//! both are refused with an error (no panic).
#![no_std]
#![no_main]

extern crate alloc;

use cortex_m_rt::entry;
use cortex_m_semihosting::hprintln;
use kael_core::allocator::GlobalAllocator;
use kael_core::cpu::{CpuBackend, dtypes, ops};
use kael_core::shared::Shared;
use kael_core::{DType, Device, Error, Tensor};
use kael_firmware_examples::{exit, heap, infer, stack};

/// f32 only, the ops of an MLP forward pass, f32 softmax.
type InferBackend = CpuBackend<{ dtypes::F32 }, { ops::MLP_INFERENCE }, true>;

/// Whether the backend refuses what it was built without.
fn refuses_the_rest(dev: &Device) -> bool {
    let (f64_refused, exp_refused) = match Tensor::zeros(&[2], DType::F32, dev) {
        Ok(t) => (
            matches!(
                t.to_dtype(DType::F64),
                Err(Error::UnsupportedDType {
                    dtype: DType::F64,
                    ..
                })
            ),
            matches!(t.exp(), Err(Error::Unsupported { op: "exp", .. })),
        ),
        Err(_) => (false, false),
    };
    hprintln!(
        "to_dtype(F64): {}; exp: {}",
        if f64_refused {
            "refused"
        } else {
            "NOT REFUSED"
        },
        if exp_refused {
            "refused"
        } else {
            "NOT REFUSED"
        }
    );
    f64_refused && exp_refused
}

#[entry]
fn main() -> ! {
    stack::paint();
    heap::init();
    let dev = Device::from_backend(Shared::new(InferBackend::with_allocator(Shared::new(
        GlobalAllocator::new(),
    ))));
    match infer::run("mlp_infer_small", &dev) {
        Ok(true) if refuses_the_rest(&dev) => {
            hprintln!("mlp_infer_small: PASS");
            exit(true)
        }
        Ok(true) => {
            hprintln!("mlp_infer_small: FAIL (a left-out dtype or op was not refused)");
            exit(false)
        }
        Ok(false) => {
            hprintln!("mlp_infer_small: FAIL (outputs differ from the host values)");
            exit(false)
        }
        Err(e) => {
            hprintln!("mlp_infer_small: FAIL: {}", e);
            exit(false)
        }
    }
}
