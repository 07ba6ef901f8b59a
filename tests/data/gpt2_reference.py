#!/usr/bin/env python3
"""An independent GPT-2 forward in numpy (float64), for kael's tests.

usage: gpt2_reference.py MODEL_DIR ID [ID ...]

Reads MODEL_DIR/config.json and MODEL_DIR/model.safetensors (parsed by hand:
8-byte little-endian header length, JSON header, raw little-endian data; F32
only) in the Hugging Face GPT-2 layout (Conv1D weights [in, out]) and prints
the logits [T, vocab_size] of the given token ids as one flat JSON list
(row-major).
"""
import json
import math
import struct
import sys

import numpy as np


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        begin, end = info["data_offsets"]
        arr = np.frombuffer(data[base + begin : base + end], dtype="<f4")
        out[name] = arr.reshape(info["shape"]).astype(np.float64)
    return out


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_new(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def forward(cfg, w, ids, hidden=None):
    pre = "transformer." if "transformer.wte.weight" in w else ""
    g = lambda name: w[pre + name]
    C, H = cfg["n_embd"], cfg["n_head"]
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    T = len(ids)
    hd = C // H
    x = g("wte.weight")[ids] + g("wpe.weight")[:T]
    mask = np.triu(np.full((T, T), -np.inf), k=1)
    for i in range(cfg["n_layer"]):
        if hidden is not None:
            hidden.append(x)
        p = f"h.{i}."
        a = layer_norm(x, g(p + "ln_1.weight"), g(p + "ln_1.bias"), eps)
        qkv = a @ g(p + "attn.c_attn.weight") + g(p + "attn.c_attn.bias")
        q, k, v = np.split(qkv, 3, axis=-1)
        heads = []
        for hh in range(H):
            sl = slice(hh * hd, (hh + 1) * hd)
            s = q[:, sl] @ k[:, sl].T / math.sqrt(hd) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            heads.append(s @ v[:, sl])
        y = np.concatenate(heads, axis=-1)
        x = x + y @ g(p + "attn.c_proj.weight") + g(p + "attn.c_proj.bias")
        m = layer_norm(x, g(p + "ln_2.weight"), g(p + "ln_2.bias"), eps)
        m = gelu_new(m @ g(p + "mlp.c_fc.weight") + g(p + "mlp.c_fc.bias"))
        x = x + m @ g(p + "mlp.c_proj.weight") + g(p + "mlp.c_proj.bias")
    x = layer_norm(x, g("ln_f.weight"), g("ln_f.bias"), eps)
    if hidden is not None:
        hidden.append(x)
    return x @ g("wte.weight").T


def main():
    # Flags: --f64 computes in float64; --hidden prints the hidden states
    # (Hugging Face's output_hidden_states: the embeddings, each block's
    # input after the first, and the final norm's output) after the logits.
    args = sys.argv[1:]
    f64 = "--f64" in args
    hidden = [] if "--hidden" in args else None
    args = [a for a in args if not a.startswith("--")]
    d = args[0]
    ids = [int(s) for s in args[1:]]
    with open(f"{d}/config.json") as f:
        cfg = json.load(f)
    w = load_safetensors(f"{d}/model.safetensors")
    if f64:
        w = {k: v.astype(np.float64) for k, v in w.items()}
    print(json.dumps(forward(cfg, w, ids, hidden).ravel().tolist()))
    for h in hidden or []:
        print(json.dumps(h.ravel().tolist()))


if __name__ == "__main__":
    main()
