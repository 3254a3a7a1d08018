//! GPT-2 as published (Radford et al., 2019), and nothing else.
//!
//! Token and position embeddings, `layers` pre-LayerNorm blocks (causal multi-head
//! self-attention, then a GELU MLP four times as wide, each around a residual), a final
//! LayerNorm, and an LM head tied to the token embedding: logits are `h · Wteᵀ`.
//!
//! Attention is leanburn's by default ([`lean_attention_packed`]: `lean_attention` on the
//! packed query/key/value projection): under autodiff one node that keeps no `T × T`
//! scores for the backward pass (it recomputes them block by block) and writes the packed
//! projection's gradient in one piece; without
//! autodiff it is Burn's `attention` op with `is_causal`, so a backend with a fused kernel
//! uses it (CubeCL's flash attention on the inner backend of predict steps).
//! [`Gpt2::with_attention`]`(Gpt2Attention::Burn)` runs Burn's op everywhere, whose
//! autodiff form keeps the scores and the softmax of every layer.
//!
//! The loss is mean next-token cross-entropy. With [`Gpt2::with_loss_chunk`] it walks the
//! tokens a chunk at a time and never builds the full `tokens × vocab` logits: forward-only
//! steps free each chunk's logits, and training steps use the fused loss of
//! [`lm_head_loss`](super::lm_head_loss), which also keeps none for the backward pass.

use crate::backend::{
    bias_gelu, exact_gelu, layer_norm, lean_attention_packed, linear, residual_linear, split_packed_heads,
    TransformerOps,
};
use burn::module::{Initializer, Module};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Dropout, DropoutConfig, Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::train::metric::ItemLazy;
use burn::train::{InferenceStep, TrainOutput, TrainStep};

use crate::trainer::{ExampleLosses, ForwardLoss};

use super::lm_head_loss::{chunked_lm_head_loss, chunked_lm_head_token_losses, fused_lm_head_loss};
use crate::data::{HostBatch, TokenBatch};
use crate::init::materialize_persistent;
use crate::trainer::StepLoss;

/// The GPT-2 vocabulary (`r50k_base`): 50,000 merges, 256 bytes, `<|endoftext|>`.
pub const GPT2_VOCAB: usize = 50_257;

/// Initial standard deviation of every weight matrix and embedding, as in GPT-2.
const INIT_STD: f64 = 0.02;

/// Shape of a GPT-2 model. Build one from a [preset](Gpt2Config::preset) or field by field.
#[derive(Config, Debug, PartialEq)]
pub struct Gpt2Config {
    /// Tokens in the vocabulary (before padding).
    pub vocab_size: usize,
    /// Longest sequence the position embedding covers.
    pub context: usize,
    /// Transformer blocks.
    pub layers: usize,
    /// Width of the residual stream.
    pub d_model: usize,
    /// Attention heads; must divide `d_model`.
    pub heads: usize,
    /// Round the vocabulary up to a multiple of this (`1` = no padding). GPUs run the LM
    /// head's matmul faster on a multiple of 64 (50,257 → 50,304); the extra rows are
    /// never a target and learn to stay improbable.
    #[config(default = 1)]
    pub pad_vocab_to: usize,
    /// Dropout on embeddings, attention output and MLP output (GPT-2 used 0.1).
    #[config(default = 0.0)]
    pub dropout: f64,
    /// LayerNorm epsilon.
    #[config(default = 1e-5)]
    pub layer_norm_eps: f64,
}

/// The presets [`Gpt2Config::preset`] knows, smallest first.
pub const GPT2_PRESETS: [&str; 4] = ["gpt2-tiny", "gpt2-mini", "gpt2-micro", "gpt2-small"];

/// What is wrong with a GPT-2 configuration.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Gpt2ConfigError {
    /// The preset name is not one of [`GPT2_PRESETS`].
    #[error("unknown GPT-2 preset `{0}`; known presets: {known}", known = GPT2_PRESETS.join(", "))]
    UnknownPreset(String),
    /// A size is zero.
    #[error("GPT-2 `{0}` must be at least 1")]
    Zero(&'static str),
    /// `heads` does not divide `d_model`.
    #[error("GPT-2 width {d_model} is not divisible by {heads} heads")]
    Heads { d_model: usize, heads: usize },
    /// Dropout outside `[0, 1)`.
    #[error("GPT-2 dropout {0} is outside [0, 1)")]
    Dropout(f64),
}

