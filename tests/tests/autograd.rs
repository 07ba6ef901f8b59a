//! Autograd behaviour, one behaviour per test (PyTorch semantics).
mod common;
use kael_core::autograd::{BackwardOptions, grad, to_dot};
use kael_core::{DType, Device, Error, Result, Tensor, explain, no_grad};

fn leaf(data: &[f32], shape: &[usize], dev: &Device) -> Tensor {
    Tensor::from_slice(data, shape, dev)
        .unwrap()
        .requires_grad_(true)
        .unwrap()
}

fn vec_of(t: &Option<Tensor>) -> Vec<f32> {
    t.as_ref().expect("a gradient").to_vec::<f32>().unwrap()
}

test_device!(
    seed_example_gradient_of_x_times_constant_is_the_constant,
    |dev: &Device| {
        let x = leaf(&[1.0, 2.0], &[2], dev);
        let c = Tensor::from_slice(&[3.0f32, 4.0], &[2], dev)?;
        x.mul(&c)?.sum_all()?.backward()?;
        assert_eq!(vec_of(&x.grad()), [3.0, 4.0]);
        Ok(())
    }
);

test_device!(
    seed_example_modifying_a_saved_constant_fails_backward,
    |dev: &Device| {
        let x = leaf(&[1.0, 2.0], &[2], dev);
        let c = Tensor::from_slice(&[3.0f32, 4.0], &[2], dev)?;
        let y = x.mul(&c)?.sum_all()?;
        c.add_(&Tensor::scalar(1.0f32, dev)?)?;
        let e = y.backward().unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(
                e,
                Error::Autograd {
                    op: "MulBackward",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(msg.contains("modified by an inplace operation"), "{msg}");
        assert!(x.grad().is_none());
        Ok(())
    }
);

test_device!(
    modifying_a_saved_tensor_through_a_view_fails_backward,
    |dev: &Device| {
        let x = leaf(&[1.0, 2.0, 3.0], &[3], dev);
        let c = Tensor::from_slice(&[3.0f32, 4.0, 5.0], &[3], dev)?;
        let y = x.mul(&c)?.sum_all()?;
        c.narrow(0, 1, 1)?.fill_(0.0)?;
        assert!(y.backward().unwrap_err().to_string().contains("inplace"));
        Ok(())
    }
);

test_device!(
    modifying_a_saved_output_through_detach_fails_backward,
    |dev: &Device| {
        let x = leaf(&[1.0, 2.0], &[2], dev);
        let y = x.exp()?; // saves its output
        let loss = y.sum_all()?;
        y.detach()?.zero_()?;
        let e = loss.backward().unwrap_err();
        assert!(
            matches!(
                e,
                Error::Autograd {
                    op: "ExpBackward",
                    ..
                }
            ),
            "{e:?}"
        );
        Ok(())
    }
);

test_device!(
    second_backward_without_retain_graph_says_to_retain_it,
    |dev: &Device| {
        let x = leaf(&[1.0, 2.0], &[2], dev);
        let y = x.exp()?.sum_all()?;
        y.backward()?;
        let e = y.backward().unwrap_err();
        assert!(e.to_string().contains("retain_graph"), "{e}");
        Ok(())
    }
);

test_device!(two_backward_calls_accumulate_into_grad, |dev: &Device| {
    let x = leaf(&[1.0, 2.0], &[2], dev);
    let y = x.mul_scalar(2.0)?.sum_all()?;
    y.backward_with(
        None,
        BackwardOptions {
            retain_graph: true,
            ..Default::default()
        },
    )?;
    y.backward()?;
    assert_eq!(vec_of(&x.grad()), [4.0, 4.0]);
    Ok(())
});

test_device!(
    a_tensor_used_twice_gets_the_summed_gradient,
    |dev: &Device| {
        let x = leaf(&[1.0, -3.0], &[2], dev);
        x.mul(&x)?.sum_all()?.backward()?; // d(x*x)/dx = 2x
        assert_eq!(vec_of(&x.grad()), [2.0, -6.0]);
        Ok(())
    }
);

test_device!(every_handle_of_a_leaf_sees_its_grad, |dev: &Device| {
    let w = leaf(&[1.0, 2.0], &[2], dev);
    let held_by_optimizer = w.clone();
    w.sum_all()?.backward()?;
    assert_eq!(vec_of(&held_by_optimizer.grad()), [1.0, 1.0]);
    Ok(())
});

test_device!(
    a_long_chain_neither_overflows_the_stack_nor_goes_quadratic,
    |dev: &Device| {
        let n = if cfg!(miri) { 200 } else { 100_000 };
        let x = leaf(&[0.5], &[1], dev);
        let mut y = x.clone();
        for _ in 0..n {
            y = y.affine(1.0, 1.0)?;
        }
        let start = std::time::Instant::now();
        y.sum_all()?.backward()?;
        assert_eq!(vec_of(&x.grad()), [1.0]);
        drop(y); // iterative drop of the whole chain
        let _ = start.elapsed();
        Ok(())
    }
);

test_device!(
    inplace_on_a_leaf_that_requires_grad_is_an_error,
    |dev: &Device| {
        let w = leaf(&[1.0, 2.0], &[2], dev);
        let e = w.add_(&Tensor::scalar(1.0f32, dev)?).unwrap_err();
        assert!(e.to_string().contains("no_grad"), "{e}");
        assert!(w.narrow(0, 0, 1)?.fill_(0.0).is_err());
        assert_eq!(w.to_vec::<f32>()?, [1.0, 2.0]);
        no_grad(|| w.add_(&Tensor::scalar(1.0f32, dev)?))?;
        assert_eq!(w.to_vec::<f32>()?, [2.0, 3.0]);
        Ok(())
    }
);

test_device!(inplace_on_a_non_leaf_rebases_its_history, |dev: &Device| {
    // y = 2x; y += z; L = sum(y^2): dL/dx = 4y, dL/dz = 2y
    let x = leaf(&[1.0, 2.0], &[2], dev);
    let z = leaf(&[0.5, -1.0], &[2], dev);
    let y = x.mul_scalar(2.0)?;
    y.add_(&z)?;
    assert_eq!(y.grad_fn_name(), Some("AddBackward_"));
    y.mul(&y)?.sum_all()?.backward()?;
    assert_eq!(vec_of(&x.grad()), [10.0, 12.0]);
    assert_eq!(vec_of(&z.grad()), [5.0, 6.0]);
    Ok(())
});

test_device!(
    inplace_mul_on_a_non_leaf_uses_the_old_value_for_the_other_operand,
    |dev: &Device| {
        // y = x + 0; y *= z; L = sum(y): dL/dx = z, dL/dz = x
        let x = leaf(&[1.0, 2.0], &[2], dev);
        let z = leaf(&[3.0, 5.0], &[2], dev);
        let y = x.affine(1.0, 0.0)?;
        y.mul_(&z)?;
        y.sum_all()?.backward()?;
        assert_eq!(vec_of(&x.grad()), [3.0, 5.0]);
        assert_eq!(vec_of(&z.grad()), [1.0, 2.0]);
        Ok(())
    }
);

// PyTorch's CopySlices: the base's history is rewritten, so the write
// through the view is differentiated: y = [3·2x0, 2x1], dy/dx = [6, 2].
test_device!(
    inplace_on_a_view_of_a_non_leaf_rewrites_the_base_history,
    |dev: &Device| {
        let x = leaf(&[1.0, 2.0], &[2], dev);
        let y = x.mul_scalar(2.0)?;
        y.narrow(0, 0, 1)?.mul_(&Tensor::scalar(3.0f32, dev)?)?;
        assert_eq!(y.to_vec::<f32>()?, [6.0, 4.0]);
        assert_eq!(y.grad_fn_name(), Some("CopySlices"));
        y.sum_all()?.backward()?;
        assert_eq!(vec_of(&x.grad()), [6.0, 2.0]);
        Ok(())
    }
);

// A view made before the write re-derives its history from the base's new
// one: v = y[1] after y[0:2] *= 5 carries the factor 5 (dv/dx1 = 2·5).
test_device!(
    an_older_view_sees_a_write_through_a_sibling_view,
    |dev: &Device| {
        let x = leaf(&[1.0, 2.0, 3.0], &[3], dev);
        let y = x.mul_scalar(2.0)?;
        let v = y.select(0, 1)?;
        y.narrow(0, 0, 2)?.mul_scalar_(5.0)?;
        v.backward()?;
        assert_eq!(vec_of(&x.grad()), [0.0, 10.0, 0.0]);
        Ok(())
    }
);

test_device!(
    inplace_on_a_view_of_a_leaf_that_requires_grad_is_refused,
    |dev: &Device| {
        let x = leaf(&[1.0, 2.0], &[2], dev);
        let e = x.narrow(0, 0, 1)?.mul_scalar_(3.0).unwrap_err();
        assert!(e.to_string().contains("leaf"), "{e}");
        assert_eq!(x.to_vec::<f32>()?, [1.0, 2.0]);
        assert_eq!(x.version(), 0);
        Ok(())
    }
);

test_device!(no_grad_records_nothing, |dev: &Device| {
    let x = leaf(&[1.0], &[1], dev);
    let y = no_grad(|| x.exp())?;
    assert!(!y.requires_grad() && y.grad_fn_name().is_none());
    assert!(x.exp()?.requires_grad());
    Ok(())
});

test_device!(detach_shares_storage_without_history, |dev: &Device| {
    let x = leaf(&[1.0, 2.0], &[2], dev);
    let y = x.exp()?;
    let d = y.detach()?;
    assert!(d.shares_storage(&y) && !d.requires_grad() && d.is_leaf());
    Ok(())
});

test_device!(a_leaf_hook_can_replace_the_gradient, |dev: &Device| {
    let x = leaf(&[1.0, 2.0], &[2], dev);
    x.register_hook(|g| Ok(Some(g.mul_scalar(10.0)?)))?;
    x.mul_scalar(3.0)?.sum_all()?.backward()?;
    assert_eq!(vec_of(&x.grad()), [30.0, 30.0]);
    Ok(())
});

test_device!(
    a_non_leaf_hook_sees_the_gradient_flowing_through,
    |dev: &Device| {
        let x = leaf(&[1.0, 2.0], &[2], dev);
        let y = x.mul_scalar(3.0)?;
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let s2 = seen.clone();
        y.register_hook(move |g| {
            s2.lock().unwrap().extend(g.to_vec::<f32>()?);
            Ok(None)
        })?;
        y.mul_scalar(2.0)?.sum_all()?.backward()?;
        assert_eq!(*seen.lock().unwrap(), [2.0, 2.0]);
        assert_eq!(vec_of(&x.grad()), [6.0, 6.0]);
        Ok(())
    }
);

test_device!(
    grad_returns_gradients_without_touching_dot_grad,
    |dev: &Device| {
        let x = leaf(&[1.0, 2.0], &[2], dev);
        let unused = leaf(&[7.0], &[1], dev);
        let y = x.sqr()?.sum_all()?;
        let opts = BackwardOptions {
            allow_unused: true,
            ..Default::default()
        };
        let g = grad(&[&y], &[&x, &unused], &[], opts)?;
        assert_eq!(vec_of(&g[0]), [2.0, 4.0]);
        assert!(g[1].is_none());
        assert!(x.grad().is_none());
        Ok(())
    }
);

test_device!(
    grad_of_an_unused_input_without_allow_unused_is_an_error_naming_it,
    |dev: &Device| {
        let x = leaf(&[1.0, 2.0], &[2], dev);
        let unused = leaf(&[7.0], &[1], dev);
        let y = x.sqr()?.sum_all()?;
        let e = grad(&[&y], &[&x, &unused], &[], BackwardOptions::default()).unwrap_err();
        assert!(
            matches!(e, kael_core::Error::UnusedInput { index: 1, .. }),
            "{e}"
        );
        assert!(
            e.to_string().contains("input 1") && e.to_string().contains("allow_unused"),
            "{e}"
        );
        Ok(())
    }
);

test_device!(
    a_second_backward_fails_only_when_it_needs_freed_tensors,
    |dev: &Device| {
        let x = leaf(&[1.0, 2.0], &[2], dev);
        let y = x.add_scalar(1.0)?.sum_all()?;
        y.backward()?;
        y.backward()?; // add and sum save nothing
        assert_eq!(vec_of(&x.grad()), [2.0, 2.0]);
        let z = x.mul(&x)?.sum_all()?;
        z.backward()?;
        let e = z.backward().unwrap_err();
        assert!(e.to_string().contains("second time"), "{e}");
        Ok(())
    }
);

test_device!(
    second_derivative_of_x_cubed_at_two_is_twelve,
    |dev: &Device| {
        let x = Tensor::scalar(2.0f32, dev)?.requires_grad_(true)?;
        let y = x.powf(3.0)?;
        let opts = BackwardOptions {
            create_graph: true,
            ..Default::default()
        };
        let dy = grad(&[&y], &[&x], &[], opts)?.remove(0).unwrap();
        assert_eq!(dy.item::<f32>()?, 12.0); // 3x^2
        dy.backward()?;
        assert_eq!(x.grad().unwrap().item::<f32>()?, 12.0); // 6x
        Ok(())
    }
);

/// A small MLP loss L(w1, w2) = sum(tanh(X w1) w2)^2 / n.
fn mlp_loss(x: &Tensor, w1: &Tensor, w2: &Tensor) -> Result<Tensor> {
    x.matmul(w1)?.tanh()?.matmul(w2)?.sqr()?.mean_all()
}

fn flat_grad(x: &Tensor, w1: &Tensor, w2: &Tensor, create: bool) -> Result<Vec<Tensor>> {
    let l = mlp_loss(x, w1, w2)?;
    let g = grad(
        &[&l],
        &[w1, w2],
        &[],
        BackwardOptions {
            create_graph: create,
            ..Default::default()
        },
    )?;
    Ok(g.into_iter().map(|g| g.unwrap()).collect())
}

test_device!(
    hessian_vector_product_of_an_mlp_matches_finite_differences,
    |dev: &Device| {
        let mut rng = kael_core::Rng::new(3);
        let x = Tensor::randn(&[5, 3], DType::F64, dev, &mut rng)?;
        let w1 = Tensor::randn(&[3, 4], DType::F64, dev, &mut rng)?.requires_grad_(true)?;
        let w2 = Tensor::randn(&[4, 2], DType::F64, dev, &mut rng)?.requires_grad_(true)?;
        let v1 = Tensor::randn(&[3, 4], DType::F64, dev, &mut rng)?;
        let v2 = Tensor::randn(&[4, 2], DType::F64, dev, &mut rng)?;
        // Hv by double backward: d/dw (g(w) . v)
        let g = flat_grad(&x, &w1, &w2, true)?;
        let gv = g[0].mul(&v1)?.sum_all()?.add(&g[1].mul(&v2)?.sum_all()?)?;
        let hv = grad(&[&gv], &[&w1, &w2], &[], BackwardOptions::default())?;
        // finite differences of the gradient along v
        let eps = 1e-5;
        let shifted = |s: f64| -> Result<Vec<Tensor>> {
            no_grad(|| -> Result<Vec<Tensor>> {
                let a = w1.add(&v1.mul_scalar(s)?)?.requires_grad_(true)?;
                let b = w2.add(&v2.mul_scalar(s)?)?.requires_grad_(true)?;
                kael_core::enable_grad(|| flat_grad(&x, &a, &b, false))
            })
        };
        let (p, m) = (shifted(eps)?, shifted(-eps)?);
        for k in 0..2 {
            let fd: Vec<f64> = p[k]
                .to_vec::<f64>()?
                .iter()
                .zip(m[k].to_vec::<f64>()?)
                .map(|(a, b)| (a - b) / (2.0 * eps))
                .collect();
            common::assert_close64(&hv[k].as_ref().unwrap().to_vec::<f64>()?, &fd, 1e-5);
        }
        Ok(())
    }
);

test_device!(saved_tensors_are_freed_after_backward, |dev: &Device| {
    let x = leaf(&[1.0, 2.0], &[2], dev);
    let c = Tensor::from_slice(&[3.0f32, 4.0], &[2], dev)?;
    let y = x.mul(&c)?.sum_all()?;
    assert_eq!(c.storage_ref_count(), 2); // ours + MulBackward's saved alias
    y.backward()?;
    assert_eq!(c.storage_ref_count(), 1);
    Ok(())
});

test_device!(saved_tensors_are_kept_with_retain_graph, |dev: &Device| {
    let x = leaf(&[1.0, 2.0], &[2], dev);
    let c = Tensor::from_slice(&[3.0f32, 4.0], &[2], dev)?;
    let y = x.mul(&c)?.sum_all()?;
    y.backward_with(
        None,
        BackwardOptions {
            retain_graph: true,
            ..Default::default()
        },
    )?;
    assert_eq!(c.storage_ref_count(), 2);
    Ok(())
});

test_device!(
    dropping_the_loss_frees_every_intermediate,
    |dev: &Device| {
        let x = leaf(&[1.0, 2.0], &[2], dev);
        let h = x.exp()?; // ExpBackward saves (a detached alias of) h
        let h_storage = h.storage();
        let loss = h.tanh()?.sum_all()?;
        drop(h);
        assert!(kael_core::shared::Shared::strong_count(&h_storage) > 1);
        drop(loss);
        assert_eq!(
            kael_core::shared::Shared::strong_count(&h_storage),
            1,
            "an intermediate outlived its graph"
        );
        Ok(())
    }
);

test_device!(backward_on_a_non_scalar_needs_a_gradient, |dev: &Device| {
    let x = leaf(&[1.0, 2.0], &[2], dev);
    let y = x.mul_scalar(2.0)?;
    assert!(
        y.backward()
            .unwrap_err()
            .to_string()
            .contains("backward_with")
    );
    let bad = Tensor::ones(&[3], DType::F32, dev)?;
    assert!(matches!(
        y.backward_with(Some(&bad), BackwardOptions::default()),
        Err(Error::ShapeMismatch { .. })
    ));
    Ok(())
});

test_device!(backward_without_history_is_an_error, |dev: &Device| {
    let x = Tensor::ones(&[1], DType::F32, dev)?;
    assert!(
        x.backward()
            .unwrap_err()
            .to_string()
            .contains("requires_grad_(true)")
    );
    Ok(())
});

test_device!(requires_grad_is_for_float_leaves_only, |dev: &Device| {
    assert!(
        Tensor::ones(&[1], DType::I64, dev)?
            .requires_grad_(true)
            .is_err()
    );
    let x = leaf(&[1.0], &[1], dev);
    assert!(x.exp()?.requires_grad_(false).is_err());
    Ok(())
});

test_device!(zero_grad_and_set_grad_clear_and_replace, |dev: &Device| {
    let x = leaf(&[1.0], &[1], dev);
    x.mul_scalar(2.0)?.sum_all()?.backward()?;
    x.zero_grad();
    assert!(x.grad().is_none());
    x.set_grad(Some(Tensor::full(&[1], 5.0, DType::F32, dev)?))?;
    assert_eq!(vec_of(&x.grad()), [5.0]);
    assert!(
        x.set_grad(Some(Tensor::ones(&[2], DType::F32, dev)?))
            .is_err()
    );
    Ok(())
});

test_device!(explain_and_dot_show_the_graph, |dev: &Device| {
    let x = leaf(&[1.0, 2.0], &[2], dev);
    let y = x.mul(&x)?.sum_all()?;
    let text = explain(&y);
    assert!(
        text.contains("requires_grad: true") && text.contains("grad_fn: SumBackward"),
        "{text}"
    );
    let dot = to_dot(&y);
    assert!(
        dot.contains("SumBackward")
            && dot.contains("MulBackward")
            && dot.contains("AccumulateGrad")
    );
    assert_eq!(dot.matches("->").count(), 3); // sum->mul, mul->acc (twice)
    Ok(())
});

test_device!(
    expand_backward_sums_over_the_broadcast_dims,
    |dev: &Device| {
        let x = leaf(&[1.0, 2.0], &[2, 1], dev);
        x.expand(&[2, 3])?.sum_all()?.backward()?;
        assert_eq!(vec_of(&x.grad()), [3.0, 3.0]);
        Ok(())
    }
);

test_device!(stored_grads_own_their_storage, |dev: &Device| {
    // the gradient of a broadcast sum is an expand view; .grad must be a
    // writable contiguous tensor
    let x = leaf(&[1.0, 2.0, 3.0], &[3], dev);
    x.sum_all()?.backward()?;
    let g = x.grad().unwrap();
    assert!(g.is_contiguous());
    no_grad(|| g.mul_(&Tensor::scalar(2.0f32, dev)?))?;
    assert_eq!(g.to_vec::<f32>()?, [2.0, 2.0, 2.0]);
    Ok(())
});

test_device!(
    a_long_chain_that_saves_its_inputs_drops_without_recursion,
    |dev: &Device| {
        let n = if cfg!(miri) { 200 } else { 100_000 };
        let x = leaf(&[1.0], &[1], dev);
        let one = Tensor::ones(&[1], DType::F32, dev)?;
        let mut y = x.clone();
        for _ in 0..n {
            y = y.mul(&one)?; // MulBackward saves y_k and `one`
        }
        drop(y); // never backpropagated: the whole graph, saved tensors included, is freed here
        Ok(())
    }
);

// ---- what backward allocates (counted on an arena device)

/// A reference-CPU device over a fresh arena, and its allocation counter.
fn counted_device() -> (Device, impl Fn() -> usize) {
    use kael_core::allocator::ArenaAllocator;
    use kael_core::shared::Shared;
    let buf: &'static mut [u8] = Box::leak(vec![0u8; 1 << 20].into_boxed_slice());
    let dev = Device::cpu_with_allocator(Shared::new(ArenaAllocator::<256>::new(buf)));
    let d = dev.clone();
    (dev, move || d.allocator().stats().allocations)
}

/// Allocations made by `backward` of `sum(x @ w.t())`, Linear's product,
/// with `x` requiring grad or not, and optionally a hook on `w` that keeps
/// the gradient it is shown.
fn linear_backward_allocations(x_needs_grad: bool, hook_keeps_grad: bool) -> (usize, Tensor) {
    let (dev, allocations) = counted_device();
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], &dev).unwrap();
    let x = x.requires_grad_(x_needs_grad).unwrap();
    let w = leaf(&[1.0; 12], &[4, 3], &dev);
    let kept = std::sync::Arc::new(std::sync::Mutex::new(None));
    if hook_keeps_grad {
        let kept = kept.clone();
        w.register_hook(move |g| {
            *kept.lock().unwrap() = Some(g.clone());
            Ok(None)
        })
        .unwrap();
    }
    let y = x.mm(&w.t().unwrap()).unwrap().sum_all().unwrap();
    let before = allocations();
    y.backward().unwrap();
    let n = allocations() - before;
    drop(kept);
    (n, w)
}

