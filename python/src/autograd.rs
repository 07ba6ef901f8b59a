//! Autograd from Python: `backward`, `kael.autograd.grad`, grad mode and
//! hooks that are Python callables.
//!
//! NOTE [Python hooks]
//! A hook is a kael `HookClosure` that takes the interpreter, calls the
//! Python function with the gradient, and returns what it returned (`None`
//! keeps the gradient). An exception in the hook cannot travel through
//! kael's `Error` (its texts are static), so the hook parks the `PyErr` in
//! a thread-local slot and fails the backward pass with an autograd error;
//! `backward` and `grad` then raise the parked exception itself, so the
//! user sees their own error and traceback. Backward runs on the calling
//! thread, so the slot is never read by another thread.

use crate::errors::{IntoPy, type_error};
use crate::tensor::{PyTensor, releases_gil, wrap};
use kael_core::autograd::BackwardOptions;
use kael_core::{Error, Tensor};
use pyo3::prelude::*;
use std::cell::RefCell;

thread_local! {
    static HOOK_ERROR: RefCell<Option<PyErr>> = const { RefCell::new(None) };
}

/// The exception a Python hook raised during the last failed pass, if any,
/// otherwise kael's own error.
fn hook_error_or(e: Error) -> PyErr {
    HOOK_ERROR
        .with(|slot| slot.borrow_mut().take())
        .unwrap_or_else(|| crate::errors::to_py(e))
}

fn run_backward<R: Send>(
    py: Python<'_>,
    big: bool,
    f: impl FnOnce() -> kael_core::Result<R> + Send,
) -> PyResult<R> {
    HOOK_ERROR.with(|slot| slot.borrow_mut().take());
    let r = if big { py.detach(f) } else { f() };
    r.map_err(hook_error_or)
}

/// `t.backward(gradient=None, retain_graph=None, create_graph=False)`.
pub fn backward(
    py: Python<'_>,
    t: &Tensor,
    gradient: Option<&Tensor>,
    retain_graph: Option<bool>,
    create_graph: bool,
) -> PyResult<()> {
    let opts = BackwardOptions {
        retain_graph: retain_graph.unwrap_or(create_graph),
        create_graph,
        ..Default::default()
    };
    let big = releases_gil(t);
    run_backward(py, big, || t.backward_with(gradient, opts))
}

/// `t.register_hook(fn)`.
pub fn register_hook(t: &Tensor, hook: Py<PyAny>) -> PyResult<()> {
    Python::attach(|py| {
        if !hook.bind(py).is_callable() {
            return Err(type_error(
                "register_hook: the hook must be callable, taking the gradient",
            ));
        }
        Ok(())
    })?;
    t.register_hook(move |g: &Tensor| {
        Python::attach(|py| {
            let fail = |e: PyErr| {
                HOOK_ERROR.with(|slot| *slot.borrow_mut() = Some(e));
                Error::Autograd {
                    op: "register_hook",
                    reason: "a Python hook raised an exception (re-raised by backward); fix the hook",
                }
            };
            let out = hook.bind(py).call1((wrap(g.clone()),)).map_err(fail)?;
            if out.is_none() {
                return Ok(None);
            }
            match out.cast::<PyTensor>() {
                Ok(t) => Ok(Some(t.get().t.clone())),
                Err(_) => Err(fail(type_error(
                    "register_hook: a hook must return None or a kael.Tensor",
                ))),
            }
        })
    })
    .py()
}

/// `kael.autograd.grad(outputs, inputs, grad_outputs=None,
/// retain_graph=None, create_graph=False, allow_unused=False)`: the
/// gradients of `outputs` with respect to `inputs`, without touching
/// `.grad`.
#[pyfunction]
#[pyo3(signature = (outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=false, allow_unused=false))]
pub fn grad(
    py: Python<'_>,
    outputs: &Bound<'_, PyAny>,
    inputs: &Bound<'_, PyAny>,
    grad_outputs: Option<&Bound<'_, PyAny>>,
    retain_graph: Option<bool>,
    create_graph: bool,
    allow_unused: bool,
) -> PyResult<Vec<Option<PyTensor>>> {
    let list = |o: &Bound<'_, PyAny>, what: &str| -> PyResult<Vec<Tensor>> {
        if let Ok(t) = o.cast::<PyTensor>() {
            return Ok(vec![t.get().t.clone()]);
        }
        let mut v = Vec::new();
        for item in o.try_iter().map_err(|_| {
            type_error(format!(
                "grad: {what} must be a tensor or a sequence of tensors"
            ))
        })? {
            let item = item?;
            let t = item.cast::<PyTensor>().map_err(|_| {
                type_error(format!("grad: every item of {what} must be a kael.Tensor"))
            })?;
            v.push(t.get().t.clone());
        }
        Ok(v)
    };
    let outs = list(outputs, "outputs")?;
    let ins = list(inputs, "inputs")?;
    let gos: Vec<Option<Tensor>> = match grad_outputs {
        None => Vec::new(),
        Some(g) if g.is_none() => Vec::new(),
        Some(g) => {
            if let Ok(t) = g.cast::<PyTensor>() {
                vec![Some(t.get().t.clone())]
            } else {
                let mut v = Vec::new();
                for item in g.try_iter()? {
                    let item = item?;
                    v.push(if item.is_none() {
                        None
                    } else {
                        Some(
                            item.cast::<PyTensor>()
                                .map_err(|_| {
                                    type_error(
                                        "grad: grad_outputs items must be kael.Tensor or None",
                                    )
                                })?
                                .get()
                                .t
                                .clone(),
                        )
                    });
                }
                v
            }
        }
    };
    let opts = BackwardOptions {
        retain_graph: retain_graph.unwrap_or(create_graph),
        create_graph,
        allow_unused,
    };
    let big = outs.iter().any(releases_gil);
    let r = run_backward(py, big, || {
        let o: Vec<&Tensor> = outs.iter().collect();
        let i: Vec<&Tensor> = ins.iter().collect();
        kael_core::autograd::grad(&o, &i, &gos, opts)
    })?;
    Ok(r.into_iter().map(|g| g.map(wrap)).collect())
}

/// Turns gradient recording on or off for this thread; returns the
/// previous setting (`kael.no_grad()` is built on it).
#[pyfunction]
pub fn set_grad_enabled(on: bool) -> bool {
    kael_core::set_grad_enabled(on)
}

/// Whether gradient recording is on for this thread.
#[pyfunction]
pub fn is_grad_enabled() -> bool {
    kael_core::is_grad_enabled()
}
