//! Learning-rate schedules.

use crate::error::{Error, Result};

/// Linear warm-up to `base_lr`, then cosine decay to `min_lr`.
///
/// ```text
/// lr(s) = base_lr · (s + 1) / warmup                             s < warmup
/// lr(s) = min_lr + ½ (base_lr - min_lr) (1 + cos(π · progress))  otherwise
///         progress = min(1, (s - warmup) / (total - warmup))
/// ```
///
/// `s` counts from 0 (call [`WarmupCosine::lr`] before step `s`). After
/// `total` steps the rate stays at `min_lr`. This is nanoGPT's schedule
/// except that warm-up reaches `base_lr` at step `warmup - 1` rather than
/// ramping over `warmup + 1` steps.
///
/// ```
/// use kael_core::optim::WarmupCosine;
/// let s = WarmupCosine::new(1.0, 0.0, 2, 6)?;
/// let lrs: Vec<f64> = (0..7).map(|i| s.lr(i)).collect();
/// assert_eq!(&lrs[..3], &[0.5, 1.0, 1.0]);
/// assert!((lrs[4] - 0.5).abs() < 1e-12 && lrs[6] == 0.0);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WarmupCosine {
    base_lr: f64,
    min_lr: f64,
    warmup: usize,
    total: usize,
}

impl WarmupCosine {
    /// The schedule; `warmup` may be 0 (pure cosine).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `warmup > total`, or the rates are
    /// not finite with `0 <= min_lr <= base_lr`.
    ///
    /// ```
    /// use kael_core::optim::WarmupCosine;
    /// assert!(WarmupCosine::new(1e-3, 1e-4, 10, 5).is_err());
    /// ```
    pub fn new(base_lr: f64, min_lr: f64, warmup: usize, total: usize) -> Result<Self> {
        if warmup > total {
            return Err(Error::InvalidArgument {
                op: "WarmupCosine",
                reason: "warmup must not exceed the total number of steps",
            });
        }
        if !(base_lr.is_finite() && min_lr.is_finite() && 0.0 <= min_lr && min_lr <= base_lr) {
            return Err(Error::InvalidArgument {
                op: "WarmupCosine",
                reason: "rates must be finite with 0 <= min_lr <= base_lr",
            });
        }
        Ok(Self {
            base_lr,
            min_lr,
            warmup,
            total,
        })
    }

    /// The learning rate for step `step` (from 0).
    pub fn lr(&self, step: usize) -> f64 {
        if step < self.warmup {
            return self.base_lr * (step + 1) as f64 / self.warmup as f64;
        }
        let span = self.total - self.warmup;
        let progress = if span == 0 {
            1.0
        } else {
            ((step - self.warmup) as f64 / span as f64).min(1.0)
        };
        let cos = libm::cos(core::f64::consts::PI * progress);
        self.min_lr + 0.5 * (self.base_lr - self.min_lr) * (1.0 + cos)
    }
}
