//! Reverse-mode automatic differentiation with PyTorch semantics.
//!
//! * Every differentiable op records a [`Node`] whose edges point at its
//!   inputs' nodes; a leaf that requires grad gets an `AccumulateGrad` node
//!   that writes into the leaf's own `grad`, which every handle sees.
//! * Backward rules are data (`rules::Rule`, crate-private), one per primitive, written
//!   with differentiable tensor ops, so `create_graph` gives higher orders.
//! * The engine ([`engine`]) is iterative: dependency counting, then a ready
//!   stack. Each node runs once, after all its consumers.
//!
//! NOTE [No reference cycles]
//! Tensor → meta → grad_fn Node → (saved inputs, next nodes) only points
//! towards inputs. A rule that needs its own output saves a *detached* alias
//! (no grad_fn) and re-attaches it to the running node when `create_graph`
//! asks for it; an `AccumulateGrad` node names its leaf weakly (NOTE [Leaf
//! accumulators]). So dropping a
//! loss frees every intermediate.
//!
//! NOTE [Saved tensor versions]
//! A saved tensor records its storage version (see NOTE [Version counter]);
//! unpacking it with another version fails: one of the variables needed for
//! gradient computation has been modified by an in-place operation.

pub mod engine;
mod graphviz;
mod mode;
pub(crate) mod rules;

pub use engine::{BackwardOptions, grad};
pub use graphviz::to_dot;
pub use mode::{GradModeGuard, enable_grad, is_grad_enabled, no_grad, set_grad_enabled};

use crate::error::{Error, Result};
use crate::shared::{Lock, MaybeSendSync, Shared, shared_in_place};
use crate::tensor::{Tensor, WeakTensor};
use alloc::boxed::Box;
use alloc::vec::Vec;
use rules::Rule;

/// A gradient hook closure (`Send + Sync` in sync mode).
pub trait HookClosure: Fn(&Tensor) -> Result<Option<Tensor>> + MaybeSendSync + 'static {}
impl<F: Fn(&Tensor) -> Result<Option<Tensor>> + MaybeSendSync + 'static> HookClosure for F {}

/// A shareable hook.
pub(crate) struct HookFn(pub(crate) Box<dyn HookClosure>);

/// A tensor's autograd state, under its one lock: the node that produced
/// it, kept in place (recording an op into a fresh output allocates no
/// [`AutogradMeta`]: NOTE [Small-op path]), and the rest, boxed, for the
/// tensors that need it (leaves with grads, accumulators or hooks, views
/// with history).
pub(crate) struct AutogradSlot {
    pub(crate) grad_fn: Option<Shared<Node>>,
    pub(crate) meta: Option<Box<AutogradMeta>>,
}

impl AutogradSlot {
    /// No history and no other state.
    pub(crate) const EMPTY: AutogradSlot = AutogradSlot {
        grad_fn: None,
        meta: None,
    };

    /// The boxed state, allocated on first use.
    pub(crate) fn meta(&mut self) -> &mut AutogradMeta {
        self.meta.get_or_insert_with(Default::default)
    }
}

/// The boxed part of a tensor's autograd state (see [`AutogradSlot`]).
#[derive(Default)]
pub(crate) struct AutogradMeta {
    pub(crate) grad: Option<Tensor>,
    /// The leaf's `AccumulateGrad` node, once an op recorded on the leaf
    /// (NOTE [Leaf accumulators]).
    pub(crate) accumulator: Option<Shared<Node>>,
    pub(crate) hooks: Vec<Shared<HookFn>>,
    /// The storage version when the slot's `grad_fn` was set: a view whose storage
    /// moved on since re-derives its history from its base (NOTE [In-place
    /// through views] in `rules`). Kept for views only (0 otherwise).
    pub(crate) history_version: usize,
}

