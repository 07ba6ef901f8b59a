//! Adam and AdamW.

use super::{
    Optimizer, check_commit, check_lr, check_non_negative, check_param_writable, check_params,
    commit_writes, grad_on_device, on_device_of, state,
};
use crate::autograd::no_grad;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

use alloc::string::String;
use alloc::vec::Vec;

/// Hyper-parameters of [`Adam`] and [`AdamW`]. `Default` is PyTorch's
/// `Adam` default (`weight_decay = 0`); [`AdamConfig::adamw`] is PyTorch's
/// `AdamW` default (`weight_decay = 0.01`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamConfig {
    /// Learning rate.
    pub lr: f64,
    /// Decay rates of the first and second moment estimates.
    pub betas: (f64, f64),
    /// Added to the denominator for stability.
    pub eps: f64,
    /// L2 penalty (Adam) or decoupled decay rate (AdamW).
    pub weight_decay: f64,
}

impl Default for AdamConfig {
    fn default() -> Self {
        Self {
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }
}

impl AdamConfig {
    /// PyTorch's `AdamW` defaults: as `default()` with `weight_decay = 0.01`.
    ///
    /// ```
    /// assert_eq!(kael_core::optim::AdamConfig::adamw().weight_decay, 0.01);
    /// ```
    pub fn adamw() -> Self {
        Self {
            weight_decay: 0.01,
            ..Self::default()
        }
    }

    fn check(&self, op: &'static str) -> Result<()> {
        check_non_negative(op, self.lr, "lr must be a finite number >= 0")?;
        check_non_negative(op, self.eps, "eps must be a finite number >= 0")?;
        check_non_negative(
            op,
            self.weight_decay,
            "weight_decay must be a finite number >= 0",
        )?;
        let (b1, b2) = self.betas;
        if !((0.0..1.0).contains(&b1) && (0.0..1.0).contains(&b2)) {
            return Err(Error::InvalidArgument {
                op,
                reason: "betas must both be in [0, 1)",
            });
        }
        Ok(())
    }
}

/// First and second moment of one parameter, and its step count.
struct Moments {
    step: u64,
    m: Tensor,
    v: Tensor,
    /// `[2, ..]`, whose two halves `m` and `v` are, where the one-pass
    /// update keeps them (it updates this in place at every step).
    both: Option<Tensor>,
}

/// One parameter's update by the `adam` family, staged: its gradient, its
/// moments' tensor (updated in place) and the step's words.
struct InPlace {
    i: usize,
    g: Tensor,
    both: Tensor,
    words: [u32; crate::kernels::adam::WORDS],
}

/// What Adam and AdamW share; `decoupled` picks AdamW's weight decay.
struct AdamCore {
    /// The public name of `step` for errors (`Adam::step`, `AdamW::step`).
    step_op: &'static str,
    params: Vec<Tensor>,
    cfg: AdamConfig,
    state: Vec<Option<Moments>>,
    decoupled: bool,
}

impl AdamCore {
    fn state_dict(&self) -> Result<Vec<(String, Tensor)>> {
        let mut out = alloc::vec![state::lr_entry(self.cfg.lr)?];
        for (i, s) in self.state.iter().enumerate() {
            if let Some(s) = s {
                let step = i64::try_from(s.step).unwrap_or(i64::MAX);
                out.push((state::key(i, "exp_avg"), state::saved(&s.m)?));
                out.push((state::key(i, "exp_avg_sq"), state::saved(&s.v)?));
                out.push((
                    state::key(i, "step"),
                    Tensor::full(&[], step as f64, crate::DType::I64, &s.m.device())?,
                ));
            }
        }
        Ok(out)
    }

