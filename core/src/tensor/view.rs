//! Views: new impls over the same storage. Shapes, strides, offsets and
//! view-or-copy behaviour follow PyTorch.

use super::create::{ShapeSpec, infer_shape};
use super::{Tensor, TensorImpl};
use crate::autograd::rules::{Replay, Rule, ViewKind};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::shape::{Dims, resolve_dim};
use crate::shared::Shared;
use crate::storage::Storage;
use alloc::boxed::Box;
use alloc::vec::Vec;

impl Tensor {
    /// Positions `start..start+length` of `dim`.
    ///
    /// # Errors
    /// Bad `dim`; a range past the end of the dimension.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::arange(0.0f32, 6.0, &Device::cpu())?.reshape(&[2, 3])?;
    /// let n = x.narrow(1, 1, 2)?;
    /// assert_eq!((n.shape(), n.offset()), (&[2, 2][..], 1));
    /// assert_eq!(n.to_vec::<f32>()?, vec![1.0, 2.0, 4.0, 5.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    #[must_use = "views are new tensors; the input is unchanged"]
    pub fn narrow(&self, dim: isize, start: usize, length: usize) -> Result<Tensor> {
        let d = resolve_dim("narrow", dim, self.rank())?;
        self.view_op(|l| l.narrow(dim, start, length), ViewKind::Narrow(d, start))
    }

    /// Python slicing `[start:end:step]` along `dim` (bounds clamped,
    /// negatives from the end, `step >= 1`).
    ///
    /// # Errors
    /// Bad `dim`; `step == 0`.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::arange(0i64, 10, &Device::cpu())?;
    /// assert_eq!(x.slice(0, 1, -1, 3)?.to_vec::<i64>()?, vec![1, 4, 7]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    #[must_use = "views are new tensors; the input is unchanged"]
    pub fn slice(&self, dim: isize, start: isize, end: isize, step: usize) -> Result<Tensor> {
        self.view_op(
            |l| l.slice(dim, start, end, step),
            ViewKind::Replay(Replay::Slice(dim, start, end, step)),
        )
    }

    /// Removes `dim`, keeping position `index` (negative from the end).
    ///
    /// # Errors
    /// Bad `dim` or `index`.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::arange(0.0f32, 6.0, &Device::cpu())?.reshape(&[2, 3])?;
    /// assert_eq!(x.select(1, -1)?.to_vec::<f32>()?, vec![2.0, 5.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    #[must_use = "views are new tensors; the input is unchanged"]
    pub fn select(&self, dim: isize, index: isize) -> Result<Tensor> {
        self.view_op_with(
            |l| l.select(dim, index),
            || {
                let d = resolve_dim("select", dim, self.rank())?;
                // In range: `Layout::select` checked it.
                let i = if index < 0 {
                    self.shape()[d] - index.unsigned_abs()
                } else {
                    index as usize
                };
                Ok(ViewKind::Select(d, i))
            },
        )
    }

    /// Swaps two dims.
    ///
    /// # Errors
    /// Bad dims.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::zeros(&[2, 3, 4], kael_core::DType::F32, &Device::cpu())?;
    /// assert_eq!(&x.transpose(0, 2)?.strides()[..], &[1, 4, 12]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    #[must_use = "views are new tensors; the input is unchanged"]
    pub fn transpose(&self, dim0: isize, dim1: isize) -> Result<Tensor> {
        // The permutation is only needed when autograd records the view.
        self.view_op_with(
            |l| l.transpose(dim0, dim1),
            || {
                let mut perm = Dims::new();
                for i in 0..self.rank() {
                    perm.push(i)?;
                }
                perm.swap(
                    resolve_dim("transpose", dim0, self.rank())?,
                    resolve_dim("transpose", dim1, self.rank())?,
                );
                Ok(ViewKind::Permute(Box::new(perm)))
            },
        )
    }

    /// Matrix transpose: swaps the two dims of a rank-2 tensor; rank 0 and
    /// 1 are returned as views unchanged (PyTorch `t()`).
    ///
    /// # Errors
    /// [`Error::RankMismatch`] for rank > 2.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::zeros(&[2, 3], kael_core::DType::F32, &Device::cpu())?;
    /// assert_eq!(x.t()?.shape(), &[3, 2]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    #[must_use = "views are new tensors; the input is unchanged"]
    pub fn t(&self) -> Result<Tensor> {
        match self.rank() {
            0 | 1 => self.view_op(|l| Ok(l.clone()), ViewKind::Reshape),
            2 => self.transpose(0, 1),
            r => Err(Error::RankMismatch {
                op: "t",
                expected: "at most 2 (use transpose for higher ranks)",
                got: r,
            }),
        }
    }

