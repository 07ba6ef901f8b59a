//! Index ops (`index_select`, `gather`, `index_add`, `scatter_add`,
//! `embedding`), joins (`cat`, `stack`), and the refusal of bad index
//! values, which only a kernel can see.
//!
//! Index tensors hold repeats (so `index_add`/`scatter_add` accumulate),
//! come as I64 and I32, and are strided in some cases too.

use super::cases::{Arg, Domain, LAYOUTS, Layout, describe, dname, index_tensor, indices, random};
use super::check::Checker;
use super::elementwise::NUMERIC;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::Result;
use crate::tensor::Tensor;
use alloc::vec;
use alloc::vec::Vec;

/// The index dtype used for a dim: both kinds get exercised.
fn index_dtype(dim: isize) -> DType {
    if dim == 0 { DType::I64 } else { DType::I32 }
}

/// `shape` with `dim` (0 or -1) resized to `n`.
fn resized(shape: &[usize], dim: isize, n: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    let d = if dim < 0 { s.len() - 1 } else { 0 };
    s[d] = n;
    s
}

fn size_of_dim(shape: &[usize], dim: isize) -> usize {
    if dim < 0 {
        shape[shape.len() - 1]
    } else {
        shape[0]
    }
}

pub(super) fn run(c: &mut Checker<'_>) {
    let ranked: Vec<Layout> = LAYOUTS
        .into_iter()
        .filter(|l| *l != Layout::Rank0)
        .collect();
    for dt in c.dtypes(&DType::ALL) {
        for &l in &ranked {
            for dim in [0isize, -1] {
                select_gather(c, dt, l, dim);
                if NUMERIC.contains(&dt) {
                    accumulate(c, dt, l, dim);
                }
            }
        }
        joins(c, dt);
        if NUMERIC.contains(&dt) {
            embedding(c, dt);
        }
    }
    // strided index tensors
    if c.wants(&[DType::F32]) {
        let inputs = random(&mut c.rng, &[3, 4], DType::F32, Domain::Normal)
            .and_then(|x| Ok(vec![x, index_tensor(&mut c.rng, &[10], 4, DType::I64)?]));
        c.check(
            "index_select",
            "f32 [3, 4], dim 1, indices [10][::2]".into(),
            1,
            inputs,
            |x| Ok(vec![x[0].index_select(1, &x[1].slice(0, 0, 10, 2)?)?]),
        );
        let inputs = random(&mut c.rng, &[3, 4], DType::F32, Domain::Normal)
            .and_then(|x| Ok(vec![x, index_tensor(&mut c.rng, &[2, 3], 4, DType::I64)?]));
        c.check(
            "gather",
            "f32 [3, 4], dim 1, index [2, 3].t()".into(),
            1,
            inputs,
            |x| Ok(vec![x[0].gather(1, &x[1].t()?)?]),
        );
    }
}

fn select_gather(c: &mut Checker<'_>, dt: DType, l: Layout, dim: isize) {
    let size = size_of_dim(l.shape(), dim);
    let idt = index_dtype(dim);
    let n = if size == 0 { 0 } else { 5 };
    let case = alloc::format!(
        "{}, dim {dim}, {n} {} indices",
        describe(dt, l),
        super::cases::dname(idt)
    );
    let inputs = random(&mut c.rng, l.base_shape(), dt, Domain::Normal)
        .and_then(|x| Ok(vec![x, indices(&mut c.rng, n, size, idt)?]));
    c.check("index_select", case, 1, inputs, |x| {
        Ok(vec![l.view(&x[0])?.index_select(dim, &x[1])?])
    });
    let ishape = resized(l.shape(), dim, if size == 0 { 0 } else { 2 });
    let case = alloc::format!(
        "{}, dim {dim}, index {ishape:?} {}",
        describe(dt, l),
        super::cases::dname(idt)
    );
    let inputs = random(&mut c.rng, l.base_shape(), dt, Domain::Normal)
        .and_then(|x| Ok(vec![x, index_tensor(&mut c.rng, &ishape, size, idt)?]));
    c.check("gather", case, 1, inputs, |x| {
        Ok(vec![l.view(&x[0])?.gather(dim, &x[1])?])
    });
}

