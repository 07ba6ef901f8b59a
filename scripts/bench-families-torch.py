"""PyTorch's side of kael-bench's `families` section (issue 44): one figure,
its forward (or forward and backward) timed as kael times its own: the
median of `--reps` runs after one warm-up, printed in seconds.

kael-bench runs this script once per figure, pass and direction,
alternating with kael:

    python3 scripts/bench-families-torch.py --figure conv_res --threads 2 --reps 9 [--backward]

Each figure is PyTorch's fastest honest form on this machine where there
is a choice: attention takes the faster of the plain masked softmax and
`scaled_dot_product_attention` (both are run; the faster is printed), and
AdamW the fastest of the for-loop, `foreach` and `fused` implementations.
The shapes are `host-backend/src/bin/kael-bench/families.rs`'s.
"""
import argparse, time
import torch
import torch.nn.functional as F


def median_seconds(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2]


CONVS = {
    "conv_cnn": ((64, 16, 14, 14), 32, (3, 3), 1, (1, 1), 1),
    "conv_kws": ((64, 1, 49, 10), 64, (10, 4), 2, (5, 1), 1),
    "conv_dw": ((64, 64, 25, 5), 64, (3, 3), 1, (1, 1), 64),
    "conv_pw": ((64, 64, 25, 5), 64, (1, 1), 1, (0, 0), 1),
    "conv_res": ((32, 16, 32, 32), 16, (3, 3), 1, (1, 1), 1),
    "conv_res_s2": ((32, 32, 16, 16), 64, (3, 3), 2, (1, 1), 1),
}


def forms(name, bwd):
    """The inputs and the forward functions to try (the fastest is kept)."""
    r = lambda *s: torch.randn(*s, requires_grad=bwd)
    if name in CONVS:
        xs, o, k, s, p, g = CONVS[name]
        x, w = r(*xs), r(o, xs[1] // g, *k)
        return [x, w], [lambda x, w: F.conv2d(x, w, None, s, p, 1, g)]
    if name == "max_pool":
        return [r(64, 16, 28, 28)], [lambda x: F.max_pool2d(x, 2)]
    if name == "avg_pool":
        return [r(64, 32, 14, 14)], [lambda x: F.avg_pool2d(x, 2)]
    if name == "global_pool":
        return [r(64, 64, 25, 5)], [lambda x: x.mean((2, 3))]
    if name == "batch_norm":
        return [r(32, 16, 32, 32), r(16), r(16)], [
            lambda x, w, b: F.batch_norm(x, None, None, w, b, True, 0.1, 1e-5)]
    if name == "layer_norm":
        return [r(128, 768), r(768), r(768)], [lambda x, w, b: F.layer_norm(x, (768,), w, b, 1e-5)]
    if name == "attention":
        mask = torch.ones(128, 128, dtype=torch.bool).tril()

        def plain(q, k, v):
            s = (q * 0.125) @ k.transpose(-2, -1)
            return s.masked_fill(~mask, float("-inf")).softmax(-1) @ v

        def sdpa(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        return [r(12, 128, 64), r(12, 128, 64), r(12, 128, 64)], [plain, sdpa]
    if name in ("embedding", "index_select"):
        n = 128 if name == "embedding" else 512
        ids = torch.arange(n) * 7919 % 50257
        return [r(50257, 768)], [lambda w: F.embedding(ids, w)]
    if name == "cross_entropy":
        y = torch.arange(128) * 7919 % 50257
        return [r(128, 50257)], [lambda x: F.cross_entropy(x, y)]
    if name == "gather":
        idx = (torch.arange(4096 * 64) * 37 % 1024).reshape(4096, 64)
        return [r(4096, 1024)], [lambda x: x.gather(1, idx)]
    if name == "relu":
        return [r(32, 16, 32, 32)], [F.relu]
    if name == "gelu":
        return [r(128, 3072)], [lambda x: F.gelu(x, approximate="tanh")]
    raise SystemExit(f"bench-families-torch.py: unknown figure {name!r}")


def adamw(reps, transposed=False):
    best = None
    for kw in ({"foreach": False}, {"foreach": True}, {"fused": True}):
        if transposed:
            # leaves with transposed strides; their gradients take the
            # same strides (PyTorch's gradient layout contract)
            params = [torch.randn(1000, 1250).t().requires_grad_() for _ in range(8)]
        else:
            params = [torch.randn(1250, 1000, requires_grad=True) for _ in range(8)]
        for p in params:
            p.sum().backward()
        opt = torch.optim.AdamW(params, **kw)
        t = median_seconds(opt.step, reps)
        best = t if best is None else min(best, t)
    return best


def figure(name, bwd, reps):
    torch.manual_seed(0)
    if name == "adamw":
        return adamw(reps)
    if name == "adamw_t":
        return adamw(reps, transposed=True)
    inputs, fns = forms(name, bwd)
    best = None
    for f in fns:
        if not bwd:
            def run():
                with torch.no_grad():
                    f(*inputs)
        else:
            with torch.no_grad():
                weights = torch.randn(f(*inputs).shape)

            def run():
                for t in inputs:
                    t.grad = None
                y = f(*inputs)
                (y if y.dim() == 0 else (y * weights).sum()).backward()
        t = median_seconds(run, reps)
        best = t if best is None else min(best, t)
    return best


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--figure", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--backward", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    print(f"{figure(a.figure, a.backward, a.reps):.9e}")


if __name__ == "__main__":
    main()
