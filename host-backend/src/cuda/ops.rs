//! Host side of every kernel family: argument checks (the same errors as the
//! reference backend), operand addresses, and launches.
//!
//! Every launch is queued on the backend's stream and returns at once; only
//! copies back to the host, and index ops (which validate index values on
//! the host first), wait for the stream.

use super::kernels::{KLayout, dcode, per_element};
use super::{CudaAllocator, CudaBackend, driver_error};
use cudarc::driver::{DeviceRepr, PushKernelArg, result};
use kael_core::allocator::{Allocator, BUFFER_ALIGN};
pub(crate) use kael_core::backend::contract::{no_alias, same_dtype};
use kael_core::backend::{Backend, BinaryOp, CmpOp, Dst, Src, UnaryOp};
use kael_core::{DType, Error, Layout, Result, Storage, bf16, f16};
use std::alloc::Layout as MemLayout;
use std::ptr::NonNull;

/// Queues kernel `$name` of `$dtype`'s module with the given arguments.
macro_rules! launch {
    ($be:expr, $dtype:expr, $name:literal, $cfg:expr; $($arg:expr),* $(,)?) => {{
        let f = $be.function($dtype, $name)?;
        let mut b = $be.stream.launch_builder(&f);
        $( b.arg($arg); )*
        // SAFETY: the arguments match the kernel's signature in body.cu in
        // number, order and type (checked by hand at each call site; KLayout
        // is `struct L`); every device pointer is a live block of this
        // backend that holds every offset its layout reaches (`operand`
        // checks the reach against the storage size, scratch blocks are
        // sized for their contiguous layouts), and the stream orders the
        // kernel after every earlier use of those blocks.
        unsafe { b.launch($cfg) }
            .map(|_| ())
            .map_err(|e| $crate::cuda::driver_error($name, e))
    }};
}
pub(crate) use launch;

/// A kernel operand: the storage's device address and the layout.
pub(crate) struct Operand {
    /// Address of the storage's first byte (layout offsets count from it).
    pub ptr: u64,
    /// The layout, as a kernel argument.
    pub kl: KLayout,
}

/// A block of device scratch memory, returned to the cache on drop (safe
/// while kernels that use it are still queued: NOTE [Caching allocator]).
pub(crate) struct Scratch<'a> {
    alloc: &'a CudaAllocator,
    ptr: NonNull<u8>,
    layout: MemLayout,
}

impl<'a> Scratch<'a> {
    pub(crate) fn new(alloc: &'a CudaAllocator, bytes: usize) -> Result<Self> {
        let layout =
            MemLayout::from_size_align(bytes, BUFFER_ALIGN).map_err(|_| Error::OutOfMemory {
                requested: bytes,
                available: None,
            })?;
        let ptr = alloc.allocate(layout)?;
        Ok(Self { alloc, ptr, layout })
    }

