//! Reduction kernels: sum/max/min/prod over dims, argmax/argmin, softmax.
//!
//! Every kernel reads its source through any strides (transposed, stepped,
//! broadcast with stride 0) and writes any destination layout of the
//! expected shape. [`reduce`] and [`arg_reduce`] accumulate into scratch
//! memory first (f64 for float sources, i64 for integer sources), visiting
//! the source in row-major order (so results are deterministic), then drop
//! the read access before writing; a destination that is exactly the source
//! (NOTE [Aliasing contract]) is therefore still correct. [`softmax`] works
//! one row at a time, reading the whole row before writing it.
//!
//! NOTE [f32 accumulation]
//! The reference precision is f64 accumulation for every float source: f32
//! sums and softmax rows are computed in f64 and rounded once. A Cortex-M4F
//! has a single-precision FPU only, so there every f64 operation is a
//! soft-float call (code size and time). A backend built with `F32_ACC`
//! (`CpuBackend<_, _, true>`, [`reduce_in`], [`softmax_in`]) computes f32
//! sources in f32 instead: sums use Kahan compensation (error bound about
//! `2 eps * sum |x|`, independent of the length, against `n eps` for a plain
//! f32 loop), softmax uses `expf`/`logf` and a compensated row sum; its
//! relative error is about `|x - max| * eps` (the f32 rounding of `x - max`),
//! under 1e-5 while `|x - max| < 80`. So results differ from the reference
//! in the last bits; every other dtype is unchanged. `Device::cpu()` never
//! uses it.

use crate::backend::{ArgReduceOp, Dst, ReduceOp, Src, contract};
use crate::cpu::elementwise::aliases;
use crate::cpu::select::dtypes;
use crate::cpu::strided::{self, Dim, Strided, Walk};
use crate::dispatch_in;
use crate::dtype::{DType, Scalar};
use crate::error::{Error, Result};
use crate::layout::{Layout, walk};
use crate::shape::MAX_RANK;
use crate::storage::{typed, typed_mut};
use alloc::vec::Vec;
use half::{bf16, f16};

#[path = "reduce_f32.rs"]
mod f32acc;
use f32acc::softmax_f32;
pub(crate) use f32acc::{Kahan32, softmax_row_f32};

/// Storage types the reduction kernels read and write, with exact
/// conversions to and from the integer accumulator.
pub(crate) trait Elem: Scalar {
    /// As i64 (exact for integers; floats truncate).
    fn to_i64(self) -> i64;
    /// From i64 (integers wrap, as PyTorch's casts do).
    fn from_i64(v: i64) -> Self;
    /// As f32 (rounded; exact for f32).
    fn to_f32(self) -> f32 {
        Scalar::to_f64(self) as f32
    }
    /// From f32 (as [`Scalar::from_f64`] would convert it).
    fn from_f32(v: f32) -> Self {
        Self::from_f64(v as f64)
    }
}

macro_rules! elem_int {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            fn to_i64(self) -> i64 {
                self as i64
            }
            fn from_i64(v: i64) -> Self {
                v as $t
            }
        }
    )*};
}
elem_int!(i64, i32, i16, i8, u8);

macro_rules! elem_float {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            fn to_i64(self) -> i64 {
                Scalar::to_f64(self) as i64
            }
            fn from_i64(v: i64) -> Self {
                <$t as Scalar>::from_f64(v as f64)
            }
        }
    )*};
}
elem_float!(f64, f16, bf16);

impl Elem for f32 {
    fn to_i64(self) -> i64 {
        self as i64
    }
    fn from_i64(v: i64) -> Self {
        v as f32
    }
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(v: f32) -> Self {
        v
    }
}

/// An accumulator: f64 for float sources (every float dtype converts to it
/// exactly), i64 for integer sources (exact, wrapping on overflow).
pub(crate) trait Acc: Copy {
    fn load<T: Elem>(x: T) -> Self;
    fn store<T: Elem>(self) -> T;
    /// The starting value (max/min of an empty set never reaches a store:
    /// callers refuse it).
    fn identity(op: ReduceOp) -> Self;
    fn combine(self, op: ReduceOp, x: Self) -> Self;
}

