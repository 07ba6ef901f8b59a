//! Layer norm's fused kernels ([`Backend::layer_norm`] and
//! [`Backend::layer_norm_backward`], NOTE [Fused families]): rows of a
//! contiguous `[rows, n]` source, f32 and f64, every sum accumulated in
//! f64, two passes over each row (mean, then the centred variance).
//!
//! ```
//! use kael_core::backend::Src;
//! use kael_core::{cpu::norm, DType, Device, Layout, Storage};
//! let dev = Device::cpu();
//! let (x, y, st) = (Storage::zeroed(8, &dev)?, Storage::zeroed(8, &dev)?, Storage::zeroed(8, &dev)?);
//! x.write("doc")?.bytes_mut().copy_from_slice(bytemuck::cast_slice(&[1.0f32, 3.0]));
//! let (l, ls) = (Layout::contiguous(&[1, 2])?, Layout::contiguous(&[1, 2])?);
//! let f = |s, l| Src { storage: s, layout: l, dtype: DType::F32 };
//! norm::layer_norm(f(&x, &l), None, None, 0.0, f(&y, &l), f(&st, &ls))?;
//! let g = y.read("doc")?;
//! assert_eq!(bytemuck::cast_slice::<u8, f32>(g.bytes()), &[-1.0, 1.0]);
//! # Ok::<(), kael_core::Error>(())
//! ```
//!
//! [`Backend::layer_norm`]: crate::backend::Backend::layer_norm
//! [`Backend::layer_norm_backward`]: crate::backend::Backend::layer_norm_backward

use crate::backend::{Dst, Src, contract};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::storage::{typed, typed_mut};
use alloc::vec::Vec;

/// A float the kernels read and write, through f64 (also the softmax
/// backward's, `super::softmax_grad`).
pub(crate) trait NormFloat: bytemuck::Pod {
    fn to(self) -> f64;
    fn from_f64(v: f64) -> Self;
}

impl NormFloat for f32 {
    fn to(self) -> f64 {
        <f64 as From<f32>>::from(self)
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}

impl NormFloat for f64 {
    fn to(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
}

/// The `len` elements of `t` from its offset (`op` names the kernel in
/// the error).
pub(super) fn elems<'a, T: bytemuck::Pod>(
    op: &'static str,
    bytes: &'a [u8],
    t: &Src<'_>,
    len: usize,
) -> Result<&'a [T]> {
    let off = t.layout.offset();
    typed::<T>(bytes)?
        .get(off..off.saturating_add(len))
        .ok_or(past_storage(op))
}

/// Mutable [`elems`].
pub(super) fn elems_mut<'a, T: bytemuck::Pod>(
    op: &'static str,
    bytes: &'a mut [u8],
    t: &Src<'_>,
    len: usize,
) -> Result<&'a mut [T]> {
    let off = t.layout.offset();
    typed_mut::<T>(bytes)?
        .get_mut(off..off.saturating_add(len))
        .ok_or(past_storage(op))
}

fn past_storage(op: &'static str) -> Error {
    Error::InvalidArgument {
        op,
        reason: "an operand's layout runs past its storage; this is a bug in the caller",
    }
}

/// The reference [`Backend::layer_norm`](crate::backend::Backend::layer_norm).
///
/// # Errors
/// As [`contract::layer_norm`]: [`Error::InvalidArgument`] for operands
/// outside the family's contract, [`Error::UnsupportedDType`] for dtypes
/// other than f32 and f64.
pub fn layer_norm(
    src: Src<'_>,
    weight: Option<Src<'_>>,
    bias: Option<Src<'_>>,
    eps: f64,
    dst: Dst<'_>,
    stats: Dst<'_>,
) -> Result<()> {
    let (rows, n) = contract::layer_norm(src, weight, bias, dst, stats)?;
    match src.dtype {
        DType::F32 => forward::<f32>(src, weight, bias, eps, dst, stats, rows, n),
        _ => forward::<f64>(src, weight, bias, eps, dst, stats, rows, n),
    }
}

#[allow(clippy::too_many_arguments)]
fn forward<T: NormFloat>(
    src: Src<'_>,
    weight: Option<Src<'_>>,
    bias: Option<Src<'_>>,
    eps: f64,
    dst: Dst<'_>,
    stats: Dst<'_>,
    rows: usize,
    n: usize,
) -> Result<()> {
    let op = "layer_norm";
    let total = rows.saturating_mul(n);
    let gs = src.storage.read(op)?;
    let x = elems::<T>(op, gs.bytes(), &src, total)?;
    let gw = weight.map(|w| w.storage.read(op)).transpose()?;
    let gb = bias.map(|b| b.storage.read(op)).transpose()?;
    let w = match (&gw, &weight) {
        (Some(g), Some(t)) => Some(elems::<T>(op, g.bytes(), t, n)?),
        _ => None,
    };
    let b = match (&gb, &bias) {
        (Some(g), Some(t)) => Some(elems::<T>(op, g.bytes(), t, n)?),
        _ => None,
    };
    let mut gd = dst.storage.write(op)?;
    let y = elems_mut::<T>(op, gd.bytes_mut(), &dst, total)?;
    let mut gst = stats.storage.write(op)?;
    let st = elems_mut::<T>(op, gst.bytes_mut(), &stats, rows.saturating_mul(2))?;
    layer_norm_rows(x, w, b, eps, y, st, rows, n);
    Ok(())
}

