//! `kael.nn.functional`, the optimizers (`kael.optim`) and `kael.save` /
//! `kael.load` (safetensors): thin bindings over kael's own, so Python
//! training runs the same kernels and update rules as Rust and firmware.
//! The Python `Module` class and the layers built on these live in
//! `kael/nn/__init__.py`.

use crate::errors::{IntoPy, raise, type_error, value_error};
use crate::tensor::{PyTensor, releases_gil, run_t, wrap};
use kael_core::Tensor;
use kael_core::nn::functional as F;
use kael_core::nn::{self as knn, Reduction};
use kael_core::optim::{Adam, AdamConfig, AdamW, Optimizer, Sgd, SgdConfig};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::Mutex;

fn reduction(op: &str, r: &str) -> PyResult<Reduction> {
    match r {
        "mean" => Ok(Reduction::Mean),
        "sum" => Ok(Reduction::Sum),
        "none" => Ok(Reduction::None),
        other => Err(value_error(format!(
            "{op}: reduction {other:?} is not one of 'mean', 'sum', 'none'"
        ))),
    }
}

/// `input @ weight.T + bias` (weight is `[out, in]`, as in PyTorch).
#[pyfunction]
#[pyo3(signature = (input, weight, bias=None))]
pub fn linear(
    py: Python<'_>,
    input: &PyTensor,
    weight: &PyTensor,
    bias: Option<&PyTensor>,
) -> PyResult<PyTensor> {
    let (x, w, b) = (&input.t, &weight.t, bias.map(|b| &b.t));
    run_t(py, x, || F::linear(x, w, b))
}

/// Layer normalisation over the last `len(normalized_shape)` dimensions.
#[pyfunction]
#[pyo3(signature = (input, normalized_shape, weight=None, bias=None, eps=1e-5))]
pub fn layer_norm(
    py: Python<'_>,
    input: &PyTensor,
    normalized_shape: Vec<usize>,
    weight: Option<&PyTensor>,
    bias: Option<&PyTensor>,
    eps: f64,
) -> PyResult<PyTensor> {
    let x = &input.t;
    let (w, b) = (weight.map(|w| &w.t), bias.map(|b| &b.t));
    run_t(py, x, || F::layer_norm(x, &normalized_shape, w, b, eps))
}

/// Cross entropy of logits `[N, C]` (or `[C]`, `[N, C, d…]`) against class
/// indices, or against class probabilities of the logits' shape.
#[pyfunction]
#[pyo3(signature = (input, target, reduction="mean", ignore_index=None))]
pub fn cross_entropy(
    py: Python<'_>,
    input: &PyTensor,
    target: &PyTensor,
    reduction: &str,
    ignore_index: Option<i64>,
) -> PyResult<PyTensor> {
    let r = self::reduction("cross_entropy", reduction)?;
    let (x, t) = (&input.t, &target.t);
    run_t(py, x, || knn::cross_entropy(x, t, r, ignore_index))
}

/// Negative log-likelihood of log-probabilities against class indices.
#[pyfunction]
#[pyo3(signature = (input, target, reduction="mean", ignore_index=None))]
pub fn nll_loss(
    py: Python<'_>,
    input: &PyTensor,
    target: &PyTensor,
    reduction: &str,
    ignore_index: Option<i64>,
) -> PyResult<PyTensor> {
    let r = self::reduction("nll_loss", reduction)?;
    let (x, t) = (&input.t, &target.t);
    run_t(py, x, || knn::nll_loss(x, t, r, ignore_index))
}

/// Mean squared error.
#[pyfunction]
#[pyo3(signature = (input, target, reduction="mean"))]
pub fn mse_loss(
    py: Python<'_>,
    input: &PyTensor,
    target: &PyTensor,
    reduction: &str,
) -> PyResult<PyTensor> {
    let r = self::reduction("mse_loss", reduction)?;
    let (x, t) = (&input.t, &target.t);
    run_t(py, x, || knn::mse_loss(x, t, r))
}

/// Rows of `weight` picked by integer `input` (a lookup table).
#[pyfunction]
#[pyo3(signature = (input, weight, padding_idx=None))]
pub fn embedding(
    py: Python<'_>,
    input: &PyTensor,
    weight: &PyTensor,
    padding_idx: Option<usize>,
) -> PyResult<PyTensor> {
    let (i, w) = (&input.t, &weight.t);
    run_t(py, w, || F::embedding(i, w, padding_idx))
}

