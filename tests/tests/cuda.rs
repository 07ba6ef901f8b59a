//! The CUDA backend (feature `cuda`) against the reference CPU backend.
//!
//! Every test opens CUDA device 0. Without a driver (or without a GPU) it
//! prints one line, `skipped: no CUDA driver found (...)`, and passes, so
//! `cargo test --features cuda` runs anywhere. With `KAEL_REQUIRE_CUDA=1`
//! (set by `scripts/gpu-check.sh`) a missing GPU fails instead.
//!
//! The reference values come from the reference CPU backend (`Device::cpu()`),
//! which the other test files check against numpy; each CUDA result is
//! compared with the same op run there on the same inputs.
#![cfg(feature = "cuda")]

mod common;
use common::{assert_close, assert_close64};
use kael_core::ops::{BinaryOp, CmpOp, Domain, UnaryOp};
use kael_core::testing::{GradcheckOptions, describe, gradcheck};
use kael_core::{DType, Device, DeviceKind, Error, Result, Tensor, no_grad};

fn cpu() -> Device {
    Device::cpu()
}

/// Deterministic values in about [-2, 2), no two equal in a short run.
fn pseudo(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i + seed) * 7919 + seed * 31) % 1009) as f32 / 252.25 - 2.0)
        .collect()
}

/// The same data on the CPU and on `dev`.
fn pair(data: &[f32], shape: &[usize], dev: &Device) -> Result<(Tensor, Tensor)> {
    let c = Tensor::from_slice(data, shape, &cpu())?;
    let g = c.to_device(dev)?;
    Ok((c, g))
}

/// `gpu`'s values (any float dtype) against `cpu`'s, as f32.
#[track_caller]
fn same(cpu_t: &Tensor, gpu_t: &Tensor, tol: f32) {
    assert_eq!(gpu_t.shape(), cpu_t.shape());
    let g = gpu_t
        .to_device(&cpu())
        .and_then(|t| t.to_dtype(DType::F32))
        .and_then(|t| t.to_vec::<f32>())
        .unwrap();
    let c = cpu_t
        .to_dtype(DType::F32)
        .and_then(|t| t.to_vec::<f32>())
        .unwrap();
    assert_close(&g, &c, tol);
}

/// Exact equality of any dtype, compared as f64 (NaN equals NaN).
#[track_caller]
fn same_exact(cpu_t: &Tensor, gpu_t: &Tensor) {
    assert_eq!(gpu_t.shape(), cpu_t.shape());
    assert_eq!(gpu_t.dtype(), cpu_t.dtype());
    let g = gpu_t
        .to_device(&cpu())
        .and_then(|t| t.to_dtype(DType::F64))
        .and_then(|t| t.to_vec::<f64>())
        .unwrap();
    let c = cpu_t
        .to_dtype(DType::F64)
        .and_then(|t| t.to_vec::<f64>())
        .unwrap();
    assert_close64(&g, &c, 0.0);
}

// ------------------------------------------------------------- device

test_device!(cuda: device_is_cuda_zero_with_device_memory, |dev| {
    assert_eq!(dev.kind(), DeviceKind::Cuda(0));
    assert!(!dev.is_host_memory());
    let t = Tensor::zeros(&[3], DType::F32, dev)?;
    assert_eq!(t.device().kind(), DeviceKind::Cuda(0));
    Ok(())
});

test_device!(cuda: opening_device_zero_twice_gives_the_same_device, |dev| {
    let again = kael_host::cuda::device(0).unwrap();
    let a = Tensor::ones(&[2], DType::F32, dev)?;
    let b = Tensor::ones(&[2], DType::F32, &again)?;
    assert_eq!(a.add(&b)?.to_vec::<f32>()?, [2.0, 2.0]);
    Ok(())
});

test_device!(cuda: host_access_to_device_storage_is_refused, |dev| {
    let t = Tensor::ones(&[4], DType::F32, dev)?;
    let e = t.storage().read("test").err().unwrap();
    assert!(matches!(
        e,
        Error::Unsupported {
            device: DeviceKind::Cuda(0),
            ..
        }
    ));
    Ok(())
});

