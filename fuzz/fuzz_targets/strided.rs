//! Fuzz target `strided`: argument validation of `as_strided` and
//! `view_dtype`, with sizes, strides and offsets up to `usize::MAX`.
//!
//! Checks:
//! * `as_strided(size, stride, offset)` succeeds exactly when the layout fits
//!   the storage (decided independently here in 128-bit arithmetic), and the
//!   view then reads the elements at `offset + sum(i_k * stride_k)`;
//! * `view_dtype` keeps the byte stream of the tensor (logical order) and
//!   stays inside the storage;
//! * writes through such views (`fill_`, overlapping positions included)
//!   touch exactly the view's elements, leave one value in all of them and
//!   bump the version once, or are refused with nothing changed;
//! * every error has a message; no panic.
#![no_main]

mod common;

use common::{MAX_NUMEL, Reader, check_err, check_tensor, gather, ok, storage_bytes};
use kael_core::{DType, Device, Error, Tensor};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| run(data));

fn run(data: &[u8]) {
    let dev = Device::cpu();
    let mut r = Reader::new(data);
    // A storage of distinct bytes, viewed as some dtype.
    let nbytes = 16 * (r.u8() as usize % 5);
    let raw: Vec<u8> = (0..nbytes)
        .map(|i| (i as u8).wrapping_mul(37).wrapping_add(1))
        .collect();
    let base = Tensor::from_slice(&raw, &[nbytes], &dev).unwrap();
    let mut cur = match ok(base.view_dtype(r.dtype())) {
        Some(t) => t,
        None => base,
    };
    check_tensor(&cur);
    let mut steps = 0;
    while !r.done() && steps < 16 {
        steps += 1;
        let next = match r.u8() % 6 {
            0 | 1 => as_strided(&mut r, &cur),
            2 => view_dtype(&mut r, &cur),
            3 | 4 => wide_view(&mut r, &cur),
            _ => {
                write_through(&mut r, &cur);
                None
            }
        };
        if let Some(t) = next {
            check_tensor(&t);
            if t.numel() <= MAX_NUMEL {
                cur = t;
            }
        }
    }
}