/// Zeroes elements with probability `p` while training, scaling the rest
/// by `1 / (1 - p)`; the identity otherwise. Draws from kael's generator
/// (`kael.manual_seed`).
#[pyfunction]
#[pyo3(signature = (input, p=0.5, training=true))]
pub fn dropout(input: &PyTensor, p: f64, training: bool) -> PyResult<PyTensor> {
    let x = &input.t;
    crate::create::with_rng_pub(|r| F::dropout(x, p, training, r))
        .py()
        .map(wrap)
}

// ---------------------------------------------------------- optimizers

/// The parameters an optimizer takes: an iterable of tensors.
fn params_of(op: &str, params: &Bound<'_, PyAny>) -> PyResult<Vec<Tensor>> {
    let mut v = Vec::new();
    for p in params.try_iter().map_err(|_| {
        type_error(format!(
            "{op}: params must be an iterable of kael.Tensor (e.g. model.parameters())"
        ))
    })? {
        let p = p?;
        let t = p
            .cast::<PyTensor>()
            .map_err(|_| type_error(format!("{op}: every parameter must be a kael.Tensor")))?;
        v.push(t.get().t.clone());
    }
    Ok(v)
}

/// One of kael's optimizers, shared with Python (steps take the lock).
#[pyclass(name = "Optimizer", module = "kael.optim", frozen, subclass)]
pub struct PyOptimizer {
    inner: Mutex<Box<dyn Optimizer + Send>>,
    name: &'static str,
}

impl PyOptimizer {
    fn with<R>(&self, f: impl FnOnce(&mut Box<dyn Optimizer + Send>) -> R) -> R {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }
}

#[pymethods]
impl PyOptimizer {
    /// Updates every parameter that has a gradient. On an error nothing
    /// has changed (kael's optimizers check every parameter first).
    fn step(&self, py: Python<'_>) -> PyResult<()> {
        let big = self.with(|o| o.params().iter().any(releases_gil));
        if big {
            py.detach(|| self.with(|o| o.step())).py()
        } else {
            self.with(|o| o.step()).py()
        }
    }

    /// Drops every parameter's gradient (PyTorch's `set_to_none=True`).
    fn zero_grad(&self) {
        self.with(|o| o.zero_grad());
    }

    /// The learning rate.
    #[getter]
    fn lr(&self) -> f64 {
        self.with(|o| o.lr())
    }

    #[setter]
    fn set_lr(&self, lr: f64) -> PyResult<()> {
        self.with(|o| o.set_lr(lr)).py()
    }

    /// The parameters, in the order given.
    #[getter]
    fn params(&self) -> Vec<PyTensor> {
        self.with(|o| o.params().iter().cloned().map(wrap).collect())
    }

    /// The optimizer's state (buffers, step counts, `lr`) as named
    /// tensors; save it beside the model's `state_dict()`.
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let entries = self.with(|o| o.state_dict()).py()?;
        let d = PyDict::new(py);
        for (k, v) in entries {
            d.set_item(k, wrap(v))?;
        }
        Ok(d)
    }

    /// Restores a `state_dict()` (all or nothing).
    fn load_state_dict(&self, state: &Bound<'_, PyDict>) -> PyResult<()> {
        let mut entries = Vec::with_capacity(state.len());
        for (k, v) in state.iter() {
            let name: String = k.extract()?;
            let t = v
                .cast::<PyTensor>()
                .map_err(|_| type_error("load_state_dict: every value must be a kael.Tensor"))?;
            entries.push((name, t.get().t.clone()));
        }
        self.with(|o| o.load_state_dict(&entries)).py()
    }

    fn __repr__(&self) -> String {
        format!("{}(lr={})", self.name, self.lr())
    }
}

/// Stochastic gradient descent with momentum, dampening, weight decay and
/// Nesterov momentum (PyTorch's `SGD`).
#[pyfunction(name = "SGD")]
#[pyo3(signature = (params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=false))]
pub fn sgd(
    params: &Bound<'_, PyAny>,
    lr: f64,
    momentum: f64,
    dampening: f64,
    weight_decay: f64,
    nesterov: bool,
) -> PyResult<PyOptimizer> {
    let p = params_of("SGD", params)?;
    let cfg = SgdConfig {
        lr,
        momentum,
        dampening,
        weight_decay,
        nesterov,
    };
    Ok(PyOptimizer {
        inner: Mutex::new(Box::new(Sgd::new(p, cfg).py()?)),
        name: "SGD",
    })
}

