//! Backward checks: the gradients of every differentiable op's inputs.
//!
//! Each check makes the chosen inputs leaves that require grad (on each
//! device), runs the op through the layout's view, backpropagates
//! `sum(out * w)` with a fixed random `w` (so every output element gets a
//! different weight), and compares the outputs and the leaves' gradients.
//! The backward pass runs on the device too: the gradient kernels
//! (`scatter_add` for `gather`, `index_add` for `index_select`, reductions
//! for broadcasting, ...) are under test as well.

use super::cases::{
    Arg, Domain, LAYOUTS, Layout, describe, describe_args, index_tensor, indices, random,
};
use super::check::Checker;
use super::elementwise::{BINARY, UNARY, binary_pairs};
use super::matmul::{PRODUCTS, apply};
use super::reduce::REDUCTIONS;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::rng::Rng;
use crate::tensor::Tensor;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// Runs `f` on `inputs` with those in `grad` as leaves requiring grad,
/// backpropagates a weighted sum of the outputs, and checks the outputs
/// and the gradients.
fn check_grad(
    c: &mut Checker<'_>,
    op: &'static str,
    case: String,
    k: usize,
    inputs: Result<Vec<Tensor>>,
    grad: &[bool],
    f: impl Fn(&[Tensor]) -> Result<Vec<Tensor>>,
) {
    let mut case = case;
    case.insert_str(0, "backward, ");
    c.check(op, case, k, inputs, |x| {
        let mut leaves = Vec::with_capacity(x.len());
        for (i, t) in x.iter().enumerate() {
            let wants = grad.get(i).copied().unwrap_or(false);
            leaves.push(t.clone().requires_grad_(wants)?);
        }
        let outs = f(&leaves)?;
        let mut loss: Option<Tensor> = None;
        for (j, o) in outs.iter().enumerate() {
            // the same weights on both devices: drawn on the CPU from a fixed seed
            let mut rng = Rng::new(0x77 + j as u64);
            let w = Tensor::randn(o.shape(), o.dtype(), &Device::cpu(), &mut rng)?
                .to_device(&o.device())?;
            let term = o.mul(&w)?.sum_all()?;
            loss = Some(match loss {
                None => term,
                Some(l) => l.add(&term)?,
            });
        }
        loss.ok_or(NO_GRAD)?.backward()?;
        let mut result = outs;
        for (leaf, _) in leaves.iter().zip(grad).filter(|(_, g)| **g) {
            result.push(leaf.grad().ok_or(NO_GRAD)?);
        }
        Ok(result)
    });
}

const NO_GRAD: Error = Error::Autograd {
    op: "conformance",
    reason: "no gradient reached an input that requires grad",
};

const GRAD_DTYPES: [DType; 2] = [DType::F32, DType::F64];

pub(super) fn run(c: &mut Checker<'_>) {
    elementwise(c);
    reductions(c);
    products(c);
    index(c);
    in_place(c);
}

fn elementwise(c: &mut Checker<'_>) {
    for dt in c.dtypes(&GRAD_DTYPES) {
        for u in UNARY {
            for layout in LAYOUTS {
                let x = random(&mut c.rng, layout.base_shape(), dt, u.domain);
                let mut case = describe(dt, layout);
                if !u.args.is_empty() {
                    case.push_str(", ");
                    case.push_str(u.args);
                }
                check_grad(c, u.op, case, 1, x.map(|x| vec![x]), &[true], |x| {
                    Ok(vec![(u.f)(&layout.view(&x[0])?)?])
                });
            }
        }
        // casts and copies pass gradients through
        for layout in LAYOUTS {
            let to = if dt == DType::F32 {
                DType::F64
            } else {
                DType::F32
            };
            let x = random(&mut c.rng, layout.base_shape(), dt, Domain::Normal);
            let case = alloc::format!("{} -> {}", describe(dt, layout), super::cases::dname(to));
            check_grad(c, "to_dtype", case, 1, x.map(|x| vec![x]), &[true], |x| {
                Ok(vec![layout.view(&x[0])?.to_dtype(to)?])
            });
            let x = random(&mut c.rng, layout.base_shape(), dt, Domain::Normal);
            check_grad(
                c,
                "deep_clone",
                describe(dt, layout),
                1,
                x.map(|x| vec![x]),
                &[true],
                |x| Ok(vec![layout.view(&x[0])?.deep_clone()?]),
            );
        }
    }
    if !c.wants(&[DType::F32]) {
        return;
    }
    let dt = DType::F32;
    for b in BINARY.iter().filter(|b| b.floats) {
        for (a, o) in binary_pairs() {
            let inputs = a
                .random(&mut c.rng, dt, b.domains.0)
                .and_then(|x| Ok(vec![x, o.random(&mut c.rng, dt, b.domains.1)?]));
            check_grad(
                c,
                b.op,
                describe_args(dt, &[a, o]),
                1,
                inputs,
                &[true, true],
                |x| Ok(vec![(b.f)(&a.view(&x[0])?, &o.view(&x[1])?)?]),
            );
        }
    }
    let mut triples: Vec<[Arg; 3]> = LAYOUTS.iter().map(|&l| [Arg::View(l); 3]).collect();
    triples.push([Arg::Col, Arg::Row(Layout::Contiguous), Arg::Scalar]);
    for args in triples {
        let [a, t, f] = args;
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
        let case = alloc::format!("cond bool | {}", describe_args(dt, &args));
        check_grad(
            c,
            "where_cond",
            case,
            1,
            inputs,
            &[false, true, true],
            |x| {
                Ok(vec![
                    a.view(&x[0])?
                        .where_cond(&t.view(&x[1])?, &f.view(&x[2])?)?,
                ])
            },
        );
    }
}