#[test]
fn a_first_gradient_only_the_engine_holds_is_stored_without_a_copy() {
    let (owned, w) = linear_backward_allocations(false, false);
    let (shown, _) = linear_backward_allocations(false, true);
    // The hook's clone makes the gradient user-visible: exactly one copy more.
    assert_eq!(shown, owned + 1);
    let g = w.grad().expect("a gradient");
    assert!(!g.is_view() && g.is_contiguous() && g.storage_ref_count() == 1);
    // d sum(x @ w^T) / dw[i, j] = sum over rows of x[:, j]
    assert_eq!(g.to_vec::<f32>().unwrap(), [5.0, 7.0, 9.0].repeat(4));
}

#[test]
fn a_gradient_a_hook_kept_is_not_the_stored_gradient() {
    let (dev, _) = counted_device();
    let w = leaf(&[1.0, 2.0], &[2], &dev);
    let kept = std::sync::Arc::new(std::sync::Mutex::new(None));
    let k = kept.clone();
    w.register_hook(move |g| {
        *k.lock().unwrap() = Some(g.clone());
        Ok(None)
    })
    .unwrap();
    w.mul_scalar(3.0)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let stored = w.grad().expect("a gradient");
    stored.add_(&Tensor::scalar(1.0f32, &dev).unwrap()).unwrap();
    let seen = kept.lock().unwrap().clone().expect("the hook ran");
    assert!(!seen.shares_storage(&stored));
    assert_eq!(seen.to_vec::<f32>().unwrap(), [3.0, 3.0]);
    assert_eq!(stored.to_vec::<f32>().unwrap(), [4.0, 4.0]);
}

