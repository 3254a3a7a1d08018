//! The flags both training examples share: run modes, data parallelism and how steps
//! execute (see `docs/memory.md`).

use clap::ValueEnum;
use leanburn::device::{Checkpointing, DeviceChoice};
use leanburn::trainer::{ExecutionConfig, Precision, PrecisionConfig, TrimPolicy};
use leanburn::TrainerError;
use leanburn::{BackendJob, TrainBackend};

use super::failure::{bad_input, Failure};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Hybrid,
    Full,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Hybrid => "hybrid",
            Mode::Full => "full",
        }
    }
}

/// Data-parallel training: the devices of the replicas.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ParallelArgs {
    /// Train one replica on each of these devices of the chosen backend (data parallel,
    /// on burn-collective's all-reduce; see docs/parallel.md): CUDA ordinals, wgpu
    /// adapters in the order listed, or the CPU's one device, 0. Repeat a device for
    /// several replicas on it (`0,0`). Each replica takes --batch items per step, so the
    /// effective batch is --batch × replicas.
    #[arg(long, value_delimiter = ',', conflicts_with = "device_index")]
    pub devices: Option<Vec<usize>>,
}

/// How steps execute: the flags both training examples share (see `docs/memory.md`).
#[derive(clap::Args, Debug, Clone)]
pub struct ExecutionArgs {
    /// Micro-batches per optimizer step (gradient accumulation): the effective batch is
    /// --batch × --accum, the activation memory that of one --batch.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub accum: u64,
    /// Read the training loss back to the host every this many steps; the steps between
    /// skip the device sync (predict steps, and the step before each, always read).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub loss_every: u64,
    /// Hand unused pool memory back to the device: `never`, `phases` (whenever the phase
    /// changes) or a number N (every N steps).
    #[arg(long, default_value = "never", value_parser = parse_trim)]
    pub trim: TrimPolicy,
    /// Activation checkpointing: `balanced` recomputes element-wise results in the
    /// backward pass instead of keeping them (less memory, more time).
    #[arg(long, value_enum, default_value_t = Checkpointing::Off)]
    pub checkpointing: Checkpointing,
    /// The float type forward and backward passes compute in: `f32`, `bf16` (CUDA) or
    /// `f16` (CUDA, and wgpu adapters with shader-f16). Master weights and optimizer state
    /// stay f32; f16 scales its loss dynamically and skips steps that overflow. Default
    /// f32; the GPT-2 example's: bf16 on CUDA devices that compute it, f32 elsewhere.
    #[arg(long, value_enum, default_value_t = Precision::F32)]
    pub precision: Precision,
    /// Read the device pool every this many milliseconds from a second thread while steps
    /// run: each step record keeps the highest in-use and reserve it saw (the in-step
    /// peak), the plot draws it and the summary prints it. A measurement: every reading
    /// flushes the device's queue.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub sample_pool_ms: Option<u64>,
}

impl ExecutionArgs {
    pub fn config(&self) -> ExecutionConfig {
        ExecutionConfig::default()
            .with_accumulation_steps(self.accum as usize)
            .with_loss_every(self.loss_every as usize)
            .with_trim(self.trim)
            .with_sample_pool_ms(self.sample_pool_ms)
    }

    /// The trainer's precision settings.
    pub fn precision(&self) -> PrecisionConfig {
        PrecisionConfig::new(self.precision)
    }

    /// Refuses `--precision` where the chosen backend cannot compute in it, before
    /// anything in `--out` is touched (the trainer checks again when it is built).
    pub fn check_precision(&self, backend: &DeviceChoice) -> Result<(), Failure> {
        if self.precision == Precision::F32 || backend.run(SupportsDtype(self.precision.dtype().into())) {
            return Ok(());
        }
        Err(bad_input(format!("--precision: {}", TrainerError::UnsupportedPrecision { precision: self.precision })))
    }

    /// ", f16 compute (f32 master weights, loss scaling)" and the like, for the run's
    /// header line; empty for f32.
    pub fn describe_precision(&self) -> String {
        match self.precision {
            Precision::F32 => String::new(),
            Precision::Bf16 => ", bf16 compute (f32 master weights)".to_string(),
            Precision::F16 => ", f16 compute (f32 master weights, loss scaling)".to_string(),
        }
    }

    /// ", balanced activation checkpointing" when it is on, for the run's header line.
    pub fn describe_checkpointing(&self) -> &'static str {
        match self.checkpointing {
            Checkpointing::Off => "",
            Checkpointing::Balanced => ", balanced activation checkpointing",
        }
    }
}

fn parse_trim(value: &str) -> Result<TrimPolicy, String> {
    match value {
        "never" => Ok(TrimPolicy::Never),
        "phases" => Ok(TrimPolicy::PhaseChange),
        n => match n.parse::<usize>() {
            Ok(n) if n > 0 => Ok(TrimPolicy::EverySteps(n)),
            _ => Err(format!("expected `never`, `phases` or a number of steps above 0, got `{value}`")),
        },
    }
}

/// Whether the chosen backend computes in a float type on its device.
struct SupportsDtype(burn::tensor::DType);

impl BackendJob for SupportsDtype {
    type Output = bool;

    fn run<B: TrainBackend>(self, device: B::Device) -> bool {
        <B as burn::tensor::backend::Backend>::supports_dtype(&device, self.0)
    }
}
