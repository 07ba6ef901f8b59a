"""``kael.nn``: modules you subclass from Python, and the common layers.

A ``Module`` registers what is assigned to its attributes: a child
``Module`` becomes a submodule, and a tensor that is a leaf and requires
grad (``kael.nn.Parameter(t)`` makes one) becomes a parameter. Buffers
(state that is saved but not trained) are registered with
``register_buffer``. ``parameters()`` lists each tensor once, by identity
(``is_same``), so a weight shared by two layers is updated once.

>>> import kael
>>> class MLP(kael.nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.fc1 = kael.nn.Linear(4, 8)
...         self.fc2 = kael.nn.Linear(8, 2)
...     def forward(self, x):
...         return self.fc2(self.fc1(x).relu())
>>> [n for n, _ in MLP().named_parameters()]
['fc1.weight', 'fc1.bias', 'fc2.weight', 'fc2.bias']
"""

import math
from collections import OrderedDict

from .. import _kael
from . import functional, utils

Tensor = _kael.Tensor


def Parameter(data, requires_grad=True):
    """Marks a tensor as a trainable parameter: the same tensor (a leaf)
    with ``requires_grad`` set. Detaches it first if it has history."""
    t = data if data.is_leaf else data.detach()
    t.requires_grad = requires_grad
    return t


class Module:
    """Base class of layers and models: subclass it and define
    ``forward``."""

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError(
                f"{type(self).__name__}: call super().__init__() before assigning attributes"
            )
        for d in (self._parameters, self._buffers, self._modules):
            d.pop(name, None)
        if isinstance(value, Module):
            self._modules[name] = value
        elif isinstance(value, Tensor) and value.requires_grad and value.is_leaf:
            self._parameters[name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        for d in (self._parameters, self._buffers, self._modules):
            d.pop(name, None)
        object.__delattr__(self, name)

    def register_buffer(self, name, tensor):
        """Saves ``tensor`` in ``state_dict`` without training it."""
        self.__setattr__(name, tensor)
        self._parameters.pop(name, None)
        if tensor is not None:
            self._buffers[name] = tensor

    def register_parameter(self, name, tensor):
        """Registers ``tensor`` as a parameter (``Parameter`` it first)."""
        self.__setattr__(name, Parameter(tensor))

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # ----------------------------------------------------------- walks

    def named_modules(self, prefix=""):
        """This module and every descendant, with dotted paths."""
        seen = []
        stack = [(prefix, self)]
        while stack:
            name, m = stack.pop(0)
            if any(m is s for s in seen):
                continue
            seen.append(m)
            yield name, m
            for child_name, child in m._modules.items():
                stack.append((f"{name}.{child_name}" if name else child_name, child))

    def children(self):
        """The direct submodules."""
        return list(self._modules.values())

    def modules(self):
        """This module and every descendant."""
        return [m for _, m in self.named_modules()]

    def named_children(self):
        """The direct submodules with their names."""
        return list(self._modules.items())

    def apply(self, fn):
        """Calls ``fn`` on every submodule (children first) and on this
        module, as PyTorch's ``apply`` (e.g. a custom initialisation);
        returns this module."""
        for child in self._modules.values():
            child.apply(fn)
        fn(self)
        return self

    def to(self, *args, **kwargs):
        """Moves and/or converts every parameter and buffer (``to(device)``,
        ``to(dtype)``, ``to(device, dtype)``, as ``Tensor.to``). Parameters
        become new leaves that require grad, registered under the same
        names: build the optimizer after ``to``, as in PyTorch."""
        for m in self.modules():
            for name, p in list(m._parameters.items()):
                moved = p.to(*args, **kwargs)
                if moved is not p:
                    setattr(m, name, Parameter(moved.detach(), p.requires_grad))
            for name, b in list(m._buffers.items()):
                if b is not None:
                    m._buffers[name] = b.to(*args, **kwargs)
                    object.__setattr__(m, name, m._buffers[name])
        return self

    def _named_tensors(self, kind):
        out = []
        for path, m in self.named_modules():
            for name, t in getattr(m, kind).items():
                if t is None or any(t.is_same(o) for _, o in out):
                    continue
                out.append((f"{path}.{name}" if path else name, t))
        return out

    def named_parameters(self):
        """Every parameter with its dotted path, each tensor once."""
        return self._named_tensors("_parameters")

    def parameters(self):
        """Every parameter, each tensor once (by identity)."""
        return [t for _, t in self.named_parameters()]

    def named_buffers(self):
        """Every buffer with its dotted path."""
        return self._named_tensors("_buffers")

    def buffers(self):
        """Every buffer."""
        return [t for _, t in self.named_buffers()]

    # ---------------------------------------------------------- state

    def state_dict(self):
        """Parameters and buffers by dotted path (detached, sharing
        storage with the model)."""
        sd = OrderedDict()
        for name, t in self.named_parameters() + self.named_buffers():
            sd[name] = t.detach()
        return sd

    def load_state_dict(self, state_dict, strict=True):
        """Copies values into the model's tensors. Every key, shape and
        dtype is checked before anything is written, so a refused load
        changes nothing. Returns ``(missing_keys, unexpected_keys)``."""
        own = OrderedDict(self.named_parameters() + self.named_buffers())
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise _kael_error(
                "KaelValueError",
                f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}; "
                "pass a state_dict of this model or strict=False",
            )
        pairs = []
        for k, src in state_dict.items():
            if k not in own:
                continue
            dst = own[k]
            if not isinstance(src, Tensor):
                src = _kael.tensor(src, dtype=dst.dtype, device=dst.device)
            if tuple(src.shape) != tuple(dst.shape):
                raise _kael_error(
                    "KaelShapeError",
                    f"load_state_dict: {k} has shape {tuple(src.shape)}, the model's is "
                    f"{tuple(dst.shape)}; load a checkpoint of this architecture",
                )
            if src.dtype != dst.dtype:
                raise _kael_error(
                    "KaelDTypeError",
                    f"load_state_dict: {k} is {src.dtype}, the model's is {dst.dtype}; "
                    "convert it with .to(dtype) first",
                )
            pairs.append((dst, src))
        prev = _kael.set_grad_enabled(False)
        try:
            for dst, src in pairs:
                dst.copy_(src)
        finally:
            _kael.set_grad_enabled(prev)
        return missing, unexpected

    def train(self, mode=True):
        """Sets training mode on this module and its descendants."""
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        """``train(False)``."""
        return self.train(False)

    def zero_grad(self):
        """Drops every parameter's gradient."""
        for p in self.parameters():
            p.grad = None

    def requires_grad_(self, requires_grad=True):
        """Sets ``requires_grad`` on every parameter."""
        for p in self.parameters():
            p.requires_grad = requires_grad
        return self

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, child in self._modules.items():
            body = repr(child).replace("\n", "\n  ")
            lines.append(f"  ({name}): {body}")
        return "\n".join(lines) + (")" if len(lines) == 1 else "\n)")

    def extra_repr(self):
        return ""


