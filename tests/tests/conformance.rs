//! The backend conformance suite (`kael_core::conformance`): every device
//! of this test run passes it, it covers what it claims, and it catches
//! broken backends, naming exactly the ops they break.
//!
//! The broken backends delegate to the reference `CpuBackend` and corrupt
//! one kernel each. The ops expected to fail are derived from how the
//! tensor layer composes kernels (e.g. `logsumexp` computes `exp` through
//! the unary kernel), not from running the suite.

mod common;

use kael_core::allocator::{Allocator, GlobalAllocator};
use kael_core::backend::{ArgReduceOp, BinaryOp, CmpOp, Dst, ReduceOp, Src, UnaryOp};
use kael_core::conformance::{self, Family, Report};
use kael_core::cpu::CpuBackend;
use kael_core::shared::Shared;
use kael_core::{Backend, Device, DeviceKind, Error, Layout, Result, Storage};
use std::collections::BTreeSet;

/// Every public op of `Tensor` the suite claims to check.
const OPS: &[&str] = &[
    "neg",
    "abs",
    "exp",
    "log",
    "sqrt",
    "sqr",
    "recip",
    "tanh",
    "sigmoid",
    "relu",
    "gelu",
    "gelu_tanh",
    "silu",
    "sin",
    "cos",
    "sign",
    "erf",
    "powf",
    "clamp",
    "affine",
    "add",
    "sub",
    "mul",
    "div",
    "maximum",
    "minimum",
    "pow",
    "add_scalar",
    "mul_scalar",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "where_cond",
    "sum",
    "sum_dim",
    "sum_all",
    "mean",
    "mean_dim",
    "mean_all",
    "prod_dim",
    "max_dim",
    "min_dim",
    "max_all",
    "min_all",
    "argmax",
    "argmin",
    "softmax",
    "log_softmax",
    "logsumexp",
    "matmul",
    "mm",
    "bmm",
    "dot",
    "index_select",
    "gather",
    "index_add",
    "scatter_add",
    "embedding",
    "cat",
    "stack",
    "to_dtype",
    "deep_clone",
    "contiguous",
    "copy_",
    "fill_",
    "zero_",
    "add_",
    "sub_",
    "mul_",
    "div_",
    "clamp_",
];

#[test]
fn every_device_passes_the_suite() {
    for (name, dev) in common::devices() {
        let t = std::time::Instant::now();
        let report = conformance::run(&dev);
        println!("{name}: {} checks in {:.2?}", report.checks, t.elapsed());
        assert!(report.is_ok(), "{name}:\n{report}");
    }
}

#[test]
fn the_suite_covers_every_op_and_family() {
    let report = conformance::run(&Device::cpu());
    assert!(report.checks >= 6000, "only {} checks", report.checks);
    assert_eq!(report.passed, report.checks);
    for family in Family::ALL {
        assert!(report.family_checks(family) >= 20, "{family:?}:\n{report}");
    }
    for op in OPS {
        let n = report.op_count(op).checks;
        // every layout (7), several dtypes or cases each
        assert!(n >= 7, "{op}: {n} checks");
    }
}

#[test]
fn options_select_families_and_dtypes() {
    use kael_core::DType;
    let opts = conformance::Options {
        families: vec![Family::Matmul],
        dtypes: vec![DType::F32],
        ..Default::default()
    };
    let report = conformance::run_with(&Device::cpu(), &opts);
    assert!(report.is_ok(), "{report}");
    // one check per product case, f32 only
    assert_eq!(report.family_checks(Family::Matmul), report.checks);
    assert_eq!(report.family_checks(Family::Reduce), 0);
    let all = conformance::run_with(
        &Device::cpu(),
        &conformance::Options {
            families: vec![Family::Matmul],
            ..Default::default()
        },
    );
    // nine numeric dtypes
    assert_eq!(all.checks, 9 * report.checks);
}

// ------------------------------------------------------ broken backends

#[derive(Clone, Copy, PartialEq)]
enum Fault {
    /// `exp` writes `e^x + 0.01`.
    ExpOffset,
    /// `add` reads its right operand as if it were contiguous (offset 0),
    /// whenever its storage is large enough for that.
    AddIgnoresRhsStrides,
    /// `gather` is not implemented.
    NoGather,
    /// `sigmoid` is right, but then zeroes its source.
    SigmoidClobbersInput,
}

