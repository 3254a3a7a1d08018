//! Counts the kernels a GPT-2 training step launches on a CubeCL backend, from CubeCL's
//! own execution log (profiling level `minimal`: one `Executing <kernel>` line per launch,
//! written by a background task), and the operations Burn's fusion streams execute in it,
//! from Burn's fusion log (level `full`: a table per execution, a row per operation). The
//! device's work grows with the launches; the host's, on the fusion thread, with the
//! operations (on CUDA most launches are not Burn's, and a fast GPU may wait on the host).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use burn::tensor::FloatDType;
use burn_std::config::fusion::FusionLogLevel;
use burn_std::config::BurnConfig;
use cubecl::config::profiling::ProfilingLogLevel;
use cubecl::config::{CubeClRuntimeConfig, RuntimeConfig};
use leanburn::backend::{gemm_operand_copies, vendor_gemm, VendorGemm};
use leanburn::model::Gpt2Config;
use leanburn::TrainBackend;

use super::{full_step, Args, Stage};

/// Where CubeCL writes the execution log.
fn log_file() -> PathBuf {
    std::env::temp_dir().join(format!("leanburn-kernels-{}.log", std::process::id()))
}

/// Where Burn writes the fusion log.
fn fusion_log_file() -> PathBuf {
    std::env::temp_dir().join(format!("leanburn-fusion-{}.log", std::process::id()))
}

/// Turns CubeCL's execution log on, into [`log_file`], and Burn's fusion log, into
/// [`fusion_log_file`]. Must run before any kernel does; a `cubecl.toml` or `burn.toml`
/// read earlier, or the environment's overrides, would win.
pub fn log_executions() {
    let mut config = CubeClRuntimeConfig::default().override_from_env();
    config.profiling.logger.level = ProfilingLogLevel::Minimal;
    config.profiling.logger.file = Some(log_file());
    config.profiling.logger.append = false;
    let mut stored = CubeClRuntimeConfig::storage().lock();
    match stored.is_some() {
        true => eprintln!("note: CubeCL's configuration was already set; kernels may go uncounted"),
        false => *stored = Some(Arc::new(config)),
    }
    let mut burn = BurnConfig::default().override_from_env();
    burn.fusion.logger.level = FusionLogLevel::Full;
    burn.fusion.logger.file = Some(fusion_log_file());
    burn.fusion.logger.append = false;
    burn.fusion.logger.stderr = false;
    let mut stored = BurnConfig::storage().lock();
    match stored.is_some() {
        true => eprintln!("note: Burn's configuration was already set; fusion operations may go uncounted"),
        false => *stored = Some(Arc::new(burn)),
    }
}

/// The text of `path` once it has stopped growing (both logs are written off the thread
/// that synced).
fn settled(path: &Path) -> String {
    let mut last = None;
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if last == Some(text.len()) {
            return text;
        }
        last = Some(text.len());
    }
}

/// The launches logged so far, by kernel name.
fn launches() -> Vec<String> {
    let text = settled(&log_file());
    text.lines().filter_map(|line| line.strip_prefix("Executing ").map(str::to_string)).collect()
}

/// The fusion operations executed so far, by kind (`BaseFloat::SwapDims`, `Custom`, `Drop`,
/// ...): every row of every execution table.
fn fusion_operations() -> Vec<String> {
    let text = settled(&fusion_log_file());
    let mut operations = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        if line.starts_with("fusion trace (") {
            in_table = true;
        } else if in_table && !(line.starts_with("idx") || line.starts_with("---")) {
            match table_row_operation(line) {
                Some(kind) => operations.push(kind.to_string()),
                None => in_table = false,
            }
        }
    }
    operations
}

/// The operation of one row of a fusion execution table (`idx  block  op  inputs
/// outputs`, columns apart by two spaces or more, the block column blank on a block's
/// later rows); `None` past the table.
fn table_row_operation(line: &str) -> Option<&str> {
    let mut columns = line.split("  ").map(str::trim).filter(|column| !column.is_empty());
    columns.next()?.parse::<usize>().ok()?;
    columns.find(|column| !column.starts_with('▸'))
}

