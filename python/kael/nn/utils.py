"""``kael.nn.utils``: gradient clipping (PyTorch's ``clip_grad_norm_`` and
``clip_grad_value_``)."""
import math

from .. import _kael


def clip_grad_norm_(parameters, max_norm, norm_type=2.0):
    """Scales the gradients of ``parameters`` in place so that their joint
    ``norm_type``-norm is at most ``max_norm`` (factor ``max_norm / (total +
    1e-6)``, applied only when below 1, as PyTorch); returns the norm before
    clipping, as a tensor."""
    params = [parameters] if isinstance(parameters, _kael.Tensor) else list(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return _kael.tensor(0.0)
    with _kael_no_grad():
        if norm_type == math.inf:
            total = max(g.abs().max().item() for g in grads)
        else:
            total = sum((g.abs() ** norm_type).sum().item() for g in grads) ** (1.0 / norm_type)
        coef = max_norm / (total + 1e-6)
        if coef < 1.0:
            for g in grads:
                g.mul_(coef)
    return _kael.tensor(total)


def clip_grad_value_(parameters, clip_value):
    """Clamps every gradient of ``parameters`` into ``[-clip_value, clip_value]``
    in place."""
    params = [parameters] if isinstance(parameters, _kael.Tensor) else list(parameters)
    with _kael_no_grad():
        for p in params:
            if p.grad is not None:
                p.grad.clamp_(-clip_value, clip_value)


def _kael_no_grad():
    from .. import no_grad

    return no_grad()
