//! How fast hybrid training reaches the loss all-full training ends at, against the
//! strongest fair baselines, side by side in one run on the same data, over several seeds.
//!
//! ```text
//! cargo bench --bench trainer -- --backend cpu                       # gpt2-tiny
//! cargo bench --bench trainer -- --backend cuda --preset gpt2-small --batch 8 --seq 1024 --seeds 1
//! ```
//!
//! For each seed, every run starts from the same weights and sees the same batches in the
//! same order, with the same AdamW schedule (linear warmup over a tenth of the run, cosine
//! decay to a tenth of the peak). The runs (`--runs`):
//!
//! - `full`: all-full ([`HybridConfig::all_full`]) for `--steps` steps;
//! - `short`: all-full for `--short-fraction` of the steps, its schedule fully decayed in
//!   them (the baseline a faster method must also beat);
//! - `hybrid`: [`HybridConfig::default`];
//! - `skip`: the ablation. It replays the hybrid run's schedule on an all-full trainer,
//!   with its predicted steps passed over (`skip_step`: the batch is drawn and dropped,
//!   the learning rate moves on) instead of predicted. It shows what the predicted
//!   updates add over simply leaving those steps out;
//! - `select`: all-full steps that score their batch forward only and train on the
//!   examples `--select` chooses (`HybridTrainer::with_selection`; by default the half
//!   with the highest losses, from 50% to 90% of the run, as Composer's
//!   `selective_backprop`);
//! - `average`: all-full steps with a moving average of the weights
//!   (`HybridTrainer::with_weight_average`, `--average decay=F,from=F`). At each
//!   evaluation the average and the live weights are both scored forward only on a probe
//!   set of `--average-probe` training windows (drawn with their own seed; the time it
//!   takes counts as training time), and the better of the two is the run's model: its
//!   validation loss is the run's.
//!
//! `--hybrid name=value,...` overrides fields of the hybrid run's [`HybridConfig`] (for
//! ablations of the guard), and `--probe-batches N` gives it a held-out probe set of N
//! training-split windows drawn with their own seed (0: the trainer takes the first
//! block's batches).
//!
//! A throwaway warm-up (two full steps and one evaluation) first absorbs kernel compilation
//! and autotuning. Validation loss is measured every `--eval-every` steps and at the end on
//! fixed windows spread over the validation split (`--eval-batches` of them; 64 batches of
//! 4 × 32 tokens resolve differences of about 0.01 nats between runs). "Train s" is the sum of the step times
//! (evaluation excluded). The target is the `full` run's final validation loss of the same
//! seed, relaxed by `--target-slack`. For hybrid the report also gives:
//! - p, the predicted share of steps;
//! - c, the mean cost of a predicted step over the median full step;
//! - e, the mean verified efficiency of the kept blocks (and of all blocks): probe gain
//!   over what their full steps would have gained at the recent pace;
//! - blocks kept and rolled back.
//!
//! The result is Markdown, ready for `docs/benchmarks.md`.

use std::time::Instant;

use burn::module::AutodiffModule;
use clap::Parser;
use leanburn::data::{
    evaluation_windows, Corpus, Gpt2Tokenizer, HostBatch, Split, TokenBatch, TokenDataset, WindowSampler,
};
use leanburn::device::select;
use leanburn::model::{Gpt2, Gpt2Config};
use leanburn::optim::ClippedAdamW;
use leanburn::trainer::SelectionRule;
use leanburn::{AverageConfig, HybridConfig, HybridTrainer, LrSchedule, SelectionConfig, StepReport};
use leanburn::{BackendArgs, BackendJob, TrainBackend};

