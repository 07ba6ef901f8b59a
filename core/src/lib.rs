//! # kael-core
//!
//! A tensor library with reverse-mode automatic differentiation whose core is
//! `#![no_std]` + `alloc`: the same code links into microcontroller firmware
//! and runs host-side tests.
//!
//! ```text
//! Tensor  ──► TensorImpl ─────────────────► Storage
//! handle      shape, strides, offset,       bytes (from an Allocator or an
//!             dtype, autograd meta,         external owner), nbytes, device,
//!             view root                     version counter, borrow state
//! ```
//!
//! * [`Tensor`] is one shared pointer: `clone()` is the same tensor
//!   ([`Tensor::is_same`]); [`Tensor::deep_clone`] copies.
//! * Views ([`Tensor::narrow`], [`Tensor::transpose`], ...) are new impls over
//!   the same [`Storage`] ([`Tensor::shares_storage`]).
//! * [`Backend`] is the one boundary every kernel crosses; [`Device`] is a
//!   cheap handle to one backend instance; [`cpu::CpuBackend`] is the
//!   portable reference.
//!
//! ## Features
//! * `sync`: `Arc` handles and atomic counters, `Tensor: Send + Sync`
//!   (needs atomic CAS, so not on thumbv6m). Default: `Rc`, `!Send`.
//! * `std`: per-thread grad mode (global without it).
//! * `conformance`: the backend conformance suite ([`conformance`]).
//! * `defmt`: `defmt::Format` for [`Error`], [`DType`], [`DeviceKind`], [`Dims`].
//!
//! ```
//! use kael_core::{Device, Tensor};
//! let dev = Device::cpu();
//! let a = Tensor::arange(0.0f32, 24.0, &dev)?.reshape(&[2, 3, 4])?;
//! let s = a.slice(0, 1, 2, 1)?.slice(1, 1, 3, 1)?.slice(2, 1, 4, 1)?;
//! assert_eq!((s.shape(), &s.strides()[..], s.offset()), (&[1, 2, 3][..], &[12, 4, 1][..], 17));
//! assert!(s.shares_storage(&a));
//! # Ok::<(), kael_core::Error>(())
//! ```
#![no_std]
#![deny(missing_docs)]
#![doc(test(attr(deny(warnings))))]

extern crate alloc;
// The unit tests link std for the per-thread grad mode (NOTE [Grad mode scope]).
#[cfg(any(feature = "std", test))]
extern crate std;

pub mod allocator;
pub mod autograd;
pub mod backend;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod cpu;
pub mod device;
pub mod device_kind;
pub mod dtype;
pub mod error;
pub mod kernels;
pub mod layout;
pub mod nn;
pub mod ops;
pub mod optim;
pub mod plan;
pub mod promote;
pub mod quant;
pub mod rng;
pub mod shape;
pub mod shared;
pub mod storage;
pub mod tensor;
pub mod testing;

pub use autograd::{enable_grad, is_grad_enabled, no_grad, set_grad_enabled};
pub use backend::Backend;
pub use device::Device;
pub use device_kind::DeviceKind;
pub use dtype::{DType, Element};
pub use error::{Error, Result};
pub use layout::Layout;
pub use promote::Number;
pub use rng::Rng;
pub use shape::{Dims, MAX_RANK};
pub use storage::Storage;
pub use tensor::{Tensor, explain};

#[doc(hidden)]
pub use half;
pub use half::{bf16, f16};
