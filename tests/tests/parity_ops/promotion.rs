//! The type-promotion and advanced-indexing cases of the parity file
//! (issue 46; `tests/data/parity/gen_promote.py`, `gen_index.py`): ops named as the generator names
//! them, with numbers kept as the kind (int, float, bool) PyTorch saw.

use super::Arg;
use kael_core::tensor::Index;
use kael_core::{Number, Result, Tensor};

/// A key written as gen_index.py writes it: `tK` input K, `i<n>` an int,
/// `a:b:c` a slice, `N` a new axis, `E` an ellipsis, joined by `;`.
fn key(a: &Arg, x: &[Tensor]) -> Vec<Index> {
    let Arg::S(spec) = a else {
        panic!("expected a key, got {a:?}")
    };
    spec.split(';')
        .map(|it| {
            if let Some(k) = it.strip_prefix('t') {
                Index::Tensor(x[k.parse::<usize>().unwrap()].clone())
            } else if let Some(i) = it.strip_prefix('i') {
                Index::Int(i.parse().unwrap())
            } else if it == "N" {
                Index::NewAxis
            } else if it == "E" {
                Index::Ellipsis
            } else {
                let mut p = it.split(':').map(|v| v.parse::<isize>().ok());
                let (start, stop) = (p.next().flatten(), p.next().flatten());
                let step = p.next().flatten().unwrap_or(1) as usize;
                Index::Slice { start, stop, step }
            }
        })
        .collect()
}

/// A number argument as the kind of Python number the generator passed.
pub fn num(a: &Arg) -> Number {
    match a {
        Arg::I(v) => Number::Int(*v),
        Arg::F(v) => Number::Float(*v),
        Arg::B(v) => Number::Bool(*v),
        _ => panic!("expected a number, got {a:?}"),
    }
}

/// The promotion ops, or `None` for an op this module does not map.
pub fn run(op: &str, a: &[Arg], x: &[Tensor]) -> Option<Result<Vec<Tensor>>> {
    let one = |t: Result<Tensor>| Some(t.map(|t| vec![t]));
    if let Some(m) = op.strip_prefix("inplace2:") {
        return Some(inplace(m, x));
    }
    if let Some(m) = op.strip_prefix("inplace_number:") {
        return Some(inplace_number(m, num(&a[0]), &x[0]));
    }
    if let Some(m) = op.strip_prefix("cmp_number:") {
        let n = num(&a[0]);
        return one(x[0].number_operand("compare", n).and_then(|s| match m {
            "ge" => x[0].ge(&s),
            "eq" => x[0].eq(&s),
            other => panic!("no comparison mapping for {other}"),
        }));
    }
    match op {
        "floor_divide" => one(x[0].floor_divide(&x[1])),
        "bitwise_xor" => one(x[0].bitwise_xor(&x[1])),
        "bitwise_left_shift" => one(x[0].bitwise_left_shift(&x[1])),
        "bitwise_right_shift" => one(x[0].bitwise_right_shift(&x[1])),
        "pow_scalar" => one(x[0].pow_scalar(num(&a[0]))),
        "index" => one(x[0].index(&key(&a[0], x))),
        "index_put" => {
            let accumulate = matches!(a[1], Arg::B(true));
            let z = match x[0].deep_clone() {
                Ok(z) => z,
                Err(e) => return Some(Err(e)),
            };
            let v = &x[x.len() - 1];
            one(z.index_put_(&key(&a[0], x), v, accumulate).map(|()| z))
        }
        _ => None,
    }
}

/// `z = x.clone(); z.op(y); z`.
fn inplace(op: &str, x: &[Tensor]) -> Result<Vec<Tensor>> {
    let z = x[0].deep_clone()?;
    match op {
        "add_" => z.add_(&x[1])?,
        "mul_" => z.mul_(&x[1])?,
        "div_" => z.div_(&x[1])?,
        other => panic!("no in-place mapping for {other}"),
    }
    Ok(vec![z])
}

/// `z = x.clone(); z.op(n); z`.
fn inplace_number(op: &str, n: Number, x: &Tensor) -> Result<Vec<Tensor>> {
    let z = x.deep_clone()?;
    match op {
        "add_scalar_" => z.add_scalar_(n)?,
        "mul_scalar_" => z.mul_scalar_(n)?,
        "div_scalar_" => z.div_scalar_(n)?,
        other => panic!("no in-place mapping for {other}"),
    }
    Ok(vec![z])
}
