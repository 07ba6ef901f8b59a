//! Elementwise kernels: copy, cast, fill, unary, binary, compare, where.
//!
//! Every kernel walks the destination's shape over arbitrary strides; the
//! tensor layer has broadcast the sources to that shape (stride 0).

use crate::backend::contract::no_alias;
use crate::backend::{BinaryOp, CmpOp, Dst, Src, UnaryOp};
use crate::cpu::select::{dtypes, ops};
use crate::cpu::strided::{self, Strided};
use crate::device_kind::DeviceKind;
use crate::dispatch_in;
use crate::dtype::{DType, Scalar};
use crate::error::{Error, Result};
use crate::layout::{Layout, walk};
use crate::storage::{ReadGuard, typed, typed_mut};

/// Whether `src` is the destination itself: same storage, layout and dtype
/// (NOTE [Aliasing contract]).
pub fn aliases(src: &Src<'_>, dst: &Dst<'_>) -> bool {
    core::ptr::eq(src.storage, dst.storage) && src.layout == dst.layout && src.dtype == dst.dtype
}

fn guard<'a>(src: &Src<'a>, dst: &Dst<'a>, op: &'static str) -> Result<Option<ReadGuard<'a>>> {
    crate::backend::contract::exact_alias(op, src, dst)?;
    if aliases(src, dst) {
        Ok(None)
    } else {
        src.storage.read(op).map(Some)
    }
}

/// [`Strided::within`], for the elementwise kernels.
fn inside(l: &Layout, len: usize) -> Result<Strided<'_, usize>> {
    Strided::within("elementwise", l, len)
}

fn slice_of<'g, T: bytemuck::Pod>(g: &'g Option<ReadGuard<'_>>) -> Result<Option<&'g [T]>> {
    g.as_ref().map(|g| typed::<T>(g.bytes())).transpose()
}

/// The element ranges of layouts that are all contiguous (each a run of
/// `numel` elements from its offset, in row-major order) and inside
/// storages of `lens` elements: the flat loop's operands. `None` sends the
/// caller to the strided walk.
fn dense<const N: usize>(
    layouts: [&Layout; N],
    lens: [usize; N],
) -> Option<[core::ops::Range<usize>; N]> {
    let n = layouts[0].numel();
    let mut out: [core::ops::Range<usize>; N] = core::array::from_fn(|_| 0..0);
    for ((l, len), r) in layouts.iter().zip(lens).zip(out.iter_mut()) {
        let end = l.offset().checked_add(n)?;
        if l.numel() != n || !l.is_contiguous() || end > len {
            return None;
        }
        *r = l.offset()..end;
    }
    Some(out)
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
        Some(sa) => match dense([dst.layout, a.layout], [d.len(), sa.len()]) {
            Some([rd, ra]) => {
                for (o, &x) in d[rd].iter_mut().zip(&sa[ra]) {
                    *o = f(x);
                }
            }
            None => {
                let v = [inside(a.layout, sa.len())?, inside(dst.layout, d.len())?];
                // SAFETY: NOTE [Shared elementwise walks]: both views lie
                // inside their slices, which are different storages'.
                unsafe { strided::map(&v, sa.as_ptr(), d.as_mut_ptr(), f) }
            }
        },
        None => {
            let vd = inside(dst.layout, d.len())?;
            let p = d.as_mut_ptr();
            // SAFETY: as above; the source is exactly the destination, read
            // through the same pointer.
            unsafe { strided::map(&[vd, vd], p.cast_const(), p, f) }
        }
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
    if let (Some(sa), Some(sb)) = (sa, sb) {
        let lens = [d.len(), sa.len(), sb.len()];
        if let Some([rd, ra, rb]) = dense([dst.layout, a.layout, b.layout], lens) {
            for ((o, &x), &y) in d[rd].iter_mut().zip(&sa[ra]).zip(&sb[rb]) {
                *o = f(x, y);
            }
            return Ok(());
        }
    }
    let v = [
        inside(a.layout, sa.map_or(d.len(), <[T]>::len))?,
        inside(b.layout, sb.map_or(d.len(), <[T]>::len))?,
        inside(dst.layout, d.len())?,
    ];
    let pd = d.as_mut_ptr();
    let (pa, pb) = (
        sa.map_or(pd.cast_const(), <[T]>::as_ptr),
        sb.map_or(pd.cast_const(), <[T]>::as_ptr),
    );
    // SAFETY: NOTE [Shared elementwise walks]: every view lies inside its
    // slice; a source is another storage's or exactly the destination
    // (read through its pointer).
    unsafe { strided::zip(&v, pa, pb, pd, f) };
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
    let v = [inside(a.layout, sa.len())?, inside(dst.layout, d.len())?];
    // SAFETY: NOTE [Shared elementwise walks]: both views lie inside their
    // slices, which are different storages'.
    unsafe { strided::map(&v, sa.as_ptr(), d.as_mut_ptr(), f) };
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
    let v = [
        inside(a.layout, sa.len())?,
        inside(b.layout, sb.len())?,
        inside(dst.layout, d.len())?,
    ];
    // SAFETY: as `map1`'s, for both sources.
    unsafe { strided::zip(&v, sa.as_ptr(), sb.as_ptr(), d.as_mut_ptr(), f) };
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
    if !dtypes::contains(DTYPES, dst.dtype) {
        return Err(crate::cpu::select::not_enabled("to_dtype", dst.dtype));
    }
    dispatch_in!(DTYPES, "to_dtype", src.dtype, S => cast_from::<S>(src, dst))
}