/// Layer norm of `rows` rows of `n` (NOTE [Slice-level kernels] in
/// [`super::index`]): `x`, `y` hold `rows * n`, `w`, `b` `n`, `st` `2 *
/// rows` elements, all contiguous (the contract's shapes).
#[allow(clippy::too_many_arguments)]
pub(crate) fn layer_norm_rows<T: NormFloat>(
    x: &[T],
    w: Option<&[T]>,
    b: Option<&[T]>,
    eps: f64,
    y: &mut [T],
    st: &mut [T],
    rows: usize,
    n: usize,
) {
    if n == 0 {
        return;
    }
    for r in 0..rows {
        let xr = &x[r * n..(r + 1) * n];
        let mean = xr.iter().map(|v| v.to()).sum::<f64>() / n as f64;
        let var = xr
            .iter()
            .map(|v| (v.to() - mean) * (v.to() - mean))
            .sum::<f64>()
            / n as f64;
        let rstd = 1.0 / libm::sqrt(var + eps);
        for (j, o) in y[r * n..(r + 1) * n].iter_mut().enumerate() {
            let mut v = (xr[j].to() - mean) * rstd;
            if let Some(w) = w {
                v *= w[j].to();
            }
            if let Some(b) = b {
                v += b[j].to();
            }
            *o = T::from_f64(v);
        }
        st[2 * r] = T::from_f64(mean);
        st[2 * r + 1] = T::from_f64(rstd);
    }
}

/// The reference [`Backend::layer_norm_backward`](crate::backend::Backend::layer_norm_backward).
///
/// # Errors
/// As [`layer_norm`].
pub fn layer_norm_backward(
    grad: Src<'_>,
    src: Src<'_>,
    stats: Src<'_>,
    weight: Option<Src<'_>>,
    dx: Dst<'_>,
    dwb: Dst<'_>,
) -> Result<()> {
    let (rows, n) = contract::layer_norm_backward(grad, src, stats, weight, dx, dwb)?;
    match src.dtype {
        DType::F32 => backward::<f32>(grad, src, stats, weight, dx, dwb, rows, n),
        _ => backward::<f64>(grad, src, stats, weight, dx, dwb, rows, n),
    }
}

#[allow(clippy::too_many_arguments)]
fn backward<T: NormFloat>(
    grad: Src<'_>,
    src: Src<'_>,
    stats: Src<'_>,
    weight: Option<Src<'_>>,
    dx: Dst<'_>,
    dwb: Dst<'_>,
    rows: usize,
    n: usize,
) -> Result<()> {
    let op = "layer_norm";
    let total = rows.saturating_mul(n);
    let (gg, gs, gst) = (
        grad.storage.read(op)?,
        src.storage.read(op)?,
        stats.storage.read(op)?,
    );
    let g = elems::<T>(op, gg.bytes(), &grad, total)?;
    let x = elems::<T>(op, gs.bytes(), &src, total)?;
    let st = elems::<T>(op, gst.bytes(), &stats, rows.saturating_mul(2))?;
    let gw = weight.map(|w| w.storage.read(op)).transpose()?;
    let w = match (&gw, &weight) {
        (Some(gw), Some(t)) => Some(elems::<T>(op, gw.bytes(), t, n)?),
        _ => None,
    };
    let mut gdx = dx.storage.write(op)?;
    let d = elems_mut::<T>(op, gdx.bytes_mut(), &dx, total)?;
    let mut sums = Vec::new();
    sums.try_reserve_exact(2 * n)
        .map_err(|_| Error::OutOfMemory {
            requested: n.saturating_mul(16),
            available: None,
        })?;
    sums.resize(2 * n, 0.0f64);
    let mut gdwb = dwb.storage.write(op)?;
    let out = elems_mut::<T>(op, gdwb.bytes_mut(), &dwb, 2 * n)?;
    layer_norm_backward_rows([g, x, st], w, d, out, &mut sums, rows, n);
    Ok(())
}

/// Layer norm's backward over `rows` rows of `n` (NOTE [Slice-level
/// kernels] in [`super::index`]): `[grad, src, stats]`, `w`, then `d`
/// (`rows * n`), `dwb` (`2 * n`) and the f64 scratch `sums` (`2 * n`,
/// zeroed here).
#[allow(clippy::too_many_arguments)]
pub(crate) fn layer_norm_backward_rows<T: NormFloat>(
    [g, x, st]: [&[T]; 3],
    w: Option<&[T]>,
    d: &mut [T],
    dwb: &mut [T],
    sums: &mut [f64],
    rows: usize,
    n: usize,
) {
    sums.fill(0.0);
    for r in 0..rows {
        let (mean, rstd) = (st[2 * r].to(), st[2 * r + 1].to());
        let (gr, xr) = (&g[r * n..(r + 1) * n], &x[r * n..(r + 1) * n]);
        let (mut m1, mut m2) = (0.0f64, 0.0f64);
        for j in 0..n {
            let xh = (xr[j].to() - mean) * rstd;
            let gh = gr[j].to() * w.map_or(1.0, |w| w[j].to());
            m1 += gh;
            m2 += gh * xh;
            sums[j] += gr[j].to() * xh;
            sums[n + j] += gr[j].to();
        }
        let (m1, m2) = (m1 / n as f64, m2 / n as f64);
        for (j, o) in d[r * n..(r + 1) * n].iter_mut().enumerate() {
            let xh = (xr[j].to() - mean) * rstd;
            let gh = gr[j].to() * w.map_or(1.0, |w| w[j].to());
            *o = T::from_f64(rstd * (gh - m1 - xh * m2));
        }
    }
    for (o, s) in dwb.iter_mut().zip(sums.iter()) {
        *o = T::from_f64(*s);
    }
}
