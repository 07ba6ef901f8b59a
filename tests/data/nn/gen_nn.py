#!/usr/bin/env python3
"""Expected values for tests/tests/nn_functional.rs, computed by PyTorch.

Run with a PyTorch install (CPU is enough):

    python tests/data/nn/gen_nn.py > tests/data/nn/expected.rs

Inputs are `fill(shape, seed) = 0.5 * sin(0.7 * i + seed)` over the
row-major index `i` (float64; float32 cases round it), the same in the Rust
test. Gradients are of `L = sum(y * fill(y.shape, 9))`, by PyTorch's
autograd. Every constant is printed with 17 significant digits (exact for
f64, and f32 values are exactly representable).
"""
import torch
import torch.nn.functional as F

torch.set_grad_enabled(True)
OUT = []


def fill(shape, seed, dtype=torch.float64):
    n = 1
    for d in shape:
        n *= d
    i = torch.arange(n, dtype=torch.float64)
    return (0.5 * torch.sin(0.7 * i + seed)).reshape(shape).to(dtype)


def leaf(shape, seed, dtype=torch.float64):
    return fill(shape, seed, dtype).requires_grad_(True)


def emit(name, t):
    t = t.detach().reshape(-1)
    if t.dtype in (torch.int64, torch.int32):
        vals = ", ".join(str(int(v)) for v in t.tolist())
        OUT.append(f"pub const {name}: &[i64] = &[{vals}];")
        return
    ty = "f32" if t.dtype == torch.float32 else "f64"
    vals = ", ".join(repr(float(v)) if v == v else "f64::NAN" for v in t.tolist())
    if ty == "f32":
        vals = ", ".join(f"{float(v)!r}" for v in t.tolist())
    OUT.append(f"pub const {name}: &[{ty}] = &[{vals}];")


def emit_shape(name, t):
    OUT.append(f"pub const {name}_SHAPE: &[usize] = &{list(t.shape)};")


def backward(y, *leaves):
    r = fill(y.shape, 9, y.dtype)
    (y * r).sum().backward()
    return [l.grad for l in leaves]


def case(prefix, fn, inputs, names, dtype=torch.float64):
    """inputs: list of (shape, seed) leaves; fn(*leaves) -> output."""
    leaves = [leaf(s, seed, dtype) for s, seed in inputs]
    y = fn(*leaves)
    emit_shape(prefix, y)
    emit(prefix, y)
    for n, g in zip(names, backward(y, *leaves)):
        emit(f"{prefix}_D{n}", g)


# linear
case("LINEAR", lambda x, w, b: F.linear(x, w, b),
     [([2, 3, 4], 1), ([5, 4], 2), ([5], 3)], ["X", "W", "B"])
case("LINEAR_F32", lambda x, w, b: F.linear(x, w, b),
     [([2, 3, 4], 1), ([5, 4], 2), ([5], 3)], ["X", "W", "B"], torch.float32)

# layer norm
case("LAYER_NORM", lambda x, w, b: F.layer_norm(x, [3, 4], w, b, 1e-5),
     [([2, 3, 4], 1), ([3, 4], 2), ([3, 4], 3)], ["X", "W", "B"])

# conv1d: groups 2, stride 2, padding 1, dilation 2
case("CONV1D", lambda x, w, b: F.conv1d(x, w, b, 2, 1, 2, 2),
     [([2, 4, 9], 1), ([6, 2, 3], 2), ([6], 3)], ["X", "W", "B"])
# conv2d depthwise: groups 4, stride (2, 1), padding (1, 2), dilation (2, 1)
case("CONV2D_DW", lambda x, w, b: F.conv2d(x, w, b, (2, 1), (1, 2), (2, 1), 4),
     [([2, 4, 7, 6], 1), ([4, 1, 3, 2], 2), ([4], 3)], ["X", "W", "B"])
# conv2d groups 2 with channel multiplier, f32
case("CONV2D_G2_F32", lambda x, w, b: F.conv2d(x, w, b, (1, 2), (1, 0), (1, 2), 2),
     [([2, 4, 5, 7], 1), ([6, 2, 2, 3], 2), ([6], 3)], ["X", "W", "B"], torch.float32)
