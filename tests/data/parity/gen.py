#!/usr/bin/env python3
"""Generates kael's PyTorch parity vectors: tests/data/parity/cases.txt.

Run offline with PyTorch from PyPI (pinned below); CI only reads the output:

    python3 -m venv /tmp/pt && /tmp/pt/bin/pip install torch==2.15.0 numpy
    /tmp/pt/bin/python tests/data/parity/gen.py

Each case is one public kael operation applied to small inputs. PyTorch
computes the outputs and, for float outputs, the gradients of
`sum(out * w)` for a random cotangent `w` (also stored). The Rust side
(tests/tests/parity.rs) runs the same operation on every device and compares.

File format (one token stream per line; values are Python reprs, which
round-trip exactly; f32 values are stored as the f64 of the f32):

    case <id> <op> [arg ...]        args: i:<int> f:<float> l:<ints,> b:<0|1> s:<word> n (None)
    in <dtype> <shape> <rg> v...    shape: comma list, '-' for rank 0; rg: requires grad
    out <dtype> <shape> v...        one per output
    w <shape> v...                  cotangent of the first output
    grad <k> <shape> v...           gradient of input k ('grad <k> none': no gradient)
    err                             PyTorch refuses the operation
    refuses <why>                   kael refuses, deliberately, what PyTorch
                                    computes (README, "Type promotion")
    end

Tolerances (stated here and in parity.rs): f32 values |got - want| <=
1e-5 + 1e-5 |want|, f32 gradients 1e-4 + 1e-4 |want|; f64 values 1e-11 +
1e-11 |want|, gradients 1e-9 + 1e-9 |want|. Integers and bools are exact;
NaN matches NaN, infinities match by sign.
"""
import math
import os
import sys

import numpy as np
import torch

PINNED = "2.15.0"
HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(20261203)
torch.use_deterministic_algorithms(True)

DT = {"f32": torch.float32, "f64": torch.float64, "i64": torch.int64,
      "i32": torch.int32, "i16": torch.int16, "i8": torch.int8,
      "u8": torch.uint8, "bool": torch.bool}
NAME = {v: k for k, v in DT.items()}

out_lines = []
count = 0


def fmt_val(v):
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(float(v))


def fmt_shape(shape):
    return ",".join(str(s) for s in shape) if len(shape) else "-"


def fmt_tensor(t):
    t = t.detach()
    vals = t.reshape(-1).tolist()
    if t.dtype == torch.bool:
        vals = [bool(v) for v in vals]
    return fmt_shape(t.shape) + (" " + " ".join(fmt_val(v) for v in vals) if vals else "")


def fmt_arg(a):
    if a is None:
        return "n"
    if isinstance(a, bool):
        return "b:" + ("1" if a else "0")
    if isinstance(a, int):
        return "i:" + str(a)
    if isinstance(a, float):
        return "f:" + fmt_val(a)
    if isinstance(a, str):
        return "s:" + a
    if isinstance(a, (list, tuple)):
        return "l:" + (",".join(str(int(x)) for x in a) if a else "-")
    raise TypeError(a)


def values(shape, dtype, kind="normal"):
    n = int(np.prod(shape)) if len(shape) else 1
    if dtype in ("i64", "i32", "i16", "i8"):
        v = rng.integers(-9, 10, size=n)
    elif dtype == "u8":
        v = rng.integers(0, 20, size=n)
    elif dtype == "bool":
        v = rng.integers(0, 2, size=n).astype(bool)
    elif kind == "positive":
        v = rng.uniform(0.2, 3.0, size=n)
    elif kind == "unit":
        v = rng.uniform(-0.9, 0.9, size=n)
    elif kind == "large":
        v = rng.normal(size=n) * 40.0 + 1000.0
    else:
        v = rng.normal(size=n)
    return torch.tensor(v.reshape(shape), dtype=DT[dtype])


def T(vals, dtype="f32"):
    return torch.tensor(vals, dtype=DT[dtype])


def case(op, args, inputs, fn, grad=True, grad_inputs=None, kael_refuses=None):
    """inputs: list of tensors; fn(*inputs) -> tensor or tuple.
    kael_refuses: a word naming why kael refuses what PyTorch computes (a
    deliberate difference, listed in the README); PyTorch's outputs are
    still recorded."""
    global count
    ident = count
    count += 1
    lines = ["case %d %s%s" % (ident, op, "".join(" " + fmt_arg(a) for a in args))]
    if kael_refuses:
        lines.append("refuses " + kael_refuses)
    leaves = []
    for k, x in enumerate(inputs):
        rg = grad and x.dtype.is_floating_point and (grad_inputs is None or k in grad_inputs)
        leaf = x.detach().clone().requires_grad_(rg)
        leaves.append(leaf)
        lines.append("in %s %s %s" % (NAME[x.dtype], "1" if rg else "0", fmt_tensor(x)))
    try:
        outs = fn(*leaves)
    except (RuntimeError, ValueError, IndexError, TypeError, NotImplementedError):
        lines.append("err")
        lines.append("end")
        out_lines.extend(lines)
        return
    if not isinstance(outs, tuple):
        outs = (outs,)
    for o in outs:
        lines.append("out %s %s" % (NAME[o.dtype], fmt_tensor(o)))
    o0 = outs[0]
    wanted = [leaf for leaf in leaves if leaf.requires_grad]
    if wanted and o0.requires_grad:
        w = values(tuple(o0.shape), NAME[o0.dtype])
        try:
            gs = torch.autograd.grad(o0, wanted, w, allow_unused=True)
        except (RuntimeError, NotImplementedError):
            # PyTorch's backward fails where its forward worked (the
            # gradient of a float divided by a bool 0-d tensor negates the
            # bool): the values are the reference, not the gradients
            lines.append("end")
            out_lines.extend(lines)
            return
        lines.append("w %s" % fmt_tensor(w))
        it = iter(gs)
        for k, leaf in enumerate(leaves):
            if not leaf.requires_grad:
                continue
            g = next(it)
            lines.append("grad %d %s" % (k, "none" if g is None else fmt_tensor(g)))
    lines.append("end")
    out_lines.extend(lines)


