//! The body of the inference examples (`mlp_infer`, `mlp_infer_small`):
//! the flash MLP on every test input, as a batch and one sample at a time,
//! checked against the host values.

use crate::{Fx, Mlp, TOLERANCE, compare, heap};
use cortex_m_semihosting::hprintln;
use kael_core::{Device, Error};

/// Runs the flash MLP on `dev` and reports whether every output matches
/// the host values (within [`TOLERANCE`]); `name` labels the output.
///
/// # Errors
/// Any kael error from building or running the model.
pub fn run(name: &str, dev: &Device) -> Result<bool, Error> {
    let mlp = Mlp::from_flash(dev)?;
    let (n, n_in) = (mlp.x.shape()[0], mlp.x.shape()[1]);
    let n_out = mlp.expected.shape()[1];
    hprintln!(
        "{}: {}-{}-{} MLP, weights in flash at {:#010x}, {} samples, kael-core {} mode",
        name,
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
