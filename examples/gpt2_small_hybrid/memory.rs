//! How much memory a GPT-2 run needs: the loss chunk chosen by default, the estimates
//! printed at start, and the refusal of a run that cannot fit.

use leanburn::backend::AttentionPath;
use leanburn::device::{device_memory, largest_pool_page, BackendKind, DeviceChoice};
use leanburn::memory::format_bytes;
use leanburn::model::{
    default_loss_chunk, token_embedding_bytes, Gpt2Attention, Gpt2Config, Gpt2MemoryEstimate, Gpt2PoolReserve,
    LossChunkDevice, PoolPages,
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
    let run = RunMemory { args, config, batch, seq, loss_chunk };
    let estimate = run.estimate(loss_chunk);
    eprintln!(
        "{preset}: {} parameters; batch {batch} × {seq} tokens; estimated peak {estimate}",
        config.parameter_count()
    );
    let largest_page = largest_pool_page(backend);
    let reserve = largest_page.map(|largest| run.reserve(largest));
    if let (Some(reserve), Some(largest_page)) = (reserve, largest_page) {
        eprintln!("  estimated pool reserve: {reserve}");
        run.fits_the_largest_page(&reserve, largest_page)?;
    }
    run.print_chunk_hint(&estimate);
    let needed = reserve.map_or(estimate.total(), |reserve| reserve.total()) + blocks_workspace(args, backend);
    run.fits_the_memory(backend, needed)
}

/// What a run's memory depends on: its flags, model and shapes.
struct RunMemory<'a> {
    args: &'a Args,
    config: &'a Gpt2Config,
    batch: usize,
    seq: usize,
    loss_chunk: Option<usize>,
}

impl RunMemory<'_> {
    /// The float type's bytes the step computes in; master weights and moments are f32 in any.
    fn elem(&self) -> usize {
        self.args.execution.precision.bytes()
    }

    fn averaged(&self) -> bool {
        self.args.average.average.is_some()
    }

    /// The tensors' peak with the logits in chunks of `loss_chunk` rows (`None`: whole).
    fn estimate(&self, loss_chunk: Option<usize>) -> Gpt2MemoryEstimate {
        let estimate =
            Gpt2MemoryEstimate::new(self.config, self.batch, self.seq, self.elem(), loss_chunk, self.args.attention);
        if self.averaged() {
            estimate.with_weight_average()
        } else {
            estimate
        }
    }

    /// What the device's pool reserves, its pages at most `largest_page` bytes.
    fn reserve(&self, largest_page: u64) -> Gpt2PoolReserve {
        let reserve = Gpt2PoolReserve::new(
            self.config,
            (self.batch, self.seq),
            self.elem(),
            self.loss_chunk,
            self.args.attention,
            PoolPages::sub_slices(largest_page),
        );
        if self.averaged() {
            reserve.with_weight_average()
        } else {
            reserve
        }
    }

    /// `, or pass --loss-chunk N` where the logits are whole: the flag that would help.
    fn chunk_advice(&self, format: impl Fn(usize) -> String) -> String {
        if self.loss_chunk.is_none() {
            format(self.seq.min(256))
        } else {
            String::new()
        }
    }

    /// Not an estimate: CubeCL cannot allocate a buffer larger than its largest page.
    /// Where a weight is the tensor too large, only a smaller model helps.
    fn fits_the_largest_page(&self, reserve: &Gpt2PoolReserve, largest_page: u64) -> Result<(), Failure> {
        if reserve.largest_tensor <= largest_page {
            return Ok(());
        }
        let embedding = token_embedding_bytes(self.config);
        if embedding > largest_page {
            return Err(bad_input(format!(
                "the token embedding of this preset ({} × {}, f32), {}, is larger than the largest buffer this \
                 device allocates, {}: use a smaller --preset (--batch, --seq and --loss-chunk change no weight's size)",
                self.config.padded_vocab(),
                self.config.d_model,
                format_bytes(embedding as f64),
                format_bytes(largest_page as f64),
            )));
        }
        Err(bad_input(format!(
            "one tensor of this run, {}, is larger than the largest buffer this device allocates, {}: \
             lower --batch or --seq, use a smaller --preset{}",
            format_bytes(reserve.largest_tensor as f64),
            format_bytes(largest_page as f64),
            self.chunk_advice(|chunk| format!(", or pass --loss-chunk {chunk}")),
        )))
    }

    /// Where the logits are whole and chunks of a sequence would need less, says so.
    fn print_chunk_hint(&self, estimate: &Gpt2MemoryEstimate) {
        if self.loss_chunk.is_some() {
            return;
        }
        let chunked = self.estimate(Some(self.seq));
        if chunked.total() < estimate.total() {
            eprintln!("  (with --loss-chunk {}: {})", self.seq, format_bytes(chunked.total() as f64));
        }
    }

    /// Refuses `needed` bytes over the memory the device reports, unless told to start anyway.
    fn fits_the_memory(&self, backend: &DeviceChoice, needed: u64) -> Result<(), Failure> {
        // `device_memory` reads a GPU's own memory on CUDA, the host's where the tensors live
        // there (the CPU backend, a software Vulkan adapter).
        let memory = if backend.kind() == BackendKind::Cuda { "device memory" } else { "host memory" };
        match device_memory(backend) {
            Some(capacity) if needed > capacity && !self.args.ignore_memory_estimate => Err(bad_input(format!(
                "this run needs about {} but the {memory} is {}: lower --batch or --seq, {}or a smaller \
                 --preset (--ignore-memory-estimate starts anyway)",
                format_bytes(needed as f64),
                format_bytes(capacity as f64),
                self.chunk_advice(|chunk| format!("pass --loss-chunk {chunk}, ")),
            ))),
            Some(capacity) => {
                eprintln!("  {memory}: {}", format_bytes(capacity as f64));
                Ok(())
            }
            None => Ok(()),
        }
    }
}

/// The attention in blocks on cuBLASLt holds score-sized buffers the estimate leaves out:
/// their workspace, printed, where the run takes that path; 0 otherwise.
fn blocks_workspace(args: &Args, backend: &DeviceChoice) -> u64 {
    if args.attention != Gpt2Attention::Lean || backend.attention_path() != AttentionPath::Gemm {
        return 0;
    }
    let workspace = leanburn::backend::attention_workspace() as u64;
    eprintln!("  and the attention blocks' workspace: {}", format_bytes(workspace as f64));
    workspace
}
