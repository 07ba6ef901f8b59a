"""Type promotion and indexing from Python against PyTorch 2.15's stored answers.

The cases are the promotion section of the parity file
(tests/data/parity/cases.txt, written by gen_promote.py with PyTorch): every
dtype pair for the binary operators, comparisons, `where`, `cat` and the
in-place operators; tensors with 0-d tensors; each kind of Python number
(int, float, bool, nan, out of range) with each dtype; float-only ops on
integers. Each runs here through the Python operators a PyTorch user writes
(`x + 2`, `x // y`, `x >= 2.5`, `x += y`) and must give PyTorch's dtype and
values, or refuse where PyTorch refuses; `refuses` cases are kael's
deliberate refusals (an int number the dtype cannot hold, which PyTorch
wraps). The advanced-indexing section (gen_index.py) runs as `x[key]`
and `x[key] = v`. No torch import: CI checks against the stored outputs.
"""
import math
import operator
import pathlib

import pytest

import kael

CASES = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data" / "parity" / "cases.txt"
DT = {"f32": kael.float32, "f64": kael.float64, "i64": kael.int64, "i32": kael.int32,
      "i16": kael.int16, "i8": kael.int8, "u8": kael.uint8, "bool": kael.bool}

BINARY = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
    "floor_divide": operator.floordiv, "pow": operator.pow, "bitwise_xor": operator.xor,
    "bitwise_and": operator.and_, "bitwise_or": operator.or_, "remainder": operator.mod,
    "bitwise_left_shift": operator.lshift, "bitwise_right_shift": operator.rshift,
    "maximum": lambda a, b: a.maximum(b), "minimum": lambda a, b: a.minimum(b),
    "atan2": lambda a, b: a.atan2(b), "fmod": lambda a, b: a.fmod(b),
    "eq": operator.eq, "lt": operator.lt, "ge": operator.ge,
    "where_cond": None, "cat": None,
}
NUMBER = {
    "add_scalar": lambda x, n: x + n, "mul_scalar": lambda x, n: x * n,
    "sub_scalar": lambda x, n: x - n, "div_scalar": lambda x, n: x / n,
    "rsub": lambda x, n: n - x, "rdiv": lambda x, n: n / x, "pow_scalar": lambda x, n: x ** n,
    "cmp_number:ge": lambda x, n: x >= n, "cmp_number:eq": lambda x, n: x == n,
}
UNARY = {"sqrt", "exp", "sin", "sigmoid"}


def arg(tok):
    if ":" not in tok:
        return None
    kind, v = tok.split(":", 1)
    if kind == "i":
        return int(v)
    if kind == "b":
        return v == "1"
    if kind == "f":
        return float(v)
    return v


def value(tok, dt):
    if dt == "bool":
        return tok == "1"
    if dt.startswith("f"):
        return float(tok)
    return int(tok)


def parse():
    cases, cur = [], None
    for line in CASES.read_text().splitlines():
        t = line.split()
        if not t or t[0].startswith("#"):
            continue
        if t[0] == "case":
            cur = {"id": int(t[1]), "op": t[2], "args": [arg(a) for a in t[3:]], "in": [],
                   "out": [], "err": False, "refuses": False}
        elif t[0] == "in":
            cur["in"].append((t[1], t[3], [value(v, t[1]) for v in t[4:]]))
        elif t[0] == "out":
            cur["out"].append((t[1], t[2], [value(v, t[1]) for v in t[3:]]))
        elif t[0] == "err":
            cur["err"] = True
        elif t[0] == "refuses":
            cur["refuses"] = True
        elif t[0] == "end":
            cases.append(cur)
    return cases


