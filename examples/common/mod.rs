//! What the training examples share: run modes, exit codes, the `--out` layout, the
//! training loop with its progress bar, validation log and checkpoints, the summary, and
//! the plot of both modes.
#![allow(dead_code)]

pub mod config;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use burn::optim::Optimizer;
use clap::ValueEnum;
use indicatif::{ProgressBar, ProgressStyle};
use leanburn::memory::{format_bytes, LeakDetector, MemoryProbe, PoolHealth};
use leanburn::select::{BackendJob, Checkpointing, Selection, TrainBackend};
use leanburn::trainer::{
    ExecutionConfig, ForwardLoss, HybridBatch, HybridConfig, HybridModel, HybridTrainer, LrSchedule, Precision,
    PrecisionConfig, StepRecord, TrainerError, TrainerStatistics, TrimPolicy,
};
use plotters::prelude::*;

/// The training examples allocate through mimalloc. On the CPU backend a training step
/// allocates and frees buffers of up to a hundred MiB (the logits), and glibc's malloc
/// hands each back to the kernel and faults it in again, zeroed, the next step: a third of
/// the step time at gpt2-mini 8 × 64 (docs/benchmarks.md, "The main job on the CPU").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

/// Prints a failure and exits with its code.
pub fn exit_on_failure(result: Result<(), Failure>) {
    if let Err(failure) = result {
        eprintln!("error: {}", failure.message);
        std::process::exit(failure.code);
    }
}

/// Where a mode's outputs go inside `--out`.
pub struct RunFiles {
    pub out: PathBuf,
    pub metrics: PathBuf,
    pub validation: PathBuf,
    pub checkpoints: PathBuf,
    /// The corpus the run trains on ([`leanburn::data::CorpusFingerprint`]), where it
    /// reads one.
    pub corpus: PathBuf,
    /// The run's resolved options, a file `--config` reads back.
    pub config: PathBuf,
}

impl RunFiles {
    pub fn new(out: &Path, mode: Mode) -> Self {
        Self {
            out: out.to_path_buf(),
            metrics: out.join(format!("metrics-{}.jsonl", mode.name())),
            validation: out.join(format!("validation-{}.csv", mode.name())),
            checkpoints: out.join(format!("checkpoints-{}", mode.name())),
            corpus: out.join(format!("corpus-{}.json", mode.name())),
            config: out.join(format!("config-{}.json", mode.name())),
        }
    }
}

/// Creates `out`, checks it is writable, and refuses to overwrite an earlier run of `mode`
/// unless asked to (or to resume one that is there).
pub fn prepare_out(out: &Path, mode: Mode, resume: bool, overwrite: bool) -> Result<RunFiles, Failure> {
    let files = RunFiles::new(out, mode);
    let unusable =
        |err: std::io::Error| bad_input(format!("--out {} is not a writable directory: {err}", out.display()));
    fs::create_dir_all(out).map_err(unusable)?;
    let probe = out.join(".write-test");
    fs::write(&probe, b"").map_err(unusable)?;
    let _ = fs::remove_file(&probe);
    let earlier = files.metrics.exists() || files.checkpoints.exists();
    if resume && !files.checkpoints.join("latest").exists() {
        return Err(bad_input(format!("--resume: no {} checkpoint in {}", mode.name(), files.checkpoints.display())));
    }
    if earlier && !resume {
        if !overwrite {
            return Err(bad_input(format!(
                "{} already holds a {} run; pass --resume to continue it, --overwrite to replace it, \
                 or another --out",
                out.display(),
                mode.name()
            )));
        }
        for path in [&files.metrics, &files.validation, &files.corpus, &files.config] {
            let _ = fs::remove_file(path);
        }
        let _ = fs::remove_dir_all(&files.checkpoints);
    }
    Ok(files)
}

/// Whether the chosen backend computes in a float type on its device.
struct SupportsDtype(burn::tensor::DType);

impl BackendJob for SupportsDtype {
    type Output = bool;

