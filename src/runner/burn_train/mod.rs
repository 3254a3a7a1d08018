//! `HybridTrainer` inside burn-train: a [`HybridStrategy`] for Burn's
//! [`SupervisedTraining`](burn::train::SupervisedTraining), so that a Burn user keeps the
//! dashboard, metrics, early stopping and checkpointer they know, and trains with full and
//! predicted steps.
//!
//! ```text
//! SupervisedTraining::new(dir, train_loader, valid_loader)
//!     .metrics((LossMetric::new(),))
//!     .metric_train_numeric(telemetry.pool_memory())   // leanburn's step telemetry
//!     .with_training_strategy(TrainingStrategy::Custom(Arc::new(strategy)))
//!     .launch(Learner::new(model, optimizer, ScheduledLr::new(schedule)))
//! ```
//!
//! What differs from burn-train's own loop (see `docs/trainer.md`, "In burn-train"):
//! - The strategy owns the optimizer and the learning-rate schedule it trains with, since
//!   a `Learner` does not give them out; the `Learner`'s are what Burn's checkpointer saves.
//! - Train metrics see full steps only: a predicted step has no `TrainStep` output.
//! - Gradient accumulation takes the mean of `grad_accumulation` micro-batches and advances
//!   the learning rate once per optimizer step.
//! - A step with a non-finite loss changes nothing and is skipped (counted, logged).

mod hybrid;
mod telemetry;

#[cfg(test)]
mod tests;

pub use hybrid::HybridStrategy;
pub use telemetry::{PoolMemoryMetric, PredictedShareMetric, StepTelemetry};
