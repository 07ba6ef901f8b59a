//! The input layouts every op is run over, and the value domains inputs
//! are drawn from.
//!
//! A device receives contiguous tensors (`to_device` copies contiguously),
//! so a layout is a *view* taken on each side after the move: the kernel
//! under test then reads (or writes) through those strides and offsets.

use crate::dtype::DType;
use crate::error::Result;
use crate::rng::Rng;
use crate::tensor::Tensor;
use alloc::string::String;
use alloc::vec::Vec;

/// One input layout: a contiguous base tensor and the view taken of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// `[3, 4]`, strides `[4, 1]`.
    Contiguous,
    /// `[4, 3]` transposed: `[3, 4]`, strides `[1, 3]`.
    Transposed,
    /// `[3, 9]` sliced `(1, 1, 9, 2)`: `[3, 4]`, strides `[9, 2]`, offset 1.
    Stepped,
    /// `[3, 1]` expanded: `[3, 4]`, strides `[1, 0]`.
    Broadcast,
    /// `[3, 0]`: no elements.
    Empty,
    /// `[]`: one element, no dims.
    Rank0,
    /// `[2, 1, 2, 1, 2, 1, 3, 2]` with its last two dims transposed: rank 8
    /// (the maximum), strided.
    Rank8,
}

/// Every layout, in the order the suite runs them.
pub(crate) const LAYOUTS: [Layout; 7] = [
    Layout::Contiguous,
    Layout::Transposed,
    Layout::Stepped,
    Layout::Broadcast,
    Layout::Empty,
    Layout::Rank0,
    Layout::Rank8,
];

impl Layout {
    /// Short name for case descriptions.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Layout::Contiguous => "contiguous",
            Layout::Transposed => "transposed",
            Layout::Stepped => "step-2 slice",
            Layout::Broadcast => "broadcast",
            Layout::Empty => "zero-size",
            Layout::Rank0 => "rank-0",
            Layout::Rank8 => "rank-8",
        }
    }

    /// The shape of the contiguous tensor the view is taken from.
    pub(crate) const fn base_shape(self) -> &'static [usize] {
        match self {
            Layout::Contiguous => &[3, 4],
            Layout::Transposed => &[4, 3],
            Layout::Stepped => &[3, 9],
            Layout::Broadcast => &[3, 1],
            Layout::Empty => &[3, 0],
            Layout::Rank0 => &[],
            Layout::Rank8 => &[2, 1, 2, 1, 2, 1, 3, 2],
        }
    }

    /// The shape of the view.
    pub(crate) const fn shape(self) -> &'static [usize] {
        match self {
            Layout::Contiguous | Layout::Transposed | Layout::Stepped | Layout::Broadcast => {
                &[3, 4]
            }
            Layout::Empty => &[3, 0],
            Layout::Rank0 => &[],
            Layout::Rank8 => &[2, 1, 2, 1, 2, 1, 2, 3],
        }
    }

    /// Takes the view of `base` (a tensor of [`Layout::base_shape`]).
    pub(crate) fn view(self, base: &Tensor) -> Result<Tensor> {
        match self {
            Layout::Contiguous | Layout::Empty | Layout::Rank0 => Ok(base.clone()),
            Layout::Transposed => base.transpose(0, 1),
            Layout::Stepped => base.slice(1, 1, 9, 2),
            Layout::Broadcast => base.expand(&[3usize, 4]),
            Layout::Rank8 => base.transpose(6, 7),
        }
    }

    /// Whether the view holds every element of its base once (so writing
    /// through it is allowed and reaches the whole base).
    pub(crate) const fn writable(self) -> bool {
        !matches!(self, Layout::Broadcast)
    }
}

pub(crate) use crate::ops::Domain;

fn float_value(rng: &mut Rng, domain: Domain) -> f64 {
    let u = rng.uniform();
    match domain {
        Domain::Normal => rng.normal(),
        Domain::Positive => 0.25 + 2.0 * u,
        Domain::NonZero => {
            let sign = if rng.below(2) == 0 { -1.0 } else { 1.0 };
            sign * (0.25 + 2.0 * u)
        }
        Domain::Unit => -0.9 + 1.8 * u,
        Domain::Near1 => 0.6 + 0.8 * u,
        Domain::Ties => rng.below(5) as f64 - 2.0,
        Domain::Halves => rng.below(17) as f64 * 0.5 - 4.0,
    }
}