impl Acc for f64 {
    fn load<T: Elem>(x: T) -> Self {
        x.to_f64()
    }
    fn store<T: Elem>(self) -> T {
        T::from_f64(self)
    }
    fn identity(op: ReduceOp) -> Self {
        match op {
            ReduceOp::Sum => 0.0,
            ReduceOp::Prod => 1.0,
            ReduceOp::Max => f64::NEG_INFINITY,
            ReduceOp::Min => f64::INFINITY,
        }
    }
    fn combine(self, op: ReduceOp, x: Self) -> Self {
        match op {
            ReduceOp::Sum => self + x,
            ReduceOp::Prod => self * x,
            // NaN propagates: once `self` is NaN no comparison replaces it.
            ReduceOp::Max => {
                if x.is_nan() || x > self {
                    x
                } else {
                    self
                }
            }
            ReduceOp::Min => {
                if x.is_nan() || x < self {
                    x
                } else {
                    self
                }
            }
        }
    }
}

impl Acc for i64 {
    fn load<T: Elem>(x: T) -> Self {
        x.to_i64()
    }
    fn store<T: Elem>(self) -> T {
        T::from_i64(self)
    }
    fn identity(op: ReduceOp) -> Self {
        match op {
            ReduceOp::Sum => 0,
            ReduceOp::Prod => 1,
            ReduceOp::Max => i64::MIN,
            ReduceOp::Min => i64::MAX,
        }
    }
    fn combine(self, op: ReduceOp, x: Self) -> Self {
        match op {
            ReduceOp::Sum => self.wrapping_add(x),
            ReduceOp::Prod => self.wrapping_mul(x),
            ReduceOp::Max => self.max(x),
            ReduceOp::Min => self.min(x),
        }
    }
}

/// `n` copies of `value`, failing with [`Error::OutOfMemory`] instead of aborting.
fn scratch<A: Copy>(n: usize, value: A) -> Result<Vec<A>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
        requested: n.saturating_mul(core::mem::size_of::<A>()),
        available: None,
    })?;
    v.resize(n, value);
    Ok(v)
}

/// Reduces `dims` of `src` into `dst` (same rank, those dims of size 1).
///
/// Sums and products of float sources accumulate in f64, of integer
/// sources in wrapping i64; max and min propagate NaN. An empty reduced
/// dim gives 0 (sum) or 1 (prod). `dst.dtype` may differ from
/// `src.dtype` (the tensor layer sums integers into `I64`, as PyTorch
/// does); the accumulator converts to it as [`cast`](super::elementwise::cast) would.
///
/// # Errors
/// A destination of the wrong shape, unsorted or repeated dims, bool
/// sources, max/min over an empty dim ([`Error::InvalidArgument`]), storage
/// access conflicts.
pub fn reduce(op: ReduceOp, src: Src<'_>, dims: &[usize], dst: Dst<'_>) -> Result<()> {
    reduce_in::<{ dtypes::ALL }, false>(op, src, dims, dst)
}

/// [`reduce`] for the dtypes in `DTYPES` only (NOTE [Kernel selection]).
/// With `F32_ACC`, f32 sources accumulate in f32 (sums Kahan-compensated)
/// instead of f64; see NOTE [f32 accumulation].
///
/// # Errors
/// As [`reduce`], and [`Error::UnsupportedDType`] for a dtype outside
/// `DTYPES`.
pub fn reduce_in<const DTYPES: u16, const F32_ACC: bool>(
    op: ReduceOp,
    src: Src<'_>,
    dims: &[usize],
    dst: Dst<'_>,
) -> Result<()> {
    let name = op.name();
    contract::reduce(op, src, dims, dst)?;
    if F32_ACC && src.dtype == DType::F32 {
        reduce_with::<Kahan32, DTYPES>(op, name, src, dims, dst)
    } else if src.dtype.is_float() {
        reduce_with::<f64, DTYPES>(op, name, src, dims, dst)
    } else {
        reduce_with::<i64, DTYPES>(op, name, src, dims, dst)
    }
}

fn reduce_with<A: Acc, const DTYPES: u16>(
    op: ReduceOp,
    name: &'static str,
    src: Src<'_>,
    dims: &[usize],
    dst: Dst<'_>,
) -> Result<()> {
    let mut acc = scratch(dst.layout.numel(), A::identity(op))?;
    {
        let g = src.storage.read(name)?;
        dispatch_in!(DTYPES, name, src.dtype, T => {
            accumulate(op, typed::<T>(g.bytes())?, src.layout, dst.layout, dims, &mut acc)
        })?;
    }
    store::<A, DTYPES>(name, &acc, dst)
}