def _kael_error(cls_name, msg):
    from .. import _errors

    return getattr(_errors, cls_name)(msg)


def _uniform(shape, bound, dtype, device):
    return _kael.rand(*shape, dtype=dtype, device=device) * (2 * bound) - bound


class Linear(Module):
    """``y = x @ weight.T + bias``, initialised as PyTorch's (uniform in
    ±1/sqrt(in_features))."""

    def __init__(self, in_features, out_features, bias=True, dtype=None, device=None):
        super().__init__()
        dtype = dtype or _kael.float32
        bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(_uniform((out_features, in_features), bound, dtype, device))
        self.bias = Parameter(_uniform((out_features,), bound, dtype, device)) if bias else None

    def forward(self, x):
        return functional.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class LayerNorm(Module):
    """Layer normalisation over the last dimensions (kael's fused kernel)."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, dtype=None, device=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        dtype = dtype or _kael.float32
        if elementwise_affine:
            self.weight = Parameter(_kael.ones(*self.normalized_shape, dtype=dtype, device=device))
            self.bias = Parameter(_kael.zeros(*self.normalized_shape, dtype=dtype, device=device))
        else:
            self.weight = self.bias = None

    def forward(self, x):
        return functional.layer_norm(x, list(self.normalized_shape), self.weight, self.bias, self.eps)


class Embedding(Module):
    """A lookup table of ``num_embeddings`` rows (normal initialisation)."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, dtype=None, device=None):
        super().__init__()
        self.padding_idx = padding_idx
        w = _kael.randn(num_embeddings, embedding_dim, dtype=dtype or _kael.float32, device=device)
        if padding_idx is not None:
            w[padding_idx] = 0.0
        self.weight = Parameter(w)

    def forward(self, ids):
        return functional.embedding(ids, self.weight, self.padding_idx)


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