fn reductions(c: &mut Checker<'_>) {
    for dt in c.dtypes(&GRAD_DTYPES) {
        // argmax/argmin give indices, prod_dim has no backward
        for red in REDUCTIONS
            .iter()
            .filter(|r| !matches!(r.op, "argmax" | "argmin" | "prod_dim"))
        {
            for layout in LAYOUTS {
                let x = random(&mut c.rng, layout.base_shape(), dt, red.domain);
                let mut case = describe(dt, layout);
                if !red.args.is_empty() {
                    case.push_str(", ");
                    case.push_str(red.args);
                }
                let k = layout.shape().iter().product();
                check_grad(c, red.op, case, k, x.map(|x| vec![x]), &[true], |x| {
                    Ok(vec![(red.f)(&layout.view(&x[0])?)?])
                });
            }
        }
    }
}

fn products(c: &mut Checker<'_>) {
    for dt in c.dtypes(&GRAD_DTYPES) {
        for pr in &PRODUCTS {
            let inputs = random(&mut c.rng, pr.lhs.0, dt, Domain::Unit)
                .and_then(|a| Ok(vec![a, random(&mut c.rng, pr.rhs.0, dt, Domain::Unit)?]));
            let case = alloc::format!("{} {}", super::cases::dname(dt), pr.case);
            // gradients accumulate over the outer sizes too (at most 40 here)
            check_grad(c, pr.op, case, 40, inputs, &[true, true], |x| {
                Ok(vec![apply(
                    pr.op,
                    &(pr.lhs.1)(&x[0])?,
                    &(pr.rhs.1)(&x[1])?,
                )?])
            });
        }
    }
}