impl Gpt2Config {
    /// A named preset:
    ///
    /// | preset | layers | width | heads | context | parameters |
    /// |---|---|---|---|---|---|
    /// | `gpt2-tiny` | 2 | 64 | 2 | 64 | 3,320,640 (tests) |
    /// | `gpt2-mini` | 4 | 128 | 4 | 128 | 7,242,624 (CPU default) |
    /// | `gpt2-micro` | 6 | 384 | 6 | 256 | 30,044,544 |
    /// | `gpt2-small` | 12 | 768 | 12 | 1024 | 124,439,808 (GPT-2 "small") |
    ///
    /// All use the full 50,257-token vocabulary, so the embedding dominates the small ones.
    pub fn preset(name: &str) -> Result<Self, Gpt2ConfigError> {
        let (layers, d_model, heads, context) = match name {
            "gpt2-tiny" => (2, 64, 2, 64),
            "gpt2-mini" => (4, 128, 4, 128),
            "gpt2-micro" => (6, 384, 6, 256),
            "gpt2-small" => (12, 768, 12, 1024),
            other => return Err(Gpt2ConfigError::UnknownPreset(other.to_string())),
        };
        Ok(Self::new(GPT2_VOCAB, context, layers, d_model, heads))
    }

    /// Checks every size; [`init`](Self::init) panics on what this rejects.
    pub fn validate(&self) -> Result<(), Gpt2ConfigError> {
        for (name, value) in [
            ("vocab_size", self.vocab_size),
            ("context", self.context),
            ("layers", self.layers),
            ("d_model", self.d_model),
            ("heads", self.heads),
            ("pad_vocab_to", self.pad_vocab_to),
        ] {
            if value == 0 {
                return Err(Gpt2ConfigError::Zero(name));
            }
        }
        if !self.d_model.is_multiple_of(self.heads) {
            return Err(Gpt2ConfigError::Heads { d_model: self.d_model, heads: self.heads });
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(Gpt2ConfigError::Dropout(self.dropout));
        }
        Ok(())
    }

    /// Rows of the token embedding (and columns of the logits): the vocabulary rounded up
    /// to a multiple of `pad_vocab_to`.
    pub fn padded_vocab(&self) -> usize {
        self.vocab_size.div_ceil(self.pad_vocab_to.max(1)) * self.pad_vocab_to.max(1)
    }

    /// Trainable parameters, counted from the shapes without building the model.
    pub fn parameter_count(&self) -> usize {
        self.parameter_tensors().iter().sum()
    }

    /// The elements of each parameter tensor, in the model's order: the token and position
    /// embeddings, each block's layer norm, attention (`qkv`, `projection`, weights then
    /// biases), layer norm and MLP (`expand`, `project`), and the final layer norm.
    pub(crate) fn parameter_tensors(&self) -> Vec<usize> {
        let (d, v) = (self.d_model, self.padded_vocab());
        let layer_norm = [d, d];
        let block =
            [&layer_norm[..], &[d * 3 * d, 3 * d, d * d, d], &layer_norm, &[d * 4 * d, 4 * d, 4 * d * d, d]].concat();
        let mut tensors = vec![v * d, self.context * d];
        for _ in 0..self.layers {
            tensors.extend_from_slice(&block);
        }
        tensors.extend_from_slice(&layer_norm);
        tensors
    }

