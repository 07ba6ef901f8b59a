//! Reading values out of a tensor: `to_vec` and `item`.

use super::Tensor;
use crate::dtype::Element;
use crate::error::{Error, Result};
use alloc::vec::Vec;

impl Tensor {
    /// The elements in logical row-major order.
    ///
    /// # Errors
    /// [`Error::ElementTypeMismatch`] when `T` is not the tensor's dtype.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let t = Tensor::arange(0i32, 6, &Device::cpu())?.reshape(&[2, 3])?.t()?;
    /// assert_eq!(t.to_vec::<i32>()?, vec![0, 3, 1, 4, 2, 5]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.read_vec("to_vec")
    }

    /// [`to_vec`](Self::to_vec), its errors naming `op` (the public
    /// operation the user called).
    fn read_vec<T: Element>(&self, op: &'static str) -> Result<Vec<T>> {
        self.check_element::<T>(op)?;
        if !self.device().is_host_memory() {
            return self.to_vec_via_backend();
        }
        let t = self.clone();
        let mut out = Vec::new();
        out.try_reserve_exact(t.numel())
            .map_err(|_| Error::OutOfMemory {
                requested: t.numel() * t.element_size(),
                available: None,
            })?;
        t.with_src(|src| -> Result<()> {
            let g = src.storage.read("to_vec")?;
            let data = crate::storage::typed::<T::Repr>(g.bytes())?;
            src.layout
                .for_each_offset(|o| out.push(T::from_repr(data[o])));
            Ok(())
        })?;
        Ok(out)
    }

    /// [`to_vec`](Self::to_vec) for a device whose memory the CPU cannot
    /// read: a contiguous copy on that device, read through its backend.
    /// (Not through `to_device(&Device::cpu())`: naming `Device::cpu()` here
    /// would link every reference kernel into firmware that runs a smaller
    /// `CpuBackend`; NOTE [Kernel selection] in `cpu::select`.)
    fn to_vec_via_backend<T: Element>(&self) -> Result<Vec<T>> {
        let src = self.contiguous()?;
        let size = src.element_size();
        let nbytes = src.numel() * size;
        let host = super::convert::read_to_host(
            &src.device(),
            &src.storage(),
            src.offset() * size,
            nbytes,
        )?;
        let mut out = Vec::new();
        out.try_reserve_exact(src.numel())
            .map_err(|_| Error::OutOfMemory {
                requested: nbytes,
                available: None,
            })?;
        out.extend(
            host.chunks_exact(size)
                .map(|c| T::from_repr(bytemuck::pod_read_unaligned(c))),
        );
        Ok(out)
    }

    /// The value of a one-element tensor.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless `numel() == 1`;
    /// [`Error::ElementTypeMismatch`] when `T` is not the tensor's dtype.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// assert_eq!(Tensor::from_slice(&[7i64], &[1, 1], &Device::cpu())?.item::<i64>()?, 7);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn item<T: Element>(&self) -> Result<T> {
        if self.numel() != 1 {
            return Err(Error::InvalidArgument {
                op: "item",
                reason: "item() needs a tensor with exactly one element; index or reduce it first",
            });
        }
        self.read_vec::<T>("item")?
            .pop()
            .ok_or(Error::InvalidArgument {
                op: "item",
                reason: "empty tensor",
            })
    }

    // ------------------------------------------------------------ copies
}
