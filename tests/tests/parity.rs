//! PyTorch parity: every case of `tests/data/parity/cases.txt` (generated
//! by `tests/data/parity/gen.py` with PyTorch, pinned there) run on every
//! device: the same outputs (dtype, shape, values) and the same gradients
//! of `sum(out * w)`, or an `Err` where PyTorch refuses.
//!
//! Tolerances (the generator's docstring states the same):
//! f32 values `1e-5 + 1e-5 |want|`, f32 gradients `1e-4 + 1e-4 |want|`;
//! f64 values `1e-11 + 1e-11 |want|`, f64 gradients `1e-9 + 1e-9 |want|`;
//! integers and bools exact; NaN matches NaN; infinities match by sign.

mod common;
#[path = "parity_ops/promotion.rs"]
mod promotion;

use kael_core::autograd::{self, BackwardOptions};
use kael_core::nn::{Reduction, cross_entropy, mse_loss, nll_loss};
use kael_core::{DType, Device, Result, Tensor};

const CASES: &str = include_str!("../data/parity/cases.txt");

#[derive(Debug, Clone)]
enum Arg {
    I(i64),
    F(f64),
    L(Vec<isize>),
    B(bool),
    S(String),
    N,
}

#[derive(Debug, Clone)]
struct Data {
    dtype: DType,
    shape: Vec<usize>,
    values: Vec<f64>,
}

#[derive(Debug, Default)]
struct Case {
    id: usize,
    op: String,
    args: Vec<Arg>,
    inputs: Vec<(Data, bool)>,
    outs: Vec<Data>,
    w: Option<Data>,
    grads: Vec<(usize, Option<Data>)>,
    err: bool,
    /// Why kael refuses, deliberately, what PyTorch computes (`wrap`: an
    /// integer number the tensor's dtype does not hold, which PyTorch
    /// wraps); kael must return an `Err`.
    refuses: Option<String>,
}

fn dtype_of(s: &str) -> DType {
    match s {
        "f32" => DType::F32,
        "f64" => DType::F64,
        "i64" => DType::I64,
        "i32" => DType::I32,
        "i16" => DType::I16,
        "i8" => DType::I8,
        "u8" => DType::U8,
        "bool" => DType::Bool,
        _ => panic!("unknown dtype {s}"),
    }
}

fn num(s: &str) -> f64 {
    match s {
        "nan" => f64::NAN,
        "inf" => f64::INFINITY,
        "-inf" => f64::NEG_INFINITY,
        _ => s.parse().unwrap_or_else(|_| panic!("bad number {s}")),
    }
}

fn data(dtype: DType, toks: &[&str]) -> Data {
    let shape = if toks[0] == "-" {
        vec![]
    } else {
        toks[0].split(',').map(|d| d.parse().unwrap()).collect()
    };
    Data {
        dtype,
        shape,
        values: toks[1..].iter().map(|v| num(v)).collect(),
    }
}

fn parse() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut cur = Case::default();
    for line in CASES.lines() {
        let toks: Vec<&str> = line.split_whitespace().collect();
        match toks.first().copied() {
            None | Some("#") => {}
            Some("case") => {
                cur = Case {
                    id: toks[1].parse().unwrap(),
                    op: toks[2].to_string(),
                    args: toks[3..].iter().map(|a| parse_arg(a)).collect(),
                    ..Case::default()
                }
            }
            Some("in") => cur
                .inputs
                .push((data(dtype_of(toks[1]), &toks[3..]), toks[2] == "1")),
            Some("out") => cur.outs.push(data(dtype_of(toks[1]), &toks[2..])),
            Some("w") => cur.w = Some(data(DType::F64, &toks[1..])),
            Some("grad") => {
                let k = toks[1].parse().unwrap();
                let g = (toks[2] != "none").then(|| data(DType::F64, &toks[2..]));
                cur.grads.push((k, g));
            }
            Some("err") => cur.err = true,
            Some("refuses") => cur.refuses = Some(toks[1].to_string()),
            Some("end") => cases.push(std::mem::take(&mut cur)),
            Some(t) => panic!("unknown line kind {t}"),
        }
    }
    cases
}

