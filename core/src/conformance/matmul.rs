//! Matrix products: `matmul` with every operand layout the backend sees
//! (transposed, stepped, stride-0, batched with broadcasting, 1-D, rank 8,
//! zero-size, and sizes past typical tile edges), and `mm`, `bmm`, `dot`.

use super::cases::{Domain, random};
use super::check::Checker;
use super::elementwise::NUMERIC;
use crate::error::Result;
use crate::tensor::Tensor;
use alloc::vec;

type View = fn(&Tensor) -> Result<Tensor>;

/// One product: operand base shapes, the views taken, and the inner size.
pub(super) struct Product {
    pub op: &'static str,
    pub case: &'static str,
    pub lhs: (&'static [usize], View),
    pub rhs: (&'static [usize], View),
    pub k: usize,
}

const ID: View = |t| Ok(t.clone());
const T: View = |t| t.t();
const T12: View = |t| t.transpose(1, 2);

const fn p(
    op: &'static str,
    case: &'static str,
    lhs: (&'static [usize], View),
    rhs: (&'static [usize], View),
    k: usize,
) -> Product {
    Product {
        op,
        case,
        lhs,
        rhs,
        k,
    }
}

pub(super) const PRODUCTS: [Product; 27] = [
    p("matmul", "[3, 4] @ [4, 5]", (&[3, 4], ID), (&[4, 5], ID), 4),
    p(
        "matmul",
        "[4, 3].t() @ [4, 5]",
        (&[4, 3], T),
        (&[4, 5], ID),
        4,
    ),
    p(
        "matmul",
        "[3, 4] @ [5, 4].t()",
        (&[3, 4], ID),
        (&[5, 4], T),
        4,
    ),
    p(
        "matmul",
        "[4, 3].t() @ [5, 4].t()",
        (&[4, 3], T),
        (&[5, 4], T),
        4,
    ),
    p(
        "matmul",
        "[3, 9][:, 1::2] @ [4, 11][:, ::2]",
        (&[3, 9], |t| t.slice(1, 1, 9, 2)),
        (&[4, 11], |t| t.slice(1, 0, 11, 2)),
        4,
    ),
    p(
        "matmul",
        "[3, 4] @ [4, 1].expand(4, 5)",
        (&[3, 4], ID),
        (&[4, 1], |t| t.expand(&[4usize, 5])),
        4,
    ),
    p(
        "matmul",
        "[2, 3, 4] @ [2, 4, 5]",
        (&[2, 3, 4], ID),
        (&[2, 4, 5], ID),
        4,
    ),
    p(
        "matmul",
        "[2, 3, 4] @ [4, 5] (broadcast batch)",
        (&[2, 3, 4], ID),
        (&[4, 5], ID),
        4,
    ),
    p(
        "matmul",
        "[1, 3, 4] @ [2, 4, 5]",
        (&[1, 3, 4], ID),
        (&[2, 4, 5], ID),
        4,
    ),
    p(
        "matmul",
        "[3, 4].expand(2, 3, 4) @ [2, 4, 5]",
        (&[3, 4], |t| t.expand(&[2usize, 3, 4])),
        (&[2, 4, 5], ID),
        4,
    ),
    p(
        "matmul",
        "[2, 4, 3].transpose(1, 2) @ [2, 5, 4].transpose(1, 2)",
        (&[2, 4, 3], T12),
        (&[2, 5, 4], T12),
        4,
    ),
    p("matmul", "[4] @ [4, 5]", (&[4], ID), (&[4, 5], ID), 4),
    p("matmul", "[3, 4] @ [4]", (&[3, 4], ID), (&[4], ID), 4),
    p("matmul", "[4] @ [4]", (&[4], ID), (&[4], ID), 4),
    p("matmul", "[2, 3, 4] @ [4]", (&[2, 3, 4], ID), (&[4], ID), 4),
    p("matmul", "[4] @ [2, 4, 5]", (&[4], ID), (&[2, 4, 5], ID), 4),
    p(
        "matmul",
        "rank 8: [2, 1, 2, 1, 1, 1, 3, 4] @ [1, 2, 1, 1, 1, 1, 4, 2]",
        (&[2, 1, 2, 1, 1, 1, 3, 4], ID),
        (&[1, 2, 1, 1, 1, 1, 4, 2], ID),
        4,
    ),
    p(
        "matmul",
        "[3, 0] @ [0, 5] (k = 0)",
        (&[3, 0], ID),
        (&[0, 5], ID),
        1,
    ),
    p("matmul", "[0, 4] @ [4, 5]", (&[0, 4], ID), (&[4, 5], ID), 4),
    p("matmul", "[3, 4] @ [4, 0]", (&[3, 4], ID), (&[4, 0], ID), 4),
    p(
        "matmul",
        "[33, 17] @ [17, 40] (tile edges)",
        (&[33, 17], ID),
        (&[17, 40], ID),
        17,
    ),
    p("mm", "[3, 4] @ [4, 5]", (&[3, 4], ID), (&[4, 5], ID), 4),
    p(
        "mm",
        "[4, 3].t() @ [5, 4].t()",
        (&[4, 3], T),
        (&[5, 4], T),
        4,
    ),
    p(
        "bmm",
        "[2, 3, 4] @ [2, 4, 5]",
        (&[2, 3, 4], ID),
        (&[2, 4, 5], ID),
        4,
    ),
    p(
        "bmm",
        "[2, 3, 4] @ [2, 5, 4].transpose(1, 2)",
        (&[2, 3, 4], ID),
        (&[2, 5, 4], T12),
        4,
    ),
    p("dot", "[4] . [4]", (&[4], ID), (&[4], ID), 4),
    p(
        "dot",
        "[9][1::2] . [4]",
        (&[9], |t| t.slice(0, 1, 9, 2)),
        (&[4], ID),
        4,
    ),
];

pub(super) fn apply(op: &str, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    match op {
        "mm" => a.mm(b),
        "bmm" => a.bmm(b),
        "dot" => a.dot(b),
        _ => a.matmul(b),
    }
}

pub(super) fn run(c: &mut Checker<'_>) {
    for pr in &PRODUCTS {
        for dt in c.dtypes(&NUMERIC) {
            // values in (-1, 1) (integers -1..=1, u8 0..=1): no integer overflow
            let inputs = random(&mut c.rng, pr.lhs.0, dt, Domain::Unit)
                .and_then(|a| Ok(vec![a, random(&mut c.rng, pr.rhs.0, dt, Domain::Unit)?]));
            let case = alloc::format!("{} {}", super::cases::dname(dt), pr.case);
            c.check(pr.op, case, pr.k, inputs, |x| {
                Ok(vec![apply(
                    pr.op,
                    &(pr.lhs.1)(&x[0])?,
                    &(pr.rhs.1)(&x[1])?,
                )?])
            });
        }
    }
}
