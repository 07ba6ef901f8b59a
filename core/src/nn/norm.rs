//! Batch and group normalisation: thin layers over
//! [`batch_norm`](super::functional::batch_norm) and
//! [`group_norm`](super::functional::group_norm).
//!
//! A batch-norm layer's running statistics are *buffers*: shown to
//! [`Visitor::buffer`], so they are in [`Module::state_dict`] and moved by
//! [`Module::to`], and not in [`Module::parameters`]. They are updated in
//! place during a training-mode forward (so every handle sees the update),
//! never by an optimizer. `num_batches_tracked` (an `I64` scalar) is kept
//! as PyTorch keeps it, so state dicts carry the same names. PyTorch's
//! `momentum=None` and `track_running_stats=False` are the builders
//! `with_cumulative_average` and `without_running_stats`.

use super::functional;
use super::module::{Module, Visitor};
use crate::autograd::no_grad;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shared::Lock;
use crate::tensor::Tensor;

/// The state both batch-norm layers share.
struct BatchNorm {
    weight: Option<Tensor>,
    bias: Option<Tensor>,
    /// `(running_mean, running_var, num_batches_tracked)`, unless built
    /// without running statistics.
    running: Option<(Tensor, Tensor, Tensor)>,
    eps: f64,
    /// `None`: a cumulative moving average (PyTorch's `momentum=None`).
    momentum: Option<f64>,
    training: Lock<bool>,
}

impl BatchNorm {
    #[allow(clippy::too_many_arguments)]
    fn new(
        op: &'static str,
        num_features: usize,
        eps: f64,
        momentum: f64,
        affine: bool,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        if num_features == 0 {
            return Err(Error::InvalidArgument {
                op,
                reason: "num_features (the channel count C) must be positive; pass the input's dim 1",
            });
        }
        if eps.is_nan() || eps < 0.0 || eps.is_infinite() {
            return Err(Error::InvalidArgument {
                op,
                reason: "eps must be a finite non-negative number (PyTorch uses 1e-5)",
            });
        }
        if !(0.0..=1.0).contains(&momentum) {
            return Err(Error::InvalidArgument {
                op,
                reason: "momentum must be in [0, 1] (PyTorch's default is 0.1)",
            });
        }
        dtype.require_float(op)?;
        let c = [num_features];
        let (weight, bias) = if affine {
            (
                Some(Tensor::ones(&c, dtype, device)?.requires_grad_(true)?),
                Some(Tensor::zeros(&c, dtype, device)?.requires_grad_(true)?),
            )
        } else {
            (None, None)
        };
        Ok(Self {
            weight,
            bias,
            running: Some((
                Tensor::zeros(&c, dtype, device)?,
                Tensor::ones(&c, dtype, device)?,
                Tensor::zeros(&[], DType::I64, device)?,
            )),
            eps,
            momentum: Some(momentum),
            training: Lock::new(true),
        })
    }

    fn is_training(&self) -> bool {
        self.training.with(|t| *t)
    }

    fn forward(&self, op: &'static str, input: &Tensor) -> Result<Tensor> {
        // Without running statistics, batch statistics normalise in both
        // modes (PyTorch's `track_running_stats=False`).
        let training = self.is_training() || self.running.is_none();
        let (rm, rv, tracked) = match &self.running {
            Some((m, v, n)) => (Some(m), Some(v), Some(n)),
            None => (None, None, None),
        };
        // PyTorch counts this batch first, then averages over all: a
        // cumulative average takes its factor from the count, on the
        // device.
        let (factor, count) = match (self.momentum, tracked) {
            (Some(m), _) => (m, None),
            (None, n) => (0.0, n),
        };
        let y = functional::batch_norm_op(
            op,
            input,
            rm,
            rv,
            self.weight.as_ref(),
            self.bias.as_ref(),
            training,
            factor,
            count,
            self.eps,
        )?;
        if let (true, Some(n)) = (training, tracked) {
            count_up(n)?;
        }
        Ok(y)
    }

