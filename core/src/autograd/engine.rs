//! The backward engine: iterative, dependency-ordered, each node once.
//!
//! 1. Walk the graph from the roots with an explicit stack, counting for
//!    every node how many consumers will send it a gradient.
//! 2. Run nodes from a ready stack: a node is ready once every consumer has
//!    run. Its incoming gradients were summed into one buffer.
//! 3. Without `retain_graph`, each node's saved state is released after it runs.
//!
//! No recursion anywhere, so a 100,000-op chain neither overflows the stack
//! nor goes quadratic.

use super::rules::Fnv;
use super::{GradModeGuard, Node, grad_edge};
use crate::error::{Error, Result};
use crate::shared::Shared;
use crate::tensor::{Tensor, WeakTensor};
use alloc::vec;
use alloc::vec::Vec;
use core::hash::BuildHasherDefault;

type Map<V> = hashbrown::HashMap<usize, V, BuildHasherDefault<Fnv>>;

/// Options of a backward pass.
///
/// ```
/// use kael_core::autograd::BackwardOptions;
/// let o = BackwardOptions { retain_graph: true, ..Default::default() };
/// assert!(!o.create_graph);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackwardOptions {
    /// Keep saved tensors so the graph can be differentiated again.
    pub retain_graph: bool,
    /// Record the backward pass itself (higher-order gradients); implies
    /// `retain_graph`.
    pub create_graph: bool,
    /// [`grad`] only: an input that no output depends on gets `None`
    /// instead of an [`Error::UnusedInput`] (PyTorch's `allow_unused`).
    pub allow_unused: bool,
}

struct Run {
    /// Node ids whose incoming gradient is captured (for `grad()`), in order.
    capture: Option<Vec<usize>>,
}

fn run(roots: Vec<(Shared<Node>, Tensor)>, opts: BackwardOptions, run: Run) -> Result<Map<Tensor>> {
    let retain = opts.retain_graph || opts.create_graph;
    let _mode = GradModeGuard::new(opts.create_graph);

    // 1. dependency counts
    let mut deps: Map<usize> = Map::default();
    let mut seen: Map<()> = Map::default();
    let mut stack: Vec<Shared<Node>> = roots.iter().map(|(n, _)| n.clone()).collect();
    for (n, _) in &roots {
        seen.insert(Node::id(n), ());
    }
    while let Some(n) = stack.pop() {
        for next in n.next_nodes() {
            *deps.entry(Node::id(next)).or_insert(0) += 1;
            if seen.insert(Node::id(next), ()).is_none() {
                stack.push(next.clone());
            }
        }
    }

    // 2. seed buffers and the ready stack
    let mut buffers: Map<Tensor> = Map::default();
    let mut ready: Vec<Shared<Node>> = Vec::new();
    for (n, g) in roots {
        let id = Node::id(&n);
        accumulate(&mut buffers, id, g)?;
        if deps.get(&id).copied().unwrap_or(0) == 0 && !ready.iter().any(|r| Node::id(r) == id) {
            ready.push(n);
        }
    }
    let mut captured: Map<Tensor> = Map::default();

    // 3. execute
    while let Some(node) = ready.pop() {
        let id = Node::id(&node);
        let mut grad = buffers.remove(&id);
        if let Some(g) = grad.take() {
            let g = apply_hooks(&node, g)?;
            if let Some(cap) = &run.capture {
                if cap.contains(&id) {
                    captured.insert(id, g.clone());
                }
            }
            grad = Some(g);
        }
        let leaf = node.leaf.as_ref().map(WeakTensor::upgrade);
        let outs: Vec<Option<Tensor>> = match (grad, leaf) {
            (None, _) => vec![None; node.next.len()],
            (Some(g), Some(leaf)) => {
                // A leaf dropped by every handle has nobody to show its
                // grad to (NOTE [Leaf accumulators]).
                if let (None, Some(leaf)) = (&run.capture, leaf) {
                    accumulate_into_leaf(&leaf, g, opts.create_graph)?;
                }
                Vec::new()
            }
            (Some(g), None) => {
                let g = &g;
                // Without retain_graph a rule's saved tensors are freed; a
                // rule that saved none stays, so a second backward fails
                // only where it needs what was freed, as in PyTorch.
                // One read runs a rule that stays; `None` from it says
                // "take the rule out first" (the rule runs outside the lock).
                let ran = node.rule.read(|r| match r {
                    Some(rule) if retain || !rule.saves_tensors() => {
                        Some(Some(rule.backward(&node, g)))
                    }
                    Some(_) => None,
                    None => Some(None),
                });
                let outs = match ran {
                    Some(outs) => outs,
                    None => {
                        let taken = node.rule.with(Option::take);
                        taken.map(|rule| rule.backward(&node, g))
                    }
                };
                match outs {
                    Some(outs) => outs?,
                    None => {
                        return Err(Error::Autograd {
                            op: node.name,
                            reason: "trying to backward through the graph a second time (its saved tensors were freed); pass retain_graph: true to the first backward",
                        });
                    }
                }
            }
        };
        for (i, next) in node.next.iter().enumerate() {
            let Some(next) = next else { continue };
            let nid = Node::id(next);
            if let Some(Some(g)) = outs.get(i) {
                accumulate(&mut buffers, nid, g.clone())?;
            }
            if let Some(d) = deps.get_mut(&nid) {
                *d -= 1;
                if *d == 0 {
                    ready.push(next.clone());
                }
            }
        }
    }
    Ok(captured)
}