    fn load_state_dict(&mut self, op: &'static str, entries: &[(String, Tensor)]) -> Result<()> {
        let fields = ["exp_avg", "exp_avg_sq", "step"];
        let (lr, parsed) = state::parse(op, entries, self.params.len(), &fields)?;
        let mut parts: Vec<[Option<&Tensor>; 3]> = alloc::vec![[None; 3]; self.params.len()];
        for e in &parsed {
            let k = fields.iter().position(|f| *f == e.field).unwrap_or(0);
            parts[e.index][k] = Some(e.tensor);
        }
        let mut state = Vec::with_capacity(self.params.len());
        for (p, part) in self.params.iter().zip(&parts) {
            state.push(match part {
                [None, None, None] => None,
                [Some(m), Some(v), Some(step)] => Some(Moments {
                    step: state::step_count(op, step)?,
                    m: state::like_param(op, m, p)?,
                    v: state::like_param(op, v, p)?,
                    both: None,
                }),
                _ => {
                    return Err(Error::InvalidArgument {
                        op,
                        reason: "a parameter's state needs exp_avg, exp_avg_sq and step together; pass the whole state_dict()",
                    });
                }
            });
        }
        // Everything is checked and copied: commit.
        self.state = state;
        if let Some(lr) = lr {
            self.cfg.lr = lr;
        }
        Ok(())
    }

    fn new(
        op: &'static str,
        params: Vec<Tensor>,
        cfg: AdamConfig,
        decoupled: bool,
    ) -> Result<Self> {
        cfg.check(op)?;
        check_params(op, &params)?;
        let state = (0..params.len()).map(|_| None).collect();
        Ok(Self {
            step_op: if decoupled {
                "AdamW::step"
            } else {
                "Adam::step"
            },
            params,
            cfg,
            state,
            decoupled,
        })
    }

    fn step(&mut self) -> Result<()> {
        let c = self.cfg;
        let (b1, b2) = c.betas;
        no_grad(|| {
            let mut decrements = Vec::with_capacity(self.params.len());
            let mut updates = Vec::new();
            let mut new_state = Vec::with_capacity(self.params.len());
            for (i, p) in self.params.iter().enumerate() {
                let Some(mut g) = grad_on_device(p)? else {
                    continue;
                };
                if let Some((update, moments)) = self.in_place(i, p, &g)? {
                    updates.push(update);
                    new_state.push((i, moments));
                    continue;
                }
                if c.weight_decay != 0.0 && !self.decoupled {
                    g = g.add(&p.mul_scalar(c.weight_decay)?)?;
                }
                // m, v start at zero: 0 · β + x is exactly x.
                let (t, m, v) = match &self.state[i] {
                    None => (1, g.mul_scalar(1.0 - b1)?, g.sqr()?.mul_scalar(1.0 - b2)?),
                    Some(s) => (
                        s.step + 1,
                        on_device_of(&s.m, p)?
                            .mul_scalar(b1)?
                            .add(&g.mul_scalar(1.0 - b1)?)?,
                        on_device_of(&s.v, p)?
                            .mul_scalar(b2)?
                            .add(&g.sqr()?.mul_scalar(1.0 - b2)?)?,
                    ),
                };
                let bc1 = 1.0 - powi(b1, t);
                let bc2 = 1.0 - powi(b2, t);
                let denom = v.sqrt()?.affine(1.0 / libm::sqrt(bc2), c.eps)?;
                // p·(1 - lr·wd) - step  =  p - (step + lr·wd·p)
                let mut decrement = m.div(&denom)?.mul_scalar(c.lr / bc1)?;
                if c.weight_decay != 0.0 && self.decoupled {
                    decrement = decrement.add(&p.mul_scalar(c.lr * c.weight_decay)?)?;
                }
                check_commit(self.step_op, p, &decrement)?;
                decrements.push((i, decrement));
                new_state.push((
                    i,
                    Moments {
                        step: t,
                        m,
                        v,
                        both: None,
                    },
                ));
            }
            // Everything else that can fail has run; the commit probes every
            // tensor it writes before its first write (NOTE [Writers get in]).
            let params = &self.params;
            let mut targets: Vec<&Tensor> = decrements.iter().map(|(i, _)| &params[*i]).collect();
            for u in &updates {
                targets.push(&params[u.i]);
                targets.push(&u.both);
            }
            commit_writes(self.step_op, &targets, || {
                for u in &updates {
                    Tensor::declared_update(
                        crate::backend::Family::Adam,
                        0,
                        &u.words,
                        &[&u.g],
                        &[&params[u.i], &u.both],
                    )
                    .map_err(|e| e.renamed(self.step_op))?;
                }
                for (i, d) in &decrements {
                    params[*i].sub_(d)?;
                }
                Ok(())
            })?;
            for (i, s) in new_state {
                self.state[i] = Some(s);
            }
            Ok(())
        })
    }

