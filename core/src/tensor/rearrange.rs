//! Rearranging elements, written with other tensor ops so autograd needs no
//! rule of their own (NOTE [Op table], "what is not a row"): `movedim`,
//! `flip`, `roll`, `repeat`, `tril`, `triu`, `masked_fill`.

use super::Tensor;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::{MAX_RANK, checked_numel, resolve_dim};
use alloc::vec::Vec;

impl Tensor {
    /// Moves dim `source` to position `destination`, keeping the order of
    /// the others (PyTorch's `movedim`); a view.
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`] for either dim.
    ///
    /// ```
    /// use kael_core::{DType, Device, Tensor};
    /// let x = Tensor::zeros(&[2, 3, 4], DType::F32, &Device::cpu())?;
    /// assert_eq!(x.movedim(0, -1)?.shape(), &[3, 4, 2]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn movedim(&self, source: isize, destination: isize) -> Result<Tensor> {
        let rank = self.rank();
        let s = resolve_dim("movedim", source, rank)?;
        let d = resolve_dim("movedim", destination, rank)?;
        let mut order: Vec<isize> = (0..rank as isize).filter(|&i| i != s as isize).collect();
        order.insert(d, s as isize);
        self.permute(&order)
    }

    /// The elements in reverse order along each of `dims` (PyTorch's
    /// `flip`); a copy, as in PyTorch.
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`]; a dim given twice.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::arange(0.0f32, 6.0, &Device::cpu())?.reshape(&[2, 3])?;
    /// assert_eq!(x.flip(&[1])?.to_vec::<f32>()?, vec![2.0, 1.0, 0.0, 5.0, 4.0, 3.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn flip(&self, dims: &[isize]) -> Result<Tensor> {
        let mut seen = [false; MAX_RANK];
        let mut out = self.clone();
        for &d in dims {
            let d = resolve_dim("flip", d, self.rank())?;
            if core::mem::replace(&mut seen[d], true) {
                return Err(Error::InvalidArgument {
                    op: "flip",
                    reason: "a dim appears twice; list each dim once",
                });
            }
            let n = self.shape()[d];
            let rev = Tensor::arange(0i64, n as i64, &self.device())?.rsub(n as i64 - 1)?;
            out = out.index_select(d as isize, &rev)?;
        }
        if dims.is_empty() {
            self.deep_clone()
        } else {
            Ok(out)
        }
    }

    /// The elements shifted by `shift` places along `dim`, wrapping around
    /// (PyTorch's `roll` with one dim); a copy.
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::arange(0i64, 5, &Device::cpu())?;
    /// assert_eq!(x.roll(2, 0)?.to_vec::<i64>()?, vec![3, 4, 0, 1, 2]);
    /// assert_eq!(x.roll(-1, 0)?.to_vec::<i64>()?, vec![1, 2, 3, 4, 0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn roll(&self, shift: isize, dim: isize) -> Result<Tensor> {
        let d = resolve_dim("roll", dim, self.rank())?;
        let n = self.shape()[d];
        if n == 0 {
            return self.deep_clone();
        }
        let k = shift.rem_euclid(n as isize) as usize;
        if k == 0 {
            return self.deep_clone();
        }
        let tail = self.narrow(d as isize, n - k, k)?;
        let head = self.narrow(d as isize, 0, n - k)?;
        Tensor::cat(&[&tail, &head], d as isize)
    }

    /// `self` tiled `repeats[i]` times along dim `i` (PyTorch's `repeat`;
    /// extra leading repeats add leading dims); a copy.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for fewer repeats than dims; sizes that
    /// overflow.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1i32, 2], &[2], &Device::cpu())?;
    /// assert_eq!(x.repeat(&[2, 2])?.to_vec::<i32>()?, vec![1, 2, 1, 2, 1, 2, 1, 2]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn repeat(&self, repeats: &[usize]) -> Result<Tensor> {
        const OP: &str = "repeat";
        let r = repeats.len();
        if r < self.rank() {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: "give at least one repeat count per dim of the tensor",
            });
        }
        if 2 * r > MAX_RANK {
            return Err(Error::RankTooLarge {
                rank: 2 * r,
                max: MAX_RANK,
            });
        }
        // [.., s_i] viewed as [.., 1, s_i], expanded to [.., n_i, s_i],
        // then merged to [.., n_i * s_i].
        let lead = r - self.rank();
        let mut split: Vec<usize> = Vec::new();
        let mut expand: Vec<isize> = Vec::new();
        let mut out: Vec<usize> = Vec::new();
        for (i, &n) in repeats.iter().enumerate() {
            let s = if i < lead { 1 } else { self.shape()[i - lead] };
            split.extend([1, s]);
            expand.extend([n as isize, s as isize]);
            out.push(n.checked_mul(s).ok_or(Error::InvalidArgument {
                op: OP,
                reason: "the repeated size overflows usize; repeat fewer times",
            })?);
        }
        // NOTE [Checked output sizes]: each dim fits, their product may not
        checked_numel(OP, &out)?;
        if expand.iter().any(|&e| e < 0) {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: "a repeat count is larger than isize::MAX; repeat fewer times",
            });
        }
        self.reshape(&split)?
            .expand(&expand[..])?
            .contiguous()?
            .reshape(&out)
    }

    /// The lower triangle of the last two dims (PyTorch's `tril`): elements
    /// above diagonal `diagonal` (0 the main one, > 0 above it) are zero.
    ///
    /// # Errors
    /// [`Error::RankMismatch`] below rank 2.
    ///
    /// ```
    /// use kael_core::{DType, Device, Tensor};
    /// let x = Tensor::ones(&[2, 3], DType::F32, &Device::cpu())?;
    /// assert_eq!(x.tril(0)?.to_vec::<f32>()?, vec![1.0, 0.0, 0.0, 1.0, 1.0, 0.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn tril(&self, diagonal: isize) -> Result<Tensor> {
        self.triangle("tril", diagonal, true)
    }

    /// The upper triangle of the last two dims (PyTorch's `triu`): elements
    /// below diagonal `diagonal` are zero.
    ///
    /// # Errors
    /// [`Error::RankMismatch`] below rank 2.
    ///
    /// ```
    /// use kael_core::{DType, Device, Tensor};
    /// let x = Tensor::ones(&[2, 3], DType::F32, &Device::cpu())?;
    /// assert_eq!(x.triu(1)?.to_vec::<f32>()?, vec![0.0, 1.0, 1.0, 0.0, 0.0, 1.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn triu(&self, diagonal: isize) -> Result<Tensor> {
        self.triangle("triu", diagonal, false)
    }

    fn triangle(&self, op: &'static str, diagonal: isize, lower: bool) -> Result<Tensor> {
        let r = self.rank();
        if r < 2 {
            return Err(Error::RankMismatch {
                op,
                expected: ">= 2",
                got: r,
            });
        }
        let (rows, cols) = (self.shape()[r - 2], self.shape()[r - 1]);
        let dev = self.device();
        let i = Tensor::arange(0i64, rows as i64, &dev)?.unsqueeze(1)?;
        let j = Tensor::arange(0i64, cols as i64, &dev)?.unsqueeze(0)?;
        // j - i is the diagonal an element is on
        let k = j.sub(&i)?;
        let bound = k.scalar_like(diagonal as f64)?;
        let keep = if lower { k.le(&bound)? } else { k.ge(&bound)? };
        keep.where_cond(self, &self.scalar_like(0.0)?)
            .map_err(|e| e.renamed(op))
    }

    /// `value` where `mask` (a `Bool` tensor broadcasting to `self`'s
    /// shape) is true, `self` elsewhere (PyTorch's `masked_fill`); the
    /// gradient flows to `self` where the mask is false.
    ///
    /// # Errors
    /// A non-bool mask; shapes that do not broadcast.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let dev = Device::cpu();
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], &dev)?;
    /// let m = Tensor::from_slice(&[false, true, false], &[3], &dev)?;
    /// assert_eq!(x.masked_fill(&m, -1.0)?.to_vec::<f32>()?, vec![1.0, -1.0, 3.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn masked_fill(&self, mask: &Tensor, value: f64) -> Result<Tensor> {
        if mask.dtype() != DType::Bool {
            return Err(Error::DTypeMismatch {
                op: "masked_fill",
                expected: DType::Bool,
                got: mask.dtype(),
            });
        }
        mask.where_cond(&self.fill_arg("masked_fill", value)?, self)
            .map_err(|e| e.renamed("masked_fill"))
    }
}
