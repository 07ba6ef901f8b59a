//! The op-table ops as `kael.Tensor` methods, and Python's operators.
//!
//! NOTE [Op table in Python]
//! The methods of kael's op-table rows (`kael_core::ops::{unary, binary,
//! compare}`) are generated from the tables: each table exports a
//! `for_each_*_row!` macro that calls back once per row, so a row added in
//! Rust is a `kael.Tensor` method (and its in-place form) with no line
//! here. Only the unary rows with parameters are bound by hand, for
//! PyTorch's argument names and defaults; `tests/test_op_table.py` asks
//! the extension for the tables' names (`kael._kael._op_table()`, read
//! from the tables themselves) and checks every one is a method.

use crate::errors::{IntoPy, type_error};
use crate::tensor::{Operand, PyTensor, as_tensor, operand, run, run_t};
use kael_core::ops::{BinaryOp, CmpOp, UnaryOp};
use kael_core::{DType, Tensor};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// One unary row: `x.exp()` and `x.exp_()`, generated for every row of the
/// table without parameters (`kael_core::for_each_unary_row!`); rows with
/// parameters are bound by hand below, with PyTorch's argument names.
macro_rules! unary_row {
    ($m:ident, $im:ident, ()) => {
        #[pymethods]
        impl PyTensor {
            #[doc = concat!("Elementwise `", stringify!($m), "` (a row of kael's unary op table).")]
            fn $m(&self, py: Python<'_>) -> PyResult<PyTensor> {
                let t = &self.t;
                run_t(py, t, || t.$m())
            }

            #[doc = concat!("`", stringify!($m), "` in place (bumps the version).")]
            fn $im(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
                let t = slf.get().t.clone();
                run(slf.py(), &t, || t.$im())?;
                Ok(slf)
            }
        }
    };
    ($m:ident, $im:ident, ($($param:tt)+)) => {};
}

kael_core::for_each_unary_row!(unary_row);

/// The parametrised unary rows (bound by hand below, with PyTorch's
/// argument names and defaults).
const UNARY_PARAM_BOUND: &[&str] = &[
    "powf",
    "clamp",
    "affine",
    "softplus",
    "hardtanh",
    "leaky_relu",
    "elu",
];

#[pymethods]
impl PyTensor {
    /// `x ** exponent` for a number `exponent`.
    fn powf(&self, py: Python<'_>, exponent: f64) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.powf(exponent))
    }

    /// `powf` in place.
    fn powf_(slf: Bound<'_, Self>, exponent: f64) -> PyResult<Bound<'_, Self>> {
        let t = slf.get().t.clone();
        run(slf.py(), &t, || t.powf_(exponent))?;
        Ok(slf)
    }

    /// Limits every element to `[min, max]` (either may be `None`).
    #[pyo3(signature = (min=None, max=None))]
    fn clamp(&self, py: Python<'_>, min: Option<f64>, max: Option<f64>) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.clamp(min, max))
    }

    /// `clamp` in place.
    #[pyo3(signature = (min=None, max=None))]
    fn clamp_(
        slf: Bound<'_, Self>,
        min: Option<f64>,
        max: Option<f64>,
    ) -> PyResult<Bound<'_, Self>> {
        let t = slf.get().t.clone();
        run(slf.py(), &t, || t.clamp_(min, max))?;
        Ok(slf)
    }

    /// `x * mul + add` in one pass.
    fn affine(&self, py: Python<'_>, mul: f64, add: f64) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.affine(mul, add))
    }

