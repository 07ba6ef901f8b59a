"""``kael.nn.functional``: stateless layers and losses (kael's own
kernels and backward rules)."""

from .._kael import (
    avg_pool2d,
    batch_norm,
    conv1d,
    conv2d,
    cross_entropy,
    dropout,
    embedding,
    group_norm,
    layer_norm,
    linear,
    max_pool2d,
    mse_loss,
    nll_loss,
    scaled_dot_product_attention,
)


def relu(x):
    """max(x, 0)."""
    return x.relu()


def gelu(x, approximate="none"):
    """GELU, exact (erf) or ``approximate="tanh"``."""
    if approximate == "tanh":
        return x.gelu_tanh()
    if approximate != "none":
        raise ValueError("gelu: approximate must be 'none' or 'tanh'")
    return x.gelu()


def silu(x):
    """x * sigmoid(x)."""
    return x.silu()


def softmax(x, dim):
    """Softmax along ``dim``."""
    return x.softmax(dim)


def log_softmax(x, dim):
    """Log-softmax along ``dim``."""
    return x.log_softmax(dim)


__all__ = [
    "avg_pool2d",
    "batch_norm",
    "conv1d",
    "conv2d",
    "cross_entropy",
    "dropout",
    "embedding",
    "gelu",
    "group_norm",
    "layer_norm",
    "linear",
    "log_softmax",
    "max_pool2d",
    "mse_loss",
    "nll_loss",
    "relu",
    "scaled_dot_product_attention",
    "silu",
    "softmax",
]