#[test]
fn matmul_backward_computes_no_gradient_for_an_input_that_needs_none() {
    // The seed (a one-element 1.0) and w's gradient, a product stored
    // without a copy; nothing is computed for x.
    assert_eq!(linear_backward_allocations(false, false).0, 2);
    // x's gradient is one more product, also stored without a copy.
    assert_eq!(linear_backward_allocations(true, false).0, 3);
}

// ---- leaves own their AccumulateGrad nodes (NOTE [Leaf accumulators])

#[test]
fn a_leaf_whose_grad_has_history_is_freed_with_its_last_handle() {
    // backward(create_graph) stores a grad whose history ends at the leaf's
    // own AccumulateGrad node; that must not keep the leaf (and so the
    // grad) alive once every handle is gone.
    let (dev, _) = counted_device();
    let in_use = {
        let d = dev.clone();
        move || d.allocator().stats().in_use
    };
    {
        let x = leaf(&[1.0, 2.0, 3.0], &[3], &dev);
        // exp saves its output, not x: the grad's history (g * exp(x),
        // re-attached to ExpBackward) leads to x only through AccumulateGrad.
        let y = x.exp().unwrap().sum_all().unwrap();
        let opts = BackwardOptions {
            create_graph: true,
            ..Default::default()
        };
        y.backward_with(None, opts).unwrap();
        let g = x.grad().expect("a gradient");
        assert!(g.grad_fn().is_some());
        let want = [1.0f32, 2.0, 3.0].map(f32::exp);
        for (got, want) in g.to_vec::<f32>().unwrap().iter().zip(want) {
            assert!((got - want).abs() <= 1e-6 * want, "{got} vs {want}");
        }
    }
    assert_eq!(in_use(), 0);
}

test_device!(
    backward_after_every_handle_to_a_leaf_is_dropped_still_reaches_the_others,
    |dev: &Device| {
        let a = leaf(&[1.0, 2.0], &[2], dev);
        let b = leaf(&[3.0, 4.0], &[2], dev);
        let y = a.mul(&b)?.sum_all()?;
        drop(a);
        y.backward()?;
        assert_eq!(vec_of(&b.grad()), [1.0, 2.0]);
        Ok(())
    }
);

test_device!(
    a_leaf_keeps_one_accumulate_grad_node_across_graphs,
    |dev: &Device| {
        let x = leaf(&[1.0, 2.0], &[2], dev);
        let first = x.mul_scalar(2.0)?;
        let node = |t: &Tensor| {
            let f = t.grad_fn().expect("history");
            f.next_nodes().next().expect("an edge").clone()
        };
        let a = node(&first);
        drop(first);
        let second = x.mul_scalar(3.0)?;
        assert!(std::sync::Arc::ptr_eq(&a, &node(&second)));
        second.sum_all()?.backward()?;
        assert_eq!(vec_of(&x.grad()), [3.0, 3.0]);
        Ok(())
    }
);
