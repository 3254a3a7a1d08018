//! The block verifier: decides whether a predicted block earned its place.
//!
//! A block is judged on a *paired* probe: the loss of the same batch, in the same (eval)
//! mode, on the weights the block started from and on the weights after its jump. Its
//! gain `before − after` is set against what the block's `h` full steps would have gained
//! at the recent *pace*: the least-squares slope of the last full-step losses against
//! their schedule position. Full-step losses are the only input to the pace and the
//! running loss; a predicted loss is never fed in, so predictions cannot excuse
//! themselves.

use std::collections::VecDeque;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Full-step losses the pace is fitted to.
const PACE_WINDOW: usize = 64;
/// Fewest full-step losses a pace is fitted to.
const PACE_MIN_POINTS: usize = 3;

/// Running full-step loss, the recent pace, and the gain a block must show.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LossGuard {
    running: Option<f64>,
    decay: f64,
    min_gain: f64,
    /// (schedule position, loss) of the latest full steps, oldest first.
    #[serde(default)]
    recent: VecDeque<(u64, f64)>,
}

/// Why a predicted block was rolled back.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RollbackReason {
    /// The probe loss after the jump was NaN or infinite.
    NonFinite(f64),
    /// The probe loss did not fall by more than the block had to gain.
    TooLittleGain {
        /// Probe loss before the jump minus after it.
        gain: f64,
        /// The least gain that would have kept the block.
        required: f64,
    },
}

impl fmt::Display for RollbackReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RollbackReason::NonFinite(loss) => write!(f, "non-finite probe loss {loss}"),
            RollbackReason::TooLittleGain { gain, required } => {
                write!(f, "probe gain {gain} not above the required {required}")
            }
        }
    }
}

/// What a block's probe showed, and what to do with it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockVerdict {
    /// Whether the block's weights are kept.
    pub keep: bool,
    /// Probe loss before the jump minus after it (NaN when the after-loss was not finite).
    pub gain: f64,
    /// `gain` over what `h` full steps would have gained at the recent pace; `None` while
    /// the pace is unknown or not positive.
    pub efficiency: Option<f64>,
    /// Why the block is rolled back, when it is.
    pub reason: Option<RollbackReason>,
}

impl LossGuard {
    /// A guard with no loss seen yet. `decay` weighs the old running value; `min_gain` is
    /// [`HybridConfig::min_gain`](crate::trainer::HybridConfig::min_gain).
    pub fn new(decay: f64, min_gain: f64) -> Self {
        Self { running: None, decay, min_gain, recent: VecDeque::new() }
    }

    /// Feeds the loss of a full step taken at schedule position `position`; non-finite
    /// losses are ignored.
    pub fn observe_full(&mut self, position: usize, loss: f64) {
        if !loss.is_finite() {
            return;
        }
        self.running = Some(match self.running {
            None => loss,
            Some(running) => self.decay * running + (1.0 - self.decay) * loss,
        });
        if self.recent.len() == PACE_WINDOW {
            self.recent.pop_front();
        }
        self.recent.push_back((position as u64, loss));
    }

    /// Loss the recent full steps gained per schedule step: minus the least-squares slope
    /// of their losses against their positions. `None` before three losses at two
    /// positions at least.
    pub fn pace(&self) -> Option<f64> {
        if self.recent.len() < PACE_MIN_POINTS {
            return None;
        }
        let n = self.recent.len() as f64;
        let mean_x = self.recent.iter().map(|&(x, _)| x as f64).sum::<f64>() / n;
        let mean_y = self.recent.iter().map(|&(_, y)| y).sum::<f64>() / n;
        let (mut sxy, mut sxx) = (0.0, 0.0);
        for &(x, y) in &self.recent {
            let dx = x as f64 - mean_x;
            sxy += dx * (y - mean_y);
            sxx += dx * dx;
        }
        (sxx > 0.0).then(|| -sxy / sxx)
    }

    /// Judges a block of `steps` predicted steps from its probe losses before and after
    /// the jump. It is kept when `after` is finite and the gain is above
    /// `min_gain · pace · steps`. While the pace is unknown or not positive, the gain must
    /// be above 0 for `min_gain ≥ 0`, and any finite probe is kept for a negative
    /// `min_gain` (which tolerates a loss).
    pub fn judge_block(&self, before: f64, after: f64, steps: usize) -> BlockVerdict {
        if !after.is_finite() {
            return BlockVerdict {
                keep: false,
                gain: f64::NAN,
                efficiency: None,
                reason: Some(RollbackReason::NonFinite(after)),
            };
        }
        let gain = before - after;
        let expected = self.pace().map(|pace| pace * steps as f64).filter(|e| *e > 0.0);
        let efficiency = expected.map(|expected| gain / expected);
        let required = match expected {
            Some(expected) => self.min_gain * expected,
            None if self.min_gain < 0.0 => f64::NEG_INFINITY,
            None => 0.0,
        };
        let keep = gain > required;
        BlockVerdict {
            keep,
            gain,
            efficiency,
            reason: (!keep).then_some(RollbackReason::TooLittleGain { gain, required }),
        }
    }