    /// Reorders dims: output dim `i` is input dim `dims[i]`.
    ///
    /// # Errors
    /// `dims` not a permutation.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::zeros(&[2, 3, 4], kael_core::DType::F32, &Device::cpu())?;
    /// let p = x.permute(&[2, 0, 1])?;
    /// assert_eq!((p.shape(), &p.strides()[..]), (&[4, 2, 3][..], &[1, 12, 4][..]));
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    #[must_use = "views are new tensors; the input is unchanged"]
    pub fn permute(&self, dims: &[isize]) -> Result<Tensor> {
        self.view_op_with(
            |l| l.permute(dims),
            || {
                let mut perm = Dims::new();
                for &d in dims {
                    perm.push(resolve_dim("permute", d, self.rank())?)?;
                }
                Ok(ViewKind::Permute(Box::new(perm)))
            },
        )
    }

    /// Broadcasts to `sizes` with stride 0 (no copy); `-1` keeps a size.
    ///
    /// # Errors
    /// Sizes that are not a broadcast of the shape.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0], &[2, 1], &Device::cpu())?;
    /// let e = x.expand(&[2, 3])?;
    /// assert_eq!(&e.strides()[..], &[1, 0]);
    /// assert_eq!(e.to_vec::<f32>()?, vec![1.0, 1.0, 1.0, 2.0, 2.0, 2.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    #[must_use = "views are new tensors; the input is unchanged"]
    pub fn expand<S: ShapeSpec + ?Sized>(&self, sizes: &S) -> Result<Tensor> {
        let spec = sizes.spec()?;
        self.view_op(|l| l.expand(&spec), ViewKind::Expand)
    }

    /// [`Tensor::expand`] to an exact shape (no `-1`).
    ///
    /// # Errors
    /// A shape that is not a broadcast of `self`'s.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::arange(0.0f32, 3.0, &Device::cpu())?;
    /// assert_eq!(x.broadcast_to(&[2, 3])?.shape(), &[2, 3]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    #[must_use = "views are new tensors; the input is unchanged"]
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Tensor> {
        const OP: &str = "broadcast_to";
        // a size past isize::MAX would read as expand's -1 ("keep this dim")
        let spec = shape
            .iter()
            .map(|&d| isize::try_from(d))
            .collect::<core::result::Result<Vec<isize>, _>>()
            .map_err(|_| Error::InvalidArgument {
                op: OP,
                reason: "a size is larger than isize::MAX; use a smaller shape",
            })?;
        self.view_op(|l| l.expand(&spec), ViewKind::Expand)
            .map_err(|e| e.renamed(OP))
    }

    /// Inserts a size-1 dim at `dim` (`-rank-1..=rank`).
    ///
    /// # Errors
    /// Bad `dim`; rank overflow.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::zeros(&[2, 3], kael_core::DType::F32, &Device::cpu())?;
    /// assert_eq!(x.unsqueeze(-1)?.shape(), &[2, 3, 1]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    #[must_use = "views are new tensors; the input is unchanged"]
    pub fn unsqueeze(&self, dim: isize) -> Result<Tensor> {
        self.view_op(|l| l.unsqueeze(dim), ViewKind::Reshape)
    }

    /// Removes every size-1 dim.
    ///
    /// # Errors
    /// Never for valid tensors (kept fallible for uniformity).
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::zeros(&[1, 2, 1], kael_core::DType::F32, &Device::cpu())?;
    /// assert_eq!(x.squeeze()?.shape(), &[2]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    #[must_use = "views are new tensors; the input is unchanged"]
    pub fn squeeze(&self) -> Result<Tensor> {
        self.view_op(|l| Ok(l.squeeze()), ViewKind::Reshape)
    }

