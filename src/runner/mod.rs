//! The run loop: what turns a [`HybridTrainer`](crate::trainer::HybridTrainer) and a
//! stream of batches into a finished, resumable run.
//!
//! A [`Runner`] trains up to [`RunSettings::steps`], validates and checkpoints on its
//! cadence, feeds one [`MemoryMonitor`](crate::memory::MemoryMonitor) from each step's
//! record (no extra device sync), and returns a [`RunOutcome`]. It renders nothing: what
//! happens is told to a callback as [`RunEvent`]s, and a command line draws its own
//! progress. A [`RunDir`] is the run's directory: it is created, resumed, overwritten or
//! refused there, and holds the step records, the validation log, the checkpoints, the
//! corpus fingerprint and the resolved options. A run without a directory (a memory soak)
//! writes nothing. A [`StopRequest`] (SIGINT or SIGTERM with
//! [`StopRequest::on_signals`]) ends a run after its current step, checkpointed.
//!
//! The other outer loop is burn-train's: [`HybridStrategy`] runs the same trainer inside
//! `SupervisedTraining` (its dashboard, metrics, checkpointer and early stopping). Both
//! start their trainer through [`HybridTrainer::start`](crate::trainer::HybridTrainer::start),
//! the one place that decides new or resumed.
//!
//! ```text
//!   RunDir::open ──▶ RunDir::start_trainer ──▶ Runner::run(trainer, batches, validate, on_event)
//!        │                 (new or resumed)         │  step → MemoryMonitor, RunEvent::Step
//!        │                                          │  cadence → validate → ValidationLog, RunEvent::Validated
//!        └── metrics, validation, checkpoints ◀─────┘  cadence → checkpoint, RunEvent::Checkpointed
//!                                                   ▼
//!                                              RunOutcome (records, validations, memory report)
//! ```

mod burn_train;
mod dir;
mod error;
mod event;
mod outcome;
mod parallel;
mod run;
mod run_loop;
mod settings;
mod source;
mod stop;
mod validation;

#[cfg(test)]
mod parallel_tests;
#[cfg(test)]
mod tests;

pub use burn_train::{HybridStrategy, PoolMemoryMetric, PredictedShareMetric, StepTelemetry};
pub use dir::{CorpusCheck, RunDir, RunHistory, StartMode};
pub use error::RunError;
pub use event::RunEvent;
pub use outcome::RunOutcome;
pub use parallel::data_parallel;
pub use run::Runner;
pub use settings::RunSettings;
pub use source::BatchSource;
pub use stop::StopRequest;
pub use validation::{Validation, ValidationPoint};