#[derive(Parser, Debug, Clone)]
#[command(about = "HybridTrainer against all-full training and its ablation: time to the all-full loss")]
struct Args {
    #[command(flatten)]
    backend: BackendArgs,
    /// GPT-2 preset (gpt2-tiny, gpt2-mini, gpt2-micro, gpt2-small).
    #[arg(long, default_value = "gpt2-tiny")]
    preset: String,
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Tokens per sequence (at most the preset's context).
    #[arg(long, default_value_t = 64)]
    seq: usize,
    /// Trainer steps of the full-length runs.
    #[arg(long, default_value_t = 240)]
    steps: usize,
    /// Peak AdamW learning rate (linear warmup, cosine decay to a tenth).
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// A UTF-8 file or a directory of text; default: sources in the Cargo registry.
    #[arg(long)]
    data: Option<std::path::PathBuf>,
    /// Read at most this many MiB of text.
    #[arg(long, default_value_t = 4)]
    corpus_mib: usize,
    /// Tokens per chunk of the LM head's loss (the main job's default on the CPU is 512);
    /// without it, the full logits (Burn's cross-entropy), as this bench ran before.
    #[arg(long)]
    loss_chunk: Option<usize>,
    /// Validation loss every this many steps.
    #[arg(long, default_value_t = 20)]
    eval_every: usize,
    /// Validation batches per evaluation.
    #[arg(long, default_value_t = 8)]
    eval_batches: usize,
    /// Relative slack on the target (the full run's final validation loss).
    #[arg(long, default_value_t = 0.0)]
    target_slack: f64,
    /// The runs, in order (`skip` needs `hybrid` before it).
    #[arg(long, value_delimiter = ',', default_value = "full,short,hybrid,skip")]
    runs: Vec<RunKind>,
    /// Seeds: each gives its own initial weights and batch stream, shared by its runs.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    seeds: Vec<u64>,
    /// Steps of the `short` run, as a fraction of `--steps`.
    #[arg(long, default_value_t = 0.8)]
    short_fraction: f64,
    /// Write each run's step records (JSON lines) into this directory, as
    /// `<run>-seed<N>.jsonl`.
    #[arg(long)]
    metrics: Option<std::path::PathBuf>,
    /// Batches of the hybrid run's probe set (`HybridTrainer::with_probe_set`), windows of
    /// the training split drawn with their own seed; 0: the trainer takes the first
    /// block's batches.
    #[arg(long, default_value_t = 0)]
    probe_batches: usize,
    /// Overrides of the hybrid run's configuration, `name=value` by
    /// [`HybridConfig`]'s field names (e.g. `max_scale=1.0,max_horizon=8`).
    #[arg(long = "hybrid", value_delimiter = ',')]
    hybrid_overrides: Vec<String>,
    /// The `select` run's selection, `name=value,...`: `keep=F` (the top fraction) or
    /// `beta=F` (Selective-Backprop's `rank^beta` rule), `from=F` and `until=F` (fractions
    /// of the run), `full_every=N` (every N-th selecting step trains on the whole batch).
    #[arg(long = "select", value_delimiter = ',', default_value = "keep=0.5,from=0.5,until=0.9")]
    selection: Vec<String>,
    /// The `average` run's weight average, `name=value,...`: `decay=F` (the moving
    /// average's), `from=F` (the fraction of the run it starts at).
    #[arg(long = "average", value_delimiter = ',', default_value = "decay=0.99,from=0.5")]
    average: Vec<String>,
    /// Training-split windows the `average` run chooses between its average and its live
    /// weights on.
    #[arg(long, default_value_t = 8)]
    average_probe: usize,
    /// Accepted for `cargo bench` compatibility.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum RunKind {
    Full,
    Short,
    Hybrid,
    Skip,
    Select,
    Average,
}

impl RunKind {
    fn label(self) -> &'static str {
        match self {
            RunKind::Full => "all-full",
            RunKind::Short => "all-full, short",
            RunKind::Hybrid => "hybrid",
            RunKind::Skip => "skip (ablation)",
            RunKind::Select => "select",
            RunKind::Average => "average",
        }
    }
}

/// One training run's measurements.
struct RunResult {
    kind: RunKind,
    records: Vec<StepReport>,
    /// Steps passed over (the skip ablation).
    skipped: usize,
    /// (step, cumulative training seconds, validation loss), the first at step 0.
    evaluations: Vec<(usize, f64, f64)>,
    /// Seconds spent outside the steps that count as training (the average's probes).
    extra_seconds: f64,
    /// Evaluations at which the weight average was the better model.
    average_chosen: usize,
}

