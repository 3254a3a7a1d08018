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

mod common;

use std::path::PathBuf;
use std::time::Instant;

use burn::module::AutodiffModule;
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, Parser};
use common::average::AverageArgs;
use common::selection::SelectArgs;
use common::{
    bad_input, broke, config, exit_on_failure, init_kernel_cache, open_run, plot_runs, run_settings, start_trainer,
    summary, train, ExecutionArgs, Failure, Mode, Start,
};
use leanburn::data::{
    evaluation_windows, Corpus, CorpusFingerprint, CorpusSource, Gpt2Tokenizer, HostBatch, Split, TokenDataset,
    WindowSampler,
};
use leanburn::memory::format_bytes;
use leanburn::model::{Gpt2, Gpt2Attention, Gpt2Config, Gpt2MemoryEstimate, Gpt2PoolReserve, PoolPages, GPT2_PRESETS};
use leanburn::optim::{clipped_adamw, ClippedAdamW};
use leanburn::runner::{CorpusCheck, RunDir, RunOutcome, Validation};
use leanburn::select::{
    device_memory, largest_pool_page, select, BackendArgs, BackendJob, BackendKind, Chosen, Selection, TrainBackend,
};
use leanburn::trainer::{HybridConfig, HybridTrainer, LrSchedule, Precision, PrecisionConfig, SelectionConfig};

#[derive(Parser, Debug, Clone)]
#[command(about = "Train GPT-2 with leanburn's HybridTrainer on real text")]
struct Args {
    #[command(flatten)]
    backend: BackendArgs,
    #[command(flatten)]
    execution: ExecutionArgs,
    #[command(flatten)]
    average: AverageArgs,
    /// Options from a JSON or TOML file, keyed by long option name (`batch = 16`); the
    /// command line wins. Each run writes its resolved options to `--out` as
    /// `config-<mode>.json`, which this reads back to repeat the run.
    #[arg(long)]
    config: Option<PathBuf>,
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
    /// Continue the run in `--out` from its latest checkpoint (on the same text: a run
    /// records its corpus, and a resumed run refuses a different one).
    #[arg(long)]
    resume: bool,
    /// With `--resume`: continue even though the corpus differs from the one the run
    /// trained on (the differences are printed as a warning).
    #[arg(long, requires = "resume")]
    allow_corpus_change: bool,
    /// Replace an earlier run of the same mode in `--out`.
    #[arg(long, conflicts_with = "resume")]
    overwrite: bool,
    /// Validation loss every this many steps.
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u64).range(1..))]
    eval_every: u64,
    /// Batches per validation.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..))]
    eval_batches: u64,
    /// Checkpoint every this many steps and at the end.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    checkpoint_every: u64,
    /// Compute the loss this many tokens at a time, never building the full
    /// `tokens × vocab` logits (see `docs/gpt2.md`); 0 builds them. Default on the CPU
    /// backend: 512 tokens where a step has at least 512 (faster there too:
    /// docs/benchmarks.md); elsewhere 128 on the CPU and 256 on GPUs, wherever the memory
    /// estimate is smaller with the chunk than without; otherwise off.
    #[arg(long)]
    loss_chunk: Option<u64>,
    /// `lean`: leanburn's attention, which keeps no `seq × seq` scores for the backward
    /// pass; `burn`: Burn's `attention` op, which keeps them in every layer.
    #[arg(long, value_enum, default_value_t = Gpt2Attention::Lean)]
    attention: Gpt2Attention,
    /// MiB of transient score buffers one block of leanburn's attention may hold (about
    /// four `[batch, heads, rows, seq]` tensors): larger blocks are fewer, larger kernels.
    /// Not counted by the memory estimate.
    #[arg(long, default_value_t = (leanburn::backend::attention::DEFAULT_ATTENTION_WORKSPACE_BYTES >> 20) as u64,
        value_parser = clap::value_parser!(u64).range(1..))]
    attention_workspace: u64,
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
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

/// What a resumed run cannot change: its model, its batches and its schedule are in the
/// checkpoint (`--resume` starts from the run's saved options; see `common::config`).
const FIXED_ON_RESUME: &[&str] = &["preset", "seq", "batch", "pad-vocab", "lr", "warmup", "seed", "accum"];

fn main() {
    common::allocator::keep_freed_memory();
    // SAFETY: first thing in main, before any thread exists.
    unsafe { leanburn::select::quiet_headless_vulkan() };
    exit_on_failure(config::parse_with_config::<Args>(FIXED_ON_RESUME).and_then(|(args, matches)| run(args, &matches)));
}

