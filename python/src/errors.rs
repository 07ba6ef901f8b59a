//! kael's one `Error` enum as Python exceptions.
//!
//! NOTE [Python exceptions]
//! The classes live in `kael/_errors.py` (plain Python, so a class can
//! have two bases: `KaelShapeError(KaelError, ValueError)`); this module
//! looks them up once and raises them with kael's message, which already
//! names the operation, the problem and the fix. The exception also
//! carries `kind` (the Rust variant's name) and `op` (the public operation)
//! so tests can match on them without parsing text. Which class a variant
//! gets, and so which builtin it also is, is decided in [`class_name`]:
//! shapes and arguments are `ValueError`s, indices `IndexError`s, memory
//! `MemoryError`, and autograd (the version-counter error among them),
//! devices, borrows and unsupported ops `RuntimeError`s, as in PyTorch.

use kael_core::Error;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;

/// The Python class an error variant is raised as, in `kael._errors`.
fn class_name(e: &Error) -> &'static str {
    match e {
        Error::DimOutOfRange { .. } | Error::IndexOutOfRange { .. } | Error::OutOfBounds { .. } => {
            "KaelIndexError"
        }
        Error::RankTooLarge { .. }
        | Error::RankMismatch { .. }
        | Error::BroadcastMismatch { .. }
        | Error::ShapeMismatch { .. }
        | Error::ElementCountMismatch { .. } => "KaelShapeError",
        Error::DTypeMismatch { .. }
        | Error::CannotCast { .. }
        | Error::ElementTypeMismatch { .. }
        | Error::UnsupportedDType { .. } => "KaelDTypeError",
        Error::StateDictKeys { .. } | Error::InvalidArgument { .. } => "KaelValueError",
        Error::OutOfMemory { .. } | Error::AllocatorBlockLimit { .. } => "KaelMemoryError",
        Error::Autograd { .. } | Error::UnusedInput { .. } => "KaelAutogradError",
        _ => "KaelRuntimeError",
    }
}

/// The variant's name (`"ShapeMismatch"`), from its `Debug` text.
fn kind(e: &Error) -> String {
    let d = format!("{e:?}");
    d.split([' ', '{', '('])
        .next()
        .unwrap_or("Error")
        .to_string()
}

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// The `kael._errors` module (imported once).
pub fn errors_module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    ERRORS
        .get_or_try_init(py, || Ok(py.import("kael._errors")?.unbind()))
        .map(|m| m.bind(py))
}

/// Raises `name` from `kael._errors` with `msg`; a `RuntimeError` if the
/// module cannot be imported (kael's Python files are missing).
pub fn raise(py: Python<'_>, name: &str, msg: String) -> PyErr {
    match errors_module(py).and_then(|m| m.getattr(name)) {
        Ok(cls) => PyErr::from_value(match cls.call1((msg.clone(),)) {
            Ok(v) => v,
            Err(e) => return e,
        }),
        Err(_) => PyRuntimeError::new_err(msg),
    }
}

/// A message of the core (written for Rust callers) in Python spelling:
/// `to_dtype(DType::F32)` is `.to(kael.float32)`, `deep_clone()` is
/// `clone()`, `DType::I64` is `kael.int64`.
pub fn pythonize(msg: &str) -> String {
    let mut m = msg.to_string();
    for d in kael_core::DType::ALL {
        let name = crate::dtype_device::dtype_name(d);
        m = m.replace(
            &format!("to_dtype(DType::{d:?})"),
            &format!(".to(kael.{name})"),
        );
        m = m.replace(&format!("DType::{d:?}"), &format!("kael.{name}"));
        m = m.replace(&format!("dtype {d:?}"), &format!("dtype {name}"));
        m = m.replace(&format!("got {d:?}"), &format!("got {name}"));
    }
    m.replace("to_dtype()", ".to(dtype)")
        .replace("(to_dtype)", "(.to(dtype))")
        .replace("to_dtype", ".to(dtype)")
        .replace("deep_clone()", "clone()")
        .replace("..to(", ".to(")
}

/// kael's error as its Python exception, with `kind` and `op` attributes.
pub fn to_py(e: Error) -> PyErr {
    Python::attach(|py| {
        let msg = pythonize(&e.to_string());
        let err = raise(py, class_name(&e), msg);
        let v = err.value(py);
        let _ = v.setattr("kind", kind(&e));
        if let Some(op) = op_of(&e) {
            let _ = v.setattr("op", op);
        }
        err
    })
}

/// The public operation an error names, read from its `Debug` text's
/// `op: "…"` field (every variant that has one prints it first).
fn op_of(e: &Error) -> Option<String> {
    let d = format!("{e:?}");
    let start = d.find("op: \"")? + 5;
    let len = d[start..].find('"')?;
    Some(d[start..start + len].to_string())
}

/// `Result<T, kael::Error>` → `PyResult<T>`.
pub trait IntoPy<T> {
    /// Converts the error, if any, into its Python exception.
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for Result<T, Error> {
    #[inline]
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// A `KaelValueError` for a bad argument found by the bindings themselves
/// (before kael sees it); the message names the operation and the fix.
pub fn value_error(msg: impl Into<String>) -> PyErr {
    Python::attach(|py| {
        let err = raise(py, "KaelValueError", msg.into());
        let _ = err.value(py).setattr("kind", "InvalidArgument");
        err
    })
}

/// A `KaelIndexError` found by the bindings (indexing).
pub fn index_error(msg: impl Into<String>) -> PyErr {
    Python::attach(|py| {
        let err = raise(py, "KaelIndexError", msg.into());
        let _ = err.value(py).setattr("kind", "IndexOutOfRange");
        err
    })
}

/// A `KaelRuntimeError` found by the bindings (a device that cannot open).
#[allow(dead_code)]
pub fn raise_runtime(msg: impl Into<String>) -> PyErr {
    Python::attach(|py| {
        let err = raise(py, "KaelRuntimeError", msg.into());
        let _ = err.value(py).setattr("kind", "Unsupported");
        err
    })
}

/// A `KaelTypeError` (an argument of a type the operation does not take).
pub fn type_error(msg: impl Into<String>) -> PyErr {
    Python::attach(|py| {
        let err = raise(py, "KaelTypeError", msg.into());
        let _ = err.value(py).setattr("kind", "InvalidArgument");
        err
    })
}
