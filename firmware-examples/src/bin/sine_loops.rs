//! The baseline for the planned sine MLP: the same model (1-16-16-1, f32)
//! written as plain Rust loops, no kael, no heap: inference, and one SGD
//! training step (batch 16, MSE) with a hand-derived backward.
//!
//! Inference sums each dot product from zero in order and adds the bias
//! after, as kael's matmul and add do, so its 16 outputs must equal the
//! host's eager outputs bit for bit. Training sums the loss and the bias
//! gradients plainly (kael's firmware reductions are Kahan-compensated),
//! so its 4 losses must agree within 1e-5 relative.
//!
//! `extra=N` runs N more inferences and `steps=N` N more training steps,
//! for exact instruction counts of each (scripts/firmware.sh).
#![no_std]
#![no_main]
// Index loops, as a firmware author writes a matrix product by hand.
#![allow(clippy::needless_range_loop)]

use cortex_m_rt::entry;
use kael_firmware_examples::plan_data::{floats, io};
use kael_firmware_examples::say::{self, Part::Int, Part::Text};
use kael_firmware_examples::{arg, exit, extra_runs, stack};

const H: usize = 16;
const BATCH: usize = 16;
const LR: f32 = 0.05;

/// Weights as PyTorch stores them: `w` is `[out, in]`.
struct Mlp {
    w1: [f32; H],
    b1: [f32; H],
    w2: [f32; H * H],
    b2: [f32; H],
    w3: [f32; H],
    b3: f32,
}

impl Mlp {
    fn infer(&self, x: f32) -> f32 {
        let mut h1 = [0.0f32; H];
        for j in 0..H {
            h1[j] = relu((0.0 + x * self.w1[j]) + self.b1[j]);
        }
        let mut h2 = [0.0f32; H];
        for j in 0..H {
            let mut t = 0.0f32;
            for k in 0..H {
                t += h1[k] * self.w2[j * H + k];
            }
            h2[j] = relu(t + self.b2[j]);
        }
        let mut t = 0.0f32;
        for k in 0..H {
            t += h2[k] * self.w3[k];
        }
        t + self.b3
    }

    /// One SGD step on a batch; the loss before the update.
    fn train(&mut self, x: &[f32], t: &[f32]) -> f32 {
        let mut h1 = [[0.0f32; H]; BATCH];
        let mut h2 = [[0.0f32; H]; BATCH];
        let mut dy = [0.0f32; BATCH];
        let mut loss = 0.0f32;
        for n in 0..BATCH {
            for j in 0..H {
                h1[n][j] = relu(x[n] * self.w1[j] + self.b1[j]);
            }
            for j in 0..H {
                let mut s = 0.0f32;
                for k in 0..H {
                    s += h1[n][k] * self.w2[j * H + k];
                }
                h2[n][j] = relu(s + self.b2[j]);
            }
            let mut y = 0.0f32;
            for k in 0..H {
                y += h2[n][k] * self.w3[k];
            }
            let e = y + self.b3 - t[n];
            loss += e * e;
            dy[n] = 2.0 * e / BATCH as f32;
        }
        // Backward: gradients of the pre-activations, then of the weights.
        let mut g3 = [0.0f32; H];
        let mut gb3 = 0.0f32;
        let mut dz2 = [[0.0f32; H]; BATCH];
        for n in 0..BATCH {
            gb3 += dy[n];
            for k in 0..H {
                g3[k] += dy[n] * h2[n][k];
                dz2[n][k] = if h2[n][k] > 0.0 {
                    dy[n] * self.w3[k]
                } else {
                    0.0
                };
            }
        }
        let mut g2 = [0.0f32; H * H];
        let mut gb2 = [0.0f32; H];
        let mut g1 = [0.0f32; H];
        let mut gb1 = [0.0f32; H];
        for n in 0..BATCH {
            for j in 0..H {
                gb2[j] += dz2[n][j];
                for k in 0..H {
                    g2[j * H + k] += dz2[n][j] * h1[n][k];
                }
            }
            for k in 0..H {
                if h1[n][k] > 0.0 {
                    let mut s = 0.0f32;
                    for j in 0..H {
                        s += dz2[n][j] * self.w2[j * H + k];
                    }
                    g1[k] += s * x[n];
                    gb1[k] += s;
                }
            }
        }
        sgd(&mut self.w1, &g1);
        sgd(&mut self.b1, &gb1);
        sgd(&mut self.w2, &g2);
        sgd(&mut self.b2, &gb2);
        sgd(&mut self.w3, &g3);
        self.b3 -= LR * gb3;
        loss / BATCH as f32
    }
}

fn relu(v: f32) -> f32 {
    if v > 0.0 { v } else { 0.0 }
}

fn sgd(w: &mut [f32], g: &[f32]) {
    for (w, g) in w.iter_mut().zip(g) {
        *w -= LR * g;
    }
}

#[entry]
fn main() -> ! {
    stack::paint();
    let m = Mlp {
        w1: floats(&io::W1),
        b1: floats(&io::B1),
        w2: floats(&io::W2),
        b2: floats(&io::B2),
        w3: floats(&io::W3),
        b3: f32::from_bits(io::B3[0]),
    };
    let mut same = 0;
    for (x, want) in floats(&io::INFER_INPUTS).into_iter().zip(io::INFER_OUTPUTS) {
        if core::hint::black_box(&m).infer(x).to_bits() == want {
            same += 1;
        }
    }
    for _ in 0..extra_runs() {
        core::hint::black_box(core::hint::black_box(&m).infer(core::hint::black_box(1.0)));
    }
    let mut t = Mlp {
        w1: floats(&io::T_W1),
        b1: floats(&io::T_B1),
        w2: floats(&io::T_W2),
        b2: floats(&io::T_B2),
        w3: floats(&io::T_W3),
        b3: f32::from_bits(io::T_B3[0]),
    };
    let (xs, ts) = (floats(&io::TRAIN_X), floats(&io::TRAIN_T));
    let mut close = 0;
    for (i, want) in floats(&io::TRAIN_LOSSES).into_iter().enumerate() {
        let b = i * BATCH..(i + 1) * BATCH;
        let loss = core::hint::black_box(&mut t).train(&xs[b.clone()], &ts[b]);
        if (loss - want).abs() <= 1e-5 * want.abs() {
            close += 1;
        }
    }
    for _ in 0..arg(b"steps=") {
        core::hint::black_box(core::hint::black_box(&mut t).train(&xs[..BATCH], &ts[..BATCH]));
    }
    let ok = same == 16 && close == 4;
    say::line(&[
        Text(if ok {
            "sine_loops: PASS ("
        } else {
            "sine_loops: FAIL ("
        }),
        Int(same),
        Text(" of 16 outputs equal kael's bit for bit; "),
        Int(close),
        Text(" of 4 training losses within 1e-5; heap peak 0 B (no heap))"),
    ]);
    exit(ok)
}
