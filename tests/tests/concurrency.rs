//! Concurrency (`sync` mode: kael-host turns it on for this crate): many
//! threads reading shared tensors and building graphs; concurrent writes to
//! one storage either serialise or fail with `BorrowConflict`, never a torn
//! value, a panic or a deadlock. Every test runs its threads under a
//! deadline and fails if it is exceeded.
//!
//! Run under ThreadSanitizer by `scripts/reliability.sh` (TSan tier).
mod common;

use kael_core::{DType, Device, Error, Rng, Tensor, is_grad_enabled, no_grad};
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

/// Deadline for one test's threads: generous, because Miri and TSan run
/// these too (orders of magnitude slower than native).
const DEADLINE: Duration = Duration::from_secs(120);

/// Iterations per thread: fewer under Miri.
fn iters(native: usize) -> usize {
    if cfg!(miri) {
        (native / 50).max(2)
    } else {
        native
    }
}

fn threads() -> usize {
    if cfg!(miri) { 3 } else { 8 }
}

/// Runs `f(0..n)` on `n` threads and returns their results in order. Fails
/// the test when a thread panics or when they are not all done by
/// [`DEADLINE`] (a deadlock, or a livelock).
fn run_threads<R, F>(n: usize, f: F) -> Vec<R>
where
    R: Send + 'static,
    F: Fn(usize) -> R + Send + Sync + 'static,
{
    let f = Arc::new(f);
    let (tx, rx) = mpsc::channel();
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (f, tx) = (f.clone(), tx.clone());
            thread::spawn(move || {
                let r = f(i);
                let _ = tx.send((i, r));
            })
        })
        .collect();
    drop(tx);
    let mut out: Vec<Option<R>> = (0..n).map(|_| None).collect();
    let start = std::time::Instant::now();
    for _ in 0..n {
        let left = DEADLINE.saturating_sub(start.elapsed());
        match rx.recv_timeout(left) {
            Ok((i, r)) => out[i] = Some(r),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("threads still running after {DEADLINE:?}: deadlock or livelock")
            }
            // A thread panicked (its sender dropped unsent): join to report it.
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    for h in handles {
        if let Err(p) = h.join() {
            std::panic::resume_unwind(p);
        }
    }
    out.into_iter()
        .map(|r| r.expect("every thread reported"))
        .collect()
}

#[test]
fn tensors_are_send_and_sync_in_this_crate() {
    fn check<T: Send + Sync>() {}
    check::<Tensor>();
    check::<Device>();
}

#[test]
fn threads_build_graphs_and_backprop_on_shared_read_only_inputs() {
    let dev = Device::cpu();
    let x = Tensor::randn(&[4, 8], DType::F32, &dev, &mut Rng::new(1)).unwrap();
    let x_before = common::snapshot(&x);
    let n = threads();
    // Single-threaded reference gradient for each thread's own leaf.
    let grad_of = |x: &Tensor, seed: u64| -> Vec<f32> {
        let w = Tensor::randn(&[8, 3], DType::F32, &Device::cpu(), &mut Rng::new(seed))
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let loss = x.matmul(&w).unwrap().tanh().unwrap().sum_all().unwrap();
        loss.backward().unwrap();
        w.grad().unwrap().to_vec::<f32>().unwrap()
    };
    let want: Vec<Vec<f32>> = (0..n).map(|i| grad_of(&x, 100 + i as u64)).collect();
    let xs = x.clone();
    let got = run_threads(n, move |i| {
        let mut last = Vec::new();
        for _ in 0..iters(100) {
            // Views of the shared input, built concurrently.
            let xv = xs.t().unwrap().t().unwrap();
            last = grad_of(&xv, 100 + i as u64);
        }
        last
    });
    assert_eq!(
        got, want,
        "per-thread gradients equal the single-threaded ones"
    );
    assert_eq!(
        common::snapshot(&x),
        x_before,
        "the shared input is unchanged"
    );
    assert_eq!(x.handle_count(), 1, "threads dropped every handle");
}