/// One node of the autograd graph: the backward of one op, or the
/// accumulation into one leaf.
pub struct Node {
    pub(crate) name: &'static str,
    /// The rule and its saved state, in the node's own allocation (NOTE
    /// [Small-op path]); `None` once taken by a backward without
    /// `retain_graph`. A backward that leaves it runs it under a read of
    /// this lock, which nothing writes while a rule runs (the engine
    /// takes the rule of a node only before running it, and a node runs
    /// once per backward).
    pub(crate) rule: Lock<Option<Rule>>,
    /// One edge per input: the input's node, or `None` when it needs no grad.
    pub(crate) next: Edges,
    /// Hooks registered on the tensor this node produced.
    pub(crate) hooks: Lock<Vec<Shared<HookFn>>>,
    /// For `AccumulateGrad`: the leaf, named weakly (NOTE [Leaf
    /// accumulators]).
    pub(crate) leaf: Option<WeakTensor>,
}

impl Node {
    /// The op name (`"MulBackward"`, `"AccumulateGrad"`, ...).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Whether input `i` has an edge, i.e. its gradient is wanted.
    pub(crate) fn sends_to(&self, i: usize) -> bool {
        self.next.get(i).is_some_and(Option::is_some)
    }

    /// The nodes this one sends gradients to.
    pub fn next_nodes(&self) -> impl Iterator<Item = &Shared<Node>> {
        self.next.iter().flatten()
    }

    pub(crate) fn id(node: &Shared<Node>) -> usize {
        Shared::as_ptr(node) as *const () as usize
    }
}

// NOTE [Rule size]
// Every recorded op builds one `Node` with its `Rule` inside, so their
// sizes are paid on every op: a rule is as large as its largest variant.
// Rarely recorded shapes beyond one per rule (`sum`'s keepdim shape,
// `permute`'s order, `where`'s second operand shape, ...) are boxed, which
// took the rule from 168 to 120 bytes and the node from 264 to 216 on
// 64-bit, and a node is written into its allocation (`shared_in_place`)
// instead of built on the stack and copied there: a recorded 4-element
// add went from 2,288 to 2,239 instructions (callgrind). The assertions
// fail the build when a new variant exceeds the budget.
const _: () = {
    use core::mem::size_of;
    #[cfg(target_pointer_width = "64")]
    {
        assert!(size_of::<Rule>() <= 120);
        assert!(size_of::<Node>() <= 216);
    }
    #[cfg(target_pointer_width = "32")]
    {
        assert!(size_of::<Rule>() <= 64);
        assert!(size_of::<Node>() <= 120);
    }
};

// Iterative drop: a 100,000-node chain must not recurse 100,000 deep.
impl Drop for Node {
    fn drop(&mut self) {
        let mut stack: Vec<Shared<Node>> = Vec::new();
        take_children(&mut self.next, &mut stack);
        // A node being dropped has no other user: its rule is read without
        // the lock; one that saved no tensors holds no nodes, so it drops in
        // place with the node instead of being moved out (NOTE [Small-op path]).
        if let Some(rule) = take_saving(self.rule.get_mut()) {
            rule.into_saved_grad_fns(&mut stack);
        }
        if !stack.is_empty() {
            drop_chains(stack);
        }
    }
}

/// Drops the nodes on `stack` and every node only they kept, one at a time.
#[cold]
fn drop_chains(mut stack: Vec<Shared<Node>>) {
    while let Some(n) = stack.pop() {
        if let Ok(mut node) = Shared::try_unwrap(n) {
            take_children(&mut node.next, &mut stack);
            if let Some(rule) = take_saving(node.rule.get_mut()) {
                rule.into_saved_grad_fns(&mut stack);
            }
            // `node` drops here with no children left: no recursion.
        }
    }
}

// NOTE [Leaf accumulators]
// A leaf that requires grad owns its AccumulateGrad node (created by the
// first op recorded on it), and the node names the leaf weakly. PyTorch
// does it the other way round (the node owns the variable, the variable
// names the node weakly), which in a loop of small recorded ops re-creates
// the node each time its last consumer drops, an allocation per op, and
// makes a cycle when the leaf's grad has history (create_graph) that leads
// back to the node. Here neither happens. A node whose leaf is gone has
// nobody to accumulate into, so the engine skips it.

