//! Devices: cheap handles to one backend instance.

use crate::allocator::{Allocator, GlobalAllocator};
use crate::backend::Backend;
use crate::cpu::CpuBackend;
use crate::shared::Shared;

/// Which backend a device is, for errors and matching.
///
/// Two devices with equal kinds are the same device: their tensors can be
/// combined in one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum DeviceKind {
    /// The portable reference CPU backend in the core.
    Cpu,
    /// The threaded CPU backend of kael-host (host memory too).
    ThreadedCpu,
    /// A CUDA GPU, by ordinal.
    Cuda(u32),
    /// Any other backend, by name.
    Custom(&'static str),
}

/// A cheap, clonable handle to one backend instance.
///
/// ```
/// use kael_core::{Device, DeviceKind};
/// let d = Device::cpu();
/// assert_eq!(d.kind(), DeviceKind::Cpu);
/// assert!(d.is_host_memory());
/// ```
#[derive(Clone)]
pub struct Device {
    backend: Shared<dyn Backend>,
}

impl Device {
    /// The reference CPU backend with the global allocator.
    pub fn cpu() -> Self {
        Self::cpu_with_allocator(Shared::new(GlobalAllocator::new()))
    }

    /// The reference CPU backend drawing tensor memory from `allocator`
    /// (e.g. an [`ArenaAllocator`](crate::allocator::ArenaAllocator)).
    ///
    /// ```
    /// use kael_core::{allocator::ArenaAllocator, shared::Shared, DType, Device, Tensor};
    /// let buf: &'static mut [u8] = Box::leak(vec![0u8; 1024].into_boxed_slice());
    /// let dev = Device::cpu_with_allocator(Shared::new(ArenaAllocator::<16>::new(buf)));
    /// let t = Tensor::zeros(&[4, 4], DType::F32, &dev)?;
    /// assert_eq!(dev.allocator().stats().in_use, 64);
    /// drop(t);
    /// assert_eq!(dev.allocator().stats().in_use, 0);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn cpu_with_allocator(allocator: Shared<dyn Allocator>) -> Self {
        Self {
            backend: Shared::new(CpuBackend::new(allocator)),
        }
    }

    /// A device for any backend.
    pub fn from_backend(backend: Shared<dyn Backend>) -> Self {
        Self { backend }
    }

    /// The backend.
    pub fn backend(&self) -> &dyn Backend {
        &*self.backend
    }

    /// The kind (identity) of the device.
    pub fn kind(&self) -> DeviceKind {
        self.backend.kind()
    }

    /// Whether its storage is ordinary host memory that the CPU can read.
    pub fn is_host_memory(&self) -> bool {
        self.backend.is_host_memory()
    }

    /// The allocator new storage on this device comes from.
    pub fn allocator(&self) -> Shared<dyn Allocator> {
        self.backend.allocator()
    }

    /// Whether `self` and `other` are the same device.
    pub fn same_as(&self, other: &Device) -> bool {
        self.kind() == other.kind()
    }
}

impl core::fmt::Debug for Device {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?}", self.kind())
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        self.same_as(other)
    }
}
