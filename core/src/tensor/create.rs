//! Constructors: zeros, ones, full, from_slice, arange, eye, rand, randn,
//! and the allocation they share (reading values out is in `readback.rs`,
//! copies, casts and device moves in `convert.rs`).

use super::Tensor;
use crate::device::Device;
use crate::dtype::{DType, Element, Scalar};
use crate::error::{ErrShape, Error, Result};
use crate::layout::Layout;
use crate::rng::Rng;
use crate::shape::{Dims, MAX_RANK, checked_numel, output_bytes};
use crate::shared::Shared;
use crate::storage::Storage;
use alloc::vec::Vec;

/// A shape argument: sizes, where `-1` may stand for one inferred size
/// (`view`, `reshape`) or "keep this size" (`expand`).
///
/// Implemented for slices, arrays and `Vec`s of `usize`, `isize` and `i32`,
/// so both `&[2, -1]` and a `&[usize]` variable work.
pub trait ShapeSpec {
    /// The sizes as signed integers.
    ///
    /// # Errors
    /// [`Error::RankTooLarge`], or a size that does not fit `isize`.
    fn spec(&self) -> Result<heapless::Vec<isize, MAX_RANK>>;
}

macro_rules! shape_spec {
    ($($t:ty),*) => {$(
        impl ShapeSpec for [$t] {
            fn spec(&self) -> Result<heapless::Vec<isize, MAX_RANK>> {
                let mut v = heapless::Vec::new();
                for &d in self {
                    let d = isize::try_from(d).map_err(|_| Error::InvalidArgument {
                        op: "shape",
                        reason: "a size does not fit in isize; use smaller sizes",
                    })?;
                    v.push(d).map_err(|_| Error::RankTooLarge { rank: self.len(), max: MAX_RANK })?;
                }
                Ok(v)
            }
        }
        impl<const N: usize> ShapeSpec for [$t; N] {
            fn spec(&self) -> Result<heapless::Vec<isize, MAX_RANK>> {
                self[..].spec()
            }
        }
        impl ShapeSpec for Vec<$t> {
            fn spec(&self) -> Result<heapless::Vec<isize, MAX_RANK>> {
                self[..].spec()
            }
        }
    )*};
}
shape_spec!(usize, isize, i32, i64);

impl ShapeSpec for Dims {
    fn spec(&self) -> Result<heapless::Vec<isize, MAX_RANK>> {
        self.as_slice().spec()
    }
}

/// Resolves a view/reshape spec with at most one `-1` against `numel`.
pub(crate) fn infer_shape(op: &'static str, spec: &[isize], numel: usize) -> Result<Dims> {
    let mut infer = None;
    let mut known = 1usize;
    for (i, &d) in spec.iter().enumerate() {
        if d == -1 {
            if infer.is_some() {
                return Err(Error::InvalidArgument {
                    op,
                    reason: "only one dimension can be -1 (inferred)",
                });
            }
            infer = Some(i);
        } else if d < 0 {
            return Err(Error::InvalidArgument {
                op,
                reason: "sizes must be non-negative, or -1 for one inferred size",
            });
        } else {
            known = known.saturating_mul(d as usize);
        }
    }
    let mut out = Dims::new();
    for &d in spec {
        out.push(if d < 0 { 0 } else { d as usize })?;
    }
    if let Some(i) = infer {
        if known == 0 || numel % known != 0 {
            return Err(Error::ElementCountMismatch {
                op,
                numel,
                shape: ErrShape::of(&out),
            });
        }
        out[i] = numel / known;
    }
    if checked_numel(op, &out).ok() != Some(numel) {
        return Err(Error::ElementCountMismatch {
            op,
            numel,
            shape: ErrShape::of(&out),
        });
    }
    Ok(out)
}

impl Tensor {
    /// A new contiguous, zero-filled tensor (the allocation primitive).
    pub(crate) fn alloc(shape: &[usize], dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::alloc_with(shape, dtype, device, Storage::zeroed)
    }

    fn alloc_with(
        shape: &[usize],
        dtype: DType,
        device: &Device,
        storage: fn(usize, &Device) -> Result<Storage>,
    ) -> Result<Tensor> {
        let nbytes = output_bytes(shape, dtype.size_in_bytes())?;
        // A 0 beside dims whose product overflows is refused too
        // (conservatively, NOTE [Checked output sizes]), as the backstop's
        // out of memory rather than under an internal name.
        checked_numel("alloc", shape).map_err(|_| Error::OutOfMemory {
            requested: usize::MAX,
            available: None,
        })?;
        let storage = Shared::new(storage(nbytes, device)?);
        Tensor::from_storage(storage, Layout::contiguous(shape)?, dtype)
    }

    /// A contiguous tensor whose elements hold arbitrary (initialised)
    /// values, for an op whose kernel writes every output element before
    /// anything reads it (see [`Allocator::allocate_for_overwrite`]).
    /// Never use it for outputs a kernel accumulates into.
    ///
    /// [`Allocator::allocate_for_overwrite`]: crate::allocator::Allocator::allocate_for_overwrite
    pub(crate) fn alloc_for_overwrite(
        shape: &[usize],
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        Tensor::alloc_with(shape, dtype, device, Storage::for_overwrite)
    }