// NOTE [Small-op path]
// Recording a 4-element add and dropping its output costs as much as the add
// itself, so the drop avoids work the common case does not need: a child
// without edges (a leaf's AccumulateGrad) ends its chain, so it is released in place (one level of
// depth, never more: it has no children) instead of through a heap-allocated
// stack; and a rule that saved no tensors (add, sum, views) holds no nodes,
// so it is dropped where it is instead of being moved out of its handle.
// Binary ops on operands of equal shape skip broadcasting, and device checks
// compare kinds without cloning device handles. Elementwise ops, casts and
// copies read each operand's placement once (`Tensor::with_src_on`: the
// operand and its device, borrowed) and write their output through its Dst
// before the output's handle exists (`Tensor::written`: no placement lock,
// no layout rebuilt, no re-validation of a layout that is contiguous by
// construction); a 4-element add went from ~230 to ~175 ns. Operands of
// different shapes are read through broadcast layouts (`with_src_as`), not
// broadcast view tensors; an unrecorded `[m, k] @ [k, n]` runs straight on
// the operands' layouts (`matrix_product` in tensor/linalg.rs); layouts are
// built in place (`Layout::of_shape` then `place*`), because on Cortex-M at
// opt-level z every move of a `Dims` is a memcpy call. The eager sine MLP
// on an M4F went from ~15,600 to ~4,300 instructions of overhead per op.
// In `sync` mode (the threaded device) an atomic read-modify-write costs
// about 7 ns on issue 17's 2-vCPU VM, and they were half of a 4-element
// add's time (about 21 of them). So an operand is lent under a read lock
// of its placement held across the kernel, with no count taken on its
// storage (`Tensor::lend`); a storage from its device's allocator keeps
// no allocator handle (NOTE [Device-held allocator]); the caching
// allocator counts small blocks in atomics, without its mutex (NOTE
// [Counters outside the lock]); and only a view reads its storage's
// version when history is recorded or read. A threaded 4-element add went
// from ~265 to ~206 ns, recorded from ~415 to ~328 ns. A tensor's layout
// never changes (INVARIANT 5 of `TensorImpl`: `move_to_` keeps it), so it
// lives outside the placement lock and an operand read at its own shape
// is lent through the layout it holds, with no copy; a fresh output's
// storage is built in its handle (`Storage::shared_for_overwrite`) and a
// broadcast shape in place (`broadcast_into`), not moved out through
// `Result`s; `Dims::as_slice` has no panic path, so it inlines at
// opt-level z. With the firmware heap's free lists taking 16-aligned
// tensor buffers too (NOTE [Small-block cache]), the eager sine MLP went
// from 36,371 to 26,869 instructions per inference on the M4F: 8 ops, and
// plain loops take 3,261 in the same run, so 2,951 of overhead per op.
// On the threaded host device a small contiguous add runs as one slice
// loop (NOTE [Small contiguous ops] in kael-host), and its small output
// block really comes from `malloc` (LLVM had folded the allocation and
// its zeroing memset back into `calloc`, which skips glibc's per-thread
// cache): a threaded 4-element add went from ~220 to ~170 ns, 0.93-0.97
// of candle's time in the same run. A recorded binary op keeps its
// operands' shapes only when broadcasting happened, and a dropped node
// takes its rule without the lock: recorded, ~336 to ~275 ns. What is
// left is mostly atomic read-modify-writes (about 9 ns each back to back
// on issue 17's VM, about 5 ns each in place): an unrecorded add does 18
// (two placement read locks, three storage flags, the allocator's three
// counters, the device handle's count, and the strong and weak counts of
// the output's impl and storage), and recording adds about 8. Then a
// node took its rule into its own allocation (no `Shared<Rule>`), a
// tensor's grad_fn moved beside its boxed `AutogradMeta` under the one
// lock (`AutogradSlot`; recording into a fresh output allocates no
// meta), and a dropped node leaves a rule without saved tensors in
// place: recording now allocates one node and does about 6 atomic
// read-modify-writes (the leaf's lock and its accumulator's count, the
// output's lock, and on drop the node's strong and weak counts and the
// accumulator's), and a recorded 4-element add went from 2,775 to 2,393
// instructions (callgrind), 0.83 of candle's time on a 2-vCPU AMD EPYC.

