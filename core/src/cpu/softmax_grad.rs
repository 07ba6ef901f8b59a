//! Softmax's and log-softmax's fused backward
//! ([`Backend::softmax_backward`], NOTE [Fused families]): rows of
//! contiguous `[rows, n]` operands, f32 and f64, each row's sum
//! accumulated in f64.
//!
//! See [`softmax_backward`] for an example.
//!
//! [`Backend::softmax_backward`]: crate::backend::Backend::softmax_backward

use super::norm::{NormFloat, elems, elems_mut};
use crate::backend::{Dst, Src, contract};
use crate::dtype::DType;
use crate::error::Result;

/// The reference [`Backend::softmax_backward`](crate::backend::Backend::softmax_backward):
/// `dx = y · (g - Σ g·y)`, or with `log` (`out` = log-softmax)
/// `dx = g - e^y · Σ g`, per row.
///
/// # Errors
/// As [`contract::softmax_backward`]: [`Error::InvalidArgument`](crate::Error::InvalidArgument)
/// for operands outside the family's contract,
/// [`Error::UnsupportedDType`](crate::Error::UnsupportedDType) for dtypes
/// other than f32 and f64.
///
/// ```
/// use kael_core::backend::Src;
/// use kael_core::{cpu::softmax_grad, DType, Device, Layout, Storage};
/// let dev = Device::cpu();
/// let (g, y, dx) = (Storage::zeroed(8, &dev)?, Storage::zeroed(8, &dev)?, Storage::zeroed(8, &dev)?);
/// g.write("doc")?.bytes_mut().copy_from_slice(bytemuck::cast_slice(&[1.0f32, 0.0]));
/// y.write("doc")?.bytes_mut().copy_from_slice(bytemuck::cast_slice(&[0.25f32, 0.75]));
/// let l = Layout::contiguous(&[1, 2])?;
/// let f = |s| Src { storage: s, layout: &l, dtype: DType::F32 };
/// // dx = y · (g - Σ g·y) = [0.25 · 0.75, 0.75 · -0.25]
/// softmax_grad::softmax_backward(f(&g), f(&y), false, f(&dx))?;
/// let d = dx.read("doc")?;
/// assert_eq!(bytemuck::cast_slice::<u8, f32>(d.bytes()), &[0.1875, -0.1875]);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn softmax_backward(grad: Src<'_>, out: Src<'_>, log: bool, dx: Dst<'_>) -> Result<()> {
    let (rows, n) = contract::softmax_backward(grad, out, dx)?;
    match out.dtype {
        DType::F32 => rows_of::<f32>(grad, out, log, dx, rows, n),
        _ => rows_of::<f64>(grad, out, log, dx, rows, n),
    }
}

/// The arithmetic of one row of the fused softmax backward, in f64 (as
/// NOTE [One softmax row] in [`super::reduce`]: the eager kernel and a
/// plan's replay share it, so their bits agree). `dx[k]` is written after
/// the row's sum, from `g(k)` and `y(k)`.
#[inline]
pub(crate) fn softmax_backward_row(
    n: usize,
    log: bool,
    g: impl Fn(usize) -> f64,
    y: impl Fn(usize) -> f64,
    mut dx: impl FnMut(usize, f64),
) {
    if log {
        let s: f64 = (0..n).map(&g).sum();
        for k in 0..n {
            dx(k, g(k) - libm::exp(y(k)) * s);
        }
    } else {
        let s: f64 = (0..n).map(|k| g(k) * y(k)).sum();
        for k in 0..n {
            dx(k, y(k) * (g(k) - s));
        }
    }
}

fn rows_of<T: NormFloat>(
    grad: Src<'_>,
    out: Src<'_>,
    log: bool,
    dx: Dst<'_>,
    rows: usize,
    n: usize,
) -> Result<()> {
    let op = "softmax_backward";
    let total = rows.saturating_mul(n);
    let (gg, gy) = (grad.storage.read(op)?, out.storage.read(op)?);
    let g = elems::<T>(op, gg.bytes(), &grad, total)?;
    let y = elems::<T>(op, gy.bytes(), &out, total)?;
    let mut gd = dx.storage.write(op)?;
    let d = elems_mut::<T>(op, gd.bytes_mut(), &dx, total)?;
    softmax_backward_rows(g, y, d, n, log);
    Ok(())
}

/// The fused softmax backward over contiguous rows of `n` (NOTE
/// [Slice-level kernels] in [`super::index`]): the eager kernel and a
/// plan's replay both run it.
pub(crate) fn softmax_backward_rows<T: NormFloat>(
    g: &[T],
    y: &[T],
    d: &mut [T],
    n: usize,
    log: bool,
) {
    if n == 0 {
        return;
    }
    for ((gr, yr), dr) in g
        .chunks_exact(n)
        .zip(y.chunks_exact(n))
        .zip(d.chunks_exact_mut(n))
    {
        softmax_backward_row(
            n,
            log,
            |k| gr[k].to(),
            |k| yr[k].to(),
            |k, v| dr[k] = T::from_f64(v),
        );
    }
}