/// Tokens per loss chunk on the CPU backend when `--loss-chunk` is not given and a step
/// has at least this many: on 2 cores at gpt2-mini and gpt2-tiny 8 × 64 the fused loss in
/// one chunk of 512 ran 1.2× the tokens/s of chunks of 128 (the LM head's matmuls run
/// faster with more rows) and 1.6× the full logits', at 0.4 of PyTorch's resident memory
/// (docs/benchmarks.md, "The main job on the CPU").
const CPU_LOSS_CHUNK: usize = 512;

/// Tokens per loss chunk on the CPU backend for steps of fewer tokens than
/// [`CPU_LOSS_CHUNK`], where the memory estimate says it saves.
const CPU_SMALL_LOSS_CHUNK: usize = 128;

/// Tokens per loss chunk elsewhere: one chunk's logits are 49 MiB at GPT-2's padded
/// vocabulary, which llvmpipe's pool can allocate (the 196 MiB buffer of gpt2-mini's full
/// logits at 8 × 64 it cannot: the main job on llvmpipe failed so), and at gpt2-small
/// 8 × 1024 the loss keeps 0.3 GiB instead of 4.6 GiB (estimated).
const GPU_LOSS_CHUNK: usize = 256;

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
    selection: Option<SelectionConfig>,
    dir: RunDir,
    data: TokenDataset,
    validation: Vec<HostBatch>,
}

fn run(args: Args, matches: &ArgMatches) -> Result<(), Failure> {
    init_kernel_cache(&args.backend)?;
    let selection = select(&args.backend).map_err(|e| Failure { code: e.exit_code(), message: e.to_string() })?;
    eprintln!("{selection}");
    let gpu = match &selection.chosen {
        #[cfg(feature = "cuda")]
        Chosen::Cuda { .. } => true,
        Chosen::Wgpu { adapter, .. } => adapter.kind.is_hardware(),
        Chosen::Cpu => false,
    };

    let preset = args.preset.clone().unwrap_or_else(|| if gpu { "gpt2-small" } else { "gpt2-mini" }.into());
    let pad_vocab = args.pad_vocab.map_or(if gpu { GPU_PAD_VOCAB } else { 1 }, |p| p as usize);
    let config = Gpt2Config::preset(&preset).map_err(|e| bad_input(e.to_string()))?.with_pad_vocab_to(pad_vocab);
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
    let chosen = args.select.config(steps, args.seed)?;
    let loss_chunk = match args.loss_chunk {
        Some(0) => None,
        Some(chunk) => Some(chunk as usize),
        None => match selection.kind() {
            BackendKind::Cpu if batch * seq >= CPU_LOSS_CHUNK => Some(CPU_LOSS_CHUNK),
            BackendKind::Cpu => Gpt2MemoryEstimate::loss_chunk_that_saves(&config, batch, seq, 4, CPU_SMALL_LOSS_CHUNK),
            _ => Gpt2MemoryEstimate::loss_chunk_that_saves(&config, batch, seq, 4, GPU_LOSS_CHUNK),
        },
    };

    leanburn::backend::attention::set_attention_workspace((args.attention_workspace as usize) << 20);
    check_memory(&args, &selection, &config, &preset, batch, seq, loss_chunk)?;
    if args.warm_cache {
        // Every precision the backend computes in, or the one asked for.
        let asked = matches.value_source("precision").is_some_and(|source| source != ValueSource::DefaultValue);
        let precisions = if asked {
            args.execution.check_precision(&selection)?;
            vec![args.execution.precision]
        } else {
            vec![Precision::F32, Precision::Bf16, Precision::F16]
        };
        let checkpointing = args.execution.checkpointing;
        return selection.run_with(WarmCache { args, config, batch, seq, loss_chunk, precisions }, checkpointing);
    }
    args.execution.check_precision(&selection)?;
    let dir = open_run(&args.out, args.mode, args.resume, args.overwrite)?;
    // What was decided at run time is recorded as decided, so the file repeats this run.
    let mut resolved = config::resolved(&Args::command(), matches);
    let decided = [
        ("backend", selection.kind().name().to_string()),
        ("preset", preset.clone()),
        ("seq", seq.to_string()),
        ("steps", steps.to_string()),
        ("lr", lr.to_string()),
        ("loss-chunk", loss_chunk.unwrap_or(0).to_string()),
        ("pad-vocab", pad_vocab.to_string()),
    ];
    resolved.extend(decided.map(|(name, value)| (name.to_string(), value.into())));
    config::save(resolved, &dir.options_path())?;

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
    eprintln!("corpus: {corpus}");
    check_corpus(&dir, &CorpusFingerprint::new(&corpus, Gpt2Tokenizer::ENCODING), &args)?;
    let tokenizer = Gpt2Tokenizer::new().map_err(|e| broke(e.to_string()))?;
    let started = Instant::now();
    let tokens = tokenizer.encode_corpus(&corpus.text);
    drop(corpus);
    eprintln!("tokenized: {} tokens in {:.1} s", tokens.len(), started.elapsed().as_secs_f64());
    let data = TokenDataset::split_for_windows(tokens, 0.1, seq).map_err(|e| bad_input(format!("--seq {seq}: {e}")))?;
    let validation = evaluation_windows(data.validation(), batch.min(8), seq, args.eval_batches as usize);
    let validation = if validation.is_empty() { evaluation_windows(data.validation(), 1, seq, 1) } else { validation };

    let (out, mode, checkpointing) = (args.out.clone(), args.mode, args.execution.checkpointing);
    let plan =
        Plan { args, preset, config, batch, seq, steps, lr, loss_chunk, selection: chosen, dir, data, validation };
    let (summary, outcome) = selection.run_with(plan, checkpointing)?;
    println!("{summary}");
    plot_runs(&out, mode, &outcome, "gpt2", "GPT-2");
    Ok(())
}

