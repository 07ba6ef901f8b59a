//! kael's Python bindings: the native module `kael._kael`, wrapped by the
//! `kael` package (`python/kael/`).
//!
//! One concept per module: [`tensor`] (the handle and its methods),
//! [`ops`] (the op-table rows and Python's operators), [`index`]
//! (`t[key]`), [`convert`] (Python values ↔ tensors), [`create`] (module
//! functions that make tensors), [`interop`] (buffer protocol, numpy,
//! DLPack), [`autograd`], [`dtype_device`] and [`errors`]. Nothing here
//! panics on user input: every kael `Error` becomes a Python exception
//! (NOTE [Python exceptions]), and pyo3 turns a panic, should one ever
//! happen, into a `PanicException` instead of an abort.

mod autograd;
mod convert;
mod create;
mod dlpack;
mod dtype_device;
mod errors;
mod index;
mod interop;
mod nn;
mod ops;
mod tensor;

use dtype_device::{PyDType, PyDevice, device_by_name};
use kael_core::DType;
use pyo3::prelude::*;

#[pymodule]
fn _kael(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<tensor::PyTensor>()?;
    m.add_class::<PyDType>()?;
    m.add_class::<PyDevice>()?;
    for d in DType::ALL {
        m.add(dtype_device::dtype_name(d), PyDType { d })?;
    }
    m.add("cpu", device_by_name("kael", "cpu")?)?;
    m.add("threaded", device_by_name("kael", "threaded")?)?;
    m.add_function(wrap_pyfunction!(dtype_device::cuda_available, m)?)?;
    m.add_function(wrap_pyfunction!(dtype_device::device_named, m)?)?;
    m.add_function(wrap_pyfunction!(dtype_device::set_default_device, m)?)?;
    m.add_function(wrap_pyfunction!(dtype_device::get_default_device, m)?)?;
    m.add_function(wrap_pyfunction!(create::tensor, m)?)?;
    m.add_function(wrap_pyfunction!(create::zeros, m)?)?;
    m.add_function(wrap_pyfunction!(create::ones, m)?)?;
    m.add_function(wrap_pyfunction!(create::empty, m)?)?;
    m.add_function(wrap_pyfunction!(create::full, m)?)?;
    m.add_function(wrap_pyfunction!(create::arange, m)?)?;
    m.add_function(wrap_pyfunction!(create::linspace, m)?)?;
    m.add_function(wrap_pyfunction!(create::eye, m)?)?;
    m.add_function(wrap_pyfunction!(create::rand, m)?)?;
    m.add_function(wrap_pyfunction!(create::randn, m)?)?;
    m.add_function(wrap_pyfunction!(create::zeros_like, m)?)?;
    m.add_function(wrap_pyfunction!(create::ones_like, m)?)?;
    m.add_function(wrap_pyfunction!(create::full_like, m)?)?;
    m.add_function(wrap_pyfunction!(create::rand_like, m)?)?;
    m.add_function(wrap_pyfunction!(create::randn_like, m)?)?;
    m.add_function(wrap_pyfunction!(create::cat, m)?)?;
    m.add_function(wrap_pyfunction!(create::stack, m)?)?;
    m.add_function(wrap_pyfunction!(create::where_, m)?)?;
    m.add_function(wrap_pyfunction!(create::matmul, m)?)?;
    m.add_function(wrap_pyfunction!(create::manual_seed, m)?)?;
    m.add_function(wrap_pyfunction!(interop::from_numpy, m)?)?;
    m.add_function(wrap_pyfunction!(interop::from_dlpack, m)?)?;
    m.add_function(wrap_pyfunction!(autograd::grad, m)?)?;
    m.add_function(wrap_pyfunction!(autograd::set_grad_enabled, m)?)?;
    m.add_function(wrap_pyfunction!(autograd::is_grad_enabled, m)?)?;
    m.add_function(wrap_pyfunction!(ops::_op_table, m)?)?;
    m.add_class::<nn::PyOptimizer>()?;
    for f in [
        wrap_pyfunction!(nn::linear, m)?,
        wrap_pyfunction!(nn::layer_norm, m)?,
        wrap_pyfunction!(nn::cross_entropy, m)?,
        wrap_pyfunction!(nn::nll_loss, m)?,
        wrap_pyfunction!(nn::mse_loss, m)?,
        wrap_pyfunction!(nn::embedding, m)?,
        wrap_pyfunction!(nn::dropout, m)?,
        wrap_pyfunction!(nn::sgd, m)?,
        wrap_pyfunction!(nn::adam, m)?,
        wrap_pyfunction!(nn::adamw, m)?,
        wrap_pyfunction!(nn::clip_grad_norm_, m)?,
        wrap_pyfunction!(nn::save, m)?,
        wrap_pyfunction!(nn::load, m)?,
        wrap_pyfunction!(nn::conv1d, m)?,
        wrap_pyfunction!(nn::conv2d, m)?,
        wrap_pyfunction!(nn::max_pool2d, m)?,
        wrap_pyfunction!(nn::avg_pool2d, m)?,
        wrap_pyfunction!(nn::batch_norm, m)?,
        wrap_pyfunction!(nn::group_norm, m)?,
        wrap_pyfunction!(nn::scaled_dot_product_attention, m)?,
    ] {
        m.add_function(f)?;
    }
    Ok(())
}
