//! Views read by kernels: each view op (narrow, select, permute, expand,
//! reshape, flatten, unfold, diagonal, chunk, split, as_strided,
//! view_dtype, ...) is metadata only, so the check copies the view
//! (`contiguous`, the copy kernel) and runs an elementwise kernel on it:
//! strides a backend rarely sees (a diagonal's row+1, overlapping
//! windows) must read the right elements.
//!
//! Also the constructors that run kernels on the device: `zeros`, `ones`,
//! `full`, `eye` (a fill through a diagonal view), `arange`, `rand`,
//! `randn` (written as f64, cast on the device).

use super::cases::{Domain, dname, random};
use super::check::Checker;
use super::elementwise::{FLOATS, NUMERIC};
use crate::dtype::DType;
use crate::error::Result;
use crate::rng::Rng;
use crate::tensor::Tensor;
use alloc::vec;
use alloc::vec::Vec;

type View = fn(&Tensor) -> Result<Tensor>;

/// A view op, the base shape it is taken from, and the case description.
const VIEWS: [(&str, &[usize], View, &str); 21] = [
    (
        "narrow",
        &[4, 5],
        |t| t.narrow(1, 1, 3),
        "[4, 5].narrow(1, 1, 3)",
    ),
    ("select", &[4, 5], |t| t.select(0, 2), "[4, 5].select(0, 2)"),
    (
        "select",
        &[4, 5],
        |t| t.select(1, -1),
        "[4, 5].select(1, -1)",
    ),
    (
        "slice",
        &[5, 7],
        |t| t.slice(0, 1, 5, 3)?.slice(1, -6, 7, 2),
        "[5, 7][1::3, -6::2]",
    ),
    (
        "permute",
        &[2, 1, 2, 1, 2, 1, 3, 2],
        |t| t.permute(&[7, 0, 6, 1, 5, 2, 4, 3]),
        "rank 8 .permute([7, 0, 6, 1, 5, 2, 4, 3])",
    ),
    (
        "transpose",
        &[2, 3, 4],
        |t| t.transpose(0, 2),
        "[2, 3, 4].transpose(0, 2)",
    ),
    (
        "expand",
        &[1, 3],
        |t| t.expand(&[2usize, 4, 3]),
        "[1, 3].expand(2, 4, 3)",
    ),
    (
        "unsqueeze",
        &[4, 3],
        |t| t.t()?.unsqueeze(1),
        "[4, 3].t().unsqueeze(1)",
    ),
    (
        "squeeze",
        &[3, 1, 4],
        |t| t.transpose(0, 2)?.squeeze(),
        "[3, 1, 4].transpose(0, 2).squeeze()",
    ),
    (
        "reshape",
        &[4, 3],
        |t| t.t()?.reshape(&[12usize]),
        "[4, 3].t().reshape(12) (a copy)",
    ),
    (
        "reshape",
        &[3, 4],
        |t| t.reshape(&[2usize, 6]),
        "[3, 4].reshape(2, 6) (a view)",
    ),
    (
        "flatten",
        &[3, 9],
        |t| t.slice(1, 1, 9, 2)?.flatten(0, -1),
        "[3, 9][:, 1::2].flatten()",
    ),
    (
        "unfold",
        &[10],
        |t| t.unfold(0, 4, 2),
        "[10].unfold(0, 4, 2) (overlapping)",
    ),
    (
        "unfold",
        &[3, 8],
        |t| t.unfold(1, 3, 1),
        "[3, 8].unfold(1, 3, 1)",
    ),
    (
        "diagonal",
        &[4, 5],
        |t| t.diagonal(0, 0, 1),
        "[4, 5].diagonal()",
    ),
    (
        "diagonal",
        &[4, 5],
        |t| t.diagonal(1, 1, 0),
        "[4, 5].diagonal(1, 1, 0)",
    ),
    (
        "chunk",
        &[6, 4],
        |t| nth(t.chunk(3, 0)?, 1),
        "[6, 4].chunk(3, 0)[1]",
    ),
    (
        "split",
        &[4, 7],
        |t| nth(t.split(3, 1)?, 2),
        "[4, 7].split(3, 1)[2]",
    ),
    (
        "as_strided",
        &[12],
        |t| t.as_strided(&[3, 4], &[2, 1], 1),
        "[12].as_strided([3, 4], [2, 1], 1)",
    ),
    (
        "detach",
        &[3, 4],
        |t| t.t()?.detach(),
        "[3, 4].t().detach()",
    ),
    (
        "view_dtype",
        &[3, 4],
        |t| t.view_dtype(DType::U8),
        "[3, 4].view_dtype(u8) (bytes)",
    ),
];

