"""The issue-46 findings, as a PyTorch user tries them (PyTorch 2.15's
answers written out by hand; the broad check is test_promotion_parity.py)."""
import math

import pytest

import kael


def test_a_float_number_promotes_an_integer_tensor():
    x = kael.tensor([1, 2, -3])
    assert (x + 2.5).dtype == kael.float32 and (x + 2.5).tolist() == [3.5, 4.5, -0.5]
    assert (x * 0.5).tolist() == [0.5, 1.0, -1.5]
    assert (x >= 2.5).tolist() == [False, False, False]
    assert all(math.isnan(v) for v in (x + float("nan")).tolist())
    assert (x + 2).dtype == kael.int64
    with pytest.raises(TypeError):  # KaelDTypeError: int64 cannot hold the result
        x += 2.5
    assert x.tolist() == [1, 2, -3]


def test_mixed_dtypes_and_integer_ops_compute():
    a = kael.tensor([1.0, 2.0])
    b = kael.tensor([1.0, 2.0], dtype=kael.float64)
    assert (a + b).dtype == kael.float64
    i = kael.tensor([7, -7])
    assert (i / 2).tolist() == [3.5, -3.5]
    assert (i // 2).tolist() == [3, -4]
    assert (i ** 2).tolist() == [49, 49] and (i ** 2).dtype == kael.int64
    assert (i ^ 1).tolist() == [6, -8]
    assert (i << 1).tolist() == [14, -14] and (i >> 1).tolist() == [3, -4]
    t = kael.tensor([True, False])
    assert (t + t).dtype == kael.bool and (t + 1).tolist() == [2, 1]
    assert kael.cat([a, b]).dtype == kael.float64


def test_full_infers_its_dtype_from_the_fill_value():
    assert kael.full((2, 2), 3).dtype == kael.int64
    assert kael.full((2,), True).dtype == kael.bool
    assert kael.full((2,), 1.5).dtype == kael.float32


def test_the_gradient_of_x_to_the_zero_is_zero_at_zero():
    x = kael.tensor([0.0, 2.0], requires_grad=True)
    (x ** 0.0).sum().backward()
    assert x.grad.tolist() == [0.0, 0.0]


def test_index_tensors_broadcast_together():
    x = kael.arange(12).reshape(3, 4)
    assert x[kael.tensor([0, 2]), kael.tensor([1, 3])].tolist() == [1, 11]
    assert x[[0, 2], [1, 3]].tolist() == [1, 11]
    assert x[[-1]].tolist() == [[8, 9, 10, 11]]
    assert x[x > 9].tolist() == [10, 11]
    x[x > 9] = 0
    assert x.reshape(-1).tolist()[-3:] == [9, 0, 0]
    x[[0, 1], [0, 0]] = kael.tensor([-1, -2])
    assert x[:, 0].tolist() == [-1, -2, 8]


def test_index_assignment_carries_gradients():
    x = kael.zeros(3, requires_grad=True)
    v = kael.tensor([2.0, 3.0], requires_grad=True)
    y = x * 1.0
    y[[0, 2]] = v
    (y * kael.tensor([1.0, 10.0, 100.0])).sum().backward()
    assert x.grad.tolist() == [0.0, 10.0, 0.0]
    assert v.grad.tolist() == [1.0, 100.0]


def test_function_forms_come_from_the_tables():
    x = kael.tensor([1.0, 4.0])
    assert kael.sqrt(x).tolist() == [1.0, 2.0]
    assert kael.add(x, 1).tolist() == [2.0, 5.0]
    assert kael.floor_divide(kael.tensor([7]), 2).tolist() == [3]
    assert kael.sum(x).item() == 5.0
    table = kael._kael._op_table()
    rows = set(table["unary"] + table["binary"] + table["compare"]) - set(table["internal"])
    assert sorted(r for r in rows if not hasattr(kael, r)) == []


def test_everyday_helpers():
    x = kael.tensor([1.0, float("nan"), float("inf"), -2.0])
    assert kael.isnan(x).tolist() == [False, True, False, False]
    assert kael.isinf(x).tolist() == [False, False, True, False]
    assert kael.isfinite(x).tolist() == [True, False, False, True]
    assert kael.allclose(kael.tensor([1.0, 2.0]), kael.tensor([1.0, 2.0 + 1e-7]))
    assert not kael.allclose(kael.tensor([1.0]), kael.tensor([1.1]))
    kael.manual_seed(0)
    r = kael.randint(3, 7, (100,))
    assert r.dtype == kael.int64 and min(r.tolist()) >= 3 and max(r.tolist()) <= 6
    assert sorted(kael.randperm(5).tolist()) == [0, 1, 2, 3, 4]
    m = kael.nn.Sequential(kael.nn.Flatten(), kael.nn.Identity())
    assert m(kael.zeros(2, 3, 4)).shape == (2, 12)
    layers = kael.nn.ModuleList([kael.nn.Linear(2, 2), kael.nn.Linear(2, 2)])
    assert len(list(layers.parameters())) == 4 and len(layers) == 2


def test_max_along_a_dim_is_a_values_indices_pair():
    r = kael.tensor([[1.0, 5.0], [7.0, 2.0]]).max(1)
    assert r.values.tolist() == [5.0, 7.0] and r.indices.tolist() == [1, 0]
    v, i = kael.tensor([[1.0, 5.0]]).min(1)
    assert (v.tolist(), i.tolist()) == ([1.0], [0])


def test_pad_bce_adaptive_pool_and_clipping_against_hand_values():
    F = kael.nn.functional
    x = kael.tensor([[1.0, 2.0]])
    # F.pad(x, (1, 2)) and F.pad(x, (0, 0, 1, 0), value=9)
    assert F.pad(x, (1, 2)).tolist() == [[0.0, 1.0, 2.0, 0.0, 0.0]]
    assert F.pad(x, (0, 0, 1, 0), value=9.0).tolist() == [[9.0, 9.0], [1.0, 2.0]]
    # BCE: -(ln 0.5 + ln 0.9) / 2 with x = [0.5, 0.1], t = [1, 0]
    p, t = kael.tensor([0.5, 0.1]), kael.tensor([1.0, 0.0])
    want = -(math.log(0.5) + math.log(0.9)) / 2
    assert abs(F.binary_cross_entropy(p, t).item() - want) < 1e-6
    # with logits: the same loss through log(sigmoid)
    z = kael.tensor([0.0, -2.0])
    want = -(math.log(0.5) + math.log(1 - 1 / (1 + math.exp(2.0)))) / 2
    assert abs(F.binary_cross_entropy_with_logits(z, t).item() - want) < 1e-6
    # adaptive average pooling of a 3x3 ramp to 2x2: cells [0:2, 0:2], [0:2, 1:3], ...
    r = kael.arange(9.0).reshape(1, 1, 3, 3)
    assert F.adaptive_avg_pool2d(r, 2).tolist() == [[[[2.0, 3.0], [5.0, 6.0]]]]
    # clip_grad_norm_: grads (3, 4) have norm 5; clipped to norm 1
    w = kael.tensor([0.0, 0.0], requires_grad=True)
    (w * kael.tensor([3.0, 4.0])).sum().backward()
    n = kael.nn.utils.clip_grad_norm_([w], 1.0)
    assert abs(n.item() - 5.0) < 1e-6
    assert all(abs(a - b) < 1e-5 for a, b in zip(w.grad.tolist(), [0.6, 0.8]))


def test_module_to_apply_and_named_children():
    m = kael.nn.Sequential(kael.nn.Linear(2, 3), kael.nn.ReLU())
    assert [n for n, _ in m.named_children()] == ["0", "1"]
    seen = []
    m.apply(lambda mod: seen.append(type(mod).__name__))
    assert seen == ["Linear", "ReLU", "Sequential"]
    m.to(kael.float64)
    assert all(p.dtype == kael.float64 and p.requires_grad for p in m.parameters())
    assert [n for n, _ in m.named_parameters()] == ["0.weight", "0.bias"]
    assert m(kael.ones(1, 2, dtype=kael.float64)).dtype == kael.float64
