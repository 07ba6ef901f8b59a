//! Element types.
//!
//! NOTE [Bool storage]
//! `bool` elements are stored as one byte holding 0 or 1, and kernels treat
//! them as `u8`; only the dtype tag tells them apart. The invariant is
//! kept by refusing what would break it, not by normalising on read:
//! `view_dtype` refuses to view a tensor as bool or a bool tensor as
//! anything else (`to_dtype` converts instead, mapping `x != 0` to 1), and
//! the safetensors loader copies a BOOL tensor whose bytes are not all 0/1
//! (normalising them) instead of mapping it. Raw byte access
//! (`Storage::write`, `Tensor::from_storage` over bytes written by hand)
//! bypasses tensor ops, and keeping bool bytes 0/1 there is the caller's
//! part.

use crate::error::{Error, Result};
use half::{bf16, f16};

/// The element type of a tensor.
///
/// ```
/// use kael_core::DType;
/// assert_eq!(DType::F16.size_in_bytes(), 2);
/// assert!(DType::BF16.is_float());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 64-bit IEEE float.
    F64,
    /// 16-bit IEEE half.
    F16,
    /// bfloat16.
    BF16,
    /// 64-bit signed integer.
    I64,
    /// 32-bit signed integer.
    I32,
    /// 16-bit signed integer.
    I16,
    /// 8-bit signed integer.
    I8,
    /// 8-bit unsigned integer.
    U8,
    /// Boolean, one byte per element (see NOTE [Bool storage]).
    Bool,
}

impl DType {
    /// All dtypes, in declaration order.
    pub const ALL: [DType; 10] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::I32,
        DType::I16,
        DType::I8,
        DType::U8,
        DType::Bool,
    ];

    /// Bytes per element.
    pub const fn size_in_bytes(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 | DType::I16 => 2,
            DType::U8 | DType::I8 | DType::Bool => 1,
        }
    }

    /// Whether this is a floating-point dtype.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// Whether this is an integer dtype (bool excluded).
    pub const fn is_int(self) -> bool {
        matches!(
            self,
            DType::I64 | DType::I32 | DType::I16 | DType::I8 | DType::U8
        )
    }

    /// Whether `value` converts to this dtype without changing: any value
    /// for a float dtype (rounding to its precision, as PyTorch does), an
    /// integer in range for an integer dtype, anything but NaN for bool
    /// (non-zero is true).
    ///
    /// ```
    /// use kael_core::DType;
    /// assert!(DType::I64.holds(3.0) && DType::F32.holds(2.5));
    /// assert!(!DType::I64.holds(2.5) && !DType::U8.holds(256.0) && !DType::I32.holds(f64::NAN));
    /// ```
    pub fn holds(self, value: f64) -> bool {
        let (lo, hi) = match self {
            DType::F32 | DType::F64 | DType::F16 | DType::BF16 => return true,
            DType::Bool => return !value.is_nan(),
            // 2^63 is the first f64 past i64::MAX
            DType::I64 => (-9_223_372_036_854_775_808.0, 9_223_372_036_854_775_807.0),
            DType::I32 => (f64::from(i32::MIN), f64::from(i32::MAX)),
            DType::I16 => (f64::from(i16::MIN), f64::from(i16::MAX)),
            DType::I8 => (f64::from(i8::MIN), f64::from(i8::MAX)),
            DType::U8 => (0.0, 255.0),
        };
        // (i64::MAX as f64 rounds up to 2^63, itself out of range: `<`)
        let below_top = if self == DType::I64 {
            value < hi
        } else {
            value <= hi
        };
        value == libm::trunc(value) && value >= lo && below_top
    }

    /// Whether `value` converts to this dtype as PyTorch's fills convert it
    /// (`full`, `fill_`, `masked_fill`: toward zero for an integer dtype)
    /// without overflow: finite and in range once truncated for an integer
    /// dtype, anything but NaN for bool, any value for a float dtype.
    ///
    /// ```
    /// use kael_core::DType;
    /// assert!(DType::I64.holds_cast(2.5) && DType::U8.holds_cast(255.9));
    /// assert!(!DType::I64.holds_cast(f64::NAN) && !DType::I64.holds_cast(1e30));
    /// ```
    pub fn holds_cast(self, value: f64) -> bool {
        match self {
            DType::F32 | DType::F64 | DType::F16 | DType::BF16 => true,
            DType::Bool => !value.is_nan(),
            _ => !value.is_nan() && self.holds(libm::trunc(value)),
        }
    }

    /// Lower-case name, as PyTorch prints it.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::I64 => "int64",
            DType::I32 => "int32",
            DType::I16 => "int16",
            DType::I8 => "int8",
            DType::U8 => "uint8",
            DType::Bool => "bool",
        }
    }

    /// Errors unless the dtype is floating point.
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] naming `op`.
    pub fn require_float(self, op: &'static str) -> Result<()> {
        if self.is_float() {
            Ok(())
        } else {
            Err(Error::UnsupportedDType {
                op,
                dtype: self,
                supported: "f32, f64, f16, bf16",
            })
        }
    }

    /// Errors for `bool` (arithmetic is not defined on it).
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] naming `op`.
    pub fn require_numeric(self, op: &'static str) -> Result<()> {
        if self == DType::Bool {
            Err(Error::UnsupportedDType {
                op,
                dtype: self,
                supported: "f32, f64, f16, bf16, i64, i32, u8",
            })
        } else {
            Ok(())
        }
    }
}

