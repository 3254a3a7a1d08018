//! `--average`: the weight average the training examples can keep (docs/trainer.md,
//! "Averaging"), verified against the live weights at each evaluation.

use leanburn::AverageConfig;

use super::{bad_input, Failure};

/// A moving average of the weights, verified forward only at each evaluation.
#[derive(clap::Args, Debug, Clone)]
pub struct AverageArgs {
    /// Keep a moving average of the weights at this decay (about 1/(1−DECAY) updates
    /// count). At each evaluation it and the live weights are scored forward only on one
    /// training step's batches; the better is validated and is the run's model (the
    /// validation log's `weights` column). Off by default.
    #[arg(long, value_name = "DECAY")]
    pub average: Option<f64>,
    /// Where the average starts, as a fraction of --steps (with --average).
    #[arg(long, default_value_t = 0.5, value_name = "FRACTION")]
    pub average_from: f64,
    /// Lookahead: where a verification finds the average better, move the live weights
    /// this share of the way to it (0 leaves them alone).
    #[arg(long, default_value_t = 0.0, value_name = "SHARE")]
    pub average_pull: f64,
    /// Forward passes over the verification batches that recompute batch norm's running
    /// statistics for the averaged weights before each verification (models with batch
    /// norm; each pass leaves 0.9 of the old statistics).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub average_stat_passes: usize,
}

impl AverageArgs {
    /// The trainer's average for a run of `steps` steps; `None` without `--average`.
    pub fn config(&self, steps: usize) -> Result<Option<AverageConfig>, Failure> {
        let Some(decay) = self.average else { return Ok(None) };
        if !(0.0..1.0).contains(&self.average_from) {
            return Err(bad_input(format!("--average-from must be in [0, 1), got {}", self.average_from)));
        }
        let config = AverageConfig::new(decay)
            .with_start_step((self.average_from * steps as f64) as usize)
            .with_pull(self.average_pull)
            .with_statistics_passes(self.average_stat_passes);
        config.validate().map_err(|e| bad_input(format!("--average: {e}")))?;
        Ok(Some(config))
    }
}