/// The reference backend with one fault.
struct Broken {
    inner: CpuBackend,
    fault: Fault,
}

fn broken(fault: Fault) -> Device {
    let inner = CpuBackend::new(Shared::new(GlobalAllocator::new()));
    Device::from_backend(Shared::new(Broken { inner, fault }))
}

impl Backend for Broken {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Custom("broken")
    }
    fn is_host_memory(&self) -> bool {
        true
    }
    fn allocator(&self) -> Shared<dyn Allocator> {
        self.inner.allocator()
    }
    fn write_bytes(&self, dst: &Storage, at: usize, src: &[u8]) -> Result<()> {
        self.inner.write_bytes(dst, at, src)
    }
    fn read_bytes(&self, src: &Storage, at: usize, dst: &mut [u8]) -> Result<()> {
        self.inner.read_bytes(src, at, dst)
    }
    fn copy_strided(&self, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.inner.copy_strided(src, dst)
    }
    fn cast(&self, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.inner.cast(src, dst)
    }
    fn fill(&self, dst: Dst<'_>, value: f64) -> Result<()> {
        self.inner.fill(dst, value)
    }
    fn unary(&self, op: UnaryOp, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.inner.unary(op, src, dst)?;
        if self.fault == Fault::ExpOffset && op == UnaryOp::Exp {
            let shift = UnaryOp::Affine {
                mul: 1.0,
                add: 0.01,
            };
            self.inner.unary(shift, dst, dst)?;
        }
        if self.fault == Fault::SigmoidClobbersInput && op == UnaryOp::Sigmoid {
            self.inner.fill(src, 0.0)?;
        }
        Ok(())
    }
    fn binary(&self, op: BinaryOp, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        let dense = Layout::contiguous(rhs.layout.shape())?;
        let fits = dense.numel() * rhs.dtype.size_in_bytes() <= rhs.storage.nbytes();
        if self.fault == Fault::AddIgnoresRhsStrides && op == BinaryOp::Add && fits {
            let rhs = Src {
                layout: &dense,
                ..rhs
            };
            return self.inner.binary(op, lhs, rhs, dst);
        }
        self.inner.binary(op, lhs, rhs, dst)
    }
    fn compare(&self, op: CmpOp, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.inner.compare(op, lhs, rhs, dst)
    }
    fn where_cond(&self, c: Src<'_>, t: Src<'_>, f: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.inner.where_cond(c, t, f, dst)
    }
    fn reduce(&self, op: ReduceOp, src: Src<'_>, dims: &[usize], dst: Dst<'_>) -> Result<()> {
        self.inner.reduce(op, src, dims, dst)
    }
    fn arg_reduce(&self, op: ArgReduceOp, src: Src<'_>, dim: usize, dst: Dst<'_>) -> Result<()> {
        self.inner.arg_reduce(op, src, dim, dst)
    }
    fn softmax(&self, src: Src<'_>, dim: usize, log: bool, dst: Dst<'_>) -> Result<()> {
        self.inner.softmax(src, dim, log, dst)
    }
    fn matmul(&self, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.inner.matmul(lhs, rhs, dst)
    }
    fn index_select(&self, src: Src<'_>, dim: usize, idx: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.inner.index_select(src, dim, idx, dst)
    }
    fn gather(&self, src: Src<'_>, dim: usize, index: Src<'_>, dst: Dst<'_>) -> Result<()> {
        if self.fault == Fault::NoGather {
            return Err(Error::Unsupported {
                op: "gather",
                device: self.kind(),
            });
        }
        self.inner.gather(src, dim, index, dst)
    }
    fn index_add(&self, dst: Dst<'_>, dim: usize, idx: Src<'_>, src: Src<'_>) -> Result<()> {
        self.inner.index_add(dst, dim, idx, src)
    }
    fn scatter_add(&self, dst: Dst<'_>, dim: usize, index: Src<'_>, src: Src<'_>) -> Result<()> {
        self.inner.scatter_add(dst, dim, index, src)
    }
}

/// The ops with a failure in forward checks (every family but autograd)
/// and in backward checks.
fn failed(report: &Report) -> (BTreeSet<&'static str>, BTreeSet<&'static str>) {
    let pick = |backward: bool| {
        report
            .failures
            .iter()
            .filter(|f| (f.family == Family::Autograd) == backward)
            .map(|f| f.op)
            .collect()
    };
    (pick(false), pick(true))
}

