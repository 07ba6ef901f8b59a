//! The DLPack ABI in plain Rust (no Python): exporting a tensor as a
//! managed DLPack tensor, reading one back, and freeing either. The Python
//! side (`interop.rs`) only wraps these in capsules; keeping the pointer
//! work here lets Miri check it (its tests run in scripts/reliability.sh),
//! which it cannot do through CPython.

use kael_core::shared::Shared;
use kael_core::storage::ExternalOwner;
use kael_core::{DType, Device, Layout, MAX_RANK, Storage, Tensor};
use std::ffi::c_void;
use std::ptr::NonNull;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

#[repr(C)]
pub struct DLManagedTensor {
    pub dl_tensor: DLTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
pub struct DLPackVersion {
    pub major: u32,
    pub minor: u32,
}

#[repr(C)]
pub struct DLManagedTensorVersioned {
    pub version: DLPackVersion,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    pub flags: u64,
    pub dl_tensor: DLTensor,
}

pub const KDL_CPU: i32 = 1;
pub const KDL_CUDA_HOST: i32 = 3;
pub const FLAG_READ_ONLY: u64 = 1;
pub const FLAG_IS_COPIED: u64 = 2;

fn dl_dtype(d: DType) -> DLDataType {
    let (code, bits) = match d {
        DType::F32 => (2, 32),
        DType::F64 => (2, 64),
        DType::F16 => (2, 16),
        DType::BF16 => (4, 16),
        DType::I64 => (0, 64),
        DType::I32 => (0, 32),
        DType::I16 => (0, 16),
        DType::I8 => (0, 8),
        DType::U8 => (1, 8),
        DType::Bool => (6, 8),
    };
    DLDataType {
        code,
        bits,
        lanes: 1,
    }
}

fn kael_dtype(d: DLDataType) -> Option<DType> {
    if d.lanes != 1 {
        return None;
    }
    Some(match (d.code, d.bits) {
        (2, 32) => DType::F32,
        (2, 64) => DType::F64,
        (2, 16) => DType::F16,
        (4, 16) => DType::BF16,
        (0, 64) => DType::I64,
        (0, 32) => DType::I32,
        (0, 16) => DType::I16,
        (0, 8) => DType::I8,
        (1, 8) => DType::U8,
        (6, 8) | (1, 1) => DType::Bool,
        _ => return None,
    })
}

/// The bytes a strided view reaches from its first element:
/// `(sum((n - 1) * stride) + 1) * itemsize`, or 0 when it has no element.
/// `None` on overflow.
pub fn span_bytes(shape: &[usize], strides: &[usize], itemsize: usize) -> Option<usize> {
    if shape.contains(&0) {
        return Some(0);
    }
    let mut last = 0usize;
    for (&n, &s) in shape.iter().zip(strides) {
        last = last.checked_add((n - 1).checked_mul(s)?)?;
    }
    last.checked_add(1)?.checked_mul(itemsize)
}

/// A non-null pointer for `p` (an aligned dangling one for an empty span).
pub fn nonnull(p: *mut u8, itemsize: usize, nbytes: usize) -> Option<NonNull<u8>> {
    match NonNull::new(p) {
        Some(p) => Some(p),
        None if nbytes == 0 => NonNull::new(std::ptr::without_provenance_mut(itemsize.max(1))),
        None => None,
    }
}

/// What an exported tensor owns: a handle to the tensor and the shape and
/// strides arrays its DLTensor points into.
struct ExportCtx {
    _tensor: Tensor,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

unsafe extern "C" fn delete_unversioned(m: *mut DLManagedTensor) {
    if m.is_null() {
        return;
    }
    // SAFETY: `m` and its context were leaked from boxes by `export`, and
    // DLPack calls the deleter once.
    unsafe {
        drop(Box::from_raw((*m).manager_ctx as *mut ExportCtx));
        drop(Box::from_raw(m));
    }
}

unsafe extern "C" fn delete_versioned(m: *mut DLManagedTensorVersioned) {
    if m.is_null() {
        return;
    }
    // SAFETY: as in `delete_unversioned`.
    unsafe {
        drop(Box::from_raw((*m).manager_ctx as *mut ExportCtx));
        drop(Box::from_raw(m));
    }
}

/// A managed DLPack tensor over `t`'s memory (which must be host memory),
/// holding a handle to `t`: a `DLManagedTensorVersioned` (1.0, with the
/// read-only and copied flags) or an unversioned `DLManagedTensor`. The
/// caller owns it: hand it to a consumer, or free it with [`delete`].
pub fn export(t: &Tensor, versioned: bool, copied: bool) -> *mut c_void {
    let item = t.element_size();
    let storage = t.storage();
    let readonly = storage.is_read_only();
    let data = (storage.as_ptr() as *mut u8).wrapping_add(t.offset() * item) as *mut c_void;
    let mut ctx = Box::new(ExportCtx {
        shape: t.shape().iter().map(|&n| n as i64).collect(),
        strides: t.strides().as_slice().iter().map(|&s| s as i64).collect(),
        _tensor: t.clone(),
    });
    let dl = DLTensor {
        data,
        device: DLDevice {
            device_type: KDL_CPU,
            device_id: 0,
        },
        ndim: t.rank() as i32,
        dtype: dl_dtype(t.dtype()),
        shape: ctx.shape.as_mut_ptr(),
        strides: ctx.strides.as_mut_ptr(),
        byte_offset: 0,
    };
    let ctx = Box::into_raw(ctx) as *mut c_void;
    if versioned {
        let flags =
            if readonly { FLAG_READ_ONLY } else { 0 } | if copied { FLAG_IS_COPIED } else { 0 };
        Box::into_raw(Box::new(DLManagedTensorVersioned {
            version: DLPackVersion { major: 1, minor: 0 },
            manager_ctx: ctx,
            deleter: Some(delete_versioned),
            flags,
            dl_tensor: dl,
        })) as *mut c_void
    } else {
        Box::into_raw(Box::new(DLManagedTensor {
            dl_tensor: dl,
            manager_ctx: ctx,
            deleter: Some(delete_unversioned),
        })) as *mut c_void
    }
}

/// Calls a managed tensor's deleter (what the producer gave us to free it).
///
/// # Safety
/// `managed` must be a live managed tensor of the kind `versioned` says,
/// not freed before and not used after.
pub unsafe fn delete(managed: *mut c_void, versioned: bool) {
    if managed.is_null() {
        return;
    }
    // SAFETY: the caller's contract.
    unsafe {
        if versioned {
            let m = managed as *mut DLManagedTensorVersioned;
            if let Some(d) = (*m).deleter {
                d(m);
            }
        } else {
            let m = managed as *mut DLManagedTensor;
            if let Some(d) = (*m).deleter {
                d(m);
            }
        }
    }
}

/// Keeps a consumed DLPack tensor alive; calls its deleter when the kael
/// storage over it drops.
pub struct HeldDlpack {
    managed: *mut c_void,
    versioned: bool,
}

// SAFETY: DLPack lets the deleter be called from any thread (producers that
// need their interpreter take it themselves, as numpy does), and the
// pointer is only used in `drop`.
unsafe impl Send for HeldDlpack {}
// SAFETY: as above; no `&self` method reads the pointer.
unsafe impl Sync for HeldDlpack {}

impl Drop for HeldDlpack {
    fn drop(&mut self) {
        // SAFETY: `managed` is the consumed tensor, ours to free exactly once
        // (HeldDlpack is made only by `import`, which takes ownership).
        unsafe { delete(self.managed, self.versioned) }
    }
}

/// Why a DLPack tensor cannot be imported (the Python side words it).
#[derive(Debug, PartialEq)]
pub enum ImportError {
    /// A DLPack major version other than 1.
    Version(u32, u32),
    /// Not host memory: the DLPack device type.
    Device(i32),
    /// A dtype kael does not have: (code, bits, lanes).
    DType(u8, u8, u16),
    /// More dimensions than kael's maximum.
    Rank(usize),
    /// A negative size or stride.
    Negative,
    /// The extent or the offset overflows.
    Overflow,
    /// A null data pointer with elements.
    Null,
    /// The data pointer is not a multiple of the element size.
    Misaligned(usize),
    /// kael refused the layout or storage.
    Kael(kael_core::Error),
}

/// A tensor over a managed DLPack tensor's memory, taking ownership of it
/// on success (its deleter runs when the storage drops); on an error
/// nothing is taken and the caller still owns `managed`.
///
/// # Safety
/// `managed` must be a live managed tensor of the kind `versioned` says,
/// whose memory stays valid (and writable, unless flagged read-only) until
/// its deleter runs.
pub unsafe fn import(
    managed: *mut c_void,
    versioned: bool,
    device: &Device,
) -> Result<Tensor, ImportError> {
    // SAFETY: the caller's contract: `managed` points at the struct
    // `versioned` names, alive until its deleter runs.
    let (dl, flags) = unsafe {
        if versioned {
            let m = &*(managed as *const DLManagedTensorVersioned);
            if m.version.major != 1 {
                return Err(ImportError::Version(m.version.major, m.version.minor));
            }
            (&m.dl_tensor, m.flags)
        } else {
            (&(*(managed as *const DLManagedTensor)).dl_tensor, 0)
        }
    };
    if dl.device.device_type != KDL_CPU && dl.device.device_type != KDL_CUDA_HOST {
        return Err(ImportError::Device(dl.device.device_type));
    }
    let dtype = kael_dtype(dl.dtype).ok_or(ImportError::DType(
        dl.dtype.code,
        dl.dtype.bits,
        dl.dtype.lanes,
    ))?;
    let ndim = usize::try_from(dl.ndim).map_err(|_| ImportError::Negative)?;
    if ndim > MAX_RANK {
        return Err(ImportError::Rank(ndim));
    }
    let mut shape = Vec::with_capacity(ndim);
    for i in 0..ndim {
        // SAFETY: DLPack's `shape` has `ndim` entries.
        let n = unsafe { *dl.shape.add(i) };
        shape.push(usize::try_from(n).map_err(|_| ImportError::Negative)?);
    }
    let strides: Vec<usize> = if dl.strides.is_null() {
        let mut s = vec![1usize; ndim];
        for i in (0..ndim.saturating_sub(1)).rev() {
            s[i] = s[i + 1].saturating_mul(shape[i + 1].max(1));
        }
        s
    } else {
        let mut s = Vec::with_capacity(ndim);
        for i in 0..ndim {
            // SAFETY: a non-null `strides` has `ndim` entries.
            let v = unsafe { *dl.strides.add(i) };
            s.push(usize::try_from(v).map_err(|_| ImportError::Negative)?);
        }
        s
    };
    let item = dtype.size_in_bytes();
    let nbytes = span_bytes(&shape, &strides, item).ok_or(ImportError::Overflow)?;
    let offset = usize::try_from(dl.byte_offset).map_err(|_| ImportError::Overflow)?;
    let data = (dl.data as *mut u8).wrapping_add(offset);
    let ptr = nonnull(data, item, nbytes).ok_or(ImportError::Null)?;
    if ptr.as_ptr() as usize % item != 0 {
        return Err(ImportError::Misaligned(item));
    }
    let layout = Layout::new(&shape, &strides, 0).map_err(ImportError::Kael)?;
    let writable = flags & FLAG_READ_ONLY == 0;
    let owner: Shared<dyn ExternalOwner> = Shared::new(HeldDlpack { managed, versioned });
    // SAFETY: the producer keeps `nbytes` bytes from `ptr` valid (writable
    // when not flagged read-only) until its deleter runs, which `owner`
    // (held by the storage) calls on drop.
    let storage = unsafe {
        if writable {
            Storage::from_external_writable(ptr, nbytes, owner, device)
        } else {
            Storage::from_external(ptr, nbytes, owner, device)
        }
    };
    // From here the storage owns `managed`: an error drops it, which frees it.
    Tensor::from_storage(Shared::new(storage), layout, dtype).map_err(ImportError::Kael)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arange(n: usize) -> Tensor {
        let v: Vec<f32> = (0..n).map(|i| i as f32).collect();
        Tensor::from_slice(&v, &[n], &Device::cpu()).unwrap()
    }

    #[test]
    fn an_exported_tensor_holds_a_handle_until_deleted() {
        for versioned in [false, true] {
            let t = arange(6);
            let before = t.handle_count();
            let m = export(&t, versioned, false);
            assert_eq!(t.handle_count(), before + 1);
            // SAFETY: `m` was just exported and is freed once.
            unsafe { delete(m, versioned) };
            assert_eq!(t.handle_count(), before);
        }
    }

    #[test]
    fn an_import_shares_memory_and_frees_the_export_on_drop() {
        for versioned in [false, true] {
            let t = arange(12).reshape(&[3, 4]).unwrap().t().unwrap();
            let before = t.handle_count();
            let m = export(&t, versioned, false);
            // SAFETY: `m` is a live export of host memory kept by its context.
            let back = unsafe { import(m, versioned, &Device::cpu()) }.unwrap();
            assert_eq!(
                (back.shape(), &back.strides()[..]),
                (t.shape(), &t.strides()[..])
            );
            assert_eq!(back.to_vec::<f32>().unwrap(), t.to_vec::<f32>().unwrap());
            back.narrow(0, 1, 1).unwrap().fill_(-1.0).unwrap();
            assert_eq!(
                t.select(0, 1).unwrap().to_vec::<f32>().unwrap(),
                vec![-1.0; 3]
            );
            drop(back);
            assert_eq!(t.handle_count(), before);
        }
    }

    #[test]
    fn a_read_only_flag_makes_a_read_only_storage() {
        let t = arange(3);
        let m = export(&t, true, false) as *mut DLManagedTensorVersioned;
        // SAFETY: `m` is the versioned export just made.
        unsafe { (*m).flags = FLAG_READ_ONLY };
        // SAFETY: as above.
        let back = unsafe { import(m as *mut c_void, true, &Device::cpu()) }.unwrap();
        assert!(back.storage().is_read_only());
        assert!(back.fill_(1.0).is_err());
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![0.0, 1.0, 2.0]);
    }