fn take_children(next: &mut Edges, stack: &mut Vec<Shared<Node>>) {
    for slot in next.iter_mut() {
        if let Some(n) = slot.take() {
            // A child with another user, or without edges (a leaf's
            // accumulator), is released in place: its count only drops,
            // or its drop has no children to walk. Should another thread
            // drop the other handle at the same moment, this drop frees
            // the child here, one level deeper; its own drop is iterative.
            if Shared::strong_count(&n) > 1 || n.next.is_empty() {
                drop(n);
            } else {
                stack.push(n);
            }
        }
    }
}

/// The rule in `slot` when it saved tensors (whose grad_fns the iterative
/// drop must take); any other rule stays where it is.
fn take_saving(slot: &mut Option<Rule>) -> Option<Rule> {
    if slot.as_ref().is_some_and(Rule::saves_tensors) {
        slot.take()
    } else {
        None
    }
}

/// A node's edges, one per input of its op: up to [`Edges::INLINE`] kept in
/// place (every unary and binary op; NOTE [Small-op path]: one allocation
/// fewer per recorded op), more in a vector.
pub(crate) enum Edges {
    /// The first `len` slots are the edges.
    Inline {
        slots: [Option<Shared<Node>>; Edges::INLINE],
        len: u8,
    },
    /// More edges than fit in place.
    Heap(Vec<Option<Shared<Node>>>),
}

impl Edges {
    /// How many edges are kept without allocating.
    pub(crate) const INLINE: usize = 2;

    /// The edges `iter` yields, in order.
    pub(crate) fn collect(iter: impl Iterator<Item = Option<Shared<Node>>>) -> Self {
        let mut slots: [Option<Shared<Node>>; Edges::INLINE] = [None, None];
        let mut len = 0usize;
        let mut iter = iter.peekable();
        while len < Edges::INLINE {
            match iter.next() {
                Some(e) => {
                    slots[len] = e;
                    len += 1;
                }
                None => break,
            }
        }
        if iter.peek().is_none() {
            // `len <= INLINE = 2` fits u8.
            return Edges::Inline {
                slots,
                len: len as u8,
            };
        }
        let mut v: Vec<Option<Shared<Node>>> = slots.into_iter().collect();
        v.extend(iter);
        Edges::Heap(v)
    }
}

impl core::ops::Deref for Edges {
    type Target = [Option<Shared<Node>>];
    fn deref(&self) -> &Self::Target {
        match self {
            Edges::Inline { slots, len } => &slots[..usize::from(*len)],
            Edges::Heap(v) => v,
        }
    }
}

impl core::ops::DerefMut for Edges {
    fn deref_mut(&mut self) -> &mut Self::Target {
        match self {
            Edges::Inline { slots, len } => &mut slots[..usize::from(*len)],
            Edges::Heap(v) => v,
        }
    }
}

/// A tensor a rule keeps for backward, with the version it had then.
pub(crate) struct SavedTensor {
    tensor: Tensor,
    version: usize,
    /// How to give the unpacked tensor its history when recording.
    history: SavedHistory,
}

/// NOTE [No reference cycles] for saved tensors: only a leaf that requires
/// grad is kept as itself (autograd refuses in-place ops on it while
/// recording). Any other input is kept as a detached alias (plus its grad_fn,
/// re-attached on unpack when recording), because an in-place op recorded
/// on it later gives it a grad_fn that can lead back to the node saving it
/// (`let b = w.mul(&a)?; a.add_(&b)?`): a cycle that is never freed. Such a
/// write bumps the version, so the alias never needs the new history.
enum SavedHistory {
    /// Kept as itself (a leaf that requires grad, or detaching failed).
    Original,
    /// The node's own output: re-attached to the node on unpack.
    Output,
    /// An input without history: the alias is all there is.
    Constant,
    /// An input that had this grad_fn: re-attached on unpack.
    Input(Shared<Node>),
}