    fn run<B: TrainBackend>(self, device: B::Device) -> bool {
        <B as burn::tensor::backend::Backend>::supports_dtype(&device, self.0)
    }
}

/// How a run starts: fresh in `mode`, or resumed from the latest checkpoint in `files`.
pub struct Start {
    pub mode: Mode,
    pub resume: bool,
    /// Full steps before the first prediction (hybrid mode).
    pub warmup: usize,
    pub seed: u64,
    /// Peak learning rate: linear warmup over 10% of `steps`, cosine decay to a tenth.
    pub peak_lr: f64,
    pub steps: usize,
    pub execution: ExecutionConfig,
    pub precision: PrecisionConfig,
}

/// A trainer for `start`, writing its step records to `files.metrics` (appending when
/// resuming).
pub fn start_trainer<B, M, O, T>(
    model: M,
    optimizer: O,
    start: &Start,
    files: &RunFiles,
    device: B::Device,
) -> Result<HybridTrainer<B, M, O, T>, Failure>
where
    B: burn::tensor::backend::AutodiffBackend + MemoryProbe,
    M: HybridModel<B, T> + ForwardLoss<B, Input = T>,
    O: Optimizer<M, B>,
    T: HybridBatch<B>,
{
    let precision_error = |e: TrainerError| bad_input(format!("--precision: {e}"));
    if start.resume {
        return HybridTrainer::resume(model, optimizer, &files.checkpoints, device)
            .map_err(|e| bad_input(format!("--resume: {e}")))?
            .with_execution(start.execution)
            .map_err(|e| bad_input(e.to_string()))?
            .with_precision(start.precision)
            .map_err(precision_error)?
            .with_metrics_appended(&files.metrics)
            .map_err(|e| bad_input(e.to_string()));
    }
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
    HybridTrainer::new(model, optimizer, config, lr, device)
        .map_err(|e| bad_input(e.to_string()))?
        .with_execution(start.execution)
        .map_err(|e| bad_input(e.to_string()))?
        .with_precision(start.precision)
        .map_err(precision_error)?
        .with_metrics(&files.metrics)
        .map_err(|e| bad_input(e.to_string()))
}

/// A validation result: the loss, and the accuracy for classifiers.
#[derive(Clone, Copy, Debug)]
pub struct Validation {
    pub loss: f64,
    pub accuracy: Option<f64>,
}

impl std::fmt::Display for Validation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "validation loss {:.4}", self.loss)?;
        match self.accuracy {
            Some(accuracy) => write!(f, ", accuracy {:.1}%", accuracy * 100.0),
            None => Ok(()),
        }
    }
}

/// How the loop runs: its length, how often it validates and checkpoints, and what a
/// batch item is called in the output ("tok", "img").
pub struct LoopSettings {
    pub steps: usize,
    pub eval_every: usize,
    pub checkpoint_every: usize,
    pub item: &'static str,
}

/// What the loop saw, for the summary.
pub struct LoopOutcome {
    pub records: Vec<StepRecord>,
    pub train_seconds: f64,
    pub items_seen: usize,
    pub validation: Option<Validation>,
    pub last_checkpoint: Option<(usize, PathBuf)>,
    /// Leak fit over the steps after warmup.
    pub detector: LeakDetector,
    /// Whether the pool kept far more than it used, for long.
    pub pool: PoolHealth,
}

