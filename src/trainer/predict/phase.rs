//! The phase state machine: which kind of step comes next.
//!
//! Pure bookkeeping, no tensors, so every transition is unit-tested here. The trainer
//! runs one step of [`PhaseSchedule::current`], then calls [`PhaseSchedule::advance`]
//! (or [`PhaseSchedule::rollback`] when the guard rejected a predicted step).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::trainer::config::HybridConfig;

/// The kind of a training step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// A full step before any prediction, filling the predictor.
    Warmup,
    /// A full step between predict blocks.
    Full,
    /// A predicted step: apply the predicted update, forward only, no backward.
    Predict,
    /// A full step right after a predict block; the first one calibrates the predictor.
    Correct,
}

impl Phase {
    /// Whether the step runs forward, backward and the optimizer.
    pub fn is_full(self) -> bool {
        !matches!(self, Phase::Predict)
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Warmup => "warmup",
            Phase::Full => "full",
            Phase::Predict => "predict",
            Phase::Correct => "correct",
        })
    }
}

/// Where the run is in the cycle
/// `Warmup×w → (Predict×h | Full×f) → Correct×c → Full×f → (Predict×h | Full×f) → …`,
/// and the current predict horizon `h`.
///
/// A predict block starts only when the confidence handed to [`advance`](Self::advance)
/// is at least `min_confidence` and no rollback cooldown is running; otherwise another
/// `Full×f` run follows and the gate is asked again at its end. With the gate closed by a
/// low confidence, a *re-probe* block of `min_horizon` steps opens after `reprobe_steps`
/// full steps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseSchedule {
    phase: Phase,
    /// Steps left in the current phase, counting the current one (always at least 1).
    left: usize,
    /// Steps the current phase started with.
    #[serde(default)]
    length: usize,
    horizon: usize,
    cooldown_left: usize,
    /// Full steps taken in a row with the gate closed by a low confidence.
    #[serde(default)]
    closed_for: usize,
    /// Whether the current (or last) block was a re-probe.
    #[serde(default)]
    reprobe: bool,
}

impl PhaseSchedule {
    /// The schedule of a new run: `warmup_steps` warmup steps come first.
    pub fn new(config: &HybridConfig) -> Self {
        let warmup = config.warmup_steps.max(1);
        Self {
            phase: Phase::Warmup,
            left: warmup,
            length: warmup,
            horizon: config.initial_horizon.clamp(config.min_horizon, config.max_horizon),
            cooldown_left: 0,
            closed_for: 0,
            reprobe: false,
        }
    }

    /// The phase of the next step.
    pub fn current(&self) -> Phase {
        self.phase
    }

    /// Steps left in the current phase, counting the next one.
    pub fn steps_left(&self) -> usize {
        self.left
    }

    /// Whether the next step is the last one of its phase.
    pub fn is_last_of_phase(&self) -> bool {
        self.left == 1
    }

    /// Whether the next step is the first one of its phase.
    pub fn is_first_of_phase(&self) -> bool {
        self.left == self.length
    }

    /// Whether the current predict block (or the last one) was opened as a re-probe,
    /// with prediction off.
    pub fn is_reprobe(&self) -> bool {
        self.reprobe
    }

    /// With prediction off (the gate closed by a low confidence), the full steps left
    /// before the re-probe; `None` while the gate is open, or when no re-probe will come
    /// (`reprobe_steps` 0).
    pub fn full_steps_until_reprobe(&self, config: &HybridConfig, confidence: f64) -> Option<usize> {
        (confidence < config.min_confidence && config.reprobe_steps > 0)
            .then(|| config.reprobe_steps.saturating_sub(self.closed_for))
    }

    /// Whether prediction is off for good: the gate closed and no re-probe will come.
    pub fn is_off_for_good(&self, config: &HybridConfig, confidence: f64) -> bool {
        confidence < config.min_confidence && config.reprobe_steps == 0
    }

    /// Predict steps the next block will have.
    pub fn horizon(&self) -> usize {
        self.horizon
    }