impl SavedTensor {
    /// Saves an input of the op.
    pub(crate) fn input(t: &Tensor) -> Self {
        let version = t.version();
        let history = match t.grad_fn() {
            Some(node) => SavedHistory::Input(node),
            None if t.requires_grad() => SavedHistory::Original,
            None => SavedHistory::Constant,
        };
        match (history, t.detach()) {
            (history @ (SavedHistory::Input(_) | SavedHistory::Constant), Ok(alias)) => Self {
                tensor: alias,
                version,
                history,
            },
            _ => Self {
                tensor: t.clone(),
                version,
                history: SavedHistory::Original,
            },
        }
    }

    /// Saves the op's own output (detached).
    pub(crate) fn output(t: &Tensor) -> Result<Self> {
        Ok(Self {
            tensor: t.detach()?,
            version: t.version(),
            history: SavedHistory::Output,
        })
    }

    /// The tensor, after checking that nobody modified it in place.
    pub(crate) fn unpack(&self, node: &Shared<Node>) -> Result<Tensor> {
        if self.tensor.version() != self.version {
            return Err(Error::Autograd {
                op: node.name,
                reason: "one of the variables needed for gradient computation has been modified by an inplace operation (through this tensor, a view of it, or detach()); deep_clone() it before modifying, or modify it after backward",
            });
        }
        let attach = match &self.history {
            SavedHistory::Output => node,
            SavedHistory::Input(n) => n,
            SavedHistory::Original | SavedHistory::Constant => return Ok(self.tensor.clone()),
        };
        if is_grad_enabled() {
            let t = self.tensor.detach()?;
            t.set_history(attach.clone());
            return Ok(t);
        }
        Ok(self.tensor.clone())
    }

    /// Hands out the grad_fn of a saved tensor this rule uniquely owns, so
    /// `Node::drop` can free chains iteratively.
    pub(crate) fn into_grad_fn(self, stack: &mut Vec<Shared<Node>>) {
        if let SavedHistory::Input(n) = self.history {
            stack.push(n);
        } else if let Some(n) = self.tensor.take_grad_fn_if_unique() {
            stack.push(n);
        }
    }
}

// NOTE [Autograd feature]
// Every op asks `needs_record` before it records history, so with the
// `autograd` feature off that one answer (always no) leaves the rules,
// nodes and saved tensors unreachable, and the linker drops them: an eager
// sine MLP on the M4F is about 13 KB smaller. Nothing else changes: tensors
// still carry `requires_grad` (so `nn` layers build as usual), and
// `backward` on a tensor without history says the feature is off.

/// Whether history should be recorded for an op with these inputs (never
/// without the `autograd` feature: NOTE [Autograd feature]).
pub(crate) fn needs_record(inputs: &[&Tensor]) -> bool {
    cfg!(feature = "autograd") && is_grad_enabled() && inputs.iter().any(|t| t.requires_grad())
}

/// The edge a consumer of `t` sends gradients along.
pub(crate) fn grad_edge(t: &Tensor) -> Option<Shared<Node>> {
    if !t.requires_grad() {
        return None;
    }
    if t.is_view() {
        return t.grad_fn().or_else(|| Some(t.accumulator()));
    }
    // A non-view's history never goes stale (see `grad_fn`): its node or
    // its accumulator under one lock (NOTE [Small-op path]).
    Some(t.autograd_slot().with(|s| match &s.grad_fn {
        Some(node) => node.clone(),
        None => t.accumulator_in(s.meta()),
    }))
}

/// Records `out = op(inputs)` when grad mode is on and an input requires
/// grad; `make` builds the rule (saving tensors) only then.
pub(crate) fn record(
    out: &Tensor,
    inputs: &[&Tensor],
    make: impl FnOnce() -> Result<Rule>,
) -> Result<()> {
    if !needs_record(inputs) {
        return Ok(());
    }
    let rule = make()?;
    let next = Edges::collect(inputs.iter().map(|t| grad_edge(t)));
    out.set_history(new_node(rule, next));
    Ok(())
}