    /// The running full-step loss, once one has been seen.
    pub fn running(&self) -> Option<f64> {
        self.running
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A guard fed losses falling by `pace` per step from 10 at positions 0..n.
    fn falling(pace: f64, n: usize, min_gain: f64) -> LossGuard {
        let mut guard = LossGuard::new(0.9, min_gain);
        for step in 0..n {
            guard.observe_full(step, 10.0 - pace * step as f64);
        }
        guard
    }

    #[test]
    fn first_loss_sets_the_running_value_then_it_decays() {
        let mut guard = LossGuard::new(0.9, 0.25);
        assert_eq!(guard.running(), None);
        guard.observe_full(0, 2.0);
        assert_eq!(guard.running(), Some(2.0));
        guard.observe_full(1, 1.0);
        assert!((guard.running().expect("running") - 1.9).abs() < 1e-12);
    }

    #[test]
    fn non_finite_full_losses_are_ignored() {
        let mut guard = LossGuard::new(0.9, 0.25);
        guard.observe_full(0, f64::NAN);
        assert_eq!(guard.running(), None);
        guard.observe_full(1, 2.0);
        guard.observe_full(2, f64::INFINITY);
        assert_eq!(guard.running(), Some(2.0));
        assert_eq!(guard.pace(), None, "one finite loss gives no pace");
    }

    #[test]
    fn the_pace_is_the_fitted_loss_drop_per_step_over_the_window() {
        let guard = falling(0.01, 10, 0.25);
        assert!((guard.pace().expect("pace") - 0.01).abs() < 1e-12);
        // Only the last PACE_WINDOW losses count: a steep start is forgotten.
        let mut guard = falling(1.0, 10, 0.25);
        for step in 10..10 + PACE_WINDOW {
            guard.observe_full(step, 5.0 - 0.002 * step as f64);
        }
        assert!((guard.pace().expect("pace") - 0.002).abs() < 1e-9);
        // Losses at one position only: no slope.
        let mut flat = LossGuard::new(0.9, 0.25);
        for _ in 0..5 {
            flat.observe_full(7, 1.0);
        }
        assert_eq!(flat.pace(), None);
    }

    #[test]
    fn a_block_must_gain_its_share_of_what_its_full_steps_would_have() {
        // Pace 0.01 per step, 4 steps: 0.04 expected, 0.01 required at min_gain 0.25.
        let guard = falling(0.01, 10, 0.25);
        let kept = guard.judge_block(3.0, 2.98, 4);
        assert!(kept.keep && kept.reason.is_none());
        assert!((kept.efficiency.expect("efficiency") - 0.5).abs() < 1e-9);
        let thin = guard.judge_block(3.0, 2.995, 4);
        assert!(!thin.keep);
        match thin.reason {
            Some(RollbackReason::TooLittleGain { gain, required }) => {
                assert!((gain - 0.005).abs() < 1e-9 && (required - 0.01).abs() < 1e-12);
            }
            other => panic!("expected too little gain, got {other:?}"),
        }
        assert!(!guard.judge_block(3.0, 3.1, 4).keep, "a block that made the probe worse");
    }

    #[test]
    fn without_a_positive_pace_a_block_must_still_lower_the_probe() {
        let rising = {
            let mut guard = LossGuard::new(0.9, 0.25);
            for step in 0..5 {
                guard.observe_full(step, 1.0 + 0.1 * step as f64);
            }
            guard
        };
        let unknown = LossGuard::new(0.9, 0.25);
        for guard in [rising, unknown] {
            let kept = guard.judge_block(2.0, 1.999, 4);
            assert!(kept.keep && kept.efficiency.is_none());
            assert!(!guard.judge_block(2.0, 2.0, 4).keep, "no gain is not kept");
        }
    }

    #[test]
    fn non_finite_probes_are_rolled_back_whatever_the_setting() {
        for min_gain in [0.25, -1e9] {
            let guard = falling(0.01, 10, min_gain);
            let verdict = guard.judge_block(3.0, f64::NAN, 4);
            assert!(!verdict.keep && matches!(verdict.reason, Some(RollbackReason::NonFinite(_))));
        }
        let permissive = falling(0.01, 10, -1e9);
        assert!(permissive.judge_block(3.0, 30.0, 4).keep, "a very negative min_gain keeps every finite block");
        assert!(
            LossGuard::new(0.9, -1.0).judge_block(3.0, 30.0, 4).keep,
            "and so does any negative one without a pace"
        );
    }

    #[test]
    fn reasons_read_well() {
        let reason = RollbackReason::TooLittleGain { gain: 0.005, required: 0.01 };
        assert_eq!(reason.to_string(), "probe gain 0.005 not above the required 0.01");
    }
}
