//! The [`Module`] trait and the walks over a module tree.
//!
//! NOTE [Parameter identity]
//! A module tree may register one tensor under several names (tied weights:
//! a language model's output layer sharing the token embedding). Walks list
//! every tensor once, under the first name the depth-first walk meets, and
//! compare tensors by impl ([`Tensor::is_same`]), never by value or storage:
//! two views of one storage are two parameters, two handles to one impl are
//! one. The comparison is a linear scan (`O(n^2)` in the number of
//! parameter tensors, a few hundred at most for the models this crate
//! targets), which needs no hashing of pointers and works the same in `Rc`
//! and `Arc` mode.

use crate::autograd::no_grad;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::storage::WriteIntent;
use crate::tensor::Tensor;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

/// What a module shows of itself to a walk: its own parameters and buffers,
/// and its direct children. See [`Module::visit`].
pub trait Visitor {
    /// A trainable tensor of the module, under its local `name`.
    fn param(&mut self, name: &str, tensor: &Tensor);

    /// A non-trainable tensor that is part of the module's state (saved in
    /// [`Module::state_dict`], moved by [`Module::to`], not returned by
    /// [`Module::parameters`]).
    fn buffer(&mut self, name: &str, tensor: &Tensor) {
        let _ = (name, tensor);
    }

    /// A direct child module, under its local `name`.
    fn module(&mut self, name: &str, module: &dyn Module);
}

/// `name.i`: the local name of the `i`-th entry of a list field, as
/// PyTorch names the entries of a `ModuleList` or `ParameterList` (used by
/// `#[derive(Module)]`, NOTE [Derived modules] in kael-derive).
///
/// ```
/// assert_eq!(kael_core::nn::indexed_name("blocks", 2), "blocks.2");
/// ```
pub fn indexed_name(name: &str, i: usize) -> String {
    format!("{name}.{i}")
}

/// A layer or a model: a forward function plus the tensors it owns.
///
/// Implementors write [`Module::forward`] and, when they own tensors or
/// children, [`Module::visit`]; layers whose behaviour depends on the mode
/// (dropout) also override [`Module::set_training`]. Everything else is
/// provided and walks the tree through `visit`.
///
/// ```
/// use kael_core::nn::{Linear, Module, Visitor};
/// use kael_core::{Device, Result, Rng, Tensor};
///
/// struct TwoLayers { a: Linear, b: Linear }
/// impl Module for TwoLayers {
///     fn forward(&self, x: &Tensor) -> Result<Tensor> {
///         self.b.forward(&self.a.forward(x)?.relu()?)
///     }
///     fn visit(&self, v: &mut dyn Visitor) {
///         v.module("a", &self.a);
///         v.module("b", &self.b);
///     }
/// }
/// let (dev, mut rng) = (Device::cpu(), Rng::new(0));
/// let m = TwoLayers {
///     a: Linear::new(3, 4, true, &dev, &mut rng)?,
///     b: Linear::new(4, 1, false, &dev, &mut rng)?,
/// };
/// assert_eq!(m.num_parameters(), 3 * 4 + 4 + 4);
/// assert_eq!(m.named_parameters()[2].0, "b.weight");
/// # Ok::<(), kael_core::Error>(())
/// ```
pub trait Module {
    /// Runs the layer on `input`.
    ///
    /// # Errors
    /// Each layer documents the shapes and dtypes it accepts; anything else
    /// is an error (never a panic).
    fn forward(&self, input: &Tensor) -> Result<Tensor>;

    /// Shows this module's own parameters, buffers and children to `visitor`
    /// (not recursively: the walk descends into children itself). The
    /// default shows nothing (a parameterless layer).
    fn visit(&self, visitor: &mut dyn Visitor) {
        let _ = visitor;
    }

    /// Sets this module's own train/eval flag (not its children's: use
    /// [`Module::train`]). The default ignores it (layers that behave the
    /// same in both modes).
    fn set_training(&self, on: bool) {
        let _ = on;
    }

