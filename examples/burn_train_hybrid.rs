//! Hybrid training inside burn-train: Burn's own `SupervisedTraining` (its dashboard,
//! metrics, checkpointer and early stopping) with leanburn's `HybridStrategy` as the
//! training strategy, on the shapes conv net.
//!
//! ```text
//! cargo run --release --example burn_train_hybrid                  # best backend, 4 epochs
//! cargo run --release --example burn_train_hybrid -- --mode full  # all-full, for comparison
//! ```
//!
//! Written to `--out` (default `runs/burn-train`): burn-train's experiment directory
//! (metric logs, its checkpoints) and `hybrid-checkpoints/`, the trainer's own checkpoint
//! at each epoch's end, which a resumed run (`--resume-epoch N`) continues from.

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataset::Dataset;
use burn::data::dataset::InMemDataset;
use burn::module::Module;
use burn::optim::AdamConfig;
use burn::record::CompactRecorder;
use burn::train::metric::{AccuracyMetric, LossMetric};
use burn::train::{Learner, SupervisedTraining, TrainingStrategy};
use clap::Parser;
use common::{bad_input, exit_on_failure, init_kernel_cache, Failure, Mode};
use leanburn::data::{shapes_dataset, IdxImages, ImageBatch, ShapeBatcher, SHAPE_CLASSES};
use leanburn::device::select;
use leanburn::model::{ConvClassifier, ConvClassifierConfig, Evaluation};
use leanburn::trainer::ScheduledLr;
use leanburn::HybridStrategy;
use leanburn::{BackendArgs, BackendJob, TrainBackend};
use leanburn::{HybridConfig, LrSchedule};

#[derive(Parser, Debug, Clone)]
#[command(about = "Train the shapes conv net with burn-train's SupervisedTraining and leanburn's HybridStrategy")]
struct Args {
    #[command(flatten)]
    backend: BackendArgs,
    /// `hybrid` alternates full and predicted steps; `full` is the all-full baseline.
    #[arg(long, value_enum, default_value_t = Mode::Hybrid)]
    mode: Mode,
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..))]
    epochs: u64,
    /// Images per batch.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..))]
    batch: u64,
    /// Training images (generated once, the same every epoch; with `--data`, the set's
    /// images not held out).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..))]
    train_images: u64,
    /// Held-out images.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u64).range(1..))]
    valid_images: u64,
    /// A directory with a labelled image set in MNIST's IDX format, in place of the
    /// generated shapes.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Image side in pixels (generated shapes; `--data` images keep their own).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(8..=1024))]
    resolution: u64,
    /// Peak Adam learning rate (linear warmup over 10% of the steps, cosine decay to a tenth).
    #[arg(long, default_value_t = 3e-3)]
    lr: f64,
    /// Full steps before the first prediction (hybrid mode).
    #[arg(long, default_value_t = HybridConfig::default().warmup_steps as u64)]
    warmup: u64,
    /// Continue from the checkpoints of this epoch (burn-train's and the trainer's).
    #[arg(long)]
    resume_epoch: Option<u64>,
    /// burn-train's experiment directory.
    #[arg(long, default_value = "runs/burn-train")]
    out: PathBuf,
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

fn main() {
    common::allocator::keep_freed_memory();
    // SAFETY: first thing in main, before any thread exists.
    unsafe { leanburn::device::quiet_headless_vulkan() };
    exit_on_failure(run(Args::parse()));
}

fn run(args: Args) -> Result<(), Failure> {
    if !(args.lr.is_finite() && args.lr > 0.0) {
        return Err(bad_input(format!("--lr must be a positive number, got {}", args.lr)));
    }
    // `--data`'s images are read first: their classes and side shape the net.
    let images = match &args.data {
        Some(dir) => {
            let images = IdxImages::load(dir).map_err(|e| bad_input(format!("--data: {e}")))?;
            Some(images.split_off(args.valid_images as usize).map_err(|e| bad_input(format!("--data: {e}")))?)
        }
        None => None,
    };
    let (classes, channels, side) = match &images {
        Some((train, _)) => (train.classes(), 1, train.side()),
        None => (SHAPE_CLASSES, 3, args.resolution as usize),
    };
    let config = ConvClassifierConfig::new().with_classes(classes).with_in_channels(channels);
    if side < config.min_resolution() {
        let what = if images.is_some() { "the --data images' side" } else { "--resolution" };
        return Err(bad_input(format!("{what} must be at least {}, got {side}", config.min_resolution())));
    }
    init_kernel_cache(&args.backend)?;
    let backend = select(&args.backend).map_err(|e| Failure { code: e.exit_code(), message: e.to_string() })?;
    eprintln!("{backend}");
    println!("{}", backend.run(Job { args, config, images })?);
    Ok(())
}

struct Job {
    args: Args,
    config: ConvClassifierConfig,
    /// `--data`'s images, training and held out (none: generated shapes).
    images: Option<(IdxImages, IdxImages)>,
}

