//! What a backend's kernels do when the backend does not override them.
//!
//! NOTE [Inherited kernels]
//! A kernel developer writes the kernels they care about and inherits the
//! rest, one line for the whole backend ([`Backend::inherit`]):
//! - [`Inherit::From`]`(device)`: a host-memory backend runs the kernels
//!   of another host-memory device (usually `Device::cpu()`, the reference)
//!   on its own storages, for every kernel and byte copy it does not
//!   override.
//! - [`Inherit::Staged`]`(device)`: a device-memory backend runs every
//!   kernel it does not override as a composite of its byte copies: each
//!   operand's storage is read into a copy on `device` (host memory) with
//!   `read_bytes`, that device's kernel runs there, and the destination's
//!   storage is written back with `write_bytes`. Correct for every family,
//!   and slow (whole storages cross the bus); it lets a new device backend
//!   pass the conformance suite from its first day and replace kernels one
//!   at a time.
//! - [`Inherit::Nothing`] (the default): a kernel that is not overridden
//!   is [`Error::Unsupported`], which names the backend and the fix.
//!
//! NOTE [Fused families]
//! Some families exist only to be fast: `layer_norm` and
//! `layer_norm_backward` compute what a dozen primitive ops compute, in one
//! or two passes, and `softmax_backward` what four ops compute. They are optional. A backend that overrides them runs its
//! kernel; one that inherits [`Inherit::From`] a host device runs that
//! device's kernel in place; any other ([`Inherit::Staged`] would copy
//! whole storages across the bus, slower than the primitives it already
//! has) returns [`Error::Unsupported`], and the tensor layer composes the
//! op from the backend's primitives. So a new backend writes primitives
//! only, and results agree either way within the op's stated tolerance.
//!
//! The device to inherit from is a value, not a dependency: this module
//! (the backend boundary) does not import the reference backend, which
//! depends on it.

use super::{Backend, Src};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::storage::Storage;
use alloc::vec::Vec;

/// What a backend's kernels do when the backend does not override them
/// (NOTE [Inherited kernels]).
///
/// ```
/// use kael_core::backend::{Backend, Inherit};
/// use kael_core::{allocator::*, shared::Shared, Device, DeviceKind};
///
/// /// A host-memory backend that overrides nothing (yet).
/// struct Mine(Device);
/// impl Backend for Mine {
///     fn kind(&self) -> DeviceKind { DeviceKind::Custom("mine") }
///     fn is_host_memory(&self) -> bool { true }
///     fn allocator(&self) -> Shared<dyn Allocator> { self.0.allocator() }
///     fn inherit(&self) -> Inherit { Inherit::From(self.0.clone()) }
/// }
/// let dev = Device::from_backend(Shared::new(Mine(Device::cpu())));
/// let x = kael_core::Tensor::from_slice(&[1.0f32, 4.0], &[2], &dev)?;
/// assert_eq!(x.sqrt()?.to_vec::<f32>()?, vec![1.0, 2.0]);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub enum Inherit {
    /// Kernels that are not overridden are [`Error::Unsupported`].
    #[default]
    Nothing,
    /// The kernels of this host-memory device, on the backend's own (host)
    /// storages.
    From(Device),
    /// The kernels of this host-memory device, on copies made with the
    /// backend's `read_bytes`/`write_bytes`.
    Staged(Device),
}

/// Runs `kernel` (given the backend to inherit from) as `backend` inherits
/// it: `operands` are every source and, last, the destination (which
/// `kernel` may also read).
pub(crate) fn run<const N: usize, B: Backend + ?Sized>(
    backend: &B,
    op: &'static str,
    operands: [Src<'_>; N],
    kernel: impl FnOnce(&dyn Backend, [Src<'_>; N]) -> Result<()>,
) -> Result<()> {
    match backend.inherit() {
        Inherit::Nothing => Err(Error::Unsupported {
            op,
            device: backend.kind(),
        }),
        Inherit::From(from) => kernel(from.backend(), operands),
        Inherit::Staged(host) => staged(backend, &host, op, operands, kernel),
    }
}

/// [`Inherit::HostStaging`]: one host copy per distinct storage (so an
/// operand that is the destination stays the destination, NOTE [Aliasing
/// contract]), the kernel on the copies, the destination's copy written
/// back.
fn staged<const N: usize, B: Backend + ?Sized>(
    backend: &B,
    host: &Device,
    op: &'static str,
    operands: [Src<'_>; N],
    kernel: impl FnOnce(&dyn Backend, [Src<'_>; N]) -> Result<()>,
) -> Result<()> {
    if !host.is_host_memory() {
        return Err(Error::InvalidArgument {
            op,
            reason: "Inherit::Staged needs a host-memory device to stage through; use Device::cpu()",
        });
    }
    let mut copies: Vec<(&Storage, Storage)> = Vec::new();
    for o in &operands {
        if copies.iter().any(|(s, _)| core::ptr::eq(*s, o.storage)) {
            continue;
        }
        let copy = Storage::for_overwrite(o.storage.nbytes(), host)?;
        {
            let mut g = copy.write(op)?;
            backend.read_bytes(o.storage, 0, g.bytes_mut())?;
        }
        copies.push((o.storage, copy));
    }
    let copy_of = |o: &Src<'_>| {
        copies
            .iter()
            .find(|(s, _)| core::ptr::eq(*s, o.storage))
            .map(|(_, c)| c)
    };
    let mut staged_ok = true;
    let host_operands: [Src<'_>; N] = core::array::from_fn(|k| {
        let o = &operands[k];
        let storage = copy_of(o).unwrap_or_else(|| {
            staged_ok = false;
            o.storage
        });
        Src {
            storage,
            layout: o.layout,
            dtype: o.dtype,
        }
    });
    if !staged_ok {
        return Err(Error::Unsupported {
            op,
            device: backend.kind(),
        });
    }
    kernel(host.backend(), host_operands)?;
    let Some(dst) = operands.last() else {
        return Ok(());
    };
    if let Some(c) = copy_of(dst) {
        let g = c.read(op)?;
        backend.write_bytes(dst.storage, 0, g.bytes())?;
    }
    Ok(())
}
