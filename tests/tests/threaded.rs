//! The threaded CPU backend: results equal the reference CPU on every
//! layout kind when its parallel paths run, work below the threshold stays
//! inline, the pool has the requested size, and host-memory moves share
//! storage.

mod common;

use common::assert_close;
use kael_core::ops::{BinaryOp, CmpOp, UnaryOp};
use kael_core::shared::Shared;
use kael_core::{DType, Device, DeviceKind, Rng, Tensor};
use kael_host::cpu_threaded::{Builder, ThreadedCpuBackend};

fn backend(threads: usize, threshold: usize) -> (Shared<ThreadedCpuBackend>, Device) {
    let be = Shared::new(
        Builder::new()
            .threads(threads)
            .parallel_threshold(threshold)
            .build_backend()
            .unwrap(),
    );
    let dev = Device::from_backend(be.clone());
    (be, dev)
}

/// Inputs of every layout kind, made on the reference CPU:
/// (name, a, b) with `a` and `b` of one shape.
fn layouts() -> Vec<(&'static str, Tensor, Tensor)> {
    let cpu = Device::cpu();
    let mut rng = Rng::new(7);
    let r = |s: &[usize], rng: &mut Rng| Tensor::randn(s, DType::F32, &cpu, rng).unwrap();
    let big = r(&[96, 80], &mut rng);
    let big2 = r(&[96, 80], &mut rng);
    let r8 = r(&[2, 3, 1, 2, 2, 3, 2, 2], &mut rng);
    let r8b = r(&[2, 3, 1, 2, 2, 3, 2, 2], &mut rng);
    vec![
        ("contiguous", big.clone(), big2.clone()),
        ("transposed", big.t().unwrap(), big2.t().unwrap()),
        (
            "stepped slice",
            big.slice(0, 1, 90, 3).unwrap().slice(1, 0, 80, 2).unwrap(),
            big2.slice(0, 0, 89, 3).unwrap().slice(1, 1, 80, 2).unwrap(),
        ),
        (
            "broadcast stride 0",
            r(&[1, 80], &mut rng).expand(&[96, 80]).unwrap(),
            big2.clone(),
        ),
        (
            "scalar broadcast",
            r(&[1, 1], &mut rng).expand(&[96, 80]).unwrap(),
            big.t().unwrap().t().unwrap(),
        ),
        ("zero-size", r(&[0, 5], &mut rng), r(&[0, 5], &mut rng)),
        (
            "rank 0",
            Tensor::scalar(1.5f32, &cpu).unwrap(),
            Tensor::scalar(-2.0f32, &cpu).unwrap(),
        ),
        (
            "rank 8 permuted",
            r8.permute(&[7, 6, 5, 4, 3, 2, 1, 0]).unwrap(),
            r8b.permute(&[7, 6, 5, 4, 3, 2, 1, 0]).unwrap(),
        ),
    ]
}

type Op = Box<dyn Fn(&Tensor, &Tensor) -> kael_core::Result<Tensor>>;
type Family = fn(&Tensor, &Tensor) -> kael_core::Result<Tensor>;

/// Every float elementwise op of the op table (NOTE [Op table]), then the
/// other kernel families.
fn ops() -> Vec<(String, Op)> {
    let mut v: Vec<(String, Op)> = Vec::new();
    for c in UnaryOp::CASES {
        let f = c.f;
        v.push((format!("{} {}", c.op, c.args), Box::new(move |a, _| f(a))));
    }
    for c in BinaryOp::CASES.iter().filter(|c| c.floats) {
        let f = c.f;
        v.push((c.op.to_string(), Box::new(f)));
    }
    for c in CmpOp::CASES {
        let f = c.f;
        v.push((
            c.op.to_string(),
            Box::new(move |a, b| f(a, b)?.to_dtype(DType::F32)),
        ));
    }
    let families: Vec<(&str, Family)> = vec![
        ("contiguous", |a, _| a.contiguous()),
        ("sum all", |a, _| a.sum_all()),
        ("max all", |a, _| {
            if a.numel() == 0 {
                a.sum_all()
            } else {
                a.max_all()
            }
        }),
        ("sum last dim", |a, _| {
            if a.rank() == 0 {
                a.sum_all()
            } else {
                a.sum(&[-1], false)
            }
        }),
        ("sum leading dim", |a, _| {
            if a.rank() < 2 {
                a.sum_all()
            } else {
                a.sum(&[0], false)
            }
        }),
        ("max leading dim", |a, _| {
            if a.rank() < 2 || a.numel() == 0 {
                a.sum_all()
            } else {
                a.max_dim(0, false)
            }
        }),
        ("sum two leading dims of a copy", |a, _| {
            if a.rank() < 3 {
                a.sum_all()
            } else {
                a.contiguous()?.sum(&[0, 1], false)
            }
        }),
        (
            "sum around dim 1 of a copy (batch-norm statistics)",
            |a, _| {
                if a.rank() < 3 {
                    a.sum_all()
                } else {
                    let rest: Vec<isize> = (2..a.rank() as isize).collect();
                    a.contiguous()?.sum(&[&[0], &rest[..]].concat(), true)
                }
            },
        ),
        ("sum trailing two dims of a copy (global pool)", |a, _| {
            if a.rank() < 3 {
                a.sum_all()
            } else {
                a.contiguous()?.sum(&[-2, -1], false)
            }
        }),
        ("argmax last dim", |a, _| {
            if a.numel() == 0 {
                a.sum_all()
            } else {
                a.argmax(-1, false)?.to_dtype(DType::F32)
            }
        }),
        ("argmin last dim of a copy", |a, _| {
            if a.numel() == 0 {
                a.sum_all()
            } else {
                a.contiguous()?.argmin(-1, false)?.to_dtype(DType::F32)
            }
        }),
        ("softmax last dim", |a, _| {
            if a.rank() == 0 {
                a.exp()
            } else {
                a.softmax(-1)
            }
        }),
        ("log_softmax last dim", |a, _| {
            if a.rank() == 0 {
                a.exp()
            } else {
                a.log_softmax(-1)
            }
        }),
    ];
    v.extend(
        families
            .into_iter()
            .map(|(n, f)| (n.to_string(), Box::new(f) as Op)),
    );
    v
}

