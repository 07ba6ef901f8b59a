"""Type-promotion parity cases (issue 46), appended by gen.py.

Every dtype pair for the binary rows, comparisons, `where`, `cat` and the
in-place forms; tensors against 0-d tensors; each kind of number (int,
float, bool, NaN, out of range) against each dtype; float-only unary rows
on integers. PyTorch's answer, or its refusal (`err`), is the reference.

Also writes promote_types.txt: `torch.promote_types` and `torch.can_cast`
for every pair of kael's ten dtypes (tests/tests/promotion.rs reads it).
"""
import os

import torch

DTYPES = ["f32", "f64", "i64", "i32", "i16", "i8", "u8", "bool"]

ALL_DT = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16,
          "bf16": torch.bfloat16, "i64": torch.int64, "i32": torch.int32,
          "i16": torch.int16, "i8": torch.int8, "u8": torch.uint8, "bool": torch.bool}

# (kael op, torch fn, every pair?)
BINARY = [
    ("add", torch.add, True),
    ("sub", torch.sub, True),
    ("mul", torch.mul, True),
    ("div", torch.div, True),
    ("maximum", torch.maximum, True),
    ("floor_divide", torch.floor_divide, True),
    ("pow", torch.pow, True),
    ("bitwise_xor", torch.bitwise_xor, True),
    ("minimum", torch.minimum, False),
    ("atan2", torch.atan2, False),
    ("remainder", torch.remainder, False),
    ("fmod", torch.fmod, False),
    ("bitwise_and", torch.bitwise_and, False),
    ("bitwise_or", torch.bitwise_or, False),
    ("bitwise_left_shift", torch.bitwise_left_shift, False),
    ("bitwise_right_shift", torch.bitwise_right_shift, False),
]
COMPARE = [("eq", torch.eq, True), ("lt", torch.lt, True), ("ge", torch.ge, False)]
# pairs for the rows not run on every pair
SOME_PAIRS = [("i64", "i64"), ("i32", "i16"), ("u8", "i8"), ("u8", "u8"), ("i64", "f32"),
              ("f32", "f64"), ("bool", "bool"), ("bool", "i32"), ("f64", "i8")]
NUMBERS = [2, -3, 2.5, True, float("nan"), 1e30, 300]
SCALAR_OPS = [
    ("add_scalar", lambda x, n: x + n),
    ("mul_scalar", lambda x, n: x * n),
    ("sub_scalar", lambda x, n: x - n),
    ("div_scalar", lambda x, n: x / n),
    ("rsub", lambda x, n: n - x),
    ("rdiv", lambda x, n: n / x),
    ("pow_scalar", lambda x, n: x ** n),
    ("cmp_number:ge", lambda x, n: x >= n),
    ("cmp_number:eq", lambda x, n: x == n),
]


RANGE = {"i64": (-2**63, 2**63 - 1), "i32": (-2**31, 2**31 - 1), "i16": (-2**15, 2**15 - 1),
         "i8": (-128, 127), "u8": (0, 255)}


def wraps(dt, n):
    """Whether PyTorch would wrap the int number `n` into an integer tensor
    of dtype `dt` (kael refuses: "wrap")."""
    if isinstance(n, bool) or not isinstance(n, int) or dt not in RANGE:
        return None
    lo, hi = RANGE[dt]
    return None if lo <= n <= hi else "wrap"


def pairs():
    return [(a, b) for a in DTYPES for b in DTYPES]


def small_ints(g, shape, dt):
    """Values with no zero divisors and small exponents, so that integer
    division, remainder and pow stay defined and exact."""
    v = g.values(shape, dt)
    if dt == "bool":
        return v
    if not v.dtype.is_floating_point:
        v = torch.where(v == 0, torch.ones_like(v), v)
    return v


