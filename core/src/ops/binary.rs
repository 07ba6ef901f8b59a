//! The binary op table (NOTE [Op table]).
//!
//! A row:
//!
//! ```text
//! /// Doc of the variant and the `Tensor` method.
//! Variant => BIT {
//!     float: (|a, b| rust, "cuda statements") | refused,  // T: Float
//!     int: (|a, b| rust, "cuda statements") | refused,    // T: Int (i64, i32, u8)
//!     grad: [a b y] |g, a, b, y| Ok((ga, gb)),  // saved operands/output; at the broadcast shape
//!     backward: "NameBackward",
//!     method: fn name check |a, b| expr;,       // the check is optional
//!     example: "doc-test lines (dev = Device::cpu())",
//!     check: (Domain of a, Domain of b, smooth: true|false),
//! }
//! ```
//!
//! CUDA statements run inside `binary_f<T>` (prelude.cu) with `as`/`bs` the
//! stored values and `a`/`b` their compute values of type `C` (`U`: its
//! unsigned twin for wrapping integer arithmetic).

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

use super::scalar::{SQRT_2_OVER_PI, gelu_tanh_backward32, gelu_tanh_backward64};

binary_table! {
    /// Elementwise `self + other`.
    Add => ADD {
        float: (|a, b| a.add(b), "return T::st(a + b);"),
        int: (|a, b| a.add(b), "return T::st((C)((U)a + (U)b));"),
        grad: [] |g, a, b, y| Ok((g.clone(), g.clone())),
        backward: "AddBackward",
        method: fn add,
        example: "let a = Tensor::from_slice(&[1.0f32, 2.0], &[2, 1], &dev)?;
let b = Tensor::from_slice(&[10.0f32, 20.0, 30.0], &[3], &dev)?;
assert_eq!(a.add(&b)?.to_vec::<f32>()?, vec![11.0, 21.0, 31.0, 12.0, 22.0, 32.0]);",
        check: (Normal, Normal, smooth: true),
    }
    /// Elementwise `self - other`.
    Sub => SUB {
        float: (|a, b| a.sub(b), "return T::st(a - b);"),
        int: (|a, b| a.sub(b), "return T::st((C)((U)a - (U)b));"),
        grad: [] |g, a, b, y| Ok((g.clone(), g.neg()?)),
        backward: "SubBackward",
        method: fn sub,
        example: "let a = Tensor::from_slice(&[5i32, 7], &[2], &dev)?;
assert_eq!(a.sub(&a)?.to_vec::<i32>()?, vec![0, 0]);",
        check: (Normal, Normal, smooth: true),
    }
    /// Elementwise `self * other`.
    Mul => MUL {
        float: (|a, b| a.mul(b), "return T::st(a * b);"),
        int: (|a, b| a.mul(b), "return T::st((C)((U)a * (U)b));"),
        grad: [a b] |g, a, b, y| Ok((g.mul(&b()?)?, g.mul(&a()?)?)),
        backward: "MulBackward",
        method: fn mul,
        example: "let a = Tensor::from_slice(&[2.0f32, 3.0], &[2], &dev)?;
assert_eq!(a.mul(&a)?.to_vec::<f32>()?, vec![4.0, 9.0]);",
        check: (Normal, Normal, smooth: true),
    }
    /// Elementwise `self / other` (float dtypes; convert integers with
    /// `to_dtype` first).
    Div => DIV {
        float: (|a, b| a.div(b), "return T::st(a / b);"),
        int: refused,
        grad: [a b] |g, a, b, y| {
            let b = b()?;
            let ga = g.div(&b)?;
            Ok((ga.clone(), ga.mul(&a()?)?.div(&b)?.neg()?))
        },
        backward: "DivBackward",
        method: fn div,
        example: "let a = Tensor::from_slice(&[1.0f32, 3.0], &[2], &dev)?;
assert_eq!(a.div(&a.affine(0.0, 2.0)?)?.to_vec::<f32>()?, vec![0.5, 1.5]);",
        check: (Normal, NonZero, smooth: true),
    }
    /// Elementwise maximum (NaN propagates; ties split the gradient evenly,
    /// as in PyTorch).
    Maximum => MAXIMUM {
        float: (|a, b| if a.is_nan() || a > b { a } else { b }, "return (a != a || a > b) ? as : bs;"),
        int: (|a, b| if a > b { a } else { b }, "return a > b ? as : bs;"),
        grad: [a b] |g, a, b, y| extremum_backward(g, &a()?, &b()?, true),
        backward: "MaximumBackward",
        method: fn maximum,
        example: "let a = Tensor::from_slice(&[1.0f32, 5.0], &[2], &dev)?;
let b = Tensor::from_slice(&[3.0f32], &[1], &dev)?;
assert_eq!(a.maximum(&b)?.to_vec::<f32>()?, vec![3.0, 5.0]);",
        check: (Ties, Ties, smooth: false),
    }
    /// Elementwise minimum (NaN propagates; ties split the gradient evenly).
    Minimum => MINIMUM {
        float: (|a, b| if a.is_nan() || a < b { a } else { b }, "return (a != a || a < b) ? as : bs;"),
        int: (|a, b| if a < b { a } else { b }, "return a < b ? as : bs;"),
        grad: [a b] |g, a, b, y| extremum_backward(g, &a()?, &b()?, false),
        backward: "MinimumBackward",
        method: fn minimum,
        example: "let a = Tensor::from_slice(&[1.0f32, 5.0], &[2], &dev)?;
let b = Tensor::from_slice(&[3.0f32], &[1], &dev)?;
assert_eq!(a.minimum(&b)?.to_vec::<f32>()?, vec![1.0, 3.0]);",
        check: (Ties, Ties, smooth: false),
    }
    /// Elementwise `self ^ other` (integers by squaring, wrapping; a
    /// negative integer exponent gives PyTorch's 0, 1 or ±1).
    Pow => POW {
        float: (
            |a, b| T::from_f64(libm::pow(a.to_f64(), b.to_f64())),
            "return T::from_f64(pow(T::f64(a), T::f64(b)));"
        ),
        int: (
            |a, b| a.pow_int(b),
            "C r = (C)1; C e = b; C x = a; if (e < (C)0) { if (x == (C)1) return T::st((C)1); if (x == (C)-1) return T::st((e % (C)2) ? x : (C)1); return T::st((C)0); } while (e) { if (e & (C)1) r = (C)((U)r * (U)x); e /= (C)2; x = (C)((U)x * (U)x); } return T::st(r);"
        ),
        grad: [a b y] |g, a, b, y| {
            // d a^b / da = b a^(b-1), 0 where b = 0 (not 0 * inf at a = 0);
            // d/db = a^b ln a, 0 where a = 0 and b >= 0 (PyTorch's
            // `pow_backward_self` / `pow_backward_exponent`)
            let (a, b) = (a()?, b()?);
            let zero = g.scalar_like(0.0)?;
            let ga = g.mul(&b.mul(&a.pow(&b.add_scalar(-1.0)?)?)?)?;
            let ga = b.eq(&zero)?.where_cond(&zero, &ga)?;
            let gb = g.mul(&y()?.mul(&a.log()?)?)?;
            let a0 = a.eq(&zero)?.logical_and(&b.ge(&zero)?)?;
            let gb = a0.where_cond(&zero, &gb)?;
            Ok((ga, gb))
        },
        backward: "PowBackward",
        method: fn pow,
        example: "let a = Tensor::from_slice(&[2.0f32, 3.0], &[2], &dev)?;
assert_eq!(a.pow(&a)?.to_vec::<f32>()?, vec![4.0, 27.0]);",
        check: (Positive, Normal, smooth: true),
    }
    /// Elementwise `atan2(self, other)`: the angle of the point
    /// `(other, self)`, in `[-pi, pi]` (float dtypes).
    Atan2 => ATAN2 {
        float: (|a, b| a.map2_f(b, libm::atan2f, libm::atan2), "return T::st(m_atan2(a, b));"),
        int: refused,
        grad: [a b] |g, a, b, y| {
            // d/da = b / (a^2 + b^2), d/db = -a / (a^2 + b^2)
            let (a, b) = (a()?, b()?);
            let r2 = a.sqr()?.add(&b.sqr()?)?;
            let k = g.div(&r2)?;
            Ok((k.mul(&b)?, k.mul(&a)?.neg()?))
        },
        backward: "Atan2Backward",
        method: fn atan2,
        example: "let y = Tensor::from_slice(&[1.0f32, -1.0], &[2], &dev)?;
let x = Tensor::from_slice(&[0.0f32], &[1], &dev)?;
assert_eq!(y.atan2(&x)?.to_vec::<f32>()?, vec![std::f32::consts::FRAC_PI_2, -std::f32::consts::FRAC_PI_2]);",
        check: (Normal, NonZero, smooth: true),
    }
    /// Elementwise remainder with the sign of the divisor (Python's `%`,
    /// PyTorch's `remainder`). Integer division by zero is an `Err`; float
    /// division by zero gives NaN.
    Remainder => REMAINDER {
        float: (
            |a, b| {
                let m = a.map2_f(b, libm::fmodf, libm::fmod);
                if m != T::ZERO && ((b < T::ZERO) != (m < T::ZERO)) { m.add(b) } else { m }
            },
            "C m = m_fmod(a, b); if (m != (C)0 && ((b < (C)0) != (m < (C)0))) m += b; return T::st(m);"
        ),
        int: (
            |a, b| a.floor_rem(b),
            "if (b == (C)0 || ((C)-1 < (C)0 && b == (C)-1)) return T::st((C)0); C m = a % b; if (m != (C)0 && ((b < (C)0) != (m < (C)0))) m += b; return T::st(m);"
        ),
        grad: [a b] |g, a, b, y| {
            // d/da = 1, d/db = -floor(a / b)
            Ok((g.clone(), g.mul(&a()?.div(&b()?)?.floor()?)?.neg()?))
        },
        backward: "RemainderBackward",
        method: fn remainder check |a, b| int_divisor_nonzero("remainder", a, b);,
        example: "let a = Tensor::from_slice(&[-7i64, 7], &[2], &dev)?;
let b = Tensor::from_slice(&[3i64], &[1], &dev)?;
assert_eq!(a.remainder(&b)?.to_vec::<i64>()?, vec![2, 1]);",
        check: (Normal, NonZero, smooth: false),
    }
    /// Elementwise remainder with the sign of the dividend (C's `fmod`,
    /// PyTorch's `fmod`). Integer division by zero is an `Err`; float
    /// division by zero gives NaN.
    Fmod => FMOD {
        float: (|a, b| a.map2_f(b, libm::fmodf, libm::fmod), "return T::st(m_fmod(a, b));"),
        int: (
            |a, b| a.trunc_rem(b),
            "if (b == (C)0 || ((C)-1 < (C)0 && b == (C)-1)) return T::st((C)0); return T::st(a % b);"
        ),
        grad: [a b] |g, a, b, y| {
            // d/da = 1, d/db = -trunc(a / b)
            Ok((g.clone(), g.mul(&a()?.div(&b()?)?.trunc()?)?.neg()?))
        },
        backward: "FmodBackward",
        method: fn fmod check |a, b| int_divisor_nonzero("fmod", a, b);,
        example: "let a = Tensor::from_slice(&[-7i64, 7], &[2], &dev)?;
let b = Tensor::from_slice(&[3i64], &[1], &dev)?;
assert_eq!(a.fmod(&b)?.to_vec::<i64>()?, vec![-1, 1]);",
        check: (Normal, NonZero, smooth: false),
    }
    /// `self · gelu_tanh'(x)`: the gradient of [`Tensor::gelu_tanh`] at `x`
    /// for the incoming gradient `self` (PyTorch's `gelu_backward` with
    /// `approximate='tanh'`), one pass instead of the dozen of its
    /// composition; `gelu_tanh`'s backward records it, and its own
    /// gradient (for higher orders) is composed from tensor ops.
    GeluTanhBackward => GELU_TANH_BACKWARD {
        float: (
            |a, b| a.map2_f(b, gelu_tanh_backward32, gelu_tanh_backward64),
            "C c = (C)0.79788456080286535588; C t = m_tanh(c * (b + (C)0.044715 * b * b * b)); C right = (C)0.5 * b * ((C)1 - t * t) * c * ((C)1 + (C)3 * (C)0.044715 * b * b); return T::st(a * ((C)0.5 * ((C)1 + t) + right));"
        ),
        int: refused,
        grad: [a b] |g, a, b, y| {
            // d/da = gelu'(x); d/dx = a · gelu''(x), with t = tanh u,
            // u' = c(1 + 3a x²), u'' = 6 a c x:
            // gelu'' = (1 - t²)(u' + x/2 (u'' - 2 t u'²)).
            let (a, x) = (a()?, b()?);
            let ga = g.gelu_tanh_backward(&x)?;
            let x2 = x.sqr()?;
            let t = x
                .mul(&x2.mul_scalar(0.044715)?.affine(1.0, 1.0)?)?
                .mul_scalar(SQRT_2_OVER_PI)?
                .tanh()?;
            let du = x2.affine(3.0 * 0.044715 * SQRT_2_OVER_PI, SQRT_2_OVER_PI)?;
            let ddu = x.mul_scalar(6.0 * 0.044715 * SQRT_2_OVER_PI)?;
            let inner = ddu.sub(&t.mul(&du.sqr()?)?.mul_scalar(2.0)?)?;
            let second = t
                .sqr()?
                .affine(-1.0, 1.0)?
                .mul(&du.add(&x.mul(&inner)?.mul_scalar(0.5)?)?)?;
            Ok((ga, g.mul(&a)?.mul(&second)?))
        },
        backward: "GeluTanhBackwardBackward",
        method: fn gelu_tanh_backward,
        example: "let g = Tensor::from_slice(&[1.0f32, 2.0], &[2], &dev)?;
let x = Tensor::from_slice(&[0.0f32, 0.0], &[2], &dev)?;
assert_eq!(g.gelu_tanh_backward(&x)?.to_vec::<f32>()?, vec![0.5, 1.0]);",
        check: (Normal, Normal, smooth: true),
    }
    /// Elementwise bitwise and (integer dtypes).
    BitwiseAnd => BITWISE_AND {
        float: refused,
        int: (|a, b| a & b, "return T::st(a & b);"),
        grad: [] |g, a, b, y| Err(no_gradient("bitwise_and")),
        backward: "BitwiseAndBackward",
        method: fn bitwise_and,
        example: "let a = Tensor::from_slice(&[12i32, -1], &[2], &dev)?;
let b = Tensor::from_slice(&[10i32], &[1], &dev)?;
assert_eq!(a.bitwise_and(&b)?.to_vec::<i32>()?, vec![8, 10]);",
        check: (Normal, Normal, smooth: false),
    }
    /// Elementwise bitwise or (integer dtypes).
    BitwiseOr => BITWISE_OR {
        float: refused,
        int: (|a, b| a | b, "return T::st(a | b);"),
        grad: [] |g, a, b, y| Err(no_gradient("bitwise_or")),
        backward: "BitwiseOrBackward",
        method: fn bitwise_or,
        example: "let a = Tensor::from_slice(&[12i32, -1], &[2], &dev)?;
let b = Tensor::from_slice(&[10i32], &[1], &dev)?;
assert_eq!(a.bitwise_or(&b)?.to_vec::<i32>()?, vec![14, -1]);",
        check: (Normal, Normal, smooth: false),
    }
    /// Elementwise bitwise exclusive or (integer dtypes; logical on bool).
    BitwiseXor => BITWISE_XOR {
        float: refused,
        int: (|a, b| a ^ b, "return T::st(a ^ b);"),
        grad: [] |g, a, b, y| Err(no_gradient("bitwise_xor")),
        backward: "BitwiseXorBackward",
        method: fn bitwise_xor,
        example: "let a = Tensor::from_slice(&[12i32, -1], &[2], &dev)?;
let b = Tensor::from_slice(&[10i32], &[1], &dev)?;
assert_eq!(a.bitwise_xor(&b)?.to_vec::<i32>()?, vec![6, -11]);",
        check: (Normal, Normal, smooth: false),
    }
    /// Elementwise `self << other` (integer dtypes, PyTorch's
    /// `bitwise_left_shift`; a shift below 0 or past the width gives 0).
    BitwiseLeftShift => BITWISE_LEFT_SHIFT {
        float: refused,
        int: (
            |a, b| a.shl_clamped(b),
            "long long s = (long long)b; if (s < 0 || s >= (long long)(8 * sizeof(C))) return T::st((C)0); return T::st((C)((U)a << s));"
        ),
        grad: [] |g, a, b, y| Err(no_gradient("bitwise_left_shift")),
        backward: "BitwiseLeftShiftBackward",
        method: fn bitwise_left_shift,
        example: "let a = Tensor::from_slice(&[3i64, -1], &[2], &dev)?;
let b = Tensor::from_slice(&[2i64], &[1], &dev)?;
assert_eq!(a.bitwise_left_shift(&b)?.to_vec::<i64>()?, vec![12, -4]);",
        check: (Normal, Normal, smooth: false),
    }
    /// Elementwise `self >> other` (integer dtypes, arithmetic for signed
    /// ones, PyTorch's `bitwise_right_shift`; a shift below 0 or past the
    /// width shifts by the width less one).
    BitwiseRightShift => BITWISE_RIGHT_SHIFT {
        float: refused,
        int: (
            |a, b| a.shr_clamped(b),
            "long long s = (long long)b; if (s < 0 || s >= (long long)(8 * sizeof(C))) s = 8 * sizeof(C) - 1; return T::st((C)(a >> s));"
        ),
        grad: [] |g, a, b, y| Err(no_gradient("bitwise_right_shift")),
        backward: "BitwiseRightShiftBackward",
        method: fn bitwise_right_shift,
        example: "let a = Tensor::from_slice(&[12i64, -8], &[2], &dev)?;
let b = Tensor::from_slice(&[2i64], &[1], &dev)?;
assert_eq!(a.bitwise_right_shift(&b)?.to_vec::<i64>()?, vec![3, -2]);",
        check: (Normal, Normal, smooth: false),
    }
    /// Elementwise `floor(self / other)` (Python's `//`, PyTorch's
    /// `floor_divide`). Integer division by zero is an `Err`; float
    /// division by zero gives inf or NaN. No gradient flows through it
    /// (it is zero almost everywhere, as in PyTorch).
    FloorDivide => FLOOR_DIVIDE {
        float: (
            |a, b| a.map2_f(b, floor_div32, floor_div64),
            "if (b == (C)0) return T::st(a / b); C m = m_fmod(a, b); C d = (a - m) / b; if (m != (C)0 && ((b < (C)0) != (m < (C)0))) d -= (C)1; C f; if (d != (C)0) { f = floor(d); if (d - f > (C)0.5) f += (C)1; } else { f = copysign((C)0, a / b); } return T::st(f);"
        ),
        int: (
            |a, b| a.floor_div(b),
            "if (b == (C)0) return T::st((C)0); C q = a / b; C r = a % b; if (r != (C)0 && ((r < (C)0) != (b < (C)0))) q -= (C)1; return T::st(q);"
        ),
        grad: [] |g, a, b, y| Ok((g.zeros_like()?, g.zeros_like()?)),
        backward: "FloorDivideBackward",
        method: fn floor_divide check |a, b| int_divisor_nonzero("floor_divide", a, b);,
        example: "let a = Tensor::from_slice(&[-7i64, 7], &[2], &dev)?;
let b = Tensor::from_slice(&[2i64], &[1], &dev)?;
assert_eq!(a.floor_divide(&b)?.to_vec::<i64>()?, vec![-4, 3]);",
        check: (Normal, NonZero, smooth: false),
    }
}

