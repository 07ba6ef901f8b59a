//! Constructors, reading values out, copies, casts and device moves.

use super::{Placement, Tensor, TensorImpl};
use crate::autograd::rules::Rule;
use crate::device::Device;
use crate::dtype::{DType, Element, Scalar};
use crate::error::{ErrShape, Error, Result};
use crate::layout::Layout;
use crate::rng::Rng;
use crate::shape::{Dims, MAX_RANK, checked_numel};
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
        let numel = checked_numel("alloc", shape)?;
        let nbytes = numel
            .checked_mul(dtype.size_in_bytes())
            .ok_or(Error::OutOfMemory {
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
    /// As [`Tensor::zeros`].
    ///
    /// ```
    /// use kael_core::{DType, Device, Tensor};
    /// assert_eq!(Tensor::full(&[3], 2.5, DType::F32, &Device::cpu())?.to_vec::<f32>()?, vec![2.5; 3]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn full(shape: &[usize], value: f64, dtype: DType, device: &Device) -> Result<Tensor> {
        let t = Tensor::alloc(shape, dtype, device)?;
        if value != 0.0 {
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
        Tensor::from_fn_f64(shape, dtype, device, || {
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
        Tensor::from_fn_f64(shape, dtype, device, || rng.normal())
    }

    fn from_fn_f64(
        shape: &[usize],
        dtype: DType,
        device: &Device,
        mut f: impl FnMut() -> f64,
    ) -> Result<Tensor> {
        let numel = checked_numel("rand", shape)?;
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

    /// The elements in logical row-major order.
    ///
    /// # Errors
    /// [`Error::ElementTypeMismatch`] when `T` is not the tensor's dtype.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let t = Tensor::arange(0i32, 6, &Device::cpu())?.reshape(&[2, 3])?.t()?;
    /// assert_eq!(t.to_vec::<i32>()?, vec![0, 3, 1, 4, 2, 5]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.read_vec("to_vec")
    }

    /// [`to_vec`](Self::to_vec), its errors naming `op` (the public
    /// operation the user called).
    fn read_vec<T: Element>(&self, op: &'static str) -> Result<Vec<T>> {
        self.check_element::<T>(op)?;
        if !self.device().is_host_memory() {
            return self.to_vec_via_backend();
        }
        let t = self.clone();
        let mut out = Vec::new();
        out.try_reserve_exact(t.numel())
            .map_err(|_| Error::OutOfMemory {
                requested: t.numel() * t.element_size(),
                available: None,
            })?;
        t.with_src(|src| -> Result<()> {
            let g = src.storage.read("to_vec")?;
            let data = crate::storage::typed::<T::Repr>(g.bytes())?;
            src.layout
                .for_each_offset(|o| out.push(T::from_repr(data[o])));
            Ok(())
        })?;
        Ok(out)
    }

    /// [`to_vec`](Self::to_vec) for a device whose memory the CPU cannot
    /// read: a contiguous copy on that device, read through its backend.
    /// (Not through `to_device(&Device::cpu())`: naming `Device::cpu()` here
    /// would link every reference kernel into firmware that runs a smaller
    /// `CpuBackend`; NOTE [Kernel selection] in `cpu::select`.)
    fn to_vec_via_backend<T: Element>(&self) -> Result<Vec<T>> {
        let src = self.contiguous()?;
        let size = src.element_size();
        let nbytes = src.numel() * size;
        let mut host = Vec::new();
        host.try_reserve_exact(nbytes)
            .map_err(|_| Error::OutOfMemory {
                requested: nbytes,
                available: None,
            })?;
        host.resize(nbytes, 0u8);
        src.device()
            .backend()
            .read_bytes(&src.storage(), src.offset() * size, &mut host)?;
        let mut out = Vec::new();
        out.try_reserve_exact(src.numel())
            .map_err(|_| Error::OutOfMemory {
                requested: nbytes,
                available: None,
            })?;
        out.extend(
            host.chunks_exact(size)
                .map(|c| T::from_repr(bytemuck::pod_read_unaligned(c))),
        );
        Ok(out)
    }

    /// The value of a one-element tensor.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless `numel() == 1`;
    /// [`Error::ElementTypeMismatch`] when `T` is not the tensor's dtype.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// assert_eq!(Tensor::from_slice(&[7i64], &[1, 1], &Device::cpu())?.item::<i64>()?, 7);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn item<T: Element>(&self) -> Result<T> {
        if self.numel() != 1 {
            return Err(Error::InvalidArgument {
                op: "item",
                reason: "item() needs a tensor with exactly one element; index or reduce it first",
            });
        }
        self.read_vec::<T>("item")?
            .pop()
            .ok_or(Error::InvalidArgument {
                op: "item",
                reason: "empty tensor",
            })
    }

    // ------------------------------------------------------------ copies

    /// A new contiguous tensor with its own storage, sized to exactly its
    /// elements (a 2-element view of a 1M-element tensor copies 2).
    ///
    /// # Errors
    /// [`Error::OutOfMemory`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let big = Tensor::arange(0.0f32, 1000.0, &Device::cpu())?;
    /// let c = big.narrow(0, 10, 2)?.deep_clone()?;
    /// assert_eq!((c.storage_nbytes(), c.offset()), (8, 0));
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn deep_clone(&self) -> Result<Tensor> {
        let dev = self.device();
        let out = Tensor::alloc_for_overwrite(self.shape(), self.dtype(), &dev)?;
        self.with_src(|s| out.with_src(|d| dev.backend().copy_strided(s, d)))?;
        crate::autograd::record(&out, &[self], || Ok(Rule::Identity))?;
        Ok(out)
    }

    /// `self` when already contiguous, else a contiguous copy.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`].
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::arange(0.0f32, 6.0, &Device::cpu())?.reshape(&[2, 3])?;
    /// assert!(a.contiguous()?.is_same(&a));
    /// assert!(!a.t()?.contiguous()?.shares_storage(&a));
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.is_contiguous() {
            Ok(self.clone())
        } else {
            self.deep_clone()
        }
    }

    /// Converts elements to `dtype` (a copy; `self` when the dtype is the same).
    ///
    /// Float to integer truncates toward zero and saturates; any value to
    /// bool is `x != 0`.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`].
    ///
    /// ```
    /// use kael_core::{DType, Device, Tensor};
    /// let t = Tensor::from_slice(&[1.7f32, -2.5, 0.0], &[3], &Device::cpu())?;
    /// assert_eq!(t.to_dtype(DType::I32)?.to_vec::<i32>()?, vec![1, -2, 0]);
    /// assert_eq!(t.to_dtype(DType::Bool)?.to_vec::<bool>()?, vec![true, true, false]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        let dev = self.device();
        let out = Tensor::alloc_for_overwrite(self.shape(), dtype, &dev)?;
        self.with_src(|s| out.with_src(|d| dev.backend().cast(s, d)))?;
        if dtype.is_float() {
            crate::autograd::record(&out, &[self], || Ok(Rule::ToDtype { from: self.dtype() }))?;
        }
        Ok(out)
    }

    /// The tensor on `device`: `self` when already there; a tensor over
    /// the *same storage* when both devices are host memory (reference CPU
    /// and threaded CPU: no copy, like PyTorch's `.to()` when no copy is
    /// needed, so writes through one are visible through the other); else
    /// a copy.
    ///
    /// NOTE [Host-memory moves]
    /// Host-memory backends read and write the same bytes, so a move
    /// between them only changes which backend's kernels run: the result
    /// is a new tensor (its own autograd history, `ToDevice` rule) with
    /// this tensor's layout over the same storage, tagged with the new
    /// device (INVARIANT 3 of `TensorImpl`). It is a view of this tensor's
    /// root, so an in-place write through it obeys the view rules of NOTE
    /// [In-place rules] (refused in grad mode when the root is a leaf that
    /// requires grad, as a write through any other alias would be). The storage keeps its
    /// allocator, so its bytes go back where they came from.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`], backend failures.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::arange(0.0f32, 3.0, &Device::cpu())?;
    /// assert!(a.to_device(&Device::cpu())?.is_same(&a));
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn to_device(&self, device: &Device) -> Result<Tensor> {
        if self.device().same_as(device) {
            return Ok(self.clone());
        }
        if self.device().is_host_memory() && device.is_host_memory() {
            let p = self.placement();
            let layout = Layout::from_dims(self.dims().clone(), p.strides, p.offset);
            // The result shares this tensor's storage, so it is a view of
            // its root: an in-place write through it obeys the view rules
            // (refused on an alias of a leaf that requires grad).
            let out = Tensor::from_impl(TensorImpl::new_on(
                p.storage,
                layout,
                self.dtype(),
                Some(self.root()),
                Some(device.clone()),
            )?);
            crate::autograd::record(&out, &[self], || {
                Ok(Rule::ToDevice {
                    from: self.device(),
                })
            })?;
            return Ok(out);
        }
        let src = self.contiguous_on_own_device()?;
        let nbytes = src.numel() * src.element_size();
        let mut host = Vec::new();
        host.try_reserve_exact(nbytes)
            .map_err(|_| Error::OutOfMemory {
                requested: nbytes,
                available: None,
            })?;
        host.resize(nbytes, 0u8);
        let from = src.device();
        from.backend()
            .read_bytes(&src.storage(), src.offset() * src.element_size(), &mut host)?;
        let out = Tensor::alloc(self.shape(), self.dtype(), device)?;
        device.backend().write_bytes(&out.storage(), 0, &host)?;
        crate::autograd::record(&out, &[self], || {
            Ok(Rule::ToDevice {
                from: self.device(),
            })
        })?;
        Ok(out)
    }

    fn contiguous_on_own_device(&self) -> Result<Tensor> {
        self.contiguous()
    }

    /// Moves the tensor to `device` in place: every handle to this tensor
    /// (an optimizer's too) sees the new storage; views made earlier keep
    /// the old one.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`], backend failures; on error nothing changes.
    ///
    /// ```
    /// use kael_core::{Device, Tensor};
    /// let a = Tensor::arange(0.0f32, 3.0, &Device::cpu())?;
    /// let b = a.clone();
    /// a.move_to_(&Device::cpu())?;
    /// assert!(b.is_same(&a));
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn move_to_(&self, device: &Device) -> Result<()> {
        if self.device().same_as(device) {
            return Ok(());
        }
        let moved = crate::autograd::no_grad(|| self.to_device(device))?;
        let p = moved.placement();
        let old_storage = self.storage();
        if !Shared::ptr_eq(&old_storage, &p.storage) {
            // A fresh copy: it carries the version on (NOTE [Version counter]).
            p.storage.carry_version_from(&old_storage);
        }
        let old = self.replace_placement(Placement {
            storage: p.storage,
            strides: p.strides,
            offset: p.offset,
            device: p.device,
        });
        drop(old);
        Ok(())
    }

    /// A view whose layout `derive` computes from this tensor's, tagged
    /// with `dtype` (view_dtype helper). The layout, storage and device are
    /// read under one acquisition of the placement lock.
    ///
    /// An empty view reads nothing, so an offset past the storage's end
    /// (`zeros(&[2, 0]).select(0, 1)`: offset 1 of 0 elements, as in
    /// PyTorch) is clamped to the end to keep INVARIANT 2 of `TensorImpl`.
    #[inline]
    pub(crate) fn make_view_as(
        &self,
        derive: impl FnOnce(&Layout) -> Result<Layout>,
        dtype: DType,
    ) -> Result<Tensor> {
        // `device` is `None` unless the tensor was moved to another
        // host-memory device (no reference count to bump then).
        let (layout, storage, device) = self.0.placement.with(|p| {
            (
                Layout::from_dims(self.0.shape.clone(), p.strides.clone(), p.offset),
                p.storage.clone(),
                p.device.clone(),
            )
        });
        let layout = derive(&layout)?;
        self.view_from_parts(storage, layout, dtype, device)
    }

    /// The rest of [`Tensor::make_view_as`], outside the generic part so
    /// that every view op shares one copy of it (`TensorImpl::new_on` is
    /// inlined here, which keeps the impl from being moved through a
    /// `Result` before it reaches the heap).
    fn view_from_parts(
        &self,
        storage: Shared<Storage>,
        layout: Layout,
        dtype: DType,
        device: Option<Device>,
    ) -> Result<Tensor> {
        let root = self.root();
        let layout = if layout.shape().contains(&0) {
            let len = storage.nbytes() / dtype.size_in_bytes();
            let offset = layout.offset().min(len);
            Layout::from_dims(layout.shape().clone(), layout.strides().clone(), offset)
        } else {
            layout
        };
        Ok(Tensor::from_impl(TensorImpl::new_on(
            storage,
            layout,
            dtype,
            Some(root),
            device,
        )?))
    }
}
