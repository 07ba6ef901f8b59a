//! Layer norm through the device's fused kernels ([`Backend::layer_norm`],
//! [`Backend::layer_norm_backward`]) where it has them (NOTE [Fused
//! families]); `None` tells the caller to compose the op instead.
//!
//! [`Backend::layer_norm`]: crate::backend::Backend::layer_norm
//! [`Backend::layer_norm_backward`]: crate::backend::Backend::layer_norm_backward

use crate::backend::Src;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// `src`'s operand view of `t` (contiguous, reshaped to `shape`).
fn flat(t: &Tensor, shape: &[usize]) -> Result<Tensor> {
    t.contiguous()?.reshape(shape)
}

/// Whether an error means "this device has no fused kernel".
fn unsupported(e: &Error) -> bool {
    matches!(e, Error::Unsupported { .. })
}

/// `(y, stats)` of layer norm over the trailing `n` elements of each row
/// through the fused kernel (stats: `[rows, 2]` of mean and 1/σ), or
/// `None` where the dtype or device has none. Runs without recording.
pub(super) fn forward(
    input: &Tensor,
    n: usize,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Option<(Tensor, Tensor)>> {
    let numel = input.numel();
    if !matches!(input.dtype(), DType::F32 | DType::F64) || numel == 0 || n == 0 {
        return Ok(None);
    }
    let rows = numel / n;
    let dev = input.device();
    let x = flat(input, &[rows, n])?;
    let w = weight.map(|w| flat(w, &[n])).transpose()?;
    let b = bias.map(|b| flat(b, &[n])).transpose()?;
    let y = Tensor::alloc_for_overwrite(&[rows, n], input.dtype(), &dev)?;
    let stats = Tensor::alloc_for_overwrite(&[rows, 2], input.dtype(), &dev)?;
    let (xl, yl, sl) = (x.layout(), y.layout(), stats.layout());
    let (xs, ys, ss) = (x.storage(), y.storage(), stats.storage());
    let wl = w.as_ref().map(|w| (w.layout(), w.storage()));
    let bl = b.as_ref().map(|b| (b.layout(), b.storage()));
    let dtype = input.dtype();
    let src = |storage, layout| Src {
        storage,
        layout,
        dtype,
    };
    let r = dev.backend().layer_norm(
        src(&xs, &xl),
        wl.as_ref().map(|(l, s)| src(s, l)),
        bl.as_ref().map(|(l, s)| src(s, l)),
        eps,
        src(&ys, &yl),
        src(&ss, &sl),
    );
    match r {
        Ok(()) => Ok(Some((y.reshape(input.shape())?, stats))),
        Err(e) if unsupported(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// `(dx, dw, db)` of layer norm through the fused backward kernel, from
/// the forward's input `x`, `stats` and `weight`; `None` where the device
/// has no such kernel. `dw`/`db` are shaped like the weight (`shape`).
pub(super) fn backward(
    g: &Tensor,
    x: &Tensor,
    stats: &Tensor,
    weight: Option<&Tensor>,
    shape: &[usize],
) -> Result<Option<(Tensor, Tensor, Tensor)>> {
    let rows = stats.shape().first().copied().unwrap_or(0);
    let numel = x.numel();
    if rows == 0 || numel % rows != 0 {
        return Ok(None);
    }
    let n = numel / rows;
    let dev = x.device();
    let dtype = x.dtype();
    let (gf, xf) = (flat(g, &[rows, n])?, flat(x, &[rows, n])?);
    let w = weight.map(|w| flat(w, &[n])).transpose()?;
    let dx = Tensor::alloc_for_overwrite(&[rows, n], dtype, &dev)?;
    let dwb = Tensor::alloc_for_overwrite(&[2, n], dtype, &dev)?;
    let (gl, xl, sl, dl, wbl) = (
        gf.layout(),
        xf.layout(),
        stats.layout(),
        dx.layout(),
        dwb.layout(),
    );
    let (gs, xs, ss, ds, wbs) = (
        gf.storage(),
        xf.storage(),
        stats.storage(),
        dx.storage(),
        dwb.storage(),
    );
    let wl = w.as_ref().map(|w| (w.layout(), w.storage()));
    let src = |storage, layout| Src {
        storage,
        layout,
        dtype,
    };
    let r = dev.backend().layer_norm_backward(
        src(&gs, &gl),
        src(&xs, &xl),
        src(&ss, &sl),
        wl.as_ref().map(|(l, s)| src(s, l)),
        src(&ds, &dl),
        src(&wbs, &wbl),
    );
    match r {
        Ok(()) => Ok(Some((
            dx.reshape(x.shape())?,
            dwb.select(0, 0)?.reshape(shape)?,
            dwb.select(0, 1)?.reshape(shape)?,
        ))),
        Err(e) if unsupported(&e) => Ok(None),
        Err(e) => Err(e),
    }
}
