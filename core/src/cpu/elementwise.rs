//! Elementwise kernels: copy, cast, fill, unary, binary, compare, where.
//!
//! Every kernel walks the destination's shape over arbitrary strides; the
//! tensor layer has broadcast the sources to that shape (stride 0).

use crate::backend::{BinaryOp, CmpOp, Dst, Src, UnaryOp};
use crate::cpu::select::{dtypes, ops};
use crate::device::DeviceKind;
use crate::dispatch_in;
use crate::dtype::{DType, Float, Scalar};
use crate::error::{Error, Result};
use crate::layout::walk;
use crate::storage::{ReadGuard, typed, typed_mut};

/// Whether `src` is the destination itself: same storage, layout and dtype
/// (NOTE [Aliasing contract]).
pub fn aliases(src: &Src<'_>, dst: &Dst<'_>) -> bool {
    core::ptr::eq(src.storage, dst.storage) && src.layout == dst.layout && src.dtype == dst.dtype
}

fn guard<'a>(src: &Src<'a>, dst: &Dst<'a>, op: &'static str) -> Result<Option<ReadGuard<'a>>> {
    if aliases(src, dst) {
        Ok(None)
    } else {
        src.storage.read(op).map(Some)
    }
}

fn slice_of<'g, T: bytemuck::Pod>(g: &'g Option<ReadGuard<'_>>) -> Result<Option<&'g [T]>> {
    g.as_ref().map(|g| typed::<T>(g.bytes())).transpose()
}

/// `dst[i] = f(a[i])`, where `a` may be exactly `dst`.
pub fn map1_same<T: Scalar>(
    op: &'static str,
    a: Src<'_>,
    dst: Dst<'_>,
    f: impl Fn(T) -> T,
) -> Result<()> {
    let ga = guard(&a, &dst, op)?;
    let mut gd = dst.storage.write(op)?;
    let d = typed_mut::<T>(gd.bytes_mut())?;
    match slice_of::<T>(&ga)? {
        Some(sa) => walk([dst.layout, a.layout], |[od, oa]| d[od] = f(sa[oa])),
        None => walk([dst.layout], |[od]| d[od] = f(d[od])),
    }
    Ok(())
}

/// `dst[i] = f(a[i], b[i])`, where `a` and/or `b` may be exactly `dst`.
pub fn map2_same<T: Scalar>(
    op: &'static str,
    a: Src<'_>,
    b: Src<'_>,
    dst: Dst<'_>,
    f: impl Fn(T, T) -> T,
) -> Result<()> {
    let ga = guard(&a, &dst, op)?;
    let gb = guard(&b, &dst, op)?;
    let mut gd = dst.storage.write(op)?;
    let d = typed_mut::<T>(gd.bytes_mut())?;
    let sa = slice_of::<T>(&ga)?;
    let sb = slice_of::<T>(&gb)?;
    walk([dst.layout, a.layout, b.layout], |[od, oa, ob]| {
        let x = match sa {
            Some(s) => s[oa],
            None => d[oa],
        };
        let y = match sb {
            Some(s) => s[ob],
            None => d[ob],
        };
        d[od] = f(x, y);
    });
    Ok(())
}

fn no_alias(op: &'static str, srcs: &[&Src<'_>], dst: &Dst<'_>) -> Result<()> {
    if srcs.iter().any(|s| core::ptr::eq(s.storage, dst.storage)) {
        return Err(Error::InvalidArgument {
            op,
            reason: "the destination shares storage with a source; write into a fresh tensor or deep_clone() the source",
        });
    }
    Ok(())
}

/// `dst[i] = f(a[i])` with different element types; no aliasing.
pub fn map1<T: Scalar, U: Scalar>(
    op: &'static str,
    a: Src<'_>,
    dst: Dst<'_>,
    f: impl Fn(T) -> U,
) -> Result<()> {
    no_alias(op, &[&a], &dst)?;
    let ga = a.storage.read(op)?;
    let mut gd = dst.storage.write(op)?;
    let d = typed_mut::<U>(gd.bytes_mut())?;
    let sa = typed::<T>(ga.bytes())?;
    walk([dst.layout, a.layout], |[od, oa]| d[od] = f(sa[oa]));
    Ok(())
}

