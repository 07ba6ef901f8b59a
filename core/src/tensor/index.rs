//! Joining and indexing: `cat`, `stack`, `index_select`, `gather`,
//! `index_add`, `scatter_add`, `scatter`, `scatter_value`, `embedding`.
//!
//! Index tensors are `I64` or `I32` (any strides). Index *values* are
//! checked by the kernels before anything is written; negative indices are
//! refused, as PyTorch's `index_select` does. `index_add` and `scatter_add`
//! are out of place here: they return a new tensor and leave `self` as it
//! was.

use super::Tensor;
use crate::autograd::{self, rules::Rule};
use crate::backend::Src;
use crate::dtype::DType;
use crate::error::{ErrShape, Error, Result};
use crate::layout::Layout;
use crate::shape::{Dims, resolve_dim, resolve_insert_dim};
use alloc::vec::Vec;

/// Errors unless `t` can index: `I64` or `I32`, on `like`'s device.
fn check_index(op: &'static str, like: &Tensor, t: &Tensor) -> Result<()> {
    like.same_device(op, t)?;
    match t.dtype() {
        DType::I64 | DType::I32 => Ok(()),
        other => Err(Error::UnsupportedDType {
            op,
            dtype: other,
            supported: "i64, i32 (indices)",
        }),
    }
}

/// The layout of a 0-D or 1-D index tensor as 1-D.
fn index_1d(op: &'static str, t: &Tensor) -> Result<Layout> {
    match t.rank() {
        0 => t.layout().unsqueeze(0),
        1 => Ok(t.layout()),
        r => Err(Error::RankMismatch {
            op,
            expected: "1 (a vector of indices)",
            got: r,
        }),
    }
}

fn require_numeric(op: &'static str, t: &Tensor) -> Result<()> {
    t.dtype().require_numeric(op)
}

/// Renames the op of an index error (`embedding` reports as itself).
fn rename(op: &'static str, e: Error) -> Error {
    match e {
        Error::IndexOutOfRange { index, size, .. } => Error::IndexOutOfRange { op, index, size },
        e => e,
    }
}

impl Tensor {
    /// Concatenates tensors along `dim` (negative counts from the end).
    ///
    /// All tensors need one rank (at least 1), dtype and device, and equal
    /// sizes except along `dim`. Inputs may have any strides.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty list, [`Error::RankMismatch`]
    /// for rank-0 inputs, [`Error::ShapeMismatch`] for sizes that differ off
    /// `dim` or ranks that differ, [`Error::DimOutOfRange`], dtype or device
    /// mismatch.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let dev = Device::cpu();
    /// let a = Tensor::arange(0.0f32, 4.0, &dev)?.reshape(&[2, 2])?;
    /// let b = Tensor::arange(4.0f32, 6.0, &dev)?.reshape(&[2, 1])?;
    /// let c = Tensor::cat(&[&a, &b], -1)?;
    /// assert_eq!(c.shape(), &[2, 3]);
    /// assert_eq!(c.to_vec::<f32>()?, vec![0.0, 1.0, 4.0, 2.0, 3.0, 5.0]);
    /// assert!(Tensor::cat(&[&a, &b], 0).is_err()); // widths 2 and 1 differ
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn cat(tensors: &[&Tensor], dim: isize) -> Result<Tensor> {
        // NOTE [Type promotion]: inputs of different dtypes are converted
        Tensor::with_common_dtype("cat", tensors, |t| Tensor::cat_same(t, dim))
    }

