//! Reductions (sum, mean, prod, max, min, argmax, argmin, logsumexp) and
//! softmax, with PyTorch's dim rules: negative dims count from the end, an
//! empty dim list means every dim, and a rank-0 tensor accepts dim 0 or -1.
//!
//! Integer sums and products are `I64` (as in PyTorch); every other
//! reduction keeps the dtype, argmax/argmin give `I64` indices. With
//! `keepdim` the reduced dims stay as size 1; without it they are removed.
//! Results are fresh contiguous tensors; the kernel writes them through the
//! keepdim shape (same elements, same order).

use super::Tensor;
use crate::autograd::{self, SavedTensor, rules::Rule};
use crate::backend::{ArgReduceOp, ReduceOp, Src};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::shape::{Dims, MAX_RANK, resolve_dim};
use alloc::boxed::Box;

/// Reduced dims after resolution: sorted and distinct.
type DimSet = heapless::Vec<usize, MAX_RANK>;

const EMPTY_DIM: &str = "cannot reduce a dimension of size 0: the operation has no identity value; reduce a non-empty dimension, or use sum/prod, which accept empty ones";

/// Resolves `dims` against `rank`: negatives from the end, empty means all,
/// duplicates refused; on a rank-0 tensor 0 and -1 name "no dim".
pub(super) fn resolve_dims(op: &'static str, dims: &[isize], rank: usize) -> Result<DimSet> {
    let mut seen = [false; MAX_RANK];
    if dims.is_empty() {
        seen[..rank].fill(true);
    }
    for &d in dims {
        let r = resolve_dim(op, d, rank.max(1)).map_err(|_| Error::DimOutOfRange {
            op,
            dim: d,
            rank,
        })?;
        if seen[r] {
            return Err(Error::InvalidArgument {
                op,
                reason: "a dimension appears more than once in dims; pass each dimension at most once",
            });
        }
        seen[r] = true;
    }
    let mut out = DimSet::new();
    for (d, _) in seen.iter().enumerate().take(rank).filter(|(_, s)| **s) {
        out.push(d).map_err(|_| Error::RankTooLarge {
            rank,
            max: MAX_RANK,
        })?;
    }
    Ok(out)
}

/// Resolves one dim; a rank-0 tensor accepts 0 and -1 (and gives 0).
fn resolve_one(op: &'static str, dim: isize, rank: usize) -> Result<usize> {
    resolve_dim(op, dim, rank.max(1)).map_err(|_| Error::DimOutOfRange { op, dim, rank })
}

/// The shape with `dims` set to 1, and the result shape (`keepdim` or not).
fn reduced_shapes(shape: &[usize], dims: &[usize], keepdim: bool) -> Result<(Dims, Dims)> {
    let mut keep = Dims::from_slice(shape)?;
    let mut out = Dims::new();
    for (i, &s) in shape.iter().enumerate() {
        if dims.contains(&i) {
            keep[i] = 1;
            if keepdim {
                out.push(1)?;
            }
        } else {
            out.push(s)?;
        }
    }
    Ok((keep, out))
}

/// Integer sums and products accumulate into `I64`, as in PyTorch.
fn sum_dtype(dtype: DType) -> DType {
    if dtype.is_float() { dtype } else { DType::I64 }
}

/// The gradient of `prod(x, d, keepdim=true)` from its keepdim gradient
/// `g`, written with differentiable ops (so `create_graph` works), and
/// correct with zeros in `x`: where a slice has no zero, `g * p / x`;
/// with one zero, the product of the other elements `p` at the zero and 0
/// elsewhere; with two zeros or more, 0. `p` is the product of the slice
/// with its zeros replaced by 1.
fn prod_backward(g: &Tensor, x: &Tensor, d: usize) -> Result<Tensor> {
    let zero = x.scalar_like(0.0)?;
    let is_zero = x.eq(&zero)?;
    let safe = is_zero.where_cond(&x.scalar_like(1.0)?, x)?;
    let p = safe.prod_dim(d as isize, true)?;
    let zeros = is_zero.to_dtype(DType::I64)?.sum(&[d as isize], true)?;
    let gp = g.mul(&p)?;
    let none = gp.div(&safe)?;
    let one = is_zero.where_cond(&gp, &zero)?;
    let n0 = zeros.eq(&zeros.scalar_like(0.0)?)?;
    let n1 = zeros.eq(&zeros.scalar_like(1.0)?)?;
    n0.where_cond(&none, &n1.where_cond(&one, &zero)?)
}

