//! Matrix products: `matmul` (PyTorch semantics), `mm`, `bmm`, `dot`.
//!
//! Every product goes through one backend call,
//! [`Backend::matmul`](crate::backend::Backend::matmul), on `[batch.., m, k]`
//! and `[batch.., k, n]` operands: 1-D operands get a size-1 dim, batch dims
//! are broadcast with stride 0 (no copy), and the dims added for 1-D
//! operands are absent from the result's shape.

use super::Tensor;
use crate::autograd::{self, SavedTensor, rules::Rule};
use crate::backend::Src;
use crate::dtype::DType;
use crate::error::{ErrShape, Error, Result};
use crate::layout::Layout;
use crate::shape::{Dims, MAX_RANK, broadcast_shapes, checked_numel};

/// The operand layouts and output shape of one `matmul`.
struct Plan {
    lhs: Layout,
    rhs: Layout,
    /// `[batch.., m, n]`, what the kernel writes.
    kernel_out: Dims,
    /// The result's shape (1-D dims removed).
    out: Dims,
}

fn spec(d: &[usize]) -> heapless::Vec<isize, MAX_RANK> {
    // ranks here are at most MAX_RANK (they come from Dims)
    d.iter().map(|&x| x as isize).collect()
}

fn plan(op: &'static str, a: &Tensor, b: &Tensor) -> Result<Plan> {
    a.same_device(op, b)?;
    a.same_dtype(op, b)?;
    if a.dtype() == DType::Bool {
        return Err(Error::UnsupportedDType {
            op,
            dtype: DType::Bool,
            supported: "f32, f64, f16, bf16, i64, i32, u8",
        });
    }
    for t in [a, b] {
        if t.rank() == 0 {
            return Err(Error::RankMismatch {
                op,
                expected: "at least 1",
                got: 0,
            });
        }
    }
    let (ra, rb) = (a.rank(), b.rank());
    let mut la = a.layout();
    let mut lb = b.layout();
    if ra == 1 {
        la = la.unsqueeze(0)?; // [k] -> [1, k]
    }
    if rb == 1 {
        lb = lb.unsqueeze(1)?; // [k] -> [k, 1]
    }
    let (sa, sb) = (la.shape().clone(), lb.shape().clone());
    let (m, k) = (sa[sa.rank() - 2], sa[sa.rank() - 1]);
    let (k2, n) = (sb[sb.rank() - 2], sb[sb.rank() - 1]);
    if k != k2 {
        // expected: rhs with lhs's inner size
        let mut want = Dims::from_slice(b.shape())?;
        let inner = if rb == 1 { 0 } else { rb - 2 };
        want[inner] = k;
        return Err(Error::ShapeMismatch {
            op,
            expected: ErrShape::of(&want),
            got: ErrShape::of(b.shape()),
        });
    }
    let batch =
        broadcast_shapes(op, &sa[..sa.rank() - 2], &sb[..sb.rank() - 2]).map_err(|e| match e {
            Error::BroadcastMismatch { .. } => Error::BroadcastMismatch {
                op,
                lhs: ErrShape::of(a.shape()),
                rhs: ErrShape::of(b.shape()),
            },
            other => other,
        })?;
    let mut want_a = batch.clone();
    want_a.push(m)?;
    want_a.push(k)?;
    let mut want_b = batch.clone();
    want_b.push(k)?;
    want_b.push(n)?;
    let mut kernel_out = batch.clone();
    kernel_out.push(m)?;
    kernel_out.push(n)?;
    // NOTE [Checked output sizes]: expanded operands that fit can make a
    // product that does not.
    checked_numel(op, kernel_out.as_slice())?;
    let mut out = batch;
    if ra > 1 {
        out.push(m)?;
    }
    if rb > 1 {
        out.push(n)?;
    }
    Ok(Plan {
        lhs: la.expand(&spec(&want_a))?,
        rhs: lb.expand(&spec(&want_b))?,
        kernel_out,
        out,
    })
}

