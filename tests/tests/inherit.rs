//! Inherited kernels (NOTE [Inherited kernels] in kael_core::backend): a
//! backend that writes one kernel passes the whole conformance suite, on
//! host memory through the reference kernels and on device memory through
//! host staging of its byte copies.
use kael_core::allocator::{Allocator, GlobalAllocator};
use kael_core::backend::{Backend, Dst, Inherit, Src, UnaryOp};
use kael_core::shared::Shared;
use kael_core::storage::Storage;
use kael_core::{Device, DeviceKind, Error, Result, Tensor, conformance};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A host-memory backend with one kernel of its own.
struct OneKernel {
    reference: Device,
    unary_calls: AtomicUsize,
}

impl Backend for OneKernel {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Custom("one-kernel")
    }
    fn is_host_memory(&self) -> bool {
        true
    }
    fn allocator(&self) -> Shared<dyn Allocator> {
        self.reference.allocator()
    }
    fn inherit(&self) -> Inherit {
        Inherit::From(self.reference.clone())
    }
    fn unary(&self, op: UnaryOp, src: Src<'_>, dst: Dst<'_>) -> Result<()> {
        self.unary_calls.fetch_add(1, Ordering::Relaxed);
        kael_core::cpu::elementwise::unary(op, src, dst)
    }
}

/// A device-memory backend with nothing but byte copies (its "device" is
/// host memory the tensor layer may not touch: `is_host_memory` is false).
struct BytesOnly {
    allocator: Shared<dyn Allocator>,
    host: Device,
    reads: AtomicUsize,
}

impl Backend for BytesOnly {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Custom("bytes-only")
    }
    fn is_host_memory(&self) -> bool {
        false
    }
    fn allocator(&self) -> Shared<dyn Allocator> {
        self.allocator.clone()
    }
    fn inherit(&self) -> Inherit {
        Inherit::Staged(self.host.clone())
    }
    fn write_bytes(&self, dst: &Storage, byte_offset: usize, src: &[u8]) -> Result<()> {
        device_write(dst, byte_offset, src)
    }
    fn read_bytes(&self, src: &Storage, byte_offset: usize, dst: &mut [u8]) -> Result<()> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let end = in_bounds("read_bytes", src, byte_offset, dst.len())?;
        // SAFETY: `src`'s allocation (from this backend's allocator) holds
        // `nbytes` bytes and `byte_offset..end` is inside it; the tests are
        // single-threaded, so no kernel writes it meanwhile.
        let from =
            unsafe { std::slice::from_raw_parts(src.as_ptr().add(byte_offset), end - byte_offset) };
        dst.copy_from_slice(from);
        Ok(())
    }
}

/// `byte_offset + len` when it stays inside `s`.
fn in_bounds(op: &'static str, s: &Storage, byte_offset: usize, len: usize) -> Result<usize> {
    byte_offset
        .checked_add(len)
        .filter(|&e| e <= s.nbytes())
        .ok_or(Error::OutOfBounds {
            op,
            reach: byte_offset.saturating_add(len),
            storage_len: s.nbytes(),
        })
}

/// The "device" side of a write: the bytes behind the storage's pointer,
/// which the tensor layer never touches for device memory.
fn device_write(dst: &Storage, byte_offset: usize, src: &[u8]) -> Result<()> {
    let end = in_bounds("write_bytes", dst, byte_offset, src.len())?;
    // SAFETY: the allocation behind `dst` is `nbytes` writable bytes from
    // the global allocator, `byte_offset..end` is inside it, and nothing
    // else reads or writes it during the copy (single-threaded tests; the
    // tensor layer does not access device memory directly).
    unsafe {
        std::ptr::copy_nonoverlapping(
            src.as_ptr(),
            dst.as_ptr().cast_mut().add(byte_offset),
            end - byte_offset,
        );
    }
    Ok(())
}

fn one_kernel() -> (Device, Shared<OneKernel>) {
    let b = Shared::new(OneKernel {
        reference: Device::cpu(),
        unary_calls: AtomicUsize::new(0),
    });
    (Device::from_backend(b.clone()), b)
}

