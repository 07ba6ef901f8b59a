//! The one error type. Every public operation returns [`Result`].
//!
//! Each variant names the operation, carries the offending values, and its
//! `Display` text ends with the fix.

use crate::device_kind::DeviceKind;
use crate::dtype::DType;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// `core::result::Result` with kael's [`Error`].
pub type Result<T> = core::result::Result<T, Error>;

/// Everything that can go wrong in kael.
///
/// ```
/// use kael_core::{Device, Error, Tensor};
/// let t = Tensor::zeros(&[2, 3], kael_core::DType::F32, &Device::cpu())?;
/// let e = t.narrow(5, 0, 1).unwrap_err();
/// assert!(matches!(e, Error::DimOutOfRange { op: "narrow", dim: 5, rank: 2 }));
/// assert!(e.to_string().contains("-2..2"));
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Error {
    // === Shape errors ===
    /// A dimension index outside `-rank..rank`.
    DimOutOfRange {
        /// The operation.
        op: &'static str,
        /// The dimension passed.
        dim: isize,
        /// The tensor's rank.
        rank: usize,
    },
    /// More than [`crate::MAX_RANK`] dimensions.
    RankTooLarge {
        /// The rank requested.
        rank: usize,
        /// The maximum.
        max: usize,
    },
    /// Wrong rank for the operation.
    RankMismatch {
        /// The operation.
        op: &'static str,
        /// What the operation needs, in words ("2", "at least 1").
        expected: &'static str,
        /// The rank received.
        got: usize,
    },
    /// Two shapes that cannot be broadcast together.
    BroadcastMismatch {
        /// The operation.
        op: &'static str,
        /// Left shape.
        lhs: ErrShape,
        /// Right shape.
        rhs: ErrShape,
    },
    /// Two shapes that must agree and do not.
    ShapeMismatch {
        /// The operation.
        op: &'static str,
        /// Shape expected.
        expected: ErrShape,
        /// Shape received.
        got: ErrShape,
    },
    /// A new shape with a different number of elements.
    ElementCountMismatch {
        /// The operation.
        op: &'static str,
        /// Elements in the tensor.
        numel: usize,
        /// The shape asked for.
        shape: ErrShape,
    },
    /// `view` on strides that cannot express the new shape.
    ViewNotPossible {
        /// The operation.
        op: &'static str,
        /// Current shape.
        shape: ErrShape,
        /// Current strides.
        strides: ErrShape,
    },

    // === Index and bounds errors ===
    /// An index (or a range end) outside a dimension.
    IndexOutOfRange {
        /// The operation.
        op: &'static str,
        /// The index passed.
        index: i64,
        /// The size of the dimension.
        size: usize,
    },
    /// A layout that would reach past the end of its storage.
    OutOfBounds {
        /// The operation.
        op: &'static str,
        /// One past the last element the layout reaches.
        reach: usize,
        /// Elements the storage holds.
        storage_len: usize,
    },

    // === Type and device errors ===
    /// An in-place op whose promoted result dtype the destination cannot
    /// hold (`int64 += 2.5`; NOTE [Type promotion], rule 5).
    CannotCast {
        /// The operation.
        op: &'static str,
        /// The dtype the operands promote to.
        result: DType,
        /// The destination's dtype.
        dest: DType,
    },
    /// Operands of different dtypes.
    DTypeMismatch {
        /// The operation.
        op: &'static str,
        /// The dtype expected.
        expected: DType,
        /// The dtype received.
        got: DType,
    },
    /// Elements read as a Rust type that is not the tensor's dtype
    /// (`item::<f64>()` on an `F32` tensor).
    ElementTypeMismatch {
        /// The operation (`item`, `to_vec`).
        op: &'static str,
        /// The tensor's dtype.
        dtype: DType,
        /// The dtype of the Rust type asked for.
        requested: DType,
    },
    /// A state dict whose names, shapes or dtypes differ from the module's
    /// (`load_state_dict`). Each entry reads `name [shape] DType`;
    /// `mismatched` ones `name: module [..] DType, given [..] DType`.
    StateDictKeys {
        /// The operation.
        op: &'static str,
        /// The module's tensors that the state dict lacks.
        missing: Vec<String>,
        /// Entries the module has no tensor for.
        unexpected: Vec<String>,
        /// Entries whose shape or dtype differ from the module's tensor.
        mismatched: Vec<String>,
    },
    /// An operation that does not exist for a dtype.
    UnsupportedDType {
        /// The operation.
        op: &'static str,
        /// The dtype.
        dtype: DType,
        /// Which dtypes work.
        supported: &'static str,
    },
    /// Operands on different devices.
    DeviceMismatch {
        /// The operation.
        op: &'static str,
        /// Device of the first operand.
        lhs: DeviceKind,
        /// Device of the other operand.
        rhs: DeviceKind,
    },
    /// An operation that a backend does not implement.
    Unsupported {
        /// The operation.
        op: &'static str,
        /// The backend.
        device: DeviceKind,
    },

    // === Memory errors ===
    /// An allocator could not provide the bytes.
    OutOfMemory {
        /// Bytes requested.
        requested: usize,
        /// The largest request that allocator could serve now (for an
        /// arena, its largest free block), where it knows.
        available: Option<usize>,
    },
    /// An allocator with a fixed table of live blocks (the arena's
    /// `MAX_BLOCKS`) has every entry in use, whatever bytes are free.
    AllocatorBlockLimit {
        /// Bytes requested.
        requested: usize,
        /// The table's size.
        max_blocks: usize,
    },
    /// An in-place write into a tensor where several positions share one element.
    InternalOverlap {
        /// The operation.
        op: &'static str,
    },
    /// A storage was borrowed against its guard rules: a write while a
    /// read or write guard is held (on this thread or another), or a read
    /// while a write guard is held.
    BorrowConflict {
        /// The operation.
        op: &'static str,
    },

    // === Argument errors ===
    /// Any other invalid argument, with the reason and the fix.
    InvalidArgument {
        /// The operation.
        op: &'static str,
        /// What is wrong and how to fix it.
        reason: &'static str,
    },

    /// Quantization parameters that cannot describe int8 values (a zero or
    /// non-finite scale, a zero point outside int8, per-channel lists that
    /// do not match the channels), see [`crate::quant`].
    InvalidQuantization {
        /// The operation.
        op: &'static str,
        /// What is wrong and how to fix it.
        reason: &'static str,
        /// The offending value (a scale, a zero point or a length).
        value: f64,
        /// The channel it belongs to (0 for per-tensor parameters).
        channel: usize,
    },

    /// A `.tflite` model holds an operator kael's int8 interpreter does not
    /// run (see [`crate::quant::Model`]).
    UnsupportedOperator {
        /// The operation.
        op: &'static str,
        /// TFLite's builtin operator code.
        code: i32,
        /// The operator's position in the graph.
        index: usize,
    },
    /// A model operator whose kernel was not among those the model was
    /// parsed with (`quant::Model::parse_with`).
    OperatorNotRegistered {
        /// The operation.
        op: &'static str,
        /// TFLite's builtin operator code.
        code: i32,
        /// The operator's position in the graph.
        index: usize,
    },

    // === Autograd errors ===
    /// An autograd rule that was violated.
    Autograd {
        /// The operation (or grad_fn name) concerned.
        op: &'static str,
        /// What is wrong and how to fix it.
        reason: &'static str,
    },
    /// `autograd::grad` was asked for the gradient of an input that no
    /// output depends on, without `allow_unused`.
    UnusedInput {
        /// The operation (`grad`).
        op: &'static str,
        /// The input's position in `inputs`.
        index: usize,
    },
}