fn parse_arg(a: &str) -> Arg {
    if a == "n" {
        return Arg::N;
    }
    let (tag, v) = a.split_once(':').unwrap();
    match tag {
        "i" => Arg::I(v.parse().unwrap()),
        "f" => Arg::F(num(v)),
        "b" => Arg::B(v == "1"),
        "s" => Arg::S(v.to_string()),
        "l" if v == "-" => Arg::L(vec![]),
        "l" => Arg::L(v.split(',').map(|x| x.parse().unwrap()).collect()),
        _ => panic!("bad arg {a}"),
    }
}

fn make(d: &Data, dev: &Device) -> Result<Tensor> {
    let v = &d.values;
    match d.dtype {
        DType::F32 => Tensor::from_slice(
            &v.iter().map(|&x| x as f32).collect::<Vec<_>>(),
            &d.shape,
            dev,
        ),
        DType::F64 => Tensor::from_slice(v, &d.shape, dev),
        DType::I64 => Tensor::from_slice(
            &v.iter().map(|&x| x as i64).collect::<Vec<_>>(),
            &d.shape,
            dev,
        ),
        DType::I32 => Tensor::from_slice(
            &v.iter().map(|&x| x as i32).collect::<Vec<_>>(),
            &d.shape,
            dev,
        ),
        DType::I16 => Tensor::from_slice(
            &v.iter().map(|&x| x as i16).collect::<Vec<_>>(),
            &d.shape,
            dev,
        ),
        DType::I8 => Tensor::from_slice(
            &v.iter().map(|&x| x as i8).collect::<Vec<_>>(),
            &d.shape,
            dev,
        ),
        DType::U8 => Tensor::from_slice(
            &v.iter().map(|&x| x as u8).collect::<Vec<_>>(),
            &d.shape,
            dev,
        ),
        DType::Bool => Tensor::from_slice(
            &v.iter().map(|&x| x != 0.0).collect::<Vec<_>>(),
            &d.shape,
            dev,
        ),
        other => panic!("no parity data in {other:?}"),
    }
}

fn read(t: &Tensor) -> Result<Vec<f64>> {
    let t = t.to_device(&Device::cpu())?;
    Ok(match t.dtype() {
        DType::F32 => t.to_vec::<f32>()?.into_iter().map(f64::from).collect(),
        DType::F64 => t.to_vec::<f64>()?,
        DType::I64 => t.to_vec::<i64>()?.into_iter().map(|x| x as f64).collect(),
        DType::I32 => t.to_vec::<i32>()?.into_iter().map(f64::from).collect(),
        DType::I16 => t.to_vec::<i16>()?.into_iter().map(f64::from).collect(),
        DType::I8 => t.to_vec::<i8>()?.into_iter().map(f64::from).collect(),
        DType::U8 => t.to_vec::<u8>()?.into_iter().map(f64::from).collect(),
        DType::Bool => t
            .to_vec::<bool>()?
            .into_iter()
            .map(|b| f64::from(u8::from(b)))
            .collect(),
        _ => t.to_dtype(DType::F64)?.to_vec::<f64>()?,
    })
}

fn close(got: f64, want: f64, dtype: DType, grad: bool) -> bool {
    if want.is_nan() {
        return got.is_nan();
    }
    if want.is_infinite() {
        return got == want;
    }
    let tol = match (dtype, grad) {
        (DType::F32, false) => 1e-5,
        (DType::F32, true) => 1e-4,
        (DType::F64, false) => 1e-11,
        (DType::F64, true) => 1e-9,
        _ => 0.0,
    };
    (got - want).abs() <= tol + tol * want.abs()
}

/// A gradient is as precise as the least precise float input it came
/// through: PyTorch computes the backward of `f32 op f64` with the f32
/// input unconverted (its `a * a` rounds to f32), kael after converting it.
fn grad_tolerance_dtype(c: &Case, g: &Tensor) -> DType {
    if c.inputs.iter().any(|(d, _)| d.dtype == DType::F32) {
        DType::F32
    } else {
        g.dtype()
    }
}

