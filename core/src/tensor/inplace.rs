//! In-place operations.
//!
//! NOTE [In-place rules]
//! 1. The destination must not map several positions to one element
//!    (stride 0 after `expand`): refused with [`Error::InternalOverlap`],
//!    whose message says to call `deep_clone()` first. Only `fill_` and
//!    `zero_`, which do not read the destination, accept one (as PyTorch):
//!    repeated positions (expand) are written once, and windows that
//!    overlap (`unfold`, `as_strided`) as they are (NOTE [Overlapping
//!    fills] on `Backend::fill`).
//!    kael is stricter than PyTorch nowhere else here: PyTorch refuses
//!    read-modify-write ops (`add_`, `mul_`, `clamp_`, ...) and `copy_` on
//!    such destinations too, since their result would depend on the order
//!    of the writes.
//! 2. A source is broadcast to the destination's shape (never the other way).
//! 3. A source that shares the destination's storage is used directly only
//!    when it *is* the destination (same layout: `a.add_(&a)`); otherwise it
//!    is copied first, so results never depend on write order (see NOTE
//!    [Aliasing contract] in `backend`).
//! 4. Every successful in-place op bumps the storage version once.
//! 5. Checks run before any write: a refused op leaves the tensor unchanged.

use super::Tensor;
use crate::autograd::{self, SavedTensor, rules::Rule};
use crate::backend::{BinaryOp, UnaryOp};
use crate::error::{ErrShape, Error, Result};
use crate::shape::broadcast_shapes;
use alloc::boxed::Box;

/// How many positions per storage element an overlapping `fill_` may
/// write (an `unfold` of window `w` and step 1 has about `w`).
const OVERLAP_FILL_FACTOR: usize = 8;

impl Tensor {
    /// Rule 1, plus read-only storage.
    pub(crate) fn check_writable(&self, op: &'static str) -> Result<()> {
        if self.layout().has_internal_overlap() {
            return Err(Error::InternalOverlap { op });
        }
        self.check_read_only(op)
    }

    /// Everything that can stop an in-place write of `self`, checked
    /// before a multi-tensor write starts (NOTE [All-or-nothing loads]):
    /// rule 1, read-only storage, and a borrow held elsewhere (probed on
    /// host memory, and released at once).
    pub(crate) fn check_write_target(&self, op: &'static str) -> Result<()> {
        self.check_writable(op)?;
        let storage = self.storage();
        if storage.device().is_host_memory() {
            drop(storage.write(op)?);
        }
        Ok(())
    }

    /// Read-only (external) storage is refused; the only check of writes
    /// that do not read the destination (`fill_`, `zero_`).
    fn check_read_only(&self, op: &'static str) -> Result<()> {
        if self.storage().is_read_only() {
            return Err(Error::InvalidArgument {
                op,
                reason: "the tensor's storage is external and read-only (e.g. a memory map); call deep_clone() first",
            });
        }
        Ok(())
    }

    /// Rules 2 and 3: `src` as an operand for writing into `self`.
    fn source_for(&self, op: &'static str, src: &Tensor) -> Result<Tensor> {
        self.same_device(op, src)?;
        let shape = broadcast_shapes(op, self.shape(), src.shape())?;
        if &shape[..] != self.shape() {
            return Err(Error::ShapeMismatch {
                op,
                expected: ErrShape::of(self.shape()),
                got: ErrShape::of(src.shape()),
            });
        }
        let b = if src.shape() == self.shape() {
            src.clone()
        } else {
            src.broadcast_to(self.shape())?
        };
        if b.shares_storage(self) && !(b.layout() == self.layout() && b.dtype() == self.dtype()) {
            return autograd::no_grad(|| b.deep_clone());
        }
        Ok(b)
    }

    /// `self = self op other`; errors name the in-place method (`name`,
    /// e.g. `add_`), which is what the user called.
    pub(crate) fn binary_(&self, op: BinaryOp, name: &'static str, other: &Tensor) -> Result<()> {
        if !super::promoted::runs_as_is(op, self.dtype(), other.dtype()) {
            return self.binary_promoted_(op, name, other);
        }
        self.check_writable(name)?;
        self.check_inplace_autograd(name)?;
        let src = autograd::no_grad(|| self.source_for(name, other))?;
        let record = autograd::needs_record(&[self, other]);
        let old_edge = if record {
            autograd::grad_edge(self)
        } else {
            None
        };
        let old_self = if record && op == BinaryOp::Mul && other.requires_grad() {
            Some(autograd::no_grad(|| self.deep_clone())?)
        } else {
            None
        };
        // `other` is saved before the write, with the version the backward
        // formula needs: when it shares `self`'s storage (`a.mul_(&a)`), the
        // write then makes backward fail its version check (as in PyTorch)
        // instead of silently using the new values.
        let saved_other = (record && matches!(op, BinaryOp::Mul | BinaryOp::Div))
            .then(|| SavedTensor::input(other));
        let dev = self.device();
        self.with_src(|d| src.with_src(|s| dev.backend().binary(op, d, s, d)))
            .map_err(|e| e.renamed(name))?;
        self.storage().bump_version();
        if record {
            let rule = Rule::InplaceBinary {
                op,
                old_self,
                other: saved_other,
                out: if op == BinaryOp::Div {
                    Some(SavedTensor::output(self)?)
                } else {
                    None
                },
                other_shape: Box::new(other.dims().clone()),
            };
            autograd::record_inplace(self, old_edge, &[other], rule);
        }
        Ok(())
    }

