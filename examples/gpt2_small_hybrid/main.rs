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
//! [`StepReport`] per step), `validation-<mode>.csv`, `checkpoints-<mode>/`, and `gpt2.svg`
//! (train/validation loss and device memory against step, both modes overlaid when both
//! have run).

#[path = "../common/mod.rs"]
mod common;
mod corpus;
mod memory;
mod warm_cache;

use std::path::PathBuf;

use burn::module::AutodiffModule;
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, Parser};
use common::average::AverageArgs;
use common::selection::SelectArgs;
use common::{
    bad_input, config, exit_on_failure, init_kernel_cache, plot_runs, run_settings, start_trainer, summary, train,
    ExecutionArgs, Failure, RunArgs,
};
use leanburn::data::{HostBatch, TokenDataset, WindowSampler};
use leanburn::device::{select, Chosen, DeviceChoice};
use leanburn::model::{Gpt2, Gpt2Attention, Gpt2Config, GPT2_PRESETS};
use leanburn::optim::{clipped_adamw, ClippedAdamW};
use leanburn::trainer::{cast_params, Precision};
use leanburn::SelectionConfig;
use leanburn::{BackendArgs, BackendJob, TrainBackend};
use leanburn::{RunDir, RunOutcome, Validation};

#[derive(Parser, Debug, Clone)]
#[command(about = "Train GPT-2 with leanburn's HybridTrainer on real text")]
struct Args {
    #[command(flatten)]
    backend: BackendArgs,
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    execution: ExecutionArgs,
    #[command(flatten)]
    average: AverageArgs,
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
    /// With `--resume`: continue even though the corpus differs from the one the run
    /// trained on (the differences are printed as a warning).
    #[arg(long, requires = "resume")]
    allow_corpus_change: bool,
    /// Validation loss every this many steps.
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u64).range(1..))]
    eval_every: u64,
    /// Compute the loss this many tokens at a time, never building the full
    /// `tokens × vocab` logits (see `docs/gpt2.md`); 0 builds them. Default on the CPU
    /// backend: 512 tokens where a step has at least 512 (faster there too:
    /// docs/benchmarks.md), else 128 where the memory estimate is smaller with the chunk;
    /// 256 on software adapters where it is smaller; on GPUs the largest chunk whose
    /// buffers fit 1 GiB and a quarter of the memory the run leaves free.
    #[arg(long)]
    loss_chunk: Option<u64>,
    /// `lean`: leanburn's attention, which keeps no `seq × seq` scores for the backward
    /// pass; `burn`: Burn's `attention` op, which keeps them in every layer.
    #[arg(long, value_enum, default_value_t = Gpt2Attention::Lean)]
    attention: Gpt2Attention,
    /// MiB of transient score buffers one block of leanburn's attention may hold (about
    /// four `[batch, heads, rows, seq]` tensors): larger blocks are fewer, larger kernels.
    /// Default: on CUDA with cuBLASLt, where the attention runs in blocks on its GEMMs, one
    /// block per layer within a 32nd of the device's memory (1,536 MiB at gpt2-small
    /// 8 × 1024), added to the memory estimate; elsewhere 64 (the fused kernels hold none).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    attention_workspace: Option<u64>,
    /// Round the vocabulary up to a multiple of this: default 64 on GPUs (50,304 rows,
    /// which their matmuls prefer), 1 on the CPU backend and software adapters.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pad_vocab: Option<u64>,
    /// Start even if the memory estimate exceeds the device's memory.
    #[arg(long)]
    ignore_memory_estimate: bool,
    /// Compile and autotune the kernels of one training step and one evaluation step at
    /// these shapes, in every precision the backend computes in (only `--precision`'s
    /// when given), into the kernel cache (`--kernel-cache`), then exit: a later run at
    /// these shapes starts warm (docs/gpt2.md).
    #[arg(long, conflicts_with_all = ["resume", "overwrite"])]
    warm_cache: bool,
    #[command(flatten)]
    select: SelectArgs,
}

/// What a resumed run cannot change: its model, its batches and its schedule are in the
/// checkpoint (`--resume` starts from the run's saved options; see `common::config`).
const FIXED_ON_RESUME: &[&str] = &["preset", "seq", "batch", "pad-vocab", "lr", "warmup", "seed", "accum"];

fn main() {
    common::allocator::keep_freed_memory();
    // SAFETY: first thing in main, before any thread exists.
    unsafe { leanburn::device::quiet_headless_vulkan() };
    exit_on_failure(config::parse_with_config::<Args>(FIXED_ON_RESUME).and_then(|(args, matches)| run(args, &matches)));
}

