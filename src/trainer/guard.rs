//! The loss guard: decides whether a predicted step made things worse.
//!
//! The reference is a running average of full-step losses only. A predicted step's loss is
//! never fed back in, so a run of slightly-worse predictions cannot drag the reference up
//! and excuse itself.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Running full-step loss and the tolerance a predicted step is held to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LossGuard {
    running: Option<f64>,
    decay: f64,
    tolerance: f64,
}

/// Why a predicted step was rejected.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RollbackReason {
    /// The loss was NaN or infinite.
    NonFinite(f64),
    /// The loss was above the limit set by the running loss.
    Worse {
        /// The predicted step's loss.
        loss: f64,
        /// The running full-step loss.
        running: f64,
        /// The largest loss that would have been accepted.
        limit: f64,
    },
    /// Closing the block early, the caller's probe loss on its weights was not below the
    /// probe loss on the weights the block started from.
    ProbeNotBetter {
        /// The probe loss on the block's weights.
        after: f64,
        /// The probe loss on the weights the block started from.
        before: f64,
    },
}

impl fmt::Display for RollbackReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RollbackReason::NonFinite(loss) => write!(f, "non-finite loss {loss}"),
            RollbackReason::Worse {
                loss,
                running,
                limit,
            } => {
                write!(
                    f,
                    "loss {loss} above the limit {limit} (running loss {running})"
                )
            }
            RollbackReason::ProbeNotBetter { after, before } => {
                write!(f, "probe loss {after} not below {before} at the block's start")
            }
        }
    }
}

/// What to do with a predicted step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GuardVerdict {
    /// Keep the predicted weights.
    Accept,
    /// Restore the weights saved at the start of the block.
    RollBack(RollbackReason),
}

impl LossGuard {
    /// A guard with no loss seen yet. `decay` weighs the old running value, `tolerance` is
    /// the fraction a predicted loss may exceed it by.
    pub fn new(decay: f64, tolerance: f64) -> Self {
        Self {
            running: None,
            decay,
            tolerance,
        }
    }

    /// Feeds a full step's loss into the running average; non-finite losses are ignored.
    pub fn observe_full(&mut self, loss: f64) {
        if !loss.is_finite() {
            return;
        }
        self.running = Some(match self.running {
            None => loss,
            Some(running) => self.decay * running + (1.0 - self.decay) * loss,
        });
    }

    /// Judges a predicted step's loss against `running + |running| · tolerance` (that is
    /// `running · (1 + tolerance)` for the usual positive loss). Before any full loss has
    /// been seen only non-finite losses are rejected.
    pub fn check_predict(&self, loss: f64) -> GuardVerdict {
        if !loss.is_finite() {
            return GuardVerdict::RollBack(RollbackReason::NonFinite(loss));
        }
        match self.limit() {
            Some(limit) if loss > limit => GuardVerdict::RollBack(RollbackReason::Worse {
                loss,
                running: self.running.unwrap_or(limit),
                limit,
            }),
            _ => GuardVerdict::Accept,
        }
    }

    /// The running full-step loss, once one has been seen.
    pub fn running(&self) -> Option<f64> {
        self.running
    }

    /// The largest predicted loss that is accepted now.
    pub fn limit(&self) -> Option<f64> {
        self.running
            .map(|running| running + running.abs() * self.tolerance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_loss_sets_the_running_value_then_it_decays() {
        let mut guard = LossGuard::new(0.9, 0.1);
        assert_eq!(guard.running(), None);
        guard.observe_full(2.0);
        assert_eq!(guard.running(), Some(2.0));
        guard.observe_full(1.0);
        assert!((guard.running().expect("running") - 1.9).abs() < 1e-12);
    }

    #[test]
    fn non_finite_full_losses_are_ignored() {
        let mut guard = LossGuard::new(0.9, 0.1);
        guard.observe_full(f64::NAN);
        assert_eq!(guard.running(), None);
        guard.observe_full(2.0);
        guard.observe_full(f64::INFINITY);
        assert_eq!(guard.running(), Some(2.0));
    }

    #[test]
    fn accepts_within_tolerance_and_rejects_above() {
        let mut guard = LossGuard::new(0.9, 0.1);
        guard.observe_full(2.0);
        assert_eq!(guard.check_predict(2.2), GuardVerdict::Accept);
        assert_eq!(guard.check_predict(1.0), GuardVerdict::Accept);
        match guard.check_predict(2.3) {
            GuardVerdict::RollBack(RollbackReason::Worse {
                loss,
                running,
                limit,
            }) => {
                assert_eq!(loss, 2.3);
                assert_eq!(running, 2.0);
                assert!((limit - 2.2).abs() < 1e-12);
            }
            other => panic!("expected a rollback, got {other:?}"),
        }
    }

    #[test]
    fn rejects_non_finite_predicted_losses_even_before_a_full_loss() {
        let guard = LossGuard::new(0.9, 0.1);
        assert_eq!(guard.check_predict(5.0), GuardVerdict::Accept);
        assert!(matches!(
            guard.check_predict(f64::NAN),
            GuardVerdict::RollBack(RollbackReason::NonFinite(_))
        ));
        assert_eq!(
            guard.check_predict(f64::INFINITY),
            GuardVerdict::RollBack(RollbackReason::NonFinite(f64::INFINITY))
        );
    }

    #[test]
    fn predicted_losses_never_move_the_reference() {
        let mut guard = LossGuard::new(0.5, 0.1);
        guard.observe_full(1.0);
        for _ in 0..10 {
            let _ = guard.check_predict(1.05);
        }
        assert_eq!(guard.running(), Some(1.0));
    }

    #[test]
    fn negative_losses_get_a_tolerance_band_too() {
        let mut guard = LossGuard::new(0.9, 0.1);
        guard.observe_full(-2.0);
        assert_eq!(guard.check_predict(-1.85), GuardVerdict::Accept);
        assert!(matches!(
            guard.check_predict(-1.7),
            GuardVerdict::RollBack(_)
        ));
    }

    #[test]
    fn reasons_read_well() {
        let reason = RollbackReason::Worse {
            loss: 3.0,
            running: 2.0,
            limit: 2.2,
        };
        assert_eq!(
            reason.to_string(),
            "loss 3 above the limit 2.2 (running loss 2)"
        );
    }
}
