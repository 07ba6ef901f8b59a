//! Convolution and pooling through the device's declared families (NOTE
//! [Declared families]): windows by `im2col` (whose gradient is its
//! adjoint `col2im`), max pooling by `max_pool2d`, depthwise
//! convolutions by `depthwise_conv2d` and the others by `conv2d`; `None` where the
//! device lacks the family, and the caller composes the op instead.

use crate::backend::{Family, Provenance};
use crate::dtype::DType;
use crate::error::Result;
use crate::kernels::im2col::Geometry;
use crate::tensor::Tensor;

/// Whether `x`'s device runs `family` on `x`'s dtype (f32: NOTE
/// [Declared kernels' dtypes]).
fn runs(x: &Tensor, family: Family) -> bool {
    let prov = x.device().backend().provenance(family);
    matches!(prov, Provenance::Own | Provenance::Inherited(_)) && x.dtype() == DType::F32
}

/// `x [N, C, H, W]`'s windows as `[N, OH, OW, C, KH, KW]` rows (padding
/// reads `fill`), or `None` on a device without the `im2col` family.
/// The caller has checked the geometry and `x`'s rank.
pub(super) fn windows(
    op: &'static str,
    x: &Tensor,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    fill: f32,
) -> Result<Option<Tensor>> {
    let s = x.shape();
    let g = Geometry {
        kernel,
        stride,
        padding,
        dilation,
        image: [s[2], s[3]],
        fill,
    };
    step0(op, Family::Im2col, x, &g)
}

/// `max_pool2d` of batched `x [N, C, H, W]` through the device's
/// `max_pool2d` family (its gradient is the family's too), or `None` on a
/// device without it. The caller has checked the geometry.
pub(super) fn max_pool(
    op: &'static str,
    x: &Tensor,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
) -> Result<Option<Tensor>> {
    let s = x.shape();
    let g = Geometry {
        kernel,
        stride,
        padding,
        dilation: [1, 1],
        image: [s[2], s[3]],
        fill: 0.0,
    };
    step0(op, Family::MaxPool2d, x, &g)
}

/// A depthwise convolution of batched `x [N, C, H, W]` with `w [C, 1, KH,
/// KW]` through the device's `depthwise_conv2d` family (both gradients
/// are the family's), or `None` on a device without it. The caller has
/// checked the geometry and that `groups == C == O`.
pub(super) fn depthwise(
    op: &'static str,
    x: &Tensor,
    w: &Tensor,
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
) -> Result<Option<Tensor>> {
    if !runs(x, Family::Depthwise2d) || w.dtype() != DType::F32 {
        return Ok(None);
    }
    let g = conv_geometry(x, w, stride, padding, dilation);
    Tensor::declared(Family::Depthwise2d, 0, &g.words(op)?, &[x, w])
        .map(Some)
        .map_err(|e| e.renamed(op))
}

/// A dense or grouped convolution of batched `x [N, C, H, W]` with `w [O,
/// C/groups, KH, KW]` through the device's `conv2d` family (both
/// gradients are the family's), or `None` on a device without it. The
/// caller has checked the geometry and the channel counts.
pub(super) fn conv(
    op: &'static str,
    x: &Tensor,
    w: &Tensor,
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    groups: usize,
) -> Result<Option<Tensor>> {
    if !runs(x, Family::Conv2d) || w.dtype() != DType::F32 {
        return Ok(None);
    }
    let g = conv_geometry(x, w, stride, padding, dilation);
    let mut words = [0u32; 12];
    words[..11].copy_from_slice(&g.words(op)?);
    words[11] = u32::try_from(groups).map_err(|_| crate::error::Error::InvalidArgument {
        op,
        reason: "groups is above 2^32 - 1; use fewer groups",
    })?;
    Tensor::declared(Family::Conv2d, 0, &words, &[x, w])
        .map(Some)
        .map_err(|e| e.renamed(op))
}

/// The geometry of a convolution of `x [N, C, H, W]` by `w [O, C/g, KH,
/// KW]` (zero padding).
fn conv_geometry(
    x: &Tensor,
    w: &Tensor,
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
) -> Geometry {
    let (s, k) = (x.shape(), w.shape());
    Geometry {
        kernel: [k[2], k[3]],
        stride,
        padding,
        dilation,
        image: [s[2], s[3]],
        fill: 0.0,
    }
}

/// `family`'s first step on `x` with geometry `g`, errors named as `op`;
/// `None` where `x`'s device or dtype lacks the family.
fn step0(op: &'static str, family: Family, x: &Tensor, g: &Geometry) -> Result<Option<Tensor>> {
    if !runs(x, family) {
        return Ok(None);
    }
    Tensor::declared(family, 0, &g.words(op)?, &[x])
        .map(Some)
        .map_err(|e| e.renamed(op))
}