/// Every reduction's walk: combines each element of `s` (read through
/// `src`) into its slot of `acc` (dst's row-major order, reduced `dims`
/// collapsed) in `src`'s row-major order, by [`accumulate_strided`].
/// `acc` starts at [`Acc::identity`].
///
/// # Errors
/// [`Error::InvalidArgument`] when `src` reaches past `s`.
pub(crate) fn accumulate<T: Elem, A: Acc>(
    op: ReduceOp,
    s: &[T],
    src: &Layout,
    dst: &Layout,
    dims: &[usize],
    acc: &mut [A],
) -> Result<()> {
    let src = Strided::within(op.name(), src, s.len())?;
    let mask = dims
        .iter()
        .fold(0u32, |m, &d| m | 1u32.checked_shl(d as u32).unwrap_or(0));
    // SAFETY: every element `src` reaches lies inside `s` (checked above).
    unsafe { accumulate_strided(op, s.as_ptr(), src, dst.shape(), mask, acc) };
    Ok(())
}

/// NOTE [One reduction walk]
/// The arithmetic of every reduction, eager or replayed: each source
/// element (read through `src`) is combined with [`Acc::combine`] into
/// its slot of `acc`, the row-major index of its output position (dst's
/// contiguous strides, 0 on the dims whose bits `mask` sets), walking the
/// source in row-major order ([`Walk`]: the same order whatever dims
/// merge). The eager kernel and a plan's replay both call this one
/// function, so their bits agree by construction.
///
/// # Safety
/// Every element `src` reaches is valid to read at `s`.
#[inline]
pub(crate) unsafe fn accumulate_strided<T: Elem, A: Acc, D: Dim>(
    op: ReduceOp,
    s: *const T,
    src: Strided<'_, D>,
    dst_shape: &[D],
    mask: u32,
    acc: &mut [A],
) {
    let mut slot = [0usize; MAX_RANK];
    let mut n = 1usize;
    for (k, &dk) in dst_shape.iter().enumerate().rev() {
        if mask & (1 << k) == 0
            && let Some(x) = slot.get_mut(k)
        {
            *x = n;
        }
        n = n.saturating_mul(dk.get());
    }
    let w = Walk::from_fn(src.shape, [src.offset, 0], |k, dim| {
        if k == 0 {
            src.strides.get(dim).map_or(0, |&x| x.get())
        } else {
            slot.get(dim).copied().unwrap_or(0)
        }
    });
    w.rows(|[mut os, mut oa], [ss, sa], len| {
        for _ in 0..len {
            // SAFETY: the caller's (the walk stays inside `src`'s reach).
            let x = A::load(unsafe { *s.wrapping_add(os) });
            if let Some(y) = acc.get_mut(oa) {
                *y = y.combine(op, x);
            }
            (os, oa) = (os.wrapping_add(ss), oa.wrapping_add(sa));
        }
    });
}

/// Stores `vals` (in dst's row-major order) through `dst`, by
/// [`store_strided`].
///
/// # Errors
/// [`Error::InvalidArgument`] when `dst` reaches past `d`.
pub(crate) fn store_into<T: Elem, A: Acc>(vals: &[A], d: &mut [T], dst: &Layout) -> Result<()> {
    let dst = Strided::within("reduce", dst, d.len())?;
    // SAFETY: every element `dst` reaches lies inside `d` (checked above).
    unsafe { store_strided(vals, d.as_mut_ptr(), dst) };
    Ok(())
}

/// Stores `vals` (dst's row-major order) through `dst` (NOTE [One
/// reduction walk]).
///
/// # Safety
/// Every element `dst` reaches is valid to write at `d`.
#[inline]
pub(crate) unsafe fn store_strided<T: Elem, A: Acc, D: Dim>(
    vals: &[A],
    d: *mut T,
    dst: Strided<'_, D>,
) {
    let mut i = 0;
    strided::rows(dst.shape, &[dst], |[mut od], [sd], len| {
        for _ in 0..len {
            if let Some(y) = vals.get(i) {
                // SAFETY: the caller's.
                unsafe { *d.wrapping_add(od) = y.store::<T>() };
            }
            (od, i) = (od.wrapping_add(sd), i + 1);
        }
    });
}