/// One dataset item per image of `images`.
fn idx_dataset(images: &IdxImages) -> InMemDataset<ImageBatch> {
    InMemDataset::new((0..images.len()).map(|i| images.batch(&[i])).collect())
}

impl BackendJob for Job {
    type Output = Result<String, Failure>;

    fn run<B: TrainBackend>(self, device: B::Device) -> Self::Output {
        let Job { args, config, images } = self;
        B::seed(&device, args.seed);
        let (train, valid, task) = datasets(&args, images.as_ref())?;
        let held_out: Vec<ImageBatch> = valid.iter().collect();
        let train_images = train.len();
        let batch = args.batch as usize;
        let train = DataLoaderBuilder::<B, _, _>::new(ShapeBatcher).batch_size(batch).shuffle(args.seed).build(train);
        let valid = DataLoaderBuilder::<B::InnerBackend, _, _>::new(ShapeBatcher).batch_size(batch).build(valid);

        // burn-train's loader keeps a last, shorter batch.
        let steps_per_epoch = train_images.div_ceil(batch);
        let lr = schedule(&args, steps_per_epoch * args.epochs as usize);
        let strategy = HybridStrategy::new(device.clone(), AdamConfig::new().init(), hybrid_config(&args), lr.clone())
            .with_checkpoints(args.out.join("hybrid-checkpoints"));
        let telemetry = strategy.telemetry();

        let model: ConvClassifier<B> = config.init(&device);
        let parameters = model.num_params();
        eprintln!(
            "training a {parameters}-parameter conv net on {task} on {} for {} epochs of {} steps ({} mode) in burn-train",
            B::name(&device),
            args.epochs,
            steps_per_epoch,
            args.mode.name()
        );
        let mut training = SupervisedTraining::new(&args.out, train, valid)
            .metrics((AccuracyMetric::new(), LossMetric::new()))
            .metric_train_numeric(telemetry.pool_memory())
            .metric_train_numeric(telemetry.predicted_share())
            .with_file_checkpointer(CompactRecorder::new())
            .num_epochs(args.epochs as usize)
            .summary()
            .with_training_strategy(TrainingStrategy::Custom(Arc::new(strategy)));
        if let Some(epoch) = args.resume_epoch {
            training = training.checkpoint(epoch as usize);
        }
        let result = training.launch(Learner::new(model, AdamConfig::new().init(), ScheduledLr::new(lr)));

        let batches = held_out.chunks(batch).map(|items| {
            <ShapeBatcher as Batcher<B::InnerBackend, _, _>>::batch(&ShapeBatcher, items.to_vec(), &device)
        });
        let evaluation = result.model.evaluate(batches);
        Ok(summary(&args, task, &B::name(&device), telemetry.steps(), &evaluation))
    }
}

/// The training and held-out images, and what they are: `--data`'s, or generated shapes.
fn datasets(
    args: &Args,
    images: Option<&(IdxImages, IdxImages)>,
) -> Result<(InMemDataset<ImageBatch>, InMemDataset<ImageBatch>, &'static str), Failure> {
    if let Some((train, held_out)) = images {
        return Ok((idx_dataset(train), idx_dataset(held_out), "the --data images"));
    }
    let resolution = args.resolution as usize;
    let data = |count: u64, seed: u64| {
        shapes_dataset(resolution, count as usize, seed, 0.05).map_err(|e| bad_input(e.to_string()))
    };
    Ok((data(args.train_images, args.seed)?, data(args.valid_images, args.seed ^ 0x5EED)?, "shapes"))
}

/// Warm-up over the first tenth of `steps`, then a cosine down to a tenth of `--lr`.
fn schedule(args: &Args, steps: usize) -> LrSchedule {
    LrSchedule::WarmupCosine {
        peak: args.lr,
        warmup_steps: (steps / 10).max(1),
        total_steps: steps,
        min_lr: args.lr / 10.0,
    }
}

fn hybrid_config(args: &Args) -> HybridConfig {
    match args.mode {
        Mode::Hybrid => HybridConfig::default().with_warmup_steps(args.warmup as usize),
        Mode::Full => HybridConfig::all_full(),
    }
    .with_seed(args.seed)
}

/// The run's last lines: steps taken and predicted, the held-out loss and accuracy, where
/// the checkpoints are.
fn summary(
    args: &Args,
    task: &str,
    device: &str,
    (taken, predicted): (usize, usize),
    evaluation: &Evaluation,
) -> String {
    format!(
        "\nconv net on {task} ({} mode) in burn-train on {device}: {taken} steps, {predicted} predicted ({:.0}%)\n\
         validation loss {:.4}, accuracy {:.1}%\ncheckpoints: {} (burn-train), {} (the trainer's)",
        args.mode.name(),
        100.0 * predicted as f64 / taken.max(1) as f64,
        evaluation.loss,
        evaluation.accuracy * 100.0,
        args.out.join("checkpoint").display(),
        args.out.join("hybrid-checkpoints").display(),
    )
}
