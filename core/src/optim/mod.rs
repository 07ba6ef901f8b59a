//! Optimizers, gradient clipping and learning-rate schedules.
//!
//! * [`Optimizer`]: `step`, `zero_grad`, the learning rate; implemented by
//!   [`Sgd`] (momentum, dampening, Nesterov, weight decay), [`Adam`] (L2
//!   weight decay) and [`AdamW`] (decoupled weight decay), each following
//!   PyTorch's update formulas (written out on each type).
//! * [`clip_grad_norm_`]: scales every gradient so their global 2-norm is
//!   at most a bound.
//! * [`WarmupCosine`]: linear warm-up, then cosine decay.
//!
//! NOTE [Optimizer updates]
//! 1. An optimizer holds the parameter handles it was given (the same
//!    tensors: [`Tensor::is_same`]), so a model moved with
//!    [`Module::to`](crate::nn::Module::to) after the optimizer was built is
//!    still the model it trains (`to` moves each tensor in place).
//! 2. Parameters without a gradient are skipped (their state does not
//!    advance), as in PyTorch.
//! 3. State (momentum buffers, Adam moments) is made of tensors on the
//!    parameter's device, created at the first step; a state tensor found
//!    on another device (the model moved since) is copied over first.
//! 4. `step` runs under [`no_grad`](crate::no_grad). It first computes the
//!    decrement of every parameter (`p_new = p - decrement`) and every new
//!    state tensor out of place; only when all of them exist does it
//!    subtract the decrements in place with [`Tensor::sub_`] and swap in the
//!    new state. So an error while computing (out of memory, a gradient on
//!    another device) leaves every parameter and all state as they were.
//!    The first phase also checks everything that could make a `sub_`
//!    fail (`check_commit`: an expanded or read-only external parameter,
//!    a decrement of another dtype, shape or device), and the commit
//!    announces a writer on every parameter, then probes each one's borrow
//!    (a guard held on its bytes), before its first write; so the commit
//!    (a same-shape, same-dtype, same-device `sub_` per parameter, which
//!    allocates nothing) does not fail partway: a step is all-or-nothing
//!    whatever the position of the bad parameter. It reads and writes each
//!    parameter once (computing `p_new` out of place and copying it in
//!    took two more passes and an allocation). Threads that read the
//!    parameters during `step` (sync builds) hold back while the writer is
//!    announced (NOTE [Writers get in]), so the step gets in rather than
//!    failing with `BorrowConflict`; only a guard held for longer than the
//!    bounded wait (`shared::WRITER_PATIENCE` rounds) makes it fail, and
//!    then before its first write.
//! 5. Adam and AdamW on a device with the `adam` family (f32 parameters)
//!    stage no decrement and no new state: the first phase checks what
//!    could refuse each parameter's update (writable, a gradient of its
//!    shape sharing memory with no parameter) and allocates only missing
//!    moments; the commit then updates each parameter and its moments in
//!    place, one pass each (NOTE [One-pass Adam]). A step after the first
//!    allocates nothing, so the moments are the only memory the optimizer
//!    holds, as with PyTorch's fused AdamW. The moments are updated in
//!    place: a tensor from `moments()` follows them (as PyTorch's
//!    `state[p]["exp_avg"]` does); `state_dict()` copies.

mod adam;
mod clip;
mod schedule;
mod sgd;
mod state;

pub use adam::{Adam, AdamConfig, AdamW};
pub use clip::clip_grad_norm_;
pub use schedule::WarmupCosine;
pub use sgd::{Sgd, SgdConfig};

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use alloc::string::String;
use alloc::vec::Vec;