    fn visit(&self, v: &mut dyn Visitor) {
        if let Some(w) = &self.weight {
            v.param("weight", w);
        }
        if let Some(b) = &self.bias {
            v.param("bias", b);
        }
        if let Some((m, var, n)) = &self.running {
            v.buffer("running_mean", m);
            v.buffer("running_var", var);
            v.buffer("num_batches_tracked", n);
        }
    }
}

/// `n += 1` for an integer counter: through the device's `add_int`
/// family where it has it (a plan replays it: NOTE [Declared families]),
/// else the integer add.
fn count_up(n: &Tensor) -> Result<()> {
    use crate::backend::{Family, Provenance};
    no_grad(|| {
        let prov = n.device().backend().provenance(Family::AddInt);
        if matches!(prov, Provenance::Own | Provenance::Inherited(_)) {
            let words = crate::kernels::count::words(1);
            n.copy_(&Tensor::declared(Family::AddInt, 0, &words, &[n])?)
                .map(|_| ())
        } else {
            n.add_scalar_(1).map(|_| ())
        }
    })
}

macro_rules! batch_norm_layer {
    ($ty:ident, $name:literal, $new_op:literal, $ranks:pat, $rank_msg:literal, $doc:literal, $example:literal, $shape2:literal) => {
        #[doc = $doc]
        ///
        /// Training mode (the default, as PyTorch) normalises with the
        /// batch's mean and biased variance over every dim but `C` and
        /// updates `running_mean`/`running_var` in place with `momentum`
        /// (the variance unbiased); evaluation mode normalises with the
        /// running statistics. Parameters: `weight` (ones) and `bias`
        /// (zeros), `[C]`, when affine; buffers: `running_mean` (zeros),
        /// `running_var` (ones), `num_batches_tracked`.
        ///
        /// ```
        #[doc = $example]
        /// # Ok::<(), kael_core::Error>(())
        /// ```
        pub struct $ty {
            inner: BatchNorm,
        }

        impl $ty {
            /// A layer over `num_features` channels (PyTorch's defaults are
            /// `eps = 1e-5`, `momentum = 0.1`, `affine = true`), with
            /// parameters and running statistics of `dtype`.
            ///
            /// # Errors
            /// [`Error::InvalidArgument`] for zero features, a negative,
            /// infinite or NaN `eps`, or `momentum` outside `[0, 1]`;
            /// [`Error::UnsupportedDType`] for non-float dtypes.
            ///
            /// ```
            #[doc = concat!("use kael_core::nn::{", stringify!($ty), ", Module};")]
            /// use kael_core::{DType, Device};
            #[doc = concat!("let bn = ", stringify!($ty), "::new(3, 1e-5, 0.1, true, DType::F32, &Device::cpu())?;")]
            /// assert_eq!(bn.parameters().len(), 2);
            #[doc = concat!("assert!(", stringify!($ty), "::new(3, 1e-5, 2.0, true, DType::F32, &Device::cpu()).is_err());")]
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            pub fn new(
                num_features: usize,
                eps: f64,
                momentum: f64,
                affine: bool,
                dtype: DType,
                device: &Device,
            ) -> Result<Self> {
                Ok(Self {
                    inner: BatchNorm::new(
                        $new_op,
                        num_features,
                        eps,
                        momentum,
                        affine,
                        dtype,
                        device,
                    )?,
                })
            }

            /// The same layer averaging the running statistics over every
            /// training batch so far instead of with a momentum (PyTorch's
            /// `momentum=None`): batch `k` (from 1) is weighted `1 / k`.
            ///
            /// ```
            #[doc = concat!("use kael_core::nn::{", stringify!($ty), ", Module};")]
            /// use kael_core::{DType, Device, Tensor};
            /// let dev = Device::cpu();
            #[doc = concat!("let bn = ", stringify!($ty), "::new(1, 0.0, 0.1, false, DType::F64, &dev)?.with_cumulative_average();")]
            #[doc = concat!("let x = |v: f64| Tensor::from_slice(&[v, v + 2.0], &", $shape2, ", &dev);")]
            /// bn.forward(&x(1.0)?)?;
            /// bn.forward(&x(5.0)?)?;
            /// assert_eq!(bn.running_mean().unwrap().to_vec::<f64>()?, vec![4.0]); // (2 + 6) / 2
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            pub fn with_cumulative_average(self) -> Self {
                Self {
                    inner: BatchNorm {
                        momentum: None,
                        ..self.inner
                    },
                }
            }

            /// The same layer without running statistics (PyTorch's
            /// `track_running_stats=False`): no buffers, and batch
            /// statistics normalise in evaluation mode too.
            ///
            /// ```
            #[doc = concat!("use kael_core::nn::{", stringify!($ty), ", Module};")]
            /// use kael_core::{DType, Device};
            #[doc = concat!("let bn = ", stringify!($ty), "::new(3, 1e-5, 0.1, true, DType::F32, &Device::cpu())?.without_running_stats();")]
            /// assert!(bn.running_mean().is_none());
            /// assert_eq!(bn.state_dict().len(), 2); // weight and bias
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            pub fn without_running_stats(self) -> Self {
                Self {
                    inner: BatchNorm {
                        running: None,
                        ..self.inner
                    },
                }
            }

            /// `[C]` scale, when affine.
            ///
            /// ```
            #[doc = concat!("use kael_core::nn::", stringify!($ty), ";")]
            /// use kael_core::{DType, Device};
            #[doc = concat!("let bn = ", stringify!($ty), "::new(3, 1e-5, 0.1, true, DType::F32, &Device::cpu())?;")]
            /// assert_eq!(bn.weight().unwrap().to_vec::<f32>()?, vec![1.0; 3]);
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            pub fn weight(&self) -> Option<&Tensor> {
                self.inner.weight.as_ref()
            }

            /// `[C]` shift, when affine.
            ///
            /// ```
            #[doc = concat!("use kael_core::nn::", stringify!($ty), ";")]
            /// use kael_core::{DType, Device};
            #[doc = concat!("let bn = ", stringify!($ty), "::new(3, 1e-5, 0.1, true, DType::F32, &Device::cpu())?;")]
            /// assert_eq!(bn.bias().unwrap().to_vec::<f32>()?, vec![0.0; 3]);
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            pub fn bias(&self) -> Option<&Tensor> {
                self.inner.bias.as_ref()
            }

            /// The running mean (a buffer, updated in training mode), unless
            /// built [`without_running_stats`](Self::without_running_stats).
            ///
            /// ```
            #[doc = concat!("use kael_core::nn::", stringify!($ty), ";")]
            /// use kael_core::{DType, Device};
            #[doc = concat!("let bn = ", stringify!($ty), "::new(3, 1e-5, 0.1, true, DType::F32, &Device::cpu())?;")]
            /// assert_eq!(bn.running_mean().unwrap().to_vec::<f32>()?, vec![0.0; 3]);
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            pub fn running_mean(&self) -> Option<&Tensor> {
                self.inner.running.as_ref().map(|r| &r.0)
            }

            /// The running (unbiased) variance (a buffer), unless built
            /// without running statistics.
            ///
            /// ```
            #[doc = concat!("use kael_core::nn::", stringify!($ty), ";")]
            /// use kael_core::{DType, Device};
            #[doc = concat!("let bn = ", stringify!($ty), "::new(3, 1e-5, 0.1, true, DType::F32, &Device::cpu())?;")]
            /// assert_eq!(bn.running_var().unwrap().to_vec::<f32>()?, vec![1.0; 3]);
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            pub fn running_var(&self) -> Option<&Tensor> {
                self.inner.running.as_ref().map(|r| &r.1)
            }

            /// How many training-mode forwards have run (an `I64` scalar
            /// buffer), unless built without running statistics.
            ///
            /// ```
            #[doc = concat!("use kael_core::nn::", stringify!($ty), ";")]
            /// use kael_core::{DType, Device};
            #[doc = concat!("let bn = ", stringify!($ty), "::new(3, 1e-5, 0.1, true, DType::F32, &Device::cpu())?;")]
            /// assert_eq!(bn.num_batches_tracked().unwrap().to_vec::<i64>()?, vec![0]);
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            pub fn num_batches_tracked(&self) -> Option<&Tensor> {
                self.inner.running.as_ref().map(|r| &r.2)
            }

            /// Whether the layer is in training mode.
            ///
            /// ```
            #[doc = concat!("use kael_core::nn::{", stringify!($ty), ", Module};")]
            /// use kael_core::{DType, Device};
            #[doc = concat!("let bn = ", stringify!($ty), "::new(3, 1e-5, 0.1, true, DType::F32, &Device::cpu())?;")]
            /// assert!(bn.is_training());
            /// bn.eval();
            /// assert!(!bn.is_training());
            /// # Ok::<(), kael_core::Error>(())
            /// ```
            pub fn is_training(&self) -> bool {
                self.inner.is_training()
            }
        }

        impl Module for $ty {
            /// `input` as the type's docs say; the result has its shape.
            ///
            /// # Errors
            /// [`Error::RankMismatch`] for another rank;
            /// [`crate::Error::ShapeMismatch`] for a channel count other
            /// than `num_features`; [`Error::InvalidArgument`] for a
            /// training batch with one value per channel; dtype or device
            /// mismatch. Running statistics are unchanged on an error.
            fn forward(&self, input: &Tensor) -> Result<Tensor> {
                if !matches!(input.rank(), $ranks) {
                    return Err(Error::RankMismatch {
                        op: $name,
                        expected: $rank_msg,
                        got: input.rank(),
                    });
                }
                self.inner.forward($name, input)
            }

            fn visit(&self, v: &mut dyn Visitor) {
                self.inner.visit(v);
            }

            fn set_training(&self, on: bool) {
                self.inner.training.with(|t| *t = on);
            }
        }
    };
}

