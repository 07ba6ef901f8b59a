//! Fuzz target `ops`: the input is a program of tensor operations on a small
//! pool of tensors (constructors, every view, in-place ops, broadcasting
//! binary ops, unary ops, reductions, matmul, indexing, backward).
//!
//! After every step it checks:
//! * no panic (libFuzzer reports one as a crash);
//! * every `Err` has a message that names a fix ([`common::check_err`]);
//! * every tensor's reach stays inside its storage ([`common::check_tensor`]);
//! * results equal a recomputation from deep copies: `f(x) == f(x.deep_clone())`
//!   (values gathered by hand from the raw storage through the layout);
//! * an in-place op on a view changes exactly the view's elements, as the
//!   same op on deep copies does, and a refused one changes nothing (bytes
//!   and version).
#![no_main]

mod common;

use common::{
    MAX_NUMEL, Reader, assert_same, check_err, check_tensor, covered, gather, ok, same_values,
    storage_bytes,
};
use kael_core::{Device, Result, Rng, Tensor, no_grad};
use libfuzzer_sys::fuzz_target;

const POOL: usize = 8;
const STEPS: usize = 48;

fuzz_target!(|data: &[u8]| run(data));

fn run(data: &[u8]) {
    let dev = Device::cpu();
    let mut rng = Rng::new(0);
    let mut r = Reader::new(data);
    let mut pool: Vec<Tensor> = Vec::new();
    let seed = Tensor::arange(0.0f32, 6.0, &dev).and_then(|t| t.reshape(&[2, 3]));
    pool.push(seed.unwrap());
    let mut steps = 0;
    while !r.done() && steps < STEPS {
        steps += 1;
        let family = r.u8() % 10;
        trace!("step {steps}: family {family}, pool {}", pool.len());
        match family {
            0 => constructor(&mut r, &dev, &mut rng, &mut pool),
            1 | 2 => view_op(&mut r, &mut pool),
            3 => inplace_op(&mut r, &mut pool),
            4 => unary_op(&mut r, &mut pool),
            5 => binary_op(&mut r, &mut pool),
            6 => reduce_op(&mut r, &mut pool),
            7 => matmul_op(&mut r, &mut pool),
            8 => index_op(&mut r, &dev, &mut pool),
            _ => backward_op(&mut r, &mut pool),
        }
        for t in &pool {
            check_tensor(t);
        }
    }
}

fn push(pool: &mut Vec<Tensor>, r: &mut Reader, t: Tensor) {
    check_tensor(&t);
    if t.numel() > MAX_NUMEL {
        return;
    }
    if pool.len() < POOL {
        pool.push(t);
    } else {
        let i = r.u8() as usize % POOL;
        pool[i] = t;
    }
}

fn pick(r: &mut Reader, pool: &[Tensor]) -> Tensor {
    pool[r.u8() as usize % pool.len()].clone()
}

/// A deep copy with no autograd history (the reference operand); a leaf
/// that requires grad when `t` does, so autograd refuses the same ops.
fn copy(t: &Tensor) -> Option<Tensor> {
    let c = no_grad(|| t.deep_clone());
    let c = c.and_then(|c| {
        if t.requires_grad() {
            c.requires_grad_(true)
        } else {
            Ok(c)
        }
    });
    match c {
        Ok(c) => {
            check_tensor(&c);
            assert!(c.is_contiguous() && c.offset() == 0);
            if let (Some(a), Some(b)) = (gather(t), gather(&c)) {
                assert!(same_values(t.dtype(), &a, &b), "deep_clone changed values");
            }
            Some(c)
        }
        Err(e) => {
            check_err(&e);
            None
        }
    }
}

// ------------------------------------------------------------ constructors

fn constructor(r: &mut Reader, dev: &Device, rng: &mut Rng, pool: &mut Vec<Tensor>) {
    let shape = r.shape();
    let dt = r.dtype_mostly_float();
    let res = match r.u8() % 8 {
        0 => Tensor::zeros(&shape, dt, dev),
        1 => Tensor::ones(&shape, dt, dev),
        2 => Tensor::full(&shape, r.value(), dt, dev),
        3 => {
            let start = (r.u8() % 9) as f32 - 4.0;
            let end = start + (r.u8() % 9) as f32 - 2.0;
            Tensor::arange(start, end, dev)
        }
        4 => {
            let step = r.value();
            Tensor::arange_step((r.u8() % 5) as i64, (r.u8() % 9) as i64 - 2, step, dev)
        }
        5 => Tensor::eye(r.size(), dt, dev),
        6 => Tensor::randn(&shape, dt, dev, rng),
        _ => {
            let n: usize = shape.iter().product();
            let v: Vec<f32> = (0..n + r.u8() as usize % 2)
                .map(|_| r.value() as f32)
                .collect();
            Tensor::from_slice(&v, &shape, dev)
        }
    };
    if let Some(t) = ok(res) {
        push(pool, r, t);
    }
}

