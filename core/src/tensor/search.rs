//! Sorting, searching and scans: `sort`, `argsort`, `topk`, `nonzero`,
//! `cumsum`, `cumprod`.
//!
//! NOTE [Host-staged search]: `sort`, `argsort` and `topk` take their
//! permutation from the device's `argsort` kernel (a family of its own:
//! the reference's is `cpu::sort`), and, on a device without one, read
//! the values to the host through the ordinary readback (`to_vec`, one
//! copy for a device tensor), compute the `I64` indices there and create
//! them on the tensor's device. `nonzero` always does the latter (its
//! output size depends on the data). The sorted values are then
//! `gather`ed on the device, so autograd needs no rule of its own (the
//! gradient is gather's), and a plan replays a sort as an argsort and a
//! gather.
//!
//! `cumsum` and `cumprod` are compositions too (NOTE [Op table], "what is
//! not a row"): a Hillis–Steele scan of `ceil(log2 n)` shifted additions
//! (multiplications), each a `cat` of a zero (one) block and a `narrow`, so
//! they run on every backend and their gradients come from autograd
//! (cumprod's is correct with zeros in the input: nothing is divided).

use super::Tensor;
use crate::autograd;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::{Dims, resolve_dim};
use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Ordering;

/// A tensor's values on the host, row-major, as sort keys: floats as `f64`
/// (exact for every float dtype), integers and bool as `i64` (exact).
enum Keys {
    Float(Vec<f64>),
    Int(Vec<i64>),
}

impl Keys {
    fn read(op: &'static str, t: &Tensor) -> Result<Keys> {
        t.device().backend().host_computed(op);
        autograd::no_grad(|| -> Result<Keys> {
            Ok(if t.dtype().is_float() {
                Keys::Float(t.to_dtype(DType::F64)?.to_vec::<f64>()?)
            } else {
                Keys::Int(t.to_dtype(DType::I64)?.to_vec::<i64>()?)
            })
        })
        .map_err(|e| e.renamed(op))
    }

    /// Whether element `i` is non-zero (NaN is).
    fn nonzero(&self, i: usize) -> bool {
        match self {
            Keys::Float(v) => v[i] != 0.0,
            Keys::Int(v) => v[i] != 0,
        }
    }

    /// Ascending order with NaN largest (PyTorch's sort order); NaNs are
    /// equal to each other, and -0.0 equals 0.0, so a stable sort keeps
    /// them in input order.
    fn cmp(&self, a: usize, b: usize) -> Ordering {
        match self {
            Keys::Int(v) => v[a].cmp(&v[b]),
            Keys::Float(v) => {
                let (x, y) = (v[a], v[b]);
                match (x.is_nan(), y.is_nan()) {
                    (true, true) => Ordering::Equal,
                    (true, false) => Ordering::Greater,
                    (false, true) => Ordering::Less,
                    (false, false) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
                }
            }
        }
    }
}

/// `(outer, n, inner)` of `shape` around dim `d`: element `(o, j, i)` of
/// the row-major order is at `(o * n + j) * inner + i`.
fn fibers(shape: &[usize], d: usize) -> (usize, usize, usize) {
    let outer = shape[..d].iter().product();
    let inner = shape[d + 1..].iter().product();
    (outer, shape[d], inner)
}

fn oom(bytes: usize) -> Error {
    Error::OutOfMemory {
        requested: bytes,
        available: None,
    }
}

/// A vector of `n` copies of `v`, failing (not aborting) when memory runs out.
fn filled<T: Clone>(n: usize, v: T) -> Result<Vec<T>> {
    let mut out = Vec::new();
    out.try_reserve_exact(n)
        .map_err(|_| oom(n.saturating_mul(core::mem::size_of::<T>())))?;
    out.resize(n, v);
    Ok(out)
}