# ------------------------------------------------------------------ unary ops
UNARY = [
    # (kael name, args, torch fn, domain)
    ("neg", [], lambda x: -x, "normal"),
    ("abs", [], torch.abs, "normal"),
    ("exp", [], torch.exp, "normal"),
    ("log", [], torch.log, "positive"),
    ("sqrt", [], torch.sqrt, "positive"),
    ("sqr", [], torch.square, "normal"),
    ("recip", [], torch.reciprocal, "positive"),
    ("tanh", [], torch.tanh, "normal"),
    ("sigmoid", [], torch.sigmoid, "normal"),
    ("relu", [], torch.relu, "normal"),
    ("gelu", [], torch.nn.functional.gelu, "normal"),
    ("gelu_tanh", [], lambda x: torch.nn.functional.gelu(x, approximate="tanh"), "normal"),
    ("silu", [], torch.nn.functional.silu, "normal"),
    ("sin", [], torch.sin, "normal"),
    ("cos", [], torch.cos, "normal"),
    ("sign", [], torch.sign, "normal"),
    ("erf", [], torch.erf, "normal"),
    ("log1p", [], torch.log1p, "positive"),
    ("expm1", [], torch.expm1, "normal"),
    ("rsqrt", [], torch.rsqrt, "positive"),
    ("floor", [], torch.floor, "normal"),
    ("ceil", [], torch.ceil, "normal"),
    ("round", [], torch.round, "normal"),
    ("trunc", [], torch.trunc, "normal"),
]
for name, args, fn, dom in UNARY:
    for dt in ("f32", "f64"):
        case(name, args, [values((2, 3), dt, dom)], fn)

PARAM_UNARY = [
    ("powf", [2.5], lambda x: torch.pow(x, 2.5), "positive"),
    ("powf", [-1.5], lambda x: torch.pow(x, -1.5), "positive"),
    ("powf", [3.0], lambda x: torch.pow(x, 3.0), "normal"),
    ("clamp", [-0.5, 0.5], lambda x: torch.clamp(x, -0.5, 0.5), "normal"),
    ("clamp", [None, 0.25], lambda x: torch.clamp(x, max=0.25), "normal"),
    ("clamp", [-0.25, None], lambda x: torch.clamp(x, min=-0.25), "normal"),
    ("affine", [1.5, -0.25], lambda x: x * 1.5 + -0.25, "normal"),
    ("softplus", [1.0, 20.0], lambda x: torch.nn.functional.softplus(x, 1.0, 20.0), "normal"),
    ("softplus", [2.0, 1.0], lambda x: torch.nn.functional.softplus(x, 2.0, 1.0), "normal"),
    ("hardtanh", [-0.5, 0.75], lambda x: torch.nn.functional.hardtanh(x, -0.5, 0.75), "normal"),
    ("leaky_relu", [0.1], lambda x: torch.nn.functional.leaky_relu(x, 0.1), "normal"),
    ("elu", [0.7], lambda x: torch.nn.functional.elu(x, 0.7), "normal"),
]
for name, args, fn, dom in PARAM_UNARY:
    for dt in ("f32", "f64"):
        case(name, args, [values((2, 3), dt, dom)], fn)

# Kinks and ties: PyTorch's conventions at the points where a rule must choose.
KINK = T([-1.0, -0.5, 0.0, 0.5, 1.0, 2.5])
for name, args, fn in [
    ("abs", [], torch.abs), ("relu", [], torch.relu), ("sign", [], torch.sign),
    ("round", [], torch.round), ("floor", [], torch.floor),
    ("clamp", [-0.5, 0.5], lambda x: torch.clamp(x, -0.5, 0.5)),
    ("clamp", [0.0, None], lambda x: torch.clamp(x, min=0.0)),
    ("hardtanh", [-0.5, 0.5], lambda x: torch.nn.functional.hardtanh(x, -0.5, 0.5)),
    ("leaky_relu", [0.1], lambda x: torch.nn.functional.leaky_relu(x, 0.1)),
    ("elu", [1.0], lambda x: torch.nn.functional.elu(x, 1.0)),
    ("powf", [2.0], lambda x: torch.pow(x, 2.0)),
    ("sqrt", [], torch.sqrt),
]:
    case(name, args, [KINK.clone()], fn)