    /// Builds the model with GPT-2's initialisation: weights `N(0, 0.02)`, residual output
    /// projections `N(0, 0.02/√(2·layers))`, LayerNorm `γ = 1, β = 0`. The weights are
    /// drawn now, not lazily, so clones share them, and sit in the device's persistent
    /// memory (see [`materialize_persistent`]).
    ///
    /// # Panics
    /// If [`validate`](Self::validate) fails.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Gpt2<B> {
        if let Err(error) = self.validate() {
            panic!("{error}");
        }
        let d = self.d_model;
        let normal = |std| Initializer::Normal { mean: 0.0, std };
        let residual_std = INIT_STD / (2.0 * self.layers as f64).sqrt();
        let linear = |d_in, d_out, std| LinearConfig::new(d_in, d_out).with_initializer(normal(std)).init(device);
        let norm = || LayerNormConfig::new(d).with_epsilon(self.layer_norm_eps).init(device);
        let dropout = || DropoutConfig::new(self.dropout).init();
        let blocks = (0..self.layers)
            .map(|_| Block {
                attention_norm: norm(),
                attention: CausalSelfAttention {
                    qkv: linear(d, 3 * d, INIT_STD),
                    projection: linear(d, d, residual_std),
                    heads: self.heads,
                    dropout: dropout(),
                    lean: true,
                },
                mlp_norm: norm(),
                mlp: Mlp {
                    expand: linear(d, 4 * d, INIT_STD),
                    project: linear(4 * d, d, residual_std),
                    dropout: dropout(),
                    burn_gelu: false,
                },
            })
            .collect();
        let model = Gpt2 {
            token_embedding: EmbeddingConfig::new(self.padded_vocab(), d)
                .with_initializer(normal(INIT_STD))
                .init(device),
            position_embedding: EmbeddingConfig::new(self.context, d).with_initializer(normal(INIT_STD)).init(device),
            blocks,
            final_norm: norm(),
            dropout: dropout(),
            context: self.context,
            vocab_size: self.vocab_size,
            loss_chunk: 0,
            layer_norm_eps: self.layer_norm_eps,
        };
        materialize_persistent(model)
    }
}

/// GPT-2; see the module docs (`src/model/gpt2.rs`).
#[derive(Module, Debug)]
pub struct Gpt2<B: Backend> {
    token_embedding: Embedding<B>,
    position_embedding: Embedding<B>,
    blocks: Vec<Block<B>>,
    final_norm: LayerNorm<B>,
    dropout: Dropout,
    context: usize,
    vocab_size: usize,
    /// Tokens per loss chunk; 0 for the whole logits tensor at once.
    loss_chunk: usize,
    /// Every LayerNorm's ε (Burn's `LayerNorm` keeps its own private).
    layer_norm_eps: f64,
}

#[derive(Module, Debug)]
struct Block<B: Backend> {
    attention_norm: LayerNorm<B>,
    attention: CausalSelfAttention<B>,
    mlp_norm: LayerNorm<B>,
    mlp: Mlp<B>,
}

/// Multi-head self-attention with one fused query/key/value projection, as GPT-2's `c_attn`.
#[derive(Module, Debug)]
struct CausalSelfAttention<B: Backend> {
    qkv: Linear<B>,
    projection: Linear<B>,
    heads: usize,
    dropout: Dropout,
    /// leanburn's attention (true) or Burn's `attention` op; see [`Gpt2Attention`].
    lean: bool,
}

/// Which attention a [`Gpt2`] runs ([`Gpt2::with_attention`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Gpt2Attention {
    /// leanburn's `lean_attention`: under autodiff, a graph node that keeps q, k, v, the
    /// output and a log-sum-exp per row, and recomputes the scores tile by tile in the
    /// backward pass (fused kernels on the CubeCL backends, blocks of tensor ops
    /// elsewhere); without autodiff, Burn's op. (Plain text: clap prints it in `--help`.)
    #[default]
    Lean,
    /// Burn's `attention` op: under autodiff `attention_fallback`, which keeps the scores
    /// and the softmax of every layer for the backward pass.
    Burn,
}

#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    expand: Linear<B>,
    project: Linear<B>,
    dropout: Dropout,
    /// Burn's `gelu` op instead of [`exact_gelu`]: the parity test's control only (on
    /// CubeCL and ndarray its backward is the tanh approximation's derivative).
    burn_gelu: bool,
}