impl Tensor {
    /// `dim` resolved (a rank-0 tensor accepts 0 and -1), and the shape to
    /// work on (`[1]` for a rank-0 tensor).
    fn search_dim(&self, op: &'static str, dim: isize) -> Result<(usize, Dims)> {
        let d = resolve_dim(op, dim, self.rank().max(1)).map_err(|_| Error::DimOutOfRange {
            op,
            dim,
            rank: self.rank(),
        })?;
        let shape = if self.rank() == 0 {
            Dims::from_slice(&[1])?
        } else {
            self.dims().clone()
        };
        Ok((d, shape))
    }

    /// The stable sorting permutation along `dim`, as `I64` indices of
    /// `self`'s shape (host-staged: NOTE [Host-staged search]).
    fn sort_indices(&self, op: &'static str, dim: isize, descending: bool) -> Result<Tensor> {
        let (d, shape) = self.search_dim(op, dim)?;
        // The device's argsort kernel when it has one (NOTE [Host-staged
        // search]); a rank-0 tensor's permutation is [0].
        let on_device = if self.rank() == 0 {
            autograd::no_grad(|| Tensor::zeros(&[], DType::I64, &self.device()))
        } else {
            self.with_src_on(|s, dev| {
                Tensor::written(self.dims(), DType::I64, dev, |dst| {
                    dev.backend().argsort(s, d, descending, dst)
                })
            })
        };
        match on_device {
            Ok(t) => return Ok(t),
            Err(Error::Unsupported { .. }) => {}
            Err(e) => return Err(e.renamed(op)),
        }
        let keys = Keys::read(op, self)?;
        let (outer, n, inner) = fibers(&shape, d);
        let mut out = filled(self.numel(), 0i64)?;
        let mut perm = filled(n, 0usize)?;
        for o in 0..outer {
            for i in 0..inner {
                let at = |j: usize| (o * n + j) * inner + i;
                for (j, p) in perm.iter_mut().enumerate() {
                    *p = j;
                }
                // `sort_by` is stable: equal keys keep their input order
                perm.sort_by(|&a, &b| {
                    let c = keys.cmp(at(a), at(b));
                    if descending { c.reverse() } else { c }
                });
                for (j, &p) in perm.iter().enumerate() {
                    out[at(j)] = p as i64;
                }
            }
        }
        Tensor::from_slice(&out, self.shape(), &self.device()).map_err(|e| e.renamed(op))
    }

    /// `self` gathered along `d` at `indices` (`self` itself for rank 0).
    fn gather_sorted(&self, op: &'static str, d: usize, indices: &Tensor) -> Result<Tensor> {
        if self.rank() == 0 {
            return self.deep_clone().map_err(|e| e.renamed(op));
        }
        self.gather(d as isize, indices).map_err(|e| e.renamed(op))
    }

