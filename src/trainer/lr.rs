//! The learning rate as a function of the optimizer step.
//!
//! The trainer asks for the rate at every step, full or predicted, so that the predictor
//! (which stores updates per unit of learning rate) scales its guesses the way the
//! optimizer would have scaled the real update.

use serde::{Deserialize, Serialize};

use super::config::ConfigError;

/// A learning-rate schedule indexed by the optimizer step (see
/// [`HybridTrainer`](super::HybridTrainer) for which steps count).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum LrSchedule {
    /// The same rate at every step.
    Constant {
        /// The rate.
        lr: f64,
    },
    /// Linear warmup to `peak`, then a cosine decay to `min_lr` at `total_steps`, and
    /// `min_lr` from then on (the nanoGPT schedule).
    WarmupCosine {
        /// The rate at the end of the warmup.
        peak: f64,
        /// Steps of linear warmup: step `s < warmup_steps` gets `peak · (s + 1) / warmup_steps`.
        warmup_steps: usize,
        /// The step at which the decay reaches `min_lr`.
        total_steps: usize,
        /// The floor of the decay.
        min_lr: f64,
    },
}

impl LrSchedule {
    /// The rate for `optimizer_step` (0-based).
    pub fn at(&self, optimizer_step: usize) -> f64 {
        match *self {
            LrSchedule::Constant { lr } => lr,
            LrSchedule::WarmupCosine { peak, warmup_steps, total_steps, min_lr } => {
                if optimizer_step < warmup_steps {
                    return peak * (optimizer_step + 1) as f64 / warmup_steps as f64;
                }
                if optimizer_step >= total_steps {
                    return min_lr;
                }
                let span = (total_steps - warmup_steps) as f64;
                let progress = (optimizer_step - warmup_steps) as f64 / span;
                let cosine = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
                min_lr + (peak - min_lr) * cosine
            }
        }
    }

    /// Steps of learning-rate warmup (0 for a constant rate): no block is predicted
    /// before the schedule's position passes them, since the rate, and so every update,
    /// is still growing.
    pub fn warmup_steps(&self) -> usize {
        match *self {
            LrSchedule::Constant { .. } => 0,
            LrSchedule::WarmupCosine { warmup_steps, .. } => warmup_steps,
        }
    }