fn compare(what: &str, t: &Tensor, want: &Data, grad: bool) -> std::result::Result<(), String> {
    compare_as(what, t, want, grad, t.dtype())
}

fn compare_as(
    what: &str,
    t: &Tensor,
    want: &Data,
    grad: bool,
    tol_dtype: DType,
) -> std::result::Result<(), String> {
    if !grad && t.dtype() != want.dtype {
        return Err(format!(
            "{what}: dtype {:?}, PyTorch {:?}",
            t.dtype(),
            want.dtype
        ));
    }
    if t.shape() != want.shape.as_slice() {
        return Err(format!(
            "{what}: shape {:?}, PyTorch {:?}",
            t.shape(),
            want.shape
        ));
    }
    let got = read(t).map_err(|e| format!("{what}: readback failed: {e}"))?;
    for (i, (g, w)) in got.iter().zip(&want.values).enumerate() {
        if !close(*g, *w, tol_dtype, grad) {
            return Err(format!("{what}[{i}]: {g}, PyTorch {w} (all: {got:?})"));
        }
    }
    Ok(())
}

fn f(a: &Arg) -> f64 {
    match a {
        Arg::F(v) => *v,
        Arg::I(v) => *v as f64,
        _ => panic!("expected a number, got {a:?}"),
    }
}
fn of(a: &Arg) -> Option<f64> {
    match a {
        Arg::N => None,
        a => Some(f(a)),
    }
}
fn i(a: &Arg) -> isize {
    match a {
        Arg::I(v) => *v as isize,
        _ => panic!("expected an int, got {a:?}"),
    }
}
fn u(a: &Arg) -> usize {
    i(a) as usize
}
fn l(a: &Arg) -> Vec<isize> {
    match a {
        Arg::L(v) => v.clone(),
        _ => panic!("expected a list, got {a:?}"),
    }
}
fn lu(a: &Arg) -> Vec<usize> {
    l(a).into_iter().map(|x| x as usize).collect()
}
fn b(a: &Arg) -> bool {
    match a {
        Arg::B(v) => *v,
        _ => panic!("expected a bool, got {a:?}"),
    }
}
fn reduction(a: &Arg) -> Reduction {
    match a {
        Arg::S(s) if s == "mean" => Reduction::Mean,
        Arg::S(s) if s == "sum" => Reduction::Sum,
        Arg::S(s) if s == "none" => Reduction::None,
        _ => panic!("expected a reduction, got {a:?}"),
    }
}