# conv2d groups 1, dilation 2, no bias
case("CONV2D_DIL", lambda x, w: F.conv2d(x, w, None, 1, 0, 2, 1),
     [([1, 3, 6, 6], 1), ([2, 3, 2, 2], 2)], ["X", "W"])

# f32, stride 1, rows of 8 or more outputs: the threaded backend's direct
# kernel (forward and input gradient), with output channels that fill no
# whole tile and a ragged last vector of a row
case("CONV2D_WIDE_F32", lambda x, w, b: F.conv2d(x, w, b, 1, 1, 1, 1),
     [([2, 3, 5, 19], 1), ([7, 3, 3, 3], 2), ([7], 3)], ["X", "W", "B"], torch.float32)
case("CONV2D_WIDE_DIL_F32", lambda x, w: F.conv2d(x, w, None, 1, (2, 1), (2, 1), 1),
     [([2, 4, 6, 21], 1), ([9, 4, 3, 2], 2)], ["X", "W"], torch.float32)
# 16 rows of 5 vectors: the direct weight gradient too
case("CONV2D_BIG_F32", lambda x, w: F.conv2d(x, w, None, 1, 1, 1, 1),
     [([1, 2, 16, 33], 1), ([5, 2, 3, 3], 2)], ["X", "W"], torch.float32)
case("CONV2D_ROW8_F32", lambda x, w: F.conv2d(x, w, None, 1, 0, 1, 1),
     [([1, 2, 4, 10], 1), ([10, 2, 3, 3], 2)], ["X", "W"], torch.float32)

# transposed convolutions
case("CONVT1D", lambda x, w, b: F.conv_transpose1d(x, w, b, 2, 1, 1, 2, 2),
     [([2, 4, 5], 1), ([4, 3, 3], 2), ([6], 3)], ["X", "W", "B"])
case("CONVT2D", lambda x, w, b: F.conv_transpose2d(x, w, b, (2, 3), (1, 0), (1, 2), 1, 1),
     [([1, 2, 3, 4], 1), ([2, 3, 3, 2], 2), ([3], 3)], ["X", "W", "B"])
case("CONVT2D_F32", lambda x, w, b: F.conv_transpose2d(x, w, b, (2, 3), (1, 0), (1, 2), 1, 1),
     [([1, 2, 3, 4], 1), ([2, 3, 3, 2], 2), ([3], 3)], ["X", "W", "B"], torch.float32)
# padding larger than the kernel reach (cropping), groups 2, dilation (2, 1)
case("CONVT2D_CROP", lambda x, w: F.conv_transpose2d(x, w, None, (1, 2), (2, 1), (1, 0), 2, (2, 1)),
     [([2, 4, 4, 3], 1), ([4, 1, 2, 2], 2)], ["X", "W"])

# embedding with padding_idx
w = leaf([5, 3], 2)
ids = torch.tensor([[0, 2, 0], [4, 2, 1]])
y = F.embedding(ids, w, padding_idx=2)
emit_shape("EMBEDDING", y)
emit("EMBEDDING", y)
emit("EMBEDDING_DW", backward(y, w)[0])

# max pool with indices (padding, non-square kernel)
x = leaf([2, 3, 5, 6], 1)
y, idx = F.max_pool2d(x, (3, 2), (2, 2), (1, 1), return_indices=True)
emit_shape("MAXPOOL", y)
emit("MAXPOOL", y)
emit("MAXPOOL_IDX", idx)
emit("MAXPOOL_DX", backward(y, x)[0])

# average pooling, count_include_pad both ways
for name, cip in [("AVGPOOL_EXCL", False), ("AVGPOOL_INCL", True)]:
    case(name, lambda x: F.avg_pool2d(x, (3, 3), (2, 2), (1, 1), count_include_pad=cip),
         [([1, 2, 5, 5], 1)], ["X"])

# scaled dot product attention
BOOL_MASK = torch.tensor([[True, False, True, True, False],
                          [False, False, True, False, False],
                          [True, True, True, True, True]])
case("SDPA", lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
     [([2, 3, 4], 1), ([2, 5, 4], 2), ([2, 5, 3], 3)], ["Q", "K", "V"])
case("SDPA_BOOL", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=BOOL_MASK),
     [([2, 3, 4], 1), ([2, 5, 4], 2), ([2, 5, 3], 3)], ["Q", "K", "V"])