    /// Removes `dim` if its size is 1 (otherwise a view of the same shape).
    ///
    /// # Errors
    /// Bad `dim`.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::zeros(&[1, 2], kael_core::DType::F32, &Device::cpu())?;
    /// assert_eq!(x.squeeze_dim(0)?.shape(), &[2]);
    /// assert_eq!(x.squeeze_dim(1)?.shape(), &[1, 2]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    #[must_use = "views are new tensors; the input is unchanged"]
    pub fn squeeze_dim(&self, dim: isize) -> Result<Tensor> {
        self.view_op(|l| l.squeeze_dim(dim), ViewKind::Reshape)
    }

    /// A view with a new shape (one size may be `-1`); fails when the
    /// strides cannot express it without copying.
    ///
    /// # Errors
    /// [`Error::ElementCountMismatch`]; [`Error::ViewNotPossible`] (use
    /// [`Tensor::reshape`]).
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::arange(0.0f32, 12.0, &Device::cpu())?;
    /// assert_eq!(x.view(&[3, -1])?.shape(), &[3, 4]);
    /// assert!(x.view(&[3, 4])?.t()?.view(&[12]).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    #[must_use = "views are new tensors; the input is unchanged"]
    pub fn view<S: ShapeSpec + ?Sized>(&self, shape: &S) -> Result<Tensor> {
        let shape = infer_shape("view", &shape.spec()?, self.numel())?;
        self.view_op(|l| l.view(&shape), ViewKind::Reshape)
    }