impl<B: TransformerOps> CausalSelfAttention<B> {
    /// `[batch · seq, d]` → the heads' outputs `[batch · seq, d]` before the output
    /// projection, each position seeing itself and earlier ones of its own sequence (rows
    /// `b · seq .. (b + 1) · seq` are sequence `b`).
    fn context(&self, x: Tensor<B, 2>, [batch, seq]: [usize; 2]) -> Tensor<B, 2> {
        let d = x.dims()[1];
        // One graph node whose backward is one op (`backend::linear`).
        let qkv = linear(x, self.qkv.weight.val(), self.qkv.bias.as_ref().map(|bias| bias.val()));
        if self.lean {
            // One graph node from the packed projection to the heads' outputs in token
            // rows: its backward writes `qkv`'s gradient once, not as three slices'
            // gradients summed.
            return lean_attention_packed(qkv, [batch, seq], self.heads, true);
        }
        let [query, key, value] = split_packed_heads(qkv, [batch, seq, self.heads]);
        let options = AttentionModuleOptions { is_causal: true, ..Default::default() };
        attention(query, key, value, None, None, options).swap_dims(1, 2).reshape([batch * seq, d])
    }
}

impl<B: TransformerOps> Mlp<B> {
    /// The activations before the projection back to `d`. The expansion's bias is added by
    /// [`bias_gelu`] (one op with the GELU where the backend has leanburn's kernels).
    fn hidden(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        if self.burn_gelu {
            burn::tensor::activation::gelu(self.expand.forward(x))
        } else {
            let x = linear(x, self.expand.weight.val(), None);
            match &self.expand.bias {
                Some(bias) => bias_gelu(x, bias.val()),
                None => exact_gelu(x),
            }
        }
    }
}

impl<B: TransformerOps> Block<B> {
    /// Token rows `[batch · seq, d]`: every layer but attention treats tokens one by one, so
    /// the linear layers multiply one `[batch · seq, d_in]` matrix (a single GEMM for each
    /// gradient too, where `[batch, seq, d_in]` inputs make Burn's weight gradient `batch`
    /// GEMMs over `seq` rows and a sum over their `[batch, d_in, d_out]` results).
    /// LayerNorm is leanburn's (`backend::layer_norm`: one graph node, one op backward).
    /// Each branch's last linear layer and the residual's add are one op where the
    /// dropout after the layer does nothing ([`residual_add`]).
    fn forward(&self, x: Tensor<B, 2>, sequences: [usize; 2], epsilon: f64) -> Tensor<B, 2> {
        let attention = &self.attention;
        let context = attention.context(layer_norm(&self.attention_norm, x.clone(), epsilon), sequences);
        let x = residual_add(x, context, &attention.projection, &attention.dropout);
        let hidden = self.mlp.hidden(layer_norm(&self.mlp_norm, x.clone(), epsilon));
        residual_add(x, hidden, &self.mlp.project, &self.mlp.dropout)
    }
}

/// `x + dropout(linear(input))`: [`residual_linear`] (one op, one graph node) where the
/// dropout does nothing (probability 0, or no autodiff), else the three ops.
fn residual_add<B: TransformerOps>(
    x: Tensor<B, 2>,
    input: Tensor<B, 2>,
    linear: &Linear<B>,
    dropout: &Dropout,
) -> Tensor<B, 2> {
    if dropout.prob == 0.0 || !B::ad_enabled(&x.device()) {
        residual_linear(x, input, linear)
    } else {
        x + dropout.forward(linear.forward(input))
    }
}

impl<B: TransformerOps> Gpt2<B> {
    /// Token ids `[batch, seq]` → final hidden states `[batch, seq, d_model]`.
    ///
    /// # Panics
    /// If `seq` exceeds the context length.
    pub fn hidden(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        let [batch, seq] = tokens.dims();
        assert!(seq <= self.context, "sequence of {seq} tokens exceeds the model's context of {}", self.context);
        let device = tokens.device();
        let positions = Tensor::<B, 1, Int>::arange(0..seq as i64, &device).reshape([1, seq]).expand([batch, seq]);
        let x = self.token_embedding.forward(tokens) + self.position_embedding.forward(positions);
        let d = x.dims()[2];
        let x = self.dropout.forward(x).reshape([batch * seq, d]);
        let epsilon = self.layer_norm_eps;
        let x = self.blocks.iter().fold(x, |x, block| block.forward(x, [batch, seq], epsilon));
        layer_norm(&self.final_norm, x, epsilon).reshape([batch, seq, d])
    }

