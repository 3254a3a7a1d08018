//! The block verifier: decides whether a predicted block earned its place.
//!
//! A block is judged on a *paired* probe: the loss of the fixed probe set (the same
//! batches every block, in eval mode), on the weights the block started from and on the
//! weights after its jump. Its gain `before − after` is set against what the block's `h`
//! full steps would have gained at the recent *pace*, measured like with like: the probe
//! set's loss is also read where each block's verdict leaves the weights, so the next
//! block's `before` gives the gain of the full steps in between, on the same batches
//! ([`ProbePace`]). Until one such stretch has been read there is nothing to compare a
//! jump with, and the block is rejected (it trains as a full step). The slope of
//! full-step losses, used before, lagged behind a steepening loss curve and mixed
//! batches whose losses spread by nats, and kept blocks that ended runs behind all-full.
//! A predicted loss is never fed in, so predictions cannot excuse themselves.

use std::collections::VecDeque;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Stretches between blocks the probe-set pace is taken over.
const PROBE_STRETCHES: usize = 4;

/// The pace of full steps on the fixed probe set: its loss where a block's verdict left
/// the weights (the *mark*), the full steps since, and the gain those steps made by the
/// next block's start. Same batches, same mode at both ends: a paired reading.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProbePace {
    mark: Option<f64>,
    full_steps: u64,
    /// (gain, full steps) of the latest stretches, oldest first.
    stretches: VecDeque<(f64, u64)>,
}

impl ProbePace {
    /// Forgets every reading: the probe set changed (a resumed run takes a new one).
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// One full step trained since the mark.
    pub fn count_full_step(&mut self) {
        self.full_steps += 1;
    }

    /// The probe set's loss at a block's start: closes the stretch since the mark.
    pub fn read_start(&mut self, loss: f64) {
        if let Some(mark) = self.mark.take() {
            if self.full_steps > 0 && loss.is_finite() {
                if self.stretches.len() == PROBE_STRETCHES {
                    self.stretches.pop_front();
                }
                self.stretches.push_back((mark - loss, self.full_steps));
            }
        }
        self.full_steps = 0;
    }

    /// The probe set's loss where the block's verdict left the weights.
    pub fn mark(&mut self, loss: f64) {
        self.mark = loss.is_finite().then_some(loss);
        self.full_steps = 0;
    }

    /// Probe-set loss gained per full step over the latest stretches (their total gain
    /// over their total steps); `None` before the first stretch.
    pub fn pace(&self) -> Option<f64> {
        let steps: u64 = self.stretches.iter().map(|&(_, steps)| steps).sum();
        (steps > 0).then(|| self.stretches.iter().map(|&(gain, _)| gain).sum::<f64>() / steps as f64)
    }
}

/// Running full-step loss, the pace on the probe set, and the gain a block must show.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LossGuard {
    running: Option<f64>,
    decay: f64,
    min_gain: f64,
    /// The pace on the probe set, once a stretch between blocks has been read.
    #[serde(default)]
    pub(crate) probe: ProbePace,
}

/// Why a predicted block was rolled back.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RollbackReason {
    /// The probe loss after the jump was NaN or infinite.
    NonFinite(f64),
    /// No stretch of full steps has been read on the probe set yet (the first block of a
    /// run, or of a new probe set): nothing to compare the jump with.
    Unpaired {
        /// Probe loss before the jump minus after it.
        gain: f64,
    },
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
            RollbackReason::Unpaired { gain } => {
                write!(f, "probe gain {gain} with no pace of full steps on the probe set yet")
            }
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
    /// `gain` over what `h` full steps would have gained at the probe pace; `None` while
    /// the pace is unknown or not positive.
    pub efficiency: Option<f64>,
    /// Why the block is rolled back, when it is.
    pub reason: Option<RollbackReason>,
}

impl LossGuard {
    /// A guard with no loss seen yet. `decay` weighs the old running value; `min_gain` is
    /// [`HybridConfig::min_gain`](crate::trainer::HybridConfig::min_gain).
    pub fn new(decay: f64, min_gain: f64) -> Self {
        Self { running: None, decay, min_gain, probe: ProbePace::default() }
    }

    /// Feeds the loss of a full step into the running loss; non-finite losses are ignored.
    pub fn observe_full(&mut self, loss: f64) {
        if !loss.is_finite() {
            return;
        }
        self.running = Some(match self.running {
            None => loss,
            Some(running) => self.decay * running + (1.0 - self.decay) * loss,
        });
    }