/// Trains from the trainer's current step up to `settings.steps`, drawing host batches
/// from `next_batch` (`accumulation_steps` of them per step, moved to the device one at a
/// time by `to_device`) and validating with `validate`: a progress bar, the validation CSV in
/// `files` (header written for a new run), checkpoints; the last step is always validated
/// and saved. The weights are verified at every step (a predict block's jump is judged
/// within the step that makes it), so nothing waits for a block to close.
pub fn train_loop<B, M, O, T, H>(
    trainer: &mut HybridTrainer<B, M, O, T>,
    files: &RunFiles,
    settings: &LoopSettings,
    mut next_batch: impl FnMut() -> Result<H, Failure>,
    to_device: impl Fn(H) -> T,
    mut validate: impl FnMut(&M) -> Validation,
) -> Result<LoopOutcome, Failure>
where
    B: burn::tensor::backend::AutodiffBackend + MemoryProbe,
    M: HybridModel<B, T>,
    O: Optimizer<M, B>,
    T: HybridBatch<B>,
{
    let first = trainer.steps_taken();
    let mut log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&files.validation)
        .map_err(|e| broke(format!("{}: {e}", files.validation.display())))?;
    let log_line = |log: &mut fs::File, step: usize, seconds: f64, v: Validation| {
        let accuracy = v.accuracy.map_or(String::new(), |a| format!(",{a}"));
        writeln!(log, "{step},{seconds},{}{accuracy}", v.loss).map_err(|e| broke(e.to_string()))
    };

    let progress = ProgressBar::new(settings.steps as u64).with_position(first as u64);
    progress.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} [{elapsed_precise}<{eta_precise}] {msg}")
            .expect("a valid template"),
    );
    // Training time so far, carried across resumes by the checkpointed statistics.
    let resumed = trainer.statistics();
    let mut outcome = LoopOutcome {
        records: Vec::new(),
        train_seconds: resumed.full_seconds + resumed.predict_seconds,
        items_seen: resumed.total_items as usize,
        validation: None,
        last_checkpoint: None,
        detector: LeakDetector::new(50),
        pool: PoolHealth::default(),
    };
    let warmup = trainer.config().warmup_steps.min(settings.steps / 5);
    if first == 0 {
        let validation = validate(trainer.model());
        let header = if validation.accuracy.is_some() { ",validation_accuracy" } else { "" };
        writeln!(log, "step,train_seconds,validation_loss{header}").map_err(|e| broke(e.to_string()))?;
        log_line(&mut log, 0, 0.0, validation)?;
        progress.suspend(|| eprintln!("step     0: {validation}"));
        outcome.validation = Some(validation);
    }

    let micro_batches = trainer.execution().accumulation_steps;
    let mut last_loss = None;
    for step in first + 1..=settings.steps {
        let batches = (0..micro_batches).map(|_| next_batch()).collect::<Result<Vec<H>, Failure>>()?;
        let record = trainer
            .step_accumulated(batches.into_iter().map(&to_device))
            .map_err(|e| broke(format!("step {step}: {e}")))?;
        last_loss = record.loss.or(last_loss);
        outcome.train_seconds += record.seconds;
        outcome.items_seen += record.items;
        if let Some(memory) = record.memory {
            if step > first + warmup {
                outcome.detector.record(step as u64, memory.bytes_in_use);
            }
            if outcome.pool.observe(memory) {
                let verdict = outcome.pool.verdict();
                progress.suspend(|| eprintln!("step {step:>5}: device memory pool {verdict} (--trim phases)"));
            }
        }
        progress.set_message(format!(
            "{:<7} loss {}  {:.0} {}/s  {}",
            record.phase.to_string(),
            last_loss.map_or("-".into(), |loss: f64| format!("{loss:.3}")),
            outcome.items_seen as f64 / outcome.train_seconds.max(1e-9),
            settings.item,
            match (record.memory, record.host_memory) {
                (Some(m), _) => format!("in use {}", format_bytes(m.bytes_in_use as f64)),
                (None, Some(h)) => format!("host {}", format_bytes(h.resident as f64)),
                (None, None) => String::new(),
            }
        ));
        progress.inc(1);
        outcome.records.push(record);

        let last = step == settings.steps;
        if last || step % settings.eval_every == 0 {
            let validation = validate(trainer.model());
            log_line(&mut log, step, outcome.train_seconds, validation)?;
            // Printed whether or not the bar is drawn (it is hidden when stderr is no terminal).
            progress.suspend(|| {
                eprintln!(
                    "step {step:>5}: {validation}, {:.0} {}/s",
                    outcome.items_seen as f64 / outcome.train_seconds.max(1e-9),
                    settings.item
                )
            });
            outcome.validation = Some(validation);
        }
        if last || step % settings.checkpoint_every == 0 {
            let path = trainer.save_checkpoint(&files.checkpoints).map_err(|e| broke(e.to_string()))?;
            outcome.last_checkpoint = Some((step, path));
        }
    }
    progress.finish_and_clear();
    Ok(outcome)
}

