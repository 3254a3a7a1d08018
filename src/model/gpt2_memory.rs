//! An estimate, before any allocation, of what training GPT-2 will hold on the device.
//!
//! The parts, in elements of `elem_bytes` each (the float type the step computes in) but
//! the master weights and what the optimizer keeps, which are f32 in every precision:
//!
//! - **parameters** `P` ([`Gpt2Config::parameter_count`]), **gradients** `P`, and
//!   **optimizer state** `2P` (Adam's two moments), all f32;
//! - in half precision, the **compute copy**: the weights cast for the step and their
//!   gradients before they are cast back, `2P` (none in f32);
//! - **activations** the autodiff graph keeps for the backward pass, per layer and token
//!   `17·d + 2.5·heads·seq` with Burn's attention (Korthikanti et al., 2022, "Reducing
//!   Activation Recomputation in Large Transformer Models", eq. 1, converted from bytes at
//!   2 B per element), of which `2.5·heads·seq` are the attention scores, their softmax
//!   and its dropout; with leanburn's attention ([`Gpt2Attention::Lean`], the default)
//!   `17·d + heads`: no scores, one log-sum-exp per row and head;
//! - **logits**: the LM head's `tokens × vocab` logits, their log-softmax and its gradient
//!   (3 copies); with a loss chunk (the fused loss, [`fused_lm_head_loss`]), three copies
//!   of `chunk × vocab` (at most `tokens × vocab`: one chunk) plus its retained gradients
//!   `tokens × d + vocab × d`.
//!
//! [`fused_lm_head_loss`]: super::lm_head_loss::fused_lm_head_loss
//!
//! It counts tensors: allocator pages, kernel workspaces and fragmentation come on top,
//! and backends differ in what they keep.
//!
//! [`Gpt2PoolReserve`] estimates what a CubeCL device pool then *reserves*, page rounding
//! included. CubeCL 0.10 keeps two kinds of memory that do not lend to each other:
//!
//! - the **persistent** part: one buffer of exactly its size per allocation. The model's
//!   weights are put there ([`materialize_persistent`]), and every later allocation of a
//!   size it already holds goes there too. For each distinct weight size held by `n`
//!   tensors it holds `4n` buffers: weights, gradients and the two moments (AdamW updates
//!   in place; `4n + 3` before it did), and in f32 one more of the tied embedding's size
//!   (its gradient is the sum of two);
//! - **pages** shared by tensors of similar size ([`PoolPages`]), kept until an explicit
//!   cleanup: the activations, each layer's `9` `[tokens, d]` and `2` `[tokens, 4d]` tensors
//!   (the `17·d` above) and its attention's (scores with Burn's, the log-sum-exp with
//!   leanburn's), one layer's activation gradients in flight (`4` and `2` of those sizes),
//!   and the loss: two `[chunk, vocab]` tensors and the hidden states' gradient with the
//!   fused loss, or four `[tokens, vocab]` tensors with the full logits. A tensor of exactly
//!   a weight's size goes to the persistent part instead (at 8 × 64 tokens of gpt2-mini,
//!   `[tokens, d]` is the size of the MLP's weights).
//!
//! These counts were read from CubeCL's memory logger on llvmpipe (`docs/gpt2.md`, "The
//! estimates against the measured reserve", which checks them against measured reserves).
//! `examples/gpt2_small_hybrid/` prints both estimates before training and refuses to
//! start when the device cannot hold the reserve (the tensors, where no pool is known).
//!
//! [`materialize_persistent`]: crate::init::materialize_persistent

use std::collections::BTreeMap;
use std::fmt;

use super::gpt2::{Gpt2Attention, Gpt2Config};
use crate::memory::format_bytes;

/// Bytes of a master weight, a gradient the optimizer takes, and a moment: f32 in every
/// precision.
const MASTER: u64 = 4;