/// `dst[i] = f(a[i], b[i])` with a different output type; no aliasing.
pub fn map2<T: Scalar, U: Scalar>(
    op: &'static str,
    a: Src<'_>,
    b: Src<'_>,
    dst: Dst<'_>,
    f: impl Fn(T, T) -> U,
) -> Result<()> {
    no_alias(op, &[&a, &b], &dst)?;
    let ga = a.storage.read(op)?;
    let gb = b.storage.read(op)?;
    let mut gd = dst.storage.write(op)?;
    let d = typed_mut::<U>(gd.bytes_mut())?;
    let sa = typed::<T>(ga.bytes())?;
    let sb = typed::<T>(gb.bytes())?;
    walk([dst.layout, a.layout, b.layout], |[od, oa, ob]| {
        d[od] = f(sa[oa], sb[ob])
    });
    Ok(())
}

/// `dst = src`, same dtype.
///
/// # Errors
/// Storage access conflicts.
pub fn copy_strided(src: Src<'_>, dst: Dst<'_>) -> Result<()> {
    copy_strided_in::<{ dtypes::ALL }>(src, dst)
}

/// [`copy_strided`] for the dtypes in `DTYPES` only (NOTE [Kernel selection]).
///
/// # Errors
/// [`Error::UnsupportedDType`] for a dtype outside `DTYPES`; storage access
/// conflicts.
pub fn copy_strided_in<const DTYPES: u16>(src: Src<'_>, dst: Dst<'_>) -> Result<()> {
    dispatch_in!(DTYPES, "copy", dst.dtype, T => map1_same::<T>("copy", src, dst, |x| x))
}

/// `dst = src as dst.dtype` (float to int truncates toward zero and
/// saturates; anything to bool is `x != 0`).
///
/// # Errors
/// Storage access conflicts.
pub fn cast(src: Src<'_>, dst: Dst<'_>) -> Result<()> {
    cast_in::<{ dtypes::ALL }>(src, dst)
}

/// [`cast`] between the dtypes in `DTYPES` only (NOTE [Kernel selection]).
///
/// # Errors
/// [`Error::UnsupportedDType`] when either dtype is outside `DTYPES`;
/// storage access conflicts.
pub fn cast_in<const DTYPES: u16>(src: Src<'_>, dst: Dst<'_>) -> Result<()> {
    if src.dtype == dst.dtype {
        return copy_strided_in::<DTYPES>(src, dst);
    }
    if DTYPES.count_ones() <= 1 {
        // Two different dtypes cannot both be in the set: no conversion
        // code to link (NOTE [Kernel selection]).
        let missing = if dtypes::contains(DTYPES, src.dtype) {
            dst.dtype
        } else {
            src.dtype
        };
        return Err(crate::cpu::select::not_enabled("to_dtype", missing));
    }
    let to_bool = dst.dtype == DType::Bool;
    dispatch_in!(DTYPES, "to_dtype", src.dtype, S => dispatch_in!(DTYPES, "to_dtype", dst.dtype, D => {
        map1::<S, D>("to_dtype", src, dst, |x| {
            let v = x.to_f64();
            if to_bool { D::from_f64(if v != 0.0 { 1.0 } else { 0.0 }) } else { D::from_f64(v) }
        })
    }))
}

/// Sets every element of `dst` to `value`.
///
/// # Errors
/// Storage access conflicts.
pub fn fill(dst: Dst<'_>, value: f64) -> Result<()> {
    fill_in::<{ dtypes::ALL }>(dst, value)
}

/// [`fill`] for the dtypes in `DTYPES` only (NOTE [Kernel selection]).
///
/// # Errors
/// [`Error::UnsupportedDType`] for a dtype outside `DTYPES`; storage access
/// conflicts.
pub fn fill_in<const DTYPES: u16>(dst: Dst<'_>, value: f64) -> Result<()> {
    let v = if dst.dtype == DType::Bool {
        if value != 0.0 { 1.0 } else { 0.0 }
    } else {
        value
    };
    dispatch_in!(DTYPES, "fill", dst.dtype, T => {
        let x = T::from_f64(v);
        let mut gd = dst.storage.write("fill")?;
        let d = typed_mut::<T>(gd.bytes_mut())?;
        walk([dst.layout], |[od]| d[od] = x);
        Ok(())
    })
}

// ------------------------------------------------------------------ unary

