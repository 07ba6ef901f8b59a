"""Values against numpy: op-table rows, operators, reductions, matmul."""

import math

import numpy as np
import pytest

import kael
from conftest import assert_close

X = [[-1.5, -0.25, 0.0], [0.5, 1.0, 2.5]]
POS = [[0.25, 0.5, 1.0], [1.5, 2.0, 4.0]]

UNARY = {
    "neg": (X, np.negative),
    "abs": (X, np.abs),
    "exp": (X, np.exp),
    "log": (POS, np.log),
    "sqrt": (POS, np.sqrt),
    "sqr": (X, np.square),
    "recip": (POS, np.reciprocal),
    "tanh": (X, np.tanh),
    "sigmoid": (X, lambda x: 1 / (1 + np.exp(-x))),
    "relu": (X, lambda x: np.maximum(x, 0)),
    "silu": (X, lambda x: x / (1 + np.exp(-x))),
    "sin": (X, np.sin),
    "cos": (X, np.cos),
    "sign": (X, np.sign),
    "erf": (X, np.vectorize(math.erf)),
    "gelu": (X, np.vectorize(lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))))),
    "log1p": (POS, np.log1p),
    "expm1": (X, np.expm1),
    "rsqrt": (POS, lambda x: 1 / np.sqrt(x)),
    "floor": (X, np.floor),
    "ceil": (X, np.ceil),
    "trunc": (X, np.trunc),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_row_matches_numpy(device, name):
    data, ref = UNARY[name]
    x = kael.tensor(data, dtype=kael.float64, device=device)
    assert_close(getattr(x, name)(), ref(np.array(data)), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_in_place_matches_out_of_place(device, name):
    data, _ = UNARY[name]
    x = kael.tensor(data, device=device)
    want = getattr(x, name)().tolist()
    getattr(x, name + "_")()
    assert x.tolist() == want and x.version == 1


def test_parametrised_unary_rows_take_pytorch_arguments(device):
    x = kael.tensor(X, dtype=kael.float64, device=device)
    a = np.array(X)
    assert_close(x.clamp(min=-0.5), np.maximum(a, -0.5))
    assert_close(x.clamp(max=1.0), np.minimum(a, 1.0))
    assert_close(x.leaky_relu(0.1), np.where(a >= 0, a, 0.1 * a))
    assert_close(x.hardtanh(), np.clip(a, -1, 1))
    assert_close(x.elu(), np.where(a > 0, a, np.expm1(a)))
    assert_close(x.softplus(), np.log1p(np.exp(a)))
    assert_close(x.powf(2.0), a**2)
    assert_close(x.affine(2.0, 1.0), 2 * a + 1)


BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "atan2": np.arctan2,
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_row_broadcasts_like_numpy(device, name):
    a = np.array(X)
    b = np.array([0.5, -2.0, 3.0])
    ka = kael.tensor(a, device=device)
    kb = kael.tensor(b, device=device)
    assert_close(getattr(ka, name)(kb), BINARY[name](a, b))


def test_operators_take_numbers_on_either_side(device):
    a = np.array(POS)
    k = kael.tensor(a, dtype=kael.float64, device=device)
    assert_close(k + 2, a + 2)
    assert_close(2 + k, 2 + a)
    assert_close(k - 2, a - 2)
    assert_close(2 - k, 2 - a)
    assert_close(k * 3, a * 3)
    assert_close(3 * k, 3 * a)
    assert_close(k / 4, a / 4)
    assert_close(4 / k, 4 / a)
    assert_close(k**2, a**2)
    assert_close(2**k, 2**a)
    assert_close(k**k, a**a)
    assert_close(-k, -a)
    assert_close(abs(-k), a)
    assert_close(k % 1.0, np.mod(a, 1.0))


def test_operators_between_tensors_and_lists(device):
    k = kael.tensor([1.0, 2.0], device=device)
    assert (k + [10.0, 20.0]).tolist() == [11.0, 22.0]
    assert (k * k).tolist() == [1.0, 4.0]


def test_comparisons_give_bool_tensors(device):
    a = np.array(X)
    k = kael.tensor(a, device=device)
    for got, want in [
        (k < 0.5, a < 0.5),
        (k <= 0.5, a <= 0.5),
        (k > 0, a > 0),
        (k >= 0, a >= 0),
        (k == 0, a == 0),
        (k != 0, a != 0),
    ]:
        assert got.dtype == kael.bool
        assert got.tolist() == want.tolist()
    m = k > 0
    assert (m & (k < 2)).tolist() == ((a > 0) & (a < 2)).tolist()
    assert (m | (k < -1)).tolist() == ((a > 0) | (a < -1)).tolist()
    assert (~m).tolist() == (~(a > 0)).tolist()


def test_augmented_assignment_is_in_place(device):
    k = kael.ones(3, device=device)
    same = k
    k += 1
    k *= kael.tensor([1.0, 2.0, 3.0], device=device)
    k -= 0.5
    k /= 2
    assert same.is_same(k)
    assert k.tolist() == [0.75, 1.75, 2.75]
    assert k.version == 4


@pytest.mark.parametrize("dim", [None, 0, 1, (0, 1), -1])
def test_sum_and_mean_match_numpy(device, dim):
    a = np.array(X)
    k = kael.tensor(a, dtype=kael.float64, device=device)
    nd = None if dim is None else dim
    assert_close(k.sum(dim), a.sum(axis=nd))
    assert_close(k.mean(dim, keepdim=True), a.mean(axis=nd, keepdims=True))


def test_max_min_arg_and_var_match_numpy(device):
    a = np.array([[3.0, -1.0, 7.0], [2.0, 9.0, 0.5]])
    k = kael.tensor(a, dtype=kael.float64, device=device)
    assert k.max().item() == 9.0 and k.min().item() == -1.0
    v, i = k.max(dim=1)
    assert v.tolist() == [7.0, 9.0] and i.tolist() == [2, 1]
    assert k.argmax().item() == 4 and k.argmin(dim=1).tolist() == [1, 2]
    assert_close(k.var(dim=1), a.var(axis=1, ddof=1))
    assert_close(k.std(), a.std(ddof=1))
    assert_close(k.prod(dim=0), a.prod(axis=0))
    assert_close(k.cumsum(1), a.cumsum(axis=1))
    assert_close(k.norm(), np.linalg.norm(a))


def test_softmax_and_log_softmax_match_numpy(device):
    a = np.array(X)
    k = kael.tensor(a, dtype=kael.float64, device=device)
    e = np.exp(a - a.max(axis=1, keepdims=True))
    sm = e / e.sum(axis=1, keepdims=True)
    assert_close(k.softmax(1), sm)
    assert_close(k.log_softmax(-1), np.log(sm))
    assert_close(k.logsumexp(1), np.log(np.exp(a).sum(axis=1)))


def test_sort_and_topk(device):
    k = kael.tensor([3.0, 1.0, 2.0], device=device)
    v, i = k.sort()
    assert v.tolist() == [1.0, 2.0, 3.0] and i.tolist() == [1, 2, 0]
    v, i = k.topk(2)
    assert v.tolist() == [3.0, 2.0] and i.tolist() == [0, 2]


@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((2, 3, 4), (4, 2)), ((2, 3, 4), (2, 4, 5))])
def test_matmul_matches_numpy(device, shapes):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shapes[0])
    b = rng.standard_normal(shapes[1])
    ka = kael.tensor(a, dtype=kael.float64, device=device)
    kb = kael.tensor(b, dtype=kael.float64, device=device)
    assert_close(ka @ kb, a @ b, rtol=1e-10, atol=1e-12)
    assert_close(kael.matmul(ka, kb), a @ b, rtol=1e-10, atol=1e-12)