#[test]
fn parallel_paths_equal_the_reference_on_every_layout_kind() {
    let (be, dev) = backend(2, 1);
    for (lname, a, b) in layouts() {
        let (ta, tb) = (a.to_device(&dev).unwrap(), b.to_device(&dev).unwrap());
        assert_eq!(
            ta.strides(),
            a.strides(),
            "{lname}: the move keeps the layout"
        );
        for (oname, op) in &ops() {
            let want = op(&a, &b).unwrap().to_vec::<f32>().unwrap();
            let got = op(&ta, &tb).unwrap();
            assert_eq!(got.device().kind(), DeviceKind::ThreadedCpu);
            let got = got.to_vec::<f32>().unwrap();
            std::panic::catch_unwind(|| assert_close(&got, &want, 1e-5))
                .unwrap_or_else(|_| panic!("{oname} on {lname} layout differs"));
        }
    }
    assert!(be.parallel_dispatches() > 0, "the parallel paths ran");
}

#[test]
fn matmul_equals_the_reference_for_strided_and_batched_operands() {
    let (_, dev) = backend(2, 1);
    let cpu = Device::cpu();
    let mut rng = Rng::new(3);
    let a = Tensor::randn(&[4, 70, 33], DType::F32, &cpu, &mut rng).unwrap();
    let b = Tensor::randn(&[4, 50, 33], DType::F32, &cpu, &mut rng).unwrap();
    let bt = b.transpose(1, 2).unwrap();
    let single = Tensor::randn(&[33, 50], DType::F32, &cpu, &mut rng).unwrap();
    let cases = [
        (a.clone(), bt.clone()),
        (a.slice(1, 0, 70, 2).unwrap(), bt.clone()),
        (a.clone(), single.expand(&[4, 33, 50]).unwrap()),
    ];
    for (x, y) in cases {
        let want = x.matmul(&y).unwrap().to_vec::<f32>().unwrap();
        let (tx, ty) = (x.to_device(&dev).unwrap(), y.to_device(&dev).unwrap());
        let got = tx.matmul(&ty).unwrap().to_vec::<f32>().unwrap();
        assert_close(&got, &want, 1e-4);
    }
}

#[test]
fn a_product_split_across_threads_equals_the_reference() {
    // Each product (at least 4 MFLOP, the split's threshold) is cut into
    // one block of columns (wide) or rows (tall) per thread; sizes that do
    // not divide by the thread count, operands read transposed or with a
    // step, and batches fewer than threads.
    let (be, dev) = backend(3, 1);
    let cpu = Device::cpu();
    let mut rng = Rng::new(9);
    let wide_a = Tensor::randn(&[40, 300], DType::F32, &cpu, &mut rng).unwrap();
    let wide_b = Tensor::randn(&[203, 300], DType::F32, &cpu, &mut rng).unwrap();
    let tall_a = Tensor::randn(&[300, 400], DType::F32, &cpu, &mut rng).unwrap();
    let tall_b = Tensor::randn(&[400, 37], DType::F32, &cpu, &mut rng).unwrap();
    let tall_at = Tensor::randn(&[400, 300], DType::F32, &cpu, &mut rng).unwrap();
    let batch_a = Tensor::randn(&[2, 70, 400], DType::F32, &cpu, &mut rng).unwrap();
    let batch_b = Tensor::randn(&[2, 400, 90], DType::F32, &cpu, &mut rng).unwrap();
    let cases = [
        ("wide, rhs transposed", wide_a.clone(), wide_b.t().unwrap()),
        (
            "tall, lhs with step 2",
            tall_a.slice(0, 0, 300, 2).unwrap(),
            tall_b.clone(),
        ),
        (
            "tall, lhs transposed and narrowed",
            tall_at.t().unwrap().narrow(0, 3, 290).unwrap(),
            tall_b,
        ),
        ("2 batches on 3 threads", batch_a, batch_b),
    ];
    for (name, x, y) in cases {
        let want = x.matmul(&y).unwrap().to_vec::<f32>().unwrap();
        let before = be.parallel_dispatches();
        let (tx, ty) = (x.to_device(&dev).unwrap(), y.to_device(&dev).unwrap());
        let got = tx.matmul(&ty).unwrap().to_vec::<f32>().unwrap();
        assert!(be.parallel_dispatches() > before, "{name}: ran in the pool");
        assert_close(&got, &want, 1e-4);
    }
}

#[test]
fn f64_matmul_equals_the_reference() {
    let (_, dev) = backend(2, 1);
    let cpu = Device::cpu();
    let mut rng = Rng::new(4);
    let a = Tensor::randn(&[17, 9], DType::F64, &cpu, &mut rng).unwrap();
    let b = Tensor::randn(&[9, 13], DType::F64, &cpu, &mut rng).unwrap();
    let want = a.matmul(&b).unwrap().to_vec::<f64>().unwrap();
    let got = a
        .to_device(&dev)
        .unwrap()
        .matmul(&b.to_device(&dev).unwrap())
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    common::assert_close64(&got, &want, 1e-12);
}

#[test]
fn strided_matmul_allocates_only_its_output() {
    let (_, dev) = backend(2, 1);
    let mut rng = Rng::new(5);
    let a = Tensor::randn(&[64, 48], DType::F32, &dev, &mut rng).unwrap();
    let b = Tensor::randn(&[32, 48], DType::F32, &dev, &mut rng).unwrap();
    let bt = b.t().unwrap();
    let before = dev.allocator().stats().allocations;
    let c = a.matmul(&bt).unwrap();
    assert_eq!(dev.allocator().stats().allocations, before + 1);
    assert_eq!(c.shape(), &[64, 32]);
}

#[test]
fn the_pool_has_the_requested_thread_count() {
    let (be, _) = backend(3, 1);
    assert_eq!(be.threads(), 3);
    assert_eq!(be.pool_threads(), 3);
}

