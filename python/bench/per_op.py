"""Per-op cost from Python: kael beside numpy and PyTorch, same process,
same run (a benchmark, never a test).

    python python/bench/per_op.py [--quick]

Each figure is the median over 7 repeats of the mean time of one call in a
tight loop (as many calls as take 0.2 s, up to 200,000), in ns. Ratios above 1 mean kael is faster. PyTorch rows are
left out, with a note, when torch is not importable.
"""

import statistics
import sys
import timeit

import numpy as np

import kael

try:
    import torch

    torch.set_num_threads(1)
except ImportError:
    torch = None

QUICK = "--quick" in sys.argv
NUMBER = 20_000 if QUICK else 200_000
REPEAT = 3 if QUICK else 7


def ns(stmt, env):
    timer = timeit.Timer(stmt, globals=env)
    number, _ = timer.autorange()  # calls that take at least 0.2 s
    number = min(max(number, 1000), NUMBER)
    times = timer.repeat(number=number, repeat=REPEAT)
    return statistics.median(times) / number * 1e9


def row(name, stmt, setups):
    res = {}
    for lib, env in setups.items():
        if env is not None:
            res[lib] = ns(env.pop("__stmt__", stmt), env)
    parts = [f"{name:<34}"]
    for lib in ("kael", "kael cpu", "numpy", "torch"):
        parts.append(f"{res[lib]:>9.0f}" if lib in res else f"{'-':>9}")
    k = res["kael"]
    for peer in ("numpy", "torch"):
        parts.append(f"{res[peer] / k:>8.2f}" if peer in res else f"{'-':>8}")
    print("".join(parts))
    return res


def main():
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, "
          f"torch {torch.__version__ if torch else '(not installed)'}, kael {kael.__version__}")
    print(f"{'figure (ns per call)':<34}{'kael':>9}{'kael cpu':>9}{'numpy':>9}{'torch':>9}"
          f"{'np/kael':>8}{'pt/kael':>8}")

    def env(n, grad=False):
        e = {
            "kael": {"a": kael.ones(n, device=kael.threaded, requires_grad=grad),
                     "b": kael.ones(n, device=kael.threaded)},
            "kael cpu": {"a": kael.ones(n, device=kael.cpu, requires_grad=grad),
                         "b": kael.ones(n, device=kael.cpu)},
            "numpy": None if grad else {"a": np.ones(n, np.float32), "b": np.ones(n, np.float32)},
            "torch": None,
        }
        if torch is not None:
            e["torch"] = {"a": torch.ones(n, requires_grad=grad), "b": torch.ones(n)}
        return e

    row("a + b, 4 elements", "a + b", env(4))
    row("a + b, 4 elements, recorded", "a + b", env(4, grad=True))
    row("a * 2.0, 4 elements", "a * 2.0", env(4))
    row("a.exp(), 4 elements", "a.exp()",
        {**env(4), "numpy": {"a": np.ones(4, np.float32), "np": np, "__stmt__": "np.exp(a)"}})
    row("a[1:3], 4 elements (a view)", "a[1:3]", env(4))
    row("a + b, 64K elements", "a + b", env(1 << 16))
    if torch is None:
        print("torch: not installed, so its column is empty; install torch beside kael to fill it")


if __name__ == "__main__":
    main()
