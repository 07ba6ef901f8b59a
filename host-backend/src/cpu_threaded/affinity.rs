//! Which CPU a thread runs on, and steering a pool worker off its caller's
//! CPU (NOTE [Workers leave the caller's CPU] in `pool`). Linux only;
//! elsewhere (and under Miri) every function is a no-op that says so.

/// A thread's id for the affinity calls (Linux: its TID), 0 when unknown.
pub(super) fn thread_id() -> i32 {
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        // SAFETY: `gettid` takes no arguments and cannot fail.
        unsafe { libc::gettid() }
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    0
}

/// The CPU the calling thread runs on, `usize::MAX` where unknown.
pub(super) fn current_cpu() -> usize {
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        // SAFETY: `sched_getcpu` takes no arguments and only reads the
        // calling thread's state.
        let cpu = unsafe { libc::sched_getcpu() };
        if let Ok(cpu) = usize::try_from(cpu) {
            return cpu;
        }
    }
    usize::MAX
}

/// The CPUs a thread may run on.
#[derive(Clone, Copy)]
pub(super) struct CpuSet {
    #[cfg(all(target_os = "linux", not(miri)))]
    set: libc::cpu_set_t,
}

impl CpuSet {
    /// The CPU set of thread `tid` (0: the calling thread), `None` where
    /// it cannot be read.
    pub(super) fn of(tid: i32) -> Option<CpuSet> {
        #[cfg(all(target_os = "linux", not(miri)))]
        {
            // SAFETY: an all-zero `cpu_set_t` is the empty set (a bit array).
            let mut set: libc::cpu_set_t = unsafe { core::mem::zeroed() };
            // SAFETY: `set` is a valid `cpu_set_t` of the size passed; the
            // call only writes it.
            let ok = unsafe {
                libc::sched_getaffinity(tid, core::mem::size_of::<libc::cpu_set_t>(), &mut set)
            } == 0;
            ok.then_some(CpuSet { set })
        }
        #[cfg(not(all(target_os = "linux", not(miri))))]
        {
            let _ = tid;
            None
        }
    }

    /// This set without `cpu`, or `None` when nothing would be left.
    pub(super) fn without(mut self, cpu: usize) -> Option<CpuSet> {
        #[cfg(all(target_os = "linux", not(miri)))]
        {
            if cpu >= libc::CPU_SETSIZE as usize {
                return None;
            }
            // SAFETY: `cpu < CPU_SETSIZE`, so the bit is inside the set;
            // both calls only touch `self.set`.
            let left = unsafe {
                libc::CPU_CLR(cpu, &mut self.set);
                libc::CPU_COUNT(&self.set)
            };
            (left > 0).then_some(self)
        }
        #[cfg(not(all(target_os = "linux", not(miri))))]
        {
            let _ = cpu;
            None
        }
    }

    /// Whether the set holds `cpu`.
    #[cfg(test)]
    pub(super) fn contains(&self, cpu: usize) -> bool {
        #[cfg(all(target_os = "linux", not(miri)))]
        {
            // SAFETY: the bound is checked first; the call only reads.
            cpu < libc::CPU_SETSIZE as usize && unsafe { libc::CPU_ISSET(cpu, &self.set) }
        }
        #[cfg(not(all(target_os = "linux", not(miri))))]
        {
            let _ = cpu;
            false
        }
    }

    /// Restricts thread `tid` (0: the calling thread) to this set; the
    /// kernel moves it at once when it runs outside it. A failure (the
    /// thread is gone, or the set is refused) leaves it where it is.
    pub(super) fn apply(&self, tid: i32) {
        #[cfg(all(target_os = "linux", not(miri)))]
        // SAFETY: `self.set` is a valid, non-empty `cpu_set_t` of the size
        // passed; the call only reads it. Changing a thread's CPU set only
        // changes where it runs.
        unsafe {
            libc::sched_setaffinity(tid, core::mem::size_of::<libc::cpu_set_t>(), &self.set);
        }
        #[cfg(not(all(target_os = "linux", not(miri))))]
        let _ = tid;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(all(target_os = "linux", not(miri)))]
    fn a_thread_restricted_to_other_cpus_moves_and_can_be_given_its_set_back() {
        let Some(all) = CpuSet::of(0) else {
            panic!("the calling thread's CPU set is readable on Linux")
        };
        let here = current_cpu();
        assert!(all.contains(here), "a thread runs inside its own set");
        std::thread::spawn(move || {
            let tid = thread_id();
            assert!(tid > 0);
            let Some(others) = all.without(here) else {
                // One CPU only: nothing to move to, and `without` says so.
                assert!(all.without(here).is_none());
                return;
            };
            others.apply(tid);
            assert_ne!(current_cpu(), here, "moved off the excluded CPU at once");
            assert!(!CpuSet::of(0).is_some_and(|s| s.contains(here)));
            all.apply(0);
            assert!(CpuSet::of(0).is_some_and(|s| s.contains(here)));
        })
        .join()
        .unwrap_or_else(|_| panic!("the affinity thread panicked"));
    }

    #[test]
    fn the_functions_answer_without_failing_on_every_platform() {
        // Miri and non-Linux targets: the no-op forms.
        let cpu = current_cpu();
        if let Some(set) = CpuSet::of(0) {
            assert!(set.contains(cpu));
            set.apply(0);
        }
        let _ = thread_id();
    }
}