/// `Some(n)` when the product fits in `usize`.
fn numel(size: &[usize]) -> Option<usize> {
    size.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

fn as_strided(r: &mut Reader, x: &Tensor) -> Option<Tensor> {
    let rank = (r.u8() % 10) as usize; // up to 9: past MAX_RANK too
    let size: Vec<usize> = (0..rank).map(|_| r.wide()).collect();
    let srank = if r.u8() % 16 == 0 { rank + 1 } else { rank };
    let stride: Vec<usize> = (0..srank).map(|_| r.wide()).collect();
    let offset = r.wide();
    let storage_len = x.storage_nbytes() / x.element_size();

    // Independent decision: does the layout fit?
    let has_zero = size.contains(&0);
    let reach: u128 = if has_zero {
        offset as u128
    } else {
        size.iter()
            .zip(&stride)
            .fold(offset as u128, |acc, (&d, &s)| {
                acc.saturating_add((d as u128 - 1).saturating_mul(s as u128))
            })
            .saturating_add(1)
    };
    // (A tensor's element count must fit in usize.)
    let fits = srank == rank
        && rank <= kael_core::MAX_RANK
        && (has_zero || numel(&size).is_some())
        && if has_zero {
            offset <= storage_len
        } else {
            reach <= storage_len as u128
        };
    // Sizes whose non-zero product overflows usize, with a zero among them,
    // may be refused or accepted.
    let nonzero: Vec<usize> = size.iter().copied().filter(|&d| d != 0).collect();
    let ambiguous = has_zero && numel(&nonzero).is_none();

    let res = x.as_strided(&size, &stride, offset);
    match &res {
        Ok(v) => {
            assert!(
                fits || ambiguous,
                "as_strided accepted {size:?} {stride:?} +{offset} over {storage_len}"
            );
            check_tensor(v);
            assert_eq!(
                (v.shape(), &v.strides()[..], v.offset()),
                (&size[..], &stride[..], offset)
            );
            check_values(x, v);
        }
        Err(e) => {
            check_err(e);
            assert!(
                !fits || ambiguous,
                "as_strided refused a fitting layout {size:?} {stride:?} +{offset} over {storage_len}: {e}"
            );
            if srank == rank && rank <= kael_core::MAX_RANK && !ambiguous {
                assert!(
                    matches!(e, Error::OutOfBounds { .. } | Error::InvalidArgument { .. }),
                    "unexpected error kind {e:?}"
                );
            }
        }
    }
    res.ok()
}

/// The view reads element `offset + sum(i_k * stride_k)` of the storage, for
/// every row-major multi-index `i` (computed here by hand).
fn check_values(x: &Tensor, v: &Tensor) {
    let n = v.numel();
    if n > MAX_NUMEL {
        return;
    }
    let Some(raw) = storage_bytes(x) else { return };
    let es = v.element_size();
    let (shape, strides, off) = (v.shape().to_vec(), v.strides().to_vec(), v.offset());
    let mut want = Vec::with_capacity(n * es);
    for flat in 0..n {
        let mut rem = flat;
        let mut o = off;
        for k in (0..shape.len()).rev() {
            o += (rem % shape[k]) * strides[k];
            rem /= shape[k];
        }
        want.extend_from_slice(&raw[o * es..(o + 1) * es]);
    }
    assert_eq!(gather(v).unwrap(), want, "gathered view values");
    let c = v.deep_clone().unwrap();
    assert_eq!(
        storage_bytes(&c).unwrap(),
        want,
        "deep_clone of a strided view"
    );
}

/// Every other view, with arguments up to `usize::MAX`, on layouts made by
/// `as_strided` (huge strides on size-1 dims, huge sizes next to a 0).
fn wide_view(r: &mut Reader, x: &Tensor) -> Option<Tensor> {
    let wide_i = |r: &mut Reader| -> isize {
        let w = r.wide() as isize;
        if r.bool() { w } else { w.wrapping_neg() }
    };
    let spec = |r: &mut Reader| -> Vec<isize> {
        (0..r.u8() % 4)
            .map(|_| {
                if r.u8() % 4 == 0 {
                    -1
                } else {
                    r.wide() as isize
                }
            })
            .collect()
    };
    let res = match r.u8() % 13 {
        0 => x.narrow(r.dim(), r.wide(), r.wide()),
        1 => x.slice(r.dim(), wide_i(r), wide_i(r), r.wide()),
        2 => x.select(r.dim(), wide_i(r)),
        3 => x.unsqueeze(r.dim()),
        4 => x.unfold(r.dim(), r.wide(), r.wide()),
        5 => x.diagonal(wide_i(r), r.dim(), r.dim()),
        6 => x.expand(&spec(r)),
        7 => x.view(&spec(r)),
        8 => x.reshape(&spec(r)),
        9 => x.flatten(r.dim(), r.dim()),
        10 => x.squeeze(),
        11 => x.transpose(r.dim(), r.dim()),
        _ => x.permute(&(0..x.rank()).rev().map(|d| d as isize).collect::<Vec<_>>()),
    };
    match &res {
        Ok(v) => {
            check_tensor(v);
            if v.shares_storage(x) {
                check_values(x, v);
            }
        }
        Err(e) => check_err(e),
    }
    res.ok()
}

fn view_dtype(r: &mut Reader, x: &Tensor) -> Option<Tensor> {
    let dt = r.dtype();
    let res = x.view_dtype(dt);
    match &res {
        Ok(v) => {
            check_tensor(v);
            assert_eq!(v.dtype(), dt);
            assert!(v.shares_storage(x));
            // Same bytes, same order.
            if let (Some(a), Some(b)) = (gather(x), gather(v)) {
                assert_eq!(
                    a,
                    b,
                    "view_dtype({dt:?}) changed the byte stream of {:?}/{:?}",
                    x.layout(),
                    v.layout()
                );
            }
            let old = x.element_size();
            let new = dt.size_in_bytes();
            if x.rank() > 0 && old != new {
                let last = x.rank() - 1;
                assert_eq!(
                    v.shape()[last] as u128 * new as u128,
                    x.shape()[last] as u128 * old as u128
                );
            }
        }
        Err(e) => check_err(e),
    }
    res.ok()
}

fn write_through(r: &mut Reader, v: &Tensor) {
    let before = storage_bytes(v).unwrap_or_default();
    let version = v.version();
    let value = r.value();
    // fill_ accepts overlapping positions, as PyTorch (stride-0 dims,
    // `unfold` windows, sliding `as_strided` views: NOTE [Overlapping
    // fills]); it refuses only many more positions than the storage has
    // elements, or an overlapping view in an autograd graph.
    let distinct: Vec<usize> = v
        .shape()
        .iter()
        .zip(v.strides().iter())
        .map(|(&n, &st)| if st == 0 { n.min(1) } else { n })
        .collect();
    let overlap = kael_core::Layout::new(&distinct, &v.strides(), v.layout().offset())
        .map_or(true, |l| l.has_internal_overlap());
    match v.fill_(value) {
        Ok(()) => {
            assert_eq!(v.version(), version + 1);
            let after = storage_bytes(v).unwrap_or_default();
            let es = v.element_size();
            let mut touched = vec![false; before.len() / es];
            v.layout().for_each_offset(|o| touched[o] = true);
            for (i, t) in touched.iter().enumerate() {
                if !t {
                    assert_eq!(
                        before[i * es..(i + 1) * es],
                        after[i * es..(i + 1) * es],
                        "fill_ wrote element {i} outside the view"
                    );
                }
            }
            // Every element now holds one value.
            if let Some(g) = gather(v) {
                if let Some(first) = g.get(..es) {
                    for c in g.chunks(es) {
                        assert_eq!(c, first, "fill_ left different values");
                    }
                }
            }
        }
        Err(e) => {
            check_err(&e);
            assert_eq!(
                storage_bytes(v).unwrap_or_default(),
                before,
                "refused fill_ changed bytes"
            );
            assert_eq!(v.version(), version);
            if !overlap && v.dtype() != DType::Bool {
                // The only reasons to refuse a fill on a plain host tensor.
                assert!(
                    matches!(
                        e,
                        Error::InternalOverlap { .. }
                            | Error::InvalidArgument { .. }
                            | Error::UnsupportedDType { .. }
                    ),
                    "{e:?}"
                );
            }
        }
    }
}
