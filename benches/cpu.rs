//! GPT-2 training speed and host memory on the CPU backends, side by side in one run, with
//! PyTorch CPU eager as the reference.
//!
//! ```text
//! cargo bench --bench cpu -- --preset gpt2-mini --batch 8 --seq 64 --pytorch /path/to/python3
//! cargo bench --bench cpu -- --preset gpt2-tiny --backends flex --loss-chunks 0,64,128
//! cargo bench --bench cpu -- --backends flex,lean-flex --loss-chunks 128   # Lean's cost
//! ```
//!
//! Each backend runs in its own child process, one after the other, so that each peak
//! resident memory (`VmHWM`) is its own and the runs do not share cores. A run is the main
//! job's full step: `HybridTrainer` all-full, AdamW (weight decay 0.1, gradient norm
//! clipped at 1), the loss read back every step, on windows of uniform random token ids
//! drawn with the same seed (speed does not depend on which tokens are fed), from weights
//! initialised with the same seed, with the full logits (`--loss-chunks 0`, as PyTorch) and
//! with the fused chunked loss. The first `--warmup` steps are left out of tokens/s.
//! Threads: `--threads` sets `RAYON_NUM_THREADS` for the Rust backends and
//! `torch.set_num_threads` for PyTorch.
//!
//! The result is Markdown, ready for `docs/benchmarks.md`.

/// The examples' allocator and its settings, so that the bench measures what they run.
#[path = "../examples/common/allocator.rs"]
mod allocator;

use std::process::Command;
use std::time::Instant;

use burn::backend::{Autodiff, Flex, NdArray};
use clap::Parser;
use leanburn::data::{Split, WindowSampler};
use leanburn::memory::{format_bytes, process_memory};
use leanburn::model::{Gpt2, Gpt2Config};
use leanburn::{HybridConfig, HybridTrainer, Lean, LrSchedule};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

#[derive(Parser, Debug, Clone)]
#[command(about = "GPT-2 training tokens/s and peak resident memory on the CPU backends and PyTorch")]
struct Args {
    /// GPT-2 preset (gpt2-tiny, gpt2-mini, ...).
    #[arg(long, default_value = "gpt2-mini")]
    preset: String,
    #[arg(long, default_value_t = 8)]
    batch: usize,
    #[arg(long, default_value_t = 64)]
    seq: usize,
    /// Timed steps per backend.
    #[arg(long, default_value_t = 20)]
    steps: usize,
    /// Steps before the timed ones (allocation warm-up), left out of tokens/s.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// The Rust backends, in order.
    #[arg(long, value_delimiter = ',', default_value = "ndarray,flex")]
    backends: Vec<CpuBackend>,
    /// Compute threads of every run.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Loss chunks to run each backend with (the example's `--loss-chunk`; 0: the full
    /// logits at once, as PyTorch computes them).
    #[arg(long, value_delimiter = ',', default_value = "0,128")]
    loss_chunks: Vec<usize>,
    /// A Python interpreter with PyTorch: adds `benches/pytorch_gpt2.py --device cpu`.
    #[arg(long)]
    pytorch: Option<String>,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Internal: run one backend and print its measurement as JSON.
    #[arg(long, hide = true)]
    child: Option<CpuBackend>,
    /// Accepted for `cargo bench` compatibility.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
enum CpuBackend {
    Ndarray,
    Flex,
    /// Flex inside `Lean`, as the GPT-2 example runs it.
    LeanFlex,
}

/// One run's figures.
#[derive(Debug, Serialize, Deserialize)]
struct Measurement {
    name: String,
    tokens_per_s: f64,
    seconds_per_step: f64,
    peak_resident_bytes: Option<u64>,
    /// PyTorch only: resident memory once torch is imported, before any model or data.
    #[serde(default)]
    resident_after_import_bytes: Option<u64>,
    first_loss: f64,
    final_loss: f64,
}

fn main() {
    allocator::keep_freed_memory();
    let args = Args::parse();
    let result = match args.child {
        Some(CpuBackend::Ndarray) => measure::<Autodiff<NdArray>>(&args, "ndarray").map(|m| print_json(&m)),
        Some(CpuBackend::Flex) => measure::<Autodiff<Flex>>(&args, "flex").map(|m| print_json(&m)),
        Some(CpuBackend::LeanFlex) => measure::<Autodiff<Lean<Flex>>>(&args, "lean-flex").map(|m| print_json(&m)),
        None => compare(&args),
    };
    if let Err(err) = result {
        eprintln!("error: {err}");
        std::process::exit(1);
    }
}

fn print_json(measurement: &Measurement) {
    println!("{}", serde_json::to_string(measurement).expect("plain numbers serialise"));
}

/// Runs every backend (and PyTorch) in a child process and prints the table.
fn compare(args: &Args) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let common = [
        "--preset".to_string(),
        args.preset.clone(),
        "--batch".into(),
        args.batch.to_string(),
        "--seq".into(),
        args.seq.to_string(),
        "--seed".into(),
        args.seed.to_string(),
    ];
    let mut rows = Vec::new();
    for &backend in &args.backends {
        for &chunk in &args.loss_chunks {
            let mut command = Command::new(&exe);
            command.args(&common).args(["--steps", &args.steps.to_string(), "--warmup", &args.warmup.to_string()]);
            command
                .arg("--child")
                .arg(clap::ValueEnum::to_possible_value(&backend).expect("every backend has a name").get_name());
            command.args(["--loss-chunks", &chunk.to_string()]);
            command.env("RAYON_NUM_THREADS", args.threads.to_string());
            rows.push(run_child(command)?);
        }
    }
    if let Some(python) = &args.pytorch {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/pytorch_gpt2.py");
        let mut command = Command::new(python);
        command.arg(script).args(&common).args(["--device", "cpu", "--threads", &args.threads.to_string()]);
        command.args(["--steps", &(args.steps + args.warmup).to_string(), "--skip", &args.warmup.to_string()]);
        rows.push(run_child(command)?);
    }
    report(args, &rows);
    Ok(())
}

