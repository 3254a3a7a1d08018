//! What can go wrong while training, saving or resuming.

use std::path::PathBuf;

use super::config::ConfigError;

/// An error of the hybrid trainer.
#[derive(Debug, thiserror::Error)]
pub enum TrainerError {
    /// The configuration or learning-rate schedule breaks a rule.
    #[error("invalid trainer configuration: {0}")]
    Config(#[from] ConfigError),
    /// A file or directory could not be read or written.
    #[error("I/O error on {}: {source}", .path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A checkpoint is missing, incomplete or corrupt, or cannot be written now.
    #[error("checkpoint {}: {reason}", .path.display())]
    Checkpoint {
        /// The checkpoint directory (or the file in it that is at fault).
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Selection or per-example feedback: the model's
    /// [`ExampleLosses`](super::ExampleLosses) gave another number of losses than the
    /// batch has examples (or the feedback gave weights). The step changed nothing.
    #[error("the model scored {losses} examples of a batch of {examples}")]
    ExampleLosses {
        /// Examples in the batch.
        examples: usize,
        /// Losses the model returned.
        losses: usize,
    },
    /// Burn's recorder could not encode or decode a record.
    #[error("record error: {0}")]
    Record(String),
    /// A full step produced a NaN or infinite loss. Its gradients were dropped and the
    /// model, optimizer and trainer state are exactly as before the step. With
    /// [`loss_every`](super::ExecutionConfig::loss_every) above 1 the loss is the mean of
    /// the window read at this step: the window's earlier steps were applied.
    #[error("full step {step} produced a non-finite loss ({loss}); the update was not applied")]
    NonFiniteLoss {
        /// The trainer step (0-based).
        step: usize,
        /// The loss.
        loss: f64,
    },
    /// `with_probe_set` was given no batch.
    #[error("the probe set needs at least one batch")]
    EmptyProbeSet,
    /// A step was given a number of micro-batches other than
    /// [`accumulation_steps`](super::ExecutionConfig::accumulation_steps).
    #[error("a step takes {expected} micro-batch(es) (accumulation_steps), got {got}")]
    MicroBatches {
        /// `accumulation_steps`.
        expected: usize,
        /// Micro-batches given.
        got: usize,
    },
    /// The backend cannot compute in the precision asked for (say bf16 on wgpu, or
    /// anything but f32 on `NdArray`).
    #[error("the backend cannot train in {precision} on this device; use a precision it supports (f32 always works)")]
    UnsupportedPrecision {
        /// The precision asked for.
        precision: super::precision::Precision,
    },
    /// The model is gone: an earlier step panicked while it was out of the trainer.
    #[error("the model was lost when an earlier step panicked; rebuild the trainer")]
    ModelLost,
    /// A data-parallel reduction failed: another replica failed and released the others
    /// ([`Replica::abort`](super::Replica::abort)), or the replicas do not match. The
    /// step changed nothing on this replica.
    #[error("replica {rank}: {reason}")]
    Replica {
        /// This replica's rank.
        rank: usize,
        /// What failed.
        reason: String,
    },
}

impl TrainerError {
    /// An [`Io`](Self::Io) error about `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        TrainerError::Io { path: path.into(), source }
    }

    /// A [`Checkpoint`](Self::Checkpoint) error about `path`.
    pub fn checkpoint(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        TrainerError::Checkpoint { path: path.into(), reason: reason.into() }
    }
}

impl From<burn::record::RecorderError> for TrainerError {
    fn from(err: burn::record::RecorderError) -> Self {
        TrainerError::Record(err.to_string())
    }
}