test_device!(cuda: mixing_cpu_and_cuda_tensors_is_a_device_mismatch, |dev| {
    let a = Tensor::ones(&[2], DType::F32, dev)?;
    let b = Tensor::ones(&[2], DType::F32, &cpu())?;
    assert!(matches!(a.add(&b), Err(Error::DeviceMismatch { .. })));
    Ok(())
});

// ----------------------------------------------------- copies, memory

test_device!(cuda: to_device_round_trips_every_dtype, |dev| {
    let v = [-3.5f64, -1.0, 0.0, 0.25, 2.0, 7.0, 255.0];
    for dt in DType::ALL {
        let c = Tensor::from_slice(&v, &[7], &cpu())?.to_dtype(dt)?;
        let back = c.to_device(dev)?.to_device(&cpu())?;
        same_exact(&c, &back);
    }
    Ok(())
});

test_device!(cuda: to_vec_of_a_strided_view_reads_logical_order, |dev| {
    let t = Tensor::arange(0i32, 12, dev)?.reshape(&[3, 4])?.t()?;
    assert_eq!(t.to_vec::<i32>()?, [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]);
    Ok(())
});

test_device!(cuda: deep_clone_allocates_only_the_views_elements, |dev| {
    let big = Tensor::arange(0.0f32, 1000.0, dev)?;
    let c = big.narrow(0, 10, 2)?.deep_clone()?;
    assert_eq!((c.storage_nbytes(), c.offset()), (8, 0));
    assert_eq!(c.to_vec::<f32>()?, [10.0, 11.0]);
    Ok(())
});

test_device!(cuda: writing_a_deep_copy_never_changes_the_original, |dev| {
    let a = Tensor::arange(0.0f32, 6.0, dev)?.reshape(&[2, 3])?;
    for src in [a.clone(), a.t()?, a.narrow(1, 1, 2)?] {
        let before = src.to_vec::<f32>()?;
        let c = src.deep_clone()?;
        assert!(!c.shares_storage(&a));
        c.fill_(-7.0)?;
        c.add_(&Tensor::scalar(1.0f32, dev)?)?;
        assert_eq!(src.to_vec::<f32>()?, before);
        assert!(c.to_vec::<f32>()?.iter().all(|&x| x == -6.0));
    }
    Ok(())
});

test_device!(cuda: move_to_moves_every_handle_and_keeps_older_views, |dev| {
    let a = Tensor::arange(0.0f32, 4.0, &cpu())?;
    let handle = a.clone();
    let old_view = a.narrow(0, 1, 2)?;
    a.move_to_(dev)?;
    assert_eq!(handle.device().kind(), DeviceKind::Cuda(0));
    assert_eq!(handle.to_vec::<f32>()?, [0.0, 1.0, 2.0, 3.0]);
    assert!(old_view.device().is_host_memory());
    Ok(())
});

test_device!(cuda: memory_figures_count_live_tensors, |dev| {
    let b = kael_host::cuda::backend(0).unwrap();
    let t = Tensor::zeros(&[3 << 18], DType::F32, dev)?; // 3 MiB
    let s = b.memory_stats();
    assert!(s.in_use >= 3 << 20, "{s:?}");
    assert!(s.peak >= s.in_use && s.reserved >= s.in_use, "{s:?}");
    assert_eq!(dev.allocator().name(), "cuda-caching");
    drop(t);
    let after = b.memory_stats();
    assert!(
        after.cached >= 3 << 20 || after.reused > s.reused,
        "{after:?}"
    );
    Ok(())
});

test_device!(cuda: zeros_and_full_and_eye_fill_device_memory, |dev| {
    // the cache hands out used blocks: zeros must clear them
    drop(Tensor::full(&[1000], 5.0, DType::F32, dev)?);
    assert!(
        Tensor::zeros(&[1000], DType::F32, dev)?
            .to_vec::<f32>()?
            .iter()
            .all(|&x| x == 0.0)
    );
    for dt in DType::ALL {
        same_exact(
            &Tensor::full(&[5], 3.0, dt, &cpu())?,
            &Tensor::full(&[5], 3.0, dt, dev)?,
        );
    }
    same_exact(
        &Tensor::eye(4, DType::F32, &cpu())?,
        &Tensor::eye(4, DType::F32, dev)?,
    );
    Ok(())
});

