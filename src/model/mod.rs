//! Models leanburn ships: small, deterministic ones for the examples and memory tests.

mod classification;
mod conv_classifier;
mod gpt2;
mod gpt2_loss_chunk;
mod gpt2_memory;
mod lm_head_loss;
mod loss_precision;
mod resnet;
mod small_cnn;

pub use classification::Evaluation;
pub use conv_classifier::{ConvBlock, ConvClassifier, ConvClassifierConfig};
pub use gpt2::{Gpt2, Gpt2Attention, Gpt2Config, Gpt2ConfigError, LanguageModelOutput, GPT2_PRESETS, GPT2_VOCAB};
pub use gpt2_loss_chunk::{
    default_loss_chunk, largest_chunk_within, LossChunkDevice, CPU_LOSS_CHUNK, CPU_SMALL_LOSS_CHUNK, GPU_LOSS_BUDGET,
    SMALL_LOSS_CHUNK,
};
pub use gpt2_memory::{token_embedding_bytes, Gpt2MemoryEstimate, Gpt2PoolReserve, PoolPages};
pub use lm_head_loss::{chunked_lm_head_loss, chunked_lm_head_token_losses, fused_lm_head_loss};
pub use loss_precision::logits_in_f32;
pub use resnet::{BasicBlock, ConvNorm, ResNet, ResNetConfig};
pub use small_cnn::{SmallCnn, SmallCnnConfig};
