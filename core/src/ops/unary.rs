//! The unary op table (NOTE [Op table]).
//!
//! A row:
//!
//! ```text
//! /// Doc of the variant and the `Tensor` method.
//! Variant(param: type, ...) => BIT {        // params optional; BIT: its kernel-selection bit
//!     float: (|x| rust, "cuda statements"), // T: Float; CUDA: x is the compute value (C)
//!     int: (|x| rust, "cuda") | refused,    // T: Scalar over i64/i32/u8
//!     cuda_args: (p0, p1, flags),           // optional: params as the CUDA kernel takes them
//!     grad: [x y] |g, x, y| expr,           // which of input/output to save; x()/y() fetch them
//!     backward: "NameBackward",
//!     inplace: name_(example args),       // the in-place method, and args for its doc example
//!     method: pub fn name(args) check expr; => UnaryOp::Variant(..),
//!     example: "doc-test line(s) with x = [-1.0, 0.5, 2.0]",
//!     check: [("args", Domain, ints?, smooth?, |x| call), ...],
//! }
//! ```
//!
//! CUDA statements run inside `unary_f<T>` (prelude.cu) with `xs` the
//! stored value, `x` its compute value of type `C`, `p0`/`p1`/`flags` the
//! `cuda_args`; they `return` a stored value (`T::st(c)` or `T::from_f64(d)`).

use crate::error::Result;
use crate::tensor::Tensor;

use super::scalar::*;