    /// Hidden states `[batch, seq, d]` → logits `[batch, seq, padded vocab]` through the
    /// tied LM head.
    pub fn logits(&self, hidden: Tensor<B, 3>) -> Tensor<B, 3> {
        let [batch, seq, d] = hidden.dims();
        // One `[tokens, d] · [d, vocab]` GEMM: a broadcast `[1, d, vocab]` right-hand side
        // would make its gradient `batch` partial `[d, vocab]` products and their sum.
        let logits = hidden.reshape([batch * seq, d]).matmul(self.token_embedding.weight.val().transpose());
        let vocab = logits.dims()[1];
        logits.reshape([batch, seq, vocab])
    }

    /// Token ids `[batch, seq]` → logits `[batch, seq, padded vocab]`.
    pub fn forward(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        self.logits(self.hidden(tokens))
    }

    /// Mean next-token cross-entropy of `targets` (`[batch, seq]`) given `inputs`.
    pub fn loss(&self, inputs: Tensor<B, 2, Int>, targets: Tensor<B, 2, Int>) -> Tensor<B, 1> {
        cross_entropy(self.forward(inputs), targets)
    }

    /// The same loss with the LM head run over `chunk` tokens at a time (see
    /// [`chunked_lm_head_loss`]): a forward-only pass never holds more than
    /// `chunk × vocab` logits. Under autodiff, [`TrainStep`] uses the fused variant instead.
    ///
    /// # Panics
    /// If `chunk` is 0.
    pub fn loss_chunked(&self, inputs: Tensor<B, 2, Int>, targets: Tensor<B, 2, Int>, chunk: usize) -> Tensor<B, 1> {
        let (hidden, targets) = flatten_tokens(self.hidden(inputs), targets);
        chunked_lm_head_loss(hidden, self.token_embedding.weight.val(), targets, chunk)
    }

    /// Runs `kind` of attention in every layer (default [`Gpt2Attention::Lean`]).
    pub fn with_attention(mut self, kind: Gpt2Attention) -> Self {
        for block in &mut self.blocks {
            block.attention.lean = kind == Gpt2Attention::Lean;
        }
        self
    }

    /// Burn's `gelu` op in every MLP instead of the exact GELU with its exact derivative:
    /// only for showing that `tests/parity/gpt2_parity/` catches Burn 0.21's tanh-approximation
    /// derivative (on CubeCL and ndarray).
    #[doc(hidden)]
    pub fn with_burn_gelu(mut self) -> Self {
        for block in &mut self.blocks {
            block.mlp.burn_gelu = true;
        }
        self
    }

    /// The attention every layer runs.
    pub fn attention(&self) -> Gpt2Attention {
        match self.blocks.first().is_none_or(|block| block.attention.lean) {
            true => Gpt2Attention::Lean,
            false => Gpt2Attention::Burn,
        }
    }

    /// Computes the loss in chunks of `chunk` tokens in every step (`None`: the whole
    /// logits tensor at once). See [`chunked_lm_head_loss`] and [`fused_lm_head_loss`].
    pub fn with_loss_chunk(mut self, chunk: Option<usize>) -> Self {
        self.loss_chunk = chunk.unwrap_or(0);
        self
    }

    /// Tokens per loss chunk, if the loss is chunked.
    pub fn loss_chunk(&self) -> Option<usize> {
        (self.loss_chunk > 0).then_some(self.loss_chunk)
    }

    /// Mean loss over host batches, each moved to `device` in turn, forward only. Run it on
    /// `model.valid()` so that no autodiff graph is built.
    pub fn evaluate(&self, batches: &[HostBatch], device: &B::Device) -> f64 {
        let total: f64 = batches
            .iter()
            .map(|batch| {
                let output = InferenceStep::step(self, batch.to_device::<B>(device));
                output.loss.into_scalar().elem::<f64>()
            })
            .sum();
        total / batches.len().max(1) as f64
    }

