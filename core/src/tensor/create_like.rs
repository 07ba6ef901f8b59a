//! Constructors shaped after another tensor or a range: `zeros_like`,
//! `ones_like`, `full_like`, `rand_like`, `randn_like`, `linspace`, and
//! `one_hot`.

use super::Tensor;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::rng::Rng;
use alloc::vec::Vec;

impl Tensor {
    /// Zeros with `self`'s shape, dtype and device (PyTorch's `zeros_like`).
    ///
    /// # Errors
    /// As [`Tensor::zeros`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1i32, 2, 3], &[3], &Device::cpu())?;
    /// assert_eq!(x.zeros_like()?.to_vec::<i32>()?, vec![0, 0, 0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn zeros_like(&self) -> Result<Tensor> {
        Tensor::zeros(self.shape(), self.dtype(), &self.device())
    }

    /// Ones with `self`'s shape, dtype and device.
    ///
    /// # Errors
    /// As [`Tensor::ones`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.5f32, 2.0], &[2], &Device::cpu())?;
    /// assert_eq!(x.ones_like()?.to_vec::<f32>()?, vec![1.0, 1.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn ones_like(&self) -> Result<Tensor> {
        Tensor::ones(self.shape(), self.dtype(), &self.device())
    }

    /// `value` everywhere, with `self`'s shape, dtype and device.
    ///
    /// # Errors
    /// As [`Tensor::full`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[0.0f32; 2], &[2], &Device::cpu())?;
    /// assert_eq!(x.full_like(7.5)?.to_vec::<f32>()?, vec![7.5, 7.5]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn full_like(&self, value: f64) -> Result<Tensor> {
        Tensor::full(self.shape(), value, self.dtype(), &self.device())
    }

    /// Uniform `[0, 1)` values with `self`'s shape, dtype and device.
    ///
    /// # Errors
    /// As [`Tensor::rand`] (float dtypes).
    ///
    /// ```
    /// use kael_core::{Device, Rng, Tensor};
    /// let x = Tensor::from_slice(&[0.0f64; 4], &[2, 2], &Device::cpu())?;
    /// let r = x.rand_like(&mut Rng::new(1))?;
    /// assert!(r.shape() == x.shape() && r.to_vec::<f64>()?.iter().all(|v| (0.0..1.0).contains(v)));
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn rand_like(&self, rng: &mut Rng) -> Result<Tensor> {
        Tensor::rand(self.shape(), self.dtype(), &self.device(), rng)
    }

    /// Standard normal values with `self`'s shape, dtype and device.
    ///
    /// # Errors
    /// As [`Tensor::randn`] (float dtypes).
    ///
    /// ```
    /// use kael_core::{Device, Rng, Tensor};
    /// let x = Tensor::from_slice(&[0.0f32; 3], &[3], &Device::cpu())?;
    /// assert_eq!(x.randn_like(&mut Rng::new(1))?.shape(), &[3]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn randn_like(&self, rng: &mut Rng) -> Result<Tensor> {
        Tensor::randn(self.shape(), self.dtype(), &self.device(), rng)
    }

    /// `steps` evenly spaced values from `start` to `end`, both included
    /// (PyTorch's `linspace`, float dtypes). As PyTorch computes them: the
    /// first half as `start + i * step`, the second half as
    /// `end - (steps - 1 - i) * step`, in the dtype's precision (f32 for
    /// f32 and the half types), so both ends are exact.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a non-finite `start`/`end`;
    /// [`Error::UnsupportedDType`] for non-float dtypes.
    ///
    /// ```
    /// use kael_core::{DType, Device, Tensor};
    /// let x = Tensor::linspace(0.0, 1.0, 5, DType::F32, &Device::cpu())?;
    /// assert_eq!(x.to_vec::<f32>()?, vec![0.0, 0.25, 0.5, 0.75, 1.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn linspace(
        start: f64,
        end: f64,
        steps: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        const OP: &str = "linspace";
        dtype.require_float(OP)?;
        if !(start.is_finite() && end.is_finite()) {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: "start and end must be finite numbers",
            });
        }
        let mut v: Vec<f64> = Vec::new();
        v.try_reserve_exact(steps).map_err(|_| Error::OutOfMemory {
            requested: steps.saturating_mul(8),
            available: None,
        })?;
        let half = steps / 2;
        if steps == 1 {
            v.push(start); // PyTorch fills `start`
        } else if dtype == DType::F64 {
            let step = if steps > 1 {
                (end - start) / (steps - 1) as f64
            } else {
                0.0
            };
            v.extend((0..steps).map(|i| {
                if i < half {
                    start + step * i as f64
                } else {
                    end - step * (steps - 1 - i) as f64
                }
            }));
        } else {
            let (s, e) = (start as f32, end as f32);
            let step = if steps > 1 {
                (e - s) / (steps - 1) as f32
            } else {
                0.0
            };
            v.extend((0..steps).map(|i| {
                f64::from(if i < half {
                    s + step * i as f32
                } else {
                    e - step * (steps - 1 - i) as f32
                })
            }));
        }
        let t = Tensor::from_slice(&v, &[steps], device)?;
        if dtype == DType::F64 {
            Ok(t)
        } else {
            t.to_dtype(dtype)
        }
    }

    /// One-hot encoding of integer class indices (PyTorch's
    /// `nn.functional.one_hot`): an `I64` tensor of `self`'s shape plus a
    /// last dim of `num_classes`, 1 at each index. `num_classes = None`
    /// uses the largest index plus one.
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] unless `self` is `I64` or `I32`;
    /// [`Error::IndexOutOfRange`] for a negative index or one at least
    /// `num_classes`.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let y = Tensor::from_slice(&[2i64, 0], &[2], &Device::cpu())?;
    /// assert_eq!(y.one_hot(Some(3))?.to_vec::<i64>()?, vec![0, 0, 1, 1, 0, 0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn one_hot(&self, num_classes: Option<usize>) -> Result<Tensor> {
        const OP: &str = "one_hot";
        if !matches!(self.dtype(), DType::I64 | DType::I32) {
            return Err(Error::UnsupportedDType {
                op: OP,
                dtype: self.dtype(),
                supported: "i64, i32 (class indices)",
            });
        }
        if let Some(n) = num_classes {
            // NOTE [One-hot on the device]: ones scattered into zeros by
            // the `scatter_add` kernel, which checks every index against
            // `n` before it writes (so a bad class is an error, never a
            // zero row), then cast: no value is read on the host, and a
            // plan replays it.
            return crate::autograd::no_grad(|| {
                let mut shape = crate::shape::Dims::from_slice(self.shape())?;
                shape.push(n)?;
                crate::shape::checked_numel(OP, &shape)?;
                let ix = self.unsqueeze(-1)?;
                let ones = Tensor::ones(&[1], DType::F32, &self.device())?.expand(ix.shape())?;
                Tensor::zeros(&shape, DType::F32, &self.device())?
                    .scatter_add(-1, &ix, &ones)?
                    .to_dtype(DType::I64)
            })
            .map_err(|e| e.renamed(OP));
        }
        self.device().backend().host_computed(OP);
        let idx = crate::autograd::no_grad(|| self.to_dtype(DType::I64))?;
        let values = idx.contiguous()?.reshape(&[-1])?.to_vec::<i64>()?;
        if let Some(&bad) = values.iter().find(|&&v| v < 0) {
            return Err(Error::IndexOutOfRange {
                op: OP,
                index: bad,
                size: num_classes.unwrap_or(0),
            });
        }
        let largest = values.iter().copied().max().map_or(0, |m| m as usize + 1);
        let n = num_classes.unwrap_or(largest);
        if let Some(&bad) = values.iter().find(|&&v| v as usize >= n) {
            return Err(Error::IndexOutOfRange {
                op: OP,
                index: bad,
                size: n,
            });
        }
        let classes = Tensor::arange(0i64, i64::try_from(n).unwrap_or(i64::MAX), &self.device())?;
        idx.unsqueeze(-1)?.eq(&classes)?.to_dtype(DType::I64)
    }
}