// ------------------------------------------------------------------ views

fn spec(r: &mut Reader, rank: usize) -> Vec<isize> {
    let n = match r.u8() % 4 {
        0 => rank + 1,
        1 if rank > 0 => rank - 1,
        _ => rank,
    };
    (0..n).map(|_| (r.u8() % 7) as isize - 1).collect()
}

fn view_op(r: &mut Reader, pool: &mut Vec<Tensor>) {
    let x = pick(r, pool);
    let Some(xc) = copy(&x) else { return };
    let before = storage_bytes(&x);
    let version = x.version();
    let rank = x.rank();
    // `same` = whether `f(x)` must equal `f(x.deep_clone())` (false for views
    // that depend on the storage, not the values: as_strided, view, view_dtype).
    let (name, out, reference): (&str, Result<Tensor>, Option<Result<Tensor>>) = match r.u8() % 21 {
        0 => {
            let (d, s, l) = (r.dim(), r.size(), r.size());
            ("narrow", x.narrow(d, s, l), Some(xc.narrow(d, s, l)))
        }
        1 => {
            let (d, s, e) = (
                r.dim(),
                (r.u8() % 11) as isize - 5,
                (r.u8() % 11) as isize - 5,
            );
            let st = (r.u8() % 4) as usize;
            ("slice", x.slice(d, s, e, st), Some(xc.slice(d, s, e, st)))
        }
        2 => {
            let (d, i) = (r.dim(), (r.u8() % 9) as isize - 4);
            ("select", x.select(d, i), Some(xc.select(d, i)))
        }
        3 => {
            let (a, b) = (r.dim(), r.dim());
            ("transpose", x.transpose(a, b), Some(xc.transpose(a, b)))
        }
        4 => ("t", x.t(), Some(xc.t())),
        5 => {
            let dims: Vec<isize> = spec(r, rank).iter().map(|_| r.dim()).collect();
            ("permute", x.permute(&dims), Some(xc.permute(&dims)))
        }
        6 => {
            let s = spec(r, rank);
            ("expand", x.expand(&s), Some(xc.expand(&s)))
        }
        7 => {
            let s: Vec<usize> = spec(r, rank).iter().map(|&d| d.max(0) as usize).collect();
            (
                "broadcast_to",
                x.broadcast_to(&s),
                Some(xc.broadcast_to(&s)),
            )
        }
        8 => {
            let d = r.dim();
            ("unsqueeze", x.unsqueeze(d), Some(xc.unsqueeze(d)))
        }
        9 => ("squeeze", x.squeeze(), Some(xc.squeeze())),
        10 => {
            let d = r.dim();
            ("squeeze_dim", x.squeeze_dim(d), Some(xc.squeeze_dim(d)))
        }
        11 => {
            let s = spec(r, rank);
            // view fails on strides that cannot express the shape; when it
            // succeeds it must agree with the copy.
            let out = x.view(&s);
            let reference = out.is_ok().then(|| xc.view(&s));
            ("view", out, reference)
        }
        12 => {
            let s = spec(r, rank);
            ("reshape", x.reshape(&s), Some(xc.reshape(&s)))
        }
        13 => {
            let (a, b) = (r.dim(), r.dim());
            ("flatten", x.flatten(a, b), Some(xc.flatten(a, b)))
        }
        14 => {
            let (d, s, st) = (r.dim(), r.size(), r.size());
            ("unfold", x.unfold(d, s, st), Some(xc.unfold(d, s, st)))
        }
        15 => {
            let (o, a, b) = ((r.u8() % 7) as isize - 3, r.dim(), r.dim());
            ("diagonal", x.diagonal(o, a, b), Some(xc.diagonal(o, a, b)))
        }
        16 => {
            let (n, d) = (r.size(), r.dim());
            let (a, b) = (x.chunk(n, d), xc.chunk(n, d));
            split_like("chunk", r, pool, a, b);
            return;
        }
        17 => {
            let (n, d) = (r.size(), r.dim());
            let (a, b) = if r.bool() {
                (x.split(n, d), xc.split(n, d))
            } else {
                let sizes: Vec<usize> = (0..r.size()).map(|_| r.size()).collect();
                (x.split_sizes(&sizes, d), xc.split_sizes(&sizes, d))
            };
            split_like("split", r, pool, a, b);
            return;
        }
        18 => {
            let n = (r.u8() % 4) as usize;
            let size: Vec<usize> = (0..n).map(|_| r.size()).collect();
            let stride: Vec<usize> = (0..n + (r.u8() % 8 == 0) as usize)
                .map(|_| r.size())
                .collect();
            let off = r.size();
            let out = x.as_strided(&size, &stride, off);
            if let Ok(v) = &out {
                assert_eq!(
                    (v.shape(), &v.strides()[..], v.offset()),
                    (&size[..], &stride[..], off)
                );
            }
            ("as_strided", out, None)
        }
        19 => {
            let dt = r.dtype();
            ("view_dtype", x.view_dtype(dt), None)
        }
        _ => ("detach", x.detach(), Some(xc.detach())),
    };
    // A view never writes.
    assert_eq!(storage_bytes(&x), before, "{name} wrote to its input");
    assert_eq!(x.version(), version, "{name} bumped the version");
    if let Ok(v) = &out {
        check_tensor(v);
        if name != "reshape" && name != "flatten" {
            assert!(v.shares_storage(&x), "{name} did not share storage");
        }
    }
    trace!(
        "view {name} of {:?} -> {:?}",
        x.layout(),
        out.as_ref().map(|t| t.layout())
    );
    if let Some(reference) = reference {
        assert_same(name, &out, &reference);
    }
    if let Some(v) = ok(out) {
        push(pool, r, v);
    }
}

