//! The suite's cases as plans (NOTE [Slice-level kernels]): each check's
//! op is recorded on a [`Tracer`], built into a [`Plan`] and replayed, and
//! the replay's bits must equal the eager tracing device's. A case a plan
//! cannot express (an output of a dtype a plan does not carry, an op
//! computed on the host, ...) is counted under its reason instead.

use super::report::Failure;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::plan::{Bind, Binding, Plan, Tracer};
use crate::tensor::Tensor;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// Why a case is not a plan: Plan::build's reason (or op).
fn reason(e: &Error) -> &'static str {
    match e {
        Error::Unsupported { op, .. } => op,
        Error::InvalidArgument { reason, .. } => reason,
        Error::UnsupportedDType { supported, .. } => supported,
        _ => "other",
    }
}

/// An output as a plan binds it: its own f32 storage (a copy, or a cast
/// of an integer or bool result).
fn bindable(t: Tensor) -> Result<Tensor> {
    match t.dtype() {
        DType::F32 => t.deep_clone(),
        DType::Bool | DType::U8 | DType::I64 | DType::I32 => t.to_dtype(DType::F32),
        _ => Err(Error::Unsupported {
            op: "an output dtype plans do not carry",
            device: crate::plan::TRACE_KIND,
        }),
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// What one planned case came to.
pub(super) enum Outcome {
    /// Replayed with the eager bits.
    Passed,
    /// Not expressible as a plan, and why.
    NotPlanned(&'static str),
    /// Replayed with other bits, or failed where eager succeeded.
    Failed(String),
}

/// Records `f` on `tracer` over `inputs` (on its device), plans it with
/// the f32 inputs bound as state and every output bound, replays it from
/// the inputs' initial values and compares every output and input bit for
/// bit with the eager run.
pub(super) fn run_case(
    tracer: &Tracer,
    inputs: &[Tensor],
    f: impl Fn(&[Tensor]) -> Result<Vec<Tensor>>,
) -> Outcome {
    match try_case(tracer, inputs, f) {
        Ok(o) => o,
        Err(e) => Outcome::Failed(alloc::format!("{e}")),
    }
}

fn try_case(
    tracer: &Tracer,
    inputs: &[Tensor],
    f: impl Fn(&[Tensor]) -> Result<Vec<Tensor>>,
) -> Result<Outcome> {
    // Each storage is bound once (two inputs may share one).
    let mut f32_in: Vec<&Tensor> = Vec::new();
    for t in inputs.iter().filter(|t| t.dtype() == DType::F32) {
        if !f32_in.iter().any(|u| u.shares_storage(t)) {
            f32_in.push(t);
        }
    }
    let initial: Vec<Vec<f32>> = f32_in
        .iter()
        .map(|t| t.to_vec::<f32>())
        .collect::<Result<_>>()?;
    let recorded = tracer.record(|| {
        f(inputs)?
            .into_iter()
            .map(bindable)
            .collect::<Result<Vec<_>>>()
    });
    let (outs, rec) = match recorded {
        Ok(x) => x,
        Err(e @ Error::Unsupported { .. }) => return Ok(Outcome::NotPlanned(reason(&e))),
        Err(e) => return Err(e),
    };
    // Bound: the f32 inputs the recording used (an unused or empty one
    // cannot be bound; it stays a constant, or nothing).
    let used = |t: &Tensor| {
        let addr = t.storage().as_ptr().addr();
        t.numel() > 0 && rec.buffers.iter().any(|b| !b.created && b.addr == addr)
    };
    let (initial, f32_in): (Vec<Vec<f32>>, Vec<&Tensor>) = initial
        .into_iter()
        .zip(f32_in)
        .filter(|(_, t)| used(t))
        .unzip();
    let in_names: Vec<String> = (0..f32_in.len()).map(|i| alloc::format!("in{i}")).collect();
    // Empty outputs hold no bits to compare (and no kernel makes them);
    // an output made on another device (a flag the case computed on the
    // host) is no part of the plan.
    let outs: Vec<Tensor> = outs
        .into_iter()
        .filter(|t| t.numel() > 0 && t.device().kind() == crate::plan::TRACE_KIND)
        .collect();
    let out_names: Vec<String> = (0..outs.len()).map(|i| alloc::format!("out{i}")).collect();
    let binds: Vec<Binding<'_>> = in_names
        .iter()
        .zip(&f32_in)
        .map(|(n, t)| Binding::state(n, t))
        .chain(
            out_names
                .iter()
                .zip(&outs)
                .map(|(n, t)| Binding::output(n, t)),
        )
        .collect();
    let plan = match Plan::build(&rec, &binds) {
        Ok(p) => p,
        // Bindings are f32: a written integer or bool input cannot be one.
        Err(Error::InvalidArgument { reason, .. })
            if reason.contains("not bound") && inputs.iter().any(|t| t.dtype() != DType::F32) =>
        {
            return Ok(Outcome::NotPlanned(
                "a written input of a dtype bindings do not carry (bindings are f32)",
            ));
        }
        Err(e) => return Ok(Outcome::NotPlanned(reason(&e))),
    };
    let mut state = initial;
    let mut got: Vec<Vec<f32>> = outs.iter().map(|t| vec![0.0; t.numel()]).collect();
    let mut arena = vec![0u128; plan.arena_bytes().div_ceil(16)];
    let mut binds: Vec<Bind<'_>> = Vec::new();
    for (n, s) in in_names.iter().zip(state.iter_mut()) {
        binds.push(Bind::state(n, s));
    }
    for (n, g) in out_names.iter().zip(got.iter_mut()) {
        binds.push(Bind::output(n, g));
    }
    plan.run(bytemuck::cast_slice_mut(&mut arena), &mut binds)?;
    for (i, (g, t)) in got.iter().zip(&outs).enumerate() {
        if bits(g) != bits(&t.to_vec::<f32>()?) {
            return Ok(Outcome::Failed(alloc::format!(
                "output {i}: the replay's bits differ from the eager run's"
            )));
        }
    }
    for (i, (s, t)) in state.iter().zip(&f32_in).enumerate() {
        if bits(s) != bits(&t.to_vec::<f32>()?) {
            return Ok(Outcome::Failed(alloc::format!(
                "input {i} after the op: the replay's bits differ from the eager run's"
            )));
        }
    }
    Ok(Outcome::Passed)
}

/// A failure record for a planned case.
pub(super) fn failure(
    op: &'static str,
    family: super::Family,
    case: String,
    detail: String,
) -> Failure {
    Failure {
        op,
        family,
        case,
        max_abs_err: f64::NAN,
        detail,
    }
}
