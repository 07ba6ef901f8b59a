//! The internal-overlap check of in-place ops (rule 1 of NOTE [In-place
//! rules]) decides from shape and strides, without allocating per element:
//! a huge logical size is refused as fast as a small one, never aborting
//! the process for memory.

use kael_core::{DType, Device, Error, Layout, Tensor};

#[test]
fn an_in_place_op_on_a_huge_overlapping_view_is_refused_without_allocating() {
    // 2^40 positions over 2^21 bytes: enumerating the offsets would need
    // 8 TiB (the process aborted with "memory allocation failed").
    let x = Tensor::zeros(&[1 << 21], DType::U8, &Device::cpu()).unwrap();
    let v = x.as_strided(&[1 << 20, 1 << 20], &[1, 1], 0).unwrap();
    let err = v.fill_(1.0).unwrap_err();
    assert!(
        matches!(err, Error::InternalOverlap { op: "fill_" }),
        "{err}"
    );
    assert_eq!(x.version(), 0);
}

#[test]
fn a_stride_zero_dimension_overlaps() {
    assert!(
        Layout::new(&[3, 1 << 40], &[1, 0], 0)
            .unwrap()
            .has_internal_overlap()
    );
}

#[test]
fn a_huge_view_with_separated_strides_does_not_overlap() {
    assert!(
        !Layout::new(&[1 << 20, 1 << 20], &[1 << 20, 1], 0)
            .unwrap()
            .has_internal_overlap()
    );
}

#[test]
fn a_small_interleaved_view_is_decided_exactly() {
    // strides 2 and 3 over 3x3: offsets 0 2 4 3 5 7 6 8 10, all distinct,
    // though the stride test cannot tell (3 <= 2 * 2)
    let x = Tensor::zeros(&[11], DType::F32, &Device::cpu()).unwrap();
    let v = x.as_strided(&[3, 3], &[3, 2], 0).unwrap();
    v.fill_(1.0).unwrap();
    assert_eq!(x.sum_all().unwrap().item::<f32>().unwrap(), 9.0);
    // and a small one that does overlap: 0 2 4 / 4 6 8
    assert!(
        Layout::new(&[2, 3], &[4, 2], 0)
            .unwrap()
            .has_internal_overlap()
    );
}

#[test]
fn a_large_interleaved_view_is_conservatively_refused_for_read_modify_write() {
    // offsets 2j (even) and 3 + 2j (odd) never meet, but the stride test
    // cannot tell (3 <= 2 * 99), and there are more positions than the
    // exact check enumerates: reported as overlapping (as documented on
    // `Layout::has_internal_overlap`), so the write is refused, not risked
    let x = Tensor::zeros(&[202], DType::F32, &Device::cpu()).unwrap();
    let v = x.as_strided(&[2, 100], &[3, 2], 0).unwrap();
    const { assert!(200 > kael_core::layout::OVERLAP_EXACT_LIMIT) };
    assert!(matches!(
        v.add_(&Tensor::scalar(1.0f32, &Device::cpu()).unwrap()),
        Err(Error::InternalOverlap { .. })
    ));
    // fill_ takes any overlapping destination whose positions are not many
    // more than its storage's elements (NOTE [In-place rules]): all 200
    v.fill_(1.0).unwrap();
    assert_eq!(x.sum_all().unwrap().item::<f32>().unwrap(), 200.0);
    x.zero_().unwrap();
    // the same layout with few positions is decided exactly: writable
    x.as_strided(&[2, 10], &[3, 2], 0)
        .unwrap()
        .fill_(1.0)
        .unwrap();
}
