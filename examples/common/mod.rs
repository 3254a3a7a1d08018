//! What the training examples share: run modes, the execution flags, exit codes, the
//! progress they draw from the runner's events, the summary, and the plot of both modes.
//! The loop itself, the `--out` layout, resume and the memory books are the library's
//! (`leanburn::runner`).
#![allow(dead_code)]

pub mod allocator;
pub mod average;
pub mod config;
pub mod selection;

use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use burn::optim::Optimizer;
use clap::ValueEnum;
use indicatif::{ProgressBar, ProgressStyle};
use leanburn::memory::{format_bytes, InStepPeak, InStepReading, MemoryProbe};
use leanburn::runner::{
    RunDir, RunError, RunEvent, RunOutcome, RunSettings, Runner, StartMode, StopRequest, Validation,
};
use leanburn::select::{BackendArgs, BackendJob, Checkpointing, KernelCache, Selection, TrainBackend};
use leanburn::trainer::{
    AverageConfig, ExecutionConfig, ForwardLoss, HybridBatch, HybridConfig, HybridModel, HybridTrainer, LrSchedule,
    Precision, PrecisionConfig, Replica, StepReport, TrainerError, TrimPolicy,
};
use plotters::prelude::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Hybrid,
    Full,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Hybrid => "hybrid",
            Mode::Full => "full",
        }
    }
}

/// Data-parallel training: the devices of the replicas.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ParallelArgs {
    /// Train one replica on each of these devices of the chosen backend (data parallel,
    /// on burn-collective's all-reduce; see docs/parallel.md): CUDA ordinals, wgpu
    /// adapters in the order listed, or the CPU's one device, 0. Repeat a device for
    /// several replicas on it (`0,0`). Each replica takes --batch items per step, so the
    /// effective batch is --batch × replicas.
    #[arg(long, value_delimiter = ',', conflicts_with = "device_index")]
    pub devices: Option<Vec<usize>>,
}

/// How steps execute: the flags both training examples share (see `docs/memory.md`).
#[derive(clap::Args, Debug, Clone)]
pub struct ExecutionArgs {
    /// Micro-batches per optimizer step (gradient accumulation): the effective batch is
    /// --batch × --accum, the activation memory that of one --batch.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub accum: u64,
    /// Read the training loss back to the host every this many steps; the steps between
    /// skip the device sync (predict steps, and the step before each, always read).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub loss_every: u64,
    /// Hand unused pool memory back to the device: `never`, `phases` (whenever the phase
    /// changes) or a number N (every N steps).
    #[arg(long, default_value = "never", value_parser = parse_trim)]
    pub trim: TrimPolicy,
    /// Activation checkpointing: `balanced` recomputes element-wise results in the
    /// backward pass instead of keeping them (less memory, more time).
    #[arg(long, value_enum, default_value_t = Checkpointing::Off)]
    pub checkpointing: Checkpointing,
    /// The float type forward and backward passes compute in: `f32`, `bf16` (CUDA) or
    /// `f16` (CUDA, and wgpu adapters with shader-f16). Master weights and optimizer state
    /// stay f32; f16 scales its loss dynamically and skips steps that overflow.
    #[arg(long, value_enum, default_value_t = Precision::F32)]
    pub precision: Precision,
    /// Read the device pool every this many milliseconds from a second thread while steps
    /// run, and print the highest in-use and reserve it saw (the in-step peak). A
    /// measurement: every reading flushes the device's queue.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub sample_pool_ms: Option<u64>,
}

impl ExecutionArgs {
    pub fn config(&self) -> ExecutionConfig {
        ExecutionConfig::default()
            .with_accumulation_steps(self.accum as usize)
            .with_loss_every(self.loss_every as usize)
            .with_trim(self.trim)
    }

    /// The trainer's precision settings.
    pub fn precision(&self) -> PrecisionConfig {
        PrecisionConfig::new(self.precision)
    }

