//! The model file of the `mlp_infer` firmware example
//! (`firmware-examples/data/mlp_infer.bin`): its weights, test inputs and the
//! outputs the firmware must reproduce on the microcontroller.
//!
//! The firmware compares its outputs with the `expected` section of the file;
//! these tests make sure that section is what kael computes on the host for
//! the file's weights and inputs, and that kael's host result agrees with an
//! independent plain-f64 implementation of the same MLP. So if the file, the
//! firmware's model or kael's kernels drift apart, either this test or the
//! firmware run under QEMU fails.
//!
//! Regenerate the file (after changing the generator below):
//! `KAEL_BLESS=1 cargo test -p kael-tests --test firmware_reference`.
//!
//! File layout (little-endian; mirrored by `firmware-examples/src/lib.rs`):
//! 32-byte header `KAELMLP1`, `u32` in, hidden, out, samples, 8 zero bytes;
//! then six f32 sections, each padded to a multiple of 16 bytes:
//! `w1 [in, hidden]`, `b1 [hidden]`, `w2 [hidden, out]`, `b2 [out]`,
//! `x [samples, in]`, `expected [samples, out]`, where
//! `expected = softmax(relu(x @ w1 + b1) @ w2 + b2, dim 1)`.

mod common;

use common::{assert_close, assert_close64};
use kael_core::{Device, Result, Tensor};
use std::path::PathBuf;

const MAGIC: &[u8; 8] = b"KAELMLP1";
const HEADER: usize = 32;
const N_IN: usize = 8;
const N_HIDDEN: usize = 16;
const N_OUT: usize = 4;
const N_SAMPLES: usize = 6;

/// The model file's contents, as f32 arrays.
#[derive(Debug, Clone, PartialEq)]
struct Model {
    dims: [usize; 4],
    w1: Vec<f32>,
    b1: Vec<f32>,
    w2: Vec<f32>,
    b2: Vec<f32>,
    x: Vec<f32>,
    expected: Vec<f32>,
}

fn path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../firmware-examples/data/mlp_infer.bin")
}

/// xorshift64*: a fixed generator, so that the file does not change when
/// kael's own Rng does.
struct XorShift(u64);

impl XorShift {
    /// Uniform in [-1, 1).
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let v = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        ((v >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next() * scale).collect()
    }
}

/// Weights and inputs from the fixed generator, `expected` from kael.
fn generate() -> Result<Model> {
    let mut m = generate_inputs();
    m.expected = kael_forward(&m)?;
    Ok(m)
}

/// Weights and inputs from the fixed generator; `expected` left empty.
fn generate_inputs() -> Model {
    let mut g = XorShift(0x6b61_656c_2d66_7731); // "kael-fw1"
    let s1 = 2.0 / (N_IN as f32).sqrt();
    let s2 = 2.0 / (N_HIDDEN as f32).sqrt();
    Model {
        dims: [N_IN, N_HIDDEN, N_OUT, N_SAMPLES],
        w1: g.vec(N_IN * N_HIDDEN, s1),
        b1: g.vec(N_HIDDEN, 0.1),
        w2: g.vec(N_HIDDEN * N_OUT, s2),
        b2: g.vec(N_OUT, 0.1),
        x: g.vec(N_SAMPLES * N_IN, 1.0),
        expected: Vec::new(),
    }
}

/// The firmware's forward pass (`Mlp::forward`), with kael on the host.
fn kael_forward(m: &Model) -> Result<Vec<f32>> {
    let [n_in, n_hid, n_out, n] = m.dims;
    let dev = Device::cpu();
    let w1 = Tensor::from_slice(&m.w1, &[n_in, n_hid], &dev)?;
    let b1 = Tensor::from_slice(&m.b1, &[n_hid], &dev)?;
    let w2 = Tensor::from_slice(&m.w2, &[n_hid, n_out], &dev)?;
    let b2 = Tensor::from_slice(&m.b2, &[n_out], &dev)?;
    let x = Tensor::from_slice(&m.x, &[n, n_in], &dev)?;
    x.matmul(&w1)?
        .add(&b1)?
        .relu()?
        .matmul(&w2)?
        .add(&b2)?
        .softmax(1)?
        .to_vec::<f32>()
}