#[test]
fn a_small_add_runs_inline_without_a_hand_off() {
    let (be, dev) = backend(2, 1 << 15);
    let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[4], &dev).unwrap();
    let c = a.add(&a).unwrap();
    assert_eq!(c.to_vec::<f32>().unwrap(), vec![2.0, 4.0, 6.0, 8.0]);
    assert_eq!(be.parallel_dispatches(), 0);
}

#[test]
fn a_large_add_is_handed_to_the_pool() {
    let (be, dev) = backend(2, 1 << 15);
    // Twice the threshold: the first size a bandwidth-bound op splits.
    let a = Tensor::ones(&[1 << 16], DType::F32, &dev).unwrap();
    let before = be.parallel_dispatches();
    let c = a.add(&a).unwrap();
    assert_eq!(be.parallel_dispatches(), before + 1);
    assert!(c.to_vec::<f32>().unwrap().iter().all(|&x| x == 2.0));
}

/// NOTE [Bandwidth-bound ops go parallel later]: between the threshold and
/// twice it, an add runs inline, and an op with real work per element
/// goes to the pool.
#[test]
fn a_mid_size_add_runs_inline_where_a_gelu_of_its_size_is_handed_to_the_pool() {
    let (be, dev) = backend(2, 1 << 15);
    let a = Tensor::ones(&[(1 << 16) - 1], DType::F32, &dev).unwrap();
    let before = be.parallel_dispatches();
    let c = a.add(&a).unwrap();
    assert_eq!(be.parallel_dispatches(), before, "the add ran inline");
    assert!(c.to_vec::<f32>().unwrap().iter().all(|&x| x == 2.0));
    let g = a.gelu().unwrap();
    assert_eq!(
        be.parallel_dispatches(),
        before + 1,
        "the GELU ran in the pool"
    );
    let want = 0.5 * (1.0 + libm::erf(1.0 / core::f64::consts::SQRT_2));
    assert!(
        g.to_vec::<f32>()
            .unwrap()
            .iter()
            .all(|&x| (f64::from(x) - want).abs() < 1e-6)
    );
}

#[test]
fn in_place_add_of_a_tensor_to_itself_doubles_it() {
    let (_, dev) = backend(2, 1);
    let a = Tensor::arange(0.0f32, 1000.0, &dev).unwrap();
    a.add_(&a).unwrap();
    let want: Vec<f32> = (0..1000).map(|i| 2.0 * i as f32).collect();
    assert_eq!(a.to_vec::<f32>().unwrap(), want);
}

/// NOTE [Elementwise in the output's order]: an output that is a
/// transposed (permuted) view runs on the pool, with the same values as
/// the reference, for every kind of second operand and for unary ops.
#[test]
fn elementwise_ops_into_a_transposed_view_run_in_parallel_and_match_the_reference() {
    let (be, dev) = backend(2, 1);
    let cpu = Device::cpu();
    let mut rng = Rng::new(19);
    let base = Tensor::randn(&[300, 200], DType::F32, &cpu, &mut rng).unwrap();
    let other = Tensor::randn(&[200, 300], DType::F32, &cpu, &mut rng).unwrap();
    let seconds = [
        ("contiguous", other.clone()),
        (
            "transposed",
            other.t().unwrap().contiguous().unwrap().t().unwrap(),
        ),
        (
            "row broadcast",
            other.narrow(0, 0, 1).unwrap().expand(&[200, 300]).unwrap(),
        ),
    ];
    for (name, b) in seconds {
        let want = base.t().unwrap().sub(&b).unwrap().exp().unwrap();
        let p = base.deep_clone().unwrap().to_device(&dev).unwrap();
        let view = p.t().unwrap();
        let before = be.parallel_dispatches();
        view.sub_(&b.to_device(&dev).unwrap()).unwrap();
        view.exp_().unwrap();
        assert!(
            be.parallel_dispatches() >= before + 2,
            "{name}: ran on the pool"
        );
        let got = view.to_vec::<f32>().unwrap();
        assert_close(&got, &want.to_vec::<f32>().unwrap(), 1e-6);
    }
}

#[test]
fn in_place_mul_through_a_transposed_view_matches_the_reference() {
    let (_, dev) = backend(2, 1);
    let cpu = Device::cpu();
    let mut rng = Rng::new(9);
    let x = Tensor::randn(&[30, 20], DType::F32, &cpu, &mut rng).unwrap();
    let y = Tensor::randn(&[20, 30], DType::F32, &cpu, &mut rng).unwrap();
    let xt = x.deep_clone().unwrap().to_device(&dev).unwrap();
    let want = x.t().unwrap().mul(&y).unwrap().to_vec::<f32>().unwrap();
    let view = xt.t().unwrap();
    view.mul_(&y.to_device(&dev).unwrap()).unwrap();
    assert_close(&view.to_vec::<f32>().unwrap(), &want, 0.0);
}

#[test]
fn to_device_between_host_devices_shares_storage_both_ways() {
    let (_, dev) = backend(2, 1);
    let a = Tensor::arange(0.0f32, 6.0, &Device::cpu()).unwrap();
    let t = a.to_device(&dev).unwrap();
    assert!(t.shares_storage(&a));
    assert_eq!(t.device().kind(), DeviceKind::ThreadedCpu);
    let back = t.to_device(&Device::cpu()).unwrap();
    assert!(back.shares_storage(&a));
    assert_eq!(back.device().kind(), DeviceKind::Cpu);
    assert_eq!(back.to_vec::<f32>().unwrap(), a.to_vec::<f32>().unwrap());
}

#[test]
fn a_write_after_a_host_move_is_visible_through_the_source() {
    let (_, dev) = backend(2, 1);
    let a = Tensor::zeros(&[3], DType::F32, &Device::cpu()).unwrap();
    let t = a.to_device(&dev).unwrap();
    t.fill_(5.0).unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), vec![5.0; 3]);
    assert!(
        a.version() > 0,
        "one version counter: autograd sees the write"
    );
}

