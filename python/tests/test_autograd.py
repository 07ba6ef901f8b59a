"""Autograd from Python against hand-derived gradients and finite
differences."""

import numpy as np
import pytest

import kael
from conftest import assert_close, torch_or_skip


def numeric_grad(f, x, eps=1e-6):
    """Central differences of the scalar function `f` (numpy → float)."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (f(xp) - f(xm)) / (2 * eps)
    return g


def test_backward_matches_finite_differences(device):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 4))
    w = rng.standard_normal((4, 2))

    def f(av):
        x = kael.tensor(av, dtype=kael.float64, device=device)
        wk = kael.tensor(w, dtype=kael.float64, device=device)
        return (x @ wk).tanh().sum().item()

    x = kael.tensor(a, dtype=kael.float64, device=device, requires_grad=True)
    wk = kael.tensor(w, dtype=kael.float64, device=device)
    (x @ wk).tanh().sum().backward()
    assert_close(x.grad, numeric_grad(f, a), rtol=1e-6, atol=1e-8)


def test_gradients_accumulate_and_can_be_reset(device):
    x = kael.tensor([1.0, 2.0], device=device, requires_grad=True)
    (x * 3).sum().backward()
    (x * x).sum().backward()
    assert x.grad.tolist() == [5.0, 7.0]
    x.grad = None
    assert x.grad is None


def test_backward_with_a_gradient_and_retain_graph(device):
    x = kael.tensor([1.0, 2.0], device=device, requires_grad=True)
    y = x * 3
    g = kael.tensor([1.0, 10.0], device=device)
    y.backward(g, retain_graph=True)
    y.backward(g)
    assert x.grad.tolist() == [6.0, 60.0]
    with pytest.raises(RuntimeError):
        y.backward(g)


def test_second_derivative_with_create_graph(device):
    x = kael.tensor(2.0, dtype=kael.float64, device=device, requires_grad=True)
    y = x**3
    (dy,) = kael.autograd.grad(y, x, create_graph=True)
    (d2y,) = kael.autograd.grad(dy, x)
    assert dy.item() == 12.0 and d2y.item() == 12.0
    assert x.grad is None


def test_grad_of_an_unused_input(device):
    x = kael.ones(2, device=device, requires_grad=True)
    z = kael.ones(2, device=device, requires_grad=True)
    y = (x * 2).sum()
    with pytest.raises(kael.KaelError):
        kael.autograd.grad(y, [x, z], retain_graph=True)
    gx, gz = kael.autograd.grad(y, [x, z], allow_unused=True)
    assert gx.tolist() == [2.0, 2.0] and gz is None


def test_no_grad_records_nothing_and_restores(device):
    x = kael.ones(2, device=device, requires_grad=True)
    with kael.no_grad():
        y = x * 2
        assert not kael.is_grad_enabled()
    assert kael.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None

    @kael.no_grad()
    def f(t):
        return t * 2

    assert not f(x).requires_grad
    assert (x * 2).grad_fn is not None


def test_detach_shares_storage_without_history(device):
    x = kael.ones(2, device=device, requires_grad=True)
    d = (x * 2).detach()
    assert not d.requires_grad and d.is_leaf


def test_hook_replaces_the_gradient(device):
    x = kael.ones(2, device=device, requires_grad=True)
    seen = []

    def hook(g):
        seen.append(g.tolist())
        return g * 10

    x.register_hook(hook)
    (x * 3).sum().backward()
    assert seen == [[3.0, 3.0]]
    assert x.grad.tolist() == [30.0, 30.0]


def test_hook_exception_reaches_the_caller(device):
    x = kael.ones(2, device=device, requires_grad=True)

    class Boom(Exception):
        pass

    def hook(g):
        raise Boom("from the hook")

    x.register_hook(hook)
    with pytest.raises(Boom, match="from the hook"):
        x.sum().backward()


def test_modified_saved_tensor_is_a_runtime_error(device):
    x = kael.ones(3, device=device, requires_grad=True)
    y = x * 2
    z = y.sin()  # sin saves its input
    y.add_(1.0)
    with pytest.raises(RuntimeError) as info:
        z.sum().backward()
    assert isinstance(info.value, kael.KaelAutogradError)
    assert "in place" in str(info.value) or "inplace" in str(info.value) or "version" in str(info.value)


def test_in_place_on_a_leaf_requiring_grad_is_refused(device):
    x = kael.ones(2, device=device, requires_grad=True)
    with pytest.raises(RuntimeError):
        x.add_(1.0)
    with kael.no_grad():
        x.add_(1.0)
    assert x.tolist() == [2.0, 2.0]


def test_autograd_matches_pytorch():
    torch = torch_or_skip()
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 5))
    b = rng.standard_normal((5, 3))
    ka = kael.tensor(a, dtype=kael.float64, requires_grad=True)
    kb = kael.tensor(b, dtype=kael.float64, requires_grad=True)
    ((ka @ kb).gelu().softmax(1) * kael.tensor(np.arange(3.0), dtype=kael.float64)).sum().backward()
    ta = torch.tensor(a, requires_grad=True)
    tb = torch.tensor(b, requires_grad=True)
    ((ta @ tb).nn.functional.gelu() if False else torch.nn.functional.gelu(ta @ tb)).softmax(1).mul(torch.arange(3.0, dtype=torch.float64)).sum().backward()
    assert_close(ka.grad, ta.grad.numpy(), rtol=1e-10, atol=1e-12)
    assert_close(kb.grad, tb.grad.numpy(), rtol=1e-10, atol=1e-12)
