//! Statistics written with other reductions (autograd needs no rule of its
//! own): `var`, `std` with Bessel's correction, and the boolean reductions
//! `any`, `all`.

use super::Tensor;
use crate::dtype::DType;
use crate::error::Result;
use crate::shape::resolve_dim;

impl Tensor {
    /// Variance over `dims` (all dims when empty), dividing by
    /// `N - correction` as PyTorch's `var(dim, correction=...)` (1: the
    /// unbiased estimate, PyTorch's default; 0: the population variance).
    /// `N <= correction` gives NaN or inf, as in PyTorch.
    ///
    /// # Errors
    /// As [`Tensor::mean`] (float dtypes, dims in range).
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[4], &Device::cpu())?;
    /// assert!((x.var(&[0], 1, false)?.item::<f32>()? - 5.0 / 3.0).abs() < 1e-6);
    /// assert_eq!(x.var(&[0], 0, false)?.item::<f32>()?, 1.25);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn var(&self, dims: &[isize], correction: usize, keepdim: bool) -> Result<Tensor> {
        let mean = self.mean(dims, true).map_err(|e| e.renamed("var"))?;
        let n = self.count_over("var", dims)?;
        let sq = self.sub(&mean)?.sqr()?.sum(dims, keepdim)?;
        let denom = n as f64 - correction as f64;
        sq.div_scalar(denom).map_err(|e| e.renamed("var"))
    }

    /// Standard deviation: the square root of [`Tensor::var`].
    ///
    /// # Errors
    /// As [`Tensor::var`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[2.0f64, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0], &[8], &Device::cpu())?;
    /// assert_eq!(x.std(&[], 0, false)?.item::<f64>()?, 2.0);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn std(&self, dims: &[isize], correction: usize, keepdim: bool) -> Result<Tensor> {
        self.var(dims, correction, keepdim)?.sqrt()
    }

    /// Whether any element over `dims` (all when empty) is non-zero (NaN
    /// counts as non-zero), as a `Bool` tensor; `false` over an empty dim.
    ///
    /// # Errors
    /// A dim out of range.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[0i32, 0, 3, 0], &[2, 2], &Device::cpu())?;
    /// assert_eq!(x.any(&[1], false)?.to_vec::<bool>()?, vec![false, true]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn any(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        let count = self.nonzero_count("any", dims, keepdim)?;
        count.gt(&count.scalar_like(0.0)?)
    }

    /// Whether every element over `dims` (all when empty) is non-zero, as a
    /// `Bool` tensor; `true` over an empty dim.
    ///
    /// # Errors
    /// A dim out of range.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 0.0, 5.0], &[2, 2], &Device::cpu())?;
    /// assert_eq!(x.all(&[1], false)?.to_vec::<bool>()?, vec![true, false]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn all(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        let zeros = crate::autograd::no_grad(|| {
            self.eq(&self.scalar_like(0.0)?)?
                .to_dtype(DType::I64)?
                .sum(dims, keepdim)
        })
        .map_err(|e| e.renamed("all"))?;
        zeros.eq(&zeros.scalar_like(0.0)?)
    }

    /// How many elements over `dims` are non-zero, as `I64`.
    fn nonzero_count(&self, op: &'static str, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        crate::autograd::no_grad(|| {
            self.ne(&self.scalar_like(0.0)?)?
                .to_dtype(DType::I64)?
                .sum(dims, keepdim)
        })
        .map_err(|e| e.renamed(op))
    }

    /// The number of elements each reduction over `dims` (all when
    /// empty) combines.
    fn count_over(&self, op: &'static str, dims: &[isize]) -> Result<usize> {
        if dims.is_empty() {
            return Ok(self.numel());
        }
        let mut n = 1usize;
        for &d in dims {
            n = n.saturating_mul(self.shape()[resolve_dim(op, d, self.rank())?]);
        }
        Ok(n)
    }
}