    /// Refuses `--precision` where the chosen backend cannot compute in it, before
    /// anything in `--out` is touched (the trainer checks again when it is built).
    pub fn check_precision(&self, selection: &Selection) -> Result<(), Failure> {
        if self.precision == Precision::F32 || selection.run(SupportsDtype(self.precision.dtype().into())) {
            return Ok(());
        }
        Err(bad_input(format!("--precision: {}", TrainerError::UnsupportedPrecision { precision: self.precision })))
    }

    /// ", f16 compute (f32 master weights, loss scaling)" and the like, for the run's
    /// header line; empty for f32.
    pub fn describe_precision(&self) -> String {
        match self.precision {
            Precision::F32 => String::new(),
            Precision::Bf16 => ", bf16 compute (f32 master weights)".to_string(),
            Precision::F16 => ", f16 compute (f32 master weights, loss scaling)".to_string(),
        }
    }

    /// ", balanced activation checkpointing" when it is on, for the run's header line.
    pub fn describe_checkpointing(&self) -> &'static str {
        match self.checkpointing {
            Checkpointing::Off => "",
            Checkpointing::Balanced => ", balanced activation checkpointing",
        }
    }
}

fn parse_trim(value: &str) -> Result<TrimPolicy, String> {
    match value {
        "never" => Ok(TrimPolicy::Never),
        "phases" => Ok(TrimPolicy::PhaseChange),
        n => match n.parse::<usize>() {
            Ok(n) if n > 0 => Ok(TrimPolicy::EverySteps(n)),
            _ => Err(format!("expected `never`, `phases` or a number of steps above 0, got `{value}`")),
        },
    }
}

/// A failure and the exit code it gets: 2 for bad input, 1 for a run that broke.
pub struct Failure {
    pub code: i32,
    pub message: String,
}

pub fn bad_input(message: impl Into<String>) -> Failure {
    Failure { code: 2, message: message.into() }
}

pub fn broke(message: impl Into<String>) -> Failure {
    Failure { code: 1, message: message.into() }
}

impl From<RunError> for Failure {
    fn from(err: RunError) -> Self {
        Failure { code: err.exit_code(), message: err.to_string() }
    }
}

/// A failure inside a data-parallel replica, which stops the other replicas.
impl From<Failure> for RunError {
    fn from(failure: Failure) -> Self {
        RunError::Job { message: failure.message, bad_input: failure.code == 2 }
    }
}

/// Prints a failure and exits with its code.
pub fn exit_on_failure(result: Result<(), Failure>) {
    if let Err(failure) = result {
        eprintln!("error: {}", failure.message);
        std::process::exit(failure.code);
    }
}

/// When the process started, as far as the examples can tell: when
/// [`init_kernel_cache`] ran, first thing after the flags were read.
static STARTED: OnceLock<Instant> = OnceLock::new();

