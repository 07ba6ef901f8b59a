"""Advanced-indexing parity cases (issue 46), appended by gen.py.

A key is one `s:` argument, items joined by ';': `tK` is input tensor K
(an integer tensor or a bool mask), `i<n>` an int, `a:b:c` a slice (parts
may be empty), `N` a new axis, `E` an ellipsis. `index` cases compute
`x[key]`; `index_put` cases compute `z = x.clone(); z[key] = v` (or
`z.index_put_(indices, v, accumulate=True)`) with `v` the last input.
"""
import torch


def parse_key(spec, inputs):
    items = []
    for it in spec.split(";"):
        if it.startswith("t"):
            items.append(inputs[int(it[1:])])
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


def L(vals):
    return torch.tensor(vals, dtype=torch.int64)


def index_cases(g):
    case = g.case
    x34 = lambda: g.values((3, 4), "f32")
    x234 = lambda: g.values((2, 3, 4), "f32")
    x2345 = lambda: g.values((2, 3, 4, 5), "f64")

    def idx(spec, inputs):
        case("index", [spec], inputs, lambda *xs, spec=spec: xs[0][parse_key(spec, xs)])

    # pairs broadcast together (not an outer product)
    idx("t1;t2", [x34(), L([0, 2]), L([1, 3])])
    idx("t1;t2", [x34(), L([[0], [2]]), L([1, 3])])
    idx("t1", [x34(), L([-1, 0, -3])])
    idx("t1", [x34(), L([[0, 1], [2, 2]])])
    idx("t1;t2", [x34(), L([[0, 1], [2, 2]]), L([3])])
    idx(":;t1", [x34(), L([[3, 0], [-1, 1]])])
    # masks, whole and on leading dims, and with a slice after
    x = x34()
    idx("t1", [x, x > 0])
    y = x234()
    idx("t1", [y, y[:, :, 0] > 0])
    idx("t1;1:3", [y, torch.tensor([True, False])])
    idx("E;t1", [y, torch.tensor([True, False, True, True])])
    # position rules: adjacent advanced dims stay in place, separated go first
    idx(":;t1;t2", [x2345(), L([0, 2]), L([1, 3])])
    idx(":;t1;:;t2", [x2345(), L([0, 2]), L([1, 4])])
    idx("t1;:;:;t2", [x2345(), L([[1], [0]]), L([0, 4, 2])])
    # ints stay basic beside a tensor (PyTorch, unlike numpy): x[0, :, [1, 2]]
    idx("i0;:;t1", [x234(), L([1, 2])])
    idx("i-1;t1", [x234(), L([2, 0])])
    idx("N;t1;::2", [x234(), L([1, 0, 1])])
    idx("E;t1", [x234(), L([0, 3])])
    # integer index tensors of other dtypes, and empty ones
    case("index", ["t1"], [x34(), torch.tensor([2, 0], dtype=torch.int32)],
         lambda x, i: x[i])
    idx("t1", [x34(), L([]).reshape(0)])
    # refusals: out of range, float index, mask of the wrong shape
    idx("t1", [x34(), L([3])])
    idx(":;t1", [x34(), L([-5])])
    case("index", ["t1"], [x34(), torch.tensor([0.0, 1.0])], lambda x, i: x[i], grad=False)
    idx("t1", [x34(), torch.tensor([True, False])])
    idx("t1;t2", [x34(), L([0, 1, 2]), L([0, 1])])

    def put(spec, inputs, accumulate=False):
        def fn(*xs, spec=spec, accumulate=accumulate):
            z = xs[0].clone()
            key = parse_key(spec, xs)
            if accumulate:
                z.index_put_(tuple(k for k in key if isinstance(k, torch.Tensor)), xs[-1],
                             accumulate=True)
            else:
                z[key] = xs[-1]
            return z
        case("index_put", [spec, accumulate], inputs, fn)

    put("t1;t2", [x34(), L([0, 2]), L([1, 3]), g.values((2,), "f32")])
    put("t1", [x34(), L([2, 0]), g.values((4,), "f32")])
    put("t1", [x34(), L([-1]), g.values((1, 4), "f32")])
    x = x34()
    put("t1", [x, x > 0.5, g.T(0.0)])
    put(":;t1", [x34(), L([[0, 1], [1, 3]]), g.values((3, 2, 2), "f32")])
    put("t1", [x34(), L([0, 2, 0]), g.values((3, 4), "f32")], accumulate=True)
    put("t1;t2", [x34(), L([1, 1, 2]), L([0, 0, 3]), g.values((3,), "f32")], accumulate=True)
    put("t1", [g.values((5,), "i64"), L([4, 1]), g.values((2,), "i64")])
    put("t1", [x34(), L([0, 7]), g.values((4,), "f32")])