/// Writes `v` without core's float formatting, which would cost about
/// 15 KB of flash on a Cortex-M0 for the one variant that carries a float:
/// `NaN`, `inf`, integers as integers, anything else in scientific
/// notation with up to six significant digits (`2.5e-3`).
fn write_real(f: &mut fmt::Formatter<'_>, v: f64) -> fmt::Result {
    if v.is_nan() {
        return f.write_str("NaN");
    }
    if v.is_sign_negative() && v != 0.0 {
        f.write_str("-")?;
    }
    let a = libm::fabs(v);
    if a.is_infinite() {
        return f.write_str("inf");
    }
    if a < 1e15 && libm::floor(a) == a {
        return write!(f, "{}", a as u64);
    }
    let (mut m, mut e) = (a, 0i32);
    while m >= 10.0 {
        m /= 10.0;
        e += 1;
    }
    while m < 1.0 {
        m *= 10.0;
        e -= 1;
    }
    let mut digits = libm::round(m * 1e5) as u64;
    if digits >= 1_000_000 {
        digits /= 10;
        e += 1;
    }
    let (int, mut frac, mut width) = (digits / 100_000, digits % 100_000, 5usize);
    while width > 0 && frac % 10 == 0 {
        frac /= 10;
        width -= 1;
    }
    write!(f, "{int}")?;
    if width > 0 {
        write!(f, ".{frac:0width$}")?;
    }
    write!(f, "e{e}")
}

