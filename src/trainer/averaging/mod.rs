//! Averaging: weights nobody trained directly, kept on the inner backend and verified
//! forward only (Kaddour, arXiv 2209.14981; Sanyal et al., arXiv 2306.03241).
//!
//! With [`HybridTrainer::with_weight_average`](crate::trainer::HybridTrainer::with_weight_average)
//! the trainer keeps an exponential moving average of the weights, updated after every
//! step that changed them (a full step's update, a kept predict block's jump) from
//! [`AverageConfig::start_step`] on: `a ← decay · a + (1 − decay) · w`, the first
//! observation taken as it is. It costs one copy of the parameters (in their own dtype)
//! on the device, and a pass over them per update. [`averaged_model`] is the model with
//! the average's weights, for forward-only evaluation; checkpoints save the average
//! (`average.bin`) and a resumed run continues it exactly.
//!
//! Verification ([`verify_average`]) scores the live weights and the average forward
//! only on the same probe batches and records which is better (an [`AverageVerdict`]);
//! [`chosen_model`] is then the run's model, which the runner validates at each
//! evaluation. With [`AverageConfig::pull`] a verdict for the average also pulls the live
//! weights toward it (Lookahead, arXiv 1907.08610); a verdict for the live weights changes
//! nothing.
//!
//! Batch norm's running statistics are float tensors of the module, so the average keeps
//! a moving average of them too, which belongs to no single set of weights. With
//! [`AverageConfig::statistics_passes`] verification first recomputes them for the
//! averaged weights with forward passes in training mode over the probe batches.
//!
//! [`averaged_model`]: crate::trainer::HybridTrainer::averaged_model
//! [`verify_average`]: crate::trainer::HybridTrainer::verify_average
//! [`chosen_model`]: crate::trainer::HybridTrainer::chosen_model

use burn::tensor::backend::Backend;
use serde::{Deserialize, Serialize};

use super::config::ConfigError;
use super::params::{blend, ParamTensors};

/// How the weight average is kept.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AverageConfig {
    /// Weight of the old average at each update, in `[0, 1)`: about `1 / (1 − decay)`
    /// recent updates count. Default 0.99.
    pub decay: f64,
    /// The first trainer step (0-based) whose update is averaged (the average starts from
    /// that step's weights). Default 0.
    pub start_step: usize,
    /// Lookahead's step, in `[0, 1]`: where a verification finds the average better, the
    /// live weights move this share of the way to it (`w ← w + pull · (a − w)`; the
    /// optimizer's state is kept). 0, the default, never touches the live weights.
    #[serde(default)]
    pub pull: f64,
    /// Forward passes over the probe batches, in training mode, that recompute batch
    /// norm's running statistics for the averaged weights before each verification. Each
    /// pass leaves `(1 − momentum)` of what was there (0.9 with Burn's default), so `n`
    /// passes leave `0.9^n` of the averaged statistics. 0, the default, keeps the moving
    /// average of the statistics (right for models without batch norm, where there are
    /// none). A pass runs the training step (its gradients are dropped).
    #[serde(default)]
    pub statistics_passes: usize,
}

impl Default for AverageConfig {
    fn default() -> Self {
        Self { decay: 0.99, start_step: 0, pull: 0.0, statistics_passes: 0 }
    }
}

impl AverageConfig {
    pub fn new(decay: f64) -> Self {
        Self { decay, ..Self::default() }
    }

    pub fn with_start_step(mut self, step: usize) -> Self {
        self.start_step = step;
        self
    }

    pub fn with_pull(mut self, pull: f64) -> Self {
        self.pull = pull;
        self
    }

    pub fn with_statistics_passes(mut self, passes: usize) -> Self {
        self.statistics_passes = passes;
        self
    }

    /// Refuses a `decay` outside `[0, 1)` and a `pull` outside `[0, 1]`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.decay >= 0.0 && self.decay < 1.0) {
            return Err(ConfigError::AverageDecay(self.decay));
        }
        if !(0.0..=1.0).contains(&self.pull) {
            return Err(ConfigError::AveragePull(self.pull));
        }
        Ok(())
    }
}

/// Which weights a verification found better.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Weights {
    /// The weights the optimizer trains.
    Live,
    /// The weight average.
    Average,
}

impl Weights {
    pub fn name(self) -> &'static str {
        match self {
            Weights::Live => "live",
            Weights::Average => "average",
        }
    }
}

/// One verification: the mean loss of each on the probe batches (forward only, eval
/// mode), and which the run stands by.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AverageVerdict {
    /// The trainer step it was taken after (steps taken so far).
    pub step: usize,
    /// The live weights' probe loss.
    pub live: f64,
    /// The average's probe loss (after its batch-norm statistics were recomputed, where
    /// configured).
    pub average: f64,
    /// The better of the two: the average only where its loss is lower.
    pub chosen: Weights,
    /// Whether the live weights were pulled toward the average.
    pub pulled: bool,
    /// Seconds the verification took (the statistics' passes included).
    pub seconds: f64,
}

/// The running average: its configuration and how many updates it has seen (in the
/// trainer's books, checkpointed with them), and the averaged tensors (on the device).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AverageState {
    pub config: AverageConfig,
    /// Updates averaged so far.
    pub observed: usize,
    /// Verifications so far.
    #[serde(default)]
    pub verified: usize,
    /// Verifications that chose the average.
    #[serde(default)]
    pub chosen: usize,
    /// The newest verification: which weights the run stands by.
    #[serde(default)]
    pub last: Option<AverageVerdict>,
}

impl AverageState {
    pub(crate) fn new(config: AverageConfig) -> Self {
        Self { config, observed: 0, verified: 0, chosen: 0, last: None }
    }

    /// The weights the newest verification chose (the live ones before any).
    pub fn standing(&self) -> Weights {
        self.last.map_or(Weights::Live, |verdict| verdict.chosen)
    }
}

/// The averaged tensors, and the batches verification scores on where the caller gave
/// no probe set (a full step's micro-batches, taken at the average's first update; not
/// checkpointed: a resumed run takes its next step's).
pub(crate) struct WeightAverage<B: Backend, T> {
    pub params: Option<ParamTensors<B>>,
    pub probe: Option<Vec<T>>,
}

impl<B: Backend, T> WeightAverage<B, T> {
    pub fn new() -> Self {
        Self { params: None, probe: None }
    }

    /// Folds the weights `live` (collected from `model.valid()`) in at `decay`.
    pub fn observe(&mut self, live: ParamTensors<B>, decay: f64) {
        self.params = Some(match self.params.take() {
            None => live,
            Some(average) => blend(&average, &live, decay),
        });
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod verify_tests;