# Integer unary ops (no gradient).
for name, fn in [("neg", lambda x: -x), ("abs", torch.abs), ("sign", torch.sign),
                 ("relu", torch.relu), ("sqr", torch.square)]:
    case(name, [], [values((5,), "i64")], fn)
case("clamp", [-2.0, 3.0], [values((6,), "i64")], lambda x: torch.clamp(x, -2, 3))
# Special values.
SPECIAL = T([float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1e-40, 88.0, -104.0])
for name, fn in [("exp", torch.exp), ("tanh", torch.tanh), ("sigmoid", torch.sigmoid),
                 ("relu", torch.relu), ("abs", torch.abs), ("erf", torch.erf),
                 ("expm1", torch.expm1), ("silu", torch.nn.functional.silu),
                 ("floor", torch.floor)]:
    case(name, [], [SPECIAL.clone()], fn, grad=False)
# Not gelu: PyTorch's f32 CPU kernel gives gelu(+inf) = NaN while its f64
# kernel gives +inf (the limit); kael gives +inf in both.
case("gelu", [], [T([float("nan"), float("-inf"), 0.0, -0.0, 1e-40, 88.0, -104.0])],
     torch.nn.functional.gelu, grad=False)

# ----------------------------------------------------------------- binary ops
BINARY = [
    ("add", torch.add, "normal", "normal"),
    ("sub", torch.sub, "normal", "normal"),
    ("mul", torch.mul, "normal", "normal"),
    ("div", torch.div, "normal", "positive"),
    ("maximum", torch.maximum, "normal", "normal"),
    ("minimum", torch.minimum, "normal", "normal"),
    ("pow", torch.pow, "positive", "normal"),
    ("atan2", torch.atan2, "normal", "normal"),
    ("remainder", torch.remainder, "normal", "positive"),
    ("fmod", torch.fmod, "normal", "positive"),
]
SHAPES = [((2, 3), (2, 3)), ((2, 3), (3,)), ((2, 1, 3), (4, 1)), ((), (2, 2))]
for name, fn, da, db in BINARY:
    for dt in ("f32", "f64"):
        for sa, sb in SHAPES:
            case(name, [], [values(sa, dt, da), values(sb, dt, db)], fn)
# Ties for maximum / minimum split the gradient.
for name, fn in [("maximum", torch.maximum), ("minimum", torch.minimum)]:
    case(name, [], [T([1.0, 2.0, 3.0]), T([1.0, 5.0, 3.0])], fn)
# Integer arithmetic: Python's remainder, C's fmod, truncation of division.
IA, IB = T([7, -7, 7, -7, 0, 5], "i64"), T([3, 3, -3, -3, 4, -2], "i64")
for name, fn in [("add", torch.add), ("sub", torch.sub), ("mul", torch.mul),
                 ("remainder", torch.remainder), ("fmod", torch.fmod),
                 ("maximum", torch.maximum), ("minimum", torch.minimum),
                 ("bitwise_and", torch.bitwise_and), ("bitwise_or", torch.bitwise_or)]:
    case(name, [], [IA.clone(), IB.clone()], fn)
FA, FB = T([7.5, -7.5, 7.5, -7.5, 0.0, 5.0]), T([2.0, 2.0, -2.0, -2.0, 3.0, 0.0])
for name, fn in [("remainder", torch.remainder), ("fmod", torch.fmod), ("div", torch.div)]:
    case(name, [], [FA.clone(), FB.clone()], fn, grad=False)

# Small integer dtypes: wrapping arithmetic, Python remainder, casts.
W8A, W8B = T([100, -100, 127, -128, 7, -7], "i8"), T([100, -100, 1, -1, 3, 3], "i8")
for name, fn in [("add", torch.add), ("sub", torch.sub), ("mul", torch.mul),
                 ("remainder", torch.remainder), ("fmod", torch.fmod),
                 ("maximum", torch.maximum), ("bitwise_and", torch.bitwise_and)]:
    case(name, [], [W8A.clone(), W8B.clone()], fn)
W16A, W16B = T([30000, -30000, 32767, -7, 250], "i16"), T([30000, -30000, 1, 3, -4], "i16")
for name, fn in [("add", torch.add), ("mul", torch.mul), ("remainder", torch.remainder),
                 ("minimum", torch.minimum)]:
    case(name, [], [W16A.clone(), W16B.clone()], fn)
for dt in ("i16", "i8"):
    case("neg", [], [T([-128, 5, 0, 127], "i8").to(DT[dt])], lambda x: -x)
    case("abs", [], [T([-128, 5, 0, -127], "i8").to(DT[dt])], torch.abs)
    case("sum", [[1], False], [values((2, 3), dt)], lambda x: x.sum(1))
    case("max_dim", [0, False], [values((2, 3), dt)], lambda x: torch.amax(x, 0))
    case("argmin", [1, False], [values((2, 3), dt)], lambda x: torch.argmin(x, 1))
    case("matmul", [], [values((2, 3), dt), values((3, 2), dt)], torch.matmul)
    for cmp, fn in [("lt", torch.lt), ("eq", torch.eq)]:
        case(cmp, [], [values((4,), dt), values((4,), dt)], fn)
