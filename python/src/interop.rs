//! Zero-copy interop: the buffer protocol (`memoryview(t)`,
//! `numpy.asarray(t)`), `kael.from_numpy`, and DLPack both ways.
//!
//! NOTE [Zero-copy memory]
//! Exporting: a buffer or a DLPack capsule points at the tensor's own bytes
//! (first element, shape, strides in bytes or elements) and holds a handle
//! to the tensor, so the storage lives as long as the consumer needs it.
//! Importing: the producer's memory becomes an external kael storage
//! (`Storage::from_external_writable`, or read-only when the producer says
//! so) whose owner keeps the Python buffer or the DLPack capsule's tensor
//! alive and releases it when the storage drops. Either way a write on one
//! side is seen on the other. Writes made through numpy do not bump kael's
//! version counter (as with PyTorch's `from_numpy`); writes through kael
//! do. Only host memory is exported or imported; a misaligned pointer
//! (not a multiple of the element size) or a negative stride is refused, as
//! PyTorch refuses negative strides.

use crate::dtype_device::default_device;
use crate::errors::{IntoPy, value_error};
use crate::tensor::{PyTensor, wrap};
use kael_core::shared::Shared;
use kael_core::storage::ExternalOwner;
use kael_core::{DType, DeviceKind, Layout, MAX_RANK, Storage, Tensor};
use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use std::ffi::{CStr, c_int, c_void};
use std::ptr::{self, NonNull};

// ------------------------------------------------------------ common

/// The struct-module format character of a dtype (`None` for bfloat16,
/// which has none).
fn format_of(d: DType) -> Option<&'static CStr> {
    Some(match d {
        DType::F32 => c"f",
        DType::F64 => c"d",
        DType::F16 => c"e",
        DType::I64 => c"q",
        DType::I32 => c"i",
        DType::I16 => c"h",
        DType::I8 => c"b",
        DType::U8 => c"B",
        DType::Bool => c"?",
        DType::BF16 => return None,
    })
}

/// The dtype of a struct-module format string with its item size.
fn dtype_of_format(format: &str, itemsize: usize) -> Option<DType> {
    let f = format.trim_start_matches(['@', '=', '<']);
    if f.starts_with(['>', '!']) {
        return None;
    }
    Some(match (f, itemsize) {
        ("f", 4) => DType::F32,
        ("d", 8) => DType::F64,
        ("e", 2) => DType::F16,
        ("q" | "l" | "i" | "h" | "b", 8) => DType::I64,
        ("i" | "l", 4) => DType::I32,
        ("h", 2) => DType::I16,
        ("b", 1) => DType::I8,
        ("B", 1) => DType::U8,
        ("?", 1) => DType::Bool,
        _ => return None,
    })
}