    /// Context length the position embedding covers.
    pub fn context(&self) -> usize {
        self.context
    }

    /// Tokens in the vocabulary (before padding).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }
}

/// Mean cross-entropy of logits `[batch, seq, vocab]` against ids `[batch, seq]`.
fn cross_entropy<B: Backend>(logits: Tensor<B, 3>, targets: Tensor<B, 2, Int>) -> Tensor<B, 1> {
    let [batch, seq, vocab] = logits.dims();
    let logits = super::logits_in_f32(logits.reshape([batch * seq, vocab]));
    CrossEntropyLossConfig::new().init(&logits.device()).forward(logits, targets.reshape([batch * seq]))
}

/// The loss of one language-model step and the tokens it covered.
#[derive(Debug, Clone)]
pub struct LanguageModelOutput<B: Backend> {
    /// Mean next-token cross-entropy, shape `[1]`.
    pub loss: Tensor<B, 1>,
    /// Target tokens the loss averages over.
    pub tokens: usize,
}

impl<B: Backend> ItemLazy for LanguageModelOutput<B> {
    /// The loss, read back.
    type ItemSync = f64;

    fn sync(self) -> f64 {
        self.loss.into_scalar().elem::<f64>()
    }
}

impl<B: Backend> StepLoss<B> for LanguageModelOutput<B> {
    fn loss(&self) -> Tensor<B, 1> {
        self.loss.clone()
    }
}

/// Hidden states `[batch, seq, d]` and targets `[batch, seq]` as `[tokens, d]` and `[tokens]`.
fn flatten_tokens<B: Backend>(hidden: Tensor<B, 3>, targets: Tensor<B, 2, Int>) -> (Tensor<B, 2>, Tensor<B, 1, Int>) {
    let [batch, seq, d] = hidden.dims();
    (hidden.reshape([batch * seq, d]), targets.reshape([batch * seq]))
}

/// Forward + backward on a token batch, for `HybridTrainer` and Burn's learners.
/// The mean next-token loss (the fused chunked LM head with `loss_chunk`), for the
/// trainer's mixed-precision steps; [`TrainStep`] back-propagates the same loss.
impl<B: AutodiffBackend + TransformerOps> ForwardLoss<B> for Gpt2<B> {
    type Input = TokenBatch<B>;

    fn forward_loss(&self, batch: TokenBatch<B>) -> Tensor<B, 1> {
        match self.loss_chunk() {
            Some(chunk) => {
                let (hidden, targets) = flatten_tokens(self.hidden(batch.inputs), batch.targets);
                fused_lm_head_loss(hidden, self.token_embedding.weight.val(), targets, chunk)
            }
            None => self.loss(batch.inputs, batch.targets),
        }
    }
}

impl<B: AutodiffBackend + TransformerOps> TrainStep for Gpt2<B> {
    type Input = TokenBatch<B>;
    type Output = LanguageModelOutput<B>;

    fn step(&self, batch: TokenBatch<B>) -> TrainOutput<LanguageModelOutput<B>> {
        let tokens = batch.tokens();
        let loss = self.forward_loss(batch);
        let grads = loss.backward();
        TrainOutput::new(self, grads, LanguageModelOutput { loss, tokens })
    }
}

/// Each sequence's mean token loss, forward only (selection scores on the inner model),
/// through the chunked LM head (one chunk of the whole batch without `loss_chunk`).
impl<B: TransformerOps> ExampleLosses<B> for Gpt2<B> {
    type Input = TokenBatch<B>;

    fn example_losses(&self, batch: TokenBatch<B>) -> Tensor<B, 1> {
        let [sequences, seq] = batch.inputs.dims();
        let chunk = self.loss_chunk().unwrap_or(sequences * seq);
        let (hidden, targets) = flatten_tokens(self.hidden(batch.inputs), batch.targets);
        let tokens = chunked_lm_head_token_losses(hidden, self.token_embedding.weight.val(), targets, chunk);
        tokens.reshape([sequences, seq]).mean_dim(1).reshape([sequences])
    }
}