    /// [`Tensor::binary_`] for operands of different dtypes, or of one
    /// dtype the op computes in another (NOTE [Type promotion], rule 5):
    /// the result dtype must fit `self`'s category; `other` is converted
    /// when the op computes in `self`'s dtype, and otherwise (a wider
    /// result: `float16 += float32 tensor`, bool logic) the op runs out of
    /// place on a copy of `self` and the result is written back converted.
    fn binary_promoted_(&self, op: BinaryOp, name: &'static str, other: &Tensor) -> Result<()> {
        crate::promote::require(name)?;
        let d = super::promoted::binary_dtypes(op, self, other).map_err(|e| e.renamed(name))?;
        crate::promote::check_inplace(name, d.out, self.dtype())?;
        self.same_device(name, other)?;
        if d.compute == self.dtype() && d.out == self.dtype() {
            return self.binary_(op, name, &other.to_dtype(d.compute)?);
        }
        self.check_writable(name)?;
        self.check_inplace_autograd(name)?;
        // the shape check of `source_for`, before anything is computed
        let shape = broadcast_shapes(name, self.shape(), other.shape())?;
        if &shape[..] != self.shape() {
            return Err(Error::ShapeMismatch {
                op: name,
                expected: ErrShape::of(self.shape()),
                got: ErrShape::of(other.shape()),
            });
        }
        let result = self
            .deep_clone()?
            .binary_op(op, other)
            .map_err(|e| e.renamed(name))?;
        self.copy_(&result).map_err(|e| e.renamed(name))
    }

    /// `self = op(self)`, for the in-place methods the unary op table
    /// generates; errors name `name`, the method the user called.
    pub(crate) fn unary_(&self, op: UnaryOp, name: &'static str) -> Result<()> {
        if !op.works_on_ints() {
            // a float-only row on an integer tensor computes in a float
            // dtype the destination cannot hold (NOTE [Type promotion])
            crate::promote::check_inplace(
                name,
                crate::promote::to_float(self.dtype()),
                self.dtype(),
            )?;
        }
        self.dtype().require_numeric(name)?;
        super::ops::check_unary_scalars(op, name, self.dtype())?;
        self.check_writable(name)?;
        self.check_inplace_autograd(name)?;
        let record = autograd::needs_record(&[self]);
        let old_edge = if record {
            autograd::grad_edge(self)
        } else {
            None
        };
        let (save_x, save_y) = op.saves();
        let old = if record && save_x {
            Some(autograd::no_grad(|| self.deep_clone())?)
        } else {
            None
        };
        let dev = self.device();
        self.with_src(|d| dev.backend().unary(op, d, d))
            .map_err(|e| e.renamed(name))?;
        self.storage().bump_version();
        if record {
            let out = if save_y {
                Some(SavedTensor::output(self)?)
            } else {
                None
            };
            let rule = Rule::InplaceUnary { op, x: old, out };
            autograd::record_inplace(self, old_edge, &[], rule);
        }
        Ok(())
    }