    /// Parameter `i`'s update by the device's `adam` family (NOTE
    /// [One-pass Adam]), staged, with its moments after it: f32
    /// parameter, gradient and moments; `None` where it does not apply
    /// (the composed update runs, with the same values). Everything that
    /// could refuse the update is checked here, before any parameter is
    /// written: the parameter is writable, the gradient has its shape and
    /// shares no memory with any parameter (whose update, in place, would
    /// change it before it is read) or the moments.
    fn in_place(&self, i: usize, p: &Tensor, g: &Tensor) -> Result<Option<(InPlace, Moments)>> {
        use crate::DType;
        use crate::backend::{Family, Provenance};
        use crate::kernels::adam::Hyper;
        let prov = p.device().backend().provenance(Family::Adam);
        let state = self.state[i].as_ref();
        let f32s = p.dtype() == DType::F32
            && g.dtype() == DType::F32
            && state.is_none_or(|s| s.m.dtype() == DType::F32 && s.v.dtype() == DType::F32);
        let applies = matches!(prov, Provenance::Own | Provenance::Inherited(_))
            && f32s
            && g.shape() == p.shape()
            && !self.params.iter().any(|q| g.shares_storage(q));
        if !applies {
            return Ok(None);
        }
        check_param_writable(self.step_op, p)?;
        let dev = p.device();
        // The moments' tensor: the one the last step updated, else a new
        // one (their values stacked; on the first step, not read).
        let kept = state
            .and_then(|s| s.both.as_ref())
            .filter(|b| b.device() == dev && !b.shares_storage(g) && !b.shares_storage(p));
        let both = match (kept, state) {
            (Some(b), _) => b.clone(),
            (None, Some(s)) => {
                Tensor::stack(&[&on_device_of(&s.m, p)?, &on_device_of(&s.v, p)?], 0)?
            }
            (None, None) => {
                let mut shape = alloc::vec![2];
                shape.extend_from_slice(p.shape());
                Tensor::alloc_for_overwrite(&shape, DType::F32, &dev)?
            }
        };
        let t = state.map_or(1, |s| s.step + 1);
        let (b1, b2) = self.cfg.betas;
        let h = Hyper {
            lr: self.cfg.lr,
            beta1: b1,
            beta2: b2,
            eps: self.cfg.eps,
            weight_decay: self.cfg.weight_decay,
            bias_correction1: 1.0 - powi(b1, t),
            bias_correction2: 1.0 - powi(b2, t),
            decoupled: self.decoupled,
            first: state.is_none(),
        };
        let moments = Moments {
            step: t,
            m: both.select(0, 0)?,
            v: both.select(0, 1)?,
            both: Some(both.clone()),
        };
        let update = InPlace {
            i,
            g: g.clone(),
            both,
            words: h.words(),
        };
        Ok(Some((update, moments)))
    }