    #[test]
    fn bad_tensors_are_refused_and_stay_owned_by_the_caller() {
        type Edit = fn(&mut DLManagedTensorVersioned);
        let cases: [(Edit, ImportError); 4] = [
            (|m| m.version.major = 2, ImportError::Version(2, 0)),
            (
                |m| m.dl_tensor.device.device_type = 2,
                ImportError::Device(2),
            ),
            (
                |m| m.dl_tensor.dtype.lanes = 4,
                ImportError::DType(2, 32, 4),
            ),
            (
                |m| m.dl_tensor.data = (m.dl_tensor.data as *mut u8).wrapping_add(1) as *mut c_void,
                ImportError::Misaligned(4),
            ),
        ];
        for (edit, want) in cases {
            let t = arange(4);
            let before = t.handle_count();
            let m = export(&t, true, false) as *mut DLManagedTensorVersioned;
            // SAFETY: `m` is the versioned export just made.
            unsafe { edit(&mut *m) };
            // SAFETY: as above; on error it stays ours.
            let e = unsafe { import(m as *mut c_void, true, &Device::cpu()) }.unwrap_err();
            assert_eq!(e, want);
            // SAFETY: the refused import left `m` with us; freed once.
            unsafe { delete(m as *mut c_void, true) };
            assert_eq!(t.handle_count(), before);
        }
    }

    #[test]
    fn span_covers_the_last_element_and_checks_overflow() {
        assert_eq!(span_bytes(&[3, 2], &[1, 3], 4), Some(24));
        assert_eq!(span_bytes(&[0, 5], &[5, 1], 8), Some(0));
        assert_eq!(span_bytes(&[usize::MAX, 2], &[2, 1], 4), None);
    }
}