/// Records an in-place op on `target`: the new node's first edge is the
/// target's previous history (PyTorch's rebase_history). On a view, the
/// base's history is rewritten instead (NOTE [In-place through views]).
pub(crate) fn record_inplace(
    target: &Tensor,
    old_edge: Option<Shared<Node>>,
    others: &[&Tensor],
    rule: Rule,
) {
    let (first, rule) = if target.is_view() {
        let base = target.root();
        let rule = Rule::CopySlices {
            base: Box::new(base.layout()),
            view: Box::new(target.layout()),
            inner: Box::new(rule),
        };
        (grad_edge(&base), rule)
    } else {
        (old_edge, rule)
    };
    let next = Edges::collect(core::iter::once(first).chain(others.iter().map(|t| grad_edge(t))));
    let node = new_node(rule, next);
    if target.is_view() {
        let base = target.root();
        base.set_history(node);
        target.rederive_view_history();
    } else {
        target.set_history(node);
    }
}

fn new_node(rule: Rule, next: Edges) -> Shared<Node> {
    // Built in its allocation, not moved there (NOTE [Rule size]).
    shared_in_place(|| Node {
        name: rule.name(),
        rule: Lock::new(Some(rule)),
        next,
        hooks: Lock::new(Vec::new()),
        leaf: None,
    })
}

impl Tensor {
    pub(crate) fn with_meta<R>(&self, f: impl FnOnce(&mut AutogradMeta) -> R) -> R {
        self.autograd_slot().with(|s| f(s.meta()))
    }

    /// The node that produced this tensor, if it has history. A view whose
    /// base was modified in place since the view was made gets its history
    /// re-derived from the base's (NOTE [In-place through views]).
    pub fn grad_fn(&self) -> Option<Shared<Node>> {
        let (node, recorded) = self.autograd_slot().with(|s| {
            let recorded = s.meta.as_ref().map_or(0, |m| m.history_version);
            (s.grad_fn.clone(), recorded)
        });
        // Only a view's history goes stale, so only a view reads its
        // storage's version (a read of the placement: NOTE [Small-op path]).
        if node.is_some() && self.is_view() && recorded != self.version() {
            if let Some(fresh) = self.rederive_view_history() {
                return Some(fresh);
            }
        }
        node
    }

    /// Gives this view the history "as_strided view of its base's current
    /// history"; `None` (and no change) when the base has no history.
    fn rederive_view_history(&self) -> Option<Shared<Node>> {
        let base = self.root();
        let base_node = base.grad_fn()?;
        let rule = Rule::View {
            input_shape: base.dims().clone(),
            kind: rules::ViewKind::AsStrided(Box::new((base.layout(), self.layout()))),
        };
        let node = new_node(rule, Edges::collect(core::iter::once(Some(base_node))));
        self.set_history(node.clone());
        Some(node)
    }

    pub(crate) fn set_history(&self, node: Shared<Node>) {
        // Read back only for views (see `grad_fn`), which alone keep it.
        let version = self.is_view().then(|| self.version());
        let old = self.autograd_slot().with(|s| {
            self.requires_grad_flag().set(true);
            if let Some(version) = version {
                s.meta().history_version = version;
            }
            s.grad_fn.replace(node)
        });
        drop(old);
    }

    fn take_grad_fn_if_unique(self) -> Option<Shared<Node>> {
        let imp = self.into_unique_impl()?;
        imp.take_autograd().grad_fn
    }

    /// The leaf's accumulator node (created on first use, then kept by the
    /// leaf: NOTE [Leaf accumulators]).
    pub(crate) fn accumulator(&self) -> Shared<Node> {
        self.with_meta(|m| self.accumulator_in(m))
    }

    /// [`Tensor::accumulator`] under the caller's lock of this tensor's
    /// autograd state.
    fn accumulator_in(&self, m: &mut AutogradMeta) -> Shared<Node> {
        m.accumulator
            .get_or_insert_with(|| {
                Shared::new(Node {
                    name: "AccumulateGrad",
                    rule: Lock::new(None),
                    next: Edges::collect(core::iter::empty()),
                    hooks: Lock::new(Vec::new()),
                    leaf: Some(self.downgrade()),
                })
            })
            .clone()
    }

