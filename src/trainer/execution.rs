//! How steps are executed, apart from what they do: micro-batches per optimizer step, how
//! often the loss is read back to the host, when the memory pool is trimmed, and whether
//! it is read during steps.
//!
//! These knobs change memory and speed, not the schedule of phases, so they live apart
//! from [`HybridConfig`](super::config::HybridConfig) and are not stored in checkpoints: a resumed
//! run may use other values (a smaller micro-batch after an OOM, say).

use serde::{Deserialize, Serialize};

use super::config::ConfigError;
use super::predict::phase::Phase;

/// When the trainer asks the device pool to hand unused memory back (see
/// [`trim`](crate::memory::trim)).
///
/// A caching pool keeps every page it ever took; after a large transient (a long
/// sequence, an evaluation batch) that memory stays reserved, unavailable to other
/// processes and to allocations of another size class. Trimming costs a device sync and
/// the re-allocation of pages the next step needs again, so it is off by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrimPolicy {
    /// Never trim.
    #[default]
    Never,
    /// Trim after a step whose phase differs from the next one's (after warmup, around
    /// every predict block).
    PhaseChange,
    /// Trim after every `n`-th step (`n` ≥ 1).
    EverySteps(usize),
}

/// How the trainer executes steps. Build from [`ExecutionConfig::default`] and the
/// `with_*` methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionConfig {
    /// Micro-batches per optimizer step (gradient accumulation). Each runs forward and
    /// backward on its own, so peak activation memory follows the micro-batch; their
    /// gradients are averaged before the optimizer step, so `k` micro-batches of `b` make
    /// the same update as one batch of `k·b` (for a loss that is a mean over the batch).
    /// A predicted step runs the forward over the same `k` micro-batches. At least 1.
    /// Default 1.
    pub accumulation_steps: usize,
    /// Read the full-step loss back to the host every this many steps; the steps between
    /// leave their losses on the device and skip the end-of-step sync, so the host keeps
    /// queueing work. The reading step reports the mean loss of its window. The last step
    /// of each phase of a hybrid run always reads (the guard needs a fresh running loss
    /// before a predict block), and predicted steps always read (the guard judges each).
    /// The cost: a non-finite loss is caught only at the next reading, after the updates
    /// of its window were applied. At least 1. Default 1 (every step).
    pub loss_every: usize,
    /// When to trim the device pool. Default [`TrimPolicy::Never`].
    pub trim: TrimPolicy,
    /// Read the device pool every this many milliseconds from a second thread while steps
    /// run ([`InStepPeak`](crate::memory::InStepPeak)); each step that reads its loss then
    /// records the highest readings since the last such step
    /// ([`StepReport::in_step_peak`](crate::StepReport::in_step_peak)). A measurement:
    /// every reading flushes the device's queue, which costs time. Nothing is read on a
    /// backend without a device pool. At least 1. Default `None` (not read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_pool_ms: Option<u64>,
}

impl Default for ExecutionConfig {
    fn default() -> Self {
        Self { accumulation_steps: 1, loss_every: 1, trim: TrimPolicy::Never, sample_pool_ms: None }
    }
}

impl ExecutionConfig {
    /// Checks every rule; the first broken one is returned.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.accumulation_steps < 1 {
            return Err(ConfigError::AccumulationSteps(self.accumulation_steps));
        }
        if self.loss_every < 1 {
            return Err(ConfigError::LossEvery(self.loss_every));
        }
        if self.trim == TrimPolicy::EverySteps(0) {
            return Err(ConfigError::TrimEvery);
        }
        if self.sample_pool_ms == Some(0) {
            return Err(ConfigError::SamplePool);
        }
        Ok(())
    }

    /// Sets [`accumulation_steps`](Self::accumulation_steps).
    pub fn with_accumulation_steps(mut self, value: usize) -> Self {
        self.accumulation_steps = value;
        self
    }

    /// Sets [`loss_every`](Self::loss_every).
    pub fn with_loss_every(mut self, value: usize) -> Self {
        self.loss_every = value;
        self
    }

    /// Sets [`trim`](Self::trim).
    pub fn with_trim(mut self, value: TrimPolicy) -> Self {
        self.trim = value;
        self
    }

    /// Sets [`sample_pool_ms`](Self::sample_pool_ms).
    pub fn with_sample_pool_ms(mut self, value: Option<u64>) -> Self {
        self.sample_pool_ms = value;
        self
    }

    /// Whether the pool is trimmed after trainer step `step` (0-based), which ran `phase`
    /// and is followed by `next`.
    pub(super) fn trims_after(&self, step: usize, phase: Phase, next: Phase) -> bool {
        match self.trim {
            TrimPolicy::Never => false,
            TrimPolicy::PhaseChange => phase != next,
            TrimPolicy::EverySteps(n) => n > 0 && (step + 1).is_multiple_of(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_values_are_refused_by_name() {
        let zero_accum = ExecutionConfig::default().with_accumulation_steps(0);
        assert_eq!(zero_accum.validate(), Err(ConfigError::AccumulationSteps(0)));
        let zero_every = ExecutionConfig::default().with_loss_every(0);
        assert_eq!(zero_every.validate(), Err(ConfigError::LossEvery(0)));
        let zero_trim = ExecutionConfig::default().with_trim(TrimPolicy::EverySteps(0));
        assert_eq!(zero_trim.validate(), Err(ConfigError::TrimEvery));
        let zero_period = ExecutionConfig::default().with_sample_pool_ms(Some(0));
        assert_eq!(zero_period.validate(), Err(ConfigError::SamplePool));
        assert_eq!(ExecutionConfig::default().validate(), Ok(()));
    }

    #[test]
    fn trims_when_the_policy_says() {
        let never = ExecutionConfig::default();
        assert!(!never.trims_after(0, Phase::Warmup, Phase::Predict));
        let phases = never.with_trim(TrimPolicy::PhaseChange);
        assert!(phases.trims_after(4, Phase::Warmup, Phase::Predict));
        assert!(!phases.trims_after(5, Phase::Predict, Phase::Predict));
        let every = never.with_trim(TrimPolicy::EverySteps(3));
        let trimmed: Vec<usize> = (0..9).filter(|&s| every.trims_after(s, Phase::Full, Phase::Full)).collect();
        assert_eq!(trimmed, [2, 5, 8]);
    }
}