fn split_like(
    name: &str,
    r: &mut Reader,
    pool: &mut Vec<Tensor>,
    a: Result<Vec<Tensor>>,
    b: Result<Vec<Tensor>>,
) {
    match (a, b) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a.len(), b.len(), "{name}: piece counts differ");
            for (x, y) in a.iter().zip(&b) {
                assert_same(name, &Ok(x.clone()), &Ok(y.clone()));
            }
            if let Some(first) = a.into_iter().next() {
                push(pool, r, first);
            }
        }
        (Err(a), Err(b)) => {
            check_err(&a);
            check_err(&b);
        }
        (a, b) => panic!("{name}: {:?} vs {:?} on the deep copy", a.err(), b.err()),
    }
}

// --------------------------------------------------------------- in-place

fn inplace_op(r: &mut Reader, pool: &mut Vec<Tensor>) {
    let dst = pick(r, pool);
    let src = pick(r, pool);
    let kind = r.u8() % 8;
    let (v1, v2) = (r.value(), r.opt_value());
    let before = storage_bytes(&dst);
    let version = dst.version();
    // The reference: the same op on deep copies, made before any write.
    let expected = no_grad(|| -> Option<Tensor> {
        let d = copy(&dst)?;
        let s = copy(&src)?;
        let res = apply_inplace(kind, &d, &s, v1, v2);
        res.ok().map(|_| d)
    });
    let res = apply_inplace(kind, &dst, &src, v1, v2);
    trace!(
        "inplace {kind} dst {:?} (grad {}, view {}) src {:?} (same {}, shares {}) -> {:?}",
        dst.layout(),
        dst.requires_grad(),
        dst.is_view(),
        src.layout(),
        src.is_same(&dst),
        src.shares_storage(&dst),
        res
    );
    match res {
        Ok(()) => {
            assert_eq!(
                dst.version(),
                version + 1,
                "in-place op must bump the version once"
            );
            if let Some(exp) = expected {
                assert_same("in-place", &Ok(dst.clone()), &Ok(exp));
            }
            // Elements outside the destination's view are untouched.
            if let (Some(old), Some(new)) = (before, storage_bytes(&dst)) {
                let es = dst.element_size();
                let mut mask = vec![false; old.len() / es];
                for o in covered(&dst) {
                    mask[o] = true;
                }
                if dst.numel() <= MAX_NUMEL {
                    for (i, m) in mask.iter().enumerate() {
                        if !m {
                            assert_eq!(
                                old[i * es..(i + 1) * es],
                                new[i * es..(i + 1) * es],
                                "in-place op wrote outside its view (element {i})"
                            );
                        }
                    }
                }
            }
        }
        Err(e) => {
            check_err(&e);
            assert_eq!(
                storage_bytes(&dst),
                before,
                "refused in-place op changed bytes: {e:?}"
            );
            assert_eq!(
                dst.version(),
                version,
                "refused in-place op bumped the version"
            );
        }
    }
}