impl RunResult {
    fn new(kind: RunKind, steps: usize) -> Self {
        Self {
            kind,
            records: Vec::with_capacity(steps),
            skipped: 0,
            evaluations: Vec::new(),
            extra_seconds: 0.0,
            average_chosen: 0,
        }
    }

    /// The per-seed table's row from the run's label on, against the seed's `target`
    /// loss, which its all-full run reached in `full_time` seconds.
    fn row(&self, target: Option<f64>, full_time: Option<f64>) -> String {
        let reached = target.and_then(|t| self.reached(t));
        let (kept, rolled) = self.blocks();
        let optional = |value: Option<f64>| value.map_or("–".into(), |v| format!("{v:.2}"));
        let efficiency = match (self.efficiency(true), self.efficiency(false)) {
            (None, None) => "–".into(),
            (kept, all) => format!("{} ({})", optional(kept), optional(all)),
        };
        format!(
            "{} | {} | {:.4} | {:.1} | {} | {} | {:.0}% | {} | {} | {} | {}",
            self.kind.label(),
            self.steps(),
            self.final_loss(),
            self.train_seconds(),
            reached.map_or("not reached".into(), |r| format!("{:.1}", r.1)),
            match (reached, full_time) {
                (Some(r), Some(f)) if f > 0.0 => format!("{:.2}", r.1 / f),
                _ => "–".into(),
            },
            self.predicted_share() * 100.0,
            match (self.selected_share(), self.kind) {
                (Some(share), _) => format!("{:.0}%", share * 100.0),
                (None, RunKind::Average) =>
                    format!("average chosen {}/{}", self.average_chosen, self.evaluations.len() - 1),
                _ => "–".into(),
            },
            self.cost_ratio().map_or("–".into(), |c| format!("{c:.3}")),
            efficiency,
            if self.kind == RunKind::Hybrid { format!("{kept} / {rolled}") } else { "–".into() },
        )
    }

    fn train_seconds(&self) -> f64 {
        self.records.iter().map(|r| r.seconds).sum::<f64>() + self.extra_seconds
    }

    fn steps(&self) -> usize {
        self.records.len() + self.skipped
    }

    fn predicted_share(&self) -> f64 {
        self.records.iter().filter(|r| r.predicted).count() as f64 / self.records.len().max(1) as f64
    }

    /// Blocks: (kept, rolled back). A kept block's first step is predicted and probed; a
    /// rejected one's trained as a full step.
    fn blocks(&self) -> (usize, usize) {
        let kept = self.records.iter().filter(|r| r.predicted && r.loss.is_some()).count();
        let rolled = self.records.iter().filter(|r| r.rolled_back).count();
        (kept, rolled)
    }

    /// Mean verified efficiency of the kept blocks (`kept`) or of all blocks, where known.
    fn efficiency(&self, kept: bool) -> Option<f64> {
        let values: Vec<f64> =
            self.records.iter().filter(|r| !kept || !r.rolled_back).filter_map(|r| r.efficiency).collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    }

    /// Mean seconds of a predicted step over the median full step.
    fn cost_ratio(&self) -> Option<f64> {
        let predicted: Vec<f64> = self.records.iter().filter(|r| r.predicted).map(|r| r.seconds).collect();
        let mut full: Vec<f64> = self.records.iter().filter(|r| !r.predicted).map(|r| r.seconds).collect();
        if predicted.is_empty() || full.is_empty() {
            return None;
        }
        full.sort_by(f64::total_cmp);
        let median = full[full.len() / 2];
        (median > 0.0).then(|| predicted.iter().sum::<f64>() / predicted.len() as f64 / median)
    }

    /// Of the examples the selecting steps scored, the share they trained on.
    fn selected_share(&self) -> Option<f64> {
        let (scored, kept) = self
            .records
            .iter()
            .filter_map(|r| r.selection)
            .fold((0, 0), |(scored, kept), c| (scored + c.scored, kept + c.kept));
        (scored > 0).then(|| kept as f64 / scored as f64)
    }

    fn final_loss(&self) -> f64 {
        self.evaluations.last().map_or(f64::NAN, |e| e.2)
    }

