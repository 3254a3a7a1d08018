//! The knobs of hybrid training, their defaults and the rules they must obey.

use serde::{Deserialize, Serialize};

/// Where the weights saved at the start of a predict block are kept until the block is
/// accepted or rolled back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SnapshotStore {
    /// Keep the old parameter tensors alive on the device: no copy and no host sync, but
    /// one extra set of parameters in device memory for the length of a block.
    #[default]
    Device,
    /// Read the parameters back to host memory: no device memory held, at the cost of a
    /// device-to-host copy (and sync) at the start of every block and a host-to-device
    /// copy on rollback.
    Host,
}

/// The element type the predictor keeps its per-parameter state in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PredictorPrecision {
    /// The parameters' own float type.
    #[default]
    Full,
    /// IEEE half precision, cast back to the parameters' type whenever it is used. Halves
    /// the predictor's memory; needs a backend that supports `f16` tensors (CUDA does;
    /// `Flex` does, `NdArray` does not, wgpu only on adapters with `shader-f16`).
    Half,
}

/// Everything that shapes the phase schedule, the predictor and the guard.
///
/// Build it from [`HybridConfig::default`] and the `with_*` methods; [`validate`]
/// (called by the trainer) checks every rule and names the field that breaks one.
///
/// [`validate`]: HybridConfig::validate
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HybridConfig {
    /// Full steps before the first prediction: the predictor needs real updates to
    /// average, and early updates change fastest. At least 1. Default 20.
    pub warmup_steps: usize,
    /// Plain full steps between predict blocks, after the correct steps. At least 1.
    /// Default 2.
    pub full_steps: usize,
    /// Full steps right after a predict block; the first of them calibrates the predictor
    /// against the real update. At least 1. Default 1.
    pub correct_steps: usize,
    /// Predict steps in the first block. Default 4.
    pub initial_horizon: usize,
    /// Fewest predict steps in a block (after a rollback the horizon drops to this).
    /// Default 2: a block's two probe forwards are paid once, whatever its length.
    pub min_horizon: usize,
    /// Most predict steps in a block. Default 16.
    pub max_horizon: usize,
    /// Weight of the old average in the predictor's exponential moving average, in
    /// `[0, 1)`. Default 0.9.
    pub ema_decay: f64,
    /// Multiplier applied to the predicted update at first. Positive, finite. Default 1.0.
    pub initial_scale: f64,
    /// Smallest multiplier a rollback may set. Default 0.1.
    pub min_scale: f64,
    /// Largest multiplier an efficient block may grow the scale to. Default 1.0: jumps
    /// longer than the predicted displacement passed their probe and still ended runs
    /// behind all-full (docs/trainer.md).
    pub max_scale: f64,
    /// A predict block starts only when the confidence (the running verified efficiency of
    /// blocks) is at least this, in `[0, 1]`; below it prediction is off until a re-probe
    /// (see [`reprobe_steps`](Self::reprobe_steps)). Default 0.25.
    pub min_confidence: f64,
    /// Confidence before any block has been verified, in `[0, 1]`. Default 0.5.
    pub initial_confidence: f64,
    /// A kept block whose efficiency (its verified gain over what its `h` full steps would
    /// have gained) is at least this doubles the horizon and grows the scale; a lower one
    /// halves the horizon. Finite. Default 1.0.
    pub hold_efficiency: f64,
    /// The least verified gain a block must show to be kept, as a fraction of what its `h`
    /// full steps would have gained at the pace of full steps on the probe set. A block is
    /// kept only if its probe loss is finite and fell by more than `min_gain ×` that
    /// expected gain; while no pace has been read yet (the first block) it is rejected,
    /// and while the pace is not positive it must fall by more than 0. A negative value
    /// tolerates a loss (and keeps every finite block, with a pace or without): for tests
    /// and ablations. Finite. Default 1.0: a kept block must beat the full steps it
    /// replaces (below 1, hybrid ends behind all-full at equal steps by design).
    pub min_gain: f64,
    /// Weight of the old value in the running full-step loss, in `[0, 1)`. Default 0.9.
    pub running_loss_decay: f64,
    /// Full steps forced after a rollback (0 still forces the one full step that follows).
    /// Default 10.
    pub cooldown_steps: usize,
    /// With prediction off (confidence below `min_confidence`), a block of `min_horizon`
    /// steps is tried anyway after this many full steps, and its efficiency replaces the
    /// confidence; 0 never re-probes. Default 50.
    pub reprobe_steps: usize,
    /// Where the rollback snapshot lives. Default [`SnapshotStore::Device`].
    pub snapshot: SnapshotStore,
    /// Element type of the predictor's state. Default [`PredictorPrecision::Full`].
    pub predictor_precision: PredictorPrecision,
    /// Seed of the run, stored in checkpoints so a resumed run can re-seed its data order.
    /// Default 0.
    pub seed: u64,
}