    /// `self += other` (broadcast to `self`'s shape).
    ///
    /// # Errors
    /// Shape, dtype or device mismatch; an expanded destination
    /// ([`Error::InternalOverlap`]). On error `self` is unchanged.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::from_slice(&[1.0f32, 2.0], &[2], &Device::cpu())?;
    /// a.add_(&a)?; // exact aliasing is fine
    /// assert_eq!(a.to_vec::<f32>()?, vec![2.0, 4.0]);
    /// assert_eq!(a.version(), 1);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn add_(&self, other: &Tensor) -> Result<()> {
        self.binary_(BinaryOp::Add, "add_", other)
    }

    /// `self -= other`.
    ///
    /// # Errors
    /// As [`Tensor::add_`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::from_slice(&[3i64, 4], &[2], &Device::cpu())?;
    /// a.sub_(&Tensor::scalar(1i64, &Device::cpu())?)?;
    /// assert_eq!(a.to_vec::<i64>()?, vec![2, 3]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn sub_(&self, other: &Tensor) -> Result<()> {
        self.binary_(BinaryOp::Sub, "sub_", other)
    }

    /// `self *= other`.
    ///
    /// # Errors
    /// As [`Tensor::add_`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::from_slice(&[3.0f32, 4.0], &[2], &Device::cpu())?;
    /// a.mul_(&a)?;
    /// assert_eq!(a.to_vec::<f32>()?, vec![9.0, 16.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn mul_(&self, other: &Tensor) -> Result<()> {
        self.binary_(BinaryOp::Mul, "mul_", other)
    }

    /// `self /= other` (float dtypes).
    ///
    /// # Errors
    /// As [`Tensor::add_`]; integer dtypes.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::from_slice(&[3.0f32, 4.0], &[2], &Device::cpu())?;
    /// a.div_(&Tensor::scalar(2.0f32, &Device::cpu())?)?;
    /// assert_eq!(a.to_vec::<f32>()?, vec![1.5, 2.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn div_(&self, other: &Tensor) -> Result<()> {
        self.binary_(BinaryOp::Div, "div_", other)
    }

    /// Sets every element to `value`. An expanded (stride-0) destination is
    /// allowed, as in PyTorch: the write does not read the destination, so
    /// every position that shares an element writes the same value (each
    /// element is written once). Other self-overlapping layouts (from
    /// `as_strided`) stay refused.
    ///
    /// # Errors
    /// [`Error::InternalOverlap`] for a destination that overlaps itself
    /// other than through stride-0 dims; read-only storage.
    ///
    /// ```
    /// use kael_core::{DType, Device, Tensor};
    /// let x = Tensor::arange(0.0f32, 6.0, &Device::cpu())?.reshape(&[2, 3])?;
    /// x.narrow(1, 1, 1)?.fill_(0.0)?;
    /// assert_eq!(x.to_vec::<f32>()?, vec![0.0, 0.0, 2.0, 3.0, 0.0, 5.0]);
    /// let one = Tensor::zeros(&[1], DType::F32, &Device::cpu())?;
    /// one.broadcast_to(&[4])?.fill_(7.0)?;
    /// assert_eq!(one.to_vec::<f32>()?, vec![7.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn fill_(&self, value: f64) -> Result<()> {
        const OP: &str = "fill_";
        super::ops::check_fill(OP, self.dtype(), value)?;
        self.check_read_only(OP)?;
        self.check_inplace_autograd(OP)?;
        let record = autograd::needs_record(&[self]);
        if self.with_distinct_src(|d| d.layout.has_internal_overlap()) {
            // refused: in an autograd graph (PyTorch refuses a write whose
            // positions alias there too), and for many more positions than
            // the storage has elements (an `as_strided` view of 2^40
            // positions over 2^21 elements is not walked)
            let elements = self.storage_nbytes() / self.element_size();
            if record || self.numel() > elements.saturating_mul(OVERLAP_FILL_FACTOR) {
                return Err(Error::InternalOverlap { op: OP });
            }
        }
        let old_edge = if record {
            autograd::grad_edge(self)
        } else {
            None
        };
        // NOTE [Overlapping fills]
        let dev = self.device();
        self.with_distinct_src(|d| dev.backend().fill(d, value))?;
        self.storage().bump_version();
        if record {
            autograd::record_inplace(self, old_edge, &[], Rule::InplaceFill);
        }
        Ok(())
    }

    /// Sets every element to zero.
    ///
    /// # Errors
    /// As [`Tensor::fill_`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let x = Tensor::arange(1.0f32, 3.0, &Device::cpu())?;
    /// x.zero_()?;
    /// assert_eq!(x.to_vec::<f32>()?, vec![0.0, 0.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn zero_(&self) -> Result<()> {
        self.fill_(0.0)
    }

    /// Copies `src` (broadcast, cast to `self`'s dtype, moved from its
    /// device if needed) into `self`.
    ///
    /// # Errors
    /// As [`Tensor::add_`], except that dtypes and devices may differ.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let dev = Device::cpu();
    /// let x = Tensor::zeros(&[2, 2], kael_core::DType::F32, &dev)?;
    /// x.copy_(&Tensor::from_slice(&[1i64, 2], &[2], &dev)?)?;
    /// assert_eq!(x.to_vec::<f32>()?, vec![1.0, 2.0, 1.0, 2.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn copy_(&self, src: &Tensor) -> Result<()> {
        self.check_writable("copy_")?;
        self.check_inplace_autograd("copy_")?;
        let record = autograd::needs_record(&[self, src]);
        let old_edge = if record {
            autograd::grad_edge(self)
        } else {
            None
        };
        let original = src.clone();
        let dev = self.device();
        let src = if src.device().same_as(&dev) {
            src.clone()
        } else {
            autograd::no_grad(|| src.to_device(&dev))?
        };
        let src = autograd::no_grad(|| self.source_for("copy_", &src))?;
        let src = if src.shares_storage(self) && src.dtype() != self.dtype() {
            autograd::no_grad(|| src.deep_clone())?
        } else {
            src
        };
        self.with_src(|d| {
            src.with_src(|s| {
                if s.dtype == d.dtype {
                    dev.backend().copy_strided(s, d)
                } else {
                    dev.backend().cast(s, d)
                }
            })
        })?;
        self.storage().bump_version();
        if record {
            let rule = Rule::InplaceCopy {
                src_shape: original.dims().clone(),
                src_dtype: original.dtype(),
                src_device: original.device(),
            };
            autograd::record_inplace(self, old_edge, &[&original], rule);
        }
        Ok(())
    }
}