    /// The values sorted along `dim` and the `I64` indices that sort them
    /// (PyTorch's `torch.sort(x, dim, descending, stable=True)`). The sort
    /// is stable: equal values keep their order. NaN sorts as the largest
    /// value (last ascending, first descending), as in PyTorch.
    /// Differentiable: the values are `self.gather(dim, &indices)`.
    ///
    /// The indices are computed on the host (one readback for a device
    /// tensor; NOTE [Host-staged search]).
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`]; [`Error::OutOfMemory`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[3.0f32, f32::NAN, 1.0, 3.0], &[4], &Device::cpu())?;
    /// let (v, i) = x.sort(0, false)?;
    /// assert_eq!(i.to_vec::<i64>()?, vec![2, 0, 3, 1]);
    /// assert_eq!(v.to_vec::<f32>()?[..3], [1.0, 3.0, 3.0]);
    /// let (_, i) = x.sort(0, true)?;
    /// assert_eq!(i.to_vec::<i64>()?, vec![1, 0, 3, 2]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn sort(&self, dim: isize, descending: bool) -> Result<(Tensor, Tensor)> {
        const OP: &str = "sort";
        let indices = self.sort_indices(OP, dim, descending)?;
        let (d, _) = self.search_dim(OP, dim)?;
        let values = self.gather_sorted(OP, d, &indices)?;
        Ok((values, indices))
    }

    /// The `I64` indices that sort `self` along `dim` (stably; NaN
    /// largest), as [`Tensor::sort`] returns them.
    ///
    /// # Errors
    /// As [`Tensor::sort`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[2i64, 9, 4, 1, 1, 0], &[2, 3], &Device::cpu())?;
    /// assert_eq!(x.argsort(1, false)?.to_vec::<i64>()?, vec![0, 2, 1, 2, 0, 1]);
    /// assert_eq!(x.argsort(0, true)?.to_vec::<i64>()?, vec![0, 0, 0, 1, 1, 1]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn argsort(&self, dim: isize, descending: bool) -> Result<Tensor> {
        self.sort_indices("argsort", dim, descending)
    }

    /// The `k` largest (`largest`) or smallest values along `dim` and their
    /// `I64` indices (PyTorch's `torch.topk`). The result is always sorted
    /// (largest first, or smallest first), whatever `sorted` says:
    /// PyTorch leaves the order unspecified when `sorted` is false, and
    /// sorted is one such order. Of equal values the lower index comes
    /// first; NaN counts as the largest value. Differentiable (a gather).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `k` exceeds the size of `dim`;
    /// [`Error::DimOutOfRange`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 7.0, 3.0, 7.0, 5.0], &[5], &Device::cpu())?;
    /// let (v, i) = x.topk(3, 0, true, true)?;
    /// assert_eq!((v.to_vec::<f32>()?, i.to_vec::<i64>()?), (vec![7.0, 7.0, 5.0], vec![1, 3, 4]));
    /// let (v, _) = x.topk(2, -1, false, true)?;
    /// assert_eq!(v.to_vec::<f32>()?, vec![1.0, 3.0]);
    /// assert!(x.topk(6, 0, true, true).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn topk(
        &self,
        k: usize,
        dim: isize,
        largest: bool,
        sorted: bool,
    ) -> Result<(Tensor, Tensor)> {
        const OP: &str = "topk";
        let _ = sorted;
        let (d, shape) = self.search_dim(OP, dim)?;
        if k > shape[d] {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: "k is larger than the size of dim; pass k <= x.shape()[dim]",
            });
        }
        let all = self.sort_indices(OP, dim, largest)?;
        let indices = if self.rank() == 0 {
            if k == 0 {
                Tensor::from_slice::<i64>(&[], &[0], &self.device())?
            } else {
                all
            }
        } else {
            all.narrow(d as isize, 0, k)?.contiguous()?
        };
        let values = if self.rank() == 0 && k == 0 {
            autograd::no_grad(|| self.reshape(&[1])?.narrow(0, 0, 0)?.contiguous())?
        } else {
            self.gather_sorted(OP, d, &indices)?
        };
        Ok((values, indices))
    }

    /// The coordinates of the non-zero elements (NaN counts as non-zero),
    /// as an `I64` tensor of shape `[count, rank]` in row-major order
    /// (PyTorch's `torch.nonzero`). Not differentiable. Computed on the
    /// host (NOTE [Host-staged search]).
    ///
    /// # Errors
    /// [`Error::OutOfMemory`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[0.0f32, 2.0, -1.0, 0.0], &[2, 2], &Device::cpu())?;
    /// let nz = x.nonzero()?;
    /// assert_eq!(nz.shape(), &[2, 2]);
    /// assert_eq!(nz.to_vec::<i64>()?, vec![0, 1, 1, 0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn nonzero(&self) -> Result<Tensor> {
        const OP: &str = "nonzero";
        let keys = Keys::read(OP, self)?;
        let rank = self.rank();
        let count = (0..self.numel()).filter(|&i| keys.nonzero(i)).count();
        let total = count.checked_mul(rank).ok_or(Error::InvalidArgument {
            op: OP,
            reason: "the number of coordinates overflows usize; use a smaller tensor",
        })?;
        let mut out = Vec::new();
        out.try_reserve_exact(total)
            .map_err(|_| oom(total.saturating_mul(8)))?;
        let shape = self.shape();
        let mut coord = vec![0usize; rank];
        for i in 0..self.numel() {
            if keys.nonzero(i) {
                out.extend(coord.iter().map(|&c| c as i64));
            }
            // next row-major coordinate
            for k in (0..rank).rev() {
                coord[k] += 1;
                if coord[k] < shape[k] {
                    break;
                }
                coord[k] = 0;
            }
        }
        Tensor::from_slice(&out, &[count, rank], &self.device()).map_err(|e| e.renamed(OP))
    }

    /// Inclusive scan along `dim` with `add` (cumsum) or multiply
    /// (cumprod), as a composition (NOTE [Host-staged search]).
    fn scan(&self, op: &'static str, dim: isize, add: bool) -> Result<Tensor> {
        let (d, _) = self.search_dim(op, dim)?;
        // PyTorch: integer and bool inputs accumulate in I64
        let x = if self.dtype().is_float() {
            self.clone()
        } else {
            self.to_dtype(DType::I64).map_err(|e| e.renamed(op))?
        };
        let run = || -> Result<Tensor> {
            if x.rank() == 0 || x.shape()[d] <= 1 {
                return x.deep_clone();
            }
            let n = x.shape()[d];
            let mut y = x.clone();
            let mut s = 1usize;
            while s < n {
                let mut head_shape = x.dims().clone();
                head_shape[d] = s;
                let fill = if add { 0.0 } else { 1.0 };
                let head = Tensor::full(&head_shape, fill, x.dtype(), &x.device())?;
                let shifted = Tensor::cat(&[&head, &y.narrow(d as isize, 0, n - s)?], d as isize)?;
                y = if add {
                    y.add(&shifted)?
                } else {
                    y.mul(&shifted)?
                };
                s = s.saturating_mul(2);
            }
            Ok(y)
        };
        run().map_err(|e| e.renamed(op))
    }

    /// Cumulative sum along `dim` (PyTorch's `torch.cumsum`): element `j`
    /// is the sum of elements `0..=j`. Integer and bool inputs give `I64`
    /// (as in PyTorch); floats keep their dtype. Differentiable (the
    /// gradient is the reversed cumulative sum of the gradient).
    ///
    /// Computed as `ceil(log2 n)` shifted additions, so float results may
    /// differ from a left-to-right sum in the last bits (the additions are
    /// grouped as a tree).
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`]; [`Error::OutOfMemory`].
    ///
    /// ```
    /// use kael_core::{DType, Device, Tensor};
    /// let x = Tensor::from_slice(&[1i32, 2, 3, 4, 5, 6], &[2, 3], &Device::cpu())?;
    /// let c = x.cumsum(1)?;
    /// assert_eq!((c.dtype(), c.to_vec::<i64>()?), (DType::I64, vec![1, 3, 6, 4, 9, 15]));
    /// assert_eq!(x.cumsum(0)?.to_vec::<i64>()?, vec![1, 2, 3, 5, 7, 9]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn cumsum(&self, dim: isize) -> Result<Tensor> {
        self.scan("cumsum", dim, true)
    }

    /// Cumulative product along `dim` (PyTorch's `torch.cumprod`); integer
    /// and bool inputs give `I64`. Differentiable, with zeros in the input
    /// too (the composition divides by nothing).
    ///
    /// # Errors
    /// As [`Tensor::cumsum`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::from_slice(&[2.0f64, 3.0, 0.0, 5.0], &[4], &Device::cpu())?;
    /// assert_eq!(x.cumprod(0)?.to_vec::<f64>()?, vec![2.0, 6.0, 0.0, 0.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn cumprod(&self, dim: isize) -> Result<Tensor> {
        self.scan("cumprod", dim, false)
    }
}