fn set<'a>(ops: &[&'a str]) -> BTreeSet<&'a str> {
    ops.iter().copied().collect()
}

#[test]
fn a_wrong_exp_kernel_fails_exp_and_the_ops_built_on_it() {
    let report = conformance::run(&broken(Fault::ExpOffset));
    let (forward, backward) = failed(&report);
    // logsumexp = log(sum(exp(x - max))) + max, through the exp kernel
    assert_eq!(forward, set(&["exp", "logsumexp"]), "\n{report}");
    // the backward formulas of exp (its output), log_softmax (exp(y)),
    // gelu and erf (exp(-x^2/2), exp(-x^2)) use it too
    assert_eq!(
        backward,
        set(&["erf", "exp", "gelu", "log_softmax", "logsumexp"]),
        "\n{report}"
    );
    // every non-empty f32 exp case fails, by the 0.01 added
    let exp_f32: Vec<_> = report
        .failures
        .iter()
        .filter(|f| f.op == "exp" && f.family == Family::Elementwise && f.case.starts_with("f32"))
        .collect();
    assert_eq!(exp_f32.len(), 6, "\n{report}");
    for f in exp_f32 {
        assert!((f.max_abs_err - 0.01).abs() < 1e-6, "{f:?}");
    }
    assert!(!report.is_ok());
    assert!(report.to_string().contains("exp"));
}

#[test]
fn an_add_kernel_ignoring_strides_fails_add_on_strided_operands_only() {
    let report = conformance::run(&broken(Fault::AddIgnoresRhsStrides));
    let (forward, backward) = failed(&report);
    // add_scalar's operand is rank 0 (stride 0, storage too small to be
    // misread); add_ reads strided operands through the same kernel; the
    // backward checks fail through their forward values
    assert_eq!(forward, set(&["add", "add_"]), "\n{report}");
    assert_eq!(backward, set(&["add", "add_"]), "\n{report}");
    let add_cases: BTreeSet<&str> = report
        .failures
        .iter()
        .filter(|f| f.op == "add" && f.family == Family::Elementwise)
        .map(|f| f.case.as_str())
        .collect();
    assert!(add_cases.contains("f32 contiguous [3, 4] | transposed [3, 4]"));
    assert!(add_cases.contains("f32 step-2 slice [3, 4] | step-2 slice [3, 4]"));
    assert!(!add_cases.contains("f32 contiguous [3, 4] | contiguous [3, 4]"));
    assert!(!add_cases.contains("f32 transposed [3, 4] | [4]"));
}

#[test]
fn an_unsupported_gather_fails_every_gather_check() {
    let report = conformance::run(&broken(Fault::NoGather));
    let (forward, backward) = failed(&report);
    assert_eq!(forward, set(&["gather"]), "\n{report}");
    // scatter_add's backward gathers the gradient of its source
    assert_eq!(backward, set(&["gather", "scatter_add"]), "\n{report}");
    let gather = report.op_count("gather");
    assert!(gather.checks > 0);
    assert_eq!(gather.failures, gather.checks);
    for f in report.failures.iter().filter(|f| f.op == "gather") {
        assert!(f.detail.contains("unsupported"), "{f:?}");
    }
    assert_eq!(report.op_count("matmul").failures, 0);
}

#[test]
fn a_kernel_writing_into_its_source_fails_on_its_inputs() {
    let report = conformance::run(&broken(Fault::SigmoidClobbersInput));
    let (forward, backward) = failed(&report);
    assert_eq!(forward, set(&["sigmoid"]), "\n{report}");
    // silu's backward formula takes sigmoid(x) of its saved input
    assert_eq!(backward, set(&["sigmoid", "silu"]), "\n{report}");
    for f in report.failures.iter().filter(|f| f.op == "sigmoid") {
        // the outputs are right; the input was changed
        assert!(f.detail.starts_with("input 0 after the op"), "{f:?}");
    }
    // every case with an element (all layouts but zero-size): four float
    // dtypes forward, f32 and f64 backward
    let sigmoid = report.op_count("sigmoid");
    assert_eq!(sigmoid.failures, 6 * 4 + 6 * 2, "\n{report}");
}