class Conv1d(Module):
    """1-d convolution (PyTorch's initialisation: uniform in
    ±1/sqrt(in_channels / groups * kernel_size))."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, dtype=None, device=None):
        super().__init__()
        dtype = dtype or _kael.float32
        fan_in = in_channels // groups * kernel_size
        bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.weight = Parameter(_uniform((out_channels, in_channels // groups, kernel_size), bound, dtype, device))
        self.bias = Parameter(_uniform((out_channels,), bound, dtype, device)) if bias else None

    def forward(self, x):
        return functional.conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class Conv2d(Module):
    """2-d convolution (PyTorch's initialisation: uniform in
    ±1/sqrt(in_channels / groups * kh * kw))."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, dtype=None, device=None):
        super().__init__()
        dtype = dtype or _kael.float32
        kh, kw = _pair(kernel_size)
        fan_in = in_channels // groups * kh * kw
        bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        self.stride, self.padding, self.dilation, self.groups = (
            _pair(stride), _pair(padding), _pair(dilation), groups)
        self.weight = Parameter(_uniform((out_channels, in_channels // groups, kh, kw), bound, dtype, device))
        self.bias = Parameter(_uniform((out_channels,), bound, dtype, device)) if bias else None

    def forward(self, x):
        return functional.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class MaxPool2d(Module):
    """2-d max pooling."""

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x):
        return functional.max_pool2d(x, self.kernel_size, self.stride, self.padding)


class AvgPool2d(Module):
    """2-d average pooling."""

    def __init__(self, kernel_size, stride=None, padding=0, count_include_pad=True):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.count_include_pad = count_include_pad

    def forward(self, x):
        return functional.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.count_include_pad)


class _BatchNorm(Module):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, dtype=None, device=None):
        super().__init__()
        dtype = dtype or _kael.float32
        self.eps, self.momentum = eps, momentum
        if affine:
            self.weight = Parameter(_kael.ones(num_features, dtype=dtype, device=device))
            self.bias = Parameter(_kael.zeros(num_features, dtype=dtype, device=device))
        else:
            self.weight = self.bias = None
        self.register_buffer("running_mean", _kael.zeros(num_features, dtype=dtype, device=device))
        self.register_buffer("running_var", _kael.ones(num_features, dtype=dtype, device=device))

    def forward(self, x):
        return functional.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                     self.training, self.momentum, self.eps)


class BatchNorm1d(_BatchNorm):
    """Batch normalisation of `[N, C]` or `[N, C, L]` (running statistics
    updated in training mode)."""


class BatchNorm2d(_BatchNorm):
    """Batch normalisation of `[N, C, H, W]`."""


class GroupNorm(Module):
    """Group normalisation over `num_groups` groups of channels."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, dtype=None, device=None):
        super().__init__()
        dtype = dtype or _kael.float32
        self.num_groups, self.eps = num_groups, eps
        if affine:
            self.weight = Parameter(_kael.ones(num_channels, dtype=dtype, device=device))
            self.bias = Parameter(_kael.zeros(num_channels, dtype=dtype, device=device))
        else:
            self.weight = self.bias = None

    def forward(self, x):
        return functional.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)


class Dropout(Module):
    """Zeroes elements with probability ``p`` in training mode."""

    def __init__(self, p=0.5):
        super().__init__()
        self.p = p

    def forward(self, x):
        return functional.dropout(x, self.p, self.training)


class Sequential(Module):
    """Runs its modules in order."""

    def __init__(self, *modules):
        super().__init__()
        for i, m in enumerate(modules):
            setattr(self, str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)


class ModuleList(Module):
    """A list of modules, registered as submodules ``0``, ``1``, ..."""

    def __init__(self, modules=()):
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, module):
        setattr(self, str(len(self._modules)), module)
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


class Identity(Module):
    """Returns its input."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        return x


class Flatten(Module):
    """Flattens dims ``start_dim..=end_dim`` (PyTorch's defaults: all but
    the batch dim)."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class _Elementwise(Module):
    _fn = None

    def forward(self, x):
        return type(self)._fn(x)


class ReLU(_Elementwise):
    """max(x, 0)."""

    _fn = staticmethod(lambda x: x.relu())


class GELU(Module):
    """GELU (exact, or ``approximate="tanh"``)."""

    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return functional.gelu(x, self.approximate)


class Tanh(_Elementwise):
    """tanh."""

    _fn = staticmethod(lambda x: x.tanh())


class Sigmoid(_Elementwise):
    """1 / (1 + exp(-x))."""

    _fn = staticmethod(lambda x: x.sigmoid())


class SiLU(_Elementwise):
    """x * sigmoid(x)."""

    _fn = staticmethod(lambda x: x.silu())


class MSELoss(Module):
    """Mean squared error."""

    def __init__(self, reduction="mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, input, target):
        return functional.mse_loss(input, target, self.reduction)


class CrossEntropyLoss(Module):
    """Cross entropy of logits against class indices."""

    def __init__(self, reduction="mean", ignore_index=None):
        super().__init__()
        self.reduction = reduction
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return functional.cross_entropy(input, target, self.reduction, self.ignore_index)


__all__ = [
    "AvgPool2d",
    "BatchNorm1d",
    "BatchNorm2d",
    "Conv1d",
    "Conv2d",
    "CrossEntropyLoss",
    "Dropout",
    "Embedding",
    "GELU",
    "GroupNorm",
    "LayerNorm",
    "Linear",
    "MSELoss",
    "MaxPool2d",
    "Module",
    "Parameter",
    "ReLU",
    "Sequential",
    "ModuleList",
    "Identity",
    "Flatten",
    "SiLU",
    "Sigmoid",
    "Tanh",
    "functional",
]
