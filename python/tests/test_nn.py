"""nn and optim from Python: Module subclassing, parameters by identity,
state dicts and checkpoints, optimizer steps against hand-derived values
(and PyTorch when installed)."""

import numpy as np
import pytest

import kael
from conftest import assert_close, torch_or_skip


class MLP(kael.nn.Module):
    def __init__(self, shared=False):
        super().__init__()
        self.fc1 = kael.nn.Linear(4, 8)
        self.fc2 = kael.nn.Linear(8, 4)
        if shared:
            self.fc3 = self.fc1  # the same layer twice: one set of parameters
        self.register_buffer("steps", kael.zeros(1))

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


def test_parameters_are_registered_by_assignment():
    m = MLP()
    assert [n for n, _ in m.named_parameters()] == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert [n for n, _ in m.named_buffers()] == ["steps"]
    assert m.fc1.weight.shape == (8, 4)


def test_shared_parameters_are_listed_once():
    m = MLP(shared=True)
    assert len(m.parameters()) == 4
    w = kael.nn.Parameter(kael.ones(2))

    class Tied(kael.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = w
            self.b = w

    assert len(Tied().parameters()) == 1


def test_forward_is_linear_then_relu_then_linear():
    m = MLP()
    x = kael.randn(3, 4)
    h = (x @ m.fc1.weight.t() + m.fc1.bias).relu()
    want = h @ m.fc2.weight.t() + m.fc2.bias
    assert_close(m(x), want.tolist(), rtol=1e-5, atol=1e-6)


def test_linear_init_is_bounded_like_pytorch():
    w = np.array(kael.nn.Linear(100, 50).weight.tolist())
    assert np.abs(w).max() <= 0.1 and np.abs(w).max() > 0.09


def test_state_dict_round_trips_through_a_file(tmp_path):
    m = MLP()
    path = tmp_path / "mlp.safetensors"
    kael.save(m.state_dict(), str(path))
    loaded = kael.load(str(path))
    assert set(loaded) == set(m.state_dict())
    m2 = MLP()
    m2.load_state_dict(loaded)
    x = kael.randn(2, 4)
    assert m2(x).tolist() == m(x).tolist()


def test_loaded_tensors_read_the_file_in_place(tmp_path):
    path = tmp_path / "t.safetensors"
    kael.save({"w": kael.arange(4.0)}, str(path))
    w = kael.load(str(path))["w"]
    assert w.tolist() == [0, 1, 2, 3]
    with pytest.raises(kael.KaelError, match="read-only"):
        w.add_(1.0)


def test_a_refused_load_state_dict_changes_nothing():
    m = MLP()
    before = {k: v.tolist() for k, v in m.state_dict().items()}
    bad = m.state_dict()
    bad = {k: v.clone() for k, v in bad.items()}
    bad["fc1.bias"] = bad["fc1.bias"] + 1
    bad["fc2.weight"] = kael.zeros(3, 3)
    with pytest.raises(ValueError, match="fc2.weight"):
        m.load_state_dict(bad)
    assert {k: v.tolist() for k, v in m.state_dict().items()} == before
    with pytest.raises(ValueError, match="missing"):
        m.load_state_dict({})


def test_sgd_step_is_w_minus_lr_grad():
    w = kael.nn.Parameter(kael.tensor([1.0, -2.0]))
    opt = kael.optim.SGD([w], lr=0.5)
    (w * w).sum().backward()  # grad = 2w
    opt.step()
    assert w.tolist() == [0.0, 0.0]
    opt.zero_grad()
    assert w.grad is None


def test_adam_first_step_moves_each_weight_by_lr():
    # After one step, m̂ = g and v̂ = g², so the update is lr * g / (|g| + eps).
    w = kael.nn.Parameter(kael.tensor([1.0, -2.0, 3.0], dtype=kael.float64))
    opt = kael.optim.Adam([w], lr=0.1, eps=0.0)
    (w * w).sum().backward()
    opt.step()
    assert_close(w, [0.9, -1.9, 2.9], rtol=1e-12)


def test_adamw_decays_weights_decoupled():
    w = kael.nn.Parameter(kael.tensor([2.0], dtype=kael.float64))
    opt = kael.optim.AdamW([w], lr=0.1, weight_decay=0.5)
    (w * 0).sum().backward()  # zero gradient: only the decay acts
    opt.step()
    assert_close(w, [2.0 * (1 - 0.1 * 0.5)], rtol=1e-12)


def test_optimizer_lr_and_state_dict():
    w = kael.nn.Parameter(kael.ones(2))
    opt = kael.optim.SGD([w], lr=0.1, momentum=0.9)
    opt.lr = 0.05
    assert opt.lr == 0.05
    (w * 2).sum().backward()
    opt.step()
    sd = opt.state_dict()
    assert "state.0.momentum_buffer" in sd
    with pytest.raises(ValueError):
        opt.lr = -1.0


def test_training_an_mlp_reduces_the_loss():
    kael.manual_seed(0)
    m = MLP()
    opt = kael.optim.AdamW(m.parameters(), lr=1e-2)
    x = kael.randn(32, 4)
    y = x.sin()
    losses = []
    for _ in range(100):
        loss = kael.nn.functional.mse_loss(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_cross_entropy_matches_numpy():
    logits = np.array([[1.0, 2.0, 0.5], [0.1, -1.0, 3.0]])
    targets = [1, 2]
    ls = logits - logits.max(1, keepdims=True)
    logp = ls - np.log(np.exp(ls).sum(1, keepdims=True))
    want = -(logp[0, 1] + logp[1, 2]) / 2
    got = kael.nn.functional.cross_entropy(kael.tensor(logits, dtype=kael.float64), kael.tensor(targets))
    assert abs(got.item() - want) < 1e-12


def test_linear_and_adamw_match_pytorch():
    torch = torch_or_skip()
    rng = np.random.default_rng(4)
    w0 = rng.standard_normal((3, 5))
    b0 = rng.standard_normal(3)
    x = rng.standard_normal((7, 5))
    lin = kael.nn.Linear(5, 3, dtype=kael.float64)
    lin.load_state_dict({"weight": kael.tensor(w0, dtype=kael.float64), "bias": kael.tensor(b0, dtype=kael.float64)})
    tl = torch.nn.Linear(5, 3).double()
    with torch.no_grad():
        tl.weight.copy_(torch.tensor(w0))
        tl.bias.copy_(torch.tensor(b0))
    ko = kael.optim.AdamW(lin.parameters(), lr=0.01)
    to = torch.optim.AdamW(tl.parameters(), lr=0.01)
    for _ in range(5):
        kl = lin(kael.tensor(x, dtype=kael.float64)).tanh().sum()
        ko.zero_grad()
        kl.backward()
        ko.step()
        tloss = tl(torch.tensor(x)).tanh().sum()
        to.zero_grad()
        tloss.backward()
        to.step()
    assert_close(lin.weight, tl.weight.detach().numpy(), rtol=1e-10, atol=1e-12)
    assert_close(lin.bias, tl.bias.detach().numpy(), rtol=1e-10, atol=1e-12)


def conv2d_reference(x, w, b, stride, padding):
    """Direct 2-d convolution in numpy (cross-correlation, as PyTorch)."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh = (h + 2 * padding - kh) // stride + 1
    ow = (wd + 2 * padding - kw) // stride + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.tensordot(patch, w, axes=([1, 2, 3], [1, 2, 3]))
    return out + b[None, :, None, None]


def test_conv2d_matches_a_direct_convolution(device):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 3, 6, 5))
    w = rng.standard_normal((4, 3, 3, 2))
    b = rng.standard_normal(4)
    got = kael.nn.functional.conv2d(
        kael.tensor(x, dtype=kael.float64, device=device),
        kael.tensor(w, dtype=kael.float64, device=device),
        kael.tensor(b, dtype=kael.float64, device=device),
        stride=2, padding=1,
    )
    assert_close(got, conv2d_reference(x, w, b, 2, 1), rtol=1e-10, atol=1e-12)


def test_pools_match_numpy(device):
    x = np.arange(32.0).reshape(1, 2, 4, 4)
    k = kael.tensor(x, dtype=kael.float64, device=device)
    want_max = x.reshape(1, 2, 2, 2, 2, 2).max(axis=(3, 5))
    want_avg = x.reshape(1, 2, 2, 2, 2, 2).mean(axis=(3, 5))
    assert_close(kael.nn.MaxPool2d(2)(k), want_max)
    assert_close(kael.nn.AvgPool2d(2)(k), want_avg)


def test_batch_norm_updates_running_stats_in_training():
    bn = kael.nn.BatchNorm1d(2, dtype=kael.float64)
    x = np.array([[1.0, 10.0], [3.0, 30.0], [5.0, 50.0]])
    y = bn(kael.tensor(x, dtype=kael.float64))
    assert_close(y, (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5), rtol=1e-9)
    assert_close(bn.running_mean, 0.1 * x.mean(0), rtol=1e-12)
    assert_close(bn.running_var, 0.9 + 0.1 * x.var(0, ddof=1), rtol=1e-12)
    bn.eval()
    before = bn.running_mean.tolist()
    bn(kael.tensor(x, dtype=kael.float64))
    assert bn.running_mean.tolist() == before
    assert [n for n, _ in bn.named_buffers()] == ["running_mean", "running_var"]


def test_attention_matches_numpy():
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((2, 4, 3)) for _ in range(3))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(3)
    s = s + np.triu(np.full((4, 4), -np.inf), 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    got = kael.nn.functional.scaled_dot_product_attention(
        *(kael.tensor(a, dtype=kael.float64) for a in (q, k, v)), is_causal=True
    )
    assert_close(got, p @ v, rtol=1e-10, atol=1e-12)


def test_conv_layers_and_group_norm_match_pytorch():
    torch = torch_or_skip()
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 4, 7, 6))
    conv = kael.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2, dtype=kael.float64)
    tconv = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2).double()
    with torch.no_grad():
        tconv.weight.copy_(torch.tensor(np.array(conv.weight.tolist())))
        tconv.bias.copy_(torch.tensor(np.array(conv.bias.tolist())))
    gn = kael.nn.GroupNorm(3, 6, dtype=kael.float64)
    tgn = torch.nn.GroupNorm(3, 6).double()
    kx = kael.tensor(x, dtype=kael.float64, requires_grad=True)
    tx = torch.tensor(x, requires_grad=True)
    gn(conv(kx)).sin().sum().backward()
    tgn(tconv(tx)).sin().sum().backward()
    assert_close(kx.grad, tx.grad.numpy(), rtol=1e-9, atol=1e-11)
    assert_close(conv.weight.grad, tconv.weight.grad.numpy(), rtol=1e-9, atol=1e-11)