/// A source value on its way to another dtype: integers (and bools) as
/// i64, so integer-to-integer casts wrap exactly; floats as f64.
#[derive(Clone, Copy)]
enum Wide {
    Int(i64),
    Float(f64),
}

/// NOTE [Cast code size]: a cast kernel per (source, destination) pair is
/// 100 instantiations of the walk loop for 10 dtypes (28 KB of a Cortex-M4
/// image). Instead the loop is instantiated per source dtype and each
/// element is stored through [`put`], one small function matching on the
/// destination dtype: 10 loops and 10 stores.
fn cast_from<S: Scalar>(src: Src<'_>, dst: Dst<'_>) -> Result<()> {
    const OP: &str = "to_dtype";
    crate::backend::contract::cast(src, dst)?;
    let ga = src.storage.read(OP)?;
    let sa = typed::<S>(ga.bytes())?;
    let mut gd = dst.storage.write(OP)?;
    cast_slices((sa, src.layout), (gd.bytes_mut(), dst.dtype, dst.layout))
}

/// A cast of integer values read by `get` (storage index to value, at
/// any alignment) on slices: what [`cast_slices`] does for an integer
/// source, for a planned replay's word-aligned i64 constants.
///
/// # Errors
/// As [`cast_slices`].
pub(crate) fn cast_ints(
    (get, sl): (impl Fn(usize) -> i64, &Layout),
    (d, to, dl): (&mut [u8], DType, &Layout),
) -> Result<()> {
    let mut failed = false;
    walk([dl, sl], |[od, os]| {
        failed |= put(d, to, od, Wide::Int(get(os))).is_none();
    });
    if failed {
        return Err(Error::InvalidArgument {
            op: "to_dtype",
            reason: "the destination storage is smaller than its layout; allocate it with the layout's reach",
        });
    }
    Ok(())
}