fn bytes_only() -> (Device, Shared<BytesOnly>) {
    let b = Shared::new(BytesOnly {
        allocator: Shared::new(GlobalAllocator::new()),
        host: Device::cpu(),
        reads: AtomicUsize::new(0),
    });
    (Device::from_backend(b.clone()), b)
}

#[test]
fn a_host_backend_with_one_kernel_passes_the_whole_conformance_suite() {
    let (dev, b) = one_kernel();
    let report = conformance::run(&dev);
    assert!(report.is_ok(), "{report}");
    assert!(report.checks > 5000, "{} checks", report.checks);
    // its own kernel ran, for every unary check
    assert!(b.unary_calls.load(Ordering::Relaxed) >= report.op_count("exp").checks);
}

#[test]
fn a_device_backend_with_only_byte_copies_passes_the_whole_conformance_suite() {
    let (dev, b) = bytes_only();
    let report = conformance::run(&dev);
    assert!(report.is_ok(), "{report}");
    assert!(report.checks > 5000, "{} checks", report.checks);
    assert!(b.reads.load(Ordering::Relaxed) > report.checks);
}

#[test]
fn host_staging_keeps_an_operand_that_is_the_destination_aliased() -> Result<()> {
    let (dev, _) = bytes_only();
    let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], &dev)?;
    a.add_(&a)?;
    assert_eq!(a.to_vec::<f32>()?, vec![2.0, 4.0, 6.0]);
    // a view's write reaches the rest of its storage unchanged
    let v = a.narrow(0, 1, 2)?;
    v.mul_(&Tensor::from_slice(&[10.0f32], &[1], &dev)?)?;
    assert_eq!(a.to_vec::<f32>()?, vec![2.0, 40.0, 60.0]);
    Ok(())
}

#[test]
fn staging_through_a_device_memory_device_is_refused() {
    let (gpu_like, _) = bytes_only();
    struct Bad(Device, Shared<dyn Allocator>);
    impl Backend for Bad {
        fn kind(&self) -> DeviceKind {
            DeviceKind::Custom("bad")
        }
        fn is_host_memory(&self) -> bool {
            false
        }
        fn allocator(&self) -> Shared<dyn Allocator> {
            self.1.clone()
        }
        fn inherit(&self) -> Inherit {
            Inherit::Staged(self.0.clone())
        }
        fn write_bytes(&self, dst: &Storage, at: usize, src: &[u8]) -> Result<()> {
            device_write(dst, at, src)
        }
    }
    let dev = Device::from_backend(Shared::new(Bad(
        gpu_like,
        Shared::new(GlobalAllocator::new()),
    )));
    let x = Tensor::from_slice(&[1.0f32], &[1], &dev).unwrap();
    match x.exp() {
        Err(Error::InvalidArgument { op: "exp", reason }) => {
            assert!(reason.contains("Device::cpu()"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn host_staging_reports_a_missing_byte_copy_as_unsupported() {
    /// Device memory that inherits by staging but cannot be read.
    struct NoRead(Shared<dyn Allocator>);
    impl Backend for NoRead {
        fn kind(&self) -> DeviceKind {
            DeviceKind::Custom("no-read")
        }
        fn is_host_memory(&self) -> bool {
            false
        }
        fn allocator(&self) -> Shared<dyn Allocator> {
            self.0.clone()
        }
        fn inherit(&self) -> Inherit {
            Inherit::Staged(Device::cpu())
        }
        fn write_bytes(&self, dst: &Storage, at: usize, src: &[u8]) -> Result<()> {
            device_write(dst, at, src)
        }
    }
    let dev = Device::from_backend(Shared::new(NoRead(Shared::new(GlobalAllocator::new()))));
    let x = Tensor::from_slice(&[1.0f32], &[1], &dev).unwrap();
    let e = x.exp().unwrap_err();
    assert!(
        matches!(
            e,
            Error::Unsupported {
                op: "read_bytes",
                device: DeviceKind::Custom("no-read")
            }
        ),
        "{e:?}"
    );
}
