//! Storage: the bytes behind one or more tensors.
//!
//! INVARIANTS (of [`Storage`]):
//! 1. A storage uniquely owns its byte range: two storages never alias
//!    (PyTorch's StorageImpl invariant), so `shares_storage` is pointer
//!    identity of the `Storage` and aliasing is decidable without comparing
//!    addresses.
//! 2. `ptr` is valid for `nbytes` bytes for the storage's whole life, aligned
//!    to [`BUFFER_ALIGN`] when allocated (external bytes: aligned for the
//!    dtypes read through them): it either came from `owner`'s allocator (and goes
//!    back to it on drop) or belongs to an external owner kept alive here.
//! 3. Host-memory bytes are always initialised (allocated zeroed).
//! 4. External storage is read-only (a memory map may be mapped read-only),
//!    unless it was made by [`Storage::from_external_writable`], whose caller
//!    vouches that the owner lets kael write the bytes (e.g. a numpy array
//!    shared with Python).
//! 5. `Storage` is not `Clone`: it is shared only through its pointer,
//!    because cloning can fail (out of memory) and would break 1.
//!
//! NOTE [Version counter]
//! The version counter lives here, not on the tensor, because writes can
//! arrive through any view or through `detach()`; only the storage is common
//! to all of them. Every in-place operation bumps it once; autograd compares
//! it against the version it recorded when it saved a tensor. A storage
//! made by moving a tensor to another device (`move_to_`) starts at the
//! old storage's version, not 0: otherwise a round trip and one write
//! would bring the counter back to the saved value and backward would use
//! the modified values unnoticed.

use crate::allocator::{Allocator, BUFFER_ALIGN};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::shared::{BorrowFlag, Counter, MaybeSendSync, Shared};
use core::alloc::Layout as MemLayout;
use core::ptr::NonNull;

/// Something that keeps externally owned bytes alive (e.g. a memory map).
pub trait ExternalOwner: MaybeSendSync {}
impl<T: MaybeSendSync + ?Sized> ExternalOwner for T {}

enum Owner {
    /// From the storage's device's own allocator, which the device holds
    /// for as long as this storage holds the device: no handle is kept
    /// here (NOTE [Device-held allocator]).
    DeviceAllocator { layout: MemLayout },
    /// From another allocator ([`Storage::zeroed_in`]).
    Allocated {
        allocator: Shared<dyn Allocator>,
        layout: MemLayout,
    },
    External {
        _owner: Shared<dyn ExternalOwner>,
        writable: bool,
    },
}

/// A run of bytes on one device, with a version counter.
///
/// See the invariants and NOTE [Version counter] in this module.
///
/// ```
/// use kael_core::{Device, Storage};
/// let s = Storage::zeroed(16, &Device::cpu())?;
/// assert_eq!(s.nbytes(), 16);
/// assert_eq!(s.version(), 0);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub struct Storage {
    ptr: NonNull<u8>,
    nbytes: usize,
    owner: Owner,
    device: Device,
    version: Counter,
    borrow: BorrowFlag,
}

// SAFETY: the raw pointer is owned uniquely by this storage (invariant 1);
// concurrent access to the bytes goes through `borrow` (readers/writer flag),
// and everything else is `Send + Sync` in sync mode (`MaybeSendSync`).
#[cfg(feature = "sync")]
unsafe impl Send for Storage {}
// SAFETY: as above.
#[cfg(feature = "sync")]
unsafe impl Sync for Storage {}

impl Storage {
    /// `nbytes` zeroed bytes from the device's allocator.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the allocator refuses.
    pub fn zeroed(nbytes: usize, device: &Device) -> Result<Self> {
        Self::allocated(nbytes, device, None, true)
    }

    /// `nbytes` zeroed bytes from a chosen allocator.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the allocator refuses.
    pub fn zeroed_in(
        nbytes: usize,
        device: &Device,
        allocator: Shared<dyn Allocator>,
    ) -> Result<Self> {
        Self::allocated(nbytes, device, Some(allocator), true)
    }

