//! Convolution and pooling windows through the device's `im2col` kernel
//! family (a declared family: NOTE [Declared families]), whose gradient
//! is its adjoint `col2im`; `None` where the device lacks the family, and
//! the caller takes the windows as views instead.

use crate::backend::{Family, Provenance};
use crate::error::Result;
use crate::kernels::im2col::Geometry;
use crate::tensor::Tensor;

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
    let prov = x.device().backend().provenance(Family::Im2col);
    if !matches!(prov, Provenance::Own | Provenance::Inherited(_)) {
        return Ok(None);
    }
    let s = x.shape();
    let g = Geometry {
        kernel,
        stride,
        padding,
        dilation,
        image: [s[2], s[3]],
        fill,
    };
    Tensor::declared(Family::Im2col, 0, &g.words(op)?, &[x])
        .map(Some)
        .map_err(|e| e.renamed(op))
}