/// PyTorch's `div_floor_floating`: `floor(a / b)` from `fmod`, so that
/// `a - b * floor_divide(a, b)` is `remainder(a, b)` exactly.
macro_rules! floor_div_float {
    ($name:ident, $t:ty, $fmod:path, $floor:path, $copysign:path) => {
        fn $name(a: $t, b: $t) -> $t {
            if b == 0.0 {
                return a / b;
            }
            let m = $fmod(a, b);
            let mut d = (a - m) / b;
            if m != 0.0 && ((b < 0.0) != (m < 0.0)) {
                d -= 1.0;
            }
            if d != 0.0 {
                let f = $floor(d);
                if d - f > 0.5 { f + 1.0 } else { f }
            } else {
                $copysign(0.0, a / b)
            }
        }
    };
}
floor_div_float!(floor_div32, f32, libm::fmodf, libm::floorf, libm::copysignf);
floor_div_float!(floor_div64, f64, libm::fmod, libm::floor, libm::copysign);

/// Maximum's (`max`) or minimum's gradients: the winner takes `g`, ties
/// split it evenly.
fn extremum_backward(g: &Tensor, a: &Tensor, b: &Tensor, max: bool) -> Result<(Tensor, Tensor)> {
    let wins = if max { a.gt(b)? } else { a.lt(b)? };
    let ties = a.eq(b)?.to_dtype(g.dtype())?.mul_scalar(0.5)?;
    let wa = wins.to_dtype(g.dtype())?.add(&ties)?;
    let ga = g.mul(&wa)?;
    Ok((ga.clone(), g.sub(&ga)?))
}