#[test]
fn views_of_a_moved_tensor_stay_on_its_device() {
    let (_, dev) = backend(2, 1);
    let a = Tensor::zeros(&[2, 3], DType::F32, &Device::cpu()).unwrap();
    let t = a.to_device(&dev).unwrap();
    assert_eq!(t.t().unwrap().device().kind(), DeviceKind::ThreadedCpu);
    assert_eq!(
        t.narrow(1, 0, 2).unwrap().device().kind(),
        DeviceKind::ThreadedCpu
    );
}

#[test]
fn gradients_flow_back_through_a_host_move() {
    let (_, dev) = backend(2, 1);
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], &Device::cpu())
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let y = x.to_device(&dev).unwrap().sqr().unwrap().sum_all().unwrap();
    y.backward().unwrap();
    let g = x.grad().unwrap();
    assert_eq!(g.device().kind(), DeviceKind::Cpu);
    assert_eq!(g.to_vec::<f32>().unwrap(), vec![2.0, 4.0, 6.0]);
}

#[test]
fn move_to_between_host_devices_keeps_the_storage() {
    let (_, dev) = backend(2, 1);
    let a = Tensor::arange(0.0f32, 4.0, &Device::cpu()).unwrap();
    let storage = a.storage();
    a.move_to_(&dev).unwrap();
    assert_eq!(a.device().kind(), DeviceKind::ThreadedCpu);
    assert!(Shared::ptr_eq(&a.storage(), &storage));
}

#[test]
fn mixing_devices_without_a_move_is_still_an_error() {
    let (_, dev) = backend(2, 1);
    let a = Tensor::zeros(&[3], DType::F32, &Device::cpu()).unwrap();
    let t = a.to_device(&dev).unwrap();
    let e = a.add(&t).unwrap_err();
    assert!(matches!(e, kael_core::Error::DeviceMismatch { .. }), "{e}");
}

#[test]
fn allocating_ops_reuse_cached_blocks() {
    let (be, dev) = backend(2, 1 << 15);
    let a = Tensor::ones(&[1 << 20], DType::F32, &dev).unwrap();
    drop(a.add(&a).unwrap());
    let hits = be.cache().cache_hits();
    let c = a.add(&a).unwrap();
    assert_eq!(be.cache().cache_hits(), hits + 1);
    assert!(c.to_vec::<f32>().unwrap().iter().all(|&x| x == 2.0));
}

#[test]
fn zeros_on_a_reused_block_are_zeros() {
    let (_, dev) = backend(2, 1 << 15);
    let a = Tensor::full(&[1 << 20], 7.0, DType::F32, &dev).unwrap();
    drop(a);
    let z = Tensor::zeros(&[1 << 20], DType::F32, &dev).unwrap();
    assert!(z.to_vec::<f32>().unwrap().iter().all(|&x| x == 0.0));
}

#[test]
fn detach_keeps_the_device_of_a_moved_tensor() {
    let (_, dev) = backend(2, 1);
    let t = Tensor::zeros(&[3], DType::F32, &Device::cpu())
        .unwrap()
        .to_device(&dev)
        .unwrap();
    assert_eq!(t.detach().unwrap().device().kind(), DeviceKind::ThreadedCpu);
}

#[test]
fn f16_matmul_equals_the_reference_within_half_precision() {
    let (_, dev) = backend(2, 1);
    let cpu = Device::cpu();
    let mut rng = Rng::new(6);
    let a = Tensor::randn(&[12, 20], DType::F32, &cpu, &mut rng).unwrap();
    let b = Tensor::randn(&[20, 7], DType::F32, &cpu, &mut rng).unwrap();
    let (ah, bh) = (
        a.to_dtype(DType::F16).unwrap(),
        b.to_dtype(DType::F16).unwrap(),
    );
    let want = ah.matmul(&bh).unwrap().to_dtype(DType::F32).unwrap();
    let got = ah
        .to_device(&dev)
        .unwrap()
        .matmul(
            &bh.to_device(&dev)
                .unwrap()
                .t()
                .unwrap()
                .contiguous()
                .unwrap()
                .t()
                .unwrap(),
        )
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap();
    assert_close(
        &got.to_vec::<f32>().unwrap(),
        &want.to_vec::<f32>().unwrap(),
        1e-2,
    );
}

#[test]
fn argmax_picks_the_first_maximum_and_the_first_nan() {
    let (_, dev) = backend(2, 1);
    let x = Tensor::from_slice(
        &[
            1.0f32,
            3.0,
            3.0,
            2.0,
            0.0,
            f32::NAN,
            5.0,
            f32::NAN,
            -1.0,
            -1.0,
            -2.0,
            -2.0,
        ],
        &[3, 4],
        &dev,
    )
    .unwrap();
    // row 0: first of the tied 3s; row 1: the first NaN; row 2: first max
    assert_eq!(
        x.argmax(-1, false).unwrap().to_vec::<i64>().unwrap(),
        vec![1, 1, 0]
    );
    assert_eq!(
        x.argmin(-1, false).unwrap().to_vec::<i64>().unwrap(),
        vec![0, 1, 2]
    );
}

#[test]
fn a_transposing_copy_moves_every_element_to_its_transposed_place() {
    // Sizes around the 8x8 register blocks and the 32x32 tiles, so full
    // blocks, partial blocks and the edge loops all run; values are distinct
    // bit patterns (NaN payloads included), so a misplaced or altered
    // element shows.
    let (_, dev) = backend(2, 1);
    for &(rows, cols) in &[
        (1, 1),
        (7, 9),
        (8, 8),
        (9, 17),
        (33, 40),
        (64, 31),
        (100, 72),
    ] {
        let bits: Vec<u32> = (0..rows * cols)
            .map(|i| 0x7FC0_0000 ^ (i as u32).wrapping_mul(2_654_435_761))
            .collect();
        let src: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
        let x = Tensor::from_slice(&src, &[rows, cols], &dev).unwrap();
        let got: Vec<u32> = x
            .t()
            .unwrap()
            .contiguous()
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect();
        let want: Vec<u32> = (0..cols * rows)
            .map(|k| bits[(k % rows) * cols + k / rows])
            .collect();
        assert_eq!(got, want, "{rows}x{cols}");
    }
}