batch_norm_layer!(
    BatchNorm1d,
    "BatchNorm1d",
    "BatchNorm1d::new",
    2 | 3,
    "2 ([N, C]) or 3 ([N, C, L])",
    "Batch normalisation over `[N, C]` or `[N, C, L]` (PyTorch's `nn.BatchNorm1d`).",
    "use kael_core::nn::{BatchNorm1d, Module};\nuse kael_core::{DType, Device, Tensor};\nlet dev = Device::cpu();\nlet bn = BatchNorm1d::new(2, 1e-5, 0.1, true, DType::F32, &dev)?;\nlet x = Tensor::from_slice(&[1.0f32, 10.0, 3.0, 30.0], &[2, 2], &dev)?;\nbn.forward(&x)?;\nassert_eq!(bn.running_mean().unwrap().to_vec::<f32>()?, vec![0.2, 2.0]);\nassert_eq!(bn.running_var().unwrap().to_vec::<f32>()?, vec![0.9 + 0.1 * 2.0, 0.9 + 0.1 * 200.0]);\nassert_eq!(bn.state_dict().len(), 5);\nassert_eq!(bn.parameters().len(), 2);",
    "[2, 1]"
);

batch_norm_layer!(
    BatchNorm2d,
    "BatchNorm2d",
    "BatchNorm2d::new",
    4,
    "4 ([N, C, H, W])",
    "Batch normalisation over `[N, C, H, W]` (PyTorch's `nn.BatchNorm2d`).",
    "use kael_core::nn::{BatchNorm2d, Module};\nuse kael_core::{DType, Device, Tensor};\nlet dev = Device::cpu();\nlet bn = BatchNorm2d::new(3, 1e-5, 0.1, true, DType::F32, &dev)?;\nlet y = bn.forward(&Tensor::ones(&[2, 3, 4, 4], DType::F32, &dev)?)?;\nassert_eq!(y.to_vec::<f32>()?, vec![0.0; 96]);\nbn.eval();\nlet y = bn.forward(&Tensor::ones(&[1, 3, 1, 1], DType::F32, &dev)?)?;\nassert!((y.to_vec::<f32>()?[0] - 0.9 / (0.9f32 + 1e-5).sqrt()).abs() < 1e-6);",
    "[2, 1, 1, 1]"
);