// -------------------------------------------------------- elementwise

type Op = Box<dyn Fn(&Tensor) -> Result<Tensor>>;
type OpB = Box<dyn Fn(&Tensor, &Tensor) -> Result<Tensor>>;
type Op2 = fn(&Tensor, &Tensor) -> Result<Tensor>;

/// Every float unary op of the op table (NOTE [Op table]), with the
/// scalar forms, on inputs moved into each case's domain.
fn float_unary() -> Vec<(String, Op)> {
    let mut v: Vec<(String, Op)> = Vec::new();
    for c in UnaryOp::CASES {
        let f = c.f;
        let name = format!("{} {}", c.op, c.args);
        v.push(match c.domain {
            Domain::Positive => (name, Box::new(move |t| f(&t.abs()?.add_scalar(0.25)?))),
            Domain::NonZero => (name, Box::new(move |t| f(&t.add_scalar(5.0)?))),
            Domain::Unit => (name, Box::new(move |t| f(&t.tanh()?.mul_scalar(0.9)?))),
            _ => (name, Box::new(f)),
        });
    }
    v.push(("add_scalar".into(), Box::new(|t| t.add_scalar(0.75))));
    v.push(("mul_scalar".into(), Box::new(|t| t.mul_scalar(-3.0))));
    v
}

test_device!(cuda: float_unary_ops_match_the_cpu_on_strided_input, |dev| {
    let (c, g) = pair(&pseudo(60, 1), &[6, 10], dev)?;
    // transposed and stepped: the strided path
    let (c, g) = (c.t()?.slice(0, 1, 10, 2)?, g.t()?.slice(0, 1, 10, 2)?);
    for (name, f) in float_unary() {
        let (rc, rg) = (f(&c)?, f(&g)?);
        println!("{name}");
        same(&rc, &rg, 2e-6);
    }
    Ok(())
});

test_device!(cuda: half_precision_unary_ops_match_the_cpu, |dev| {
    for dt in [DType::F16, DType::BF16, DType::F64] {
        let (c, g) = pair(&pseudo(40, 2), &[40], dev)?;
        let (c, g) = (c.to_dtype(dt)?, g.to_dtype(dt)?);
        for (name, f) in float_unary() {
            println!("{name} {dt:?}");
            // one rounding of the element type apart at most
            let tol = if dt == DType::F64 { 1e-6 } else { 1e-2 };
            same(&f(&c)?, &f(&g)?, tol);
        }
    }
    Ok(())
});

test_device!(cuda: binary_ops_broadcast_like_the_cpu, |dev| {
    let (a, ga) = pair(&pseudo(12, 3), &[3, 4], dev)?;
    let (b, gb) = pair(&pseudo(4, 4), &[4, 1], dev)?;
    let (a, ga) = (a.t()?, ga.t()?); // [4, 3] transposed
    // every float binary op of the op table, divisors moved away from 0
    let ops: Vec<(&str, OpB)> = BinaryOp::CASES
        .iter()
        .filter(|c| c.floats)
        .map(|c| {
            let f = c.f;
            let op: OpB = match c.domains {
                (Domain::Positive, _) => Box::new(move |x, y| f(&x.abs()?.add_scalar(0.25)?, y)),
                (_, Domain::NonZero) => Box::new(move |x, y| f(x, &y.add_scalar(3.0)?)),
                _ => Box::new(f),
            };
            (c.op, op)
        })
        .collect();
    for (name, f) in ops {
        println!("{name}");
        same(&f(&a, &b)?, &f(&ga, &gb)?, 2e-6);
    }
    Ok(())
});

test_device!(cuda: integer_arithmetic_wraps_as_on_the_cpu, |dev| {
    let v = [i32::MAX, i32::MIN, -7, 0, 5];
    let c = Tensor::from_slice(&v, &[5], &cpu())?;
    let g = c.to_device(dev)?;
    let one = |d: &Device| Tensor::from_slice(&[1i32], &[1], d);
    same_exact(&c.add(&one(&cpu())?)?, &g.add(&one(dev)?)?);
    same_exact(&c.mul(&c)?, &g.mul(&g)?);
    same_exact(&c.neg()?, &g.neg()?);
    same_exact(&c.abs()?, &g.abs()?);
    same_exact(
        &c.clamp(Some(-3.0), Some(4.0))?,
        &g.clamp(Some(-3.0), Some(4.0))?,
    );
    let u = Tensor::from_slice(&[250u8, 3, 0], &[3], &cpu())?;
    let gu = u.to_device(dev)?;
    same_exact(&u.add(&u)?, &gu.add(&gu)?);
    Ok(())
});

