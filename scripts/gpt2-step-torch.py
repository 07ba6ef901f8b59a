"""One GPT-2 124M fine-tuning step in PyTorch, timed as
`host-backend/examples/gpt2_step.rs` times kael's: random N(0, 0.02)
weights, one sequence of T tokens (or a batch), cross-entropy on the next
token, backward, AdamW (lr 1e-4, PyTorch's defaults otherwise).

    python3 scripts/gpt2-step-torch.py [steps] [threads] [T] [batch] [attention] [adamw]

attention: `sdpa` (F.scaled_dot_product_attention, causal) or `plain`
(softmax of masked q kᵀ, then v); adamw: `loop`, `foreach` or `fused`.
The model is GPT-2's (Hugging Face's GPT2LMHeadModel layout: pre-norm
blocks, GELU-tanh MLP, tied output head), written out in plain modules.
Prints `gpt2 median <ms> min <ms> peak_rss_growth <MiB>`.
"""
import math, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F


def rss_kib():
    vals = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            vals[k] = v.split()[0] if v.split() else "0"
    return int(vals.get("VmRSS", 0)), int(vals.get("VmHWM", 0))


class Block(nn.Module):
    def __init__(self, c, h, attention):
        super().__init__()
        self.h, self.attention = h, attention
        self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.c_attn, self.c_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.c_fc, self.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.h, c // self.h).transpose(1, 2) for z in (q, k, v))
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.h))
            mask = torch.ones(t, t, dtype=torch.bool).tril()
            y = s.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt2(nn.Module):
    def __init__(self, attention, c=768, h=12, layers=12, vocab=50257, positions=1024):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, c), nn.Embedding(positions, c)
        self.blocks = nn.ModuleList(Block(c, h, attention) for _ in range(layers))
        self.ln_f = nn.LayerNorm(c)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.ln_f(x) @ self.wte.weight.t()


def main():
    a = sys.argv[1:]
    steps = int(a[0]) if len(a) > 0 else 5
    torch.set_num_threads(int(a[1]) if len(a) > 1 else 2)
    t = int(a[2]) if len(a) > 2 else 128
    batch = int(a[3]) if len(a) > 3 else 1
    attention = a[4] if len(a) > 4 else "sdpa"
    adamw = a[5] if len(a) > 5 else "foreach"
    torch.manual_seed(0)
    before, _ = rss_kib()
    model = Gpt2(attention)
    kw = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}[adamw]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **kw)
    seq = torch.randint(0, 50257, (batch, t + 1))
    ts = []
    for _ in range(steps + 2):
        t0 = time.perf_counter()
        opt.zero_grad()
        logits = model(seq[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), seq[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        loss.item()
        ts.append((time.perf_counter() - t0) * 1e3)
    ts = sorted(ts[2:])
    _, peak = rss_kib()
    print(f"gpt2 median {ts[len(ts) // 2]:.2f} min {ts[0]:.2f} peak_rss_growth {(peak - before) / 1024:.1f}")


if __name__ == "__main__":
    main()