/// A Rust type that can be an element of a tensor.
///
/// Implemented for `f32`, `f64`, `half::f16`, `half::bf16`, `i64`, `i32`,
/// `u8` and `bool`.
///
/// ```
/// use kael_core::{DType, Element};
/// assert_eq!(<f32 as Element>::DTYPE, DType::F32);
/// assert_eq!(true.to_f64(), 1.0);
/// ```
pub trait Element:
    Copy + PartialEq + core::fmt::Debug + 'static + crate::shared::MaybeSendSync
{
    /// The dtype tag.
    const DTYPE: DType;
    /// The plain-old-data type that storage holds (`u8` for `bool`).
    type Repr: Scalar;
    /// Into the storage representation.
    fn to_repr(self) -> Self::Repr;
    /// From the storage representation.
    fn from_repr(r: Self::Repr) -> Self;
    /// As f64 (exact for every dtype except large i64).
    fn to_f64(self) -> f64 {
        self.to_repr().to_f64()
    }
}

/// A plain-old-data number that kernels compute with.
///
/// One per storage representation; kernels are written once over `Scalar`
/// and instantiated by [`dispatch!`](crate::dispatch).
pub trait Scalar:
    bytemuck::Pod + PartialOrd + PartialEq + core::fmt::Debug + Default + crate::shared::MaybeSendSync
{
    /// The dtype whose storage representation this is (`U8` for bool too).
    const DTYPE: DType;
    /// Zero.
    const ZERO: Self;
    /// One.
    const ONE: Self;
    /// Converts from f64 (saturating for integers, NaN to 0).
    fn from_f64(v: f64) -> Self;
    /// Converts to f64.
    fn to_f64(self) -> f64;
    /// Addition (wrapping for integers).
    fn add(self, o: Self) -> Self;
    /// Subtraction (wrapping for integers).
    fn sub(self, o: Self) -> Self;
    /// Multiplication (wrapping for integers).
    fn mul(self, o: Self) -> Self;
    /// Division; integer division by zero yields 0 (callers refuse int div).
    fn div(self, o: Self) -> Self;
    /// Negation (wrapping for integers).
    fn neg(self) -> Self;
    /// Absolute value.
    fn abs(self) -> Self;
    /// Whether this is a NaN.
    fn is_nan(self) -> bool {
        false
    }
    /// As i64: exact for integers (sign- or zero-extended), truncated and
    /// saturated for floats.
    fn as_i64(self) -> i64 {
        self.to_f64() as i64
    }
    /// From i64, wrapping (two's complement truncation) for integers, as
    /// C and PyTorch cast between integer types.
    fn from_i64_wrapping(v: i64) -> Self {
        Self::from_f64(v as f64)
    }
}