    /// Checks the rates are positive and finite, `0 <= min_lr <= peak`, and the warmup fits
    /// in the schedule.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = |field: &'static str, value: f64| {
            if value.is_finite() && value > 0.0 {
                Ok(())
            } else {
                Err(ConfigError::LearningRate { field, value })
            }
        };
        match *self {
            LrSchedule::Constant { lr } => positive("lr", lr),
            LrSchedule::WarmupCosine { peak, warmup_steps, total_steps, min_lr } => {
                positive("peak", peak)?;
                if !(min_lr.is_finite() && (0.0..=peak).contains(&min_lr)) {
                    return Err(ConfigError::MinLr { min_lr, peak });
                }
                if total_steps == 0 {
                    return Err(ConfigError::TotalSteps(total_steps));
                }
                if warmup_steps > total_steps {
                    return Err(ConfigError::LrWarmup { warmup_steps, total_steps });
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1.0)
    }

    #[test]
    fn constant_is_constant() {
        let schedule = LrSchedule::Constant { lr: 3e-4 };
        assert_eq!(schedule.at(0), 3e-4);
        assert_eq!(schedule.at(1_000_000), 3e-4);
    }

    #[test]
    fn warmup_is_linear_up_to_the_peak() {
        let schedule = LrSchedule::WarmupCosine { peak: 1.0, warmup_steps: 4, total_steps: 14, min_lr: 0.1 };
        assert!(close(schedule.at(0), 0.25));
        assert!(close(schedule.at(1), 0.5));
        assert!(close(schedule.at(3), 1.0));
        // The decay starts at the peak.
        assert!(close(schedule.at(4), 1.0));
    }

    #[test]
    fn cosine_decays_to_the_floor_and_stays_there() {
        let schedule = LrSchedule::WarmupCosine { peak: 1.0, warmup_steps: 4, total_steps: 14, min_lr: 0.1 };
        // Half way through the decay: the mean of peak and floor.
        assert!(close(schedule.at(9), 0.55));
        assert!(close(schedule.at(14), 0.1));
        assert!(close(schedule.at(1_000), 0.1));
        let mut previous = f64::INFINITY;
        for step in 4..=14 {
            let lr = schedule.at(step);
            assert!(lr <= previous, "not decreasing at {step}");
            previous = lr;
        }
    }

    #[test]
    fn no_warmup_starts_at_the_peak() {
        let schedule = LrSchedule::WarmupCosine { peak: 2.0, warmup_steps: 0, total_steps: 10, min_lr: 0.0 };
        assert!(close(schedule.at(0), 2.0));
        assert!(close(schedule.at(10), 0.0));
    }

    #[test]
    fn warmup_as_long_as_the_schedule_drops_to_the_floor() {
        let schedule = LrSchedule::WarmupCosine { peak: 1.0, warmup_steps: 5, total_steps: 5, min_lr: 0.2 };
        assert!(close(schedule.at(4), 1.0));
        assert!(close(schedule.at(5), 0.2));
    }

    #[test]
    fn validation_rules() {
        assert_eq!(LrSchedule::Constant { lr: 1e-3 }.validate(), Ok(()));
        assert_eq!(
            LrSchedule::Constant { lr: 0.0 }.validate(),
            Err(ConfigError::LearningRate { field: "lr", value: 0.0 })
        );
        assert!(LrSchedule::Constant { lr: f64::NAN }.validate().is_err());
        let good = LrSchedule::WarmupCosine { peak: 1e-3, warmup_steps: 10, total_steps: 100, min_lr: 1e-5 };
        assert_eq!(good.validate(), Ok(()));
        assert_eq!(
            LrSchedule::WarmupCosine { peak: -1.0, warmup_steps: 0, total_steps: 1, min_lr: 0.0 }.validate(),
            Err(ConfigError::LearningRate { field: "peak", value: -1.0 })
        );
        assert_eq!(
            LrSchedule::WarmupCosine { peak: 1.0, warmup_steps: 0, total_steps: 1, min_lr: 2.0 }.validate(),
            Err(ConfigError::MinLr { min_lr: 2.0, peak: 1.0 })
        );
        assert_eq!(
            LrSchedule::WarmupCosine { peak: 1.0, warmup_steps: 0, total_steps: 0, min_lr: 0.0 }.validate(),
            Err(ConfigError::TotalSteps(0))
        );
        assert_eq!(
            LrSchedule::WarmupCosine { peak: 1.0, warmup_steps: 11, total_steps: 10, min_lr: 0.0 }.validate(),
            Err(ConfigError::LrWarmup { warmup_steps: 11, total_steps: 10 })
        );
    }

    #[test]
    fn round_trips_through_json() {
        let schedule = LrSchedule::WarmupCosine { peak: 6e-4, warmup_steps: 100, total_steps: 5000, min_lr: 6e-5 };
        let json = serde_json::to_string(&schedule).expect("serialise");
        assert!(json.contains("warmup_cosine"), "{json}");
        let back: LrSchedule = serde_json::from_str(&json).expect("deserialise");
        assert_eq!(back, schedule);
    }
}

/// An [`LrSchedule`] as Burn's [`LrScheduler`](burn::lr_scheduler::LrScheduler): each
/// `step()` returns the rate of the next optimizer step, from `at(0)` on; its record is
/// that position. For a burn-train `Learner` next to
/// [`HybridStrategy`](crate::runner::HybridStrategy), or any loop that wants Burn's
/// scheduler interface.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduledLr {
    schedule: LrSchedule,
    position: usize,
}

impl ScheduledLr {
    /// The schedule at step 0.
    pub fn new(schedule: LrSchedule) -> Self {
        Self { schedule, position: 0 }
    }

    /// The optimizer step the next `step()` gives the rate of.
    pub fn position(&self) -> usize {
        self.position
    }

    pub fn schedule(&self) -> &LrSchedule {
        &self.schedule
    }
}

impl burn::lr_scheduler::LrScheduler for ScheduledLr {
    type Record<B: burn::tensor::backend::Backend> = usize;

    fn step(&mut self) -> f64 {
        let lr = self.schedule.at(self.position);
        self.position += 1;
        lr
    }

    fn to_record<B: burn::tensor::backend::Backend>(&self) -> usize {
        self.position
    }

    fn load_record<B: burn::tensor::backend::Backend>(mut self, position: usize) -> Self {
        self.position = position;
        self
    }
}
