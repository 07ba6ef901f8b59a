//! Grad mode: whether operations record autograd history.
//!
//! NOTE [Grad mode scope]
//! With the `std` feature (kael-host turns it on) the flag is per thread, as
//! in PyTorch. Without it (firmware) there is one global flag: an
//! `AtomicBool` with plain loads and stores, which thumbv6m supports.
//! kael-core's own unit tests (`cfg(test)`) take the per-thread flag
//! whatever the features: the test harness runs tests on parallel threads,
//! and with one global flag a test inside `no_grad` (an optimizer step,
//! say) switched off another test's recording mid-way (CI caught it twice,
//! in the plan tests). Firmware runs one thread, where the two agree.

#[cfg(not(any(feature = "std", test)))]
static GRAD_ENABLED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(true);

#[cfg(any(feature = "std", test))]
std::thread_local! {
    static GRAD_ENABLED: core::cell::Cell<bool> = const { core::cell::Cell::new(true) };
}

/// Whether operations currently record autograd history.
///
/// ```
/// assert!(kael_core::is_grad_enabled());
/// kael_core::no_grad(|| assert!(!kael_core::is_grad_enabled()));
/// assert!(kael_core::is_grad_enabled());
/// ```
pub fn is_grad_enabled() -> bool {
    #[cfg(not(any(feature = "std", test)))]
    {
        GRAD_ENABLED.load(core::sync::atomic::Ordering::Relaxed)
    }
    #[cfg(any(feature = "std", test))]
    {
        GRAD_ENABLED.with(|g| g.get())
    }
}

/// Sets grad mode and returns the previous value.
///
/// ```
/// let prev = kael_core::set_grad_enabled(false);
/// assert!(!kael_core::is_grad_enabled());
/// kael_core::set_grad_enabled(prev);
/// ```
pub fn set_grad_enabled(on: bool) -> bool {
    #[cfg(not(any(feature = "std", test)))]
    {
        GRAD_ENABLED.swap_relaxed(on)
    }
    #[cfg(any(feature = "std", test))]
    {
        GRAD_ENABLED.with(|g| g.replace(on))
    }
}

#[cfg(not(any(feature = "std", test)))]
trait SwapRelaxed {
    fn swap_relaxed(&self, v: bool) -> bool;
}
#[cfg(not(any(feature = "std", test)))]
impl SwapRelaxed for core::sync::atomic::AtomicBool {
    // load + store rather than `swap`: thumbv6m has no atomic read-modify-write.
    fn swap_relaxed(&self, v: bool) -> bool {
        let prev = self.load(core::sync::atomic::Ordering::Relaxed);
        self.store(v, core::sync::atomic::Ordering::Relaxed);
        prev
    }
}

/// Restores the previous grad mode when dropped.
///
/// ```
/// {
///     let _g = kael_core::autograd::GradModeGuard::new(false);
///     assert!(!kael_core::is_grad_enabled());
/// }
/// assert!(kael_core::is_grad_enabled());
/// ```
pub struct GradModeGuard {
    prev: bool,
}

impl GradModeGuard {
    /// Sets grad mode to `on` until the guard drops.
    pub fn new(on: bool) -> Self {
        Self {
            prev: set_grad_enabled(on),
        }
    }
}

impl Drop for GradModeGuard {
    fn drop(&mut self) {
        set_grad_enabled(self.prev);
    }
}

/// Runs `f` with grad mode off (nothing is recorded).
///
/// ```
/// use kael_core::{Device, Tensor};
/// let w = Tensor::ones(&[2], kael_core::DType::F32, &Device::cpu())?.requires_grad_(true)?;
/// let y = kael_core::no_grad(|| w.mul_scalar(2.0))?;
/// assert!(!y.requires_grad());
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    let _g = GradModeGuard::new(false);
    f()
}

/// Runs `f` with grad mode on.
///
/// ```
/// kael_core::no_grad(|| kael_core::enable_grad(|| assert!(kael_core::is_grad_enabled())));
/// ```
pub fn enable_grad<R>(f: impl FnOnce() -> R) -> R {
    let _g = GradModeGuard::new(true);
    f()
}