/// Forward only, on any backend (predict and evaluation steps run it on the inner one).
impl<B: TransformerOps> InferenceStep for Gpt2<B> {
    type Input = TokenBatch<B>;
    type Output = LanguageModelOutput<B>;

    fn step(&self, batch: TokenBatch<B>) -> LanguageModelOutput<B> {
        let tokens = batch.tokens();
        let loss = match self.loss_chunk() {
            Some(chunk) => self.loss_chunked(batch.inputs, batch.targets, chunk),
            None => self.loss(batch.inputs, batch.targets),
        };
        LanguageModelOutput { loss, tokens }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};

    type Cpu = Flex;

    #[test]
    fn gpt2_small_has_the_published_parameter_count() {
        let config = Gpt2Config::preset("gpt2-small").unwrap();
        assert_eq!(config.parameter_count(), 124_439_808);
        // The figures in `Gpt2Config::preset`'s table.
        let counts: Vec<usize> =
            GPT2_PRESETS.iter().map(|name| Gpt2Config::preset(name).unwrap().parameter_count()).collect();
        assert_eq!(counts, [3_320_640, 7_242_624, 30_044_544, 124_439_808]);
        assert_eq!(config.clone().with_pad_vocab_to(64).padded_vocab(), 50_304);
    }

    #[test]
    fn counted_parameters_match_a_built_model() {
        let device = Default::default();
        for config in [Gpt2Config::new(97, 16, 3, 24, 3), Gpt2Config::new(101, 8, 1, 16, 2).with_pad_vocab_to(64)] {
            let model = config.init::<Cpu>(&device);
            assert_eq!(model.num_params(), config.parameter_count(), "{config:?}");
        }
    }

    #[test]
    fn bad_configs_are_typed_errors() {
        assert_eq!(Gpt2Config::preset("gpt2-huge"), Err(Gpt2ConfigError::UnknownPreset("gpt2-huge".into())));
        assert_eq!(Gpt2Config::new(10, 8, 1, 10, 3).validate(), Err(Gpt2ConfigError::Heads { d_model: 10, heads: 3 }));
        assert_eq!(Gpt2Config::new(10, 0, 1, 8, 2).validate(), Err(Gpt2ConfigError::Zero("context")));
        assert!(Gpt2Config::new(10, 8, 1, 8, 2).with_dropout(1.0).validate().is_err());
        for name in GPT2_PRESETS {
            Gpt2Config::preset(name).unwrap().validate().unwrap();
        }
    }

    fn tokens(batch: usize, seq: usize, vocab: usize, salt: usize) -> Tensor<Cpu, 2, Int> {
        let ids: Vec<i64> = (0..batch * seq).map(|i| ((i * 7 + salt * 13) % vocab) as i64).collect();
        Tensor::from_data(TensorData::new(ids, [batch, seq]), &Default::default())
    }

    #[test]
    fn attention_is_causal() {
        let config = Gpt2Config::new(50, 16, 2, 16, 2);
        let model = config.init::<Cpu>(&Default::default());
        let a = tokens(1, 10, 50, 0);
        // Same first 6 tokens, different last 4.
        let b = Tensor::cat(vec![a.clone().narrow(1, 0, 6), tokens(1, 4, 50, 5)], 1);
        let (la, lb) = (model.forward(a), model.forward(b));
        la.clone()
            .narrow(1, 0, 6)
            .into_data()
            .assert_approx_eq::<f32>(&lb.clone().narrow(1, 0, 6).into_data(), Default::default());
        let later = (la.narrow(1, 6, 4) - lb.narrow(1, 6, 4)).abs().max().into_scalar();
        assert!(later > 1e-4, "later positions must see the changed tokens ({later})");
    }

    #[test]
    fn sequences_of_a_batch_do_not_see_each_other() {
        // The blocks run on `[batch · seq, d]` token rows: each sequence's logits must be
        // those it has alone (a row order that mixed sequences would change them).
        let config = Gpt2Config::new(50, 16, 2, 16, 2);
        let model = config.init::<Cpu>(&Default::default());
        let batch = tokens(3, 10, 50, 7);
        let together = model.forward(batch.clone());
        for b in 0..3 {
            let alone = model.forward(batch.clone().narrow(0, b, 1));
            together
                .clone()
                .narrow(0, b, 1)
                .into_data()
                .assert_approx_eq::<f32>(&alone.into_data(), burn::tensor::Tolerance::absolute(1e-5));
        }
    }