fn index(c: &mut Checker<'_>) {
    if !c.wants(&[DType::F32]) {
        return;
    }
    let dt = DType::F32;
    let layouts = [
        Layout::Contiguous,
        Layout::Transposed,
        Layout::Stepped,
        Layout::Broadcast,
        Layout::Rank8,
    ];
    for l in layouts {
        for dim in [0isize, -1] {
            let shape = l.shape();
            let d = if dim < 0 { shape.len() - 1 } else { 0 };
            let size = shape[d];
            let case = alloc::format!("{}, dim {dim}", describe(dt, l));
            let inputs = random(&mut c.rng, l.base_shape(), dt, Domain::Normal)
                .and_then(|x| Ok(vec![x, indices(&mut c.rng, 5, size, DType::I64)?]));
            check_grad(
                c,
                "index_select",
                case.clone(),
                5,
                inputs,
                &[true, false],
                |x| Ok(vec![l.view(&x[0])?.index_select(dim, &x[1])?]),
            );
            let mut ishape = shape.to_vec();
            ishape[d] = 2;
            let inputs = random(&mut c.rng, l.base_shape(), dt, Domain::Normal).and_then(|x| {
                Ok(vec![
                    x,
                    index_tensor(&mut c.rng, &ishape, size, DType::I64)?,
                ])
            });
            check_grad(c, "gather", case.clone(), 2, inputs, &[true, false], |x| {
                Ok(vec![l.view(&x[0])?.gather(dim, &x[1])?])
            });
            let inputs = random(&mut c.rng, l.base_shape(), dt, Domain::Normal).and_then(|x| {
                let i = index_tensor(&mut c.rng, &ishape, size, DType::I64)?;
                Ok(vec![x, i, random(&mut c.rng, &ishape, dt, Domain::Normal)?])
            });
            check_grad(
                c,
                "scatter_add",
                case.clone(),
                3,
                inputs,
                &[true, false, true],
                |x| Ok(vec![l.view(&x[0])?.scatter_add(dim, &x[1], &x[2])?]),
            );
            let mut sshape = shape.to_vec();
            sshape[d] = 5;
            let inputs = random(&mut c.rng, l.base_shape(), dt, Domain::Normal).and_then(|x| {
                let i = indices(&mut c.rng, 5, size, DType::I64)?;
                Ok(vec![x, i, random(&mut c.rng, &sshape, dt, Domain::Normal)?])
            });
            check_grad(c, "index_add", case, 6, inputs, &[true, false, true], |x| {
                Ok(vec![l.view(&x[0])?.index_add(dim, &x[1], &x[2])?])
            });
        }
        for dim in [0isize, -1] {
            let case = alloc::format!("{} x2, dim {dim}", describe(dt, l));
            // fresh inputs per check: a leaf shared by two checks would
            // accumulate both gradients on the reference side
            let pair = |rng: &mut Rng| {
                random(rng, l.base_shape(), dt, Domain::Normal)
                    .and_then(|a| Ok(vec![a, random(rng, l.base_shape(), dt, Domain::Normal)?]))
            };
            let inputs = pair(&mut c.rng);
            check_grad(c, "cat", case.clone(), 1, inputs, &[true, true], |x| {
                Ok(vec![Tensor::cat(&[&l.view(&x[0])?, &l.view(&x[1])?], dim)?])
            });
            let inputs = pair(&mut c.rng);
            if l == Layout::Rank8 {
                continue; // stacking rank 8 would make rank 9
            }
            check_grad(c, "stack", case, 1, inputs, &[true, true], |x| {
                Ok(vec![Tensor::stack(
                    &[&l.view(&x[0])?, &l.view(&x[1])?],
                    dim,
                )?])
            });
        }
    }
    for (shape, name) in [(&[4usize][..], "[4]"), (&[2, 3][..], "[2, 3]")] {
        let inputs = random(&mut c.rng, &[5, 3], dt, Domain::Normal)
            .and_then(|w| Ok(vec![w, index_tensor(&mut c.rng, shape, 5, DType::I64)?]));
        let case = alloc::format!("f32 weight [5, 3], ids {name}");
        check_grad(c, "embedding", case, 6, inputs, &[true, false], |x| {
            Ok(vec![Tensor::embedding(&x[0], &x[1])?])
        });
    }
}

/// In-place ops on a non-leaf (`y = x * 1`, then written in place): the
/// gradients of `x` and of the operand. Autograd refuses in-place writes
/// through a *view* of a tensor that requires grad, so the destination is
/// the whole tensor; the operand takes the strided layouts instead.
fn in_place(c: &mut Checker<'_>) {
    if !c.wants(&[DType::F32]) {
        return;
    }
    let dt = DType::F32;
    type InPlaceFn = fn(&Tensor, &Tensor) -> Result<()>;
    let ops: [(&'static str, InPlaceFn, Domain); 5] = [
        ("add_", Tensor::add_, Domain::Normal),
        ("sub_", Tensor::sub_, Domain::Normal),
        ("mul_", Tensor::mul_, Domain::Normal),
        ("div_", Tensor::div_, Domain::NonZero),
        ("copy_", Tensor::copy_, Domain::Normal),
    ];
    for l in LAYOUTS {
        for (op, f, domain) in ops {
            // destination: contiguous, of the layout's shape; operand: the layout's view
            let inputs = random(&mut c.rng, l.shape(), dt, Domain::NonZero)
                .and_then(|x| Ok(vec![x, random(&mut c.rng, l.base_shape(), dt, domain)?]));
            let case = alloc::format!("{} {:?} | {}", super::cases::dname(dt), l.shape(), l.name());
            check_grad(c, op, case, 1, inputs, &[true, true], |x| {
                let y = x[0].mul_scalar(1.0)?;
                f(&y, &l.view(&x[1])?)?;
                Ok(vec![y])
            });
        }
        let case = alloc::format!("{} {:?}", super::cases::dname(dt), l.shape());
        let x = random(&mut c.rng, l.shape(), dt, Domain::Normal);
        check_grad(
            c,
            "clamp_",
            case.clone(),
            1,
            x.map(|x| vec![x]),
            &[true],
            |x| {
                let y = x[0].mul_scalar(1.0)?;
                y.clamp_(Some(-0.5), Some(0.5))?;
                Ok(vec![y])
            },
        );
        let x = random(&mut c.rng, l.shape(), dt, Domain::Normal);
        check_grad(c, "fill_", case, 1, x.map(|x| vec![x]), &[true], |x| {
            let y = x[0].mul_scalar(2.0)?;
            y.fill_(1.0)?;
            Ok(vec![y])
        });
    }
}