macro_rules! int_scalar {
    ($t:ty, $d:expr) => {
        impl Scalar for $t {
            const DTYPE: DType = $d;
            const ZERO: Self = 0;
            const ONE: Self = 1;
            #[inline]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn as_i64(self) -> i64 {
                self as i64
            }
            #[inline]
            fn from_i64_wrapping(v: i64) -> Self {
                v as $t
            }
            #[inline]
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline]
            fn sub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            #[inline]
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            #[inline]
            fn div(self, o: Self) -> Self {
                self.checked_div(o).unwrap_or(0)
            }
            #[inline]
            fn neg(self) -> Self {
                self.wrapping_neg()
            }
            #[allow(unused_comparisons)]
            #[inline]
            fn abs(self) -> Self {
                if self < 0 { self.wrapping_neg() } else { self }
            }
        }
    };
}
int_scalar!(i64, DType::I64);
int_scalar!(i32, DType::I32);
int_scalar!(i16, DType::I16);
int_scalar!(i8, DType::I8);
int_scalar!(u8, DType::U8);

macro_rules! float_scalar {
    ($t:ty, $d:expr) => {
        impl Scalar for $t {
            const DTYPE: DType = $d;
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            #[inline]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn add(self, o: Self) -> Self {
                self + o
            }
            #[inline]
            fn sub(self, o: Self) -> Self {
                self - o
            }
            #[inline]
            fn mul(self, o: Self) -> Self {
                self * o
            }
            #[inline]
            fn div(self, o: Self) -> Self {
                self / o
            }
            #[inline]
            fn neg(self) -> Self {
                -self
            }
            #[inline]
            fn abs(self) -> Self {
                if self < 0.0 { -self } else { self }
            }
            #[inline]
            fn is_nan(self) -> bool {
                self != self
            }
        }
    };
}
float_scalar!(f32, DType::F32);
float_scalar!(f64, DType::F64);

macro_rules! half_scalar {
    ($t:ty, $d:expr) => {
        impl Scalar for $t {
            const DTYPE: DType = $d;
            const ZERO: Self = <$t>::ZERO;
            const ONE: Self = <$t>::ONE;
            #[inline]
            fn from_f64(v: f64) -> Self {
                <$t>::from_f64(v)
            }
            #[inline]
            fn to_f64(self) -> f64 {
                <$t>::to_f64(self)
            }
            #[inline]
            fn add(self, o: Self) -> Self {
                <$t>::from_f32(self.to_f32() + o.to_f32())
            }
            #[inline]
            fn sub(self, o: Self) -> Self {
                <$t>::from_f32(self.to_f32() - o.to_f32())
            }
            #[inline]
            fn mul(self, o: Self) -> Self {
                <$t>::from_f32(self.to_f32() * o.to_f32())
            }
            #[inline]
            fn div(self, o: Self) -> Self {
                <$t>::from_f32(self.to_f32() / o.to_f32())
            }
            #[inline]
            fn neg(self) -> Self {
                -self
            }
            #[inline]
            fn abs(self) -> Self {
                <$t>::from_f32(libm::fabsf(self.to_f32()))
            }
            #[inline]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
        }
    };
}
half_scalar!(f16, DType::F16);
half_scalar!(bf16, DType::BF16);

