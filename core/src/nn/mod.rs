//! Neural-network layers, built only from differentiable [`Tensor`] ops.
//!
//! * [`Module`]: `forward`, named parameters (each tensor listed once, even
//!   when registered under two names: identity by impl, [`Tensor::is_same`]),
//!   train/eval mode, [`Module::to`] (moves parameters in place with
//!   [`Tensor::move_to_`], so an optimizer built earlier keeps working),
//!   [`Module::state_dict`] / [`Module::load_state_dict`].
//! * Layers: [`Linear`], [`Embedding`], [`LayerNorm`], [`RmsNorm`],
//!   [`BatchNorm1d`], [`BatchNorm2d`], [`GroupNorm`], [`Dropout`],
//!   [`Conv1d`], [`Conv2d`], [`ConvTranspose1d`], [`ConvTranspose2d`],
//!   [`MaxPool2d`], [`AvgPool2d`],
//!   activations ([`Relu`], [`Gelu`], [`Silu`], [`Tanh`], [`Sigmoid`]),
//!   [`CausalSelfAttention`], [`TransformerBlock`], [`Sequential`].
//! * Losses: [`mse_loss`], [`cross_entropy`], [`nll_loss`].
//! * [`functional`]: every computation without its module (PyTorch's
//!   `torch.nn.functional`); the layers are thin wrappers over it.
//! * Constructors `new` make f32 parameters (PyTorch's default dtype);
//!   `new_in` takes the dtype.
//! * Initialisation follows PyTorch's defaults ([`init`]); every random
//!   choice takes a caller-owned [`Rng`](crate::Rng).
//!
//! Everything is `no_std` + `alloc`, so firmware can train too.
//!
//! ```
//! use kael_core::nn::{Linear, Module, Relu, Sequential};
//! use kael_core::{DType, Device, Rng, Tensor};
//! let dev = Device::cpu();
//! let mut rng = Rng::new(0);
//! let mlp = Sequential::new()
//!     .push(Linear::new(4, 8, true, &dev, &mut rng)?)
//!     .push(Relu)
//!     .push(Linear::new(8, 2, true, &dev, &mut rng)?);
//! let y = mlp.forward(&Tensor::zeros(&[3, 4], DType::F32, &dev)?)?;
//! assert_eq!(y.shape(), &[3, 2]);
//! let names: Vec<String> = mlp.named_parameters().into_iter().map(|(n, _)| n).collect();
//! assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias"]);
//! # Ok::<(), kael_core::Error>(())
//! ```

mod activation;
mod attention;
mod batch_norm_kernel;
mod conv;
mod dropout;
mod embedding;
mod flatten;
pub mod functional;
mod im2col;
pub mod init;
mod layer_norm;
mod layer_norm_kernel;
mod linear;
mod loss;
mod module;
mod norm;
mod pad;
mod pool;
mod rms_norm;
mod sequential;
mod transformer;

pub use activation::{Gelu, GeluApproximation, Relu, Sigmoid, Silu, Tanh};
pub use attention::CausalSelfAttention;
pub use conv::{Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d};
pub use dropout::Dropout;
pub use embedding::Embedding;
pub use flatten::{Flatten, Identity};
pub use layer_norm::LayerNorm;
pub use linear::Linear;
pub use loss::{Reduction, cross_entropy, mse_loss, nll_loss};
pub use module::{Module, StateDictMismatch, Visitor, indexed_name};
pub use norm::{BatchNorm1d, BatchNorm2d, GroupNorm};
pub use pad::{pad_dim, same_padding};
pub use pool::{AvgPool2d, MaxPool2d};
pub use rms_norm::RmsNorm;
pub use sequential::Sequential;
pub use transformer::{Mlp, TransformerBlock};

#[cfg(doc)]
use crate::Tensor;