#[test]
fn concurrent_readers_never_conflict() {
    let dev = Device::cpu();
    let t = Tensor::arange(0.0f32, 256.0, &dev)
        .unwrap()
        .reshape(&[16, 16])
        .unwrap();
    let want_sum = (0..256).sum::<i32>() as f32;
    let tt = t.clone();
    let sums = run_threads(threads(), move |i| {
        let mut acc = 0.0;
        for k in 0..iters(200) {
            // Reads of one storage from every thread at once: shared borrows.
            let v = match (i + k) % 3 {
                0 => tt.sum_all().unwrap().item::<f32>().unwrap(),
                1 => tt
                    .t()
                    .unwrap()
                    .contiguous()
                    .unwrap()
                    .sum_all()
                    .unwrap()
                    .item::<f32>()
                    .unwrap(),
                _ => tt.to_vec::<f32>().unwrap().iter().sum(),
            };
            acc = v;
        }
        acc
    });
    assert!(sums.iter().all(|&s| s == want_sum), "{sums:?}");
    assert_eq!(t.version(), 0);
}

/// Writers `add_` ones into one tensor while readers read it: each call
/// either applies whole or fails with `BorrowConflict`; the final value is
/// exactly the number of successful adds; no read ever sees a torn tensor.
#[test]
fn concurrent_inplace_adds_serialise_or_conflict() {
    let dev = Device::cpu();
    let t = Tensor::zeros(&[4096], DType::I64, &dev).unwrap();
    let one = Tensor::ones(&[4096], DType::I64, &dev).unwrap();
    let n = threads();
    let (tt, oo) = (t.clone(), one.clone());
    let results = run_threads(n, move |i| {
        let (mut ok, mut conflicts, mut reads) = (0usize, 0usize, 0usize);
        for _ in 0..iters(300) {
            if i % 2 == 0 {
                match tt.add_(&oo) {
                    Ok(()) => ok += 1,
                    Err(Error::BorrowConflict { op }) => {
                        assert!(!op.is_empty());
                        conflicts += 1
                    }
                    Err(e) => panic!("unexpected error from a racing add_: {e}"),
                }
            } else {
                match tt.to_vec::<i64>() {
                    Ok(v) => {
                        assert!(
                            v.iter().all(|&x| x == v[0]),
                            "torn read: {} distinct values",
                            {
                                let mut d = v.clone();
                                d.sort_unstable();
                                d.dedup();
                                d.len()
                            }
                        );
                        reads += 1;
                    }
                    Err(Error::BorrowConflict { .. }) => conflicts += 1,
                    Err(e) => panic!("unexpected error from a racing read: {e}"),
                }
            }
        }
        (ok, conflicts, reads)
    });
    let applied: usize = results.iter().map(|r| r.0).sum();
    let v = t.to_vec::<i64>().unwrap();
    assert!(
        v.iter().all(|&x| x == applied as i64),
        "serialised result: {applied} adds"
    );
    assert_eq!(t.version(), applied, "one version bump per applied add_");
    // Alone again, the next add always lands (how many racing ones did is
    // up to the scheduler).
    t.add_(&one).unwrap();
    assert!(
        t.to_vec::<i64>()
            .unwrap()
            .iter()
            .all(|&x| x == applied as i64 + 1)
    );
    assert_eq!(
        one.to_vec::<i64>().unwrap(),
        vec![1; 4096],
        "the source is unchanged"
    );
    eprintln!(
        "concurrent add_: {applied} applied, {} conflicts, {} clean reads",
        results.iter().map(|r| r.1).sum::<usize>(),
        results.iter().map(|r| r.2).sum::<usize>()
    );
}