/// Writes `vals` (in dst's row-major order) into `dst`.
fn store<A: Acc, const DTYPES: u16>(name: &'static str, vals: &[A], dst: Dst<'_>) -> Result<()> {
    dispatch_in!(DTYPES, name, dst.dtype, T => {
        let mut g = dst.storage.write(name)?;
        store_into(vals, typed_mut::<T>(g.bytes_mut())?, dst.layout)
    })
}

/// `src`'s layout with `dim` cut to size 1: one position per row along `dim`.
fn rows_of(l: &Layout, dim: usize) -> Layout {
    let mut shape = l.shape().clone();
    shape[dim] = 1;
    Layout::from_dims(shape, l.strides().clone(), l.offset())
}

/// Index of the first max/min along `dim` into an `I64` `dst` (which has
/// `dim` set to 1). NaN counts as larger and smaller than everything, so
/// the first NaN wins, as in PyTorch.
///
/// # Errors
/// A destination of the wrong shape or dtype, a bool source, an empty
/// `dim` ([`Error::InvalidArgument`]), storage access conflicts.
pub fn arg_reduce(op: ArgReduceOp, src: Src<'_>, dim: usize, dst: Dst<'_>) -> Result<()> {
    arg_reduce_in::<{ dtypes::ALL }>(op, src, dim, dst)
}

/// [`arg_reduce`] for sources with a dtype in `DTYPES` only (NOTE [Kernel
/// selection]); the `I64` destination is always allowed.
///
/// # Errors
/// As [`arg_reduce`], and [`Error::UnsupportedDType`] for a source dtype
/// outside `DTYPES`.
pub fn arg_reduce_in<const DTYPES: u16>(
    op: ArgReduceOp,
    src: Src<'_>,
    dim: usize,
    dst: Dst<'_>,
) -> Result<()> {
    let name = op.name();
    contract::arg_reduce(op, src, dim, dst)?;
    let g = src.storage.read(name)?;
    let mut gd = dst.storage.write(name)?;
    let d = typed_mut::<i64>(gd.bytes_mut())?;
    dispatch_in!(DTYPES, name, src.dtype, T => {
        let s = typed::<T>(g.bytes())?;
        arg_reduce_slices(op, (s, src.layout), dim, (d, dst.layout));
        Ok(())
    })
}

/// [`arg_reduce`] on slices (NOTE [Slice-level kernels] in
/// [`super::index`]): the contract has been checked by the caller.
pub(crate) fn arg_reduce_slices<T: Scalar>(
    op: ArgReduceOp,
    (s, sl): (&[T], &Layout),
    dim: usize,
    (d, dl): (&mut [i64], &Layout),
) {
    let len = sl.shape()[dim];
    let rows = rows_of(sl, dim);
    let step = sl.strides()[dim];
    walk([&rows, dl], |[base, od]| {
        d[od] = arg_row(op, s, base, len, step);
    });
}

/// The index of the first max/min (or NaN) of one row.
#[inline]
fn arg_row<T: Scalar>(op: ArgReduceOp, s: &[T], base: usize, len: usize, step: usize) -> i64 {
    let mut best = s[base];
    let mut idx = 0;
    for k in 1..len {
        if best.is_nan() {
            break;
        }
        let x = s[base + k * step];
        let better = x.is_nan()
            || match op {
                ArgReduceOp::ArgMax => x > best,
                ArgReduceOp::ArgMin => x < best,
            };
        if better {
            best = x;
            idx = k;
        }
    }
    idx as i64
}

/// Softmax or log-softmax along `dim`, computed in f64 for every float
/// dtype and stable for large inputs: `e^(x-m) / sum e^(x-m)` and
/// `x - m - ln(sum e^(x-m))` with `m` the row's max. A NaN in a row makes
/// the row NaN; a row of `-inf` is NaN too (as in PyTorch).
///
/// # Errors
/// A destination of another shape or dtype, non-float dtypes
/// ([`Error::UnsupportedDType`]), storage access conflicts.
pub fn softmax(src: Src<'_>, dim: usize, log: bool, dst: Dst<'_>) -> Result<()> {
    softmax_in::<{ dtypes::ALL }, false>(src, dim, log, dst)
}

