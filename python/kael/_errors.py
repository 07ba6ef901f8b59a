"""kael's exceptions (NOTE [Python exceptions] in python/src/errors.rs).

Every error kael reports is a ``KaelError``; each subclass is also the
builtin exception it corresponds to, so ``except ValueError`` catches a
shape mismatch just as ``except kael.KaelShapeError`` does. Each carries
``kind`` (kael's error variant, e.g. ``"ShapeMismatch"``) and, where kael
names one, ``op`` (the public operation that refused).
"""


class KaelError(Exception):
    """Base class of every error kael raises."""

    kind: str = "Error"
    op = None


class KaelValueError(KaelError, ValueError):
    """An invalid argument (the message says which, and the fix)."""


class KaelShapeError(KaelValueError):
    """Shapes that do not fit the operation (rank, broadcast, sizes)."""


class KaelDTypeError(KaelValueError, TypeError):
    """A dtype the operation does not accept, or two that differ."""


class KaelTypeError(KaelError, TypeError):
    """An argument of a Python type the operation does not take."""


class KaelIndexError(KaelError, IndexError):
    """A dimension or an index out of range."""


class KaelMemoryError(KaelError, MemoryError):
    """An allocator refused (out of memory, or its block limit)."""


class KaelIOError(KaelError, OSError):
    """A file could not be read or written (save/load)."""


class KaelRuntimeError(KaelError, RuntimeError):
    """The operation cannot run here (device, borrow, overlap, unsupported)."""


class KaelAutogradError(KaelRuntimeError):
    """An autograd rule was broken, e.g. a saved tensor modified in place
    (the version-counter error), as PyTorch's RuntimeError."""