test_device!(cuda: comparisons_and_where_match_the_cpu, |dev| {
    let (a, ga) = pair(&[1.0, f32::NAN, 3.0, -1.0], &[4], dev)?;
    let (b, gb) = pair(&[1.0, 2.0, 2.0, 0.0], &[4], dev)?;
    let cmps: Vec<Op2> = CmpOp::CASES.iter().map(|c| c.f).collect();
    for f in cmps {
        assert_eq!(f(&ga, &gb)?.to_vec::<bool>()?, f(&a, &b)?.to_vec::<bool>()?);
    }
    let cond = a.gt(&b)?;
    let gcond = ga.gt(&gb)?;
    same_exact(&cond.where_cond(&a, &b)?, &gcond.where_cond(&ga, &gb)?);
    Ok(())
});

test_device!(cuda: casts_between_every_pair_of_dtypes_match_the_cpu, |dev| {
    let v = [
        -300.7f64,
        -2.5,
        -0.0,
        0.3,
        1.5,
        2.5,
        254.9,
        70000.0,
        1e10,
        f64::NAN,
    ];
    for from in DType::ALL {
        let c = Tensor::from_slice(&v, &[10], &cpu())?.to_dtype(from)?;
        let g = c.to_device(dev)?;
        for to in DType::ALL {
            let (rc, rg) = (c.to_dtype(to)?, g.to_dtype(to)?);
            assert_eq!(rg.dtype(), to);
            let (x, y) = (
                rc.to_dtype(DType::F64)?.to_vec::<f64>()?,
                rg.to_device(&cpu())?
                    .to_dtype(DType::F64)?
                    .to_vec::<f64>()?,
            );
            assert!(
                x.iter()
                    .zip(&y)
                    .all(|(p, q)| p == q || (p.is_nan() && q.is_nan())),
                "{from:?} -> {to:?}: cpu {x:?}, cuda {y:?}"
            );
        }
    }
    Ok(())
});

test_device!(cuda: in_place_ops_on_views_write_through, |dev| {
    let (c, g) = pair(&pseudo(12, 5), &[3, 4], dev)?;
    for t in [&c, &g] {
        t.narrow(1, 1, 2)?
            .mul_(&Tensor::scalar(2.0f32, &t.device())?)?;
        t.select(0, 2)?.fill_(9.0)?;
        t.clamp_(Some(-1.0), Some(3.0))?;
    }
    same(&c, &g, 0.0);
    Ok(())
});

// --------------------------------------------------------- reductions

test_device!(cuda: reductions_match_the_cpu_short_and_long, |dev| {
    let (c, g) = pair(&pseudo(4 * 5 * 70, 6), &[4, 5, 70], dev)?;
    let (c, g) = (c.permute(&[2, 0, 1])?, g.permute(&[2, 0, 1])?); // [70, 4, 5], strided
    for dims in [&[0isize][..], &[1], &[2], &[0, 2], &[0, 1, 2]] {
        same(&c.sum(dims, false)?, &g.sum(dims, false)?, 1e-5);
        same(&c.mean(dims, true)?, &g.mean(dims, true)?, 1e-5);
    }
    for d in [0isize, 1, 2] {
        same(&c.max_dim(d, false)?, &g.max_dim(d, false)?, 0.0);
        same(&c.min_dim(d, true)?, &g.min_dim(d, true)?, 0.0);
        same(
            &c.mul_scalar(0.5)?.prod_dim(d, false)?,
            &g.mul_scalar(0.5)?.prod_dim(d, false)?,
            1e-5,
        );
    }
    Ok(())
});

