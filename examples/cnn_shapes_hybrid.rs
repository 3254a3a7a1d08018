//! A conv-heavy network trained with `HybridTrainer` on `Autodiff<Lean<B>>`, on images of
//! shapes the example draws itself: every convolution, forward and backward, is one of
//! leanburn's budgeted ones.
//!
//! ```text
//! cargo run --release --example cnn_shapes_hybrid                      # best backend, defaults
//! cargo run --release --example cnn_shapes_hybrid -- --mode full      # the all-full baseline
//! cargo run --release --example cnn_shapes_hybrid -- --resolution 128 --batch 64
//! cargo run --release --example cnn_shapes_hybrid -- --resume         # continue a run
//! ```
//!
//! The task: name the shape in each image (circle, square, triangle or line), drawn at a
//! random position, size and colour over a random background with pixel noise, generated
//! on the host from `--seed` (see `leanburn::data::ShapeSampler`). Chance is 25%.
//!
//! Written to `--out` (default `runs/cnn`), per mode: `metrics-<mode>.jsonl`,
//! `validation-<mode>.csv` (loss and accuracy), `checkpoints-<mode>/`, and `cnn.svg`
//! (loss and device memory against step, both modes overlaid when both have run).

mod common;

use std::path::PathBuf;

use burn::module::{AutodiffModule, Module};
use burn::optim::AdamConfig;
use clap::{ArgMatches, CommandFactory, Parser};
use common::{
    bad_input, config, exit_on_failure, init_kernel_cache, open_run, plot_runs, run_settings, start_trainer, summary,
    train, ExecutionArgs, Failure, Mode, Start,
};
use leanburn::backend::ConvBudget;
use leanburn::data::{shapes_validation, ImageBatch, ShapeSampler, SHAPE_CLASSES};
use leanburn::model::{ConvClassifier, ConvClassifierConfig};
use leanburn::runner::{RunDir, RunOutcome, Validation};
use leanburn::select::{select, BackendArgs, BackendJob, TrainBackend};
use leanburn::trainer::HybridConfig;

#[derive(Parser, Debug, Clone)]
#[command(about = "Train a conv net on generated shape images with HybridTrainer on the Lean backend")]
struct Args {
    #[command(flatten)]
    backend: BackendArgs,
    #[command(flatten)]
    execution: ExecutionArgs,
    /// Options from a JSON or TOML file, keyed by long option name (`batch = 16`); the
    /// command line wins. Each run writes its resolved options to `--out` as
    /// `config-<mode>.json`, which this reads back to repeat the run.
    #[arg(long)]
    config: Option<PathBuf>,
    /// `hybrid` alternates full and predicted steps; `full` is the all-full baseline.
    #[arg(long, value_enum, default_value_t = Mode::Hybrid)]
    mode: Mode,
    /// Total trainer steps (a resumed run continues up to this).
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    steps: u64,
    /// Images per step.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..))]
    batch: u64,
    /// Image side in pixels (at least 2^blocks).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(8..=4096))]
    resolution: u64,
    /// Output channels of each conv block, comma-separated; each block halves the side.
    #[arg(long, value_delimiter = ',', default_values_t = [16, 32, 64])]
    widths: Vec<usize>,
    /// Peak Adam learning rate (linear warmup over 10% of the steps, cosine decay to a tenth).
    #[arg(long, default_value_t = 3e-3)]
    lr: f64,
    /// Full steps before the first prediction (hybrid mode).
    #[arg(long, default_value_t = HybridConfig::default().warmup_steps as u64, value_parser = clap::value_parser!(u64).range(1..))]
    warmup: u64,
    /// Standard deviation of the pixel noise.
    #[arg(long, default_value_t = 0.05)]
    noise: f32,
    /// Most workspace one convolution may hold, in MiB (see `docs/backend.md`).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    conv_workspace_mib: Option<u64>,
    /// Directory for metrics, checkpoints and the plot.
    #[arg(long, default_value = "runs/cnn")]
    out: PathBuf,
    /// Continue the run in `--out` from its latest checkpoint.
    #[arg(long)]
    resume: bool,
    /// Replace an earlier run of the same mode in `--out`.
    #[arg(long, conflicts_with = "resume")]
    overwrite: bool,
    /// Validation every this many steps.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
    eval_every: u64,
    /// Batches of held-out images per validation.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..))]
    eval_batches: u64,
    /// Checkpoint every this many steps and at the end.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    checkpoint_every: u64,
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

fn main() {
    common::allocator::keep_freed_memory();
    // SAFETY: first thing in main, before any thread exists.
    unsafe { leanburn::select::quiet_headless_vulkan() };
    exit_on_failure(config::parse_with_config::<Args>().and_then(|(args, matches)| run(args, &matches)));
}

/// Everything a run needs, settled before any device work.
struct Plan {
    args: Args,
    config: ConvClassifierConfig,
    dir: RunDir,
    validation: Vec<ImageBatch>,
}

fn run(args: Args, matches: &ArgMatches) -> Result<(), Failure> {
    let config = ConvClassifierConfig::new().with_widths(args.widths.clone()).with_classes(SHAPE_CLASSES);
    if args.widths.is_empty() || args.widths.contains(&0) {
        return Err(bad_input(format!("--widths must be positive channel counts, got {:?}", args.widths)));
    }
    if (args.resolution as usize) < config.min_resolution() {
        return Err(bad_input(format!(
            "--resolution {} is too small for {} blocks, which halve it each: at least {}",
            args.resolution,
            args.widths.len(),
            config.min_resolution()
        )));
    }
    if !(args.lr.is_finite() && args.lr > 0.0) {
        return Err(bad_input(format!("--lr must be a positive number, got {}", args.lr)));
    }
    if !(args.noise.is_finite() && args.noise >= 0.0) {
        return Err(bad_input(format!("--noise must be zero or positive, got {}", args.noise)));
    }
    if let Some(mib) = args.conv_workspace_mib {
        ConvBudget::set_global(ConvBudget::from_mib(mib as usize));
    }
    init_kernel_cache(&args.backend)?;
    let selection = select(&args.backend).map_err(|e| Failure { code: e.exit_code(), message: e.to_string() })?;
    eprintln!("{selection}");
    args.execution.check_precision(&selection)?;
    let dir = open_run(&args.out, args.mode, args.resume, args.overwrite)?;
    let mut resolved = config::resolved(&Args::command(), matches);
    resolved.insert("backend".into(), selection.kind().name().into());
    config::save(resolved, &dir.options_path())?;
    let resolution = args.resolution as usize;
    let validation =
        shapes_validation(resolution, (args.batch as usize).min(64), args.eval_batches as usize, args.seed)
            .map_err(|e| bad_input(e.to_string()))?;
    let (out, mode, checkpointing) = (args.out.clone(), args.mode, args.execution.checkpointing);
    let (summary, outcome) = selection.run_lean_with(Plan { args, config, dir, validation }, checkpointing)?;
    println!("{summary}");
    plot_runs(&out, mode, &outcome, "cnn", "CNN on shapes");
    Ok(())
}

impl BackendJob for Plan {
    type Output = Result<(String, RunOutcome), Failure>;

