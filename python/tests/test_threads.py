"""The bindings from several Python threads (the GIL is released around
large kernels, NOTE [Releasing the GIL]): results stay exact."""

import threading

import numpy as np

import kael


def test_threads_compute_large_ops_concurrently_and_correctly():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((256, 256))
    ka = kael.tensor(a, dtype=kael.float64, device=kael.threaded)
    want = (a @ a).sum()
    results, errors = [], []

    def work():
        try:
            for _ in range(3):
                results.append((ka @ ka).sum().item())
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == 12
    np.testing.assert_allclose(results, want, rtol=1e-9)


def test_grad_mode_is_per_thread():
    seen = []

    def other():
        seen.append(kael.is_grad_enabled())

    with kael.no_grad():
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert seen == [True]
