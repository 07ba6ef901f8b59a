//! The kernels of the declared families (NOTE [Declared families]):
//! slice-level arithmetic, one type per family implementing
//! [`Declared`](crate::backend::declared::Declared), named by the
//! family's row of the table (NOTE [Family table]).
//!
//! They see bytes, layouts, dtypes and parameter words, never a tensor
//! or a storage (they use the reference backend's index helpers and dtype
//! selection, and live outside the foundation that names them in its
//! table: `scripts/check-layers.sh`). The reference backend, the threaded
//! backend and the planned replayer all call them, so eager and replayed
//! results are one computation.

// NOTE [Declared kernels' dtypes]
// The convolution and pooling kernels are built for f32 only: a kernel
// per dtype for all ten grew an image that selects every kernel
// (`Device::cpu()`, the firmware's `mlp_infer`) by 8%. The ops that call
// them (`nn::im2col`) take another dtype (f64 included) through their
// composed path, which gives the same values.

/// The dtypes the convolution and pooling kernels are built for.
pub(crate) const KERNEL_DTYPES: u16 = crate::cpu::dtypes::F32;

pub mod adam;
pub mod batch_norm;
pub mod conv;
pub mod count;
pub mod depthwise;
mod depthwise_unit;
pub mod im2col;
pub mod pool;
pub mod scatter;