/// Runs `command`, passing its stderr through, and reads the last JSON line of its stdout.
fn run_child(mut command: Command) -> Result<Measurement, String> {
    eprintln!("running {command:?}");
    let output = command.stderr(std::process::Stdio::inherit()).output().map_err(|e| format!("{command:?}: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!("{command:?} failed ({}):\n{stdout}", output.status));
    }
    let json: String = stdout.lines().filter(|l| l.trim_start().starts_with('{')).collect::<Vec<_>>().join("\n");
    let last = json.lines().last().ok_or_else(|| format!("{command:?} printed no JSON:\n{stdout}"))?;
    serde_json::from_str(last).map_err(|e| format!("{command:?}: {e}: {last}"))
}

fn report(args: &Args, rows: &[Measurement]) {
    let reference = rows.iter().find(|r| r.name.starts_with("PyTorch"));
    println!(
        "\n{} ({} parameters), batch {} × {}, f32, AdamW, {} threads; tokens/s over {} steps after {} warm-up steps\n",
        args.preset,
        Gpt2Config::preset(&args.preset).map(|c| c.parameter_count()).unwrap_or(0),
        args.batch,
        args.seq,
        args.threads,
        args.steps,
        args.warmup
    );
    println!("| run | tokens/s | s/step | × PyTorch | peak resident | loss first → last |");
    println!("|---|---|---|---|---|---|");
    for row in rows {
        let ratio = reference.map_or("–".to_string(), |r| format!("{:.2}×", row.tokens_per_s / r.tokens_per_s));
        let mut peak = row.peak_resident_bytes.map_or("–".to_string(), |b| format_bytes(b as f64));
        if let Some(base) = row.resident_after_import_bytes {
            peak += &format!(" ({} after import)", format_bytes(base as f64));
        }
        println!(
            "| {} | {:.0} | {:.3} | {ratio} | {peak} | {:.3} → {:.3} |",
            row.name, row.tokens_per_s, row.seconds_per_step, row.first_loss, row.final_loss
        );
    }
}

/// The child: `warmup + steps` full steps of GPT-2 on `B`.
fn measure<B>(args: &Args, name: &str) -> Result<Measurement, String>
where
    B: leanburn::device::TrainBackend,
    B::Device: Default,
{
    let device = B::Device::default();
    let config = Gpt2Config::preset(&args.preset).map_err(|e| e.to_string())?;
    B::seed(&device, args.seed);
    let chunk = args.loss_chunks.first().copied().filter(|&c| c > 0);
    let model: Gpt2<B> = config.init::<B>(&device).with_loss_chunk(chunk);
    let optimizer = leanburn::optim::clipped_adamw(0.1, 1.0);
    let mut trainer = HybridTrainer::new(
        model,
        optimizer,
        HybridConfig::all_full(),
        LrSchedule::Constant { lr: 1e-3 },
        device.clone(),
    )
    .map_err(|e| e.to_string())?;
    let mut rng = SmallRng::seed_from_u64(args.seed);
    let vocab = config.vocab_size as u32;
    let tokens: Vec<u32> =
        (0..(args.batch * (args.seq + 1) * 64).max(1 << 16)).map(|_| rng.random_range(0..vocab)).collect();
    let mut sampler = WindowSampler::new(args.batch, args.seq, args.seed).map_err(|e| e.to_string())?;
    let (mut first_loss, mut final_loss, mut timed) = (f64::NAN, f64::NAN, 0.0);
    for step in 0..args.warmup + args.steps {
        let batch = sampler.sample(&tokens, Split::Train).map_err(|e| e.to_string())?;
        let started = Instant::now();
        let record = trainer.step(batch.to_device::<B>(&device)).map_err(|e| e.to_string())?;
        let seconds = started.elapsed().as_secs_f64();
        let loss = record.loss.unwrap_or(f64::NAN);
        if step == 0 {
            first_loss = loss;
        }
        final_loss = loss;
        if step >= args.warmup {
            timed += seconds;
        }
        eprintln!("{name} step {step}: loss {loss:.4}, {seconds:.3} s");
    }
    let steps = args.steps.max(1) as f64;
    Ok(Measurement {
        name: match chunk {
            Some(chunk) => format!("{name}, loss chunk {chunk}"),
            None => format!("{name}, full logits"),
        },
        tokens_per_s: steps * (args.batch * args.seq) as f64 / timed,
        seconds_per_step: timed / steps,
        peak_resident_bytes: process_memory().map(|m| m.peak_resident),
        resident_after_import_bytes: None,
        first_loss,
        final_loss,
    })
}