    /// (step, seconds) of the first evaluation at or below `target`.
    fn reached(&self, target: f64) -> Option<(usize, f64)> {
        self.evaluations.iter().find(|e| e.2 <= target).map(|e| (e.0, e.1))
    }
}

/// Mean, min and max.
fn spread(values: &[f64]) -> String {
    if values.is_empty() {
        return "–".into();
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    if values.len() == 1 {
        return format!("{mean:.4}");
    }
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{mean:.4} ({min:.4}–{max:.4})")
}

struct Bench {
    args: Args,
    config: Gpt2Config,
    data: TokenDataset,
    validation: Vec<HostBatch>,
}

impl BackendJob for Bench {
    type Output = Result<(), String>;

    fn run<B: TrainBackend>(self, device: B::Device) -> Self::Output {
        let seed = self.args.seeds[0];
        drop(self.train::<B>(&device, RunKind::Full, seed, 2, None, false)?);
        let mut results: Vec<(u64, Vec<RunResult>)> = Vec::new();
        for &seed in &self.args.seeds {
            let mut runs: Vec<RunResult> = Vec::new();
            for &kind in &self.args.runs {
                let steps = match kind {
                    RunKind::Short => ((self.args.steps as f64 * self.args.short_fraction).round() as usize).max(1),
                    _ => self.args.steps,
                };
                let replay = match kind {
                    RunKind::Skip => Some(
                        runs.iter()
                            .find(|r| r.kind == RunKind::Hybrid)
                            .ok_or("the skip run replays the hybrid run: list hybrid before skip")?
                            .records
                            .iter()
                            .map(|r| r.predicted)
                            .collect::<Vec<bool>>(),
                    ),
                    _ => None,
                };
                runs.push(self.train::<B>(&device, kind, seed, steps, replay.as_deref(), true)?);
            }
            results.push((seed, runs));
        }
        self.report::<B>(&device, &results);
        Ok(())
    }
}

/// The trainer every run of the bench drives.
type BenchTrainer<B> = HybridTrainer<B, Gpt2<B>, ClippedAdamW<B>, TokenBatch<B>>;

impl Bench {
    /// One run of `kind` over `steps` steps from the seed's weights and batches; `skipped`
    /// marks the steps the skip ablation passes over.
    fn train<B: TrainBackend>(
        &self,
        device: &B::Device,
        kind: RunKind,
        seed: u64,
        steps: usize,
        skipped: Option<&[bool]>,
        evaluate: bool,
    ) -> Result<RunResult, String> {
        let args = &self.args;
        let mut trainer = self.trainer::<B>(device, kind, seed, steps, evaluate)?;
        let mut sampler = WindowSampler::new(args.batch, args.seq, seed).map_err(|e| e.to_string())?;
        let mut result = RunResult::new(kind, steps);
        // The average run's probe set: training windows with their own seed.
        let average_probe = match kind {
            RunKind::Average => self.train_windows(seed ^ 0x0a7e_5a11, args.average_probe.max(1))?,
            _ => Vec::new(),
        };
        let evaluate_now = |trainer: &BenchTrainer<B>| self.validation_loss(trainer, &average_probe, device);
        if evaluate {
            result.evaluations.push((0, 0.0, evaluate_now(&trainer).0));
        }
        let started = Instant::now();
        for step in 1..=steps {
            let batch = sampler.sample(self.data.train(), Split::Train).map_err(|e| e.to_string())?;
            if skipped.is_some_and(|mask| mask.get(step - 1).copied().unwrap_or(false)) {
                trainer.skip_step();
                result.skipped += 1;
            } else {
                let record = trainer.step(batch.to_device::<B>(device)).map_err(|e| e.to_string())?;
                result.records.push(record);
            }
            if evaluate && (step % args.eval_every == 0 || step == steps) {
                let (loss, probe_seconds, chose_average) = evaluate_now(&trainer);
                result.extra_seconds += probe_seconds;
                result.average_chosen += usize::from(chose_average);
                result.evaluations.push((step, result.train_seconds(), loss));
                eprintln!(
                    "seed {seed} {:>16} step {step:>5}/{steps}: val loss {loss:.4}, train {:.1} s, {:.0}% predicted, \
                     |w| {:.2}",
                    kind.label(),
                    result.train_seconds(),
                    result.predicted_share() * 100.0,
                    parameter_norm(trainer.model())
                );
            }
        }
        if !evaluate {
            eprintln!("warm-up: {steps} steps in {:.1} s", started.elapsed().as_secs_f64());
        }
        Ok(result)
    }

    /// The trainer of a `kind` run from the seed's weights: AdamW clipped at 1 on the
    /// bench's schedule, and the run's selection, weight average, probe set and metrics file.
    fn trainer<B: TrainBackend>(
        &self,
        device: &B::Device,
        kind: RunKind,
        seed: u64,
        steps: usize,
        evaluate: bool,
    ) -> Result<BenchTrainer<B>, String> {
        let args = &self.args;
        B::seed(device, seed);
        let model: Gpt2<B> = self.config.init(device).with_loss_chunk(args.loss_chunk);
        let optimizer = leanburn::optim::clipped_adamw(0.1, 1.0);
        let lr = LrSchedule::WarmupCosine {
            peak: args.lr,
            warmup_steps: (steps / 10).max(1).min(steps),
            total_steps: steps,
            min_lr: args.lr / 10.0,
        };
        let config = match kind {
            RunKind::Hybrid => hybrid_config(&args.hybrid_overrides)?.with_seed(seed),
            _ => HybridConfig::all_full().with_seed(seed),
        };
        let mut trainer =
            HybridTrainer::new(model, optimizer, config, lr, device.clone()).map_err(|e| e.to_string())?;
        if kind == RunKind::Select {
            let selection = selection_config(&args.selection, steps)?.with_seed(seed);
            trainer = trainer.with_selection(selection).map_err(|e| e.to_string())?;
        }
        if kind == RunKind::Average {
            let average = average_config(&args.average, steps)?;
            trainer = trainer.with_weight_average(average).map_err(|e| e.to_string())?;
        }
        if kind == RunKind::Hybrid && args.probe_batches > 0 {
            let probe_set = self.train_windows(seed ^ 0x5eed_0f9b, args.probe_batches)?;
            let probe_set = probe_set.into_iter().map(|batch| batch.to_device::<B>(device)).collect();
            trainer = trainer.with_probe_set(probe_set).map_err(|e| e.to_string())?;
        }
        if let Some(dir) = args.metrics.as_ref().filter(|_| evaluate) {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let name = format!("{kind:?}-seed{seed}.jsonl").to_lowercase();
            trainer = trainer.with_metrics(dir.join(name)).map_err(|e| e.to_string())?;
        }
        Ok(trainer)
    }

    /// `count` training windows drawn with `seed`.
    fn train_windows(&self, seed: u64, count: usize) -> Result<Vec<HostBatch>, String> {
        let mut sampler = WindowSampler::new(self.args.batch, self.args.seq, seed).map_err(|e| e.to_string())?;
        (0..count)
            .map(|_| sampler.sample(self.data.train(), Split::Train))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())
    }

    /// The validation loss of the run's model: the live weights, or for the average run
    /// whichever of live and average scores better on `average_probe` (timed: a run using
    /// the average pays for that choice); the seconds that choice took; whether the average
    /// won.
    fn validation_loss<B: TrainBackend>(
        &self,
        trainer: &BenchTrainer<B>,
        average_probe: &[HostBatch],
        device: &B::Device,
    ) -> (f64, f64, bool) {
        let live = trainer.model().valid();
        let Some(average) = trainer.averaged_model().map(|m| m.valid()) else {
            return (live.evaluate(&self.validation, device), 0.0, false);
        };
        let started = Instant::now();
        let (on_live, on_average) = (live.evaluate(average_probe, device), average.evaluate(average_probe, device));
        let probe_seconds = started.elapsed().as_secs_f64();
        let better = if on_average < on_live { average } else { live };
        (better.evaluate(&self.validation, device), probe_seconds, on_average < on_live)
    }

    fn report<B: TrainBackend>(&self, device: &B::Device, results: &[(u64, Vec<RunResult>)]) {
        let args = &self.args;
        println!(
            "\n{}, {}: {} parameters, batch {} × {} tokens, {} steps, peak lr {}, seeds {:?}, loss {}\n",
            B::name(device),
            args.preset,
            self.config.parameter_count(),
            args.batch,
            args.seq,
            args.steps,
            args.lr,
            args.seeds,
            args.loss_chunk.map_or("over the full logits".to_string(), |chunk| format!("in chunks of {chunk} tokens")),
        );
        println!("Per seed (target: the seed's all-full final loss × {}):\n", 1.0 + args.target_slack);
        println!("| seed | run | steps | val loss | train s | s to target | × full's | predicted | selected / averaged | c | e kept (all) | blocks kept / rolled back |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
        for (seed, runs) in results {
            let full = runs.iter().find(|r| r.kind == RunKind::Full);
            let target = full.map(|f| f.final_loss() * (1.0 + args.target_slack));
            let full_time = full.zip(target).and_then(|(f, t)| f.reached(t)).map(|r| r.1);
            for run in runs {
                println!("| {seed} | {} |", run.row(target, full_time));
            }
        }
        println!("\nOver the seeds (mean, and min–max):\n");
        println!("| run | val loss | val loss / full's | train s | time to target / full's | reached |");
        println!("|---|---|---|---|---|---|");
        for &kind in &args.runs {
            println!("| {} | {} |", kind.label(), SeedSpread::of(kind, results, args.target_slack));
        }
    }
}

/// One kind of run over the seeds.
#[derive(Default)]
struct SeedSpread {
    losses: Vec<f64>,
    /// Each seed's loss over its all-full run's.
    relative: Vec<f64>,
    seconds: Vec<f64>,
    /// Time to the all-full run's target over all-full's own, where both reached it.
    times: Vec<f64>,
    reached: usize,
}

impl SeedSpread {
    fn of(kind: RunKind, results: &[(u64, Vec<RunResult>)], target_slack: f64) -> Self {
        let mut spread = Self::default();
        for (_, runs) in results {
            let Some(run) = runs.iter().find(|r| r.kind == kind) else { continue };
            spread.losses.push(run.final_loss());
            spread.seconds.push(run.train_seconds());
            let Some(full) = runs.iter().find(|r| r.kind == RunKind::Full) else { continue };
            spread.relative.push(run.final_loss() / full.final_loss());
            let target = full.final_loss() * (1.0 + target_slack);
            if let (Some(r), Some(f)) = (run.reached(target), full.reached(target)) {
                spread.reached += 1;
                if f.1 > 0.0 {
                    spread.times.push(r.1 / f.1);
                }
            }
        }
        spread
    }
}

impl std::fmt::Display for SeedSpread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} | {} | {} | {} | {}/{}",
            spread(&self.losses),
            spread(&self.relative),
            spread(&self.seconds),
            spread(&self.times),
            self.reached,
            self.losses.len()
        )
    }
}