/// The bytes a strided view reaches from its first element:
/// `(sum((n - 1) * stride) + 1) * itemsize`, or 0 when it has no element.
/// `None` on overflow.
fn span_bytes(shape: &[usize], strides: &[usize], itemsize: usize) -> Option<usize> {
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
fn nonnull(p: *mut u8, itemsize: usize, nbytes: usize) -> Option<NonNull<u8>> {
    match NonNull::new(p) {
        Some(p) => Some(p),
        None if nbytes == 0 => NonNull::new(itemsize.max(1) as *mut u8),
        None => None,
    }
}

/// A tensor over external host bytes `[ptr, ptr + nbytes)`.
fn tensor_over(
    op: &str,
    ptr: NonNull<u8>,
    nbytes: usize,
    owner: Shared<dyn ExternalOwner>,
    writable: bool,
    shape: &[usize],
    strides: &[usize],
    dtype: DType,
) -> PyResult<Tensor> {
    if ptr.as_ptr() as usize % dtype.size_in_bytes() != 0 {
        return Err(value_error(format!(
            "{op}: the data pointer is not aligned to the element size ({} bytes); copy it first (numpy.ascontiguousarray(a).copy() or kael.tensor(a))",
            dtype.size_in_bytes()
        )));
    }
    let device = default_device()?;
    // SAFETY: the caller passes memory the producer keeps valid (for reads,
    // and for writes when `writable`) for `nbytes` bytes while `owner` lives;
    // the storage holds `owner`. Races with the producer's own writes are
    // the user's, as with any shared buffer (NOTE [Zero-copy memory]).
    let storage = unsafe {
        if writable {
            Storage::from_external_writable(ptr, nbytes, owner, &device)
        } else {
            Storage::from_external(ptr, nbytes, owner, &device)
        }
    };
    let layout = Layout::new(shape, strides, 0).py()?;
    Tensor::from_storage(Shared::new(storage), layout, dtype).py()
}

// ---------------------------------------------------- buffer protocol

/// Shape and byte strides of one exported buffer, freed on release.
struct BufferInfo {
    shape: Vec<ffi::Py_ssize_t>,
    strides: Vec<ffi::Py_ssize_t>,
}

#[pymethods]
impl PyTensor {
    /// The buffer protocol: `memoryview(t)` and `numpy.asarray(t)` see the
    /// tensor's memory (strided; no copy).
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("__getbuffer__: the view is null"));
        }
        let t = slf.get().t.clone();
        let storage = t.storage();
        if !t.device().is_host_memory() {
            return Err(PyBufferError::new_err(
                "buffer: the tensor is not in host memory; call .to(kael.threaded) first",
            ));
        }
        let Some(format) = format_of(t.dtype()) else {
            return Err(PyBufferError::new_err(
                "buffer: bfloat16 has no buffer-protocol format; call .float() first",
            ));
        };
        let readonly = storage.is_read_only();
        if readonly && flags & ffi::PyBUF_WRITABLE != 0 {
            return Err(PyBufferError::new_err(
                "buffer: the tensor's storage is read-only (e.g. memory-mapped); clone() it for a writable buffer",
            ));
        }
        let item = t.element_size();
        let c_contig = t.is_contiguous();
        if flags & ffi::PyBUF_STRIDES != ffi::PyBUF_STRIDES && !c_contig {
            return Err(PyBufferError::new_err(
                "buffer: the tensor is not contiguous and the consumer did not ask for strides; call .contiguous() first",
            ));
        }
        if flags & ffi::PyBUF_C_CONTIGUOUS == ffi::PyBUF_C_CONTIGUOUS && !c_contig {
            return Err(PyBufferError::new_err(
                "buffer: a C-contiguous buffer was asked for; call .contiguous() first",
            ));
        }
        if flags & ffi::PyBUF_F_CONTIGUOUS == ffi::PyBUF_F_CONTIGUOUS && t.rank() > 1 {
            return Err(PyBufferError::new_err(
                "buffer: a Fortran-contiguous buffer was asked for; kael tensors are row-major, call .contiguous() on the transpose",
            ));
        }
        let shape: Vec<ffi::Py_ssize_t> = t.shape().iter().map(|&n| n as ffi::Py_ssize_t).collect();
        let strides: Vec<ffi::Py_ssize_t> = t
            .strides()
            .as_slice()
            .iter()
            .map(|&s| (s * item) as ffi::Py_ssize_t)
            .collect();
        let mut info = Box::new(BufferInfo { shape, strides });
        let base = storage.as_ptr() as *mut u8;
        let buf = base.wrapping_add(t.offset() * item);
        // SAFETY: `view` is a valid, writable Py_buffer the interpreter passes
        // in; every pointer stored in it stays valid until __releasebuffer__
        // (the shape/strides box is freed there; `obj` holds the tensor, so
        // its storage, and so `buf`, lives until the view is released).
        unsafe {
            (*view).buf = buf as *mut c_void;
            (*view).obj = slf.into_any().into_ptr();
            (*view).len = (t.numel() * item) as ffi::Py_ssize_t;
            (*view).itemsize = item as ffi::Py_ssize_t;
            (*view).readonly = c_int::from(readonly);
            (*view).ndim = t.rank() as c_int;
            (*view).format = if flags & ffi::PyBUF_FORMAT != 0 {
                format.as_ptr() as *mut _
            } else {
                ptr::null_mut()
            };
            (*view).shape = if flags & ffi::PyBUF_ND == ffi::PyBUF_ND {
                info.shape.as_mut_ptr()
            } else {
                ptr::null_mut()
            };
            (*view).strides = if flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES {
                info.strides.as_mut_ptr()
            } else {
                ptr::null_mut()
            };
            (*view).suboffsets = ptr::null_mut();
            (*view).internal = Box::into_raw(info) as *mut c_void;
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, view: *mut ffi::Py_buffer) {
        // SAFETY: `internal` was set by __getbuffer__ to a leaked
        // Box<BufferInfo>, and the interpreter releases each view once.
        unsafe {
            let p = (*view).internal as *mut BufferInfo;
            if !p.is_null() {
                drop(Box::from_raw(p));
                (*view).internal = ptr::null_mut();
            }
        }
    }
}