/// Threads filling disjoint views of one storage: a conflict is reported
/// (the borrow is per storage) and a retry lands, so every slice ends with
/// its own value.
#[test]
fn writes_to_disjoint_views_of_one_storage_all_land_after_retries() {
    let dev = Device::cpu();
    let n = threads();
    let t = Tensor::zeros(&[n * 64], DType::F32, &dev).unwrap();
    let tt = t.clone();
    let barrier = Arc::new(Barrier::new(n));
    let retries = run_threads(n, move |i| {
        let v = tt.narrow(0, i * 64, 64).unwrap();
        barrier.wait();
        let mut retries = 0usize;
        for round in 0..iters(50) {
            loop {
                match v.fill_((i * 1000 + round) as f64) {
                    Ok(()) => break,
                    Err(Error::BorrowConflict { .. }) => {
                        retries += 1;
                        assert!(retries < 10_000_000, "no progress: livelock");
                        thread::yield_now();
                    }
                    Err(e) => panic!("unexpected error: {e}"),
                }
            }
        }
        retries
    });
    let last = iters(50) - 1;
    let v = t.to_vec::<f32>().unwrap();
    for i in 0..n {
        let want = (i * 1000 + last) as f32;
        assert!(
            v[i * 64..(i + 1) * 64].iter().all(|&x| x == want),
            "slice {i}"
        );
    }
    assert_eq!(t.version(), n * iters(50));
    eprintln!(
        "disjoint fills: {} retries after conflicts",
        retries.iter().sum::<usize>()
    );
}

#[test]
fn handles_and_views_made_and_dropped_concurrently_keep_exact_counts() {
    let dev = Device::cpu();
    let t = Tensor::arange(0.0f32, 24.0, &dev)
        .unwrap()
        .reshape(&[2, 3, 4])
        .unwrap();
    let root = t.base().unwrap();
    let tt = t.clone();
    run_threads(threads(), move |i| {
        for k in 0..iters(500) {
            let a = tt.clone();
            let v = match (i + k) % 4 {
                0 => a.transpose(0, 2).unwrap(),
                1 => a.narrow(1, 1, 2).unwrap(),
                2 => a.unsqueeze(0).unwrap().expand(&[3isize, 2, 3, 4]).unwrap(),
                _ => a.detach().unwrap(),
            };
            assert!(v.shares_storage(&a));
            assert!(v.layout().reach() <= v.storage_nbytes() / 4);
        }
    });
    assert_eq!(t.handle_count(), 1, "every clone was dropped");
    // root + t (its view) hold the storage.
    assert_eq!(t.storage_ref_count(), 2);
    assert_eq!(root.handle_count(), 2, "ours + t's base");
}

#[test]
fn grad_mode_is_per_thread() {
    let barrier = Arc::new(Barrier::new(2));
    let b = barrier.clone();
    let dev = Device::cpu();
    let w = Tensor::ones(&[3], DType::F32, &dev)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let ww = w.clone();
    let recorded = run_threads(2, move |i| {
        let mut recorded = 0;
        if i == 0 {
            no_grad(|| {
                b.wait();
                for _ in 0..iters(200) {
                    assert!(!is_grad_enabled());
                    assert!(ww.mul_scalar(2.0).unwrap().grad_fn_name().is_none());
                }
                b.wait();
            });
        } else {
            barrier.wait();
            for _ in 0..iters(200) {
                assert!(is_grad_enabled(), "another thread's no_grad leaked here");
                if ww.mul_scalar(2.0).unwrap().grad_fn_name().is_some() {
                    recorded += 1;
                }
            }
            barrier.wait();
        }
        recorded
    });
    assert_eq!(recorded[1], iters(200));
}

/// The arena's buffer: a static, as on firmware (and not a leaked `Box`,
/// which Miri's leak check would report).
fn arena_buffer() -> &'static mut [u8] {
    use std::sync::atomic::{AtomicBool, Ordering};
    const N: usize = 1 << 16;
    static TAKEN: AtomicBool = AtomicBool::new(false);
    static mut BUF: [u8; N] = [0; N];
    assert!(
        !TAKEN.swap(true, Ordering::SeqCst),
        "the arena buffer is taken once"
    );
    // SAFETY: the flag above hands the buffer out at most once, so this is
    // the only reference to it for the rest of the program.
    unsafe { &mut *std::ptr::addr_of_mut!(BUF) }
}

