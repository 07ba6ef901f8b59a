"""``kael.nn.functional``: stateless layers and losses (kael's own
kernels and backward rules)."""

from .. import _kael

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


def pad(input, pad, mode="constant", value=0.0):
    """Constant padding, PyTorch's ``F.pad``: ``pad`` is ``(left, right)``
    for the last dim, then ``(left, right)`` for the one before, ...
    (only ``mode="constant"``; negative amounts are refused)."""
    if mode != "constant":
        raise ValueError(f"pad: mode {mode!r} is not supported; only 'constant'")
    if len(pad) % 2 or len(pad) // 2 > input.dim():
        raise ValueError("pad: pass (left, right) pairs, at most one per dim")
    out = input
    for k in range(len(pad) // 2):
        before, after = pad[2 * k], pad[2 * k + 1]
        if before < 0 or after < 0:
            raise ValueError("pad: negative padding (cropping) is not supported; slice instead")
        dim = input.dim() - 1 - k
        parts = []
        shape = list(out.shape)
        if before:
            shape[dim] = before
            parts.append(_full(shape, value, out))
        parts.append(out)
        if after:
            shape[dim] = after
            parts.append(_full(shape, value, out))
        if len(parts) > 1:
            out = _kael.cat(parts, dim)
    return out


def _full(shape, value, like):
    return _kael.full(tuple(shape), value, dtype=like.dtype, device=like.device)


def binary_cross_entropy(input, target, reduction="mean"):
    """``-(t log x + (1 - t) log(1 - x))`` with each log clamped at -100, as
    PyTorch's ``F.binary_cross_entropy``."""
    log_x = input.log().clamp(min=-100.0)
    log_1mx = (1 - input).log().clamp(min=-100.0)
    return _reduce(-(target * log_x + (1 - target) * log_1mx), reduction, "binary_cross_entropy")


def binary_cross_entropy_with_logits(input, target, reduction="mean"):
    """``F.binary_cross_entropy_with_logits``: the stable form
    ``max(x, 0) - x t + log(1 + exp(-|x|))``."""
    loss = input.relu() - input * target + (-input.abs()).exp().log1p()
    return _reduce(loss, reduction, "binary_cross_entropy_with_logits")


def _reduce(loss, reduction, name):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"{name}: reduction must be 'mean', 'sum' or 'none'")


def adaptive_avg_pool2d(input, output_size):
    """PyTorch's ``F.adaptive_avg_pool2d``: output cell ``i`` averages rows
    ``floor(i H / oh)`` to ``ceil((i + 1) H / oh)`` (and columns alike)."""
    oh, ow = (output_size, output_size) if isinstance(output_size, int) else output_size
    h, w = input.shape[-2], input.shape[-1]
    rows = []
    for i in range(oh):
        r0, r1 = (i * h) // oh, -((-(i + 1) * h) // oh)
        cols = []
        for j in range(ow):
            c0, c1 = (j * w) // ow, -((-(j + 1) * w) // ow)
            cell = input.narrow(-2, r0, r1 - r0).narrow(-1, c0, c1 - c0)
            cols.append(cell.mean((-2, -1), keepdim=False))
        rows.append(_kael.stack(cols, -1))
    return _kael.stack(rows, -2)


__all__ = [
    "adaptive_avg_pool2d",
    "avg_pool2d",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "pad",
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
