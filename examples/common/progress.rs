//! What a run shows while it trains and when it ends: a progress bar drawn from the
//! runner's events, and the summary.

use std::sync::OnceLock;

use burn::optim::Optimizer;
use indicatif::{ProgressBar, ProgressStyle};
use leanburn::memory::{format_bytes, InStepReading};
use leanburn::runner::{BatchSource, StopRequest};
use leanburn::trainer::TrainerStatistics;
use leanburn::MemoryProbe;
use leanburn::{HybridBatch, HybridModel, HybridTrainer};
use leanburn::{RunDir, RunEvent, RunOutcome, RunSettings, Runner, Validation};

use super::failure::Failure;
use super::start::STARTED;

/// A progress bar and the lines printed between its redraws, drawn from a run's events;
/// `item` names what a batch holds ("tok", "img").
pub struct Progress {
    bar: ProgressBar,
    item: &'static str,
    /// Whether the first step's time has been printed.
    timed_first: std::cell::Cell<bool>,
}

impl Progress {
    pub fn new(item: &'static str) -> Self {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} [{elapsed_precise}<{eta_precise}] {msg}")
                .expect("a valid template"),
        );
        Self { bar, item, timed_first: std::cell::Cell::new(false) }
    }

    /// Draws `event`. `header` is printed when the run starts, with the step it starts after.
    pub fn on_event(&self, event: RunEvent<'_>, header: &mut Option<impl FnOnce(usize) -> String>) {
        let item = self.item;
        match event {
            RunEvent::Resumed { first, batches, seconds } => self.bar.suspend(|| {
                eprintln!(
                    "resumed after step {first}: the data stream moved past {batches} batches in {:.3} s",
                    seconds
                )
            }),
            RunEvent::Started { first, steps } => {
                if let Some(header) = header.take() {
                    eprintln!("{}", header(first));
                }
                self.bar.set_length(steps as u64);
                self.bar.set_position(first as u64);
            }
            RunEvent::Step { record, last_loss, items_per_second } => {
                if !self.timed_first.replace(true) {
                    // Compiling and autotuning kernels is most of a cold start (docs/gpt2.md).
                    let after_start = STARTED.get().map(|t| t.elapsed().as_secs_f64());
                    if let Some(seconds) = after_start {
                        let _ = FIRST_STEP_DONE.set(seconds);
                    }
                    let since = after_start.map_or(String::new(), |s| format!(", {s:.1} s after start"));
                    self.bar.suspend(|| eprintln!("first step of this process done in {:.1} s{since}", record.seconds));
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
/// once its first step is known. A data-parallel replica other than 0
/// (the trainer's [`replica`](HybridTrainer::replica)) only steps: it draws, validates
/// and writes nothing.
#[allow(clippy::too_many_arguments)]
pub fn train<B, M, O, T, H>(
    trainer: &mut HybridTrainer<B, M, O, T>,
    dir: &RunDir,
    settings: RunSettings,
    item: &'static str,
    header: impl FnOnce(usize) -> String,
    batches: impl BatchSource<Batch = H, Error = Failure>,
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
        return Ok(Runner::follower(settings).run(trainer, WithMessage(batches), to_device, validate, |_| {})?);
    }
    let sampled = trainer.execution().sample_pool_ms.is_some();
    if sampled && B::memory_sample(trainer.device()).is_none() {
        eprintln!("--sample-pool-ms: no device pool on this backend; nothing is sampled");
    }
    let progress = Progress::new(item);
    let mut header = Some(header);
    let mut runner = Runner::new(settings).in_dir(dir);
    // Ctrl-C or SIGTERM: the step in progress finishes and is checkpointed (a data-parallel
    // run's replicas would have to stop together, so it keeps the default: the process ends).
    if trainer.replica().is_none() {
        match StopRequest::on_signals() {
            Ok(stop) => runner = runner.with_stop(stop),
            Err(err) => eprintln!("warning: no SIGINT/SIGTERM handler ({err}): a signal ends the run unsaved"),
        }
    }
    let outcome =
        runner.run(trainer, WithMessage(batches), to_device, validate, |event| progress.on_event(event, &mut header));
    progress.finish();
    let outcome = outcome?;
    if sampled && in_step_peak(&outcome).is_none() {
        eprintln!("in-step peak: no reading after the first step");
    }
    Ok(outcome)
}

/// A batch source whose failures carry their message through the runner's error.
struct WithMessage<S>(S);

impl<S: BatchSource<Error = Failure>> BatchSource for WithMessage<S> {
    type Batch = S::Batch;
    type Error = String;

    fn next_batch(&mut self) -> Result<S::Batch, String> {
        self.0.next_batch().map_err(|failure| failure.message)
    }

    fn skip(&mut self, count: usize) -> Result<(), String> {
        self.0.skip(count).map_err(|failure| failure.message)
    }
}

/// When this process's first step ended, in seconds after it started.
static FIRST_STEP_DONE: OnceLock<f64> = OnceLock::new();

/// The run's pace apart from its start-up: items per second after each process's first
/// step, then all steps counted, and what the first step of this process took.
fn pace(outcome: &RunOutcome, item: &str) -> String {
    let overall =
        format!("{:.0} {item}/s over all {:.1} s of training", outcome.items_per_second(), outcome.train_seconds);
    let Some(first) = outcome.first_step() else {
        return overall;
    };
    let steady = match outcome.steady_items_per_second() {
        Some(speed) => format!("{speed:.0} {item}/s after the first step"),
        None => format!("no {item}/s after the first step: this process ran no other"),
    };
    let done = FIRST_STEP_DONE.get().map_or(String::new(), |s| format!(", done {s:.1} s after start"));
    format!(
        "{steady} ({overall}); the first step of this process took {:.1} s \
         (on a GPU mostly compiling and tuning its kernels){done}",
        first.seconds
    )
}

/// The highest pool readings inside the steps (`--sample-pool-ms`), each process's first
/// step left out (it also holds autotuning's buffers); `None` without any.
fn in_step_peak(outcome: &RunOutcome) -> Option<InStepReading> {
    let steady = outcome.records.iter().filter(|r| !r.first_in_process);
    steady.filter_map(|r| r.in_step_peak).reduce(InStepReading::max)
}

/// The summary a finished run prints.
pub fn summary(title: &str, outcome: &RunOutcome, dir: &RunDir, item: &str) -> String {
    let stats = &outcome.statistics;
    let train_loss = outcome.recent_train_loss(10).map_or("-".into(), |loss| format!("{loss:.4}"));
    let validation = outcome.validation().map_or("no validation".into(), |v| v.to_string());
    let mut text = format!(
        "\n{title}: {}\n\
         train loss (last 10 full steps) {train_loss}, {validation}\n\
         {}\n\
         {:.0}% of steps predicted, {} rolled back\n",
        counted(stats.steps, "step"),
        pace(outcome, item),
        stats.predicted_share * 100.0,
        stats.rollbacks,
    );
    text += &occasional_lines(stats);
    text += &memory_lines(outcome);
    text += &match &outcome.last_checkpoint {
        Some((step, path)) => format!("checkpoint of step {step}: {} (continue with --resume)\n", path.display()),
        None => "no checkpoint written\n".into(),
    };
    text += &format!("metrics: {}", dir.metrics_path().display());
    text
}

/// `count` and `noun`, plural but for one ("1 step", "2 steps").
fn counted(count: usize, noun: &str) -> String {
    match count {
        1 => format!("1 {noun}"),
        _ => format!("{count} {noun}s"),
    }
}

/// The summary's lines for what only some runs do: selection, steps skipped for overflow,
/// the pool's trims (empty where none happened).
fn occasional_lines(stats: &TrainerStatistics) -> String {
    let mut text = String::new();
    if let Some(share) = stats.selected_share() {
        text += &format!(
            "selection: backward on {:.0}% of the {} examples its steps scored\n",
            share * 100.0,
            stats.scored_examples
        );
    }
    if stats.overflow_steps > 0 {
        let skipped = counted(stats.overflow_steps, "step");
        text += &format!("{skipped} skipped for overflowed gradients (loss scaling)\n");
    }
    if stats.trims > 0 {
        text +=
            &format!("pool trimmed {} times, {} handed back\n", stats.trims, format_bytes(stats.trimmed_bytes as f64));
    }
    text
}

/// The summary's memory lines: the device pool's readings where there is one (in use, the
/// leak fit, the reserve, the in-step peak), else the process's resident memory.
fn memory_lines(outcome: &RunOutcome) -> String {
    let (stats, memory) = (&outcome.statistics, &outcome.memory);
    let (Some(peak), Some(last)) = (stats.peak_bytes_in_use, memory.current) else {
        let mut text = "device memory: not available on this backend (no device pool to read)\n".to_string();
        if let Some(host) = memory.host {
            text += &format!(
                "host memory (process resident): peak {}, final {}\n",
                format_bytes(host.peak_resident as f64),
                format_bytes(host.resident as f64)
            );
        }
        return text;
    };
    let mut text = format!(
        "device memory in use: peak {}, final {}; after warmup: {}\n",
        format_bytes(peak as f64),
        format_bytes(last.bytes_in_use as f64),
        memory.leak.as_ref().map_or("not fitted".into(), |leak| leak.to_string()),
    );
    let reserve = memory.peak_reserved.map_or("-".into(), |bytes| format_bytes(bytes as f64));
    text += &format!("memory pool: reserve peak {reserve}, {}\n", memory.pool);
    if let Some(peak) = in_step_peak(outcome) {
        text += &format!(
            "in-step peak (pool read {} times during the steps after each process's first): in use {}, \
             reserved {} (reserve / in-use peak {:.2})\n",
            peak.readings,
            format_bytes(peak.peak_in_use as f64),
            format_bytes(peak.peak_reserved as f64),
            peak.peak_reserved as f64 / peak.peak_in_use.max(1) as f64
        );
    }
    text
}