    /// Moves past the step just taken to the phase of the next one.
    ///
    /// `confidence` is only read when a predict block could start; NaN (no predictor yet,
    /// or the learning rate still warming up) never opens the gate.
    pub fn advance(&mut self, config: &HybridConfig, confidence: f64) {
        if self.phase == Phase::Full {
            self.cooldown_left = self.cooldown_left.saturating_sub(1);
            if confidence < config.min_confidence {
                self.closed_for += 1;
            }
        }
        self.left = self.left.saturating_sub(1);
        if self.left > 0 {
            return;
        }
        match self.phase {
            Phase::Warmup | Phase::Full => {
                let reprobe_due = config.reprobe_steps > 0
                    && self.closed_for >= config.reprobe_steps
                    && confidence < config.min_confidence;
                if self.cooldown_left == 0 && confidence >= config.min_confidence {
                    self.open_block(false, self.horizon);
                } else if self.cooldown_left == 0 && reprobe_due {
                    self.horizon = config.min_horizon;
                    self.open_block(true, config.min_horizon);
                } else {
                    self.enter(Phase::Full, config.full_steps);
                }
            }
            Phase::Predict => self.enter(Phase::Correct, config.correct_steps),
            Phase::Correct => self.enter(Phase::Full, config.full_steps),
        }
    }

    /// After a rejected predicted step: full steps for the cooldown (at least one) come
    /// next, and the next block is as short as allowed.
    ///
    /// Replaces [`advance`](Self::advance) for that step.
    pub fn rollback(&mut self, config: &HybridConfig) {
        self.enter(Phase::Full, config.cooldown_steps);
        self.cooldown_left = config.cooldown_steps;
        self.horizon = config.min_horizon;
    }

    /// A block that could not be judged (no pace on the probe set yet) trains as a full
    /// step and is followed by `max(cooldown_steps, 1)` more, which measure that pace;
    /// unlike [`rollback`](Self::rollback) the horizon stays, since the block said nothing
    /// against it.
    pub fn postpone(&mut self, config: &HybridConfig) {
        let horizon = self.horizon;
        self.rollback(config);
        self.horizon = horizon;
    }

    /// Adjusts the horizon from a kept block's verified efficiency: at least
    /// `hold_efficiency` doubles it, anything less (NaN included) halves it; always within
    /// `[min_horizon, max_horizon]`.
    pub fn calibrate(&mut self, config: &HybridConfig, efficiency: f64) {
        let horizon =
            if efficiency >= config.hold_efficiency { self.horizon.saturating_mul(2) } else { self.horizon / 2 };
        self.horizon = horizon.clamp(config.min_horizon, config.max_horizon);
    }

    fn open_block(&mut self, reprobe: bool, steps: usize) {
        self.closed_for = 0;
        self.reprobe = reprobe;
        self.enter(Phase::Predict, steps);
    }