/// What one counted quantity (launches, operations) did over the timed steps.
#[derive(Default)]
struct Tally {
    per_step: Vec<usize>,
    last_step: BTreeMap<String, usize>,
}

impl Tally {
    fn add(&mut self, names: &[String]) {
        self.per_step.push(names.len());
        self.last_step = BTreeMap::new();
        for name in names {
            *self.last_step.entry(name.clone()).or_insert(0) += 1;
        }
    }

    /// The median and every step's count.
    fn summary(&mut self) -> String {
        self.per_step.sort_unstable();
        format!(
            "{} (median of {} steps: {:?})",
            self.per_step[self.per_step.len() / 2],
            self.per_step.len(),
            self.per_step
        )
    }
}

/// Prints the kernels per full step: the median over `--reps` steps after `--warmup`, how
/// many of them the optimizer step launched, and every kernel of the last step, the most
/// frequent first; then the fusion operations per full step, the last step's by kind.
pub fn count<B: TrainBackend>(args: &Args, config: &Gpt2Config, seq: usize, dtype: FloatDType, device: &B::Device) {
    let (model, mut optimizer, host) = super::training::<B>(args, config, seq, device);
    let mut model = Some(model);
    let (mut kernels, mut optimizer_kernels, mut operations) = (Tally::default(), Tally::default(), Tally::default());
    let mut copies = Vec::new();
    for rep in 0..args.warmup + args.reps {
        B::sync(device).expect("device sync");
        let (before, operations_before) = (launches().len(), fusion_operations().len());
        let copies_before = gemm_operand_copies();
        let current = model.take().expect("the model is put back every step");
        let mut before_optimizer = 0;
        // Synced only before the optimizer, as this count always was: a sync flushes what
        // the fuser holds, and would cut fused kernels in two.
        let next = full_step(current, &mut optimizer, dtype, host.to_device::<B>(device), |stage| {
            if stage == Stage::GradientsBack {
                B::sync(device).expect("device sync");
                before_optimizer = launches().len();
            }
        });
        model = Some(next);
        B::sync(device).expect("device sync");
        let logged = launches();
        if rep >= args.warmup {
            kernels.add(&logged[before..]);
            optimizer_kernels.add(&logged[before_optimizer..]);
            operations.add(&fusion_operations()[operations_before..]);
            copies.push(gemm_operand_copies() - copies_before);
        }
    }
    println!(
        "\nkernels launched per full step ({dtype:?}: forward, backward, clipped AdamW{}): {}; the optimizer step's: {}\n",
        if dtype == FloatDType::F32 { "" } else { ", the casts at the model boundary" },
        kernels.summary(),
        optimizer_kernels.summary(),
    );
    print_frequent("kernel (last step)", "launches", kernels.last_step);
    print_frequent("kernel (last step's optimizer)", "launches", optimizer_kernels.last_step);
    println!("fusion operations executed per full step: {}\n", operations.summary());
    print_frequent("fusion operation (last step)", "count", operations.last_step);
    copies.sort_unstable();
    println!(
        "GEMM operands copied contiguous for cuBLASLt per full step ({}): {} (every step: {copies:?})\n",
        match vendor_gemm() {
            VendorGemm::CublasLt { .. } => "the copies its calls made",
            VendorGemm::CubeCl(_) => "without it, the copies its layouts would need for the same products",
        },
        copies.get(copies.len() / 2).copied().unwrap_or(0),
    );
    // Counted: the logs are not left behind in the temporary directory (CubeCL and Burn
    // may go on writing to them, unlinked, for the parts after this one).
    let _ = std::fs::remove_file(log_file());
    let _ = std::fs::remove_file(fusion_log_file());
}

/// Every entry of `counts` (by name), the most frequent first, as a Markdown table: a
/// step's structure compared between two builds needs the rare ones too.
fn print_frequent(title: &str, unit: &str, counts: BTreeMap<String, usize>) {
    let mut frequent: Vec<(usize, String)> = counts.into_iter().map(|(name, n)| (n, name)).collect();
    frequent.sort_unstable_by(|a, b| b.cmp(a));
    println!("| {title} | {unit} |\n|---|---|");
    for (n, name) in &frequent {
        println!("| `{name}` | {n} |");
    }
    println!();
}
