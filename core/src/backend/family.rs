//! The kernel-family table: every family of the [`Backend`] trait declared
//! once, with what the rest of kael reads about it.
//!
//! NOTE [Family table]
//! A row names a family's [`Family`] variant and gives its user-facing
//! name (the op an error names), its kernel-selection bits (the
//! [`ops`](crate::cpu::ops) set a firmware `CpuBackend` or `Replayer` is
//! built with; the unary and binary families take one bit per op from the
//! op table), its plan step codes (NOTE [Plan words]), and its kind:
//! `primitive` (every backend runs or inherits it), or `fused` (optional:
//! the tensor layer composes it from primitives when a backend neither
//! runs nor inherits it in place: NOTE [Fused families]). The selection
//! bits in `cpu::ops`, the plan's step codes and the replayer's checks of
//! a plan's families are read from this table, and [`report`] lists, per
//! backend, which families it runs itself ([`Backend::provenance`]), which
//! it inherits and which the tensor layer composes.
//!
//! Adding a family: a row here that names its kernel (`kernel:`, a type
//! in `kernels/` implementing [`Declared`](super::declared::Declared), and
//! `adjoint:` for a linear step's gradient), and its tests: the backend
//! entry, reference dispatch, tensor op, gradient, tracer record and plan
//! steps are generated from the row (NOTE [Declared families]). The rows
//! without `kernel:` (copy through argsort) predate it and keep their
//! hand-written `Backend` methods.

use super::{Backend, Inherit};
use crate::device_kind::DeviceKind;
use core::fmt;

/// Whether a backend must provide a family (`Primitive`) or the tensor
/// layer can do without it (`Fused`: composed from primitives, or, for
/// `argsort`, computed on the host).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Run or inherited by every backend.
    Primitive,
    /// Optional: composed from primitives when a backend lacks it.
    Fused,
}

