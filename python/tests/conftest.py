"""Shared fixtures: every behaviour is checked on every host device."""

import numpy as np
import pytest

import kael

DEVICES = [kael.cpu, kael.threaded]


@pytest.fixture(params=DEVICES, ids=lambda d: repr(d))
def device(request):
    """Each test that takes `device` runs once per kael host device."""
    return request.param


def assert_close(t, expected, rtol=1e-5, atol=1e-6):
    """`t` (a kael.Tensor) has the values (and shape) of `expected`."""
    got = np.asarray(t.tolist(), dtype=np.float64)
    want = np.asarray(expected, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def torch_or_skip():
    """PyTorch, or a visible skip naming why (it is large; CI does not
    install it)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        pytest.skip("PyTorch is not installed: the PyTorch comparisons did not run")
    import torch

    return torch
