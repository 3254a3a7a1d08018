//! GPT-2 trained on real text with `HybridTrainer`: the job the README's main command runs.
//!
//! ```text
//! cargo run --release --example gpt2_small_hybrid                      # best backend, defaults
//! cargo run --release --example gpt2_small_hybrid -- --mode full      # the all-full baseline
//! cargo run --release --example gpt2_small_hybrid -- --backend cuda --batch 8 --seq 1024
//! cargo run --release --example gpt2_small_hybrid -- --resume         # continue a run
//! ```
//!
//! On a GPU the default preset is `gpt2-small` (124M parameters, context 1024); elsewhere
//! it is `gpt2-mini`, which finishes in minutes on two CPU cores. With no `--data` the
//! corpus is the Rust and Markdown sources in the local Cargo registry, which every machine
//! that built this project has.
//!
//! Written to `--out` (default `runs/gpt2`), per mode: `metrics-<mode>.jsonl` (one
//! [`StepRecord`] per step), `validation-<mode>.csv`, `checkpoints-<mode>/`, and `gpt2.svg`
//! (train/validation loss and device memory against step, both modes overlaid when both
//! have run).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::module::AutodiffModule;
use burn::optim::grad_clipping::GradientClippingConfig;
use burn::optim::AdamWConfig;
use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use leanburn::data::{evaluation_windows, Corpus, CorpusSource, Gpt2Tokenizer, HostBatch, Split, TokenDataset, WindowSampler};
use leanburn::memory::{format_bytes, LeakDetector};
use leanburn::model::{Gpt2, Gpt2Config, Gpt2MemoryEstimate, GPT2_PRESETS};
use leanburn::select::{device_memory, select, BackendArgs, BackendJob, Chosen, Selection, TrainBackend};
use leanburn::trainer::{HybridConfig, HybridTrainer, LrSchedule, StepRecord};
use plotters::prelude::*;

#[derive(Parser, Debug, Clone)]
#[command(about = "Train GPT-2 with leanburn's HybridTrainer on real text")]
struct Args {
    #[command(flatten)]
    backend: BackendArgs,
    /// Model size; default gpt2-small on CUDA, gpt2-mini elsewhere.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(GPT2_PRESETS))]
    preset: Option<String>,
    /// Sequences per step.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..))]
    batch: u64,
    /// Tokens per sequence; default the preset's context on CUDA, 64 elsewhere.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    seq: Option<u64>,
    /// Total trainer steps (a resumed run continues up to this); default 300 on CUDA, 200
    /// elsewhere.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    steps: Option<u64>,
    /// Peak AdamW learning rate (linear warmup over 10% of the steps, cosine decay to a
    /// tenth); default 6e-4 for gpt2-small, 1e-3 for the smaller presets.
    #[arg(long)]
    lr: Option<f64>,
    /// `hybrid` alternates full and predicted steps; `full` is the all-full baseline.
    #[arg(long, value_enum, default_value_t = Mode::Hybrid)]
    mode: Mode,
    /// Full steps before the first prediction (hybrid mode).
    #[arg(long, default_value_t = HybridConfig::default().warmup_steps as u64, value_parser = clap::value_parser!(u64).range(1..))]
    warmup: u64,
    /// A UTF-8 text file, or a directory walked for text files; default: the Cargo
    /// registry's Rust and Markdown sources.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Read at most this many MiB of text.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..))]
    corpus_mib: u64,
    /// Directory for metrics, checkpoints and the plot.
    #[arg(long, default_value = "runs/gpt2")]
    out: PathBuf,
    /// Continue the run in `--out` from its latest checkpoint.
    #[arg(long)]
    resume: bool,
    /// Replace an earlier run of the same mode in `--out`.
    #[arg(long, conflicts_with = "resume")]
    overwrite: bool,
    /// Validation loss every this many steps.
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u64).range(1..))]
    eval_every: u64,
    /// Batches per validation.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..))]
    eval_batches: u64,
    /// Checkpoint every this many steps (between predict blocks) and at the end.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    checkpoint_every: u64,
    /// Compute the loss this many tokens at a time, never building the full
    /// `tokens × vocab` logits (see `docs/trainer.md`).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    loss_chunk: Option<u64>,
    /// Round the vocabulary up to a multiple of this (64 speeds up GPUs).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pad_vocab: u64,
    /// Start even if the memory estimate exceeds the device's memory.
    #[arg(long)]
    ignore_memory_estimate: bool,
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    Hybrid,
    Full,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Hybrid => "hybrid",
            Mode::Full => "full",
        }
    }
}