fn sigmoid32(x: f32) -> f32 {
    if x >= 0.0 {
        1.0 / (1.0 + libm::expf(-x))
    } else {
        let e = libm::expf(x);
        e / (1.0 + e)
    }
}
fn sigmoid64(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + libm::exp(-x))
    } else {
        let e = libm::exp(x);
        e / (1.0 + e)
    }
}
fn gelu32(x: f32) -> f32 {
    0.5 * x * (1.0 + libm::erff(x * core::f32::consts::FRAC_1_SQRT_2))
}
fn gelu64(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::erf(x * core::f64::consts::FRAC_1_SQRT_2))
}
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
fn gelu_tanh32(x: f32) -> f32 {
    0.5 * x * (1.0 + libm::tanhf(SQRT_2_OVER_PI as f32 * (x + 0.044715 * x * x * x)))
}
fn gelu_tanh64(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
}

/// The float function of `op`. Arms for ops outside `OPS` are constant
/// false and compile out (NOTE [Kernel selection]); callers refuse those
/// ops first, so the fallback arm is never taken.
fn float_unary<T: Float, const OPS: u64>(op: UnaryOp) -> impl Fn(T) -> T {
    move |x: T| match op {
        UnaryOp::Neg if OPS & ops::NEG != 0 => x.neg(),
        UnaryOp::Abs if OPS & ops::ABS != 0 => x.abs(),
        UnaryOp::Exp if OPS & ops::EXP != 0 => x.map_f(libm::expf, libm::exp),
        UnaryOp::Log if OPS & ops::LOG != 0 => x.map_f(libm::logf, libm::log),
        UnaryOp::Sqrt if OPS & ops::SQRT != 0 => x.map_f(libm::sqrtf, libm::sqrt),
        UnaryOp::Sqr if OPS & ops::SQR != 0 => x.mul(x),
        UnaryOp::Recip if OPS & ops::RECIP != 0 => T::ONE.div(x),
        UnaryOp::Tanh if OPS & ops::TANH != 0 => x.map_f(libm::tanhf, libm::tanh),
        UnaryOp::Sigmoid if OPS & ops::SIGMOID != 0 => x.map_f(sigmoid32, sigmoid64),
        UnaryOp::Relu if OPS & ops::RELU != 0 => {
            if x > T::ZERO || x.is_nan() {
                x
            } else {
                T::ZERO
            }
        }
        UnaryOp::Gelu if OPS & ops::GELU != 0 => x.map_f(gelu32, gelu64),
        UnaryOp::GeluTanh if OPS & ops::GELU_TANH != 0 => x.map_f(gelu_tanh32, gelu_tanh64),
        UnaryOp::Silu if OPS & ops::SILU != 0 => {
            x.map_f(|v| v * sigmoid32(v), |v| v * sigmoid64(v))
        }
        UnaryOp::Sin if OPS & ops::SIN != 0 => x.map_f(libm::sinf, libm::sin),
        UnaryOp::Cos if OPS & ops::COS != 0 => x.map_f(libm::cosf, libm::cos),
        UnaryOp::Powf(p) if OPS & ops::POWF != 0 => T::from_f64(libm::pow(x.to_f64(), p)),
        UnaryOp::Clamp(lo, hi) if OPS & ops::CLAMP != 0 => clamp(x, lo, hi),
        UnaryOp::Affine { mul, add } if OPS & ops::AFFINE != 0 => {
            T::from_f64(x.to_f64() * mul + add)
        }
        UnaryOp::Step if OPS & ops::STEP != 0 => {
            if x > T::ZERO {
                T::ONE
            } else {
                T::ZERO
            }
        }
        UnaryOp::Sign if OPS & ops::SIGN != 0 => sign(x),
        UnaryOp::Erf if OPS & ops::ERF != 0 => x.map_f(libm::erff, libm::erf),
        _ => x,
    }
}

fn clamp<T: Scalar>(x: T, lo: Option<f64>, hi: Option<f64>) -> T {
    if x.is_nan() {
        return x;
    }
    let mut y = x;
    if let Some(l) = lo {
        let l = T::from_f64(l);
        if y < l {
            y = l;
        }
    }
    if let Some(h) = hi {
        let h = T::from_f64(h);
        if y > h {
            y = h;
        }
    }
    y
}

fn sign<T: Scalar>(x: T) -> T {
    if x > T::ZERO {
        T::ONE
    } else if x < T::ZERO {
        T::ONE.neg()
    } else {
        x
    }
}