/// A Python buffer held for an imported storage; released (with the
/// interpreter attached) when the storage drops.
struct HeldBuffer {
    view: Box<ffi::Py_buffer>,
}

// SAFETY: the Py_buffer is only touched in `drop`, under the interpreter
// (Python::try_attach), never concurrently.
unsafe impl Send for HeldBuffer {}
// SAFETY: as above; no `&self` method reads the raw pointers.
unsafe impl Sync for HeldBuffer {}

impl Drop for HeldBuffer {
    fn drop(&mut self) {
        let view: *mut ffi::Py_buffer = &mut *self.view;
        // At interpreter shutdown the buffer is leaked rather than released
        // without the interpreter.
        let _ = Python::try_attach(|_| {
            // SAFETY: `view` was filled by a successful PyObject_GetBuffer
            // and is released exactly once, here.
            unsafe { ffi::PyBuffer_Release(view) }
        });
    }
}

/// A tensor sharing the memory of any object with the buffer protocol
/// (numpy arrays, `array.array`, `memoryview`, …): writable when the
/// exporter allows it.
pub fn from_buffer(op: &str, obj: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let mut view = Box::new(ffi::Py_buffer::new());
    let mut writable = true;
    // SAFETY: `obj` is a live object and `view` a fresh Py_buffer; on
    // failure the interpreter leaves `view` unfilled and sets an error.
    let rc = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, ffi::PyBUF_RECORDS) };
    if rc != 0 {
        let _ = PyErr::take(obj.py());
        writable = false;
        // SAFETY: as above.
        let rc =
            unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, ffi::PyBUF_RECORDS_RO) };
        if rc != 0 {
            return Err(PyErr::take(obj.py()).unwrap_or_else(|| {
                PyTypeError::new_err(format!("{op}: the object has no buffer"))
            }));
        }
    }
    // From here on, dropping `held` releases the buffer.
    let held = HeldBuffer { view };
    let v: &ffi::Py_buffer = &held.view;
    let itemsize = usize::try_from(v.itemsize).unwrap_or(0);
    let format = if v.format.is_null() {
        "B".to_string()
    } else {
        // SAFETY: a non-null format is a NUL-terminated string owned by the
        // exporter for the view's life.
        unsafe { CStr::from_ptr(v.format) }
            .to_string_lossy()
            .into_owned()
    };
    let Some(dtype) = dtype_of_format(&format, itemsize) else {
        return Err(value_error(format!(
            "{op}: an array of format {format:?} ({itemsize}-byte items) has no kael dtype; convert it to float32/float64/float16/int64/int32/int16/int8/uint8/bool first"
        )));
    };
    let ndim = usize::try_from(v.ndim).unwrap_or(usize::MAX);
    if ndim > MAX_RANK {
        return Err(value_error(format!(
            "{op}: the array has {ndim} dimensions, more than kael's maximum {MAX_RANK}; reshape it first"
        )));
    }
    let mut shape = Vec::with_capacity(ndim);
    let mut strides = Vec::with_capacity(ndim);
    for i in 0..ndim {
        // SAFETY: with PyBUF_STRIDES the exporter fills `shape` and
        // `strides` with `ndim` entries each (0-d: none are read).
        let (n, s) = unsafe { (*v.shape.add(i), *v.strides.add(i)) };
        let n = usize::try_from(n).map_err(|_| value_error(format!("{op}: a negative size")))?;
        if s < 0 {
            return Err(value_error(format!(
                "{op}: the array has a negative stride; kael views need non-negative strides, so copy it first (numpy.ascontiguousarray(a))"
            )));
        }
        let s = s as usize;
        if itemsize == 0 || s % itemsize != 0 {
            return Err(value_error(format!(
                "{op}: a stride of {s} bytes is not a multiple of the element size {itemsize}; copy the array first"
            )));
        }
        shape.push(n);
        strides.push(s / itemsize);
    }
    let nbytes = span_bytes(&shape, &strides, itemsize)
        .ok_or_else(|| value_error(format!("{op}: the array's extent overflows")))?;
    let ptr = nonnull(v.buf as *mut u8, itemsize, nbytes)
        .ok_or_else(|| value_error(format!("{op}: the buffer's pointer is null")))?;
    let writable = writable && v.readonly == 0;
    let owner: Shared<dyn ExternalOwner> = Shared::new(held);
    tensor_over(op, ptr, nbytes, owner, writable, &shape, &strides, dtype)
}