# Casts: integer to integer wraps, float to integer truncates toward zero.
CASTS = [("i64", "i8", [300, -200, 127, 128, -129]), ("i64", "i16", [70000, -40000, 5]),
         ("i32", "u8", [300, -1, 7]), ("i16", "i8", [255, -255, 3]), ("i8", "i64", [-128, 127]),
         ("u8", "i8", [200, 100]), ("bool", "i8", [1, 0]), ("i8", "bool", [0, -3, 4]),
         ("f32", "i8", [3.7, -3.7, 0.5, -127.9]), ("f64", "i16", [1000.5, -2.9]),
         ("i8", "f32", [-128, 5]), ("i16", "f64", [-32768, 32767])]
for src, dst, vals in CASTS:
    case("to_dtype", [dst], [T(vals, src)], lambda x, d=dst: x.to(DT[d]), grad=False)

# ---------------------------------------------------------------- comparisons
CA, CB = T([1.0, 2.0, float("nan"), 3.0, -0.0]), T([1.0, 3.0, float("nan"), 2.0, 0.0])
for name, fn in [("eq", torch.eq), ("ne", torch.ne), ("lt", torch.lt),
                 ("le", torch.le), ("gt", torch.gt), ("ge", torch.ge)]:
    case(name, [], [CA.clone(), CB.clone()], fn)
    case(name, [], [values((2, 3), "i64"), values((3,), "i64")], fn)

# ----------------------------------------------------------------- scalar ops
for name, args, fn in [
    ("add_scalar", [1.5], lambda x: x + 1.5), ("mul_scalar", [-2.0], lambda x: x * -2.0),
    ("sub_scalar", [0.5], lambda x: x - 0.5), ("div_scalar", [4.0], lambda x: x / 4.0),
    ("rsub", [2.0], lambda x: 2.0 - x), ("rdiv", [3.0], lambda x: 3.0 / x),
]:
    for dt in ("f32", "f64"):
        case(name, args, [values((2, 3), dt, "positive")], fn)

# ----------------------------------------------------------------- reductions
X = lambda dt="f32": values((2, 3, 4), dt)
for dt in ("f32", "f64"):
    for dims, keep in [([0], False), ([1, 2], True), ([-1], False), ([], False)]:
        case("sum", [dims, keep], [X(dt)], lambda x, d=dims, k=keep: x.sum(d, keepdim=k) if d else x.sum())
        case("mean", [dims, keep], [X(dt)], lambda x, d=dims, k=keep: x.mean(d, keepdim=k) if d else x.mean())
    for dim in (0, 1, -1):
        for keep in (False, True):
            case("max_dim", [dim, keep], [X(dt)], lambda x, d=dim, k=keep: torch.amax(x, d, keepdim=k))
            case("min_dim", [dim, keep], [X(dt)], lambda x, d=dim, k=keep: torch.amin(x, d, keepdim=k))
            case("argmax", [dim, keep], [X(dt)], lambda x, d=dim, k=keep: torch.argmax(x, d, keepdim=k))
            case("argmin", [dim, keep], [X(dt)], lambda x, d=dim, k=keep: torch.argmin(x, d, keepdim=k))
        case("softmax", [dim], [X(dt)], lambda x, d=dim: torch.softmax(x, d))
        case("log_softmax", [dim], [X(dt)], lambda x, d=dim: torch.log_softmax(x, d))
        case("logsumexp", [dim, False], [X(dt)], lambda x, d=dim: torch.logsumexp(x, d))
        case("prod_dim", [dim, False], [X(dt)], lambda x, d=dim: torch.prod(x, d), grad=False)
    case("max_all", [], [X(dt)], torch.max)
    case("min_all", [], [X(dt)], torch.min)
    for corr in (0, 1):
        case("var", [[1], corr, False], [X(dt)], lambda x, c=corr: torch.var(x, 1, correction=c))
        case("std", [[0, 2], corr, True], [X(dt)], lambda x, c=corr: torch.std(x, (0, 2), correction=c, keepdim=True))
# Ties: amax/amin and max_all split evenly; argmax takes the first.
TIE = T([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]])
case("max_dim", [1, False], [TIE.clone()], lambda x: torch.amax(x, 1))
case("min_dim", [0, False], [T([[1.0, 3.0], [1.0, 2.0]])], lambda x: torch.amin(x, 0))
case("max_all", [], [TIE.clone()], torch.max)
case("min_all", [], [T([[0.0, 3.0], [0.0, 2.0]])], torch.min)
case("argmax", [1, False], [TIE.clone()], lambda x: torch.argmax(x, 1))
case("argmin", [1, False], [TIE.clone()], lambda x: torch.argmin(x, 1))
# NaN wins extremes.
NANX = T([[1.0, float("nan"), 3.0], [2.0, 5.0, 0.0]])
case("max_dim", [1, False], [NANX.clone()], lambda x: torch.amax(x, 1), grad=False)
case("argmax", [1, False], [NANX.clone()], lambda x: torch.argmax(x, 1))
# Large magnitudes keep their digits in log_softmax / logsumexp.
for dt in ("f32", "f64"):
    case("log_softmax", [-1], [values((2, 5), dt, "large")], lambda x: torch.log_softmax(x, -1))
    case("logsumexp", [-1, False], [values((2, 5), dt, "large")], lambda x: torch.logsumexp(x, -1))
    case("softmax", [-1], [values((2, 5), dt, "large")], lambda x: torch.softmax(x, -1))
