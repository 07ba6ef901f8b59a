//! Backward rules: one per differentiable primitive, written with
//! differentiable tensor ops (so `create_graph` records them).
//!
//! Each rule maps the gradient of the op's output to one optional gradient
//! per input edge, in the order the op recorded its inputs.

use super::{Node, SavedTensor};
use crate::backend::{BinaryOp, UnaryOp};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::Dims;
use crate::shared::Shared;
use crate::tensor::Tensor;
use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

/// A [`Rule::Fused`] formula: `(g, saved, param, flags)` to one gradient
/// per input edge.
pub(crate) type FusedFormula = fn(&Tensor, &[Tensor], f64, u32) -> Result<Vec<Option<Tensor>>>;

mod view;
pub(crate) use view::Fnv;
use view::view_backward;
pub use view::{Replay, ViewKind};

/// The backward rule of one node, with what it saved.
pub enum Rule {
    /// A view.
    View {
        /// The input's shape.
        input_shape: Dims,
        /// Which view.
        kind: ViewKind,
    },
    /// Elementwise unary op.
    Unary {
        /// The op.
        op: UnaryOp,
        /// The input (when the formula needs it).
        x: Option<SavedTensor>,
        /// The output (when the formula needs it).
        out: Option<SavedTensor>,
    },
    /// Elementwise binary op with broadcasting.
    Binary {
        /// The op.
        op: BinaryOp,
        /// Inputs (when the formula needs them).
        a: Option<SavedTensor>,
        /// Second input.
        b: Option<SavedTensor>,
        /// Output (pow).
        out: Option<SavedTensor>,
        /// The operands' shapes, when broadcasting made the output's
        /// differ from either: the gradients are summed back to them.
        /// `None` (no allocation, and a smaller rule for every op) when
        /// all three shapes are equal.
        shapes: Option<Box<[Dims; 2]>>,
    },
    /// sum over dims; `keep_shape` is the keepdim output shape.
    Sum {
        /// Keepdim shape of the output (boxed, as every rarely recorded
        /// `Dims` beyond one: NOTE [Rule size]).
        keep_shape: Box<Dims>,
        /// Input shape.
        input_shape: Dims,
        /// `1/n` for mean, 1 for sum.
        scale: f64,
    },
    /// max/min along a dim: the gradient goes to the recorded index.
    IndexReduce {
        /// The dim.
        dim: usize,
        /// Indices with keepdim shape.
        indices: Tensor,
        /// Keepdim shape.
        keep_shape: Box<Dims>,
        /// Input shape.
        input_shape: Dims,
    },
    /// max/min of everything, or along one dim (`amax`/`amin`): split
    /// evenly between ties, as PyTorch.
    AllReduce {
        /// Input.
        x: SavedTensor,
        /// Output.
        out: SavedTensor,
        /// For a reduction along one dim: the dim and the keepdim shape.
        along: Option<Box<(isize, Dims)>>,
    },
    /// softmax along a dim.
    Softmax {
        /// The dim.
        dim: isize,
        /// The output.
        out: SavedTensor,
    },
    /// log_softmax along a dim.
    LogSoftmax {
        /// The dim.
        dim: isize,
        /// The output.
        out: SavedTensor,
    },
    /// matmul of two equal-batch (already broadcast) operands of rank >= 2.
    Matmul {
        /// lhs.
        a: SavedTensor,
        /// rhs.
        b: SavedTensor,
    },
    /// cat along a dim.
    Cat {
        /// The dim.
        dim: usize,
        /// Each input's size along it.
        sizes: Vec<usize>,
    },
    /// index_select along a dim.
    IndexSelect {
        /// The dim.
        dim: isize,
        /// The indices.
        indices: Tensor,
        /// Input shape.
        input_shape: Dims,
    },
    /// embedding lookup (index_select of rows by flattened ids).
    Embedding {
        /// The flattened ids.
        indices: Tensor,
        /// The weight's shape.
        weight_shape: Dims,
    },
    /// gather along a dim.
    Gather {
        /// The dim.
        dim: isize,
        /// The index.
        index: Tensor,
        /// Input shape.
        input_shape: Dims,
    },
    /// out-of-place index_add (inputs: self, src).
    IndexAdd {
        /// The dim.
        dim: isize,
        /// The indices.
        indices: Tensor,
    },
    /// out-of-place scatter_add (inputs: self, src).
    ScatterAdd {
        /// The dim.
        dim: isize,
        /// The index.
        index: Tensor,
    },
    /// to_dtype from a float dtype.
    ToDtype {
        /// The input's dtype.
        from: DType,
    },
    /// to_device.
    ToDevice {
        /// The input's device.
        from: Device,
    },
    /// A copy (deep_clone, contiguous): identity.
    Identity,
    /// where(cond, t, f) (inputs: cond, t, f).
    Where {
        /// The condition.
        cond: Tensor,
        /// Shapes to reduce to.
        t_shape: Dims,
        /// Shapes to reduce to.
        f_shape: Box<Dims>,
    },
    /// In-place `self op= other` (inputs: old self, other).
    InplaceBinary {
        /// The op.
        op: BinaryOp,
        /// The value of self before the op, when needed (mul_).
        old_self: Option<Tensor>,
        /// other (mul_, div_).
        other: Option<SavedTensor>,
        /// self after the op (div_).
        out: Option<SavedTensor>,
        /// other's shape.
        other_shape: Box<Dims>,
    },
    /// prod along one dim, correct with zeros in the input (PyTorch's rule:
    /// `g * prod / x` without zeros; the product of the others at a single
    /// zero; nothing with two zeros or more).
    Prod {
        /// The reduced dim (`None` for a rank-0 input: the identity).
        dim: Option<usize>,
        /// The input.
        x: SavedTensor,
        /// Keepdim shape of the output.
        keep_shape: Box<Dims>,
        /// The formula (`tensor::reduce`), held as a pointer so that only
        /// images that call `prod` link it (NOTE [Kernel selection]: an
        /// autograd-using firmware image links every arm of
        /// [`Rule::backward`]).
        formula: fn(&Tensor, &Tensor, usize) -> Result<Tensor>,
    },
    /// An op computed as one composition and recorded as one node
    /// (`layer_norm`): its saved tensors and its gradient formula, held as
    /// a pointer (as [`Rule::Prod`]'s, so only images that call the op
    /// link it). The formula returns one gradient per input edge, and must
    /// stay differentiable when grad mode is on (`create_graph`).
    Fused {
        /// The node's name (`grad_fn_name()`).
        name: &'static str,
        /// What the formula reads, in its order.
        saved: Vec<SavedTensor>,
        /// A scalar parameter of the op (layer_norm's `eps`).
        param: f64,
        /// Small integer parameters of the op (layer_norm: which of weight
        /// and bias are inputs, and how many dims are normalised).
        flags: u32,
        /// The formula: `(g, saved, param, flags) -> input gradients`.
        formula: FusedFormula,
    },
    /// A step of a declared family (NOTE [Declared families]): the
    /// gradient is the step its table row names (`adjoint:` for a linear
    /// step, run on the output's gradient; `grad:`, run on the saved
    /// inputs and the output's gradient, input `i`'s the `i`-th step from
    /// it), with the same parameter words.
    Declared {
        /// The family.
        family: crate::backend::Family,
        /// The (first) gradient's step.
        step: usize,
        /// The parameter words.
        params: Box<[u32]>,
        /// The inputs, for a `grad:` step (none for an adjoint).
        saved: Box<[SavedTensor]>,
    },
    /// In-place elementwise unary op (inputs: old self), with the op's own
    /// gradient formula.
    InplaceUnary {
        /// The op.
        op: UnaryOp,
        /// The value of self before the op, when the formula needs it.
        x: Option<Tensor>,
        /// self after the op, when the formula needs it.
        out: Option<SavedTensor>,
    },
    /// In-place fill/zero (inputs: old self): no gradient to the old value.
    InplaceFill,
    /// An in-place op on a view, recorded on the view's base (PyTorch's
    /// `CopySlices`; inputs: the base's old history, then the in-place
    /// op's other inputs). See NOTE [In-place through views].
    CopySlices {
        /// The base's layout (contiguous). Boxed, as `view`: two layouts
        /// inline made every rule 320 bytes, moved whole on every recorded
        /// op (NOTE [Small-op path]).
        base: alloc::boxed::Box<crate::layout::Layout>,
        /// The view's layout over the same storage.
        view: alloc::boxed::Box<crate::layout::Layout>,
        /// The in-place op's own rule, in the view's shape.
        inner: alloc::boxed::Box<Rule>,
    },
    /// In-place copy (inputs: old self, src).
    InplaceCopy {
        /// Source shape.
        src_shape: Dims,
        /// Source dtype.
        src_dtype: DType,
        /// Source device.
        src_device: Device,
    },
}

