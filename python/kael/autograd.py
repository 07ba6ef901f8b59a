"""Autograd functions: ``kael.autograd.grad`` (PyTorch's
``torch.autograd.grad``)."""

from ._kael import grad

__all__ = ["grad"]
