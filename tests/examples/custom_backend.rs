//! Writing a backend one kernel at a time (NOTE [Inherited kernels] in
//! kael_core::backend), checked by the conformance suite.
//!
//! Two backends:
//! - `FastRelu`: host memory, one kernel of its own (ReLU on contiguous f32,
//!   written as a plain loop), every other kernel inherited from the
//!   reference CPU device;
//! - `Accelerator`: a device-memory backend that, so far, only copies bytes
//!   to and from its memory; every kernel runs through host staging.
//!
//! Both must pass the whole suite. Run: `cargo run -p kael-tests --example custom_backend`.
use kael_core::allocator::{Allocator, GlobalAllocator};
use kael_core::backend::{Backend, Dst, Inherit, Src, UnaryOp};
use kael_core::shared::Shared;
use kael_core::storage::Storage;
use kael_core::{Device, DeviceKind, Error, Result, Tensor, conformance};

/// Host memory; its own ReLU kernel, everything else from the reference.
struct FastRelu {
    reference: Device,
}

impl Backend for FastRelu {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Custom("fast-relu")
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
        let mine = op == UnaryOp::Relu
            && src.dtype == kael_core::DType::F32
            && src.layout.is_contiguous()
            && dst.layout.is_contiguous()
            && !core::ptr::eq(src.storage, dst.storage);
        if !mine {
            // not this kernel's case: the reference's
            return self.reference.backend().unary(op, src, dst);
        }
        let s = src.storage.read("relu")?;
        let mut d = dst.storage.write("relu")?;
        let n = dst.layout.numel();
        let (so, dof) = (src.layout.offset(), dst.layout.offset());
        let x: &[f32] =
            bytemuck::try_cast_slice(s.bytes()).map_err(|_| Error::InvalidArgument {
                op: "relu",
                reason: "misaligned storage",
            })?;
        let y: &mut [f32] =
            bytemuck::try_cast_slice_mut(d.bytes_mut()).map_err(|_| Error::InvalidArgument {
                op: "relu",
                reason: "misaligned storage",
            })?;
        for (o, &i) in y[dof..dof + n].iter_mut().zip(&x[so..so + n]) {
            *o = if i > 0.0 || i.is_nan() { i } else { 0.0 };
        }
        Ok(())
    }
}

/// Device memory (here: host bytes the tensor layer may not touch); only
/// byte copies so far, every kernel staged through the reference CPU.
struct Accelerator {
    allocator: Shared<dyn Allocator>,
    host: Device,
}

impl Backend for Accelerator {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Custom("accelerator")
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
    fn write_bytes(&self, dst: &Storage, at: usize, src: &[u8]) -> Result<()> {
        let end = in_bounds("write_bytes", dst, at, src.len())?;
        // SAFETY: the storage's allocation (from this backend's allocator)
        // is `nbytes` writable bytes, `at..end` is inside it, and this
        // single-threaded example has nothing else touching it.
        unsafe {
            core::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_ptr().cast_mut().add(at), end - at);
        }
        Ok(())
    }
    fn read_bytes(&self, src: &Storage, at: usize, dst: &mut [u8]) -> Result<()> {
        let end = in_bounds("read_bytes", src, at, dst.len())?;
        // SAFETY: as in `write_bytes`, for reads.
        let from = unsafe { core::slice::from_raw_parts(src.as_ptr().add(at), end - at) };
        dst.copy_from_slice(from);
        Ok(())
    }
}

fn in_bounds(op: &'static str, s: &Storage, at: usize, len: usize) -> Result<usize> {
    at.checked_add(len)
        .filter(|&e| e <= s.nbytes())
        .ok_or(Error::OutOfBounds {
            op,
            reach: at.saturating_add(len),
            storage_len: s.nbytes(),
        })
}

fn main() -> Result<()> {
    let fast = Device::from_backend(Shared::new(FastRelu {
        reference: Device::cpu(),
    }));
    let x = Tensor::from_slice(&[-1.0f32, 2.0, -3.0], &[3], &fast)?;
    assert_eq!(x.relu()?.to_vec::<f32>()?, vec![0.0, 2.0, 0.0]);
    let report = conformance::run(&fast);
    println!("{report}");
    assert!(report.is_ok(), "{report}");

    let accel = Device::from_backend(Shared::new(Accelerator {
        allocator: Shared::new(GlobalAllocator::new()),
        host: Device::cpu(),
    }));
    let report = conformance::run(&accel);
    println!("{report}");
    assert!(report.is_ok(), "{report}");
    Ok(())
}
