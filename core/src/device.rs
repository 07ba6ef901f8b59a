//! Devices: cheap handles to one backend instance.
//!
//! The constructors of the reference CPU device (`Device::cpu`,
//! `Device::cpu_with_allocator`) live with the reference backend in
//! [`crate::cpu`], so this module does not depend on any backend.

use crate::allocator::Allocator;
use crate::backend::Backend;
use crate::shared::Shared;

pub use crate::device_kind::DeviceKind;

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