#[test]
fn a_batched_transposing_copy_of_i32_equals_the_index_mapping() {
    let (_, dev) = backend(2, 1);
    let (b, m, n) = (3, 19, 24);
    let v: Vec<i32> = (0..(b * m * n) as i32).map(|i| i * 7 - 1000).collect();
    let x = Tensor::from_slice(&v, &[b, m, n], &dev).unwrap();
    let got = x
        .transpose(1, 2)
        .unwrap()
        .contiguous()
        .unwrap()
        .to_vec::<i32>()
        .unwrap();
    let mut want = Vec::with_capacity(v.len());
    for bi in 0..b {
        for j in 0..n {
            for i in 0..m {
                want.push(v[(bi * m + i) * n + j]);
            }
        }
    }
    assert_eq!(got, want);
}

#[test]
fn softmax_rows_with_nan_and_infinities_match_the_reference() {
    // Row length 21: one 16-lane block and a remainder. Rows: plain; a NaN
    // (all NaN, as in PyTorch); +inf (inf - inf is NaN: all NaN); a -inf
    // element (probability 0); all -inf (NaN).
    let (_, dev) = backend(2, 1);
    let cpu = Device::cpu();
    let n = 21;
    let mut v: Vec<f32> = (0..5 * n)
        .map(|i| ((i * 37) % 23) as f32 * 0.25 - 2.0)
        .collect();
    v[n + 20] = f32::NAN;
    v[2 * n + 3] = f32::INFINITY;
    v[3 * n + 5] = f32::NEG_INFINITY;
    v[4 * n..5 * n].fill(f32::NEG_INFINITY);
    let x = Tensor::from_slice(&v, &[5, n], &dev).unwrap();
    let xc = Tensor::from_slice(&v, &[5, n], &cpu).unwrap();
    for log in [false, true] {
        let f = |t: &Tensor| {
            if log {
                t.log_softmax(-1)
            } else {
                t.softmax(-1)
            }
        };
        let got = f(&x).unwrap().to_vec::<f32>().unwrap();
        let want = f(&xc).unwrap().to_vec::<f32>().unwrap();
        assert_close(&got, &want, 1e-5);
        assert!(got[n..3 * n].iter().all(|p| p.is_nan()), "log={log}");
        assert!(got[4 * n..].iter().all(|p| p.is_nan()), "log={log}");
        let zero = if log { f32::NEG_INFINITY } else { 0.0 };
        assert_eq!(got[3 * n + 5], zero, "log={log}");
    }
}

/// Distinct, exactly representable values for index-mapping checks.
fn distinct(n: usize, salt: u32) -> Vec<f32> {
    (0..n as u32)
        .map(|i| ((i.wrapping_mul(2_654_435_761) ^ salt) % 2003) as f32 / 8.0 - 100.0)
        .collect()
}

#[test]
fn binary_ops_with_a_transposed_operand_equal_the_index_mapping() {
    // Sizes around the 8x8 register blocks and the 32x32 tiles; `a` is
    // row-major, `bt` reads `b_store` (cols x rows) transposed. Either side
    // may be the transposed one, and both may be.
    let (_, dev) = backend(2, 1);
    type F = fn(f32, f32) -> f32;
    let ops: [(&str, F); 4] = [
        ("add", |x, y| x + y),
        ("sub", |x, y| x - y),
        ("mul", |x, y| x * y),
        ("div", |x, y| x / y),
    ];
    for &(rows, cols) in &[(1, 1), (7, 9), (8, 8), (33, 40), (64, 31), (100, 72)] {
        let av = distinct(rows * cols, 1);
        let bv = distinct(rows * cols, 2);
        let a = Tensor::from_slice(&av, &[rows, cols], &dev).unwrap();
        let bt = Tensor::from_slice(&bv, &[cols, rows], &dev)
            .unwrap()
            .t()
            .unwrap();
        let at = a.t().unwrap().contiguous().unwrap().t().unwrap();
        let b_at = |i: usize, j: usize| bv[j * rows + i];
        for (name, f) in ops {
            let run = |x: &Tensor, y: &Tensor| match name {
                "add" => x.add(y),
                "sub" => x.sub(y),
                "mul" => x.mul(y),
                _ => x.div(y),
            };
            let mut fwd = Vec::new();
            let mut rev = Vec::new();
            for i in 0..rows {
                for j in 0..cols {
                    fwd.push(f(av[i * cols + j], b_at(i, j)));
                    rev.push(f(b_at(i, j), av[i * cols + j]));
                }
            }
            let got = |t: Tensor| t.to_vec::<f32>().unwrap();
            assert_eq!(got(run(&a, &bt).unwrap()), fwd, "{name} {rows}x{cols}");
            assert_eq!(got(run(&bt, &a).unwrap()), rev, "{name} rev {rows}x{cols}");
            assert_eq!(
                got(run(&at, &bt).unwrap()),
                fwd,
                "{name} both {rows}x{cols}"
            );
        }
    }
}

#[test]
fn a_batched_transposed_operand_broadcasts_against_a_row() {
    // x[b, i, j] = store[b, j, i]; y[j] broadcast over b and i; f64.
    let (_, dev) = backend(2, 1);
    let (nb, m, n) = (3, 37, 45);
    let sv: Vec<f64> = distinct(nb * m * n, 3).into_iter().map(f64::from).collect();
    let yv: Vec<f64> = distinct(n, 4).into_iter().map(f64::from).collect();
    let x = Tensor::from_slice(&sv, &[nb, n, m], &dev)
        .unwrap()
        .transpose(1, 2)
        .unwrap();
    let y = Tensor::from_slice(&yv, &[n], &dev).unwrap();
    let got = x.sub(&y).unwrap().to_vec::<f64>().unwrap();
    let mut want = Vec::new();
    for b in 0..nb {
        for i in 0..m {
            for j in 0..n {
                want.push(sv[(b * n + j) * m + i] - yv[j]);
            }
        }
    }
    assert_eq!(got, want);
}