test_device!(cuda: integer_sums_are_exact_i64, |dev| {
    let big = (1i64 << 53) + 1;
    let c = Tensor::from_slice(&[big, 0, 1, 2], &[4], &cpu())?;
    let s = c.to_device(dev)?.sum_all()?;
    assert_eq!(s.dtype(), DType::I64);
    assert_eq!(s.item::<i64>()?, big + 3);
    let u = Tensor::from_slice(&[200u8; 300], &[300], dev)?;
    same_exact(
        &Tensor::from_slice(&[200u8; 300], &[300], &cpu())?.sum_all()?,
        &u.sum_all()?,
    );
    Ok(())
});

test_device!(cuda: max_and_argmax_propagate_nan_and_take_the_first_tie, |dev| {
    let mut v = vec![1.0f32; 300];
    v[7] = 5.0;
    v[200] = 5.0; // tie: the first wins
    v[250] = f32::NAN;
    let mut w = vec![2.0f32; 300];
    w[3] = -1.0;
    w[100] = -1.0;
    v.extend(w);
    let (c, g) = pair(&v, &[2, 300], dev)?;
    same_exact(&c.argmax(1, false)?, &g.argmax(1, false)?);
    same_exact(&c.argmin(1, true)?, &g.argmin(1, true)?);
    same_exact(&c.argmax(0, false)?, &g.argmax(0, false)?);
    same(&c.max_dim(1, false)?, &g.max_dim(1, false)?, 0.0);
    assert!(g.max_dim(1, false)?.to_vec::<f32>()?[0].is_nan());
    Ok(())
});

test_device!(cuda: softmax_and_log_softmax_match_the_cpu, |dev| {
    let (c, g) = pair(&pseudo(3 * 300, 7), &[3, 300], dev)?;
    let (c, g) = (c.mul_scalar(10.0)?, g.mul_scalar(10.0)?);
    for d in [0isize, 1] {
        same(&c.softmax(d)?, &g.softmax(d)?, 1e-6);
        same(&c.log_softmax(d)?, &g.log_softmax(d)?, 1e-5);
        same(&c.t()?.softmax(d)?, &g.t()?.softmax(d)?, 1e-6);
        same(&c.logsumexp(d, false)?, &g.logsumexp(d, false)?, 1e-5);
    }
    let (h, gh) = (c.to_dtype(DType::BF16)?, g.to_dtype(DType::BF16)?);
    same(&h.softmax(1)?, &gh.softmax(1)?, 1e-2);
    Ok(())
});

// ------------------------------------------------------------ indexing

test_device!(cuda: index_select_gather_and_embedding_match_the_cpu, |dev| {
    let (w, gw) = pair(&pseudo(5 * 6, 8), &[5, 6], dev)?;
    let ids = Tensor::from_slice(&[4i64, 0, 4, 2], &[4], &cpu())?;
    let gids = ids.to_device(dev)?;
    same(&w.index_select(0, &ids)?, &gw.index_select(0, &gids)?, 0.0);
    let ids32 = ids.to_dtype(DType::I32)?;
    same(
        &w.t()?.index_select(1, &ids32)?,
        &gw.t()?.index_select(1, &ids32.to_device(dev)?)?,
        0.0,
    );
    same(
        &Tensor::embedding(&w, &ids)?,
        &Tensor::embedding(&gw, &gids)?,
        0.0,
    );
    let ix = Tensor::from_slice(&[0i64, 5, 1, 1, 3, 2, 0, 0], &[2, 4], &cpu())?;
    let (w2, gw2) = (w.narrow(0, 0, 2)?, gw.narrow(0, 0, 2)?);
    same(
        &w2.gather(1, &ix)?,
        &gw2.gather(1, &ix.to_device(dev)?)?,
        0.0,
    );
    Ok(())
});