fn accumulate(c: &mut Checker<'_>, dt: DType, l: Layout, dim: isize) {
    let size = size_of_dim(l.shape(), dim);
    let idt = index_dtype(dim);
    let n = if size == 0 { 0 } else { 5 };
    let src_shape = resized(l.shape(), dim, n);
    let case = alloc::format!(
        "{}, dim {dim}, {n} indices, src {src_shape:?}",
        describe(dt, l)
    );
    let inputs = random(&mut c.rng, l.base_shape(), dt, Domain::Normal).and_then(|x| {
        let i = indices(&mut c.rng, n, size, idt)?;
        Ok(vec![
            x,
            i,
            random(&mut c.rng, &src_shape, dt, Domain::Normal)?,
        ])
    });
    c.check("index_add", case, n + 1, inputs, |x| {
        Ok(vec![l.view(&x[0])?.index_add(dim, &x[1], &x[2])?])
    });
    let ishape = resized(l.shape(), dim, if size == 0 { 0 } else { 2 });
    let case = alloc::format!("{}, dim {dim}, index {ishape:?}", describe(dt, l));
    let inputs = random(&mut c.rng, l.base_shape(), dt, Domain::Normal).and_then(|x| {
        let i = index_tensor(&mut c.rng, &ishape, size, idt)?;
        Ok(vec![x, i, random(&mut c.rng, &ishape, dt, Domain::Normal)?])
    });
    c.check("scatter_add", case, 3, inputs, |x| {
        Ok(vec![l.view(&x[0])?.scatter_add(dim, &x[1], &x[2])?])
    });
}

fn embedding(c: &mut Checker<'_>, dt: DType) {
    type View = fn(&Tensor) -> Result<Tensor>;
    let weights: [(&[usize], View, &str); 2] = [
        (&[5, 3], |t| Ok(t.clone()), "[5, 3]"),
        (&[3, 5], |t| t.t(), "[3, 5].t()"),
    ];
    let ids: [(&[usize], View, &str); 4] = [
        (&[], |t| Ok(t.clone()), "rank 0"),
        (&[4], |t| Ok(t.clone()), "[4]"),
        (&[2, 3], |t| Ok(t.clone()), "[2, 3]"),
        (&[8], |t| t.slice(0, 0, 8, 2), "[8][::2]"),
    ];
    for (wshape, wview, wname) in weights {
        for (ishape, iview, iname) in ids {
            for idt in [DType::I64, DType::I32] {
                let case = alloc::format!(
                    "{} weight {wname}, ids {iname} {}",
                    super::cases::dname(dt),
                    super::cases::dname(idt)
                );
                let inputs = random(&mut c.rng, wshape, dt, Domain::Normal)
                    .and_then(|w| Ok(vec![w, index_tensor(&mut c.rng, ishape, 5, idt)?]));
                c.check("embedding", case, 1, inputs, |x| {
                    Ok(vec![Tensor::embedding(&wview(&x[0])?, &iview(&x[1])?)?])
                });
            }
        }
    }
}

