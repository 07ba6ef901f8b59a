//! Tests of `Display for Tensor` against hand-written strings.

use crate::{DType, Device, Result, Tensor};
use alloc::format;
use alloc::string::ToString;

fn dev() -> Device {
    Device::cpu()
}

#[test]
fn integral_floats_print_with_a_trailing_point_and_rows_aligned() -> Result<()> {
    let t = Tensor::arange(0.0f32, 6.0, &dev())?.reshape(&[2, 3])?;
    assert_eq!(
        t.to_string(),
        "tensor([[0., 1., 2.],\n        [3., 4., 5.]])\nshape=[2, 3], dtype=F32, device=Cpu"
    );
    Ok(())
}

#[test]
fn fractional_floats_print_four_decimals_right_aligned() -> Result<()> {
    let t = Tensor::from_slice(&[0.5f32, -1.25, 10.0], &[3], &dev())?;
    assert_eq!(
        t.to_string(),
        "tensor([ 0.5000, -1.2500, 10.0000])\nshape=[3], dtype=F32, device=Cpu"
    );
    Ok(())
}

#[test]
fn tiny_magnitudes_switch_to_scientific_notation() -> Result<()> {
    let t = Tensor::from_slice(&[1e-5f64, 1.0], &[2], &dev())?;
    assert_eq!(
        t.to_string(),
        "tensor([1.0000e-5,  1.0000e0])\nshape=[2], dtype=F64, device=Cpu"
    );
    Ok(())
}

#[test]
fn huge_integral_floats_switch_to_scientific_notation() -> Result<()> {
    let t = Tensor::from_slice(&[1e9f64, 1.0], &[2], &dev())?;
    assert_eq!(
        t.to_string(),
        "tensor([1.0000e9, 1.0000e0])\nshape=[2], dtype=F64, device=Cpu"
    );
    Ok(())
}

#[test]
fn nan_and_infinities_print_by_name() -> Result<()> {
    let t = Tensor::from_slice(
        &[f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1.5],
        &[4],
        &dev(),
    )?;
    assert_eq!(
        t.to_string(),
        "tensor([   nan,    inf,   -inf, 1.5000])\nshape=[4], dtype=F32, device=Cpu"
    );
    Ok(())
}

#[test]
fn integers_print_as_integers() -> Result<()> {
    let t = Tensor::from_slice(&[-3i64, 10, 7], &[3], &dev())?;
    assert_eq!(
        t.to_string(),
        "tensor([-3, 10,  7])\nshape=[3], dtype=I64, device=Cpu"
    );
    Ok(())
}

#[test]
fn bools_print_as_true_and_false() -> Result<()> {
    let t = Tensor::from_slice(&[true, false], &[2], &dev())?;
    assert_eq!(
        t.to_string(),
        "tensor([ true, false])\nshape=[2], dtype=Bool, device=Cpu"
    );
    Ok(())
}

#[test]
fn a_scalar_prints_without_brackets() -> Result<()> {
    let t = Tensor::scalar(2.5f32, &dev())?;
    assert_eq!(
        t.to_string(),
        "tensor(2.5000)\nshape=[], dtype=F32, device=Cpu"
    );
    Ok(())
}

#[test]
fn an_empty_tensor_prints_empty_brackets() -> Result<()> {
    let t = Tensor::zeros(&[2, 0], DType::F32, &dev())?;
    assert_eq!(
        t.to_string(),
        "tensor([])\nshape=[2, 0], dtype=F32, device=Cpu"
    );
    Ok(())
}

#[test]
fn matrices_of_a_3d_tensor_are_separated_by_a_blank_line() -> Result<()> {
    let t = Tensor::arange(0i32, 8, &dev())?.reshape(&[2, 2, 2])?;
    assert_eq!(
        t.to_string(),
        "tensor([[[0, 1],\n         [2, 3]],\n\n        [[4, 5],\n         [6, 7]]])\n\
         shape=[2, 2, 2], dtype=I32, device=Cpu"
    );
    Ok(())
}

#[test]
fn a_view_prints_in_logical_order() -> Result<()> {
    let t = Tensor::arange(0i32, 6, &dev())?.reshape(&[2, 3])?.t()?;
    assert_eq!(
        t.to_string(),
        "tensor([[0, 3],\n        [1, 4],\n        [2, 5]])\nshape=[3, 2], dtype=I32, device=Cpu"
    );
    Ok(())
}