#[test]
fn in_place_add_of_a_transposed_source_equals_the_index_mapping() {
    let (_, dev) = backend(2, 1);
    let (rows, cols) = (41, 70);
    let cv = distinct(rows * cols, 5);
    let bv = distinct(rows * cols, 6);
    let c = Tensor::from_slice(&cv, &[rows, cols], &dev).unwrap();
    let bt = Tensor::from_slice(&bv, &[cols, rows], &dev)
        .unwrap()
        .t()
        .unwrap();
    c.add_(&bt).unwrap();
    let want: Vec<f32> = (0..rows * cols)
        .map(|k| cv[k] + bv[(k % cols) * rows + k / cols])
        .collect();
    assert_eq!(c.to_vec::<f32>().unwrap(), want);
}

#[test]
fn a_unary_op_on_a_transposed_operand_equals_the_index_mapping() {
    let (_, dev) = backend(2, 1);
    let (rows, cols) = (50, 33);
    let v = distinct(rows * cols, 7);
    let xt = Tensor::from_slice(&v, &[cols, rows], &dev)
        .unwrap()
        .t()
        .unwrap();
    let got = xt.abs().unwrap().to_vec::<f32>().unwrap();
    let want: Vec<f32> = (0..rows * cols)
        .map(|k| v[(k % cols) * rows + k / cols].abs())
        .collect();
    assert_eq!(got, want);
}

#[test]
fn comparisons_with_a_transposed_or_scalar_operand_equal_the_index_mapping() {
    let (_, dev) = backend(2, 1);
    for &(rows, cols) in &[(7, 9), (33, 40), (100, 72)] {
        let av = distinct(rows * cols, 8);
        let bv = distinct(rows * cols, 9);
        let a = Tensor::from_slice(&av, &[rows, cols], &dev).unwrap();
        let bt = Tensor::from_slice(&bv, &[cols, rows], &dev)
            .unwrap()
            .t()
            .unwrap();
        let b_at = |k: usize| bv[(k % cols) * rows + k / cols];
        let n = rows * cols;
        let lt: Vec<bool> = (0..n).map(|k| av[k] < b_at(k)).collect();
        let ge: Vec<bool> = (0..n).map(|k| b_at(k) >= av[k]).collect();
        assert_eq!(
            a.lt(&bt).unwrap().to_vec::<bool>().unwrap(),
            lt,
            "{rows}x{cols}"
        );
        assert_eq!(
            bt.ge(&a).unwrap().to_vec::<bool>().unwrap(),
            ge,
            "{rows}x{cols}"
        );
        let k = Tensor::from_slice(&[0.5f32], &[1], &dev).unwrap();
        let gt: Vec<bool> = (0..n).map(|k| b_at(k) > 0.5).collect();
        assert_eq!(
            bt.gt(&k).unwrap().to_vec::<bool>().unwrap(),
            gt,
            "{rows}x{cols}"
        );
        let eq: Vec<bool> = (0..n).map(|k| 0.5 == av[k]).collect();
        assert_eq!(
            k.eq(&a).unwrap().to_vec::<bool>().unwrap(),
            eq,
            "{rows}x{cols}"
        );
    }
}

/// Layer norm of `x` over its last dim (affine or not) and the gradients
/// of `Σ y·c`, read back as f32, on `dev` (inputs made on the CPU).
fn layer_norm_run(
    dev: &Device,
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    c: &Tensor,
    affine: bool,
) -> Vec<Vec<f32>> {
    let on = |t: &Tensor| {
        t.to_device(dev)
            .unwrap()
            .detach()
            .unwrap()
            .requires_grad_(true)
            .unwrap()
    };
    let (x, w, b) = (on(x), on(w), on(b));
    let n = x.shape()[x.rank() - 1];
    let y = if affine {
        kael_core::nn::functional::layer_norm(&x, &[n], Some(&w), Some(&b), 1e-5).unwrap()
    } else {
        kael_core::nn::functional::layer_norm(&x, &[n], None, None, 1e-5).unwrap()
    };
    y.mul(&c.to_device(dev).unwrap())
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let mut out = vec![
        y.to_vec::<f32>().unwrap(),
        x.grad().unwrap().to_vec::<f32>().unwrap(),
    ];
    if affine {
        out.push(w.grad().unwrap().to_vec::<f32>().unwrap());
        out.push(b.grad().unwrap().to_vec::<f32>().unwrap());
    }
    out
}

#[test]
fn fused_layer_norm_split_across_threads_equals_the_reference() {
    // 203 rows of 133 (not a multiple of the 16 lanes) on 3 threads at
    // threshold 1: many blocks of rows, each block's weight and bias sums
    // added in order; and one row (a single block). Gradients included.
    let (be, dev) = backend(3, 1);
    let cpu = Device::cpu();
    let mut rng = Rng::new(17);
    for rows in [203usize, 1] {
        let x = Tensor::randn(&[rows, 133], DType::F32, &cpu, &mut rng).unwrap();
        let x = x.affine(3.0, 5.0).unwrap();
        let w = Tensor::randn(&[133], DType::F32, &cpu, &mut rng).unwrap();
        let b = Tensor::randn(&[133], DType::F32, &cpu, &mut rng).unwrap();
        let c = Tensor::randn(&[rows, 133], DType::F32, &cpu, &mut rng).unwrap();
        for affine in [true, false] {
            let want = layer_norm_run(&cpu, &x, &w, &b, &c, affine);
            let before = be.parallel_dispatches();
            let got = layer_norm_run(&dev, &x, &w, &b, &c, affine);
            assert!(
                rows == 1 || be.parallel_dispatches() > before,
                "ran in the pool"
            );
            for (g, w) in got.iter().zip(&want) {
                assert_close(g, w, 1e-4);
            }
        }
    }
}