    fn enter(&mut self, phase: Phase, steps: usize) {
        self.phase = phase;
        self.left = steps.max(1);
        self.length = self.left;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trainer::Phase::{Correct as C, Full as F, Predict as P, Warmup as W};

    fn config() -> HybridConfig {
        HybridConfig::default()
            .with_warmup_steps(3)
            .with_full_steps(2)
            .with_correct_steps(1)
            .with_initial_horizon(2)
            .with_min_horizon(1)
            .with_max_horizon(4)
            .with_cooldown_steps(3)
            .with_min_confidence(0.3)
            .with_hold_efficiency(0.5)
    }

    /// The phases of the next `steps` steps at a fixed confidence.
    fn phases(schedule: &mut PhaseSchedule, config: &HybridConfig, steps: usize, confidence: f64) -> Vec<Phase> {
        (0..steps)
            .map(|_| {
                let phase = schedule.current();
                schedule.advance(config, confidence);
                phase
            })
            .collect()
    }

    #[test]
    fn cycles_through_the_phases() {
        let config = config();
        let mut schedule = PhaseSchedule::new(&config);
        assert_eq!(phases(&mut schedule, &config, 13, 1.0), vec![W, W, W, P, P, C, F, F, P, P, C, F, F]);
    }

    #[test]
    fn the_all_full_baseline_never_predicts() {
        let config = HybridConfig::all_full();
        assert!(config.is_all_full() && config.validate().is_ok());
        let mut schedule = PhaseSchedule::new(&config);
        assert!(phases(&mut schedule, &config, 500, 1.0).iter().all(|p| *p == W));
    }

    #[test]
    fn low_confidence_keeps_full_steps() {
        let config = config();
        let mut schedule = PhaseSchedule::new(&config);
        assert_eq!(phases(&mut schedule, &config, 9, 0.1), vec![W, W, W, F, F, F, F, F, F]);
        // The gate is asked again at the end of each full run.
        assert_eq!(phases(&mut schedule, &config, 3, 0.3), vec![F, F, P]);
    }

    #[test]
    fn nan_confidence_never_opens_the_gate() {
        let config = config().with_min_confidence(0.0);
        let mut schedule = PhaseSchedule::new(&config);
        assert_eq!(phases(&mut schedule, &config, 6, f64::NAN), vec![W, W, W, F, F, F]);
    }

    #[test]
    fn rollback_forces_a_cooldown_and_the_shortest_block() {
        let config = config();
        let mut schedule = PhaseSchedule::new(&config);
        assert_eq!(phases(&mut schedule, &config, 4, 1.0), vec![W, W, W, P]);
        assert_eq!(schedule.current(), P);
        schedule.rollback(&config);
        assert_eq!(schedule.current(), F);
        assert_eq!(schedule.horizon(), 1);
        assert_eq!(schedule.cooldown_left, 3);
        assert_eq!(phases(&mut schedule, &config, 6, 1.0), vec![F, F, F, P, C, F]);
        assert_eq!(schedule.cooldown_left, 0);
    }

    #[test]
    fn a_postponed_block_keeps_its_horizon_and_waits_out_the_cooldown() {
        let config = config();
        let mut schedule = PhaseSchedule::new(&config);
        phases(&mut schedule, &config, 4, 1.0);
        let horizon = schedule.horizon();
        assert!(horizon > config.min_horizon);
        schedule.postpone(&config);
        assert_eq!(schedule.current(), F);
        assert_eq!(schedule.horizon(), horizon, "control: rollback sets min_horizon (test above)");
        assert_eq!(phases(&mut schedule, &config, 4, 1.0), vec![F, F, F, P]);
    }

    #[test]
    fn the_steps_until_a_reprobe_count_down_while_the_gate_is_closed() {
        let config = config().with_reprobe_steps(4);
        let mut schedule = PhaseSchedule::new(&config);
        phases(&mut schedule, &config, 3, 0.1); // warmup: not counted
        assert_eq!(schedule.full_steps_until_reprobe(&config, 0.1), Some(4));
        phases(&mut schedule, &config, 3, 0.1);
        assert_eq!(schedule.full_steps_until_reprobe(&config, 0.1), Some(1));
        assert_eq!(schedule.full_steps_until_reprobe(&config, 1.0), None, "the gate is open");
        assert!(!schedule.is_off_for_good(&config, 0.1));
        let never = config.with_reprobe_steps(0);
        assert_eq!(schedule.full_steps_until_reprobe(&never, 0.1), None);
        assert!(schedule.is_off_for_good(&never, 0.1));
    }

    #[test]
    fn rollback_without_cooldown_still_takes_one_full_step() {
        let config = config().with_cooldown_steps(0);
        let mut schedule = PhaseSchedule::new(&config);
        phases(&mut schedule, &config, 3, 1.0);
        schedule.rollback(&config);
        assert_eq!(phases(&mut schedule, &config, 3, 1.0), vec![F, P, C]);
    }

    #[test]
    fn with_prediction_off_a_shortest_block_reprobes_after_reprobe_steps() {
        let config = config().with_reprobe_steps(4);
        let mut schedule = PhaseSchedule::new(&config);
        // Warmup (not counted), then four full steps with the gate closed, then a re-probe.
        assert_eq!(phases(&mut schedule, &config, 10, 0.1), vec![W, W, W, F, F, F, F, P, C, F]);
        assert!(schedule.is_reprobe());
        assert_eq!(schedule.horizon(), 1, "a re-probe block is as short as allowed");
        // The count starts again after the block; an open gate is an ordinary block.
        assert_eq!(phases(&mut schedule, &config, 5, 0.1), vec![F, F, F, P, C]);
        assert!(schedule.is_reprobe());
        assert_eq!(phases(&mut schedule, &config, 3, 0.3), vec![F, F, P]);
        assert!(!schedule.is_reprobe());
        // NaN (no predictor, or learning-rate warmup) never re-probes; 0 never re-probes.
        let mut waiting = PhaseSchedule::new(&config);
        assert!(phases(&mut waiting, &config, 20, f64::NAN).iter().all(|p| *p != P));
        let never = config.with_reprobe_steps(0);
        let mut off = PhaseSchedule::new(&never);
        assert!(phases(&mut off, &never, 40, 0.1).iter().all(|p| *p != P));
    }

    #[test]
    fn reports_the_first_step_of_a_phase() {
        let config = config();
        let mut schedule = PhaseSchedule::new(&config);
        phases(&mut schedule, &config, 3, 1.0);
        assert_eq!(schedule.current(), P);
        assert!(schedule.is_first_of_phase());
        schedule.advance(&config, 1.0);
        assert!(!schedule.is_first_of_phase() && schedule.current() == P);
    }

    #[test]
    fn calibration_doubles_and_halves_the_horizon_within_bounds() {
        let config = config();
        let mut schedule = PhaseSchedule::new(&config);
        assert_eq!(schedule.horizon(), 2);
        schedule.calibrate(&config, 0.9);
        assert_eq!(schedule.horizon(), 4);
        schedule.calibrate(&config, 0.5);
        assert_eq!(schedule.horizon(), 4, "capped at max_horizon");
        schedule.calibrate(&config, 0.2);
        assert_eq!(schedule.horizon(), 2);
        schedule.calibrate(&config, -1.0);
        assert_eq!(schedule.horizon(), 1);
        schedule.calibrate(&config, f64::NAN);
        assert_eq!(schedule.horizon(), 1, "floored at min_horizon");
    }

    #[test]
    fn the_block_length_follows_the_calibrated_horizon() {
        let config = config();
        let mut schedule = PhaseSchedule::new(&config);
        phases(&mut schedule, &config, 2, 1.0);
        // The horizon is read when the block starts.
        schedule.calibrate(&config, 1.0);
        assert_eq!(phases(&mut schedule, &config, 6, 1.0), vec![W, P, P, P, P, C]);
    }

    #[test]
    fn reports_the_last_step_of_a_phase() {
        let config = config();
        let mut schedule = PhaseSchedule::new(&config);
        assert_eq!(schedule.steps_left(), 3);
        assert!(!schedule.is_last_of_phase());
        schedule.advance(&config, 1.0);
        schedule.advance(&config, 1.0);
        assert!(schedule.is_last_of_phase());
    }

    #[test]
    fn phases_display_and_serialise_in_lowercase() {
        assert_eq!(Phase::Predict.to_string(), "predict");
        assert_eq!(serde_json::to_string(&Phase::Correct).expect("serialise"), "\"correct\"");
        assert!(Phase::Warmup.is_full() && !Phase::Predict.is_full());
    }

    #[test]
    fn round_trips_through_json() {
        let config = config();
        let mut schedule = PhaseSchedule::new(&config);
        phases(&mut schedule, &config, 4, 1.0);
        let json = serde_json::to_string(&schedule).expect("serialise");
        let back: PhaseSchedule = serde_json::from_str(&json).expect("deserialise");
        assert_eq!(back, schedule);
    }
}