/// The first [`LISTED`] entries of `list`, comma-separated, then how many
/// more there are.
fn write_list(f: &mut fmt::Formatter<'_>, list: &[String]) -> fmt::Result {
    for (i, e) in list.iter().take(LISTED).enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        f.write_str(e)?;
    }
    if list.len() > LISTED {
        write!(f, ", and {} more", list.len() - LISTED)?;
    }
    Ok(())
}

/// Entries an error message lists before "and N more".
const LISTED: usize = 8;

/// The Rust element type of a dtype, as a user writes it in `item::<T>()`.
fn rust_type(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::F16 => "half::f16",
        DType::BF16 => "half::bf16",
        DType::I64 => "i64",
        DType::I32 => "i32",
        DType::I16 => "i16",
        DType::I8 => "i8",
        DType::U8 => "u8",
        DType::Bool => "bool",
    }
}

/// The name of the kernel-selection bit ([`crate::cpu::ops`]) of the op or
/// kernel family `op` names: the upper-cased name for table ops (`sin` ->
/// `SIN`, `gelu_tanh` -> `GELU_TANH`), the family for the rest.
fn write_selection_bit(f: &mut fmt::Formatter<'_>, op: &str) -> fmt::Result {
    let family = match op {
        "to_dtype" => Some("CAST"),
        "argmax" | "argmin" => Some("ARG_REDUCE"),
        "softmax" | "log_softmax" => Some("SOFTMAX"),
        "sum" | "max" | "min" | "prod" | "reduce" => Some("REDUCE"),
        _ => None,
    };
    match family {
        Some(bit) => f.write_str(bit),
        None => {
            for c in op.chars() {
                write!(f, "{}", c.to_ascii_uppercase())?;
            }
            Ok(())
        }
    }
}

/// Matches every variant of [`Error`] by the operation it names: `$op`
/// is bound to the `op` field (by reference, as the scrutinee is) for the
/// variants that have one, and the others take the second arm. One list,
/// so a new variant is added in one place.
macro_rules! by_operation {
    ($e:expr, $op:ident => $named:expr, _ => $unnamed:expr) => {
        match $e {
            Error::DimOutOfRange { op: $op, .. }
            | Error::RankMismatch { op: $op, .. }
            | Error::BroadcastMismatch { op: $op, .. }
            | Error::ShapeMismatch { op: $op, .. }
            | Error::ElementCountMismatch { op: $op, .. }
            | Error::ViewNotPossible { op: $op, .. }
            | Error::IndexOutOfRange { op: $op, .. }
            | Error::OutOfBounds { op: $op, .. }
            | Error::DTypeMismatch { op: $op, .. }
            | Error::CannotCast { op: $op, .. }
            | Error::ElementTypeMismatch { op: $op, .. }
            | Error::StateDictKeys { op: $op, .. }
            | Error::UnsupportedDType { op: $op, .. }
            | Error::DeviceMismatch { op: $op, .. }
            | Error::Unsupported { op: $op, .. }
            | Error::InternalOverlap { op: $op, .. }
            | Error::BorrowConflict { op: $op, .. }
            | Error::InvalidArgument { op: $op, .. }
            | Error::InvalidQuantization { op: $op, .. }
            | Error::UnsupportedOperator { op: $op, .. }
            | Error::OperatorNotRegistered { op: $op, .. }
            | Error::Autograd { op: $op, .. }
            | Error::UnusedInput { op: $op, .. } => $named,
            Error::RankTooLarge { .. }
            | Error::OutOfMemory { .. }
            | Error::AllocatorBlockLimit { .. } => $unnamed,
        }
    };
}

