//! Text data for language-model training: a corpus on disk to batches on the device;
//! [`ShapeSampler`], generated images of shapes for the conv-net example; and
//! [`IdxImages`], labelled images in MNIST's IDX format.
//!
//! ```text
//!  files ──Corpus──▶ host text ──Gpt2Tokenizer──▶ host tokens (Vec<u32>)
//!                                                   │ TokenDataset::split
//!                                                   ▼
//!                                  train tokens  ·  validation tokens
//!                                                   │ WindowSampler::sample,
//!                                                   │ evaluation_windows
//!                                                   ▼
//!                    HostBatch ([batch, seq_len] i64) ──to_device──▶ TokenBatch
//! ```
//!
//! Everything up to [`HostBatch`] lives in host memory: the dataset never lives on the
//! device. Only the batch about to be used is copied there, as a [`TokenBatch`] of two
//! `[batch, seq_len]` integer tensors, so device memory holds one batch of tokens
//! whatever the corpus size.
//!
//! - [`Corpus`]: a UTF-8 file or a directory of text files, or by default the `.rs` and
//!   `.md` sources in the Cargo registry.
//! - [`CorpusFingerprint`]: what a run trained on (files, bytes, the text's SHA-256, the
//!   tokenizer), so that a resumed run can refuse different text.
//! - [`Gpt2Tokenizer`]: GPT-2's BPE (`r50k_base`, 50 257 tokens), embedded, so offline.
//! - [`TokenDataset`]: the token stream cut into a training part and a held-out
//!   validation part.
//! - [`WindowSampler`]: seeded random windows for training; [`evaluation_windows`]: fixed
//!   windows for a stable validation loss.
//! - [`TokenBatch`] implements the trainer's [`HybridBatch`](crate::trainer::HybridBatch),
//!   counting tokens as items.

mod batcher;
mod corpus;
mod dataset;
mod error;
mod fingerprint;
mod idx;
mod info_batch;
mod shapes;
mod split;
mod tokenizer;

pub use batcher::{evaluation_windows, HostBatch, TokenBatch, WindowSampler};
pub use corpus::{cargo_registry_dir, Corpus, CorpusSource};
pub use dataset::TokenDataset;
pub use error::DataError;
pub use fingerprint::CorpusFingerprint;
pub use idx::{IdxImages, IdxSampler};
pub use info_batch::{InfoBatch, InfoBatchConfig, InfoBatchCount};
pub use shapes::{shapes_dataset, shapes_validation, ImageBatch, ShapeBatcher, ShapeKind, ShapeSampler, SHAPE_CLASSES};
pub use split::Split;
pub use tokenizer::{Gpt2Tokenizer, END_OF_TEXT, GPT2_VOCAB_SIZE};
