//! A conv-heavy network trained with `HybridTrainer` on `Autodiff<Lean<B>>`, on images of
//! shapes the example draws itself: every convolution, forward and backward, is one of
//! leanburn's budgeted ones.
//!
//! ```text
//! cargo run --release --example cnn_shapes_hybrid                      # best backend, defaults
//! cargo run --release --example cnn_shapes_hybrid -- --mode full      # the all-full baseline
//! cargo run --release --example cnn_shapes_hybrid -- --resolution 128 --batch 64
//! cargo run --release --example cnn_shapes_hybrid -- --net resnet18 --resolution 64
//! cargo run --release --example cnn_shapes_hybrid -- --conv stock     # Burn's own convolutions
//! cargo run --release --example cnn_shapes_hybrid -- --resume         # continue a run
//! cargo run --release --example cnn_shapes_hybrid -- --devices 0,1    # one replica per GPU
//! ```
//!
//! Two networks (`--net`): `plain`, blocks of 3×3 convolution, batch norm, ReLU and max
//! pooling (`leanburn::model::ConvClassifier`); `resnet18`, ResNet-18's layout (7×7
//! stride-2 stem, four stages of two basic blocks, stride-2 downsampling, batch norm;
//! `leanburn::model::ResNet`), its stage widths from `--widths` (default 64,128,256,512).
//!
//! The task: name the shape in each image (circle, square, triangle or line), drawn at a
//! random position, size and colour over a random background with pixel noise, generated
//! on the host from `--seed` (see `leanburn::data::ShapeSampler`). Chance is 25%. With
//! `--data DIR` the images are instead a labelled set in MNIST's IDX format (an
//! `images-idx3-ubyte` / `labels-idx1-ubyte` pair, or MNIST's `train-` files): grey,
//! square, one channel, every image once per epoch in a seeded order, `--eval-batches` ×
//! batch images spread over the file held out for validation.
//!
//! Written to `--out` (default `runs/cnn`), per mode: `metrics-<mode>.jsonl`,
//! `validation-<mode>.csv` (loss and accuracy), `checkpoints-<mode>/`, and `cnn.svg`
//! (loss and device memory against step, both modes overlaid when both have run).

mod common;

use std::path::PathBuf;

use burn::collective::CollectiveConfig;
use burn::optim::AdamConfig;
use burn::prelude::{Int, Tensor};
use clap::{ArgMatches, CommandFactory, Parser, ValueEnum};
use common::average::AverageArgs;
use common::selection::SelectArgs;
use common::{
    bad_input, config, exit_on_failure, init_kernel_cache, open_run, plot_runs, run_settings, start_trainer, summary,
    train, ExecutionArgs, Failure, Mode, ParallelArgs, Start,
};
use leanburn::backend::ConvBudget;
use leanburn::data::{shapes_validation, IdxImages, IdxSampler, ImageBatch, ShapeSampler, SHAPE_CLASSES};
use leanburn::model::{ConvClassifier, ConvClassifierConfig, Evaluation, ResNet, ResNetConfig};
use leanburn::runner::{data_parallel, RunDir, RunError, RunOutcome, Validation};
use leanburn::select::{select, BackendArgs, BackendJob, ReplicatedJob, TrainBackend};
use leanburn::trainer::{ExampleLosses, ForwardLoss, HybridConfig, HybridModel, Replica};

