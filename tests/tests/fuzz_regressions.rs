//! Regression tests for what the fuzz targets (`fuzz/`) and the reliability
//! tests found, one per finding, each reduced to the smallest program.
mod common;

use kael_core::shared::Shared;
use kael_core::{DType, Device, Error, Tensor};

/// Whether the storage behind `t` is freed once every handle is dropped.
fn freed_after_drop(t: Tensor, others: Vec<Tensor>) -> bool {
    let weak = Shared::downgrade(&t.storage());
    drop(t);
    drop(others);
    weak.upgrade().is_none()
}

// fuzz `ops`, LeakSanitizer: `b = w * a` saved `a`; `a += b` then gave `a` a
// grad_fn leading back to the node holding `a`: a reference cycle.
#[test]
fn inplace_op_on_a_saved_input_without_history_does_not_leak() {
    let dev = Device::cpu();
    let w = Tensor::ones(&[3], DType::F32, &dev)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let a = Tensor::arange(0.0f32, 3.0, &dev).unwrap();
    let b = w.mul(&a).unwrap();
    a.add_(&b).unwrap();
    assert!(a.requires_grad());
    assert!(
        freed_after_drop(a, vec![b, w]),
        "the graph kept a's storage alive"
    );
}

// fuzz `ops`, LeakSanitizer: `s /= y` saved `y` (which has history);
// `y.copy_(&s)` then closed the loop y -> CopyBackward -> DivBackward -> y.
#[test]
fn inplace_op_on_a_saved_input_with_history_does_not_leak() {
    let dev = Device::cpu();
    let leaf = Tensor::arange(0.0f32, 6.0, &dev)
        .unwrap()
        .reshape(&[2, 3])
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let y = leaf.softmax(-1).unwrap();
    let s = Tensor::ones(&[2, 3], DType::F32, &dev).unwrap();
    s.div_(&y).unwrap();
    y.copy_(&s).unwrap();
    assert!(
        freed_after_drop(y, vec![s, leaf]),
        "the graph kept y's storage alive"
    );
}

// fuzz `ops`, LeakSanitizer: `y *= y` saved `y` inside y's own grad_fn (a
// cycle), and saved it after the write, so backward used y*y for y.
#[test]
fn inplace_mul_by_itself_fails_backward_like_pytorch_and_does_not_leak() {
    let dev = Device::cpu();
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], &dev)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let y = x.mul_scalar(1.0).unwrap();
    y.mul_(&y).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![1.0, 4.0, 9.0]);
    let e = y.sum_all().unwrap().backward().unwrap_err();
    assert!(matches!(e, Error::Autograd { .. }), "{e:?}");
    assert!(
        e.to_string().contains("modified by an inplace operation"),
        "{e}"
    );
    assert!(x.grad().is_none(), "no wrong gradient was accumulated");
    assert!(freed_after_drop(y, vec![x]));
}

// The same with an out-of-place square has the right gradient, 2x.
#[test]
fn out_of_place_square_still_has_gradient_two_x() {
    let dev = Device::cpu();
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], &dev)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let y = x.mul_scalar(1.0).unwrap();
    y.mul(&y).unwrap().sum_all().unwrap().backward().unwrap();
    assert_eq!(
        x.grad().unwrap().to_vec::<f32>().unwrap(),
        vec![2.0, 4.0, 6.0]
    );
}

// fuzz `ops`: `select` on an empty tensor failed (offset 1 of a 0-element
// storage) while the same select on a view of a larger storage succeeded.
// PyTorch: torch.zeros(2, 0).select(0, 1) has shape [0].
#[test]
fn views_of_an_empty_tensor_succeed_whatever_their_offset() {
    let dev = Device::cpu();
    let e = Tensor::zeros(&[2, 0], DType::F32, &dev).unwrap();
    let s = e.select(0, 1).unwrap();
    assert_eq!(s.shape(), &[0]);
    assert!(s.offset() <= s.storage_nbytes() / 4);
    assert_eq!(s.to_vec::<f32>().unwrap(), Vec::<f32>::new());
    let n = Tensor::zeros(&[3, 0], DType::F32, &dev)
        .unwrap()
        .narrow(0, 2, 1)
        .unwrap();
    assert_eq!(n.shape(), &[1, 0]);
    assert_eq!(n.deep_clone().unwrap().shape(), &[1, 0]);
    // The same through a larger storage.
    let big = Tensor::zeros(&[4, 3], DType::F32, &dev)
        .unwrap()
        .narrow(1, 0, 0)
        .unwrap();
    assert_eq!(big.select(0, 3).unwrap().shape(), &[0]);
}

// bad-input matrix: `as_strided` with sizes whose product overflows
// panicked in debug builds (`attempt to multiply with overflow` in
// `Layout::reach`) and wrapped in release.
#[test]
fn as_strided_with_an_overflowing_element_count_is_an_error() {
    let dev = Device::cpu();
    let a = Tensor::zeros(&[6], DType::F32, &dev).unwrap();
    let before = common::snapshot(&a);
    let e = a.as_strided(&[usize::MAX, 2], &[0, 0], 0).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                op: "as_strided",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("smaller shape"));
    // Zero-size dims make the product 0, whatever the others.
    assert_eq!(
        a.as_strided(&[0, usize::MAX], &[1, 1], 0).unwrap().numel(),
        0
    );
    assert_eq!(common::snapshot(&a), before);
}

#[test]
fn expand_to_an_overflowing_element_count_is_an_error() {
    let dev = Device::cpu();
    let a = Tensor::ones(&[1, 1], DType::F32, &dev).unwrap();
    let e = a.expand(&[isize::MAX, 3]).unwrap_err();
    assert!(!e.to_string().is_empty());
    assert!(
        a.expand(&[isize::MAX, 1]).is_ok(),
        "a huge view of one element is fine"
    );
}

