//! Stopping a run cleanly: a request, set by a signal (Ctrl-C, a cluster's preemption) or
//! by the caller, that the [`Runner`](super::Runner) reads after every step.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A request to stop a run after its current step. Clones share the request.
///
/// The runner reads it after each step (and that step's validation and checkpoint): if it
/// is set, the runner saves a checkpoint of that step (where the run has a directory and
/// the step was not saved already) and returns [`RunError::Stopped`](super::RunError::Stopped).
/// The step in progress is finished first, so nothing trained is lost.
#[derive(Clone, Debug, Default)]
pub struct StopRequest {
    /// The signal that asked (or [`StopRequest::BY_CALLER`]); 0 while nobody has.
    signal: Arc<AtomicUsize>,
}

impl StopRequest {
    /// What [`requested`](Self::requested) says after [`request`](Self::request) (no signal).
    pub const BY_CALLER: i32 = -1;

    /// A request nobody has made yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A request that SIGINT (Ctrl-C) and SIGTERM make. A second signal of either kind
    /// while the first is still being honoured ends the process at once, with exit code
    /// 128 + the signal, as an unhandled signal would (so a second Ctrl-C still stops a
    /// run stuck in a long step). Fails only where the operating system refuses the
    /// handler. On platforms without POSIX signals the request is only the caller's.
    pub fn on_signals() -> std::io::Result<Self> {
        let stop = Self::new();
        #[cfg(unix)]
        {
            use signal_hook::consts::{SIGINT, SIGTERM};
            use std::sync::atomic::AtomicBool;
            let asked = Arc::new(AtomicBool::new(false));
            for signal in [SIGINT, SIGTERM] {
                // Registered first, so it sees the flag as the earlier signal left it.
                signal_hook::flag::register_conditional_shutdown(signal, 128 + signal, Arc::clone(&asked))?;
                signal_hook::flag::register(signal, Arc::clone(&asked))?;
                signal_hook::flag::register_usize(signal, Arc::clone(&stop.signal), signal as usize)?;
            }
        }
        Ok(stop)
    }

    /// Asks the run to stop after its current step.
    pub fn request(&self) {
        let _ = self.signal.compare_exchange(0, usize::MAX, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Whether a stop was asked for: the signal's number, [`BY_CALLER`](Self::BY_CALLER)
    /// for [`request`](Self::request), `None` while nobody has asked.
    pub fn requested(&self) -> Option<i32> {
        match self.signal.load(Ordering::SeqCst) {
            0 => None,
            usize::MAX => Some(Self::BY_CALLER),
            signal => Some(signal as i32),
        }
    }
}

/// A signal's usual name ("SIGTERM"), or its number.
pub(super) fn signal_name(signal: i32) -> String {
    match signal {
        StopRequest::BY_CALLER => "the caller".into(),
        2 => "SIGINT".into(),
        15 => "SIGTERM".into(),
        1 => "SIGHUP".into(),
        other => format!("signal {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_seen_by_every_clone() {
        let stop = StopRequest::new();
        let clone = stop.clone();
        assert_eq!(clone.requested(), None);
        stop.request();
        assert_eq!(clone.requested(), Some(StopRequest::BY_CALLER));
    }

    #[cfg(unix)]
    #[test]
    fn a_signal_sets_the_request_and_names_itself() {
        let stop = StopRequest::on_signals().unwrap();
        assert_eq!(stop.requested(), None);
        signal_hook::low_level::raise(signal_hook::consts::SIGTERM).unwrap();
        assert_eq!(stop.requested(), Some(15));
        assert_eq!(signal_name(15), "SIGTERM");
    }
}