/// Estimated device bytes of one GPT-2 training step; see the module docs (`src/model/gpt2_memory.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gpt2MemoryEstimate {
    /// Weights.
    pub parameters: u64,
    /// One gradient per weight.
    pub gradients: u64,
    /// Adam's first and second moments.
    pub optimizer: u64,
    /// A half-precision step's copy of the weights and its gradients (0 in f32).
    pub compute_copy: u64,
    /// What the transformer blocks keep for the backward pass.
    pub activations: u64,
    /// The LM head's logits and what the loss keeps of them.
    pub logits: u64,
    /// The weight average, where the run keeps one ([`with_weight_average`]): one copy of
    /// the parameters.
    ///
    /// [`with_weight_average`]: Self::with_weight_average
    pub average: u64,
}

impl Gpt2MemoryEstimate {
    /// The estimate for `batch × seq` tokens per step computing in floats of `elem_bytes`
    /// (4, or 2 for bf16 and f16), an optional loss chunk (tokens per chunk), and the
    /// attention the model runs.
    pub fn new(
        config: &Gpt2Config,
        batch: usize,
        seq: usize,
        elem_bytes: usize,
        loss_chunk: Option<usize>,
        attention: Gpt2Attention,
    ) -> Self {
        let elem = elem_bytes as f64;
        let params = config.parameter_count() as f64 * MASTER as f64;
        let compute_copy =
            if elem_bytes < MASTER as usize { 2.0 * config.parameter_count() as f64 * elem } else { 0.0 };
        let tokens = (batch * seq) as f64;
        let (d, heads, vocab) = (config.d_model as f64, config.heads as f64, config.padded_vocab() as f64);
        let kept_by_attention = match attention {
            Gpt2Attention::Burn => 2.5 * heads * seq as f64,
            Gpt2Attention::Lean => heads,
        };
        let per_token_layer = 17.0 * d + kept_by_attention;
        let activations = config.layers as f64 * tokens * per_token_layer * elem;
        let logits = match loss_chunk {
            Some(chunk) if chunk > 0 => (3.0 * (chunk as f64).min(tokens) * vocab + tokens * d + vocab * d) * elem,
            _ => 3.0 * tokens * vocab * elem,
        };
        Self {
            parameters: params as u64,
            gradients: params as u64,
            optimizer: (2.0 * params) as u64,
            compute_copy: compute_copy as u64,
            activations: activations as u64,
            logits: logits as u64,
            average: 0,
        }
    }

    /// The estimate for a run that keeps a weight average (`HybridTrainer::with_weight_average`).
    pub fn with_weight_average(mut self) -> Self {
        self.average = self.parameters;
        self
    }

    /// The loss chunk to use when none is asked for: `chunk` tokens where the estimate
    /// with it is smaller than with the full logits, that is where a step has more tokens
    /// than `chunk` by enough to pay for the fused loss's retained gradients
    /// (`tokens × d + vocab × d`); otherwise `None`, the full logits.
    pub fn loss_chunk_that_saves(
        config: &Gpt2Config,
        batch: usize,
        seq: usize,
        elem_bytes: usize,
        chunk: usize,
    ) -> Option<usize> {
        // The attention's share is the same on both sides.
        let total = |loss_chunk| Self::new(config, batch, seq, elem_bytes, loss_chunk, Gpt2Attention::Lean).total();
        (chunk > 0 && total(Some(chunk)) < total(None)).then_some(chunk)
    }

    /// Everything together: the estimated peak of a full training step.
    pub fn total(&self) -> u64 {
        self.parameters
            + self.gradients
            + self.optimizer
            + self.compute_copy
            + self.activations
            + self.logits
            + self.average
    }

    /// What a forward-only step (predict or evaluation) adds on top of parameters and
    /// optimizer state: it keeps no activations for a backward pass, so roughly one
    /// layer's worth plus the logits (one copy, or one chunk).
    pub fn forward_only(&self, config: &Gpt2Config) -> u64 {
        let layers = config.layers.max(1) as u64;
        self.activations / layers + self.logits / 3
    }
}

