//! The view transforms of a [`Layout`] (`narrow`, `slice`, `select`,
//! `transpose`, `permute`, `expand`, `unsqueeze`, `squeeze`, `view`,
//! `unfold`, `diagonal`): pure metadata arithmetic returning a new layout,
//! following PyTorch's shapes, strides and offsets.

use super::Layout;
use crate::error::{ErrShape, Error, Result};
use crate::shape::{
    Dims, MAX_RANK, checked_numel, contiguous_strides, resolve_dim, resolve_insert_dim,
};

impl Layout {
    /// `narrow(dim, start, length)`: positions `start..start+length` of `dim`.
    ///
    /// # Errors
    /// Bad `dim`, or a range that leaves the dimension.
    pub fn narrow(&self, dim: isize, start: usize, length: usize) -> Result<Self> {
        let d = resolve_dim("narrow", dim, self.rank())?;
        let size = self.shape[d];
        let end = start.saturating_add(length);
        if start > size || end > size {
            return Err(Error::IndexOutOfRange {
                op: "narrow",
                index: i64::try_from(end).unwrap_or(i64::MAX),
                size,
            });
        }
        let mut out = self.clone();
        out.shape[d] = length;
        // NOTE [Saturating view arithmetic]: for a layout with elements, every
        // offset and stride below is bounded by its reach (checked against the
        // storage when the view is made). Only empty layouts and size-1 dims,
        // whose strides are never stepped, can carry huge values (from
        // `as_strided`); saturating keeps those from overflowing, and an
        // empty view's offset is clamped when the tensor is made. A length-0
        // narrow keeps the offset `start` gives, as PyTorch.
        out.offset = out
            .offset
            .saturating_add(start.saturating_mul(self.strides[d]));
        Ok(out)
    }

    /// Python slicing `[start:end:step]` on `dim`: negative bounds count
    /// from the end, out-of-range bounds are clamped, `step >= 1`.
    ///
    /// # Errors
    /// Bad `dim`, or `step < 1`.
    pub fn slice(&self, dim: isize, start: isize, end: isize, step: usize) -> Result<Self> {
        let d = resolve_dim("slice", dim, self.rank())?;
        if step == 0 {
            return Err(Error::InvalidArgument {
                op: "slice",
                reason: "step must be at least 1 (negative steps are not supported; use flip)",
            });
        }
        // i128: sizes of empty `as_strided` layouts may exceed isize::MAX.
        let size = self.shape[d] as i128;
        let clamp = |i: isize| -> usize {
            let i = i as i128;
            let i = if i < 0 { i + size } else { i };
            i.clamp(0, size) as usize
        };
        let (s, e) = (clamp(start), clamp(end));
        let len = if e > s { (e - s).div_ceil(step) } else { 0 };
        let mut out = self.clone();
        out.shape[d] = len;
        // An empty slice keeps the offset of its (clamped) start, as PyTorch.
        out.offset = out.offset.saturating_add(s.saturating_mul(self.strides[d]));
        out.strides[d] = self.strides[d].saturating_mul(step);
        Ok(out)
    }

    /// Removes `dim` by fixing its index (negative counts from the end).
    ///
    /// # Errors
    /// Bad `dim` or `index`.
    pub fn select(&self, dim: isize, index: isize) -> Result<Self> {
        let d = resolve_dim("select", dim, self.rank())?;
        let size = self.shape[d];
        let i = if index < 0 {
            size.checked_sub(index.unsigned_abs())
        } else {
            Some(index as usize)
        };
        let Some(i) = i.filter(|&i| i < size) else {
            return Err(Error::IndexOutOfRange {
                op: "select",
                index: index as i64,
                size,
            });
        };
        let mut out = self.clone();
        out.offset = out.offset.saturating_add(i.saturating_mul(self.strides[d]));
        out.shape.remove(d);
        out.strides.remove(d);
        Ok(out)
    }

    /// Swaps two dimensions.
    ///
    /// # Errors
    /// Bad dims.
    #[inline]
    pub fn transpose(&self, dim0: isize, dim1: isize) -> Result<Self> {
        let a = resolve_dim("transpose", dim0, self.rank())?;
        let b = resolve_dim("transpose", dim1, self.rank())?;
        let mut out = self.clone();
        out.shape.swap(a, b);
        out.strides.swap(a, b);
        Ok(out)
    }

    /// Reorders dimensions: output dim `i` is input dim `dims[i]`.
    ///
    /// # Errors
    /// `dims` is not a permutation of `0..rank`.
    pub fn permute(&self, dims: &[isize]) -> Result<Self> {
        if dims.len() != self.rank() {
            return Err(Error::InvalidArgument {
                op: "permute",
                reason: "the number of dims must equal the tensor's rank; pass a permutation of 0..rank",
            });
        }
        let mut seen = [false; MAX_RANK];
        let mut out = self.clone();
        for (i, &d) in dims.iter().enumerate() {
            let d = resolve_dim("permute", d, self.rank())?;
            if seen[d] {
                return Err(Error::InvalidArgument {
                    op: "permute",
                    reason: "a dimension appears twice; pass each of 0..rank exactly once",
                });
            }
            seen[d] = true;
            out.shape[i] = self.shape[d];
            out.strides[i] = self.strides[d];
        }
        Ok(out)
    }