/// Records the corpus of a new run; checks a resumed run's against its record, refusing
/// a different one unless `--allow-corpus-change`.
fn check_corpus(dir: &RunDir, fingerprint: &CorpusFingerprint, args: &Args) -> Result<(), Failure> {
    match dir.check_corpus(fingerprint, args.allow_corpus_change)? {
        CorpusCheck::Changed(what) => {
            eprintln!("WARNING: resuming on a different corpus than the run trained on ({what})")
        }
        CorpusCheck::Unrecorded => eprintln!(
            "warning: {} has no corpus record ({}), so the resumed run cannot check that its text is the same",
            dir.out().display(),
            dir.corpus_path().display()
        ),
        CorpusCheck::Recorded | CorpusCheck::Same => {}
    }
    Ok(())
}

/// Prints the memory estimates and refuses a run that cannot fit where the device's
/// memory is known: the pool's reserve where the device has a paged pool, the tensors
/// otherwise.
fn check_memory(
    args: &Args,
    selection: &Selection,
    config: &Gpt2Config,
    preset: &str,
    batch: usize,
    seq: usize,
    loss_chunk: Option<usize>,
) -> Result<(), Failure> {
    let averaged = args.average.average.is_some();
    let estimate = Gpt2MemoryEstimate::new(config, batch, seq, 4, loss_chunk, args.attention);
    let estimate = if averaged { estimate.with_weight_average() } else { estimate };
    eprintln!(
        "{preset}: {} parameters; batch {batch} × {seq} tokens; estimated peak {estimate}",
        config.parameter_count()
    );
    let largest_page = largest_pool_page(selection);
    let reserve = largest_page.map(|largest| {
        let reserve =
            Gpt2PoolReserve::new(config, batch, seq, loss_chunk, args.attention, PoolPages::sub_slices(largest));
        if averaged {
            reserve.with_weight_average()
        } else {
            reserve
        }
    });
    if let (Some(reserve), Some(largest_page)) = (reserve, largest_page) {
        eprintln!("  estimated pool reserve: {reserve}");
        // Not an estimate: CubeCL cannot allocate a buffer larger than its largest page.
        if reserve.largest_tensor > largest_page {
            return Err(bad_input(format!(
                "one tensor of this run, {}, is larger than the largest buffer this device allocates, {}: \
                 lower --batch or --seq, use a smaller --preset{}",
                format_bytes(reserve.largest_tensor as f64),
                format_bytes(largest_page as f64),
                if loss_chunk.is_none() { format!(", or pass --loss-chunk {}", seq.min(256)) } else { String::new() },
            )));
        }
    }
    if loss_chunk.is_none() {
        let chunked = Gpt2MemoryEstimate::new(config, batch, seq, 4, Some(seq), args.attention);
        let chunked = if averaged { chunked.with_weight_average() } else { chunked };
        if chunked.total() < estimate.total() {
            eprintln!("  (with --loss-chunk {seq}: {})", format_bytes(chunked.total() as f64));
        }
    }
    let needed = reserve.map_or(estimate.total(), |reserve| reserve.total());
    match device_memory(selection) {
        Some(capacity) if needed > capacity && !args.ignore_memory_estimate => Err(bad_input(format!(
            "this run needs about {} but the device has {}: lower --batch or --seq, {}or a smaller \
             --preset (--ignore-memory-estimate starts anyway)",
            format_bytes(needed as f64),
            format_bytes(capacity as f64),
            if loss_chunk.is_none() { format!("pass --loss-chunk {}, ", seq.min(256)) } else { String::new() },
        ))),
        Some(capacity) => {
            eprintln!("  device memory: {}", format_bytes(capacity as f64));
            Ok(())
        }
        None => Ok(()),
    }
}