    /// Like [`Tensor::view`] when the strides allow it, else a contiguous copy.
    ///
    /// # Errors
    /// [`Error::ElementCountMismatch`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::arange(0.0f32, 6.0, &Device::cpu())?.reshape(&[2, 3])?;
    /// let r = x.t()?.reshape(&[6])?; // copies: not expressible as a view
    /// assert!(!r.shares_storage(&x));
    /// assert_eq!(r.to_vec::<f32>()?, vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn reshape<S: ShapeSpec + ?Sized>(&self, shape: &S) -> Result<Tensor> {
        let shape = infer_shape("reshape", &shape.spec()?, self.numel())?;
        let layout = self.layout();
        match layout.view_strides(&shape) {
            Some(strides) => self.view_op(
                |_| Ok(Layout::from_dims(shape, strides, layout.offset())),
                ViewKind::Reshape,
            ),
            None => self.deep_clone()?.view(&shape),
        }
    }

    /// Flattens dims `start..=end` into one (a view when possible).
    ///
    /// # Errors
    /// Bad dims or `start > end`.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::zeros(&[2, 3, 4], kael_core::DType::F32, &Device::cpu())?;
    /// assert_eq!(x.flatten(1, -1)?.shape(), &[2, 12]);
    /// assert_eq!(x.flatten(0, -1)?.shape(), &[24]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn flatten(&self, start: isize, end: isize) -> Result<Tensor> {
        if self.rank() == 0 {
            return self.reshape(&[1usize]);
        }
        let s = resolve_dim("flatten", start, self.rank())?;
        let e = resolve_dim("flatten", end, self.rank())?;
        if s > e {
            return Err(Error::InvalidArgument {
                op: "flatten",
                reason: "start dim must not come after end dim",
            });
        }
        let mut shape = Dims::new();
        for (i, &d) in self.shape().iter().enumerate() {
            if i <= s || i > e {
                shape.push(d)?;
            } else if let Some(last) = shape.last_mut() {
                // Exact: the tensor's element count fits in usize, and a 0
                // anywhere makes the saturated product 0 again.
                *last = last.saturating_mul(d);
            }
        }
        self.reshape(&shape)
    }

    /// Sliding windows of `size` with `step` along `dim`, as a new last dim.
    ///
    /// # Errors
    /// Bad `dim`; `size` larger than the dim; `step == 0`.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::arange(0.0f32, 7.0, &Device::cpu())?;
    /// let u = x.unfold(0, 2, 3)?; // windows [0,1], [3,4]
    /// assert_eq!((u.shape(), &u.strides()[..]), (&[2, 2][..], &[3, 1][..]));
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    #[must_use = "views are new tensors; the input is unchanged"]
    pub fn unfold(&self, dim: isize, size: usize, step: usize) -> Result<Tensor> {
        self.view_op(
            |l| l.unfold(dim, size, step),
            ViewKind::Replay(Replay::Unfold(dim, size, step)),
        )
    }

    /// The diagonal of `dim1`/`dim2`, shifted by `offset`, as the last dim.
    ///
    /// # Errors
    /// Bad or equal dims.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::arange(0.0f32, 9.0, &Device::cpu())?.reshape(&[3, 3])?;
    /// assert_eq!(x.diagonal(0, 0, 1)?.to_vec::<f32>()?, vec![0.0, 4.0, 8.0]);
    /// assert_eq!(x.diagonal(1, 0, 1)?.to_vec::<f32>()?, vec![1.0, 5.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    #[must_use = "views are new tensors; the input is unchanged"]
    pub fn diagonal(&self, offset: isize, dim1: isize, dim2: isize) -> Result<Tensor> {
        self.view_op(
            |l| l.diagonal(offset, dim1, dim2),
            ViewKind::Replay(Replay::Diagonal(offset, dim1, dim2)),
        )
    }

    /// A view whose layout `derive` computes from this tensor's, recorded
    /// by autograd with `kind` (views of tensors that require grad get a
    /// view node; others are plain views).
    pub(crate) fn view_op(
        &self,
        derive: impl FnOnce(&Layout) -> Result<Layout>,
        kind: ViewKind,
    ) -> Result<Tensor> {
        self.view_op_with(derive, || Ok(kind))
    }

    /// [`Tensor::view_op`] with the backward's description built only when
    /// autograd records the view (the common no-grad path skips it).
    pub(crate) fn view_op_with(
        &self,
        derive: impl FnOnce(&Layout) -> Result<Layout>,
        kind: impl FnOnce() -> Result<ViewKind>,
    ) -> Result<Tensor> {
        let out = self.make_view_as(derive, self.dtype())?;
        crate::autograd::record(&out, &[self], || {
            Ok(Rule::View {
                input_shape: self.dims().clone(),
                kind: kind()?,
            })
        })?;
        Ok(out)
    }

    /// A tensor sharing storage (and version counter) with no autograd history.
    ///
    /// # Errors
    /// Never for valid tensors.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::arange(0.0f32, 3.0, &Device::cpu())?;
    /// let d = x.detach()?;
    /// assert!(d.shares_storage(&x) && !d.is_same(&x) && !d.requires_grad());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn detach(&self) -> Result<Tensor> {
        Ok(Tensor::from_impl(super::TensorImpl::new_on(
            self.storage(),
            self.layout(),
            self.dtype(),
            None,
            Some(self.device()),
        )?))
    }

    /// A view whose layout `derive` computes from this tensor's, tagged
    /// with `dtype` (view_dtype helper). The storage and device are read
    /// under one acquisition of the placement lock; the layout needs none
    /// (INVARIANT 5 of `TensorImpl`).
    ///
    /// An empty view reads nothing, so an offset past the storage's end
    /// (`zeros(&[2, 0]).select(0, 1)`: offset 1 of 0 elements, as in
    /// PyTorch) is clamped to the end to keep INVARIANT 2 of `TensorImpl`.
    #[inline]
    pub(crate) fn make_view_as(
        &self,
        derive: impl FnOnce(&Layout) -> Result<Layout>,
        dtype: DType,
    ) -> Result<Tensor> {
        // `device` is `None` unless the tensor was moved to another
        // host-memory device (no reference count to bump then).
        let (storage, device) = self
            .0
            .placement
            .read(|p| (p.storage.clone(), p.device.clone()));
        let layout = derive(self.layout_ref())?;
        self.view_from_parts(storage, layout, dtype, device)
    }

    /// The rest of [`Tensor::make_view_as`], outside the generic part so
    /// that every view op shares one copy of it (`TensorImpl::new_on` is
    /// inlined here, which keeps the impl from being moved through a
    /// `Result` before it reaches the heap).
    fn view_from_parts(
        &self,
        storage: Shared<Storage>,
        layout: Layout,
        dtype: DType,
        device: Option<Device>,
    ) -> Result<Tensor> {
        let root = self.root();
        let layout = if layout.shape().contains(&0) {
            let len = storage.nbytes() / dtype.size_in_bytes();
            let offset = layout.offset().min(len);
            Layout::from_dims(layout.shape().clone(), layout.strides().clone(), offset)
        } else {
            layout
        };
        Ok(Tensor::from_impl(TensorImpl::new_on(
            storage,
            layout,
            dtype,
            Some(root),
            device,
        )?))
    }
}