# a query that may attend nothing: zeros, no gradient (safe softmax)
DEAD_MASK = BOOL_MASK.clone()
DEAD_MASK[1] = False
case("SDPA_DEAD", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=DEAD_MASK),
     [([2, 3, 4], 1), ([2, 5, 4], 2), ([2, 5, 3], 3)], ["Q", "K", "V"])
FMASK = fill([2, 3, 5], 4)
case("SDPA_FLOAT", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=FMASK, scale=0.3),
     [([2, 3, 4], 1), ([2, 5, 4], 2), ([2, 5, 3], 3)], ["Q", "K", "V"])
case("SDPA_CAUSAL", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
     [([2, 2, 4, 4], 1), ([2, 2, 4, 4], 2), ([2, 2, 4, 3], 3)], ["Q", "K", "V"])
case("SDPA_CAUSAL_F32", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
     [([2, 2, 4, 4], 1), ([2, 2, 4, 4], 2), ([2, 2, 4, 3], 3)], ["Q", "K", "V"], torch.float32)

# batch norm, training (running stats updated) and eval
def bn_case(prefix, shape, dtype):
    x, w, b = leaf(shape, 1, dtype), leaf([shape[1]], 2, dtype), leaf([shape[1]], 3, dtype)
    rm = fill([shape[1]], 5, dtype)
    rv = 1.0 + fill([shape[1]], 6, dtype) ** 2
    y = F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.1, eps=1e-5)
    emit(prefix, y)
    emit(prefix + "_RM", rm)
    emit(prefix + "_RV", rv)
    dx, dw, db = backward(y, x, w, b)
    emit(prefix + "_DX", dx)
    emit(prefix + "_DW", dw)
    emit(prefix + "_DB", db)
    x, w, b = leaf(shape, 1, dtype), leaf([shape[1]], 2, dtype), leaf([shape[1]], 3, dtype)
    y = F.batch_norm(x, rm, rv, w, b, training=False, momentum=0.1, eps=1e-5)
    emit(prefix + "_EVAL", y)
    dx, dw, db = backward(y, x, w, b)
    emit(prefix + "_EVAL_DX", dx)
    emit(prefix + "_EVAL_DW", dw)

bn_case("BN2D", [4, 3, 2, 2], torch.float64)
bn_case("BN2D_F32", [4, 3, 2, 2], torch.float32)
bn_case("BN1D", [5, 3], torch.float64)

# the layer: two training steps then eval, running stats after each
bn = torch.nn.BatchNorm1d(3, dtype=torch.float64)
bn(fill([4, 3, 2], 1))
bn(fill([4, 3, 2], 7))
emit("BN1D_LAYER_RM", bn.running_mean)
emit("BN1D_LAYER_RV", bn.running_var)
bn.eval()
emit("BN1D_LAYER_EVAL", bn(fill([2, 3, 2], 8)))
OUT.append(f"pub const BN_STATE_DICT_KEYS: &[&str] = &{list(bn.state_dict().keys())!r};".replace("'", '"'))

# momentum=None (cumulative average) over three batches
bn = torch.nn.BatchNorm1d(3, momentum=None, dtype=torch.float64)
for seed in (1, 7, 3):
    bn(fill([4, 3, 2], seed))
emit("BN1D_CMA_RM", bn.running_mean)
emit("BN1D_CMA_RV", bn.running_var)
# track_running_stats=False: batch statistics in eval too
bn = torch.nn.BatchNorm1d(3, track_running_stats=False, dtype=torch.float64)
bn.eval()
emit("BN1D_NOTRACK_EVAL", bn(fill([2, 3, 2], 8)))
OUT.append(f"pub const BN_NOTRACK_KEYS: &[&str] = &{list(bn.state_dict().keys())!r};".replace("'", '"'))

# group norm
case("GROUP_NORM", lambda x, w, b: F.group_norm(x, 3, w, b, 1e-5),
     [([2, 6, 3, 2], 1), ([6], 2), ([6], 3)], ["X", "W", "B"])
case("GROUP_NORM_F32", lambda x, w, b: F.group_norm(x, 3, w, b, 1e-5),
     [([2, 6, 3, 2], 1), ([6], 2), ([6], 3)], ["X", "W", "B"], torch.float32)

print("// @generated by tests/data/nn/gen_nn.py with PyTorch", torch.__version__, "— do not edit.")
print("\n".join(OUT))