    /// [`Tensor::cat`] of tensors of one dtype.
    fn cat_same(tensors: &[&Tensor], dim: isize) -> Result<Tensor> {
        const OP: &str = "cat";
        let Some(first) = tensors.first() else {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: "the list of tensors is empty; pass at least one tensor",
            });
        };
        let rank = first.rank();
        if rank == 0 {
            return Err(Error::RankMismatch {
                op: OP,
                expected: "at least 1 (rank-0 tensors cannot be concatenated; unsqueeze or use stack)",
                got: 0,
            });
        }
        let d = resolve_dim(OP, dim, rank)?;
        let mut shape = first.dims().clone();
        let mut total = 0usize;
        for t in tensors {
            first.same_device(OP, t)?;
            first.same_dtype(OP, t)?;
            let mut want = first.dims().clone();
            if t.rank() == rank {
                want[d] = t.shape()[d];
            }
            if t.shape() != &want[..] {
                return Err(Error::ShapeMismatch {
                    op: OP,
                    expected: ErrShape::of(&want),
                    got: ErrShape::of(t.shape()),
                });
            }
            total = total
                .checked_add(t.shape()[d])
                .ok_or(Error::InvalidArgument {
                    op: OP,
                    reason: "the concatenated size overflows usize; use smaller tensors",
                })?;
        }
        shape[d] = total;
        let dev = first.device();
        // The parts cover every element once (their sizes along `d` sum to
        // `total`), so no zero-fill.
        let out = Tensor::alloc_for_overwrite(&shape, first.dtype(), &dev)?;
        let storage = out.storage();
        let layout = out.layout();
        let mut start = 0;
        for t in tensors {
            let len = t.shape()[d];
            if len > 0 {
                let part = layout.narrow(d as isize, start, len)?;
                let dst = Src {
                    storage: &storage,
                    layout: &part,
                    dtype: out.dtype(),
                };
                t.with_src(|s| dev.backend().copy_strided(s, dst))?;
            }
            start += len;
        }
        autograd::record(&out, tensors, || {
            Ok(Rule::Cat {
                dim: d,
                sizes: tensors.iter().map(|t| t.shape()[d]).collect(),
            })
        })?;
        Ok(out)
    }

    /// Stacks equal-shaped tensors along a new dim `dim`
    /// (`-(rank+1)..=rank`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty list,
    /// [`Error::ShapeMismatch`] for shapes that differ,
    /// [`Error::DimOutOfRange`], [`Error::RankTooLarge`], dtype or device
    /// mismatch.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let dev = Device::cpu();
    /// let a = Tensor::from_slice(&[1i64, 2], &[2], &dev)?;
    /// let b = Tensor::from_slice(&[3i64, 4], &[2], &dev)?;
    /// let s = Tensor::stack(&[&a, &b], -1)?;
    /// assert_eq!(s.shape(), &[2, 2]);
    /// assert_eq!(s.to_vec::<i64>()?, vec![1, 3, 2, 4]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn stack(tensors: &[&Tensor], dim: isize) -> Result<Tensor> {
        // NOTE [Type promotion]: inputs of different dtypes are converted
        Tensor::with_common_dtype("stack", tensors, |t| Tensor::stack_same(t, dim))
    }

    /// [`Tensor::stack`] of tensors of one dtype.
    fn stack_same(tensors: &[&Tensor], dim: isize) -> Result<Tensor> {
        const OP: &str = "stack";
        let Some(first) = tensors.first() else {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: "the list of tensors is empty; pass at least one tensor",
            });
        };
        let d = resolve_insert_dim(OP, dim, first.rank())?;
        for t in tensors {
            if t.shape() != first.shape() {
                return Err(Error::ShapeMismatch {
                    op: OP,
                    expected: ErrShape::of(first.shape()),
                    got: ErrShape::of(t.shape()),
                });
            }
        }
        // NOTE [Checked output sizes]
        crate::shape::checked_numel(OP, first.shape())?
            .checked_mul(tensors.len())
            .ok_or(Error::InvalidArgument {
                op: OP,
                reason: "the number of elements overflows usize; stack fewer or smaller tensors",
            })?;
        let mut parts = Vec::new();
        parts
            .try_reserve_exact(tensors.len())
            .map_err(|_| Error::OutOfMemory {
                requested: tensors.len() * core::mem::size_of::<Tensor>(),
                available: None,
            })?;
        for t in tensors {
            parts.push(t.unsqueeze(d as isize)?);
        }
        let refs: Vec<&Tensor> = parts.iter().collect();
        Tensor::cat(&refs, d as isize).map_err(|e| match e {
            Error::DTypeMismatch { expected, got, .. } => Error::DTypeMismatch {
                op: OP,
                expected,
                got,
            },
            Error::DeviceMismatch { lhs, rhs, .. } => Error::DeviceMismatch { op: OP, lhs, rhs },
            e => e,
        })
    }

    /// The slices of `self` along `dim` at `indices` (a vector, or a rank-0
    /// index, of `I64`/`I32`), in that order; repeats allowed. The result
    /// has `self`'s shape with `dim` resized to the number of indices.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] for an index outside `0..size(dim)`
    /// (negative ones too), [`Error::RankMismatch`] for indices of rank > 1,
    /// [`Error::UnsupportedDType`] for non-integer indices,
    /// [`Error::DimOutOfRange`], device mismatch.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let dev = Device::cpu();
    /// let x = Tensor::arange(0.0f32, 6.0, &dev)?.reshape(&[3, 2])?;
    /// let i = Tensor::from_slice(&[2i64, 0, 2], &[3], &dev)?;
    /// let y = x.index_select(0, &i)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![4.0, 5.0, 0.0, 1.0, 4.0, 5.0]);
    /// let bad = Tensor::from_slice(&[3i64], &[1], &dev)?;
    /// assert!(x.index_select(0, &bad).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn index_select(&self, dim: isize, indices: &Tensor) -> Result<Tensor> {
        const OP: &str = "index_select";
        check_index(OP, self, indices)?;
        let d = resolve_dim(OP, dim, self.rank())?;
        let il = index_1d(OP, indices)?;
        let mut shape = self.dims().clone();
        shape[d] = il.numel();
        let dev = self.device();
        let out = Tensor::alloc(&shape, self.dtype(), &dev)?;
        self.select_into(d, indices, &il, &out, &out.layout())?;
        autograd::record(&out, &[self], || {
            Ok(Rule::IndexSelect {
                dim: d as isize,
                indices: indices.clone(),
                input_shape: self.dims().clone(),
            })
        })?;
        Ok(out)
    }

    /// `index_select` of `self` along `d` with index layout `il`, into
    /// `out`'s storage through `out_layout`.
    fn select_into(
        &self,
        d: usize,
        indices: &Tensor,
        il: &Layout,
        out: &Tensor,
        out_layout: &Layout,
    ) -> Result<()> {
        let dev = self.device();
        let (is, os) = (indices.storage(), out.storage());
        let idx = Src {
            storage: &is,
            layout: il,
            dtype: indices.dtype(),
        };
        let dst = Src {
            storage: &os,
            layout: out_layout,
            dtype: out.dtype(),
        };
        self.with_src(|s| dev.backend().index_select(s, d, idx, dst))
    }

    /// PyTorch `gather`: `out[i][j] = self[index[i][j]][j]` for `dim == 0`
    /// (and likewise for other dims). `index` has `self`'s rank, each size
    /// at most `self`'s off `dim`; the result has `index`'s shape.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] for an index value outside
    /// `0..size(dim)`, [`Error::RankMismatch`] for an index of another rank,
    /// [`Error::InvalidArgument`] for an index larger than `self` off `dim`,
    /// [`Error::UnsupportedDType`] for non-integer indices,
    /// [`Error::DimOutOfRange`], device mismatch.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let dev = Device::cpu();
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], &dev)?;
    /// let i = Tensor::from_slice(&[0i64, 0, 1, 0], &[2, 2], &dev)?;
    /// assert_eq!(x.gather(1, &i)?.to_vec::<f32>()?, vec![1.0, 1.0, 4.0, 3.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn gather(&self, dim: isize, index: &Tensor) -> Result<Tensor> {
        const OP: &str = "gather";
        check_index(OP, self, index)?;
        let d = resolve_dim(OP, dim, self.rank())?;
        if index.rank() != self.rank() {
            return Err(Error::RankMismatch {
                op: OP,
                expected: "equal to the input's (index must have as many dims as the input)",
                got: index.rank(),
            });
        }
        let fits = (0..self.rank()).all(|i| i == d || index.shape()[i] <= self.shape()[i]);
        if !fits {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: "index.size(d) must not exceed input.size(d) for every d other than dim; narrow the index",
            });
        }
        let dev = self.device();
        let out = Tensor::alloc(index.shape(), self.dtype(), &dev)?;
        self.with_src(|s| index.with_src(|i| out.with_src(|o| dev.backend().gather(s, d, i, o))))?;
        autograd::record(&out, &[self], || {
            Ok(Rule::Gather {
                dim: d as isize,
                index: index.clone(),
                input_shape: self.dims().clone(),
            })
        })?;
        Ok(out)
    }

    /// Out-of-place `index_add`: a copy of `self` where slice `indices[i]`
    /// of `dim` has slice `i` of `src` added (repeated indices accumulate).
    /// `src` is `self`'s shape with `dim` resized to the number of indices.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] for a bad index value,
    /// [`Error::ShapeMismatch`] for a `src` of the wrong shape,
    /// [`Error::RankMismatch`] for indices of rank > 1,
    /// [`Error::UnsupportedDType`] for bool or non-integer indices,
    /// [`Error::DimOutOfRange`], dtype or device mismatch. `self` is never
    /// modified.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let dev = Device::cpu();
    /// let x = Tensor::zeros(&[3], kael_core::DType::F32, &dev)?;
    /// let i = Tensor::from_slice(&[0i64, 2, 0], &[3], &dev)?;
    /// let s = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], &dev)?;
    /// assert_eq!(x.index_add(0, &i, &s)?.to_vec::<f32>()?, vec![4.0, 0.0, 2.0]);
    /// assert_eq!(x.to_vec::<f32>()?, vec![0.0; 3]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn index_add(&self, dim: isize, indices: &Tensor, src: &Tensor) -> Result<Tensor> {
        const OP: &str = "index_add";
        require_numeric(OP, self)?;
        check_index(OP, self, indices)?;
        self.same_device(OP, src)?;
        self.same_dtype(OP, src)?;
        let d = resolve_dim(OP, dim, self.rank())?;
        let il = index_1d(OP, indices)?;
        let mut want = self.dims().clone();
        want[d] = il.numel();
        if src.shape() != &want[..] {
            return Err(Error::ShapeMismatch {
                op: OP,
                expected: ErrShape::of(&want),
                got: ErrShape::of(src.shape()),
            });
        }
        let out = autograd::no_grad(|| self.deep_clone())?;
        let dev = self.device();
        let is = indices.storage();
        let idx = Src {
            storage: &is,
            layout: &il,
            dtype: indices.dtype(),
        };
        out.with_src(|o| src.with_src(|s| dev.backend().index_add(o, d, idx, s)))?;
        autograd::record(&out, &[self, src], || {
            Ok(Rule::IndexAdd {
                dim: d as isize,
                indices: indices.clone(),
            })
        })?;
        Ok(out)
    }

    /// Out-of-place `scatter_add`: a copy of `self` where, for every
    /// position `p` of `index`, `src[p]` is added at `p` with `dim` replaced
    /// by `index[p]`. `index`, `src` and `self` share one rank; `index` is
    /// at most `src`'s size on every dim and at most `self`'s off `dim`.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] for a bad index value,
    /// [`Error::RankMismatch`] for ranks that differ,
    /// [`Error::InvalidArgument`] for an index larger than `src` or `self`,
    /// [`Error::UnsupportedDType`] for bool or non-integer indices,
    /// [`Error::DimOutOfRange`], dtype or device mismatch. `self` is never
    /// modified.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let dev = Device::cpu();
    /// let x = Tensor::zeros(&[2, 3], kael_core::DType::F32, &dev)?;
    /// let i = Tensor::from_slice(&[0i64, 1, 0, 2, 2, 2], &[2, 3], &dev)?;
    /// let s = Tensor::ones(&[2, 3], kael_core::DType::F32, &dev)?;
    /// let y = x.scatter_add(1, &i, &s)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![2.0, 1.0, 0.0, 0.0, 0.0, 3.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn scatter_add(&self, dim: isize, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        const OP: &str = "scatter_add";
        require_numeric(OP, self)?;
        check_index(OP, self, index)?;
        self.same_device(OP, src)?;
        self.same_dtype(OP, src)?;
        let d = self.scatter_shapes(OP, dim, index, src)?;
        let out = autograd::no_grad(|| self.deep_clone())?;
        let dev = self.device();
        out.with_src(|o| {
            index.with_src(|i| src.with_src(|s| dev.backend().scatter_add(o, d, i, s)))
        })?;
        autograd::record(&out, &[self, src], || {
            Ok(Rule::ScatterAdd {
                dim: d as isize,
                index: index.clone(),
            })
        })?;
        Ok(out)
    }

    /// The shape checks scatter_add and scatter share: one rank, `index`
    /// no larger than `src` anywhere nor than `self` off `dim`; the dim.
    fn scatter_shapes(
        &self,
        op: &'static str,
        dim: isize,
        index: &Tensor,
        src: &Tensor,
    ) -> Result<usize> {
        let d = resolve_dim(op, dim, self.rank())?;
        for t in [index, src] {
            if t.rank() != self.rank() {
                return Err(Error::RankMismatch {
                    op,
                    expected: "equal to the input's (index and src must have as many dims as the input)",
                    got: t.rank(),
                });
            }
        }
        let fits = (0..self.rank()).all(|i| {
            index.shape()[i] <= src.shape()[i] && (i == d || index.shape()[i] <= self.shape()[i])
        });
        if !fits {
            return Err(Error::InvalidArgument {
                op,
                reason: "index.size(d) must not exceed src.size(d) for every d, nor input.size(d) for d other than dim; narrow the index",
            });
        }
        Ok(d)
    }

    /// Out-of-place PyTorch `scatter` with a tensor source: a copy of
    /// `self` where, for every position `p` of `index`, the element at `p`
    /// with `dim` replaced by `index[p]` is set to `src[p]`. Shapes as
    /// [`Tensor::scatter_add`].
    ///
    /// Duplicate targets: PyTorch leaves the result unspecified; here the
    /// last write in `index`'s row-major order wins, deterministically, on
    /// every device. Differentiable in `self` (the gradient with the
    /// written positions zeroed) and `src` (`grad.gather(dim, index)` at
    /// the winning writes, 0 at overwritten ones, so it is consistent with
    /// the forward; PyTorch's gradient is defined only for unique
    /// indices, where the two agree).
    ///
    /// The index values are read on the host (one readback for a device
    /// tensor) to validate them and find the winning writes; the rest runs
    /// on the device as `scatter_add` and `where`, so no backend method is
    /// added.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] for an index value outside
    /// `0..size(dim)` (negative ones too); [`Error::RankMismatch`],
    /// [`Error::InvalidArgument`] for shapes as in
    /// [`Tensor::scatter_add`]; [`Error::UnsupportedDType`] for
    /// non-integer indices; [`Error::DimOutOfRange`]; dtype or device
    /// mismatch. `self` is never modified.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let dev = Device::cpu();
    /// let x = Tensor::zeros(&[2, 3], kael_core::DType::F32, &dev)?;
    /// let i = Tensor::from_slice(&[2i64, 0, 1, 1], &[2, 2], &dev)?;
    /// let s = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], &dev)?;
    /// let y = x.scatter(1, &i, &s)?;
    /// // row 1 writes 3 then 4 to column 1: the last write wins
    /// assert_eq!(y.to_vec::<f32>()?, vec![2.0, 0.0, 1.0, 0.0, 4.0, 0.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn scatter(&self, dim: isize, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        const OP: &str = "scatter";
        check_index(OP, self, index)?;
        self.same_device(OP, src)?;
        self.same_dtype(OP, src)?;
        self.scatter_impl(OP, dim, index, src)
    }

    /// Out-of-place PyTorch `scatter` with a scalar: a copy of `self` with
    /// `value` (converted to the dtype) at every position `index` names
    /// along `dim`. Differentiable in `self` (the gradient with the
    /// written positions zeroed).
    ///
    /// # Errors
    /// As [`Tensor::scatter`], and [`Error::InvalidArgument`] for an index
    /// larger than `self` off `dim`.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let dev = Device::cpu();
    /// let x = Tensor::arange(0i64, 4, &dev)?;
    /// let i = Tensor::from_slice(&[3i64, 0], &[2], &dev)?;
    /// assert_eq!(x.scatter_value(0, &i, -1.0)?.to_vec::<i64>()?, vec![-1, 1, 2, -1]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn scatter_value(&self, dim: isize, index: &Tensor, value: f64) -> Result<Tensor> {
        const OP: &str = "scatter_value";
        check_index(OP, self, index)?;
        let src = autograd::no_grad(|| self.fill_arg(OP, value)?.expand(index.shape()))
            .map_err(|e| e.renamed(OP))?;
        self.scatter_impl(OP, dim, index, &src)
    }

    /// The winning writes of a scatter along `d` (NOTE [Declared
    /// families]: `kernels::scatter`), on the device; `None` where the
    /// device lacks the family.
    fn wins_on_device(&self, op: &'static str, d: usize, index: &Tensor) -> Result<Option<Tensor>> {
        use crate::backend::{Family, Provenance};
        let prov = self.device().backend().provenance(Family::ScatterWins);
        if !matches!(prov, Provenance::Own | Provenance::Inherited(_)) {
            return Ok(None);
        }
        let word = |v: usize| {
            u32::try_from(v).map_err(|_| Error::InvalidArgument {
                op,
                reason: "a size above 2^32 - 1; use smaller tensors",
            })
        };
        let words = [word(d)?, word(self.shape()[d])?];
        autograd::no_grad(|| Tensor::declared(Family::ScatterWins, 0, &words, &[index]))
            .map(Some)
            .map_err(|e| e.renamed(op))
    }

    /// [`Tensor::wins_on_device`] on the host, from the index values.
    fn wins_on_host(&self, op: &'static str, d: usize, index: &Tensor) -> Result<Tensor> {
        let size = self.shape()[d];
        self.device().backend().host_computed(op);
        let ix = autograd::no_grad(|| index.to_dtype(DType::I64)?.to_vec::<i64>())
            .map_err(|e| e.renamed(op))?;
        if let Some(&bad) = ix.iter().find(|&&v| v < 0 || v as u64 >= size as u64) {
            return Err(Error::IndexOutOfRange {
                op,
                index: bad,
                size,
            });
        }
        // the last write to each target wins: walk each line along `dim`
        // backwards and keep the first occurrence of every index value
        let ishape = index.shape();
        let outer: usize = ishape[..d].iter().product();
        let inner: usize = ishape[d + 1..].iter().product();
        let m = ishape[d];
        let mut wins = Vec::new();
        let mut seen = Vec::new();
        wins.try_reserve_exact(ix.len())
            .and_then(|_| seen.try_reserve_exact(size))
            .map_err(|_| Error::OutOfMemory {
                requested: ix.len().saturating_add(size),
                available: None,
            })?;
        wins.resize(ix.len(), false);
        seen.resize(size, false);
        let mut touched = Vec::new();
        for o in 0..outer {
            for i in 0..inner {
                for j in (0..m).rev() {
                    let at = (o * m + j) * inner + i;
                    let v = ix[at] as usize;
                    if !seen[v] {
                        seen[v] = true;
                        wins[at] = true;
                        touched.push(v);
                    }
                }
                for v in touched.drain(..) {
                    seen[v] = false;
                }
            }
        }
        Tensor::from_slice(&wins, ishape, &self.device())
    }

    fn scatter_impl(
        &self,
        op: &'static str,
        dim: isize,
        index: &Tensor,
        src: &Tensor,
    ) -> Result<Tensor> {
        let d = self.scatter_shapes(op, dim, index, src)?;
        let ishape = index.shape();
        let win = match self.wins_on_device(op, d, index)? {
            Some(win) => win,
            None => self.wins_on_host(op, d, index)?,
        };
        let run = || -> Result<Tensor> {
            let dev = self.device();
            // scatter_add refuses bool: work in u8 and convert back
            let (x, s) = if self.dtype() == DType::Bool {
                (self.to_dtype(DType::U8)?, src.to_dtype(DType::U8)?)
            } else {
                (self.clone(), src.clone())
            };
            let mut s_part = s;
            for (k, &n) in ishape.iter().enumerate() {
                if s_part.shape()[k] != n {
                    s_part = s_part.narrow(k as isize, 0, n)?;
                }
            }
            let picked = win.where_cond(&s_part, &s_part.scalar_like(0.0)?)?;
            // (Counted in f32, which a plan replays: at most one winner
            // lands on each target.)
            let written = autograd::no_grad(|| {
                Tensor::zeros(x.shape(), DType::F32, &dev)?
                    .scatter_add(d as isize, index, &win.to_dtype(DType::F32)?)?
                    .gt(&Tensor::scalar(0.0f32, &dev)?)
            })?;
            // -0.0 + v is v for every v (0.0 + -0.0 would lose the sign)
            let base = Tensor::full(x.shape(), -0.0, x.dtype(), &dev)?;
            let placed = base.scatter_add(d as isize, index, &picked)?;
            let out = written.where_cond(&placed, &x)?;
            if self.dtype() == DType::Bool {
                out.to_dtype(DType::Bool)
            } else {
                Ok(out)
            }
        };
        run().map_err(|e| e.renamed(op))
    }

    /// Looks up rows of `weight` (`[num, dim]`) by `ids` (any shape, `I64`
    /// or `I32`): the result has shape `ids.shape() + [dim]`.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] for an id outside `0..num`,
    /// [`Error::RankMismatch`] unless `weight` is rank 2,
    /// [`Error::UnsupportedDType`] for non-integer ids,
    /// [`Error::RankTooLarge`] for rank-8 ids, device mismatch.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let dev = Device::cpu();
    /// let w = Tensor::arange(0.0f32, 6.0, &dev)?.reshape(&[3, 2])?;
    /// let ids = Tensor::from_slice(&[2i32, 0], &[1, 2], &dev)?;
    /// let e = Tensor::embedding(&w, &ids)?;
    /// assert_eq!(e.shape(), &[1, 2, 2]);
    /// assert_eq!(e.to_vec::<f32>()?, vec![4.0, 5.0, 0.0, 1.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn embedding(weight: &Tensor, ids: &Tensor) -> Result<Tensor> {
        const OP: &str = "embedding";
        if weight.rank() != 2 {
            return Err(Error::RankMismatch {
                op: OP,
                expected: "2 (weight is [num_embeddings, embedding_dim])",
                got: weight.rank(),
            });
        }
        check_index(OP, weight, ids)?;
        let width = weight.shape()[1];
        let mut shape = Dims::from_slice(ids.shape())?;
        shape.push(width)?;
        // rank 0 and 1 are used through their layout (no reshape needed)
        let flat = if ids.rank() > 1 {
            ids.reshape(&[ids.numel()])?
        } else {
            ids.clone()
        };
        let il = index_1d(OP, &flat)?;
        let dev = weight.device();
        let out = Tensor::alloc(&shape, weight.dtype(), &dev)?;
        let rows = Layout::contiguous(&[ids.numel(), width])?;
        weight
            .select_into(0, &flat, &il, &out, &rows)
            .map_err(|e| rename(OP, e))?;
        autograd::record(&out, &[weight], || {
            Ok(Rule::Embedding {
                indices: flat.clone(),
                weight_shape: weight.dims().clone(),
            })
        })?;
        Ok(out)
    }
}
