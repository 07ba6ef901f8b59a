//! Compile-time kernel selection for [`CpuBackend`](super::CpuBackend):
//! which dtypes ([`dtypes`]) and which ops ([`ops`]) a backend instance
//! links.
//!
//! NOTE [Kernel selection]
//! A [`Device`](crate::Device) holds a `dyn Backend`, so its vtable names
//! every backend method, and the linker keeps every kernel of every family,
//! each built once per storage dtype, whatever a program calls. On a host
//! that costs nothing that matters; in firmware it is most of the flash.
//! `CpuBackend<DTYPES, OPS, F32_ACC>` takes two bit sets as const generics:
//! a dtype or op outside its set is a constant-false branch that returns an
//! error instead of calling the kernel, so the kernel instantiation is never
//! referenced and never linked. The defaults select everything, and
//! [`Device::cpu`](crate::Device::cpu) uses them.
//!
//! A refused dtype is [`Error::UnsupportedDType`], whose message says to
//! add the dtype's bit to `DTYPES` or use `Device::cpu()`; a refused op is
//! [`Error::Unsupported`] naming the op, whose message says to use a device
//! that implements it (e.g. `Device::cpu()`; or add its [`ops`] bit).
//! Neither panics.

use crate::dtype::DType;
use crate::error::Error;

/// Dtype bit sets for the `DTYPES` parameter of
/// [`CpuBackend`](super::CpuBackend).
///
/// ```
/// use kael_core::cpu::dtypes;
/// use kael_core::DType;
/// const SET: u16 = dtypes::F32 | dtypes::I64;
/// assert!(dtypes::contains(SET, DType::I64));
/// assert!(!dtypes::contains(SET, DType::F64));
/// ```
pub mod dtypes {
    use crate::dtype::DType;

    /// `f32`.
    pub const F32: u16 = 1 << 0;
    /// `f64`.
    pub const F64: u16 = 1 << 1;
    /// `f16`.
    pub const F16: u16 = 1 << 2;
    /// `bf16`.
    pub const BF16: u16 = 1 << 3;
    /// `i64`.
    pub const I64: u16 = 1 << 4;
    /// `i32`.
    pub const I32: u16 = 1 << 5;
    /// `u8`.
    pub const U8: u16 = 1 << 6;
    /// `bool`.
    pub const BOOL: u16 = 1 << 7;
    /// `i16`.
    pub const I16: u16 = 1 << 8;
    /// `i8`.
    pub const I8: u16 = 1 << 9;
    /// The four float dtypes.
    pub const FLOATS: u16 = F32 | F64 | F16 | BF16;
    /// Every dtype (the default).
    pub const ALL: u16 = 0x3FF;

    /// The bit of one dtype.
    pub const fn bit(d: DType) -> u16 {
        match d {
            DType::F32 => F32,
            DType::F64 => F64,
            DType::F16 => F16,
            DType::BF16 => BF16,
            DType::I64 => I64,
            DType::I32 => I32,
            DType::U8 => U8,
            DType::Bool => BOOL,
            DType::I16 => I16,
            DType::I8 => I8,
        }
    }

    /// Whether `set` holds `d`.
    pub const fn contains(set: u16, d: DType) -> bool {
        set & bit(d) != 0
    }
}

/// Op bit sets for the `OPS` parameter of [`CpuBackend`](super::CpuBackend):
/// one bit per kernel family, and one per unary and binary op (so a model
/// that never calls `sin` or `pow` does not link libm's trigonometry or
/// `pow`). The op bits come from the op table (NOTE [Op table]): bits
/// 0..16 are families, 16..80 unary ops, 80..112 binary ops.
///
/// ```
/// use kael_core::backend::UnaryOp;
/// use kael_core::cpu::ops;
/// const SET: u128 = ops::MATMUL | ops::RELU | ops::ADD;
/// assert!(ops::has_unary(SET, UnaryOp::Relu));
/// assert!(!ops::has_unary(SET, UnaryOp::Exp));
/// ```
pub mod ops {
    use crate::backend::{BinaryOp, Family, UnaryOp};

