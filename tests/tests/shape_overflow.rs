//! Every public operation that builds an output shape computes its element
//! count with checked arithmetic before anything is allocated or written
//! (README, "Reliability promises"): operands are expanded (stride-0) views,
//! so each one is cheap while the output's element count overflows `usize`
//! or its byte size does. Each op must return an `Err` naming itself (or
//! the allocator's out-of-memory, which names none), never panic, never
//! wrap to a small size. A seeded property test then drives random
//! broadcast, matmul, cat and repeat shapes through the same promise.

mod common;

use common::devices;
use kael_core::nn::functional as F;
use kael_core::nn::pad_dim;
use kael_core::{DType, Device, Error, Tensor};
use std::panic::{AssertUnwindSafe, catch_unwind};

const BIG: usize = 1 << 33;

/// A zero-filled `[1; shape.len()]` tensor expanded to `shape`.
fn huge(shape: &[usize], dev: &Device) -> Tensor {
    let ones = vec![1usize; shape.len()];
    let sizes: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
    Tensor::zeros(&ones, DType::F32, dev)
        .unwrap()
        .expand(&sizes[..])
        .unwrap()
}

thread_local! {
    static FAULTS: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f`, which must fail without panicking; the error must name
/// `op` (or be out of memory, which names no operation). Faults are
/// collected, so one run lists every op that breaks the promise.
fn refused<T>(op: &str, f: impl FnOnce() -> kael_core::Result<T>) {
    let t0 = std::time::Instant::now();
    let outcome = catch_unwind(AssertUnwindSafe(f));
    if t0.elapsed().as_secs_f64() > 0.5 {
        eprintln!("{op}: {:.1} s", t0.elapsed().as_secs_f64());
    }
    let fault = match outcome {
        Err(p) => {
            let why = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Some(format!(
                "{op}: panicked on an overflowing output size: {why}"
            ))
        }
        Ok(Ok(_)) => Some(format!("{op}: accepted an output whose size overflows")),
        Ok(Err(e)) => {
            let named = e.op().is_none_or(|got| got == op);
            let oom = matches!(e, Error::OutOfMemory { .. });
            (!(named || oom)).then(|| format!("{op}: the error names {:?}: {e}", e.op()))
        }
    };
    if let Some(f) = fault {
        FAULTS.with(|v| v.borrow_mut().push(f));
    }
}

#[test]
fn every_shape_building_op_refuses_an_overflowing_output() {
    for (name, dev) in devices() {
        eprintln!("device {name}");
        let dev = &dev;
        // [2^33, 1] + [1, 2^33]: each operand 2^33 elements, the result 2^66
        let col = huge(&[BIG, 1], dev);
        let row = huge(&[1, BIG], dev);
        refused("add", || col.add(&row));
        refused("mul", || &col * &row);
        refused("maximum", || col.maximum(&row));
        refused("eq", || col.eq(&row));
        let mask = Tensor::from_slice(&[true], &[1, 1], dev)
            .unwrap()
            .expand(&[BIG as isize, 1][..])
            .unwrap();
        refused("where", || mask.where_cond(&row, &row));
        // matmul: [2^20, 1, 2^13, 1] @ [1, 2^20, 1, 2^13] -> [2^20, 2^20, 2^13, 2^13]
        let a = huge(&[1 << 20, 1, 1 << 13, 1], dev);
        let b = huge(&[1, 1 << 20, 1, 1 << 13], dev);
        refused("matmul", || a.matmul(&b));
        // the outer product of two long vectors
        refused("matmul", || {
            huge(&[BIG, 1], dev).matmul(&huge(&[1, BIG], dev))
        });
        refused("bmm", || {
            huge(&[2, BIG, 1], dev).bmm(&huge(&[2, 1, BIG], dev))
        });
        // cat and stack: four operands of 2^62 elements
        let long = huge(&[1 << 62], dev);
        refused("cat", || Tensor::cat(&[&long, &long, &long, &long], 0));
        refused("stack", || Tensor::stack(&[&long, &long, &long, &long], 0));
        // repeat, expand, broadcast_to, reshape
        let small = Tensor::zeros(&[2, 2], DType::F32, dev).unwrap();
        refused("repeat", || small.repeat(&[1 << 62, 1 << 62]));
        refused("expand", || {
            small.expand(&[1isize << 40, 1 << 40, 2, 2][..])
        });
        refused("broadcast_to", || {
            small.broadcast_to(&[1 << 40, 1 << 40, 2, 2])
        });
        refused("reshape", || small.reshape(&[1usize << 33, 1 << 33][..]));
        // creation
        refused("zeros", || {
            Tensor::zeros(&[1 << 33, 1 << 33], DType::F32, dev)
        });
        refused("eye", || Tensor::eye(1 << 33, DType::F32, dev));
        refused("linspace", || {
            Tensor::linspace(0.0, 1.0, usize::MAX, DType::F32, dev)
        });
        refused("arange_step", || {
            Tensor::arange_step(0.0f32, 1e30, 1e-30, dev)
        });
        let ids = Tensor::zeros(&[4], DType::I64, dev).unwrap();
        refused("one_hot", || ids.one_hot(Some(1 << 62)));
        // a batch of 2^31 expanded images through 3x3 windows
        let images = huge(&[1 << 31, 1, 1 << 16, 1 << 16], dev);
        let w = Tensor::zeros(&[16, 1, 3, 3], DType::F32, dev).unwrap();
        refused("conv2d", || {
            F::conv2d(&images, &w, None, [1, 1], [1, 1], [1, 1], 1)
        });
        refused("max_pool2d", || {
            F::max_pool2d(&images, [2, 2], [1, 1], [1, 1])
        });
        refused("avg_pool2d", || {
            F::avg_pool2d(&images, [2, 2], [1, 1], [1, 1], true)
        });
        // indexing: 2^40 ids into a table of 2^30-wide rows
        let table = huge(&[10, 1 << 30], dev);
        let many = Tensor::zeros(&[1], DType::I64, dev)
            .unwrap()
            .expand(&[1isize << 40][..])
            .unwrap();
        refused("index_select", || table.index_select(0, &many));
        refused("embedding", || F::embedding(&many, &table, None));
        // padding a dim of 2^63 elements by 2^63 more
        refused("pad_dim", || {
            pad_dim(&huge(&[1 << 62], dev), 0, 1 << 63, 1 << 63, 0.0)
        });
        let faults = FAULTS.with(|v| std::mem::take(&mut *v.borrow_mut()));
        assert!(faults.is_empty(), "on {name}:\n{}", faults.join("\n"));
    }
}

/// A small deterministic generator (xorshift), so failures reproduce.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Small (1 to 4) or huge (2^28 to 2^40), so that products either
    /// stay small or overflow.
    fn size(&mut self) -> usize {
        if self.next() % 2 == 0 {
            1 + (self.next() % 4) as usize
        } else {
            1 << (28 + self.next() % 13)
        }
    }
}

/// The exact product, saturating at u128::MAX (far past usize::MAX).
fn product(s: &[usize]) -> u128 {
    s.iter()
        .fold(1u128, |acc, &d| acc.saturating_mul(d as u128))
}

/// Random broadcast, matmul, cat and repeat shapes: when the true element
/// count (computed in u128) overflows `usize` the op must refuse; when it
/// is small the op must give exactly that many elements; the cases between
/// (which would really allocate gigabytes) are not run.
#[test]
fn random_broadcast_matmul_cat_and_repeat_shapes_never_panic() {
    let dev = Device::cpu();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut overflowed, mut small) = (0, 0);
    for _ in 0..2000 {
        let rank = 2 + (rng.next() % 3) as usize;
        let (mut sa, mut sb, mut out) = (vec![], vec![], vec![]);
        for _ in 0..rank {
            let x = rng.size();
            let (a, b) = match rng.next() % 3 {
                0 => (x, x),
                1 => (x, 1),
                _ => (1, x),
            };
            sa.push(a);
            sb.push(b);
            out.push(x);
        }
        let op = rng.next() % 4;
        let reps: Vec<usize> = (0..rank).map(|_| rng.size()).collect();
        let want: u128 = match op {
            0 => product(&out),
            1 => {
                // [.., m, k] @ [.., k, n]: b's first matrix dim is a's last
                let k = sa[rank - 1];
                sb[rank - 2] = k;
                let mut o = out.clone();
                o[rank - 2] = sa[rank - 2];
                o[rank - 1] = sb[rank - 1];
                product(&o)
            }
            2 => product(&sa).saturating_mul(2),
            _ => product(&sa).saturating_mul(product(&reps)),
        };
        let fits = |s: &[usize]| product(s) <= usize::MAX as u128;
        // a small matmul result over a huge inner size is real work
        let work = if op == 1 {
            want.saturating_mul(sa[rank - 1] as u128)
        } else {
            want
        };
        if !fits(&sa) || !fits(&sb) || (work > 1 << 20 && want <= usize::MAX as u128) {
            continue;
        }
        let a = huge(&sa, &dev);
        let b = huge(&sb, &dev);
        let outcome = catch_unwind(AssertUnwindSafe(|| match op {
            0 => a.add(&b).map(|t| t.numel()),
            1 => a.matmul(&b).map(|t| t.numel()),
            2 => Tensor::cat(&[&a, &a], 0).map(|t| t.numel()),
            _ => a.repeat(&reps).map(|t| t.numel()),
        }));
        match outcome {
            Err(_) => panic!("op {op} panicked on {sa:?}, {sb:?}, repeats {reps:?}"),
            Ok(Ok(n)) => {
                assert_eq!(
                    n as u128, want,
                    "op {op} on {sa:?}, {sb:?}, repeats {reps:?}"
                );
                small += 1;
            }
            Ok(Err(e)) => {
                // a small result may still need a large operand copied
                // (an expanded matmul operand made contiguous): out of memory
                assert!(
                    want > usize::MAX as u128 || matches!(e, Error::OutOfMemory { .. }),
                    "op {op} refused {sa:?}, {sb:?}, repeats {reps:?}, of {want} elements: {e}"
                );
                overflowed += 1;
            }
        }
    }
    assert!(
        overflowed > 100 && small > 100,
        "{overflowed} overflowing, {small} small cases"
    );
}

/// A shape with a zero dim beside dims whose product overflows
/// (`[2^40, 2^40, 0]`) is refused where it is built, conservatively (no
/// walk then multiplies those sizes), naming the operation. Where the
/// fuzzer's `strided` target still reached one through a chain of views,
/// it is empty everywhere it goes: its two inputs (a `deep_clone` refused
/// as out of memory, a `fill_` walk that multiplied the huge dims before
/// it saw the 0) are in `fuzz/corpus/strided/regression-*`, replayed by
/// every fuzz run.
#[test]
fn a_zero_dim_beside_huge_dims_is_refused_where_it_is_built() {
    for (_, dev) in devices() {
        let x = Tensor::zeros(&[4], DType::F32, &dev).unwrap();
        let big = 1usize << 40;
        refused("zeros", || Tensor::zeros(&[big, big, 0], DType::F32, &dev));
        refused("as_strided", || x.as_strided(&[big, big, 0], &[0, 0, 1], 0));
        let z = Tensor::zeros(&[1, 1, 0], DType::F32, &dev).unwrap();
        refused("expand", || z.expand(&[big as isize, big as isize, 0][..]));
        let faults = FAULTS.with(|v| std::mem::take(&mut *v.borrow_mut()));
        assert!(faults.is_empty(), "{}", faults.join("\n"));
    }
}