fn int_unary<T: Scalar>(op: UnaryOp) -> Result<impl Fn(T) -> T> {
    if !op.works_on_ints() {
        return Err(Error::UnsupportedDType {
            op: op.name(),
            dtype: T::DTYPE,
            supported: "f32, f64, f16, bf16",
        });
    }
    Ok(move |x: T| match op {
        UnaryOp::Neg => x.neg(),
        UnaryOp::Abs => x.abs(),
        UnaryOp::Sqr => x.mul(x),
        UnaryOp::Relu => {
            if x > T::ZERO {
                x
            } else {
                T::ZERO
            }
        }
        UnaryOp::Clamp(lo, hi) => clamp(x, lo, hi),
        UnaryOp::Step => {
            if x > T::ZERO {
                T::ONE
            } else {
                T::ZERO
            }
        }
        UnaryOp::Sign => sign(x),
        _ => x,
    })
}

/// `dst = op(src)`.
///
/// # Errors
/// [`Error::UnsupportedDType`] for a float-only op on an integer dtype.
pub fn unary(op: UnaryOp, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
    unary_in::<{ dtypes::ALL }, { ops::ALL }>(op, src, dst)
}

/// The error for an op outside a backend's `OPS` set.
pub(crate) fn op_not_enabled(op: &'static str) -> Error {
    Error::Unsupported {
        op,
        device: DeviceKind::Cpu,
    }
}

/// [`unary`] for the dtypes in `DTYPES` and the ops in `OPS` only (NOTE
/// [Kernel selection]).
///
/// # Errors
/// [`Error::Unsupported`] for an op outside `OPS`,
/// [`Error::UnsupportedDType`] for a dtype outside `DTYPES` or a float-only
/// op on an integer dtype.
pub fn unary_in<const DTYPES: u16, const OPS: u64>(
    op: UnaryOp,
    src: Src<'_>,
    dst: Dst<'_>,
) -> Result<()> {
    let name = op.name();
    if !ops::has_unary(OPS, op) {
        return Err(op_not_enabled(name));
    }
    match dst.dtype {
        DType::F32 if dtypes::contains(DTYPES, DType::F32) => {
            map1_same::<f32>(name, src, dst, float_unary::<_, OPS>(op))
        }
        DType::F64 if dtypes::contains(DTYPES, DType::F64) => {
            map1_same::<f64>(name, src, dst, float_unary::<_, OPS>(op))
        }
        DType::F16 if dtypes::contains(DTYPES, DType::F16) => {
            map1_same::<half::f16>(name, src, dst, float_unary::<_, OPS>(op))
        }
        DType::BF16 if dtypes::contains(DTYPES, DType::BF16) => {
            map1_same::<half::bf16>(name, src, dst, float_unary::<_, OPS>(op))
        }
        DType::I64 if dtypes::contains(DTYPES, DType::I64) => {
            map1_same::<i64>(name, src, dst, int_unary(op)?)
        }
        DType::I32 if dtypes::contains(DTYPES, DType::I32) => {
            map1_same::<i32>(name, src, dst, int_unary(op)?)
        }
        DType::U8 if dtypes::contains(DTYPES, DType::U8) => {
            map1_same::<u8>(name, src, dst, int_unary(op)?)
        }
        DType::Bool => Err(Error::UnsupportedDType {
            op: name,
            dtype: DType::Bool,
            supported: "numeric dtypes",
        }),
        d => Err(crate::cpu::select::not_enabled(name, d)),
    }
}

// ----------------------------------------------------------------- binary

/// The function of `op`; arms for ops outside `OPS` compile out (NOTE
/// [Kernel selection]), and callers refuse those ops first.
fn binary_fn<T: Scalar, const OPS: u64>(op: BinaryOp) -> impl Fn(T, T) -> T {
    move |a: T, b: T| match op {
        BinaryOp::Add if OPS & ops::ADD != 0 => a.add(b),
        BinaryOp::Sub if OPS & ops::SUB != 0 => a.sub(b),
        BinaryOp::Mul if OPS & ops::MUL != 0 => a.mul(b),
        BinaryOp::Div if OPS & ops::DIV != 0 => a.div(b),
        BinaryOp::Maximum if OPS & ops::MAXIMUM != 0 => {
            if a.is_nan() || a > b {
                a
            } else {
                b
            }
        }
        BinaryOp::Minimum if OPS & ops::MINIMUM != 0 => {
            if a.is_nan() || a < b {
                a
            } else {
                b
            }
        }
        BinaryOp::Pow if OPS & ops::POW != 0 => T::from_f64(libm::pow(a.to_f64(), b.to_f64())),
        _ => a,
    }
}

