//! `Display` for [`Tensor`]: the values in nested brackets, as PyTorch
//! prints them, then one line with shape, dtype and device. `Debug` stays
//! the short `Tensor([2, 3], F32, Cpu)`.
//!
//! * One format for every element of a tensor, right-aligned to the widest:
//!   floats whose values are all integers print as `3.`; others with four
//!   decimals (`0.5000`), or in scientific notation (`1.0000e-5`) when the
//!   largest magnitude is over 1e8, under 1e-4 or over 1000 times the
//!   smallest (non-zero magnitudes only). Integers as they are, bools as
//!   `true`/`false`, NaN and infinities as `nan`, `inf`, `-inf`.
//! * More than [`PRINT_THRESHOLD`] elements are summarised: each dim longer
//!   than `2 * PRINT_EDGE_ITEMS` shows its first and last
//!   [`PRINT_EDGE_ITEMS`] entries around `...`. Only those entries are read
//!   (copied off the device), never the whole tensor.
//! * Values that cannot be read (a backend error) print as a note in
//!   place of the values; `Display` never fails.

use super::Tensor;
use crate::Result;
use crate::dtype::{DType, Element};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::{self, Write};

/// Tensors with more elements than this print summarised (PyTorch's
/// default threshold).
///
/// ```
/// use kael_core::{Device, Tensor, tensor::PRINT_THRESHOLD};
/// let t = Tensor::arange(0i32, PRINT_THRESHOLD as i32 + 1, &Device::cpu())?;
/// assert!(t.to_string().contains("..."));
/// # Ok::<(), kael_core::Error>(())
/// ```
pub const PRINT_THRESHOLD: usize = 1000;

/// Entries kept at each end of a summarised dim.
///
/// ```
/// use kael_core::{Device, Tensor, tensor::PRINT_EDGE_ITEMS};
/// let t = Tensor::arange(0i32, 2000, &Device::cpu())?;
/// let first_line = t.to_string().lines().next().unwrap_or_default().to_string();
/// assert_eq!(first_line.matches(", ").count(), 2 * PRINT_EDGE_ITEMS);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub const PRINT_EDGE_ITEMS: usize = 3;

/// `tensor(` before the values: nested rows align one column after it.
const PREFIX: &str = "tensor(";

impl fmt::Display for Tensor {
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let t = Tensor::arange(0.0f32, 6.0, &Device::cpu())?.reshape(&[2, 3])?;
    /// assert_eq!(
    ///     t.to_string(),
    ///     "tensor([[0., 1., 2.],\n        [3., 4., 5.]])\nshape=[2, 3], dtype=F32, device=Cpu"
    /// );
    /// assert_eq!(format!("{t:?}"), "Tensor([2, 3], F32, Cpu)");
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(PREFIX)?;
        match printed(self) {
            Ok(p) => p.write(f)?,
            Err(e) => write!(f, "<values could not be read: {e}>")?,
        }
        write!(
            f,
            ")\nshape={:?}, dtype={:?}, device={:?}",
            self.shape(),
            self.dtype(),
            self.device().kind()
        )?;
        if self.requires_grad() {
            f.write_str(", requires_grad=true")?;
        }
        Ok(())
    }
}

/// The cells to print (already formatted, summarised) and where they go.
struct Printed {
    /// Row-major over `shape`.
    cells: Vec<String>,
    /// The printed shape: each summarised dim has `2 * PRINT_EDGE_ITEMS`.
    shape: Vec<usize>,
    /// Per dim: `...` goes before entry `PRINT_EDGE_ITEMS`.
    gap: Vec<bool>,
    /// Width of the widest cell.
    width: usize,
}

/// A value read from the tensor.
#[derive(Clone, Copy)]
enum Value {
    Float(f64),
    Int(i64),
    Bool(bool),
}

fn printed(t: &Tensor) -> Result<Printed> {
    // a shape whose element count overflows (an expanded view) is large
    let summarise =
        crate::shape::checked_numel("Display", t.shape()).map_or(true, |n| n > PRINT_THRESHOLD);
    let t = t.detach()?;
    let gap: Vec<bool> = t
        .shape()
        .iter()
        .map(|&n| summarise && n > 2 * PRINT_EDGE_ITEMS)
        .collect();
    let shape: Vec<usize> = t
        .shape()
        .iter()
        .zip(&gap)
        .map(|(&n, &cut)| if cut { 2 * PRINT_EDGE_ITEMS } else { n })
        .collect();
    // Only the shown entries are read: each combination of head and tail
    // over the cut dims is one view, narrowed on every cut dim at once and
    // read on its own; its values go to their places in the printed shape.
    // (Narrowing then concatenating one dim at a time would materialise
    // the other dims whole: [6, n] of an expanded [n, n].)
    let cut: Vec<usize> = (0..gap.len()).filter(|&d| gap[d]).collect();
    let total: usize = shape.iter().product();
    let mut values = alloc::vec![Value::Int(0); total];
    for corner in 0..(1usize << cut.len()) {
        let mut piece = t.clone();
        for (bit, &d) in cut.iter().enumerate() {
            let n = t.shape()[d];
            let start = if corner >> bit & 1 == 0 {
                0
            } else {
                n - PRINT_EDGE_ITEMS
            };
            piece = piece.narrow(d as isize, start, PRINT_EDGE_ITEMS)?;
        }
        let part = read(&piece)?;
        // row-major index of each value of the piece in the printed shape
        let mut at = alloc::vec![0usize; shape.len()];
        for v in part {
            let mut flat = 0;
            for (d, &i) in at.iter().enumerate() {
                let shift = match cut.iter().position(|&c| c == d) {
                    Some(bit) if corner >> bit & 1 == 1 => PRINT_EDGE_ITEMS,
                    _ => 0,
                };
                flat = flat * shape[d] + i + shift;
            }
            values[flat] = v;
            // next index within the piece
            for d in (0..at.len()).rev() {
                at[d] += 1;
                if at[d] < piece.shape()[d] {
                    break;
                }
                at[d] = 0;
            }
        }
    }
    let style = FloatStyle::of(&values);
    let cells: Vec<String> = values.iter().map(|&v| style.format(v)).collect();
    let width = cells.iter().map(|c| c.chars().count()).max().unwrap_or(0);
    Ok(Printed {
        cells,
        shape,
        gap,
        width,
    })
}

