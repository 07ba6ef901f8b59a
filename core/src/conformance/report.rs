//! The suite's result: counts, the failures, and a table to print.

use super::Family;
use crate::device_kind::DeviceKind;
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// One check the device got wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// The op, by its `Tensor` method name (`"exp"`, `"index_select"`).
    pub op: &'static str,
    /// The family the check belongs to.
    pub family: Family,
    /// What was run: dtype, layout, shapes, arguments (`"f32 transposed [3, 4]"`).
    pub case: String,
    /// The largest absolute difference from the reference (NaN when the
    /// results could not be compared: an error, another shape).
    pub max_abs_err: f64,
    /// What went wrong (the first differing element, the error returned, ...).
    pub detail: String,
}

/// Checks run and failed, per op.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpCount {
    /// Checks run.
    pub checks: usize,
    /// Checks failed.
    pub failures: usize,
}

/// The outcome of [`run`](super::run).
///
/// ```
/// use kael_core::conformance::{run_with, Family, Options};
/// let opts = Options { families: vec![Family::Matmul], ..Options::default() };
/// let r = run_with(&kael_core::Device::cpu(), &opts);
/// assert!(r.is_ok());
/// assert_eq!(r.checks, r.passed);
/// assert!(r.op_count("matmul").checks > 0);
/// println!("{r}");
/// ```
#[derive(Debug, Clone)]
pub struct Report {
    /// The device checked.
    pub device: DeviceKind,
    /// Checks run (each compares one op on one case).
    pub checks: usize,
    /// Checks the device passed.
    pub passed: usize,
    /// Cases the reference itself refused (an op not defined for a dtype),
    /// which are not checks.
    pub skipped: usize,
    /// The failed checks, in the order they ran.
    pub failures: Vec<Failure>,
    /// In plan mode ([`run_planned`](super::run_planned)): the cases a
    /// plan cannot express, by `Plan::build`'s reason (or the op it
    /// refused); empty otherwise.
    pub not_planned: BTreeMap<&'static str, usize>,
    pub(super) ops: BTreeMap<&'static str, OpCount>,
    pub(super) families: BTreeMap<Family, usize>,
}

impl Report {
    pub(super) fn new(device: DeviceKind) -> Self {
        Self {
            device,
            checks: 0,
            passed: 0,
            skipped: 0,
            failures: Vec::new(),
            not_planned: BTreeMap::new(),
            ops: BTreeMap::new(),
            families: BTreeMap::new(),
        }
    }

    pub(super) fn record(&mut self, family: Family, op: &'static str, failure: Option<Failure>) {
        self.checks += 1;
        *self.families.entry(family).or_default() += 1;
        let count = self.ops.entry(op).or_default();
        count.checks += 1;
        match failure {
            Some(f) => {
                count.failures += 1;
                self.failures.push(f);
            }
            None => self.passed += 1,
        }
    }

    /// Whether every check passed.
    pub fn is_ok(&self) -> bool {
        self.failures.is_empty() && self.passed == self.checks
    }

    /// Checks run and failed for `op` (zero counts for an op never run).
    pub fn op_count(&self, op: &str) -> OpCount {
        self.ops.get(op).copied().unwrap_or_default()
    }

    /// Every op checked, with its counts, by name.
    pub fn ops(&self) -> impl Iterator<Item = (&'static str, OpCount)> + '_ {
        self.ops.iter().map(|(&op, &c)| (op, c))
    }

    /// The ops with at least one failure, by name, each once.
    pub fn failed_ops(&self) -> Vec<&'static str> {
        self.ops
            .iter()
            .filter(|(_, c)| c.failures > 0)
            .map(|(&op, _)| op)
            .collect()
    }

    /// Checks run in `family`.
    pub fn family_checks(&self, family: Family) -> usize {
        self.families.get(&family).copied().unwrap_or(0)
    }
}

/// At most this many failures are listed in the table ...
const MAX_LISTED: usize = 200;
/// ... and at most this many per op.
const PER_OP: usize = 3;

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "conformance of {:?} against the reference CPU backend: {} checks, {} passed, {} failed ({} cases skipped: refused by the reference)",
            self.device,
            self.checks,
            self.passed,
            self.failures.len(),
            self.skipped
        )?;
        for (family, n) in &self.families {
            let failed = self.failures.iter().filter(|x| x.family == *family).count();
            writeln!(f, "  {:<12} {n:>6} checks, {failed} failed", family.name())?;
        }
        if !self.not_planned.is_empty() {
            let n: usize = self.not_planned.values().sum();
            writeln!(f, "  {n} cases not expressible as plans:")?;
            for (why, n) in &self.not_planned {
                writeln!(f, "    {n:>6}  {why}")?;
            }
        }
        if self.failures.is_empty() {
            return Ok(());
        }
        write!(f, "failed ops (failed/checks):")?;
        let failing = self.ops.iter().filter(|(_, c)| c.failures > 0);
        for (i, (op, c)) in failing.enumerate() {
            let sep = if i % 8 == 7 { "\n   " } else { "" };
            write!(f, " {op} {}/{}{sep}", c.failures, c.checks)?;
        }
        writeln!(f)?;
        // the first few failures of each op, in the order they ran
        let mut shown: BTreeMap<&str, usize> = BTreeMap::new();
        let mut listed: Vec<&Failure> = Vec::new();
        for x in &self.failures {
            let n = shown.entry(x.op).or_default();
            if *n < PER_OP && listed.len() < MAX_LISTED {
                *n += 1;
                listed.push(x);
            }
        }
        let w_op = listed.iter().map(|x| x.op.len()).max().unwrap_or(2).max(2);
        let w_case = listed
            .iter()
            .map(|x| x.case.len())
            .max()
            .unwrap_or(4)
            .max(4);
        writeln!(
            f,
            "{:<w_op$}  {:<w_case$}  {:>11}  detail",
            "op", "case", "max abs err"
        )?;
        for x in &listed {
            let err = if x.max_abs_err.is_nan() {
                String::from("-")
            } else {
                alloc::format!("{:.3e}", x.max_abs_err)
            };
            writeln!(
                f,
                "{:<w_op$}  {:<w_case$}  {:>11}  {}",
                x.op, x.case, err, x.detail
            )?;
        }
        if self.failures.len() > listed.len() {
            writeln!(
                f,
                "(the first {PER_OP} failures of each op; {} more not shown)",
                self.failures.len() - listed.len()
            )?;
        }
        Ok(())
    }
}