/// The summary a finished run prints.
pub fn summary(title: &str, stats: &TrainerStatistics, outcome: &LoopOutcome, files: &RunFiles, item: &str) -> String {
    let recent: Vec<f64> =
        outcome.records.iter().rev().filter(|r| !r.predicted).filter_map(|r| r.loss).take(10).collect();
    let train_loss = recent.iter().sum::<f64>() / recent.len().max(1) as f64;
    let final_in_use = outcome.records.iter().rev().find_map(|r| r.memory).map(|m| m.bytes_in_use);
    let validation = outcome.validation.map_or("no validation".into(), |v| v.to_string());
    let mut text = format!(
        "\n{title}: {} steps\n\
         train loss (last 10 full steps) {train_loss:.4}, {validation}\n\
         {:.0} {item}/s over {:.1} s of training; {:.0}% of steps predicted, {} rolled back\n",
        stats.steps,
        outcome.items_seen as f64 / outcome.train_seconds.max(1e-9),
        outcome.train_seconds,
        stats.predicted_share * 100.0,
        stats.rollbacks,
    );
    if stats.overflow_steps > 0 {
        text += &format!("{} steps skipped for overflowed gradients (loss scaling)\n", stats.overflow_steps);
    }
    if stats.trims > 0 {
        text +=
            &format!("pool trimmed {} times, {} handed back\n", stats.trims, format_bytes(stats.trimmed_bytes as f64));
    }
    if let (Some(peak), Some(last)) = (stats.peak_bytes_in_use, final_in_use) {
        text += &format!(
            "device memory in use: peak {}, final {}; after warmup: {}\n",
            format_bytes(peak as f64),
            format_bytes(last as f64),
            outcome.detector.report()
        );
        text += &format!("memory pool: {}\n", outcome.pool.verdict());
    } else {
        text += "device memory: not available on this backend (no device pool to read)\n";
        let final_resident = outcome.records.iter().rev().find_map(|r| r.host_memory).map(|m| m.resident);
        if let (Some(peak), Some(last)) = (stats.peak_resident_bytes, final_resident) {
            text += &format!(
                "host memory (process resident): peak {}, final {}\n",
                format_bytes(peak as f64),
                format_bytes(last as f64)
            );
        }
    }
    text += &match &outcome.last_checkpoint {
        Some((step, path)) => format!("checkpoint of step {step}: {} (continue with --resume)\n", path.display()),
        None => "no checkpoint written\n".into(),
    };
    text += &format!("metrics: {}", files.metrics.display());
    text
}

/// One mode's curves, read back from its files.
struct Curves {
    mode: &'static str,
    train: Vec<(f64, f64)>,
    validation: Vec<(f64, f64)>,
    /// Device memory in use, where the backend has a pool.
    memory_mib: Vec<(f64, f64)>,
    /// The process's resident memory, where it has none (host RAM).
    host_mib: Vec<(f64, f64)>,
}

fn read_curves(out: &Path, mode: Mode) -> Option<Curves> {
    let files = RunFiles::new(out, mode);
    let metrics = fs::read_to_string(files.metrics).ok()?;
    let records: Vec<StepRecord> = metrics.lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
    let validation = fs::read_to_string(files.validation).unwrap_or_default();
    Some(Curves {
        mode: mode.name(),
        train: records
            .iter()
            .filter_map(|r| r.loss.filter(|loss| loss.is_finite()).map(|loss| (r.step as f64 + 1.0, loss)))
            .collect(),
        validation: validation
            .lines()
            .skip(1)
            .filter_map(|line| {
                let fields: Vec<&str> = line.split(',').collect();
                Some((fields.first()?.parse().ok()?, fields.get(2)?.parse().ok()?))
            })
            .collect(),
        memory_mib: records
            .iter()
            .filter_map(|r| r.memory.map(|m| (r.step as f64 + 1.0, m.bytes_in_use as f64 / (1 << 20) as f64)))
            .collect(),
        host_mib: records
            .iter()
            .filter_map(|r| r.host_memory.map(|m| (r.step as f64 + 1.0, m.resident as f64 / (1 << 20) as f64)))
            .collect(),
    })
    .filter(|c| !c.train.is_empty())
}

