//! kael's first demo: tensors as shared handles, views over one storage,
//! in-place writes through a view, `deep_clone`, and a fixed arena that runs
//! out of memory with an error instead of an abort.
//!
//! Run it with `cargo run -p kael-host --example demo`.

use kael_core::allocator::{Allocator, ArenaAllocator};
use kael_core::shared::Shared;
use kael_core::{DType, Device, Tensor, explain};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dev = Device::cpu();

    section("a = root.reshape([2, 3, 4]) where root = arange(0, 24)");
    let root = Tensor::arange(0.0f32, 24.0, &dev)?;
    let a = root.reshape(&[2, 3, 4])?;
    println!("{}", explain(&a));

    section("s = a[1:2, 1:3, 1:4] (three slices, no copy)");
    let s = a.slice(0, 1, 2, 1)?.slice(1, 1, 3, 1)?.slice(2, 1, 4, 1)?;
    println!("{}", explain(&s));
    println!("values: {:?}", s.to_vec::<f32>()?);

    section("t = a[0].t() (transpose of a 3x4 matrix)");
    let t = a.select(0, 0)?.t()?;
    println!("{}", explain(&t));

    section("e = [[1], [2]].expand([2, 3]) (stride 0, no copy)");
    let col = Tensor::from_slice(&[1.0f32, 2.0], &[2, 1], &dev)?;
    let e = col.expand(&[2, 3])?;
    println!("{}", explain(&e));
    println!("values: {:?}", e.to_vec::<f32>()?);
    match e.fill_(7.0) {
        Ok(()) => println!("fill_ on the expand: unexpectedly accepted"),
        Err(err) => println!("fill_ on the expand is refused: {err}"),
    }

    section("v = arange(0., 12.).reshape([3, 4]).view_dtype(I32) (same bytes)");
    let f = Tensor::arange(0.0f32, 12.0, &dev)?.reshape(&[3, 4])?;
    let v = f.view_dtype(DType::I32)?;
    println!("{}", explain(&v));
    println!("row 0 as i32: {:?}", v.select(0, 0)?.to_vec::<i32>()?);

    section("identity: handles, views and roots");
    let b = a.clone();
    let c = a.deep_clone()?;
    println!("b = a.clone()       b.is_same(a) = {}", b.is_same(&a));
    println!("s (a view of a)     s.is_same(a) = {}", s.is_same(&a));
    println!(
        "                    s.shares_storage(a) = {}",
        s.shares_storage(&a)
    );
    let is_root = |x: &Tensor| x.base().is_some_and(|r| r.is_same(&root));
    println!(
        "                    s.base() is root (not a, its parent) = {}",
        is_root(&s)
    );
    println!("a (a view of root)  a.base() is root = {}", is_root(&a));
    println!(
        "root                root.base() is None = {}",
        root.base().is_none()
    );
    println!(
        "c = a.deep_clone()  c.shares_storage(a) = {}, c.base() is None = {}",
        c.shares_storage(&a),
        c.base().is_none()
    );

    section("in-place through a view: a.narrow(2, 1, 2).zero_()");
    let before = a.version();
    a.narrow(2, 1, 2)?.zero_()?;
    println!(
        "a[0] (3x4, row-major) after: {:?}",
        a.select(0, 0)?.to_vec::<f32>()?
    );
    println!(
        "storage version {before} -> {} (every view sees the bump: s.version() = {})",
        a.version(),
        s.version()
    );
    println!(
        "c (the deep clone) is untouched: {:?}",
        c.select(0, 0)?.select(0, 0)?.to_vec::<f32>()?
    );

    section("deep_clone of a 2-element view copies 2 elements");
    let big = Tensor::arange(0.0f32, 1000.0, &dev)?;
    let small = big.narrow(0, 10, 2)?;
    let owned = small.deep_clone()?;
    println!(
        "view: {} bytes of storage (shared with big); deep_clone: {} bytes, offset {}, values {:?}",
        small.storage_nbytes(),
        owned.storage_nbytes(),
        owned.offset(),
        owned.to_vec::<f32>()?
    );

    section("a 256-byte arena running out of memory");
    let buf: &'static mut [u8] = Box::leak(vec![0u8; 256].into_boxed_slice());
    let arena: Shared<ArenaAllocator<16>> = Shared::new(ArenaAllocator::new(buf));
    let arena_dev = Device::cpu_with_allocator(arena.clone());
    let fits = Tensor::ones(&[4, 4], DType::F32, &arena_dev)?;
    println!(
        "4x4 f32 ({} bytes) fits; arena in use: {} of {} bytes",
        fits.storage_nbytes(),
        arena.stats().in_use,
        arena.capacity()
    );
    match Tensor::zeros(&[16, 16], DType::F32, &arena_dev) {
        Ok(t) => println!("16x16 f32 unexpectedly fit ({} bytes)", t.storage_nbytes()),
        Err(err) => println!("16x16 f32 (1024 bytes) is refused: {err}"),
    }
    drop(fits);
    let stats = arena.stats();
    println!(
        "after dropping the 4x4: in use {}, peak {}, failures {}",
        stats.in_use, stats.peak, stats.failures
    );

    println!("\ndemo finished");
    Ok(())
}

fn section(title: &str) {
    println!("\n=== {title} ===");
}
