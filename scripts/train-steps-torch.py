"""Issue 44's whole training steps in PyTorch, timed as
`tests/examples/train_steps.rs` times kael's: the same models, shapes, init
scales, batch, batch-norm settings and Adam.

    python3 scripts/train-steps-torch.py <cnn|dscnn|resnet8> [steps] [threads] [adam]

`adam` picks PyTorch's Adam implementation: `loop` (foreach=False),
`foreach` or `fused` (default: PyTorch's own default for CPU tensors).

Prints `<model> median <ms> min <ms> peak_rss_growth <MiB>` (the median of
the steps after two warm-up steps; how far the process's peak resident set
grew past its size before the model was built). `scripts/bench-steps.py`
interleaves the two and prints ratios.
"""
import math, sys, time
import torch
import torch.nn.functional as F


def rss_kib():
    vals = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            vals[k] = v.split()[0] if v.split() else "0"
    return int(vals.get("VmRSS", 0)), int(vals.get("VmHWM", 0))


params = []


def leaf(shape, scale):
    t = (torch.randn(*shape) * scale).requires_grad_()
    params.append(t)
    return t


class ConvBn:
    def __init__(self, o, i, k, stride, pad, groups):
        fan_in = i // groups * k[0] * k[1]
        self.w = leaf((o, i // groups, k[0], k[1]), math.sqrt(2.0 / fan_in))
        self.gamma = torch.ones(o, requires_grad=True)
        self.beta = torch.zeros(o, requires_grad=True)
        params.extend([self.gamma, self.beta])
        self.mean, self.var = torch.zeros(o), torch.ones(o)
        self.stride, self.pad, self.groups = stride, pad, groups

    def __call__(self, x):
        y = F.conv2d(x, self.w, None, self.stride, self.pad, 1, self.groups)
        return F.batch_norm(y, self.mean, self.var, self.gamma, self.beta, True, 0.1, 1e-5)


def build(name):
    torch.manual_seed(1)
    if name == "cnn":
        w1, b1 = leaf((16, 1, 3, 3), 0.3), leaf((16,), 0.1)
        w2, b2 = leaf((32, 16, 3, 3), 0.08), leaf((32,), 0.1)
        wl = leaf((1568, 10), 0.02)

        def fwd(x):
            h = F.max_pool2d(F.relu(F.conv2d(x, w1, b1, padding=1)), 2)
            h = F.max_pool2d(F.relu(F.conv2d(h, w2, b2, padding=1)), 2)
            return h.reshape(h.shape[0], 1568) @ wl
        return fwd, torch.randn(64, 1, 28, 28), 10
    if name == "dscnn":
        first = ConvBn(64, 1, (10, 4), 2, (5, 1), 1)
        blocks = [(ConvBn(64, 64, (3, 3), 1, (1, 1), 64), ConvBn(64, 64, (1, 1), 1, (0, 0), 1)) for _ in range(4)]
        wl, bl = leaf((64, 12), 0.125), leaf((12,), 0.0)

        def fwd(x):
            h = F.relu(first(x))
            for dw, pw in blocks:
                h = F.relu(pw(F.relu(dw(h))))
            return h.mean((2, 3)) @ wl + bl
        return fwd, torch.randn(64, 1, 49, 10), 12
    if name == "resnet8":
        first = ConvBn(16, 3, (3, 3), 1, (1, 1), 1)
        stacks = []
        for i, o, s in [(16, 16, 1), (16, 32, 2), (32, 64, 2)]:
            a = ConvBn(o, i, (3, 3), s, (1, 1), 1)
            b = ConvBn(o, o, (3, 3), 1, (1, 1), 1)
            short = None if s == 1 else ConvBn(o, i, (1, 1), s, (0, 0), 1)
            stacks.append((a, b, short))
        wl, bl = leaf((64, 10), 0.125), leaf((10,), 0.0)

        def fwd(x):
            h = F.relu(first(x))
            for a, b, short in stacks:
                y = b(F.relu(a(h)))
                h = F.relu(y + (short(h) if short else h))
            return h.mean((2, 3)) @ wl + bl
        return fwd, torch.randn(32, 3, 32, 32), 10
    raise SystemExit("the model must be cnn, dscnn or resnet8")


name = sys.argv[1] if len(sys.argv) > 1 else "cnn"
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 30
torch.set_num_threads(int(sys.argv[3]) if len(sys.argv) > 3 else 2)
before, _ = rss_kib()
fwd, x, classes = build(name)
y = torch.arange(x.shape[0]) % classes
variant = sys.argv[4] if len(sys.argv) > 4 else "default"
kw = {"default": {}, "loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}[variant]
opt = torch.optim.Adam(params, **kw)
ts = []
for _ in range(steps + 2):
    t = time.perf_counter()
    opt.zero_grad()
    loss = F.cross_entropy(fwd(x), y)
    loss.backward()
    opt.step()
    ts.append((time.perf_counter() - t) * 1e3)
ts = sorted(ts[2:])
_, peak = rss_kib()
print(f"{name} median {ts[len(ts) // 2]:.2f} min {ts[0]:.2f} peak_rss_growth {(peak - before) / 1024:.1f}")