impl Default for HybridConfig {
    fn default() -> Self {
        Self {
            warmup_steps: 20,
            full_steps: 2,
            correct_steps: 1,
            initial_horizon: 4,
            min_horizon: 2,
            max_horizon: 16,
            ema_decay: 0.9,
            initial_scale: 1.0,
            min_scale: 0.1,
            max_scale: 1.0,
            min_confidence: 0.25,
            initial_confidence: 0.5,
            hold_efficiency: 1.0,
            min_gain: 1.0,
            running_loss_decay: 0.9,
            cooldown_steps: 10,
            reprobe_steps: 50,
            snapshot: SnapshotStore::Device,
            predictor_precision: PredictorPrecision::Full,
            seed: 0,
        }
    }
}

/// A rule of [`HybridConfig`] or [`LrSchedule`](super::LrSchedule) that a value breaks.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// `warmup_steps` is 0.
    #[error("warmup_steps must be at least 1, got {0}")]
    WarmupSteps(usize),
    /// `full_steps` is 0.
    #[error("full_steps must be at least 1, got {0}")]
    FullSteps(usize),
    /// `correct_steps` is 0.
    #[error("correct_steps must be at least 1, got {0}")]
    CorrectSteps(usize),
    /// `min_horizon` is 0.
    #[error("min_horizon must be at least 1, got {0}")]
    MinHorizon(usize),
    /// The horizons are out of order.
    #[error("need min_horizon <= initial_horizon <= max_horizon, got {min} <= {initial} <= {max}")]
    HorizonOrder {
        /// `min_horizon`.
        min: usize,
        /// `initial_horizon`.
        initial: usize,
        /// `max_horizon`.
        max: usize,
    },
    /// `ema_decay` is outside `[0, 1)`.
    #[error("ema_decay must be in [0, 1), got {0}")]
    EmaDecay(f64),
    /// A scale is not positive and finite.
    #[error("{field} must be positive and finite, got {value}")]
    Scale {
        /// The field's name.
        field: &'static str,
        /// Its value.
        value: f64,
    },
    /// The scales are out of order.
    #[error("need min_scale <= initial_scale <= max_scale, got {min} <= {initial} <= {max}")]
    ScaleOrder {
        /// `min_scale`.
        min: f64,
        /// `initial_scale`.
        initial: f64,
        /// `max_scale`.
        max: f64,
    },
    /// `min_confidence` is outside `[0, 1]`.
    #[error("min_confidence must be in [0, 1], got {0}")]
    MinConfidence(f64),
    /// `initial_confidence` is outside `[0, 1]`.
    #[error("initial_confidence must be in [0, 1], got {0}")]
    InitialConfidence(f64),
    /// `hold_efficiency` is not finite.
    #[error("hold_efficiency must be finite, got {0}")]
    HoldEfficiency(f64),
    /// `min_gain` is not finite.
    #[error("min_gain must be finite, got {0}")]
    MinGain(f64),
    /// `running_loss_decay` is outside `[0, 1)`.
    #[error("running_loss_decay must be in [0, 1), got {0}")]
    RunningLossDecay(f64),
    /// A learning rate is not positive and finite.
    #[error("learning rate {field} must be positive and finite, got {value}")]
    LearningRate {
        /// The field's name (`lr` or `peak`).
        field: &'static str,
        /// Its value.
        value: f64,
    },
    /// `min_lr` is negative, not finite, or above `peak`.
    #[error("min_lr must be finite and in [0, peak = {peak}], got {min_lr}")]
    MinLr {
        /// `min_lr`.
        min_lr: f64,
        /// `peak`.
        peak: f64,
    },
    /// `total_steps` is 0.
    #[error("total_steps must be at least 1, got {0}")]
    TotalSteps(usize),
    /// The warmup is longer than the whole schedule.
    #[error("warmup_steps ({warmup_steps}) must not exceed total_steps ({total_steps})")]
    LrWarmup {
        /// `warmup_steps` of the schedule.
        warmup_steps: usize,
        /// `total_steps` of the schedule.
        total_steps: usize,
    },
    /// `accumulation_steps` is 0.
    #[error("accumulation_steps must be at least 1, got {0}")]
    AccumulationSteps(usize),
    /// `loss_every` is 0.
    #[error("loss_every must be at least 1, got {0}")]
    LossEvery(usize),
    /// A trim policy of every 0 steps.
    #[error("a trim every N steps needs N >= 1")]
    TrimEvery,
    /// A pool read during steps every 0 ms.
    #[error("sample_pool_ms must be at least 1, got 0")]
    SamplePool,
    /// A loss-scaling setting is out of range.
    #[error("loss scaling: {field} is out of range, got {value}")]
    LossScale {
        /// The field's name.
        field: &'static str,
        /// Its value.
        value: f64,
    },
    /// A selection setting is out of range: `keep` outside `(0, 1]`, `beta` negative or not
    /// finite, or `until_step` not after `from_step`.
    #[error("selection: {field} is out of range ({value}): keep in (0, 1], beta >= 0, until_step after from_step")]
    Selection {
        /// The field.
        field: &'static str,
        /// Its value.
        value: f64,
    },
    /// Per-example feedback (`with_example_feedback`, InfoBatch) with a run it cannot
    /// follow: one that predicts (a predicted step trains on no example), selects, or
    /// trains in mixed precision.
    #[error("per-example feedback (InfoBatch) needs all-full steps on the plain path; this run {0}")]
    ExampleFeedback(&'static str),
    /// The weight average's `decay` is outside `[0, 1)`.
    #[error("the weight average's decay must be in [0, 1), got {0}")]
    AverageDecay(f64),
    /// The weight average's `pull` is outside `[0, 1]`.
    #[error("the weight average's pull must be in [0, 1], got {0}")]
    AveragePull(f64),
}