/// A failure and the exit code it gets: 2 for bad input, 1 for a run that broke.
struct Failure {
    code: i32,
    message: String,
}

fn bad_input(message: impl Into<String>) -> Failure {
    Failure { code: 2, message: message.into() }
}

fn broke(message: impl Into<String>) -> Failure {
    Failure { code: 1, message: message.into() }
}

fn main() {
    let args = Args::parse();
    if let Err(failure) = run(args) {
        eprintln!("error: {}", failure.message);
        std::process::exit(failure.code);
    }
}

/// Everything a run needs, settled before any device work.
struct Plan {
    args: Args,
    preset: String,
    config: Gpt2Config,
    batch: usize,
    seq: usize,
    steps: usize,
    lr: f64,
    loss_chunk: Option<usize>,
    files: RunFiles,
    data: TokenDataset,
    validation: Vec<HostBatch>,
}

/// Where a mode's outputs go inside `--out`.
struct RunFiles {
    out: PathBuf,
    metrics: PathBuf,
    validation: PathBuf,
    checkpoints: PathBuf,
}

impl RunFiles {
    fn new(out: &Path, mode: Mode) -> Self {
        Self {
            out: out.to_path_buf(),
            metrics: out.join(format!("metrics-{}.jsonl", mode.name())),
            validation: out.join(format!("validation-{}.csv", mode.name())),
            checkpoints: out.join(format!("checkpoints-{}", mode.name())),
        }
    }
}

fn run(args: Args) -> Result<(), Failure> {
    let selection = select(&args.backend).map_err(|e| Failure { code: e.exit_code(), message: e.to_string() })?;
    eprintln!("{selection}");
    let gpu = match &selection.chosen {
        #[cfg(feature = "cuda")]
        Chosen::Cuda { .. } => true,
        Chosen::Wgpu { adapter, .. } => adapter.kind.is_hardware(),
        Chosen::Cpu => false,
    };

    let preset = args.preset.clone().unwrap_or_else(|| if gpu { "gpt2-small" } else { "gpt2-mini" }.into());
    let config = Gpt2Config::preset(&preset)
        .map_err(|e| bad_input(e.to_string()))?
        .with_pad_vocab_to(args.pad_vocab as usize);
    let batch = args.batch as usize;
    let seq = args.seq.map_or(if gpu { config.context } else { 64.min(config.context) }, |s| s as usize);
    if seq > config.context {
        return Err(bad_input(format!("--seq {seq} exceeds {preset}'s context of {} tokens", config.context)));
    }
    let steps = args.steps.map_or(if gpu { 300 } else { 200 }, |s| s as usize);
    let lr = args.lr.unwrap_or(if preset == "gpt2-small" { 6e-4 } else { 1e-3 });
    if !(lr.is_finite() && lr > 0.0) {
        return Err(bad_input(format!("--lr must be a positive number, got {lr}")));
    }
    let loss_chunk = args.loss_chunk.map(|c| c as usize);

    check_memory(&args, &selection, &config, &preset, batch, seq, loss_chunk)?;
    let files = prepare_out(&args)?;

    let corpus = match &args.data {
        Some(path) => Corpus::from_path(path, Some((args.corpus_mib as usize) << 20)),
        None => Corpus::cargo_registry(Some((args.corpus_mib as usize) << 20)),
    }
    .map_err(|e| bad_input(e.to_string()))?;
    if let CorpusSource::CargoRegistry(dir) = &corpus.source {
        eprintln!(
            "no --data given: training on the Rust and Markdown sources of the Cargo registry ({})",
            dir.display()
        );
    }
    eprintln!(
        "corpus: {:.1} MiB from {} files{}",
        corpus.bytes as f64 / (1 << 20) as f64,
        corpus.files,
        match corpus.skipped_non_utf8 {
            0 => String::new(),
            n => format!(" ({n} non-UTF-8 files skipped)"),
        }
    );
    let tokenizer = Gpt2Tokenizer::new().map_err(|e| broke(e.to_string()))?;
    let started = Instant::now();
    let tokens = tokenizer.encode_corpus(&corpus.text);
    drop(corpus);
    eprintln!("tokenized: {} tokens in {:.1} s", tokens.len(), started.elapsed().as_secs_f64());
    let count = tokens.len();
    let data = TokenDataset::split(tokens, 0.1)
        .map_err(|e| bad_input(format!("the corpus has {count} tokens, too few to train on ({e})")))?;
    for (split, tokens) in [(Split::Train, data.train()), (Split::Validation, data.validation())] {
        if tokens.len() <= seq {
            return Err(bad_input(format!(
                "the {split} split has {} tokens, too few for one window of {seq}; give more text or a smaller --seq",
                tokens.len()
            )));
        }
    }
    let validation = evaluation_windows(data.validation(), batch.min(8), seq, args.eval_batches as usize);
    let validation = if validation.is_empty() { evaluation_windows(data.validation(), 1, seq, 1) } else { validation };

    let plan = Plan { args, preset, config, batch, seq, steps, lr, loss_chunk, files, data, validation };
    let summary = selection.run(plan)?;
    println!("{summary}");
    let plot = summary.out.join("gpt2.svg");
    match write_plot(&summary.out, &plot) {
        Ok(modes) => println!("plot: {} ({})", plot.display(), modes.join(" and ")),
        Err(err) => eprintln!("warning: no plot written: {err}"),
    }
    Ok(())
}