fn accumulate(buffers: &mut Map<Tensor>, id: usize, g: Tensor) -> Result<()> {
    let new = match buffers.remove(&id) {
        Some(old) => old.add(&g)?,
        None => g,
    };
    buffers.insert(id, new);
    Ok(())
}

fn apply_hooks(node: &Shared<Node>, mut g: Tensor) -> Result<Tensor> {
    let mut hooks = node.hooks.with(|h| h.clone());
    if let Some(leaf) = node.leaf.as_ref().and_then(WeakTensor::upgrade) {
        hooks.extend(leaf.with_meta(|m| m.hooks.clone()));
    }
    for h in hooks {
        if let Some(new) = (h.0)(&g)? {
            if new.shape() != g.shape() {
                return Err(Error::Autograd {
                    op: "hook",
                    reason: "a gradient hook returned a tensor of a different shape; return a gradient shaped like its input",
                });
            }
            // A different dtype or device would be stored as `.grad` and
            // only refused later (by the optimizer), far from its cause.
            if new.dtype() != g.dtype() {
                return Err(Error::Autograd {
                    op: "hook",
                    reason: "a gradient hook returned a tensor of a different dtype; return a gradient of its input's dtype (e.g. convert with to_dtype(g.dtype()))",
                });
            }
            if !new.device().same_as(&g.device()) {
                return Err(Error::Autograd {
                    op: "hook",
                    reason: "a gradient hook returned a tensor on a different device; return a gradient on its input's device (e.g. move it with to_device(&g.device()))",
                });
            }
            g = new;
        }
    }
    Ok(g)
}

fn accumulate_into_leaf(leaf: &Tensor, g: Tensor, create_graph: bool) -> Result<()> {
    let g = if create_graph {
        g
    } else {
        match g.into_owned_grad()? {
            Ok(owned) => owned,
            Err(g) => g.detach()?,
        }
    };
    // Optimistic read-modify-write: backward passes on other threads (sync
    // mode) may accumulate into this leaf at the same time, so the sum is
    // stored only if `.grad` is still the one it was computed from, and is
    // recomputed otherwise; no update is lost.
    loop {
        let old = leaf.grad();
        let new = match &old {
            Some(old) => old.add(&g)?,
            None => {
                if g.layout().has_internal_overlap()
                    || !g.is_contiguous()
                    || g.shares_storage_with_any_other_grad()
                {
                    g.deep_clone()?
                } else {
                    g.clone()
                }
            }
        };
        let replaced = leaf.with_meta(|m| {
            let unchanged = match (&m.grad, &old) {
                (Some(now), Some(old)) => now.is_same(old),
                (None, None) => true,
                _ => false,
            };
            unchanged.then(|| m.grad.replace(new))
        });
        if let Some(previous) = replaced {
            drop(previous);
            return Ok(());
        }
    }
}

