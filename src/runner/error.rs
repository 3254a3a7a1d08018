//! What can stop a run, and whose fault it is.

use std::path::PathBuf;

use crate::trainer::TrainerError;

/// An error of a [`Runner`](super::Runner) or a [`RunDir`](super::RunDir).
///
/// [`is_bad_input`](Self::is_bad_input) tells the caller's mistakes (a directory that
/// cannot be used, a run that is there already, nothing to resume, a different corpus)
/// from a run that broke while training.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The run directory cannot be created or written.
    #[error("--out {} is not a writable directory: {source}", .out.display())]
    Unwritable {
        /// The run directory.
        out: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The directory holds an earlier run of this name, and neither resume nor overwrite
    /// was asked for.
    #[error(
        "{} already holds a {name} run; pass --resume to continue it, --overwrite to replace it, or another --out",
        .out.display()
    )]
    AlreadyHolds {
        /// The run directory.
        out: PathBuf,
        /// The run's name.
        name: String,
    },
    /// Resume was asked for but there is no checkpoint.
    #[error("--resume: no {name} checkpoint in {}", .checkpoints.display())]
    NothingToResume {
        /// The run's name.
        name: String,
        /// Where the checkpoints would be.
        checkpoints: PathBuf,
    },
    /// The resumed run has already taken every step asked for.
    #[error("the run in {} already took {taken} of --steps {steps}", .out.display())]
    AlreadyFinished {
        /// The run directory.
        out: PathBuf,
        /// Steps taken.
        taken: usize,
        /// Steps asked for.
        steps: usize,
    },
    /// The resumed run's corpus differs from the one it trained on.
    #[error(
        "--resume: the corpus differs from the one this run trained on ({differences}); pass the same \
         --data and --corpus-mib, or --allow-corpus-change to continue on the new text"
    )]
    CorpusChanged {
        /// The differences, joined.
        differences: String,
    },
    /// The settings break a rule.
    #[error("invalid run settings: {0}")]
    Settings(String),
    /// The trainer could not be built or resumed.
    #[error("{0}")]
    Start(TrainerError),
    /// A step failed.
    #[error("step {step}: {source}")]
    Step {
        /// The 1-based step of the run that failed.
        step: usize,
        /// What the trainer said.
        source: TrainerError,
    },
    /// The batch source failed.
    #[error("step {step}: no batch: {source}")]
    Data {
        /// The 1-based step that wanted the batch.
        step: usize,
        /// What the source said.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Saving a checkpoint failed.
    #[error("checkpoint of step {step}: {source}")]
    Checkpoint {
        /// The step.
        step: usize,
        /// What the trainer said.
        source: TrainerError,
    },
    /// A file of the run directory could not be read or written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The corpus record could not be read or written.
    #[error("corpus record: {0}")]
    Fingerprint(#[from] crate::data::DataError),
    /// A replica of a data-parallel run failed (the first to fail; the others stopped
    /// with it). No checkpoint is lost: replica 0 writes them whole or not at all.
    #[error("replica {rank} of {replicas} failed: {source}")]
    Replica {
        /// The failed replica's rank.
        rank: usize,
        /// How many replicas the run had.
        replicas: usize,
        /// Why it failed.
        source: Box<RunError>,
    },
    /// A replica panicked.
    #[error("{0}")]
    Panicked(String),
    /// A caller's replica job failed for a reason of its own (see
    /// [`data_parallel`](super::data_parallel)).
    #[error("{message}")]
    Job {
        /// What failed.
        message: String,
        /// Whether the caller asked for something that cannot be done.
        bad_input: bool,
    },
    /// A file of the run directory holds something it should not.
    #[error("{}, line {line}: {reason}", .path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The 1-based line.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A [`StopRequest`](super::StopRequest) (a signal, or the caller) stopped the run
    /// after `step`, which was finished (and checkpointed where the run checkpoints).
    #[error("stopped by {} after step {step}; {}", super::stop::signal_name(*.signal), stopped_checkpoint(.checkpoint))]
    Stopped {
        /// The last step taken.
        step: usize,
        /// The signal that asked, or [`StopRequest::BY_CALLER`](super::StopRequest::BY_CALLER).
        signal: i32,
        /// The checkpoint of `step`, where one was saved.
        checkpoint: Option<PathBuf>,
    },
}

impl RunError {
    /// Whether the caller asked for something that cannot be done (exit code 2 in the
    /// examples), rather than a run that broke (exit code 1).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            RunError::Unwritable { .. }
                | RunError::AlreadyHolds { .. }
                | RunError::NothingToResume { .. }
                | RunError::AlreadyFinished { .. }
                | RunError::CorpusChanged { .. }
                | RunError::Settings(_)
                | RunError::Start(_)
        ) || matches!(self, RunError::Job { bad_input: true, .. })
            || matches!(self, RunError::Replica { source, .. } if source.is_bad_input())
    }

    /// The exit code a command line should end with: 128 + the signal for a run stopped by
    /// one (130 for SIGINT, 143 for SIGTERM, as the shell reports a process the signal
    /// ended), 2 for [bad input](Self::is_bad_input), 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            RunError::Stopped { signal, .. } if *signal > 0 => 128 + signal,
            _ if self.is_bad_input() => 2,
            _ => 1,
        }
    }

    pub(super) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> RunError {
        let path = path.into();
        move |source| RunError::Io { path, source }
    }
}

/// What a stopped run's message says about its checkpoint.
fn stopped_checkpoint(checkpoint: &Option<PathBuf>) -> String {
    match checkpoint {
        Some(path) => format!("its checkpoint is {} (continue with --resume)", path.display()),
        None => "no checkpoint was saved (the run keeps none)".into(),
    }
}
