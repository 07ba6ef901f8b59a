//! The README's example, kept compiling and running by the test tiers.

use kael_core::{DType, Device, Tensor, explain};

fn main() -> Result<(), kael_core::Error> {
    let dev = Device::cpu();
    let a = Tensor::arange(0.0f32, 24.0, &dev)?.reshape(&[2, 3, 4])?;

    // A view: new shape, strides and offset over the same storage, no copy.
    let s = a.slice(0, 1, 2, 1)?.slice(1, 1, 3, 1)?.slice(2, 1, 4, 1)?;
    assert_eq!(
        (s.shape(), &s.strides()[..], s.offset()),
        (&[1, 2, 3][..], &[12, 4, 1][..], 17)
    );
    assert!(s.shares_storage(&a));
    println!("{}", explain(&s)); // shape, strides, offset, storage, version, view root, ...

    // Elementwise ops broadcast and return new tensors: [4, 3] + [3].
    let y = a
        .select(0, 0)?
        .t()?
        .add(&Tensor::ones(&[3], DType::F32, &dev)?)?;
    assert_eq!(y.select(0, 0)?.to_vec::<f32>()?, vec![1.0, 5.0, 9.0]);

    // clone() is the same tensor; deep_clone() owns a copy.
    let (b, c) = (a.clone(), a.deep_clone()?);
    assert!(b.is_same(&a) && !c.shares_storage(&a));

    // An in-place write through a view is seen by every handle of the storage.
    a.narrow(2, 0, 1)?.fill_(-1.0)?;
    assert_eq!(
        b.select(0, 0)?.select(0, 0)?.to_vec::<f32>()?,
        vec![-1.0, 1.0, 2.0, 3.0]
    );
    assert_eq!(
        c.select(0, 0)?.select(0, 0)?.to_vec::<f32>()?,
        vec![0.0, 1.0, 2.0, 3.0]
    );

    // Autograd: gradients accumulate into the leaf, seen by every handle.
    let w = Tensor::randn(&[4, 3], DType::F32, &dev, &mut kael_core::Rng::new(0))?
        .requires_grad_(true)?;
    let loss = c.matmul(&w)?.relu()?.sum_all()?;
    loss.backward()?;
    assert_eq!(w.grad().map(|g| g.shape().to_vec()), Some(vec![4, 3]));
    Ok(())
}
