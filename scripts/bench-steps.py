#!/usr/bin/env python3
"""Issue 44's whole training steps, kael beside PyTorch, interleaved.

    cargo build --release -p kael-tests --example train_steps
    cargo build --release -p kael-host --example gpt2_step
    python3 scripts/bench-steps.py [--rounds 3] [--steps 30] [--load] [model ...]

Models: cnn, dscnn, resnet8, gpt2 (default: all). Each round runs, one
after the other, kael at 2 threads, PyTorch at 2 threads, PyTorch at 1
thread and kael at 1 thread (`tests/examples/train_steps.rs` and
`host-backend/examples/gpt2_step.rs`, `scripts/train-steps-torch.py` and
`scripts/gpt2-step-torch.py`: the same models, timed alike), each the
median of `--steps` steps (gpt2: a fifth as many, at least 3); the table
gives the median over rounds, the ratio PyTorch / kael at 2 threads
against PyTorch's faster thread count (which one is printed) and at 1
thread, and each process's peak RSS growth. PyTorch runs in its fastest
form on this machine: before the rounds, each model's Adam
implementations (for-loop, foreach, fused) and, for gpt2, attention forms
(plain masked softmax, `scaled_dot_product_attention`) are timed once at
2 threads, and the fastest is used throughout (printed). `--load` runs a
competing process spinning on one core throughout (the issue's "under
load" figure).
"""
import argparse, os, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KAEL = os.path.join(ROOT, "target", "release", "examples", "train_steps")
KAEL_GPT2 = os.path.join(ROOT, "target", "release", "examples", "gpt2_step")
TORCH = [sys.executable, os.path.join(HERE, "train-steps-torch.py")]
TORCH_GPT2 = [sys.executable, os.path.join(HERE, "gpt2-step-torch.py")]


def kael_cmd(m, steps, threads):
    if m == "gpt2":
        return [KAEL_GPT2, str(max(3, steps // 5)), str(threads)]
    return [KAEL, m, str(steps), str(threads)]


def torch_cmd(m, steps, threads, form):
    if m == "gpt2":
        attention, adam = form
        return TORCH_GPT2 + [str(max(3, steps // 5)), str(threads), "128", "1", attention, adam]
    return TORCH + [m, str(steps), str(threads), form[1]]


def fastest_form(m, steps):
    """PyTorch's fastest (attention, adam) form for model m, at 2 threads."""
    attentions = ["plain", "sdpa"] if m == "gpt2" else ["-"]
    forms = [(a, o) for a in attentions for o in ("loop", "foreach", "fused")]
    timed = [(run(torch_cmd(m, max(3, steps // 3), 2, f))[0], f) for f in forms]
    return min(timed)[1]


def run(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()
    # `<model> median <ms> min <ms> peak_rss_growth <MiB>`
    return float(out[2]), float(out[6])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--load", action="store_true")
    ap.add_argument("models", nargs="*", default=["cnn", "dscnn", "resnet8", "gpt2"])
    a = ap.parse_args()
    if not os.path.exists(KAEL) or ("gpt2" in a.models and not os.path.exists(KAEL_GPT2)):
        sys.exit("build them first: cargo build --release -p kael-tests --example train_steps"
                 " && cargo build --release -p kael-host --example gpt2_step")
    spinner = None
    if a.load:
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        print(f"{'model':8} {'kael 2t':>9} {'torch 2t':>9} {'torch 1t':>9} {'kael 1t':>9}"
              f" {'ratio 2t':>9} {'ratio 1t':>9}  peak RSS growth MiB (kael / torch)"
              + ("   [under load: one core spinning]" if a.load else ""))
        for m in a.models:
            form = fastest_form(m, a.steps)
            t = {k: [] for k in ("k2", "t2", "t1", "k1")}
            mem = {"k": 0.0, "t": 0.0}
            for _ in range(a.rounds):
                for key, cmd in (("k2", kael_cmd(m, a.steps, 2)),
                                 ("t2", torch_cmd(m, a.steps, 2, form)),
                                 ("t1", torch_cmd(m, a.steps, 1, form)),
                                 ("k1", kael_cmd(m, a.steps, 1))):
                    ms, rss = run(cmd)
                    t[key].append(ms)
                    mem[key[0]] = max(mem[key[0]], rss)
            med = {k: statistics.median(v) for k, v in t.items()}
            best = min(med["t2"], med["t1"])
            which = "2t" if med["t2"] <= med["t1"] else "1t"
            print(f"{m:8} {med['k2']:9.2f} {med['t2']:9.2f} {med['t1']:9.2f} {med['k1']:9.2f}"
                  f" {best / med['k2']:8.2f}x {med['t1'] / med['k1']:8.2f}x"
                  f"  {mem['k']:.0f} / {mem['t']:.0f}  (PyTorch's best: {which};"
                  f" {'attention ' + form[0] + ', ' if m == 'gpt2' else ''}Adam {form[1]})", flush=True)
    finally:
        if spinner:
            spinner.kill()


if __name__ == "__main__":
    main()