test_device!(
    cuda: index_add_and_scatter_add_accumulate_repeats_like_the_cpu,
    |dev| {
        let (base, gbase) = pair(&pseudo(5 * 3, 9), &[5, 3], dev)?;
        let (src, gsrc) = pair(&pseudo(4 * 3, 10), &[4, 3], dev)?;
        let ids = Tensor::from_slice(&[1i64, 3, 1, 1], &[4], &cpu())?;
        same(
            &base.index_add(0, &ids, &src)?,
            &gbase.index_add(0, &ids.to_device(dev)?, &gsrc)?,
            1e-6,
        );
        let ix = Tensor::from_slice(&[0i64, 2, 2, 1, 1, 1], &[2, 3], &cpu())?;
        same(
            &base.scatter_add(0, &ix, &src)?,
            &gbase.scatter_add(0, &ix.to_device(dev)?, &gsrc)?,
            1e-6,
        );
        same(
            &base.t()?.scatter_add(1, &ix.t()?, &src.t()?)?,
            &gbase
                .t()?
                .scatter_add(1, &ix.to_device(dev)?.t()?, &gsrc.t()?)?,
            1e-6,
        );
        Ok(())
    }
);

test_device!(cuda: a_bad_index_is_an_error_naming_it, |dev| {
    let w = Tensor::ones(&[3, 2], DType::F32, dev)?;
    let ids = Tensor::from_slice(&[0i64, 3], &[2], dev)?;
    let e = w.index_select(0, &ids).unwrap_err();
    assert!(
        matches!(
            e,
            Error::IndexOutOfRange {
                index: 3,
                size: 3,
                ..
            }
        ),
        "{e:?}"
    );
    let neg = Tensor::from_slice(&[-1i64], &[1, 1], dev)?;
    assert!(matches!(
        w.gather(0, &neg),
        Err(Error::IndexOutOfRange { index: -1, .. })
    ));
    Ok(())
});

test_device!(cuda: cat_and_stack_match_the_cpu, |dev| {
    let (a, ga) = pair(&pseudo(6, 11), &[2, 3], dev)?;
    let (b, gb) = pair(&pseudo(4, 12), &[2, 2], dev)?;
    same(
        &Tensor::cat(&[&a, &b], 1)?,
        &Tensor::cat(&[&ga, &gb], 1)?,
        0.0,
    );
    same(
        &Tensor::stack(&[&a, &a.t()?.t()?], 0)?,
        &Tensor::stack(&[&ga, &ga.t()?.t()?], 0)?,
        0.0,
    );
    Ok(())
});

// -------------------------------------------------------------- matmul

test_device!(cuda: matmul_f32_matches_the_cpu_for_every_layout, |dev| {
    let (a, ga) = pair(&pseudo(33 * 47, 13), &[33, 47], dev)?;
    let (b, gb) = pair(&pseudo(47 * 29, 14), &[47, 29], dev)?;
    same(&a.matmul(&b)?, &ga.matmul(&gb)?, 1e-4);
    // transposed operands
    same(&b.t()?.matmul(&a.t()?)?, &gb.t()?.matmul(&ga.t()?)?, 1e-4);
    // a column slice (leading dimension larger than the width)
    let (bs, gbs) = (b.narrow(1, 3, 10)?, gb.narrow(1, 3, 10)?);
    same(&a.matmul(&bs)?, &ga.matmul(&gbs)?, 1e-4);
    // stepped columns: cuBLAS cannot read it, copied first
    let (bst, gbst) = (b.slice(1, 0, 29, 3)?, gb.slice(1, 0, 29, 3)?);
    same(&a.matmul(&bst)?, &ga.matmul(&gbst)?, 1e-4);
    // vector products
    let (v, gv) = (a.select(0, 3)?, ga.select(0, 3)?);
    same(&v.matmul(&b)?, &gv.matmul(&gb)?, 1e-4);
    same(
        &a.matmul(&b.select(1, 2)?)?,
        &ga.matmul(&gb.select(1, 2)?)?,
        1e-4,
    );
    Ok(())
});

test_device!(cuda: batched_matmul_broadcasts_like_the_cpu, |dev| {
    let (a, ga) = pair(&pseudo(2 * 5 * 7, 15), &[2, 1, 5, 7], dev)?;
    let (b, gb) = pair(&pseudo(3 * 7 * 4, 16), &[3, 7, 4], dev)?;
    same(&a.matmul(&b)?, &ga.matmul(&gb)?, 1e-5);
    same(
        &a.matmul(&b.narrow(0, 0, 1)?)?,
        &ga.matmul(&gb.narrow(0, 0, 1)?)?,
        1e-5,
    );
    // permuted batch dims: no single batch stride, copied first
    let (p, gp) = (b.permute(&[0, 2, 1])?, gb.permute(&[0, 2, 1])?);
    let (q, gq) = pair(&pseudo(3 * 7 * 2, 17), &[7, 3, 2], dev)?;
    let (q, gq) = (q.permute(&[1, 0, 2])?, gq.permute(&[1, 0, 2])?);
    same(&p.matmul(&q)?, &gp.matmul(&gq)?, 1e-5);
    Ok(())
});

