//! leanburn: memory-bounded training on Burn.
//!
//! - [`select`]: choose CUDA, wgpu or the CPU at run time and run generic code there.
//! - [`init`]: eager parameter initialisation (`materialize`), so that clones share weights.
//! - [`memory`]: read device memory every step, track the peak, detect leaks, trim the pool.
//! - [`model`]: small reference models used by the examples and the memory tests.
//! - [`optim`]: gradient clipping by the global norm around any Burn optimizer; AdamW as
//!   GPT-2 is trained elsewhere.
//! - [`runner`]: the run loop around the trainer: run directory, resume, validation and
//!   checkpoint cadence, one memory monitor, events for a caller to render.
//! - [`strategy`]: the trainer inside burn-train's `SupervisedTraining` (dashboard, metrics,
//!   checkpointer), with step telemetry as burn-train metrics.
//! - [`trainer`]: hybrid training, full steps alternating with predicted forward-only steps
//!   on the inner backend, with a loss guard, rollback and atomic checkpoints.

pub mod backend;
pub mod data;
pub mod init;
pub mod memory;
pub mod model;
pub mod optim;
pub mod runner;
pub mod select;
pub mod strategy;
pub mod trainer;

pub use burn;