    /// `nbytes` from `allocator` (`None`: the device's own): zeroed, or
    /// (for an output a kernel overwrites) initialised bytes of arbitrary
    /// value.
    fn allocated(
        nbytes: usize,
        device: &Device,
        allocator: Option<Shared<dyn Allocator>>,
        zeroed: bool,
    ) -> Result<Self> {
        Self::allocated_into(nbytes, device, allocator, zeroed, |s| s)
    }

    /// [`Storage::allocated`], the new storage handed to `wrap` where it is
    /// built: `Shared::new` places it with one move instead of three (out
    /// of the function, out of the `Result`, into the handle), each a
    /// memcpy call on Cortex-M (NOTE [Small-op path]).
    #[inline(always)]
    fn allocated_into<R>(
        nbytes: usize,
        device: &Device,
        allocator: Option<Shared<dyn Allocator>>,
        zeroed: bool,
        wrap: impl FnOnce(Self) -> R,
    ) -> Result<R> {
        let layout =
            MemLayout::from_size_align(nbytes, BUFFER_ALIGN).map_err(|_| Error::OutOfMemory {
                requested: nbytes,
                available: None,
            })?;
        let from = allocator.as_deref().unwrap_or(device.allocator_ref());
        let ptr = if zeroed {
            from.allocate_zeroed(layout)?
        } else {
            from.allocate_for_overwrite(layout)?
        };
        let owner = match allocator {
            Some(allocator) => Owner::Allocated { allocator, layout },
            None => Owner::DeviceAllocator { layout },
        };
        Ok(wrap(Self {
            ptr,
            nbytes,
            owner,
            device: device.clone(),
            version: Counter::new(0),
            borrow: BorrowFlag::new(),
        }))
    }

    /// `nbytes` initialised bytes of arbitrary value from the device's
    /// allocator ([`Allocator::allocate_for_overwrite`]), for an output
    /// that a kernel writes completely before anything reads it.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the allocator refuses.
    pub(crate) fn for_overwrite(nbytes: usize, device: &Device) -> Result<Self> {
        Self::allocated(nbytes, device, None, false)
    }

    /// [`Storage::for_overwrite`] in a shared handle, built in place (the
    /// small-op path's output).
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the allocator refuses.
    pub(crate) fn shared_for_overwrite(nbytes: usize, device: &Device) -> Result<Shared<Self>> {
        Self::allocated_into(nbytes, device, None, false, Shared::new)
    }

    /// Wraps bytes owned by `owner` (e.g. a memory map) without copying.
    /// The storage is read-only.
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `nbytes` bytes for as long as `owner`
    /// is alive and not written by anyone while this storage exists. Typed
    /// reads check alignment (a dtype the bytes are misaligned for is an
    /// error, never a misaligned read), so any address is sound; 16-byte
    /// alignment lets every dtype be read.
    pub unsafe fn from_external(
        ptr: NonNull<u8>,
        nbytes: usize,
        owner: Shared<dyn ExternalOwner>,
        device: &Device,
    ) -> Self {
        Self::external(ptr, nbytes, owner, device, false)
    }