/// [`softmax`] for the dtypes in `DTYPES` only (NOTE [Kernel selection]).
/// With `F32_ACC`, f32 rows are computed in f32 (`expf`, `logf`, a
/// Kahan-compensated sum) instead of f64; see NOTE [f32 accumulation].
///
/// # Errors
/// As [`softmax`], and [`Error::UnsupportedDType`] for a dtype outside
/// `DTYPES`.
pub fn softmax_in<const DTYPES: u16, const F32_ACC: bool>(
    src: Src<'_>,
    dim: usize,
    log: bool,
    dst: Dst<'_>,
) -> Result<()> {
    let name = if log { "log_softmax" } else { "softmax" };
    contract::softmax(src, dim, log, dst)?;
    match src.dtype {
        DType::F32 if F32_ACC => {
            if dtypes::contains(DTYPES, DType::F32) {
                softmax_f32(name, src, dim, log, dst)
            } else {
                Err(crate::cpu::select::not_enabled(name, DType::F32))
            }
        }
        DType::F32 => dispatch_in!(@arm DTYPES, name, F32, T = f32, {
            softmax_typed::<T>(name, src, dim, log, dst)
        }),
        DType::F64 => dispatch_in!(@arm DTYPES, name, F64, T = f64, {
            softmax_typed::<T>(name, src, dim, log, dst)
        }),
        DType::F16 => dispatch_in!(@arm DTYPES, name, F16, T = f16, {
            softmax_typed::<T>(name, src, dim, log, dst)
        }),
        DType::BF16 => dispatch_in!(@arm DTYPES, name, BF16, T = bf16, {
            softmax_typed::<T>(name, src, dim, log, dst)
        }),
        _ => Err(Error::UnsupportedDType {
            op: name,
            dtype: src.dtype,
            supported: "f32, f64, f16, bf16",
        }),
    }
}

/// NOTE [One softmax row]
/// The arithmetic of one softmax (or log-softmax) row, in f64: the max
/// (NaN wins), the sum of `exp(x - max)` in order, then each output. The
/// eager kernel and a plan's replay both call it, so their bits agree; `x`
/// must give the same value every time it is asked (the eager kernel
/// reads the row into scratch first, a replay reads a source it never
/// writes or that it writes only at `k` after reading `x(k)` for the last
/// time).
#[inline]
pub(crate) fn softmax_row_f64(
    len: usize,
    log: bool,
    x: impl Fn(usize) -> f64,
    mut y: impl FnMut(usize, f64),
) {
    let mut m = f64::NEG_INFINITY;
    for k in 0..len {
        let v = x(k);
        if v.is_nan() || v > m {
            m = v;
        }
    }
    let mut sum = 0.0;
    for k in 0..len {
        sum += libm::exp(x(k) - m);
    }
    if log {
        let log_sum = libm::log(sum);
        for k in 0..len {
            y(k, (x(k) - m) - log_sum);
        }
    } else {
        for k in 0..len {
            y(k, libm::exp(x(k) - m) / sum);
        }
    }
}

