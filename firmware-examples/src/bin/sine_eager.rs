//! The sine MLP of `sine_plan` (1-16-16-1, f32) run eagerly, op by op, on
//! a kael device built for exactly its kernels: the baseline for the cost
//! of the eager path per op (scripts/firmware.sh counts instructions per
//! inference here, in `sine_plan` and in `sine_loops`, in the same run).
//!
//! The device is `CpuBackend<F32 only, MATMUL | ADD | RELU | COPY, f32
//! sums>`, the weights are tensors made once from the same bits as the
//! plan's, and each inference makes its input tensor and runs the eight
//! ops (three matmuls, three bias adds, two ReLUs) under `no_grad`. It
//! exits 0 only if all 16 outputs equal the host's eager outputs bit for
//! bit.
//!
//! `extra=N` on QEMU's command line runs N more inferences.
#![no_std]
#![no_main]

extern crate alloc;

use cortex_m_rt::entry;
use kael_core::allocator::GlobalAllocator;
use kael_core::cpu::{CpuBackend, dtypes, ops};
use kael_core::shared::Shared;
use kael_core::{Device, Error, Tensor, no_grad};
use kael_firmware_examples::plan_data::{floats, io};
use kael_firmware_examples::say::{self, Part::Int, Part::Text};
use kael_firmware_examples::{exit, extra_runs, heap, stack};

/// The kernels the model uses: nothing else is linked.
const OPS: u128 = ops::COPY | ops::MATMUL | ops::ADD | ops::RELU;

struct Sine {
    layers: [(Tensor, Tensor); 3],
}

impl Sine {
    fn new(dev: &Device) -> Result<Self, Error> {
        // `io` holds `[out, in]` weights (PyTorch's Linear); the forward
        // multiplies by their transpose, as `Linear` does.
        let layer = |w: &[f32], b: &[f32], o: usize, i: usize| -> Result<(Tensor, Tensor), Error> {
            Ok((
                Tensor::from_slice(w, &[o, i], dev)?.t()?,
                Tensor::from_slice(b, &[o], dev)?,
            ))
        };
        Ok(Self {
            layers: [
                layer(&floats(&io::W1), &floats(&io::B1), 16, 1)?,
                layer(&floats(&io::W2), &floats(&io::B2), 16, 16)?,
                layer(&floats(&io::W3), &floats(&io::B3), 1, 16)?,
            ],
        })
    }

    fn infer(&self, dev: &Device, x: f32) -> Result<f32, Error> {
        no_grad(|| {
            let [(w1, b1), (w2, b2), (w3, b3)] = &self.layers;
            let h = Tensor::from_slice(&[x], &[1, 1], dev)?;
            let h = h.matmul(w1)?.add(b1)?.relu()?;
            let h = h.matmul(w2)?.add(b2)?.relu()?;
            h.matmul(w3)?.add(b3)?.item::<f32>()
        })
    }
}

fn run() -> Result<usize, Error> {
    let dev = Device::from_backend(Shared::new(
        CpuBackend::<{ dtypes::F32 }, OPS, true>::with_allocator(Shared::new(
            GlobalAllocator::new(),
        )),
    ));
    let model = Sine::new(&dev)?;
    let mut same = 0;
    for (x, w) in floats(&io::INFER_INPUTS).into_iter().zip(io::INFER_OUTPUTS) {
        if model.infer(&dev, x)?.to_bits() == w {
            same += 1;
        }
    }
    for _ in 0..extra_runs() {
        model.infer(&dev, 1.0)?;
    }
    say::line(&[
        Text("sine_eager: heap peak "),
        Int(heap::peak()),
        Text(" B"),
    ]);
    Ok(same)
}

#[entry]
fn main() -> ! {
    stack::paint();
    heap::init_cached();
    let total = io::INFER_INPUTS.len();
    match run() {
        Ok(n) if n == total => {
            say::line(&[Text(
                "sine_eager: PASS (16 outputs equal the host's eager outputs bit for bit)",
            )]);
            exit(true)
        }
        Ok(n) => {
            say::line(&[
                Text("sine_eager: FAIL ("),
                Int(n),
                Text(" of 16 outputs equal the host's)"),
            ]);
            exit(false)
        }
        Err(e) => {
            say::line(&[
                Text("sine_eager: FAIL: an error in "),
                Text(e.op().unwrap_or("kael")),
            ]);
            exit(false)
        }
    }
}