/// The pages of a CubeCL device pool in CubeCL 0.10's default layout (`SubSlices`): pools
/// of pages a quarter, a sixteenth, ... of the largest page, down to the first under 32 MiB,
/// each taking slices up to a fraction of its page, and the largest pages taking the rest.
/// With llvmpipe's largest page of 128 MiB: slices up to 2 MiB share 8 MiB pages, up to
/// 16 MiB share 32 MiB pages, larger ones 128 MiB pages. CUDA's largest page is a quarter
/// of the device's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolPages {
    largest: u64,
}

impl PoolPages {
    /// The default layout of a pool whose largest page is `largest` bytes.
    pub fn sub_slices(largest: u64) -> Self {
        Self { largest }
    }

    /// `(page bytes, largest slice bytes)` of each pool, smallest pages first; a tensor
    /// goes to the first pool whose slices it fits.
    fn pools(&self) -> Vec<(u64, u64)> {
        const MIB: u64 = 1 << 20;
        let mut pools = Vec::new();
        let (mut page, mut halvings) = (self.largest, 1);
        while page >= 32 * MIB {
            page /= 4;
            pools.push((page, page >> halvings));
            halvings += 1;
        }
        pools.reverse();
        pools.push((self.largest, self.largest));
        pools
    }

    /// Bytes of the whole pages that tensors of these sizes, alive together, occupy: each
    /// pool's tensors packed largest first into the first page with room.
    pub fn reserve_for(&self, tensors: &[u64]) -> u64 {
        let pools = self.pools();
        let mut pages: Vec<Vec<u64>> = vec![Vec::new(); pools.len()];
        let mut sorted = tensors.to_vec();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        for size in sorted {
            // Larger than the largest page: it gets a page of its own size (it would not
            // be allocated at all; the estimate still counts it).
            let Some(pool) = pools.iter().position(|&(_, slice)| size <= slice) else {
                pages[pools.len() - 1].push(size);
                continue;
            };
            let page = pools[pool].0;
            match pages[pool].iter_mut().find(|used| **used + size <= page) {
                Some(used) => *used += size,
                None => pages[pool].push(size),
            }
        }
        pools.iter().zip(&pages).map(|(&(page, _), used)| used.iter().map(|&u| u.max(page)).sum::<u64>()).sum()
    }
}

/// What a CubeCL device pool reserves for GPT-2 training; see the module docs (`src/model/gpt2_memory.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gpt2PoolReserve {
    /// Buffers of exactly a weight's size: weights, gradients, moments, the update's.
    pub persistent: u64,
    /// Whole pages for the activations, their gradients and the loss.
    pub paged: u64,
    /// The largest single tensor counted: CubeCL allocates nothing larger than the
    /// largest page.
    pub largest_tensor: u64,
    /// Bytes of one copy of the weights, which a weight average adds to `persistent`
    /// ([`with_weight_average`](Self::with_weight_average)).
    pub weight_bytes: u64,
}

impl Gpt2PoolReserve {
    /// The estimate for `batch × seq` tokens computing in floats of `elem_bytes` (4, or 2
    /// for bf16 and f16), the loss chunk and the attention the model runs, on a pool with
    /// these `pages`.
    pub fn new(
        config: &Gpt2Config,
        (batch, seq): (usize, usize),
        elem_bytes: usize,
        loss_chunk: Option<usize>,
        attention: Gpt2Attention,
        pages: PoolPages,
    ) -> Self {
        let elem = elem_bytes as u64;
        let weights = weight_sizes(config);
        // Each weight, its gradient and its two moments (AdamW updates them in place); in
        // f32 one more of the tied embedding's size: its gradient is the sum of two (in half
        // precision that sum is the compute copy's, below).
        let embedding = token_embedding_bytes(config);
        let summed = if elem < MASTER { 0 } else { embedding };
        let persistent: u64 = weights.iter().map(|(&size, &n)| size * 4 * n).sum::<u64>() + summed;

        let shape = StepShape::new(config, (batch, seq), elem);
        let mut tensors = Vec::new();
        if elem < MASTER {
            // The compute copy: each weight cast, and its gradient before it is cast back
            // (the tied embedding's in two parts before they are summed).
            for elements in config.parameter_tensors() {
                tensors.extend([elements as u64 * elem; 2]);
            }
            tensors.push(embedding / MASTER * elem);
        }
        for _ in 0..config.layers {
            shape.layer_tensors(attention, &mut tensors);
        }
        tensors.extend([shape.narrow; 4]);
        tensors.extend([shape.wide; 2]);
        shape.loss_tensors(loss_chunk, &mut tensors);
        let largest_tensor = tensors.iter().chain(weights.keys()).copied().max().unwrap_or(0);
        // A tensor of exactly a weight's size goes to the persistent part as well.
        let (same_size, paged): (Vec<u64>, Vec<u64>) = tensors.into_iter().partition(|size| weights.contains_key(size));
        Self {
            persistent: persistent + same_size.iter().sum::<u64>(),
            paged: pages.reserve_for(&paged),
            largest_tensor,
            weight_bytes: weights.iter().map(|(&size, &n)| size * n).sum(),
        }
    }