def key_of(spec, xs):
    items = []
    for it in spec.split(";"):
        if it.startswith("t"):
            items.append(xs[int(it[1:])])
        elif it.startswith("i"):
            items.append(int(it[1:]))
        elif it == "N":
            items.append(None)
        elif it == "E":
            items.append(Ellipsis)
        else:
            a, b, c = (it.split(":") + ["", ""])[:3]
            items.append(slice(int(a) if a else None, int(b) if b else None, int(c) if c else None))
    return tuple(items)


def wanted(c):
    op = c["op"]
    if op in ("index", "index_put", "f.conv2d_same"):
        return True
    if op == "cross_entropy" and c["in"][1][0] == "f32":
        return True
    if op in NUMBER or op.startswith("inplace2:") or op.startswith("inplace_number:"):
        return True
    if op in BINARY:
        # the promotion section mixes dtypes or ranks; the earlier sections
        # are covered by the Rust parity suite
        return len({d for d, _, _ in c["in"]}) > 1 or any(s == "-" for _, s, _ in c["in"])
    return op in UNARY and c["in"][0][0] in ("i64", "i32", "u8", "bool")


PROMOTION = [c for c in parse() if wanted(c)]


def make(dt, shape, vals):
    dims = [] if shape == "-" else [int(s) for s in shape.split(",")]
    t = kael.tensor(vals, dtype=DT[dt])
    return t.reshape(dims) if dims else t.reshape([])


def run(c, xs):
    op, a = c["op"], c["args"]
    if op == "f.conv2d_same":
        return kael.nn.functional.conv2d(xs[0], xs[1], padding="same", dilation=a[0])
    if op == "cross_entropy":
        return kael.nn.functional.cross_entropy(xs[0], xs[1], reduction=a[0])
    if op == "index":
        return xs[0][key_of(a[0], xs)]
    if op == "index_put":
        z = xs[0].clone()
        key = key_of(a[0], xs)
        if a[1]:
            z.index_put_(tuple(k for k in key if isinstance(k, kael.Tensor)), xs[-1], accumulate=True)
        else:
            z[key] = xs[-1]
        return z
    if op in NUMBER:
        return NUMBER[op](xs[0], a[0])
    if op == "where_cond":
        return kael.where(xs[0], xs[1], xs[2])
    if op == "cat":
        return kael.cat([xs[0], xs[1]], a[0])
    if op in UNARY:
        return getattr(xs[0], op)()
    if op.startswith("inplace2:") or op.startswith("inplace_number:"):
        z = xs[0].clone()
        other = xs[1] if op.startswith("inplace2:") else a[0]
        m = op.split(":")[1]
        if m.startswith("add"):
            z += other
        elif m.startswith("mul"):
            z *= other
        else:
            z /= other
        return z
    return BINARY[op](xs[0], xs[1])


def close(g, w, dt):
    if dt.startswith("f"):
        if math.isnan(w):
            return math.isnan(g)
        if math.isinf(w):
            return g == w
        tol = 1e-5 if dt == "f32" else 1e-11
        return abs(g - w) <= tol + tol * abs(w)
    return g == w


def test_the_promotion_section_is_there():
    assert len(PROMOTION) > 1000


@pytest.mark.parametrize("c", PROMOTION, ids=lambda c: "%d-%s" % (c["id"], c["op"]))
def test_matches_pytorch(c):
    xs = [make(dt, shape, vals) for dt, shape, vals in c["in"]]
    if c["err"] or c["refuses"]:
        with pytest.raises(Exception) as info:
            run(c, xs)
        if c["refuses"]:
            assert "does not fit" in str(info.value)
        return
    y = run(c, xs)
    dt, shape, vals = c["out"][0]
    assert y.dtype == DT[dt], "case %d: dtype %s, PyTorch %s" % (c["id"], y.dtype, dt)
    dims = [] if shape == "-" else [int(s) for s in shape.split(",")]
    assert list(y.shape) == dims
    got = y.reshape(-1).tolist()
    for g, w in zip(got, vals):
        assert close(g, w, dt), "case %d: %s, PyTorch %s" % (c["id"], got, vals)
