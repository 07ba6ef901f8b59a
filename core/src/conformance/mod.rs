//! The backend conformance suite: runs every public op of [`Tensor`](crate::Tensor) on a
//! [`Device`] and on the reference CPU backend, and compares the results.
//!
//! Each *check* builds its inputs on the reference CPU from a fixed seed
//! ([`Rng`](crate::Rng)), moves them to the device under test with
//! [`Tensor::to_device`](crate::Tensor::to_device), takes the same views on both sides (the layout
//! set of `cases.rs`: contiguous, transposed, sliced with step 2, broadcast
//! with stride 0, zero-size, rank 0, rank 8), runs the op, brings the
//! results back with `to_device(&Device::cpu())`, and compares them with
//! dtype-appropriate tolerances (`compare.rs`). The inputs are compared
//! afterwards too (a kernel must not write into its sources; an in-place op
//! must write exactly its view). Differentiable ops are also checked
//! backward: the gradients of the inputs must agree too.
//!
//! An op the reference refuses (a dtype it does not define, a reduction
//! over an empty dim) is *skipped*. Anything the device gets wrong is a
//! [`Failure`], including an error where the reference succeeded
//! ([`Error::Unsupported`](crate::Error::Unsupported) included: a backend
//! must pass everything). Bad index values must be refused on both.
//!
//! For kernel developers: implement [`Backend`](crate::Backend), say where
//! the kernels you do not write come from ([`Inherit`](crate::backend::Inherit):
//! another host device's kernels for host memory, host staging through
//! your byte copies for device memory), wrap it in a `Device`, run the
//! suite, print the report. Then replace kernels one at a time; the suite
//! checks each against the reference.
//!
//! ```
//! use kael_core::backend::{Backend, Dst, Inherit, Src, UnaryOp};
//! use kael_core::{allocator::Allocator, conformance, cpu::elementwise, shared::Shared};
//! use kael_core::{Device, DeviceKind, Result};
//!
//! /// Host memory; one kernel of its own (`unary`), every other inherited
//! /// from the reference CPU device it holds.
//! struct Mine(Device);
//! impl Backend for Mine {
//!     fn kind(&self) -> DeviceKind { DeviceKind::Custom("mine") }
//!     fn is_host_memory(&self) -> bool { true }
//!     fn allocator(&self) -> Shared<dyn Allocator> { self.0.allocator() }
//!     fn inherit(&self) -> Inherit { Inherit::From(self.0.clone()) }
//!     fn unary(&self, op: UnaryOp, s: Src<'_>, d: Dst<'_>) -> Result<()> {
//!         elementwise::unary(op, s, d) // your kernel here
//!     }
//! }
//! let dev = Device::from_backend(Shared::new(Mine(Device::cpu())));
//! let report = conformance::run(&dev);
//! println!("{report}"); // counts per family, then a table: op, case, max abs err, detail
//! assert!(report.is_ok(), "{report}");
//! assert!(report.op_count("exp").checks > 0);
//! ```
//!
//! The families can be run one at a time, and for chosen dtypes:
//!
//! ```
//! use kael_core::conformance::{run_with, Family, Options};
//! use kael_core::{DType, Device};
//! let opts = Options { families: vec![Family::Matmul], dtypes: vec![DType::F32], ..Options::default() };
//! let report = run_with(&Device::cpu(), &opts);
//! assert!(report.is_ok() && report.family_checks(Family::Matmul) == report.checks);
//! ```

mod autograd;
mod cases;
mod check;
mod compare;
mod copy;
mod elementwise;
mod index;
mod matmul;
mod planned;
mod reduce;
mod report;
mod views;

pub use report::{Failure, OpCount, Report};

use crate::device::Device;
use crate::dtype::DType;
use alloc::vec::Vec;

/// A group of related checks, selectable through [`Options::families`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// Unary and binary elementwise ops, scalar variants, comparisons, `where_cond`.
    Elementwise,
    /// `to_dtype` between every pair of dtypes.
    Cast,
    /// `deep_clone`, `contiguous`, `copy_`, `fill_`, `zero_`.
    Copy,
    /// View ops (`narrow`, `permute`, `unfold`, `diagonal`, `as_strided`,
    /// ...) read through the copy and elementwise kernels.
    Views,
    /// Constructors that run kernels on the device (`zeros`, `full`,
    /// `eye`, `arange`, `rand`, `randn`).
    Create,
    /// `add_`, `sub_`, `mul_`, `div_`, `clamp_` (in place, through views).
    InPlace,
    /// Sums, means, products, extremes, arg-extremes, softmax, logsumexp.
    Reduce,
    /// `matmul`, `mm`, `bmm`, `dot`.
    Matmul,
    /// `index_select`, `gather`, `index_add`, `scatter_add`, `embedding`, `cat`, `stack`.
    Index,
    /// Bad index values, which both devices must refuse.
    Errors,
    /// Gradients of the differentiable ops.
    Autograd,
}