/// `kael.from_numpy(a)`: a tensor sharing `a`'s memory (no copy), keeping
/// `a` alive; writes on either side are seen on the other.
#[pyfunction]
pub fn from_numpy(array: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
    from_buffer("from_numpy", array).map(wrap)
}

// ------------------------------------------------------------- DLPack

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
struct DLPackVersion {
    major: u32,
    minor: u32,
}

#[repr(C)]
struct DLManagedTensorVersioned {
    version: DLPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

const KDL_CPU: i32 = 1;
const KDL_CUDA_HOST: i32 = 3;
const FLAG_READ_ONLY: u64 = 1;
const FLAG_IS_COPIED: u64 = 2;
const DLTENSOR: &CStr = c"dltensor";
const USED_DLTENSOR: &CStr = c"used_dltensor";
const DLTENSOR_VERSIONED: &CStr = c"dltensor_versioned";
const USED_DLTENSOR_VERSIONED: &CStr = c"used_dltensor_versioned";

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

/// What an exported capsule owns: a handle to the tensor and the shape
/// and strides arrays the DLTensor points into.
struct ExportCtx {
    _tensor: Tensor,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

unsafe extern "C" fn delete_unversioned(m: *mut DLManagedTensor) {
    if m.is_null() {
        return;
    }
    // SAFETY: `m` and its context were leaked from boxes by `__dlpack__`,
    // and DLPack calls the deleter once.
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

/// A capsule nobody consumed frees its tensor (a consumer renames it to
/// `used_…` and calls the deleter itself).
unsafe extern "C" fn capsule_destructor(capsule: *mut ffi::PyObject) {
    // SAFETY: the interpreter passes the capsule being destroyed; IsValid
    // checks the name (and sets no error on mismatch), and the pointer
    // under a valid name is the one `__dlpack__` stored.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, DLTENSOR.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(capsule, DLTENSOR.as_ptr()) as *mut DLManagedTensor;
            if !m.is_null() {
                if let Some(d) = (*m).deleter {
                    d(m);
                }
            }
        } else if ffi::PyCapsule_IsValid(capsule, DLTENSOR_VERSIONED.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(capsule, DLTENSOR_VERSIONED.as_ptr())
                as *mut DLManagedTensorVersioned;
            if !m.is_null() {
                if let Some(d) = (*m).deleter {
                    d(m);
                }
            }
        }
    }
}

fn dl_tensor(t: &Tensor, ctx: &mut ExportCtx) -> DLTensor {
    let item = t.element_size();
    let base = t.storage().as_ptr() as *mut u8;
    DLTensor {
        data: base.wrapping_add(t.offset() * item) as *mut c_void,
        device: DLDevice {
            device_type: KDL_CPU,
            device_id: 0,
        },
        ndim: t.rank() as i32,
        dtype: dl_dtype(t.dtype()),
        shape: ctx.shape.as_mut_ptr(),
        strides: ctx.strides.as_mut_ptr(),
        byte_offset: 0,
    }
}

#[pymethods]
impl PyTensor {
    /// DLPack export (the array API's `__dlpack__`): a capsule over this
    /// tensor's memory that keeps the tensor alive. DLPack 1.x
    /// (`max_version >= (1, 0)`) marks read-only storage; `copy=True`
    /// exports a copy.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        slf: &Bound<'py, Self>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let _ = stream; // host memory: there is no stream to order against
        let mut t = slf.get().t.clone();
        if !t.device().is_host_memory() {
            return Err(PyBufferError::new_err(
                "__dlpack__: only host-memory tensors are exported; call .to(kael.threaded) first",
            ));
        }
        if let Some((dt, _)) = dl_device {
            if dt != KDL_CPU && dt != KDL_CUDA_HOST {
                return Err(PyBufferError::new_err(
                    "__dlpack__: kael exports host (CPU) memory only; ask for dl_device=(1, 0)",
                ));
            }
        }
        let copied = copy == Some(true);
        if copied {
            t = t.deep_clone().py()?;
        }
        let readonly = t.storage().is_read_only();
        let mut ctx = Box::new(ExportCtx {
            shape: t.shape().iter().map(|&n| n as i64).collect(),
            strides: t.strides().as_slice().iter().map(|&s| s as i64).collect(),
            _tensor: t.clone(),
        });
        let dl = dl_tensor(&t, &mut ctx);
        let versioned = max_version.is_some_and(|(major, _)| major >= 1);
        let (ptr, name): (*mut c_void, &CStr) = if versioned {
            let m = Box::new(DLManagedTensorVersioned {
                version: DLPackVersion { major: 1, minor: 0 },
                manager_ctx: Box::into_raw(ctx) as *mut c_void,
                deleter: Some(delete_versioned),
                flags: if readonly { FLAG_READ_ONLY } else { 0 }
                    | if copied { FLAG_IS_COPIED } else { 0 },
                dl_tensor: dl,
            });
            (Box::into_raw(m) as *mut c_void, DLTENSOR_VERSIONED)
        } else {
            if readonly {
                return Err(PyBufferError::new_err(
                    "__dlpack__: the tensor's storage is read-only and DLPack before 1.0 cannot say so; pass max_version=(1, 0) or export a clone()",
                ));
            }
            let m = Box::new(DLManagedTensor {
                dl_tensor: dl,
                manager_ctx: Box::into_raw(ctx) as *mut c_void,
                deleter: Some(delete_unversioned),
            });
            (Box::into_raw(m) as *mut c_void, DLTENSOR)
        };
        // SAFETY: `ptr` is a leaked managed tensor of the kind `name` says;
        // the destructor frees it unless a consumer renamed the capsule.
        let cap = unsafe { ffi::PyCapsule_New(ptr, name.as_ptr(), Some(capsule_destructor)) };
        if cap.is_null() {
            // SAFETY: the capsule was not made, so nobody else owns `ptr`.
            unsafe {
                if versioned {
                    delete_versioned(ptr as *mut DLManagedTensorVersioned);
                } else {
                    delete_unversioned(ptr as *mut DLManagedTensor);
                }
            }
        }
        // SAFETY: `cap` is a new reference or null with an error set.
        unsafe { Bound::from_owned_ptr_or_err(py, cap) }
    }