/// Threads allocating and freeing from one shared arena (its first-fit
/// list behind the core's spin lock): results are right and every byte
/// comes back.
#[test]
fn threads_sharing_one_arena_allocator_get_right_results_and_return_every_byte() {
    use kael_core::allocator::ArenaAllocator;
    use kael_core::shared::Shared;
    let dev = Device::cpu_with_allocator(Shared::new(ArenaAllocator::<16>::new(arena_buffer())));
    let n = threads();
    let d = dev.clone();
    let res = run_threads(n, move |i| {
        let mut total = 0.0f32;
        for _ in 0..iters(100) {
            // An arena this small (16 block slots) may be momentarily full,
            // for the input as well as the product: OutOfMemory is an
            // answer, never a corrupted block.
            let r = Tensor::full(&[8, 8], (i + 1) as f64, DType::F32, &d)
                .and_then(|a| a.matmul(&a))
                .and_then(|p| p.sum_all());
            match r {
                Ok(s) => total = s.item::<f32>().unwrap(),
                Err(Error::OutOfMemory { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
        total
    });
    for (i, s) in res.iter().enumerate() {
        let v = (i + 1) as f32;
        assert!(*s == 0.0 || *s == v * v * 8.0 * 64.0, "thread {i}: {s}");
    }
    assert_eq!(dev.allocator().stats().in_use, 0, "every block returned");
}

/// Backward passes on several threads into one shared leaf: every gradient
/// is accumulated (a plain read-add-store would lose some).
#[test]
fn concurrent_backward_passes_into_one_leaf_accumulate_every_gradient() {
    let dev = Device::cpu();
    let w = Tensor::ones(&[64], DType::F32, &dev)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let n = threads();
    let per = iters(200);
    let ww = w.clone();
    run_threads(n, move |i| {
        for _ in 0..per {
            let loss = ww.mul_scalar((i + 1) as f64).unwrap().sum_all().unwrap();
            loss.backward().unwrap();
        }
    });
    // d/dw sum((i+1) w) = i+1, `per` times per thread.
    let want = (1..=n).sum::<usize>() * per;
    let g = w.grad().unwrap().to_vec::<f32>().unwrap();
    assert!(
        g.iter().all(|&x| x == want as f32),
        "got {}, want {want}",
        g[0]
    );
}

/// One retained graph differentiated on several threads at once: each
/// run reads the nodes' rules where they are (under a read of their
/// lock), so every thread gets the exact gradient, none waits for another
/// and none finds the saved tensors gone.
#[test]
fn threads_differentiate_one_retained_graph_at_once() {
    use kael_core::autograd::{BackwardOptions, grad};
    let dev = Device::cpu();
    let x = Tensor::from_slice(&[1.0f32, -2.0, 3.0, 0.5], &[4], &dev)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    // y = sum(x * x * x): saves tensors (mul) and keeps them (retained).
    let y = x.mul(&x).unwrap().mul(&x).unwrap().sum_all().unwrap();
    let per = iters(200);
    let (xx, yy) = (x.clone(), y.clone());
    let grads = run_threads(threads(), move |_| {
        let opts = BackwardOptions {
            retain_graph: true,
            ..BackwardOptions::default()
        };
        let mut last = Vec::new();
        for _ in 0..per {
            let g = grad(&[&yy], &[&xx], &[], opts).unwrap();
            last = g[0].as_ref().unwrap().to_vec::<f32>().unwrap();
        }
        last
    });
    // d/dx sum(x^3) = 3x^2, exact in f32 for these inputs.
    for g in grads {
        assert_eq!(g, vec![3.0, 12.0, 27.0, 0.75]);
    }
    // The graph is still whole: a last backward without retain frees it.
    y.backward().unwrap();
    assert_eq!(
        x.grad().unwrap().to_vec::<f32>().unwrap(),
        vec![3.0, 12.0, 27.0, 0.75]
    );
}

/// Threads sharing one threaded device (threshold 1, so every op hands work
/// to the pool): one caller's job at a time gets the workers, the others
/// run theirs alone (NOTE [Spinning pool]); every result is exact.
#[test]
fn threads_sharing_one_threaded_device_get_exact_results() {
    let dev = kael_host::cpu_threaded::Builder::new()
        .threads(3)
        .parallel_threshold(1)
        .build()
        .unwrap();
    let results = run_threads(threads(), move |i| {
        let base = Tensor::arange(0.0f32, 64.0, &dev).unwrap();
        let mut ok = true;
        for k in 0..iters(100) {
            let c = (i * 7 + k) as f32;
            let y = base.add_scalar(f64::from(c)).unwrap().mul(&base).unwrap();
            let want: Vec<f32> = (0..64).map(|j| (j as f32 + c) * j as f32).collect();
            ok &= y.to_vec::<f32>().unwrap() == want;
        }
        ok
    });
    assert!(results.iter().all(|&r| r), "{results:?}");
}

#[test]
fn ops_read_a_tensor_while_another_thread_moves_it_between_devices() {
    // Operands are lent under a read lock of their placement held across
    // the kernel (NOTE [Small-op path]); `move_to_` takes it to write. A
    // tensor lent twice to one op (`w + w`) takes the read lock twice.
    let cpu = Device::cpu();
    let threaded = kael_host::cpu_threaded::Builder::new()
        .threads(2)
        .build()
        .unwrap();
    let w = Tensor::from_slice(&[1.0f32, -2.0, 3.5, 0.25], &[4], &cpu).unwrap();
    let ws = w.clone();
    let got = run_threads(threads(), move |i| {
        for k in 0..iters(400) {
            if i == 0 {
                let to = if k % 2 == 0 { &threaded } else { &cpu };
                ws.move_to_(to).unwrap();
            } else {
                let sum = ws.add(&ws).unwrap();
                if sum.to_vec::<f32>().unwrap() != [2.0f32, -4.0, 7.0, 0.5] {
                    return false;
                }
            }
        }
        true
    });
    assert!(got.into_iter().all(|ok| ok), "every sum read whole values");
    assert_eq!(w.to_vec::<f32>().unwrap(), [1.0f32, -2.0, 3.5, 0.25]);
}

/// NOTE [Writers get in]: an optimizer step while two other threads read
/// its parameters without pause gets in (it once failed with
/// `BorrowConflict` 300 times out of 300), and each step lands whole: the
/// parameters follow SGD's closed form exactly.
#[test]
fn an_optimizer_step_gets_in_among_continuous_readers() {
    use kael_core::optim::{Optimizer, Sgd, SgdConfig};
    use std::sync::atomic::{AtomicBool, Ordering};
    let dev = Device::cpu();
    let n = if cfg!(miri) { 64 } else { 4096 };
    let p = Tensor::ones(&[n], DType::F32, &dev)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let mut opt = Sgd::new(
        vec![p.clone()],
        SgdConfig {
            lr: 0.25,
            ..SgdConfig::default()
        },
    )
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (p, stop) = (p.clone(), stop.clone());
            thread::spawn(move || {
                let mut reads = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(v) = p.detach().unwrap().to_vec::<f32>() {
                        assert!(v.iter().all(|&x| x == v[0]), "torn read");
                        reads += 1;
                    }
                }
                reads
            })
        })
        .collect();
    let steps = iters(300);
    let mut failed = 0;
    for _ in 0..steps {
        opt.zero_grad();
        // d/dp sum(p) = 1: each step subtracts lr
        p.sum_all().unwrap().backward().unwrap();
        match opt.step() {
            Ok(()) => {}
            Err(Error::BorrowConflict { .. }) => failed += 1,
            Err(e) => panic!("{e}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let reads: usize = readers.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(
        failed, 0,
        "{failed} of {steps} steps were shut out ({reads} reads)"
    );
    let want = 1.0 - 0.25 * steps as f32;
    assert!(p.to_vec::<f32>().unwrap().iter().all(|&x| x == want));
}