# Integer reductions.
case("sum", [[1], False], [values((2, 3), "i64")], lambda x: x.sum(1))
case("sum", [[0], False], [values((2, 3), "bool")], lambda x: x.sum(0))
case("max_dim", [0, False], [values((2, 3), "i64")], lambda x: torch.amax(x, 0))
case("any", [[1], False], [values((2, 3), "bool")], lambda x: torch.any(x, 1))
case("all", [[0], True], [values((2, 3), "bool")], lambda x: torch.all(x, 0, keepdim=True))

# Search, cumulative and norm ops.
for dt in ("f32", "f64"):
    for dim in (0, -1):
        case("max_dim_with_indices", [dim, False], [X(dt)], lambda x, d=dim: torch.max(x, d))
        case("min_dim_with_indices", [dim, True], [X(dt)], lambda x, d=dim: torch.min(x, d, keepdim=True))
        case("prod_dim", [dim, False], [X(dt)], lambda x, d=dim: torch.prod(x, d))
        case("cumsum", [dim], [X(dt)], lambda x, d=dim: torch.cumsum(x, d))
        case("cumprod", [dim], [X(dt)], lambda x, d=dim: torch.cumprod(x, d))
        for desc in (False, True):
            case("sort", [dim, desc], [X(dt)], lambda x, d=dim, ds=desc: tuple(torch.sort(x, dim=d, descending=ds, stable=True)))
            case("argsort", [dim, desc], [X(dt)], lambda x, d=dim, ds=desc: torch.argsort(x, dim=d, descending=ds, stable=True))
    case("prod_all", [], [X(dt)], torch.prod)
    for k, largest in ((2, True), (3, False)):
        case("topk", [k, -1, largest, True], [X(dt)], lambda x, k=k, l=largest: tuple(torch.topk(x, k, -1, l, True)))
    for p, dims, keep in ((2.0, [], False), (1.0, [1], True), (float("inf"), [-1], False),
                          (float("-inf"), [0], False), (0.0, [2], False), (3.0, [0, 2], False)):
        case("norm", [p, dims, keep], [X(dt)],
             lambda x, p=p, d=dims, k=keep: torch.linalg.vector_norm(x, p, d if d else None, k))
# Zeros in prod (one and several per slice), ties and NaN in sort.
case("prod_dim", [1, False], [T([[2.0, 0.0, 3.0], [0.0, 0.0, 4.0], [1.5, 2.0, -1.0]])], lambda x: torch.prod(x, 1))
case("cumprod", [1], [T([[2.0, 0.0, 3.0, 5.0], [1.0, 2.0, 0.0, 0.0]])], lambda x: torch.cumprod(x, 1))
case("norm", [2.0, [], False], [T([0.0, 0.0, 0.0])], lambda x: torch.linalg.vector_norm(x))
case("sort", [0, False], [T([3.0, float("nan"), 1.0, 3.0, -2.0])], lambda x: tuple(torch.sort(x, stable=True)), grad=False)
case("sort", [0, True], [T([3.0, float("nan"), 1.0, 3.0, -2.0])], lambda x: tuple(torch.sort(x, dim=0, descending=True, stable=True)), grad=False)
case("max_dim_with_indices", [1, False], [TIE.clone()], lambda x: torch.max(x, 1))
case("cumsum", [0], [values((5,), "i64")], lambda x: torch.cumsum(x, 0))
case("cumsum", [1], [values((2, 3), "bool")], lambda x: torch.cumsum(x, 1))
case("nonzero", [], [T([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]])], torch.nonzero)
case("nonzero", [], [values((3, 4), "bool")], torch.nonzero)
SI = T([[0, 2], [1, 0]], "i64")
case("scatter", [1], [values((2, 3), "f32"), SI, values((2, 2), "f32")], lambda x, i, s: x.scatter(1, i, s))
case("scatter", [0], [values((3, 2), "f64"), T([[2, 0], [0, 1]], "i64"), values((2, 2), "f64")],
     lambda x, i, s: x.scatter(0, i, s))
case("scatter_value", [1, -4.0], [values((2, 3), "f32"), SI], lambda x, i: x.scatter(1, i, -4.0))
# In-place unary ops on a non-leaf: values and gradients through the write.
for name, args, fn in [("exp_", [], torch.exp_), ("relu_", [], torch.relu_), ("sigmoid_", [], torch.sigmoid_),
                       ("tanh_", [], torch.tanh_), ("neg_", [], torch.neg_), ("sqrt_", [], torch.sqrt_),
                       ("clamp_", [-0.5, 0.5], lambda y: y.clamp_(-0.5, 0.5)),
                       ("leaky_relu_", [0.2], lambda y: torch.nn.functional.leaky_relu_(y, 0.2)),
                       ("powf_", [3.0], lambda y: y.pow_(3.0))]:
    def inplace(x, fn=fn):
        y = x * 1.0
        fn(y)
        return y
    case("inplace:" + name, args, [values((2, 3), "f64", "positive" if name == "sqrt_" else "normal")], inplace)