    /// Every parameter with its dotted path (`"blocks.0.attn.c_attn.weight"`),
    /// each tensor once (NOTE [Parameter identity]), in registration order.
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        walk_tensors(self, &mut |name, t, kind| {
            if kind == Kind::Param {
                push_unique(&mut out, name, t);
            }
        });
        out
    }

    /// Every parameter, each tensor once, in registration order (the list to
    /// hand to an optimizer).
    fn parameters(&self) -> Vec<Tensor> {
        self.named_parameters()
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    }

    /// The number of trainable elements (each tensor counted once).
    fn num_parameters(&self) -> usize {
        self.parameters().iter().map(Tensor::numel).sum()
    }

    /// Sets training mode (`true`) or evaluation mode (`false`) on this
    /// module and every module below it (PyTorch's `train(mode)`).
    fn train(&self, on: bool) {
        self.set_training(on);
        walk_modules(self, &mut |m| m.set_training(on));
    }

    /// Evaluation mode: `train(false)`.
    fn eval(&self) {
        self.train(false);
    }

    /// Moves every parameter (with its gradient) and buffer to `device` in
    /// place ([`Tensor::move_to_`]): every handle, an optimizer's included,
    /// sees the moved tensor.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] or backend failures. Tensors are moved one at
    /// a time; on an error the tensors before the failing one have moved
    /// and the rest have not (each tensor is either fully moved or
    /// unchanged). Calling `to` again finishes the move.
    fn to(&self, device: &Device) -> Result<()> {
        let mut all: Vec<(String, Tensor)> = Vec::new();
        walk_tensors(self, &mut |name, t, _| push_unique(&mut all, name, t));
        for (_, t) in &all {
            t.move_to_(device)?;
            if let Some(g) = t.grad() {
                g.move_to_(device)?;
            }
        }
        Ok(())
    }

    /// Clears the gradient of every parameter.
    fn zero_grad(&self) {
        for p in self.parameters() {
            p.zero_grad();
        }
    }

    /// Parameters and buffers by dotted name, each tensor once: the handles
    /// themselves, no copy (save them with a serialiser such as kael-host's
    /// safetensors checkpoint).
    fn state_dict(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        walk_tensors(self, &mut |name, t, _| push_unique(&mut out, name, t));
        out
    }

    /// How `entries` differ from [`Module::state_dict`]: names the module has
    /// and `entries` lacks, names it does not have, and names whose shape or
    /// dtype differ. Empty when [`Module::load_state_dict`] would accept them.
    fn compare_state_dict(&self, entries: &[(String, Tensor)]) -> StateDictMismatch {
        let own = self.state_dict();
        let mut m = StateDictMismatch::default();
        for (name, t) in &own {
            match find(entries, name) {
                None => m.missing.push(name.clone()),
                Some(e) if e.shape() != t.shape() || e.dtype() != t.dtype() => {
                    m.mismatched.push(name.clone())
                }
                Some(_) => {}
            }
        }
        for (name, _) in entries {
            if find(&own, name).is_none() && !m.unexpected.contains(name) {
                m.unexpected.push(name.clone());
            }
        }
        m
    }

    /// Copies `entries` (name, tensor) into the module's parameters and
    /// buffers in place (under `no_grad`), so handles held elsewhere (an
    /// optimizer's) see the loaded values. Strict: every name of
    /// [`Module::state_dict`] must be present with the same shape and dtype,
    /// and no other name may appear. Sources on another device are copied
    /// over first.
    ///
    /// # Errors
    /// [`Error::StateDictKeys`] when the names, shapes or dtypes do not
    /// match, listing the missing, unexpected and mismatched entries with
    /// their shapes and dtypes ([`Module::compare_state_dict`] gives the
    /// names as data); device transfer
    /// failures. Every check and transfer runs before the first write, so on
    /// an error the module is unchanged.
    fn load_state_dict(&self, entries: &[(String, Tensor)]) -> Result<()> {
        const OP: &str = "load_state_dict";
        // two entries of one name: which one is meant is unknowable
        for (i, (name, _)) in entries.iter().enumerate() {
            if entries[..i].iter().any(|(n, _)| n == name) {
                return Err(Error::InvalidArgument {
                    op: OP,
                    reason: "an entry name is given twice; pass each name once",
                });
            }
        }
        let m = self.compare_state_dict(entries);
        if !m.is_empty() {
            let own = self.state_dict();
            let described = |names: &[String], from: &[(String, Tensor)]| -> Vec<String> {
                names
                    .iter()
                    .map(|n| match find(from, n) {
                        Some(t) => format!("{n} {:?} {:?}", t.shape(), t.dtype()),
                        None => n.clone(),
                    })
                    .collect()
            };
            let mismatched = m
                .mismatched
                .iter()
                .map(|n| match (find(&own, n), find(entries, n)) {
                    (Some(a), Some(b)) => format!(
                        "{n}: module {:?} {:?}, given {:?} {:?}",
                        a.shape(),
                        a.dtype(),
                        b.shape(),
                        b.dtype()
                    ),
                    _ => n.clone(),
                })
                .collect();
            return Err(Error::StateDictKeys {
                op: "load_state_dict",
                missing: described(&m.missing, &own),
                unexpected: described(&m.unexpected, entries),
                mismatched,
            });
        }
        // NOTE [All-or-nothing loads]: everything that can fail runs before
        // the first write: the names, shapes and dtypes (above), the copies
        // to each destination's device, and each destination's writability
        // and borrow (a read-only memory map, an expanded view, a guard
        // held by another thread). Writers are announced on every
        // destination first (NOTE [Writers get in]), so a reader on another
        // thread cannot slip in between the checks and the copies.
        no_grad(|| {
            let mut staged = Vec::new();
            for (name, dst) in self.state_dict() {
                let src = find(entries, &name).ok_or(Error::InvalidArgument {
                    op: OP,
                    reason: "an entry disappeared while loading; do not modify the state dict concurrently",
                })?;
                let src = src.to_device(&dst.device())?;
                staged.push((dst, src));
            }
            let _intents: Vec<WriteIntent> = staged
                .iter()
                .map(|(dst, _)| WriteIntent::new(dst.storage()))
                .collect();
            for (dst, _) in &staged {
                dst.check_write_target(OP)?;
            }
            for (dst, src) in &staged {
                dst.copy_(src).map_err(|e| e.renamed(OP))?;
            }
            Ok(())
        })
    }
}

