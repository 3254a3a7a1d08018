//! How much memory a GPT-2 run needs: the loss chunk chosen by default, the estimates
//! printed at start, and the refusal of a run that cannot fit.

use leanburn::memory::format_bytes;
use leanburn::model::{Gpt2Config, Gpt2MemoryEstimate, Gpt2PoolReserve, PoolPages};
use leanburn::select::{device_memory, largest_pool_page, BackendKind, Selection};

use super::Args;
use crate::common::{bad_input, Failure};

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

/// `--loss-chunk` as given (0: the full logits), else the default for the backend: see the
/// constants above.
pub fn loss_chunk(
    asked: Option<u64>,
    kind: BackendKind,
    config: &Gpt2Config,
    batch: usize,
    seq: usize,
) -> Option<usize> {
    match asked {
        Some(0) => None,
        Some(chunk) => Some(chunk as usize),
        None => match kind {
            BackendKind::Cpu if batch * seq >= CPU_LOSS_CHUNK => Some(CPU_LOSS_CHUNK),
            BackendKind::Cpu => Gpt2MemoryEstimate::loss_chunk_that_saves(config, batch, seq, 4, CPU_SMALL_LOSS_CHUNK),
            _ => Gpt2MemoryEstimate::loss_chunk_that_saves(config, batch, seq, 4, GPU_LOSS_CHUNK),
        },
    }
}

/// Prints the memory estimates and refuses a run that cannot fit where the device's
/// memory is known: the pool's reserve where the device has a paged pool, the tensors
/// otherwise.
pub fn check_memory(
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
