//! Views that reinterpret the storage: `as_strided` (any strides over the
//! storage) and `view_dtype` (the same bytes as another dtype).

use super::Tensor;
use crate::autograd::rules::ViewKind;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;

impl Tensor {
    /// A view with explicit sizes, strides and storage offset, checked
    /// against the storage's bounds.
    ///
    /// # Errors
    /// Rank disagreement; an element count that overflows `usize`;
    /// [`Error::OutOfBounds`] past the storage's end.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::arange(0.0f32, 6.0, &Device::cpu())?;
    /// let w = x.as_strided(&[2, 3], &[1, 2], 0)?;
    /// assert_eq!(w.to_vec::<f32>()?, vec![0.0, 2.0, 4.0, 1.0, 3.0, 5.0]);
    /// assert!(x.as_strided(&[2, 3], &[1, 2], 1).is_err()); // would reach element 6
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    #[must_use = "views are new tensors; the input is unchanged"]
    pub fn as_strided(
        &self,
        size: &[usize],
        stride: &[usize],
        storage_offset: usize,
    ) -> Result<Tensor> {
        let layout = Layout::new(size, stride, storage_offset)?;
        crate::shape::checked_numel("as_strided", size)?;
        let storage_len = self.storage_nbytes() / self.element_size();
        if layout.reach() > storage_len {
            return Err(Error::OutOfBounds {
                op: "as_strided",
                reach: layout.reach(),
                storage_len,
            });
        }
        let input = self.layout();
        self.view_op(
            |_| Ok(layout.clone()),
            ViewKind::AsStrided(alloc::boxed::Box::new((input, layout.clone()))),
        )
    }

    /// Reinterprets the bytes as another dtype (no copy). Element sizes may
    /// differ when the last dim has stride 1; its size (and every other
    /// stride and the offset) scale by the size ratio, as in PyTorch.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the layout cannot be reinterpreted,
    /// or when the view would change the dtype to or from `Bool` (NOTE
    /// [Bool storage]: use [`Tensor::to_dtype`]).
    ///
    /// ```
    /// use kael_core::{DType, Device, Tensor};
    /// let x = Tensor::arange(0.0f32, 12.0, &Device::cpu())?.reshape(&[3, 4])?;
    /// let i = x.view_dtype(DType::I32)?;
    /// assert_eq!(i.select(0, 0)?.to_vec::<i32>()?, vec![0, 1065353216, 1073741824, 1077936128]);
    /// assert_eq!(x.view_dtype(DType::U8)?.shape(), &[3, 16]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    #[must_use = "views are new tensors; the input is unchanged"]
    pub fn view_dtype(&self, dtype: DType) -> Result<Tensor> {
        // NOTE [Bool storage]: bool bytes are 0 or 1. Viewing other bytes as
        // bool, or a bool tensor as bytes that can be written, would break
        // that, so both are refused.
        if (self.dtype() == DType::Bool) != (dtype == DType::Bool) {
            return Err(Error::InvalidArgument {
                op: "view_dtype",
                reason: "a view cannot change a tensor to or from bool (bool bytes must stay 0 or 1); convert with to_dtype() instead",
            });
        }
        let (old, new) = (self.element_size(), dtype.size_in_bytes());
        let layout = self.layout();
        if old == new {
            return self.make_view_as(|l| Ok(l.clone()), dtype);
        }
        let rank = self.rank();
        if rank == 0 {
            return Err(Error::InvalidArgument {
                op: "view_dtype",
                reason: "a rank-0 tensor can only be viewed as a dtype of the same size; unsqueeze it first",
            });
        }
        if layout.strides()[rank - 1] != 1 && layout.shape()[rank - 1] != 1 {
            return Err(Error::InvalidArgument {
                op: "view_dtype",
                reason: "the last dimension must have stride 1 to change the element size; call contiguous() first",
            });
        }
        let mut shape = layout.shape().clone();
        let mut strides = layout.strides().clone();
        let offset;
        if new < old {
            let r = old / new;
            // Only `as_strided` layouts (huge strides on size-1 dims, huge
            // sizes next to a 0) can overflow when counted in smaller units.
            let overflow = Error::InvalidArgument {
                op: "view_dtype",
                reason: "a size, stride or the offset overflows usize when counted in the smaller element; call deep_clone() first",
            };
            shape[rank - 1] = shape[rank - 1].checked_mul(r).ok_or(overflow.clone())?;
            for (i, s) in strides.iter_mut().enumerate() {
                if i != rank - 1 {
                    *s = s.checked_mul(r).ok_or(overflow.clone())?;
                }
            }
            strides[rank - 1] = 1;
            offset = layout.offset().checked_mul(r).ok_or(overflow)?;
        } else {
            let r = new / old;
            let bad = "the last dimension's size, every other stride and the offset must be divisible by the element-size ratio; call contiguous() or narrow to a multiple";
            if shape[rank - 1] % r != 0 || layout.offset() % r != 0 {
                return Err(Error::InvalidArgument {
                    op: "view_dtype",
                    reason: bad,
                });
            }
            for (i, s) in strides.iter_mut().enumerate() {
                if i != rank - 1 {
                    if *s % r != 0 {
                        return Err(Error::InvalidArgument {
                            op: "view_dtype",
                            reason: bad,
                        });
                    }
                    *s /= r;
                }
            }
            shape[rank - 1] /= r;
            strides[rank - 1] = 1;
            offset = layout.offset() / r;
        }
        self.make_view_as(|_| Ok(Layout::from_dims(shape, strides, offset)), dtype)
    }
}