/// Group normalisation (PyTorch's `nn.GroupNorm`): the `C` channels of
/// `[N, C, *]` in `num_groups` groups, each normalised over its channels
/// and positions, then scaled and shifted per channel. The same in
/// training and evaluation. Parameters: `weight` (ones) and `bias`
/// (zeros), `[C]`, when affine.
///
/// ```
/// use kael_core::nn::{GroupNorm, Module};
/// use kael_core::{DType, Device, Tensor};
/// let dev = Device::cpu();
/// let gn = GroupNorm::new(2, 4, 0.0, true, DType::F32, &dev)?;
/// let x = Tensor::from_slice(&[1.0f32, 3.0, 1.0, 3.0], &[1, 4], &dev)?;
/// assert_eq!(gn.forward(&x)?.to_vec::<f32>()?, vec![-1.0, 1.0, -1.0, 1.0]);
/// assert!(GroupNorm::new(3, 4, 1e-5, true, DType::F32, &dev).is_err());
/// # Ok::<(), kael_core::Error>(())
/// ```
pub struct GroupNorm {
    /// `[C]` scale, when affine.
    pub weight: Option<Tensor>,
    /// `[C]` shift, when affine.
    pub bias: Option<Tensor>,
    num_groups: usize,
    eps: f64,
}