    /// The reserve for a run that keeps a weight average: one buffer more per weight.
    pub fn with_weight_average(mut self) -> Self {
        self.persistent += self.weight_bytes;
        self
    }

    /// Both parts together.
    pub fn total(&self) -> u64 {
        self.persistent + self.paged
    }
}

/// Bytes of the token embedding's f32 master copy (tied to the LM head): the largest
/// weight, whatever the batch, sequence or loss chunk.
pub fn token_embedding_bytes(config: &Gpt2Config) -> u64 {
    (config.padded_vocab() * config.d_model) as u64 * MASTER
}

/// How many master weights (f32) there are of each size, in bytes.
fn weight_sizes(config: &Gpt2Config) -> BTreeMap<u64, u64> {
    let mut weights = BTreeMap::<u64, u64>::new();
    for elements in config.parameter_tensors() {
        *weights.entry(elements as u64 * MASTER).or_default() += 1;
    }
    weights
}

/// The sizes a step's activations come in, for [`Gpt2PoolReserve::new`].
struct StepShape {
    batch: u64,
    seq: u64,
    tokens: u64,
    heads: u64,
    vocab: u64,
    elem: u64,
    /// `[tokens, d]` in the compute type.
    narrow: u64,
    /// `[tokens, 4·d]` in the compute type.
    wide: u64,
}

impl StepShape {
    fn new(config: &Gpt2Config, (batch, seq): (usize, usize), elem: u64) -> Self {
        let (tokens, d) = ((batch * seq) as u64, config.d_model as u64);
        Self {
            batch: batch as u64,
            seq: seq as u64,
            tokens,
            heads: config.heads as u64,
            vocab: config.padded_vocab() as u64,
            elem,
            narrow: tokens * d * elem,
            wide: tokens * 4 * d * elem,
        }
    }

    /// What one layer keeps for the backward pass.
    fn layer_tensors(&self, attention: Gpt2Attention, tensors: &mut Vec<u64>) {
        tensors.extend([self.narrow; 9]);
        tensors.extend([self.wide; 2]);
        match attention {
            // The log-sum-exp is f32 in every precision.
            Gpt2Attention::Lean => tensors.push(self.tokens * self.heads * 4),
            Gpt2Attention::Burn => {
                // 2.5 score tensors (scores, softmax, half a dropout mask).
                let scores = self.batch * self.heads * self.seq * self.seq * self.elem;
                tensors.extend([scores, scores, scores / 2]);
            }
        }
    }