def test_creation_functions(device):
    assert kael.zeros(2, 3, device=device).shape == (2, 3)
    assert kael.ones((2,), device=device).tolist() == [1.0, 1.0]
    assert kael.full((2, 2), 7.0, device=device).tolist() == [[7, 7], [7, 7]]
    assert kael.arange(5, device=device).dtype == kael.int64
    assert kael.arange(1.0, 2.0, 0.25, device=device).tolist() == [1.0, 1.25, 1.5, 1.75]
    assert_close(kael.linspace(0, 1, 5, device=device), np.linspace(0, 1, 5))
    assert kael.eye(2, device=device).tolist() == [[1, 0], [0, 1]]
    assert kael.tensor([[1, 2], [3, 4]], device=device).dtype == kael.int64
    assert kael.tensor([True, False], device=device).dtype == kael.bool
    assert kael.tensor([1, 2.5], device=device).dtype == kael.float32


def test_random_functions_follow_the_seed(device):
    kael.manual_seed(3)
    a = kael.randn(100, device=device).tolist()
    kael.manual_seed(3)
    b = kael.randn(100, device=device).tolist()
    assert a == b
    u = np.array(kael.rand(1000, device=device).tolist())
    assert u.min() >= 0 and u.max() < 1 and 0.4 < u.mean() < 0.6


def test_cat_stack_where(device):
    a = kael.tensor([1.0, 2.0], device=device)
    b = kael.tensor([3.0, 4.0], device=device)
    assert kael.cat([a, b]).tolist() == [1, 2, 3, 4]
    assert kael.stack([a, b], dim=1).tolist() == [[1, 3], [2, 4]]
    assert kael.where(a > 1.5, a, 0.0).tolist() == [0.0, 2.0]


def test_ragged_lists_are_refused():
    with pytest.raises(kael.KaelValueError, match="ragged"):
        kael.tensor([[1.0, 2.0], [3.0]])
