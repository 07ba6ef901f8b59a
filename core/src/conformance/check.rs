//! The checker: runs one op on the reference and on the device, compares,
//! and records the outcome in the report.

use super::compare::{Mismatch, compare};
use super::report::{Failure, Report};
use super::{Family, Options};
use crate::autograd::no_grad;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::rng::Rng;
use crate::tensor::Tensor;
use alloc::string::String;
use alloc::vec::Vec;

/// Runs checks for one device and collects the [`Report`].
pub(crate) struct Checker<'a> {
    device: &'a Device,
    opts: &'a Options,
    /// Input values; one stream for the whole run, so every run of the
    /// suite sees the same inputs.
    pub rng: Rng,
    /// The family checks are currently recorded under.
    pub family: Family,
    report: Report,
    /// Plan mode ([`super::run_planned`]): each case is replayed as a plan
    /// recorded on this tracer, whose device is `device`.
    tracer: Option<&'a crate::plan::Tracer>,
}

impl<'a> Checker<'a> {
    pub(crate) fn new(device: &'a Device, opts: &'a Options) -> Self {
        Self {
            device,
            opts,
            rng: Rng::new(opts.seed),
            family: Family::Elementwise,
            report: Report::new(device.kind()),
            tracer: None,
        }
    }

    /// A checker in plan mode over `tracer`'s device.
    pub(crate) fn planned(
        device: &'a Device,
        tracer: &'a crate::plan::Tracer,
        opts: &'a Options,
    ) -> Self {
        Self {
            tracer: Some(tracer),
            ..Self::new(device, opts)
        }
    }

    pub(crate) fn finish(self) -> Report {
        self.report
    }

    /// Whether every dtype in `dtypes` is selected.
    pub(crate) fn wants(&self, dtypes: &[DType]) -> bool {
        dtypes.iter().all(|d| self.opts.dtypes.contains(d))
    }

    /// The selected dtypes among `from`.
    pub(crate) fn dtypes(&self, from: &[DType]) -> Vec<DType> {
        from.iter()
            .copied()
            .filter(|d| self.opts.dtypes.contains(d))
            .collect()
    }

    /// Copies of `inputs` on the device under test, each with its own
    /// storage: `to_device` shares storage when it can (the same device, or
    /// two host-memory devices: NOTE [Host-memory moves]), and then the
    /// device's own copy kernel makes the copy, so an op on one side can
    /// never touch the other side's inputs.
    fn on_device(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        no_grad(|| {
            inputs
                .iter()
                .map(|t| {
                    let moved = t.to_device(self.device)?;
                    if moved.shares_storage(t) {
                        moved.deep_clone()
                    } else {
                        Ok(moved)
                    }
                })
                .collect()
        })
    }

    fn fail(&mut self, op: &'static str, case: String, m: Mismatch) {
        let failure = Failure {
            op,
            family: self.family,
            case,
            max_abs_err: m.max_abs_err,
            detail: m.detail,
        };
        self.report.record(self.family, op, Some(failure));
    }

    fn error(&mut self, op: &'static str, case: String, detail: String) {
        self.fail(
            op,
            case,
            Mismatch {
                max_abs_err: f64::NAN,
                detail,
            },
        );
    }

    /// One check: `f` maps the inputs (contiguous, on one device) to the
    /// outputs to compare; it runs on the reference CPU and on the device.
    /// `k` is the number of terms accumulated into one output element (see
    /// `compare::tolerance`). A reference error skips the case.
    pub(crate) fn check(
        &mut self,
        op: &'static str,
        case: String,
        k: usize,
        inputs: Result<Vec<Tensor>>,
        f: impl Fn(&[Tensor]) -> Result<Vec<Tensor>>,
    ) {
        let inputs = match inputs {
            Ok(v) => v,
            Err(e) => {
                let d = alloc::format!("building the inputs on the reference CPU failed: {e}");
                return self.error(op, case, d);
            }
        };
        let dev_inputs = match self.on_device(&inputs) {
            Ok(v) => v,
            Err(e) => return self.error(op, case, device_error("moving the inputs", &e)),
        };
        let Ok(want) = f(&inputs) else {
            self.report.skipped += 1;
            return;
        };
        if let Some(tracer) = self.tracer {
            use super::planned::{Outcome, failure, run_case};
            match run_case(tracer, &dev_inputs, &f) {
                Outcome::Passed => self.report.record(self.family, op, None),
                Outcome::NotPlanned(why) => {
                    *self.report.not_planned.entry(why).or_default() += 1;
                }
                Outcome::Failed(d) => {
                    let fl = failure(op, self.family, case, d);
                    self.report.record(self.family, op, Some(fl));
                }
            }
            return;
        }
        let got = match f(&dev_inputs) {
            Ok(g) => g,
            Err(e) => return self.error(op, case, device_error("the op", &e)),
        };
        if got.len() != want.len() {
            let d = alloc::format!("{} outputs, want {}", got.len(), want.len());
            return self.error(op, case, d);
        }
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            if let Some(m) = compare(&alloc::format!("output {i}"), g, w, k) {
                return self.fail(op, case, m);
            }
        }
        // the inputs too: an op must not write into its sources (and an
        // in-place op changes its destination on both sides alike)
        for (i, (g, w)) in dev_inputs.iter().zip(&inputs).enumerate() {
            if let Some(m) = compare(&alloc::format!("input {i} after the op"), g, w, k) {
                return self.fail(op, case, m);
            }
        }
        self.report.record(self.family, op, None);
    }

    /// One refusal check: `f` must fail on both devices, with the same kind
    /// of error.
    pub(crate) fn refused(
        &mut self,
        op: &'static str,
        case: String,
        inputs: Result<Vec<Tensor>>,
        f: impl Fn(&[Tensor]) -> Result<Vec<Tensor>>,
    ) {
        let inputs = match inputs {
            Ok(v) => v,
            Err(e) => {
                let d = alloc::format!("building the inputs on the reference CPU failed: {e}");
                return self.error(op, case, d);
            }
        };
        let dev_inputs = match self.on_device(&inputs) {
            Ok(v) => v,
            Err(e) => return self.error(op, case, device_error("moving the inputs", &e)),
        };
        let want = f(&inputs);
        let got = f(&dev_inputs);
        let detail = match (want, got) {
            (Ok(_), _) => Some(String::from(
                "the reference accepted this bad input (a bug in the reference)",
            )),
            (Err(w), Ok(_)) => Some(alloc::format!(
                "accepted a bad input; the reference refused it: {w}"
            )),
            (Err(w), Err(g)) if core::mem::discriminant(&w) != core::mem::discriminant(&g) => {
                let unsupported = if matches!(g, Error::Unsupported { .. }) {
                    "unsupported: "
                } else {
                    ""
                };
                Some(alloc::format!(
                    "{unsupported}refused with `{g}`; the reference with `{w}`"
                ))
            }
            (Err(_), Err(_)) => None,
        };
        match detail {
            Some(d) => self.error(op, case, d),
            None => self.report.record(self.family, op, None),
        }
    }
}

/// Describes an error of the device, naming `Unsupported` as such.
fn device_error(what: &str, e: &Error) -> String {
    if matches!(e, Error::Unsupported { .. }) {
        alloc::format!("unsupported: {what} returned `{e}`")
    } else {
        alloc::format!("{what} failed where the reference succeeded: {e}")
    }
}