/// NOTE [One softmax walk]
/// Every row of a softmax along `dim`, read in place through `v[0]` and
/// written through `v[1]` by the row functions (NOTE [One softmax row]):
/// a row's element `k` is written only after its last read, so an
/// exactly-in-place softmax is safe. The eager kernels and a plan's replay
/// both call these, in f64 ([`softmax_strided_f64`]) or, with f32
/// accumulation, in f32 ([`softmax_strided_f32`]).
///
/// # Safety
/// Every element each view reaches is valid (reads at `a`, writes at
/// `d`), and `a` is disjoint from `d` or exactly it (same pointer and
/// view); `dim` is a dimension of both views.
#[inline]
pub(crate) unsafe fn softmax_strided_f64<T: Scalar, D: Dim>(
    v: &[Strided<'_, D>; 2],
    dim: usize,
    log: bool,
    a: *const T,
    d: *mut T,
) {
    softmax_walk(v, dim, |len, [oa, od], [sa, sd]| {
        // SAFETY: the caller's, for this row's elements.
        let x = |k: usize| unsafe { *a.wrapping_add(oa + k * sa) }.to_f64();
        // SAFETY: as for `x`, for the destination.
        let y = |k: usize, r: f64| unsafe { *d.wrapping_add(od + k * sd) = T::from_f64(r) };
        softmax_row_f64(len, log, x, y);
    });
}

/// [`softmax_strided_f64`] in f32 (NOTE [f32 accumulation]).
///
/// # Safety
/// As [`softmax_strided_f64`].
#[inline]
pub(crate) unsafe fn softmax_strided_f32<D: Dim>(
    v: &[Strided<'_, D>; 2],
    dim: usize,
    log: bool,
    a: *const f32,
    d: *mut f32,
) {
    softmax_walk(v, dim, |len, [oa, od], [sa, sd]| {
        // SAFETY: the caller's, for this row's elements.
        let x = |k: usize| unsafe { *a.wrapping_add(oa + k * sa) };
        // SAFETY: as for `x`, for the destination.
        let y = |k: usize, r: f32| unsafe { *d.wrapping_add(od + k * sd) = r };
        softmax_row_f32(len, log, x, y);
    });
}

/// Calls `row(len, [source offset, destination offset], [strides along
/// dim])` for every row along `dim` (NOTE [One softmax walk]).
#[inline(always)]
fn softmax_walk<D: Dim>(
    v: &[Strided<'_, D>; 2],
    dim: usize,
    mut row: impl FnMut(usize, [usize; 2], [usize; 2]),
) {
    let [a, d] = v;
    let len = a.shape.get(dim).map_or(0, |n| n.get());
    if len == 0 {
        return;
    }
    let stride = |o: &Strided<'_, D>| o.strides.get(dim).map_or(0, |x| x.get());
    let along = [stride(a), stride(d)];
    // The walk over every row's start: the shape with `dim` set to 1.
    let mut outer = [1usize; MAX_RANK];
    let rank = a.shape.len().min(MAX_RANK);
    for (o, n) in outer.iter_mut().zip(a.shape) {
        *o = n.get();
    }
    if let Some(n) = outer.get_mut(dim) {
        *n = 1;
    }
    let rows = Walk::from_fn(&outer[..rank], [a.offset, d.offset], |k, x| {
        v[k].strides.get(x).map_or(0, |s| s.get())
    });
    rows.each(rows.rank, |o| row(len, o, along));
}

fn softmax_typed<T: Scalar>(
    name: &'static str,
    src: Src<'_>,
    dim: usize,
    log: bool,
    dst: Dst<'_>,
) -> Result<()> {
    let gs = if aliases(&src, &dst) {
        None
    } else {
        Some(src.storage.read(name)?)
    };
    let mut gd = dst.storage.write(name)?;
    let d = typed_mut::<T>(gd.bytes_mut())?;
    let s = gs.as_ref().map(|g| typed::<T>(g.bytes())).transpose()?;
    let v = [
        Strided::within(name, src.layout, s.map_or(d.len(), <[T]>::len))?,
        Strided::within(name, dst.layout, d.len())?,
    ];
    let pd = d.as_mut_ptr();
    let pa = s.map_or(pd.cast_const(), <[T]>::as_ptr);
    // SAFETY: NOTE [One softmax walk]: both views lie inside their slices,
    // and the source is another storage's or exactly the destination
    // (read through its pointer); `dim` passed the contract.
    unsafe { softmax_strided_f64(&v, dim, log, pa, pd) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::storage::Storage;

    fn storage_of<T: bytemuck::Pod>(data: &[T]) -> Storage {
        let s = Storage::zeroed(core::mem::size_of_val(data), &Device::cpu()).unwrap();
        s.write("test")
            .unwrap()
            .bytes_mut()
            .copy_from_slice(bytemuck::cast_slice(data));
        s
    }

    fn read<T: bytemuck::Pod>(s: &Storage) -> Vec<T> {
        typed::<T>(s.read("test").unwrap().bytes())
            .unwrap()
            .to_vec()
    }

    #[test]
    fn sum_of_transposed_columns_visits_every_element_once() {
        // [[0,1,2],[3,4,5]] viewed transposed as [3,2]; summing dim 1 gives
        // the column sums of the original: [0+3, 1+4, 2+5].
        let s = storage_of(&[0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let l = Layout::contiguous(&[2, 3])
            .unwrap()
            .transpose(0, 1)
            .unwrap();
        let d = storage_of(&[0.0f32; 3]);
        let dl = Layout::contiguous(&[3, 1]).unwrap();
        let src = Src {
            storage: &s,
            layout: &l,
            dtype: DType::F32,
        };
        let dst = Src {
            storage: &d,
            layout: &dl,
            dtype: DType::F32,
        };
        reduce(ReduceOp::Sum, src, &[1], dst).unwrap();
        assert_eq!(read::<f32>(&d), [3.0, 5.0, 7.0]);
    }

    #[test]
    fn reduce_over_no_dims_copies() {
        let s = storage_of(&[7i32, -2]);
        let l = Layout::contiguous(&[2]).unwrap();
        let d = storage_of(&[0i32; 2]);
        let src = Src {
            storage: &s,
            layout: &l,
            dtype: DType::I32,
        };
        let dst = Src {
            storage: &d,
            layout: &l,
            dtype: DType::I32,
        };
        reduce(ReduceOp::Max, src, &[], dst).unwrap();
        assert_eq!(read::<i32>(&d), [7, -2]);
    }

    #[test]
    fn reduce_into_the_source_itself_is_correct() {
        // NOTE [Aliasing contract]: dst exactly src (no dims reduced).
        let s = storage_of(&[1.5f64, 2.5]);
        let l = Layout::contiguous(&[2]).unwrap();
        let src = Src {
            storage: &s,
            layout: &l,
            dtype: DType::F64,
        };
        reduce(ReduceOp::Sum, src, &[], src).unwrap();
        assert_eq!(read::<f64>(&s), [1.5, 2.5]);
    }

    #[test]
    fn reduce_rejects_a_destination_of_the_wrong_shape() {
        let s = storage_of(&[0.0f32; 6]);
        let l = Layout::contiguous(&[2, 3]).unwrap();
        let d = storage_of(&[0.0f32; 3]);
        let dl = Layout::contiguous(&[3]).unwrap();
        let src = Src {
            storage: &s,
            layout: &l,
            dtype: DType::F32,
        };
        let dst = Src {
            storage: &d,
            layout: &dl,
            dtype: DType::F32,
        };
        assert!(matches!(
            reduce(ReduceOp::Sum, src, &[0], dst),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(matches!(
            reduce(ReduceOp::Sum, src, &[1, 0], dst),
            Err(Error::InvalidArgument { .. })
        ));
    }

    #[test]
    fn i64_sums_are_exact_beyond_f64_precision() {
        // 2^53 + 1 is not representable in f64; an f64 accumulator would lose the 1.
        let big = (1i64 << 53) + 1;
        let s = storage_of(&[big, 0]);
        let l = Layout::contiguous(&[2]).unwrap();
        let d = storage_of(&[0i64]);
        let dl = Layout::contiguous(&[1]).unwrap();
        let src = Src {
            storage: &s,
            layout: &l,
            dtype: DType::I64,
        };
        let dst = Src {
            storage: &d,
            layout: &dl,
            dtype: DType::I64,
        };
        reduce(ReduceOp::Sum, src, &[0], dst).unwrap();
        assert_eq!(read::<i64>(&d), [big]);
    }

    #[test]
    fn softmax_in_place_reads_each_row_before_writing_it() {
        // softmax([0, ln 3]) = [1/4, 3/4]
        let s = storage_of(&[0.0f64, libm::log(3.0)]);
        let l = Layout::contiguous(&[2]).unwrap();
        let src = Src {
            storage: &s,
            layout: &l,
            dtype: DType::F64,
        };
        softmax(src, 0, false, src).unwrap();
        let got = read::<f64>(&s);
        assert!((got[0] - 0.25).abs() < 1e-15 && (got[1] - 0.75).abs() < 1e-15);
    }

    #[test]
    fn argmax_writes_only_i64() {
        let s = storage_of(&[1.0f32, 3.0]);
        let l = Layout::contiguous(&[2]).unwrap();
        let d = storage_of(&[0i32]);
        let dl = Layout::contiguous(&[1]).unwrap();
        let src = Src {
            storage: &s,
            layout: &l,
            dtype: DType::F32,
        };
        let dst = Src {
            storage: &d,
            layout: &dl,
            dtype: DType::I32,
        };
        assert!(matches!(
            arg_reduce(ArgReduceOp::ArgMax, src, 0, dst),
            Err(Error::DTypeMismatch { .. })
        ));
    }
}