fn apply_inplace(kind: u8, dst: &Tensor, src: &Tensor, v1: f64, v2: Option<f64>) -> Result<()> {
    match kind {
        0 => dst.add_(src),
        1 => dst.sub_(src),
        2 => dst.mul_(src),
        3 => dst.div_(src),
        4 => dst.fill_(v1),
        5 => dst.zero_(),
        6 => dst.copy_(src),
        _ => dst.clamp_(v2, Some(v1)),
    }
}

// ------------------------------------------------------- functional ops

fn unary_op(r: &mut Reader, pool: &mut Vec<Tensor>) {
    let x = pick(r, pool);
    let Some(xc) = copy(&x) else { return };
    let k = r.u8() % 24;
    let (v1, v2) = (r.value(), r.opt_value());
    let dt = r.dtype();
    let f = |t: &Tensor| -> Result<Tensor> {
        match k {
            0 => t.neg(),
            1 => t.abs(),
            2 => t.exp(),
            3 => t.log(),
            4 => t.sqrt(),
            5 => t.sqr(),
            6 => t.recip(),
            7 => t.tanh(),
            8 => t.sigmoid(),
            9 => t.relu(),
            10 => t.gelu(),
            11 => t.gelu_tanh(),
            12 => t.silu(),
            13 => t.sin(),
            14 => t.cos(),
            15 => t.sign(),
            16 => t.erf(),
            17 => t.powf(v1),
            18 => t.clamp(v2, Some(v1)),
            19 => t.affine(v1, v2.unwrap_or(0.0)),
            20 => t.add_scalar(v1),
            21 => t.mul_scalar(v1),
            22 => t.to_dtype(dt),
            _ => t.contiguous(),
        }
    };
    let out = f(&x);
    assert_same("unary", &out, &f(&xc));
    if let Some(t) = ok(out) {
        push(pool, r, t);
    }
}

fn binary_op(r: &mut Reader, pool: &mut Vec<Tensor>) {
    let a = pick(r, pool);
    let b = pick(r, pool);
    let Some(ac) = copy(&a) else { return };
    let Some(bc) = copy(&b) else { return };
    let k = r.u8() % 14;
    let f = |x: &Tensor, y: &Tensor| -> Result<Tensor> {
        match k {
            0 => x.add(y),
            1 => x.sub(y),
            2 => x.mul(y),
            3 => x.div(y),
            4 => x.maximum(y),
            5 => x.minimum(y),
            6 => x.pow(y),
            7 => x.eq(y),
            8 => x.ne(y),
            9 => x.lt(y),
            10 => x.le(y),
            11 => x.gt(y),
            12 => x.ge(y),
            _ => {
                let c = x.gt(y)?;
                c.where_cond(x, y)
            }
        }
    };
    let out = f(&a, &b);
    assert_same("binary", &out, &f(&ac, &bc));
    if let Some(t) = ok(out) {
        push(pool, r, t);
    }
}

fn reduce_op(r: &mut Reader, pool: &mut Vec<Tensor>) {
    let x = pick(r, pool);
    let Some(xc) = copy(&x) else { return };
    let k = r.u8() % 16;
    let dims: Vec<isize> = (0..r.u8() % 3).map(|_| r.dim()).collect();
    let (d, keep) = (r.dim(), r.bool());
    let f = |t: &Tensor| -> Result<Tensor> {
        match k {
            0 => t.sum(&dims, keep),
            1 => t.sum_dim(d, keep),
            2 => t.sum_all(),
            3 => t.mean(&dims, keep),
            4 => t.mean_dim(d, keep),
            5 => t.mean_all(),
            6 => t.prod_dim(d, keep),
            7 => t.max_dim(d, keep),
            8 => t.min_dim(d, keep),
            9 => t.max_all(),
            10 => t.min_all(),
            11 => t.argmax(d, keep),
            12 => t.argmin(d, keep),
            13 => t.softmax(d),
            14 => t.log_softmax(d),
            _ => t.logsumexp(d, keep),
        }
    };
    let out = f(&x);
    assert_same("reduce", &out, &f(&xc));
    if let Some(t) = ok(out) {
        push(pool, r, t);
    }
}

