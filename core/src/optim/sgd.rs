//! Stochastic gradient descent with momentum.

use super::{
    Optimizer, check_commit, check_lr, check_non_negative, check_params, commit, grad_on_device,
    on_device_of, state,
};
use crate::autograd::no_grad;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// Hyper-parameters of [`Sgd`] (PyTorch's names and defaults, except `lr`,
/// which PyTorch also defaults to `1e-3`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SgdConfig {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor (0: plain SGD).
    pub momentum: f64,
    /// Dampening of the momentum's gradient term.
    pub dampening: f64,
    /// L2 penalty added to the gradient.
    pub weight_decay: f64,
    /// Nesterov momentum (needs `momentum > 0` and `dampening == 0`).
    pub nesterov: bool,
}

impl Default for SgdConfig {
    fn default() -> Self {
        Self {
            lr: 1e-3,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
        }
    }
}

/// SGD, as PyTorch's `torch.optim.SGD`. For each parameter `p` with
/// gradient `g`, at step `t`:
///
/// ```text
/// g = g + weight_decay · p
/// if momentum != 0:
///     b = g                                   (t = 1)
///     b = momentum · b + (1 - dampening) · g  (t > 1)
///     g = g + momentum · b   if nesterov   else   b
/// p = p - lr · g
/// ```
///
/// See NOTE [Optimizer updates] in [`crate::optim`].
///
/// ```
/// use kael_core::optim::{Optimizer, Sgd, SgdConfig};
/// use kael_core::{Device, Tensor};
/// let w = Tensor::from_slice(&[1.0f32], &[1], &Device::cpu())?.requires_grad_(true)?;
/// let cfg = SgdConfig { lr: 0.1, momentum: 0.9, ..Default::default() };
/// let mut opt = Sgd::new(vec![w.clone()], cfg)?;
/// for _ in 0..2 {
///     opt.zero_grad();
///     w.mul_scalar(1.0)?.sum_all()?.backward()?; // g = 1
///     opt.step()?;
/// }
/// // b1 = 1, b2 = 0.9 + 1 = 1.9: w = 1 - 0.1 - 0.19
/// assert!((w.item::<f32>()? - 0.71).abs() < 1e-6);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub struct Sgd {
    params: Vec<Tensor>,
    cfg: SgdConfig,
    momentum: Vec<Option<Tensor>>,
}

impl Sgd {
    /// SGD over `params` (each tensor once, float leaves).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a negative or non-finite
    /// hyper-parameter, Nesterov without momentum or with dampening, a
    /// repeated or non-leaf parameter; [`Error::UnsupportedDType`] for a
    /// non-float parameter.
    ///
    /// ```
    /// use kael_core::optim::{Sgd, SgdConfig};
    /// let cfg = SgdConfig { nesterov: true, ..Default::default() };
    /// assert!(Sgd::new(vec![], cfg).is_err()); // Nesterov needs momentum
    /// ```
    pub fn new(params: Vec<Tensor>, cfg: SgdConfig) -> Result<Self> {
        const OP: &str = "Sgd";
        check_non_negative(OP, cfg.lr, "lr must be a finite number >= 0")?;
        check_non_negative(OP, cfg.momentum, "momentum must be a finite number >= 0")?;
        check_non_negative(OP, cfg.dampening, "dampening must be a finite number >= 0")?;
        check_non_negative(
            OP,
            cfg.weight_decay,
            "weight_decay must be a finite number >= 0",
        )?;
        if cfg.nesterov && (cfg.momentum <= 0.0 || cfg.dampening != 0.0) {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: "Nesterov momentum needs momentum > 0 and dampening = 0",
            });
        }
        check_params(OP, &params)?;
        let momentum = vec![None; params.len()];
        Ok(Self {
            params,
            cfg,
            momentum,
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &SgdConfig {
        &self.cfg
    }

    /// The momentum buffer of parameter `i` (after its first step with
    /// momentum).
    pub fn momentum_buffer(&self, i: usize) -> Option<&Tensor> {
        self.momentum.get(i).and_then(Option::as_ref)
    }
}

impl Optimizer for Sgd {
    fn step(&mut self) -> Result<()> {
        let c = self.cfg;
        no_grad(|| {
            let mut decrements = Vec::with_capacity(self.params.len());
            let mut new_bufs = Vec::with_capacity(self.params.len());
            for (i, p) in self.params.iter().enumerate() {
                let Some(mut d) = grad_on_device(p)? else {
                    continue;
                };
                if c.weight_decay != 0.0 {
                    d = d.add(&p.mul_scalar(c.weight_decay)?)?;
                }
                if c.momentum != 0.0 {
                    let buf = match &self.momentum[i] {
                        None => d.deep_clone()?,
                        Some(b) => on_device_of(b, p)?
                            .mul_scalar(c.momentum)?
                            .add(&d.mul_scalar(1.0 - c.dampening)?)?,
                    };
                    d = if c.nesterov {
                        d.add(&buf.mul_scalar(c.momentum)?)?
                    } else {
                        buf.clone()
                    };
                    new_bufs.push((i, buf));
                }
                let d = d.mul_scalar(c.lr)?;
                check_commit("Sgd::step", p, &d)?;
                decrements.push((i, d));
            }
            // Everything else that can fail has run; the commit probes every
            // parameter's borrow before its first write (NOTE [Writers get in]).
            commit("Sgd::step", &self.params, &decrements)?;
            for (i, b) in new_bufs {
                self.momentum[i] = Some(b);
            }
            Ok(())
        })
    }

    fn params(&self) -> &[Tensor] {
        &self.params
    }

    fn lr(&self) -> f64 {
        self.cfg.lr
    }

    fn set_lr(&mut self, lr: f64) -> Result<()> {
        check_lr("Sgd::set_lr", lr)?;
        self.cfg.lr = lr;
        Ok(())
    }

    fn state_dict(&self) -> Result<Vec<(String, Tensor)>> {
        let mut out = alloc::vec![state::lr_entry(self.cfg.lr)?];
        for (i, b) in self.momentum.iter().enumerate() {
            if let Some(b) = b {
                out.push((state::key(i, "momentum_buffer"), state::saved(b)?));
            }
        }
        Ok(out)
    }

    fn load_state_dict(&mut self, entries: &[(String, Tensor)]) -> Result<()> {
        const OP: &str = "Sgd::load_state_dict";
        let (lr, parsed) = state::parse(OP, entries, self.params.len(), &["momentum_buffer"])?;
        let mut momentum = alloc::vec![None; self.params.len()];
        for e in parsed {
            momentum[e.index] = Some(state::like_param(OP, e.tensor, &self.params[e.index])?);
        }
        // Everything is checked and copied: commit.
        self.momentum = momentum;
        if let Some(lr) = lr {
            self.cfg.lr = lr;
        }
        Ok(())
    }
}