impl Error {
    /// The public operation that failed, for errors that name one (all but
    /// the allocator's and the rank limit's). Firmware that cannot afford
    /// `Display` (it links `core::fmt`) can still report this.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let t = Tensor::zeros(&[2], kael_core::DType::F32, &Device::cpu())?;
    /// assert_eq!(t.narrow(3, 0, 1).unwrap_err().op(), Some("narrow"));
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn op(&self) -> Option<&'static str> {
        by_operation!(self, op => Some(*op), _ => None)
    }

    /// The same error reported as coming from `op`: a public method that
    /// runs another (`add_` through the `add` kernel) names itself, since
    /// that is what the user called. Errors without an operation (out of
    /// memory, the allocator's block limit) are returned as they are.
    pub(crate) fn renamed(mut self, name: &'static str) -> Self {
        by_operation!(&mut self, op => *op = name, _ => {});
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::DimOutOfRange { op, dim, rank } => {
                let r = *rank as isize;
                if *rank == 0 {
                    write!(
                        f,
                        "{op}: dimension {dim} is out of range for a rank-0 tensor; unsqueeze it first or use a whole-tensor op"
                    )
                } else {
                    write!(
                        f,
                        "{op}: dimension {dim} is out of range for a rank-{rank} tensor; pass a dim in {}..{r}",
                        -r
                    )
                }
            }
            Error::RankTooLarge { rank, max } => write!(
                f,
                "rank {rank} exceeds the maximum rank {max}; flatten some dimensions first"
            ),
            Error::RankMismatch { op, expected, got } => write!(
                f,
                "{op}: expected a tensor of rank {expected}, got rank {got}; reshape or unsqueeze the input"
            ),
            Error::BroadcastMismatch { op, lhs, rhs } => write!(
                f,
                "{op}: shapes {lhs:?} and {rhs:?} cannot be broadcast (sizes must match or be 1, aligned from the right); reshape or expand one operand"
            ),
            Error::ShapeMismatch { op, expected, got } => write!(
                f,
                "{op}: expected shape {expected:?}, got {got:?}; make the shapes agree"
            ),
            Error::ElementCountMismatch { op, numel, shape } => write!(
                f,
                "{op}: shape {shape:?} does not hold {numel} elements; choose sizes whose product is {numel}"
            ),
            Error::ViewNotPossible { op, shape, strides } => write!(
                f,
                "{op}: a tensor of shape {shape:?} and strides {strides:?} cannot be viewed with that shape without copying; use reshape() or call contiguous() first"
            ),
            Error::IndexOutOfRange { op, index, size } => write!(
                f,
                "{op}: index {index} is out of range for a dimension of size {size}; pass an index in 0..{size}"
            ),
            Error::OutOfBounds {
                op,
                reach,
                storage_len,
            } => write!(
                f,
                "{op}: the layout reaches element {reach} but the storage holds {storage_len} elements; choose a size, stride and offset that stay inside the storage"
            ),
            Error::CannotCast { op, result, dest } => write!(
                f,
                "{op}: a {} result cannot be written into a {} tensor in place; use the out-of-place form, or convert first with to_dtype(DType::{result:?})",
                result.name(),
                dest.name()
            ),
            Error::DTypeMismatch { op, expected, got } => write!(
                f,
                "{op}: expected dtype {expected:?}, got {got:?}; convert with to_dtype(DType::{expected:?})"
            ),
            Error::ElementTypeMismatch {
                op,
                dtype,
                requested,
            } => write!(
                f,
                "{op}: the tensor's dtype is {dtype:?} but {op}::<{}>() reads {requested:?}; call {op}::<{}>(), or convert first with to_dtype(DType::{requested:?})",
                rust_type(*requested),
                rust_type(*dtype)
            ),
            Error::StateDictKeys {
                op,
                missing,
                unexpected,
                mismatched,
            } => {
                write!(f, "{op}: the state dict does not match the module:")?;
                let mut sep = " ";
                for (what, list) in [
                    ("missing", missing),
                    ("unexpected", unexpected),
                    ("shape or dtype differs for", mismatched),
                ] {
                    if !list.is_empty() {
                        write!(f, "{sep}{what} {} (", list.len())?;
                        write_list(f, list)?;
                        f.write_str(")")?;
                        sep = "; ";
                    }
                }
                write!(
                    f,
                    "; load a state dict saved from a model of this architecture, or rename, drop or convert those entries first"
                )
            }
            Error::UnsupportedDType {
                op,
                dtype,
                supported,
            } => write!(
                f,
                "{op}: dtype {dtype:?} is not supported (supported: {supported}); convert with to_dtype() first"
            ),
            Error::DeviceMismatch { op, lhs, rhs } => write!(
                f,
                "{op}: operands are on different devices ({lhs:?} and {rhs:?}); move one with to_device() first"
            ),
            // The reference backend only refuses an op when a CpuBackend's
            // OPS set leaves it out (NOTE [Kernel selection]): name the bit.
            Error::Unsupported {
                op,
                device: DeviceKind::Cpu,
            } => {
                write!(
                    f,
                    "{op}: not linked into this CpuBackend: its OPS set lacks the kernel-selection bit kael_core::cpu::ops::"
                )?;
                write_selection_bit(f, op)?;
                write!(
                    f,
                    "; add that bit to OPS, or use Device::cpu(), which has every op"
                )
            }
            Error::Unsupported {
                op,
                device: DeviceKind::Custom("trace"),
            } => write!(
                f,
                "{op}: Plan::build cannot plan it: it computes its result on the host from tensor values, so a replay would only repeat the recorded result; call it outside the recorded function (eagerly), or on values the plan outputs"
            ),
            Error::Unsupported { op, device } => write!(
                f,
                "{op}: not implemented on the {device:?} backend; move the tensor to a device that implements it (e.g. Device::cpu())"
            ),
            Error::OutOfMemory {
                requested: usize::MAX,
                available: _,
            } => f.write_str(
                "out of memory: the requested size overflows usize (more than the address space); use smaller shapes",
            ),
            Error::OutOfMemory {
                requested,
                available,
            } => match available {
                Some(a) => write!(
                    f,
                    "out of memory: {requested} bytes requested, the largest free block is {a} bytes; free tensors or give the allocator more memory"
                ),
                None => write!(
                    f,
                    "out of memory: {requested} bytes requested; free tensors or give the allocator more memory"
                ),
            },
            Error::InternalOverlap { op } => write!(
                f,
                "{op}: the destination has several positions mapping to one element (e.g. the result of expand), or is an as_strided layout too large to prove otherwise; call deep_clone() first"
            ),
            Error::BorrowConflict { op } => write!(
                f,
                "{op}: the storage is already being read or written, through a guard (Storage::read/write) still held on this thread or by another thread at the same time; drop the guard first, synchronise the threads, or work on a deep_clone()"
            ),
            Error::AllocatorBlockLimit {
                requested,
                max_blocks,
            } => write!(
                f,
                "out of memory: {requested} bytes requested, but the allocator's block limit is reached ({max_blocks} live blocks); free tensors or raise the limit (ArenaAllocator::<MAX_BLOCKS>, default 64)"
            ),
            Error::InvalidArgument { op, reason } => write!(f, "{op}: {reason}"),
            Error::InvalidQuantization {
                op,
                reason,
                value,
                channel,
            } => {
                write!(f, "{op}: {reason} (got ")?;
                write_real(f, *value)?;
                write!(f, " at channel {channel})")
            }
            Error::UnsupportedOperator { op, code, index } => write!(
                f,
                "{op}: operator {index} of the model is TFLite builtin {code} ({}), which kael's int8 interpreter does not run; it runs QUANTIZE, DEQUANTIZE, FULLY_CONNECTED, CONV_2D, DEPTHWISE_CONV_2D, AVERAGE_POOL_2D, MAX_POOL_2D, ADD, RESHAPE and SOFTMAX, so convert the model without it",
                crate::quant::builtin_name(*code)
            ),
            Error::OperatorNotRegistered { op, code, index } => {
                let name = crate::quant::builtin_name(*code);
                write!(
                    f,
                    "{op}: operator {index} of the model is TFLite builtin {code} ({name}), whose kernel is not in the list the model was parsed with; add OpKernel::{name} to the kernels passed to Model::parse_with (or use Model::parse, which registers them all)"
                )
            }
            Error::Autograd { op, reason } => write!(f, "{op}: {reason}"),
            Error::UnusedInput { op, index } => write!(
                f,
                "{op}: input {index} does not reach any output (no output depends on it); pass allow_unused: true in BackwardOptions to get None for it, or leave it out of inputs"
            ),
        }
    }
}

impl core::error::Error for Error {}

/// A shape (or strides) carried by an error, compactly: keeps `Result`
/// small (on a microcontroller, `Result<Tensor>` lives on the stack).
/// Sizes above `u32::MAX` print saturated.
#[derive(Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ErrShape {
    dims: [u32; crate::shape::MAX_RANK],
    rank: u8,
}

impl ErrShape {
    /// Records `dims` (at most `MAX_RANK` entries are kept).
    pub fn of(dims: &[usize]) -> Self {
        let mut out = Self {
            dims: [0; crate::shape::MAX_RANK],
            rank: 0,
        };
        for (slot, &d) in out.dims.iter_mut().zip(dims) {
            *slot = u32::try_from(d).unwrap_or(u32::MAX);
            out.rank += 1;
        }
        out
    }

    /// The recorded sizes.
    pub fn as_slice(&self) -> &[u32] {
        &self.dims[..self.rank as usize]
    }
}

impl fmt::Debug for ErrShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

#[cfg(test)]
#[path = "error_text_tests.rs"]
mod error_text_tests;