    /// Judges a block of `steps` predicted steps from its probe losses before and after
    /// the jump. It is kept when `after` is finite and the gain is above
    /// `min_gain · pace · steps`, the pace being the probe set's ([`ProbePace`]). While
    /// that pace is unknown the block is rejected ([`RollbackReason::Unpaired`]); while it
    /// is not positive (full steps gained nothing on the probe set) the gain must be above
    /// 0. A negative `min_gain` (which tolerates a loss) keeps any finite probe in both
    /// cases: for tests and ablations.
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
        let pace = self.probe.pace();
        let expected = pace.map(|pace| pace * steps as f64).filter(|e| *e > 0.0);
        let efficiency = expected.map(|expected| gain / expected);
        let (keep, reason) = match (pace, expected) {
            (_, Some(expected)) => {
                let required = self.min_gain * expected;
                (gain > required, RollbackReason::TooLittleGain { gain, required })
            }
            _ if self.min_gain < 0.0 => (true, RollbackReason::TooLittleGain { gain, required: f64::NEG_INFINITY }),
            (None, None) => (false, RollbackReason::Unpaired { gain }),
            (Some(_), None) => (gain > 0.0, RollbackReason::TooLittleGain { gain, required: 0.0 }),
        };
        BlockVerdict { keep, gain, efficiency, reason: (!keep).then_some(reason) }
    }

    /// The running full-step loss, once one has been seen.
    pub fn running(&self) -> Option<f64> {
        self.running
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A guard whose probe set gained `pace` per full step over one stretch.
    fn paced(pace: f64, min_gain: f64) -> LossGuard {
        let mut guard = LossGuard::new(0.9, min_gain);
        guard.probe.mark(10.0);
        for _ in 0..10 {
            guard.probe.count_full_step();
        }
        guard.probe.read_start(10.0 - 10.0 * pace);
        guard
    }

    #[test]
    fn first_loss_sets_the_running_value_then_it_decays() {
        let mut guard = LossGuard::new(0.9, 0.25);
        assert_eq!(guard.running(), None);
        guard.observe_full(2.0);
        assert_eq!(guard.running(), Some(2.0));
        guard.observe_full(1.0);
        assert!((guard.running().expect("running") - 1.9).abs() < 1e-12);
    }

    #[test]
    fn non_finite_full_losses_are_ignored() {
        let mut guard = LossGuard::new(0.9, 0.25);
        guard.observe_full(f64::NAN);
        assert_eq!(guard.running(), None);
        guard.observe_full(2.0);
        guard.observe_full(f64::INFINITY);
        assert_eq!(guard.running(), Some(2.0));
    }

    #[test]
    fn the_probe_pace_is_the_paired_gain_of_the_full_steps_between_blocks() {
        let mut pace = ProbePace::default();
        assert_eq!(pace.pace(), None);
        pace.read_start(5.0); // the first block: nothing marked yet
        assert_eq!(pace.pace(), None);
        pace.mark(4.0);
        for _ in 0..3 {
            pace.count_full_step();
        }
        pace.read_start(3.7); // 0.3 over 3 full steps
        assert!((pace.pace().expect("pace") - 0.1).abs() < 1e-12);
        pace.mark(3.0);
        pace.count_full_step();
        pace.read_start(3.1); // a stretch that lost 0.1 in 1 step
        assert!((pace.pace().expect("pace") - 0.05).abs() < 1e-12, "(0.3 - 0.1) / 4");
        // A block straight after another (no full step between) adds no stretch.
        pace.mark(3.0);
        pace.read_start(2.0);
        assert!((pace.pace().expect("pace") - 0.05).abs() < 1e-12);
        // Only the latest PROBE_STRETCHES count.
        for _ in 0..PROBE_STRETCHES {
            pace.mark(2.0);
            pace.count_full_step();
            pace.count_full_step();
            pace.read_start(1.0);
        }
        assert!((pace.pace().expect("pace") - 0.5).abs() < 1e-12);
        pace.reset();
        assert_eq!(pace.pace(), None);
    }

    #[test]
    fn a_block_must_gain_its_share_of_what_its_full_steps_would_have() {
        // Pace 0.01 per step, 4 steps: 0.04 expected, 0.01 required at min_gain 0.25.
        let guard = paced(0.01, 0.25);
        let kept = guard.judge_block(3.0, 2.98, 4);
        assert!(kept.keep && kept.reason.is_none());
        assert!((kept.efficiency.expect("efficiency") - 0.5).abs() < 1e-9);
        let thin = guard.judge_block(3.0, 2.995, 4);
        assert!(!thin.keep);
        match thin.reason {
            Some(RollbackReason::TooLittleGain { gain, required }) => {
                assert!((gain - 0.005).abs() < 1e-9 && (required - 0.01).abs() < 1e-9);
            }
            other => panic!("expected too little gain, got {other:?}"),
        }
        assert!(!guard.judge_block(3.0, 3.1, 4).keep, "a block that made the probe worse");
    }

    #[test]
    fn without_a_paired_pace_a_block_is_rejected_however_much_it_gained() {
        let unpaired = LossGuard::new(0.9, 1.0);
        let verdict = unpaired.judge_block(3.0, 1.0, 4);
        assert!(!verdict.keep && verdict.efficiency.is_none());
        assert!(matches!(verdict.reason, Some(RollbackReason::Unpaired { gain }) if (gain - 2.0).abs() < 1e-12));
        // Control: the same probe with a paired pace is judged on it, and kept.
        assert!(paced(0.01, 1.0).judge_block(3.0, 1.0, 4).keep);
    }

    #[test]
    fn without_a_positive_pace_a_block_must_still_lower_the_probe() {
        // Full steps made the probe set worse: any gain beats them.
        let rising = paced(-0.01, 1.0);
        let kept = rising.judge_block(2.0, 1.999, 4);
        assert!(kept.keep && kept.efficiency.is_none());
        assert!(!rising.judge_block(2.0, 2.0, 4).keep, "no gain is not kept");
    }

    #[test]
    fn non_finite_probes_are_rolled_back_whatever_the_setting() {
        for min_gain in [0.25, -1e9] {
            let guard = paced(0.01, min_gain);
            let verdict = guard.judge_block(3.0, f64::NAN, 4);
            assert!(!verdict.keep && matches!(verdict.reason, Some(RollbackReason::NonFinite(_))));
        }
        let permissive = paced(0.01, -1e9);
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
        let reason = RollbackReason::Unpaired { gain: 0.5 };
        assert_eq!(reason.to_string(), "probe gain 0.5 with no pace of full steps on the probe set yet");
    }
}