    /// `copy_strided` (views made contiguous, `deep_clone`, `contiguous`).
    pub const COPY: u128 = Family::Copy.bits();
    /// `cast` (`to_dtype`).
    pub const CAST: u128 = Family::Cast.bits();
    /// `fill` (`zeros`, `ones`, `full`).
    pub const FILL: u128 = Family::Fill.bits();
    /// `compare` (`eq`, `lt`, ...).
    pub const COMPARE: u128 = Family::Compare.bits();
    /// `where_cond`.
    pub const WHERE: u128 = Family::Where.bits();
    /// `reduce` (`sum`, `mean`, `max`, `min`, `prod`; also the backward of broadcasting).
    pub const REDUCE: u128 = Family::Reduce.bits();
    /// `arg_reduce` (`argmax`, `argmin`).
    pub const ARG_REDUCE: u128 = Family::ArgReduce.bits();
    /// `softmax` and `log_softmax`.
    pub const SOFTMAX: u128 = Family::Softmax.bits();
    /// `matmul`.
    pub const MATMUL: u128 = Family::Matmul.bits();
    /// `index_select`.
    pub const INDEX_SELECT: u128 = Family::IndexSelect.bits();
    /// `gather`.
    pub const GATHER: u128 = Family::Gather.bits();
    /// `index_add`.
    pub const INDEX_ADD: u128 = Family::IndexAdd.bits();
    /// `scatter_add`.
    pub const SCATTER_ADD: u128 = Family::ScatterAdd.bits();
    /// `layer_norm` and its backward as fused kernels (without it, layer
    /// norm is composed from the other families: NOTE [Fused families]).
    pub const LAYER_NORM: u128 = Family::LayerNorm.bits();
    /// `softmax` and `log_softmax`'s backward as one fused kernel (without
    /// it, the backward is composed: NOTE [Fused families]).
    ///
    /// ```
    /// use kael_core::allocator::GlobalAllocator;
    /// use kael_core::cpu::{dtypes, ops, CpuBackend};
    /// use kael_core::{shared::Shared, Device, Tensor};
    /// // A reference device that composes softmax's gradient from primitives.
    /// type Composing = CpuBackend<{ dtypes::ALL }, { ops::ALL & !ops::SOFTMAX_BACKWARD }>;
    /// let be = Composing::with_allocator(Shared::new(GlobalAllocator::new()));
    /// let dev = Device::from_backend(Shared::new(be));
    /// let x = Tensor::from_slice(&[1.0f64, 2.0], &[2], &dev)?.requires_grad_(true)?;
    /// x.softmax(0)?.sum_all()?.backward()?; // Σ softmax = 1: zero gradient
    /// assert!(x.grad().unwrap().to_vec::<f64>()?.iter().all(|g| g.abs() < 1e-15));
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub const SOFTMAX_BACKWARD: u128 = Family::SoftmaxBackward.bits();
    /// `argsort`: the indices `sort`, `argsort` and `topk` gather by
    /// (without it, they compute the indices on the host).
    pub const ARGSORT: u128 = Family::ArgSort.bits();

    pub use crate::ops::binary::bits::*;
    pub use crate::ops::unary::bits::*;

    /// Every kernel family and op (the default): the union of the family
    /// table's bits (NOTE [Family table]).
    pub const ALL: u128 = {
        let mut all = 0;
        let mut i = 0;
        while i < Family::ALL.len() {
            all |= Family::ALL[i].bits();
            i += 1;
        }
        all
    };
    /// The image families: the convolution, pooling and batch-norm
    /// kernels (`im2col`, `max_pool2d`, `depthwise_conv2d`, `conv2d`,
    /// `batch_norm`), about 25 KB of a Cortex-M image. A firmware image of
    /// dense layers leaves them out (`ops::ALL & !ops::IMAGE`); without
    /// them, convolutions and pools still run, composed from views and the
    /// other families.
    pub const IMAGE: u128 = Family::Im2col.bits()
        | Family::MaxPool2d.bits()
        | Family::Depthwise2d.bits()
        | Family::Conv2d.bits()
        | Family::BatchNorm.bits();
    /// What the forward pass of a ReLU MLP needs (`softmax(relu(x @ w + b)
    /// ...)`), plus the copy, cast and fill that tensor creation and views
    /// use. OR in more ops (`| ops::EXP | ops::TANH`) for other activations.
    pub const MLP_INFERENCE: u128 = COPY | CAST | FILL | MATMUL | SOFTMAX | ADD | RELU;

