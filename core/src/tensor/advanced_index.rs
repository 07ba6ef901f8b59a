//! `x[key]` and `x[key] = v` with numpy's and PyTorch's indexing rules.
//!
//! NOTE [Advanced indexing]
//! A key is a list of [`Index`] items. Basic items (an int, a slice, a new
//! axis, an ellipsis) make a view, as in PyTorch. Tensor items are
//! advanced: integer tensors of any rank (negative entries count from the
//! end) and bool masks (a mask of rank k stands for the k integer tensors
//! of its `nonzero()` columns). An int stays basic beside a tensor item
//! (PyTorch's rule, where numpy would count it as advanced: `x[0, :, [1,
//! 2]]` on a `[2, 3, 4]` tensor is `[3, 2]`, numpy's `[2, 3]`). All
//! advanced indices broadcast together to one shape B. The result has
//! B in place of the dims they index when those dims are adjacent, and B
//! first otherwise (`x[:, [0, 1], :, [2, 3]]` on a rank-4 tensor). The
//! gather is one `index_select` on the indexed dims flattened into one
//! (after a permute that brings them first), so gradients flow through the
//! existing rules, duplicates accumulating as in PyTorch.
//! Assignment (`index_put_`) indexes a tensor of element numbers with the
//! same key, then writes `v` (broadcast to the indexed shape, converted to
//! the destination's dtype) at those positions with one `copy_` into the
//! destination: one version bump, and nothing written on an error. With
//! repeated positions and `accumulate == false` which write wins is not
//! specified (as in PyTorch); `accumulate == true` sums them.

use super::Tensor;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::broadcast_shapes;
use alloc::vec::Vec;

const OP: &str = "index";

/// One item of an indexing key (NOTE [Advanced indexing]).
#[derive(Debug, Clone)]
pub enum Index {
    /// `x[i]`: one position (negative counts from the end).
    Int(isize),
    /// `x[start:stop:step]` with Python's rules for missing and negative
    /// bounds; `step` at least 1.
    Slice {
        /// First position (`None`: 0).
        start: Option<isize>,
        /// One past the last (`None`: the size).
        stop: Option<isize>,
        /// Stride, at least 1.
        step: usize,
    },
    /// `None` in Python: a new dimension of size 1.
    NewAxis,
    /// `...`: as many full slices as the dims no other item names.
    Ellipsis,
    /// An integer tensor (positions, any rank) or a bool mask.
    Tensor(Tensor),
}

/// A slice's `(start, len)` on a dim of size `n`, as Python's
/// `slice.indices` then the step.
fn slice_bounds(
    n: usize,
    start: Option<isize>,
    stop: Option<isize>,
    step: usize,
) -> (usize, usize) {
    let n = n as isize;
    let clamp = |v: isize| {
        let v = if v < 0 { v + n } else { v };
        v.clamp(0, n)
    };
    let s = start.map_or(0, clamp);
    let e = stop.map_or(n, clamp).max(s);
    let len = (e - s) as usize;
    (s as usize, len.div_ceil(step))
}

