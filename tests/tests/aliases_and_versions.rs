//! Autograd's guards against silently wrong gradients: versions that never
//! go back, hooks that must keep a gradient's dtype and device, and aliases
//! of a leaf that obey the view rules.

use kael_core::allocator::{Allocator, GlobalAllocator};
use kael_core::shared::Shared;
use kael_core::{Backend, DType, Device, DeviceKind, Error, Result, Storage, Tensor, no_grad};

// ------------------------------------------------ move_to_ and the version

/// A device whose memory the host does not address (as a GPU's): a move to
/// it copies into a fresh storage through `write_bytes`. Its bytes are
/// host allocations, copied with raw pointers.
struct Staging;

impl Backend for Staging {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Custom("staging")
    }
    fn is_host_memory(&self) -> bool {
        false
    }
    fn allocator(&self) -> Shared<dyn Allocator> {
        Shared::new(GlobalAllocator::new())
    }
    fn write_bytes(&self, dst: &Storage, off: usize, src: &[u8]) -> Result<()> {
        assert!(off + src.len() <= dst.nbytes());
        // SAFETY: `dst`'s bytes come from the global allocator (not
        // external, so writable) and span `nbytes >= off + src.len()`;
        // nothing else touches this device-memory storage during the call.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                dst.as_ptr().cast_mut().add(off),
                src.len(),
            );
        }
        Ok(())
    }
    fn read_bytes(&self, src: &Storage, off: usize, dst: &mut [u8]) -> Result<()> {
        assert!(off + dst.len() <= src.nbytes());
        // SAFETY: as in `write_bytes`, reading `dst.len()` bytes in bounds.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr().add(off), dst.as_mut_ptr(), dst.len());
        }
        Ok(())
    }
}

fn leaf() -> Result<Tensor> {
    Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], &Device::cpu())?.requires_grad_(true)
}

#[test]
fn a_round_trip_through_another_device_keeps_the_version() {
    let w = leaf().unwrap();
    no_grad(|| w.add_(&Tensor::scalar(1.0f32, &Device::cpu())?)).unwrap();
    let v = w.version();
    w.move_to_(&Device::from_backend(Shared::new(Staging)))
        .unwrap();
    assert_eq!(w.version(), v);
    w.move_to_(&Device::cpu()).unwrap();
    assert_eq!(w.version(), v);
}

#[test]
fn a_write_after_a_round_trip_makes_backward_fail() {
    // w saved at version 1; the round trip must not bring the counter back
    // to 0, or the write below would land on version 1 again and backward
    // would use the modified w unnoticed
    let w = leaf().unwrap();
    let cpu = Device::cpu();
    no_grad(|| w.add_(&Tensor::scalar(1.0f32, &cpu)?)).unwrap();
    let y = w.mul(&w).unwrap().sum_all().unwrap();
    w.move_to_(&Device::from_backend(Shared::new(Staging)))
        .unwrap();
    w.move_to_(&cpu).unwrap();
    no_grad(|| w.add_(&Tensor::scalar(1.0f32, &cpu)?)).unwrap();
    let err = y.backward().unwrap_err();
    assert!(
        err.to_string().contains("modified by an inplace operation"),
        "{err}"
    );
}

#[test]
fn a_round_trip_without_a_write_keeps_backward_working() {
    let w = leaf().unwrap();
    let y = w.mul(&w).unwrap().sum_all().unwrap();
    w.move_to_(&Device::from_backend(Shared::new(Staging)))
        .unwrap();
    w.move_to_(&Device::cpu()).unwrap();
    y.backward().unwrap();
    assert_eq!(
        w.grad().unwrap().to_vec::<f32>().unwrap(),
        vec![2.0, 4.0, 6.0]
    );
}