    /// DLPack device of this tensor: `(1, 0)` (CPU) for host memory.
    fn __dlpack_device__(&self) -> PyResult<(i32, i32)> {
        match self.t.device().kind() {
            DeviceKind::Cpu | DeviceKind::ThreadedCpu => Ok((KDL_CPU, 0)),
            _ => Err(PyBufferError::new_err(
                "__dlpack_device__: only host-memory tensors take part in DLPack; call .to(kael.threaded) first",
            )),
        }
    }
}

/// Keeps a consumed DLPack tensor alive; calls its deleter when the kael
/// storage drops.
struct HeldDlpack {
    managed: *mut c_void,
    versioned: bool,
}

// SAFETY: DLPack lets the deleter be called from any thread (producers
// that need their interpreter take it themselves, as numpy does), and the
// pointer is only used in `drop`.
unsafe impl Send for HeldDlpack {}
// SAFETY: as above.
unsafe impl Sync for HeldDlpack {}

impl Drop for HeldDlpack {
    fn drop(&mut self) {
        // SAFETY: `managed` is the consumed capsule's managed tensor, ours to
        // delete exactly once.
        unsafe {
            if self.versioned {
                let m = self.managed as *mut DLManagedTensorVersioned;
                if let Some(d) = (*m).deleter {
                    d(m);
                }
            } else {
                let m = self.managed as *mut DLManagedTensor;
                if let Some(d) = (*m).deleter {
                    d(m);
                }
            }
        }
    }
}