impl Tensor {
    /// `self[key]` with numpy's and PyTorch's rules (NOTE [Advanced
    /// indexing]): a view when every item is basic, else a copy.
    ///
    /// # Errors
    /// More indices than dims, two ellipses, a step of 0, a position out of
    /// range ([`Error::IndexOutOfRange`]), a float index tensor, a mask
    /// whose shape is not that of the dims it indexes, index tensors that
    /// do not broadcast together.
    ///
    /// ```
    /// use kael_core::tensor::Index;
    /// use kael_core::{Device, Tensor};
    /// let dev = Device::cpu();
    /// let x = Tensor::arange(0i64, 12, &dev)?.reshape(&[3, 4])?;
    /// let rows = Tensor::from_slice(&[0i64, 2], &[2], &dev)?;
    /// let cols = Tensor::from_slice(&[1i64, 3], &[2], &dev)?;
    /// // x[[0, 2], [1, 3]]: the indices pair up (numpy), [x[0,1], x[2,3]]
    /// let y = x.index(&[Index::Tensor(rows), Index::Tensor(cols)])?;
    /// assert_eq!(y.to_vec::<i64>()?, vec![1, 11]);
    /// // x[x > 6]: a mask
    /// let m = x.gt(&x.number_operand("gt", 6)?)?;
    /// assert_eq!(x.index(&[Index::Tensor(m)])?.to_vec::<i64>()?, vec![7, 8, 9, 10, 11]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn index(&self, key: &[Index]) -> Result<Tensor> {
        let consuming = key.iter().try_fold(0usize, |acc, k| {
            Ok::<usize, Error>(match k {
                Index::Tensor(t) if t.dtype() == DType::Bool => {
                    if t.rank() == 0 {
                        return Err(Error::InvalidArgument {
                            op: OP,
                            reason: "a 0-d bool index is not supported; use where() or an if on the value",
                        });
                    }
                    acc + t.rank()
                }
                Index::NewAxis | Index::Ellipsis => acc,
                _ => acc + 1,
            })
        })?;
        if key.iter().filter(|k| matches!(k, Index::Ellipsis)).count() > 1 {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: "an index can only have a single ellipsis (...); remove the others",
            });
        }
        if consuming > self.rank() {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: "too many indices for the tensor's rank; index at most one position per dim",
            });
        }
        let mut cur = self.clone();
        let mut dim = 0usize;
        // (dim of `cur`, I64 positions, normalised later)
        let mut adv: Vec<(usize, Tensor)> = Vec::new();
        for k in key {
            match k {
                Index::Int(i) => cur = cur.select(dim as isize, *i)?,
                Index::Slice { start, stop, step } => {
                    if *step == 0 {
                        return Err(Error::InvalidArgument {
                            op: OP,
                            reason: "a slice step must be at least 1; pass a positive step",
                        });
                    }
                    let n = cur.size(dim as isize)?;
                    let (s, len) = slice_bounds(n, *start, *stop, *step);
                    cur = if *step == 1 {
                        cur.narrow(dim as isize, s, len)?
                    } else {
                        let end = s + (len.saturating_sub(1)) * step + usize::from(len > 0);
                        cur.slice(dim as isize, s as isize, end as isize, *step)?
                    };
                    dim += 1;
                }
                Index::NewAxis => {
                    cur = cur.unsqueeze(dim as isize)?;
                    dim += 1;
                }
                Index::Ellipsis => dim += self.rank() - consuming,
                Index::Tensor(t) if t.dtype() == DType::Bool => {
                    let k = t.rank();
                    if t.shape() != &cur.shape()[dim..dim + k] {
                        return Err(Error::ShapeMismatch {
                            op: OP,
                            expected: crate::error::ErrShape::of(&cur.shape()[dim..dim + k]),
                            got: crate::error::ErrShape::of(t.shape()),
                        });
                    }
                    let nz = crate::autograd::no_grad(|| t.nonzero())?;
                    for j in 0..k {
                        adv.push((dim + j, nz.select(1, j as isize)?));
                    }
                    dim += k;
                }
                Index::Tensor(t) => {
                    if !t.dtype().is_int() {
                        return Err(Error::UnsupportedDType {
                            op: OP,
                            dtype: t.dtype(),
                            supported: "integer index tensors or bool masks",
                        });
                    }
                    adv.push((dim, crate::autograd::no_grad(|| t.to_dtype(DType::I64))?));
                    dim += 1;
                }
            }
        }
        if adv.is_empty() {
            return Ok(cur);
        }
        gather_advanced(&cur, adv)
    }

    /// `self[key] = values` (`accumulate == false`) or `self[key] +=
    /// values` with repeated positions summed (`accumulate == true`,
    /// PyTorch's `index_put_(..., accumulate=True)`); NOTE [Advanced
    /// indexing]. `values` broadcasts to the indexed shape and is
    /// converted to `self`'s dtype (as assignment converts in PyTorch).
    ///
    /// # Errors
    /// As [`Tensor::index`]; `values` that do not broadcast to the indexed
    /// shape; the in-place rules of `copy_`. On error nothing is written.
    ///
    /// ```
    /// use kael_core::tensor::Index;
    /// use kael_core::{Device, Tensor};
    /// let dev = Device::cpu();
    /// let x = Tensor::zeros(&[4], kael_core::DType::F32, &dev)?;
    /// let i = Tensor::from_slice(&[0i64, 2, 0], &[3], &dev)?;
    /// x.index_put_(&[Index::Tensor(i)], &Tensor::scalar(1.0f32, &dev)?, true)?;
    /// assert_eq!(x.to_vec::<f32>()?, vec![2.0, 0.0, 1.0, 0.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn index_put_(&self, key: &[Index], values: &Tensor, accumulate: bool) -> Result<()> {
        const PUT: &str = "index_put_";
        let n = i64::try_from(self.numel()).map_err(|_| Error::InvalidArgument {
            op: PUT,
            reason: "the tensor has more elements than i64 counts; index a smaller view",
        })?;
        self.check_writable(PUT)?;
        let dev = self.device();
        let (pos, v) = crate::autograd::no_grad(|| {
            let ids = Tensor::arange(0i64, n, &dev)?.reshape(self.shape())?;
            let pos = ids.index(key)?;
            Ok::<_, Error>((pos.reshape(&[pos.numel()])?, pos.dims().clone()))
        })
        .map_err(|e| e.renamed(PUT))?;
        let src = values
            .to_dtype(self.dtype())?
            .broadcast_to(&v)
            .map_err(|e| e.renamed(PUT))?;
        let src = src.reshape(&[pos.numel()])?;
        let flat = self.reshape(&[self.numel()])?;
        let written = if accumulate {
            flat.index_add(0, &pos, &src)?
        } else {
            // the values' gradient is the output's at every position named,
            // repeated or not (PyTorch's `index_put` backward), not only at
            // the write that won
            let w = crate::autograd::no_grad(|| flat.scatter(0, &pos, &src))?;
            crate::autograd::record(&w, &[&flat, &src], || {
                Ok(crate::autograd::rules::Rule::Fused {
                    name: "IndexPutBackward",
                    saved: alloc::vec![crate::autograd::SavedTensor::input(&pos)],
                    param: 0.0,
                    flags: 0,
                    formula: index_put_backward,
                })
            })?;
            w
        };
        self.copy_(&written.reshape(self.shape())?)
            .map_err(|e| e.renamed(PUT))
    }
}

