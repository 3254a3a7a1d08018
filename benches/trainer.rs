//! What a predicted step costs next to a full one, and how fast hybrid training reaches a
//! loss that all-full training reaches, side by side in one run on the same data.
//!
//! ```text
//! cargo bench --bench trainer -- --backend cpu                       # gpt2-tiny, minutes
//! cargo bench --bench trainer -- --backend cuda --preset gpt2-small --batch 8 --seq 1024
//! ```
//!
//! Both runs start from the same weights, see the same batches in the same order and use
//! the same AdamW schedule; the baseline is [`HybridConfig::all_full`]. A throwaway warm-up
//! (two full steps and one evaluation) first absorbs kernel compilation and autotuning.
//!
//! - **Step cost**: medians of the hybrid run's step times, backward steps
//!   (warmup/full/correct) against predicted ones, skipping each kind's first `--skip`.
//! - **Time to target**: training seconds (evaluation excluded) until the validation loss,
//!   measured every `--eval-every` steps on fixed windows, first reaches the target. The
//!   target is `--target-loss`, or by default the baseline's final validation loss
//!   relaxed by `--target-slack`. Only verified weights are evaluated: an evaluation due
//!   inside a predict block waits for the block to close, and the last step closes an
//!   open block with `finish_block` on the same validation windows.
//!
//! The result is a Markdown table, ready for `docs/benchmarks.md`.

use std::time::Instant;

use burn::module::AutodiffModule;
use burn::optim::grad_clipping::GradientClippingConfig;
use burn::optim::AdamWConfig;
use clap::Parser;
use leanburn::data::{evaluation_windows, Corpus, Gpt2Tokenizer, HostBatch, TokenDataset, WindowSampler, Split};
use leanburn::memory::format_bytes;
use leanburn::model::{Gpt2, Gpt2Config};
use leanburn::select::{select, BackendArgs, BackendJob, TrainBackend};
use leanburn::trainer::{HybridConfig, HybridTrainer, LrSchedule, StepRecord};

#[derive(Parser, Debug, Clone)]
#[command(about = "HybridTrainer against all-full training: step cost and time to a target loss")]
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
    /// Trainer steps per run.
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
    /// Validation loss every this many steps.
    #[arg(long, default_value_t = 20)]
    eval_every: usize,
    /// Validation batches per evaluation.
    #[arg(long, default_value_t = 8)]
    eval_batches: usize,
    /// Target validation loss (default: the baseline's final one, relaxed by the slack).
    #[arg(long)]
    target_loss: Option<f64>,
    /// Relative slack on the default target.
    #[arg(long, default_value_t = 0.02)]
    target_slack: f64,
    /// Steps of each kind left out of the step-cost medians.
    #[arg(long, default_value_t = 3)]
    skip: usize,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Accepted for `cargo bench` compatibility.
    #[arg(long, hide = true)]
    bench: bool,
}

/// One training run's measurements.
struct RunResult {
    label: &'static str,
    records: Vec<StepRecord>,
    /// (step, cumulative training seconds, validation loss), the first at step 0.
    evaluations: Vec<(usize, f64, f64)>,
}

impl RunResult {
    fn train_seconds(&self) -> f64 {
        self.records.iter().map(|r| r.seconds).sum()
    }

    fn predicted_share(&self) -> f64 {
        self.records.iter().filter(|r| r.predicted).count() as f64 / self.records.len().max(1) as f64
    }

    fn rollbacks(&self) -> usize {
        self.records.iter().filter(|r| r.rolled_back).count()
    }

    fn final_loss(&self) -> f64 {
        self.evaluations.last().map_or(f64::NAN, |e| e.2)
    }

    /// (step, seconds) of the first evaluation at or below `target`.
    fn reached(&self, target: f64) -> Option<(usize, f64)> {
        self.evaluations.iter().find(|e| e.2 <= target).map(|e| (e.0, e.1))
    }

    fn peak_in_use(&self) -> Option<u64> {
        self.records.iter().filter_map(|r| r.memory.map(|m| m.bytes_in_use)).max()
    }

    /// Median seconds of steps with (`false`) or without (`true`) a backward pass.
    fn median_step(&self, predicted: bool, skip: usize) -> Option<f64> {
        let mut times: Vec<f64> =
            self.records.iter().filter(|r| r.predicted == predicted).skip(skip).map(|r| r.seconds).collect();
        times.sort_by(f64::total_cmp);
        (!times.is_empty()).then(|| times[times.len() / 2])
    }
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
        let warmup = self.train::<B>(&device, "warm-up", HybridConfig::all_full(), 2, false)?;
        drop(warmup);
        let full = self.train::<B>(&device, "all-full", HybridConfig::all_full(), self.args.steps, true)?;
        let hybrid = self.train::<B>(
            &device,
            "hybrid",
            HybridConfig::default().with_seed(self.args.seed),
            self.args.steps,
            true,
        )?;
        self.report::<B>(&device, &full, &hybrid);
        Ok(())
    }
}