/// Runs one public kael operation named as in the generator.
fn run_op(c: &Case, x: &[Tensor], dev: &Device) -> Result<Vec<Tensor>> {
    let a = &c.args;
    let one = |t: Result<Tensor>| t.map(|t| vec![t]);
    let two = |t: Result<(Tensor, Tensor)>| t.map(|(a, b)| vec![a, b]);
    let out_dtype = c.outs.first().map_or(DType::F32, |o| o.dtype);
    match c.op.as_str() {
        "neg" => one(x[0].neg()),
        "abs" => one(x[0].abs()),
        "exp" => one(x[0].exp()),
        "log" => one(x[0].log()),
        "sqrt" => one(x[0].sqrt()),
        "sqr" => one(x[0].sqr()),
        "recip" => one(x[0].recip()),
        "tanh" => one(x[0].tanh()),
        "sigmoid" => one(x[0].sigmoid()),
        "relu" => one(x[0].relu()),
        "gelu" => one(x[0].gelu()),
        "gelu_tanh" => one(x[0].gelu_tanh()),
        "silu" => one(x[0].silu()),
        "sin" => one(x[0].sin()),
        "cos" => one(x[0].cos()),
        "sign" => one(x[0].sign()),
        "erf" => one(x[0].erf()),
        "log1p" => one(x[0].log1p()),
        "expm1" => one(x[0].expm1()),
        "rsqrt" => one(x[0].rsqrt()),
        "floor" => one(x[0].floor()),
        "ceil" => one(x[0].ceil()),
        "round" => one(x[0].round()),
        "trunc" => one(x[0].trunc()),
        "powf" => one(x[0].powf(f(&a[0]))),
        "clamp" => one(x[0].clamp(of(&a[0]), of(&a[1]))),
        "affine" => one(x[0].affine(f(&a[0]), f(&a[1]))),
        "softplus" => one(x[0].softplus(f(&a[0]), f(&a[1]))),
        "hardtanh" => one(x[0].hardtanh(f(&a[0]), f(&a[1]))),
        "leaky_relu" => one(x[0].leaky_relu(f(&a[0]))),
        "elu" => one(x[0].elu(f(&a[0]))),
        "add" => one(x[0].add(&x[1])),
        "sub" => one(x[0].sub(&x[1])),
        "mul" => one(x[0].mul(&x[1])),
        "div" => one(x[0].div(&x[1])),
        "maximum" => one(x[0].maximum(&x[1])),
        "minimum" => one(x[0].minimum(&x[1])),
        "pow" => one(x[0].pow(&x[1])),
        "atan2" => one(x[0].atan2(&x[1])),
        "remainder" => one(x[0].remainder(&x[1])),
        "fmod" => one(x[0].fmod(&x[1])),
        "bitwise_and" => one(x[0].bitwise_and(&x[1])),
        "bitwise_or" => one(x[0].bitwise_or(&x[1])),
        "eq" => one(x[0].eq(&x[1])),
        "ne" => one(x[0].ne(&x[1])),
        "lt" => one(x[0].lt(&x[1])),
        "le" => one(x[0].le(&x[1])),
        "gt" => one(x[0].gt(&x[1])),
        "ge" => one(x[0].ge(&x[1])),
        "add_scalar" => one(x[0].add_scalar(promotion::num(&a[0]))),
        "mul_scalar" => one(x[0].mul_scalar(promotion::num(&a[0]))),
        "sub_scalar" => one(x[0].sub_scalar(promotion::num(&a[0]))),
        "div_scalar" => one(x[0].div_scalar(promotion::num(&a[0]))),
        "rsub" => one(x[0].rsub(promotion::num(&a[0]))),
        "rdiv" => one(x[0].rdiv(promotion::num(&a[0]))),
        "sum" => one(x[0].sum(&l(&a[0]), b(&a[1]))),
        "mean" => one(x[0].mean(&l(&a[0]), b(&a[1]))),
        "max_dim" => one(x[0].max_dim(i(&a[0]), b(&a[1]))),
        "min_dim" => one(x[0].min_dim(i(&a[0]), b(&a[1]))),
        "argmax" => one(x[0].argmax(i(&a[0]), b(&a[1]))),
        "argmin" => one(x[0].argmin(i(&a[0]), b(&a[1]))),
        "max_all" => one(x[0].max_all()),
        "min_all" => one(x[0].min_all()),
        "prod_dim" => one(x[0].prod_dim(i(&a[0]), b(&a[1]))),
        "prod_all" => one(x[0].prod_all()),
        "max_dim_with_indices" => two(x[0].max_dim_with_indices(i(&a[0]), b(&a[1]))),
        "min_dim_with_indices" => two(x[0].min_dim_with_indices(i(&a[0]), b(&a[1]))),
        "cumsum" => one(x[0].cumsum(i(&a[0]))),
        "cumprod" => one(x[0].cumprod(i(&a[0]))),
        "sort" => two(x[0].sort(i(&a[0]), b(&a[1]))),
        "argsort" => one(x[0].argsort(i(&a[0]), b(&a[1]))),
        "topk" => two(x[0].topk(u(&a[0]), i(&a[1]), b(&a[2]), b(&a[3]))),
        "norm" => one(x[0].norm(f(&a[0]), &l(&a[1]), b(&a[2]))),
        "nonzero" => one(x[0].nonzero()),
        "scatter" => one(x[0].scatter(i(&a[0]), &x[1], &x[2])),
        "scatter_value" => one(x[0].scatter_value(i(&a[0]), &x[1], f(&a[1]))),
        op if op.starts_with("f.") => run_functional(op, a, x),
        op if op.starts_with("inplace:") => {
            let y = x[0].mul_scalar(1.0)?;
            match &op["inplace:".len()..] {
                "exp_" => y.exp_()?,
                "relu_" => y.relu_()?,
                "sigmoid_" => y.sigmoid_()?,
                "tanh_" => y.tanh_()?,
                "neg_" => y.neg_()?,
                "sqrt_" => y.sqrt_()?,
                "clamp_" => y.clamp_(of(&a[0]), of(&a[1]))?,
                "leaky_relu_" => y.leaky_relu_(f(&a[0]))?,
                "powf_" => y.powf_(f(&a[0]))?,
                other => panic!("no in-place mapping for {other}"),
            }
            Ok(vec![y])
        }
        "softmax" => one(x[0].softmax(i(&a[0]))),
        "log_softmax" => one(x[0].log_softmax(i(&a[0]))),
        "logsumexp" => one(x[0].logsumexp(i(&a[0]), b(&a[1]))),
        "var" => one(x[0].var(&l(&a[0]), u(&a[1]), b(&a[2]))),
        "std" => one(x[0].std(&l(&a[0]), u(&a[1]), b(&a[2]))),
        "any" => one(x[0].any(&l(&a[0]), b(&a[1]))),
        "all" => one(x[0].all(&l(&a[0]), b(&a[1]))),
        "narrow" => one(x[0].narrow(i(&a[0]), u(&a[1]), u(&a[2]))),
        "slice" => one(x[0].slice(i(&a[0]), i(&a[1]), i(&a[2]), u(&a[3]))),
        "select" => one(x[0].select(i(&a[0]), i(&a[1]))),
        "transpose" => one(x[0].transpose(i(&a[0]), i(&a[1]))),
        "permute" => one(x[0].permute(&l(&a[0]))),
        "unsqueeze" => one(x[0].unsqueeze(i(&a[0]))),
        "squeeze" => one(x[0].squeeze()),
        "squeeze_dim" => one(x[0].squeeze_dim(i(&a[0]))),
        "flatten" => one(x[0].flatten(i(&a[0]), i(&a[1]))),
        "reshape" => one(x[0].reshape(lu(&a[0]).as_slice())),
        "broadcast_to" => one(x[0].broadcast_to(&lu(&a[0]))),
        "unfold" => one(x[0].unfold(i(&a[0]), u(&a[1]), u(&a[2]))),
        "diagonal" => one(x[0].diagonal(i(&a[0]), i(&a[1]), i(&a[2]))),
        "movedim" => one(x[0].movedim(i(&a[0]), i(&a[1]))),
        "flip" => one(x[0].flip(&l(&a[0]))),
        "roll" => one(x[0].roll(i(&a[0]), i(&a[1]))),
        "repeat" => one(x[0].repeat(&lu(&a[0]))),
        "tril" => one(x[0].tril(i(&a[0]))),
        "triu" => one(x[0].triu(i(&a[0]))),
        "cat" => one(Tensor::cat(&[&x[0], &x[1]], i(&a[0]))),
        "stack" => one(Tensor::stack(&[&x[0], &x[1]], i(&a[0]))),
        "index_select" => one(x[0].index_select(i(&a[0]), &x[1])),
        "gather" => one(x[0].gather(i(&a[0]), &x[1])),
        "index_add" => one(x[0].index_add(i(&a[0]), &x[1], &x[2])),
        "scatter_add" => one(x[0].scatter_add(i(&a[0]), &x[1], &x[2])),
        "masked_fill" => one(x[0].masked_fill(&x[1], f(&a[0]))),
        "where_cond" => one(x[0].where_cond(&x[1], &x[2])),
        "embedding" => one(Tensor::embedding(&x[0], &x[1])),
        "matmul" => one(x[0].matmul(&x[1])),
        "bmm" => one(x[0].bmm(&x[1])),
        "dot" => one(x[0].dot(&x[1])),
        "linspace" => one(Tensor::linspace(
            f(&a[0]),
            f(&a[1]),
            u(&a[2]),
            out_dtype,
            dev,
        )),
        "eye" => one(Tensor::eye(u(&a[0]), out_dtype, dev)),
        "to_dtype" => one(x[0].to_dtype(out_dtype)),
        "one_hot" => one(x[0].one_hot(Some(u(&a[0])))),
        "mse_loss" => one(mse_loss(&x[0], &x[1], reduction(&a[0]))),
        "cross_entropy" => one(cross_entropy(&x[0], &x[1], reduction(&a[0]), Some(-100))),
        "nll_loss" => one(nll_loss(&x[0], &x[1], reduction(&a[0]), Some(-100))),
        op => promotion::run(op, a, x)
            .unwrap_or_else(|| panic!("case {}: no kael mapping for op {op}", c.id)),
    }
}