    /// Wraps bytes owned by `owner` without copying, and lets kael write
    /// them (in-place ops, optimizer steps): memory another runtime shares
    /// with kael, such as a numpy array seen from Python. Writes bump this
    /// storage's version; writes the owner makes directly do not (as with
    /// PyTorch's `from_numpy`).
    ///
    /// # Safety
    /// As [`Storage::from_external`], and `ptr` must also be valid for
    /// writes of `nbytes` bytes; the owner's own writes must not race with
    /// kael's reads or writes.
    ///
    /// ```
    /// use core::ptr::NonNull;
    /// use kael_core::{Device, Storage, shared::Shared};
    /// use kael_core::storage::ExternalOwner;
    /// let owner: Shared<std::sync::Mutex<Vec<u8>>> = Shared::new(std::sync::Mutex::new(vec![0u8; 8]));
    /// let ptr = NonNull::new(owner.lock().unwrap().as_mut_ptr()).unwrap();
    /// let keep: Shared<dyn ExternalOwner> = owner.clone();
    /// // SAFETY: the Vec's heap buffer lives as long as `keep`, is 8 bytes long,
    /// // and nothing else touches it while the storage exists.
    /// let s = unsafe { Storage::from_external_writable(ptr, 8, keep, &Device::cpu()) };
    /// s.write("example")?.bytes_mut()[0] = 7;
    /// assert_eq!(owner.lock().unwrap()[0], 7);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub unsafe fn from_external_writable(
        ptr: NonNull<u8>,
        nbytes: usize,
        owner: Shared<dyn ExternalOwner>,
        device: &Device,
    ) -> Self {
        Self::external(ptr, nbytes, owner, device, true)
    }

    fn external(
        ptr: NonNull<u8>,
        nbytes: usize,
        owner: Shared<dyn ExternalOwner>,
        device: &Device,
        writable: bool,
    ) -> Self {
        Self {
            ptr,
            nbytes,
            owner: Owner::External {
                _owner: owner,
                writable,
            },
            device: device.clone(),
            version: Counter::new(0),
            borrow: BorrowFlag::new(),
        }
    }

    /// Wraps host bytes that `owner` exposes through `AsRef<[u8]>`, without
    /// copying. Fails unless the bytes are 16-byte aligned.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when misaligned.
    ///
    /// ```
    /// use kael_core::{Device, Storage};
    /// #[repr(align(16))]
    /// struct Aligned([u8; 8]);
    /// impl AsRef<[u8]> for Aligned { fn as_ref(&self) -> &[u8] { &self.0 } }
    /// let s = Storage::from_owner(Aligned([1; 8]), &Device::cpu())?;
    /// assert!(s.is_external());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn from_owner<O: AsRef<[u8]> + ExternalOwner + 'static>(
        owner: O,
        device: &Device,
    ) -> Result<Self> {
        let owner = Shared::new(owner);
        let bytes: &[u8] = (*owner).as_ref();
        if bytes.as_ptr() as usize % BUFFER_ALIGN != 0 {
            return Err(Error::InvalidArgument {
                op: "Storage::from_owner",
                reason: "external bytes must be 16-byte aligned; copy them into a tensor instead",
            });
        }
        let nbytes = bytes.len();
        let ptr = NonNull::from(bytes).cast::<u8>();
        let owner: Shared<dyn ExternalOwner> = owner;
        // SAFETY: `ptr`/`nbytes` come from `owner.as_ref()`, and `owner` is a
        // shared, never-mutated allocation kept alive by the storage; its
        // heap contents do not move while it lives.
        Ok(unsafe { Self::from_external(ptr, nbytes, owner, device) })
    }

    /// Size in bytes.
    pub fn nbytes(&self) -> usize {
        self.nbytes
    }

    /// The device the bytes live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The raw data pointer (host address, or device address for device memory).
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// Whether the bytes belong to an external owner.
    pub fn is_external(&self) -> bool {
        matches!(self.owner, Owner::External { .. })
    }

    /// Whether kael may not write the bytes: external storage not made by
    /// [`Storage::from_external_writable`] (invariant 4).
    pub fn is_read_only(&self) -> bool {
        matches!(
            self.owner,
            Owner::External {
                writable: false,
                ..
            }
        )
    }

    /// The allocator that owns the bytes (`None` for external storage).
    pub fn allocator(&self) -> Option<&dyn Allocator> {
        match &self.owner {
            Owner::DeviceAllocator { .. } => Some(self.device.allocator_ref()),
            Owner::Allocated { allocator, .. } => Some(&**allocator),
            Owner::External { .. } => None,
        }
    }

    /// The version counter's value (see NOTE [Version counter]).
    pub fn version(&self) -> usize {
        self.version.get()
    }

    /// Records one in-place modification.
    pub fn bump_version(&self) {
        self.version.bump();
    }

    /// Gives a storage that was just made as a copy of `from` (a move to
    /// another device) `from`'s version, so that the version seen through
    /// a moved tensor never goes back (NOTE [Version counter]).
    pub(crate) fn carry_version_from(&self, from: &Storage) {
        self.version.set(from.version());
    }

    /// Shared read access to host bytes.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for device memory, [`Error::BorrowConflict`]
    /// while a write guard is held (on this thread or another).
    pub fn read(&self, op: &'static str) -> Result<ReadGuard<'_>> {
        if !self.device.is_host_memory() {
            return Err(Error::Unsupported {
                op,
                device: self.device.kind(),
            });
        }
        if !self.borrow.try_read() {
            return Err(Error::BorrowConflict { op });
        }
        Ok(ReadGuard { storage: self })
    }

    /// Exclusive write access to host bytes.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for device memory, [`Error::InvalidArgument`]
    /// for external (read-only) storage, [`Error::BorrowConflict`] while
    /// a read or write guard is held (on this thread or another).
    pub fn write(&self, op: &'static str) -> Result<WriteGuard<'_>> {
        if !self.device.is_host_memory() {
            return Err(Error::Unsupported {
                op,
                device: self.device.kind(),
            });
        }
        if self.is_read_only() {
            return Err(Error::InvalidArgument {
                op,
                reason: "the tensor's storage is external and read-only (e.g. a memory map); call deep_clone() first",
            });
        }
        if !self.borrow.try_write() {
            return Err(Error::BorrowConflict { op });
        }
        Ok(WriteGuard { storage: self })
    }
}

/// A writer announced on a storage for as long as this lives (NOTE
/// [Writers get in]): a multi-tensor write (an optimizer's commit, a state
/// dict load) holds one per destination from its checks to its last write,
/// so readers on other threads hold back rather than slip in between.
pub(crate) struct WriteIntent {
    storage: Shared<Storage>,
    announced: bool,
}

impl WriteIntent {
    pub(crate) fn new(storage: Shared<Storage>) -> Self {
        let announced = storage.borrow.announce_writer();
        Self { storage, announced }
    }
}

impl Drop for WriteIntent {
    fn drop(&mut self) {
        if self.announced {
            self.storage.borrow.withdraw_writer();
        }
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        let (allocator, layout) = match &self.owner {
            Owner::DeviceAllocator { layout } => (self.device.allocator_ref(), layout),
            Owner::Allocated { allocator, layout } => (&**allocator, layout),
            Owner::External { .. } => return,
        };
        // SAFETY: `ptr` came from `allocator.allocate_zeroed(layout)` or
        // `allocate_for_overwrite(layout)` (invariant 2): the device's own
        // allocator is the one it was made with and holds for life (NOTE
        // [Device-held allocator]), and `self.device` is the device the
        // bytes were drawn on. `ptr` is never used after the storage drops.
        unsafe { allocator.deallocate(self.ptr, *layout) };
    }
}

impl core::fmt::Debug for Storage {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Storage")
            .field("nbytes", &self.nbytes)
            .field("device", &self.device.kind())
            .field("version", &self.version())
            .field("external", &self.is_external())
            .finish()
    }
}