macro_rules! families {
    ($(
        $(#[$doc:meta])*
        $id:ident {
            name: $name:literal, bits: $bits:expr, plan: [$($code:literal),*], kind: $kind:ident
            $(, kernel: $kernel:ty $(, adjoint: [$($adj:literal),*])? $(, grad: [$($grad:literal),*])?)?
        }
    )*) => {
        /// A kernel family of the [`Backend`] trait (NOTE [Family table]).
        ///
        /// ```
        /// use kael_core::backend::Family;
        /// assert_eq!(Family::IndexAdd.name(), "index_add");
        /// assert_eq!(Family::IndexAdd.bits(), kael_core::cpu::ops::INDEX_ADD);
        /// assert!(Family::ALL.iter().any(|f| f.name() == "layer_norm"));
        /// ```
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Family {
            $($(#[$doc])* $id,)*
        }

        impl Family {
            /// Every family, in table order.
            pub const ALL: &'static [Family] = &[$(Family::$id),*];

            /// The name errors and reports use (the op a user calls).
            pub const fn name(self) -> &'static str {
                match self { $(Family::$id => $name,)* }
            }

            /// Its kernel-selection bits ([`ops`](crate::cpu::ops)).
            pub const fn bits(self) -> u128 {
                match self { $(Family::$id => $bits,)* }
            }

            /// The plan step codes that run it (NOTE [Plan words]).
            pub const fn plan_codes(self) -> &'static [u32] {
                match self { $(Family::$id => &[$($code),*],)* }
            }

            /// Primitive or fused.
            pub const fn kind(self) -> Kind {
                match self { $(Family::$id => Kind::$kind,)* }
            }

            /// Whether the row names a kernel: a declared family (NOTE
            /// [Declared families]), reached through
            /// [`Backend::declared`](super::Backend::declared).
            pub const fn is_declared(self) -> bool {
                #[allow(unreachable_patterns)]
                match self {
                    $($(Family::$id => { let _ = core::marker::PhantomData::<$kernel>; true })?)*
                    _ => false,
                }
            }

            /// For a declared family's `step`, the step whose kernel is its
            /// adjoint (the gradient of a linear step, run on the output's
            /// gradient alone), when the row declares one (`adjoint:`).
            pub const fn adjoint(self, step: usize) -> Option<usize> {
                #[allow(unreachable_patterns)]
                match self {
                    $($($(Family::$id => {
                        let adj: &[usize] = &[$($adj),*];
                        if step < adj.len() { Some(adj[step]) } else { None }
                    })?)?)*
                    _ => None,
                }
            }

            /// For a declared family's `step`, the step that computes its
            /// first input's gradient from the step's inputs and the
            /// output's gradient (`grad:`; a nonlinear step such as a max
            /// pool); input `i`'s gradient is the step `i` after it.
            pub const fn grad(self, step: usize) -> Option<usize> {
                let _ = step;
                #[allow(unreachable_patterns)]
                match self {
                    $($($(Family::$id => {
                        let grad: &[usize] = &[$($grad),*];
                        if step < grad.len() { Some(grad[step]) } else { None }
                    })?)?)*
                    _ => None,
                }
            }
        }

        /// The generated dispatch of the declared families (NOTE [Declared
        /// families]): one arm per row with a `kernel:`.
        pub(crate) mod declared_rows {
            #[allow(unused_imports)]
            use super::*;
            use crate::backend::contract::Operand;
            use crate::backend::declared::{self, Call, Declared, In, Out, Shapes};
            use crate::error::{Error, Result};

            /// Every declared family's selection bits.
            pub(crate) const BITS: u128 = 0 $($(| { let _ = core::marker::PhantomData::<$kernel>; $bits })?)*;

            /// `(inputs, outputs)` of a declared step.
            pub(crate) fn arity(f: Family, step: usize, params: &[u32]) -> Option<(usize, usize)> {
                #[allow(unreachable_patterns)]
                match f {
                    $($(Family::$id => <$kernel as Declared>::arity(step, params),)?)*
                    _ => None,
                }
            }

            /// The contract of a declared step ([`declared::check`]).
            pub(crate) fn check(f: Family, step: usize, params: &[u32], ops: &[Operand<'_>]) -> Result<()> {
                #[allow(unreachable_patterns)]
                match f {
                    $($(Family::$id => declared::check::<$kernel>($name, step, params, ops),)?)*
                    _ => Err(not_declared(f)),
                }
            }

            /// The output shapes of a declared step.
            pub(crate) fn outputs(f: Family, step: usize, params: &[u32], ins: &[Operand<'_>]) -> Result<Shapes> {
                #[allow(unreachable_patterns)]
                match f {
                    $($(Family::$id => <$kernel as Declared>::outputs(step, params, ins),)?)*
                    _ => Err(not_declared(f)),
                }
            }

            /// Whether a declared step reads its outputs (an update in place).
            pub(crate) fn updates(f: Family, step: usize) -> bool {
                #[allow(unreachable_patterns)]
                match f {
                    $($(Family::$id => <$kernel as Declared>::updates(step),)?)*
                    _ => false,
                }
            }

            /// Whether a declared step splits along a batch dimension.
            pub(crate) fn batched(f: Family, step: usize) -> bool {
                #[allow(unreachable_patterns)]
                match f {
                    $($(Family::$id => <$kernel as Declared>::batched(step),)?)*
                    _ => false,
                }
            }

            /// Whether a declared step's outputs sum over a batch.
            pub(crate) fn summed(f: Family, step: usize) -> bool {
                #[allow(unreachable_patterns)]
                match f {
                    $($(Family::$id => <$kernel as Declared>::summed(step),)?)*
                    _ => false,
                }
            }

            /// The inputs of a batched step every range reads whole.
            pub(crate) fn shared_inputs(f: Family, step: usize) -> u8 {
                #[allow(unreachable_patterns)]
                match f {
                    $($(Family::$id => <$kernel as Declared>::shared_inputs(step),)?)*
                    _ => 0,
                }
            }

            /// The scratch bytes of a declared step.
            pub(crate) fn scratch(f: Family, step: usize, params: &[u32], ops: &[Operand<'_>]) -> Option<usize> {
                #[allow(unreachable_patterns)]
                match f {
                    $($(Family::$id => <$kernel as Declared>::scratch(step, params, ops),)?)*
                    _ => None,
                }
            }

            /// Runs a declared step on storages, for the families in `OPS`.
            pub(crate) fn run_storages<const DTYPES: u16, const OPS: u128>(call: Call<'_>) -> Result<()> {
                #[allow(unreachable_patterns)]
                match call.family {
                    $($(Family::$id if OPS & $bits != 0 => {
                        declared::run_storages(call, &declared::Fns::of::<$kernel, DTYPES>())
                    })?)*
                    f => Err(not_declared(f)),
                }
            }

            /// Runs a declared step on slices, for the families in `OPS`.
            pub(crate) fn run<const DTYPES: u16, const OPS: u128>(
                f: Family,
                step: usize,
                params: &[u32],
                ins: &[In<'_>],
                outs: &mut [Out<'_>],
                scratch: &mut [u8],
            ) -> Result<()> {
                #[allow(unreachable_patterns)]
                match f {
                    $($(Family::$id if OPS & $bits != 0 => <$kernel as Declared>::run::<DTYPES>(step, params, ins, outs, scratch),)?)*
                    f => Err(not_declared(f)),
                }
            }

            fn not_declared(f: Family) -> Error {
                Error::Unsupported { op: f.name(), device: crate::device_kind::DeviceKind::Cpu }
            }
        }
    };
}

families! {
    /// `copy_strided`: views made contiguous, `deep_clone`, `copy_`.
    Copy { name: "copy", bits: 1 << 0, plan: [1], kind: Primitive }
    /// `cast`: `to_dtype`.
    Cast { name: "to_dtype", bits: 1 << 1, plan: [12], kind: Primitive }
    /// `fill`: `zeros`, `ones`, `full`, `fill_`.
    Fill { name: "fill", bits: 1 << 2, plan: [0], kind: Primitive }
    /// `unary`: the op table's unary ops (one bit each).
    Unary { name: "unary", bits: crate::ops::unary::bits::UNARY, plan: [2], kind: Primitive }
    /// `binary`: the op table's binary ops (one bit each).
    Binary { name: "binary", bits: crate::ops::binary::bits::BINARY, plan: [3], kind: Primitive }
    /// `compare`: `eq`, `lt`, ... into bool.
    Compare { name: "compare", bits: 1 << 3, plan: [4], kind: Primitive }
    /// `where_cond`.
    Where { name: "where", bits: 1 << 4, plan: [5], kind: Primitive }
    /// `reduce`: sums, means, products, extremes.
    Reduce { name: "reduce", bits: 1 << 5, plan: [6], kind: Primitive }
    /// `arg_reduce`: `argmax`, `argmin`.
    ArgReduce { name: "argmax", bits: 1 << 6, plan: [13], kind: Primitive }
    /// `softmax` and `log_softmax`.
    Softmax { name: "softmax", bits: 1 << 7, plan: [10], kind: Primitive }
    /// `matmul`.
    Matmul { name: "matmul", bits: 1 << 8, plan: [7], kind: Primitive }
    /// `index_select` (and `embedding`).
    IndexSelect { name: "index_select", bits: 1 << 9, plan: [14], kind: Primitive }
    /// `gather`.
    Gather { name: "gather", bits: 1 << 10, plan: [15], kind: Primitive }
    /// `index_add` (the backward of `index_select` and of views).
    IndexAdd { name: "index_add", bits: 1 << 11, plan: [16], kind: Primitive }
    /// `scatter_add` (the backward of `gather`).
    ScatterAdd { name: "scatter_add", bits: 1 << 12, plan: [17], kind: Primitive }
    /// The fused `layer_norm` and its backward.
    LayerNorm { name: "layer_norm", bits: 1 << 13, plan: [18, 19], kind: Fused }
    /// The fused backward of `softmax` and `log_softmax`.
    SoftmaxBackward { name: "softmax_backward", bits: 1 << 14, plan: [11], kind: Fused }
    /// `argsort`: the stable sorting permutation along a dim (`sort`,
    /// `argsort`, `topk`); without it the tensor layer sorts on the host.
    ArgSort { name: "argsort", bits: 1 << 15, plan: [20], kind: Fused }
    /// `im2col` and its adjoint `col2im`: a convolution's or a pooling's
    /// windows as rows, and back (`kernels::im2col`); without it the tensor
    /// layer takes the windows as views.
    Im2col {
        name: "im2col", bits: 1 << 127, plan: [21, 22], kind: Fused,
        kernel: crate::kernels::im2col::Im2col, adjoint: [1, 0]
    }
    /// Which writes of a `scatter` land (`kernels::scatter`); without it
    /// `scatter` reads its indices on the host.
    ScatterWins {
        name: "scatter", bits: 1 << 126, plan: [23], kind: Fused,
        kernel: crate::kernels::scatter::ScatterWins
    }
    /// `max_pool2d` and its gradient (`kernels::pool`); without it the
    /// tensor layer takes the maximum of `im2col`'s windows.
    MaxPool2d {
        name: "max_pool2d", bits: 1 << 125, plan: [24, 25], kind: Fused,
        kernel: crate::kernels::pool::MaxPool2d, grad: [1]
    }
    /// A depthwise convolution (`groups == C == O`) and its two gradients
    /// (`kernels::depthwise`); without it `conv2d` takes `im2col`'s
    /// windows and a grouped product.
    Depthwise2d {
        name: "depthwise_conv2d", bits: 1 << 123, plan: [27, 28, 29], kind: Fused,
        kernel: crate::kernels::depthwise::Depthwise2d, grad: [1]
    }
    /// A dense or grouped convolution and its two gradients, one image's
    /// columns at a time (`kernels::conv`); without it `conv2d` takes
    /// `im2col`'s windows of the whole batch and a product.
    Conv2d {
        name: "conv2d", bits: 1 << 122, plan: [30, 31, 32], kind: Fused,
        kernel: crate::kernels::conv::Conv2d, grad: [1]
    }
    /// Batch normalisation's passes over the activations: per-channel sums
    /// and affine maps (`kernels::batch_norm`); without it `batch_norm`
    /// is composed of broadcasts and reductions.
    BatchNorm {
        name: "batch_norm", bits: 1 << 121, plan: [33, 34, 35, 36], kind: Fused,
        kernel: crate::kernels::batch_norm::BatchNorm
    }
    /// One Adam or AdamW update of an f32 parameter in one pass
    /// (`kernels::adam`); without it the optimizers compose the update.
    Adam {
        name: "adam", bits: 1 << 120, plan: [37], kind: Fused,
        kernel: crate::kernels::adam::Adam
    }
    /// Integers plus a constant (`kernels::count`): how a plan carries an
    /// integer counter (a batch norm's `num_batches_tracked`).
    AddInt {
        name: "add_int", bits: 1 << 124, plan: [26], kind: Fused,
        kernel: crate::kernels::count::AddInt
    }
}

impl Family {
    /// The declared family and step a plan step code runs, if any.
    pub(crate) fn of_code(code: u32) -> Option<(Family, usize)> {
        Family::ALL
            .iter()
            .filter(|f| f.is_declared())
            .find_map(|&f| {
                f.plan_codes()
                    .iter()
                    .position(|&c| c == code)
                    .map(|step| (f, step))
            })
    }
}

/// The plan codes of the declared families, as a bit set (codes below
/// 64: a 64-bit shift and test, a few instructions on a Cortex-M).
pub(crate) const DECLARED_CODES: u64 = {
    let mut set = 0u64;
    let mut i = 0;
    while i < Family::ALL.len() {
        if Family::ALL[i].is_declared() {
            let codes = Family::ALL[i].plan_codes();
            let mut c = 0;
            while c < codes.len() {
                assert!(codes[c] < 64, "a declared family's plan code above 63");
                set |= 1 << codes[c];
                c += 1;
            }
        }
        i += 1;
    }
    set
};

/// Whether a plan step code is a declared family's.
pub(crate) const fn is_declared_code(code: u32) -> bool {
    code < 64 && DECLARED_CODES & (1 << code) != 0
}

// The table's bits are disjoint and its plan codes distinct, and none is
// one of the plan's own steps (8: write, 9: zero).
const _: () = {
    let all = Family::ALL;
    let mut i = 0;
    while i < all.len() {
        let mut j = i + 1;
        while j < all.len() {
            assert!(
                all[i].bits() & all[j].bits() == 0,
                "two families share a bit"
            );
            j += 1;
        }
        let codes = all[i].plan_codes();
        let mut c = 0;
        while c < codes.len() {
            assert!(
                codes[c] != 8 && codes[c] != 9,
                "a plan code of the plan's own"
            );
            let mut k = i + 1;
            while k < all.len() {
                let other = all[k].plan_codes();
                let mut d = 0;
                while d < other.len() {
                    assert!(codes[c] != other[d], "two families share a plan code");
                    d += 1;
                }
                k += 1;
            }
            c += 1;
        }
        i += 1;
    }
};

/// Where a backend's kernels of one family come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provenance {
    /// The backend's own kernels.
    Own,
    /// Another host device's kernels, in place (NOTE [Inherited kernels]).
    Inherited(DeviceKind),
    /// Another host device's kernels on staged copies.
    Staged(DeviceKind),
    /// Composed by the tensor layer from primitives (a fused family the
    /// backend lacks).
    Composed,
    /// Refused with [`Error::Unsupported`](crate::Error::Unsupported).
    Unsupported,
}

/// The provenance that follows from a backend's [`Backend::inherit`] for
/// a family it does not run itself: [`Backend::provenance`]'s default.
pub fn inherited(backend: &(impl Backend + ?Sized), family: Family) -> Provenance {
    let fused = family.kind() == Kind::Fused;
    match backend.inherit() {
        Inherit::From(d) => Provenance::Inherited(d.kind()),
        _ if fused => Provenance::Composed,
        Inherit::Staged(d) => Provenance::Staged(d.kind()),
        Inherit::Nothing => Provenance::Unsupported,
    }
}

/// What a backend runs, family by family ([`report`]).
#[derive(Debug, Clone)]
pub struct Report {
    /// The backend.
    pub device: DeviceKind,
    /// Each family of the table, in order, with its provenance.
    pub families: alloc::vec::Vec<(Family, Provenance)>,
}

/// Lists, for each family of the table, where `backend`'s kernels come
/// from (NOTE [Family table]).
///
/// ```
/// use kael_core::backend::family::{report, Provenance};
/// use kael_core::Device;
/// let r = report(Device::cpu().backend());
/// assert!(r.families.iter().all(|&(_, p)| p == Provenance::Own));
/// println!("{r}"); // cpu: own: copy to_dtype fill ...
/// ```
pub fn report(backend: &dyn Backend) -> Report {
    Report {
        device: backend.kind(),
        families: Family::ALL
            .iter()
            .map(|&f| (f, backend.provenance(f)))
            .collect(),
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}:", self.device)?;
        type Pick = fn(Provenance) -> bool;
        let groups: [(&str, Pick); 5] = [
            ("own", |p| p == Provenance::Own),
            ("inherited", |p| matches!(p, Provenance::Inherited(_))),
            ("staged", |p| matches!(p, Provenance::Staged(_))),
            ("composed", |p| p == Provenance::Composed),
            ("unsupported", |p| p == Provenance::Unsupported),
        ];
        for (i, (label, pick)) in groups.iter().enumerate() {
            let mut names = self.families.iter().filter(|&&(_, p)| pick(p)).peekable();
            let Some(&(_, first)) = names.peek() else {
                continue;
            };
            let sep = if i == 0 { " " } else { "; " };
            match first {
                Provenance::Inherited(d) | Provenance::Staged(d) => {
                    write!(f, "{sep}{label} from {d:?}:")?;
                }
                _ => write!(f, "{sep}{label}:")?,
            }
            for (fam, _) in names {
                write!(f, " {}", fam.name())?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocator::GlobalAllocator;
    use crate::cpu::{CpuBackend, dtypes, ops};
    use crate::shared::Shared;

    #[test]
    fn a_restricted_reference_backend_reports_what_it_links() {
        type Small = CpuBackend<{ dtypes::F32 }, { ops::MATMUL | ops::RELU }>;
        let b = Small::with_allocator(Shared::new(GlobalAllocator::new()));
        let r = report(&b);
        let of = |f: Family| r.families.iter().find(|x| x.0 == f).map(|x| x.1);
        assert_eq!(of(Family::Matmul), Some(Provenance::Own));
        assert_eq!(of(Family::Unary), Some(Provenance::Own)); // relu
        assert_eq!(of(Family::Gather), Some(Provenance::Unsupported));
        assert_eq!(of(Family::LayerNorm), Some(Provenance::Composed));
        // Every fused family it lacks is composed, in table order.
        let composed: alloc::vec::Vec<&str> = Family::ALL
            .iter()
            .filter(|f| f.kind() == Kind::Fused)
            .map(|f| f.name())
            .collect();
        let want = alloc::format!(
            "Cpu: own: unary matmul; composed: {}; unsupported: copy",
            composed.join(" ")
        );
        let text = alloc::format!("{r}");
        assert!(text.starts_with(&want), "{text}");
    }
}