# ---------------------------------------------------------------------- views
V = lambda: values((3, 4, 2), "f32")
case("narrow", [1, 1, 2], [V()], lambda x: x.narrow(1, 1, 2))
case("narrow", [1, 2, 0], [V()], lambda x: x.narrow(1, 2, 0))
case("slice", [1, 0, 4, 2], [V()], lambda x: x[:, 0:4:2])
case("slice", [0, -2, 3, 1], [V()], lambda x: x[-2:3])
case("select", [1, -1], [V()], lambda x: x.select(1, -1))
case("transpose", [0, 2], [V()], lambda x: x.transpose(0, 2))
case("permute", [[2, 0, 1]], [V()], lambda x: x.permute(2, 0, 1))
case("unsqueeze", [-1], [V()], lambda x: x.unsqueeze(-1))
case("squeeze", [], [values((3, 1, 2, 1), "f32")], lambda x: x.squeeze())
case("squeeze_dim", [1], [values((3, 1, 2), "f32")], lambda x: x.squeeze(1))
case("flatten", [1, 2], [V()], lambda x: x.flatten(1, 2))
case("reshape", [[4, 6]], [V()], lambda x: x.reshape(4, 6))
case("broadcast_to", [[2, 3, 4, 2]], [V()], lambda x: x.expand(2, 3, 4, 2))
case("unfold", [1, 2, 1], [V()], lambda x: x.unfold(1, 2, 1))
case("diagonal", [1, 0, 1], [V()], lambda x: torch.diagonal(x, 1, 0, 1))
case("movedim", [0, -1], [V()], lambda x: torch.movedim(x, 0, -1))
case("flip", [[0, 2]], [V()], lambda x: torch.flip(x, (0, 2)))
case("roll", [-1, 1], [V()], lambda x: torch.roll(x, -1, 1))
case("roll", [5, 0], [V()], lambda x: torch.roll(x, 5, 0))
case("repeat", [[2, 1, 1, 2]], [V()], lambda x: x.repeat(2, 1, 1, 2))
case("tril", [0], [values((3, 4), "f32")], lambda x: torch.tril(x))
case("triu", [1], [values((3, 4), "f32")], lambda x: torch.triu(x, 1))
case("tril", [-1], [values((2, 3, 3), "f32")], lambda x: torch.tril(x, -1))

# --------------------------------------------------------- indexing and joins
A, B = values((2, 3), "f32"), values((1, 3), "f32")
case("cat", [0], [A, B], lambda a, b: torch.cat([a, b], 0))
case("cat", [1], [A, values((2, 2), "f32")], lambda a, b: torch.cat([a, b], 1))
case("stack", [1], [A, values((2, 3), "f32")], lambda a, b: torch.stack([a, b], 1))
IDX = T([2, 0, 2], "i64")
case("index_select", [1], [values((2, 3), "f32"), IDX], lambda x, i: x.index_select(1, i))
GI = T([[0, 2], [1, 1]], "i64")
case("gather", [1], [values((2, 3), "f32"), GI], lambda x, i: x.gather(1, i))
case("index_add", [0], [values((3, 2), "f32"), T([0, 2, 0], "i64"), values((3, 2), "f32")],
     lambda x, i, s: x.index_add(0, i, s))
case("scatter_add", [1], [values((2, 3), "f32"), GI, values((2, 2), "f32")],
     lambda x, i, s: x.scatter_add(1, i, s))
MASK = T([[True, False, True], [False, False, True]], "bool")
case("masked_fill", [-1.5], [values((2, 3), "f32"), MASK], lambda x, m: x.masked_fill(m, -1.5))
case("where_cond", [], [MASK, values((2, 3), "f32"), values((3,), "f32")],
     lambda c, a, b: torch.where(c, a, b))
case("embedding", [], [values((5, 3), "f32"), T([[4, 0], [4, 1]], "i64")],
     lambda w, i: torch.nn.functional.embedding(i, w), grad_inputs=[0])

# ---------------------------------------------------------------------- linalg
for dt in ("f32", "f64"):
    case("matmul", [], [values((3, 4), dt), values((4, 2), dt)], torch.matmul)
    case("matmul", [], [values((2, 3, 4), dt), values((4, 5), dt)], torch.matmul)
    case("matmul", [], [values((4,), dt), values((2, 4, 3), dt)], torch.matmul)
    case("matmul", [], [values((2, 1, 3, 4), dt), values((3, 4, 2), dt)], torch.matmul)
    case("matmul", [], [values((4,), dt), values((4,), dt)], torch.matmul)
    case("bmm", [], [values((2, 3, 4), dt), values((2, 4, 2), dt)], torch.bmm)
    case("dot", [], [values((5,), dt), values((5,), dt)], torch.dot)

# -------------------------------------------------------------------- creation
case("linspace", [0.0, 1.0, 5], [], lambda: torch.linspace(0.0, 1.0, 5))
case("linspace", [-3.0, 2.0, 7], [], lambda: torch.linspace(-3.0, 2.0, 7, dtype=torch.float64))
case("eye", [3], [], lambda: torch.eye(3))
case("one_hot", [4], [T([0, 3, 1], "i64")], lambda i: torch.nn.functional.one_hot(i, 4))