/// `nn::functional` cases.
fn run_functional(op: &str, a: &[Arg], x: &[Tensor]) -> Result<Vec<Tensor>> {
    use kael_core::nn::functional as nf;
    let pair = |a: &Arg| -> [usize; 2] {
        let v = lu(a);
        [v[0], v[1]]
    };
    let one = |t: Result<Tensor>| t.map(|t| vec![t]);
    match op {
        "f.linear" => one(nf::linear(&x[0], &x[1], Some(&x[2]))),
        "f.conv2d_same" => {
            let d = u(&a[0]);
            one(kael_core::nn::same_padding(&x[0], &x[1], &[d, d])
                .and_then(|(xp, p)| nf::conv2d(&xp, &x[1], None, [1, 1], [p[0], p[1]], [d, d], 1)))
        }
        "f.layer_norm" => one(nf::layer_norm(
            &x[0],
            &lu(&a[0]),
            Some(&x[1]),
            Some(&x[2]),
            f(&a[1]),
        )),
        "f.group_norm" => one(nf::group_norm(
            &x[0],
            u(&a[0]),
            Some(&x[1]),
            Some(&x[2]),
            f(&a[1]),
        )),
        "f.batch_norm_train" => one(nf::batch_norm(
            &x[0],
            None,
            None,
            Some(&x[1]),
            Some(&x[2]),
            true,
            f(&a[0]),
            f(&a[1]),
        )),
        "f.conv2d" => one(nf::conv2d(
            &x[0],
            &x[1],
            Some(&x[2]),
            pair(&a[0]),
            pair(&a[1]),
            pair(&a[2]),
            u(&a[3]),
        )),
        "f.conv1d" => one(nf::conv1d(
            &x[0],
            &x[1],
            Some(&x[2]),
            u(&a[0]),
            u(&a[1]),
            u(&a[2]),
            u(&a[3]),
        )),
        "f.conv_transpose2d" => one(nf::conv_transpose2d(
            &x[0],
            &x[1],
            Some(&x[2]),
            pair(&a[0]),
            pair(&a[1]),
            pair(&a[2]),
            u(&a[3]),
            pair(&a[4]),
        )),
        "f.max_pool2d" => one(nf::max_pool2d(&x[0], pair(&a[0]), pair(&a[1]), pair(&a[2]))),
        "f.max_pool2d_with_indices" => {
            nf::max_pool2d_with_indices(&x[0], pair(&a[0]), pair(&a[1]), pair(&a[2]))
                .map(|(v, i)| vec![v, i])
        }
        "f.avg_pool2d" => one(nf::avg_pool2d(
            &x[0],
            pair(&a[0]),
            pair(&a[1]),
            pair(&a[2]),
            b(&a[3]),
        )),
        "f.sdpa" => one(nf::scaled_dot_product_attention(
            &x[0],
            &x[1],
            &x[2],
            None,
            b(&a[0]),
            None,
        )),
        "f.sdpa_mask" => one(nf::scaled_dot_product_attention(
            &x[0],
            &x[1],
            &x[2],
            Some(&x[3]),
            false,
            None,
        )),
        "f.embedding" => one(nf::embedding(&x[0], &x[1], Some(u(&a[0])))),
        other => panic!("no functional mapping for {other}"),
    }
}

