//! How much memory a GPT-2 run needs: the loss chunk chosen by default, the estimates
//! printed at start, and the refusal of a run that cannot fit.

use leanburn::backend::AttentionPath;
use leanburn::device::{device_memory, largest_pool_page, BackendKind, DeviceChoice};
use leanburn::memory::format_bytes;
use leanburn::model::{
    default_loss_chunk, Gpt2Attention, Gpt2Config, Gpt2MemoryEstimate, Gpt2PoolReserve, LossChunkDevice, PoolPages,
};

use super::Args;
use crate::common::{bad_input, Failure};

/// `--loss-chunk` as given (0: the full logits), else the default for the device
/// (`leanburn::model::default_loss_chunk`: measured defaults on the CPU and llvmpipe; on a
/// GPU the largest chunk that fits a budget and what the device has left).
pub fn loss_chunk(
    args: &Args,
    backend: &DeviceChoice,
    gpu: bool,
    config: &Gpt2Config,
    batch: usize,
    seq: usize,
) -> Option<usize> {
    let device = match backend.kind() {
        BackendKind::Cpu => LossChunkDevice::Cpu,
        _ if gpu => LossChunkDevice::Gpu { capacity: device_memory(backend), largest_page: largest_pool_page(backend) },
        _ => LossChunkDevice::Software,
    };
    match args.loss_chunk {
        Some(0) => None,
        Some(chunk) => Some(chunk as usize),
        None => default_loss_chunk(config, batch, seq, args.execution.precision.bytes(), args.attention, device),
    }
}

/// Prints the memory estimates and refuses a run that cannot fit where the device's
/// memory is known: the pool's reserve where the device has a paged pool, the tensors
/// otherwise.
pub fn check_memory(
    args: &Args,
    backend: &DeviceChoice,
    config: &Gpt2Config,
    preset: &str,
    batch: usize,
    seq: usize,
    loss_chunk: Option<usize>,
) -> Result<(), Failure> {
    let averaged = args.average.average.is_some();
    // The float type the step computes in; master weights and moments are f32 in any.
    let elem = args.execution.precision.bytes();
    let estimate = Gpt2MemoryEstimate::new(config, batch, seq, elem, loss_chunk, args.attention);
    let estimate = if averaged { estimate.with_weight_average() } else { estimate };
    eprintln!(
        "{preset}: {} parameters; batch {batch} × {seq} tokens; estimated peak {estimate}",
        config.parameter_count()
    );
    let largest_page = largest_pool_page(backend);
    let reserve = largest_page.map(|largest| {
        let reserve = Gpt2PoolReserve::new(
            config,
            (batch, seq),
            elem,
            loss_chunk,
            args.attention,
            PoolPages::sub_slices(largest),
        );
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
        let chunked = Gpt2MemoryEstimate::new(config, batch, seq, elem, Some(seq), args.attention);
        let chunked = if averaged { chunked.with_weight_average() } else { chunked };
        if chunked.total() < estimate.total() {
            eprintln!("  (with --loss-chunk {seq}: {})", format_bytes(chunked.total() as f64));
        }
    }
    let mut needed = reserve.map_or(estimate.total(), |reserve| reserve.total());
    // The attention in blocks on cuBLASLt holds score-sized buffers the estimate leaves out.
    let blocks = args.attention == Gpt2Attention::Lean && backend.attention_path() == AttentionPath::Gemm;
    if blocks {
        let workspace = leanburn::backend::attention_workspace() as u64;
        eprintln!("  and the attention blocks' workspace: {}", format_bytes(workspace as f64));
        needed += workspace;
    }
    // `device_memory` reads a GPU's own memory on CUDA, the host's where the tensors live
    // there (the CPU backend, a software Vulkan adapter).
    let memory = if backend.kind() == BackendKind::Cuda { "device memory" } else { "host memory" };
    match device_memory(backend) {
        Some(capacity) if needed > capacity && !args.ignore_memory_estimate => Err(bad_input(format!(
            "this run needs about {} but the {memory} is {}: lower --batch or --seq, {}or a smaller \
             --preset (--ignore-memory-estimate starts anyway)",
            format_bytes(needed as f64),
            format_bytes(capacity as f64),
            if loss_chunk.is_none() { format!("pass --loss-chunk {}, ", seq.min(256)) } else { String::new() },
        ))),
        Some(capacity) => {
            eprintln!("  {memory}: {}", format_bytes(capacity as f64));
            Ok(())
        }
        None => Ok(()),
    }
}