/// A cast on slices (NOTE [Slice-level kernels] in [`super::index`]):
/// the typed source, and the destination's bytes with its dtype.
///
/// # Errors
/// [`Error::InvalidArgument`] when the destination's layout reaches past
/// its bytes.
pub(crate) fn cast_slices<S: Scalar>(
    (sa, sl): (&[S], &Layout),
    (d, to, dl): (&mut [u8], DType, &Layout),
) -> Result<()> {
    let int = !S::DTYPE.is_float();
    let mut failed = false;
    // Masks to f32, typed once: the same conversion as `put`'s (through
    // i64), without its per-element dtype dispatch. (Byte sources only: a
    // loop for every source dtype grew an image with every kernel by 8 KB.)
    if to == DType::F32 && core::mem::size_of::<S>() == 1 {
        if let Ok(d) = crate::storage::typed_mut::<f32>(d) {
            walk([dl, sl], |[od, os]| {
                let x = sa[os];
                let v = if int {
                    x.as_i64() as f64 as f32
                } else {
                    x.to_f64() as f32
                };
                match d.get_mut(od) {
                    Some(slot) => *slot = v,
                    None => failed = true,
                }
            });
            return if failed { Err(too_small()) } else { Ok(()) };
        }
    }
    walk([dl, sl], |[od, os]| {
        let x = sa[os];
        let w = if int {
            Wide::Int(x.as_i64())
        } else {
            Wide::Float(x.to_f64())
        };
        failed |= put(d, to, od, w).is_none();
    });
    if failed {
        return Err(too_small());
    }
    Ok(())
}

fn too_small() -> Error {
    Error::InvalidArgument {
        op: "to_dtype",
        reason: "the destination storage is smaller than its layout; allocate it with the layout's reach",
    }
}

/// Stores `w` as element `i` of `bytes` holding `dtype`; `None` when `i`
/// is past the end.
fn put(bytes: &mut [u8], dtype: DType, i: usize, w: Wide) -> Option<()> {
    fn at<D: Scalar>(bytes: &mut [u8], i: usize, v: D) -> Option<()> {
        let n = core::mem::size_of::<D>();
        let slot = bytes.get_mut(i.checked_mul(n)?..)?.get_mut(..n)?;
        slot.copy_from_slice(bytemuck::bytes_of(&v));
        Some(())
    }
    fn conv<D: Scalar>(w: Wide) -> D {
        match w {
            Wide::Int(v) if !D::DTYPE.is_float() => D::from_i64_wrapping(v),
            Wide::Int(v) => D::from_f64(v as f64),
            Wide::Float(v) => D::from_f64(v),
        }
    }
    match dtype {
        DType::F32 => at::<f32>(bytes, i, conv(w)),
        DType::F64 => at::<f64>(bytes, i, conv(w)),
        DType::F16 => at::<half::f16>(bytes, i, conv(w)),
        DType::BF16 => at::<half::bf16>(bytes, i, conv(w)),
        DType::I64 => at::<i64>(bytes, i, conv(w)),
        DType::I32 => at::<i32>(bytes, i, conv(w)),
        DType::I16 => at::<i16>(bytes, i, conv(w)),
        DType::I8 => at::<i8>(bytes, i, conv(w)),
        DType::U8 => at::<u8>(bytes, i, conv(w)),
        DType::Bool => {
            let b = match w {
                Wide::Int(v) => v != 0,
                Wide::Float(v) => v != 0.0,
            };
            at::<u8>(bytes, i, u8::from(b))
        }
    }
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
        let vd = inside(dst.layout, d.len())?;
        // SAFETY: NOTE [Shared elementwise walks]: the view lies inside `d`.
        unsafe { strided::fill(vd, d.as_mut_ptr(), x) };
        Ok(())
    })
}

// ------------------------------------------------------------------ unary