#[test]
fn a_tensor_of_1000_elements_prints_in_full() -> Result<()> {
    let t = Tensor::arange(0i32, 1000, &dev())?;
    let s = t.to_string();
    assert!(!s.contains("..."), "{s}");
    assert!(s.contains(" 999])"), "{s}");
    Ok(())
}

#[test]
fn a_long_vector_is_summarised_to_three_edge_items() -> Result<()> {
    let t = Tensor::arange(0i32, 2000, &dev())?;
    assert_eq!(
        t.to_string(),
        "tensor([   0,    1,    2, ..., 1997, 1998, 1999])\nshape=[2000], dtype=I32, device=Cpu"
    );
    Ok(())
}

#[test]
fn a_large_matrix_is_summarised_in_rows_and_columns() -> Result<()> {
    let t = Tensor::arange(0i32, 2000, &dev())?.reshape(&[40, 50])?;
    let want = "tensor([[   0,    1,    2, ...,   47,   48,   49],
        [  50,   51,   52, ...,   97,   98,   99],
        [ 100,  101,  102, ...,  147,  148,  149],
        ...,
        [1850, 1851, 1852, ..., 1897, 1898, 1899],
        [1900, 1901, 1902, ..., 1947, 1948, 1949],
        [1950, 1951, 1952, ..., 1997, 1998, 1999]])
shape=[40, 50], dtype=I32, device=Cpu";
    assert_eq!(t.to_string(), want);
    Ok(())
}

#[test]
fn short_dims_of_a_large_tensor_are_not_cut() -> Result<()> {
    let t = Tensor::arange(0i32, 2000, &dev())?.reshape(&[2, 1000])?;
    let want = "tensor([[   0,    1,    2, ...,  997,  998,  999],
        [1000, 1001, 1002, ..., 1997, 1998, 1999]])
shape=[2, 1000], dtype=I32, device=Cpu";
    assert_eq!(t.to_string(), want);
    Ok(())
}

#[test]
fn a_tensor_that_requires_grad_says_so() -> Result<()> {
    let t = Tensor::ones(&[2], DType::F32, &dev())?.requires_grad_(true)?;
    assert_eq!(
        t.to_string(),
        "tensor([1., 1.])\nshape=[2], dtype=F32, device=Cpu, requires_grad=true"
    );
    Ok(())
}

#[test]
fn debug_stays_short_for_a_large_tensor() -> Result<()> {
    let t = Tensor::arange(0i32, 2000, &dev())?;
    assert_eq!(format!("{t:?}"), "Tensor([2000], I32, Cpu)");
    Ok(())
}

/// `Display` reads only the entries it shows: a `[1024, 2^30]` view
/// expanded from a column (4 TiB if materialised) prints from a device
/// whose allocator holds 8 KiB. Printing once cut each dim by narrowing and
/// concatenating, which materialised `[6, 2^30]` first (24 GiB).
#[test]
#[cfg_attr(miri, ignore)] // the arena takes a leaked buffer (Miri's leak check)
fn a_huge_expanded_tensor_prints_reading_only_the_shown_entries() -> Result<()> {
    use crate::allocator::ArenaAllocator;
    use crate::shared::Shared;
    let buf: &'static mut [u8] = alloc::boxed::Box::leak(alloc::vec![0u8; 8192].into_boxed_slice());
    let dev = Device::cpu_with_allocator(Shared::new(ArenaAllocator::<16>::new(buf)));
    let t = Tensor::arange(0i32, 1024, &dev)?
        .reshape(&[1024, 1])?
        .expand(&[1024, 1 << 30][..])?;
    let row = |v: &str| format!("[{v:>4}, {v:>4}, {v:>4}, ..., {v:>4}, {v:>4}, {v:>4}]");
    let want = format!(
        "tensor([{},\n        {},\n        {},\n        ...,\n        {},\n        {},\n        {}])\nshape=[1024, 1073741824], dtype=I32, device=Cpu",
        row("0"),
        row("1"),
        row("2"),
        row("1021"),
        row("1022"),
        row("1023")
    );
    assert_eq!(t.to_string(), want);
    Ok(())
}
