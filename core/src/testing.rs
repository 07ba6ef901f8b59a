//! Test support shipped with the core: finite-difference gradient checks.
//!
//! Kernel and op authors use [`gradcheck`] to verify a backward rule
//! against central differences in f64.

use crate::autograd::{BackwardOptions, grad, no_grad};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::rng::Rng;
use crate::tensor::Tensor;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

/// Tolerances and step of [`gradcheck`].
#[derive(Debug, Clone, Copy)]
pub struct GradcheckOptions {
    /// Central-difference step.
    pub eps: f64,
    /// Absolute tolerance.
    pub atol: f64,
    /// Relative tolerance.
    pub rtol: f64,
    /// Seed of the random output projection.
    pub seed: u64,
}

impl Default for GradcheckOptions {
    fn default() -> Self {
        Self {
            eps: 1e-6,
            atol: 1e-5,
            rtol: 1e-4,
            seed: 0x5eed,
        }
    }
}

/// The worst disagreement [`gradcheck`] found, when it fails.
#[derive(Debug, Clone, PartialEq)]
pub struct GradcheckFailure {
    /// Which input.
    pub input: usize,
    /// Which element of it (row-major).
    pub element: usize,
    /// Backward's value.
    pub analytic: f64,
    /// Central differences' value.
    pub numeric: f64,
}

impl core::fmt::Display for GradcheckFailure {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "gradient mismatch at input {} element {}: analytic {} vs numeric {}",
            self.input, self.element, self.analytic, self.numeric
        )
    }
}

/// Checks the gradients of `f` at `inputs` (f64 tensors) against central
/// differences.
///
/// The output is projected onto fixed random weights `w` (so one backward
/// checks every output element): `L = sum(f(x) * w)`; for every input
/// element, `dL/dx` from backward must match `(L(x+eps) - L(x-eps)) / 2eps`
/// within `atol + rtol * |numeric|`. Inputs are made leaves that require
/// grad; build non-contiguous or broadcast operands inside `f`.
///
/// # Errors
/// Errors from `f` or backward; non-f64 inputs. A mismatch is reported as
/// `Ok(Err(failure))` so tests can print it.
///
/// ```
/// use kael_core::testing::{gradcheck, GradcheckOptions};
/// use kael_core::{Device, Tensor};
/// let x = Tensor::from_slice(&[0.5f64, -1.0, 2.0, 0.1, 0.3, 0.7], &[2, 3], &Device::cpu())?;
/// let r = gradcheck(|v| v[0].t()?.tanh()?.mul(&v[0].t()?), &[x], GradcheckOptions::default())?;
/// assert!(r.is_ok(), "{:?}", r);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn gradcheck(
    f: impl Fn(&[Tensor]) -> Result<Tensor>,
    inputs: &[Tensor],
    opts: GradcheckOptions,
) -> Result<core::result::Result<(), GradcheckFailure>> {
    for t in inputs {
        if t.dtype() != DType::F64 {
            return Err(Error::DTypeMismatch {
                op: "gradcheck",
                expected: DType::F64,
                got: t.dtype(),
            });
        }
    }
    let leaves: Vec<Tensor> = inputs
        .iter()
        .map(|t| no_grad(|| t.deep_clone())?.requires_grad_(true))
        .collect::<Result<_>>()?;
    let out = f(&leaves)?;
    let mut rng = Rng::new(opts.seed);
    let w: Vec<f64> = (0..out.numel())
        .map(|_| rng.uniform() * 2.0 - 1.0)
        .collect();
    let w = Tensor::from_slice(&w, out.shape(), &out.device())?;
    let loss = out.mul(&w)?.sum_all()?;
    let refs: Vec<&Tensor> = leaves.iter().collect();
    // An input the function ignores has gradient zero, not an error.
    let unused_ok = BackwardOptions {
        allow_unused: true,
        ..Default::default()
    };
    let grads = grad(&[&loss], &refs, &[], unused_ok)?;

    let project =
        |xs: &[Tensor]| -> Result<f64> { no_grad(|| f(xs)?.mul(&w)?.sum_all()?.item::<f64>()) };
    let mut worst: Option<(f64, GradcheckFailure)> = None;
    for (i, leaf) in leaves.iter().enumerate() {
        let analytic = match &grads[i] {
            Some(g) => g.to_vec::<f64>()?,
            None => alloc::vec![0.0; leaf.numel()],
        };
        let base = leaf.to_vec::<f64>()?;
        for k in 0..base.len() {
            let eval = |delta: f64| -> Result<f64> {
                let mut v = base.clone();
                v[k] += delta;
                let mut xs: Vec<Tensor> = leaves
                    .iter()
                    .map(|l| no_grad(|| l.detach()))
                    .collect::<Result<_>>()?;
                xs[i] = Tensor::from_slice(&v, leaf.shape(), &leaf.device())?;
                project(&xs)
            };
            let numeric = (eval(opts.eps)? - eval(-opts.eps)?) / (2.0 * opts.eps);
            let err = (analytic[k] - numeric).abs();
            let allowed = opts.atol + opts.rtol * numeric.abs();
            if err.is_nan() || err > allowed {
                let excess = if err.is_nan() {
                    f64::INFINITY
                } else {
                    err - allowed
                };
                if worst.as_ref().is_none_or(|(e, _)| excess > *e) {
                    worst = Some((
                        excess,
                        GradcheckFailure {
                            input: i,
                            element: k,
                            analytic: analytic[k],
                            numeric,
                        },
                    ));
                }
            }
        }
    }
    Ok(match worst {
        Some((_, f)) => Err(f),
        None => Ok(()),
    })
}

/// Formats a gradcheck result for an assertion message.
pub fn describe(r: &core::result::Result<(), GradcheckFailure>) -> String {
    match r {
        Ok(()) => String::from("ok"),
        Err(f) => format!("{f}"),
    }
}