    pub(crate) fn addr(&self) -> u64 {
        self.ptr.as_ptr().addr() as u64
    }
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc.allocate(layout)` in `new` and is
        // returned exactly once, here.
        unsafe { self.alloc.deallocate(self.ptr, self.layout) };
    }
}

/// Queues `k_copy`: `n` elements of `dtype` from `(layout, address)` `src`
/// to `dst`.
pub(crate) fn launch_copy(
    be: &CudaBackend,
    dtype: DType,
    n: usize,
    dst: (&KLayout, u64),
    src: (&KLayout, u64),
) -> Result<()> {
    let nn = n_i64(n)?;
    launch!(be, dtype, "k_copy", per_element(n); dst.0, src.0, &nn, &dst.1, &src.1)
}

pub(crate) fn same_shape(op: &'static str, expected: &Layout, got: &Layout) -> Result<()> {
    if expected.shape() == got.shape() {
        Ok(())
    } else {
        Err(Error::ShapeMismatch {
            op,
            expected: kael_core::error::ErrShape::of(expected.shape()),
            got: kael_core::error::ErrShape::of(got.shape()),
        })
    }
}

pub(crate) fn n_i64(n: usize) -> Result<i64> {
    i64::try_from(n).map_err(|_| Error::InvalidArgument {
        op: "cuda",
        reason: "more elements than i64 can count; use smaller tensors",
    })
}

/// `l`'s layout with `dim` cut to size 1 (one position per row along `dim`).
pub(crate) fn rows_of(l: &Layout, dim: usize) -> Result<Layout> {
    let mut shape = l.shape().to_vec();
    shape[dim] = 1;
    Layout::new(&shape, l.strides(), l.offset())
}

impl CudaBackend {
    pub(crate) fn bind(&self, op: &'static str) -> Result<()> {
        self.ctx.bind_to_thread().map_err(|e| driver_error(op, e))
    }

    /// The device address of a storage of this backend.
    pub(crate) fn storage_addr(&self, op: &'static str, s: &Storage) -> Result<u64> {
        let kind = s.device().kind();
        if kind != self.kind() {
            return Err(Error::DeviceMismatch {
                op,
                lhs: self.kind(),
                rhs: kind,
            });
        }
        Ok(s.as_ptr().addr() as u64)
    }

    /// Checks that `s` lives on this device and that its layout stays
    /// inside its storage, and returns it as a kernel operand.
    pub(crate) fn operand(&self, op: &'static str, s: &Src<'_>) -> Result<Operand> {
        let ptr = self.storage_addr(op, s.storage)?;
        let es = s.dtype.size_in_bytes();
        let len = s.storage.nbytes() / es;
        if s.layout.numel() > 0 && s.layout.reach() > len {
            return Err(Error::OutOfBounds {
                op,
                reach: s.layout.reach(),
                storage_len: len,
            });
        }
        Ok(Operand {
            ptr,
            kl: KLayout::of(s.layout)?,
        })
    }

    /// Host bytes to device address `dst` (waits until the copy is done).
    pub(crate) fn upload(&self, op: &'static str, dst: u64, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        self.bind(op)?;
        // SAFETY: the caller passes the address of a live device block with
        // at least `src.len()` bytes from `dst`; `src` stays borrowed until
        // the stream synchronize below has seen the copy finish.
        unsafe { result::memcpy_htod_async(dst, src, self.stream.cu_stream()) }
            .and_then(|()| self.stream.synchronize())
            .map_err(|e| driver_error(op, e))
    }

    /// Device bytes at address `src` to the host (after all queued work).
    pub(crate) fn download(&self, op: &'static str, src: u64, dst: &mut [u8]) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        self.bind(op)?;
        // SAFETY: the caller passes the address of a live device block with
        // at least `dst.len()` bytes from `src`; `dst` stays mutably
        // borrowed until the stream synchronize below has seen the copy
        // finish.
        unsafe { result::memcpy_dtoh_async(dst, src, self.stream.cu_stream()) }
            .and_then(|()| self.stream.synchronize())
            .map_err(|e| driver_error(op, e))
    }

    fn byte_range(op: &'static str, s: &Storage, byte_offset: usize, len: usize) -> Result<()> {
        match byte_offset.checked_add(len) {
            Some(end) if end <= s.nbytes() => Ok(()),
            _ => Err(Error::OutOfBounds {
                op,
                reach: byte_offset.saturating_add(len),
                storage_len: s.nbytes(),
            }),
        }
    }

    pub(crate) fn write_storage(
        &self,
        dst: &Storage,
        byte_offset: usize,
        src: &[u8],
    ) -> Result<()> {
        const OP: &str = "write_bytes";
        let base = self.storage_addr(OP, dst)?;
        if dst.is_read_only() {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: "external storage is read-only; deep_clone() the tensor first",
            });
        }
        Self::byte_range(OP, dst, byte_offset, src.len())?;
        self.upload(OP, base + byte_offset as u64, src)
    }

    pub(crate) fn read_storage(
        &self,
        src: &Storage,
        byte_offset: usize,
        dst: &mut [u8],
    ) -> Result<()> {
        const OP: &str = "read_bytes";
        let base = self.storage_addr(OP, src)?;
        Self::byte_range(OP, src, byte_offset, dst.len())?;
        self.download(OP, base + byte_offset as u64, dst)
    }

    // -------------------------------------------------------- elementwise

    pub(crate) fn copy(&self, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        const OP: &str = "copy";
        same_dtype(OP, dst.dtype, src.dtype)?;
        same_shape(OP, dst.layout, src.layout)?;
        let n = dst.layout.numel();
        if n == 0 {
            return Ok(());
        }
        let (s, d) = (self.operand(OP, &src)?, self.operand(OP, &dst)?);
        let exact = std::ptr::eq(src.storage, dst.storage) && src.layout == dst.layout;
        if exact {
            return Ok(());
        }
        if s.kl.contig == 1 && d.kl.contig == 1 && !std::ptr::eq(src.storage, dst.storage) {
            let es = dst.dtype.size_in_bytes() as u64;
            self.bind(OP)?;
            // SAFETY: both ranges are `n` elements from each layout's offset,
            // inside their storages (`operand` checked the reach), and in two
            // different storages, which never overlap (the core's storage
            // invariant 1); the copy is queued on the stream that orders
            // every use of both blocks.
            return unsafe {
                result::memcpy_dtod_async(
                    d.ptr + d.kl.offset as u64 * es,
                    s.ptr + s.kl.offset as u64 * es,
                    n * es as usize,
                    self.stream.cu_stream(),
                )
            }
            .map_err(|e| driver_error(OP, e));
        }
        launch_copy(self, dst.dtype, n, (&d.kl, d.ptr), (&s.kl, s.ptr))
    }

    pub(crate) fn cast_to(&self, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        const OP: &str = "to_dtype";
        if src.dtype == dst.dtype {
            return self.copy(src, dst);
        }
        same_shape(OP, dst.layout, src.layout)?;
        no_alias(OP, &[&src], &dst)?;
        let n = dst.layout.numel();
        if n == 0 {
            return Ok(());
        }
        let (s, d) = (self.operand(OP, &src)?, self.operand(OP, &dst)?);
        let (nn, code) = (n_i64(n)?, dcode(dst.dtype));
        launch!(self, src.dtype, "k_cast", per_element(n); &d.kl, &s.kl, &nn, &d.ptr, &code, &s.ptr)
    }

    fn fill_value<V: DeviceRepr>(&self, dst: &Dst<'_>, v: V) -> Result<()> {
        let n = dst.layout.numel();
        if n == 0 {
            return Ok(());
        }
        let d = self.operand("fill", dst)?;
        let nn = n_i64(n)?;
        launch!(self, dst.dtype, "k_fill", per_element(n); &d.kl, &nn, &d.ptr, &v)
    }

    /// `value` converted as the reference backend's `T::from_f64` does.
    pub(crate) fn fill_with(&self, dst: Dst<'_>, value: f64) -> Result<()> {
        match dst.dtype {
            DType::F32 => self.fill_value(&dst, value as f32),
            DType::F64 => self.fill_value(&dst, value),
            DType::F16 => self.fill_value(&dst, f16::from_f64(value).to_bits()),
            DType::BF16 => self.fill_value(&dst, bf16::from_f64(value).to_bits()),
            DType::I64 => self.fill_value(&dst, value as i64),
            DType::I32 => self.fill_value(&dst, value as i32),
            DType::I16 => self.fill_value(&dst, value as i16),
            DType::I8 => self.fill_value(&dst, value as i8),
            DType::U8 => self.fill_value(&dst, value as u8),
            DType::Bool => self.fill_value(&dst, u8::from(value != 0.0)),
        }
    }

    pub(crate) fn unary_op(&self, op: UnaryOp, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        let name = op.name();
        let dt = dst.dtype;
        if dt == DType::Bool {
            return Err(Error::UnsupportedDType {
                op: name,
                dtype: DType::Bool,
                supported: "numeric dtypes",
            });
        }
        if dt.is_int() && !op.works_on_ints() {
            return Err(Error::UnsupportedDType {
                op: name,
                dtype: dt,
                supported: "f32, f64, f16, bf16",
            });
        }
        same_dtype(name, dt, src.dtype)?;
        same_shape(name, dst.layout, src.layout)?;
        let n = dst.layout.numel();
        if n == 0 {
            return Ok(());
        }
        let (s, d) = (self.operand(name, &src)?, self.operand(name, &dst)?);
        let (p0, p1, flags) = op.cuda_args();
        let code = op.code() as i32;
        let nn = n_i64(n)?;
        launch!(self, dt, "k_unary", per_element(n);
            &d.kl, &s.kl, &nn, &d.ptr, &s.ptr, &code, &p0, &p1, &flags)
    }

    pub(crate) fn binary_op(
        &self,
        op: BinaryOp,
        lhs: Src<'_>,
        rhs: Src<'_>,
        dst: Dst<'_>,
    ) -> Result<()> {
        let name = op.name();
        let dt = dst.dtype;
        if dt == DType::Bool || (dt.is_int() && !op.works_on_ints()) {
            return Err(Error::UnsupportedDType {
                op: name,
                dtype: dt,
                supported: "f32, f64, f16, bf16",
            });
        }
        if dt.is_float() && !op.works_on_floats() {
            return Err(Error::UnsupportedDType {
                op: name,
                dtype: dt,
                supported: "integer dtypes",
            });
        }
        same_dtype(name, dt, lhs.dtype)?;
        same_dtype(name, dt, rhs.dtype)?;
        same_shape(name, dst.layout, lhs.layout)?;
        same_shape(name, dst.layout, rhs.layout)?;
        let n = dst.layout.numel();
        if n == 0 {
            return Ok(());
        }
        let (a, b, d) = (
            self.operand(name, &lhs)?,
            self.operand(name, &rhs)?,
            self.operand(name, &dst)?,
        );
        let (nn, code) = (n_i64(n)?, op.code() as i32);
        launch!(self, dt, "k_binary", per_element(n);
            &d.kl, &a.kl, &b.kl, &nn, &d.ptr, &a.ptr, &b.ptr, &code)
    }

    pub(crate) fn compare_op(
        &self,
        op: CmpOp,
        lhs: Src<'_>,
        rhs: Src<'_>,
        dst: Dst<'_>,
    ) -> Result<()> {
        const OP: &str = "compare";
        same_dtype(OP, lhs.dtype, rhs.dtype)?;
        if !matches!(dst.dtype, DType::Bool | DType::U8) {
            return Err(Error::DTypeMismatch {
                op: OP,
                expected: DType::Bool,
                got: dst.dtype,
            });
        }
        same_shape(OP, dst.layout, lhs.layout)?;
        same_shape(OP, dst.layout, rhs.layout)?;
        no_alias(OP, &[&lhs, &rhs], &dst)?;
        let n = dst.layout.numel();
        if n == 0 {
            return Ok(());
        }
        let (a, b, d) = (
            self.operand(OP, &lhs)?,
            self.operand(OP, &rhs)?,
            self.operand(OP, &dst)?,
        );
        let (nn, code) = (n_i64(n)?, op.code() as i32);
        launch!(self, lhs.dtype, "k_compare", per_element(n);
            &d.kl, &a.kl, &b.kl, &nn, &d.ptr, &a.ptr, &b.ptr, &code)
    }

    pub(crate) fn where_op(
        &self,
        cond: Src<'_>,
        t: Src<'_>,
        f: Src<'_>,
        dst: Dst<'_>,
    ) -> Result<()> {
        const OP: &str = "where";
        if !matches!(cond.dtype, DType::Bool | DType::U8) {
            return Err(Error::DTypeMismatch {
                op: OP,
                expected: DType::Bool,
                got: cond.dtype,
            });
        }
        same_dtype(OP, dst.dtype, t.dtype)?;
        same_dtype(OP, dst.dtype, f.dtype)?;
        for s in [&cond, &t, &f] {
            same_shape(OP, dst.layout, s.layout)?;
        }
        no_alias(OP, &[&cond, &t, &f], &dst)?;
        let n = dst.layout.numel();
        if n == 0 {
            return Ok(());
        }
        let (c, a, b, d) = (
            self.operand(OP, &cond)?,
            self.operand(OP, &t)?,
            self.operand(OP, &f)?,
            self.operand(OP, &dst)?,
        );
        let nn = n_i64(n)?;
        launch!(self, dst.dtype, "k_where", per_element(n);
            &d.kl, &c.kl, &a.kl, &b.kl, &nn, &d.ptr, &c.ptr, &a.ptr, &b.ptr)
    }
}