impl Tensor {
    /// A gradient passed along may alias a tensor the user holds (e.g. the
    /// seed `ones`, or a hook's return value); a stored `.grad` must own its
    /// storage so optimizers can update it in place.
    fn shares_storage_with_any_other_grad(&self) -> bool {
        self.storage_ref_count() > 1
    }

    /// This gradient as a root tensor that alone owns its storage, when
    /// nobody else can reach that storage: the engine holds the only handle,
    /// and the only other impl over the storage is the view's root, itself
    /// reachable only through this view. That is the common case (a
    /// kernel's fresh output, or a transposed view of one, as matmul's
    /// backward hands Linear's weight), and it lets the first gradient be
    /// stored without the copy that a possibly user-visible one needs.
    /// `Err(self)` otherwise.
    fn into_owned_grad(self) -> Result<core::result::Result<Tensor, Tensor>> {
        let storage_owners = self.storage_ref_count();
        let private = self.handle_count() == 1
            && match self.base() {
                None => storage_owners == 1,
                // 2: the root held by `base()` here, and the one inside `self`.
                Some(root) => root.handle_count() == 2 && storage_owners == 2,
            };
        if !private {
            return Ok(Err(self));
        }
        // The root impl (if any) dies with `self`, leaving `owned` the
        // storage's only owner.
        let owned = self.detach()?;
        drop(self);
        Ok(Ok(owned))
    }

    /// Backpropagates from this scalar: accumulates `d self / d leaf` into
    /// every leaf's `grad`, then frees the graph.
    ///
    /// # Errors
    /// A non-scalar or a tensor without history; a second backward through
    /// a freed graph; a saved tensor modified in place.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0], &[2], &Device::cpu())?.requires_grad_(true)?;
    /// let c = Tensor::from_slice(&[3.0f32, 4.0], &[2], &Device::cpu())?;
    /// x.mul(&c)?.sum_all()?.backward()?;
    /// assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![3.0, 4.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn backward(&self) -> Result<()> {
        if self.numel() != 1 {
            return Err(Error::Autograd {
                op: "backward",
                reason: "backward() needs a scalar (one element); reduce the output first or pass a gradient with backward_with",
            });
        }
        self.backward_with(None, BackwardOptions::default())
    }

    /// Backpropagates with an explicit output gradient and options.
    ///
    /// # Errors
    /// As [`Tensor::backward`]; a `gradient` of the wrong shape or dtype.
    ///
    /// ```
    /// use kael_core::autograd::BackwardOptions;
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0], &[2], &Device::cpu())?.requires_grad_(true)?;
    /// let y = x.mul_scalar(3.0)?;
    /// let g = Tensor::from_slice(&[1.0f32, 10.0], &[2], &Device::cpu())?;
    /// y.backward_with(Some(&g), BackwardOptions { retain_graph: true, ..Default::default() })?;
    /// y.backward_with(Some(&g), BackwardOptions::default())?; // graph retained once
    /// assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![6.0, 60.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn backward_with(&self, gradient: Option<&Tensor>, opts: BackwardOptions) -> Result<()> {
        let root = root_of("backward", self)?;
        let g = seed_gradient(self, gradient)?;
        run(vec![(root, g)], opts, Run { capture: None })?;
        Ok(())
    }
}

fn root_of(op: &'static str, t: &Tensor) -> Result<Shared<Node>> {
    grad_edge(t).ok_or(Error::Autograd {
        op,
        reason: if cfg!(feature = "autograd") {
            "the tensor does not require grad and has no grad_fn; call requires_grad_(true) on a leaf it depends on"
        } else {
            "kael-core was built without its `autograd` feature, so no op records history; enable the feature (it is on by default)"
        },
    })
}