/// Runs `$float` (floats) or `$int` (integers) with `$T` bound to the
/// storage type of `$dtype`; returns early with the error for bool
/// (`$bool_ok` names what is supported) and for a dtype outside `$dtypes`
/// (NOTE [Kernel selection]).
macro_rules! by_dtype {
    ($dtypes:ident, $name:ident, $dtype:expr, $bool_ok:literal, $T:ident => float: $float:expr, int: $int:expr) => {{
        let on = |d: DType| dtypes::contains($dtypes, d);
        match $dtype {
            DType::F32 if on(DType::F32) => {
                type $T = f32;
                $float
            }
            DType::F64 if on(DType::F64) => {
                type $T = f64;
                $float
            }
            DType::F16 if on(DType::F16) => {
                type $T = half::f16;
                $float
            }
            DType::BF16 if on(DType::BF16) => {
                type $T = half::bf16;
                $float
            }
            DType::I64 if on(DType::I64) => {
                type $T = i64;
                $int
            }
            DType::I32 if on(DType::I32) => {
                type $T = i32;
                $int
            }
            DType::I16 if on(DType::I16) => {
                type $T = i16;
                $int
            }
            DType::I8 if on(DType::I8) => {
                type $T = i8;
                $int
            }
            DType::U8 if on(DType::U8) => {
                type $T = u8;
                $int
            }
            DType::Bool => Err(Error::UnsupportedDType {
                op: $name,
                dtype: DType::Bool,
                supported: $bool_ok,
            }),
            d => Err(crate::cpu::select::not_enabled($name, d)),
        }
    }};
}

/// The error for a float-only op on an integer dtype.
fn floats_only(op: &'static str, dtype: DType) -> Error {
    Error::UnsupportedDType {
        op,
        dtype,
        supported: "f32, f64, f16, bf16",
    }
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
pub fn unary_in<const DTYPES: u16, const OPS: u128>(
    op: UnaryOp,
    src: Src<'_>,
    dst: Dst<'_>,
) -> Result<()> {
    let name = op.name();
    if !ops::has_unary(OPS, op) {
        return Err(op_not_enabled(name));
    }
    // One loop per dtype with the op matched per element (NOTE [Op table]):
    // the reference keeps firmware images small, and the threaded backend
    // has the per-op loops.
    by_dtype!(DTYPES, name, dst.dtype, "numeric dtypes", T =>
        float: map1_same::<T>(name, src, dst, op.float_fn_in::<T, OPS>()),
        int: if op.works_on_ints() {
            map1_same::<T>(name, src, dst, op.int_fn_in::<T, OPS>())
        } else {
            Err(floats_only(name, dst.dtype))
        }
    )
}

// ----------------------------------------------------------------- binary

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
/// [`Error::UnsupportedDType`] for a dtype outside `DTYPES`, a dtype class
/// the op does not accept, or bool.
pub fn binary_in<const DTYPES: u16, const OPS: u128>(
    op: BinaryOp,
    lhs: Src<'_>,
    rhs: Src<'_>,
    dst: Dst<'_>,
) -> Result<()> {
    let name = op.name();
    if !ops::has_binary(OPS, op) {
        return Err(op_not_enabled(name));
    }
    by_dtype!(DTYPES, name, dst.dtype, "f32, f64, f16, bf16", T =>
        float: if op.works_on_floats() {
            map2_same::<T>(name, lhs, rhs, dst, op.float_fn_in::<T, OPS>())
        } else {
            Err(Error::UnsupportedDType {
                op: name,
                dtype: dst.dtype,
                supported: "integer dtypes",
            })
        },
        int: if op.works_on_ints() {
            map2_same::<T>(name, lhs, rhs, dst, op.int_fn_in::<T, OPS>())
        } else {
            Err(floats_only(name, dst.dtype))
        }
    )
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
    dispatch_in!(DTYPES, "compare", lhs.dtype, T => {
        let f = op.fn_of::<T>();
        map2::<T, u8>("compare", lhs, rhs, dst, move |a, b| u8::from(f(a, b)))
    })
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
        let v = [
            inside(cond.layout, sc.len())?,
            inside(t.layout, st.len())?,
            inside(f.layout, sf.len())?,
            inside(dst.layout, d.len())?,
        ];
        // SAFETY: NOTE [Shared elementwise walks]: every view lies inside
        // its slice; the sources are other storages' than the destination.
        unsafe { strided::select(&v, sc.as_ptr(), st.as_ptr(), sf.as_ptr(), d.as_mut_ptr()) };
        Ok(())
    })
}
