//! Copies, casts and device moves: `deep_clone`, `contiguous`, `to_dtype`,
//! `to_device`, `move_to_`.

use super::{Placement, Tensor, TensorImpl};
use crate::autograd::rules::Rule;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shared::Shared;
use crate::storage::Storage;
use alloc::vec::Vec;

impl Tensor {
    /// A new contiguous tensor with its own storage, sized to exactly its
    /// elements (a 2-element view of a 1M-element tensor copies 2).
    ///
    /// # Errors
    /// [`Error::OutOfMemory`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let big = Tensor::arange(0.0f32, 1000.0, &Device::cpu())?;
    /// let c = big.narrow(0, 10, 2)?.deep_clone()?;
    /// assert_eq!((c.storage_nbytes(), c.offset()), (8, 0));
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn deep_clone(&self) -> Result<Tensor> {
        let out = self.with_src_on(|s, dev| {
            Tensor::written(self.dims(), self.dtype(), dev, |d| {
                dev.backend().copy_strided(s, d)
            })
        })?;
        crate::autograd::record(&out, &[self], || Ok(Rule::Identity))?;
        Ok(out)
    }

    /// `self` when already contiguous, else a contiguous copy.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::arange(0.0f32, 6.0, &Device::cpu())?.reshape(&[2, 3])?;
    /// assert!(a.contiguous()?.is_same(&a));
    /// assert!(!a.t()?.contiguous()?.shares_storage(&a));
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.is_contiguous() {
            Ok(self.clone())
        } else {
            self.deep_clone()
        }
    }

    /// Converts elements to `dtype` (a copy; `self` when the dtype is the same).
    ///
    /// Float to integer truncates toward zero and saturates (NaN to 0; in
    /// PyTorch an out-of-range float-to-integer cast is undefined
    /// behaviour); integer to integer wraps (two's complement truncation),
    /// as PyTorch: `300i64` as `I8` is `44`; any value to bool is `x != 0`.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`].
    ///
    /// ```
    /// use kael_core::{DType, Device, Tensor};
    /// let t = Tensor::from_slice(&[1.7f32, -2.5, 0.0], &[3], &Device::cpu())?;
    /// assert_eq!(t.to_dtype(DType::I32)?.to_vec::<i32>()?, vec![1, -2, 0]);
    /// assert_eq!(t.to_dtype(DType::Bool)?.to_vec::<bool>()?, vec![true, true, false]);
    /// let i = Tensor::from_slice(&[300i64, -129], &[2], &Device::cpu())?;
    /// assert_eq!(i.to_dtype(DType::I8)?.to_vec::<i8>()?, vec![44, 127]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        let out = self.with_src_on(|s, dev| {
            Tensor::written(self.dims(), dtype, dev, |d| dev.backend().cast(s, d))
        })?;
        if dtype.is_float() {
            crate::autograd::record(&out, &[self], || Ok(Rule::ToDtype { from: self.dtype() }))?;
        }
        Ok(out)
    }

    /// The tensor on `device`: `self` when already there; a tensor over
    /// the *same storage* when both devices are host memory (reference CPU
    /// and threaded CPU: no copy, like PyTorch's `.to()` when no copy is
    /// needed, so writes through one are visible through the other); else
    /// a copy.
    ///
    /// NOTE [Host-memory moves]
    /// Host-memory backends read and write the same bytes, so a move
    /// between them only changes which backend's kernels run: the result
    /// is a new tensor (its own autograd history, `ToDevice` rule) with
    /// this tensor's layout over the same storage, tagged with the new
    /// device (INVARIANT 3 of `TensorImpl`). It is a view of this tensor's
    /// root, so an in-place write through it obeys the view rules of NOTE
    /// [In-place rules] (refused in grad mode when the root is a leaf that
    /// requires grad, as a write through any other alias would be). The storage keeps its
    /// allocator, so its bytes go back where they came from.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`], backend failures.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::arange(0.0f32, 3.0, &Device::cpu())?;
    /// assert!(a.to_device(&Device::cpu())?.is_same(&a));
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn to_device(&self, device: &Device) -> Result<Tensor> {
        if self.device().same_as(device) {
            return Ok(self.clone());
        }
        if self.device().is_host_memory() && device.is_host_memory() {
            let p = self.placement();
            let layout = self.layout();
            // The result shares this tensor's storage, so it is a view of
            // its root: an in-place write through it obeys the view rules
            // (refused on an alias of a leaf that requires grad).
            let out = Tensor::from_impl(TensorImpl::new_on(
                p.storage,
                layout,
                self.dtype(),
                Some(self.root()),
                Some(device.clone()),
            )?);
            crate::autograd::record(&out, &[self], || {
                Ok(Rule::ToDevice {
                    from: self.device(),
                })
            })?;
            return Ok(out);
        }
        let src = self.contiguous_on_own_device()?;
        let size = src.element_size();
        let host = read_to_host(
            &src.device(),
            &src.storage(),
            src.offset() * size,
            src.numel() * size,
        )?;
        let out = Tensor::alloc(self.shape(), self.dtype(), device)?;
        device.backend().write_bytes(&out.storage(), 0, &host)?;
        crate::autograd::record(&out, &[self], || {
            Ok(Rule::ToDevice {
                from: self.device(),
            })
        })?;
        Ok(out)
    }

    fn contiguous_on_own_device(&self) -> Result<Tensor> {
        self.contiguous()
    }

    /// Moves the tensor to `device` in place: every handle to this tensor
    /// (an optimizer's too) sees the new storage; views made earlier keep
    /// the old one. The shape, strides and offset stay as they are (a
    /// tensor's layout never changes): between host-memory devices the
    /// storage is shared (NOTE [Host-memory moves]); to any other device,
    /// the storage's elements up to the last one this tensor reaches are
    /// copied, at the same offsets.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`], backend failures; on error nothing changes.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::arange(0.0f32, 3.0, &Device::cpu())?;
    /// let b = a.clone();
    /// a.move_to_(&Device::cpu())?;
    /// assert!(b.is_same(&a));
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn move_to_(&self, device: &Device) -> Result<()> {
        if self.device().same_as(device) {
            return Ok(());
        }
        let old = self.storage();
        let storage = if self.device().is_host_memory() && device.is_host_memory() {
            old.clone()
        } else {
            let copy = self.storage_span_on(&old, device)?;
            // A fresh copy: it carries the version on (NOTE [Version counter]).
            copy.carry_version_from(&old);
            copy
        };
        let device = (!device.same_as(storage.device())).then(|| device.clone());
        drop(self.replace_placement(Placement { storage, device }));
        Ok(())
    }

    /// A copy on `device` of `old`'s bytes up to this tensor's reach (the
    /// end of its last element): its layout addresses the copy as it did
    /// `old` (`move_to_`).
    fn storage_span_on(&self, old: &Storage, device: &Device) -> Result<Shared<Storage>> {
        let nbytes = self
            .layout_ref()
            .reach()
            .checked_mul(self.element_size())
            .ok_or(Error::OutOfMemory {
                requested: usize::MAX,
                available: None,
            })?;
        let host = read_to_host(old.device(), old, 0, nbytes)?;
        let copy = Storage::shared_for_overwrite(nbytes, device)?;
        device.backend().write_bytes(&copy, 0, &host)?;
        Ok(copy)
    }
}

/// `nbytes` bytes of `storage` from byte `offset`, read through `device`'s
/// backend into a host buffer allocated fallibly.
///
/// # Errors
/// [`Error::OutOfMemory`]; the backend's read errors.
pub(super) fn read_to_host(
    device: &Device,
    storage: &Storage,
    offset: usize,
    nbytes: usize,
) -> Result<Vec<u8>> {
    let mut host = Vec::new();
    host.try_reserve_exact(nbytes)
        .map_err(|_| Error::OutOfMemory {
            requested: nbytes,
            available: None,
        })?;
    host.resize(nbytes, 0u8);
    device.backend().read_bytes(storage, offset, &mut host)?;
    Ok(host)
}