/// Prints the memory estimate and refuses a run that cannot fit where the device's
/// memory is known.
fn check_memory(
    args: &Args,
    selection: &Selection,
    config: &Gpt2Config,
    preset: &str,
    batch: usize,
    seq: usize,
    loss_chunk: Option<usize>,
) -> Result<(), Failure> {
    let estimate = Gpt2MemoryEstimate::new(config, batch, seq, 4, loss_chunk);
    eprintln!(
        "{preset}: {} parameters; batch {batch} × {seq} tokens; estimated peak {estimate}",
        config.parameter_count()
    );
    if loss_chunk.is_none() {
        let chunked = Gpt2MemoryEstimate::new(config, batch, seq, 4, Some(seq));
        if chunked.total() < estimate.total() {
            eprintln!("  (with --loss-chunk {seq}: {})", format_bytes(chunked.total() as f64));
        }
    }
    match device_memory(selection) {
        Some(capacity) if estimate.total() > capacity && !args.ignore_memory_estimate => Err(bad_input(format!(
            "this run needs about {} but the device has {}: lower --batch or --seq, pass \
             --loss-chunk {}, or a smaller --preset (--ignore-memory-estimate starts anyway)",
            format_bytes(estimate.total() as f64),
            format_bytes(capacity as f64),
            seq.min(256)
        ))),
        Some(capacity) => {
            eprintln!("  device memory: {}", format_bytes(capacity as f64));
            Ok(())
        }
        None => Ok(()),
    }
}

/// Creates `--out`, checks it is writable, and refuses to overwrite an earlier run unless
/// asked to (or to resume one that is there).
fn prepare_out(args: &Args) -> Result<RunFiles, Failure> {
    let files = RunFiles::new(&args.out, args.mode);
    let unusable = |err: std::io::Error| bad_input(format!("--out {} is not a writable directory: {err}", args.out.display()));
    fs::create_dir_all(&args.out).map_err(unusable)?;
    let probe = args.out.join(".write-test");
    fs::write(&probe, b"").map_err(unusable)?;
    let _ = fs::remove_file(&probe);
    let earlier = files.metrics.exists() || files.checkpoints.exists();
    if args.resume && !files.checkpoints.join("latest").exists() {
        return Err(bad_input(format!(
            "--resume: no {} checkpoint in {}",
            args.mode.name(),
            files.checkpoints.display()
        )));
    }
    if earlier && !args.resume {
        if !args.overwrite {
            return Err(bad_input(format!(
                "{} already holds a {} run; pass --resume to continue it, --overwrite to replace it, \
                 or another --out",
                args.out.display(),
                args.mode.name()
            )));
        }
        for path in [&files.metrics, &files.validation] {
            let _ = fs::remove_file(path);
        }
        let _ = fs::remove_dir_all(&files.checkpoints);
    }
    Ok(files)
}