/// AdamW with weight decay 0.1, the gradients clipped to a global norm of 1 (as PyTorch's
/// `clip_grad_norm_`), one update kernel per parameter on a GPU.
fn optimizer<B: TrainBackend>() -> ClippedAdamW<B> {
    clipped_adamw(0.1, 1.0)
}

/// The `--warm-cache` job: one training step and one evaluation step per precision, on
/// token windows of the run's shape (the values do not matter to the kernels).
struct WarmCache {
    args: Args,
    config: Gpt2Config,
    batch: usize,
    seq: usize,
    loss_chunk: Option<usize>,
    /// The precisions to warm, where the backend computes in them.
    precisions: Vec<Precision>,
}

impl BackendJob for WarmCache {
    type Output = Result<(), Failure>;

    fn run<B: TrainBackend>(self, device: B::Device) -> Self::Output {
        let tokens: Vec<u32> =
            (0..(self.batch + 1) * (self.seq + 1)).map(|i| (i * 7_919 % self.config.vocab_size) as u32).collect();
        let mut sampler =
            WindowSampler::new(self.batch, self.seq, self.args.seed).map_err(|e| bad_input(e.to_string()))?;
        let train = sampler.sample(&tokens, Split::Train).map_err(|e| broke(e.to_string()))?;
        // Predicted steps run the training batch forward; validation runs its own batch size.
        let evaluation = [train.clone(), evaluation_windows(&tokens, self.batch.min(8), self.seq, 1).remove(0)];
        for &precision in self.precisions.iter().filter(|p| B::supports_dtype(&device, p.dtype().into())) {
            let started = Instant::now();
            let model: Gpt2<B> =
                self.config.init::<B>(&device).with_loss_chunk(self.loss_chunk).with_attention(self.args.attention);
            let lr = LrSchedule::Constant { lr: 1e-4 };
            let mut trainer = HybridTrainer::new(model, optimizer(), HybridConfig::all_full(), lr, device.clone())
                .and_then(|t| t.with_execution(self.args.execution.config()))
                .and_then(|t| t.with_precision(PrecisionConfig::new(precision)))
                .map_err(|e| broke(e.to_string()))?;
            trainer.step(train.to_device::<B>(&device)).map_err(|e| broke(e.to_string()))?;
            let trained = started.elapsed().as_secs_f64();
            trainer.model().valid().evaluate(&evaluation, &device);
            eprintln!(
                "warmed {}: a training step in {trained:.1} s, evaluation in {:.1} s",
                precision.name(),
                started.elapsed().as_secs_f64() - trained
            );
        }
        Ok(())
    }
}

impl BackendJob for Plan {
    type Output = Result<(String, RunOutcome), Failure>;

    fn run<B: TrainBackend>(self, device: B::Device) -> Self::Output {
        let args = &self.args;
        B::seed(&device, args.seed);
        let model: Gpt2<B> =
            self.config.init::<B>(&device).with_loss_chunk(self.loss_chunk).with_attention(args.attention);
        let start = Start {
            mode: args.mode,
            warmup: args.warmup as usize,
            seed: args.seed,
            peak_lr: self.lr,
            steps: self.steps,
            execution: args.execution.config(),
            precision: args.execution.precision(),
            average: args.average.config(self.steps)?,
        };
        let mut trainer = start_trainer(model, optimizer(), &start, &self.dir, device.clone(), None)?;
        if let Some(selection) = self.selection.clone() {
            trainer = trainer.with_selection(selection).map_err(|e| bad_input(format!("--select-keep: {e}")))?;
        }
        let header = |first: usize| {
            format!(
                "training {} on {} for steps {}..{} ({} mode), peak lr {}{}{}{}",
                self.preset,
                B::name(&device),
                first + 1,
                self.steps,
                args.mode.name(),
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
        let settings = run_settings(self.steps, args.eval_every, args.checkpoint_every, trainer.config().warmup_steps);
        let mut sampler = WindowSampler::new(self.batch, self.seq, args.seed).map_err(|e| bad_input(e.to_string()))?;
        let next_batch = || sampler.sample(self.data.train(), Split::Train).map_err(|e| broke(e.to_string()));
        let to_device = |batch: HostBatch| batch.into_device::<B>(&device);
        let validate =
            |model: &Gpt2<B>| Validation { loss: model.valid().evaluate(&self.validation, &device), accuracy: None };
        let outcome = train(
            &mut trainer,
            &self.dir,
            settings,
            args.execution.sample_pool_ms,
            "tok",
            header,
            next_batch,
            to_device,
            validate,
        )?;
        let title = format!("{} ({} mode) on {}", self.preset, args.mode.name(), B::name(&device));
        Ok((summary(&title, &outcome, &self.dir, "tokens"), outcome))
    }
}