/// The autograd scenarios of the generator, in kael. Each returns the
/// tensors it reports; leaves' gradients are read afterwards.
fn run_scenario(name: &str, x: &[Tensor]) -> Result<Vec<Tensor>> {
    let dev = x[0].device();
    match name {
        "inplace_view_mul" => {
            let h = x[0].mul_scalar(2.0)?;
            h.slice(0, 1, 3, 1)?.mul_scalar_(10.0)?;
            h.sum_all()?.backward()?;
            Ok(vec![h.detach()?])
        }
        "inplace_view_add_other" => {
            let h = x[0].mul_scalar(1.5)?;
            h.narrow(0, 1, 2)?.add_(&x[1].mul(&x[1])?)?;
            h.mul(&h)?.sum_all()?.backward()?;
            Ok(vec![h.detach()?])
        }
        "inplace_view_transposed" => {
            let h = x[0].exp()?;
            h.t()?.select(0, 0)?.mul_scalar_(3.0)?;
            let r = Tensor::arange(0.0f64, 6.0, &dev)?.reshape(&[2, 3])?;
            h.mul(&r)?.sum_all()?.backward()?;
            Ok(vec![h.detach()?])
        }
        "inplace_view_transposed_ok" => {
            let h = x[0].mul_scalar(2.0)?;
            h.t()?.select(0, 0)?.mul_scalar_(3.0)?;
            let r = Tensor::arange(0.0f64, 6.0, &dev)?.reshape(&[2, 3])?;
            h.mul(&r)?.sum_all()?.backward()?;
            Ok(vec![h.detach()?])
        }
        "inplace_view_then_use_view" => {
            let h = x[0].add_scalar(0.0)?;
            let v = h.select(0, 0)?;
            v.mul_(&x[0].select(0, 0)?)?;
            v.sum_all()?.add(&h.sum_all()?)?.backward()?;
            Ok(vec![h.detach()?])
        }
        "inplace_view_saved_modified" => {
            let h = x[0].mul_scalar(1.0)?;
            let y = h.exp()?;
            let z = h.mul(&h)?;
            h.select(0, 0)?.fill_(2.0)?;
            y.sum_all()?.add(&z.sum_all()?)?.backward()?;
            Ok(vec![h.detach()?])
        }
        "inplace_view_fill" => {
            let h = x[0].mul_scalar(3.0)?;
            h.select(0, 1)?.fill_(0.5)?;
            h.mul(&h)?.sum_all()?.backward()?;
            Ok(vec![h.detach()?])
        }
        "inplace_view_copy" => {
            let h = x[0].sin()?;
            h.select(1, 1)?.copy_(&x[1])?;
            h.mul(&h)?.sum_all()?.backward()?;
            Ok(vec![h.detach()?])
        }
        "second_backward_add" => {
            let y = x[0].add_scalar(1.0)?.sum_all()?;
            y.backward()?;
            y.backward()?;
            Ok(vec![y.detach()?])
        }
        "second_backward_mul" => {
            let y = x[0].mul(&x[0])?.sum_all()?;
            y.backward()?;
            y.backward()?;
            Ok(vec![y.detach()?])
        }
        "clamp_at_bounds" => {
            let y = x[0].clamp(Some(-0.5), Some(0.5))?;
            y.sum_all()?.backward()?;
            Ok(vec![y.detach()?])
        }
        "inplace_leaf_view" => {
            x[0].select(0, 0)?.mul_scalar_(2.0)?;
            Ok(vec![x[0].detach()?])
        }
        other => panic!("no kael scenario {other}"),
    }
}