// bad-input matrix: `autograd::grad` with an input that does not require
// grad returned fewer results than inputs (later results shifted).
#[test]
fn grad_refuses_an_input_that_does_not_require_grad() {
    use kael_core::autograd::{BackwardOptions, grad};
    let dev = Device::cpu();
    let c = Tensor::ones(&[2], DType::F32, &dev).unwrap();
    let w = Tensor::ones(&[2], DType::F32, &dev)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let loss = w.mul(&c).unwrap().sum_all().unwrap();
    let e = grad(&[&loss], &[&c, &w], &[None], BackwardOptions::default()).unwrap_err();
    assert!(matches!(e, Error::Autograd { op: "grad", .. }), "{e:?}");
    assert!(e.to_string().contains("requires_grad_(true)"));
    let g = grad(&[&loss], &[&w], &[None], BackwardOptions::default()).unwrap();
    assert_eq!(g.len(), 1);
    assert_eq!(
        g[0].as_ref().unwrap().to_vec::<f32>().unwrap(),
        vec![1.0, 1.0]
    );
}

// fuzz `strided`: `walk` stepped past the end of a size-1 dim with a huge
// stride (valid: that stride is never used) and overflowed (debug panic).
#[test]
fn walking_size_one_dims_with_huge_strides_reads_the_right_elements() {
    let dev = Device::cpu();
    let a = Tensor::arange(0.0f32, 6.0, &dev).unwrap();
    let outer = a.as_strided(&[1, 3], &[usize::MAX, 2], 0).unwrap();
    assert_eq!(outer.to_vec::<f32>().unwrap(), vec![0.0, 2.0, 4.0]);
    let inner = a.as_strided(&[3, 1], &[2, usize::MAX], 1).unwrap();
    assert_eq!(inner.to_vec::<f32>().unwrap(), vec![1.0, 3.0, 5.0]);
    assert_eq!(
        inner.deep_clone().unwrap().to_vec::<f32>().unwrap(),
        vec![1.0, 3.0, 5.0]
    );
    assert_eq!(outer.sum_all().unwrap().item::<f32>().unwrap(), 6.0);
}

// fuzz `strided`: view_dtype to a smaller element scaled such a stride
// (or the size next to a 0, or the offset) with an overflowing multiply.
#[test]
fn view_dtype_that_would_overflow_a_stride_is_an_error() {
    let dev = Device::cpu();
    let a = Tensor::zeros(&[4], DType::F32, &dev).unwrap();
    let v = a.as_strided(&[1, 2], &[usize::MAX / 2, 1], 0).unwrap();
    let e = v.view_dtype(DType::U8).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                op: "view_dtype",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("deep_clone()"));
    // deep_clone() is the fix (contiguous() keeps these strides: the dim has size 1).
    assert_eq!(
        v.deep_clone()
            .unwrap()
            .view_dtype(DType::U8)
            .unwrap()
            .shape(),
        &[1, 8]
    );
}

// fuzz `strided`: views of an empty layout with huge sizes and strides
// overflowed offsets (narrow, select, slice, diagonal), sizes (flatten,
// unfold) and index arithmetic (select/slice with sizes past isize::MAX).
#[test]
fn views_of_huge_empty_layouts_do_not_overflow() {
    let dev = Device::cpu();
    let a = Tensor::zeros(&[4], DType::F32, &dev).unwrap();
    let e = a
        .as_strided(&[0, usize::MAX], &[usize::MAX, usize::MAX], 0)
        .unwrap();
    assert_eq!(e.narrow(1, 5, 3).unwrap().shape(), &[0, 3]);
    assert_eq!(e.select(1, -1).unwrap().shape(), &[0]);
    assert_eq!(e.select(1, 7).unwrap().shape(), &[0]);
    assert!(e.select(1, isize::MIN).is_ok());
    assert_eq!(e.slice(1, -6, -1, 2).unwrap().shape(), &[0, 3]);
    assert_eq!(e.diagonal(isize::MIN, 0, 1).unwrap().shape(), &[0]);
    assert_eq!(e.diagonal(isize::MAX, 0, 1).unwrap().shape(), &[0]);
    assert_eq!(e.flatten(0, 1).unwrap().shape(), &[0]);
    assert_eq!(e.unsqueeze(2).unwrap().shape(), &[0, usize::MAX, 1]);
    let u = e.unfold(1, 0, 1).unwrap_err();
    assert!(u.to_string().contains("windows"), "{u}");
    assert_eq!(e.unfold(1, 1, 1).unwrap().shape(), &[0, usize::MAX, 1]);
    for v in [e.narrow(1, 5, 3).unwrap(), e.select(1, -1).unwrap()] {
        assert!(v.offset() <= v.storage_nbytes() / 4);
        assert_eq!(v.to_vec::<f32>().unwrap(), Vec::<f32>::new());
    }
}

// Found with the above: `view`/`reshape` to sizes whose product overflows
// panicked in `infer_shape` (an unchecked product).
#[test]
fn view_to_an_overflowing_shape_is_an_element_count_error() {
    let dev = Device::cpu();
    let a = Tensor::zeros(&[4], DType::F32, &dev).unwrap();
    for r in [a.view(&[isize::MAX, 4]), a.reshape(&[isize::MAX, 4])] {
        let e = r.unwrap_err();
        assert!(
            matches!(e, Error::ElementCountMismatch { numel: 4, .. }),
            "{e:?}"
        );
    }
}
