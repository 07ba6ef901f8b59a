"""Function forms (``kael.exp(x)``, ``kael.add(x, y)``, ``kael.sum(x, 1)``)
and the everyday helpers PyTorch users reach for (``isnan``, ``isfinite``,
``allclose``, ``randint``, ``randperm``).

The function forms of the op-table rows are generated from the tables
(``_kael._op_table()``, read from kael_core's rows): a row added in Rust
is a method and a function with no Python line (NOTE [Op table in
Python]).
"""
import builtins

from . import _kael

# Tensor methods that are not op-table rows but have PyTorch function forms.
_METHODS = [
    "sum", "mean", "prod", "max", "min", "argmax", "argmin", "std", "var",
    "reshape", "transpose", "permute", "flatten", "squeeze", "unsqueeze",
    "softmax", "log_softmax", "logsumexp", "cumsum", "cumprod", "sort",
    "argsort", "topk", "clamp", "abs", "matmul", "t", "narrow", "clone",
    "index_select", "gather", "masked_fill", "tril", "triu", "any", "all",
]


def _function(name):
    def f(input, *args, **kwargs):
        return getattr(input, name)(*args, **kwargs)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"``kael.{name}(x, ...)`` is ``x.{name}(...)`` (PyTorch's function form)."
    return f


def _generated():
    table = _kael._op_table()
    names = set(table["unary"]) | set(table["binary"]) | set(table["compare"])
    names -= set(table["internal"])
    names |= set(_METHODS)
    return {n: _function(n) for n in sorted(names) if hasattr(_kael.Tensor, n)}


FUNCTIONS = _generated()


def isnan(input):
    """Elementwise NaN test (all false for integer and bool tensors)."""
    return input != input


def isinf(input):
    """Elementwise infinity test, of either sign."""
    if not input.dtype.is_floating_point:
        return input != input
    return input.abs() == builtins.float("inf")


def isfinite(input):
    """Elementwise: neither NaN nor infinite."""
    if not input.dtype.is_floating_point:
        return input == input
    return (input - input) == 0


def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """``|input - other| <= atol + rtol * |other|`` elementwise (PyTorch's
    ``isclose``); infinities of one sign are close; NaNs only with
    ``equal_nan``."""
    close = ((input - other).abs() <= atol + rtol * other.abs()) | (input == other)
    if equal_nan:
        close = close | (isnan(input) & isnan(other))
    return close


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Whether every element is close (``isclose``), as a Python bool."""
    return builtins.bool(isclose(input, other, rtol, atol, equal_nan).all().item())


def randint(low, high=None, size=None, dtype=None, device=None):
    """Integers uniform in ``[low, high)`` (``randint(high, size)`` too), int64
    unless ``dtype`` is given (drawn from kael's generator: ``manual_seed``)."""
    if size is None:
        low, high, size = 0, low, high
    if high is None or size is None:
        raise TypeError("randint(low=0, high, size): high and size are required")
    if high <= low:
        raise ValueError(f"randint: high ({high}) must be above low ({low})")
    u = _kael.rand(*size, device=device) if device is not None else _kael.rand(*size)
    x = (u.to(_kael.float64) * (high - low)).floor() + low
    x = x.clamp(low, high - 1)
    return x.to(dtype if dtype is not None else _kael.int64)


def randperm(n, dtype=None, device=None):
    """A random permutation of ``0..n`` (int64 unless ``dtype`` is given)."""
    u = _kael.rand(n, device=device) if device is not None else _kael.rand(n)
    p = u.argsort(0)
    return p if dtype is None else p.to(dtype)