/// Runs one case; `Err` describes the first difference from PyTorch.
fn check(c: &Case, dev: &Device) -> std::result::Result<(), String> {
    let mut x = Vec::new();
    for (d, rg) in &c.inputs {
        let t = make(d, dev).map_err(|e| format!("input: {e}"))?;
        x.push(if *rg {
            t.requires_grad_(true).map_err(|e| e.to_string())?
        } else {
            t
        });
    }
    if let Some(name) = c.op.strip_prefix("scenario:") {
        let got = run_scenario(name, &x);
        return match (got, c.err) {
            (Err(_), true) => Ok(()),
            (Ok(_), true) => Err("kael accepted what PyTorch refuses".into()),
            (Err(e), false) => Err(format!("kael refused: {e}")),
            (Ok(outs), false) => {
                for (k, (o, want)) in outs.iter().zip(&c.outs).enumerate() {
                    compare(&format!("out{k}"), o, want, false)?;
                }
                for (k, want) in &c.grads {
                    match (x[*k].grad(), want) {
                        (Some(g), Some(want)) => compare(&format!("grad{k}"), &g, want, true)?,
                        (None, None) => {}
                        (g, w) => {
                            return Err(format!(
                                "grad{k}: kael has one: {}, PyTorch has one: {}",
                                g.is_some(),
                                w.is_some()
                            ));
                        }
                    }
                }
                Ok(())
            }
        };
    }
    if let Some(why) = &c.refuses {
        return match run_op(c, &x, dev) {
            Err(e) if e.to_string().contains("does not fit") => Ok(()),
            Err(e) => Err(format!(
                "kael refused ({why}) with an unexpected message: {e}"
            )),
            Ok(_) => Err(format!("kael computed what it refuses by design ({why})")),
        };
    }
    let outs = match (run_op(c, &x, dev), c.err) {
        (Err(_), true) => return Ok(()),
        (Ok(_), true) => return Err("kael accepted what PyTorch refuses".into()),
        (Err(e), false) => return Err(format!("kael refused: {e}")),
        (Ok(outs), false) => outs,
    };
    if outs.len() != c.outs.len() {
        return Err(format!("{} outputs, PyTorch {}", outs.len(), c.outs.len()));
    }
    for (k, (o, want)) in outs.iter().zip(&c.outs).enumerate() {
        compare(&format!("out{k}"), o, want, false)?;
    }
    let Some(w) = &c.w else { return Ok(()) };
    let wanted: Vec<&Tensor> = c.grads.iter().map(|(k, _)| &x[*k]).collect();
    let w = make(
        &Data {
            dtype: outs[0].dtype(),
            ..w.clone()
        },
        dev,
    )
    .map_err(|e| e.to_string())?;
    let loss = outs[0]
        .mul(&w)
        .and_then(|t| t.sum_all())
        .map_err(|e| format!("loss: {e}"))?;
    let opts = BackwardOptions {
        allow_unused: true,
        ..Default::default()
    };
    let grads =
        autograd::grad(&[&loss], &wanted, &[], opts).map_err(|e| format!("backward: {e}"))?;
    for ((k, want), got) in c.grads.iter().zip(grads) {
        match (got, want) {
            (Some(g), Some(want)) => {
                let tol = grad_tolerance_dtype(c, &g);
                compare_as(&format!("grad{k}"), &g, want, true, tol)?
            }
            (None, None) => {}
            (Some(g), None) => {
                // PyTorch's "no gradient" is kael's all-zero one.
                if read(&g)
                    .map_err(|e| e.to_string())?
                    .iter()
                    .any(|v| *v != 0.0)
                {
                    return Err(format!(
                        "grad{k}: kael has a nonzero gradient, PyTorch none"
                    ));
                }
            }
            (None, Some(_)) => return Err(format!("grad{k}: kael has none, PyTorch has one")),
        }
    }
    Ok(())
}

fn run_all(dev: &Device) {
    let cases = parse();
    assert!(
        cases.len() > 300,
        "only {} parity cases parsed",
        cases.len()
    );
    let mut failures = Vec::new();
    for c in &cases {
        if let Err(e) = check(c, dev) {
            failures.push(format!("case {} {} {:?}: {e}", c.id, c.op, c.args));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} parity cases differ from PyTorch:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn parity_cpu() {
    run_all(&Device::cpu());
}

#[test]
fn parity_threaded() {
    run_all(&common::threaded());
}

#[test]
fn parity_threaded_chunked() {
    run_all(&common::threaded_chunked());
}

#[cfg(feature = "cuda")]
#[test]
fn parity_cuda() {
    if let Some(dev) = common::cuda() {
        run_all(&dev);
    }
}
