//! How a run starts: the kernel cache, the run directory, the trainer (new or resumed)
//! and the run's cadence.

use std::path::Path;
use std::sync::OnceLock;
use std::time::Instant;

use burn::optim::Optimizer;
use leanburn::device::KernelCache;
use leanburn::runner::RunError;
use leanburn::trainer::{ExampleLosses, SelectableBatch};
use leanburn::trainer::{ExecutionConfig, ForwardLoss, PrecisionConfig, Replica};
use leanburn::BackendArgs;
use leanburn::MemoryProbe;
use leanburn::{AverageConfig, HybridConfig, HybridModel, HybridTrainer, LrSchedule, SelectionConfig};
use leanburn::{RunDir, RunSettings, StartMode};

use super::failure::{bad_input, Failure};
use super::flags::Mode;

/// When the process started, as far as the examples can tell: when
/// [`init_kernel_cache`] ran, first thing after the flags were read.
pub(super) static STARTED: OnceLock<Instant> = OnceLock::new();

/// Keeps compiled kernels and autotune results where `backend.kernel_cache` says (by
/// default the user's cache directory; see `leanburn::device::init_kernel_cache`) and
/// says where. Call it before anything starts a thread: before selecting the backend.
pub fn init_kernel_cache(backend: &BackendArgs) -> Result<(), Failure> {
    STARTED.get_or_init(Instant::now);
    let cache = backend.kernel_cache.clone().unwrap_or(KernelCache::Default);
    // SAFETY: the examples call this after reading their flags and before selecting a
    // backend, the first thing that starts threads.
    let setup = unsafe { leanburn::device::init_kernel_cache(&cache) }
        .map_err(|e| bad_input(format!("--kernel-cache: {e}")))?;
    eprintln!("{setup}");
    Ok(())
}

/// The run of `mode` in `out`: fresh (refused where one is there), replaced, or resumed.
pub fn open_run(out: &Path, mode: Mode, resume: bool, overwrite: bool) -> Result<RunDir, Failure> {
    let start = match (resume, overwrite) {
        (true, _) => StartMode::Resume,
        (false, true) => StartMode::Overwrite,
        (false, false) => StartMode::Fresh,
    };
    Ok(RunDir::open(out, mode.name(), start)?)
}

/// How a run starts: its mode, warmup, seed, schedule and how its steps execute.
pub struct Start {
    pub mode: Mode,
    /// Full steps before the first prediction (hybrid mode).
    pub warmup: usize,
    pub seed: u64,
    /// Peak learning rate: linear warmup over 10% of `steps`, cosine decay to a tenth.
    pub peak_lr: f64,
    pub steps: usize,
    pub execution: ExecutionConfig,
    pub precision: PrecisionConfig,
    /// The weight average (`--average`), if kept.
    pub average: Option<AverageConfig>,
    /// Which examples full steps train on (`--select-keep`), if not all.
    pub selection: Option<SelectionConfig>,
}

/// The trainer of the run in `dir`: new from `start`, or resumed from its checkpoint; in a
/// data-parallel run, `replica`'s (see [`RunDir::start_replica_trainer`]).
pub fn start_trainer<B, M, O, T>(
    model: M,
    optimizer: O,
    start: &Start,
    dir: &RunDir,
    device: B::Device,
    replica: Option<Replica>,
) -> Result<HybridTrainer<B, M, O, T>, Failure>
where
    B: burn::tensor::backend::AutodiffBackend + MemoryProbe,
    M: HybridModel<B, T> + ForwardLoss<B, Input = T>,
    M::InnerModule: ExampleLosses<B::InnerBackend, Input = T::Inner>,
    O: Optimizer<M, B>,
    T: SelectableBatch<B>,
{
    let config = match start.mode {
        Mode::Hybrid => HybridConfig::default().with_warmup_steps(start.warmup),
        Mode::Full => HybridConfig::all_full(),
    }
    .with_seed(start.seed);
    let lr = LrSchedule::WarmupCosine {
        peak: start.peak_lr,
        warmup_steps: (start.steps / 10).max(1),
        total_steps: start.steps,
        min_lr: start.peak_lr / 10.0,
    };
    let resume = |e: RunError| if dir.is_resumed() { bad_input(format!("--resume: {e}")) } else { e.into() };
    let trainer = match replica {
        Some(replica) => dir.start_replica_trainer(replica, model, optimizer, config, lr, device),
        None => dir.start_trainer(model, optimizer, config, lr, device),
    }
    .map_err(resume)?
    .with_execution(start.execution)
    .map_err(|e| bad_input(e.to_string()))?
    .with_precision(start.precision)
    .map_err(|e| bad_input(format!("--precision: {e}")))?;
    let trainer = match start.average.clone() {
        Some(average) => trainer.with_weight_average(average).map_err(|e| bad_input(format!("--average: {e}")))?,
        None => trainer,
    };
    match start.selection.clone() {
        Some(selection) => trainer.with_selection(selection).map_err(|e| bad_input(format!("--select-keep: {e}"))),
        None => Ok(trainer),
    }
}

/// The run's cadence: validation and checkpoints as asked, and the leak fitted over the
/// last 50 steps once the trainer's warmup (at most a fifth of the run) is over.
pub fn run_settings(steps: usize, eval_every: u64, checkpoint_every: u64, warmup: usize) -> RunSettings {
    RunSettings::new(steps)
        .with_eval_every(Some(eval_every as usize))
        .with_checkpoint_every(Some(checkpoint_every as usize))
        .with_settle(warmup.min(steps / 5))
        .with_leak_window(50)
}
