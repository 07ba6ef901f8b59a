//! `Allocator::allocate_for_overwrite` gives ops an output whose bytes
//! are arbitrary: every op that uses it must write every element. A
//! poisoning allocator fills those blocks with 0xFF (NaN for floats, true
//! for bools, -1 for ints); results must equal a zeroed-allocation run.

mod common;

use kael_core::allocator::{AllocStats, Allocator, GlobalAllocator};
use kael_core::shared::Shared;
use kael_core::{DType, Device, Rng, Tensor};
use std::alloc::Layout;
use std::ptr::NonNull;

struct Poison(GlobalAllocator);

impl Allocator for Poison {
    fn allocate(&self, layout: Layout) -> kael_core::Result<NonNull<u8>> {
        self.0.allocate(layout)
    }
    fn allocate_for_overwrite(&self, layout: Layout) -> kael_core::Result<NonNull<u8>> {
        let p = self.0.allocate_zeroed(layout)?;
        // SAFETY: `p` is valid for `layout.size()` bytes and ours.
        unsafe { std::ptr::write_bytes(p.as_ptr(), 0xFF, layout.size()) };
        Ok(p)
    }
    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: forwarded unchanged; `ptr` came from `self.0`.
        unsafe { self.0.deallocate(ptr, layout) }
    }
    fn stats(&self) -> AllocStats {
        self.0.stats()
    }
    fn name(&self) -> &'static str {
        "poison"
    }
}

fn poison() -> Shared<dyn Allocator> {
    Shared::new(Poison(GlobalAllocator::new()))
}

/// Every op that allocates its output for overwrite, as f32 results.
fn run_all(dev: &Device) -> Vec<(&'static str, Vec<f32>)> {
    let mut rng = Rng::new(11);
    let a = Tensor::randn(&[37, 29], DType::F32, dev, &mut rng).unwrap();
    let b = Tensor::randn(&[29], DType::F32, dev, &mut rng).unwrap();
    let m = Tensor::randn(&[29, 13], DType::F32, dev, &mut rng).unwrap();
    let empty_k = Tensor::zeros(&[5, 0], DType::F32, dev).unwrap();
    let empty_k2 = Tensor::zeros(&[0, 4], DType::F32, dev).unwrap();
    let f = |t: Tensor| t.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
    vec![
        ("unary", f(a.exp().unwrap())),
        ("unary on transposed", f(a.t().unwrap().relu().unwrap())),
        ("binary broadcast", f(a.add(&b).unwrap())),
        ("compare", f(a.lt(&b).unwrap())),
        ("where", f(a.gt(&b).unwrap().where_cond(&a, &b).unwrap())),
        ("cast", f(a.to_dtype(DType::F64).unwrap())),
        (
            "cast to int",
            f(a.mul_scalar(10.0).unwrap().to_dtype(DType::I64).unwrap()),
        ),
        ("deep_clone", f(a.t().unwrap().deep_clone().unwrap())),
        ("contiguous", f(a.t().unwrap().contiguous().unwrap())),
        ("softmax", f(a.softmax(-1).unwrap())),
        ("softmax dim 0", f(a.softmax(0).unwrap())),
        ("log_softmax", f(a.log_softmax(-1).unwrap())),
        ("matmul", f(a.matmul(&m).unwrap())),
        ("matmul k=0", f(empty_k.matmul(&empty_k2).unwrap())),
        (
            "batched matmul",
            f(a.reshape(&[1, 37, 29]).unwrap().matmul(&m).unwrap()),
        ),
        ("bool to f32", f(a.ge(&a).unwrap())),
    ]
}

fn check(dev: &Device, name: &str) {
    let want = run_all(&Device::cpu());
    let got = run_all(dev);
    for ((op, w), (_, g)) in want.iter().zip(&got) {
        assert_eq!(g.len(), w.len(), "{name} {op}");
        for (i, (x, y)) in g.iter().zip(w).enumerate() {
            assert!(
                (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
                "{name} {op}: element {i} is {x}, want {y} (poison left in the output?)"
            );
        }
    }
}

#[test]
fn reference_cpu_ops_overwrite_poisoned_outputs() {
    check(&Device::cpu_with_allocator(poison()), "cpu");
}

#[test]
fn threaded_cpu_ops_overwrite_poisoned_outputs() {
    let dev = kael_host::cpu_threaded::Builder::new()
        .threads(2)
        .parallel_threshold(1)
        .allocator(poison())
        .build()
        .unwrap();
    check(&dev, "threaded");
}

#[test]
fn zeros_stay_zero_under_a_poisoning_allocator() {
    let dev = Device::cpu_with_allocator(poison());
    let z = Tensor::zeros(&[8], DType::F32, &dev).unwrap();
    assert_eq!(z.to_vec::<f32>().unwrap(), vec![0.0; 8]);
    let s = Tensor::ones(&[4, 3], DType::F32, &dev)
        .unwrap()
        .sum(&[1], false)
        .unwrap();
    assert_eq!(s.to_vec::<f32>().unwrap(), vec![3.0; 4]);
}