/// The vocabulary is padded to a multiple of this on GPUs (as nanoGPT does: 50,304).
const GPU_PAD_VOCAB: usize = 64;

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
    example_selection: Option<SelectionConfig>,
    dir: RunDir,
    data: TokenDataset,
    validation: Vec<HostBatch>,
}

fn run(mut args: Args, matches: &ArgMatches) -> Result<(), Failure> {
    init_kernel_cache(&args.backend)?;
    let backend = select(&args.backend).map_err(|e| Failure { code: e.exit_code(), message: e.to_string() })?;
    eprintln!("{backend}");
    args.execution.precision = precision(&args, matches, &backend);
    let gpu = on_a_gpu(&backend);
    let sizes = Sizes::decide(&args, gpu)?;
    let examples = args.select.config(sizes.steps, args.run.seed)?;
    let Sizes { batch, seq, .. } = sizes;
    let loss_chunk = memory::loss_chunk(&args, &backend, gpu, &sizes.config, batch, seq);

    let workspace = args.attention_workspace.map_or_else(
        || leanburn::device::default_attention_workspace(&backend, batch, sizes.config.heads, seq),
        |mib| (mib as usize) << 20,
    );
    leanburn::backend::set_attention_workspace(workspace);
    memory::check_memory(&args, &backend, &sizes.config, &sizes.preset, batch, seq, loss_chunk)?;
    if args.warm_cache {
        return warm_cache(args, matches, &backend, sizes, loss_chunk);
    }
    args.execution.check_precision(&backend)?;
    let dir = args.run.open(&args.out)?;
    // What was decided at run time is recorded as decided, so the file repeats this run.
    let mut resolved = config::resolved(&Args::command(), matches);
    resolved.extend(
        sizes
            .decided(backend.kind().name(), loss_chunk, args.execution.precision)
            .map(|(name, value)| (name.to_string(), value.into())),
    );
    config::save(resolved, &dir.options_path())?;

    let (data, validation) = corpus::tokens(&args, &dir, batch, seq)?;

    let (out, mode, checkpointing) = (args.out.clone(), args.run.mode, args.execution.checkpointing);
    let Sizes { preset, config, steps, lr, .. } = sizes;
    let plan = Plan {
        args,
        preset,
        config,
        batch,
        seq,
        steps,
        lr,
        loss_chunk,
        example_selection: examples,
        dir,
        data,
        validation,
    };
    // On `Lean`: its GEMMs are cuBLASLt's on CUDA; every other op is the backend's own.
    let (summary, outcome) = backend.run_lean_with(plan, checkpointing)?;
    println!("{summary}");
    plot_runs(&out, mode, &outcome, "gpt2", "GPT-2");
    Ok(())
}

/// A CUDA device or a hardware adapter: gpt2-small at its full context by default.
fn on_a_gpu(backend: &DeviceChoice) -> bool {
    match &backend.chosen {
        #[cfg(feature = "cuda")]
        Chosen::Cuda { .. } => true,
        Chosen::Wgpu { adapter, .. } => adapter.kind.is_hardware(),
        Chosen::Cpu => false,
    }
}

/// The model and the run's sizes: the flags', else the device's defaults.
struct Sizes {
    preset: String,
    pad_vocab: usize,
    config: Gpt2Config,
    batch: usize,
    seq: usize,
    steps: usize,
    lr: f64,
}

impl Sizes {
    fn decide(args: &Args, gpu: bool) -> Result<Self, Failure> {
        let preset = args.preset.clone().unwrap_or_else(|| if gpu { "gpt2-small" } else { "gpt2-mini" }.into());
        let pad_vocab = args.pad_vocab.map_or(if gpu { GPU_PAD_VOCAB } else { 1 }, |p| p as usize);
        let config = Gpt2Config::preset(&preset).map_err(|e| bad_input(e.to_string()))?.with_pad_vocab_to(pad_vocab);
        let seq = args.seq.map_or(if gpu { config.context } else { 64.min(config.context) }, |s| s as usize);
        if seq > config.context {
            return Err(bad_input(format!("--seq {seq} exceeds {preset}'s context of {} tokens", config.context)));
        }
        let steps = args.steps.map_or(if gpu { 300 } else { 200 }, |s| s as usize);
        let lr = args.lr.unwrap_or(if preset == "gpt2-small" { 6e-4 } else { 1e-3 });
        if !(lr.is_finite() && lr > 0.0) {
            return Err(bad_input(format!("--lr must be a positive number, got {lr}")));
        }
        Ok(Self { preset, pad_vocab, config, batch: args.batch as usize, seq, steps, lr })
    }