    #[test]
    fn chunked_loss_equals_the_full_loss() {
        let config = Gpt2Config::new(61, 16, 1, 16, 2).with_pad_vocab_to(64);
        let model = config.init::<Cpu>(&Default::default());
        let (inputs, targets) = (tokens(3, 11, 61, 1), tokens(3, 11, 61, 2));
        let full = model.loss(inputs.clone(), targets.clone()).into_scalar();
        for chunk in [1, 3, 4, 11, 50] {
            let chunked = model.loss_chunked(inputs.clone(), targets.clone(), chunk).into_scalar();
            assert!((full - chunked).abs() < 1e-5, "chunk {chunk}: {chunked} vs {full}");
        }
        // An untrained model is close to uniform over the padded vocabulary.
        assert!((full - (64f32).ln()).abs() < 0.3, "initial loss {full}");
    }

    #[test]
    fn a_chunked_train_step_has_the_same_loss_and_gradients() {
        type Ad = Autodiff<Cpu>;
        let config = Gpt2Config::new(40, 8, 1, 8, 2);
        let model = config.init::<Ad>(&Default::default());
        let batch = || TokenBatch::<Ad> {
            inputs: Tensor::from_inner(tokens(2, 8, 40, 3)),
            targets: Tensor::from_inner(tokens(2, 8, 40, 4)),
        };
        let run = |model: Gpt2<Ad>| {
            let output = TrainStep::step(&model, batch());
            let grad: Tensor<Cpu, 2> = output.grads.get(model.token_embedding.weight.id).unwrap();
            let qkv: Tensor<Cpu, 2> = output.grads.get(model.blocks[0].attention.qkv.weight.id).unwrap();
            (output.item.loss.into_scalar(), grad, qkv)
        };
        // `init` materialises the weights, so the clone is the same model.
        let (loss, grad, qkv) = run(model.clone());
        let (chunked_loss, chunked_grad, chunked_qkv) = run(model.with_loss_chunk(Some(3)));
        assert!((loss - chunked_loss).abs() < 1e-5, "{loss} vs {chunked_loss}");
        let tolerance = burn::tensor::Tolerance::absolute(1e-6);
        grad.into_data().assert_approx_eq::<f32>(&chunked_grad.into_data(), tolerance);
        qkv.into_data().assert_approx_eq::<f32>(&chunked_qkv.into_data(), tolerance);
    }

    #[test]
    fn leanburns_attention_trains_like_burns() {
        type Ad = Autodiff<Cpu>;
        let config = Gpt2Config::new(40, 12, 2, 16, 2);
        let model = config.init::<Ad>(&Default::default());
        assert_eq!(model.attention(), Gpt2Attention::Lean, "the default");
        let batch = || TokenBatch::<Ad> {
            inputs: Tensor::from_inner(tokens(2, 12, 40, 5)),
            targets: Tensor::from_inner(tokens(2, 12, 40, 6)),
        };
        let run = |model: Gpt2<Ad>| {
            let output = TrainStep::step(&model, batch());
            let qkv: Tensor<Cpu, 2> = output.grads.get(model.blocks[1].attention.qkv.weight.id).unwrap();
            (output.item.loss.into_scalar(), qkv)
        };
        let (lean_loss, lean_qkv) = run(model.clone());
        let burn_model = model.with_attention(Gpt2Attention::Burn);
        assert_eq!(burn_model.attention(), Gpt2Attention::Burn);
        let (burn_loss, burn_qkv) = run(burn_model);
        assert!((lean_loss - burn_loss).abs() < 1e-5, "{lean_loss} vs {burn_loss}");
        let tolerance = burn::tensor::Tolerance::absolute(1e-5);
        lean_qkv.into_data().assert_approx_eq::<f32>(&burn_qkv.into_data(), tolerance);
    }
}
