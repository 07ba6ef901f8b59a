//! Splitting a tensor into views along a dim: `chunk`, `split`,
//! `split_sizes`.

use super::Tensor;
use crate::error::{Error, Result};
use crate::shape::resolve_dim;
use alloc::vec::Vec;

impl Tensor {
    /// Splits `dim` into `chunks` views of `ceil(size / chunks)` (the last
    /// may be smaller; fewer may be returned, as in PyTorch).
    ///
    /// # Errors
    /// Bad `dim`; `chunks == 0`.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::arange(0.0f32, 5.0, &Device::cpu())?;
    /// let c = x.chunk(2, 0)?;
    /// assert_eq!((c[0].shape(), c[1].shape()), (&[3][..], &[2][..]));
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn chunk(&self, chunks: usize, dim: isize) -> Result<Vec<Tensor>> {
        if chunks == 0 {
            return Err(Error::InvalidArgument {
                op: "chunk",
                reason: "chunks must be at least 1",
            });
        }
        let d = resolve_dim("chunk", dim, self.rank())?;
        let size = self.shape()[d];
        if size == 0 {
            // PyTorch: `chunks` empty pieces (split would return just one)
            let mut out = Vec::new();
            out.try_reserve_exact(chunks)
                .map_err(|_| Error::OutOfMemory {
                    requested: chunks.saturating_mul(core::mem::size_of::<Tensor>()),
                    available: None,
                })?;
            for _ in 0..chunks {
                out.push(self.narrow(dim, 0, 0)?);
            }
            return Ok(out);
        }
        self.split(size.div_ceil(chunks), dim)
    }

    /// Splits `dim` into views of `split_size` (the last may be smaller).
    ///
    /// # Errors
    /// Bad `dim`; `split_size == 0` on a non-empty dim.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::arange(0.0f32, 5.0, &Device::cpu())?;
    /// let s = x.split(2, 0)?;
    /// assert_eq!(s.len(), 3);
    /// assert_eq!(s[2].to_vec::<f32>()?, vec![4.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn split(&self, split_size: usize, dim: isize) -> Result<Vec<Tensor>> {
        let d = resolve_dim("split", dim, self.rank())?;
        let size = self.shape()[d];
        if split_size == 0 {
            if size == 0 {
                return Ok(alloc::vec![self.narrow(dim, 0, 0)?]);
            }
            return Err(Error::InvalidArgument {
                op: "split",
                reason: "split_size must be at least 1 for a non-empty dimension",
            });
        }
        let mut out = Vec::new();
        let mut start = 0;
        while start < size {
            let len = split_size.min(size - start);
            out.push(self.narrow(dim, start, len)?);
            start += len;
        }
        if out.is_empty() {
            out.push(self.narrow(dim, 0, 0)?);
        }
        Ok(out)
    }

    /// Splits `dim` into views with the given sizes (which must sum to it).
    ///
    /// # Errors
    /// Bad `dim`; sizes that do not sum to the dim's size.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::arange(0.0f32, 5.0, &Device::cpu())?;
    /// let s = x.split_sizes(&[1, 4], 0)?;
    /// assert_eq!(s[1].to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn split_sizes(&self, sizes: &[usize], dim: isize) -> Result<Vec<Tensor>> {
        let d = resolve_dim("split_sizes", dim, self.rank())?;
        // Checked: sizes summing past usize::MAX are simply not the size.
        let total = sizes.iter().try_fold(0usize, |t, &s| t.checked_add(s));
        if total != Some(self.shape()[d]) {
            return Err(Error::InvalidArgument {
                op: "split_sizes",
                reason: "the sizes must sum to the size of the dimension",
            });
        }
        let mut start = 0;
        let mut out = Vec::with_capacity(sizes.len());
        for &s in sizes {
            out.push(self.narrow(dim, start, s)?);
            start += s;
        }
        Ok(out)
    }
}