#[derive(Parser, Debug, Clone)]
#[command(about = "Train a conv net on generated shape images with HybridTrainer on the Lean backend")]
struct Args {
    #[command(flatten)]
    backend: BackendArgs,
    #[command(flatten)]
    execution: ExecutionArgs,
    #[command(flatten)]
    average: AverageArgs,
    #[command(flatten)]
    select: SelectArgs,
    #[command(flatten)]
    parallel: ParallelArgs,
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
    /// The network: plain conv blocks or ResNet-18's layout.
    #[arg(long, value_enum, default_value_t = Net::Plain)]
    net: Net,
    /// Output channels of each conv block (plain; each halves the side; default 16,32,64)
    /// or of each ResNet stage (default 64,128,256,512), comma-separated.
    #[arg(long, value_delimiter = ',')]
    widths: Option<Vec<usize>>,
    /// Whose convolutions run: leanburn's budgeted ones (`Autodiff<Lean<B>>`) or stock
    /// Burn's (`Autodiff<B>`), the baseline.
    #[arg(long, value_enum, default_value_t = ConvPath::Lean)]
    conv: ConvPath,
    /// Peak Adam learning rate (linear warmup over 10% of the steps, cosine decay to a tenth).
    #[arg(long, default_value_t = 3e-3)]
    lr: f64,
    /// Full steps before the first prediction (hybrid mode).
    #[arg(long, default_value_t = HybridConfig::default().warmup_steps as u64, value_parser = clap::value_parser!(u64).range(1..))]
    warmup: u64,
    /// A directory with labelled images in MNIST's IDX format (`images-idx3-ubyte` and
    /// `labels-idx1-ubyte`): trained on instead of generated shapes; `--resolution` and
    /// `--noise` then do not apply.
    #[arg(long)]
    data: Option<PathBuf>,
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Net {
    Plain,
    Resnet18,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ConvPath {
    Lean,
    Stock,
}

/// The network `--net` and `--widths` ask for, checked.
#[derive(Clone, Debug)]
enum NetConfig {
    Plain(ConvClassifierConfig),
    ResNet(ResNetConfig),
}

impl NetConfig {
    fn new(net: Net, widths: Option<Vec<usize>>, classes: usize, channels: usize) -> Result<Self, Failure> {
        if let Some(widths) = &widths {
            if widths.is_empty() || widths.contains(&0) {
                return Err(bad_input(format!("--widths must be positive channel counts, got {widths:?}")));
            }
        }
        Ok(match net {
            Net::Plain => {
                let config = ConvClassifierConfig::new().with_classes(classes).with_in_channels(channels);
                Self::Plain(match widths {
                    Some(widths) => config.with_widths(widths),
                    None => config,
                })
            }
            Net::Resnet18 => {
                let config = ResNetConfig::new().with_classes(classes).with_in_channels(channels);
                Self::ResNet(match widths {
                    Some(widths) => config.with_widths(widths),
                    None => config,
                })
            }
        })
    }

    fn widths(&self) -> &[usize] {
        match self {
            Self::Plain(config) => &config.widths,
            Self::ResNet(config) => &config.widths,
        }
    }

    fn min_resolution(&self) -> usize {
        match self {
            Self::Plain(config) => config.min_resolution(),
            Self::ResNet(config) => config.min_resolution(),
        }
    }

    fn describe(&self) -> String {
        match self {
            Self::Plain(config) => format!("conv net (widths {:?})", config.widths),
            Self::ResNet(config) => format!("ResNet-18-style net (stage widths {:?})", config.widths),
        }
    }
}

/// What a resumed run cannot change: its model, its batches and its schedule are in the
/// checkpoint (`--resume` starts from the run's saved options; see `common::config`).
const FIXED_ON_RESUME: &[&str] =
    &["batch", "resolution", "net", "widths", "lr", "warmup", "noise", "seed", "accum", "devices", "data"];

fn main() {
    common::allocator::keep_freed_memory();
    // SAFETY: first thing in main, before any thread exists.
    unsafe { leanburn::select::quiet_headless_vulkan() };
    exit_on_failure(config::parse_with_config::<Args>(FIXED_ON_RESUME).and_then(|(args, matches)| run(args, &matches)));
}

/// Where training batches come from.
enum Source {
    Shapes(ShapeSampler),
    Idx(IdxSampler),
}

/// Everything a run needs, settled before any device work.
struct Plan {
    args: Args,
    config: NetConfig,
    dir: RunDir,
    validation: Vec<ImageBatch>,
    /// The training images of `--data` (none: generated shapes).
    images: Option<IdxImages>,
    resolution: usize,
}

fn run(args: Args, matches: &ArgMatches) -> Result<(), Failure> {
    // `--data`'s images are read first: their classes, channels and side shape the net.
    let images = match &args.data {
        Some(dir) => Some(IdxImages::load(dir).map_err(|e| bad_input(format!("--data: {e}")))?),
        None => None,
    };
    let (classes, channels, resolution) = match &images {
        Some(images) => (images.classes(), 1, images.side()),
        None => (SHAPE_CLASSES, 3, args.resolution as usize),
    };
    let config = NetConfig::new(args.net, args.widths.clone(), classes, channels)?;
    if resolution < config.min_resolution() {
        return Err(bad_input(format!(
            "{} {} is too small for {} {}: at least {}",
            if images.is_some() { "the --data images' side" } else { "--resolution" },
            resolution,
            config.widths().len(),
            match config {
                NetConfig::Plain(_) => "blocks, which halve it each",
                NetConfig::ResNet(_) => "stages (the stem divides it by 4, each later stage by 2)",
            },
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
    let devices = match &args.parallel.devices {
        Some(indices) => Some(
            selection.replica_devices(indices).map_err(|e| Failure { code: e.exit_code(), message: e.to_string() })?,
        ),
        None => None,
    };
    let dir = open_run(&args.out, args.mode, args.resume, args.overwrite)?;
    let mut resolved = config::resolved(&Args::command(), matches);
    resolved.insert("backend".into(), selection.kind().name().into());
    config::save(resolved, &dir.options_path())?;
    // Batches of the effective batch's size: a data-parallel run validates on the images a
    // one-device run with that batch does.
    let replicas = devices.as_ref().map_or(1, Vec::len);
    let eval_batch = (args.batch as usize * replicas).min(64);
    let eval_batches = args.eval_batches as usize;
    let (validation, images) = match images {
        // Images spread over the file are held out; the rest are trained on.
        Some(images) => {
            let (train, held_out) =
                images.split_off(eval_batch * eval_batches).map_err(|e| bad_input(format!("--data: {e}")))?;
            (held_out.batches(eval_batch, eval_batches), Some(train))
        }
        None => (
            shapes_validation(resolution, eval_batch, eval_batches, args.seed).map_err(|e| bad_input(e.to_string()))?,
            None,
        ),
    };
    let (out, mode, checkpointing, conv) = (args.out.clone(), args.mode, args.execution.checkpointing, args.conv);
    let plan = Plan { args, config, dir, validation, images, resolution };
    let (summary, outcome) = match (devices, conv) {
        (Some(devices), conv) => selection.run_replicated(&devices, plan, conv == ConvPath::Lean, checkpointing)?,
        (None, ConvPath::Lean) => selection.run_lean_with(plan, checkpointing)?,
        (None, ConvPath::Stock) => selection.run_with(plan, checkpointing)?,
    };
    println!("{summary}");
    plot_runs(&out, mode, &outcome, "cnn", "CNN on shapes");
    Ok(())
}

impl BackendJob for Plan {
    type Output = Result<(String, RunOutcome), Failure>;

    fn run<B: TrainBackend>(self, device: B::Device) -> Self::Output {
        self.run_on::<B>(vec![device], false)
    }
}

impl ReplicatedJob for Plan {
    type Output = Result<(String, RunOutcome), Failure>;

    fn run<B: TrainBackend>(self, devices: Vec<B::Device>) -> Self::Output {
        self.run_on::<B>(devices, true)
    }
}

type Labelled<B> = (Tensor<B, 4>, Tensor<B, 1, Int>);

impl Plan {
    /// Builds the network on the first device and trains it: there alone, or on every
    /// device as one data-parallel replica each (`parallel`).
    fn run_on<B: TrainBackend>(self, devices: Vec<B::Device>, parallel: bool) -> Result<(String, RunOutcome), Failure> {
        let device = devices[0].clone();
        B::seed(&device, self.args.seed);
        match &self.config {
            NetConfig::Plain(config) => {
                let model: ConvClassifier<B> = config.init(&device);
                self.train_on(model, devices, parallel, |model, batches| model.evaluate(batches))
            }
            NetConfig::ResNet(config) => {
                let model: ResNet<B> = config.init(&device);
                self.train_on(model, devices, parallel, |model, batches| model.evaluate(batches))
            }
        }
    }

    /// Trains `model` on `devices`: on the one, or data-parallel on all (replica 0's
    /// outcome is the run's).
    fn train_on<B, M>(
        &self,
        model: M,
        devices: Vec<B::Device>,
        parallel: bool,
        evaluate: impl Fn(&M::InnerModule, Vec<Labelled<B::InnerBackend>>) -> Evaluation + Sync,
    ) -> Result<(String, RunOutcome), Failure>
    where
        B: TrainBackend,
        M: HybridModel<B, Labelled<B>> + ForwardLoss<B, Input = Labelled<B>> + Send,
        M::InnerModule: ExampleLosses<B::InnerBackend, Input = Labelled<B::InnerBackend>>,
    {
        if !parallel {
            let device = devices[0].clone();
            return self.train(model, device, None, &evaluate)?.ok_or_else(|| unreachable!("one device leads"));
        }
        let job = |replica: Replica, model: M, device: B::Device| -> Result<_, RunError> {
            Ok(self.train(model, device, Some(replica), &evaluate)?)
        };
        let outcomes = data_parallel::<B, M, _, _>(&devices, CollectiveConfig::default(), model, job)?;
        Ok(outcomes.into_iter().next().flatten().expect("replica 0 returns the outcome"))
    }

    /// Trains `model` on `device` (as `replica` of a data-parallel run), validating its
    /// inference copy with `evaluate`; the summary and outcome, which replicas other than
    /// 0 do not have.
    fn train<B, M>(
        &self,
        model: M,
        device: B::Device,
        replica: Option<Replica>,
        evaluate: &impl Fn(&M::InnerModule, Vec<Labelled<B::InnerBackend>>) -> Evaluation,
    ) -> Result<Option<(String, RunOutcome)>, Failure>
    where
        B: TrainBackend,
        M: HybridModel<B, Labelled<B>> + ForwardLoss<B, Input = Labelled<B>>,
        M::InnerModule: ExampleLosses<B::InnerBackend, Input = Labelled<B::InnerBackend>>,
    {
        let args = &self.args;
        let steps = args.steps as usize;
        let parameters = model.num_params();
        let start = Start {
            mode: args.mode,
            warmup: args.warmup as usize,
            seed: args.seed,
            peak_lr: args.lr,
            steps,
            execution: args.execution.config(),
            precision: args.execution.precision(),
            average: args.average.config(steps)?,
        };
        let mut trainer = start_trainer(model, AdamConfig::new().init(), &start, &self.dir, device.clone(), replica)?;
        if let Some(selection) = args.select.config(steps, args.seed)? {
            trainer = trainer.with_selection(selection).map_err(|e| bad_input(format!("--select-keep: {e}")))?;
        }
        let replicas = replica.map_or(1, |replica| replica.replicas());
        let resolution = self.resolution;
        let header = |first: usize| {
            format!(
                "training a {parameters}-parameter {} on {} for steps {}..{steps} ({} mode): \
                 batch {} of {resolution}×{resolution} images{}{}, {}{}{}",
                self.config.describe(),
                B::name(&device),
                first + 1,
                args.mode.name(),
                args.batch,
                match replicas {
                    1 => String::new(),
                    n => format!(" on each of {n} replicas (effective batch {})", args.batch as usize * n),
                },
                match args.execution.accum {
                    1 => String::new(),
                    k => format!(" × {k} micro-batches (effective batch {})", args.batch * k),
                },
                match args.conv {
                    ConvPath::Lean => format!("{}-MiB conv workspace", ConvBudget::current().bytes() >> 20),
                    ConvPath::Stock => "stock Burn convolutions".to_string(),
                },
                args.execution.describe_checkpointing(),
                args.execution.describe_precision(),
            )
        };
        let settings = run_settings(steps, args.eval_every, args.checkpoint_every, trainer.config().warmup_steps);
        // Each replica draws its own images; replica 0 the stream a one-device run draws.
        let rank = replica.map_or(0, |replica| replica.rank()) as u64;
        let seed = args.seed.wrapping_add(rank.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let batch = args.batch as usize;
        let mut source = match &self.images {
            Some(images) => {
                Source::Idx(IdxSampler::new(images.clone(), batch, seed).map_err(|e| bad_input(e.to_string()))?)
            }
            None => Source::Shapes(
                ShapeSampler::new(resolution, batch, seed)
                    .map_err(|e| bad_input(e.to_string()))?
                    .with_noise(args.noise),
            ),
        };
        let next_batch = || {
            Ok(match &mut source {
                Source::Shapes(sampler) => sampler.sample(),
                Source::Idx(sampler) => sampler.sample(),
            })
        };
        let to_device = |batch: ImageBatch| batch.into_device::<B>(&device);
        let validate = |model: &M| {
            let evaluation = evaluate(&model.valid(), self.validation.iter().map(|b| b.to_device(&device)).collect());
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
        if replica.is_some_and(|replica| !replica.is_leader()) {
            return Ok(None);
        }
        let on = match replicas {
            1 => B::name(&device),
            n => format!("{n} replicas on {}", B::name(&device)),
        };
        let task = match &args.data {
            Some(dir) => format!("the IDX images in {}", dir.display()),
            None => "shapes".to_string(),
        };
        let title = format!("{} on {task} ({} mode) on {on}", self.config.describe(), args.mode.name());
        Ok(Some((summary(&title, &outcome, &self.dir, "images"), outcome)))
    }
}