    /// `affine` in place.
    fn affine_(slf: Bound<'_, Self>, mul: f64, add: f64) -> PyResult<Bound<'_, Self>> {
        let t = slf.get().t.clone();
        run(slf.py(), &t, || t.affine_(mul, add))?;
        Ok(slf)
    }

    /// `log(1 + exp(beta x)) / beta`, linear above `threshold`.
    #[pyo3(signature = (beta=1.0, threshold=20.0))]
    fn softplus(&self, py: Python<'_>, beta: f64, threshold: f64) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.softplus(beta, threshold))
    }

    /// `softplus` in place.
    #[pyo3(signature = (beta=1.0, threshold=20.0))]
    fn softplus_(slf: Bound<'_, Self>, beta: f64, threshold: f64) -> PyResult<Bound<'_, Self>> {
        let t = slf.get().t.clone();
        run(slf.py(), &t, || t.softplus_(beta, threshold))?;
        Ok(slf)
    }

    /// Clamps to `[min_val, max_val]` (gradient 0 outside).
    #[pyo3(signature = (min_val=-1.0, max_val=1.0))]
    fn hardtanh(&self, py: Python<'_>, min_val: f64, max_val: f64) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.hardtanh(min_val, max_val))
    }

    /// `hardtanh` in place.
    #[pyo3(signature = (min_val=-1.0, max_val=1.0))]
    fn hardtanh_(slf: Bound<'_, Self>, min_val: f64, max_val: f64) -> PyResult<Bound<'_, Self>> {
        let t = slf.get().t.clone();
        run(slf.py(), &t, || t.hardtanh_(min_val, max_val))?;
        Ok(slf)
    }

    /// `x` for `x >= 0`, `negative_slope * x` below.
    #[pyo3(signature = (negative_slope=0.01))]
    fn leaky_relu(&self, py: Python<'_>, negative_slope: f64) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.leaky_relu(negative_slope))
    }

    /// `leaky_relu` in place.
    #[pyo3(signature = (negative_slope=0.01))]
    fn leaky_relu_(slf: Bound<'_, Self>, negative_slope: f64) -> PyResult<Bound<'_, Self>> {
        let t = slf.get().t.clone();
        run(slf.py(), &t, || t.leaky_relu_(negative_slope))?;
        Ok(slf)
    }

    /// `x` for `x > 0`, `alpha (exp(x) - 1)` below.
    #[pyo3(signature = (alpha=1.0))]
    fn elu(&self, py: Python<'_>, alpha: f64) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.elu(alpha))
    }

    /// `elu` in place.
    #[pyo3(signature = (alpha=1.0))]
    fn elu_(slf: Bound<'_, Self>, alpha: f64) -> PyResult<Bound<'_, Self>> {
        let t = slf.get().t.clone();
        run(slf.py(), &t, || t.elu_(alpha))?;
        Ok(slf)
    }
}

/// One binary row: `x.add(y)`, where `y` is a tensor, a number (which
/// promotes as PyTorch's Python numbers do) or an array; generated for
/// every row of the table (`kael_core::for_each_binary_row!`).
macro_rules! binary_row {
    ($m:ident) => {
        #[pymethods]
        impl PyTensor {
            #[doc = concat!("Elementwise `", stringify!($m), "` with broadcasting (a row of kael's binary op table); `other` may be a number.")]
            fn $m(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
                let b = as_tensor(stringify!($m), &self.t, other)?;
                let a = &self.t;
                run_t(py, a, || a.$m(&b))
            }
        }
    };
}

kael_core::for_each_binary_row!(binary_row);

/// Binary rows that are not user-facing methods: kernels of fused backward
/// rules, reached through autograd only.
const BINARY_INTERNAL: &[&str] = &["gelu_tanh_backward"];

/// One comparison row: `x.lt(y)` gives a bool tensor; generated for every
/// row of the table (`kael_core::for_each_compare_row!`).
macro_rules! compare_row {
    ($m:ident) => {
        #[pymethods]
        impl PyTensor {
            #[doc = concat!("Elementwise `", stringify!($m), "` with broadcasting, as a bool tensor (a row of kael's comparison table).")]
            fn $m(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
                let b = as_tensor(stringify!($m), &self.t, other)?;
                let a = &self.t;
                run_t(py, a, || a.$m(&b))
            }
        }
    };
}

kael_core::for_each_compare_row!(compare_row);

/// One binary op with a number on either side, as the operators need it.
#[derive(Clone, Copy)]
enum Arith {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    FloorDiv,
}

fn arith(
    py: Python<'_>,
    a: &Tensor,
    other: &Bound<'_, PyAny>,
    op: Arith,
    reflected: bool,
) -> PyResult<PyTensor> {
    let name = match op {
        Arith::Add => "add",
        Arith::Sub => "sub",
        Arith::Mul => "mul",
        Arith::Div => "div",
        Arith::Pow => "pow",
        Arith::FloorDiv => "floor_divide",
    };
    match operand(name, a, other)? {
        Operand::S(v) => run_t(py, a, || match (op, reflected) {
            (Arith::Add, _) => a.add_scalar(v),
            (Arith::Mul, _) => a.mul_scalar(v),
            (Arith::Sub, false) => a.sub_scalar(v),
            (Arith::Sub, true) => a.rsub(v),
            (Arith::Div, false) => a.div_scalar(v),
            (Arith::Div, true) => a.rdiv(v),
            (Arith::Pow, false) => a.pow_scalar(v),
            (Arith::Pow, true) => a.number_operand("pow", v)?.pow(a),
            (Arith::FloorDiv, false) => a.floor_divide(&a.number_operand("floor_divide", v)?),
            (Arith::FloorDiv, true) => a.number_operand("floor_divide", v)?.floor_divide(a),
        }),
        Operand::T(b) => {
            let (l, r) = if reflected { (&b, a) } else { (a, &b) };
            run_t(py, a, || match op {
                Arith::Add => l.add(r),
                Arith::Sub => l.sub(r),
                Arith::Mul => l.mul(r),
                Arith::Div => l.div(r),
                Arith::Pow => l.pow(r),
                Arith::FloorDiv => l.floor_divide(r),
            })
        }
    }
}

fn arith_(py: Python<'_>, a: &Tensor, other: &Bound<'_, PyAny>, op: Arith) -> PyResult<()> {
    let name = match op {
        Arith::Add => "add_",
        Arith::Sub => "sub_",
        Arith::Mul => "mul_",
        Arith::Div => "div_",
        Arith::Pow => "pow_",
        Arith::FloorDiv => "floor_divide_",
    };
    match operand(name, a, other)? {
        Operand::S(v) => run(py, a, || match op {
            Arith::Add => a.add_scalar_(v),
            Arith::Sub => a.sub_scalar_(v),
            Arith::Mul => a.mul_scalar_(v),
            Arith::Div => a.div_scalar_(v),
            Arith::Pow if a.dtype().is_float() => a.powf_(v.to_f64()),
            Arith::Pow => {
                // an integer tensor keeps its dtype only for an integer power
                let r = a.pow_scalar(v)?;
                if !kael_core::promote::can_cast(r.dtype(), a.dtype()) {
                    return Err(kael_core::Error::CannotCast {
                        op: "pow_",
                        result: r.dtype(),
                        dest: a.dtype(),
                    });
                }
                a.copy_(&r)
            }
            Arith::FloorDiv => a.copy_(&a.floor_divide(&a.number_operand("floor_divide_", v)?)?),
        }),
        Operand::T(b) => run(py, a, || match op {
            Arith::Add => a.add_(&b),
            Arith::Sub => a.sub_(&b),
            Arith::Mul => a.mul_(&b),
            Arith::Div => a.div_(&b),
            Arith::Pow => Err(kael_core::Error::InvalidArgument {
                op: "pow_",
                reason: "in-place pow takes a number exponent; use x = x ** y for a tensor exponent",
            }),
            Arith::FloorDiv => Err(kael_core::Error::InvalidArgument {
                op: "floor_divide_",
                reason: "in-place floor division takes a number; use x = x // y for a tensor divisor",
            }),
        }),
    }
}

fn compare(py: Python<'_>, a: &Tensor, other: &Bound<'_, PyAny>, op: CmpOp) -> PyResult<PyTensor> {
    let b = as_tensor(op.name(), a, other)?;
    run_t(py, a, || match op {
        CmpOp::Eq => a.eq(&b),
        CmpOp::Ne => a.ne(&b),
        CmpOp::Lt => a.lt(&b),
        CmpOp::Le => a.le(&b),
        CmpOp::Gt => a.gt(&b),
        CmpOp::Ge => a.ge(&b),
        CmpOp::LogicalAnd => a.logical_and(&b),
        CmpOp::LogicalOr => a.logical_or(&b),
        CmpOp::LogicalXor => a.logical_xor(&b),
    })
}

/// `&`, `|`, `^`: the bitwise rows (logical on bool operands, which run on
/// 0/1; mixed dtypes promote as PyTorch's: `bool ^ int64` is int64).
fn bitwise(py: Python<'_>, a: &Tensor, other: &Bound<'_, PyAny>, which: u8) -> PyResult<PyTensor> {
    let b = as_tensor("bitwise", a, other)?;
    run_t(py, a, || match which {
        0 => a.bitwise_and(&b),
        1 => a.bitwise_or(&b),
        _ => a.bitwise_xor(&b),
    })
}

#[pymethods]
impl PyTensor {
    /// `add` in place (bumps the version).
    fn add_<'py>(slf: Bound<'py, Self>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, Self>> {
        arith_(slf.py(), &slf.get().t, other, Arith::Add)?;
        Ok(slf)
    }
    /// `sub` in place (bumps the version).
    fn sub_<'py>(slf: Bound<'py, Self>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, Self>> {
        arith_(slf.py(), &slf.get().t, other, Arith::Sub)?;
        Ok(slf)
    }
    /// `mul` in place (bumps the version).
    fn mul_<'py>(slf: Bound<'py, Self>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, Self>> {
        arith_(slf.py(), &slf.get().t, other, Arith::Mul)?;
        Ok(slf)
    }
    /// `div` in place (bumps the version).
    fn div_<'py>(slf: Bound<'py, Self>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, Self>> {
        arith_(slf.py(), &slf.get().t, other, Arith::Div)?;
        Ok(slf)
    }

    fn __add__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        arith(py, &self.t, o, Arith::Add, false)
    }
    fn __radd__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        arith(py, &self.t, o, Arith::Add, true)
    }
    fn __sub__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        arith(py, &self.t, o, Arith::Sub, false)
    }
    fn __rsub__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        arith(py, &self.t, o, Arith::Sub, true)
    }
    fn __mul__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        arith(py, &self.t, o, Arith::Mul, false)
    }
    fn __rmul__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        arith(py, &self.t, o, Arith::Mul, true)
    }
    fn __truediv__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        arith(py, &self.t, o, Arith::Div, false)
    }
    fn __rtruediv__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        arith(py, &self.t, o, Arith::Div, true)
    }
    fn __pow__(
        &self,
        py: Python<'_>,
        o: &Bound<'_, PyAny>,
        modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        if modulo.is_some_and(|m| !m.is_none()) {
            return Err(type_error(
                "pow(): a modulus is not supported; compute x ** y then .remainder(m)",
            ));
        }
        arith(py, &self.t, o, Arith::Pow, false)
    }
    fn __rpow__(
        &self,
        py: Python<'_>,
        o: &Bound<'_, PyAny>,
        modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        if modulo.is_some_and(|m| !m.is_none()) {
            return Err(type_error(
                "pow(): a modulus is not supported; compute x ** y then .remainder(m)",
            ));
        }
        arith(py, &self.t, o, Arith::Pow, true)
    }
    fn __iadd__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<()> {
        arith_(py, &self.t, o, Arith::Add)
    }
    fn __isub__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<()> {
        arith_(py, &self.t, o, Arith::Sub)
    }
    fn __imul__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<()> {
        arith_(py, &self.t, o, Arith::Mul)
    }
    fn __itruediv__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<()> {
        arith_(py, &self.t, o, Arith::Div)
    }
    fn __neg__(&self, py: Python<'_>) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.neg())
    }
    fn __pos__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }
    fn __abs__(&self, py: Python<'_>) -> PyResult<PyTensor> {
        let t = &self.t;
        run_t(py, t, || t.abs())
    }
    fn __invert__(&self, py: Python<'_>) -> PyResult<PyTensor> {
        if self.t.dtype() != DType::Bool {
            return Err(type_error(
                "~x: only bool tensors can be inverted; compare first (x == 0) or use .logical_xor(True)",
            ));
        }
        let t = &self.t;
        let f = Tensor::full(&[], 0.0, DType::Bool, &t.device()).py()?;
        run_t(py, t, || t.eq(&f))
    }
    fn __and__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        bitwise(py, &self.t, o, 0)
    }
    fn __rand__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        bitwise(py, &self.t, o, 0)
    }
    fn __or__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        bitwise(py, &self.t, o, 1)
    }
    fn __ror__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        bitwise(py, &self.t, o, 1)
    }
    fn __xor__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        bitwise(py, &self.t, o, 2)
    }
    fn __rxor__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        bitwise(py, &self.t, o, 2)
    }
    fn __floordiv__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        arith(py, &self.t, o, Arith::FloorDiv, false)
    }
    fn __rfloordiv__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        arith(py, &self.t, o, Arith::FloorDiv, true)
    }
    fn __ifloordiv__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<()> {
        arith_(py, &self.t, o, Arith::FloorDiv)
    }
    fn __lshift__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let b = as_tensor("bitwise_left_shift", &self.t, o)?;
        let a = &self.t;
        run_t(py, a, || a.bitwise_left_shift(&b))
    }
    fn __rshift__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let b = as_tensor("bitwise_right_shift", &self.t, o)?;
        let a = &self.t;
        run_t(py, a, || a.bitwise_right_shift(&b))
    }
    fn __mod__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let b = as_tensor("remainder", &self.t, o)?;
        let a = &self.t;
        run_t(py, a, || a.remainder(&b))
    }
    fn __lt__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        compare(py, &self.t, o, CmpOp::Lt)
    }
    fn __le__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        compare(py, &self.t, o, CmpOp::Le)
    }
    fn __gt__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        compare(py, &self.t, o, CmpOp::Gt)
    }
    fn __ge__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        compare(py, &self.t, o, CmpOp::Ge)
    }
    fn __eq__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        compare(py, &self.t, o, CmpOp::Eq)
    }
    fn __ne__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        compare(py, &self.t, o, CmpOp::Ne)
    }
}

/// The names of kael's op-table rows and of the rows bound here, for the
/// completeness test (NOTE [Op table in Python]).
#[pyfunction]
pub fn _op_table(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    let unary: Vec<&str> = UnaryOp::INPLACE_CASES
        .iter()
        .map(|c| c.op.strip_suffix('_').unwrap_or(c.op))
        .collect();
    d.set_item("unary", unary)?;
    d.set_item(
        "binary",
        BinaryOp::ALL.iter().map(|o| o.name()).collect::<Vec<_>>(),
    )?;
    d.set_item(
        "compare",
        CmpOp::ALL.iter().map(|o| o.name()).collect::<Vec<_>>(),
    )?;
    // every plain row is bound by generation; the parametrised ones by hand
    d.set_item("bound_by_hand", UNARY_PARAM_BOUND.to_vec())?;
    d.set_item("internal", BINARY_INTERNAL.to_vec())?;
    Ok(d)
}