/// [`HybridConfig::default`] with `name=value` overrides applied through its serialised
/// form, so every field can be set by name; the trainer validates the result.
fn hybrid_config(overrides: &[String]) -> Result<HybridConfig, String> {
    let mut value = serde_json::to_value(HybridConfig::default()).map_err(|e| e.to_string())?;
    for item in overrides {
        let (name, raw) = item.split_once('=').ok_or_else(|| format!("--hybrid {item}: expected name=value"))?;
        let slot = value.get_mut(name).ok_or_else(|| format!("--hybrid {item}: HybridConfig has no field `{name}`"))?;
        *slot = serde_json::from_str(raw).unwrap_or_else(|_| serde_json::Value::String(raw.to_string()));
    }
    serde_json::from_value(value).map_err(|e| format!("--hybrid: {e}"))
}

/// The `select` run's [`SelectionConfig`] from `--select`, its fractions of the run made
/// steps of a `steps`-step run.
fn selection_config(items: &[String], steps: usize) -> Result<SelectionConfig, String> {
    let (mut rule, mut from, mut until, mut full_every) = (SelectionRule::TopFraction { keep: 0.5 }, 0.0, 1.0, 0);
    for item in items {
        let (name, raw) = item.split_once('=').ok_or_else(|| format!("--select {item}: expected name=value"))?;
        let value: f64 = raw.parse().map_err(|_| format!("--select {item}: not a number"))?;
        match name {
            "keep" => rule = SelectionRule::TopFraction { keep: value },
            "beta" => rule = SelectionRule::LossPower { beta: value },
            "from" => from = value,
            "until" => until = value,
            "full_every" => full_every = value as usize,
            _ => return Err(format!("--select {item}: keep, beta, from, until or full_every")),
        }
    }
    let at = |fraction: f64| (fraction * steps as f64).round() as usize;
    let until = (until < 1.0).then(|| at(until));
    Ok(SelectionConfig::new(rule).with_steps(at(from), until).with_full_every(full_every))
}