/// Shared access to a storage's host bytes; released on drop.
pub struct ReadGuard<'a> {
    storage: &'a Storage,
}

impl ReadGuard<'_> {
    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: invariant 2 (valid, initialised host bytes for `nbytes`);
        // the read flag excludes writers while this guard lives.
        unsafe { core::slice::from_raw_parts(self.storage.ptr.as_ptr(), self.storage.nbytes) }
    }
}

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        self.storage.borrow.release_read();
    }
}

/// Exclusive access to a storage's host bytes; released on drop.
pub struct WriteGuard<'a> {
    storage: &'a Storage,
}

impl WriteGuard<'_> {
    /// The bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: invariant 2 (valid, initialised, owned host bytes); the
        // write flag excludes every other reader and writer while this guard
        // lives, and `&mut self` prevents two slices from one guard.
        unsafe { core::slice::from_raw_parts_mut(self.storage.ptr.as_ptr(), self.storage.nbytes) }
    }
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        self.storage.borrow.release_write();
    }
}

/// Views `bytes` as elements of `T`, ignoring a trailing partial element.
pub(crate) fn typed<T: bytemuck::Pod>(bytes: &[u8]) -> Result<&[T]> {
    let n = bytes.len() / core::mem::size_of::<T>();
    bytemuck::try_cast_slice(&bytes[..n * core::mem::size_of::<T>()]).map_err(|_| {
        Error::InvalidArgument {
            op: "storage",
            reason: "storage bytes are misaligned for this dtype; deep_clone() the tensor",
        }
    })
}

