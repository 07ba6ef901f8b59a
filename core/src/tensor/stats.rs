//! Statistics written with other reductions (autograd needs no rule of its
//! own): `var`, `std` with Bessel's correction, the vector `norm`, and the
//! boolean reductions `any`, `all`.

use super::Tensor;
use super::reduce::resolve_dims;
use crate::autograd;
use crate::dtype::DType;
use crate::error::{Error, Result};
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

    /// The vector `p`-norm over `dims` (all dims when empty), PyTorch's
    /// `torch.linalg.vector_norm(x, ord=p, dim=dims, keepdim)`:
    /// `p = 2` (Euclidean), `1`, `f64::INFINITY` (largest `|x|`),
    /// `f64::NEG_INFINITY` (smallest `|x|`), `0` (the number of non-zero
    /// elements), and any other positive `p`: `(sum |x|^p)^(1/p)`.
    ///
    /// Written with differentiable ops, so autograd needs no rule of its
    /// own; the gradient follows PyTorch's: 0 where the norm is 0 (not
    /// NaN), `sign(x)` for `p = 1`, split evenly between the elements that
    /// tie for the extreme for `p = ±inf`, and 0 for `p = 0`. f16/bf16
    /// inputs are computed in f32 and the result converted back.
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for non-float tensors;
    /// [`Error::InvalidArgument`] for a NaN or negative finite `p`, a
    /// repeated dim, or `p = ±inf` over an empty dim;
    /// [`Error::DimOutOfRange`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[3.0f64, -4.0, 0.0, 1.0], &[2, 2], &Device::cpu())?;
    /// assert_eq!(x.norm(2.0, &[1], false)?.to_vec::<f64>()?, vec![5.0, 1.0]);
    /// assert_eq!(x.norm(1.0, &[], false)?.item::<f64>()?, 8.0);
    /// assert_eq!(x.norm(f64::INFINITY, &[0], true)?.to_vec::<f64>()?, vec![3.0, 4.0]);
    /// assert_eq!(x.norm(0.0, &[-1], false)?.to_vec::<f64>()?, vec![2.0, 1.0]);
    /// assert!(x.norm(-1.0, &[], false).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn norm(&self, p: f64, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        const OP: &str = "norm";
        self.dtype().require_float(OP)?;
        if p.is_nan() || (p.is_finite() && p < 0.0) {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: "p must be 2, 1, 0, inf, -inf or another positive number; pass one of those",
            });
        }
        // validate dims up front, so every error names `norm`
        resolve_dims(OP, dims, self.rank())?;
        let half = matches!(self.dtype(), DType::F16 | DType::BF16);
        let x = if half {
            self.to_dtype(DType::F32)?
        } else {
            self.clone()
        };
        let r = x.norm_f(p, dims, keepdim).map_err(|e| e.renamed(OP))?;
        if half {
            r.to_dtype(self.dtype())
        } else {
            Ok(r)
        }
    }

    /// [`Tensor::norm`] on a float tensor with checked arguments.
    fn norm_f(&self, p: f64, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        let zero = self.scalar_like(0.0)?;
        let one = self.scalar_like(1.0)?;
        if p == 0.0 {
            let count =
                autograd::no_grad(|| self.ne(&zero)?.to_dtype(self.dtype())?.sum(dims, keepdim))?;
            // + 0 * (x clamped to finite, NaN to 0): the count's value with
            // an exact zero gradient, as PyTorch gives the 0-norm
            let finite = self
                .eq(self)?
                .where_cond(&self.clamp(Some(-1.0), Some(1.0))?, &zero)?;
            return count.add(&finite.mul_scalar(0.0)?.sum(dims, keepdim)?);
        }
        let a = self.abs()?;
        if p.is_infinite() {
            return a.extreme_norm(p > 0.0, dims, keepdim);
        }
        if p == 1.0 {
            return a.sum(dims, keepdim);
        }
        // |x|^p, with 0 where x = 0 and a zero gradient there (pow's
        // gradient at 0 is infinite for p < 1)
        let a_zero = a.eq(&zero)?;
        let ap = if p == 2.0 {
            self.mul(self)?
        } else {
            let safe = a_zero.where_cond(&one, &a)?;
            a_zero.where_cond(&zero, &safe.powf(p)?)?
        };
        let s = ap.sum(dims, keepdim)?;
        // the root, masked where the sum is 0 (sqrt's gradient at 0 is
        // infinite; PyTorch's norm gradient there is 0)
        let s_zero = s.eq(&zero)?;
        let safe = s_zero.where_cond(&one, &s)?;
        let root = if p == 2.0 {
            safe.sqrt()?
        } else {
            safe.powf(1.0 / p)?
        };
        s_zero.where_cond(&zero, &root)
    }

    /// The largest (`max`) or smallest element of `self` (`|x|`) over
    /// `dims`, with the gradient split evenly between the elements that
    /// equal it (PyTorch's amax/amin backward) and the value exact.
    fn extreme_norm(&self, max: bool, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        let m = self.extreme_values("norm", max, dims, true)?;
        let (w, m_out) = autograd::no_grad(|| {
            let mask = self.eq(&m)?.to_dtype(self.dtype())?;
            let count = mask.sum(dims, true)?;
            let m_out = if keepdim {
                m.clone()
            } else {
                m.sum(dims, false)?
            };
            Ok::<_, Error>((mask.div(&count)?, m_out))
        })?;
        // r has the right gradient; r + (m - r) the exact value (m - r is
        // exact: the two agree to an ulp; an infinite m equals r already)
        let r = self.mul(&w)?.sum(dims, keepdim)?;
        let fix = autograd::no_grad(|| {
            let d = m_out.sub(&r)?;
            let finite = d.eq(&d)?;
            finite.where_cond(&d, &d.scalar_like(0.0)?)
        })?;
        r.add(&fix)
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