    /// The options decided here rather than by a flag, with `backend`'s name, the loss
    /// chunk and the precision, for the saved options file.
    fn decided(&self, backend: &str, loss_chunk: Option<usize>, precision: Precision) -> [(&'static str, String); 8] {
        [
            ("backend", backend.to_string()),
            ("precision", precision.name().to_string()),
            ("preset", self.preset.clone()),
            ("seq", self.seq.to_string()),
            ("steps", self.steps.to_string()),
            ("lr", self.lr.to_string()),
            ("loss-chunk", loss_chunk.unwrap_or(0).to_string()),
            ("pad-vocab", self.pad_vocab.to_string()),
        ]
    }
}

/// `--precision` where it was given, else the device's default (said where it is not f32).
fn precision(args: &Args, matches: &ArgMatches, backend: &DeviceChoice) -> Precision {
    if precision_asked(matches) {
        return args.execution.precision;
    }
    let default = backend.default_precision();
    if default != Precision::F32 {
        eprintln!("precision: {default} (the default on this device; --precision f32 for f32)");
    }
    default
}

/// Whether `--precision` was given (on the command line, in `--config`'s file or in a
/// resumed run's saved options), not left to the device's default.
fn precision_asked(matches: &ArgMatches) -> bool {
    matches.value_source("precision").is_some_and(|source| source != ValueSource::DefaultValue)
}

/// `--warm-cache`: one training and one evaluation step in every precision the backend
/// computes in, or the one asked for.
fn warm_cache(
    args: Args,
    matches: &ArgMatches,
    backend: &DeviceChoice,
    sizes: Sizes,
    loss_chunk: Option<usize>,
) -> Result<(), Failure> {
    let precisions = if precision_asked(matches) {
        args.execution.check_precision(backend)?;
        vec![args.execution.precision]
    } else {
        vec![Precision::F32, Precision::Bf16, Precision::F16]
    };
    let checkpointing = args.execution.checkpointing;
    let Sizes { config, batch, seq, .. } = sizes;
    backend.run_lean_with(warm_cache::WarmCache { args, config, batch, seq, loss_chunk, precisions }, checkpointing)
}

/// AdamW with weight decay 0.1, the gradients clipped to a global norm of 1 (as PyTorch's
/// `clip_grad_norm_`), one update kernel per parameter on a GPU.
fn optimizer<B: TrainBackend>() -> ClippedAdamW<B> {
    clipped_adamw(0.1, 1.0)
}

impl BackendJob for Plan {
    type Output = Result<(String, RunOutcome), Failure>;

    fn run<B: TrainBackend>(self, device: B::Device) -> Self::Output {
        let args = &self.args;
        B::seed(&device, args.run.seed);
        let model: Gpt2<B> =
            self.config.init::<B>(&device).with_loss_chunk(self.loss_chunk).with_attention(args.attention);
        let example_selection = self.example_selection.clone();
        let start = args.run.start(self.lr, self.steps, &args.execution, &args.average, example_selection)?;
        let mut trainer = start_trainer(model, optimizer(), &start, &self.dir, device.clone(), None)?;
        let header = |first: usize| {
            format!(
                "training {} on {} for steps {}..{} ({} mode), peak lr {}{}{}{}",
                self.preset,
                B::name(&device),
                first + 1,
                self.steps,
                args.run.mode.name(),
                self.lr,
                match args.execution.accum {
                    1 => String::new(),
                    k => format!(
                        ", {k} micro-batches of {} per step (effective batch {})",
                        self.batch,
                        self.batch * k as usize
                    ),
                },
                args.execution.describe_checkpointing(),
                args.execution.describe_precision(),
            )
        };
        let settings =
            run_settings(self.steps, args.eval_every, args.run.checkpoint_every, trainer.config().warmup_steps);
        let sampler = WindowSampler::new(self.batch, self.seq, args.run.seed).map_err(|e| bad_input(e.to_string()))?;
        let batches = corpus::TrainWindows { sampler, tokens: self.data.train() };
        let to_device = |batch: HostBatch| batch.into_device::<B>(&device);
        let dtype = args.execution.precision.dtype();
        // Forward only in the compute precision, as the trainer's predict passes run.
        let validate = |model: &Gpt2<B>| Validation {
            loss: cast_params(model.valid(), dtype).evaluate(&self.validation, &device),
            accuracy: None,
        };
        let outcome = train(&mut trainer, &self.dir, settings, "tok", header, batches, to_device, validate)?;
        let title = format!("{} ({} mode) on {}", self.preset, args.run.mode.name(), B::name(&device));
        Ok((summary(&title, &outcome, &self.dir, "tokens"), outcome))
    }
}