/// Integer arithmetic for kernels (the storage types of `I64`, `I32`, `U8`
/// and `Bool`).
///
/// ```
/// use kael_core::dtype::Int;
/// assert_eq!(Int::floor_rem(-7i32, 3), 2); // the sign of the divisor, as PyTorch's remainder
/// assert_eq!(Int::trunc_rem(-7i32, 3), -1); // the sign of the dividend, as fmod
/// ```
pub trait Int:
    Scalar
    + core::ops::BitAnd<Output = Self>
    + core::ops::BitOr<Output = Self>
    + core::ops::BitXor<Output = Self>
{
    /// `self mod o` with the sign of `o` (0 when `o` is 0: callers refuse
    /// zero divisors first).
    fn floor_rem(self, o: Self) -> Self;
    /// `self mod o` with the sign of `self` (0 when `o` is 0).
    fn trunc_rem(self, o: Self) -> Self;
    /// `floor(self / o)`, wrapping (0 when `o` is 0: callers refuse).
    fn floor_div(self, o: Self) -> Self;
    /// `self ^ e` by squaring, wrapping; a negative `e` gives PyTorch's
    /// `1`, `±1` (for `-1`) or `0`.
    fn pow_int(self, e: Self) -> Self;
    /// `self << s`; 0 for a negative `s` or one past the width (PyTorch).
    fn shl_clamped(self, s: Self) -> Self;
    /// `self >> s` (arithmetic for signed types); a negative `s` or one
    /// past the width shifts by the width less one (PyTorch).
    fn shr_clamped(self, s: Self) -> Self;
}

macro_rules! int_rem {
    ($($t:ty),*) => {$(
        impl Int for $t {
            #[allow(unused_comparisons)]
            fn floor_rem(self, o: Self) -> Self {
                let r = self.checked_rem(o).unwrap_or(0);
                if r != 0 && ((r < 0) != (o < 0)) { r.wrapping_add(o) } else { r }
            }
            fn trunc_rem(self, o: Self) -> Self {
                self.checked_rem(o).unwrap_or(0)
            }
            #[allow(unused_comparisons)]
            fn floor_div(self, o: Self) -> Self {
                if o == 0 {
                    return 0;
                }
                let q = self.wrapping_div(o);
                let r = self.wrapping_rem(o);
                if r != 0 && ((r < 0) != (o < 0)) { q.wrapping_sub(1) } else { q }
            }
            #[allow(unused_comparisons)]
            fn pow_int(self, e: Self) -> Self {
                if e < 0 {
                    return if self == 1 {
                        1
                    } else if self as i64 == -1 {
                        if (e as i64) % 2 != 0 { self } else { 1 }
                    } else {
                        0
                    };
                }
                let (mut r, mut x, mut e): (Self, Self, Self) = (1, self, e);
                while e != 0 {
                    if e & 1 == 1 {
                        r = r.wrapping_mul(x);
                    }
                    e /= 2;
                    x = x.wrapping_mul(x);
                }
                r
            }
            fn shl_clamped(self, s: Self) -> Self {
                let s = s as i64;
                if s < 0 || s >= i64::from(Self::BITS) { 0 } else { self.wrapping_shl(s as u32) }
            }
            fn shr_clamped(self, s: Self) -> Self {
                let s = s as i64;
                let s = if s < 0 || s >= i64::from(Self::BITS) { Self::BITS - 1 } else { s as u32 };
                self.wrapping_shr(s)
            }
        }
    )*};
}
int_rem!(i64, i32, i16, i8, u8);

/// Floating-point math for kernels. `f16`/`bf16` compute in `f32`.
pub trait Float: Scalar {
    /// Applies an f32 function (for half types) or the native-width one.
    fn map_f(self, f32f: fn(f32) -> f32, f64f: fn(f64) -> f64) -> Self;
    /// Applies a binary function.
    fn map2_f(self, o: Self, f32f: fn(f32, f32) -> f32, f64f: fn(f64, f64) -> f64) -> Self;
}