/// Sums `g` over the dims that broadcasting added or expanded, to `shape`.
pub(crate) fn sum_to(g: &Tensor, shape: &[usize]) -> Result<Tensor> {
    if g.shape() == shape {
        return Ok(g.clone());
    }
    let lead = g.rank().saturating_sub(shape.len());
    let mut dims: Vec<isize> = Vec::new();
    for i in 0..g.rank() {
        if i < lead || (shape[i - lead] == 1 && g.shape()[i] != 1) {
            dims.push(i as isize);
        }
    }
    let s = if dims.is_empty() {
        g.clone()
    } else {
        g.sum(&dims, true)?
    };
    s.reshape(shape)
}

fn need(t: &Option<SavedTensor>, node: &Shared<Node>) -> Result<Tensor> {
    match t {
        Some(s) => s.unpack(node),
        None => Err(Error::Autograd {
            op: node.name,
            reason: "internal: a saved tensor is missing; please report this",
        }),
    }
}

impl Rule {
    /// The node name shown by `grad_fn_name()`.
    pub fn name(&self) -> &'static str {
        match self {
            Rule::View { kind, .. } => match kind {
                ViewKind::Permute(_) => "PermuteBackward",
                ViewKind::Reshape => "ViewBackward",
                ViewKind::Expand => "ExpandBackward",
                ViewKind::Narrow(..) => "NarrowBackward",
                ViewKind::Select(..) => "SelectBackward",
                ViewKind::Replay(Replay::Slice(..)) => "SliceBackward",
                ViewKind::Replay(Replay::Unfold(..)) => "UnfoldBackward",
                ViewKind::Replay(Replay::Diagonal(..)) => "DiagonalBackward",
                ViewKind::AsStrided(_) => "AsStridedBackward",
            },
            Rule::Unary { op, .. } => op.backward_name(),
            Rule::Binary { op, .. } => op.backward_name(),
            Rule::Sum { scale, .. } => {
                if *scale == 1.0 {
                    "SumBackward"
                } else {
                    "MeanBackward"
                }
            }
            Rule::IndexReduce { .. } => "MaxBackward",
            Rule::AllReduce { .. } => "MaxAllBackward",
            Rule::Softmax { .. } => "SoftmaxBackward",
            Rule::LogSoftmax { .. } => "LogSoftmaxBackward",
            Rule::Matmul { .. } => "MatmulBackward",
            Rule::Cat { .. } => "CatBackward",
            Rule::IndexSelect { .. } => "IndexSelectBackward",
            Rule::Gather { .. } => "GatherBackward",
            Rule::Embedding { .. } => "EmbeddingBackward",
            Rule::IndexAdd { .. } => "IndexAddBackward",
            Rule::ScatterAdd { .. } => "ScatterAddBackward",
            Rule::ToDtype { .. } => "ToDtypeBackward",
            Rule::ToDevice { .. } => "ToDeviceBackward",
            Rule::Identity => "CloneBackward",
            Rule::Where { .. } => "WhereBackward",
            Rule::InplaceBinary { op, .. } => match op {
                BinaryOp::Add => "AddBackward_",
                BinaryOp::Sub => "SubBackward_",
                BinaryOp::Mul => "MulBackward_",
                _ => "DivBackward_",
            },
            Rule::Prod { .. } => "ProdBackward",
            Rule::Fused { name, .. } => name,
            Rule::Declared { family, .. } => family.name(),
            Rule::InplaceUnary { op, .. } => op.backward_name(),
            Rule::InplaceFill => "FillBackward_",
            Rule::InplaceCopy { .. } => "CopyBackward_",
            Rule::CopySlices { .. } => "CopySlices",
        }
    }

    /// Whether the rule holds tensors saved for backward (freed after a
    /// backward without `retain_graph`); a rule that holds none (add, sum,
    /// views, ...) can run again.
    pub(crate) fn saves_tensors(&self) -> bool {
        match self {
            Rule::View { .. }
            | Rule::Sum { .. }
            | Rule::Cat { .. }
            | Rule::ToDtype { .. }
            | Rule::ToDevice { .. }
            | Rule::Identity
            | Rule::InplaceFill
            | Rule::InplaceCopy { .. } => false,
            Rule::Unary { x, out, .. } => x.is_some() || out.is_some(),
            Rule::Binary { a, b, out, .. } => a.is_some() || b.is_some() || out.is_some(),
            Rule::InplaceBinary {
                old_self,
                other,
                out,
                ..
            } => old_self.is_some() || other.is_some() || out.is_some(),
            Rule::CopySlices { inner, .. } => inner.saves_tensors(),
            Rule::InplaceUnary { x, out, .. } => x.is_some() || out.is_some(),
            Rule::Declared { saved, .. } => !saved.is_empty(),
            _ => true,
        }
    }

    /// Hands the grad_fns of saved tensors to `stack` (iterative drop).
    pub(crate) fn into_saved_grad_fns(self, stack: &mut Vec<crate::shared::Shared<Node>>) {
        let mut push = |s: Option<SavedTensor>| {
            if let Some(s) = s {
                s.into_grad_fn(stack);
            }
        };
        match self {
            Rule::Unary { x, out, .. } => {
                push(x);
                push(out);
            }
            Rule::Binary { a, b, out, .. } => {
                push(a);
                push(b);
                push(out);
            }
            Rule::AllReduce { x, out, .. } => {
                push(Some(x));
                push(Some(out));
            }
            Rule::Softmax { out, .. } | Rule::LogSoftmax { out, .. } => push(Some(out)),
            Rule::Matmul { a, b } => {
                push(Some(a));
                push(Some(b));
            }
            Rule::InplaceBinary { other, out, .. } => {
                push(other);
                push(out);
            }
            Rule::CopySlices { inner, .. } => inner.into_saved_grad_fns(stack),
            Rule::Prod { x, .. } => push(Some(x)),
            Rule::Fused { saved, .. } => saved.into_iter().for_each(|s| push(Some(s))),
            Rule::Declared { saved, .. } => saved.into_iter().for_each(|s| push(Some(s))),
            Rule::InplaceUnary { out, .. } => push(out),
            _ => {}
        }
    }

    /// Gradients for each input edge, from the output gradient `g`.
    ///
    /// # Errors
    /// A saved tensor modified in place; op failures.
    pub(crate) fn backward(&self, node: &Shared<Node>, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Ok(match self {
            Rule::View { input_shape, kind } => vec![Some(view_backward(g, input_shape, kind)?)],
            Rule::Unary { op, x, out } => {
                vec![Some(
                    op.backward(g, &|| need(x, node), &|| need(out, node))?,
                )]
            }
            Rule::Binary {
                op,
                a,
                b,
                out,
                shapes,
            } => {
                let (ga, gb) =
                    op.backward(g, &|| need(a, node), &|| need(b, node), &|| need(out, node))?;
                match shapes.as_deref() {
                    Some([a_shape, b_shape]) => {
                        vec![Some(sum_to(&ga, a_shape)?), Some(sum_to(&gb, b_shape)?)]
                    }
                    None => vec![Some(ga), Some(gb)],
                }
            }
            Rule::Sum {
                keep_shape,
                input_shape,
                scale,
            } => {
                let g = g.reshape(&**keep_shape)?;
                let g = if *scale == 1.0 {
                    g
                } else {
                    g.mul_scalar(*scale)?
                };
                vec![Some(g.expand(input_shape)?)]
            }
            Rule::IndexReduce {
                dim,
                indices,
                keep_shape,
                input_shape,
            } => {
                let zeros = Tensor::zeros(input_shape, g.dtype(), &g.device())?;
                vec![Some(zeros.scatter_add(
                    *dim as isize,
                    indices,
                    &g.reshape(&**keep_shape)?,
                )?)]
            }
            Rule::AllReduce { x, out, along } => {
                let (x, out) = (x.unpack(node)?, out.unpack(node)?);
                let (out, g, count_dims) = match along {
                    Some(along) => {
                        let (dim, keep) = &**along;
                        (out.reshape(keep)?, g.reshape(keep)?, vec![*dim])
                    }
                    None => (out, g.clone(), Vec::new()),
                };
                let mask = x.eq(&out)?.to_dtype(g.dtype())?;
                let count = mask.sum(&count_dims, true)?;
                vec![Some(mask.mul(&g.div(&count)?)?)]
            }
            // One fused kernel where the device has it and nothing records
            // (NOTE [Fused families]); under create_graph the composition,
            // so that higher derivatives flow through it.
            Rule::Softmax { dim, out } => {
                let y = out.unpack(node)?;
                let fused = if crate::autograd::is_grad_enabled() {
                    None
                } else {
                    y.softmax_backward_fused(g, *dim, false)?
                };
                match fused {
                    Some(dx) => vec![Some(dx)],
                    None => {
                        let gy = g.mul(&y)?;
                        vec![Some(y.mul(&g.sub(&gy.sum(&[*dim], true)?)?)?)]
                    }
                }
            }
            Rule::LogSoftmax { dim, out } => {
                let y = out.unpack(node)?;
                let fused = if crate::autograd::is_grad_enabled() {
                    None
                } else {
                    y.softmax_backward_fused(g, *dim, true)?
                };
                match fused {
                    Some(dx) => vec![Some(dx)],
                    None => vec![Some(g.sub(&y.exp()?.mul(&g.sum(&[*dim], true)?)?)?)],
                }
            }
            Rule::Matmul { a, b } => {
                // ga = g @ b^T and gb = a^T @ g; each is computed in the
                // memory order of its operand (PyTorch's mm_mat*_backward):
                // for a transposed operand (e.g. `w.t()` in Linear) the
                // gradient is (b @ g^T)^T or (g^T @ a)^T, a transposed view
                // of a contiguous product, so the view's backward hands the
                // leaf a contiguous gradient and accumulating it copies nothing.
                // A product whose operand needs no gradient (Linear's input
                // batch) is skipped: it is a third of a layer's backward
                // FLOPs (PyTorch's needs_input_grad).
                let (a, b) = (a.unpack(node)?, b.unpack(node)?);
                let ga = if !node.sends_to(0) {
                    None
                } else if is_transposed(&a) {
                    Some(b.matmul(&g.transpose(-1, -2)?)?.transpose(-1, -2)?)
                } else {
                    Some(g.matmul(&b.transpose(-1, -2)?)?)
                };
                let gb = if !node.sends_to(1) {
                    None
                } else if is_transposed(&b) {
                    Some(g.transpose(-1, -2)?.matmul(&a)?.transpose(-1, -2)?)
                } else {
                    Some(a.transpose(-1, -2)?.matmul(g)?)
                };
                vec![ga, gb]
            }
            Rule::Cat { dim, sizes } => {
                let mut out = Vec::with_capacity(sizes.len());
                let mut start = 0;
                for &s in sizes {
                    out.push(Some(g.narrow(*dim as isize, start, s)?));
                    start += s;
                }
                out
            }
            Rule::IndexSelect {
                dim,
                indices,
                input_shape,
            } => {
                let zeros = Tensor::zeros(input_shape, g.dtype(), &g.device())?;
                vec![Some(zeros.index_add(*dim, indices, g)?)]
            }
            Rule::Embedding {
                indices,
                weight_shape,
            } => {
                let zeros = Tensor::zeros(weight_shape, g.dtype(), &g.device())?;
                let rows = g.reshape(&[indices.numel(), weight_shape[1]])?;
                vec![Some(zeros.index_add(0, indices, &rows)?)]
            }
            Rule::Gather {
                dim,
                index,
                input_shape,
            } => {
                let zeros = Tensor::zeros(input_shape, g.dtype(), &g.device())?;
                vec![Some(zeros.scatter_add(*dim, index, g)?)]
            }
            Rule::IndexAdd { dim, indices } => {
                vec![Some(g.clone()), Some(g.index_select(*dim, indices)?)]
            }
            Rule::ScatterAdd { dim, index } => vec![Some(g.clone()), Some(g.gather(*dim, index)?)],
            Rule::ToDtype { from } => vec![Some(g.to_dtype(*from)?)],
            Rule::ToDevice { from } => vec![Some(g.to_device(from)?)],
            Rule::Identity => vec![Some(g.clone())],
            Rule::Where {
                cond,
                t_shape,
                f_shape,
            } => {
                let zero = Tensor::zeros(&[], g.dtype(), &g.device())?;
                let gt = cond.where_cond(g, &zero)?;
                let gf = cond.where_cond(&zero, g)?;
                vec![
                    None,
                    Some(sum_to(&gt, t_shape)?),
                    Some(sum_to(&gf, f_shape)?),
                ]
            }
            Rule::InplaceBinary {
                op,
                old_self,
                other,
                out,
                other_shape,
            } => {
                let (gs, go) = match op {
                    BinaryOp::Add => (g.clone(), g.clone()),
                    BinaryOp::Sub => (g.clone(), g.neg()?),
                    BinaryOp::Mul => {
                        let o = need(other, node)?;
                        let gs = g.mul(&o)?;
                        let go = match old_self {
                            Some(s) => g.mul(s)?,
                            None => g.mul_scalar(0.0)?,
                        };
                        (gs, go)
                    }
                    _ => {
                        let o = need(other, node)?;
                        let y = need(out, node)?;
                        (g.div(&o)?, g.mul(&y)?.div(&o)?.neg()?)
                    }
                };
                vec![Some(gs), Some(sum_to(&go, other_shape)?)]
            }
            Rule::Prod {
                dim,
                x,
                keep_shape,
                formula,
            } => {
                let x = x.unpack(node)?;
                let g = g.reshape(&**keep_shape)?;
                let Some(d) = *dim else {
                    return Ok(vec![Some(g.reshape(x.shape())?)]);
                };
                vec![Some(formula(&g, &x, d)?)]
            }
            Rule::Declared {
                family,
                step,
                params,
                saved,
            } => {
                if saved.is_empty() {
                    vec![Some(Tensor::declared(*family, *step, params, &[g])?)]
                } else {
                    let ins = saved
                        .iter()
                        .map(|s| s.unpack(node))
                        .collect::<Result<Vec<_>>>()?;
                    let mut args: Vec<&Tensor> = ins.iter().collect();
                    args.push(g);
                    // (Only the gradients an edge takes: a network's first
                    // convolution computes no gradient for its data.)
                    (0..ins.len())
                        .map(|i| match node.sends_to(i) {
                            true => Tensor::declared(*family, *step + i, params, &args).map(Some),
                            false => Ok(None),
                        })
                        .collect::<Result<Vec<_>>>()?
                }
            }
            Rule::Fused {
                saved,
                param,
                flags,
                formula,
                ..
            } => {
                let saved = saved
                    .iter()
                    .map(|s| s.unpack(node))
                    .collect::<Result<Vec<_>>>()?;
                formula(g, &saved, *param, *flags)?
            }
            Rule::InplaceUnary { op, x, out } => {
                let old = || {
                    x.clone().ok_or(Error::Autograd {
                        op: node.name,
                        reason: "internal: a saved tensor is missing; please report this",
                    })
                };
                vec![Some(op.backward(g, &old, &|| need(out, node))?)]
            }
            Rule::InplaceFill => vec![Some(g.mul_scalar(0.0)?)],
            Rule::InplaceCopy {
                src_shape,
                src_dtype,
                src_device,
            } => {
                let gs = sum_to(g, src_shape)?
                    .to_dtype(*src_dtype)?
                    .to_device(src_device)?;
                vec![Some(g.mul_scalar(0.0)?), Some(gs)]
            }
            Rule::CopySlices { base, view, inner } => {
                copy_slices_backward(node, g, base, view, inner)?
            }
        })
    }
}