/// The common case of `matmul`, `[m, k] @ [k, n]` with nothing to record,
/// straight on the operands' layouts: no plan, no views, no layout copies
/// (NOTE [Small-op path]). `None` for every other case, including errors,
/// which the general path reports.
fn matrix_product(a: &Tensor, b: &Tensor) -> Result<Option<Tensor>> {
    let (sa, sb) = (a.shape(), b.shape());
    let ([m, k], [k2, n]) = (sa, sb) else {
        return Ok(None);
    };
    if k != k2
        || m.checked_mul(*n).is_none()
        || a.dtype() != b.dtype()
        || a.dtype() == DType::Bool
        || autograd::needs_record(&[a, b])
    {
        return Ok(None);
    }
    let out = Dims::from_slice(&[*m, *n])?;
    a.with_src_on(|la, dev| {
        b.with_src_on(|lb, dev_b| {
            if dev.kind() != dev_b.kind() {
                return Ok(None);
            }
            Tensor::written(&out, la.dtype, dev, |d| dev.backend().matmul(la, lb, d)).map(Some)
        })
    })
}

fn run(a: &Tensor, b: &Tensor, p: Plan) -> Result<Tensor> {
    let dev = a.device();
    let out = Tensor::alloc_for_overwrite(&p.out, a.dtype(), &dev)?;
    let (sa, sb, so) = (a.storage(), b.storage(), out.storage());
    let dst_layout = Layout::contiguous(&p.kernel_out)?;
    let src = |storage, layout| Src {
        storage,
        layout,
        dtype: a.dtype(),
    };
    dev.backend()
        .matmul(src(&sa, &p.lhs), src(&sb, &p.rhs), src(&so, &dst_layout))?;
    Ok(out)
}

/// Runs the product; when autograd records, goes through tensor views
/// (unsqueeze, expand: recorded, so their backward reduces gradients back)
/// around one recorded `[batch.., m, k] @ [batch.., k, n]` node.
fn product(a: &Tensor, b: &Tensor, p: Plan) -> Result<Tensor> {
    if !autograd::needs_record(&[a, b]) {
        return run(a, b, p);
    }
    let a2 = if a.rank() == 1 {
        a.unsqueeze(0)?
    } else {
        a.clone()
    };
    let b2 = if b.rank() == 1 {
        b.unsqueeze(1)?
    } else {
        b.clone()
    };
    let a3 = a2.expand(&spec(p.lhs.shape())[..])?;
    let b3 = b2.expand(&spec(p.rhs.shape())[..])?;
    let inner = Plan {
        lhs: a3.layout(),
        rhs: b3.layout(),
        kernel_out: p.kernel_out.clone(),
        out: p.kernel_out.clone(),
    };
    let out = autograd::no_grad(|| run(&a3, &b3, inner))?;
    autograd::record(&out, &[&a3, &b3], || {
        Ok(Rule::Matmul {
            a: SavedTensor::input(&a3),
            b: SavedTensor::input(&b3),
        })
    })?;
    if out.shape() == &p.out[..] {
        Ok(out)
    } else {
        out.reshape(&p.out)
    }
}