    /// Broadcasts to `sizes` (stride 0 on new or size-1 dims); `-1` keeps a size.
    ///
    /// # Errors
    /// Fewer sizes than dims, or a non-1 size that differs.
    pub fn expand(&self, sizes: &[isize]) -> Result<Self> {
        let rank = self.rank();
        if sizes.len() < rank {
            return Err(Error::InvalidArgument {
                op: "expand",
                reason: "the number of sizes must be at least the tensor's rank; pass one size per dimension (-1 keeps it)",
            });
        }
        let lead = sizes.len() - rank;
        let mut shape = Dims::new();
        let mut strides = Dims::new();
        for (i, &want) in sizes.iter().enumerate() {
            if i < lead {
                if want < 0 {
                    return Err(Error::InvalidArgument {
                        op: "expand",
                        reason: "-1 is not allowed for a new leading dimension; give its size",
                    });
                }
                shape.push(want as usize)?;
                strides.push(0)?;
                continue;
            }
            let (have, st) = (self.shape[i - lead], self.strides[i - lead]);
            if want == -1 || want as usize == have {
                shape.push(have)?;
                strides.push(st)?;
            } else if want >= 0 && have == 1 {
                shape.push(want as usize)?;
                strides.push(0)?;
            } else {
                let mut w = Dims::new();
                for &s in sizes {
                    w.push(if s < 0 { have } else { s as usize })?;
                }
                return Err(Error::BroadcastMismatch {
                    op: "expand",
                    lhs: ErrShape::of(&self.shape),
                    rhs: ErrShape::of(&w),
                });
            }
        }
        // Every other view keeps or shrinks the element count; expand can
        // grow it past usize (a [3] expanded to [2^62, 3]).
        checked_numel("expand", &shape)?;
        Ok(Self {
            shape,
            strides,
            offset: self.offset,
        })
    }

    /// Inserts a size-1 dimension at `dim` (`-rank-1..=rank`).
    ///
    /// # Errors
    /// Bad `dim` or rank overflow.
    pub fn unsqueeze(&self, dim: isize) -> Result<Self> {
        let d = resolve_insert_dim("unsqueeze", dim, self.rank())?;
        let stride = if d >= self.rank() {
            1
        } else {
            self.strides[d].saturating_mul(self.shape[d])
        };
        let mut out = self.clone();
        out.shape.insert(d, 1)?;
        out.strides.insert(d, stride)?;
        Ok(out)
    }

    /// Removes every size-1 dimension.
    pub fn squeeze(&self) -> Self {
        let mut out = Self {
            shape: Dims::new(),
            strides: Dims::new(),
            offset: self.offset,
        };
        for (&d, &s) in self.shape.iter().zip(self.strides.iter()) {
            if d != 1 {
                let _ = out.shape.push(d);
                let _ = out.strides.push(s);
            }
        }
        out
    }

    /// Removes `dim` if its size is 1; otherwise returns the layout unchanged.
    ///
    /// # Errors
    /// Bad `dim`.
    pub fn squeeze_dim(&self, dim: isize) -> Result<Self> {
        if self.rank() == 0 && (dim == 0 || dim == -1) {
            return Ok(self.clone());
        }
        let d = resolve_dim("squeeze", dim, self.rank())?;
        let mut out = self.clone();
        if self.shape[d] == 1 {
            out.shape.remove(d);
            out.strides.remove(d);
        }
        Ok(out)
    }