fn seed_gradient(t: &Tensor, gradient: Option<&Tensor>) -> Result<Tensor> {
    match gradient {
        Some(g) => {
            if g.shape() != t.shape() {
                return Err(Error::ShapeMismatch {
                    op: "backward",
                    expected: crate::error::ErrShape::of(t.shape()),
                    got: crate::error::ErrShape::of(g.shape()),
                });
            }
            t.same_dtype("backward", g)?;
            t.same_device("backward", g)?;
            Ok(g.clone())
        }
        None => {
            if t.numel() != 1 {
                return Err(Error::Autograd {
                    op: "backward",
                    reason: "a gradient must be given for a non-scalar output; pass one with the output's shape",
                });
            }
            Tensor::ones(t.shape(), t.dtype(), &t.device())
        }
    }
}

/// Gradients of `outputs` with respect to `inputs`, without touching any
/// tensor's `.grad` (PyTorch's `torch.autograd.grad`).
///
/// `grad_outputs[i]` may be `None` for scalar outputs. An input that no
/// output depends on is an [`Error::UnusedInput`] naming it, or gets `None`
/// with `allow_unused` (as PyTorch's `allow_unused=True`).
///
/// # Errors
/// As [`Tensor::backward_with`]; an input that does not require grad; an
/// unused input without `allow_unused`.
///
/// ```
/// use kael_core::autograd::{grad, BackwardOptions};
/// use kael_core::{Device, Tensor};
/// let x = Tensor::scalar(2.0f64, &Device::cpu())?.requires_grad_(true)?;
/// let y = x.powf(3.0)?;
/// let opts = BackwardOptions { create_graph: true, ..Default::default() };
/// let dy = grad(&[&y], &[&x], &[None], opts)?.remove(0).unwrap();   // 3x^2 = 12
/// let d2y = grad(&[&dy], &[&x], &[None], BackwardOptions::default())?.remove(0).unwrap(); // 6x = 12
/// assert_eq!((dy.item::<f64>()?, d2y.item::<f64>()?), (12.0, 12.0));
/// assert!(x.grad().is_none());
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn grad(
    outputs: &[&Tensor],
    inputs: &[&Tensor],
    grad_outputs: &[Option<Tensor>],
    opts: BackwardOptions,
) -> Result<Vec<Option<Tensor>>> {
    if !grad_outputs.is_empty() && grad_outputs.len() != outputs.len() {
        return Err(Error::InvalidArgument {
            op: "grad",
            reason: "grad_outputs must be empty or have one entry per output",
        });
    }
    // One result per input, in order: an input without an edge would
    // shift every later result.
    if inputs.iter().any(|t| !t.requires_grad()) {
        return Err(Error::Autograd {
            op: "grad",
            reason: "one of the inputs does not require grad; call requires_grad_(true) on it or leave it out of inputs",
        });
    }
    let mut roots = Vec::with_capacity(outputs.len());
    for (i, out) in outputs.iter().enumerate() {
        let g = seed_gradient(out, grad_outputs.get(i).and_then(|g| g.as_ref()))?;
        roots.push((root_of("grad", out)?, g));
    }
    // Accumulator nodes are held weakly by leaves; hold them during the run.
    let keep: Vec<Shared<Node>> = inputs.iter().filter_map(|t| grad_edge(t)).collect();
    let ids: Vec<usize> = keep.iter().map(Node::id).collect();
    let captured = run(
        roots,
        opts,
        Run {
            capture: Some(ids.clone()),
        },
    )?;
    drop(keep);
    let grads: Vec<Option<Tensor>> = ids.iter().map(|id| captured.get(id).cloned()).collect();
    if !opts.allow_unused {
        if let Some(index) = grads.iter().position(Option::is_none) {
            return Err(Error::UnusedInput { op: "grad", index });
        }
    }
    Ok(grads)
}
