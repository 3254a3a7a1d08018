//! The flags that say which run this is and how it starts: its mode, its options file,
//! resume or overwrite, its seed and warmup, its checkpoint and validation sizes.

use std::path::{Path, PathBuf};

use leanburn::{HybridConfig, RunDir, SelectionConfig};

use super::average::AverageArgs;
use super::failure::Failure;
use super::flags::{ExecutionArgs, Mode};
use super::start::{open_run, Start};

/// The run flags both training examples share (`--out` and `--eval-every` are each
/// example's own: their defaults differ).
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Options from a JSON or TOML file, keyed by long option name (`batch = 16`); the
    /// command line wins. Each run writes its resolved options to `--out` as
    /// `config-<mode>.json`, which this reads back to repeat the run.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// `hybrid` alternates full and predicted steps; `full` is the all-full baseline.
    #[arg(long, value_enum, default_value_t = Mode::Hybrid)]
    pub mode: Mode,
    /// Full steps before the first prediction (hybrid mode).
    #[arg(long, default_value_t = HybridConfig::default().warmup_steps as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub warmup: u64,
    /// Continue the run in `--out` from its latest checkpoint, with the options it was
    /// started with (the command line may change the steps, the cadence and the output).
    #[arg(long)]
    pub resume: bool,
    /// Replace an earlier run of the same mode in `--out`.
    #[arg(long, conflicts_with = "resume")]
    pub overwrite: bool,
    /// Batches per validation.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..))]
    pub eval_batches: u64,
    /// Checkpoint every this many steps and at the end.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub checkpoint_every: u64,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

impl RunArgs {
    /// The run of this mode in `out`: fresh, replaced or resumed, as the flags say.
    pub fn open(&self, out: &Path) -> Result<RunDir, Failure> {
        open_run(out, self.mode, self.resume, self.overwrite)
    }

    /// How this run's trainer starts: its mode, warmup and seed from these flags, a peak
    /// learning rate over `steps`, the execution and weight-average flags, and the
    /// example's selection (`--select-keep`).
    pub fn start(
        &self,
        peak_lr: f64,
        steps: usize,
        execution: &ExecutionArgs,
        average: &AverageArgs,
        selection: Option<SelectionConfig>,
    ) -> Result<Start, Failure> {
        Ok(Start {
            mode: self.mode,
            warmup: self.warmup as usize,
            seed: self.seed,
            peak_lr,
            steps,
            execution: execution.config(),
            precision: execution.precision(),
            average: average.config(steps)?,
            selection,
        })
    }
}