/// `kael.from_dlpack(x)`: a tensor sharing the memory of any object with
/// `__dlpack__` (numpy arrays, PyTorch tensors, …) or of a DLPack capsule.
#[pyfunction]
pub fn from_dlpack(obj: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
    const OP: &str = "from_dlpack";
    if let Ok(t) = obj.cast::<PyTensor>() {
        return Ok(wrap(t.get().t.clone()));
    }
    let py = obj.py();
    let capsule = if obj.hasattr("__dlpack__")? {
        let kw = pyo3::types::PyDict::new(py);
        kw.set_item("max_version", (1, 0))?;
        match obj.call_method("__dlpack__", (), Some(&kw)) {
            Ok(c) => c,
            Err(e) if e.is_instance_of::<PyTypeError>(py) => obj.call_method0("__dlpack__")?,
            Err(e) => return Err(e),
        }
    } else {
        obj.clone()
    };
    let cap = capsule.as_ptr();
    // SAFETY: IsValid only reads the object's type and name.
    let versioned = unsafe { ffi::PyCapsule_IsValid(cap, DLTENSOR_VERSIONED.as_ptr()) } == 1;
    // SAFETY: as above.
    let legacy = unsafe { ffi::PyCapsule_IsValid(cap, DLTENSOR.as_ptr()) } == 1;
    if !versioned && !legacy {
        return Err(value_error(format!(
            "{OP}: expected an object with __dlpack__ or an unused DLPack capsule; a consumed capsule cannot be imported twice"
        )));
    }
    let name = if versioned {
        DLTENSOR_VERSIONED
    } else {
        DLTENSOR
    };
    // SAFETY: the name was just checked, so GetPointer returns the managed
    // tensor the producer stored (non-null by the DLPack contract; checked).
    let managed = unsafe { ffi::PyCapsule_GetPointer(cap, name.as_ptr()) };
    if managed.is_null() {
        return Err(
            PyErr::take(py).unwrap_or_else(|| value_error(format!("{OP}: the capsule is empty")))
        );
    }
    // SAFETY: `managed` points at the struct the capsule's name announces,
    // valid until its deleter runs (which only we will call from now on).
    let (dl, flags) = unsafe {
        if versioned {
            let m = &*(managed as *const DLManagedTensorVersioned);
            if m.version.major != 1 {
                return Err(value_error(format!(
                    "{OP}: DLPack version {}.{} is not supported; kael reads 1.x (and unversioned capsules)",
                    m.version.major, m.version.minor
                )));
            }
            (&m.dl_tensor, m.flags)
        } else {
            (&(*(managed as *const DLManagedTensor)).dl_tensor, 0)
        }
    };
    if dl.device.device_type != KDL_CPU && dl.device.device_type != KDL_CUDA_HOST {
        return Err(value_error(format!(
            "{OP}: the tensor is on DLPack device type {}; kael imports host memory only, so move it to the CPU first",
            dl.device.device_type
        )));
    }
    let Some(dtype) = kael_dtype(dl.dtype) else {
        return Err(value_error(format!(
            "{OP}: DLPack dtype (code {}, {} bits, {} lanes) has no kael dtype; convert it first",
            dl.dtype.code, dl.dtype.bits, dl.dtype.lanes
        )));
    };
    let ndim = usize::try_from(dl.ndim).unwrap_or(usize::MAX);
    if ndim > MAX_RANK {
        return Err(value_error(format!(
            "{OP}: {ndim} dimensions is more than kael's maximum {MAX_RANK}; reshape first"
        )));
    }
    let mut shape = Vec::with_capacity(ndim);
    for i in 0..ndim {
        // SAFETY: DLPack's `shape` has `ndim` entries.
        let n = unsafe { *dl.shape.add(i) };
        shape.push(usize::try_from(n).map_err(|_| value_error(format!("{OP}: a negative size")))?);
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
            s.push(usize::try_from(v).map_err(|_| {
                value_error(format!(
                    "{OP}: the tensor has a negative stride; kael views need non-negative strides, so copy it first"
                ))
            })?);
        }
        s
    };
    let item = dtype.size_in_bytes();
    let nbytes = span_bytes(&shape, &strides, item)
        .ok_or_else(|| value_error(format!("{OP}: the tensor's extent overflows")))?;
    let offset = usize::try_from(dl.byte_offset)
        .map_err(|_| value_error(format!("{OP}: the byte offset overflows")))?;
    let data = (dl.data as *mut u8).wrapping_add(offset);
    let ptr = nonnull(data, item, nbytes)
        .ok_or_else(|| value_error(format!("{OP}: the data pointer is null")))?;
    let writable = flags & FLAG_READ_ONLY == 0;
    // Check what tensor_over checks before taking ownership, so a refusal
    // leaves the capsule unconsumed (its own destructor frees it).
    if ptr.as_ptr() as usize % item != 0 {
        return Err(value_error(format!(
            "{OP}: the data pointer is not aligned to the element size ({item} bytes); copy it first"
        )));
    }
    let used = if versioned {
        USED_DLTENSOR_VERSIONED
    } else {
        USED_DLTENSOR
    };
    // SAFETY: `cap` is a valid capsule; renaming marks it consumed so its
    // destructor will not call the deleter (we own it now).
    if unsafe { ffi::PyCapsule_SetName(cap, used.as_ptr()) } != 0 {
        return Err(PyErr::take(py)
            .unwrap_or_else(|| value_error(format!("{OP}: could not consume the capsule"))));
    }
    let owner: Shared<dyn ExternalOwner> = Shared::new(HeldDlpack { managed, versioned });
    tensor_over(OP, ptr, nbytes, owner, writable, &shape, &strides, dtype).map(wrap)
}
