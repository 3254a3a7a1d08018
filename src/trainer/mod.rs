//! Hybrid training: full steps alternate with predicted ones.
//!
//! A *full* step is forward + backward + optimizer on the autodiff model. A *predict
//! block* of `h` steps skips the backward pass: its first step moves every parameter by
//! the block's whole predicted displacement (`w ← w + s·Σlr·m`, where `m` is a moving
//! average of past updates per unit learning rate) and verifies the jump with two forward
//! passes on the inner, non-autodiff model (`model.valid()`), on the same batch before and
//! after; its other steps run nothing. No autodiff graph is ever built that nobody would
//! consume. The jump is kept only if the probe loss fell by a share of what `h` full steps
//! would have gained at the recent pace; otherwise the starting weights come back exactly.
//! Blocks that keep gaining too little turn prediction off (the confidence falls below
//! `min_confidence`), and a short re-probe block tries again later.
//!
//! ```text
//!             warmup_steps full steps (and no block during learning-rate warmup)
//!   ┌────────┐
//!   │ Warmup │──────────────┐
//!   └────────┘              ▼
//!                    ┌─────────────┐  confidence < min_confidence,
//!            ┌──────▶│    gate     │  or cooldown running
//!            │       └─────────────┘───────────────────────────┐
//!            │              │ confidence ≥ min_confidence,     │
//!            │              │ or a re-probe is due             ▼
//!            │       ┌─────────────┐  too little gain ┌────────────────┐
//!            │       │ Predict × h │─────────────────▶│ Full × cooldown│──┐
//!            │       └─────────────┘  restore start   └────────────────┘  │
//!            │              │ jump kept (confidence, h ← min_horizon      │
//!            │              ▼  scale, h from efficiency)                  │
//!            │       ┌─────────────┐                                      │
//!            │       │ Correct × c │                                      │
//!            │       └─────────────┘                                      │
//!            │              ▼                                             │
//!            │       ┌─────────────┐                                      │
//!            └───────│  Full × f   │◀─────────────────────────────────────┘
//!                    └─────────────┘   (the gate is asked at the end of
//!                                       every Full run)
//! ```
//!
//! Memory the prediction costs, on top of the model and optimizer: the predictor keeps one
//! tensor per parameter (f32, or f16 with [`PredictorPrecision::Half`]); a block's first
//! step holds one copy of the parameters as its rollback snapshot (or none on the device
//! with [`SnapshotStore::Host`]) and its micro-batches for the second probe; a full step
//! holds the pre-update parameters until it has computed the update.
//!
//! How a model plugs in: implement Burn's [`TrainStep`](burn::train::TrainStep) for the
//! autodiff model, [`InferenceStep`](burn::train::InferenceStep) for its inner module,
//! [`HybridBatch`] for the batch, and have both outputs implement [`StepLoss`] (Burn's
//! classification, regression and sequence outputs already do). `docs/trainer.md` walks
//! through an example.

mod accumulation;
mod averaging;
mod checkpoint;
mod config;
mod error;
mod execution;
mod hybrid;
mod loss_window;
mod lr;
mod params;
mod precision;
mod predict;
mod replica;
mod reports;
mod selection;
mod step;
mod steps;

#[cfg(test)]
mod execution_tests;
#[cfg(test)]
mod precision_tests;
#[cfg(test)]
pub(crate) mod tests;

// The public surface: what a caller builds, configures, reads and implements.
pub use averaging::{AverageConfig, AverageState, AverageVerdict, Weights};
pub use config::{ConfigError, HybridConfig, PredictorPrecision, SnapshotStore};
pub use error::TrainerError;
pub use execution::{ExecutionConfig, TrimPolicy};
pub use hybrid::HybridTrainer;
pub use lr::{LrSchedule, ScheduledLr};
pub use params::ParamUpdates;
pub use precision::mixed::{cast_params, compute_copy, copy_state_back, master_gradients, MasterGradients};
pub use precision::{LossScaleConfig, LossScaler, Precision, PrecisionConfig};
pub use predict::phase::Phase;
pub use predict::predictor::UpdatePredictor;
pub use replica::Replica;
pub use reports::statistics::TrainerStatistics;
pub use reports::step_report::{SelectionCount, StepReport};
pub use selection::{ExampleFeedback, ExampleLosses, SelectableBatch, SelectionConfig, SelectionRule};
pub use step::{ForwardLoss, HybridBatch, HybridModel, StepLoss};