#[test]
fn fused_layer_norm_is_deterministic_for_a_thread_count() {
    let (_, dev) = backend(2, 1);
    let cpu = Device::cpu();
    let mut rng = Rng::new(5);
    let x = Tensor::randn(&[300, 64], DType::F32, &cpu, &mut rng).unwrap();
    let w = Tensor::randn(&[64], DType::F32, &cpu, &mut rng).unwrap();
    let b = Tensor::randn(&[64], DType::F32, &cpu, &mut rng).unwrap();
    let c = Tensor::randn(&[300, 64], DType::F32, &cpu, &mut rng).unwrap();
    let first = layer_norm_run(&dev, &x, &w, &b, &c, true);
    for _ in 0..5 {
        assert_eq!(layer_norm_run(&dev, &x, &w, &b, &c, true), first);
    }
}

/// Distinct-ish values that are never zero: `k / 8 + 1/16` for small `k`.
fn nonzero(n: usize, salt: u32) -> Vec<f32> {
    distinct(n, salt).into_iter().map(|v| v + 0.0625).collect()
}

#[test]
fn small_contiguous_arithmetic_at_an_offset_equals_the_index_mapping() {
    // The threaded backend's one-loop path for small contiguous operands
    // (NOTE [Small contiguous ops]): operands are slices at an offset into
    // larger storages, at sizes up to and just past the path's limit, in
    // f32 and f64; `a op a` reads one storage twice.
    let (_, dev) = backend(2, 1 << 20);
    type F = fn(f64, f64) -> f64;
    let ops: [(&str, F); 4] = [
        ("add", |x, y| x + y),
        ("sub", |x, y| x - y),
        ("mul", |x, y| x * y),
        ("div", |x, y| x / y),
    ];
    let run = |name: &str, x: &Tensor, y: &Tensor| match name {
        "add" => x.add(y),
        "sub" => x.sub(y),
        "mul" => x.mul(y),
        _ => x.div(y),
    };
    for n in [1, 4, 7, 4096, 4097] {
        // Never zero: `a / a` is 1 everywhere.
        let (av, bv) = (nonzero(n + 3, 1), nonzero(n + 5, 2));
        for dtype in [DType::F32, DType::F64] {
            let make = |v: &[f32], skip: usize| {
                Tensor::from_slice(v, &[v.len()], &dev)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap()
                    .slice(0, skip as isize, (skip + n) as isize, 1)
                    .unwrap()
            };
            let (a, b) = (make(&av, 3), make(&bv, 5));
            assert_eq!((a.offset(), b.offset()), (3, 5));
            for (name, f) in ops {
                let got = run(name, &a, &b).unwrap().to_dtype(DType::F64).unwrap();
                let want: Vec<f64> = (0..n)
                    .map(|i| f(f64::from(av[i + 3]), f64::from(bv[i + 5])))
                    .collect();
                // f32 results are the f64 ones rounded once.
                let round = |w: f64| {
                    if dtype == DType::F64 {
                        w
                    } else {
                        f64::from(w as f32)
                    }
                };
                let first_miss = |got: &Tensor, want: &[f64]| {
                    let got = got.to_vec::<f64>().unwrap();
                    (0..n).find(|&i| got[i] != round(want[i]))
                };
                assert_eq!(first_miss(&got, &want), None, "{name} of {n} {dtype:?}");
                let twice = run(name, &a, &a).unwrap().to_dtype(DType::F64).unwrap();
                let want: Vec<f64> = (0..n)
                    .map(|i| f(f64::from(av[i + 3]), f64::from(av[i + 3])))
                    .collect();
                assert_eq!(
                    first_miss(&twice, &want),
                    None,
                    "{name} a,a of {n} {dtype:?}"
                );
            }
        }
    }
}

#[test]
fn a_small_in_place_add_reads_its_own_output() {
    // The output's own storage as an operand goes the general way (NOTE
    // [Small contiguous ops]); the result is the same.
    let (_, dev) = backend(2, 1 << 20);
    let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[4], &dev).unwrap();
    let b = Tensor::from_slice(&[10.0f32, 20.0, 30.0, 40.0], &[4], &dev).unwrap();
    a.add_(&b).unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), vec![11.0, 22.0, 33.0, 44.0]);
    let v = a.slice(0, 1, 3, 1).unwrap();
    v.mul_(&v.deep_clone().unwrap()).unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), vec![11.0, 484.0, 1089.0, 44.0]);
}

/// `gather` and `scatter_add` on the pool (rows of the index split across
/// threads) equal the reference: 2-D and 3-D, every `dim` a gather takes
/// and the non-leading ones a scatter-add splits, a transposed source,
/// f32 and f64, repeated indices (a row's sums keep the reference's
/// order, so the results are bit-identical); an index out of range is the
/// reference's error with nothing written.
#[test]
fn gather_and_scatter_add_on_the_pool_equal_the_reference() {
    let (be, dev) = backend(2, 1);
    let cpu = Device::cpu();
    let mut rng = Rng::new(23);
    for (shape, dim) in [
        (vec![37, 50], 1usize),
        (vec![37, 50], 0),
        (vec![6, 9, 11], 2),
        (vec![6, 9, 11], 1),
        (vec![6, 9, 11], 0),
    ] {
        for dtype in [DType::F32, DType::F64] {
            let src = Tensor::randn(&shape, dtype, &cpu, &mut rng).unwrap();
            let srcs = [
                src.clone(),
                src.transpose(0, 1)
                    .unwrap()
                    .contiguous()
                    .unwrap()
                    .transpose(0, 1)
                    .unwrap(),
            ];
            let mut ishape = shape.clone();
            ishape[dim] = 7;
            let n: usize = ishape.iter().product();
            let ix: Vec<i64> = (0..n).map(|i| (i * 31 % shape[dim]) as i64).collect();
            let ix = Tensor::from_slice(&ix, &ishape, &cpu).unwrap();
            for s in &srcs {
                let want = s.gather(dim as isize, &ix).unwrap();
                let before = be.parallel_dispatches();
                let got = s
                    .to_device(&dev)
                    .unwrap()
                    .gather(dim as isize, &ix.to_device(&dev).unwrap())
                    .unwrap();
                assert!(
                    be.parallel_dispatches() > before,
                    "{shape:?} dim {dim}: on the pool"
                );
                assert_eq!(
                    got.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap(),
                    want.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
                );
                // scatter_add of the gathered values back (repeated indices).
                let want = s.scatter_add(dim as isize, &ix, &want).unwrap();
                let got = s
                    .to_device(&dev)
                    .unwrap()
                    .scatter_add(dim as isize, &ix.to_device(&dev).unwrap(), &got)
                    .unwrap();
                assert_eq!(
                    got.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap(),
                    want.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap(),
                    "{shape:?} dim {dim} {dtype:?}"
                );
            }
        }
    }
    // A bad index: the reference's error, the output untouched.
    let x = Tensor::randn(&[40, 50], DType::F32, &dev, &mut rng).unwrap();
    let bad: Vec<i64> = (0..40 * 8).map(|i| if i == 200 { 50 } else { 3 }).collect();
    let bad = Tensor::from_slice(&bad, &[40, 8], &dev).unwrap();
    assert!(matches!(
        x.gather(1, &bad),
        Err(kael_core::Error::IndexOutOfRange { .. })
    ));
    let copy = x.to_vec::<f32>().unwrap();
    let vals = Tensor::ones(&[40, 8], DType::F32, &dev).unwrap();
    assert!(x.scatter_add(1, &bad, &vals).is_err());
    assert_eq!(x.to_vec::<f32>().unwrap(), copy);
}

