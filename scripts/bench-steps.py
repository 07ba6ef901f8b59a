#!/usr/bin/env python3
"""Issue 44's whole training steps, kael beside PyTorch, interleaved.

    cargo build --release -p kael-tests --example train_steps
    python3 scripts/bench-steps.py [--rounds 3] [--steps 30] [--load] [model ...]

Models: cnn, dscnn, resnet8 (default: all). Each round runs, one after the
other, kael at 2 threads, PyTorch at 2 threads, PyTorch at 1 thread and
kael at 1 thread (`tests/examples/train_steps.rs`,
`scripts/train-steps-torch.py`: the same models, timed alike), each the
median of `--steps` steps; the table gives the median over rounds, the
ratio PyTorch / kael at 2 threads (PyTorch's faster thread count; which
one is printed) and at 1 thread, and each process's peak RSS growth.
`--load` runs a competing process spinning on one core throughout (the
issue's "under load" figure).
"""
import argparse, os, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KAEL = os.path.join(ROOT, "target", "release", "examples", "train_steps")
TORCH = [sys.executable, os.path.join(HERE, "train-steps-torch.py")]


def run(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()
    # `<model> median <ms> min <ms> peak_rss_growth <MiB>`
    return float(out[2]), float(out[6])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--load", action="store_true")
    ap.add_argument("models", nargs="*", default=["cnn", "dscnn", "resnet8"])
    a = ap.parse_args()
    if not os.path.exists(KAEL):
        sys.exit("build it first: cargo build --release -p kael-tests --example train_steps")
    spinner = None
    if a.load:
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        print(f"{'model':8} {'kael 2t':>9} {'torch 2t':>9} {'torch 1t':>9} {'kael 1t':>9}"
              f" {'ratio 2t':>9} {'ratio 1t':>9}  peak RSS growth MiB (kael / torch)"
              + ("   [under load: one core spinning]" if a.load else ""))
        for m in a.models:
            t = {k: [] for k in ("k2", "t2", "t1", "k1")}
            mem = {"k": 0.0, "t": 0.0}
            for _ in range(a.rounds):
                for key, cmd in (("k2", [KAEL, m, str(a.steps), "2"]),
                                 ("t2", TORCH + [m, str(a.steps), "2"]),
                                 ("t1", TORCH + [m, str(a.steps), "1"]),
                                 ("k1", [KAEL, m, str(a.steps), "1"])):
                    ms, rss = run(cmd)
                    t[key].append(ms)
                    mem[key[0]] = max(mem[key[0]], rss)
            med = {k: statistics.median(v) for k, v in t.items()}
            best = min(med["t2"], med["t1"])
            which = "2t" if med["t2"] <= med["t1"] else "1t"
            print(f"{m:8} {med['k2']:9.2f} {med['t2']:9.2f} {med['t1']:9.2f} {med['k1']:9.2f}"
                  f" {best / med['k2']:8.2f}x {med['t1'] / med['k1']:8.2f}x"
                  f"  {mem['k']:.0f} / {mem['t']:.0f}  (PyTorch's best: {which})", flush=True)
    finally:
        if spinner:
            spinner.kill()


if __name__ == "__main__":
    main()
