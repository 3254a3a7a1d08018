//! The loss chunk a GPT-2 run takes when none is asked for: chosen from the device it runs
//! on and the memory left there, not fixed.
//!
//! The fused loss ([`fused_lm_head_loss`]) computes the LM head's logits `chunk` tokens at a
//! time; each chunk holds three `[chunk, vocab]` buffers. Fewer, larger chunks are fewer,
//! larger matmuls (on the CPU, one chunk of 512 tokens ran 1.2× the tokens/s of chunks of
//! 128 and 1.6× the full logits', docs/benchmarks.md), at the price of those buffers.
//!
//! - **CPU backend**: [`CPU_LOSS_CHUNK`] tokens where a step has that many, else
//!   [`CPU_SMALL_LOSS_CHUNK`] where the estimate says it saves (measured defaults).
//! - **Software adapters** (llvmpipe): [`SMALL_LOSS_CHUNK`] where it saves: llvmpipe's pool
//!   cannot allocate gpt2-mini's full logits at 8 × 64 (196 MiB against pages of 128 MiB).
//! - **GPUs**: the largest chunk (a power of two from [`SMALL_LOSS_CHUNK`] tokens, or all
//!   the step's tokens) whose three buffers fit [`GPU_LOSS_BUDGET`] and a quarter of what
//!   the device has left after the run's other tensors (the estimate), and whose one
//!   buffer fits the pool's largest page. At gpt2-small 8 × 1024 on an 80 GB GPU that is
//!   1,024 tokens (8 chunks, 0.6 GiB), where the fixed default was 256 (32 chunks); on a
//!   device with little left it falls back to [`SMALL_LOSS_CHUNK`].
//!
//! [`fused_lm_head_loss`]: super::lm_head_loss::fused_lm_head_loss

use super::gpt2::{Gpt2Attention, Gpt2Config};
use super::gpt2_memory::Gpt2MemoryEstimate;

/// Tokens per chunk on the CPU backend for steps of at least this many tokens.
pub const CPU_LOSS_CHUNK: usize = 512;

/// Tokens per chunk on the CPU backend for smaller steps, where the estimate says it saves.
pub const CPU_SMALL_LOSS_CHUNK: usize = 128;

/// The smallest chunk on GPUs and software adapters: one chunk's logits are 49 MiB at
/// GPT-2's padded vocabulary.
pub const SMALL_LOSS_CHUNK: usize = 256;

/// Most bytes a GPU run's loss chunk buffers take by default (three `[chunk, vocab]`
/// tensors): 1 GiB.
pub const GPU_LOSS_BUDGET: u64 = 1 << 30;

/// Where a run's default loss chunk is chosen for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossChunkDevice {
    /// Burn's CPU backend.
    Cpu,
    /// A software adapter (llvmpipe), which allocates no buffer above its pool's page.
    Software,
    /// A GPU with `capacity` bytes of memory and a pool whose largest page is
    /// `largest_page` bytes, each where known.
    Gpu { capacity: Option<u64>, largest_page: Option<u64> },
}

/// The default loss chunk for `batch × seq` tokens of `config` at `elem_bytes` per float
/// with `attention`, on `device` (see the module docs (`src/model/gpt2_loss_chunk.rs`)); `None` is the full logits.
pub fn default_loss_chunk(
    config: &Gpt2Config,
    batch: usize,
    seq: usize,
    elem_bytes: usize,
    attention: Gpt2Attention,
    device: LossChunkDevice,
) -> Option<usize> {
    let saves = |chunk| Gpt2MemoryEstimate::loss_chunk_that_saves(config, batch, seq, elem_bytes, chunk);
    match device {
        LossChunkDevice::Cpu if batch * seq >= CPU_LOSS_CHUNK => Some(CPU_LOSS_CHUNK),
        LossChunkDevice::Cpu => saves(CPU_SMALL_LOSS_CHUNK),
        LossChunkDevice::Software => saves(SMALL_LOSS_CHUNK),
        LossChunkDevice::Gpu { .. } if batch * seq <= SMALL_LOSS_CHUNK => saves(SMALL_LOSS_CHUNK),
        LossChunkDevice::Gpu { capacity, largest_page } => {
            // What the run holds apart from the loss's chunk buffers.
            let rest = Gpt2MemoryEstimate::new(config, batch, seq, elem_bytes, Some(SMALL_LOSS_CHUNK), attention);
            let rest = rest.total() - chunk_buffers(config, SMALL_LOSS_CHUNK, elem_bytes);
            let left = capacity.map_or(GPU_LOSS_BUDGET, |capacity| capacity.saturating_sub(rest) / 4);
            let budget = GPU_LOSS_BUDGET.min(left);
            Some(largest_chunk_within(config, batch * seq, elem_bytes, budget, largest_page))
        }
    }
}

