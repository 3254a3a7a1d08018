//! How long a run is and how often it validates and checkpoints.

use serde::{Deserialize, Serialize};

use super::error::RunError;

/// The cadence of a run. The last step is always validated (with validation on) and
/// checkpointed (with checkpoints on).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSettings {
    /// The step the run ends at (a resumed run continues up to it).
    pub steps: usize,
    /// Validate every this many steps, and before the first step of a new run; `None`
    /// never validates.
    pub eval_every: Option<usize>,
    /// Checkpoint every this many steps into the run directory; `None` never does.
    pub checkpoint_every: Option<usize>,
    /// Steps of this process before the leak detector starts fitting (optimizer state,
    /// autotuning and pools settle first).
    pub settle: usize,
    /// Samples the leak detector fits over (the most recent ones).
    pub leak_window: usize,
}

impl RunSettings {
    /// `steps` steps, validated and checkpointed only at the end, settling over the first
    /// tenth, leaks fitted over the last 50 samples.
    pub fn new(steps: usize) -> Self {
        Self {
            steps,
            eval_every: Some(steps.max(1)),
            checkpoint_every: Some(steps.max(1)),
            settle: steps / 10,
            leak_window: 50,
        }
    }

    /// A memory soak: `steps` steps, no validation, no checkpoints, the leak fitted over
    /// every step after `settle`.
    pub fn soak(steps: usize, settle: usize) -> Self {
        Self { steps, eval_every: None, checkpoint_every: None, settle, leak_window: steps.max(2) }
    }

    pub fn with_eval_every(mut self, every: Option<usize>) -> Self {
        self.eval_every = every;
        self
    }

    pub fn with_checkpoint_every(mut self, every: Option<usize>) -> Self {
        self.checkpoint_every = every;
        self
    }

    pub fn with_settle(mut self, settle: usize) -> Self {
        self.settle = settle;
        self
    }

    pub fn with_leak_window(mut self, window: usize) -> Self {
        self.leak_window = window;
        self
    }

    /// Refuses zero steps, zero cadences and a settle period that leaves nothing to judge.
    pub fn validate(&self) -> Result<(), RunError> {
        let fail = |what: String| Err(RunError::Settings(what));
        if self.steps == 0 {
            return fail("steps must be at least 1".into());
        }
        if self.eval_every == Some(0) || self.checkpoint_every == Some(0) {
            return fail(format!(
                "eval_every ({:?}) and checkpoint_every ({:?}) must be at least 1 where given",
                self.eval_every, self.checkpoint_every
            ));
        }
        if self.leak_window < 2 {
            return fail(format!("leak_window {} cannot fit a slope (at least 2)", self.leak_window));
        }
        Ok(())
    }

    pub(super) fn validates_at(&self, step: usize) -> bool {
        self.eval_every.is_some_and(|every| step == self.steps || step.is_multiple_of(every))
    }

    pub(super) fn checkpoints_at(&self, step: usize) -> bool {
        self.checkpoint_every.is_some_and(|every| step == self.steps || step.is_multiple_of(every))
    }
}