/// `(self, values)` gradients of a non-accumulating `index_put_` on the
/// flattened tensor: zero where written, and the written positions'
/// gradient for each value.
fn index_put_backward(g: &Tensor, saved: &[Tensor], _: f64, _: u32) -> Result<Vec<Option<Tensor>>> {
    let pos = &saved[0];
    Ok(alloc::vec![
        Some(g.scatter_value(0, pos, 0.0)?),
        Some(g.index_select(0, pos)?),
    ])
}

/// The advanced part of [`Tensor::index`]: `adv` holds `(dim, positions)`
/// for dims of `cur` in increasing order.
fn gather_advanced(cur: &Tensor, adv: Vec<(usize, Tensor)>) -> Result<Tensor> {
    // bounds and negative positions, per indexed dim
    let mut idx = Vec::new();
    idx.try_reserve_exact(adv.len())
        .map_err(|_| Error::OutOfMemory {
            requested: adv.len(),
            available: None,
        })?;
    let mut b_shape = crate::shape::Dims::new();
    for (d, t) in &adv {
        let size = cur.shape()[*d];
        let t = crate::autograd::no_grad(|| normalise(t, size))?;
        b_shape = broadcast_shapes(OP, &b_shape, t.shape())?;
        idx.push(t);
    }
    let dims: Vec<usize> = adv.iter().map(|(d, _)| *d).collect();
    let adjacent = dims.windows(2).all(|w| w[1] == w[0] + 1);
    let rest: Vec<usize> = (0..cur.rank()).filter(|d| !dims.contains(d)).collect();
    let perm: Vec<isize> = dims.iter().chain(&rest).map(|&d| d as isize).collect();
    let moved = cur.permute(&perm)?;
    // positions in the indexed dims flattened row-major into one
    let mut lin: Option<Tensor> = None;
    let mut flat = 1usize;
    for (t, &d) in idx.iter().zip(&dims).rev() {
        let term = if flat == 1 {
            t.clone()
        } else {
            t.mul_scalar(flat as i64)?
        };
        lin = Some(match lin {
            None => term,
            Some(l) => l.add(&term)?,
        });
        flat = flat
            .checked_mul(cur.shape()[d])
            .ok_or(Error::InvalidArgument {
                op: OP,
                reason: "the indexed dims hold more elements than usize counts",
            })?;
    }
    let lin = match lin {
        Some(l) => l.broadcast_to(&b_shape)?,
        None => return Ok(cur.clone()),
    };
    let lin = crate::autograd::no_grad(|| lin.contiguous()?.reshape(&[lin.numel()]))?;
    let too_large = |rank| Error::RankTooLarge {
        rank,
        max: crate::shape::MAX_RANK,
    };
    let mut flat_shape = crate::shape::Dims::new();
    flat_shape.push(flat).map_err(|_| too_large(1))?;
    for &d in &rest {
        flat_shape
            .push(cur.shape()[d])
            .map_err(|_| too_large(1 + rest.len()))?;
    }
    let gathered = moved.reshape(&flat_shape)?.index_select(0, &lin)?;
    let mut out_shape = b_shape.clone();
    for &d in &rest {
        out_shape
            .push(cur.shape()[d])
            .map_err(|_| too_large(b_shape.len() + rest.len()))?;
    }
    let out = gathered.reshape(&out_shape)?;
    let p = dims[0];
    if !adjacent || p == 0 {
        return Ok(out);
    }
    // adjacent: B goes where the first indexed dim was
    let nb = b_shape.len();
    let back: Vec<isize> = (nb..nb + p)
        .chain(0..nb)
        .chain(nb + p..out.rank())
        .map(|d| d as isize)
        .collect();
    out.permute(&back)
}

/// `t` (I64) with negative positions counted from the end of a dim of
/// `size`; positions outside `-size..size` are refused.
fn normalise(t: &Tensor, size: usize) -> Result<Tensor> {
    if t.numel() == 0 {
        return Ok(t.clone());
    }
    let s = i64::try_from(size).map_err(|_| Error::InvalidArgument {
        op: OP,
        reason: "the dim is larger than i64 counts",
    })?;
    let (lo, hi) = (t.min_all()?.item::<i64>()?, t.max_all()?.item::<i64>()?);
    for bad in [lo, hi] {
        if bad < -s || bad >= s {
            return Err(Error::IndexOutOfRange {
                op: OP,
                index: bad,
                size,
            });
        }
    }
    if lo >= 0 {
        return Ok(t.clone());
    }
    let neg = t.lt(&t.number_operand(OP, 0)?)?;
    neg.where_cond(&t.add_scalar(s)?, t)
}
