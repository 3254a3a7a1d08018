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
//! Batch norm's running statistics are not parameters: the averaged model carries the
//! live model's, which belong to other weights. Recompute them with forward passes before
//! trusting its loss (not done here yet).
//!
//! [`averaged_model`]: crate::trainer::HybridTrainer::averaged_model

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
}

impl Default for AverageConfig {
    fn default() -> Self {
        Self { decay: 0.99, start_step: 0 }
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

    /// Refuses a `decay` outside `[0, 1)`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.decay >= 0.0 && self.decay < 1.0) {
            return Err(ConfigError::AverageDecay(self.decay));
        }
        Ok(())
    }
}

/// The running average: its configuration and how many updates it has seen (in the
/// trainer's books, checkpointed with them), and the averaged tensors (on the device).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AverageState {
    pub config: AverageConfig,
    /// Updates averaged so far.
    pub observed: usize,
}

/// The averaged tensors.
pub(crate) struct WeightAverage<B: Backend> {
    pub params: Option<ParamTensors<B>>,
}

impl<B: Backend> WeightAverage<B> {
    pub fn new() -> Self {
        Self { params: None }
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
