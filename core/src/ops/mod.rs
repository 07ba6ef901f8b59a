//! The op table: one declaration per elementwise op.
//!
//! NOTE [Op table]
//! Each elementwise op (unary in [`unary`], binary in [`binary`],
//! comparisons and logical ops in [`compare`]) is one row of a table. A row
//! holds everything that defines the op:
//! - its name (the `Tensor` method's name), doc comment and doc example;
//! - the scalar function for each dtype class it accepts, each paired with
//!   its CUDA statement: `float: (|x| ..., "return ...;")`, and for
//!   integers either the same pair or the word `refused`;
//! - its kernel-selection bit (`NEG`, ...: NOTE [Kernel selection]);
//! - its gradient, written with tensor ops beside the forward, and which of
//!   input and output the gradient needs saved;
//! - the inputs the conformance suite draws for it ([`Domain`]).
//!
//! From the rows, macros (in `define.rs`) generate the op enums
//! ([`UnaryOp`], [`BinaryOp`], [`CmpOp`]), their names, codes and bits, the
//! `Tensor` methods, the dispatch the reference kernels use (an exhaustive
//! `match`: a row without a function for a class it claims does not
//! compile, and no arm falls back to the identity), the threaded backend's
//! default kernels, the CUDA source (codes come from the enum, so the Rust
//! and CUDA sides cannot drift), the backward rules, and the case lists the
//! conformance suite and the tests iterate over. Adding an op is adding a
//! row.
//!
//! Kernels receive an op's scalar function through a *kernel visitor*
//! ([`UnaryKernel`], [`BinaryKernel`], [`CompareKernel`]): `map_*` matches the
//! op once and calls the visitor's generic `run` with a closure, so each op
//! gets its own monomorphised loop (no per-element `match`).
//!
//! Ops that are compositions of others (`softplus` through `log1p`/`exp`
//! would be one) are still rows when PyTorch defines them as primitives
//! with their own edge semantics; true composites (`layer_norm`, `softmax`
//! variants in `nn`) are written with tensor ops and need no row.

#[macro_use]
mod define;
#[macro_use]
mod define_compare;
pub mod binary;
pub mod compare;
pub(crate) mod scalar;
pub mod unary;

/// The first kernel-selection bit of the unary ops (bits below it are the
/// kernel families of [`crate::cpu::ops`]); room for 64 unary ops.
pub const UNARY_BASE: u32 = 16;
/// The first kernel-selection bit of the binary ops; room for 32 (the
/// declared families of the family table take the top bits, from 127
/// down: the table's compile-time check keeps every bit distinct).
pub const BINARY_BASE: u32 = 80;

// Compile-time budget: the bits of each table fit in its range.
const _: () = assert!(
    UnaryOp::COUNT <= (BINARY_BASE - UNARY_BASE) as usize,
    "too many unary ops for their kernel-selection bits: move BINARY_BASE up"
);
const _: () = assert!(
    BinaryOp::COUNT <= (128 - BINARY_BASE) as usize,
    "too many binary ops for their kernel-selection bits"
);

pub use binary::BinaryOp;
pub use compare::CmpOp;
pub use unary::UnaryOp;

/// Where an op's inputs are valid: the conformance suite and the gradient
/// checks draw inputs from it.
///
/// ```
/// use kael_core::ops::{Domain, UnaryOp};
/// assert!(UnaryOp::CASES.iter().any(|c| c.op == "log" && c.domain == Domain::Positive));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Domain {
    /// Standard normal (integers: -4..=4; u8: 0..=8; bool: either).
    Normal,
    /// `[0.25, 2.25)` (integers: 1..=4).
    Positive,
    /// `±[0.25, 2.25)` (integers: ±1..=4; u8: 1..=8).
    NonZero,
    /// `(-0.9, 0.9)` (integers: -1..=1).
    Unit,
    /// `[0.6, 1.4)` (integers: ±1; u8: 1), for products.
    Near1,
    /// Small whole numbers, so equal elements are common (comparisons, argmax ties).
    Ties,
    /// Whole and half-whole numbers in `[-4, 4]` (rounding ties).
    Halves,
}

/// A kernel over one operand, handed each unary op's scalar function.
///
/// ```
/// use kael_core::ops::{UnaryKernel, UnaryOp};
/// struct At(f32);
/// impl UnaryKernel<f32> for At {
///     type Output = f32;
///     fn run(self, f: impl Fn(f32) -> f32 + Copy + Send + Sync) -> f32 {
///         f(self.0)
///     }
/// }
/// assert_eq!(UnaryOp::Neg.map_float(At(2.0)), Some(-2.0));
/// ```
pub trait UnaryKernel<T> {
    /// What the kernel returns.
    type Output;
    /// Runs the kernel with the op's function.
    fn run(self, f: impl Fn(T) -> T + Copy + Send + Sync) -> Self::Output;
}