fn in_unit_open(value: f64) -> bool {
    (0.0..1.0).contains(&value)
}

fn in_unit_closed(value: f64) -> bool {
    (0.0..=1.0).contains(&value)
}

fn positive_finite(value: f64) -> bool {
    value.is_finite() && value > 0.0
}

impl HybridConfig {
    /// Checks every rule; the first broken one is returned.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.warmup_steps < 1 {
            return Err(ConfigError::WarmupSteps(self.warmup_steps));
        }
        if self.full_steps < 1 {
            return Err(ConfigError::FullSteps(self.full_steps));
        }
        if self.correct_steps < 1 {
            return Err(ConfigError::CorrectSteps(self.correct_steps));
        }
        if self.min_horizon < 1 {
            return Err(ConfigError::MinHorizon(self.min_horizon));
        }
        if !(self.min_horizon <= self.initial_horizon && self.initial_horizon <= self.max_horizon) {
            return Err(ConfigError::HorizonOrder {
                min: self.min_horizon,
                initial: self.initial_horizon,
                max: self.max_horizon,
            });
        }
        if !in_unit_open(self.ema_decay) {
            return Err(ConfigError::EmaDecay(self.ema_decay));
        }
        for (field, value) in
            [("initial_scale", self.initial_scale), ("min_scale", self.min_scale), ("max_scale", self.max_scale)]
        {
            if !positive_finite(value) {
                return Err(ConfigError::Scale { field, value });
            }
        }
        if !(self.min_scale <= self.initial_scale && self.initial_scale <= self.max_scale) {
            return Err(ConfigError::ScaleOrder {
                min: self.min_scale,
                initial: self.initial_scale,
                max: self.max_scale,
            });
        }
        if !in_unit_closed(self.min_confidence) {
            return Err(ConfigError::MinConfidence(self.min_confidence));
        }
        if !in_unit_closed(self.initial_confidence) {
            return Err(ConfigError::InitialConfidence(self.initial_confidence));
        }
        if !self.hold_efficiency.is_finite() {
            return Err(ConfigError::HoldEfficiency(self.hold_efficiency));
        }
        if !self.min_gain.is_finite() {
            return Err(ConfigError::MinGain(self.min_gain));
        }
        if !in_unit_open(self.running_loss_decay) {
            return Err(ConfigError::RunningLossDecay(self.running_loss_decay));
        }
        Ok(())
    }

    /// The all-full baseline: the warmup never ends, so every step runs forward, backward
    /// and the optimizer, and nothing is predicted; the trainer then skips recording
    /// updates for the predictor, so the baseline pays nothing for it. Records and
    /// checkpoints work as in a hybrid run, which makes the two directly comparable.
    pub fn all_full() -> Self {
        Self { warmup_steps: usize::MAX, ..Self::default() }
    }

    /// Whether this configuration never predicts (see [`all_full`](Self::all_full)).
    pub fn is_all_full(&self) -> bool {
        self.warmup_steps == usize::MAX
    }

    /// Sets [`warmup_steps`](Self::warmup_steps).
    pub fn with_warmup_steps(mut self, value: usize) -> Self {
        self.warmup_steps = value;
        self
    }

    /// Sets [`full_steps`](Self::full_steps).
    pub fn with_full_steps(mut self, value: usize) -> Self {
        self.full_steps = value;
        self
    }

    /// Sets [`correct_steps`](Self::correct_steps).
    pub fn with_correct_steps(mut self, value: usize) -> Self {
        self.correct_steps = value;
        self
    }

    /// Sets [`initial_horizon`](Self::initial_horizon).
    pub fn with_initial_horizon(mut self, value: usize) -> Self {
        self.initial_horizon = value;
        self
    }

    /// Sets [`min_horizon`](Self::min_horizon).
    pub fn with_min_horizon(mut self, value: usize) -> Self {
        self.min_horizon = value;
        self
    }

    /// Sets [`max_horizon`](Self::max_horizon).
    pub fn with_max_horizon(mut self, value: usize) -> Self {
        self.max_horizon = value;
        self
    }

    /// Sets [`ema_decay`](Self::ema_decay).
    pub fn with_ema_decay(mut self, value: f64) -> Self {
        self.ema_decay = value;
        self
    }

    /// Sets [`initial_scale`](Self::initial_scale).
    pub fn with_initial_scale(mut self, value: f64) -> Self {
        self.initial_scale = value;
        self
    }

    /// Sets [`min_scale`](Self::min_scale).
    pub fn with_min_scale(mut self, value: f64) -> Self {
        self.min_scale = value;
        self
    }

    /// Sets [`max_scale`](Self::max_scale).
    pub fn with_max_scale(mut self, value: f64) -> Self {
        self.max_scale = value;
        self
    }

    /// Sets [`min_confidence`](Self::min_confidence).
    pub fn with_min_confidence(mut self, value: f64) -> Self {
        self.min_confidence = value;
        self
    }

    /// Sets [`initial_confidence`](Self::initial_confidence).
    pub fn with_initial_confidence(mut self, value: f64) -> Self {
        self.initial_confidence = value;
        self
    }

    /// Sets [`hold_efficiency`](Self::hold_efficiency).
    pub fn with_hold_efficiency(mut self, value: f64) -> Self {
        self.hold_efficiency = value;
        self
    }

    /// Sets [`min_gain`](Self::min_gain).
    pub fn with_min_gain(mut self, value: f64) -> Self {
        self.min_gain = value;
        self
    }

    /// Sets [`running_loss_decay`](Self::running_loss_decay).
    pub fn with_running_loss_decay(mut self, value: f64) -> Self {
        self.running_loss_decay = value;
        self
    }

    /// Sets [`cooldown_steps`](Self::cooldown_steps).
    pub fn with_cooldown_steps(mut self, value: usize) -> Self {
        self.cooldown_steps = value;
        self
    }

    /// Sets [`reprobe_steps`](Self::reprobe_steps).
    pub fn with_reprobe_steps(mut self, value: usize) -> Self {
        self.reprobe_steps = value;
        self
    }

    /// Sets [`snapshot`](Self::snapshot).
    pub fn with_snapshot(mut self, value: SnapshotStore) -> Self {
        self.snapshot = value;
        self
    }

    /// Sets [`predictor_precision`](Self::predictor_precision).
    pub fn with_predictor_precision(mut self, value: PredictorPrecision) -> Self {
        self.predictor_precision = value;
        self
    }

    /// Sets [`seed`](Self::seed).
    pub fn with_seed(mut self, value: u64) -> Self {
        self.seed = value;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert_eq!(HybridConfig::default().validate(), Ok(()));
    }

    #[test]
    fn zero_step_counts_are_rejected() {
        let base = HybridConfig::default();
        assert_eq!(base.clone().with_warmup_steps(0).validate(), Err(ConfigError::WarmupSteps(0)));
        assert_eq!(base.clone().with_full_steps(0).validate(), Err(ConfigError::FullSteps(0)));
        assert_eq!(base.clone().with_correct_steps(0).validate(), Err(ConfigError::CorrectSteps(0)));
        assert_eq!(base.with_cooldown_steps(0).validate(), Ok(()));
    }

    #[test]
    fn horizons_must_be_ordered() {
        let base = HybridConfig::default();
        assert_eq!(
            base.clone().with_min_horizon(0).with_initial_horizon(0).validate(),
            Err(ConfigError::MinHorizon(0))
        );
        assert_eq!(
            base.clone().with_initial_horizon(17).validate(),
            Err(ConfigError::HorizonOrder { min: 2, initial: 17, max: 16 })
        );
        assert_eq!(
            base.with_min_horizon(4).with_initial_horizon(3).validate(),
            Err(ConfigError::HorizonOrder { min: 4, initial: 3, max: 16 })
        );
    }

    #[test]
    fn decays_must_be_in_the_half_open_unit_interval() {
        let base = HybridConfig::default();
        assert_eq!(base.clone().with_ema_decay(1.0).validate(), Err(ConfigError::EmaDecay(1.0)));
        assert_eq!(base.clone().with_ema_decay(-0.1).validate(), Err(ConfigError::EmaDecay(-0.1)));
        assert_eq!(base.clone().with_ema_decay(0.0).validate(), Ok(()));
        assert_eq!(base.with_running_loss_decay(1.0).validate(), Err(ConfigError::RunningLossDecay(1.0)));
    }

    #[test]
    fn scales_must_be_positive_and_ordered() {
        let base = HybridConfig::default();
        assert_eq!(
            base.clone().with_min_scale(0.0).validate(),
            Err(ConfigError::Scale { field: "min_scale", value: 0.0 })
        );
        assert!(matches!(
            base.clone().with_initial_scale(f64::NAN).validate(),
            Err(ConfigError::Scale { field: "initial_scale", .. })
        ));
        assert_eq!(
            base.with_initial_scale(2.0).validate(),
            Err(ConfigError::ScaleOrder { min: 0.1, initial: 2.0, max: 1.0 })
        );
    }

    #[test]
    fn confidences_efficiency_and_gain_are_bounded() {
        let base = HybridConfig::default();
        assert_eq!(base.clone().with_min_confidence(1.5).validate(), Err(ConfigError::MinConfidence(1.5)));
        assert_eq!(base.clone().with_initial_confidence(-0.5).validate(), Err(ConfigError::InitialConfidence(-0.5)));
        assert!(matches!(base.clone().with_hold_efficiency(f64::NAN).validate(), Err(ConfigError::HoldEfficiency(_))));
        assert!(matches!(base.clone().with_min_gain(f64::NAN).validate(), Err(ConfigError::MinGain(_))));
        assert!(matches!(base.clone().with_min_gain(f64::INFINITY).validate(), Err(ConfigError::MinGain(_))));
        assert!(base.with_min_gain(-1e9).validate().is_ok());
    }

    #[test]
    fn messages_name_the_field_and_the_value() {
        let message = HybridConfig::default().with_ema_decay(1.0).validate().unwrap_err().to_string();
        assert!(message.contains("ema_decay") && message.contains('1'), "{message}");
    }

    #[test]
    fn round_trips_through_json() {
        let config = HybridConfig::default()
            .with_snapshot(SnapshotStore::Host)
            .with_predictor_precision(PredictorPrecision::Half)
            .with_seed(7);
        let json = serde_json::to_string(&config).expect("serialise");
        assert!(json.contains("\"host\"") && json.contains("\"half\""), "{json}");
        let back: HybridConfig = serde_json::from_str(&json).expect("deserialise");
        assert_eq!(back, config);
    }
}
