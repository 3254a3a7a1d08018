//! Where a GPT-2 training step's time goes, part by part, with PyTorch's same parts beside.
//!
//! ```text
//! cargo bench --bench gpt2_parts -- --backend cpu --preset gpt2-mini --batch 8 --seq 64
//! gpt2_parts --backend cuda --pytorch python3 --torch-precision tf32     # gpt2-small, 8 × 1024
//! gpt2_parts --backend cuda --precision bf16 --pytorch python3 --torch-precision bf16
//! ```
//!
//! The parts, each timed as the median of `--reps` runs after `--warmup` untimed ones (which
//! also absorb CubeCL's compilation and autotuning), the device synced before and after each
//! run, and scaled to one training step (calls per step × ms per call):
//!
//! - `gemm.qkv`, `gemm.proj`, `gemm.fc`, `gemm.out` (once per layer) and `gemm.head` (the
//!   tied LM head over the full logits, once): a linear layer's three GEMMs, `X·W`, `dY·Wᵀ`
//!   and `Xᵀ·dY`, as 2-D matrices of `batch · seq` rows (as `Gpt2` multiplies them), on the
//!   non-autodiff backend. `gemm` is their sum: the matmul work of a step at the backend's
//!   speed; TFLOP/s counts `6·m·k·n` per linear layer.
//! - `attention` (once per layer): causal attention's forward and backward on tracked
//!   `[batch, heads, seq, head_dim]` q, k, v: leanburn's `lean_attention` under autodiff
//!   (PyTorch: `scaled_dot_product_attention`); `attention.burn`: Burn's `attention` op
//!   under autodiff (`attention_fallback`), leanburn's side only. `LEANBURN_ATTENTION=gemm`
//!   in the environment times `Lean`'s attention in blocks on its GEMMs instead of the fused
//!   kernels (`AttentionPath`), in `--attention-workspace` MiB of score-sized buffers.
//! - `step.forward` (the loss, as `HybridTrainer` computes it), `step.backward`,
//!   `step.optimizer` (AdamW, weight decay 0.1, the gradient norm clipped at 1): one full
//!   step of the model with the device synced between the three; `step` the same step
//!   without those syncs; `step.host` the time until that unsynced step's last call
//!   returned, before the sync: a step whose host time is close to its synced time keeps the
//!   device waiting on the host (Burn's autodiff graph, the fuser, the launches), one whose
//!   host time is far below it is the device's (a lower bound: ops the fuser still holds
//!   are launched in the sync). With `--precision bf16` the step is the mixed-precision one
//!   `HybridTrainer` runs (the GPT-2 example's default on CUDA): the forward and backward
//!   on a bf16 compute copy of the f32 master weights, the optimizer on the master weights,
//!   and `step.casts` the casts between them (the copy, the gradients back), synced apart
//!   from the forward and backward. `step.forward_only` runs in the same precision.
//!   Before timing, leanburn's LayerNorm and one clipped AdamW step are compared with
//!   Burn's (`checks.rs`): a wrong kernel on a new device shows as a number.
//!
//! - `kernels` (CubeCL backends): the kernels one full step launches (forward, backward,
//!   AdamW, and in mixed precision the casts), counted from CubeCL's execution log after
//!   `--warmup` steps, the median of `--reps` steps, how many the optimizer step launched,
//!   and the most frequent kernels. Not timed: the log is written on every launch.
//!
//! - `gemm-check`: not timed. `Lean`'s GEMMs (cuBLASLt on CUDA) against the backend's own
//!   matmul and a host f64 reference over random shapes, views and float types, then one
//!   GPT-2 step's loss and gradients with and without cuBLASLt (`gpt2_parts/gemm_check.rs`);
//!   the bench exits 1 where a check fails.
//!
//! Every part runs on `Autodiff<Lean<B>>`, as the GPT-2 example does: on CUDA its GEMMs are
//! cuBLASLt's (`LEANBURN_GEMM=cubecl` in the environment for CubeCL's matmul, the figures
//! before 2026-11-28).
//!
//! `--pytorch PYTHON` runs `benches/pytorch_gpt2_parts.py` with the same shapes after
//! leanburn's parts (`--torch-precision`: `tf32` is the fair match for CubeCL's f32 matmuls
//! on CUDA, which take TF32; `bf16` for `--precision bf16`) and adds its column and the
//! ratio. The table is Markdown, ready for `docs/benchmarks.md`.