    /// Whether this tensor is a leaf (no history; PyTorch's `is_leaf`).
    pub fn is_leaf(&self) -> bool {
        self.grad_fn().is_none()
    }

    /// Replaces the gradient (`None` clears it).
    ///
    /// # Errors
    /// A gradient whose shape, dtype or device differs from the tensor's.
    ///
    /// ```
    /// use kael_core::{DType, Device, Tensor};
    /// let w = Tensor::ones(&[2], DType::F32, &Device::cpu())?.requires_grad_(true)?;
    /// w.set_grad(Some(Tensor::ones(&[2], DType::F32, &Device::cpu())?))?;
    /// assert!(w.grad().is_some());
    /// w.set_grad(None)?;
    /// assert!(w.grad().is_none());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn set_grad(&self, grad: Option<Tensor>) -> Result<()> {
        if let Some(g) = &grad {
            if g.shape() != self.shape() {
                return Err(Error::ShapeMismatch {
                    op: "set_grad",
                    expected: crate::error::ErrShape::of(self.shape()),
                    got: crate::error::ErrShape::of(g.shape()),
                });
            }
            self.same_dtype("set_grad", g)?;
            self.same_device("set_grad", g)?;
        }
        let old = self.with_meta(|m| core::mem::replace(&mut m.grad, grad));
        drop(old);
        Ok(())
    }

    /// Clears the gradient (PyTorch's `zero_grad(set_to_none=True)`).
    ///
    /// ```
    /// use kael_core::{DType, Device, Tensor};
    /// let w = Tensor::ones(&[2], DType::F32, &Device::cpu())?.requires_grad_(true)?;
    /// w.mul_scalar(3.0)?.sum_all()?.backward()?;
    /// w.zero_grad();
    /// assert!(w.grad().is_none());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn zero_grad(&self) {
        let old = self.with_meta(|m| m.grad.take());
        drop(old);
    }

    /// Registers a hook that runs on the gradient flowing into this tensor
    /// during backward; returning `Some(g)` replaces the gradient.
    ///
    /// # Errors
    /// [`Error::Autograd`] when the tensor does not require grad.
    ///
    /// ```
    /// use kael_core::{DType, Device, Tensor};
    /// let x = Tensor::ones(&[2], DType::F32, &Device::cpu())?.requires_grad_(true)?;
    /// x.register_hook(|g| Ok(Some(g.mul_scalar(10.0)?)))?;
    /// x.sum_all()?.backward()?;
    /// assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![10.0, 10.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn register_hook<F: HookClosure>(&self, hook: F) -> Result<()> {
        if !self.requires_grad() {
            return Err(Error::Autograd {
                op: "register_hook",
                reason: "cannot register a hook on a tensor that does not require grad; call requires_grad_(true) first",
            });
        }
        let h = Shared::new(HookFn(Box::new(hook)));
        match self.grad_fn() {
            Some(node) => node.hooks.with(|v| v.push(h)),
            None => self.with_meta(|m| m.hooks.push(h)),
        }
        Ok(())
    }

    /// Errors for in-place writes that autograd cannot allow.
    pub(crate) fn check_inplace_autograd(&self, op: &'static str) -> Result<()> {
        if !is_grad_enabled() {
            return Ok(());
        }
        let root = self.root();
        let leaf_needing_grad = |t: &Tensor| t.requires_grad() && t.is_leaf();
        if leaf_needing_grad(self) || (self.is_view() && leaf_needing_grad(&root)) {
            return Err(Error::Autograd {
                op,
                reason: "a leaf tensor that requires grad (or a view of one) is being used in an in-place operation; wrap the update in no_grad(..) or deep_clone() it first",
            });
        }
        if self.is_view() && !root.is_contiguous() && (self.requires_grad() || root.requires_grad())
        {
            return Err(Error::Autograd {
                op,
                reason: "in-place operations through a view are differentiable only when the view's base is contiguous; deep_clone() the base first",
            });
        }
        Ok(())
    }
}
