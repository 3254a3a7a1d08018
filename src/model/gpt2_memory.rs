//! An estimate, before any allocation, of what training GPT-2 will hold on the device.
//!
//! The parts, in elements of `elem_bytes` each:
//!
//! - **parameters** `P` ([`Gpt2Config::parameter_count`]), **gradients** `P`, and
//!   **optimizer state** `2P` (Adam's two moments);
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
//! It is an estimate: allocator pages, kernel workspaces and fragmentation come on top,
//! and backends differ in what they keep. `examples/gpt2_small_hybrid.rs` prints it before
//! training and refuses to start when it exceeds the device's memory.

use std::fmt;

use super::gpt2::{Gpt2Attention, Gpt2Config};
use crate::memory::format_bytes;

/// Estimated device bytes of one GPT-2 training step; see the [module docs](self).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gpt2MemoryEstimate {
    /// Weights.
    pub parameters: u64,
    /// One gradient per weight.
    pub gradients: u64,
    /// Adam's first and second moments.
    pub optimizer: u64,
    /// What the transformer blocks keep for the backward pass.
    pub activations: u64,
    /// The LM head's logits and what the loss keeps of them.
    pub logits: u64,
}

impl Gpt2MemoryEstimate {
    /// The estimate for `batch × seq` tokens per step, `elem_bytes` per float, an
    /// optional loss chunk (tokens per chunk), and the attention the model runs.
    pub fn new(
        config: &Gpt2Config,
        batch: usize,
        seq: usize,
        elem_bytes: usize,
        loss_chunk: Option<usize>,
        attention: Gpt2Attention,
    ) -> Self {
        let elem = elem_bytes as f64;
        let params = config.parameter_count() as f64 * elem;
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
            activations: activations as u64,
            logits: logits as u64,
        }
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
        self.parameters + self.gradients + self.optimizer + self.activations + self.logits
    }

    /// What a forward-only step (predict or evaluation) adds on top of parameters and
    /// optimizer state: it keeps no activations for a backward pass, so roughly one
    /// layer's worth plus the logits (one copy, or one chunk).
    pub fn forward_only(&self, config: &Gpt2Config) -> u64 {
        let layers = config.layers.max(1) as u64;
        self.activations / layers + self.logits / 3
    }
}

impl fmt::Display for Gpt2MemoryEstimate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = |b: u64| format_bytes(b as f64);
        write!(
            f,
            "parameters {}, gradients {}, optimizer state {}, activations {}, logits {}: total {}",
            bytes(self.parameters),
            bytes(self.gradients),
            bytes(self.optimizer),
            bytes(self.activations),
            bytes(self.logits),
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