    fn moments(&self, i: usize) -> Option<(&Tensor, &Tensor, u64)> {
        self.state
            .get(i)
            .and_then(Option::as_ref)
            .map(|s| (&s.m, &s.v, s.step))
    }
}

fn powi(x: f64, n: u64) -> f64 {
    libm::pow(x, n as f64)
}

/// Adam, as PyTorch's `torch.optim.Adam` (no AMSGrad). For each parameter
/// `p` with gradient `g`, at its step `t` (starting at 1, `m = v = 0`):
///
/// ```text
/// g = g + weight_decay · p                      (L2 penalty)
/// m = β1 · m + (1 - β1) · g
/// v = β2 · v + (1 - β2) · g²
/// p = p - lr / (1 - β1ᵗ) · m / (√v / √(1 - β2ᵗ) + eps)
/// ```
///
/// See NOTE [Optimizer updates] in [`crate::optim`].
///
/// ```
/// use kael_core::optim::{Adam, AdamConfig, Optimizer};
/// use kael_core::{Device, Tensor};
/// let w = Tensor::from_slice(&[1.0f32, -1.0], &[2], &Device::cpu())?.requires_grad_(true)?;
/// let mut opt = Adam::new(vec![w.clone()], AdamConfig { lr: 0.1, ..Default::default() })?;
/// w.mul_scalar(3.0)?.sum_all()?.backward()?;
/// opt.step()?; // the first Adam step moves each element by about lr, against the gradient
/// let v = w.to_vec::<f32>()?;
/// assert!((v[0] - 0.9).abs() < 1e-6 && (v[1] + 1.1).abs() < 1e-6);
/// # Ok::<(), kael_core::Error>(())
/// ```
pub struct Adam(AdamCore);

/// AdamW, as PyTorch's `torch.optim.AdamW` (no AMSGrad): Adam with
/// decoupled weight decay. For each parameter, at its step `t`:
///
/// ```text
/// p = p · (1 - lr · weight_decay)
/// m = β1 · m + (1 - β1) · g
/// v = β2 · v + (1 - β2) · g²
/// p = p - lr / (1 - β1ᵗ) · m / (√v / √(1 - β2ᵗ) + eps)
/// ```
///
/// See NOTE [Optimizer updates] in [`crate::optim`].
///
/// ```
/// use kael_core::optim::{AdamConfig, AdamW, Optimizer};
/// use kael_core::{Device, Tensor};
/// let w = Tensor::from_slice(&[2.0f32], &[1], &Device::cpu())?.requires_grad_(true)?;
/// let cfg = AdamConfig { lr: 0.1, weight_decay: 0.5, ..Default::default() };
/// let mut opt = AdamW::new(vec![w.clone()], cfg)?;
/// w.mul_scalar(0.0)?.sum_all()?.backward()?; // zero gradient: only the decay acts
/// opt.step()?;
/// assert!((w.item::<f32>()? - 1.9).abs() < 1e-6); // 2 · (1 - 0.1 · 0.5)
/// # Ok::<(), kael_core::Error>(())
/// ```
pub struct AdamW(AdamCore);

macro_rules! adam_api {
    ($ty:ident, $op:literal, $decoupled:expr) => {
        impl $ty {
            /// The optimizer over `params` (each tensor once, float leaves).
            ///
            /// # Errors
            /// [`Error::InvalidArgument`] for a negative or non-finite
            /// hyper-parameter, betas outside `[0, 1)`, a repeated or
            /// non-leaf parameter; [`Error::UnsupportedDType`] for a
            /// non-float parameter.
            pub fn new(params: Vec<Tensor>, cfg: AdamConfig) -> Result<Self> {
                Ok(Self(AdamCore::new($op, params, cfg, $decoupled)?))
            }

            /// The hyper-parameters.
            pub fn config(&self) -> &AdamConfig {
                &self.0.cfg
            }

            /// First moment, second moment and step count of parameter
            /// `i`, after its first step. Where the update runs in place
            /// (NOTE [Optimizer updates], item 5) later steps write these
            /// tensors; `deep_clone()` them to keep a step's values.
            pub fn moments(&self, i: usize) -> Option<(&Tensor, &Tensor, u64)> {
                self.0.moments(i)
            }
        }

        impl Optimizer for $ty {
            fn step(&mut self) -> Result<()> {
                self.0.step()
            }

            fn params(&self) -> &[Tensor] {
                &self.0.params
            }

            fn lr(&self) -> f64 {
                self.0.cfg.lr
            }

            fn set_lr(&mut self, lr: f64) -> Result<()> {
                check_lr(concat!($op, "::set_lr"), lr)?;
                self.0.cfg.lr = lr;
                Ok(())
            }

            fn state_dict(&self) -> Result<Vec<(String, Tensor)>> {
                self.0.state_dict()
            }

            fn load_state_dict(&mut self, entries: &[(String, Tensor)]) -> Result<()> {
                self.0
                    .load_state_dict(concat!($op, "::load_state_dict"), entries)
            }
        }
    };
}
adam_api!(Adam, "Adam", false);
adam_api!(AdamW, "AdamW", true);