    /// A tensor of zeros.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`], [`Error::RankTooLarge`].
    ///
    /// ```
    /// use kael_core::{DType, Device, Tensor};
    /// let t = Tensor::zeros(&[2, 3], DType::F32, &Device::cpu())?;
    /// assert_eq!(t.to_vec::<f32>()?, vec![0.0; 6]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn zeros(shape: &[usize], dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::alloc(shape, dtype, device)
    }

    /// A tensor of ones.
    ///
    /// # Errors
    /// As [`Tensor::zeros`].
    ///
    /// ```
    /// use kael_core::{DType, Device, Tensor};
    /// assert_eq!(Tensor::ones(&[2], DType::I64, &Device::cpu())?.to_vec::<i64>()?, vec![1, 1]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn ones(shape: &[usize], dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::full(shape, 1.0, dtype, device)
    }

    /// A tensor filled with `value` (converted to `dtype`).
    ///
    /// # Errors
    /// As [`Tensor::zeros`]; [`Error::InvalidArgument`] for a value `dtype`
    /// cannot hold once converted ([`DType::holds_cast`]: NaN, infinities,
    /// out of range for an integer dtype, which would saturate). As in
    /// PyTorch, an integer dtype converts 2.5 to 2.
    ///
    /// ```
    /// use kael_core::{DType, Device, Tensor};
    /// assert_eq!(Tensor::full(&[3], 2.5, DType::F32, &Device::cpu())?.to_vec::<f32>()?, vec![2.5; 3]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn full(shape: &[usize], value: f64, dtype: DType, device: &Device) -> Result<Tensor> {
        super::ops::check_fill("full", dtype, value)?;
        let t = Tensor::alloc(shape, dtype, device)?;
        // -0.0 == 0.0, but its bytes are not zero: it is filled too
        if value != 0.0 || value.is_sign_negative() {
            t.with_src(|d| device.backend().fill(d, value))?;
        }
        Ok(t)
    }

    /// A rank-0 tensor holding `value`.
    ///
    /// # Errors
    /// As [`Tensor::zeros`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// assert_eq!(Tensor::scalar(3.0f32, &Device::cpu())?.item::<f32>()?, 3.0);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn scalar<T: Element>(value: T, device: &Device) -> Result<Tensor> {
        Tensor::from_slice(&[value], &[], device)
    }

    /// A tensor holding `data` (row-major) with `shape`.
    ///
    /// # Errors
    /// [`Error::ElementCountMismatch`] when `data.len()` is not the shape's element count.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], &Device::cpu())?;
    /// assert_eq!(t.shape(), &[2, 2]);
    /// assert!(Tensor::from_slice(&[1.0f32, 2.0], &[3], &Device::cpu()).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn from_slice<T: Element>(data: &[T], shape: &[usize], device: &Device) -> Result<Tensor> {
        let numel = checked_numel("from_slice", shape)?;
        if numel != data.len() {
            return Err(Error::ElementCountMismatch {
                op: "from_slice",
                numel: data.len(),
                shape: ErrShape::of(shape),
            });
        }
        let t = Tensor::alloc(shape, T::DTYPE, device)?;
        let mut reprs: Vec<T::Repr> = Vec::new();
        reprs
            .try_reserve_exact(data.len())
            .map_err(|_| Error::OutOfMemory {
                requested: core::mem::size_of_val(data),
                available: None,
            })?;
        reprs.extend(data.iter().map(|&x| x.to_repr()));
        let storage = t.storage();
        device
            .backend()
            .write_bytes(&storage, 0, bytemuck::cast_slice(&reprs))?;
        Ok(t)
    }

    /// `[start, start+1, ...)` up to (excluding) `end`.
    ///
    /// # Errors
    /// As [`Tensor::arange_step`] (so `end < start` is an error).
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// assert_eq!(Tensor::arange(0.0f32, 4.0, &Device::cpu())?.to_vec::<f32>()?, vec![0.0, 1.0, 2.0, 3.0]);
    /// assert_eq!(Tensor::arange(2i64, 5, &Device::cpu())?.to_vec::<i64>()?, vec![2, 3, 4]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn arange<T: Element>(start: T, end: T, device: &Device) -> Result<Tensor> {
        Tensor::arange_step(start, end, 1.0, device)
    }

    /// `start, start+step, ...` while below `end` (above, for a negative step).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero or non-finite step, or a step
    /// whose sign is not that of `end - start` (as PyTorch; `start == end`
    /// gives an empty tensor); bool dtype.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// assert_eq!(Tensor::arange_step(1.0f64, 0.0, -0.25, &Device::cpu())?.to_vec::<f64>()?, vec![1.0, 0.75, 0.5, 0.25]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn arange_step<T: Element>(start: T, end: T, step: f64, device: &Device) -> Result<Tensor> {
        T::DTYPE.require_numeric("arange")?;
        let (s, e) = (start.to_f64(), end.to_f64());
        if step == 0.0 || !step.is_finite() || !s.is_finite() || !e.is_finite() {
            return Err(Error::InvalidArgument {
                op: "arange",
                reason: "step must be finite and non-zero, bounds finite",
            });
        }
        // PyTorch refuses a step pointing away from `end` (numpy returns
        // an empty array): such a range is almost always a sign mistake.
        if (e - s) * step < 0.0 {
            return Err(Error::InvalidArgument {
                op: "arange",
                reason: "the step points away from end (end - start and step have opposite signs); pass a negative step to count down, or swap start and end",
            });
        }
        let n = libm::ceil((e - s) / step);
        let n = if n > 0.0 { n as usize } else { 0 };
        let mut v: Vec<T::Repr> = Vec::new();
        v.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
            requested: n,
            available: None,
        })?;
        v.extend((0..n).map(|i| <T::Repr as Scalar>::from_f64(s + i as f64 * step)));
        let t = Tensor::alloc(&[n], T::DTYPE, device)?;
        device
            .backend()
            .write_bytes(&t.storage(), 0, bytemuck::cast_slice(&v))?;
        Ok(t)
    }

    /// The `n x n` identity matrix.
    ///
    /// # Errors
    /// As [`Tensor::zeros`].
    ///
    /// ```
    /// use kael_core::{DType, Device, Tensor};
    /// assert_eq!(Tensor::eye(2, DType::F32, &Device::cpu())?.to_vec::<f32>()?, vec![1.0, 0.0, 0.0, 1.0]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn eye(n: usize, dtype: DType, device: &Device) -> Result<Tensor> {
        let t = Tensor::alloc(&[n, n], dtype, device)?;
        // fill through the backend, not `fill_`: a new tensor starts at version 0
        t.diagonal(0, 0, 1)?
            .with_src(|d| device.backend().fill(d, 1.0))?;
        Ok(t)
    }

    /// Uniform samples in `[0, 1)` from `rng` (float dtypes).
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for non-float dtypes.
    ///
    /// ```
    /// use kael_core::{DType, Device, Rng, Tensor};
    /// let t = Tensor::rand(&[100], DType::F32, &Device::cpu(), &mut Rng::new(0))?;
    /// assert!(t.to_vec::<f32>()?.iter().all(|x| (0.0..1.0).contains(x)));
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn rand(shape: &[usize], dtype: DType, device: &Device, rng: &mut Rng) -> Result<Tensor> {
        dtype.require_float("rand")?;
        // Keep only as many random bits as the dtype's significand holds, so
        // the conversion is exact and cannot round up to 1.0 (as PyTorch's
        // `uniform_real_distribution` does).
        let bits = match dtype {
            DType::F16 => 11,
            DType::BF16 => 8,
            DType::F32 => 24,
            _ => 53,
        };
        let scale = (1u64 << bits) as f64;
        Tensor::from_fn_f64("rand", shape, dtype, device, || {
            libm::floor(rng.uniform() * scale) / scale
        })
    }

    /// Standard normal samples from `rng` (float dtypes).
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for non-float dtypes.
    ///
    /// ```
    /// use kael_core::{DType, Device, Rng, Tensor};
    /// let a = Tensor::randn(&[4, 3], DType::F32, &Device::cpu(), &mut Rng::new(1))?;
    /// let b = Tensor::randn(&[4, 3], DType::F32, &Device::cpu(), &mut Rng::new(1))?;
    /// assert_eq!(a.to_vec::<f32>()?, b.to_vec::<f32>()?); // seeded: reproducible
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn randn(shape: &[usize], dtype: DType, device: &Device, rng: &mut Rng) -> Result<Tensor> {
        dtype.require_float("randn")?;
        Tensor::from_fn_f64("randn", shape, dtype, device, || rng.normal())
    }

    /// A tensor of `dtype` filled in row-major order with `f()`, rounded on
    /// the host (no cast kernel for f32 and f64, so a backend built
    /// without f64 kernels can make f32 tensors).
    pub(crate) fn from_fn_f64(
        op: &'static str,
        shape: &[usize],
        dtype: DType,
        device: &Device,
        mut f: impl FnMut() -> f64,
    ) -> Result<Tensor> {
        let numel = checked_numel(op, shape)?;
        let mut v: Vec<f64> = Vec::new();
        v.try_reserve_exact(numel).map_err(|_| Error::OutOfMemory {
            requested: numel * 8,
            available: None,
        })?;
        v.extend((0..numel).map(|_| f()));
        match dtype {
            DType::F64 => Tensor::from_slice(&v, shape, device),
            // Rounded on the host (as the cast kernel rounds), so a backend
            // built without f64 (NOTE [Kernel selection]) can still make
            // f32 random tensors.
            DType::F32 => {
                let mut v32: Vec<f32> = Vec::new();
                v32.try_reserve_exact(numel)
                    .map_err(|_| Error::OutOfMemory {
                        requested: numel * 4,
                        available: None,
                    })?;
                v32.extend(v.iter().map(|&x| x as f32));
                Tensor::from_slice(&v32, shape, device)
            }
            _ => Tensor::from_slice(&v, shape, device)?.to_dtype(dtype),
        }
    }

    // ------------------------------------------------------------ reading
}