# ------------------------------------------------------------------------- nn
for dt in ("f32", "f64"):
    case("mse_loss", ["mean"], [values((2, 3), dt), values((2, 3), dt)],
         lambda a, b: torch.nn.functional.mse_loss(a, b))
    case("cross_entropy", ["mean"], [values((4, 5), dt), T([1, 0, 4, 2], "i64")],
         lambda x, t: torch.nn.functional.cross_entropy(x, t))
    case("cross_entropy", ["sum"], [values((3, 4), dt), T([1, -100, 3], "i64")],
         lambda x, t: torch.nn.functional.cross_entropy(x, t, reduction="sum"))
    case("nll_loss", ["none"], [torch.log_softmax(values((3, 4), dt), -1), T([1, 0, 3], "i64")],
         lambda x, t: torch.nn.functional.nll_loss(x, t, reduction="none"))


# nn.functional (the modules are thin wrappers over these).
F = torch.nn.functional
for dt in ("f32", "f64"):
    case("f.linear", [], [values((3, 4), dt), values((5, 4), dt), values((5,), dt)], F.linear)
    case("f.layer_norm", [[4], 1e-5], [values((2, 3, 4), dt), values((4,), dt), values((4,), dt)],
         lambda x, w, b: F.layer_norm(x, (4,), w, b, 1e-5))
    case("f.group_norm", [2, 1e-5], [values((2, 4, 3), dt), values((4,), dt), values((4,), dt)],
         lambda x, w, b: F.group_norm(x, 2, w, b, 1e-5))
    case("f.batch_norm_train", [0.1, 1e-5], [values((4, 3, 2), dt), values((3,), dt), values((3,), dt)],
         lambda x, w, b: F.batch_norm(x, None, None, w, b, True, 0.1, 1e-5))
    case("f.conv2d", [[1, 2], [1, 0], [1, 1], 1], [values((2, 2, 5, 5), dt), values((3, 2, 3, 2), dt), values((3,), dt)],
         lambda x, w, b: F.conv2d(x, w, b, (1, 2), (1, 0), (1, 1), 1))
    case("f.conv2d", [[1, 1], [2, 2], [2, 1], 2], [values((1, 4, 5, 6), dt), values((4, 2, 3, 3), dt), values((4,), dt)],
         lambda x, w, b: F.conv2d(x, w, b, 1, 2, (2, 1), 2))
    case("f.conv2d", [[1, 1], [1, 1], [1, 1], 3], [values((1, 3, 4, 4), dt), values((3, 1, 3, 3), dt), values((3,), dt)],
         lambda x, w, b: F.conv2d(x, w, b, 1, 1, 1, 3))
    # a pointwise (1x1) convolution: one product per image, no windows
    case("f.conv2d", [[1, 1], [0, 0], [1, 1], 1], [values((2, 4, 3, 5), dt), values((6, 4, 1, 1), dt), values((6,), dt)],
         lambda x, w, b: F.conv2d(x, w, b, 1, 0, 1, 1))
    # a depthwise convolution with stride, dilation and uneven padding
    case("f.conv2d", [[2, 1], [1, 2], [1, 2], 4], [values((2, 4, 6, 7), dt), values((4, 1, 3, 2), dt), values((4,), dt)],
         lambda x, w, b: F.conv2d(x, w, b, (2, 1), (1, 2), (1, 2), 4))
    case("f.conv1d", [2, 1, 2, 1], [values((2, 3, 9), dt), values((4, 3, 3), dt), values((4,), dt)],
         lambda x, w, b: F.conv1d(x, w, b, 2, 1, 2, 1))
    case("f.conv_transpose2d", [[2, 1], [1, 0], [1, 0], 1, [1, 1]], [values((1, 2, 3, 4), dt), values((2, 3, 3, 2), dt), values((3,), dt)],
         lambda x, w, b: F.conv_transpose2d(x, w, b, (2, 1), (1, 0), (1, 0), 1, 1))
    case("f.max_pool2d", [[2, 2], [2, 1], [0, 1]], [values((1, 2, 4, 5), dt)],
         lambda x: F.max_pool2d(x, 2, (2, 1), (0, 1)))
    case("f.max_pool2d_with_indices", [[3, 2], [1, 2], [1, 0]], [values((1, 1, 4, 5), dt)],
         lambda x: tuple(F.max_pool2d(x, (3, 2), (1, 2), (1, 0), return_indices=True)))
    for cip in (True, False):
        case("f.avg_pool2d", [[3, 3], [2, 2], [1, 1], cip], [values((1, 2, 5, 5), dt)],
             lambda x, c=cip: F.avg_pool2d(x, 3, 2, 1, count_include_pad=c))
    case("f.sdpa", [False], [values((2, 3, 4), dt), values((2, 5, 4), dt), values((2, 5, 3), dt)],
         lambda q, k, v: F.scaled_dot_product_attention(q, k, v))
    case("f.sdpa", [True], [values((2, 4, 4), dt), values((2, 4, 4), dt), values((2, 4, 3), dt)],
         lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    case("f.sdpa_mask", [], [values((1, 3, 4), dt), values((1, 4, 4), dt), values((1, 4, 2), dt),
                             T([[True, False, True, True], [True, True, False, False], [False, True, True, True]], "bool")],
         lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m))
    case("f.embedding", [1], [T([[0, 1], [2, 1]], "i64"), values((3, 4), dt)],
         lambda i, w: F.embedding(i, w, padding_idx=1))

