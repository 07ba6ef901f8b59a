//! The identity of a device, a leaf of the crate (no imports), so that
//! errors and backends can name devices without depending on each other.

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