impl Tensor {
    /// Matrix product with PyTorch `matmul` semantics:
    ///
    /// * 1-D @ 1-D: the dot product (rank 0);
    /// * 2-D @ 2-D: the matrix product;
    /// * 1-D @ N-D: a 1 is prepended to the vector and removed after;
    /// * N-D @ 1-D: matrix-vector product over the last two dims;
    /// * otherwise batched over the leading dims, which broadcast
    ///   (`[2, 1, 3, 4] @ [5, 4, 6]` is `[2, 5, 3, 6]`) without copying.
    ///
    /// Floats accumulate in `f32` (`f16`, `bf16`, `f32`) or `f64`; integer
    /// products wrap.
    ///
    /// # Errors
    /// [`Error::RankMismatch`] for a rank-0 operand, [`Error::ShapeMismatch`]
    /// when `self`'s last dim differs from `rhs`'s inner dim (transpose one
    /// operand?), [`Error::BroadcastMismatch`] for batch dims that do not
    /// broadcast, dtype or device mismatch, bool.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let dev = Device::cpu();
    /// let a = Tensor::arange(0.0f32, 6.0, &dev)?.reshape(&[2, 3])?;
    /// let b = Tensor::arange(0.0f32, 3.0, &dev)?;
    /// // [[0,1,2],[3,4,5]] @ [0,1,2] = [5, 14]
    /// assert_eq!(a.matmul(&b)?.to_vec::<f32>()?, vec![5.0, 14.0]);
    /// let c = Tensor::zeros(&[2, 1, 3, 4], a.dtype(), &dev)?;
    /// let d = Tensor::zeros(&[5, 4, 6], a.dtype(), &dev)?;
    /// assert_eq!(c.matmul(&d)?.shape(), &[2, 5, 3, 6]);
    /// assert!(a.matmul(&a).is_err()); // [2,3] @ [2,3]: use a.t()
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        if let Some(out) = matrix_product(self, rhs)? {
            return Ok(out);
        }
        let p = plan("matmul", self, rhs)?;
        product(self, rhs, p)
    }

    /// The product of two matrices (both rank 2; no broadcasting).
    ///
    /// # Errors
    /// [`Error::RankMismatch`] unless both are rank 2; otherwise as
    /// [`Tensor::matmul`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let dev = Device::cpu();
    /// let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], &dev)?;
    /// assert_eq!(a.mm(&a)?.to_vec::<f32>()?, vec![7.0, 10.0, 15.0, 22.0]);
    /// assert!(a.mm(&Tensor::zeros(&[2], a.dtype(), &dev)?).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn mm(&self, rhs: &Tensor) -> Result<Tensor> {
        for t in [self, rhs] {
            if t.rank() != 2 {
                return Err(Error::RankMismatch {
                    op: "mm",
                    expected: "2",
                    got: t.rank(),
                });
            }
        }
        if let Some(out) = matrix_product(self, rhs)? {
            return Ok(out);
        }
        let p = plan("mm", self, rhs)?;
        product(self, rhs, p)
    }

    /// Batched matrix product: `[b, m, k] @ [b, k, n] -> [b, m, n]` (equal
    /// batch sizes; no broadcasting).
    ///
    /// # Errors
    /// [`Error::RankMismatch`] unless both are rank 3,
    /// [`Error::ShapeMismatch`] for different batch sizes; otherwise as
    /// [`Tensor::matmul`].
    ///
    /// ```
    /// use kael_core::{DType, Device, Tensor};
    /// let dev = Device::cpu();
    /// let a = Tensor::ones(&[4, 2, 3], DType::F32, &dev)?;
    /// let b = Tensor::ones(&[4, 3, 5], DType::F32, &dev)?;
    /// let c = a.bmm(&b)?;
    /// assert_eq!(c.shape(), &[4, 2, 5]);
    /// assert_eq!(c.to_vec::<f32>()?[0], 3.0);
    /// assert!(a.bmm(&Tensor::ones(&[1, 3, 5], DType::F32, &dev)?).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn bmm(&self, rhs: &Tensor) -> Result<Tensor> {
        for t in [self, rhs] {
            if t.rank() != 3 {
                return Err(Error::RankMismatch {
                    op: "bmm",
                    expected: "3",
                    got: t.rank(),
                });
            }
        }
        if self.shape()[0] != rhs.shape()[0] {
            let (b, k) = (self.shape()[0], self.shape()[2]);
            return Err(Error::ShapeMismatch {
                op: "bmm",
                expected: ErrShape::of(&[b, k, rhs.shape()[2]]),
                got: ErrShape::of(rhs.shape()),
            });
        }
        let p = plan("bmm", self, rhs)?;
        product(self, rhs, p)
    }

    /// The dot product of two vectors of equal length (rank 0 result).
    ///
    /// # Errors
    /// [`Error::RankMismatch`] unless both are rank 1,
    /// [`Error::ShapeMismatch`] for different lengths; dtype or device
    /// mismatch, bool.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let dev = Device::cpu();
    /// let a = Tensor::from_slice(&[1.0f64, 2.0, 3.0], &[3], &dev)?;
    /// assert_eq!(a.dot(&a)?.item::<f64>()?, 14.0);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn dot(&self, rhs: &Tensor) -> Result<Tensor> {
        for t in [self, rhs] {
            if t.rank() != 1 {
                return Err(Error::RankMismatch {
                    op: "dot",
                    expected: "1",
                    got: t.rank(),
                });
            }
        }
        let p = plan("dot", self, rhs)?;
        product(self, rhs, p)
    }
}