/// `dst = lhs op rhs`.
///
/// # Errors
/// [`Error::UnsupportedDType`] for `div`/`pow` on integers or anything on bool.
pub fn binary(op: BinaryOp, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
    binary_in::<{ dtypes::ALL }, { ops::ALL }>(op, lhs, rhs, dst)
}

/// [`binary`] for the dtypes in `DTYPES` and the ops in `OPS` only (NOTE
/// [Kernel selection]).
///
/// # Errors
/// [`Error::Unsupported`] for an op outside `OPS`,
/// [`Error::UnsupportedDType`] for a dtype outside `DTYPES`, `div`/`pow` on
/// integers or anything on bool.
pub fn binary_in<const DTYPES: u16, const OPS: u64>(
    op: BinaryOp,
    lhs: Src<'_>,
    rhs: Src<'_>,
    dst: Dst<'_>,
) -> Result<()> {
    if !ops::has_binary(OPS, op) {
        return Err(op_not_enabled(op.name()));
    }
    let dt = dst.dtype;
    if dt == DType::Bool || (dt.is_int() && matches!(op, BinaryOp::Div | BinaryOp::Pow)) {
        return Err(Error::UnsupportedDType {
            op: op.name(),
            dtype: dt,
            supported: "f32, f64, f16, bf16",
        });
    }
    dispatch_in!(DTYPES, op.name(), dt, T => {
        map2_same::<T>(op.name(), lhs, rhs, dst, binary_fn::<T, OPS>(op))
    })
}

/// `dst (bool) = lhs cmp rhs`.
///
/// # Errors
/// Storage access conflicts.
pub fn compare(op: CmpOp, lhs: Src<'_>, rhs: Src<'_>, dst: Dst<'_>) -> Result<()> {
    compare_in::<{ dtypes::ALL }>(op, lhs, rhs, dst)
}

/// [`compare`] for operands with a dtype in `DTYPES` only (NOTE [Kernel
/// selection]).
///
/// # Errors
/// [`Error::UnsupportedDType`] for a dtype outside `DTYPES`; storage access
/// conflicts.
pub fn compare_in<const DTYPES: u16>(
    op: CmpOp,
    lhs: Src<'_>,
    rhs: Src<'_>,
    dst: Dst<'_>,
) -> Result<()> {
    dispatch_in!(DTYPES, "compare", lhs.dtype, T => map2::<T, u8>("compare", lhs, rhs, dst, move |a, b| {
        let r = match op {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        };
        r as u8
    }))
}

/// `dst = cond ? t : f`.
///
/// # Errors
/// Storage access conflicts.
pub fn where_cond(cond: Src<'_>, t: Src<'_>, f: Src<'_>, dst: Dst<'_>) -> Result<()> {
    where_cond_in::<{ dtypes::ALL }>(cond, t, f, dst)
}

/// [`where_cond`] for a destination dtype in `DTYPES` only (NOTE [Kernel
/// selection]).
///
/// # Errors
/// [`Error::UnsupportedDType`] for a dtype outside `DTYPES`; storage access
/// conflicts.
pub fn where_cond_in<const DTYPES: u16>(
    cond: Src<'_>,
    t: Src<'_>,
    f: Src<'_>,
    dst: Dst<'_>,
) -> Result<()> {
    no_alias("where", &[&cond, &t, &f], &dst)?;
    dispatch_in!(DTYPES, "where", dst.dtype, T => {
        let gc = cond.storage.read("where")?;
        let gt = t.storage.read("where")?;
        let gf = f.storage.read("where")?;
        let mut gd = dst.storage.write("where")?;
        let d = typed_mut::<T>(gd.bytes_mut())?;
        let sc = typed::<u8>(gc.bytes())?;
        let st = typed::<T>(gt.bytes())?;
        let sf = typed::<T>(gf.bytes())?;
        walk([dst.layout, cond.layout, t.layout, f.layout], |[od, oc, ot, of]| {
            d[od] = if sc[oc] != 0 { st[ot] } else { sf[of] };
        });
        Ok(())
    })
}