impl GroupNorm {
    /// `num_groups` groups over `num_channels` channels (PyTorch's defaults
    /// are `eps = 1e-5`, `affine = true`), parameters of `dtype`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless `num_groups > 0` divides
    /// `num_channels`, or for a negative, infinite or NaN `eps`;
    /// [`Error::UnsupportedDType`] for non-float dtypes.
    ///
    /// ```
    /// use kael_core::nn::GroupNorm;
    /// use kael_core::{DType, Device};
    /// let gn = GroupNorm::new(2, 6, 1e-5, false, DType::F64, &Device::cpu())?;
    /// assert!(gn.weight.is_none());
    /// assert!(GroupNorm::new(4, 6, 1e-5, true, DType::F64, &Device::cpu()).is_err());
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn new(
        num_groups: usize,
        num_channels: usize,
        eps: f64,
        affine: bool,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        const OP: &str = "GroupNorm::new";
        if num_groups == 0 || num_channels % num_groups != 0 {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: "num_groups must be positive and divide num_channels; pick a divisor of num_channels",
            });
        }
        if eps.is_nan() || eps < 0.0 || eps.is_infinite() {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: "eps must be a finite non-negative number (PyTorch uses 1e-5)",
            });
        }
        dtype.require_float(OP)?;
        let c = [num_channels];
        let (weight, bias) = if affine {
            (
                Some(Tensor::ones(&c, dtype, device)?.requires_grad_(true)?),
                Some(Tensor::zeros(&c, dtype, device)?.requires_grad_(true)?),
            )
        } else {
            (None, None)
        };
        Ok(Self {
            weight,
            bias,
            num_groups,
            eps,
        })
    }

    /// The number of groups.
    ///
    /// ```
    /// use kael_core::nn::GroupNorm;
    /// use kael_core::{DType, Device};
    /// assert_eq!(GroupNorm::new(2, 6, 1e-5, true, DType::F32, &Device::cpu())?.num_groups(), 2);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    pub fn num_groups(&self) -> usize {
        self.num_groups
    }
}

impl Module for GroupNorm {
    /// `input` is `[N, C, *]`; the result has its shape.
    ///
    /// # Errors
    /// As [`group_norm`](super::functional::group_norm).
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        functional::group_norm_op(
            "GroupNorm",
            input,
            self.num_groups,
            self.weight.as_ref(),
            self.bias.as_ref(),
            self.eps,
        )
    }

    fn visit(&self, v: &mut dyn Visitor) {
        if let Some(w) = &self.weight {
            v.param("weight", w);
        }
        if let Some(b) = &self.bias {
            v.param("bias", b);
        }
    }
}
