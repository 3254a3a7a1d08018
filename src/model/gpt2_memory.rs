//! An estimate, before any allocation, of what training GPT-2 will hold on the device.
//!
//! The parts, in elements of `elem_bytes` each:
//!
//! - **parameters** `P` ([`Gpt2Config::parameter_count`]), **gradients** `P`, and
//!   **optimizer state** `2P` (Adam's two moments);
//! - **activations** the autodiff graph keeps for the backward pass, per layer and token
//!   `17·d + 2.5·heads·seq` (Korthikanti et al., 2022, "Reducing Activation Recomputation in
//!   Large Transformer Models", eq. 1, converted from bytes at 2 B per element);
//! - **logits**: the LM head's `tokens × vocab` logits, their log-softmax and its gradient
//!   (3 copies); with a loss chunk, three copies of `chunk × vocab` plus the fused loss's
//!   retained gradients `tokens × d + vocab × d`.
//!
//! It is an estimate: allocator pages, kernel workspaces and fragmentation come on top,
//! and backends differ in what they keep. `examples/gpt2_small_hybrid.rs` prints it before
//! training and refuses to start when it exceeds the device's memory.

use std::fmt;

use super::gpt2::Gpt2Config;
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
    /// The estimate for `batch × seq` tokens per step, `elem_bytes` per float, and an
    /// optional loss chunk (tokens per chunk).
    pub fn new(config: &Gpt2Config, batch: usize, seq: usize, elem_bytes: usize, loss_chunk: Option<usize>) -> Self {
        let elem = elem_bytes as f64;
        let params = config.parameter_count() as f64 * elem;
        let tokens = (batch * seq) as f64;
        let (d, heads, vocab) = (config.d_model as f64, config.heads as f64, config.padded_vocab() as f64);
        let per_token_layer = 17.0 * d + 2.5 * heads * seq as f64;
        let activations = config.layers as f64 * tokens * per_token_layer * elem;
        let logits = match loss_chunk {
            Some(chunk) if (chunk as f64) < tokens => (3.0 * chunk as f64 * vocab + tokens * d + vocab * d) * elem,
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
        let plain = Gpt2MemoryEstimate::new(&config, 8, 1024, 4, None);
        assert_eq!(plain.parameters, 124_439_808 * 4);
        assert_eq!(plain.optimizer, 2 * plain.parameters);
        // 8 × 1024 tokens × 50,257 ids × 4 B × 3 copies.
        assert_eq!(plain.logits, 3 * 8 * 1024 * 50_257 * 4);
        let chunked = Gpt2MemoryEstimate::new(&config, 8, 1024, 4, Some(1024));
        assert_eq!(chunked.logits, (3 * 1024 * 50_257 + 8 * 1024 * 768 + 50_257 * 768) * 4);
        assert!(chunked.total() + 4_000_000_000 < plain.total());
        // A chunk as large as the batch changes nothing.
        assert_eq!(Gpt2MemoryEstimate::new(&config, 8, 1024, 4, Some(8192)), plain);
    }

    #[test]
    fn activations_grow_with_tokens_and_quadratically_with_seq() {
        let config = Gpt2Config::preset("gpt2-mini").unwrap();
        let a = Gpt2MemoryEstimate::new(&config, 4, 64, 4, None).activations;
        let b = Gpt2MemoryEstimate::new(&config, 8, 64, 4, None).activations;
        let c = Gpt2MemoryEstimate::new(&config, 4, 128, 4, None).activations;
        assert_eq!(b, 2 * a);
        assert!(c > 2 * a);
    }
}