unary_table! {
    /// `-x`.
    Neg => NEG {
        float: (|x| x.neg(), "return T::st(-x);"),
        int: (|x| x.neg(), "return T::st((C)((U)0 - (U)x));"),
        grad: [] |g, x, y| g.neg(),
        backward: "NegBackward",
        inplace: neg_(),
        method: pub fn neg() => UnaryOp::Neg,
        example: "assert_eq!(x.neg()?.to_vec::<f32>()?, vec![1.0, -0.5, -2.0]);",
        check: [("", Normal, true, true, Tensor::neg)],
    }
    /// `|x|`.
    Abs => ABS {
        float: (|x| x.abs(), "return T::st(x < (C)0 ? -x : x);"),
        int: (|x| x.abs(), "return x < (C)0 ? T::st((C)((U)0 - (U)x)) : xs;"),
        grad: [x] |g, x, y| g.mul(&x()?.sign()?),
        backward: "AbsBackward",
        inplace: abs_(),
        method: pub fn abs() => UnaryOp::Abs,
        example: "assert_eq!(x.abs()?.to_vec::<f32>()?, vec![1.0, 0.5, 2.0]);",
        check: [("", Normal, true, false, Tensor::abs)],
    }
    /// `e^x`.
    Exp => EXP {
        float: (|x| x.map_f(libm::expf, libm::exp), "return T::st(m_exp(x));"),
        int: refused,
        grad: [y] |g, x, y| g.mul(&y()?),
        backward: "ExpBackward",
        inplace: exp_(),
        method: pub fn exp() => UnaryOp::Exp,
        example: "assert!((x.exp()?.to_vec::<f32>()?[2] - 7.389056).abs() < 1e-5);",
        check: [("", Normal, false, true, Tensor::exp)],
    }
    /// Natural logarithm (NaN for negative inputs, as in PyTorch).
    Log => LOG {
        float: (|x| x.map_f(libm::logf, libm::log), "return T::st(m_log(x));"),
        int: refused,
        grad: [x] |g, x, y| g.div(&x()?),
        backward: "LogBackward",
        inplace: log_(),
        method: pub fn log() => UnaryOp::Log,
        example: "assert!(x.log()?.to_vec::<f32>()?[0].is_nan());",
        check: [("", Positive, false, true, Tensor::log)],
    }
    /// Square root.
    Sqrt => SQRT {
        float: (|x| x.map_f(libm::sqrtf, libm::sqrt), "return T::st(m_sqrt(x));"),
        int: refused,
        grad: [y] |g, x, y| g.div(&y()?.mul_scalar(2.0)?),
        backward: "SqrtBackward",
        inplace: sqrt_(),
        method: pub fn sqrt() => UnaryOp::Sqrt,
        example: "assert!((x.sqrt()?.to_vec::<f32>()?[2] - 1.4142135).abs() < 1e-6);",
        check: [("", Positive, false, true, Tensor::sqrt)],
    }
    /// `x * x`.
    Sqr => SQR {
        float: (|x| x.mul(x), "return T::st(x * x);"),
        int: (|x| x.mul(x), "return T::st((C)((U)x * (U)x));"),
        grad: [x] |g, x, y| g.mul(&x()?.mul_scalar(2.0)?),
        backward: "SqrBackward",
        inplace: sqr_(),
        method: pub fn sqr() => UnaryOp::Sqr,
        example: "assert_eq!(x.sqr()?.to_vec::<f32>()?, vec![1.0, 0.25, 4.0]);",
        check: [("", Normal, true, true, Tensor::sqr)],
    }
    /// `1 / x`.
    Recip => RECIP {
        float: (|x| T::ONE.div(x), "return T::st((C)1 / x);"),
        int: refused,
        grad: [y] |g, x, y| g.mul(&y()?.sqr()?)?.neg(),
        backward: "ReciprocalBackward",
        inplace: recip_(),
        method: pub fn recip() => UnaryOp::Recip,
        example: "assert_eq!(x.recip()?.to_vec::<f32>()?, vec![-1.0, 2.0, 0.5]);",
        check: [("", NonZero, false, true, Tensor::recip)],
    }
    /// Hyperbolic tangent.
    Tanh => TANH {
        float: (|x| x.map_f(libm::tanhf, libm::tanh), "return T::st(m_tanh(x));"),
        int: refused,
        grad: [y] |g, x, y| g.mul(&y()?.sqr()?.affine(-1.0, 1.0)?),
        backward: "TanhBackward",
        inplace: tanh_(),
        method: pub fn tanh() => UnaryOp::Tanh,
        example: "assert!((x.tanh()?.to_vec::<f32>()?[1] - 0.46211717).abs() < 1e-6);",
        check: [("", Normal, false, true, Tensor::tanh)],
    }
    /// Logistic sigmoid `1 / (1 + e^-x)`.
    Sigmoid => SIGMOID {
        float: (|x| x.map_f(sigmoid32, sigmoid64), "return T::st(sigmoid(x));"),
        int: refused,
        grad: [y] |g, x, y| {
            let y = y()?;
            g.mul(&y.mul(&y.affine(-1.0, 1.0)?)?)
        },
        backward: "SigmoidBackward",
        inplace: sigmoid_(),
        method: pub fn sigmoid() => UnaryOp::Sigmoid,
        example: "assert!((x.sigmoid()?.to_vec::<f32>()?[0] - 0.26894143).abs() < 1e-6);",
        check: [("", Normal, false, true, Tensor::sigmoid)],
    }
    /// `max(x, 0)` (NaN propagates).
    Relu => RELU {
        float: (
            |x| if x > T::ZERO || x.is_nan() { x } else { T::ZERO },
            "return (x > (C)0 || x != x) ? xs : T::st((C)0);"
        ),
        int: (|x| if x > T::ZERO { x } else { T::ZERO }, "return x > (C)0 ? xs : T::st((C)0);"),
        grad: [x] |g, x, y| g.mul(&x()?.step()?),
        backward: "ReluBackward",
        inplace: relu_(),
        method: pub fn relu() => UnaryOp::Relu,
        example: "assert_eq!(x.relu()?.to_vec::<f32>()?, vec![0.0, 0.5, 2.0]);",
        check: [("", Normal, true, false, Tensor::relu)],
    }
    /// GELU, exact erf form `x/2 (1 + erf(x/sqrt 2))` (PyTorch's default
    /// `approximate='none'`).
    Gelu => GELU {
        float: (
            |x| x.map_f(gelu32, gelu64),
            "return T::st((C)0.5 * x * ((C)1 + m_erf(x * (C)0.70710678118654752440)));"
        ),
        int: refused,
        grad: [x] |g, x, y| {
            // d/dx x·Φ(x) = Φ(x) + x·φ(x)
            let x = x()?;
            let cdf = x
                .mul_scalar(core::f64::consts::FRAC_1_SQRT_2)?
                .erf()?
                .affine(0.5, 0.5)?;
            let pdf = x
                .sqr()?
                .mul_scalar(-0.5)?
                .exp()?
                .mul_scalar(FRAC_1_SQRT_2PI)?;
            g.mul(&cdf.add(&x.mul(&pdf)?)?)
        },
        backward: "GeluBackward",
        inplace: gelu_(),
        method: pub fn gelu() => UnaryOp::Gelu,
        example: "assert!((x.gelu()?.to_vec::<f32>()?[0] + 0.15865526).abs() < 1e-6);",
        check: [("", Normal, false, true, Tensor::gelu)],
    }
    /// GELU, tanh approximation (`approximate='tanh'`).
    GeluTanh => GELU_TANH {
        float: (
            |x| x.map_f(gelu_tanh32, gelu_tanh64),
            "C inner = (C)0.79788456080286535588 * (x + (C)0.044715 * x * x * x); return T::st((C)0.5 * x * ((C)1 + m_tanh(inner)));"
        ),
        int: refused,
        // One fused pass (the binary row `gelu_tanh_backward`), whose own
        // rule composes the second derivative.
        grad: [x] |g, x, y| g.gelu_tanh_backward(&x()?),
        backward: "GeluTanhBackward",
        inplace: gelu_tanh_(),
        method: pub fn gelu_tanh() => UnaryOp::GeluTanh,
        example: "assert!((x.gelu_tanh()?.to_vec::<f32>()?[0] + 0.15880801).abs() < 1e-6);",
        check: [("", Normal, false, true, Tensor::gelu_tanh)],
    }
    /// `x * sigmoid(x)` (SiLU, swish).
    Silu => SILU {
        float: (
            |x| x.map_f(|v| v * sigmoid32(v), |v| v * sigmoid64(v)),
            "return T::st(x * sigmoid(x));"
        ),
        int: refused,
        grad: [x] |g, x, y| {
            let x = x()?;
            let s = x.sigmoid()?;
            g.mul(&s.mul(&x.mul(&s.affine(-1.0, 1.0)?)?.affine(1.0, 1.0)?)?)
        },
        backward: "SiluBackward",
        inplace: silu_(),
        method: pub fn silu() => UnaryOp::Silu,
        example: "assert!((x.silu()?.to_vec::<f32>()?[0] + 0.26894143).abs() < 1e-6);",
        check: [("", Normal, false, true, Tensor::silu)],
    }
    /// Sine.
    Sin => SIN {
        float: (|x| x.map_f(libm::sinf, libm::sin), "return T::st(m_sin(x));"),
        int: refused,
        grad: [x] |g, x, y| g.mul(&x()?.cos()?),
        backward: "SinBackward",
        inplace: sin_(),
        method: pub fn sin() => UnaryOp::Sin,
        example: "assert!((x.sin()?.to_vec::<f32>()?[1] - 0.47942555).abs() < 1e-6);",
        check: [("", Normal, false, true, Tensor::sin)],
    }
    /// Cosine.
    Cos => COS {
        float: (|x| x.map_f(libm::cosf, libm::cos), "return T::st(m_cos(x));"),
        int: refused,
        grad: [x] |g, x, y| g.mul(&x()?.sin()?)?.neg(),
        backward: "CosBackward",
        inplace: cos_(),
        method: pub fn cos() => UnaryOp::Cos,
        example: "assert!((x.cos()?.to_vec::<f32>()?[1] - 0.87758255).abs() < 1e-6);",
        check: [("", Normal, false, true, Tensor::cos)],
    }
    /// `x ^ exponent` with a scalar exponent (float dtypes).
    Powf(p: f64) => POWF {
        float: (|x| T::from_f64(libm::pow(x.to_f64(), p)), "return T::from_f64(pow(T::f64(x), p0));"),
        int: refused,
        cuda_args: (p, 0.0, 0),
        grad: [x] |g, x, y| if p == 0.0 {
            // 0, not 0 * x^-1 (NaN at x = 0), as PyTorch's `pow_backward`
            zero_gradient(g)
        } else {
            g.mul(&x()?.powf(p - 1.0)?.mul_scalar(p)?)
        },
        backward: "PowBackward",
        inplace: powf_(2.0),
        method: pub fn powf(exponent: f64) => UnaryOp::Powf(exponent),
        example: "assert_eq!(x.powf(2.0)?.to_vec::<f32>()?, vec![1.0, 0.25, 4.0]);",
        check: [
            ("p=2.5", Positive, false, true, |x| x.powf(2.5)),
            ("p=3", Normal, false, true, |x| x.powf(3.0)),
        ],
    }
    /// Clamps into `[min, max]`; `None` leaves that side open (NaN stays
    /// NaN). The gradient is 1 strictly inside the bounds, 0 at and outside
    /// them, as PyTorch 2's `clamp` with scalar bounds.
    Clamp(lo: Option<f64>, hi: Option<f64>) => CLAMP {
        float: (
            |x| clamp(x, lo, hi),
            "if (x != x) return xs; C y = x; if (flags & 1) { C lo = T::ld(T::from_f64(p0)); if (y < lo) y = lo; } if (flags & 2) { C hi = T::ld(T::from_f64(p1)); if (y > hi) y = hi; } return T::st(y);"
        ),
        int: (
            |x| clamp(x, lo, hi),
            "C y = x; if (flags & 1) { C lo = T::ld(T::from_f64(p0)); if (y < lo) y = lo; } if (flags & 2) { C hi = T::ld(T::from_f64(p1)); if (y > hi) y = hi; } return T::st(y);"
        ),
        cuda_args: (
            lo.unwrap_or(0.0),
            hi.unwrap_or(0.0),
            i32::from(lo.is_some()) | (i32::from(hi.is_some()) << 1)
        ),
        grad: [x] |g, x, y| g.mul(&clamp_pass_mask(&x()?, lo, hi)?),
        backward: "ClampBackward",
        inplace: clamp_(Some(-1.0), Some(1.0)),
        method: pub fn clamp(min: Option<f64>, max: Option<f64>)
            check check_bounds("clamp", min, max); => UnaryOp::Clamp(min, max),
        example: "assert_eq!(x.clamp(Some(-0.5), Some(1.0))?.to_vec::<f32>()?, vec![-0.5, 0.5, 1.0]);",
        check: [
            ("[-2, 3]", Normal, true, false, |x| x.clamp(Some(-2.0), Some(3.0))),
            ("[-0.25, 0.5]", Normal, false, false, |x| x.clamp(Some(-0.25), Some(0.5))),
            ("[.., 0.5]", Normal, false, false, |x| x.clamp(None, Some(0.5))),
            ("[-0.25, ..]", Normal, false, false, |x| x.clamp(Some(-0.25), None)),
        ],
    }
    /// `x * mul + add` (float dtypes; computed in f64).
    Affine {
        /// factor
        mul: f64,
        /// addend
        add: f64
    } => AFFINE {
        float: (|x| T::from_f64(x.to_f64() * mul + add), "return T::from_f64(T::f64(x) * p0 + p1);"),
        int: refused,
        cuda_args: (mul, add, 0),
        grad: [] |g, x, y| g.mul_scalar(mul),
        backward: "AffineBackward",
        inplace: affine_(2.0, 1.0),
        method: pub fn affine(mul: f64, add: f64) => UnaryOp::Affine { mul, add },
        example: "assert_eq!(x.affine(2.0, 1.0)?.to_vec::<f32>()?, vec![-1.0, 2.0, 5.0]);",
        check: [("1.5x-0.25", Normal, false, true, |x| x.affine(1.5, -0.25))],
    }
    /// `1` where `x > 0`, else `0` (relu's derivative; the Heaviside step
    /// with value 0 at 0).
    Step => STEP {
        float: (|x| step(x), "return T::st(x > (C)0 ? (C)1 : (C)0);"),
        int: (|x| step(x), "return T::st(x > (C)0 ? (C)1 : (C)0);"),
        grad: [] |g, x, y| g.mul_scalar(0.0),
        backward: "StepBackward",
        inplace: step_(),
        method: pub fn step() => UnaryOp::Step,
        example: "assert_eq!(x.step()?.to_vec::<f32>()?, vec![0.0, 1.0, 1.0]);",
        check: [("", Normal, true, false, Tensor::step)],
    }
    /// Sign: -1, 0 or 1 (±0 and NaN are returned as they are).
    Sign => SIGN {
        float: (|x| sign(x), "return T::st(x > (C)0 ? (C)1 : (x < (C)0 ? (C)(-1) : x));"),
        int: (|x| sign(x), "return T::st(x > (C)0 ? (C)1 : (x < (C)0 ? (C)(-1) : x));"),
        grad: [] |g, x, y| g.mul_scalar(0.0),
        backward: "SignBackward",
        inplace: sign_(),
        method: pub fn sign() => UnaryOp::Sign,
        example: "assert_eq!(x.sign()?.to_vec::<f32>()?, vec![-1.0, 1.0, 1.0]);",
        check: [("", Normal, true, false, Tensor::sign)],
    }
    /// The error function.
    Erf => ERF {
        float: (|x| x.map_f(libm::erff, libm::erf), "return T::st(m_erf(x));"),
        int: refused,
        grad: [x] |g, x, y| {
            let x = x()?;
            g.mul(
                &x.sqr()?
                    .neg()?
                    .exp()?
                    .mul_scalar(core::f64::consts::FRAC_2_SQRT_PI)?,
            )
        },
        backward: "ErfBackward",
        inplace: erf_(),
        method: pub fn erf() => UnaryOp::Erf,
        example: "assert!((x.erf()?.to_vec::<f32>()?[1] - 0.5204999).abs() < 1e-6);",
        check: [("", Normal, false, true, Tensor::erf)],
    }
    /// `ln(1 + x)`, accurate for small `x`.
    Log1p => LOG1P {
        float: (|x| x.map_f(libm::log1pf, libm::log1p), "return T::st(m_log1p(x));"),
        int: refused,
        grad: [x] |g, x, y| g.div(&x()?.add_scalar(1.0)?),
        backward: "Log1pBackward",
        inplace: log1p_(),
        method: pub fn log1p() => UnaryOp::Log1p,
        example: "assert!((x.log1p()?.to_vec::<f32>()?[1] - 0.4054651).abs() < 1e-6);",
        check: [("", Unit, false, true, Tensor::log1p)],
    }
    /// `e^x - 1`, accurate for small `x`.
    Expm1 => EXPM1 {
        float: (|x| x.map_f(libm::expm1f, libm::expm1), "return T::st(m_expm1(x));"),
        int: refused,
        grad: [y] |g, x, y| g.mul(&y()?.add_scalar(1.0)?),
        backward: "Expm1Backward",
        inplace: expm1_(),
        method: pub fn expm1() => UnaryOp::Expm1,
        example: "assert!((x.expm1()?.to_vec::<f32>()?[0] + 0.63212055).abs() < 1e-6);",
        check: [("", Normal, false, true, Tensor::expm1)],
    }
    /// `1 / sqrt(x)` (`inf` at 0, NaN below, as in PyTorch).
    Rsqrt => RSQRT {
        float: (
            |x| x.map_f(|v| 1.0 / libm::sqrtf(v), |v| 1.0 / libm::sqrt(v)),
            "return T::st((C)1 / m_sqrt(x));"
        ),
        int: refused,
        grad: [y] |g, x, y| g.mul(&y()?.powf(3.0)?.mul_scalar(-0.5)?),
        backward: "RsqrtBackward",
        inplace: rsqrt_(),
        method: pub fn rsqrt() => UnaryOp::Rsqrt,
        example: "assert_eq!(x.rsqrt()?.to_vec::<f32>()?[2], 1.0 / 2.0f32.sqrt());",
        check: [("", Positive, false, true, Tensor::rsqrt)],
    }
    /// Rounds down (integers are returned as they are). The gradient is 0.
    Floor => FLOOR {
        float: (|x| x.map_f(libm::floorf, libm::floor), "return T::st(m_floor(x));"),
        int: (|x| x, "return xs;"),
        grad: [] |g, x, y| Tensor::zeros(g.shape(), g.dtype(), &g.device()),
        backward: "FloorBackward",
        inplace: floor_(),
        method: pub fn floor() => UnaryOp::Floor,
        example: "assert_eq!(x.floor()?.to_vec::<f32>()?, vec![-1.0, 0.0, 2.0]);",
        check: [("", Halves, true, false, Tensor::floor)],
    }
    /// Rounds up (integers are returned as they are). The gradient is 0.
    Ceil => CEIL {
        float: (|x| x.map_f(libm::ceilf, libm::ceil), "return T::st(m_ceil(x));"),
        int: (|x| x, "return xs;"),
        grad: [] |g, x, y| Tensor::zeros(g.shape(), g.dtype(), &g.device()),
        backward: "CeilBackward",
        inplace: ceil_(),
        method: pub fn ceil() => UnaryOp::Ceil,
        example: "assert_eq!(x.ceil()?.to_vec::<f32>()?, vec![-1.0, 1.0, 2.0]);",
        check: [("", Halves, true, false, Tensor::ceil)],
    }
    /// Rounds to the nearest integer, ties to even (`round(0.5) == 0`,
    /// `round(1.5) == 2`, as PyTorch and IEEE 754 `roundTiesToEven`). The
    /// gradient is 0.
    Round => ROUND {
        float: (|x| x.map_f(libm::rintf, libm::rint), "return T::st(m_rint(x));"),
        int: (|x| x, "return xs;"),
        grad: [] |g, x, y| Tensor::zeros(g.shape(), g.dtype(), &g.device()),
        backward: "RoundBackward",
        inplace: round_(),
        method: pub fn round() => UnaryOp::Round,
        example: "assert_eq!(x.round()?.to_vec::<f32>()?, vec![-1.0, 0.0, 2.0]);",
        check: [("", Halves, true, false, Tensor::round)],
    }
    /// Rounds toward zero (integers are returned as they are). The gradient
    /// is 0.
    Trunc => TRUNC {
        float: (|x| x.map_f(libm::truncf, libm::trunc), "return T::st(m_trunc(x));"),
        int: (|x| x, "return xs;"),
        grad: [] |g, x, y| Tensor::zeros(g.shape(), g.dtype(), &g.device()),
        backward: "TruncBackward",
        inplace: trunc_(),
        method: pub fn trunc() => UnaryOp::Trunc,
        example: "assert_eq!(x.trunc()?.to_vec::<f32>()?, vec![-1.0, 0.0, 2.0]);",
        check: [("", Halves, true, false, Tensor::trunc)],
    }
    /// Softplus `ln(1 + e^(beta x)) / beta`, linear (`x`) where
    /// `beta x > threshold`, as PyTorch's `softplus(x, beta, threshold)`
    /// (defaults 1 and 20). Computed in f64.
    Softplus(beta: f64, threshold: f64) => SOFTPLUS {
        float: (
            |x| {
                let z = x.to_f64() * beta;
                if z > threshold { x } else { T::from_f64(libm::log1p(libm::exp(z)) / beta) }
            },
            "double z = T::f64(x) * p0; if (z > p1) return xs; return T::from_f64(log1p(exp(z)) / p0);"
        ),
        int: refused,
        cuda_args: (beta, threshold, 0),
        grad: [x] |g, x, y| {
            let z = x()?.mul_scalar(beta)?;
            let linear = z.gt(&z.scalar_like(threshold)?)?;
            g.mul(&linear.where_cond(&z.scalar_like(1.0)?, &z.sigmoid()?)?)
        },
        backward: "SoftplusBackward",
        inplace: softplus_(1.0, 20.0),
        method: pub fn softplus(beta: f64, threshold: f64)
            check check_softplus(beta, threshold); => UnaryOp::Softplus(beta, threshold),
        example: "assert!((x.softplus(1.0, 20.0)?.to_vec::<f32>()?[1] - 0.974077).abs() < 1e-6);",
        check: [
            ("beta=1", Normal, false, true, |x| x.softplus(1.0, 20.0)),
            ("beta=2, threshold=1", Normal, false, false, |x| x.softplus(2.0, 1.0)),
        ],
    }
    /// `clamp(x, min, max)` as an activation: the gradient is 1 strictly
    /// inside the bounds and 0 at and outside them (PyTorch's `hardtanh`,
    /// and `clamp`'s).
    Hardtanh(lo: f64, hi: f64) => HARDTANH {
        float: (
            |x| clamp(x, Some(lo), Some(hi)),
            "if (x != x) return xs; C y = x; C lo = T::ld(T::from_f64(p0)); C hi = T::ld(T::from_f64(p1)); if (y < lo) y = lo; if (y > hi) y = hi; return T::st(y);"
        ),
        int: refused,
        cuda_args: (lo, hi, 0),
        grad: [x] |g, x, y| g.mul(&clamp_pass_mask(&x()?, Some(lo), Some(hi))?),
        backward: "HardtanhBackward",
        inplace: hardtanh_(-0.5, 1.0),
        method: pub fn hardtanh(min_val: f64, max_val: f64)
            check check_bounds("hardtanh", Some(min_val), Some(max_val)); => UnaryOp::Hardtanh(min_val, max_val),
        example: "assert_eq!(x.hardtanh(-0.5, 1.0)?.to_vec::<f32>()?, vec![-0.5, 0.5, 1.0]);",
        check: [("[-0.5, 1]", Normal, false, false, |x| x.hardtanh(-0.5, 1.0))],
    }
    /// `x` where `x > 0`, else `negative_slope * x` (PyTorch's
    /// `leaky_relu`; the gradient at 0 is the slope).
    LeakyRelu(slope: f64) => LEAKY_RELU {
        float: (
            |x| if x > T::ZERO { x } else { x.mul(T::from_f64(slope)) },
            "return x > (C)0 ? xs : T::st(x * T::ld(T::from_f64(p0)));"
        ),
        int: refused,
        cuda_args: (slope, 0.0, 0),
        grad: [x] |g, x, y| {
            let x = x()?;
            let pos = x.gt(&x.scalar_like(0.0)?)?;
            g.mul(&pos.where_cond(&x.scalar_like(1.0)?, &x.scalar_like(slope)?)?)
        },
        backward: "LeakyReluBackward",
        inplace: leaky_relu_(0.1),
        method: pub fn leaky_relu(negative_slope: f64)
            check check_finite("leaky_relu", negative_slope); => UnaryOp::LeakyRelu(negative_slope),
        example: "assert_eq!(x.leaky_relu(0.1)?.to_vec::<f32>()?, vec![-0.1, 0.5, 2.0]);",
        check: [("slope=0.1", NonZero, false, true, |x| x.leaky_relu(0.1))],
    }
    /// `x` where `x > 0`, else `alpha (e^x - 1)` (PyTorch's `elu`).
    Elu(alpha: f64) => ELU {
        float: (
            |x| if x > T::ZERO { x } else { T::from_f64(alpha * libm::expm1(x.to_f64())) },
            "if (x > (C)0) return xs; return T::from_f64(p0 * expm1(T::f64(x)));"
        ),
        int: refused,
        cuda_args: (alpha, 0.0, 0),
        grad: [x y] |g, x, y| {
            // alpha e^x = y + alpha where x <= 0
            let x = x()?;
            let pos = x.gt(&x.scalar_like(0.0)?)?;
            let neg = y()?.add_scalar(alpha)?;
            g.mul(&pos.where_cond(&x.scalar_like(1.0)?, &neg)?)
        },
        backward: "EluBackward",
        inplace: elu_(1.0),
        method: pub fn elu(alpha: f64) check check_finite("elu", alpha); => UnaryOp::Elu(alpha),
        example: "assert!((x.elu(1.0)?.to_vec::<f32>()?[0] + 0.63212055).abs() < 1e-6);",
        check: [("alpha=1.5", NonZero, false, true, |x| x.elu(1.5))],
    }
}