fn joins(c: &mut Checker<'_>, dt: DType) {
    for l in LAYOUTS {
        let inputs = random(&mut c.rng, l.base_shape(), dt, Domain::Normal).and_then(|a| {
            Ok(vec![
                a,
                random(&mut c.rng, l.base_shape(), dt, Domain::Normal)?,
            ])
        });
        for dim in [0isize, -1] {
            let case = alloc::format!("{} x2, dim {dim}", describe(dt, l));
            if l != Layout::Rank0 {
                let inputs = inputs.clone();
                c.check("cat", case.clone(), 1, inputs, |x| {
                    Ok(vec![Tensor::cat(&[&l.view(&x[0])?, &l.view(&x[1])?], dim)?])
                });
            }
            if l == Layout::Rank8 {
                continue; // stacking rank 8 would make rank 9
            }
            c.check("stack", case, 1, inputs.clone(), |x| {
                Ok(vec![Tensor::stack(
                    &[&l.view(&x[0])?, &l.view(&x[1])?],
                    dim,
                )?])
            });
        }
    }
    // mixed layouts of one shape, and an empty part
    let args = [
        Layout::Contiguous,
        Layout::Transposed,
        Layout::Stepped,
        Layout::Broadcast,
    ];
    let mut inputs: Result<Vec<Tensor>> = Ok(Vec::new());
    for a in args {
        inputs = inputs.and_then(|mut v| {
            v.push(random(&mut c.rng, a.base_shape(), dt, Domain::Normal)?);
            Ok(v)
        });
    }
    let inputs = inputs.and_then(|mut v| {
        v.push(random(&mut c.rng, &[0, 4], dt, Domain::Normal)?);
        Ok(v)
    });
    for dim in [0isize, 1] {
        let case = alloc::format!(
            "{} contiguous, transposed, step-2 slice, broadcast [3, 4], [0, 4], dim {dim}",
            dname(dt)
        );
        c.check("cat", case, 1, inputs.clone(), |x| {
            let mut parts = Vec::new();
            for (i, a) in args.iter().enumerate() {
                parts.push(Arg::View(*a).view(&x[i])?);
            }
            if dim == 0 {
                parts.push(x[4].clone());
            }
            let refs: Vec<&Tensor> = parts.iter().collect();
            Ok(vec![Tensor::cat(&refs, dim)?])
        });
    }
}

/// Bad index values: out of range and negative, I64 and I32, for every
/// index op. Both devices must refuse them with the same kind of error.
pub(super) fn errors(c: &mut Checker<'_>) {
    if !c.wants(&[DType::F32]) {
        return;
    }
    let cpu = Device::cpu();
    for idt in [DType::I64, DType::I32] {
        for bad in [4i64, -1] {
            let idx = |shape: &[usize], v: &[i64]| -> Result<Tensor> {
                Tensor::from_slice(v, shape, &cpu)?.to_dtype(idt)
            };
            let src = |rng: &mut crate::rng::Rng| random(rng, &[3, 4], DType::F32, Domain::Normal);
            let case = alloc::format!("f32 [3, 4], {} index {bad}", dname(idt));
            let inputs = src(&mut c.rng).and_then(|x| Ok(vec![x, idx(&[3], &[0, bad, 1])?]));
            c.refused(
                "index_select",
                alloc::format!("{case}, dim 1"),
                inputs,
                |x| Ok(vec![x[0].index_select(1, &x[1])?]),
            );
            let inputs =
                src(&mut c.rng).and_then(|x| Ok(vec![x, idx(&[3, 2], &[0, 1, 2, bad, 3, 0])?]));
            c.refused("gather", alloc::format!("{case}, dim 1"), inputs, |x| {
                Ok(vec![x[0].gather(1, &x[1])?])
            });
            let inputs = src(&mut c.rng).and_then(|x| {
                let s = random(&mut c.rng, &[3, 3], DType::F32, Domain::Normal)?;
                Ok(vec![x, idx(&[3], &[bad, 0, 1])?, s])
            });
            c.refused("index_add", alloc::format!("{case}, dim 1"), inputs, |x| {
                Ok(vec![x[0].index_add(1, &x[1], &x[2])?])
            });
            let inputs = src(&mut c.rng).and_then(|x| {
                let s = random(&mut c.rng, &[3, 2], DType::F32, Domain::Normal)?;
                Ok(vec![x, idx(&[3, 2], &[0, 1, 2, 3, 1, bad])?, s])
            });
            c.refused(
                "scatter_add",
                alloc::format!("{case}, dim 1"),
                inputs,
                |x| Ok(vec![x[0].scatter_add(1, &x[1], &x[2])?]),
            );
            let bad_id = if bad > 0 { 5 } else { bad };
            let case = alloc::format!("f32 weight [5, 3], {} id {bad_id}", dname(idt));
            let inputs = random(&mut c.rng, &[5, 3], DType::F32, Domain::Normal)
                .and_then(|w| Ok(vec![w, idx(&[2, 2], &[0, 4, bad_id, 1])?]));
            c.refused("embedding", case, inputs, |x| {
                Ok(vec![Tensor::embedding(&x[0], &x[1])?])
            });
        }
    }
}
