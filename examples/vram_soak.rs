//! A long hybrid-training run that watches device memory: N steps, then the memory report
//! and the leak detector's verdict over every step after warmup. Exit status 3 when live
//! memory grew (a leak), so a script or CI job can soak a GPU and fail on it.
//!
//! ```text
//! cargo run --release --example vram_soak -- --steps 1000                 # the CNN on Lean
//! cargo run --release --example vram_soak -- --model gpt2 --steps 1000   # GPT-2 (gpt2-small on a GPU)
//! cargo run --release --example vram_soak -- --model cnn --resolution 256 --batch 32
//! ```
//!
//! Data is generated on the host (shape images; random token windows for GPT-2): the
//! soak measures memory, not learning. So its guard keeps every block that lowers its
//! probe and never closes the gate: every phase keeps cycling through the soak. (The
//! default guard rejects most blocks, and with prediction off it drops the predictor's
//! averages, which a soak would read as memory shrinking.)

mod common;

use burn::module::Module;
use burn::optim::{AdamConfig, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use clap::{Parser, ValueEnum};
use common::{bad_input, exit_on_failure, init_kernel_cache, Failure, Progress};
use leanburn::data::{ShapeSampler, Split, WindowSampler, SHAPE_CLASSES};
use leanburn::device::{select, Chosen};
use leanburn::memory::format_bytes;
use leanburn::model::{ConvClassifierConfig, Gpt2Config, GPT2_PRESETS};
use leanburn::MemoryProbe;
use leanburn::{BackendArgs, BackendJob, TrainBackend};
use leanburn::{HybridBatch, HybridConfig, HybridModel, HybridTrainer, LrSchedule};
use leanburn::{RunSettings, Runner};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

#[derive(Parser, Debug, Clone)]
#[command(about = "Soak hybrid training and report whether device memory grows")]
struct Args {
    #[command(flatten)]
    backend: BackendArgs,
    /// Which model to train.
    #[arg(long, value_enum, default_value_t = SoakModel::Cnn)]
    model: SoakModel,
    /// Steps to run.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    steps: u64,
    /// Steps before leak fitting starts (optimizer state, autotuning and pools settle).
    #[arg(long, default_value_t = 50)]
    settle: u64,
    /// Images or sequences per step.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..))]
    batch: u64,
    /// CNN image side in pixels.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(8..=4096))]
    resolution: u64,
    /// GPT-2 preset; default gpt2-small on a GPU, gpt2-tiny elsewhere.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(GPT2_PRESETS))]
    preset: Option<String>,
    /// GPT-2 tokens per sequence; default the preset's context on a GPU, 64 elsewhere.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    seq: Option<u64>,
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum SoakModel {
    /// The shapes conv net on `Autodiff<Lean<B>>`.
    Cnn,
    /// GPT-2 on the plain autodiff backend.
    Gpt2,
}

fn main() {
    common::allocator::keep_freed_memory();
    // SAFETY: first thing in main, before any thread exists.
    unsafe { leanburn::device::quiet_headless_vulkan() };
    exit_on_failure(run(Args::parse()));
}

fn run(args: Args) -> Result<(), Failure> {
    if args.settle >= args.steps {
        return Err(bad_input(format!("--settle {} leaves no steps of --steps {} to judge", args.settle, args.steps)));
    }
    init_kernel_cache(&args.backend)?;
    let backend = select(&args.backend).map_err(|e| Failure { code: e.exit_code(), message: e.to_string() })?;
    eprintln!("{backend}");
    let gpu = match &backend.chosen {
        Chosen::Wgpu { adapter, .. } => adapter.kind.is_hardware(),
        Chosen::Cpu => false,
        #[allow(unreachable_patterns)]
        _ => true,
    };
    let verdict = match args.model {
        SoakModel::Cnn => backend.run_lean(CnnSoak(args)),
        SoakModel::Gpt2 => {
            let preset = args.preset.clone().unwrap_or_else(|| if gpu { "gpt2-small" } else { "gpt2-tiny" }.into());
            let config = Gpt2Config::preset(&preset).map_err(|e| bad_input(e.to_string()))?;
            let seq = args.seq.map_or(if gpu { config.context } else { 64.min(config.context) }, |s| s as usize);
            if seq > config.context {
                return Err(bad_input(format!("--seq {seq} exceeds {preset}'s context of {} tokens", config.context)));
            }
            backend.run(Gpt2Soak { args, config, preset, seq })
        }
    }?;
    println!("{verdict}");
    Ok(())
}

struct CnnSoak(Args);

impl BackendJob for CnnSoak {
    type Output = Result<String, Failure>;

    fn run<B: TrainBackend>(self, device: B::Device) -> Self::Output {
        let args = self.0;
        let config = ConvClassifierConfig::new().with_classes(SHAPE_CLASSES);
        let model = config.init::<B>(&device);
        let mut sampler = ShapeSampler::new(args.resolution as usize, args.batch as usize, args.seed)
            .map_err(|e| bad_input(e.to_string()))?;
        let title = format!(
            "conv net ({} parameters), batch {} of {}×{} images",
            model.num_params(),
            args.batch,
            args.resolution,
            args.resolution
        );
        soak(&args, &title, model, device.clone(), || sampler.sample().into_device::<B>(&device))
    }
}

struct Gpt2Soak {
    args: Args,
    config: Gpt2Config,
    preset: String,
    seq: usize,
}

impl BackendJob for Gpt2Soak {
    type Output = Result<String, Failure>;

    fn run<B: TrainBackend>(self, device: B::Device) -> Self::Output {
        let Gpt2Soak { args, config, preset, seq } = self;
        let model = config.init::<B>(&device);
        let mut rng = SmallRng::seed_from_u64(args.seed);
        let vocab = config.vocab_size as u32;
        let tokens: Vec<u32> =
            (0..(args.batch as usize * seq * 16).max(4 * seq)).map(|_| rng.random_range(0..vocab)).collect();
        let mut sampler =
            WindowSampler::new(args.batch as usize, seq, args.seed).map_err(|e| bad_input(e.to_string()))?;
        let title = format!("{preset} ({} parameters), batch {} × {seq} tokens", model.num_params(), args.batch);
        soak(&args, &title, model, device.clone(), || {
            sampler
                .sample(&tokens, Split::Train)
                .expect("the token buffer holds many windows")
                .into_device::<B>(&device)
        })
    }
}

/// Runs `args.steps` hybrid steps with Adam as a soak of the runner (memory read once a
/// step, from the step's own record), and returns the report; a growing verdict is an
/// error with exit status 3.
fn soak<B, M, T>(
    args: &Args,
    title: &str,
    model: M,
    device: B::Device,
    mut next_batch: impl FnMut() -> T,
) -> Result<String, Failure>
where
    B: AutodiffBackend + MemoryProbe,
    M: HybridModel<B, T>,
    burn::optim::adaptor::OptimizerAdaptor<burn::optim::Adam, M, B>: Optimizer<M, B>,
    T: HybridBatch<B>,
{
    let steps = args.steps as usize;
    // Every phase, all the way through (module docs): not the default guard.
    let config = HybridConfig::default().with_min_gain(0.0).with_min_confidence(0.0).with_seed(args.seed);
    let mut trainer =
        HybridTrainer::new(model, AdamConfig::new().init(), config, LrSchedule::Constant { lr: 1e-3 }, device.clone())
            .map_err(|e| bad_input(e.to_string()))?;
    let progress = Progress::new("items");
    let mut header = Some(|_| format!("soaking {title} on {} for {steps} steps", B::name(&device)));
    let outcome = Runner::new(RunSettings::soak(steps, args.settle as usize)).run(
        &mut trainer,
        || Ok::<_, std::convert::Infallible>(next_batch()),
        |batch| batch,
        |_| unreachable!("a soak does not validate"),
        |event| progress.on_event(event, &mut header),
    );
    progress.finish();
    let outcome = outcome?;

    let stats = &outcome.statistics;
    let report = &outcome.memory;
    let mut text = format!(
        "{title}: {steps} steps, {:.0}% predicted, {} rolled back; predictor state {}, largest snapshot {}\n{report}",
        stats.predicted_share * 100.0,
        stats.rollbacks,
        format_bytes(stats.predictor_bytes as f64),
        format_bytes(stats.snapshot_bytes as f64),
    );
    let (Some(settled), Some(last), Some(leak)) = (outcome.settled, report.current, &report.leak) else {
        return Ok(text + "no verdict: device memory cannot be read on this backend");
    };
    let growth = last.bytes_in_use as f64 - settled.bytes_in_use as f64;
    text += &format!(
        "bytes_in_use after step {}: {} → {} at the end ({:+.3}%)\nverdict over steps {}..{steps}: {leak}",
        args.settle + 1,
        format_bytes(settled.bytes_in_use as f64),
        format_bytes(last.bytes_in_use as f64),
        100.0 * growth / settled.bytes_in_use.max(1) as f64,
        args.settle,
    );
    if leak.is_growing() {
        println!("{text}");
        return Err(Failure { code: 3, message: "device memory grew during the soak (see the verdict above)".into() });
    }
    Ok(text)
}
