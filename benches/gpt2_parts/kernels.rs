//! Counts the kernels a GPT-2 training step launches on a CubeCL backend, from CubeCL's
//! own execution log (profiling level `minimal`: one `Executing <kernel>` line per launch,
//! written by a background task).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use burn::optim::{GradientsParams, Optimizer};
use cubecl::config::profiling::ProfilingLogLevel;
use cubecl::config::{CubeClRuntimeConfig, RuntimeConfig};
use leanburn::model::Gpt2Config;
use leanburn::trainer::ForwardLoss;
use leanburn::TrainBackend;

use super::Args;

/// Where CubeCL writes the execution log.
fn log_file() -> PathBuf {
    std::env::temp_dir().join(format!("leanburn-kernels-{}.log", std::process::id()))
}

/// Turns CubeCL's execution log on, into [`log_file`]. Must run before any kernel does;
/// a `cubecl.toml` read earlier, or CubeCL's environment overrides, would win.
pub fn log_executions() {
    let mut config = CubeClRuntimeConfig::default().override_from_env();
    config.profiling.logger.level = ProfilingLogLevel::Minimal;
    config.profiling.logger.file = Some(log_file());
    config.profiling.logger.append = false;
    let mut stored = CubeClRuntimeConfig::storage().lock();
    if stored.is_some() {
        eprintln!("note: CubeCL's configuration was already set; kernels may go uncounted");
        return;
    }
    *stored = Some(std::sync::Arc::new(config));
}

/// The launches logged so far, by kernel name, once the log has stopped growing.
fn launches() -> Vec<String> {
    let mut last = None;
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let text = std::fs::read_to_string(log_file()).unwrap_or_default();
        if last.as_ref() == Some(&text.len()) {
            return text.lines().filter_map(|line| line.strip_prefix("Executing ").map(str::to_string)).collect();
        }
        last = Some(text.len());
    }
}

/// Prints the kernels per full step: the median over `--reps` steps after `--warmup`, how
/// many of them the optimizer step launched, and every kernel of the last step, the most
/// frequent first.
pub fn count<B: TrainBackend>(args: &Args, config: &Gpt2Config, seq: usize, device: &B::Device) {
    let (model, mut optimizer, host) = super::training::<B>(args, config, seq, device);
    let mut model = Some(model);
    let mut counts = Vec::new();
    let mut optimizer_counts = Vec::new();
    let mut last = BTreeMap::new();
    let mut last_optimizer = BTreeMap::new();
    for rep in 0..args.warmup + args.reps {
        B::sync(device).expect("device sync");
        let before = launches().len();
        let current = model.take().expect("the model is put back every step");
        let grads = current.forward_loss(host.to_device::<B>(device)).backward();
        let grads = GradientsParams::from_grads(grads, &current);
        B::sync(device).expect("device sync");
        let before_optimizer = launches().len();
        model = Some(optimizer.step(1e-4, current, grads));
        B::sync(device).expect("device sync");
        let logged = launches();
        if rep >= args.warmup {
            counts.push(logged.len() - before);
            optimizer_counts.push(logged.len() - before_optimizer);
            last = BTreeMap::new();
            for name in &logged[before..] {
                *last.entry(name.clone()).or_insert(0usize) += 1;
            }
            last_optimizer = BTreeMap::new();
            for name in &logged[before_optimizer..] {
                *last_optimizer.entry(name.clone()).or_insert(0usize) += 1;
            }
        }
    }
    counts.sort_unstable();
    optimizer_counts.sort_unstable();
    let median = counts[counts.len() / 2];
    println!(
        "\nkernels launched per full step (forward, backward, clipped AdamW): {median} (median of {} steps: {:?}); \
         the optimizer step's: {} ({:?})\n",
        counts.len(),
        counts,
        optimizer_counts[optimizer_counts.len() / 2],
        optimizer_counts
    );
    print_frequent("kernel (last step)", last);
    print_frequent("kernel (last step's optimizer)", last_optimizer);
    // Counted: the log is not left behind in the temporary directory (CubeCL may go on
    // writing to it, unlinked, for the parts after this one).
    let _ = std::fs::remove_file(log_file());
}

/// Every kernel of `launches` (by name), the most frequent first, as a Markdown table: a
/// step's structure compared between two builds needs the rare ones too.
fn print_frequent(title: &str, launches: BTreeMap<String, usize>) {
    let mut frequent: Vec<(usize, String)> = launches.into_iter().map(|(name, n)| (n, name)).collect();
    frequent.sort_unstable_by(|a, b| b.cmp(a));
    println!("| {title} | launches |\n|---|---|");
    for (n, name) in &frequent {
        println!("| `{name}` | {n} |");
    }
    println!();
}