/// The `average` run's [`AverageConfig`] from `--average`.
fn average_config(items: &[String], steps: usize) -> Result<AverageConfig, String> {
    let mut config = AverageConfig::default();
    for item in items {
        let (name, raw) = item.split_once('=').ok_or_else(|| format!("--average {item}: expected name=value"))?;
        let value: f64 = raw.parse().map_err(|_| format!("--average {item}: not a number"))?;
        match name {
            "decay" => config.decay = value,
            "from" => config.start_step = (value * steps as f64).round() as usize,
            _ => return Err(format!("--average {item}: decay or from")),
        }
    }
    Ok(config)
}

/// The L2 norm of every float parameter together.
fn parameter_norm<B: burn::tensor::backend::Backend, M: burn::module::Module<B>>(model: &M) -> f64 {
    use burn::tensor::ElementConversion;
    struct SquaredNorm(f64);
    impl<B: burn::tensor::backend::Backend> burn::module::ModuleVisitor<B> for SquaredNorm {
        fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<burn::tensor::Tensor<B, D>>) {
            let value = param.val();
            self.0 += (value.clone() * value).sum().into_scalar().elem::<f64>();
        }
    }
    let mut norm = SquaredNorm(0.0);
    model.visit(&mut norm);
    norm.0.sqrt()
}