/// Adam (PyTorch's `Adam`: L2 weight decay added to the gradient).
#[pyfunction(name = "Adam")]
#[pyo3(signature = (params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0))]
pub fn adam(
    params: &Bound<'_, PyAny>,
    lr: f64,
    betas: (f64, f64),
    eps: f64,
    weight_decay: f64,
) -> PyResult<PyOptimizer> {
    let p = params_of("Adam", params)?;
    let cfg = AdamConfig {
        lr,
        betas,
        eps,
        weight_decay,
    };
    Ok(PyOptimizer {
        inner: Mutex::new(Box::new(Adam::new(p, cfg).py()?)),
        name: "Adam",
    })
}

/// AdamW (PyTorch's `AdamW`: decoupled weight decay, 0.01 by default).
#[pyfunction(name = "AdamW")]
#[pyo3(signature = (params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01))]
pub fn adamw(
    params: &Bound<'_, PyAny>,
    lr: f64,
    betas: (f64, f64),
    eps: f64,
    weight_decay: f64,
) -> PyResult<PyOptimizer> {
    let p = params_of("AdamW", params)?;
    let cfg = AdamConfig {
        lr,
        betas,
        eps,
        weight_decay,
    };
    Ok(PyOptimizer {
        inner: Mutex::new(Box::new(AdamW::new(p, cfg).py()?)),
        name: "AdamW",
    })
}

/// Scales every gradient so their joint 2-norm is at most `max_norm`;
/// returns the norm before clipping.
#[pyfunction]
pub fn clip_grad_norm_(parameters: &Bound<'_, PyAny>, max_norm: f64) -> PyResult<f64> {
    let p = params_of("clip_grad_norm_", parameters)?;
    kael_core::optim::clip_grad_norm_(&p, max_norm).py()
}

// ------------------------------------------------------- save and load

fn host_err(e: kael_host::Error) -> PyErr {
    match e {
        kael_host::Error::Core(c) => crate::errors::to_py(c),
        kael_host::Error::Io { .. } => Python::attach(|py| raise(py, "KaelIOError", e.to_string())),
        other => value_error(other.to_string()),
    }
}

/// Writes named tensors to a safetensors file: `kael.save({"w": w}, path)`.
#[pyfunction]
pub fn save(tensors: &Bound<'_, PyDict>, path: std::path::PathBuf) -> PyResult<()> {
    let mut owned: Vec<(String, Tensor)> = Vec::with_capacity(tensors.len());
    for (k, v) in tensors.iter() {
        let name: String = k
            .extract()
            .map_err(|_| type_error("save: keys must be strings"))?;
        let t = v
            .cast::<PyTensor>()
            .map_err(|_| type_error(format!("save: the value of {name:?} is not a kael.Tensor")))?;
        owned.push((name, t.get().t.clone()));
    }
    let refs: Vec<(&str, &Tensor)> = owned.iter().map(|(n, t)| (n.as_str(), t)).collect();
    kael_host::safetensors_io::save(&path, &refs).map_err(host_err)
}

/// Reads a safetensors file as a dict of tensors. The file is memory-mapped
/// and each tensor reads it in place where alignment allows (read-only;
/// `clone()` one to modify it, or `load_state_dict` copies into a model).
#[pyfunction]
pub fn load<'py>(py: Python<'py>, path: std::path::PathBuf) -> PyResult<Bound<'py, PyDict>> {
    let dev = crate::dtype_device::default_device()?;
    let file = kael_host::safetensors_io::load_on(&path, &dev).map_err(host_err)?;
    let d = PyDict::new(py);
    for (name, t) in file.into_tensors() {
        d.set_item(name, wrap(t))?;
    }
    Ok(d)
}

// --------------------------------------------- convolution, pooling, norms

/// `int` or `(int, int)` as a pair (PyTorch's `_pair`).
fn pair(op: &str, what: &str, v: &Bound<'_, PyAny>) -> PyResult<[usize; 2]> {
    if let Ok(n) = v.extract::<usize>() {
        return Ok([n, n]);
    }
    let (a, b): (usize, usize) = v.extract().map_err(|_| {
        type_error(format!(
            "{op}: {what} must be a non-negative int or a pair of them"
        ))
    })?;
    Ok([a, b])
}