/// NOTE [In-place through views]
/// An in-place op on a view `v` of a base `b` (the root that owns the
/// storage) rewrites `b`'s history, as PyTorch's `CopySlices`: `b` gets a
/// node whose first edge is `b`'s old history and whose other edges are the
/// op's other inputs; `v` gets an `as_strided` view of that node. Backward
/// takes `b`'s gradient, runs the op's own rule on the view's region of it,
/// writes the result for the op's `self` back into that region (zero when
/// the op discards the old values, as `fill_`), and passes the rest through
/// unchanged. Other views of `b` made before the write re-derive their
/// history from `b`'s new node when next used (`Tensor::grad_fn`), because
/// the storage version moved. The base must be contiguous (every root that
/// kael creates is); the version counter is shared, so saved tensors that
/// the write modified still fail backward.
fn copy_slices_backward(
    node: &Shared<Node>,
    g: &Tensor,
    base: &crate::layout::Layout,
    view: &crate::layout::Layout,
    inner: &Rule,
) -> Result<Vec<Option<Tensor>>> {
    let refuse = |reason| Error::Autograd {
        op: "CopySlices",
        reason,
    };
    if crate::autograd::is_grad_enabled()
        && matches!(
            inner,
            Rule::InplaceBinary { out: Some(_), .. } | Rule::InplaceUnary { out: Some(_), .. }
        )
    {
        return Err(refuse(
            "create_graph through an in-place op that saves its result (div_, exp_, ...) on a view is not supported; use the out-of-place op, or deep_clone() the view first",
        ));
    }
    if !base.is_contiguous() {
        return Err(refuse(
            "an in-place op through a view of a non-contiguous base was recorded; deep_clone() the base before writing through its views",
        ));
    }
    let offset = view
        .offset()
        .checked_sub(base.offset())
        .ok_or_else(|| refuse("internal: a view starts before its base; please report this"))?;
    let whole = g.deep_clone()?;
    let region = whole.as_strided(view.shape(), view.strides(), offset)?;
    let mut grads = inner.backward(node, &region.contiguous()?)?;
    let own = if grads.is_empty() {
        None
    } else {
        grads.remove(0)
    };
    match own {
        Some(t) => region.copy_(&t)?,
        None => region.fill_(0.0)?,
    }
    let mut out = vec![Some(whole)];
    out.extend(grads);
    Ok(out)
}

/// Whether the last two dims of `t` are stored column-major (a transposed
/// view of a row-major matrix): unit stride on dim -2, not on dim -1.
fn is_transposed(t: &Tensor) -> bool {
    let st = t.strides();
    let r = st.len();
    r >= 2 && st[r - 2] == 1 && st[r - 1] != 1 && t.shape()[r - 1] > 1
}
