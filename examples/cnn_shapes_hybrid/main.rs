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

#[path = "../common/mod.rs"]
mod common;
mod net;
mod train;

use net::{ConvPath, Net, NetConfig};

use std::path::PathBuf;

use clap::{ArgMatches, CommandFactory, Parser};
use common::average::AverageArgs;
use common::selection::SelectArgs;
use common::{
    bad_input, config, exit_on_failure, init_kernel_cache, plot_runs, ExecutionArgs, Failure, ParallelArgs, RunArgs,
};
use leanburn::data::{shapes_validation, IdxImages, IdxSampler, ImageBatch, ShapeSampler, SHAPE_CLASSES};
use leanburn::device::select;
use leanburn::BackendArgs;
use leanburn::ConvBudget;
use leanburn::RunDir;

#[derive(Parser, Debug, Clone)]
#[command(about = "Train a conv net on generated shape images with HybridTrainer on the Lean backend")]
struct Args {
    #[command(flatten)]
    backend: BackendArgs,
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    execution: ExecutionArgs,
    #[command(flatten)]
    average: AverageArgs,
    #[command(flatten)]
    select: SelectArgs,
    #[command(flatten)]
    parallel: ParallelArgs,
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
    /// A directory with labelled images in MNIST's IDX format (`images-idx3-ubyte` and
    /// `labels-idx1-ubyte`): trained on instead of generated shapes; `--resolution` and
    /// `--noise` then do not apply.
    #[arg(long)]
    data: Option<PathBuf>,
    /// InfoBatch (with `--data`, in full mode): each epoch leaves out this share of the
    /// images whose loss at their last step was below the mean, and weighs up the rest of
    /// them so the epoch's expected gradient is unchanged; 0 (the default) leaves none out.
    #[arg(long, default_value_t = 0.0, value_name = "RATIO")]
    info_batch: f64,
    /// With `--info-batch`: from this fraction of `--steps` on, every epoch is whole again
    /// (InfoBatch's annealing).
    #[arg(long, default_value_t = 0.875, value_name = "FRACTION")]
    info_batch_anneal: f64,
    /// Standard deviation of the pixel noise.
    #[arg(long, default_value_t = 0.05)]
    noise: f32,
    /// Most workspace one convolution may hold, in MiB (see `docs/backend.md`).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    conv_workspace_mib: Option<u64>,
    /// Directory for metrics, checkpoints and the plot.
    #[arg(long, default_value = "runs/cnn")]
    out: PathBuf,
    /// Validation every this many steps.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
    eval_every: u64,
}

/// What a resumed run cannot change: its model, its batches and its schedule are in the
/// checkpoint (`--resume` starts from the run's saved options; see `common::config`).
const FIXED_ON_RESUME: &[&str] =
    &["batch", "resolution", "net", "widths", "lr", "warmup", "noise", "seed", "accum", "devices", "data"];

fn main() {
    common::allocator::keep_freed_memory();
    // SAFETY: first thing in main, before any thread exists.
    unsafe { leanburn::device::quiet_headless_vulkan() };
    exit_on_failure(config::parse_with_config::<Args>(FIXED_ON_RESUME).and_then(|(args, matches)| run(args, &matches)));
}

/// Where training batches come from.
enum Source {
    Shapes(ShapeSampler),
    /// Shared with the trainer under `--info-batch`, which gives back the images' losses.
    Idx(std::sync::Arc<std::sync::Mutex<IdxSampler>>),
}

/// A resumed run moves an IDX epoch past the batches its earlier steps took without copying
/// an image; generated shapes are drawn again.
impl leanburn::runner::BatchSource for Source {
    type Batch = ImageBatch;
    type Error = common::Failure;

    fn next_batch(&mut self) -> Result<ImageBatch, common::Failure> {
        Ok(match self {
            Source::Shapes(sampler) => sampler.sample(),
            Source::Idx(sampler) => sampler.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).sample(),
        })
    }

    fn skip(&mut self, count: usize) -> Result<(), common::Failure> {
        match self {
            Source::Shapes(sampler) => (0..count).for_each(|_| drop(sampler.sample())),
            Source::Idx(sampler) => sampler.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).skip(count),
        }
        Ok(())
    }
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