test_device!(cuda: matmul_of_every_dtype_matches_the_cpu, |dev| {
    let (a, ga) = pair(&pseudo(16 * 24, 18), &[16, 24], dev)?;
    let (b, gb) = pair(&pseudo(24 * 8, 19), &[24, 8], dev)?;
    for (dt, tol) in [(DType::F64, 1e-6), (DType::F16, 2e-2), (DType::BF16, 5e-2)] {
        let (x, gx) = (a.to_dtype(dt)?, ga.to_dtype(dt)?);
        let (y, gy) = (b.to_dtype(dt)?, gb.to_dtype(dt)?);
        same(&x.matmul(&y)?, &gx.matmul(&gy)?, tol);
        same(
            &x.t()?.t()?.matmul(&y.t()?.t()?)?,
            &gx.t()?.t()?.matmul(&gy.t()?.t()?)?,
            tol,
        );
    }
    let ia = Tensor::arange(-20i64, 20, &cpu())?.reshape(&[5, 8])?;
    let ib = Tensor::arange(0i64, 24, &cpu())?.reshape(&[8, 3])?;
    same_exact(
        &ia.matmul(&ib)?,
        &ia.to_device(dev)?.matmul(&ib.to_device(dev)?)?,
    );
    let ua = Tensor::full(&[2, 4], 100.0, DType::U8, &cpu())?;
    same_exact(
        &ua.matmul(&ua.t()?)?,
        &ua.to_device(dev)?.matmul(&ua.to_device(dev)?.t()?)?,
    );
    Ok(())
});

test_device!(cuda: matmul_with_an_empty_inner_dim_is_zeros, |dev| {
    let a = Tensor::ones(&[3, 0], DType::F32, dev)?;
    let b = Tensor::ones(&[0, 2], DType::F32, dev)?;
    assert_eq!(a.matmul(&b)?.to_vec::<f32>()?, [0.0; 6]);
    Ok(())
});

// ----------------------------------------------------------- autograd

test_device!(cuda: gradients_on_cuda_match_the_cpu, |dev| {
    let run = |d: &Device| -> Result<Vec<Vec<f32>>> {
        let x = Tensor::from_slice(&pseudo(12, 20), &[3, 4], d)?.requires_grad_(true)?;
        let w = Tensor::from_slice(&pseudo(20, 21), &[4, 5], d)?.requires_grad_(true)?;
        let ids = Tensor::from_slice(&[4i64, 0, 2], &[3, 1], d)?;
        let h = x.matmul(&w)?.tanh()?;
        let loss = h.log_softmax(1)?.gather(1, &ids)?.neg()?.mean_all()?;
        let emb = Tensor::embedding(&w.t()?, &Tensor::from_slice(&[1i64, 1, 3], &[3], d)?)?;
        loss.add(&emb.sqr()?.sum_all()?)?.backward()?;
        Ok(vec![
            x.grad().unwrap().to_vec()?,
            w.grad().unwrap().to_vec()?,
        ])
    };
    let (c, g) = (run(&cpu())?, run(dev)?);
    assert_close(&g[0], &c[0], 1e-5);
    assert_close(&g[1], &c[1], 1e-5);
    Ok(())
});

test_device!(cuda: gradcheck_passes_on_cuda_in_f64, |dev| {
    let x = Tensor::from_slice(&[0.5f64, -1.0, 2.0, 0.1, 0.3, 0.7, -0.2, 1.1], &[2, 4], dev)?;
    let w = Tensor::from_slice(
        &[0.3f64, -0.6, 0.9, 0.2, -0.4, 0.8, 0.05, -1.2],
        &[4, 2],
        dev,
    )?;
    let r = gradcheck(
        |v| {
            v[0].matmul(&v[1])?
                .gelu()?
                .softmax(1)?
                .mul(&v[0].sum_dim(1, true)?)
        },
        &[x, w],
        GradcheckOptions::default(),
    )?;
    assert!(r.is_ok(), "{}", describe(&r));
    Ok(())
});