/// Batch norm's per-channel sums on the pool (NOTE [Batch norm sums by
/// channel]): the training forward (mean, variance, output) and its
/// backward equal the reference CPU's bit for bit, at one thread, at two
/// and inline, on planes with and without a ragged tail of lanes.
#[test]
fn batch_norm_sums_on_the_pool_equal_the_reference_bit_for_bit() {
    use kael_core::nn::functional::batch_norm;
    let cpu = Device::cpu();
    let mut rng = Rng::new(29);
    for shape in [vec![4, 5, 6, 7], vec![3, 6, 16], vec![2, 3, 1, 1]] {
        let x = Tensor::randn(&shape, DType::F32, &cpu, &mut rng)
            .unwrap()
            .mul_scalar(3.0)
            .unwrap()
            .add_scalar(1.5)
            .unwrap();
        let c = shape[1];
        let wgt = Tensor::randn(&[c], DType::F32, &cpu, &mut rng).unwrap();
        let bias = Tensor::randn(&[c], DType::F32, &cpu, &mut rng).unwrap();
        let gy = Tensor::randn(&shape, DType::F32, &cpu, &mut rng).unwrap();
        let run = |dev: &Device| -> (Vec<u32>, Vec<u32>, Vec<u32>, Vec<u32>) {
            let leaf = |t: &Tensor| {
                let t = t.to_device(dev).unwrap().detach().unwrap();
                t.requires_grad_(true).unwrap()
            };
            let (x, w, b) = (leaf(&x), leaf(&wgt), leaf(&bias));
            let rm = Tensor::zeros(&[c], DType::F32, dev).unwrap();
            let rv = Tensor::ones(&[c], DType::F32, dev).unwrap();
            let y = batch_norm(
                &x,
                Some(&rm),
                Some(&rv),
                Some(&w),
                Some(&b),
                true,
                0.1,
                1e-5,
            )
            .unwrap();
            y.mul(&gy.to_device(dev).unwrap())
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            let bits = |t: &Tensor| -> Vec<u32> {
                t.to_vec::<f32>()
                    .unwrap()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect()
            };
            let grads: Vec<u32> = [&x, &w, &b]
                .iter()
                .flat_map(|t| bits(&t.grad().unwrap()))
                .collect();
            (bits(&y), bits(&rm), bits(&rv), grads)
        };
        let want = run(&cpu);
        for (threads, threshold) in [(1, 1), (2, 1), (2, usize::MAX)] {
            let (_, dev) = backend(threads, threshold);
            assert_eq!(run(&dev), want, "{shape:?} at {threads} threads");
        }
    }
}

/// `index_select` as row copies on the pool equals the reference: every
/// `dim` of a 3-D source, repeated and out-of-order indices, dtypes of
/// every width; an index out of range is the reference's error.
#[test]
fn index_select_by_rows_on_the_pool_equals_the_reference() {
    let (be, dev) = backend(2, 1);
    let cpu = Device::cpu();
    let mut rng = Rng::new(31);
    let shape = [5usize, 6, 7];
    for dim in 0..3 {
        for dtype in [DType::F32, DType::F64, DType::I64, DType::U8, DType::F16] {
            let src = Tensor::randn(&shape, DType::F32, &cpu, &mut rng)
                .unwrap()
                .mul_scalar(50.0)
                .unwrap()
                .abs()
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            let ix: Vec<i64> = (0..9).map(|i| (i * 5 % shape[dim]) as i64).collect();
            let ix = Tensor::from_slice(&ix, &[9], &cpu).unwrap();
            let want = src.index_select(dim as isize, &ix).unwrap();
            let before = be.parallel_dispatches();
            let got = src
                .to_device(&dev)
                .unwrap()
                .index_select(dim as isize, &ix.to_device(&dev).unwrap())
                .unwrap();
            assert!(
                be.parallel_dispatches() > before,
                "dim {dim} {dtype:?}: on the pool"
            );
            assert_eq!(got.shape(), want.shape());
            assert_eq!(
                got.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap(),
                want.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap(),
                "dim {dim} {dtype:?}"
            );
        }
    }
    let src = Tensor::randn(&shape, DType::F32, &dev, &mut rng).unwrap();
    let bad = Tensor::from_slice(&[0i64, 6], &[2], &dev).unwrap();
    let err = src.index_select(1, &bad).unwrap_err().to_string();
    assert!(err.contains("index_select"), "{err}");
}