impl Tensor {
    /// `hardtanh(x, 0, 6)` (PyTorch's `relu6`).
    ///
    /// # Errors
    /// As [`Tensor::hardtanh`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[-1.0f32, 3.0, 7.0], &[3], &Device::cpu())?;
    /// assert_eq!(x.relu6()?.to_vec::<f32>()?, vec![0.0, 3.0, 6.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn relu6(&self) -> Result<Tensor> {
        self.hardtanh(0.0, 6.0)
    }

    /// `1 / x`: PyTorch's name for [`Tensor::recip`].
    ///
    /// # Errors
    /// As [`Tensor::recip`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[4.0f32, -0.5], &[2], &Device::cpu())?;
    /// assert_eq!(x.reciprocal()?.to_vec::<f32>()?, vec![0.25, -2.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn reciprocal(&self) -> Result<Tensor> {
        self.recip()
    }
}

/// Where `clamp(lo, hi)` and `hardtanh` pass their gradient: 1 strictly
/// inside the bounds, 0 at and outside them (and at NaN), in `x`'s dtype
/// (PyTorch's convention for scalar bounds).
pub(crate) fn clamp_pass_mask(x: &Tensor, lo: Option<f64>, hi: Option<f64>) -> Result<Tensor> {
    let mut inside = x.eq(x)?;
    if let Some(lo) = lo {
        inside = inside.logical_and(&x.gt(&x.scalar_like(lo)?)?)?;
    }
    if let Some(hi) = hi {
        inside = inside.logical_and(&x.lt(&x.scalar_like(hi)?)?)?;
    }
    inside.to_dtype(x.dtype())
}

/// A zero gradient like `g` (out of line: a rare branch of one formula).
#[cold]
#[inline(never)]
fn zero_gradient(g: &Tensor) -> Result<Tensor> {
    g.zeros_like()
}