impl Bench {
    fn train<B: TrainBackend>(
        &self,
        device: &B::Device,
        label: &'static str,
        config: HybridConfig,
        steps: usize,
        evaluate: bool,
    ) -> Result<RunResult, String> {
        let args = &self.args;
        B::seed(device, args.seed);
        let model: Gpt2<B> = self.config.init(device);
        let optimizer = AdamWConfig::new()
            .with_weight_decay(0.1)
            .with_grad_clipping(Some(GradientClippingConfig::Norm(1.0)))
            .init();
        let lr = LrSchedule::WarmupCosine {
            peak: args.lr,
            warmup_steps: (steps / 10).max(1).min(steps),
            total_steps: steps,
            min_lr: args.lr / 10.0,
        };
        let mut trainer = HybridTrainer::new(model, optimizer, config, lr, device.clone())
            .map_err(|e| e.to_string())?;
        let mut sampler = WindowSampler::new(args.batch, args.seq, args.seed).map_err(|e| e.to_string())?;
        let mut result = RunResult { label, records: Vec::with_capacity(steps), evaluations: Vec::new() };
        let evaluate_now = |trainer: &HybridTrainer<B, Gpt2<B>, _, _>| -> f64 {
            trainer.model().valid().evaluate(&self.validation, device)
        };
        if evaluate {
            result.evaluations.push((0, 0.0, evaluate_now(&trainer)));
        }
        let started = Instant::now();
        // Only verified weights are evaluated: an evaluation due inside a predict block
        // waits for the block to close, and the last step closes an open one.
        let mut evaluation_due = false;
        for step in 1..=steps {
            let batch = sampler.sample(self.data.train(), Split::Train).map_err(|e| e.to_string())?;
            let record = trainer.step(batch.to_device::<B>(device)).map_err(|e| e.to_string())?;
            result.records.push(record);
            evaluation_due |= evaluate && step % args.eval_every == 0;
            if step == steps {
                trainer
                    .finish_block(|model| model.valid().evaluate(&self.validation, device))
                    .map_err(|e| e.to_string())?;
                evaluation_due = evaluate;
            }
            if evaluation_due && trainer.can_checkpoint() {
                evaluation_due = false;
                let loss = evaluate_now(&trainer);
                result.evaluations.push((step, result.train_seconds(), loss));
                eprintln!(
                    "{label:>8} step {step:>5}/{steps}: val loss {loss:.4}, train {:.1} s, {:.0}% predicted",
                    result.train_seconds(),
                    result.predicted_share() * 100.0
                );
            }
        }
        if !evaluate {
            eprintln!("{label}: {steps} steps in {:.1} s", started.elapsed().as_secs_f64());
        }
        Ok(result)
    }

    fn report<B: TrainBackend>(&self, device: &B::Device, full: &RunResult, hybrid: &RunResult) {
        let args = &self.args;
        let target = args.target_loss.unwrap_or(full.final_loss() * (1.0 + args.target_slack));
        println!(
            "\n{}, {}: {} parameters, batch {} × {} tokens, {} steps, peak lr {}\n",
            B::name(device),
            args.preset,
            self.config.parameter_count(),
            args.batch,
            args.seq,
            args.steps,
            args.lr
        );
        let seconds = |v: Option<f64>| v.map_or("–".into(), |s| format!("{:.4}", s));
        let full_step = hybrid.median_step(false, args.skip);
        let predict_step = hybrid.median_step(true, args.skip);
        println!(
            "step cost (hybrid run, medians): full {} s, predicted {} s, ratio {}\n",
            seconds(full_step),
            seconds(predict_step),
            match (predict_step, full_step) {
                (Some(p), Some(f)) if f > 0.0 => format!("{:.3}", p / f),
                _ => "–".into(),
            }
        );
        println!("target validation loss: {target:.4}\n");
        println!("| run | val loss | train s | tokens/s | predicted | rollbacks | steps to target | s to target | peak in use |");
        println!("|---|---|---|---|---|---|---|---|---|");
        for run in [full, hybrid] {
            let tokens: usize = run.records.iter().map(|r| r.items).sum();
            let (steps_to, seconds_to) = match run.reached(target) {
                Some((step, s)) => (step.to_string(), format!("{s:.1}")),
                None => ("not reached".into(), "–".into()),
            };
            println!(
                "| {} | {:.4} | {:.1} | {:.0} | {:.0}% | {} | {} | {} | {} |",
                run.label,
                run.final_loss(),
                run.train_seconds(),
                tokens as f64 / run.train_seconds().max(1e-9),
                run.predicted_share() * 100.0,
                run.rollbacks(),
                steps_to,
                seconds_to,
                run.peak_in_use().map_or("–".into(), |b| format_bytes(b as f64)),
            );
        }
        if let (Some((_, f)), Some((_, h))) = (full.reached(target), hybrid.reached(target)) {
            println!("\nhybrid reached the target in {:.2}× the baseline's training time", h / f);
        }
    }
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
    let config = Gpt2Config::preset(&args.preset).map_err(|e| e.to_string())?;
    if args.seq > config.context {
        return Err(format!("--seq {} exceeds {}'s context of {}", args.seq, args.preset, config.context));
    }
    let selection = select(&args.backend).map_err(|e| e.to_string())?;
    eprintln!("{selection}");

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
    selection.run(Bench { args, config, data, validation })
}