/// 1-d convolution of `[N, C, L]` by `[O, C / groups, K]` (PyTorch's).
#[pyfunction]
#[pyo3(signature = (input, weight, bias=None, stride=1, padding=None, dilation=1, groups=1))]
pub fn conv1d(
    py: Python<'_>,
    input: &PyTensor,
    weight: &PyTensor,
    bias: Option<&PyTensor>,
    stride: usize,
    padding: Option<&Bound<'_, PyAny>>,
    dilation: usize,
    groups: usize,
) -> PyResult<PyTensor> {
    let (x, w, b) = (&input.t, &weight.t, bias.map(|b| &b.t));
    match padding_mode("conv1d", padding, stride)? {
        PaddingMode::Same => run_t(py, x, || {
            let (xp, p) = kael_core::nn::same_padding(x, w, &[dilation])?;
            F::conv1d(&xp, w, b, stride, p[0], dilation, groups)
        }),
        PaddingMode::Valid => run_t(py, x, || F::conv1d(x, w, b, stride, 0, dilation, groups)),
        PaddingMode::Explicit => {
            let p = match padding {
                Some(v) if !v.is_none() => v
                    .extract::<usize>()
                    .map_err(|_| type_error("conv1d: padding must be an int, 'same' or 'valid'"))?,
                _ => 0,
            };
            run_t(py, x, || F::conv1d(x, w, b, stride, p, dilation, groups))
        }
    }
}

/// 2-d convolution of `[N, C, H, W]` by `[O, C / groups, KH, KW]`;
/// `stride`, `padding` and `dilation` are ints or pairs.
#[pyfunction]
#[pyo3(signature = (input, weight, bias=None, stride=None, padding=None, dilation=None, groups=1))]
pub fn conv2d(
    py: Python<'_>,
    input: &PyTensor,
    weight: &PyTensor,
    bias: Option<&PyTensor>,
    stride: Option<&Bound<'_, PyAny>>,
    padding: Option<&Bound<'_, PyAny>>,
    dilation: Option<&Bound<'_, PyAny>>,
    groups: usize,
) -> PyResult<PyTensor> {
    let or = |v: Option<&Bound<'_, PyAny>>, what: &str, d: usize| match v {
        Some(v) if !v.is_none() => pair("conv2d", what, v),
        _ => Ok([d, d]),
    };
    let (s, d) = (or(stride, "stride", 1)?, or(dilation, "dilation", 1)?);
    let (x, w, b) = (&input.t, &weight.t, bias.map(|b| &b.t));
    match padding_mode("conv2d", padding, s[0].max(s[1]))? {
        PaddingMode::Same => run_t(py, x, || {
            let (xp, p) = kael_core::nn::same_padding(x, w, &d)?;
            F::conv2d(&xp, w, b, s, [p[0], p[1]], d, groups)
        }),
        PaddingMode::Valid => run_t(py, x, || F::conv2d(x, w, b, s, [0, 0], d, groups)),
        PaddingMode::Explicit => {
            let p = or(padding, "padding", 0)?;
            run_t(py, x, || F::conv2d(x, w, b, s, p, d, groups))
        }
    }
}

/// PyTorch's string paddings of a convolution.
enum PaddingMode {
    Same,
    Valid,
    Explicit,
}

/// `padding="same"`, `"valid"`, or numbers; `"same"` needs stride 1 (as in
/// PyTorch).
fn padding_mode(
    op: &str,
    padding: Option<&Bound<'_, PyAny>>,
    stride: usize,
) -> PyResult<PaddingMode> {
    let Some(p) = padding else {
        return Ok(PaddingMode::Explicit);
    };
    let Ok(s) = p.extract::<String>() else {
        return Ok(PaddingMode::Explicit);
    };
    match s.as_str() {
        "same" if stride == 1 => Ok(PaddingMode::Same),
        "same" => Err(value_error(format!(
            "{op}: padding='same' is not supported for strided convolutions (as in PyTorch); pass stride=1 or explicit padding"
        ))),
        "valid" => Ok(PaddingMode::Valid),
        other => Err(value_error(format!(
            "{op}: padding must be 'same', 'valid' or numbers, got '{other}'"
        ))),
    }
}

