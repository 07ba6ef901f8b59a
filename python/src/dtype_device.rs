//! dtypes and devices as Python objects: `kael.float32`, `kael.cpu`,
//! `kael.threaded`.
//!
//! NOTE [Default device]
//! Creation functions take `device=None`, meaning the default device, which
//! is `kael.threaded` (the fast host backend) unless changed with
//! `kael.set_default_device`. `kael.cpu` is the portable reference backend:
//! the one firmware runs, slow but the yardstick other backends are checked
//! against. Each device object is made once, so `t.device == kael.threaded`
//! and tensors made on it can meet in one op.

use crate::errors::{IntoPy, value_error};
use kael_core::{DType, Device, DeviceKind};
use pyo3::prelude::*;
use std::sync::{Mutex, OnceLock};

/// A kael dtype (`kael.float32`, `kael.int64`, …).
#[pyclass(name = "dtype", module = "kael", frozen, eq, hash, from_py_object)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyDType {
    pub d: DType,
}

/// The Python name of a dtype (`"float32"`), as PyTorch and numpy spell it
/// (kael-core's [`DType::name`]).
pub fn dtype_name(d: DType) -> &'static str {
    d.name()
}

/// A dtype from its Python name or alias (`"float"`, `"long"`, …).
pub fn dtype_from_name(name: &str) -> Option<DType> {
    Some(match name {
        "float32" | "float" | "f32" => DType::F32,
        "float64" | "double" | "f64" => DType::F64,
        "float16" | "half" | "f16" => DType::F16,
        "bfloat16" | "bf16" => DType::BF16,
        "int64" | "long" | "i64" => DType::I64,
        "int32" | "int" | "i32" => DType::I32,
        "int16" | "short" | "i16" => DType::I16,
        "int8" | "i8" => DType::I8,
        "uint8" | "u8" => DType::U8,
        "bool" => DType::Bool,
        _ => return None,
    })
}

#[pymethods]
impl PyDType {
    fn __repr__(&self) -> String {
        format!("kael.{}", dtype_name(self.d))
    }

    /// Bytes per element.
    #[getter]
    fn itemsize(&self) -> usize {
        self.d.size_in_bytes()
    }

    /// Whether it is a floating-point dtype.
    #[getter]
    fn is_floating_point(&self) -> bool {
        self.d.is_float()
    }

    fn __reduce__(&self) -> (String,) {
        (format!("kael.{}", dtype_name(self.d)),)
    }
}

