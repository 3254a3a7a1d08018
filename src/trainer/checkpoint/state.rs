//! The trainer's books: everything about a run that is not a tensor. The trainer keeps
//! them in one [`TrainerState`], a new run and a resumed one alike, and a checkpoint
//! stores it as it is (`trainer.bin`, and `trainer.json` for people).

use serde::{Deserialize, Serialize};

use crate::trainer::averaging::AverageState;
use crate::trainer::config::HybridConfig;
use crate::trainer::lr::LrSchedule;
use crate::trainer::precision::LossScaler;
use crate::trainer::predict::guard::LossGuard;
use crate::trainer::predict::phase::PhaseSchedule;
use crate::trainer::reports::statistics::TrainerStatistics;

/// Version of the `trainer.json` layout. 2: predict blocks verified by a paired probe
/// (`min_gain`, `hold_efficiency`, `reprobe_steps`; the guard keeps the recent pace).
pub const STATE_FORMAT: u32 = 2;

/// Everything about the trainer that is not a tensor, as stored in `trainer.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainerState {
    /// Layout version ([`STATE_FORMAT`]).
    pub format: u32,
    /// Trainer steps taken.
    pub step: usize,
    /// Optimizer steps taken (the learning-rate schedule's position).
    pub optimizer_step: usize,
    /// Where the phase cycle is.
    pub schedule: PhaseSchedule,
    /// The multiplier on predicted updates.
    pub scale: f64,
    /// The confidence in the predictor.
    pub confidence: f64,
    /// Whether the next correct step still has to calibrate against the last block.
    pub awaiting_calibration: bool,
    /// The running full-step loss and its tolerance.
    pub guard: LossGuard,
    /// The run's configuration.
    pub config: HybridConfig,
    /// The learning-rate schedule.
    pub lr: LrSchedule,
    /// The run's seed (also in `config`), at the top level for tools reading the file.
    pub seed: u64,
    /// Totals so far.
    pub statistics: TrainerStatistics,
    /// The loss scaler's state, when the run scales its loss (restored by
    /// `with_precision` after resuming, so the scale does not start over).
    #[serde(default)]
    pub loss_scaler: Option<LossScaler>,
    /// The weight average's configuration and count, where the run keeps one (its tensors
    /// are in `average.bin`).
    #[serde(default)]
    pub average: Option<AverageState>,
}

impl TrainerState {
    /// The books of a run at step 0 (warmup first).
    pub(crate) fn new(config: HybridConfig, lr: LrSchedule) -> Self {
        Self {
            format: STATE_FORMAT,
            step: 0,
            optimizer_step: 0,
            schedule: PhaseSchedule::new(&config),
            scale: config.initial_scale,
            confidence: config.initial_confidence,
            awaiting_calibration: false,
            guard: LossGuard::new(config.running_loss_decay, config.min_gain),
            seed: config.seed,
            config,
            lr,
            statistics: TrainerStatistics::default(),
            loss_scaler: None,
            average: None,
        }
    }
}