/// The examples' allocator and its settings, so that the bench measures what they run.
#[path = "../examples/common/allocator.rs"]
mod allocator;
#[path = "gpt2_parts/checks.rs"]
mod checks;
#[path = "gpt2_parts/gemm_check.rs"]
mod gemm_check;
#[path = "gpt2_parts/kernels.rs"]
mod kernels;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::backend::Backend;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Distribution, ElementConversion, FloatDType, Tensor};
use burn::train::InferenceStep;
use clap::{Parser, ValueEnum};
use leanburn::backend::lean_attention;
use leanburn::data::{HostBatch, Split, TokenBatch, WindowSampler};
use leanburn::device::{largest_pool_page, select, BackendKind, DeviceChoice};
use leanburn::model::{token_embedding_bytes, Gpt2, Gpt2Config};
use leanburn::optim::ClippedAdamW;
use leanburn::trainer::{cast_params, compute_copy, copy_state_back, master_gradients, ForwardLoss};
use leanburn::{BackendArgs, BackendJob, TrainBackend};
use serde::{Deserialize, Serialize};

#[derive(Parser, Debug, Clone)]
#[command(about = "Where a GPT-2 training step's time goes, against PyTorch's same parts")]
struct Args {
    #[command(flatten)]
    backend: BackendArgs,
    /// GPT-2 preset (gpt2-tiny, gpt2-mini, gpt2-micro, gpt2-small).
    #[arg(long, default_value = "gpt2-small")]
    preset: String,
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Tokens per sequence; default the preset's context.
    #[arg(long)]
    seq: Option<usize>,
    /// Round the vocabulary up to a multiple of this (64: 50,304 rows, leanburn's GPU default).
    #[arg(long, default_value_t = 64)]
    pad_vocab: usize,
    /// Which parts to time, separated by commas or spaces (`benches/gpu_gpt2.sh` splits a
    /// case's arguments at commas).
    #[arg(long, value_enum, value_delimiter = ',', num_args = 1.., default_value = "gemm,attention,step")]
    parts: Vec<Part>,
    /// Float type of the GEMMs, the attention and the step (in bf16 and f16 a mixed-precision
    /// step on f32 master weights, as `HybridTrainer` runs it).
    #[arg(long, value_enum, default_value_t = Precision::F32)]
    precision: Precision,
    /// The step's loss: tokens per chunk (0: the full logits, as PyTorch computes them).
    #[arg(long, default_value_t = 256)]
    loss_chunk: usize,
    /// The step's attention: leanburn's (the default) or Burn's op.
    #[arg(long, value_enum, default_value_t = leanburn::model::Gpt2Attention::Lean)]
    attention: leanburn::model::Gpt2Attention,
    /// MiB of score-sized buffers for leanburn's attention in blocks (the default on CUDA
    /// with cuBLASLt, or `LEANBURN_ATTENTION=gemm`; shapes the kernels do not take, always).
    /// Default: the example's (`leanburn::device::default_attention_workspace`).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    attention_workspace: Option<u64>,
    #[arg(long, default_value_t = 5)]
    reps: usize,
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// A Python interpreter with PyTorch: adds benches/pytorch_gpt2_parts.py's column.
    #[arg(long)]
    pytorch: Option<String>,
    /// PyTorch's script, if not where this binary was built from.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/pytorch_gpt2_parts.py"))]
    pytorch_script: String,
    /// PyTorch's precision: f32 (strict), tf32 or bf16 (autocast).
    #[arg(long, default_value = "tf32")]
    torch_precision: String,
    /// Random products the `gemm-check` part compares, per float type.
    #[arg(long, default_value_t = 24)]
    gemm_cases: usize,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Accepted for `cargo bench` compatibility.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Part {
    Gemm,
    Attention,
    Step,
    /// Kernels launched and Burn's fusion operations executed per full step (CubeCL
    /// backends): CubeCL's execution log and Burn's fusion log, counted. Both logs stay on
    /// for the whole run: time the other parts in a run without this one.
    Kernels,
    /// `Lean`'s GEMMs (cuBLASLt on CUDA) against the backend's own matmul and a host
    /// reference, and one step with and without them (`gpt2_parts/gemm_check.rs`); not timed.
    GemmCheck,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Precision {
    F32,
    Bf16,
    /// As bf16 but in f16, without loss scaling: bf16's structure on a device that has f16
    /// and no bf16 (llvmpipe), for counting launches; not a way to train.
    F16,
}

/// One part's figures, the same on both sides (PyTorch's script prints these as JSON).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Timing {
    /// Calls per training step.
    calls: usize,
    /// Median milliseconds per call.
    ms: f64,
    /// Floating-point operations per call, where counted.
    flops: Option<f64>,
}

impl Timing {
    fn per_step(&self) -> f64 {
        self.calls as f64 * self.ms
    }
}

fn main() {
    allocator::keep_freed_memory();
    let args = Args::parse();
    if args.parts.contains(&Part::Kernels) {
        kernels::log_executions();
    }
    if let Err(message) = run(&args) {
        eprintln!("error: {message}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<(), String> {
    let config = Gpt2Config::preset(&args.preset).map_err(|e| e.to_string())?.with_pad_vocab_to(args.pad_vocab);
    let seq = args.seq.unwrap_or(config.context);
    if seq == 0 || seq > config.context || args.batch == 0 || args.reps == 0 {
        return Err(format!("need 1 ≤ --seq ≤ {} (the preset's context), --batch ≥ 1 and --reps ≥ 1", config.context));
    }
    let backend = select(&args.backend).map_err(|e| e.to_string())?;
    eprintln!("{backend}");
    fits_the_largest_buffer(&backend, &config)?;
    let workspace = args.attention_workspace.map_or_else(
        || leanburn::device::default_attention_workspace(&backend, args.batch, config.heads, seq),
        |mib| (mib as usize) << 20,
    );
    leanburn::backend::set_attention_workspace(workspace);
    let name = backend.kind().to_string();
    let cubecl = backend.kind() != BackendKind::Cpu;
    let ours = backend.run_lean(Parts { args: args.clone(), config: config.clone(), seq, cubecl })?;
    let device = if backend.kind() == BackendKind::Cpu { "cpu" } else { "cuda" };
    // PyTorch has a side only for the timed parts.
    let timed = args.parts.iter().any(|part| matches!(part, Part::Gemm | Part::Attention | Part::Step));
    let torch = match &args.pytorch {
        Some(python) if timed => Some(pytorch(python, args, seq, device)?),
        _ => None,
    };
    if timed {
        report(args, &config, seq, (&name, backend.attention_path()), &ours, torch.as_ref());
    }
    Ok(())
}

/// The token embedding in one buffer: no batch or sequence makes it smaller (llvmpipe's
/// 128 MiB buffers cannot hold gpt2-small's), and CubeCL could only panic on it.
fn fits_the_largest_buffer(backend: &DeviceChoice, config: &Gpt2Config) -> Result<(), String> {
    let embedding = token_embedding_bytes(config);
    match largest_pool_page(backend) {
        Some(largest) if embedding > largest => Err(format!(
            "the token embedding ({} × {}, f32) takes {} MiB, more than the largest buffer this device \
             allocates ({} MiB): use a smaller --preset",
            config.padded_vocab(),
            config.d_model,
            embedding >> 20,
            largest >> 20
        )),
        _ => Ok(()),
    }
}

struct Parts {
    args: Args,
    config: Gpt2Config,
    seq: usize,
    /// Whether the backend is a CubeCL one (it launches kernels to count).
    cubecl: bool,
}

impl BackendJob for Parts {
    type Output = Result<BTreeMap<String, Timing>, String>;

    fn run<B: TrainBackend>(self, device: B::Device) -> Self::Output {
        let Parts { args, config, seq, cubecl } = self;
        B::seed(&device, args.seed);
        let dtype = match args.precision {
            Precision::F32 => FloatDType::F32,
            Precision::Bf16 => FloatDType::BF16,
            Precision::F16 => FloatDType::F16,
        };
        let timer = Timer { reps: args.reps, warmup: args.warmup };
        let mut parts = BTreeMap::new();
        if args.parts.contains(&Part::GemmCheck) {
            gemm_check::run::<B>(&args, &config, seq, &device)?;
        }
        if args.parts.contains(&Part::Gemm) {
            gemms::<B::InnerBackend>(&config, args.batch * seq, dtype, &timer, &device, &mut parts);
        }
        if args.parts.contains(&Part::Attention) {
            attention_parts::<B>(&args, &config, seq, dtype, &timer, &device, &mut parts);
        }
        if args.parts.contains(&Part::Step) {
            step::<B>(&args, &config, seq, dtype, &timer, &device, &mut parts);
        }
        if args.parts.contains(&Part::Kernels) {
            if cubecl {
                kernels::count::<B>(&args, &config, seq, dtype, &device);
            } else {
                eprintln!("note: the CPU backend launches no kernels to count; `kernels` skipped");
            }
        }
        Ok(parts)
    }
}

/// `attention` (leanburn's, forward and backward, once per layer) and `attention.burn`
/// (Burn's op), after one check of leanburn's output and gradients against Burn's.
fn attention_parts<B: TrainBackend>(
    args: &Args,
    config: &Gpt2Config,
    seq: usize,
    dtype: FloatDType,
    timer: &Timer,
    device: &B::Device,
    parts: &mut BTreeMap<String, Timing>,
) {
    let dims = [args.batch, config.heads, seq, config.d_model / config.heads];
    let random = || Tensor::<B::InnerBackend, 4>::random(dims, Distribution::Normal(0.0, 1.0), device).cast(dtype);
    let (q, k, v) = (random(), random(), random());
    let tracked = |t: &Tensor<B::InnerBackend, 4>| Tensor::<B, 4>::from_inner(t.clone()).require_grad();
    let lean = || lean_attention(tracked(&q), tracked(&k), tracked(&v), true).sum().backward();
    parts.insert("attention".into(), timer.time::<B, _>("attention", device, config.layers, None, lean));
    // Before timing Burn's: leanburn's output and gradients against Burn's, once (a wrong
    // kernel on a new device shows here, not only in a slow or fast row).
    attention_check::<B>([&q, &k, &v], random());
    let options = AttentionModuleOptions { is_causal: true, ..Default::default() };
    let burn = || attention(tracked(&q), tracked(&k), tracked(&v), None, None, options).sum().backward();
    parts.insert("attention.burn".into(), timer.time::<B, _>("attention.burn", device, config.layers, None, burn));
}

/// Prints the largest difference over the largest value of leanburn's causal attention
/// and its gradients against Burn's op, the output weighted by `weight` for the backward.
fn attention_check<B: TrainBackend>(inputs: [&Tensor<B::InnerBackend, 4>; 3], weight: Tensor<B::InnerBackend, 4>) {
    let options = AttentionModuleOptions { is_causal: true, ..Default::default() };
    let results = |lean: bool| {
        let [q, k, v] = inputs.map(|t| Tensor::<B, 4>::from_inner(t.clone()).require_grad());
        let out = if lean {
            lean_attention(q.clone(), k.clone(), v.clone(), true)
        } else {
            attention(q.clone(), k.clone(), v.clone(), None, None, options)
        };
        let grads = (out.clone() * Tensor::<B, 4>::from_inner(weight.clone())).sum().backward();
        let grad = |t: &Tensor<B, 4>| t.grad(&grads).expect("a gradient");
        [out.inner(), grad(&q), grad(&k), grad(&v)]
    };
    let (ours, burns) = (results(true), results(false));
    let errors: Vec<String> = ["output", "dq", "dk", "dv"]
        .iter()
        .zip(ours.into_iter().zip(burns))
        .map(|(name, (a, b))| {
            let scale = b.clone().abs().max().into_scalar().elem::<f64>().max(f64::MIN_POSITIVE);
            format!("{name} {:.1e}", (a - b).abs().max().into_scalar().elem::<f64>() / scale)
        })
        .collect();
    eprintln!("attention, leanburn's against Burn's (largest difference over largest value): {}", errors.join(", "));
}

/// Median timing of a closure, the device synced around each run. What the closure returns
/// stays alive until the device is synced, so that no queued work can be dropped unrun.
struct Timer {
    reps: usize,
    warmup: usize,
}

impl Timer {
    fn time<B: Backend, R>(
        &self,
        part: &str,
        device: &B::Device,
        calls: usize,
        flops: Option<f64>,
        mut f: impl FnMut() -> R,
    ) -> Timing {
        let mut samples = Vec::with_capacity(self.reps);
        for rep in 0..self.warmup + self.reps {
            B::sync(device).expect("device sync");
            let started = Instant::now();
            let results = f();
            B::sync(device).expect("device sync");
            drop(results);
            if rep >= self.warmup {
                samples.push(started.elapsed().as_secs_f64() * 1e3);
            }
            progress(part, rep, self, started);
        }
        Timing { calls, ms: median(&mut samples), flops }
    }
}

/// One line on stderr per run, stamped with the seconds since the Unix epoch: the first
/// runs absorb compilation and autotuning, and a log read beside another program's shows
/// whether their timed runs overlapped.
fn progress(part: &str, rep: usize, timer: &Timer, started: Instant) {
    let kind = if rep < timer.warmup { "warm-up" } else { "timed" };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    eprintln!(
        "[{now:.1}] {part}: {kind} run {} of {} took {:.2} ms",
        rep + 1,
        timer.warmup + timer.reps,
        started.elapsed().as_secs_f64() * 1e3
    );
}

fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// The three GEMMs of each linear layer of a step, on `m` token rows.
fn gemms<B: Backend>(
    config: &Gpt2Config,
    m: usize,
    dtype: FloatDType,
    timer: &Timer,
    device: &B::Device,
    parts: &mut BTreeMap<String, Timing>,
) {
    let d = config.d_model;
    let linears = [
        ("gemm.qkv", d, 3 * d, config.layers),
        ("gemm.proj", d, d, config.layers),
        ("gemm.fc", d, 4 * d, config.layers),
        ("gemm.out", 4 * d, d, config.layers),
        ("gemm.head", d, config.padded_vocab(), 1),
    ];
    for (name, k, n, calls) in linears {
        let random =
            |shape: [usize; 2]| Tensor::<B, 2>::random(shape, Distribution::Normal(0.0, 1.0), device).cast(dtype);
        let (x, w, dy) = (random([m, k]), random([k, n]), random([m, n]));
        let flops = 6.0 * (m * k * n) as f64;
        let timing = timer.time::<B, _>(name, device, calls, Some(flops), || {
            let y = x.clone().matmul(w.clone());
            let dx = dy.clone().matmul(w.clone().transpose());
            let dw = x.clone().transpose().matmul(dy.clone());
            (y, dx, dw)
        });
        parts.insert(name.into(), timing);
    }
}

/// What a full step trains: the model (the loss and attention asked for), clipped AdamW
/// (weight decay 0.1, norm 1) and one host batch of token ids spread over the vocabulary
/// (speed does not depend on which are fed).
pub(crate) fn training<B: TrainBackend>(
    args: &Args,
    config: &Gpt2Config,
    seq: usize,
    device: &B::Device,
) -> (Gpt2<B>, ClippedAdamW<B>, HostBatch) {
    let chunk = (args.loss_chunk > 0).then_some(args.loss_chunk);
    let model = config.init::<B>(device).with_loss_chunk(chunk).with_attention(args.attention);
    let ids: Vec<u32> = (0..args.batch * (seq + 1) * 4).map(|i| ((i * 7919 + 13) % config.vocab_size) as u32).collect();
    let mut sampler = WindowSampler::new(args.batch, seq, args.seed).expect("batch and seq checked before");
    let host = sampler.sample(&ids, Split::Train).expect("enough ids for one window per row");
    (model, leanburn::optim::clipped_adamw(0.1, 1.0), host)
}

/// Where [`full_step`] has got to: the caller syncs and times, or counts, at each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// The compute copy made (mixed precision; nothing in f32).
    Copy,
    Forward,
    Backward,
    /// The gradients cast back to the master weights (mixed precision; nothing in f32).
    GradientsBack,
}

/// One full training step as `HybridTrainer` runs it in `dtype`: in f32 on `model` itself;
/// in bf16 (or f16) on a compute copy of the f32 master weights, its loss cast to f32 for
/// the backward pass and its gradients cast back (`leanburn::trainer::compute_copy`,
/// `master_gradients`, `copy_state_back`), without loss scaling (bf16 needs none; f16
/// here only counts bf16's structure on a device without bf16). `after` is called at each
/// [`Stage`]; the optimizer step is the rest.
pub(crate) fn full_step<B: TrainBackend>(
    model: Gpt2<B>,
    optimizer: &mut ClippedAdamW<B>,
    dtype: FloatDType,
    batch: TokenBatch<B>,
    mut after: impl FnMut(Stage),
) -> Gpt2<B> {
    let copy = (dtype != FloatDType::F32).then(|| compute_copy::<B, _>(&model, dtype));
    after(Stage::Copy);
    let pass = copy.as_ref().unwrap_or(&model);
    let loss = match copy {
        Some(_) => pass.forward_loss(batch).cast(FloatDType::F32),
        None => pass.forward_loss(batch),
    };
    after(Stage::Forward);
    let grads = loss.backward();
    after(Stage::Backward);
    let grads = GradientsParams::from_grads(grads, pass);
    let (model, grads) = match &copy {
        Some(copy) => {
            let grads = master_gradients::<B, _>(&model, grads, None).grads;
            (copy_state_back::<B, _>(model, copy), grads)
        }
        None => (model, grads),
    };
    after(Stage::GradientsBack);
    optimizer.step(1e-4, model, grads)
}

/// One full step split into forward, backward and optimizer (and, in mixed precision, the
/// casts at the model boundary), each synced; and unsplit.
fn step<B: TrainBackend>(
    args: &Args,
    config: &Gpt2Config,
    seq: usize,
    dtype: FloatDType,
    timer: &Timer,
    device: &B::Device,
    parts: &mut BTreeMap<String, Timing>,
) {
    checks::against_burn::<B>(args, config, seq, device);
    let (model, mut optimizer, host) = training::<B>(args, config, seq, device);
    let mut model = Some(model);
    let batch = || host.to_device::<B>(device);
    let sync = || B::sync(device).expect("device sync");
    let names = ["step.forward", "step.backward", "step.optimizer", "step", "step.host", "step.casts"];
    let mut samples: [Vec<f64>; 6] = Default::default();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mixed = dtype != FloatDType::F32;
    for rep in 0..timer.warmup + timer.reps {
        let current = model.take().expect("the model is put back every step");
        sync();
        let mut stages = [Duration::ZERO; 4];
        let mut mark = Instant::now();
        let started = mark;
        let next = full_step(current, &mut optimizer, dtype, batch(), |stage| {
            sync();
            stages[stage as usize] = mark.elapsed();
            mark = Instant::now();
        });
        sync();
        let optimizer_time = mark.elapsed();
        // The same step, unsynced.
        sync();
        let unsplit = Instant::now();
        let next = full_step(next, &mut optimizer, dtype, batch(), |_| ());
        let queued = unsplit.elapsed();
        sync();
        let unsplit = unsplit.elapsed();
        if rep >= timer.warmup {
            // In f32 the copy and the gradients' stage hold no casts, only the gradients'
            // map (`GradientsParams`): counted with the optimizer, as before bf16's split.
            let [copy, forward, backward, back] = stages;
            let (casts, optimizer_time) =
                if mixed { (copy + back, optimizer_time) } else { (Duration::ZERO, optimizer_time + copy + back) };
            samples[0].push(ms(forward));
            samples[1].push(ms(backward));
            samples[2].push(ms(optimizer_time));
            samples[3].push(ms(unsplit));
            samples[4].push(ms(queued));
            samples[5].push(ms(casts));
        }
        progress("step", rep, timer, started);
        model = Some(next);
    }
    for (name, samples) in names.into_iter().zip(samples.iter_mut()) {
        if mixed || name != "step.casts" {
            parts.insert(name.into(), Timing { calls: 1, ms: median(samples), flops: None });
        }
    }
    // A forward-only pass, as evaluation and the predict phase run it: the inner backend in
    // the compute precision, the loss over chunks of logits without gradients.
    let valid = cast_params(model.expect("the model is put back every step").valid(), dtype);
    let inner = device.clone();
    let forward_only = timer.time::<B::InnerBackend, _>("step.forward_only", &inner, 1, None, || {
        InferenceStep::step(&valid, host.to_device::<B::InnerBackend>(&inner)).loss
    });
    parts.insert("step.forward_only".into(), forward_only);
}

/// Runs PyTorch's parts at the same shapes and reads its JSON line.
fn pytorch(python: &str, args: &Args, seq: usize, device: &str) -> Result<BTreeMap<String, Timing>, String> {
    let parts: Vec<String> = args
        .parts
        .iter()
        .filter(|p| !matches!(p, Part::Kernels | Part::GemmCheck))
        .map(|p| format!("{p:?}").to_lowercase())
        .collect();
    let mut command = Command::new(python);
    command.arg(&args.pytorch_script).args(["--preset", &args.preset]).args(["--batch", &args.batch.to_string()]);
    command.args(["--seq", &seq.to_string(), "--pad-vocab", &args.pad_vocab.to_string()]);
    command.args(["--parts", &parts.join(","), "--precision", &args.torch_precision]);
    command.args(["--reps", &args.reps.to_string(), "--warmup", &args.warmup.to_string()]);
    command.args(["--device", device]);
    eprintln!("running {command:?}");
    let output = command.stderr(std::process::Stdio::inherit()).output().map_err(|e| format!("{command:?}: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!("{command:?} failed ({}):\n{stdout}", output.status));
    }
    let last = stdout.lines().rfind(|l| l.trim_start().starts_with('{'));
    let last = last.ok_or_else(|| format!("{command:?} printed no JSON:\n{stdout}"))?;
    serde_json::from_str(last).map_err(|e| format!("{command:?}: {e}: {last}"))
}

fn report(
    args: &Args,
    config: &Gpt2Config,
    seq: usize,
    (name, attention): (&str, leanburn::backend::AttentionPath),
    ours: &BTreeMap<String, Timing>,
    torch: Option<&BTreeMap<String, Timing>>,
) {
    let mut ours = ours.clone();
    let mut torch = torch.cloned();
    for side in std::iter::once(&mut ours).chain(torch.as_mut()) {
        let gemm: Vec<&Timing> = side.iter().filter(|(k, _)| k.starts_with("gemm.")).map(|(_, t)| t).collect();
        if !gemm.is_empty() {
            let ms = gemm.iter().map(|t| t.per_step()).sum();
            let flops = gemm.iter().map(|t| t.calls as f64 * t.flops.unwrap_or(0.0)).sum();
            side.insert("gemm".into(), Timing { calls: 1, ms, flops: Some(flops) });
        }
    }
    println!(
        "\n{} ({} parameters), batch {} × {seq}, GEMMs, attention and step in {:?}, the step with {} and {}; \
         leanburn on {name}{}; median of {} runs after {} warm-up runs, ms per training step\n",
        args.preset,
        config.parameter_count(),
        args.batch,
        args.precision,
        match args.attention {
            leanburn::model::Gpt2Attention::Lean => format!(
                "leanburn's attention ({}; workspace {} MiB)",
                attention,
                leanburn::backend::attention_workspace() >> 20
            ),
            leanburn::model::Gpt2Attention::Burn => "Burn's attention".into(),
        },
        if args.loss_chunk > 0 { format!("loss chunks of {}", args.loss_chunk) } else { "the full logits".into() },
        if torch.is_some() { format!(", PyTorch {}", args.torch_precision) } else { String::new() },
        args.reps,
        args.warmup,
    );
    println!("| part | calls per step | leanburn ms | leanburn TFLOP/s | PyTorch ms | PyTorch TFLOP/s | leanburn / PyTorch |");
    println!("|---|---|---|---|---|---|---|");
    let tflops = |t: &Timing| {
        t.flops.map_or("–".into(), |f| match t.calls as f64 * f / t.per_step() / 1e9 {
            rate if rate < 1.0 => format!("{rate:.3}"),
            rate => format!("{rate:.1}"),
        })
    };
    for (part, t) in &ours {
        let theirs = torch.as_ref().and_then(|p| p.get(part));
        println!(
            "| {part} | {} | {:.2} | {} | {} | {} | {} |",
            t.calls,
            t.per_step(),
            tflops(t),
            theirs.map_or("–".into(), |p| format!("{:.2}", p.per_step())),
            theirs.map_or("–".into(), tflops),
            theirs.map_or("–".into(), |p| format!("{:.2}", t.per_step() / p.per_step())),
        );
    }
}