#[test]
fn a_strided_view_moved_to_another_device_keeps_its_layout_and_values() {
    // rows 1..3 of the transpose of [[0..4], [4..8], [8..12]]: shape [2, 3],
    // strides [1, 4], offset 1, as PyTorch's `.t()[1:3]`
    let cpu = Device::cpu();
    let base = Tensor::arange(0.0f32, 12.0, &cpu).unwrap();
    let v = base
        .reshape(&[3, 4])
        .unwrap()
        .t()
        .unwrap()
        .narrow(0, 1, 2)
        .unwrap();
    let layout = v.layout();
    v.move_to_(&Device::from_backend(Shared::new(Staging)))
        .unwrap();
    assert_eq!(v.layout(), layout);
    // the copy holds the elements up to the view's last (index 10), no more
    assert_eq!(v.storage().nbytes(), 11 * 4);
    v.move_to_(&cpu).unwrap();
    assert_eq!(v.layout(), layout);
    assert_eq!(
        v.to_vec::<f32>().unwrap(),
        vec![1.0, 5.0, 9.0, 2.0, 6.0, 10.0]
    );
    assert_eq!(
        base.to_vec::<f32>().unwrap(),
        (0..12).map(|i| i as f32).collect::<Vec<_>>()
    );
}

#[test]
fn an_expanded_tensor_moved_to_another_device_copies_its_distinct_elements_once() {
    let cpu = Device::cpu();
    let e = Tensor::from_slice(&[1.0f32, 2.0], &[2, 1], &cpu)
        .unwrap()
        .expand(&[2, 3])
        .unwrap();
    e.move_to_(&Device::from_backend(Shared::new(Staging)))
        .unwrap();
    assert_eq!(
        (&e.strides()[..], e.storage().nbytes()),
        (&[1, 0][..], 2 * 4)
    );
    e.move_to_(&cpu).unwrap();
    assert_eq!(
        e.to_vec::<f32>().unwrap(),
        vec![1.0, 1.0, 1.0, 2.0, 2.0, 2.0]
    );
}

// ------------------------------------------------------------------ hooks

#[test]
fn a_hook_that_changes_the_dtype_is_refused() {
    let w = leaf().unwrap();
    w.register_hook(|g| Ok(Some(g.to_dtype(DType::F64)?)))
        .unwrap();
    let err = w.sum_all().unwrap().backward().unwrap_err();
    assert!(
        matches!(err, Error::Autograd { op: "hook", reason } if reason.contains("dtype")),
        "{err}"
    );
    assert!(w.grad().is_none());
}

#[test]
fn a_hook_that_changes_the_device_is_refused() {
    let w = leaf().unwrap();
    w.register_hook(|g| Ok(Some(g.to_device(&kael_host::cpu_threaded::device()?)?)))
        .unwrap();
    let err = w.sum_all().unwrap().backward().unwrap_err();
    assert!(
        matches!(err, Error::Autograd { op: "hook", reason } if reason.contains("device")),
        "{err}"
    );
    assert!(w.grad().is_none());
}

// ---------------------------------------------------------------- aliases

#[test]
fn a_leaf_moved_to_another_host_device_cannot_be_written_in_grad_mode() {
    // the result shares w's storage: writing it would change the leaf
    let w = leaf().unwrap();
    let alias = w
        .to_device(&kael_host::cpu_threaded::device().unwrap())
        .unwrap();
    assert!(alias.shares_storage(&w));
    let err = alias.fill_(0.0).unwrap_err();
    assert!(matches!(err, Error::Autograd { op: "fill_", .. }), "{err}");
    assert_eq!(w.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0]);
    assert_eq!(w.version(), 0);
}

#[test]
fn a_leaf_moved_to_another_host_device_can_be_written_under_no_grad() {
    let w = leaf().unwrap();
    let alias = w
        .to_device(&kael_host::cpu_threaded::device().unwrap())
        .unwrap();
    no_grad(|| alias.fill_(0.0)).unwrap();
    assert_eq!(w.to_vec::<f32>().unwrap(), vec![0.0, 0.0, 0.0]);
}