/// What a finished run prints.
struct Summary {
    out: PathBuf,
    text: String,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl BackendJob for Plan {
    type Output = Result<Summary, Failure>;

    fn run<B: TrainBackend>(self, device: B::Device) -> Self::Output {
        let args = &self.args;
        B::seed(&device, args.seed);
        let model: Gpt2<B> = self.config.init::<B>(&device).with_loss_chunk(self.loss_chunk);
        let optimizer = AdamWConfig::new()
            .with_weight_decay(0.1)
            .with_grad_clipping(Some(GradientClippingConfig::Norm(1.0)))
            .init();
        let files = &self.files;
        let mut trainer = if args.resume {
            HybridTrainer::resume(model, optimizer, &files.checkpoints, device.clone())
                .map_err(|e| bad_input(format!("--resume: {e}")))?
                .with_metrics_appended(&files.metrics)
        } else {
            let config = match args.mode {
                Mode::Hybrid => HybridConfig::default().with_warmup_steps(args.warmup as usize),
                Mode::Full => HybridConfig::all_full(),
            }
            .with_seed(args.seed);
            let lr = LrSchedule::WarmupCosine {
                peak: self.lr,
                warmup_steps: (self.steps / 10).max(1),
                total_steps: self.steps,
                min_lr: self.lr / 10.0,
            };
            HybridTrainer::new(model, optimizer, config, lr, device.clone())
                .map_err(|e| bad_input(e.to_string()))?
                .with_metrics(&files.metrics)
        }
        .map_err(|e| bad_input(e.to_string()))?;

        // The same stream of batches as an uninterrupted run: skip what was consumed.
        let mut sampler = WindowSampler::new(self.batch, self.seq, args.seed).map_err(|e| bad_input(e.to_string()))?;
        let first = trainer.steps_taken();
        for _ in 0..first {
            sampler.sample(self.data.train(), Split::Train).map_err(|e| broke(e.to_string()))?;
        }
        if first >= self.steps {
            return Err(bad_input(format!("the run in {} already took {first} of --steps {}", files.out.display(), self.steps)));
        }
        let mut validation_log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&files.validation)
            .map_err(|e| broke(format!("{}: {e}", files.validation.display())))?;
        if first == 0 {
            writeln!(validation_log, "step,train_seconds,validation_loss").map_err(|e| broke(e.to_string()))?;
        }

        eprintln!(
            "training {} on {} for steps {}..{} ({} mode), peak lr {}",
            self.preset,
            B::name(&device),
            first + 1,
            self.steps,
            args.mode.name(),
            self.lr
        );
        let progress = ProgressBar::new(self.steps as u64).with_position(first as u64);
        progress.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} [{elapsed_precise}<{eta_precise}] {msg}")
                .expect("a valid template"),
        );
        let mut detector = LeakDetector::new(50);
        // Training time so far, carried across resumes by the checkpointed statistics.
        let resumed = trainer.statistics();
        let mut train_seconds = resumed.full_seconds + resumed.predict_seconds;
        let mut tokens_seen = resumed.total_items as usize;
        let mut last_checkpoint = None;
        let mut records: Vec<StepRecord> = Vec::new();
        let mut validation_loss = f64::NAN;
        let evaluate = |trainer: &HybridTrainer<B, Gpt2<B>, _, _>| trainer.model().valid().evaluate(&self.validation, &device);
        if first == 0 {
            validation_loss = evaluate(&trainer);
            writeln!(validation_log, "0,0,{validation_loss}").map_err(|e| broke(e.to_string()))?;
            progress.suspend(|| eprintln!("step     0: validation loss {validation_loss:.4}"));
        }

        for step in first + 1..=self.steps {
            let batch = sampler.sample(self.data.train(), Split::Train).map_err(|e| broke(e.to_string()))?;
            let record = trainer.step(batch.into_device::<B>(&device)).map_err(|e| broke(format!("step {step}: {e}")))?;
            train_seconds += record.seconds;
            tokens_seen += record.items;
            if let Some(memory) = record.memory {
                if step > first + trainer.config().warmup_steps.min(self.steps / 5) {
                    detector.record(step as u64, memory.bytes_in_use);
                }
            }
            progress.set_message(format!(
                "{:<7} loss {:.3}  {:.0} tok/s  {}",
                record.phase.to_string(),
                record.loss,
                record.items_per_second,
                record.memory.map_or("".into(), |m| format!("in use {}", format_bytes(m.bytes_in_use as f64)))
            ));
            progress.inc(1);
            records.push(record);

            if step % args.eval_every as usize == 0 || step == self.steps {
                validation_loss = evaluate(&trainer);
                writeln!(validation_log, "{step},{train_seconds},{validation_loss}").map_err(|e| broke(e.to_string()))?;
                // Printed whether or not the bar is drawn (it is hidden when stderr is no terminal).
                progress.suspend(|| {
                    eprintln!(
                        "step {step:>5}: validation loss {validation_loss:.4}, {:.0} tok/s",
                        tokens_seen as f64 / train_seconds.max(1e-9)
                    )
                });
            }
            if (step % args.checkpoint_every as usize == 0 || step == self.steps) && trainer.can_checkpoint() {
                let path = trainer.save_checkpoint(&files.checkpoints).map_err(|e| broke(e.to_string()))?;
                last_checkpoint = Some((step, path));
            }
        }
        progress.finish_and_clear();

        let stats = trainer.statistics();
        let recent: Vec<f64> = records.iter().rev().filter(|r| !r.predicted).take(10).map(|r| r.loss).collect();
        let train_loss = recent.iter().sum::<f64>() / recent.len().max(1) as f64;
        let final_in_use = records.last().and_then(|r| r.memory).map(|m| m.bytes_in_use);
        let mut text = format!(
            "\n{} ({} mode) on {}: {} steps\n\
             train loss (last 10 full steps) {train_loss:.4}, validation loss {validation_loss:.4}\n\
             {:.0} tokens/s over {:.1} s of training; {:.0}% of steps predicted, {} rolled back\n",
            self.preset,
            args.mode.name(),
            B::name(&device),
            stats.steps,
            tokens_seen as f64 / train_seconds.max(1e-9),
            train_seconds,
            stats.predicted_share * 100.0,
            stats.rollbacks,
        );
        if let (Some(peak), Some(last)) = (stats.peak_bytes_in_use, final_in_use) {
            text += &format!(
                "device memory in use: peak {}, final {}; after warmup {}\n",
                format_bytes(peak as f64),
                format_bytes(last as f64),
                detector.report()
            );
        } else {
            text += "device memory: not available on this backend (no device pool to read)\n";
        }
        text += &match last_checkpoint {
            Some((step, path)) => format!("checkpoint of step {step}: {} (continue with --resume)\n", path.display()),
            None => "no checkpoint written: the run ended inside a predict block\n".into(),
        };
        text += &format!("metrics: {}", files.metrics.display());
        Ok(Summary { out: files.out.clone(), text })
    }
}