/// Every element of `t` (row-major), in its own type.
fn read(t: &Tensor) -> Result<Vec<Value>> {
    fn floats<T: Element>(t: &Tensor) -> Result<Vec<Value>> {
        Ok(t.to_vec::<T>()?
            .into_iter()
            .map(|x| Value::Float(x.to_f64()))
            .collect())
    }
    Ok(match t.dtype() {
        DType::F32 => floats::<f32>(t)?,
        DType::F64 => floats::<f64>(t)?,
        DType::F16 => floats::<half::f16>(t)?,
        DType::BF16 => floats::<half::bf16>(t)?,
        DType::I64 => t.to_vec::<i64>()?.into_iter().map(Value::Int).collect(),
        DType::I32 => t
            .to_vec::<i32>()?
            .into_iter()
            .map(|x| Value::Int(x.into()))
            .collect(),
        DType::I16 => t
            .to_vec::<i16>()?
            .into_iter()
            .map(|x| Value::Int(x.into()))
            .collect(),
        DType::I8 => t
            .to_vec::<i8>()?
            .into_iter()
            .map(|x| Value::Int(x.into()))
            .collect(),
        DType::U8 => t
            .to_vec::<u8>()?
            .into_iter()
            .map(|x| Value::Int(x.into()))
            .collect(),
        DType::Bool => t.to_vec::<bool>()?.into_iter().map(Value::Bool).collect(),
    })
}

/// How every float of one tensor is written (PyTorch's rules).
#[derive(Clone, Copy)]
enum FloatStyle {
    /// All finite values are integers: `3.`.
    Integer,
    /// `0.5000`.
    Fixed,
    /// `1.0000e-5`.
    Scientific,
}

impl FloatStyle {
    fn of(values: &[Value]) -> Self {
        let mut all_integers = true;
        let (mut min, mut max) = (f64::INFINITY, 0.0f64);
        for v in values {
            let Value::Float(x) = *v else { continue };
            if x.is_finite() {
                all_integers &= x == libm::trunc(x);
                let a = libm::fabs(x);
                if a != 0.0 {
                    min = min.min(a);
                    max = max.max(a);
                }
            }
        }
        if max == 0.0 {
            // only zeros, NaNs and infinities
            return FloatStyle::Integer;
        }
        if all_integers {
            return if max > 1e8 {
                FloatStyle::Scientific
            } else {
                FloatStyle::Integer
            };
        }
        if max / min > 1000.0 || max > 1e8 || min < 1e-4 {
            FloatStyle::Scientific
        } else {
            FloatStyle::Fixed
        }
    }

    fn format(self, v: Value) -> String {
        match v {
            Value::Int(i) => format!("{i}"),
            Value::Bool(b) => format!("{b}"),
            Value::Float(x) if x.is_nan() => "nan".into(),
            Value::Float(x) if x.is_infinite() => (if x > 0.0 { "inf" } else { "-inf" }).into(),
            Value::Float(x) => match self {
                FloatStyle::Integer => format!("{x:.0}."),
                FloatStyle::Fixed => format!("{x:.4}"),
                FloatStyle::Scientific => format!("{x:.4e}"),
            },
        }
    }
}

impl Printed {
    fn write(&self, f: &mut impl Write) -> fmt::Result {
        if self.cells.is_empty() {
            return f.write_str("[]");
        }
        self.write_dim(f, &self.cells, 0, PREFIX.len())
    }

    /// Dim `d` of the block `cells`, whose `[` is at column `col`.
    fn write_dim(&self, f: &mut impl Write, cells: &[String], d: usize, col: usize) -> fmt::Result {
        let Some(&n) = self.shape.get(d) else {
            let cell = cells.first().map_or("", String::as_str);
            return write!(f, "{cell:>w$}", w = self.width);
        };
        let inner = cells.len() / n;
        // Between entries: ", " on the last dim; otherwise "," and one
        // newline per remaining dim (a blank line between matrices).
        let rest = self.shape.len() - d - 1;
        let sep = |f: &mut dyn Write| -> fmt::Result {
            if rest == 0 {
                f.write_str(", ")
            } else {
                f.write_char(',')?;
                for _ in 0..rest {
                    f.write_char('\n')?;
                }
                write!(f, "{:w$}", "", w = col + 1)
            }
        };
        f.write_char('[')?;
        for (i, block) in cells.chunks(inner).enumerate() {
            if i > 0 {
                sep(f)?;
            }
            if self.gap[d] && i == PRINT_EDGE_ITEMS {
                f.write_str("...")?;
                sep(f)?;
            }
            self.write_dim(f, block, d + 1, col + 1)?;
        }
        f.write_char(']')
    }
}

#[cfg(test)]
#[path = "display_tests.rs"]
mod tests;