/// The same MLP in plain f64 loops: the independent reference.
fn naive_forward(m: &Model) -> Vec<f64> {
    let [n_in, n_hid, n_out, n] = m.dims;
    let mut out = Vec::with_capacity(n * n_out);
    for s in 0..n {
        let x = &m.x[s * n_in..(s + 1) * n_in];
        let h: Vec<f64> = (0..n_hid)
            .map(|j| {
                let z = m.b1[j] as f64
                    + (0..n_in)
                        .map(|i| x[i] as f64 * m.w1[i * n_hid + j] as f64)
                        .sum::<f64>();
                z.max(0.0)
            })
            .collect();
        let logits: Vec<f64> = (0..n_out)
            .map(|k| {
                m.b2[k] as f64
                    + (0..n_hid)
                        .map(|j| h[j] * m.w2[j * n_out + k] as f64)
                        .sum::<f64>()
            })
            .collect();
        let mx = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = logits.iter().map(|l| (l - mx).exp()).collect();
        let z: f64 = e.iter().sum();
        out.extend(e.iter().map(|v| v / z));
    }
    out
}

fn encode(m: &Model) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(MAGIC);
    for d in m.dims {
        b.extend_from_slice(&(d as u32).to_le_bytes());
    }
    b.resize(HEADER, 0);
    for sec in [&m.w1, &m.b1, &m.w2, &m.b2, &m.x, &m.expected] {
        for v in sec.iter() {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.resize(b.len().div_ceil(16) * 16, 0);
    }
    b
}

fn decode(b: &[u8]) -> Model {
    assert_eq!(
        &b[..8],
        MAGIC,
        "{} is not a KAELMLP1 file",
        path().display()
    );
    let u = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
    let dims = [u(8), u(12), u(16), u(20)];
    let [n_in, n_hid, n_out, n] = dims;
    let mut at = HEADER;
    let mut sec = |len: usize| {
        let v: Vec<f32> = b[at..at + 4 * len]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        at += (4 * len).div_ceil(16) * 16;
        v
    };
    let m = Model {
        dims,
        w1: sec(n_in * n_hid),
        b1: sec(n_hid),
        w2: sec(n_hid * n_out),
        b2: sec(n_out),
        x: sec(n * n_in),
        expected: sec(n * n_out),
    };
    assert_eq!(at, b.len(), "trailing bytes in {}", path().display());
    m
}

/// The committed file; with `KAEL_BLESS=1`, first rewritten from the generator.
fn committed() -> Vec<u8> {
    // Once per process: the tests run in parallel and read the same file.
    static BLESS: std::sync::Once = std::sync::Once::new();
    BLESS.call_once(|| {
        if std::env::var_os("KAEL_BLESS").is_some() {
            let bytes = encode(&generate().unwrap());
            std::fs::write(path(), &bytes).unwrap();
        }
    });
    std::fs::read(path()).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; create it with KAEL_BLESS=1 cargo test -p kael-tests --test firmware_reference",
            path().display()
        )
    })
}

#[test]
fn firmware_expected_outputs_are_what_kael_computes_on_the_host() {
    let m = decode(&committed());
    let host = kael_forward(&m).unwrap();
    // Same kernels, same IEEE f32 operations: bit-identical in practice; the
    // firmware itself allows 1e-5 (absolute + relative). On a failure the
    // file is stale: regenerate it with
    // KAEL_BLESS=1 cargo test -p kael-tests --test firmware_reference
    assert_close(&m.expected, &host, 1e-6);
}

#[test]
fn host_kael_agrees_with_a_plain_f64_reference() {
    let m = decode(&committed());
    let want = naive_forward(&m);
    let got = kael_forward(&m).unwrap();
    let got: Vec<f64> = got.iter().map(|&v| v as f64).collect();
    assert_close64(&got, &want, 1e-6);
    // A non-degenerate model: probabilities sum to 1, and not every sample
    // picks the same class.
    let [_, _, n_out, n] = m.dims;
    let classes: Vec<usize> = (0..n)
        .map(|s| {
            let p = &want[s * n_out..(s + 1) * n_out];
            assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
            (0..n_out).fold(0, |b, k| if p[k] > p[b] { k } else { b })
        })
        .collect();
    assert!(classes.iter().any(|&c| c != classes[0]), "{classes:?}");
}

#[test]
fn model_file_weights_and_inputs_are_what_the_generator_makes() {
    // Bit for bit; `expected` is checked against kael (with a tolerance) by
    // the first test.
    let mut file = decode(&committed());
    file.expected.clear();
    assert!(
        file == generate_inputs(),
        "the weights or inputs in {} differ from the generator's; regenerate the file with \
         KAEL_BLESS=1 cargo test -p kael-tests --test firmware_reference",
        path().display(),
    );
}
