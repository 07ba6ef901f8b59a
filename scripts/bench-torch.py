#!/usr/bin/env python3
"""PyTorch's side of kael-bench's `peers` section (issue 17).

kael-bench runs this script once per figure and pass, alternating with its
own measurement, and prints both with their ratio, so that both sides are
measured in the same run on the same machine. Each call prints one line:
the median seconds of `--reps` timed runs, after warm-up runs.

    python3 scripts/bench-torch.py --figure step --threads 2 --reps 11

Figures (the same work as kael-bench's rows of the same name):
  step        the demo's char transformer (kael-train's defaults: vocab 84,
              2 layers, dim 96, 4 heads, context 64, tanh GELU, tied lm_head)
              one AdamW step at batch 16: forward, cross entropy, zero_grad,
              backward, clip_grad_norm_(1.0), step. PyTorch's fastest form on
              the machine at hand: attention as F.scaled_dot_product_attention
              or as the plain masked softmax(q kᵀ) v, AdamW's for-loop,
              foreach or fused implementation; every combination is timed
              and the fastest printed (named on stderr)
  layer_norm       F.layer_norm forward of a [4096, 1024] f32 tensor (weight, bias)
  layer_norm_bwd   the same forward plus backward of (y * w).sum()
  gelu_tanh   F.gelu(x, approximate='tanh') of 16M f32
  gelu_erf    F.gelu(x) of 16M f32
  add4        a + b of two 4-element f32 tensors (from Python: the per-op cost a
              Python user sees)
  add4_grad   the same with a requiring grad (recorded for autograd)
  add:N       a + b of two N-element f32 tensors
  mm:N        an N x N x N f32 product (no grad)
  mm:MxKxN    [M, K] @ [K, N]
  mm_bt:MxKxN [M, K] @ w.t(), w a contiguous [N, K] (Linear's forward)
  mm_at:MxKxN g.t() @ x, g a contiguous [K, M] (a weight gradient)
  bmm:BxMxKxN, bmm_bt:BxMxKxN   the same batched over B
              (each timed run is about 0.4 GFLOP of products, as kael-bench's)

Pinned: torch 2.15.0 from PyPI (the CPU kernels of the CUDA wheel).
"""

import argparse
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


# The attention form of `Block` ("sdpa" or "plain"): the `step` figure
# times both.
ATTENTION = "sdpa"


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(dim)
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.attn_proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.mlp_proj = nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        h = self.heads
        qkv = self.c_attn(self.ln_1(x)).view(b, t, 3, h, c // h).permute(2, 0, 3, 1, 4)
        if ATTENTION == "sdpa":
            y = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        else:
            s = (qkv[0] @ qkv[1].transpose(-2, -1)) * (1.0 / (c // h) ** 0.5)
            mask = torch.ones(t, t, dtype=torch.bool).tril()
            y = s.masked_fill(~mask, float("-inf")).softmax(-1) @ qkv[2]
        x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class CharGpt(nn.Module):
    def __init__(self, vocab=84, context=64, layers=2, dim=96, heads=4):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1])
        x = self.wte(ids) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def median_seconds(fn, reps, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


# What the `step` figure's fastest form was (printed to stderr).
WHICH = []


def figure(name, reps):
    torch.manual_seed(0)
    if name == "step":
        global ATTENTION
        best = None
        for attention in ("sdpa", "plain"):
            for adamw in ({"foreach": False}, {"foreach": True}, {"fused": True}):
                ATTENTION = attention
                torch.manual_seed(0)
                model = CharGpt()
                opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.99),
                                        weight_decay=0.01, **adamw)
                x = torch.randint(0, 84, (16, 64))
                y = torch.randint(0, 84, (16, 64))

                def step():
                    loss = F.cross_entropy(model(x).reshape(-1, 84), y.reshape(-1))
                    opt.zero_grad()
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    opt.step()
                    loss.item()

                t = median_seconds(step, reps, 3)
                if best is None or t < best[0]:
                    best = (t, f"attention {attention}, AdamW {list(adamw)[0]}={list(adamw.values())[0]}")
        WHICH.append(best[1])
        return best[0]
    if name in ("layer_norm", "layer_norm_bwd"):
        x = torch.randn(4096, 1024)
        w = torch.randn(1024)
        b = torch.randn(1024)
        if name == "layer_norm":
            with torch.no_grad():
                return median_seconds(lambda: F.layer_norm(x, (1024,), w, b), reps, 2)
        x.requires_grad_(True)
        w.requires_grad_(True)
        b.requires_grad_(True)
        g = torch.randn(4096, 1024)

        def fb():
            (F.layer_norm(x, (1024,), w, b) * g).sum().backward()

        return median_seconds(fb, reps, 2)
    if name in ("gelu_tanh", "gelu_erf"):
        x = torch.randn(16 * 1024 * 1024)
        approx = "tanh" if name == "gelu_tanh" else "none"
        with torch.no_grad():
            return median_seconds(lambda: F.gelu(x, approximate=approx), reps, 2)
    if name in ("add4", "add4_grad"):
        a = torch.randn(4, requires_grad=(name == "add4_grad"))
        b = torch.randn(4)
        n = 20000

        def many():
            for _ in range(n):
                a + b

        return median_seconds(many, reps, 1) / n
    if name.startswith("add:"):
        n = int(name[4:])
        a = torch.randn(n)
        b = torch.randn(n)
        inner = max(1, 2_000_000 // n)

        def many():
            for _ in range(inner):
                a + b

        with torch.no_grad():
            return median_seconds(many, reps, 1) / inner
    if "mm" in name:
        kind, dims = name.split(":")
        d = [int(x) for x in dims.split("x")]
        if kind.startswith("bmm"):
            b, m, k, n = d
        elif len(d) == 1:
            b, m, k, n = 1, d[0], d[0], d[0]
        else:
            b, (m, k, n) = 1, d
        lead = (b,) if b > 1 else ()
        lhs = torch.randn(*lead, k, m).transpose(-1, -2) if kind.endswith("_at") else torch.randn(*lead, m, k)
        rhs = torch.randn(*lead, n, k).transpose(-1, -2) if kind.endswith("_bt") else torch.randn(*lead, k, n)
        inner = min(10_000, max(1, 400_000_000 // (2 * b * m * k * n)))

        def many():
            for _ in range(inner):
                torch.matmul(lhs, rhs)

        with torch.no_grad():
            return median_seconds(many, reps, 1) / inner
    raise SystemExit(f"bench-torch.py: unknown figure {name!r}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--figure", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=11)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    print(f"{figure(a.figure, a.reps):.9e}")
    if WHICH:
        print(f"fastest form: {WHICH[0]}", file=sys.stderr)


if __name__ == "__main__":
    main()
