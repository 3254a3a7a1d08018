//! Backend selection plus memory telemetry on a small CNN, phase by phase.
//!
//! Trains a small CNN with full steps, then runs forward-only steps two ways: on the inner
//! backend through `model.valid()` (what leanburn's predict steps do) and, as the failure
//! leanburn exists to prevent, on the autodiff model, whose graph keeps every activation
//! until the next backward. Prints a memory report and leak verdict for each phase.
//!
//! ```text
//! cargo run --release --example memory_demo -- --backend auto --steps 30
//! ```

use std::process::ExitCode;

use burn::module::AutodiffModule;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::Distribution;
use clap::Parser;
use leanburn::device::{init_kernel_cache, select, KernelCache};
use leanburn::memory::trim;
use leanburn::model::SmallCnnConfig;
use leanburn::{BackendArgs, BackendJob, TrainBackend};
use leanburn::{MemoryMonitor, MemoryProbe};

#[derive(Parser, Debug)]
#[command(about = "Backend selection and per-phase memory telemetry on a small CNN")]
struct Args {
    #[command(flatten)]
    backend: BackendArgs,
    /// Steps per phase.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(3..))]
    steps: u64,
    /// Images per batch.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=4096))]
    batch: u64,
    /// Run on `Autodiff<Lean<..>>`: leanburn's memory-bounded convolutions.
    #[arg(long)]
    lean: bool,
    /// Image side in pixels.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(4..=1024))]
    resolution: u64,
}

fn main() -> ExitCode {
    // SAFETY: first thing in main, before any thread exists.
    unsafe { leanburn::device::quiet_headless_vulkan() };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("LEANBURN_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let cache = args.backend.kernel_cache.clone().unwrap_or(KernelCache::Default);
    // SAFETY: before selecting the backend, the first thing that starts threads.
    match unsafe { init_kernel_cache(&cache) } {
        Ok(setup) => println!("leanburn: {setup}"),
        Err(err) => {
            eprintln!("error: --kernel-cache: {err}");
            return ExitCode::from(2);
        }
    }
    let backend = match select(&args.backend) {
        Ok(backend) => backend,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(err.exit_code() as u8);
        }
    };
    println!("leanburn: {backend}");
    let demo = Demo { steps: args.steps, batch: args.batch as usize, side: args.resolution as usize };
    if args.lean {
        println!(
            "leanburn: convolutions through Lean<..> (budget {} MiB)",
            leanburn::backend::ConvBudget::current().bytes() / (1024 * 1024)
        );
        backend.run_lean(demo);
    } else {
        backend.run(demo);
    }
    ExitCode::SUCCESS
}

struct Demo {
    steps: u64,
    batch: usize,
    side: usize,
}

const CLASSES: usize = 4;

fn batch<B: Backend>(size: usize, side: usize, step: u64, device: &B::Device) -> (Tensor<B, 4>, Tensor<B, 1, Int>) {
    let images = Tensor::random([size, 3, side, side], Distribution::Normal(0.0, 1.0), device);
    let labels: Vec<i64> = (0..size).map(|i| ((i as u64 + step) % CLASSES as u64) as i64).collect();
    (images, Tensor::from_data(TensorData::new(labels, [size]), device))
}

fn print_phase<B: MemoryProbe>(title: &str, monitor: &MemoryMonitor<B>, last_loss: f32) {
    println!("\n== {title} (last loss {last_loss:.4})");
    print!("{}", monitor.report());
}

impl BackendJob for Demo {
    type Output = ();

    fn run<B: TrainBackend>(self, device: B::Device) {
        B::seed(&device, 42);
        let mut model = SmallCnnConfig::new().with_classes(CLASSES).init::<B>(&device);
        let mut optimizer = AdamConfig::new().init();
        let window = self.steps as usize;

        let mut monitor = MemoryMonitor::<B>::new(device.clone(), window);
        let mut loss_value = f32::NAN;
        for step in 0..self.steps {
            let (images, labels) = batch::<B>(self.batch, self.side, step, &device);
            let loss = model.loss(images, labels);
            loss_value = loss.clone().into_scalar().elem();
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optimizer.step(1e-3, model, grads);
            // Optimizer state appears at the first step: judge leaks after it.
            if step == 1 {
                monitor.restart_leak_window();
            }
            monitor.sample(step);
        }
        print_phase("full steps (forward + backward + Adam)", &monitor, loss_value);

        let inner = model.valid();
        let mut monitor = MemoryMonitor::<B::InnerBackend>::new(device.clone(), window);
        for step in 0..self.steps {
            let (images, labels) = batch::<B::InnerBackend>(self.batch, self.side, step, &device);
            loss_value = inner.loss(images, labels).into_scalar().elem();
            monitor.sample(step);
        }
        print_phase("forward-only on model.valid() (inner backend)", &monitor, loss_value);

        let mut monitor = MemoryMonitor::<B>::new(device.clone(), window);
        for step in 0..self.steps {
            let (images, labels) = batch::<B>(self.batch, self.side, step, &device);
            loss_value = model.loss(images, labels).into_scalar().elem();
            monitor.sample(step);
        }
        print_phase("forward-only on the autodiff model (the leak leanburn prevents)", &monitor, loss_value);

        let trimmed = trim::<B>(&device);
        match trimmed.released_bytes() {
            Some(bytes) => {
                println!("\ntrim: released {} of reserved memory", leanburn::memory::format_bytes(bytes as f64))
            }
            None => println!("\ntrim: device memory not available on this backend"),
        }
    }
}