impl Tensor {
    /// Runs the `op` kernel over `dims` (resolved) into a new `out_dtype` tensor.
    fn run_reduce(
        &self,
        op: ReduceOp,
        dims: &[usize],
        keepdim: bool,
        out_dtype: DType,
    ) -> Result<Tensor> {
        let (keep, out_shape) = reduced_shapes(self.shape(), dims, keepdim)?;
        let dev = self.device();
        let out = Tensor::alloc(&out_shape, out_dtype, &dev)?;
        let keep_layout = Layout::contiguous(&keep)?;
        let storage = out.storage();
        self.with_src(|s| {
            let d = Src {
                storage: &storage,
                layout: &keep_layout,
                dtype: out_dtype,
            };
            dev.backend().reduce(op, s, dims, d)
        })?;
        Ok(out)
    }

    /// The largest (`max`) or smallest values over `dims` (empty: all),
    /// not recorded for autograd (callers build the gradient themselves).
    pub(super) fn extreme_values(
        &self,
        op: &'static str,
        max: bool,
        dims: &[isize],
        keepdim: bool,
    ) -> Result<Tensor> {
        self.dtype().require_numeric(op)?;
        let dims = resolve_dims(op, dims, self.rank())?;
        self.refuse_empty_dims(op, &dims)?;
        let red = if max { ReduceOp::Max } else { ReduceOp::Min };
        self.run_reduce(red, &dims, keepdim, self.dtype())
    }

    /// Errors when one of `dims` has size 0 (max/min/argmax/argmin).
    fn refuse_empty_dims(&self, op: &'static str, dims: &[usize]) -> Result<()> {
        if dims.iter().any(|&d| self.shape()[d] == 0) {
            return Err(Error::InvalidArgument {
                op,
                reason: EMPTY_DIM,
            });
        }
        Ok(())
    }