    /// The LM head's logits (the whole batch's, or one chunk's) and what its loss adds.
    fn loss_tensors(&self, loss_chunk: Option<usize>, tensors: &mut Vec<u64>) {
        let (tokens, vocab, elem) = (self.tokens, self.vocab, self.elem);
        match loss_chunk {
            // In half precision the loss is computed in f32: the logits, their f32 copy and
            // its gradient (the composed loss; CUDA's row kernel keeps the logits' type).
            Some(chunk) if chunk > 0 && elem < MASTER => {
                let rows = (chunk as u64).min(tokens) * vocab;
                tensors.extend([rows * elem, rows * MASTER, rows * MASTER, self.narrow]);
            }
            Some(chunk) if chunk > 0 => {
                let chunk_logits = (chunk as u64).min(tokens) * vocab * elem;
                tensors.extend([chunk_logits, chunk_logits, self.narrow]);
            }
            _ if elem < MASTER => {
                tensors.extend([tokens * vocab * elem; 2]);
                tensors.extend([tokens * vocab * MASTER; 2]);
            }
            _ => tensors.extend([tokens * vocab * elem; 4]),
        }
    }
}

impl fmt::Display for Gpt2PoolReserve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "persistent {}, pages {}: total {}",
            format_bytes(self.persistent as f64),
            format_bytes(self.paged as f64),
            format_bytes(self.total() as f64)
        )
    }
}