/// A kernel over two operands, handed each binary op's scalar function.
///
/// ```
/// use kael_core::ops::{BinaryKernel, BinaryOp};
/// struct At(i32, i32);
/// impl BinaryKernel<i32> for At {
///     type Output = i32;
///     fn run(self, f: impl Fn(i32, i32) -> i32 + Copy + Send + Sync) -> i32 {
///         f(self.0, self.1)
///     }
/// }
/// assert_eq!(BinaryOp::Sub.map_int(At(5, 7)), Some(-2));
/// ```
pub trait BinaryKernel<T> {
    /// What the kernel returns.
    type Output;
    /// Runs the kernel with the op's function.
    fn run(self, f: impl Fn(T, T) -> T + Copy + Send + Sync) -> Self::Output;
}

/// A kernel over two operands with a boolean result, handed each
/// comparison's scalar function.
///
/// ```
/// use kael_core::ops::{CmpOp, CompareKernel};
/// struct At(f64, f64);
/// impl CompareKernel<f64> for At {
///     type Output = bool;
///     fn run(self, f: impl Fn(f64, f64) -> bool + Copy + Send + Sync) -> bool {
///         f(self.0, self.1)
///     }
/// }
/// assert_eq!(CmpOp::Le.map(At(1.0, 1.0)), true);
/// ```
pub trait CompareKernel<T> {
    /// What the kernel returns.
    type Output;
    /// Runs the kernel with the op's function.
    fn run(self, f: impl Fn(T, T) -> bool + Copy + Send + Sync) -> Self::Output;
}

/// One op's CUDA statements, from its table row: the body of a `switch`
/// arm over the op's code, for float and (when accepted) integer dtypes.
///
/// ```
/// use kael_core::ops::UnaryOp;
/// let neg = &UnaryOp::CUDA[UnaryOp::Neg.code() as usize];
/// assert_eq!((neg.name, neg.float), ("neg", Some("return T::st(-x);")));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct CudaRow {
    /// The op's name.
    pub name: &'static str,
    /// The op's code (its position in the table).
    pub code: u32,
    /// Statements for float dtypes, or `None` when floats are refused.
    pub float: Option<&'static str>,
    /// Statements for integer dtypes, or `None` when integers are refused.
    pub int: Option<&'static str>,
}

/// One conformance case of a unary op: how the suite calls it and where its
/// inputs come from.
#[derive(Clone, Copy)]
pub struct UnaryCase {
    /// The op's name.
    pub op: &'static str,
    /// Its arguments, for the case description (`""` when none).
    pub args: &'static str,
    /// The call.
    pub f: fn(&crate::Tensor) -> crate::Result<crate::Tensor>,
    /// Input values.
    pub domain: Domain,
    /// Whether the case runs on integer dtypes too.
    pub ints: bool,
    /// Whether the gradient is checked by finite differences here (false
    /// for piecewise-constant ops, whose gradient is zero almost everywhere
    /// and undefined at the steps).
    pub smooth: bool,
}

/// One in-place unary method with its out-of-place twin, both called with
/// the row's example arguments (generated from the unary table, so a test
/// can compare every in-place method with its op).
#[derive(Clone, Copy)]
pub struct InplaceCase {
    /// The in-place method's name (`exp_`).
    pub op: &'static str,
    /// The in-place call.
    pub inplace: fn(&crate::Tensor) -> crate::Result<()>,
    /// The out-of-place call with the same arguments.
    pub out_of_place: fn(&crate::Tensor) -> crate::Result<crate::Tensor>,
    /// Whether the op accepts integer dtypes too.
    pub ints: bool,
}

/// One conformance case of a binary op.
#[derive(Clone, Copy)]
pub struct BinaryCase {
    /// The op's name.
    pub op: &'static str,
    /// The call.
    pub f: fn(&crate::Tensor, &crate::Tensor) -> crate::Result<crate::Tensor>,
    /// Input values of each operand.
    pub domains: (Domain, Domain),
    /// Whether the case runs on float dtypes.
    pub floats: bool,
    /// Whether the case runs on integer dtypes.
    pub ints: bool,
    /// Whether the gradient is checked by finite differences.
    pub smooth: bool,
}

/// One comparison or logical op, as the conformance suite calls it.
#[derive(Clone, Copy)]
pub struct CompareCase {
    /// The op's name.
    pub op: &'static str,
    /// The call.
    pub f: fn(&crate::Tensor, &crate::Tensor) -> crate::Result<crate::Tensor>,
}