/// A gradient-based optimizer over a fixed list of parameters.
///
/// ```
/// use kael_core::optim::{Optimizer, Sgd, SgdConfig};
/// use kael_core::{Device, Tensor};
/// let w = Tensor::from_slice(&[1.0f32, -2.0], &[2], &Device::cpu())?.requires_grad_(true)?;
/// let mut opt = Sgd::new(vec![w.clone()], SgdConfig { lr: 0.5, ..Default::default() })?;
/// w.sqr()?.sum_all()?.backward()?;            // grad = 2w
/// opt.step()?;                                // w - 0.5 * 2w = 0
/// assert_eq!(w.to_vec::<f32>()?, vec![0.0, 0.0]);
/// opt.zero_grad();
/// assert!(w.grad().is_none());
/// # Ok::<(), kael_core::Error>(())
/// ```
pub trait Optimizer {
    /// Updates every parameter that has a gradient (see NOTE
    /// [Optimizer updates]).
    ///
    /// # Errors
    /// Errors of the tensor ops (out of memory, device mismatch); on an
    /// error no parameter and no state has changed.
    fn step(&mut self) -> Result<()>;

    /// The parameters, in the order given.
    fn params(&self) -> &[Tensor];

    /// The current learning rate.
    fn lr(&self) -> f64;

    /// Sets the learning rate (e.g. from a [`WarmupCosine`] schedule).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a negative or non-finite rate (as the
    /// constructors); the rate is then unchanged.
    fn set_lr(&mut self, lr: f64) -> Result<()>;

    /// The optimizer's state as named tensors (NOTE [Optimizer state
    /// dicts]): per-parameter buffers and step counts, and `lr`. Copies:
    /// later steps do not change them. Save it with the model's
    /// `state_dict` (kael-host's `checkpoint::save_training` does both).
    ///
    /// # Errors
    /// Allocation errors of the copies.
    ///
    /// ```
    /// use kael_core::optim::{Optimizer, Sgd, SgdConfig};
    /// use kael_core::{Device, Tensor};
    /// let w = Tensor::from_slice(&[1.0f32], &[1], &Device::cpu())?.requires_grad_(true)?;
    /// let mut opt = Sgd::new(vec![w.clone()], SgdConfig { lr: 0.1, momentum: 0.9, ..Default::default() })?;
    /// w.sqr()?.sum_all()?.backward()?;
    /// opt.step()?;
    /// let names: Vec<String> = opt.state_dict()?.into_iter().map(|(n, _)| n).collect();
    /// assert_eq!(names, ["lr", "state.0.momentum_buffer"]);
    /// # Ok::<(), kael_core::Error>(())
    /// ```
    fn state_dict(&self) -> Result<Vec<(String, Tensor)>>;

    /// Restores state that [`state_dict`](Self::state_dict) of an
    /// optimizer of the same kind, over parameters of the same shapes and
    /// dtypes in the same order, returned; parameters without entries start
    /// fresh. The values are copied onto each parameter's device.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown name, a parameter index
    /// out of range, a shape or dtype that differs from the parameter's, an
    /// incomplete parameter state, a bad `lr` or step count; on an error
    /// the optimizer is unchanged.
    fn load_state_dict(&mut self, entries: &[(String, Tensor)]) -> Result<()>;

    /// Clears every parameter's gradient (PyTorch's
    /// `zero_grad(set_to_none=True)`).
    fn zero_grad(&self) {
        for p in self.params() {
            p.zero_grad();
        }
    }
}

/// Checks an optimizer's parameter list: float leaves, each tensor once.
pub(crate) fn check_params(op: &'static str, params: &[Tensor]) -> Result<()> {
    for (i, p) in params.iter().enumerate() {
        p.dtype().require_float(op)?;
        if !p.is_leaf() {
            return Err(Error::InvalidArgument {
                op,
                reason: "optimizers update leaf tensors only; pass the parameters themselves (module.parameters()), not results computed from them",
            });
        }
        if params[..i].iter().any(|q| q.is_same(p)) {
            return Err(Error::InvalidArgument {
                op,
                reason: "a parameter appears twice in the list; pass module.parameters(), which lists each tensor once",
            });
        }
    }
    Ok(())
}

/// The check of [`Optimizer::set_lr`] (`op` names the optimizer's method).
pub(crate) fn check_lr(op: &'static str, lr: f64) -> Result<()> {
    check_non_negative(op, lr, "lr must be a finite number >= 0")
}

