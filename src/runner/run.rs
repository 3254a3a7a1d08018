//! The runner: a run's settings, its directory, its stop request. The loop itself,
//! [`Runner::run`], is in `run_loop.rs`.

use super::dir::RunDir;
use super::settings::RunSettings;
use super::stop::StopRequest;

/// Trains a [`HybridTrainer`](crate::trainer::HybridTrainer) up to [`RunSettings::steps`]:
/// validation, checkpoints and memory on the settings' cadence, in a [`RunDir`] when given
/// one.
#[derive(Clone, Debug)]
pub struct Runner<'a> {
    pub(super) settings: RunSettings,
    pub(super) dir: Option<&'a RunDir>,
    /// A data-parallel replica other than 0: steps only.
    pub(super) follower: bool,
    /// Read after every step.
    pub(super) stop: Option<StopRequest>,
}

impl<'a> Runner<'a> {
    /// A run that writes nothing: no validation log, no checkpoints (settings that ask
    /// for checkpoints are refused by [`run`](Self::run)).
    pub fn new(settings: RunSettings) -> Self {
        Self { settings, dir: None, follower: false, stop: None }
    }

    /// The run of a data-parallel replica other than 0 (see
    /// [`data_parallel`](super::data_parallel)): it steps in lockstep with replica 0, which
    /// validates and checkpoints for the run; it validates nothing, writes nothing, and
    /// ignores the settings' validation and checkpoint cadences.
    pub fn follower(settings: RunSettings) -> Self {
        Self { settings, dir: None, follower: true, stop: None }
    }

    /// Writes the validation log and the checkpoints into `dir` (the trainer writes its
    /// step records there when started by [`RunDir::start_trainer`]).
    pub fn in_dir(mut self, dir: &'a RunDir) -> Self {
        self.dir = Some(dir);
        self
    }

    /// Stops the run after the step during which `stop` is requested: that step is
    /// finished, validated if due, and checkpointed (with checkpoints on, where it was
    /// not due anyway), and [`run`](Self::run) returns [`RunError::Stopped`](super::RunError::Stopped). Not for a
    /// data-parallel replica, whose replicas must stop at the same step: a follower
    /// ignores it.
    pub fn with_stop(mut self, stop: StopRequest) -> Self {
        self.stop = Some(stop);
        self
    }

    pub fn settings(&self) -> &RunSettings {
        &self.settings
    }
}
