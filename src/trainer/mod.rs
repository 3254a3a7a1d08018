//! Hybrid training: full steps alternate with predicted ones.
//!
//! A *full* step is forward + backward + optimizer on the autodiff model. A *predicted*
//! step skips the backward pass: it moves every parameter by a predicted update
//! (`w ← w + s·lr·m`, where `m` is a moving average of past updates per unit learning
//! rate) and runs one forward pass on the inner, non-autodiff model (`model.valid()`), so
//! no autodiff graph is ever built that nobody would consume. The forward's loss is the
//! guard's evidence: a predicted step that makes the loss worse than the running full-step
//! loss by more than a tolerance restores the weights saved when its block started.
//!
//! ```text
//!             warmup_steps full steps
//!   ┌────────┐
//!   │ Warmup │──────────────┐
//!   └────────┘              ▼
//!                    ┌─────────────┐  confidence < min_confidence,
//!            ┌──────▶│    gate     │  or cooldown running
//!            │       └─────────────┘───────────────────────────┐
//!            │              │ confidence ≥ min_confidence      │
//!            │              ▼                                  ▼
//!            │       ┌─────────────┐  guard rejects   ┌────────────────┐
//!            │       │ Predict × h │─────────────────▶│ Full × cooldown│──┐
//!            │       └─────────────┘  restore block   └────────────────┘  │
//!            │              │ block accepted          h ← min_horizon     │
//!            │              ▼                                             │
//!            │       ┌─────────────┐  first step calibrates scale,        │
//!            │       │ Correct × c │  confidence and horizon h            │
//!            │       └─────────────┘                                      │
//!            │              ▼                                             │
//!            │       ┌─────────────┐                                      │
//!            └───────│  Full × f   │◀─────────────────────────────────────┘
//!                    └─────────────┘   (the gate is asked at the end of
//!                                       every Full run)
//! ```
//!
//! Memory the prediction costs, on top of the model and optimizer: the predictor keeps one
//! tensor per parameter (f32, or f16 with [`PredictorPrecision::Half`]); a predict block
//! holds one copy of the parameters as its rollback snapshot (or none on the device with
//! [`SnapshotStore::Host`]); a full step holds the pre-update parameters until it has
//! computed the update.
//!
//! How a model plugs in: implement Burn's [`TrainStep`](burn::train::TrainStep) for the
//! autodiff model, [`InferenceStep`](burn::train::InferenceStep) for its inner module,
//! [`HybridBatch`] for the batch, and have both outputs implement [`StepLoss`] (Burn's
//! classification, regression and sequence outputs already do). `docs/trainer.md` walks
//! through an example.

mod accumulation;
mod calibration;
mod checkpoint;
mod config;
mod error;
mod execution;
mod guard;
mod hybrid;
mod loss_window;
mod lr;
mod mixed;
mod params;
mod persist;
mod phase;
mod precision;
mod predictor;
mod record;
mod snapshot;
mod statistics;
mod step;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod execution_tests;
#[cfg(test)]
mod precision_tests;

pub use accumulation::MicroBatchGradients;
pub use calibration::{after_rollback, blended_confidence, calibrated_scale};
pub use checkpoint::{
    checkpoint_name, load_latest, save as save_checkpoint_files, CheckpointPayload, TrainerState,
    DEFAULT_KEEP, STATE_FORMAT,
};
pub use config::{ConfigError, HybridConfig, PredictorPrecision, SnapshotStore};
pub use error::TrainerError;
pub use execution::{ExecutionConfig, TrimPolicy};
pub use guard::{GuardVerdict, LossGuard, RollbackReason};
pub use hybrid::{BlockEnd, HybridTrainer};
pub use loss_window::LossWindow;
pub use lr::LrSchedule;
pub use mixed::{compute_copy, master_gradients, CastParams, MasterGradients};
pub use params::{
    alignment, apply_update, collect, differences, Alignment, FlatParam, ParamTensors, ParamUpdates,
};
pub use phase::{Phase, PhaseSchedule};
pub use precision::{LossScaleConfig, LossScaler, Precision, PrecisionConfig, ScaledStep};
pub use predictor::{PredictorEntry, PredictorState, UpdatePredictor};
pub use record::{JsonlWriter, StepRecord};
pub use snapshot::Snapshot;
pub use statistics::TrainerStatistics;
pub use step::{ForwardLoss, HybridBatch, StepLoss};
