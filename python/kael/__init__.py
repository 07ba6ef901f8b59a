"""kael from Python: tensors that are shared handles, with autograd.

>>> import kael
>>> a = kael.arange(6.).reshape(2, 3)
>>> b = a.t()            # a view: same storage, no copy
>>> b.shares_storage(a)
True

See python/README.md for the handle semantics, zero-copy numpy/DLPack and
autograd.
"""

from . import _errors
from ._errors import (
    KaelAutogradError,
    KaelDTypeError,
    KaelError,
    KaelIndexError,
    KaelIOError,
    KaelMemoryError,
    KaelRuntimeError,
    KaelShapeError,
    KaelTypeError,
    KaelValueError,
)
from . import _kael
from ._kael import (
    Tensor,
    dtype,
    device,
    float32,
    float64,
    float16,
    bfloat16,
    int64,
    int32,
    int16,
    int8,
    uint8,
    cpu,
    threaded,
    tensor,
    zeros,
    ones,
    empty,
    full,
    arange,
    linspace,
    eye,
    rand,
    randn,
    zeros_like,
    ones_like,
    full_like,
    rand_like,
    randn_like,
    cat,
    stack,
    where,
    matmul,
    manual_seed,
    from_numpy,
    from_dlpack,
    set_default_device,
    get_default_device,
    is_grad_enabled,
    cuda_available,
    set_grad_enabled as _set_grad_enabled,
)
from ._kael import save, load
from . import autograd, nn, optim
from ._functions import (
    isnan,
    isinf,
    isfinite,
    isclose,
    allclose,
    randint,
    randperm,
)
from . import _functions

# kael.exp(x), kael.add(x, y), kael.sum(x, 1), ...: generated from the op
# tables and a list of methods (NOTE [Op table in Python]); a name kael
# already defines (kael.tensor, kael.where, ...) is kept.
for _name, _f in _functions.FUNCTIONS.items():
    globals().setdefault(_name, _f)
del _name, _f

def __getattr__(name):
    # kael.cuda: the first CUDA device, opened on first use (built with the
    # cuda feature; otherwise, or without a driver, an error that says so).
    if name == "cuda":
        return _kael.device_named("cuda")
    raise AttributeError(f"module 'kael' has no attribute {name!r}")


bool = getattr(_kael, "bool")  # noqa: A001 - kael.bool, as torch.bool
float = float32  # noqa: A001
double = float64
half = float16
long = int64
int = int32  # noqa: A001


class _GradMode:
    """A context manager and decorator that sets grad mode for its body
    (on this thread), restoring the previous mode afterwards."""

    def __init__(self, mode):
        self._mode = mode
        self._prev = []

    def __enter__(self):
        self._prev.append(_set_grad_enabled(self._mode))
        return self

    def __exit__(self, *exc):
        _set_grad_enabled(self._prev.pop())
        return False

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with _GradMode(self._mode):
                return fn(*args, **kwargs)

        return wrapper


class no_grad(_GradMode):
    """``with kael.no_grad():`` records no autograd history in its body."""

    def __init__(self):
        super().__init__(False)


class enable_grad(_GradMode):
    """``with kael.enable_grad():`` records history even inside no_grad."""

    def __init__(self):
        super().__init__(True)


class set_grad_enabled(_GradMode):
    """``kael.set_grad_enabled(False)`` sets the mode now (and restores it
    when used as a context manager)."""

    def __init__(self, mode):
        super().__init__(mode)
        self._prev.append(_set_grad_enabled(mode))

    def __enter__(self):
        return self


__version__ = "0.1.0"