def promotion_cases(g):
    case = g.case
    # every pair, tensor with tensor (broadcast [2,3] with [3])
    for op, fn, every in BINARY:
        for a, b in (pairs() if every else SOME_PAIRS):
            # PyTorch has no derivative for floor_divide (kael's is 0)
            case(op, [], [g.values((2, 3), a), small_ints(g, (3,), b)], fn,
                 grad=op != "floor_divide")
    for op, fn, every in COMPARE:
        for a, b in (pairs() if every else SOME_PAIRS):
            case(op, [], [g.values((2, 3), a), g.values((3,), b)], fn)
    # a tensor with a 0-d tensor, both orders: the 0-d operand joins only
    # with a higher category
    for a, b in pairs():
        case("add", [], [g.values((2, 3), a), g.values((), b)], torch.add)
        case("div", [], [g.values((), a), small_ints(g, (3,), b)], torch.div)
        case("lt", [], [g.values((2, 3), a), g.values((), b)], torch.lt)
    # where and cat over every pair
    for a, b in pairs():
        cond = g.values((2, 3), "bool")
        case("where_cond", [], [cond, g.values((2, 3), a), g.values((3,), b)], torch.where)
        case("cat", [0], [g.values((2, 3), a), g.values((1, 3), b)],
             lambda x, y: torch.cat([x, y], 0))
    # in place: the result must fit the destination's category
    for op, fn in [("add_", "add_"), ("mul_", "mul_"), ("div_", "div_")]:
        for a, b in pairs():
            def inplace(x, y, fn=fn):
                z = x.clone()
                getattr(z, fn)(y)
                return z
            case("inplace2:" + op, [], [g.values((2, 3), a), small_ints(g, (3,), b)], inplace)
    # numbers of each kind against each dtype
    for op, fn in SCALAR_OPS:
        for dt in DTYPES:
            for n in NUMBERS:
                x = small_ints(g, (2, 3), dt) if op in ("rdiv",) else g.values((2, 3), dt)
                case(op, [n], [x], lambda x, n=n, fn=fn: fn(x, n), kael_refuses=wraps(dt, n))
    for op, meth in [("add_scalar_", "add_"), ("mul_scalar_", "mul_"), ("div_scalar_", "div_")]:
        for dt in DTYPES:
            for n in [2, 2.5, True, 300]:
                def inplace(x, n=n, meth=meth):
                    z = x.clone()
                    getattr(z, meth)(n)
                    return z
                case("inplace_number:" + op, [n], [g.values((2, 3), dt)], inplace,
                     kael_refuses=wraps(dt, n))
    # float-only unary rows on integers and bools compute in float32
    for name, fn in [("sqrt", torch.sqrt), ("exp", torch.exp), ("sin", torch.sin),
                     ("sigmoid", torch.sigmoid)]:
        for dt in ["i64", "i32", "u8", "bool"]:
            case(name, [], [g.values((2, 3), dt)], fn)
    # the gradient of x ** 0 at 0 is 0, not NaN
    zero_ish = g.T([0.0, 1.5, -2.0])
    case("pow_scalar", [0.0], [zero_ish.clone()], lambda x: x ** 0.0)
    case("pow", [], [zero_ish.clone(), g.T([0.0, 0.0, 2.0])], torch.pow)

    # cross entropy with class-probability targets (PyTorch computes; kael
    # refused before issue 46)
    for shape, red in [((4, 3), "mean"), ((4, 3), "sum"), ((4, 3), "none"), ((3,), "mean"),
                       ((2, 3, 2), "mean"), ((2, 3, 2), "none")]:
        dim = 1 if len(shape) > 1 else 0
        probs = torch.softmax(g.values(shape, "f32"), dim)
        case("cross_entropy", [red], [g.values(shape, "f32"), probs],
             lambda x, p, red=red: torch.nn.functional.cross_entropy(x, p, reduction=red))
    case("cross_entropy", ["mean"], [g.values((4, 3), "f32"), g.values((4, 2), "f32")],
         lambda x, p: torch.nn.functional.cross_entropy(x, p))

    # conv2d(padding="same"): odd and even kernels, dilation
    for wshape, dil in [((3, 2, 3, 3), 1), ((3, 2, 4, 2), 1), ((2, 2, 3, 2), 2)]:
        case("f.conv2d_same", [dil], [g.values((1, 2, 5, 6), "f32"), g.values(wshape, "f32")],
             lambda x, w, dil=dil: torch.nn.functional.conv2d(x, w, padding="same", dilation=dil))

    names = list(ALL_DT)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "promote_types.txt")
    with open(path, "w") as f:
        f.write("# a b promote_types(a, b) can_cast(a, b); generated by gen_promote.py with torch %s\n"
                % torch.__version__.split("+")[0])
        for a in names:
            for b in names:
                r = torch.promote_types(ALL_DT[a], ALL_DT[b])
                rn = [k for k, v in ALL_DT.items() if v == r][0]
                f.write("%s %s %s %d\n" % (a, b, rn, int(torch.can_cast(ALL_DT[a], ALL_DT[b]))))