    /// The bit of one unary op (from the op table, NOTE [Op table]).
    pub const fn unary_bit(op: UnaryOp) -> u128 {
        op.bit()
    }

    /// The bit of one binary op (from the op table).
    pub const fn binary_bit(op: BinaryOp) -> u128 {
        op.bit()
    }

    /// Whether `set` holds the unary `op`.
    pub const fn has_unary(set: u128, op: UnaryOp) -> bool {
        set & unary_bit(op) != 0
    }

    /// Whether `set` holds the binary `op`.
    pub const fn has_binary(set: u128, op: BinaryOp) -> bool {
        set & binary_bit(op) != 0
    }
}

/// How to enable a dtype that a restricted backend refuses.
const ENABLE_DTYPE: &str = "only the dtypes in this CpuBackend's DTYPES set, which lacks this one; add its bit (kael_core::cpu::dtypes) to DTYPES, or use Device::cpu(), which has all";

/// The error for a dtype outside a backend's `DTYPES` set (used by
/// [`dispatch_in!`](crate::dispatch_in)).
#[doc(hidden)]
pub fn not_enabled(op: &'static str, dtype: DType) -> Error {
    Error::UnsupportedDType {
        op,
        dtype,
        supported: ENABLE_DTYPE,
    }
}

/// Runs `$body` with `$T` bound to the storage representation of `$dtype`
/// when `$set` (a `u16` of [`dtypes`] bits, a constant) holds it, else
/// returns the error for a dtype that is not enabled. `$body` is a
/// `Result`. With `$set` = [`dtypes::ALL`] it is [`dispatch!`](crate::dispatch).
#[macro_export]
#[doc(hidden)]
macro_rules! dispatch_in {
    ($set:expr, $op:expr, $dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            $crate::DType::F32 => $crate::dispatch_in!(@arm $set, $op, F32, $T = f32, $body),
            $crate::DType::F64 => $crate::dispatch_in!(@arm $set, $op, F64, $T = f64, $body),
            $crate::DType::F16 => {
                $crate::dispatch_in!(@arm $set, $op, F16, $T = $crate::half::f16, $body)
            }
            $crate::DType::BF16 => {
                $crate::dispatch_in!(@arm $set, $op, BF16, $T = $crate::half::bf16, $body)
            }
            $crate::DType::I64 => $crate::dispatch_in!(@arm $set, $op, I64, $T = i64, $body),
            $crate::DType::I32 => $crate::dispatch_in!(@arm $set, $op, I32, $T = i32, $body),
            $crate::DType::I16 => $crate::dispatch_in!(@arm $set, $op, I16, $T = i16, $body),
            $crate::DType::I8 => $crate::dispatch_in!(@arm $set, $op, I8, $T = i8, $body),
            // One arm for both, so that their kernels are one instantiation;
            // the first test is a constant, so a set with neither compiles it out.
            d @ ($crate::DType::U8 | $crate::DType::Bool) => {
                if $set & ($crate::cpu::dtypes::U8 | $crate::cpu::dtypes::BOOL) != 0
                    && $crate::cpu::dtypes::contains($set, d)
                {
                    type $T = u8;
                    $body
                } else {
                    Err($crate::cpu::select::not_enabled($op, d))
                }
            }
        }
    };
    (@arm $set:expr, $op:expr, $d:ident, $T:ident = $ty:ty, $body:expr) => {
        if $crate::cpu::dtypes::contains($set, $crate::DType::$d) {
            type $T = $ty;
            $body
        } else {
            Err($crate::cpu::select::not_enabled($op, $crate::DType::$d))
        }
    };
}

#[cfg(test)]
#[path = "select_tests.rs"]
mod tests;