impl Float for f32 {
    #[inline]
    fn map_f(self, f: fn(f32) -> f32, _: fn(f64) -> f64) -> Self {
        f(self)
    }
    #[inline]
    fn map2_f(self, o: Self, f: fn(f32, f32) -> f32, _: fn(f64, f64) -> f64) -> Self {
        f(self, o)
    }
}
impl Float for f64 {
    #[inline]
    fn map_f(self, _: fn(f32) -> f32, f: fn(f64) -> f64) -> Self {
        f(self)
    }
    #[inline]
    fn map2_f(self, o: Self, _: fn(f32, f32) -> f32, f: fn(f64, f64) -> f64) -> Self {
        f(self, o)
    }
}
impl Float for f16 {
    #[inline]
    fn map_f(self, f: fn(f32) -> f32, _: fn(f64) -> f64) -> Self {
        f16::from_f32(f(self.to_f32()))
    }
    #[inline]
    fn map2_f(self, o: Self, f: fn(f32, f32) -> f32, _: fn(f64, f64) -> f64) -> Self {
        f16::from_f32(f(self.to_f32(), o.to_f32()))
    }
}
impl Float for bf16 {
    #[inline]
    fn map_f(self, f: fn(f32) -> f32, _: fn(f64) -> f64) -> Self {
        bf16::from_f32(f(self.to_f32()))
    }
    #[inline]
    fn map2_f(self, o: Self, f: fn(f32, f32) -> f32, _: fn(f64, f64) -> f64) -> Self {
        bf16::from_f32(f(self.to_f32(), o.to_f32()))
    }
}

macro_rules! element_self {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            type Repr = $t;
            fn to_repr(self) -> $t {
                self
            }
            fn from_repr(r: $t) -> Self {
                r
            }
        }
    };
}
element_self!(f32, DType::F32);
element_self!(f64, DType::F64);
element_self!(f16, DType::F16);
element_self!(bf16, DType::BF16);
element_self!(i64, DType::I64);
element_self!(i32, DType::I32);
element_self!(i16, DType::I16);
element_self!(i8, DType::I8);
element_self!(u8, DType::U8);

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    type Repr = u8;
    fn to_repr(self) -> u8 {
        self as u8
    }
    fn from_repr(r: u8) -> Self {
        r != 0
    }
}

/// Runs `$body` with `$T` bound to the storage representation of `$dtype`.
///
/// ```ignore
/// dispatch!(dtype, T => kernel::<T>(..))
/// ```
#[macro_export]
#[doc(hidden)]
macro_rules! dispatch {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::DType::F16 => {
                type $T = $crate::half::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $T = $crate::half::bf16;
                $body
            }
            $crate::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::DType::I16 => {
                type $T = i16;
                $body
            }
            $crate::DType::I8 => {
                type $T = i8;
                $body
            }
            $crate::DType::U8 | $crate::DType::Bool => {
                type $T = u8;
                $body
            }
        }
    };
}

/// Like [`dispatch!`] but only for float dtypes; `$else` for the others.
#[macro_export]
#[doc(hidden)]
macro_rules! dispatch_float {
    ($dtype:expr, $T:ident => $body:expr, _ => $else:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::DType::F16 => {
                type $T = $crate::half::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $T = $crate::half::bf16;
                $body
            }
            _ => $else,
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_pytorch() {
        let sizes: [usize; 10] = DType::ALL.map(|d| d.size_in_bytes());
        assert_eq!(sizes, [4, 8, 2, 2, 8, 4, 2, 1, 1, 1]);
    }

    #[test]
    fn integer_conversion_saturates() {
        assert_eq!(<u8 as Scalar>::from_f64(300.0), 255);
        assert_eq!(<u8 as Scalar>::from_f64(-3.0), 0);
        assert_eq!(<i32 as Scalar>::from_f64(-2.7), -2);
        assert_eq!(<i64 as Scalar>::from_f64(f64::NAN), 0);
    }

    #[test]
    fn bool_round_trips_through_u8() {
        assert_eq!(true.to_repr(), 1u8);
        assert!(!bool::from_repr(0));
        assert!(bool::from_repr(7));
    }
}