/// One mode's curves, read back from its files.
struct Curves {
    mode: &'static str,
    train: Vec<(f64, f64)>,
    validation: Vec<(f64, f64)>,
    memory_mib: Vec<(f64, f64)>,
}

fn read_curves(out: &Path, mode: Mode) -> Option<Curves> {
    let metrics = fs::read_to_string(RunFiles::new(out, mode).metrics).ok()?;
    let records: Vec<StepRecord> = metrics.lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
    let validation = fs::read_to_string(RunFiles::new(out, mode).validation).unwrap_or_default();
    Some(Curves {
        mode: mode.name(),
        train: records.iter().filter(|r| r.loss.is_finite()).map(|r| (r.step as f64 + 1.0, r.loss)).collect(),
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
    })
    .filter(|c| !c.train.is_empty())
}

/// Loss (top) and device memory (bottom) against step for every mode that has run.
fn write_plot(out: &Path, path: &Path) -> Result<Vec<&'static str>, Box<dyn std::error::Error>> {
    let runs: Vec<Curves> = [Mode::Hybrid, Mode::Full].into_iter().filter_map(|m| read_curves(out, m)).collect();
    if runs.is_empty() {
        return Err("no metrics to plot".into());
    }
    let max_step = runs.iter().flat_map(|r| r.train.iter().map(|p| p.0)).fold(1.0, f64::max);
    let losses = runs.iter().flat_map(|r| r.train.iter().chain(&r.validation).map(|p| p.1));
    let (low, high) = losses.fold((f64::MAX, f64::MIN), |(lo, hi), l| (lo.min(l), hi.max(l)));
    let max_mib = runs.iter().flat_map(|r| r.memory_mib.iter().map(|p| p.1)).fold(1.0, f64::max);

    let root = SVGBackend::new(path, (900, 700)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(420);
    let mut loss_chart = ChartBuilder::on(&top)
        .caption("GPT-2: loss against step", ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..max_step, (low * 0.95)..(high * 1.02))?;
    loss_chart.configure_mesh().x_desc("step").y_desc("loss").draw()?;
    let has_memory = runs.iter().any(|r| !r.memory_mib.is_empty());
    let memory_caption = if has_memory {
        "device memory in use (MiB)"
    } else {
        "device memory in use: not available on this backend"
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
            .draw_series(LineSeries::new(run.memory_mib.iter().copied(), colour))?
            .label(run.mode)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
    }
    loss_chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw()?;
    memory_chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw()?;
    root.present()?;
    Ok(runs.iter().map(|r| r.mode).collect())
}