fn main() {
    let args = Args::parse();
    if let Err(message) = run(args) {
        eprintln!("error: {message}");
        std::process::exit(2);
    }
}

fn run(args: Args) -> Result<(), String> {
    if args.steps == 0 || args.eval_every == 0 {
        return Err("--steps and --eval-every must be at least 1".into());
    }
    if args.seeds.is_empty() || args.runs.is_empty() {
        return Err("--seeds and --runs need at least one value each".into());
    }
    if args.loss_chunk == Some(0) {
        return Err("--loss-chunk must be at least 1 token (leave it out for the full logits)".into());
    }
    if !(args.short_fraction > 0.0 && args.short_fraction <= 1.0) {
        return Err(format!("--short-fraction must be in (0, 1], got {}", args.short_fraction));
    }
    let config = Gpt2Config::preset(&args.preset).map_err(|e| e.to_string())?;
    if args.seq > config.context {
        return Err(format!("--seq {} exceeds {}'s context of {}", args.seq, args.preset, config.context));
    }
    let backend = select(&args.backend).map_err(|e| e.to_string())?;
    eprintln!("{backend}");

    let max_bytes = Some(args.corpus_mib << 20);
    let corpus = match &args.data {
        Some(path) => Corpus::from_path(path, max_bytes),
        None => Corpus::cargo_registry(max_bytes),
    }
    .map_err(|e| e.to_string())?;
    eprintln!("corpus: {} ({} files, {} MiB)", corpus.source, corpus.files, corpus.bytes >> 20);
    let tokenizer = Gpt2Tokenizer::new().map_err(|e| e.to_string())?;
    let started = Instant::now();
    let tokens = tokenizer.encode_corpus(&corpus.text);
    eprintln!("tokenized {} tokens in {:.1} s", tokens.len(), started.elapsed().as_secs_f64());
    let data = TokenDataset::split(tokens, 0.1).map_err(|e| e.to_string())?;
    let validation = evaluation_windows(data.validation(), args.batch, args.seq, args.eval_batches);
    if validation.is_empty() {
        return Err("the validation split is too short for one evaluation batch".into());
    }
    backend.run_lean(Bench { args, config, data, validation })
}