/// The error of a backward through an op on integers (which never records:
/// integer tensors cannot require grad, so this is not reached).
fn no_gradient(op: &'static str) -> Error {
    Error::Autograd {
        op,
        reason: "integer ops have no gradient; only float tensors can require grad",
    }
}

/// Refuses a zero divisor of an integer division-like op (PyTorch raises
/// `ZeroDivisionError`); float divisors may be zero.
fn int_divisor_nonzero(op: &'static str, dividend: &Tensor, divisor: &Tensor) -> Result<()> {
    let computes_in = if crate::promote::ENABLED {
        crate::promote::of_two(
            dividend.dtype(),
            dividend.rank(),
            divisor.dtype(),
            divisor.rank(),
        )
    } else {
        divisor.dtype()
    };
    if !computes_in.is_int() || divisor.numel() == 0 {
        return Ok(());
    }
    let zeros = crate::autograd::no_grad(|| {
        divisor
            .eq(&divisor.scalar_like(0.0)?)?
            .to_dtype(DType::I64)?
            .sum_all()?
            .item::<i64>()
    })?;
    if zeros > 0 {
        return Err(Error::InvalidArgument {
            op,
            reason: "integer division by zero: the divisor has a zero element; use a float dtype (which gives inf/NaN) or remove the zeros",
        });
    }
    Ok(())
}
