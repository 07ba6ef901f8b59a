//! Elementwise checks: every unary op, binary ops with broadcasting, the
//! scalar variants, comparisons and `where_cond`, over every layout.

use super::cases::{Arg, Domain, LAYOUTS, Layout, describe, describe_args};
use super::check::Checker;
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::{BinaryCase, BinaryOp, CmpOp, UnaryCase, UnaryOp};
use crate::tensor::Tensor;
use alloc::vec;
use alloc::vec::Vec;

pub(super) const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];
pub(super) const NUMERIC: [DType; 9] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I64,
    DType::I32,
    DType::I16,
    DType::I8,
    DType::U8,
];

/// Every public unary op (and the variants of the parametrised ones),
/// from the op table (NOTE [Op table]).
pub(super) const UNARY: &[UnaryCase] = UnaryOp::CASES;

/// Every binary op, from the op table.
pub(super) const BINARY: &[BinaryCase] = BinaryOp::CASES;

/// The dtypes a binary case runs on.
pub(super) fn binary_dtypes(b: &BinaryCase) -> Vec<DType> {
    let mut v = Vec::new();
    if b.floats {
        v.extend_from_slice(&FLOATS);
    }
    if b.ints {
        v.extend_from_slice(&NUMERIC[4..]);
    }
    v
}

/// Operand pairs for binary ops: equal layouts, broadcasting in either
/// direction, rank-0 operands, and mixed strides.
pub(super) fn binary_pairs() -> Vec<(Arg, Arg)> {
    use Layout::*;
    let mut v: Vec<(Arg, Arg)> = LAYOUTS
        .iter()
        .map(|&l| (Arg::View(l), Arg::View(l)))
        .collect();
    for l in [Contiguous, Transposed, Stepped, Broadcast, Empty, Rank8] {
        v.push((Arg::View(l), Arg::Row(l)));
    }
    v.push((Arg::Row(Contiguous), Arg::View(Transposed)));
    for l in [Contiguous, Stepped, Rank8] {
        v.push((Arg::View(l), Arg::Scalar));
    }
    v.push((Arg::Scalar, Arg::View(Transposed)));
    v.push((Arg::Col, Arg::Row(Contiguous)));
    v.push((Arg::View(Contiguous), Arg::View(Transposed)));
    v.push((Arg::View(Transposed), Arg::View(Stepped)));
    v.push((Arg::View(Stepped), Arg::View(Broadcast)));
    v
}

pub(super) fn run(c: &mut Checker<'_>) {
    unary(c);
    binary(c);
    scalar(c);
    comparisons(c);
    where_cond(c);
}

fn unary(c: &mut Checker<'_>) {
    for u in UNARY {
        let dtypes = if u.ints { &NUMERIC[..] } else { &FLOATS[..] };
        for dt in c.dtypes(dtypes) {
            for layout in LAYOUTS {
                let x = super::cases::random(&mut c.rng, layout.base_shape(), dt, u.domain);
                let mut case = describe(dt, layout);
                if !u.args.is_empty() {
                    case.push_str(", ");
                    case.push_str(u.args);
                }
                c.check(u.op, case, 1, x.map(|x| vec![x]), |x| {
                    Ok(vec![(u.f)(&layout.view(&x[0])?)?])
                });
            }
        }
    }
}

/// Runs `f(lhs, rhs)` for one pair of operands.
pub(super) fn check_pair(
    c: &mut Checker<'_>,
    op: &'static str,
    dt: DType,
    (a, b): (Arg, Arg),
    domains: (Domain, Domain),
    f: impl Fn(&Tensor, &Tensor) -> Result<Tensor>,
) {
    let inputs = a
        .random(&mut c.rng, dt, domains.0)
        .and_then(|x| Ok(vec![x, b.random(&mut c.rng, dt, domains.1)?]));
    c.check(op, describe_args(dt, &[a, b]), 1, inputs, |x| {
        Ok(vec![f(&a.view(&x[0])?, &b.view(&x[1])?)?])
    });
}

fn binary(c: &mut Checker<'_>) {
    let pairs = binary_pairs();
    for b in BINARY {
        for dt in c.dtypes(&binary_dtypes(b)) {
            for &pair in &pairs {
                check_pair(c, b.op, dt, pair, b.domains, b.f);
            }
        }
    }
}

fn scalar(c: &mut Checker<'_>) {
    type ScalarFn = fn(&Tensor) -> Result<Tensor>;
    let ops: [(&'static str, ScalarFn, bool); 4] = [
        ("add_scalar", |x| x.add_scalar(2), true),
        ("mul_scalar", |x| x.mul_scalar(-3), true),
        ("sub (f64 operand)", |x| x - 0.5, false),
        ("div (f64 operand)", |x| x / 4.0, false),
    ];
    for (op, f, ints) in ops {
        let dtypes = if ints { &NUMERIC[..] } else { &FLOATS[..] };
        for dt in c.dtypes(dtypes) {
            for layout in LAYOUTS {
                let x = super::cases::random(&mut c.rng, layout.base_shape(), dt, Domain::Normal);
                c.check(op, describe(dt, layout), 1, x.map(|x| vec![x]), |x| {
                    Ok(vec![f(&layout.view(&x[0])?)?])
                });
            }
        }
    }
}

fn comparisons(c: &mut Checker<'_>) {
    let mut pairs: Vec<(Arg, Arg)> = LAYOUTS
        .iter()
        .map(|&l| (Arg::View(l), Arg::View(l)))
        .collect();
    pairs.push((Arg::View(Layout::Contiguous), Arg::Row(Layout::Contiguous)));
    pairs.push((Arg::View(Layout::Transposed), Arg::Scalar));
    pairs.push((Arg::Col, Arg::Row(Layout::Contiguous)));
    for cmp in CmpOp::CASES {
        for dt in c.dtypes(&DType::ALL) {
            for &pair in &pairs {
                check_pair(c, cmp.op, dt, pair, (Domain::Ties, Domain::Ties), cmp.f);
            }
        }
    }
}

fn where_cond(c: &mut Checker<'_>) {
    use Layout::*;
    let mut triples: Vec<[Arg; 3]> = LAYOUTS.iter().map(|&l| [Arg::View(l); 3]).collect();
    triples.push([Arg::View(Contiguous), Arg::Row(Contiguous), Arg::Scalar]);
    triples.push([Arg::Col, Arg::Row(Contiguous), Arg::View(Transposed)]);
    for dt in c.dtypes(&DType::ALL) {
        for args in &triples {
            let [a, t, f] = *args;
            let inputs = a
                .random(&mut c.rng, DType::Bool, Domain::Normal)
                .and_then(|cond| {
                    let on_true = t.random(&mut c.rng, dt, Domain::Normal)?;
                    Ok(vec![
                        cond,
                        on_true,
                        f.random(&mut c.rng, dt, Domain::Normal)?,
                    ])
                });
            let mut case = describe_args(dt, args);
            case.insert_str(0, "cond bool | ");
            c.check("where_cond", case, 1, inputs, |x| {
                let cond = a.view(&x[0])?;
                Ok(vec![cond.where_cond(&t.view(&x[1])?, &f.view(&x[2])?)?])
            });
        }
    }
}