fn int_value(rng: &mut Rng, domain: Domain, unsigned: bool) -> f64 {
    let v = match domain {
        Domain::Normal => rng.below(9) as f64 - 4.0,
        Domain::Positive => 1.0 + rng.below(4) as f64,
        Domain::NonZero => {
            let m = 1.0 + rng.below(4) as f64;
            if rng.below(2) == 0 { -m } else { m }
        }
        Domain::Unit => rng.below(3) as f64 - 1.0,
        Domain::Near1 => {
            if rng.below(2) == 0 {
                -1.0
            } else {
                1.0
            }
        }
        Domain::Ties | Domain::Halves => rng.below(5) as f64 - 2.0,
    };
    if unsigned { v.abs() } else { v }
}

/// A contiguous tensor of `shape` and `dtype` on the reference CPU, with
/// values from `domain` (drawn in f64, then cast).
pub(crate) fn random(
    rng: &mut Rng,
    shape: &[usize],
    dtype: DType,
    domain: Domain,
) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(match dtype {
            DType::Bool => rng.below(2) as f64,
            DType::U8 => int_value(rng, domain, true),
            d if d.is_int() => int_value(rng, domain, false),
            _ => float_value(rng, domain),
        });
    }
    let cpu = crate::device::Device::cpu();
    crate::autograd::no_grad(|| Tensor::from_slice(&v, shape, &cpu)?.to_dtype(dtype))
}

/// `n` indices in `0..size` (repeats likely), as `dtype` (I64 or I32).
pub(crate) fn indices(rng: &mut Rng, n: usize, size: usize, dtype: DType) -> Result<Tensor> {
    let v: Vec<f64> = (0..n).map(|_| rng.below(size as u64) as f64).collect();
    let cpu = crate::device::Device::cpu();
    crate::autograd::no_grad(|| Tensor::from_slice(&v, &[n], &cpu)?.to_dtype(dtype))
}

/// A tensor of `shape` whose values are indices in `0..size`.
pub(crate) fn index_tensor(
    rng: &mut Rng,
    shape: &[usize],
    size: usize,
    dtype: DType,
) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    indices(rng, n, size, dtype)?.reshape(shape)
}

/// Short dtype name (`f32`, `bf16`, `bool`).
pub(crate) const fn dname(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::I64 => "i64",
        DType::I32 => "i32",
        DType::I16 => "i16",
        DType::I8 => "i8",
        DType::U8 => "u8",
        DType::Bool => "bool",
    }
}

/// `"f32 transposed [3, 4]"`.
pub(crate) fn describe(dtype: DType, layout: Layout) -> String {
    alloc::format!("{} {} {:?}", dname(dtype), layout.name(), layout.shape())
}

/// One operand of a multi-input op: a layout's view, or a smaller shape
/// that broadcasts against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arg {
    /// The view of a layout.
    View(Layout),
    /// A contiguous vector as long as the layout's last dim (broadcasts as a row).
    Row(Layout),
    /// `[3, 1]`, broadcasts against `[1, n]` or `[n]` operands.
    Col,
    /// A rank-0 operand.
    Scalar,
}

impl Arg {
    /// The shape of the contiguous tensor this operand is made from.
    pub(crate) fn base_shape(self) -> &'static [usize] {
        match self {
            Arg::View(l) => l.base_shape(),
            Arg::Row(l) => {
                let s = l.shape();
                &s[s.len().saturating_sub(1)..]
            }
            Arg::Col => &[3, 1],
            Arg::Scalar => &[],
        }
    }

    /// The operand made from `base`.
    pub(crate) fn view(self, base: &Tensor) -> Result<Tensor> {
        match self {
            Arg::View(l) => l.view(base),
            _ => Ok(base.clone()),
        }
    }

    /// A random base tensor for this operand.
    pub(crate) fn random(self, rng: &mut Rng, dtype: DType, domain: Domain) -> Result<Tensor> {
        random(rng, self.base_shape(), dtype, domain)
    }

    fn describe(self) -> String {
        match self {
            Arg::View(l) => alloc::format!("{} {:?}", l.name(), l.shape()),
            _ => alloc::format!("{:?}", self.base_shape()),
        }
    }
}

/// `"f32 transposed [3, 4] | [4]"`: the dtype and each operand.
pub(crate) fn describe_args(dtype: DType, args: &[Arg]) -> String {
    let mut s = String::from(dname(dtype));
    for (i, a) in args.iter().enumerate() {
        s.push_str(if i == 0 { " " } else { " | " });
        s.push_str(&a.describe());
    }
    s
}
