//! Reductions over dims and over everything, arg-extremes, softmax,
//! log_softmax and logsumexp, over every layout.
//!
//! Inputs for extremes and arg-extremes are small whole numbers, so ties
//! are common: argmax/argmin must return the *first* extreme, as the
//! reference does.

use super::cases::{Domain, LAYOUTS, describe, random};
use super::check::Checker;
use super::elementwise::{FLOATS, NUMERIC};
use crate::error::Result;
use crate::tensor::Tensor;
use alloc::vec;

/// One reduction as the suite calls it.
pub(super) struct Reduction {
    pub op: &'static str,
    pub args: &'static str,
    pub f: fn(&Tensor) -> Result<Tensor>,
    pub domain: Domain,
    /// Whether integers apply (the rest are float-only).
    pub ints: bool,
}

const fn r(
    op: &'static str,
    args: &'static str,
    f: fn(&Tensor) -> Result<Tensor>,
    domain: Domain,
    ints: bool,
) -> Reduction {
    Reduction {
        op,
        args,
        f,
        domain,
        ints,
    }
}

const N: Domain = Domain::Normal;
const T: Domain = Domain::Ties;

pub(super) const REDUCTIONS: [Reduction; 31] = [
    r("sum", "all dims", |x| x.sum(&[], false), N, true),
    r("sum", "dims [-1]", |x| x.sum(&[-1], false), N, true),
    r("sum", "dims [0], keepdim", |x| x.sum(&[0], true), N, true),
    r("sum", "dims [0, -1]", |x| x.sum(&[0, -1], false), N, true),
    r("sum_dim", "-1, keepdim", |x| x.sum_dim(-1, true), N, true),
    r("sum_all", "", Tensor::sum_all, N, true),
    r("mean", "dims [-1]", |x| x.mean(&[-1], false), N, false),
    r(
        "mean",
        "dims [0, -1], keepdim",
        |x| x.mean(&[0, -1], true),
        N,
        false,
    ),
    r("mean_dim", "0", |x| x.mean_dim(0, false), N, false),
    r("mean_all", "", Tensor::mean_all, N, false),
    r(
        "prod_dim",
        "-1",
        |x| x.prod_dim(-1, false),
        Domain::Near1,
        true,
    ),
    r(
        "prod_dim",
        "0, keepdim",
        |x| x.prod_dim(0, true),
        Domain::Near1,
        true,
    ),
    r("max_dim", "-1", |x| x.max_dim(-1, false), T, true),
    r("max_dim", "0, keepdim", |x| x.max_dim(0, true), T, true),
    r("min_dim", "-1, keepdim", |x| x.min_dim(-1, true), T, true),
    r("min_dim", "0", |x| x.min_dim(0, false), T, true),
    r("max_all", "", Tensor::max_all, N, true),
    r("min_all", "", Tensor::min_all, N, true),
    r("argmax", "-1", |x| x.argmax(-1, false), T, true),
    r("argmax", "0, keepdim", |x| x.argmax(0, true), T, true),
    r("argmin", "-1, keepdim", |x| x.argmin(-1, true), T, true),
    r("argmin", "0", |x| x.argmin(0, false), T, true),
    r(
        "argmax",
        "-1, distinct values",
        |x| x.argmax(-1, false),
        N,
        false,
    ),
    r("softmax", "-1", |x| x.softmax(-1), N, false),
    r("softmax", "0", |x| x.softmax(0), N, false),
    r("log_softmax", "-1", |x| x.log_softmax(-1), N, false),
    r("log_softmax", "0", |x| x.log_softmax(0), N, false),
    r("logsumexp", "-1", |x| x.logsumexp(-1, false), N, false),
    r(
        "logsumexp",
        "0, keepdim",
        |x| x.logsumexp(0, true),
        N,
        false,
    ),
    r(
        "logsumexp",
        "-1, ties",
        |x| x.logsumexp(-1, false),
        T,
        false,
    ),
    r("softmax", "-1, ties", |x| x.softmax(-1), T, false),
];

pub(super) fn run(c: &mut Checker<'_>) {
    for red in &REDUCTIONS {
        let dtypes = if red.ints { &NUMERIC[..] } else { &FLOATS[..] };
        for dt in c.dtypes(dtypes) {
            for layout in LAYOUTS {
                let x = random(&mut c.rng, layout.base_shape(), dt, red.domain);
                let mut case = describe(dt, layout);
                if !red.args.is_empty() {
                    case.push_str(", ");
                    case.push_str(red.args);
                }
                // every output element accumulates at most all the input's
                let k = layout.shape().iter().product();
                c.check(red.op, case, k, x.map(|x| vec![x]), |x| {
                    Ok(vec![(red.f)(&layout.view(&x[0])?)?])
                });
            }
        }
    }
}