/// Keeps compiled kernels and autotune results where `backend.kernel_cache` says (by
/// default the user's cache directory; see `leanburn::select::init_kernel_cache`) and
/// says where. Call it before anything starts a thread: before selecting the backend.
pub fn init_kernel_cache(backend: &BackendArgs) -> Result<(), Failure> {
    STARTED.get_or_init(Instant::now);
    let cache = backend.kernel_cache.clone().unwrap_or(KernelCache::Default);
    // SAFETY: the examples call this after reading their flags and before selecting a
    // backend, the first thing that starts threads.
    let setup = unsafe { leanburn::select::init_kernel_cache(&cache) }
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

/// Whether the chosen backend computes in a float type on its device.
struct SupportsDtype(burn::tensor::DType);

impl BackendJob for SupportsDtype {
    type Output = bool;

    fn run<B: TrainBackend>(self, device: B::Device) -> bool {
        <B as burn::tensor::backend::Backend>::supports_dtype(&device, self.0)
    }
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
    O: Optimizer<M, B>,
    T: HybridBatch<B>,
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
    match start.average.clone() {
        Some(average) => trainer.with_weight_average(average).map_err(|e| bad_input(format!("--average: {e}"))),
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

/// A progress bar and the lines printed between its redraws, drawn from a run's events;
/// `item` names what a batch holds ("tok", "img").
pub struct Progress {
    bar: ProgressBar,
    item: &'static str,
    /// Whether the first step's time has been printed.
    timed_first: std::cell::Cell<bool>,
    /// The pool read during steps (`--sample-pool-ms`), and the highest readings of the
    /// steps after the first (which also holds autotuning's buffers).
    in_step: Option<(InStepPeak, std::cell::Cell<Option<InStepReading>>)>,
}

impl Progress {
    pub fn new(item: &'static str) -> Self {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} [{elapsed_precise}<{eta_precise}] {msg}")
                .expect("a valid template"),
        );
        Self { bar, item, timed_first: std::cell::Cell::new(false), in_step: None }
    }

    /// Reads the pool during steps with `sampler`, for [`in_step_summary`](Self::in_step_summary).
    pub fn with_in_step_peak(mut self, sampler: Option<InStepPeak>) -> Self {
        self.in_step = sampler.map(|sampler| (sampler, std::cell::Cell::new(None)));
        self
    }

    /// The in-step peak over the steps after this process's first, and the reserve
    /// against it; `None` without a sampler.
    pub fn in_step_summary(&self) -> Option<String> {
        let (_, highest) = self.in_step.as_ref()?;
        Some(match highest.get() {
            Some(r) => format!(
                "in-step peak (pool read {} times during the steps after the first): in use {}, reserved {} \
                 (reserve / in-use peak {:.2})",
                r.readings,
                format_bytes(r.peak_in_use as f64),
                format_bytes(r.peak_reserved as f64),
                r.peak_reserved as f64 / r.peak_in_use.max(1) as f64
            ),
            None => "in-step peak: no reading after the first step".into(),
        })
    }

    /// Draws `event`. `header` is printed when the run starts, with the step it starts after.
    pub fn on_event(&self, event: RunEvent<'_>, header: &mut Option<impl FnOnce(usize) -> String>) {
        let item = self.item;
        match event {
            RunEvent::Started { first, steps } => {
                if let Some(header) = header.take() {
                    eprintln!("{}", header(first));
                }
                self.bar.set_length(steps as u64);
                self.bar.set_position(first as u64);
            }
            RunEvent::Step { record, last_loss, items_per_second } => {
                let first = !self.timed_first.get();
                if let Some((sampler, highest)) = &self.in_step {
                    // Taken every step, so that the first step's readings are dropped.
                    if let (Some(reading), false) = (sampler.take(), first) {
                        highest.set(Some(highest.get().map_or(reading, |h| h.max(reading))));
                    }
                }
                if !self.timed_first.replace(true) {
                    // Compiling and autotuning kernels is most of a cold start (docs/gpt2.md).
                    let since = STARTED
                        .get()
                        .map_or(String::new(), |t| format!(", {:.1} s after start", t.elapsed().as_secs_f64()));
                    self.bar.suspend(|| eprintln!("first step of this process done{since}"));
                }
                self.bar.set_message(format!(
                    "{:<7} loss {}  {items_per_second:.0} {item}/s  {}",
                    record.phase.to_string(),
                    last_loss.map_or("-".into(), |loss: f64| format!("{loss:.3}")),
                    match (record.memory, record.host_memory) {
                        (Some(m), _) => format!("in use {}", format_bytes(m.bytes_in_use as f64)),
                        (None, Some(h)) => format!("host {}", format_bytes(h.resident as f64)),
                        (None, None) => String::new(),
                    }
                ));
                self.bar.inc(1);
            }
            // Printed whether or not the bar is drawn (it is hidden when stderr is no terminal).
            RunEvent::Validated { point, items_per_second } => self.bar.suspend(|| {
                let speed = if point.step == 0 { String::new() } else { format!(", {items_per_second:.0} {item}/s") };
                let weights = point.weights.map_or(String::new(), |w| format!(" ({} weights)", w.name()));
                eprintln!("step {:>5}: {}{weights}{speed}", point.step, point.validation)
            }),
            RunEvent::AverageVerified { verdict } => self.bar.suspend(|| {
                eprintln!(
                    "step {:>5}: weight average {:.4} against live {:.4} on the probe batches: {} chosen{}",
                    verdict.step,
                    verdict.average,
                    verdict.live,
                    verdict.chosen.name(),
                    if verdict.pulled { ", live weights pulled toward it" } else { "" }
                )
            }),
            RunEvent::PoolBloated { step, verdict } => {
                self.bar.suspend(|| eprintln!("step {step:>5}: device memory pool {verdict} (--trim phases)"))
            }
            RunEvent::Checkpointed { .. } => {}
        }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// Runs `trainer` in `dir` with `settings`, drawing progress: host batches from
/// `next_batch`, moved by `to_device`, scored by `validate`; `header` describes the run
/// once its first step is known. With `sample_pool_ms`, the pool is also read during the
/// steps and the in-step peak printed at the end. A data-parallel replica other than 0
/// (the trainer's [`replica`](HybridTrainer::replica)) only steps: it draws, validates
/// and writes nothing.
#[allow(clippy::too_many_arguments)]
pub fn train<B, M, O, T, H>(
    trainer: &mut HybridTrainer<B, M, O, T>,
    dir: &RunDir,
    settings: RunSettings,
    sample_pool_ms: Option<u64>,
    item: &'static str,
    header: impl FnOnce(usize) -> String,
    next_batch: impl FnMut() -> Result<H, Failure>,
    to_device: impl Fn(H) -> T,
    validate: impl FnMut(&M) -> Validation,
) -> Result<RunOutcome, Failure>
where
    B: burn::tensor::backend::AutodiffBackend + MemoryProbe,
    M: HybridModel<B, T>,
    O: Optimizer<M, B>,
    T: HybridBatch<B>,
{
    if trainer.replica().is_some_and(|replica| !replica.is_leader()) {
        let next_batch = next_batch_with_message(next_batch);
        return Ok(Runner::follower(settings).run(trainer, next_batch, to_device, validate, |_| {})?);
    }
    let sampler = sample_pool_ms.map(|ms| InStepPeak::start::<B>(trainer.device(), Duration::from_millis(ms)));
    if sampler.as_ref().is_some_and(Option::is_none) {
        eprintln!("--sample-pool-ms: no device pool on this backend; nothing is sampled");
    }
    let progress = Progress::new(item).with_in_step_peak(sampler.flatten());
    let mut header = Some(header);
    let next_batch = next_batch_with_message(next_batch);
    let mut runner = Runner::new(settings).in_dir(dir);
    // Ctrl-C or SIGTERM: the step in progress finishes and is checkpointed (a data-parallel
    // run's replicas would have to stop together, so it keeps the default: the process ends).
    if trainer.replica().is_none() {
        match StopRequest::on_signals() {
            Ok(stop) => runner = runner.with_stop(stop),
            Err(err) => eprintln!("warning: no SIGINT/SIGTERM handler ({err}): a signal ends the run unsaved"),
        }
    }
    let outcome = runner.run(trainer, next_batch, to_device, validate, |event| progress.on_event(event, &mut header));
    progress.finish();
    if let Some(line) = progress.in_step_summary() {
        eprintln!("{line}");
    }
    Ok(outcome?)
}

/// A batch source whose failures carry their message through the runner's error.
fn next_batch_with_message<H>(mut next_batch: impl FnMut() -> Result<H, Failure>) -> impl FnMut() -> Result<H, String> {
    move || next_batch().map_err(|failure| failure.message)
}

/// The summary a finished run prints.
pub fn summary(title: &str, outcome: &RunOutcome, dir: &RunDir, item: &str) -> String {
    let stats = &outcome.statistics;
    let train_loss = outcome.recent_train_loss(10).map_or("-".into(), |loss| format!("{loss:.4}"));
    let validation = outcome.validation().map_or("no validation".into(), |v| v.to_string());
    let mut text = format!(
        "\n{title}: {} steps\n\
         train loss (last 10 full steps) {train_loss}, {validation}\n\
         {:.0} {item}/s over {:.1} s of training; {:.0}% of steps predicted, {} rolled back\n",
        stats.steps,
        outcome.items_per_second(),
        outcome.train_seconds,
        stats.predicted_share * 100.0,
        stats.rollbacks,
    );
    if let Some(share) = stats.selected_share() {
        text += &format!(
            "selection: backward on {:.0}% of the {} examples its steps scored\n",
            share * 100.0,
            stats.scored_examples
        );
    }
    if stats.overflow_steps > 0 {
        text += &format!("{} steps skipped for overflowed gradients (loss scaling)\n", stats.overflow_steps);
    }
    if stats.trims > 0 {
        text +=
            &format!("pool trimmed {} times, {} handed back\n", stats.trims, format_bytes(stats.trimmed_bytes as f64));
    }
    let memory = &outcome.memory;
    if let (Some(peak), Some(last)) = (stats.peak_bytes_in_use, memory.current) {
        text += &format!(
            "device memory in use: peak {}, final {}; after warmup: {}\n",
            format_bytes(peak as f64),
            format_bytes(last.bytes_in_use as f64),
            memory.leak.as_ref().map_or("not fitted".into(), |leak| leak.to_string()),
        );
        text += &format!("memory pool: {}\n", memory.pool);
    } else {
        text += "device memory: not available on this backend (no device pool to read)\n";
        if let Some(host) = memory.host {
            text += &format!(
                "host memory (process resident): peak {}, final {}\n",
                format_bytes(host.peak_resident as f64),
                format_bytes(host.resident as f64)
            );
        }
    }
    text += &match &outcome.last_checkpoint {
        Some((step, path)) => format!("checkpoint of step {step}: {} (continue with --resume)\n", path.display()),
        None => "no checkpoint written\n".into(),
    };
    text += &format!("metrics: {}", dir.metrics_path().display());
    text
}

/// One mode's curves.
struct Curves {
    mode: &'static str,
    /// (step, loss) of every step that read its loss back.
    train: Vec<(f64, f64)>,
    /// The same against the training seconds before the step's end.
    train_by_time: Vec<(f64, f64)>,
    validation: Vec<(f64, f64)>,
    validation_by_time: Vec<(f64, f64)>,
    /// Steps the predict phase ran (its jumps, kept), and its rolled-back blocks.
    predicted: Vec<f64>,
    rolled_back: Vec<f64>,
    /// Device memory in use, where the backend has a pool.
    memory_mib: Vec<(f64, f64)>,
    /// The process's resident memory, where it has none (host RAM).
    host_mib: Vec<(f64, f64)>,
}

/// Weight of the old value in the smoothed train loss (TensorBoard's default 0.6 is for
/// noisier, sparser logs; W&B's running average is about this).
const SMOOTHING: f64 = 0.9;

impl Curves {
    fn new(mode: Mode, records: &[StepReport], validations: &[leanburn::runner::ValidationPoint]) -> Option<Self> {
        let at = |r: &StepReport| r.step as f64 + 1.0;
        let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
        let mut seconds = 0.0;
        let elapsed: Vec<f64> = records
            .iter()
            .map(|r| {
                seconds += r.seconds;
                seconds
            })
            .collect();
        let finite = |r: &StepReport| r.loss.filter(|l| l.is_finite());
        Some(Curves {
            mode: mode.name(),
            train: records.iter().filter_map(|r| finite(r).map(|l| (at(r), l))).collect(),
            train_by_time: records.iter().zip(&elapsed).filter_map(|(r, t)| finite(r).map(|l| (*t, l))).collect(),
            validation: validations.iter().map(|p| (p.step as f64, p.validation.loss)).collect(),
            validation_by_time: validations.iter().map(|p| (p.train_seconds, p.validation.loss)).collect(),
            predicted: records.iter().filter(|r| r.predicted && !r.rolled_back).map(at).collect(),
            rolled_back: records.iter().filter(|r| r.rolled_back).map(at).collect(),
            memory_mib: records.iter().filter_map(|r| r.memory.map(|m| (at(r), mib(m.bytes_in_use)))).collect(),
            host_mib: records.iter().filter_map(|r| r.host_memory.map(|m| (at(r), mib(m.resident)))).collect(),
        })
        .filter(|c| !c.train.is_empty())
    }
}

/// An exponential moving average of `points`' values, debiased at the start (as
/// TensorBoard smooths), at the same x.
fn smoothed(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut average = 0.0;
    let mut weight = 0.0;
    points
        .iter()
        .map(|&(x, y)| {
            average = SMOOTHING * average + (1.0 - SMOOTHING) * y;
            weight = SMOOTHING * weight + (1.0 - SMOOTHING);
            (x, average / weight)
        })
        .collect()
}

/// This run's curves from its outcome, and the other mode's from what its own process
/// left in `out` (if it ran there).
fn curves(out: &Path, mode: Mode, outcome: &RunOutcome) -> Vec<Curves> {
    let other = match mode {
        Mode::Hybrid => Mode::Full,
        Mode::Full => Mode::Hybrid,
    };
    let earlier = RunDir::existing(out, other.name()).history().unwrap_or_else(|err| {
        eprintln!("warning: the {} run in {} is left out of the plot: {err}", other.name(), out.display());
        Default::default()
    });
    let mut runs = vec![
        Curves::new(mode, &outcome.records, &outcome.validations),
        Curves::new(other, &earlier.records, &earlier.validations),
    ];
    runs.sort_by_key(|run| run.as_ref().map(|r| r.mode != "hybrid"));
    runs.into_iter().flatten().collect()
}

/// Loss against step (top: each run's raw train loss, faint, under its smoothed line, its
/// validation loss, and a rug of the steps its predict phase ran or rolled back), loss
/// against training seconds (middle: hybrid's promise is time), and memory against step
/// (bottom: device memory in use, or the process's resident memory where the backend has
/// no pool) for every run in `runs`, written as SVG to `path`; returns the modes drawn.
fn write_plot(runs: &[Curves], path: &Path, model: &str) -> Result<Vec<&'static str>, Box<dyn std::error::Error>> {
    if runs.is_empty() {
        return Err("no metrics to plot".into());
    }
    let max_step = runs.iter().flat_map(|r| r.train.iter().map(|p| p.0)).fold(1.0, f64::max);
    let max_seconds = runs.iter().flat_map(|r| r.train_by_time.iter().chain(&r.validation_by_time).map(|p| p.0));
    let max_seconds = max_seconds.fold(1e-3, f64::max);
    let losses = runs.iter().flat_map(|r| r.train.iter().chain(&r.validation).map(|p| p.1));
    let (low, high) = losses.fold((f64::MAX, f64::MIN), |(lo, hi), l| (lo.min(l), hi.max(l)));
    let (low, high) = (low * 0.95, high * 1.02);
    // Device memory where any run has it; otherwise the process's resident memory, labelled
    // as host memory (the two are never drawn on one axis).
    let has_device = runs.iter().any(|r| !r.memory_mib.is_empty());
    let has_host = runs.iter().any(|r| !r.host_mib.is_empty());
    let memory = |run: &Curves| if has_device { run.memory_mib.clone() } else { run.host_mib.clone() };
    let max_mib = runs.iter().flat_map(|r| memory(r).into_iter().map(|p| p.1)).fold(1.0, f64::max);

    // Whole steps on the step axes; two decimals elsewhere (so no label reads "500.0").
    let whole = |x: &f64| format!("{x:.0}");
    let loss_label = |y: &f64| format!("{y:.2}");
    let seconds_label = move |x: &f64| if max_seconds >= 10.0 { format!("{x:.0}") } else { format!("{x:.2}") };
    let step_ticks = (max_step as usize).clamp(1, 10);

    let root = SVGBackend::new(path, (900, 1000)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, rest) = root.split_vertically(400);
    let (middle, bottom) = rest.split_vertically(330);
    let mut loss_chart = ChartBuilder::on(&top)
        .caption(format!("{model}: loss against step"), ("sans-serif", 20))
        .margin(10)
        .margin_right(30)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..max_step, low..high)?;
    loss_chart
        .configure_mesh()
        .x_desc("step")
        .y_desc("loss")
        .x_labels(step_ticks)
        .x_label_formatter(&whole)
        .y_label_formatter(&loss_label)
        .draw()?;
    let mut time_chart = ChartBuilder::on(&middle)
        .caption("loss against training seconds", ("sans-serif", 16))
        .margin(10)
        .margin_right(30)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..max_seconds, low..high)?;
    time_chart
        .configure_mesh()
        .x_desc("training seconds")
        .y_desc("loss")
        .x_label_formatter(&seconds_label)
        .y_label_formatter(&loss_label)
        .draw()?;
    let memory_caption = match (has_device, has_host) {
        (true, _) => "device memory in use (MiB)",
        (false, true) => "host memory, process resident (MiB); no device pool on this backend",
        (false, false) => "device memory in use: not available on this backend",
    };
    let mut memory_chart = ChartBuilder::on(&bottom)
        .caption(memory_caption, ("sans-serif", 16))
        .margin(10)
        .margin_right(30)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..max_step, 0.0..max_mib * 1.1)?;
    memory_chart
        .configure_mesh()
        .x_desc("step")
        .y_desc("MiB")
        .x_labels(step_ticks)
        .x_label_formatter(&whole)
        .y_label_formatter(&whole)
        .draw()?;

    // The rug of predicted steps sits at the bottom of the loss panel.
    let rug = |step: f64, height: f64, style: ShapeStyle| {
        PathElement::new(vec![(step, low), (step, low + (high - low) * height)], style)
    };
    for (index, run) in runs.iter().enumerate() {
        let colour = Palette99::pick(index * 2).to_rgba();
        for (chart, train, validation) in [
            (&mut loss_chart, &run.train, &run.validation),
            (&mut time_chart, &run.train_by_time, &run.validation_by_time),
        ] {
            chart.draw_series(LineSeries::new(train.iter().copied(), colour.mix(0.2)))?;
            chart
                .draw_series(LineSeries::new(smoothed(train), colour.mix(0.8)))?
                .label(format!("{} train (smoothed; raw faint)", run.mode))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.mix(0.8)));
            chart
                .draw_series(LineSeries::new(validation.iter().copied(), colour.stroke_width(2)))?
                .label(format!("{} validation", run.mode))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
        }
        if !run.predicted.is_empty() {
            let style = colour.stroke_width(1);
            loss_chart
                .draw_series(run.predicted.iter().map(|&step| rug(step, 0.04, style)))?
                .label(format!("{}: predicted steps", run.mode))
                .legend(move |(x, y)| PathElement::new(vec![(x + 10, y - 5), (x + 10, y + 5)], style));
        }
        if !run.rolled_back.is_empty() {
            let style = RED.stroke_width(2);
            loss_chart
                .draw_series(run.rolled_back.iter().map(|&step| rug(step, 0.08, style)))?
                .label(format!("{}: rolled-back blocks", run.mode))
                .legend(move |(x, y)| PathElement::new(vec![(x + 10, y - 5), (x + 10, y + 5)], style));
        }
        memory_chart
            .draw_series(LineSeries::new(memory(run), colour))?
            .label(run.mode)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
    }
    for chart in [&mut loss_chart, &mut time_chart] {
        chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw()?;
    }
    memory_chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw()?;
    root.present()?;
    Ok(runs.iter().map(|r| r.mode).collect())
}

/// Writes the plot of this run (`mode`, `outcome`) and of the other mode's run in `out`,
/// if there is one, into `out` as `<file_stem>.svg`, and says where, or warns why not.
pub fn plot_runs(out: &Path, mode: Mode, outcome: &RunOutcome, file_stem: &str, model: &str) {
    let plot = out.join(format!("{file_stem}.svg"));
    match write_plot(&curves(out, mode, outcome), &plot, model) {
        Ok(modes) => println!("plot: {} ({})", plot.display(), modes.join(" and ")),
        Err(err) => eprintln!("warning: no plot written: {err}"),
    }
}