fn nth(v: Vec<Tensor>, i: usize) -> Result<Tensor> {
    v.into_iter()
        .nth(i)
        .ok_or(crate::error::Error::InvalidArgument {
            op: "conformance",
            reason: "a split produced fewer parts than expected",
        })
}

pub(super) fn views(c: &mut Checker<'_>) {
    for dt in c.dtypes(&DType::ALL) {
        for (op, shape, view, case) in VIEWS {
            let x = random(&mut c.rng, shape, dt, Domain::Normal);
            let case = alloc::format!("{} {case}", dname(dt));
            c.check(op, case, 1, x.map(|x| vec![x]), |x| {
                let v = view(&x[0])?;
                let mut out = vec![v.contiguous()?];
                if v.dtype() != DType::Bool {
                    out.push(v.sqr()?);
                }
                Ok(out)
            });
        }
    }
}

pub(super) fn constructors(c: &mut Checker<'_>) {
    type Make = fn(&Tensor) -> Result<Tensor>;
    // each closure builds on the device of its (dummy) input, in its dtype
    let makers: [(&str, Make, &str, &[DType]); 9] = [
        (
            "zeros",
            |x| Tensor::zeros(&[3, 4], x.dtype(), &x.device()),
            "[3, 4]",
            &DType::ALL,
        ),
        (
            "ones",
            |x| Tensor::ones(&[2, 0, 3], x.dtype(), &x.device()),
            "[2, 0, 3]",
            &DType::ALL,
        ),
        (
            "ones",
            |x| Tensor::ones(&[3, 4], x.dtype(), &x.device()),
            "[3, 4]",
            &DType::ALL,
        ),
        (
            "full",
            |x| Tensor::full(&[], 3.0, x.dtype(), &x.device()),
            "[], 3",
            &DType::ALL,
        ),
        (
            "full",
            |x| Tensor::full(&[2, 3], 2.0, x.dtype(), &x.device()),
            "[2, 3], 2",
            &DType::ALL,
        ),
        (
            "eye",
            |x| Tensor::eye(4, x.dtype(), &x.device()),
            "4",
            &DType::ALL,
        ),
        (
            "arange",
            |x| Tensor::arange_step(-3.0f64, 5.0, 0.5, &x.device())?.to_dtype(x.dtype()),
            "-3..5 step 0.5",
            &NUMERIC,
        ),
        (
            "rand",
            |x| Tensor::rand(&[3, 4], x.dtype(), &x.device(), &mut Rng::new(5)),
            "[3, 4], seed 5",
            &FLOATS,
        ),
        (
            "randn",
            |x| Tensor::randn(&[3, 4], x.dtype(), &x.device(), &mut Rng::new(6)),
            "[3, 4], seed 6",
            &FLOATS,
        ),
    ];
    for (op, make, case, dtypes) in makers {
        for dt in c.dtypes(dtypes) {
            let dummy = random(&mut c.rng, &[], dt, Domain::Normal);
            let case = alloc::format!("{} {case}", dname(dt));
            c.check(op, case, 1, dummy.map(|d| vec![d]), |x| {
                Ok(vec![make(&x[0])?])
            });
        }
    }
}