/// The differences [`Module::compare_state_dict`] reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateDictMismatch {
    /// Names the module has that the entries lack.
    pub missing: Vec<String>,
    /// Names in the entries that the module does not have.
    pub unexpected: Vec<String>,
    /// Names whose shape or dtype differ.
    pub mismatched: Vec<String>,
}

impl StateDictMismatch {
    /// Whether nothing differs.
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty() && self.unexpected.is_empty() && self.mismatched.is_empty()
    }
}

fn find<'a>(entries: &'a [(String, Tensor)], name: &str) -> Option<&'a Tensor> {
    entries.iter().find(|(n, _)| n == name).map(|(_, t)| t)
}

fn push_unique(out: &mut Vec<(String, Tensor)>, name: &str, t: &Tensor) {
    if !out.iter().any(|(_, seen)| seen.is_same(t)) {
        out.push((String::from(name), t.clone()));
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Param,
    Buffer,
}

/// Depth-first walk: `f(full_name, tensor, kind)` for every tensor the tree
/// shows (duplicates included; callers dedupe).
fn walk_tensors<M: Module + ?Sized>(root: &M, f: &mut dyn FnMut(&str, &Tensor, Kind)) {
    let mut w = Walk {
        prefix: String::new(),
        on_tensor: f,
        on_module: &mut |_| {},
    };
    root.visit(&mut w);
}

/// Depth-first walk calling `f` on every module below `root` (not `root`).
fn walk_modules<M: Module + ?Sized>(root: &M, f: &mut dyn FnMut(&dyn Module)) {
    let mut w = Walk {
        prefix: String::new(),
        on_tensor: &mut |_, _, _| {},
        on_module: f,
    };
    root.visit(&mut w);
}

struct Walk<'a> {
    prefix: String,
    on_tensor: &'a mut dyn FnMut(&str, &Tensor, Kind),
    on_module: &'a mut dyn FnMut(&dyn Module),
}

impl Walk<'_> {
    fn emit(&mut self, name: &str, t: &Tensor, kind: Kind) {
        let len = self.prefix.len();
        self.prefix.push_str(name);
        (self.on_tensor)(&self.prefix, t, kind);
        self.prefix.truncate(len);
    }
}

impl Visitor for Walk<'_> {
    fn param(&mut self, name: &str, tensor: &Tensor) {
        self.emit(name, tensor, Kind::Param);
    }

    fn buffer(&mut self, name: &str, tensor: &Tensor) {
        self.emit(name, tensor, Kind::Buffer);
    }

    fn module(&mut self, name: &str, module: &dyn Module) {
        (self.on_module)(module);
        let len = self.prefix.len();
        self.prefix.push_str(name);
        self.prefix.push('.');
        module.visit(self);
        self.prefix.truncate(len);
    }
}