/// Reads a `dtype=` argument: a `kael.dtype`, a name (`"float32"`), or a
/// numpy dtype / Python type with one of those names (`numpy.float32`,
/// `float`, `int`, `bool`).
pub fn extract_dtype(op: &str, obj: &Bound<'_, PyAny>) -> PyResult<DType> {
    if let Ok(d) = obj.cast::<PyDType>() {
        return Ok(d.get().d);
    }
    let name: Option<String> = if let Ok(s) = obj.extract::<String>() {
        Some(s)
    } else if obj.is(obj.py().get_type::<pyo3::types::PyFloat>()) {
        Some("float32".into())
    } else if obj.is(obj.py().get_type::<pyo3::types::PyBool>()) {
        Some("bool".into())
    } else if obj.is(obj.py().get_type::<pyo3::types::PyInt>()) {
        Some("int64".into())
    } else {
        // numpy.dtype('float32') and numpy.float32 both have a name.
        obj.getattr("name")
            .ok()
            .and_then(|n| n.extract::<String>().ok())
            .or_else(|| {
                obj.getattr("__name__")
                    .ok()
                    .and_then(|n| n.extract::<String>().ok())
            })
    };
    name.as_deref().and_then(dtype_from_name).ok_or_else(|| {
        value_error(format!(
            "{op}: {} is not a kael dtype; pass one of kael.float32, float64, float16, bfloat16, int64, int32, int16, int8, uint8, bool",
            obj.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    })
}

/// A kael device (`kael.cpu`, `kael.threaded`).
#[pyclass(name = "device", module = "kael", frozen, from_py_object)]
#[derive(Clone)]
pub struct PyDevice {
    pub d: Device,
    pub name: &'static str,
}

#[pymethods]
impl PyDevice {
    fn __repr__(&self) -> String {
        format!("kael.{}", self.name)
    }

    /// The device's name: `"cpu"` or `"threaded"`.
    #[getter]
    fn r#type(&self) -> &'static str {
        self.name
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        match other.cast::<PyDevice>() {
            Ok(o) => o.get().d.same_as(&self.d),
            Err(_) => other
                .extract::<String>()
                .map(|s| s == self.name)
                .unwrap_or(false),
        }
    }

    fn __hash__(&self) -> u64 {
        match self.d.kind() {
            DeviceKind::Cpu => 1,
            DeviceKind::ThreadedCpu => 2,
            DeviceKind::Cuda(i) => 3 + u64::from(i),
            _ => 0,
        }
    }
}

static CPU: OnceLock<Device> = OnceLock::new();
static THREADED: OnceLock<Device> = OnceLock::new();
static DEFAULT: Mutex<Option<&'static str>> = Mutex::new(None);

/// The reference CPU device (made once).
pub fn cpu() -> Device {
    CPU.get_or_init(Device::cpu).clone()
}

/// The threaded CPU device (made once, with as many threads as cores).
pub fn threaded() -> PyResult<Device> {
    if let Some(d) = THREADED.get() {
        return Ok(d.clone());
    }
    let d = kael_host::cpu_threaded::device().py()?;
    Ok(THREADED.get_or_init(|| d).clone())
}

/// The first CUDA device, when kael-py was built with the `cuda` feature
/// and a driver loads (made once).
#[cfg(feature = "cuda")]
pub fn cuda() -> PyResult<Device> {
    static CUDA: OnceLock<Device> = OnceLock::new();
    if let Some(d) = CUDA.get() {
        return Ok(d.clone());
    }
    let d = kael_host::cuda::device(0).map_err(|e| {
        crate::errors::raise_runtime(format!(
            "cuda: no CUDA device could be opened ({e}); check the driver, or use kael.threaded"
        ))
    })?;
    Ok(CUDA.get_or_init(|| d).clone())
}

/// Whether `kael.cuda` can be used: built with the `cuda` feature and a
/// driver and a device are present.
#[pyfunction]
pub fn cuda_available() -> bool {
    #[cfg(feature = "cuda")]
    {
        cuda().is_ok()
    }
    #[cfg(not(feature = "cuda"))]
    {
        false
    }
}

/// A device object by name.
pub fn device_by_name(op: &str, name: &str) -> PyResult<PyDevice> {
    match name {
        #[cfg(feature = "cuda")]
        "cuda" => Ok(PyDevice {
            d: cuda()?,
            name: "cuda",
        }),
        "cpu" => Ok(PyDevice {
            d: cpu(),
            name: "cpu",
        }),
        "threaded" => Ok(PyDevice {
            d: threaded()?,
            name: "threaded",
        }),
        other => Err(value_error(format!(
            "{op}: unknown device {other:?}; pass kael.cpu or kael.threaded (or their names; \"cuda\" when kael is built with the cuda feature)"
        ))),
    }
}

/// The Python device object of a tensor's device.
pub fn device_of(d: &Device) -> PyDevice {
    let name = match d.kind() {
        DeviceKind::Cpu => "cpu",
        DeviceKind::ThreadedCpu => "threaded",
        DeviceKind::Cuda(_) => "cuda",
        _ => "custom",
    };
    PyDevice { d: d.clone(), name }
}

/// The default device (NOTE [Default device]).
pub fn default_device() -> PyResult<Device> {
    let name = DEFAULT.lock().map(|g| *g).unwrap_or(None);
    match name {
        Some("cpu") => Ok(cpu()),
        _ => threaded(),
    }
}

/// Reads a `device=` argument: `None` (the default device), a
/// `kael.device`, or a name.
pub fn extract_device(op: &str, obj: Option<&Bound<'_, PyAny>>) -> PyResult<Device> {
    match obj {
        None => default_device(),
        Some(o) if o.is_none() => default_device(),
        Some(o) => {
            if let Ok(d) = o.cast::<PyDevice>() {
                return Ok(d.get().d.clone());
            }
            match o.extract::<String>() {
                Ok(name) => Ok(device_by_name(op, &name)?.d),
                Err(_) => Err(value_error(format!(
                    "{op}: device must be kael.cpu, kael.threaded or a device name"
                ))),
            }
        }
    }
}

/// Sets the device that creation functions use when given none.
#[pyfunction]
pub fn set_default_device(device: &Bound<'_, PyAny>) -> PyResult<()> {
    let d = extract_device("set_default_device", Some(device))?;
    let name = device_of(&d).name;
    if let Ok(mut g) = DEFAULT.lock() {
        *g = Some(name);
    }
    Ok(())
}

/// The device that creation functions use when given none.
#[pyfunction]
pub fn get_default_device() -> PyResult<PyDevice> {
    Ok(device_of(&default_device()?))
}

/// The device called `name` (`"cpu"`, `"threaded"`, `"cuda"`): what
/// `kael.cuda` resolves through.
#[pyfunction]
pub fn device_named(name: &str) -> PyResult<PyDevice> {
    device_by_name("device", name)
}