# -------------------------------------------------------- autograd scenarios
# A scenario is a short program run by name in parity.rs on the same inputs.
def scenario(name, inputs, fn):
    """fn(*leaves) -> (list of output tensors); grads of every leaf that
    requires grad after fn has called backward, or 'err'."""
    global count
    ident = count
    count += 1
    lines = ["case %d scenario:%s" % (ident, name)]
    leaves = []
    for x in inputs:
        rg = x.dtype.is_floating_point
        leaves.append(x.detach().clone().requires_grad_(rg))
        lines.append("in %s %s %s" % (NAME[x.dtype], "1" if rg else "0", fmt_tensor(x)))
    try:
        outs = fn(*leaves)
    except RuntimeError:
        lines += ["err", "end"]
        out_lines.extend(lines)
        return
    for o in outs:
        lines.append("out %s %s" % (NAME[o.dtype], fmt_tensor(o)))
    for k, leaf in enumerate(leaves):
        if leaf.requires_grad:
            lines.append("grad %d %s" % (k, "none" if leaf.grad is None else fmt_tensor(leaf.grad)))
    lines.append("end")
    out_lines.extend(lines)


def inplace_view_mul(x):
    h = x * 2
    h[1:3].mul_(10)
    h.sum().backward()
    return [h.detach()]


def inplace_view_add_other(x, y):
    h = x * 1.5
    h.narrow(0, 1, 2).add_(y * y)
    (h * h).sum().backward()
    return [h.detach()]


def inplace_view_transposed(x):
    h = x.exp()
    h.t()[0].mul_(3)
    (h * torch.arange(6.0, dtype=x.dtype).reshape(2, 3)).sum().backward()
    return [h.detach()]


def inplace_view_transposed_ok(x):
    h = x * 2
    h.t()[0].mul_(3)
    (h * torch.arange(6.0, dtype=x.dtype).reshape(2, 3)).sum().backward()
    return [h.detach()]


def inplace_view_then_use_view(x):
    h = x + 0
    v = h[0]
    v.mul_(x[0])
    (v.sum() + h.sum()).backward()
    return [h.detach()]


def inplace_view_saved_modified(x):
    h = x * 1
    y = h.exp()  # saves its output, not h
    z = h * h  # saves h
    h[0].fill_(2.0)
    (y.sum() + z.sum()).backward()
    return [h.detach()]


def inplace_view_fill(x):
    h = x * 3
    h[1].fill_(0.5)
    (h * h).sum().backward()
    return [h.detach()]


def inplace_view_copy(x, y):
    h = x.sin()
    h[:, 1].copy_(y)
    (h * h).sum().backward()
    return [h.detach()]


def second_backward_add(x):
    y = (x + 1).sum()
    y.backward()
    y.backward()
    return [y.detach()]


def second_backward_mul(x):
    y = (x * x).sum()
    y.backward()
    y.backward()
    return [y.detach()]


def clamp_at_bounds(x):
    y = x.clamp(-0.5, 0.5)
    y.sum().backward()
    return [y.detach()]


def inplace_leaf_view(x):
    x[0].mul_(2)
    return [x.detach()]


X4 = T([1.0, 2.0, 3.0, 4.0], "f64")
scenario("inplace_view_mul", [X4.clone()], inplace_view_mul)
scenario("inplace_view_add_other", [values((4, 2), "f64"), values((2, 2), "f64")], inplace_view_add_other)
scenario("inplace_view_transposed", [values((2, 3), "f64")], inplace_view_transposed)
scenario("inplace_view_transposed_ok", [values((2, 3), "f64")], inplace_view_transposed_ok)
scenario("inplace_view_then_use_view", [values((2, 3), "f64")], inplace_view_then_use_view)
scenario("inplace_view_saved_modified", [values((2, 3), "f64")], inplace_view_saved_modified)
scenario("inplace_view_fill", [values((2, 3), "f64")], inplace_view_fill)
scenario("inplace_view_copy", [values((2, 3), "f64"), values((2,), "f64")], inplace_view_copy)
scenario("second_backward_add", [X4.clone()], second_backward_add)
scenario("second_backward_mul", [X4.clone()], second_backward_mul)
scenario("clamp_at_bounds", [T([-1.0, -0.5, 0.0, 0.5, 1.0], "f64")], clamp_at_bounds)
scenario("inplace_leaf_view", [X4.clone()], inplace_leaf_view)

# Type promotion (issue 46): in its own file, appended last so the cases
# above keep their values.
sys.path.insert(0, HERE)
import gen_promote  # noqa: E402

gen_promote.promotion_cases(sys.modules[__name__])
import gen_index  # noqa: E402

gen_index.index_cases(sys.modules[__name__])

if __name__ == "__main__":
    if torch.__version__.split("+")[0] != PINNED:
        print("warning: generated with torch %s, pinned %s" % (torch.__version__, PINNED), file=sys.stderr)
    path = os.path.join(HERE, "cases.txt")
    with open(path, "w") as f:
        f.write("# generated by gen.py with torch %s; do not edit\n" % torch.__version__.split("+")[0])
        f.write("\n".join(out_lines) + "\n")
    print("%d cases, %d bytes -> %s" % (count, os.path.getsize(path), path))