impl Family {
    /// Every family, in the order the suite runs them.
    pub const ALL: [Family; 11] = [
        Family::Elementwise,
        Family::Cast,
        Family::Copy,
        Family::Views,
        Family::Create,
        Family::InPlace,
        Family::Reduce,
        Family::Matmul,
        Family::Index,
        Family::Errors,
        Family::Autograd,
    ];

    /// Lower-case name, for the report.
    pub const fn name(self) -> &'static str {
        match self {
            Family::Elementwise => "elementwise",
            Family::Cast => "cast",
            Family::Copy => "copy",
            Family::Views => "views",
            Family::Create => "create",
            Family::InPlace => "in-place",
            Family::Reduce => "reduce",
            Family::Matmul => "matmul",
            Family::Index => "index",
            Family::Errors => "errors",
            Family::Autograd => "autograd",
        }
    }
}

/// What [`run_with`] runs.
///
/// ```
/// use kael_core::conformance::{Family, Options};
/// let o = Options::default();
/// assert_eq!(o.families.len(), Family::ALL.len());
/// assert_eq!(o.dtypes.len(), 10);
/// ```
#[derive(Debug, Clone)]
pub struct Options {
    /// The families to run.
    pub families: Vec<Family>,
    /// The dtypes to check: a check runs when the dtypes of its data are
    /// listed (index tensors and `where_cond`'s condition aside). f32
    /// covers every op; the others cover what the reference defines for them.
    pub dtypes: Vec<DType>,
    /// Seed of the input generator.
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            families: Family::ALL.to_vec(),
            dtypes: DType::ALL.to_vec(),
            seed: 0x6b61_656c,
        }
    }
}

/// Runs the whole suite on `device` against the reference CPU backend.
///
/// Devices are identified by kind, so a device of kind
/// [`DeviceKind::Cpu`](crate::DeviceKind::Cpu) is the reference itself: the
/// suite then runs the reference against itself (useful to check the suite).
///
/// ```
/// let report = kael_core::conformance::run(&kael_core::Device::cpu());
/// assert!(report.is_ok(), "{report}");
/// ```
pub fn run(device: &Device) -> Report {
    run_with(device, &Options::default())
}

/// Runs the families and dtypes `opts` selects on `device`.
///
/// Grad mode is switched on for the run (and restored after), so the
/// autograd family records even when called inside `no_grad`.
///
/// ```
/// use kael_core::conformance::{run_with, Family, Options};
/// let opts = Options { families: vec![Family::Cast], ..Options::default() };
/// let report = run_with(&kael_core::Device::cpu(), &opts);
/// assert!(report.is_ok() && report.checks > 0);
/// ```
pub fn run_with(device: &Device, opts: &Options) -> Report {
    run_checker(check::Checker::new(device, opts), opts)
}

/// Runs the suite's cases as plans (NOTE [Planned execution]): each
/// case's op is recorded on a [`Tracer`](crate::plan::Tracer) (the
/// reference kernels, with `accumulation`), built into a plan with its f32
/// inputs bound as state and its outputs bound (integer and bool outputs
/// cast to f32 in the plan), and replayed; the replay must give the eager
/// tracing device's bits for every output and input. The report counts
/// the cases replayed; [`Report::not_planned`] lists the cases a plan
/// cannot express, by reason.
///
/// ```
/// use kael_core::conformance::{run_planned, Family, Options};
/// use kael_core::plan::Accumulation;
/// let opts = Options { families: vec![Family::Index], ..Options::default() };
/// let report = run_planned(Accumulation::F64, &opts);
/// assert!(report.is_ok() && report.checks > 0, "{report}");
/// ```
pub fn run_planned(accumulation: crate::plan::Accumulation, opts: &Options) -> Report {
    let tracer = crate::plan::Tracer::new(accumulation);
    let device = tracer.device();
    run_checker(check::Checker::planned(&device, &tracer, opts), opts)
}

fn run_checker(mut c: check::Checker<'_>, opts: &Options) -> Report {
    crate::autograd::enable_grad(|| {
        for &family in &Family::ALL {
            if !opts.families.contains(&family) {
                continue;
            }
            c.family = family;
            match family {
                Family::Elementwise => elementwise::run(&mut c),
                Family::Cast => copy::casts(&mut c),
                Family::Copy => copy::copies(&mut c),
                Family::Views => views::views(&mut c),
                Family::Create => views::constructors(&mut c),
                Family::InPlace => copy::in_place(&mut c),
                Family::Reduce => reduce::run(&mut c),
                Family::Matmul => matmul::run(&mut c),
                Family::Index => index::run(&mut c),
                Family::Errors => index::errors(&mut c),
                Family::Autograd => autograd::run(&mut c),
            }
        }
        c.finish()
    })
}