    /// The layout of `view(shape)`, when the strides allow it without a copy
    /// (PyTorch's `computeStride`); `None` when they do not.
    pub fn view_strides(&self, new_shape: &[usize]) -> Option<Dims> {
        let old_shape = &self.shape;
        let old_strides = &self.strides;
        let numel = self.numel();
        let mut new_strides = Dims::from_slice(new_shape).ok()?;
        if numel == 0 || old_shape.is_empty() {
            // no elements, or the one element of a rank-0 tensor: any shape
            // with the same numel is a view with contiguous strides (all 1
            // for a scalar, as PyTorch's computeStride gives)
            return Some(contiguous_strides(new_shape));
        }
        let mut view_d = new_shape.len() as isize - 1;
        let mut chunk_base_stride = old_strides.last().copied().unwrap_or(1);
        let mut tensor_numel = 1usize;
        let mut view_numel = 1usize;
        for tensor_d in (0..old_shape.len()).rev() {
            tensor_numel *= old_shape[tensor_d];
            if tensor_d == 0
                || (old_shape[tensor_d - 1] != 1
                    && old_strides[tensor_d - 1] != tensor_numel.saturating_mul(chunk_base_stride))
            {
                while view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d as usize] == 1)
                {
                    new_strides[view_d as usize] = view_numel.saturating_mul(chunk_base_stride);
                    view_numel *= new_shape[view_d as usize];
                    view_d -= 1;
                }
                if view_numel != tensor_numel {
                    return None;
                }
                if tensor_d > 0 {
                    chunk_base_stride = old_strides[tensor_d - 1];
                    tensor_numel = 1;
                    view_numel = 1;
                }
            }
        }
        if view_d != -1 {
            return None;
        }
        Some(new_strides)
    }

    /// `view(shape)` without copying.
    ///
    /// # Errors
    /// [`Error::ElementCountMismatch`], or [`Error::ViewNotPossible`] when the
    /// strides cannot express the new shape (use `reshape`).
    pub fn view(&self, new_shape: &[usize]) -> Result<Self> {
        let shape = Dims::from_slice(new_shape)?;
        if checked_numel("view", &shape).ok() != Some(self.numel()) {
            return Err(Error::ElementCountMismatch {
                op: "view",
                numel: self.numel(),
                shape: ErrShape::of(&shape),
            });
        }
        match self.view_strides(new_shape) {
            Some(strides) => Ok(Self {
                shape,
                strides,
                offset: self.offset,
            }),
            None => Err(Error::ViewNotPossible {
                op: "view",
                shape: ErrShape::of(&self.shape),
                strides: ErrShape::of(&self.strides),
            }),
        }
    }

    /// Sliding windows: `dim` becomes `(size_d - size) / step + 1` windows and a
    /// new last dimension of length `size` is appended.
    ///
    /// # Errors
    /// Bad `dim`, `size` larger than the dimension, `step == 0`, or more
    /// windows than `usize` counts (`size == 0` over a dimension of `usize::MAX`).
    pub fn unfold(&self, dim: isize, size: usize, step: usize) -> Result<Self> {
        let (d, extent, stride) = if self.rank() == 0 {
            if dim != 0 && dim != -1 {
                return Err(Error::DimOutOfRange {
                    op: "unfold",
                    dim,
                    rank: 0,
                });
            }
            (0, 1, 1)
        } else {
            let d = resolve_dim("unfold", dim, self.rank())?;
            (d, self.shape[d], self.strides[d])
        };
        if step == 0 {
            bail_step()?;
        }
        if size > extent {
            return Err(Error::IndexOutOfRange {
                op: "unfold",
                index: size as i64,
                size: extent,
            });
        }
        let mut out = self.clone();
        if self.rank() == 0 {
            out.shape.push(size)?;
            out.strides.push(1)?;
            return Ok(out);
        }
        out.shape[d] = ((extent - size) / step)
            .checked_add(1)
            .ok_or(Error::InvalidArgument {
                op: "unfold",
                reason: "the number of windows overflows usize; use a window size of at least 1",
            })?;
        out.strides[d] = stride.saturating_mul(step);
        out.shape.push(size)?;
        out.strides.push(stride)?;
        Ok(out)
    }

    /// The diagonal of `dim1`/`dim2` shifted by `offset`, appended as the last dimension.
    ///
    /// # Errors
    /// Bad dims, or `dim1 == dim2`.
    pub fn diagonal(&self, offset: isize, dim1: isize, dim2: isize) -> Result<Self> {
        let a = resolve_dim("diagonal", dim1, self.rank())?;
        let b = resolve_dim("diagonal", dim2, self.rank())?;
        if a == b {
            return Err(Error::InvalidArgument {
                op: "diagonal",
                reason: "dim1 and dim2 must differ; pass two distinct dimensions",
            });
        }
        let (sa, sb) = (self.shape[a], self.shape[b]);
        let len = if offset >= 0 {
            sa.min(sb.saturating_sub(offset.unsigned_abs()))
        } else {
            sa.saturating_sub(offset.unsigned_abs()).min(sb)
        };
        let mut off = self.offset;
        if len > 0 {
            if offset >= 0 {
                off = off.saturating_add((offset as usize).saturating_mul(self.strides[b]));
            } else {
                off = off.saturating_add(offset.unsigned_abs().saturating_mul(self.strides[a]));
            }
        }
        let stride = self.strides[a].saturating_add(self.strides[b]);
        let mut shape = Dims::new();
        let mut strides = Dims::new();
        for i in 0..self.rank() {
            if i != a && i != b {
                shape.push(self.shape[i])?;
                strides.push(self.strides[i])?;
            }
        }
        shape.push(len)?;
        strides.push(stride)?;
        Ok(Self {
            shape,
            strides,
            offset: off,
        })
    }
}

fn bail_step() -> Result<()> {
    Err(Error::InvalidArgument {
        op: "unfold",
        reason: "step must be at least 1",
    })
}