/// The largest chunk, [`SMALL_LOSS_CHUNK`] at least, whose three buffers fit `budget` and
/// whose one buffer fits `largest_page`: a power of two times [`SMALL_LOSS_CHUNK`], or all
/// `tokens`.
pub fn largest_chunk_within(
    config: &Gpt2Config,
    tokens: usize,
    elem_bytes: usize,
    budget: u64,
    largest_page: Option<u64>,
) -> usize {
    let fits = |chunk: usize| {
        chunk_buffers(config, chunk, elem_bytes) <= budget
            && largest_page.is_none_or(|page| chunk_buffers(config, chunk, elem_bytes) / 3 <= page)
    };
    let mut chunk = SMALL_LOSS_CHUNK.min(tokens);
    while chunk < tokens {
        let next = (chunk * 2).min(tokens);
        if !fits(next) {
            break;
        }
        chunk = next;
    }
    chunk
}

/// Bytes of a chunk's three `[chunk, vocab]` buffers.
fn chunk_buffers(config: &Gpt2Config, chunk: usize, elem_bytes: usize) -> u64 {
    3 * (chunk * config.padded_vocab() * elem_bytes) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn small() -> Gpt2Config {
        Gpt2Config::preset("gpt2-small").unwrap().with_pad_vocab_to(64)
    }

    #[test]
    fn a_large_gpu_takes_the_largest_chunk_the_budget_allows() {
        let device = LossChunkDevice::Gpu { capacity: Some(80 * GIB), largest_page: Some(20 * GIB) };
        let chunk = default_loss_chunk(&small(), 8, 1024, 4, Gpt2Attention::Lean, device).unwrap();
        // Three [1024, 50304] f32 buffers are 0.6 GiB; 2048 tokens' would be 1.2 GiB.
        assert_eq!(chunk, 1024);
        assert!(chunk_buffers(&small(), chunk, 4) <= GPU_LOSS_BUDGET);
        assert!(chunk_buffers(&small(), chunk * 2, 4) > GPU_LOSS_BUDGET);
        // In bf16 the same budget holds twice the tokens.
        let half = default_loss_chunk(&small(), 8, 1024, 2, Gpt2Attention::Lean, device).unwrap();
        assert_eq!(half, 2048);
    }

    #[test]
    fn a_device_with_little_left_falls_back_to_the_small_chunk() {
        // The control: the same run on a device that only just holds its other tensors.
        let rest = Gpt2MemoryEstimate::new(&small(), 8, 1024, 4, Some(SMALL_LOSS_CHUNK), Gpt2Attention::Lean).total();
        let tight = LossChunkDevice::Gpu { capacity: Some(rest + (rest / 50)), largest_page: None };
        assert_eq!(default_loss_chunk(&small(), 8, 1024, 4, Gpt2Attention::Lean, tight), Some(SMALL_LOSS_CHUNK));
        // Burn's attention keeps the scores: the same device has even less left for the loss.
        let roomy = LossChunkDevice::Gpu { capacity: Some(rest + 4 * GIB), largest_page: None };
        let lean = default_loss_chunk(&small(), 8, 1024, 4, Gpt2Attention::Lean, roomy).unwrap();
        let burn = default_loss_chunk(&small(), 8, 1024, 4, Gpt2Attention::Burn, roomy).unwrap();
        assert!(burn < lean, "{burn} {lean}");
    }

    #[test]
    fn one_buffer_never_exceeds_the_pools_largest_page() {
        let page = 128 << 20;
        let device = LossChunkDevice::Gpu { capacity: Some(80 * GIB), largest_page: Some(page) };
        let chunk = default_loss_chunk(&small(), 8, 1024, 4, Gpt2Attention::Lean, device).unwrap();
        assert!(chunk_buffers(&small(), chunk, 4) / 3 <= page);
        assert!(chunk_buffers(&small(), chunk * 2, 4) / 3 > page, "the next chunk up would have fitted: {chunk}");
    }

    #[test]
    fn a_step_smaller_than_the_budget_is_one_chunk_of_all_its_tokens() {
        let device = LossChunkDevice::Gpu { capacity: Some(80 * GIB), largest_page: None };
        // 3 × 64 tokens: under the small chunk, so the full logits or one small chunk, as
        // the estimate says; 8 × 96 = 768 tokens: not a power of two times 256, one chunk.
        let mini = Gpt2Config::preset("gpt2-mini").unwrap();
        assert_eq!(
            default_loss_chunk(&mini, 3, 64, 4, Gpt2Attention::Lean, device),
            Gpt2MemoryEstimate::loss_chunk_that_saves(&mini, 3, 64, 4, SMALL_LOSS_CHUNK)
        );
        assert_eq!(default_loss_chunk(&mini, 8, 96, 4, Gpt2Attention::Lean, device), Some(768));
    }

    #[test]
    fn the_cpu_and_software_adapters_keep_their_measured_defaults() {
        let mini = Gpt2Config::preset("gpt2-mini").unwrap();
        assert_eq!(default_loss_chunk(&mini, 8, 64, 4, Gpt2Attention::Lean, LossChunkDevice::Cpu), Some(512));
        assert_eq!(
            default_loss_chunk(&mini, 8, 64, 4, Gpt2Attention::Lean, LossChunkDevice::Software),
            Gpt2MemoryEstimate::loss_chunk_that_saves(&mini, 8, 64, 4, SMALL_LOSS_CHUNK)
        );
    }
}