/// A 2-layer MLP (8 -> 32 -> 4) with cross-entropy, `steps` SGD steps on a
/// fixed batch; returns the losses and the final first-layer weights.
fn train(dev: &Device, steps: usize) -> Result<(Vec<f32>, Vec<f32>)> {
    let mk = |n: usize, shape: &[usize], seed: usize, scale: f64| -> Result<Tensor> {
        Tensor::from_slice(&pseudo(n, seed), shape, &cpu())?
            .mul_scalar(scale)?
            .to_device(dev)?
            .requires_grad_(true)
    };
    let w1 = mk(8 * 32, &[8, 32], 30, 0.3)?;
    let b1 = mk(32, &[32], 31, 0.1)?;
    let w2 = mk(32 * 4, &[32, 4], 32, 0.3)?;
    let x = Tensor::from_slice(&pseudo(16 * 8, 33), &[16, 8], &cpu())?.to_device(dev)?;
    let y: Vec<i64> = (0..16).map(|i| (i * 7 % 4) as i64).collect();
    let y = Tensor::from_slice(&y, &[16, 1], &cpu())?.to_device(dev)?;
    let params = [&w1, &b1, &w2];
    let mut losses = Vec::new();
    for _ in 0..steps {
        let h = x.matmul(&w1)?.add(&b1)?.relu()?;
        let loss = h
            .matmul(&w2)?
            .log_softmax(1)?
            .gather(1, &y)?
            .neg()?
            .mean_all()?;
        losses.push(loss.item::<f32>()?);
        loss.backward()?;
        no_grad(|| -> Result<()> {
            for p in params {
                if let Some(g) = p.grad() {
                    p.sub_(&g.mul_scalar(0.5)?)?;
                }
                p.zero_grad();
            }
            Ok(())
        })?;
    }
    Ok((losses, w1.to_vec::<f32>()?))
}

test_device!(cuda: a_training_loop_on_cuda_follows_the_cpu, |dev| {
    let (lc, wc) = train(&cpu(), 5)?;
    let (lg, wg) = train(dev, 5)?;
    assert_close(&lg, &lc, 1e-4);
    assert_close(&wg, &wc, 1e-4);
    assert!(lg[4] < lg[0], "loss did not fall: {lg:?}");
    Ok(())
});

test_device!(
    cuda: a_parameter_moved_after_its_handles_were_taken_still_trains,
    |dev| {
        // An optimizer keeps handles to its parameters; moving the parameter
        // must move what those handles see.
        let w = Tensor::from_slice(&[1.0f32, -2.0], &[2], &cpu())?.requires_grad_(true)?;
        let held = w.clone();
        w.move_to_(dev)?;
        let target = Tensor::from_slice(&[3.0f32, 3.0], &[2], dev)?;
        for _ in 0..50 {
            let loss = held.sub(&target)?.sqr()?.sum_all()?;
            loss.backward()?;
            no_grad(|| -> Result<()> {
                let g = held.grad().unwrap();
                assert_eq!(g.device().kind(), DeviceKind::Cuda(0));
                held.sub_(&g.mul_scalar(0.1)?)
            })?;
            held.zero_grad();
        }
        assert_close(&w.to_vec::<f32>()?, &[3.0, 3.0], 1e-4);
        Ok(())
    }
);

// The backend conformance suite (`kael_core::conformance`): every op over
// contiguous, transposed, stepped, broadcast, zero-size, rank-0 and rank-8
// layouts, forward and backward, against the reference CPU backend. A CUDA
// kernel that is missing is an `Unsupported` failure here, never a silent
// host fallback.
test_device!(cuda: conformance_suite_passes_on_cuda, |dev| {
    let report = kael_core::conformance::run(dev);
    println!("{report}");
    assert!(
        report.is_ok(),
        "CUDA fails the conformance suite:\n{report}"
    );
    assert!(report.checks > 6000, "only {} checks ran", report.checks);
    Ok(())
});