/// Loss (top) and memory (bottom: device memory in use, or the process's resident memory
/// where the backend has no pool) against step for every mode that has run in
/// `out`, written as SVG to `path`; returns the modes drawn.
pub fn write_plot(out: &Path, path: &Path, model: &str) -> Result<Vec<&'static str>, Box<dyn std::error::Error>> {
    let runs: Vec<Curves> = [Mode::Hybrid, Mode::Full].into_iter().filter_map(|m| read_curves(out, m)).collect();
    if runs.is_empty() {
        return Err("no metrics to plot".into());
    }
    let max_step = runs.iter().flat_map(|r| r.train.iter().map(|p| p.0)).fold(1.0, f64::max);
    let losses = runs.iter().flat_map(|r| r.train.iter().chain(&r.validation).map(|p| p.1));
    let (low, high) = losses.fold((f64::MAX, f64::MIN), |(lo, hi), l| (lo.min(l), hi.max(l)));
    // Device memory where any run has it; otherwise the process's resident memory, labelled
    // as host memory (the two are never drawn on one axis).
    let has_device = runs.iter().any(|r| !r.memory_mib.is_empty());
    let has_host = runs.iter().any(|r| !r.host_mib.is_empty());
    let memory = |run: &Curves| if has_device { run.memory_mib.clone() } else { run.host_mib.clone() };
    let max_mib = runs.iter().flat_map(|r| memory(r).into_iter().map(|p| p.1)).fold(1.0, f64::max);

    let root = SVGBackend::new(path, (900, 700)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(420);
    let mut loss_chart = ChartBuilder::on(&top)
        .caption(format!("{model}: loss against step"), ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..max_step, (low * 0.95)..(high * 1.02))?;
    loss_chart.configure_mesh().x_desc("step").y_desc("loss").draw()?;
    let memory_caption = match (has_device, has_host) {
        (true, _) => "device memory in use (MiB)",
        (false, true) => "host memory, process resident (MiB); no device pool on this backend",
        (false, false) => "device memory in use: not available on this backend",
    };
    let mut memory_chart = ChartBuilder::on(&bottom)
        .caption(memory_caption, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..max_step, 0.0..max_mib * 1.1)?;
    memory_chart.configure_mesh().x_desc("step").y_desc("MiB").draw()?;

    for (index, run) in runs.iter().enumerate() {
        let colour = Palette99::pick(index * 2).to_rgba();
        loss_chart
            .draw_series(LineSeries::new(run.train.iter().copied(), colour.mix(0.35)))?
            .label(format!("{} train", run.mode))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.mix(0.35)));
        loss_chart
            .draw_series(LineSeries::new(run.validation.iter().copied(), colour.stroke_width(2)))?
            .label(format!("{} validation", run.mode))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
        memory_chart
            .draw_series(LineSeries::new(memory(run), colour))?
            .label(run.mode)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
    }
    loss_chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw()?;
    memory_chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw()?;
    root.present()?;
    Ok(runs.iter().map(|r| r.mode).collect())
}

/// Writes the plot into `out` as `<file_stem>.svg` and says where, or warns why not.
pub fn plot_runs(out: &Path, file_stem: &str, model: &str) {
    let plot = out.join(format!("{file_stem}.svg"));
    match write_plot(out, &plot, model) {
        Ok(modes) => println!("plot: {} ({})", plot.display(), modes.join(" and ")),
        Err(err) => eprintln!("warning: no plot written: {err}"),
    }
}
