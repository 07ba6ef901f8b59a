"""``kael.optim``: kael's optimizers (the same update rules as Rust and
firmware). A step that fails changes no parameter and no state."""

from .._kael import SGD, Adam, AdamW, clip_grad_norm_

__all__ = ["SGD", "Adam", "AdamW", "clip_grad_norm_"]
