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
/// NOTE [Device-held allocator]
/// A device is one shared record of its backend and what every op asks of
/// it: the allocator new storage comes from, the kind and whether its
/// memory is host memory, each read from the backend once, when the device
/// is made. Cloning a device is one reference count, and a storage drawn
/// from the device's allocator keeps no allocator handle of its own: it
/// frees through the device it already holds (two atomic read-modify-writes
/// fewer per allocating op in `sync` mode; see NOTE [Small-op path]), and
/// `kind()` and `is_host_memory()` cost no virtual call.
///
/// ```
/// use kael_core::{Device, DeviceKind};
/// let d = Device::cpu();
/// assert_eq!(d.kind(), DeviceKind::Cpu);
/// assert!(d.is_host_memory());
/// ```
#[derive(Clone)]
pub struct Device(Shared<DeviceRecord>);

/// What a [`Device`] shares; see NOTE [Device-held allocator].
struct DeviceRecord {
    backend: Shared<dyn Backend>,
    allocator: Shared<dyn Allocator>,
    kind: DeviceKind,
    host_memory: bool,
}

impl Device {
    /// A device for any backend. Its allocator, kind and memory kind are
    /// the backend's at this call (see NOTE [Device-held allocator]).
    ///
    /// ```
    /// use kael_core::{allocator::GlobalAllocator, cpu::CpuBackend, shared::Shared, Device};
    /// let b = CpuBackend::new(Shared::new(GlobalAllocator::new()));
    /// let d = Device::from_backend(Shared::new(b));
    /// assert_eq!(d.allocator().name(), "global");
    /// ```
    pub fn from_backend(backend: Shared<dyn Backend>) -> Self {
        Self(Shared::new(DeviceRecord {
            allocator: backend.allocator(),
            kind: backend.kind(),
            host_memory: backend.is_host_memory(),
            backend,
        }))
    }

    /// The backend.
    pub fn backend(&self) -> &dyn Backend {
        &*self.0.backend
    }

    /// The kind (identity) of the device.
    pub fn kind(&self) -> DeviceKind {
        self.0.kind
    }

    /// Whether its storage is ordinary host memory that the CPU can read.
    pub fn is_host_memory(&self) -> bool {
        self.0.host_memory
    }

    /// The allocator new storage on this device comes from.
    pub fn allocator(&self) -> Shared<dyn Allocator> {
        self.0.allocator.clone()
    }

    /// The allocator new storage on this device comes from, borrowed.
    pub(crate) fn allocator_ref(&self) -> &dyn Allocator {
        &*self.0.allocator
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
