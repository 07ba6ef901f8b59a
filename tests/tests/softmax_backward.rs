//! The fused softmax / log-softmax backward family
//! (`Backend::softmax_backward`, NOTE [Fused families]): on every device
//! its gradients equal the composition's (a reference CPU device without
//! the family composes them), match finite differences to first and second
//! order, match hand-derived values when the kernel is called directly, and
//! a kernel handed operands outside its contract refuses them and writes
//! nothing.

mod common;

use kael_core::autograd::{BackwardOptions, grad};
use kael_core::backend::Src;
use kael_core::testing::{GradcheckOptions, describe, gradcheck};
use kael_core::{DType, Device, Error, Layout, Result, Rng, Storage, Tensor};

/// A reference CPU device without the fused softmax backward: the
/// gradient is composed from primitives there.
fn composing_cpu() -> Device {
    use kael_core::cpu::{CpuBackend, dtypes, ops};
    let be = CpuBackend::<{ dtypes::ALL }, { ops::ALL & !ops::SOFTMAX_BACKWARD }>::with_allocator(
        kael_core::shared::Shared::new(kael_core::allocator::GlobalAllocator::new()),
    );
    Device::from_backend(kael_core::shared::Shared::new(be))
}

fn v64(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

/// `n` values from seed `seed`, scaled by `scale`, as a tensor of `shape`
/// and `dtype` made on `dev` itself (`to_device` between two devices of
/// one kind keeps the tensor where it is, so it could not reach the
/// composing device).
fn values(shape: &[usize], seed: u64, scale: f64, dtype: DType, dev: &Device) -> Result<Tensor> {
    let mut rng = Rng::new(seed);
    let v: Vec<f64> = Tensor::randn(shape, DType::F64, &Device::cpu(), &mut rng)?
        .to_vec::<f64>()?
        .into_iter()
        .map(|x| x * scale)
        .collect();
    match dtype {
        DType::F32 => {
            let v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
            Tensor::from_slice(&v, shape, dev)
        }
        _ => Tensor::from_slice(&v, shape, dev),
    }
}

/// `(softmax or log_softmax of x along dim, ∂/∂x Σ y·c)` on `dev`, for
/// fixed `x` (spread 3: some rows have entries near 0 and near 1) and
/// `c`, read back as f64.
fn value_and_grad(
    dev: &Device,
    shape: &[usize],
    dim: isize,
    log: bool,
    dtype: DType,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let x = values(shape, 5, 3.0, dtype, dev)?.requires_grad_(true)?;
    let c = values(shape, 6, 1.0, dtype, dev)?;
    let y = if log {
        x.log_softmax(dim)?
    } else {
        x.softmax(dim)?
    };
    y.mul(&c)?.sum_all()?.backward()?;
    let gx = x.grad().ok_or(Error::Autograd {
        op: "test",
        reason: "x has no gradient",
    })?;
    Ok((v64(&y), v64(&gx)))
}

// Rows of 13 (shorter than the kernels' 16 lanes) and of 40 (two full lane
// groups and a remainder), in f64 and f32.
test_device!(fused_backward_equals_the_composition, |dev| {
    for log in [false, true] {
        for shape in [&[6, 13][..], &[3, 2, 40]] {
            for (dtype, tol) in [(DType::F64, 1e-12), (DType::F32, 2e-6)] {
                let (y, gx) = value_and_grad(dev, shape, -1, log, dtype)?;
                let (y0, gx0) = value_and_grad(&composing_cpu(), shape, -1, log, dtype)?;
                common::assert_close64(&y, &y0, tol);
                common::assert_close64(&gx, &gx0, tol);
            }
        }
    }
    Ok(())
});

// A leading dim is not the fused kernel's (it takes rows of the last dim):
// the composition runs, and still agrees.
test_device!(backward_along_a_leading_dim_equals_the_composition, |dev| {
    for log in [false, true] {
        let (_, gx) = value_and_grad(dev, &[7, 3], 0, log, DType::F64)?;
        let (_, gx0) = value_and_grad(&composing_cpu(), &[7, 3], 0, log, DType::F64)?;
        common::assert_close64(&gx, &gx0, 1e-12);
    }
    Ok(())
});

fn grad_ok(f: impl Fn(&[Tensor]) -> Result<Tensor>, inputs: &[Tensor]) {
    let r = gradcheck(f, inputs, GradcheckOptions::default()).unwrap();
    assert!(r.is_ok(), "{}", describe(&r));
}

test_device!(gradients_match_finite_differences, |dev| {
    let mut rng = Rng::new(8);
    let x = Tensor::randn(&[4, 19], DType::F64, &Device::cpu(), &mut rng)?.to_device(dev)?;
    grad_ok(|v| v[0].softmax(-1), core::slice::from_ref(&x));
    grad_ok(|v| v[0].log_softmax(-1), &[x]);
    Ok(())
});

test_device!(second_derivatives_match_finite_differences, |dev| {
    // f(x) = ∂/∂x Σ softmax(x)·c (and log_softmax): its gradient is a
    // second derivative, which create_graph must carry through the node.
    let mut rng = Rng::new(9);
    let cpu = Device::cpu();
    let c = Tensor::randn(&[3, 5], DType::F64, &cpu, &mut rng)?.to_device(dev)?;
    let x = Tensor::randn(&[3, 5], DType::F64, &cpu, &mut rng)?.to_device(dev)?;
    for log in [false, true] {
        let first = |v: &[Tensor]| -> Result<Tensor> {
            kael_core::enable_grad(|| {
                // gradcheck's finite differences call this on plain tensors.
                let x = if v[0].requires_grad() {
                    v[0].clone()
                } else {
                    v[0].detach()?.requires_grad_(true)?
                };
                let y = if log {
                    x.log_softmax(-1)?
                } else {
                    x.softmax(-1)?
                };
                let l = y.mul(&c)?.sum_all()?;
                let opts = BackwardOptions {
                    create_graph: true,
                    ..BackwardOptions::default()
                };
                grad(&[&l], &[&x], &[], opts)?
                    .into_iter()
                    .next()
                    .flatten()
                    .ok_or(Error::Autograd {
                        op: "test",
                        reason: "no gradient",
                    })
            })
        };
        grad_ok(first, core::slice::from_ref(&x));
    }
    Ok(())
});

/// An f32 `[rows, n]` storage on `dev` holding `v`.
fn storage(dev: &Device, v: &[f32]) -> Storage {
    let s = Storage::zeroed(v.len() * 4, dev).unwrap();
    dev.backend()
        .write_bytes(&s, 0, bytemuck::cast_slice(v))
        .unwrap();
    s
}

fn read(dev: &Device, s: &Storage, n: usize) -> Vec<f32> {
    let mut b = vec![0u8; n * 4];
    dev.backend().read_bytes(s, 0, &mut b).unwrap();
    bytemuck::cast_slice::<u8, f32>(&b).to_vec()
}

test_device!(the_kernel_gives_hand_derived_values, |dev| {
    // Row [0.25, 0.75] with g = [1, 0]: softmax's Σ g·y = 0.25, so
    // dx = y·(g - 0.25) = [0.1875, -0.1875]. As a log-softmax output
    // y = ln [0.25, 0.75]: Σ g = 1, dx = g - e^y = [0.75, -0.75].
    let l = Layout::contiguous(&[1, 2])?;
    let f = |s| Src {
        storage: s,
        layout: &l,
        dtype: DType::F32,
    };
    let g = storage(dev, &[1.0, 0.0]);
    let y = storage(dev, &[0.25, 0.75]);
    let dx = storage(dev, &[9.0, 9.0]);
    dev.backend()
        .softmax_backward(f(&g), f(&y), false, f(&dx))?;
    assert_eq!(read(dev, &dx, 2), [0.1875, -0.1875]);
    let ly = storage(dev, &[0.25f32.ln(), 0.75f32.ln()]);
    dev.backend()
        .softmax_backward(f(&g), f(&ly), true, f(&dx))?;
    common::assert_close(&read(dev, &dx, 2), &[0.75, -0.75], 1e-6);
    Ok(())
});

test_device!(
    the_kernel_refuses_operands_outside_its_contract_and_writes_nothing,
    |dev| {
        let (rows, wide, flat) = (
            Layout::contiguous(&[2, 2])?,
            Layout::contiguous(&[1, 4])?,
            Layout::contiguous(&[4])?,
        );
        let src = |s, l, dtype| Src {
            storage: s,
            layout: l,
            dtype,
        };
        let g = storage(dev, &[1.0, 2.0, 3.0, 4.0]);
        let y = storage(dev, &[0.5, 0.5, 0.5, 0.5]);
        let dx = storage(dev, &[7.0, 7.0, 7.0, 7.0]);
        let f32s = |s, l| src(s, l, DType::F32);
        let be = dev.backend();
        let refused = [
            // grad of another shape
            be.softmax_backward(f32s(&g, &wide), f32s(&y, &rows), false, f32s(&dx, &rows)),
            // not [rows, n]
            be.softmax_backward(f32s(&g, &flat), f32s(&y, &flat), false, f32s(&dx, &flat)),
            // dx is the output y
            be.softmax_backward(f32s(&g, &rows), f32s(&dx, &rows), true, f32s(&dx, &rows)),
            // an integer dtype
            be.softmax_backward(
                src(&g, &rows, DType::I32),
                src(&y, &rows, DType::I32),
                false,
                src(&dx, &rows, DType::I32),
            ),
        ];
        for r in refused {
            match r {
                Err(Error::InvalidArgument { op, .. } | Error::UnsupportedDType { op, .. }) => {
                    assert_eq!(op, "softmax_backward")
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(read(dev, &dx, 4), [7.0; 4]);
        Ok(())
    }
);

#[test]
fn a_device_without_the_family_reports_it_unsupported_and_still_differentiates() {
    let dev = composing_cpu();
    let l = Layout::contiguous(&[2, 2]).unwrap();
    let s = storage(&dev, &[0.5; 4]);
    let d = storage(&dev, &[3.0; 4]);
    let f = |s| Src {
        storage: s,
        layout: &l,
        dtype: DType::F32,
    };
    let r = dev.backend().softmax_backward(f(&s), f(&s), false, f(&d));
    assert!(matches!(r, Err(Error::Unsupported { .. })), "{r:?}");
    assert_eq!(read(&dev, &d, 4), [3.0; 4]);
    // and the tensor layer composes the gradient: Σ softmax(x) = 1, so
    // ∂/∂x Σ softmax(x) = 0.
    let x = Tensor::from_slice(&[1.0f64, 2.0, 3.0], &[1, 3], &dev)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    x.softmax(-1)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    for v in x.grad().unwrap().to_vec::<f64>().unwrap() {
        assert!(v.abs() < 1e-15, "{v}");
    }
}