/// `--info-batch` takes the losses of the images the trainer trains on, so it needs a
/// dataset that cycles and a run whose every step trains on whole batches; its books are
/// not checkpointed, so a run with it does not resume.
fn check_info_batch(args: &Args) -> Result<(), Failure> {
    if args.info_batch == 0.0 {
        return Ok(());
    }
    let fail = |why: &str| Err(bad_input(format!("--info-batch {why}")));
    if !(args.info_batch > 0.0 && args.info_batch < 1.0) {
        return fail(&format!("must be in [0, 1), got {}", args.info_batch));
    }
    if !(0.0..=1.0).contains(&args.info_batch_anneal) {
        return fail(&format!("--info-batch-anneal must be in [0, 1], got {}", args.info_batch_anneal));
    }
    if args.data.is_none() {
        return fail("needs --data: generated shapes are new every batch, no image comes back");
    }
    if args.run.mode != common::Mode::Full {
        return fail("needs --mode full: predicted steps train on no image");
    }
    if args.select.select_keep < 1.0 {
        return fail("and --select-keep do not combine");
    }
    if args.execution.precision != leanburn::trainer::Precision::F32 || args.execution.accum != 1 {
        return fail("trains in f32 without --accum");
    }
    if args.parallel.devices.is_some() {
        return fail("trains on one device");
    }
    if args.run.resume {
        return fail("does not resume: its books of the images' losses are not checkpointed");
    }
    Ok(())
}

/// `--lr` positive and `--noise` not negative, both finite.
fn check_numbers(args: &Args) -> Result<(), Failure> {
    if !(args.lr.is_finite() && args.lr > 0.0) {
        return Err(bad_input(format!("--lr must be a positive number, got {}", args.lr)));
    }
    if !(args.noise.is_finite() && args.noise >= 0.0) {
        return Err(bad_input(format!("--noise must be zero or positive, got {}", args.noise)));
    }
    Ok(())
}

/// The validation batches (`--eval-batches` of `eval_batch` images) and what is left to
/// train on: of `--data`'s images, those spread over the file are held out and the rest
/// trained on; without them, generated shapes of their own seed.
fn hold_out(
    images: Option<IdxImages>,
    args: &Args,
    resolution: usize,
    eval_batch: usize,
) -> Result<(Vec<ImageBatch>, Option<IdxImages>), Failure> {
    let eval_batches = args.run.eval_batches as usize;
    let Some(images) = images else {
        let validation = shapes_validation(resolution, eval_batch, eval_batches, args.run.seed)
            .map_err(|e| bad_input(e.to_string()))?;
        return Ok((validation, None));
    };
    let (train, held_out) =
        images.split_off(eval_batch * eval_batches).map_err(|e| bad_input(format!("--data: {e}")))?;
    Ok((held_out.batches(eval_batch, eval_batches), Some(train)))
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
    config.check_resolution(resolution, images.is_some())?;
    check_numbers(&args)?;
    check_info_batch(&args)?;
    if let Some(mib) = args.conv_workspace_mib {
        ConvBudget::set_global(ConvBudget::from_mib(mib as usize));
    }
    init_kernel_cache(&args.backend)?;
    let backend = select(&args.backend).map_err(|e| Failure { code: e.exit_code(), message: e.to_string() })?;
    eprintln!("{backend}");
    args.execution.check_precision(&backend)?;
    let devices = match &args.parallel.devices {
        Some(indices) => Some(
            backend.replica_devices(indices).map_err(|e| Failure { code: e.exit_code(), message: e.to_string() })?,
        ),
        None => None,
    };
    let dir = args.run.open(&args.out)?;
    let mut resolved = config::resolved(&Args::command(), matches);
    resolved.insert("backend".into(), backend.kind().name().into());
    config::save(resolved, &dir.options_path())?;
    // Batches of the effective batch's size: a data-parallel run validates on the images a
    // one-device run with that batch does.
    let replicas = devices.as_ref().map_or(1, Vec::len);
    let eval_batch = (args.batch as usize * replicas).min(64);
    let (validation, images) = hold_out(images, &args, resolution, eval_batch)?;
    let (out, mode, checkpointing, conv) = (args.out.clone(), args.run.mode, args.execution.checkpointing, args.conv);
    let plan = Plan { args, config, dir, validation, images, resolution };
    let (summary, outcome) = match (devices, conv) {
        (Some(devices), conv) => backend.run_replicated(&devices, plan, conv == ConvPath::Lean, checkpointing)?,
        (None, ConvPath::Lean) => backend.run_lean_with(plan, checkpointing)?,
        (None, ConvPath::Stock) => backend.run_with(plan, checkpointing)?,
    };
    println!("{summary}");
    plot_runs(&out, mode, &outcome, "cnn", "CNN on shapes");
    Ok(())
}