/// Mutable version of [`typed`].
pub(crate) fn typed_mut<T: bytemuck::Pod>(bytes: &mut [u8]) -> Result<&mut [T]> {
    let n = bytes.len() / core::mem::size_of::<T>();
    bytemuck::try_cast_slice_mut(&mut bytes[..n * core::mem::size_of::<T>()]).map_err(|_| {
        Error::InvalidArgument {
            op: "storage",
            reason: "storage bytes are misaligned for this dtype; deep_clone() the tensor",
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_blocks_writer_and_vice_versa() {
        let s = Storage::zeroed(8, &Device::cpu()).unwrap();
        let r = s.read("t").unwrap();
        assert!(matches!(s.write("t"), Err(Error::BorrowConflict { .. })));
        drop(r);
        let w = s.write("t").unwrap();
        assert!(matches!(s.read("t"), Err(Error::BorrowConflict { .. })));
        drop(w);
        assert!(s.read("t").is_ok());
    }

    #[test]
    fn storage_returns_its_bytes_to_the_allocator() {
        let dev = Device::cpu();
        let before = dev.allocator().stats().in_use;
        let s = Storage::zeroed(64, &dev).unwrap();
        assert_eq!(dev.allocator().stats().in_use, before + 64);
        drop(s);
        assert_eq!(dev.allocator().stats().in_use, before);
    }

    #[test]
    fn storage_from_a_chosen_allocator_returns_its_bytes_there_not_to_the_devices() {
        use crate::allocator::GlobalAllocator;
        let dev = Device::cpu();
        let chosen: Shared<dyn Allocator> = Shared::new(GlobalAllocator::new());
        let device_before = dev.allocator().stats().in_use;
        let s = Storage::zeroed_in(48, &dev, chosen.clone()).unwrap();
        assert_eq!(chosen.stats().in_use, 48);
        assert_eq!(dev.allocator().stats().in_use, device_before);
        assert!(core::ptr::addr_eq(
            s.allocator().unwrap(),
            &*chosen as *const dyn Allocator
        ));
        drop(s);
        assert_eq!(chosen.stats().in_use, 0);
        assert_eq!(dev.allocator().stats().in_use, device_before);
    }

    #[test]
    fn external_storage_is_read_only() {
        #[repr(align(16))]
        struct A([u8; 4]);
        impl AsRef<[u8]> for A {
            fn as_ref(&self) -> &[u8] {
                &self.0
            }
        }
        let s = Storage::from_owner(A([1, 2, 3, 4]), &Device::cpu()).unwrap();
        assert_eq!(s.read("t").unwrap().bytes(), &[1, 2, 3, 4]);
        let e = s.write("t").err().unwrap();
        assert!(alloc::string::ToString::to_string(&e).contains("deep_clone"));
    }
}