impl fmt::Display for Gpt2MemoryEstimate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = |b: u64| format_bytes(b as f64);
        write!(
            f,
            "parameters {}, gradients {}, optimizer state {}{}, activations {}, logits {}{}: total {}",
            bytes(self.parameters),
            bytes(self.gradients),
            bytes(self.optimizer),
            if self.compute_copy > 0 { format!(", compute copy {}", bytes(self.compute_copy)) } else { String::new() },
            bytes(self.activations),
            bytes(self.logits),
            if self.average > 0 { format!(", weight average {}", bytes(self.average)) } else { String::new() },
            bytes(self.total())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt2_small_logits_dominate_and_chunking_removes_them() {
        let config = Gpt2Config::preset("gpt2-small").unwrap();
        let plain = Gpt2MemoryEstimate::new(&config, 8, 1024, 4, None, Gpt2Attention::Burn);
        assert_eq!(plain.parameters, 124_439_808 * 4);
        assert_eq!(plain.optimizer, 2 * plain.parameters);
        // 8 × 1024 tokens × 50,257 ids × 4 B × 3 copies.
        assert_eq!(plain.logits, 3 * 8 * 1024 * 50_257 * 4);
        let chunked = Gpt2MemoryEstimate::new(&config, 8, 1024, 4, Some(1024), Gpt2Attention::Burn);
        assert_eq!(chunked.logits, (3 * 1024 * 50_257 + 8 * 1024 * 768 + 50_257 * 768) * 4);
        assert!(chunked.total() + 4_000_000_000 < plain.total());
        // A chunk as large as the batch is one chunk of the fused loss: the full logits'
        // copies and the retained gradients (the CPU's default at 512 tokens).
        let one_chunk = Gpt2MemoryEstimate::new(&config, 8, 1024, 4, Some(8192), Gpt2Attention::Burn);
        assert_eq!(one_chunk.logits, plain.logits + (8 * 1024 * 768 + 50_257 * 768) * 4);
        assert_eq!(Gpt2MemoryEstimate::new(&config, 8, 1024, 4, Some(0), Gpt2Attention::Burn), plain);
    }

    #[test]
    fn a_chunk_is_chosen_only_where_it_saves_memory() {
        let small = Gpt2Config::preset("gpt2-small").unwrap();
        assert_eq!(Gpt2MemoryEstimate::loss_chunk_that_saves(&small, 8, 1024, 4, 1024), Some(1024));
        // As many tokens as a chunk: chunking only adds the retained gradients.
        assert_eq!(Gpt2MemoryEstimate::loss_chunk_that_saves(&small, 1, 1024, 4, 1024), None);
        // The main job on the CPU: gpt2-mini, 8 × 64 tokens in chunks of 128.
        let mini = Gpt2Config::preset("gpt2-mini").unwrap();
        assert_eq!(Gpt2MemoryEstimate::loss_chunk_that_saves(&mini, 8, 64, 4, 128), Some(128));
        assert_eq!(Gpt2MemoryEstimate::loss_chunk_that_saves(&mini, 8, 64, 4, 0), None);
    }

    const MIB: u64 = 1 << 20;

    #[test]
    fn pools_follow_cubecls_default_layout() {
        // llvmpipe: 128 MiB buffers at most.
        let llvmpipe = PoolPages::sub_slices(128 * MIB);
        assert_eq!(llvmpipe.pools(), vec![(8 * MIB, 2 * MIB), (32 * MIB, 16 * MIB), (128 * MIB, 128 * MIB)]);
        // Seven 12 MiB tensors: two to a 32 MiB page; one 3 MiB tensor in its own pool's
        // page; a 100 MiB tensor alone in a 128 MiB page.
        assert_eq!(llvmpipe.reserve_for(&[12 * MIB; 7]), 4 * 32 * MIB);
        assert_eq!(llvmpipe.reserve_for(&[3 * MIB]), 32 * MIB);
        assert_eq!(llvmpipe.reserve_for(&[100 * MIB, MIB, MIB]), 128 * MIB + 8 * MIB);
        assert_eq!(llvmpipe.reserve_for(&[]), 0);
        // Larger than any page: counted at its size.
        assert_eq!(llvmpipe.reserve_for(&[200 * MIB]), 200 * MIB);
    }

    /// The persistent part's rule, read from CubeCL's memory logger on llvmpipe since AdamW
    /// updates in place (docs/gpt2.md): four buffers per weight, one more of the embedding's
    /// size in f32, and every tensor of a weight's size.
    #[test]
    fn the_persistent_part_counts_four_buffers_per_weight_and_the_summed_embedding_gradient() {
        let config = Gpt2Config::preset("gpt2-mini").unwrap();
        let pages = PoolPages::sub_slices(128 * MIB);
        let reserve = Gpt2PoolReserve::new(&config, (8, 64), 4, Some(256), Gpt2Attention::Lean, pages);
        let masters = 4 * 4 * config.parameter_count() as u64;
        let embedding = config.padded_vocab() as u64 * 128 * 4;
        // At 4 × 64 tokens no activation has a weight's size.
        let apart = Gpt2PoolReserve::new(&config, (4, 64), 4, Some(256), Gpt2Attention::Lean, pages);
        assert_eq!(apart.persistent, masters + embedding);
        // At 8 × 64, [tokens, d] is [d, 4d]'s size: the layers' 9 and the 4 in flight
        // and the hidden states' gradient join the persistent part.
        assert_eq!(reserve.persistent, masters + embedding + (4 * 9 + 4 + 1) * 512 * 128 * 4);
        // The largest tensor: a chunk's logits with the fused loss, all the logits without.
        assert_eq!(reserve.largest_tensor, 256 * config.padded_vocab() as u64 * 4);
        let full_logits = Gpt2PoolReserve::new(&config, (8, 128), 4, None, Gpt2Attention::Lean, pages);
        assert_eq!(full_logits.largest_tensor, 8 * 128 * config.padded_vocab() as u64 * 4);
        // The full logits change only the pages (no tensor of theirs has a weight's size).
        let full = Gpt2PoolReserve::new(&config, (4, 64), 4, None, Gpt2Attention::Lean, pages);
        assert_eq!(full.persistent, apart.persistent);
        assert!(full.paged > apart.paged);
        // A weight average adds one buffer per weight, and nothing paged.
        let averaged = apart.with_weight_average();
        assert_eq!(averaged.persistent, apart.persistent + 4 * config.parameter_count() as u64);
        assert_eq!(averaged.paged, apart.paged);
    }

    #[test]
    fn half_precision_keeps_f32_masters_and_halves_what_the_step_computes() {
        let config = Gpt2Config::preset("gpt2-mini").unwrap();
        let p = config.parameter_count() as u64;
        let (f32, half) = (
            Gpt2MemoryEstimate::new(&config, 8, 64, 4, Some(256), Gpt2Attention::Lean),
            Gpt2MemoryEstimate::new(&config, 8, 64, 2, Some(256), Gpt2Attention::Lean),
        );
        assert_eq!((half.parameters, half.gradients, half.optimizer), (4 * p, 4 * p, 8 * p));
        assert_eq!((f32.parameters, f32.gradients, f32.optimizer), (4 * p, 4 * p, 8 * p));
        // The weights cast for the step and their gradients, in half precision only.
        assert_eq!((f32.compute_copy, half.compute_copy), (0, 2 * 2 * p));
        assert_eq!(2 * half.activations, f32.activations);
        assert_eq!(2 * half.logits, f32.logits);
        assert!(half.to_string().contains("compute copy") && !f32.to_string().contains("compute copy"));

        // The pool at 4 × 64: the masters are f32 in both. In half precision the
        // embedding's gradient is summed in the compute copy (paged), and three kinds of
        // tensor join the masters by size: a chunk's logits, [256, vocab] × 2 B (the f32
        // embedding's size), and the activations [tokens, d] and [tokens, 4d] at 2 B (the
        // f32 [d, d] and [d, 4d] weights'), each layer's and those in flight.
        let pages = PoolPages::sub_slices(128 * MIB);
        let reserve = |elem| Gpt2PoolReserve::new(&config, (4, 64), elem, Some(256), Gpt2Attention::Lean, pages);
        let (f32, half) = (reserve(4), reserve(2));
        let (masters, vocab) = (4 * 4 * p, config.padded_vocab() as u64);
        assert_eq!(f32.persistent, masters + vocab * 128 * 4);
        let activations = (4 * 9 + 4 + 1) * 256 * 128 * 2 + (4 * 2 + 2) * 256 * 512 * 2;
        assert_eq!(half.persistent, masters + 256 * vocab * 2 + activations);
        // The loss in f32: two [256, vocab] f32 buffers share a 128 MiB page, as in f32.
        assert_eq!(half.largest_tensor, f32.largest_tensor, "a chunk's f32 logits");
        assert_eq!(half.weight_bytes, f32.weight_bytes);
    }

    #[test]
    fn a_weight_average_adds_one_copy_of_the_parameters_to_the_estimate() {
        let config = Gpt2Config::preset("gpt2-small").unwrap();
        let plain = Gpt2MemoryEstimate::new(&config, 8, 1024, 4, Some(256), Gpt2Attention::Lean);
        let averaged = plain.with_weight_average();
        assert_eq!(plain.average, 0);
        assert_eq!(averaged.total() - plain.total(), 124_439_808 * 4);
        assert!(averaged.to_string().contains("weight average") && !plain.to_string().contains("weight average"));
    }

    #[test]
    fn activations_grow_with_tokens_and_with_burns_attention_quadratically_with_seq() {
        let config = Gpt2Config::preset("gpt2-mini").unwrap();
        let activations =
            |batch, seq, attention| Gpt2MemoryEstimate::new(&config, batch, seq, 4, None, attention).activations;
        for attention in [Gpt2Attention::Burn, Gpt2Attention::Lean] {
            assert_eq!(activations(8, 64, attention), 2 * activations(4, 64, attention));
        }
        assert!(activations(4, 128, Gpt2Attention::Burn) > 2 * activations(4, 64, Gpt2Attention::Burn));
        // leanburn's attention keeps no scores: linear in the tokens, whatever their split.
        assert_eq!(activations(4, 128, Gpt2Attention::Lean), activations(8, 64, Gpt2Attention::Lean));
        // gpt2-small at 8 × 1024: Burn's attention keeps 2.5 · 12 · 1024 floats per token
        // and layer on top of 17 · 768, leanburn's 12.
        let small = Gpt2Config::preset("gpt2-small").unwrap();
        let per_token_layer =
            |attention| Gpt2MemoryEstimate::new(&small, 8, 1024, 4, None, attention).activations / (12 * 8 * 1024 * 4);
        assert_eq!(per_token_layer(Gpt2Attention::Burn), 17 * 768 + 30_720);
        assert_eq!(per_token_layer(Gpt2Attention::Lean), 17 * 768 + 12);
    }
}