fn matmul_op(r: &mut Reader, pool: &mut Vec<Tensor>) {
    let a = pick(r, pool);
    let b = if r.bool() {
        pick(r, pool)
    } else {
        a.t().unwrap_or_else(|_| a.clone())
    };
    let Some(ac) = copy(&a) else { return };
    let Some(bc) = copy(&b) else { return };
    let k = r.u8() % 4;
    let f = |x: &Tensor, y: &Tensor| -> Result<Tensor> {
        match k {
            0 => x.matmul(y),
            1 => x.mm(y),
            2 => x.bmm(y),
            _ => x.dot(y),
        }
    };
    let out = f(&a, &b);
    assert_same("matmul", &out, &f(&ac, &bc));
    if let Some(t) = ok(out) {
        push(pool, r, t);
    }
}

fn index_op(r: &mut Reader, dev: &Device, pool: &mut Vec<Tensor>) {
    let x = pick(r, pool);
    let y = pick(r, pool);
    let Some(xc) = copy(&x) else { return };
    let Some(yc) = copy(&y) else { return };
    let n = r.size();
    let ids: Vec<i64> = (0..n).map(|_| (r.u8() % 7) as i64 - 1).collect();
    let Some(idx) = ok(Tensor::from_slice(&ids, &[n], dev)) else {
        return;
    };
    let d = r.dim();
    let k = r.u8() % 7;
    let f = |a: &Tensor, b: &Tensor| -> Result<Tensor> {
        match k {
            0 => Tensor::cat(&[a, b], d),
            1 => Tensor::stack(&[a, b], d),
            2 => a.index_select(d, &idx),
            3 => a.gather(d, &idx),
            4 => a.index_add(d, &idx, b),
            5 => a.scatter_add(d, &idx, b),
            _ => Tensor::embedding(a, &idx),
        }
    };
    let (ib, vb) = (storage_bytes(&x), x.version());
    let out = f(&x, &y);
    assert_eq!(
        storage_bytes(&x),
        ib,
        "out-of-place index op wrote to its input"
    );
    assert_eq!(x.version(), vb);
    assert_same("index", &out, &f(&xc, &yc));
    if let Some(t) = ok(out) {
        push(pool, r, t);
    }
}

// ---------------------------------------------------------------- autograd

fn backward_op(r: &mut Reader, pool: &mut Vec<Tensor>) {
    let x = pick(r, pool);
    let other = pick(r, pool);
    let chain: Vec<u8> = (0..1 + r.u8() % 3).map(|_| r.u8()).collect();
    let run = |leaf_src: &Tensor| -> Result<(Tensor, Tensor)> {
        let leaf = no_grad(|| leaf_src.deep_clone())?.requires_grad_(true)?;
        let mut y = leaf.clone();
        for &c in &chain {
            y = match c % 9 {
                0 => y.mul(&y)?,
                1 => y.add(&other.detach()?)?,
                2 => y.tanh()?,
                3 => y.softmax(-1)?,
                4 => y.t()?,
                5 => y.sum_dim(0, c & 16 != 0)?,
                6 => y.mul(&other)?,
                7 => y.narrow(0, 0, 1)?,
                _ => y.exp()?,
            };
        }
        let loss = y.sum_all()?;
        loss.backward()?;
        Ok((leaf, y))
    };
    let res = run(&x);
    trace!(
        "backward chain {chain:?} on {:?} other {:?} -> {:?}",
        x.layout(),
        other.layout(),
        res.as_ref().err()
    );
    match res {
        Ok((leaf, y)) => {
            if let Some(g) = leaf.grad() {
                check_tensor(&g);
                assert_eq!(g.shape(), leaf.shape(), "grad shape differs from its leaf");
                assert_eq!(g.dtype(), leaf.dtype());
                // Determinism: the same program from a fresh deep copy gives
                // the same gradient.
                if let Ok((leaf2, _)) = run(&x) {
                    let g2 = leaf2.grad();
                    assert!(g2.is_some(), "second run lost the gradient");
                    assert_same("backward", &Ok(g), &Ok(g2.unwrap()));
                }
            }
            push(pool, r, y);
            push(pool, r, leaf);
        }
        Err(e) => check_err(&e),
    }
}