/// 2-d max pooling (`stride` defaults to `kernel_size`).
#[pyfunction]
#[pyo3(signature = (input, kernel_size, stride=None, padding=None))]
pub fn max_pool2d(
    py: Python<'_>,
    input: &PyTensor,
    kernel_size: &Bound<'_, PyAny>,
    stride: Option<&Bound<'_, PyAny>>,
    padding: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyTensor> {
    let k = pair("max_pool2d", "kernel_size", kernel_size)?;
    let s = match stride {
        Some(v) if !v.is_none() => pair("max_pool2d", "stride", v)?,
        _ => k,
    };
    let p = match padding {
        Some(v) if !v.is_none() => pair("max_pool2d", "padding", v)?,
        _ => [0, 0],
    };
    let x = &input.t;
    run_t(py, x, || F::max_pool2d(x, k, s, p))
}

/// 2-d average pooling (`stride` defaults to `kernel_size`).
#[pyfunction]
#[pyo3(signature = (input, kernel_size, stride=None, padding=None, count_include_pad=true))]
pub fn avg_pool2d(
    py: Python<'_>,
    input: &PyTensor,
    kernel_size: &Bound<'_, PyAny>,
    stride: Option<&Bound<'_, PyAny>>,
    padding: Option<&Bound<'_, PyAny>>,
    count_include_pad: bool,
) -> PyResult<PyTensor> {
    let k = pair("avg_pool2d", "kernel_size", kernel_size)?;
    let s = match stride {
        Some(v) if !v.is_none() => pair("avg_pool2d", "stride", v)?,
        _ => k,
    };
    let p = match padding {
        Some(v) if !v.is_none() => pair("avg_pool2d", "padding", v)?,
        _ => [0, 0],
    };
    let x = &input.t;
    run_t(py, x, || F::avg_pool2d(x, k, s, p, count_include_pad))
}

/// Batch normalisation; in training mode the batch statistics normalise
/// and update `running_mean`/`running_var` in place (PyTorch's).
#[pyfunction]
#[pyo3(signature = (input, running_mean, running_var, weight=None, bias=None, training=false, momentum=0.1, eps=1e-5))]
pub fn batch_norm(
    py: Python<'_>,
    input: &PyTensor,
    running_mean: Option<&PyTensor>,
    running_var: Option<&PyTensor>,
    weight: Option<&PyTensor>,
    bias: Option<&PyTensor>,
    training: bool,
    momentum: f64,
    eps: f64,
) -> PyResult<PyTensor> {
    let x = &input.t;
    let (rm, rv) = (running_mean.map(|t| &t.t), running_var.map(|t| &t.t));
    let (w, b) = (weight.map(|t| &t.t), bias.map(|t| &t.t));
    run_t(py, x, || {
        F::batch_norm(x, rm, rv, w, b, training, momentum, eps)
    })
}

/// Group normalisation over `num_groups` groups of channels.
#[pyfunction]
#[pyo3(signature = (input, num_groups, weight=None, bias=None, eps=1e-5))]
pub fn group_norm(
    py: Python<'_>,
    input: &PyTensor,
    num_groups: usize,
    weight: Option<&PyTensor>,
    bias: Option<&PyTensor>,
    eps: f64,
) -> PyResult<PyTensor> {
    let x = &input.t;
    let (w, b) = (weight.map(|t| &t.t), bias.map(|t| &t.t));
    run_t(py, x, || F::group_norm(x, num_groups, w, b, eps))
}

/// `softmax(q kᵀ · scale + mask) v`, causal when `is_causal`.
#[pyfunction]
#[pyo3(signature = (query, key, value, attn_mask=None, is_causal=false, scale=None))]
pub fn scaled_dot_product_attention(
    py: Python<'_>,
    query: &PyTensor,
    key: &PyTensor,
    value: &PyTensor,
    attn_mask: Option<&PyTensor>,
    is_causal: bool,
    scale: Option<f64>,
) -> PyResult<PyTensor> {
    let (q, k, v) = (&query.t, &key.t, &value.t);
    let m = attn_mask.map(|m| &m.t);
    run_t(py, q, || {
        F::scaled_dot_product_attention(q, k, v, m, is_causal, scale)
    })
}