    fn run<B: TrainBackend>(self, device: B::Device) -> Self::Output {
        let args = &self.args;
        let steps = args.steps as usize;
        B::seed(&device, args.seed);
        let model: ConvClassifier<B> = self.config.init(&device);
        let parameters = model.num_params();
        let start = Start {
            mode: args.mode,
            warmup: args.warmup as usize,
            seed: args.seed,
            peak_lr: args.lr,
            steps,
            execution: args.execution.config(),
            precision: args.execution.precision(),
        };
        let mut trainer = start_trainer(model, AdamConfig::new().init(), &start, &self.dir, device.clone())?;
        let resolution = args.resolution as usize;
        let header = |first: usize| {
            format!(
                "training a {parameters}-parameter conv net (widths {:?}) on {} for steps {}..{steps} ({} mode): \
                 batch {} of {resolution}×{resolution} images{}, {}-MiB conv workspace{}{}",
                args.widths,
                B::name(&device),
                first + 1,
                args.mode.name(),
                args.batch,
                match args.execution.accum {
                    1 => String::new(),
                    k => format!(" × {k} micro-batches (effective batch {})", args.batch * k),
                },
                ConvBudget::current().bytes() >> 20,
                args.execution.describe_checkpointing(),
                args.execution.describe_precision(),
            )
        };
        let settings = run_settings(steps, args.eval_every, args.checkpoint_every, trainer.config().warmup_steps);
        let mut sampler = ShapeSampler::new(resolution, args.batch as usize, args.seed)
            .map_err(|e| bad_input(e.to_string()))?
            .with_noise(args.noise);
        let next_batch = || Ok(sampler.sample());
        let to_device = |batch: ImageBatch| batch.into_device::<B>(&device);
        let validate = |model: &ConvClassifier<B>| {
            let evaluation = model.valid().evaluate(self.validation.iter().map(|b| b.to_device(&device)));
            Validation { loss: evaluation.loss, accuracy: Some(evaluation.accuracy) }
        };
        let outcome = train(
            &mut trainer,
            &self.dir,
            settings,
            args.execution.sample_pool_ms,
            "img",
            header,
            next_batch,
            to_device,
            validate,
        )?;
        let title = format!("conv net on shapes ({} mode) on {}", args.mode.name(), B::name(&device));
        Ok((summary(&title, &outcome, &self.dir, "images"), outcome))
    }
}