    fn sum_impl(&self, op: &'static str, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        if self.dtype() == DType::Bool {
            // PyTorch counts the trues, in I64.
            resolve_dims(op, dims, self.rank())?;
            return self.to_dtype(DType::I64)?.sum_impl(op, dims, keepdim);
        }
        self.dtype().require_numeric(op)?;
        let dims = resolve_dims(op, dims, self.rank())?;
        let out = self.run_reduce(ReduceOp::Sum, &dims, keepdim, sum_dtype(self.dtype()))?;
        self.record_sum(&out, &dims, 1.0)?;
        Ok(out)
    }

    /// Records a sum (scaled for mean) over resolved `dims`.
    fn record_sum(&self, out: &Tensor, dims: &[usize], scale: f64) -> Result<()> {
        autograd::record(out, &[self], || {
            let (keep_shape, _) = reduced_shapes(self.shape(), dims, true)?;
            Ok(Rule::Sum {
                keep_shape: Box::new(keep_shape),
                input_shape: self.dims().clone(),
                scale,
            })
        })
    }

    fn mean_impl(&self, op: &'static str, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.dtype().require_float(op)?;
        let dims = resolve_dims(op, dims, self.rank())?;
        let count: usize = dims.iter().map(|&d| self.shape()[d]).product();
        // f16/bf16 sums go through f32, so a sum past their range still
        // gives the right mean; 0/0 makes the mean of nothing NaN.
        let acc = if self.dtype() == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        let sum = self.run_reduce(ReduceOp::Sum, &dims, keepdim, acc)?;
        let out = sum
            .div(&sum.scalar_like(count as f64)?)?
            .to_dtype(self.dtype())?;
        self.record_sum(&out, &dims, 1.0 / count as f64)?;
        Ok(out)
    }

    fn extreme_impl(
        &self,
        op: &'static str,
        red: ReduceOp,
        dims: &[isize],
        keepdim: bool,
    ) -> Result<Tensor> {
        self.dtype().require_numeric(op)?;
        let dims = resolve_dims(op, dims, self.rank())?;
        self.refuse_empty_dims(op, &dims)?;
        let out = self.run_reduce(red, &dims, keepdim, self.dtype())?;
        if autograd::needs_record(&[self]) {
            let with_indices = matches!(op, "max_dim_with_indices" | "min_dim_with_indices");
            let rule = if with_indices && self.rank() > 0 {
                // max(dim)'s values: the gradient goes to the returned index.
                let arg = if red == ReduceOp::Max {
                    ArgReduceOp::ArgMax
                } else {
                    ArgReduceOp::ArgMin
                };
                let indices = self.arg_impl(op, arg, dims[0] as isize, true)?;
                let (keep_shape, _) = reduced_shapes(self.shape(), &dims, true)?;
                Rule::IndexReduce {
                    dim: dims[0],
                    indices,
                    keep_shape: Box::new(keep_shape),
                    input_shape: self.dims().clone(),
                }
            } else {
                // amax/amin (max_dim, min_dim) and max_all/min_all: ties
                // split the gradient evenly, as PyTorch.
                let along = if matches!(op, "max_dim" | "min_dim") && self.rank() > 0 {
                    Some(Box::new((
                        dims[0] as isize,
                        reduced_shapes(self.shape(), &dims, true)?.0,
                    )))
                } else {
                    None
                };
                Rule::AllReduce {
                    x: SavedTensor::input(self),
                    out: SavedTensor::output(&out)?,
                    along,
                }
            };
            autograd::record(&out, &[self], || Ok(rule))?;
        }
        Ok(out)
    }

    /// This tensor's layout, with a size-1 dim added to a rank-0 tensor, and
    /// `dim` resolved against it (kernels need a dim to work along).
    fn along(&self, op: &'static str, dim: isize) -> Result<(Layout, usize)> {
        let d = resolve_one(op, dim, self.rank())?;
        let l = self.layout();
        if self.rank() == 0 {
            Ok((l.unsqueeze(0)?, 0))
        } else {
            Ok((l, d))
        }
    }

    fn arg_impl(
        &self,
        op: &'static str,
        red: ArgReduceOp,
        dim: isize,
        keepdim: bool,
    ) -> Result<Tensor> {
        self.dtype().require_numeric(op)?;
        let (layout, d) = self.along(op, dim)?;
        if layout.shape()[d] == 0 {
            return Err(Error::InvalidArgument {
                op,
                reason: EMPTY_DIM,
            });
        }
        let (keep, out_shape) = reduced_shapes(layout.shape(), &[d], keepdim)?;
        let out_shape = if self.rank() == 0 {
            Dims::new()
        } else {
            out_shape
        };
        let dev = self.device();
        let out = Tensor::alloc(&out_shape, DType::I64, &dev)?;
        let keep_layout = Layout::contiguous(&keep)?;
        let (src_storage, dst_storage) = (self.storage(), out.storage());
        let s = Src {
            storage: &src_storage,
            layout: &layout,
            dtype: self.dtype(),
        };
        let o = Src {
            storage: &dst_storage,
            layout: &keep_layout,
            dtype: DType::I64,
        };
        dev.backend().arg_reduce(red, s, d, o)?;
        Ok(out)
    }

    fn softmax_impl(&self, op: &'static str, dim: isize, log: bool) -> Result<Tensor> {
        self.dtype().require_float(op)?;
        let (layout, d) = self.along(op, dim)?;
        let dev = self.device();
        let out = Tensor::alloc_for_overwrite(self.shape(), self.dtype(), &dev)?;
        let out_layout = Layout::contiguous(layout.shape())?;
        let (src_storage, dst_storage) = (self.storage(), out.storage());
        let s = Src {
            storage: &src_storage,
            layout: &layout,
            dtype: self.dtype(),
        };
        let o = Src {
            storage: &dst_storage,
            layout: &out_layout,
            dtype: self.dtype(),
        };
        dev.backend().softmax(s, d, log, o)?;
        autograd::record(&out, &[self], || {
            let out = SavedTensor::output(&out)?;
            Ok(if log {
                Rule::LogSoftmax { dim, out }
            } else {
                Rule::Softmax { dim, out }
            })
        })?;
        Ok(out)
    }

    /// Softmax's (`log`: log-softmax's) gradient for `g` through the
    /// device's fused kernel ([`Backend::softmax_backward`], NOTE [Fused
    /// families]), `self` being the forward's output `y` along `dim`; `None`
    /// where the dim is not the last, the dtype is not f32/f64, or the
    /// device has no such kernel (the caller composes the gradient then).
    /// Runs without recording: the caller takes this path only when grad
    /// mode is off (no `create_graph`).
    ///
    /// [`Backend::softmax_backward`]: crate::backend::Backend::softmax_backward
    pub(crate) fn softmax_backward_fused(
        &self,
        g: &Tensor,
        dim: isize,
        log: bool,
    ) -> Result<Option<Tensor>> {
        let op = "softmax_backward";
        let rank = self.rank();
        let last = rank == 0 || resolve_one(op, dim, rank)? == rank - 1;
        let n = self.shape().last().copied().unwrap_or(1);
        let numel = self.numel();
        if !last
            || !matches!(self.dtype(), DType::F32 | DType::F64)
            || g.dtype() != self.dtype()
            || g.shape() != self.shape()
            || numel == 0
            || n == 0
        {
            return Ok(None);
        }
        let shape = [numel / n, n];
        let (y, g) = (self.contiguous()?, g.contiguous()?);
        let dev = y.device();
        let dx = Tensor::alloc_for_overwrite(self.shape(), self.dtype(), &dev)?;
        let rows = Layout::new(&shape, &[n, 1], 0)?;
        let at = |t: &Tensor| Layout::new(&shape, &[n, 1], t.layout().offset());
        let (gl, yl) = (at(&g)?, at(&y)?);
        let (gs, ys, ds) = (g.storage(), y.storage(), dx.storage());
        let src = |storage, layout| Src {
            storage,
            layout,
            dtype: self.dtype(),
        };
        match dev
            .backend()
            .softmax_backward(src(&gs, &gl), src(&ys, &yl), log, src(&ds, &rows))
        {
            Ok(()) => Ok(Some(dx)),
            Err(Error::Unsupported { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    // ------------------------------------------------------------- sums

    /// Sum over `dims` (negative from the end; empty means every dim).
    /// Integer tensors sum into `I64` (wrapping) and bool tensors count
    /// their trues into `I64`, as PyTorch; floats keep their dtype
    /// (accumulated in f64 on the reference backend).
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`]; [`Error::InvalidArgument`] for a repeated
    /// dim.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::arange(0.0f32, 6.0, &Device::cpu())?.reshape(&[2, 3])?;
    /// assert_eq!(x.sum(&[0], false)?.to_vec::<f32>()?, vec![3.0, 5.0, 7.0]);
    /// assert_eq!(x.sum(&[-1], true)?.shape(), &[2, 1]);
    /// assert_eq!(x.sum(&[], false)?.item::<f32>()?, 15.0);
    /// assert!(x.sum(&[1, -1], false).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn sum(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.sum_impl("sum", dims, keepdim)
    }

    /// Sum over one dim.
    ///
    /// # Errors
    /// As [`Tensor::sum`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1i32, 2, 3, 4], &[2, 2], &Device::cpu())?;
    /// let s = x.sum_dim(1, false)?;
    /// assert_eq!((s.dtype(), s.to_vec::<i64>()?), (kael_core::DType::I64, vec![3, 7]));
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn sum_dim(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        self.sum_impl("sum_dim", &[dim], keepdim)
    }

    /// Sum of every element, as a rank-0 tensor (0 for an empty tensor).
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for bool.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.5f64, 2.5], &[2], &Device::cpu())?;
    /// let s = x.sum_all()?;
    /// assert_eq!((s.shape(), s.item::<f64>()?), (&[][..], 4.0));
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn sum_all(&self) -> Result<Tensor> {
        self.sum_impl("sum_all", &[], false)
    }

    /// Mean over `dims` (empty means every dim); NaN over an empty set, as
    /// in PyTorch.
    ///
    /// # Errors
    /// As [`Tensor::sum`]; [`Error::UnsupportedDType`] for non-float
    /// tensors (convert with `to_dtype(DType::F32)`).
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::arange(0.0f32, 6.0, &Device::cpu())?.reshape(&[2, 3])?;
    /// assert_eq!(x.mean(&[1], false)?.to_vec::<f32>()?, vec![1.0, 4.0]);
    /// assert!(Tensor::arange(0i64, 3, &Device::cpu())?.mean(&[0], false).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn mean(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.mean_impl("mean", dims, keepdim)
    }

    /// Mean over one dim.
    ///
    /// # Errors
    /// As [`Tensor::mean`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 5.0], &[2, 2], &Device::cpu())?;
    /// assert_eq!(x.mean_dim(0, true)?.to_vec::<f32>()?, vec![2.0, 3.5]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn mean_dim(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        self.mean_impl("mean_dim", &[dim], keepdim)
    }

    /// Mean of every element, as a rank-0 tensor.
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for non-float tensors.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 6.0], &[3], &Device::cpu())?;
    /// assert_eq!(x.mean_all()?.item::<f32>()?, 3.0);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn mean_all(&self) -> Result<Tensor> {
        self.mean_impl("mean_all", &[], false)
    }

    /// Product over one dim (1 over an empty dim); integers multiply into
    /// `I64` (wrapping). Differentiable, with zeros in the input too: the
    /// gradient of an element is the product of the others (PyTorch's
    /// rule), so a slice with one zero sends its gradient to the zero only
    /// and a slice with two zeros sends none.
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`]; [`Error::UnsupportedDType`] for bool.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], &Device::cpu())?;
    /// assert_eq!(x.prod_dim(0, false)?.to_vec::<f32>()?, vec![3.0, 8.0]);
    /// let w = Tensor::from_slice(&[2.0f64, 0.0, 5.0], &[3], &Device::cpu())?.requires_grad_(true)?;
    /// w.prod_dim(0, false)?.backward()?;
    /// assert_eq!(w.grad().unwrap().to_vec::<f64>()?, vec![0.0, 10.0, 0.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn prod_dim(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        self.prod_impl("prod_dim", dim, keepdim)
    }

    /// Product of every element, as a rank-0 tensor (1 for an empty
    /// tensor); integers multiply into `I64`. Differentiable as
    /// [`Tensor::prod_dim`].
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for bool.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.5f32, 2.0, -2.0], &[3], &Device::cpu())?;
    /// assert_eq!(x.prod_all()?.item::<f32>()?, -6.0);
    /// assert_eq!(Tensor::from_slice(&[3u8, 5], &[2], &Device::cpu())?.prod_all()?.item::<i64>()?, 15);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn prod_all(&self) -> Result<Tensor> {
        let op = "prod_all";
        self.dtype().require_numeric(op)?;
        let flat = self.reshape(&[self.numel()]).map_err(|e| e.renamed(op))?;
        flat.prod_impl(op, 0, false)
    }

    fn prod_impl(&self, op: &'static str, dim: isize, keepdim: bool) -> Result<Tensor> {
        self.dtype().require_numeric(op)?;
        let dims = resolve_dims(op, &[dim], self.rank())?;
        let out = self.run_reduce(ReduceOp::Prod, &dims, keepdim, sum_dtype(self.dtype()))?;
        autograd::record(&out, &[self], || {
            let (keep_shape, _) = reduced_shapes(self.shape(), &dims, true)?;
            Ok(Rule::Prod {
                dim: dims.first().copied(),
                x: SavedTensor::input(self),
                keep_shape: Box::new(keep_shape),
                formula: prod_backward,
            })
        })?;
        Ok(out)
    }

    // --------------------------------------------------------- extremes

    /// Largest value along `dim` (PyTorch's `amax(dim)`); NaN wins. As
    /// `amax`, the gradient is split evenly between tied maxima; for
    /// PyTorch's `max(dim)`, whose gradient goes to the returned index, use
    /// [`Tensor::max_dim_with_indices`].
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`]; [`Error::InvalidArgument`] when `dim` has
    /// size 0; [`Error::UnsupportedDType`] for bool.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 5.0, 3.0, 2.0], &[2, 2], &Device::cpu())?;
    /// assert_eq!(x.max_dim(1, false)?.to_vec::<f32>()?, vec![5.0, 3.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn max_dim(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        self.extreme_impl("max_dim", ReduceOp::Max, &[dim], keepdim)
    }

    /// Smallest value along `dim`; NaN wins.
    ///
    /// # Errors
    /// As [`Tensor::max_dim`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1i64, 5, 3, 2], &[2, 2], &Device::cpu())?;
    /// assert_eq!(x.min_dim(0, true)?.to_vec::<i64>()?, vec![1, 2]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn min_dim(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        self.extreme_impl("min_dim", ReduceOp::Min, &[dim], keepdim)
    }

    /// Largest value along `dim` and its `I64` index, as PyTorch's
    /// `torch.max(x, dim, keepdim)` returns them (`values, indices`). NaN
    /// wins (the index is the first NaN's); of equal largest values the
    /// first index is given. The gradient flows to the indexed element, as
    /// for [`Tensor::max_dim`].
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`]; [`Error::InvalidArgument`] when `dim` has
    /// size 0; [`Error::UnsupportedDType`] for bool.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 5.0, 3.0, 2.0], &[2, 2], &Device::cpu())?;
    /// let (values, indices) = x.max_dim_with_indices(1, false)?;
    /// assert_eq!(values.to_vec::<f32>()?, vec![5.0, 3.0]);
    /// assert_eq!(indices.to_vec::<i64>()?, vec![1, 0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn max_dim_with_indices(&self, dim: isize, keepdim: bool) -> Result<(Tensor, Tensor)> {
        const OP: &str = "max_dim_with_indices";
        let indices = self.arg_impl(OP, ArgReduceOp::ArgMax, dim, keepdim)?;
        let values = self.extreme_impl(OP, ReduceOp::Max, &[dim], keepdim)?;
        Ok((values, indices))
    }

    /// Smallest value along `dim` and its `I64` index (PyTorch's
    /// `torch.min(x, dim, keepdim)`); NaN wins, ties give the first index.
    ///
    /// # Errors
    /// As [`Tensor::max_dim_with_indices`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[4i64, 2, 9, 2], &[4], &Device::cpu())?;
    /// let (values, indices) = x.min_dim_with_indices(0, true)?;
    /// assert_eq!((values.to_vec::<i64>()?, indices.to_vec::<i64>()?), (vec![2], vec![1]));
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn min_dim_with_indices(&self, dim: isize, keepdim: bool) -> Result<(Tensor, Tensor)> {
        const OP: &str = "min_dim_with_indices";
        let indices = self.arg_impl(OP, ArgReduceOp::ArgMin, dim, keepdim)?;
        let values = self.extreme_impl(OP, ReduceOp::Min, &[dim], keepdim)?;
        Ok((values, indices))
    }

    /// Largest element, as a rank-0 tensor; NaN wins.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty tensor; bool.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 5.0, 3.0], &[3], &Device::cpu())?;
    /// assert_eq!(x.max_all()?.item::<f32>()?, 5.0);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn max_all(&self) -> Result<Tensor> {
        self.extreme_impl("max_all", ReduceOp::Max, &[], false)
    }

    /// Smallest element, as a rank-0 tensor; NaN wins.
    ///
    /// # Errors
    /// As [`Tensor::max_all`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[4u8, 2, 9], &[3], &Device::cpu())?;
    /// assert_eq!(x.min_all()?.item::<u8>()?, 2);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn min_all(&self) -> Result<Tensor> {
        self.extreme_impl("min_all", ReduceOp::Min, &[], false)
    }

    /// `I64` index of the first largest value along `dim` (the first NaN,
    /// if any).
    ///
    /// # Errors
    /// As [`Tensor::max_dim`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 5.0, 5.0, 2.0], &[2, 2], &Device::cpu())?;
    /// assert_eq!(x.argmax(1, false)?.to_vec::<i64>()?, vec![1, 0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn argmax(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        self.arg_impl("argmax", ArgReduceOp::ArgMax, dim, keepdim)
    }

    /// `I64` index of the first smallest value along `dim` (the first NaN,
    /// if any).
    ///
    /// # Errors
    /// As [`Tensor::max_dim`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[3i32, 1, 1], &[3], &Device::cpu())?;
    /// assert_eq!(x.argmin(0, false)?.item::<i64>()?, 1);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn argmin(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        self.arg_impl("argmin", ArgReduceOp::ArgMin, dim, keepdim)
    }

    // ---------------------------------------------------------- softmax

    /// `e^x / sum(e^x)` along `dim`, computed stably (the row max is
    /// subtracted first, so large logits do not overflow).
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`]; [`Error::UnsupportedDType`] for non-float tensors.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1000.0f32, 1000.0], &[2], &Device::cpu())?;
    /// assert_eq!(x.softmax(0)?.to_vec::<f32>()?, vec![0.5, 0.5]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn softmax(&self, dim: isize) -> Result<Tensor> {
        self.softmax_impl("softmax", dim, false)
    }

    /// `log(softmax(x))` along `dim`, computed stably as
    /// `x - max - log(sum(e^(x - max)))`.
    ///
    /// # Errors
    /// As [`Tensor::softmax`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[0.0f64, 0.0], &[2], &Device::cpu())?;
    /// let y = x.log_softmax(-1)?.to_vec::<f64>()?;
    /// assert!((y[0] + core::f64::consts::LN_2).abs() < 1e-15);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn log_softmax(&self, dim: isize) -> Result<Tensor> {
        self.softmax_impl("log_softmax", dim, true)
    }

    /// `log(sum(e^x))` along `dim`, computed stably (`-inf` over an empty
    /// dim; infinite maxima handled as PyTorch does).
    ///
    /// # Errors
    /// As [`Tensor::softmax`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1000.0f64, 1000.0], &[2], &Device::cpu())?;
    /// let y = x.logsumexp(0, false)?.item::<f64>()?;
    /// assert!((y - (1000.0 + core::f64::consts::LN_2)).abs() < 1e-12);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn logsumexp(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        let op = "logsumexp";
        self.dtype().require_float(op)?;
        let dims = resolve_dims(op, &[dim], self.rank())?;
        if dims.iter().any(|&d| self.shape()[d] == 0) {
            // log(0) = -inf, as the empty sum (0) plus -inf: through `sum`, so
            // the result stays in the graph (its gradient is empty, as in PyTorch)
            return self
                .sum_impl(op, &[dim], keepdim)?
                .add_scalar(f64::NEG_INFINITY);
        }
        // m = max, replaced by 0 where infinite (so inf - inf never appears)
        let m = self.run_reduce(ReduceOp::Max, &dims, true, self.dtype())?;
        let inf = m.abs()?.eq(&m.scalar_like(f64::INFINITY)?)?;
        let m = inf.where_cond(&m.scalar_like(0.0)?, &m)?;
        let e = self.sub(&m)?.exp()?;
        let sum = e.run_reduce(ReduceOp::Sum, &dims, keepdim, self.dtype())?;
        e.record_sum(&sum, &dims, 1.0)?;
        let lse = sum.log()?;
        lse.add(&m.reshape(lse.shape())?)
    }
}