/// Checks that a hyper-parameter is a finite number `>= 0`.
pub(crate) fn check_non_negative(op: &'static str, value: f64, reason: &'static str) -> Result<()> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(Error::InvalidArgument { op, reason })
    }
}

/// The gradient of `p` on `p`'s device, if it has one.
pub(crate) fn grad_on_device(p: &Tensor) -> Result<Option<Tensor>> {
    match p.grad() {
        Some(g) => Ok(Some(g.to_device(&p.device())?)),
        None => Ok(None),
    }
}

/// `state` on `p`'s device (a copy when it lives elsewhere).
pub(crate) fn on_device_of(state: &Tensor, p: &Tensor) -> Result<Tensor> {
    state.to_device(&p.device())
}

/// Checks, before anything is written, that subtracting the staged
/// decrement `d` from parameter `p` cannot fail (phase 2 of NOTE
/// [Optimizer updates]): the parameter is writable (not expanded, not
/// read-only external storage), and `d` has its shape, dtype and device.
/// Each error names the optimizer's `step` and says how to fix the
/// parameter or its gradient.
pub(crate) fn check_commit(op: &'static str, p: &Tensor, d: &Tensor) -> Result<()> {
    check_param_writable(op, p)?;
    if d.dtype() != p.dtype() {
        return Err(Error::DTypeMismatch {
            op,
            expected: p.dtype(),
            got: d.dtype(),
        });
    }
    if d.shape() != p.shape() {
        return Err(Error::ShapeMismatch {
            op,
            expected: crate::error::ErrShape::of(p.shape()),
            got: crate::error::ErrShape::of(d.shape()),
        });
    }
    p.same_device(op, d)?;
    Ok(())
}

/// The part of [`check_commit`] about the parameter alone: it can be
/// written in place (not expanded, not read-only external storage).
pub(crate) fn check_param_writable(op: &'static str, p: &Tensor) -> Result<()> {
    if p.layout().has_internal_overlap() {
        return Err(Error::InvalidArgument {
            op,
            reason: "a parameter maps several positions to one element (e.g. made by expand), so it cannot be updated in place; pass a deep_clone() of it as the parameter",
        });
    }
    if p.storage().is_read_only() {
        return Err(Error::InvalidArgument {
            op,
            reason: "a parameter's storage is external and read-only (e.g. a memory-mapped checkpoint); pass a deep_clone() of it as the parameter",
        });
    }
    Ok(())
}

/// Subtracts staged decrements from their parameters (phase 2 of NOTE
/// [Optimizer updates]). Every pair must have passed [`check_commit`]
/// first, which makes each `sub_` infallible.
pub(crate) fn commit(
    op: &'static str,
    params: &[Tensor],
    decrements: &[(usize, Tensor)],
) -> Result<()> {
    let targets: Vec<&Tensor> = decrements.iter().map(|(i, _)| &params[*i]).collect();
    commit_writes(op, &targets, || {
        for (i, d) in decrements {
            params[*i].sub_(d)?;
        }
        Ok(())
    })
}

/// Runs `write`, which writes `targets` in place and nothing else, and
/// every write of which was checked before (phase 2 of NOTE [Optimizer
/// updates]): with a writer announced on every target from before the
/// probes to the last write, and every target's borrow probed first.
pub(crate) fn commit_writes(
    op: &'static str,
    targets: &[&Tensor],
    write: impl FnOnce() -> Result<()>,
) -> Result<()> {
    // Writers announced on every target from before the probes to the
    // last write (NOTE [Writers get in]): readers on other threads hold
    // back, so none slips in between a probe and its write.
    let _intents: Vec<crate::storage::WriteIntent> = targets
        .iter()
        .map(|t| crate::storage::WriteIntent::new(t.storage()))
        .collect();
    // A guard held on a target's bytes (a `Storage::read`/`write` not
    // dropped, here or on another thread past the bounded wait) would make
    // its write fail: probe every one before the first write.
    for t in targets {
        let storage = t.storage();
        if storage.device().is_host_memory() {
            drop(storage.write(op)?);
        }
    }
    write()
}
