//! `kael-bench`: the figures of issue 6, each beside a baseline measured in
//! the same run (memcpy bandwidth for memory-bound ops, the `gemm` crate
//! alone for matmul, the reference CPU device for whole steps), with the
//! issue's target and whether it is met.
//!
//! Run: `cargo run --release -p kael-host --bin kael-bench [-- --quick]`
//! (`--quick`: fewer repetitions and no n=2048, a CI smoke run).

mod families;
#[path = "../kael-train/model.rs"]
mod model;
mod peers;

use kael_core::nn::{Linear, Module, Reduction, cross_entropy};
use kael_core::optim::{Adam, AdamConfig, Optimizer, Sgd, SgdConfig};
use kael_core::{DType, Device, Rng, Tensor, no_grad};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;
use std::time::Instant;

/// Counts the calling thread's heap allocations, to report allocations
/// per view. A thread-local count, not a shared atomic: an atomic
/// read-modify-write costs ~10 ns here, a tenth of a view, and would be
/// timed with it.
struct Counting;

thread_local! {
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn count_alloc() {
    // `try_with`: never fails for a const-initialised Cell (no destructor),
    // and an allocation must not panic if it did.
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

fn allocs_so_far() -> usize {
    ALLOCS.try_with(Cell::get).unwrap_or(0)
}

// SAFETY: forwards every call to `System` unchanged; the counter is a
// thread-local cell with no effect on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count_alloc();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count_alloc();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count_alloc();
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

type R<T> = Result<T, Box<dyn std::error::Error>>;

/// Median seconds of `reps` runs of `f` (after one warm-up run).
fn time(reps: usize, mut f: impl FnMut() -> R<()>) -> R<f64> {
    f()?;
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        v.push(t.elapsed().as_secs_f64());
    }
    v.sort_by(f64::total_cmp);
    Ok(v[v.len() / 2])
}

/// How a row's target reads.
enum Target {
    /// The figure must be at least this.
    AtLeast(f64),
    /// The figure must be at most this.
    AtMost(f64),
    /// The ratio (figure / baseline, or baseline / figure for times) at least this.
    RatioAtLeast(f64),
    /// No target in the issue.
    None,
}

struct Table {
    rows: Vec<String>,
}

impl Table {
    /// `higher`: whether a bigger figure is better (ratio = fig / base),
    /// else ratio = base / fig.
    #[allow(clippy::too_many_arguments)]
    fn row(
        &mut self,
        name: &str,
        fig: f64,
        base: f64,
        unit: &str,
        base_name: &str,
        higher: bool,
        t: Target,
    ) {
        let ratio = if higher { fig / base } else { base / fig };
        let (tgt, met) = match t {
            Target::AtLeast(x) => (
                format!(">= {x} {unit}"),
                if fig >= x { "yes" } else { "no" },
            ),
            Target::AtMost(x) => (
                format!("<= {x} {unit}"),
                // a hair of slack, so that "1 allocation" reads as met
                if fig <= x * 1.001 { "yes" } else { "no" },
            ),
            Target::RatioAtLeast(x) => (
                format!("ratio >= {x}"),
                if ratio >= x { "yes" } else { "no" },
            ),
            Target::None => ("-".to_string(), "-"),
        };
        let line = format!(
            "| {name:<38} | {fig:>10.3} {unit:<7} | {base:>10.3} ({base_name:<14}) | {ratio:>6.2} | {tgt:<18} | {met:<3} |"
        );
        println!("{line}");
        self.rows.push(line);
    }
}

fn gflops(m: usize, n: usize, k: usize, s: f64) -> f64 {
    2.0 * (m * n * k) as f64 / s / 1e9
}

/// `gemm` alone on row-major buffers, in a pool of `threads`.
fn gemm_alone(pool: &rayon::ThreadPool, threads: usize, n: usize, reps: usize) -> R<f64> {
    let s = gemm_alone_secs(pool, (n, n, n), gemm::Parallelism::Rayon(threads), reps)?;
    Ok(gflops(n, n, n, s))
}

/// Seconds for one `m x k @ k x n` product through `gemm` alone, on
/// row-major buffers, with `par` (run in `pool`).
fn gemm_alone_secs(
    pool: &rayon::ThreadPool,
    (m, n, k): (usize, usize, usize),
    par: gemm::Parallelism,
    reps: usize,
) -> R<f64> {
    let a = vec![1.0f32; m * k];
    let b = vec![0.5f32; k * n];
    let mut c = vec![0.0f32; m * n];
    time(reps, || {
        pool.install(|| {
            // SAFETY: three live row-major buffers of m*k, k*n and m*n
            // elements; `c` is exclusive.
            unsafe {
                gemm::gemm(
                    m,
                    n,
                    k,
                    c.as_mut_ptr(),
                    1,
                    n as isize,
                    false,
                    a.as_ptr(),
                    1,
                    k as isize,
                    b.as_ptr(),
                    1,
                    n as isize,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    par,
                )
            }
        });
        black_box(&c);
        Ok(())
    })
}

/// The MLP step's five products (forward 784->256 and 256->10; backward
/// the two weight gradients and the hidden gradient; the input needs
/// none) through `gemm` alone, each with the faster of one thread and
/// gemm's own threading: the step's floor in matrix products.
fn mlp_products_alone(pool: &rayon::ThreadPool, threads: usize, reps: usize) -> R<f64> {
    let shapes = [
        (64, 256, 784),
        (64, 10, 256),
        (10, 256, 64),
        (64, 256, 10),
        (256, 784, 64),
    ];
    let mut total = 0.0;
    for mnk in shapes {
        let one = gemm_alone_secs(pool, mnk, gemm::Parallelism::None, reps)?;
        let many = gemm_alone_secs(pool, mnk, gemm::Parallelism::Rayon(threads), reps)?;
        total += one.min(many);
    }
    Ok(total)
}

/// memcpy bandwidth in GB/s counting bytes read + written.
fn memcpy_gbs(bytes: usize, reps: usize) -> R<f64> {
    Ok(2.0 * bytes as f64 / memcpy_secs(bytes, reps)? / 1e9)
}

/// Seconds for one `memcpy` of `bytes` (median of `reps`) on one thread.
fn memcpy_secs(bytes: usize, reps: usize) -> R<f64> {
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    time(reps, || {
        dst.copy_from_slice(black_box(&src));
        black_box(&dst);
        Ok(())
    })
}

fn mlp_step(dev: &Device, reps: usize, adam: bool) -> R<f64> {
    let mut rng = Rng::new(0);
    let l1 = Linear::new(784, 256, true, dev, &mut rng)?;
    let l2 = Linear::new(256, 10, true, dev, &mut rng)?;
    let x = Tensor::randn(&[64, 784], DType::F32, dev, &mut rng)?;
    let labels: Vec<i64> = (0..64).map(|i| (i * 7 % 10) as i64).collect();
    let y = Tensor::from_slice(&labels, &[64], dev)?;
    let mut params = l1.parameters();
    params.extend(l2.parameters());
    let mut opt: Box<dyn Optimizer> = if adam {
        Box::new(Adam::new(params, AdamConfig::default())?)
    } else {
        Box::new(Sgd::new(
            params,
            SgdConfig {
                lr: 0.01,
                ..SgdConfig::default()
            },
        )?)
    };
    let s = time(reps, || {
        opt.zero_grad();
        let h = l1.forward(&x)?.relu()?;
        let loss = cross_entropy(&l2.forward(&h)?, &y, Reduction::Mean, None)?;
        loss.backward()?;
        opt.step()?;
        Ok(())
    })?;
    Ok(s * 1e6)
}

fn main() -> R<()> {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    // `--only NAME`: run one section (matmul, memory, softmax, views, mlp,
    // backward, peers, families); `--figure NAME`: one figure of `peers`
    // (`products`: its matmul figures) or of `families`.
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let figure = args
        .iter()
        .position(|a| a == "--figure")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let want = |section: &str| only.as_deref().is_none_or(|o| o == section);
    let reps = if quick { 3 } else { 11 };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let dev = kael_host::cpu_threaded::device()?;
    let cpu = Device::cpu();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?;
    let mut rng = Rng::new(1);
    let mut t = Table { rows: Vec::new() };
    println!(
        "kael-bench ({} run, {threads} threads, median of {reps})",
        if quick { "quick" } else { "full" }
    );
    // Which kernels each device runs itself (NOTE [Family table]): a slow
    // inherited family shows here before it shows in a figure.
    for d in [&dev, &cpu] {
        println!(
            "families, {}",
            kael_core::backend::family::report(d.backend())
        );
    }
    println!();
    println!("| figure | value | baseline | ratio | target | met |");
    println!("|---|---|---|---|---|---|");

    // ---- matmul
    let mut tr = 0.0;
    if want("matmul") {
        let sizes: &[usize] = if quick {
            &[256, 512]
        } else {
            &[256, 512, 1024, 2048]
        };
        for &n in sizes {
            let r = if n >= 2048 { reps.min(5) } else { reps };
            let base = gemm_alone(&pool, threads, n, r)?;
            let a = Tensor::randn(&[n, n], DType::F32, &dev, &mut rng)?;
            let b = Tensor::randn(&[n, n], DType::F32, &dev, &mut rng)?;
            let s = time(r, || {
                black_box(a.matmul(&b)?);
                Ok(())
            })?;
            let fig = gflops(n, n, n, s);
            let tgt = if n >= 512 {
                Target::RatioAtLeast(0.9)
            } else {
                Target::None
            };
            t.row(
                &format!("sgemm n={n} (GFLOP/s)"),
                fig,
                base,
                "GFLOP/s",
                "gemm alone",
                true,
                tgt,
            );
            if n >= 512 {
                t.row(
                    &format!("sgemm n={n} absolute"),
                    fig,
                    base,
                    "GFLOP/s",
                    "gemm alone",
                    true,
                    Target::AtLeast(180.0),
                );
            }
        }
        {
            let a = Tensor::randn(&[32, 128, 128], DType::F32, &dev, &mut rng)?;
            let b = Tensor::randn(&[32, 128, 128], DType::F32, &dev, &mut rng)?;
            let s = time(reps, || {
                black_box(a.matmul(&b)?);
                Ok(())
            })?;
            let base = gemm_alone(&pool, threads, 128, reps)?;
            t.row(
                "batched matmul 32x128x128",
                gflops(32 * 128, 128, 128, s),
                base,
                "GFLOP/s",
                "gemm 128 alone",
                true,
                Target::None,
            );
        }
        tr = {
            let a = Tensor::randn(&[1024, 1024], DType::F32, &dev, &mut rng)?;
            let b = Tensor::randn(&[1024, 1024], DType::F32, &dev, &mut rng)?;
            let bt = b.t()?;
            let s = time(reps, || {
                black_box(a.matmul(&bt)?);
                Ok(())
            })?;
            gflops(1024, 1024, 1024, s)
        };
    }

    // ---- memory-bound ops at 16M elements
    if want("memory") {
        let n = 1 << 24;
        let mc = memcpy_gbs(n * 4, reps)?;
        let a = Tensor::randn(&[4096, 4096], DType::F32, &dev, &mut rng)?;
        let b = Tensor::randn(&[4096, 4096], DType::F32, &dev, &mut rng)?;
        let s = time(reps, || {
            black_box(a.add(&b)?);
            Ok(())
        })?;
        t.row(
            "add 16M contiguous (GB/s, 12 B/el)",
            12.0 * n as f64 / s / 1e9,
            mc,
            "GB/s",
            "memcpy",
            true,
            Target::RatioAtLeast(0.8),
        );
        let bt = b.t()?;
        let s = time(reps, || {
            black_box(a.add(&bt)?);
            Ok(())
        })?;
        t.row(
            "add 16M one transposed operand",
            12.0 * n as f64 / s / 1e9,
            mc,
            "GB/s",
            "memcpy",
            true,
            Target::None,
        );
        let c = a.deep_clone()?;
        let s = time(reps, || {
            no_grad(|| c.add_(&b))?;
            Ok(())
        })?;
        t.row(
            "add_ 16M in place",
            12.0 * n as f64 / s / 1e9,
            mc,
            "GB/s",
            "memcpy",
            true,
            Target::RatioAtLeast(0.8),
        );
        let s = time(reps, || {
            black_box(a.sum_all()?);
            Ok(())
        })?;
        t.row(
            "sum 16M (GB/s, 4 B/el)",
            4.0 * n as f64 / s / 1e9,
            mc,
            "GB/s",
            "memcpy",
            true,
            Target::None,
        );
        drop((a, b, bt, c));
    }

    // ---- softmax, transpose copy
    // Both are memory-bound: each is shown beside the same run's memcpy of
    // the bytes it reads (ratio = memcpy time / op time, so 1.0 means as
    // fast as copying its input once on one thread).
    if want("softmax") {
        let x = Tensor::randn(&[4096, 1024], DType::F32, &dev, &mut rng)?;
        let base = memcpy_secs(4096 * 1024 * 4, reps)?;
        let s = time(reps, || {
            black_box(x.softmax(-1)?);
            Ok(())
        })?;
        t.row(
            "row softmax 4096x1024 (ms)",
            s * 1e3,
            base * 1e3,
            "ms",
            "memcpy 16 MiB",
            false,
            Target::AtMost(1.5),
        );
        let m = Tensor::randn(&[1024, 1024], DType::F32, &dev, &mut rng)?;
        let base = memcpy_secs(1024 * 1024 * 4, reps)?;
        let s = time(reps, || {
            black_box(m.t()?.contiguous()?);
            Ok(())
        })?;
        t.row(
            "t().contiguous() 1024x1024 (ms)",
            s * 1e3,
            base * 1e3,
            "ms",
            "memcpy 4 MiB",
            false,
            Target::AtMost(0.6),
        );
    }

    // ---- handles and views
    if want("views") {
        let iters = if quick { 100_000 } else { 1_000_000 };
        let small = Tensor::zeros(&[16, 16], DType::F32, &dev)?;
        let s = time(reps, || {
            for _ in 0..iters {
                black_box(black_box(&small).clone());
            }
            Ok(())
        })?;
        let clone_ns = s * 1e9 / iters as f64;
        let s = time(reps, || {
            for _ in 0..iters {
                black_box(black_box(&small).t()?);
            }
            Ok(())
        })?;
        let before = allocs_so_far();
        for _ in 0..iters {
            black_box(black_box(&small).t()?);
        }
        let allocs = (allocs_so_far() - before) as f64 / iters as f64;
        let view_ns = s * 1e9 / iters as f64;
        t.row(
            "view creation t() (ns)",
            view_ns,
            clone_ns,
            "ns",
            "handle clone",
            false,
            Target::AtMost(50.0),
        );
        t.row(
            "heap allocations per view",
            allocs,
            1.0,
            "allocs",
            "one",
            false,
            Target::AtMost(1.0),
        );
        t.row(
            "handle clone (ns)",
            clone_ns,
            clone_ns,
            "ns",
            "itself",
            false,
            Target::None,
        );
    }

    // ---- MLP step
    if want("mlp") {
        let r = if quick { 5 } else { 31 };
        let floor = mlp_products_alone(&pool, threads, if quick { 5 } else { 101 })? * 1e6;
        for (adam, name) in [(false, "SGD"), (true, "Adam")] {
            let base = mlp_step(&cpu, r, adam)?;
            let fig = mlp_step(&dev, if quick { 5 } else { 201 }, adam)?;
            t.row(
                &format!("MLP 784-256-10 b=64 step, {name} (us)"),
                fig,
                base,
                "us",
                "reference cpu",
                false,
                Target::AtMost(830.0),
            );
            t.row(
                &format!("MLP step, {name}, vs its products"),
                fig,
                floor,
                "us",
                "gemm alone",
                false,
                Target::None,
            );
        }
    }

    // ---- backward overhead per node
    if want("backward") {
        let chain = if quick { 10_000 } else { 100_000 };
        let x1 = Tensor::ones(&[1], DType::F32, &dev)?;
        let run_chain = |x: &Tensor| -> R<Tensor> {
            let mut y = x.clone();
            for _ in 0..chain {
                y = y.affine(1.0, 1.0)?;
            }
            Ok(y)
        };
        let plain = time(reps.min(5), || {
            no_grad(|| run_chain(&x1))?;
            Ok(())
        })?;
        let mut bw = Vec::new();
        for _ in 0..reps.min(5) {
            let x = Tensor::ones(&[1], DType::F32, &dev)?.requires_grad_(true)?;
            let y = run_chain(&x)?;
            let st = Instant::now();
            y.backward()?;
            bw.push(st.elapsed().as_secs_f64());
        }
        bw.sort_by(f64::total_cmp);
        let per = bw[bw.len() / 2] * 1e9 / chain as f64;
        t.row(
            "backward per node (ns)",
            per,
            plain * 1e9 / chain as f64,
            "ns",
            "fwd no_grad op",
            false,
            Target::None,
        );
    }
    if want("peers") {
        peers::run(quick, figure.as_deref())?;
    }
    if want("families") {
        // `--threads T` (families only): the device's and PyTorch's threads.
        let t = args
            .iter()
            .position(|a| a == "--threads")
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(threads.min(2));
        families::run(quick, figure.as_deref(), t)?;
    }
    if tr > 0.0 {
        println!();
        println!("also: matmul 1024 with a transposed rhs (strided, no copy): {tr:.1} GFLOP/s");
    }
    Ok(())
}
