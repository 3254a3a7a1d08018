//! leanburn computes what its references compute: each module checks one part against an
//! independent one, with a control that the same comparison catches.
//!
//! - `gpt2_parity`: GPT-2 against PyTorch (transformers' `GPT2LMHeadModel`): logits, loss,
//!   every gradient and ten AdamW steps, on Flex, ndarray and wgpu; `bf16`: bf16 training
//!   against PyTorch's bf16 autocast.
//! - `gelu_derivative`: `exact_gelu`'s gradient against finite differences (Flex, ndarray,
//!   wgpu, `Lean`).
//! - `lean_training`: `Autodiff<Lean<B>>` trains an unmodified Burn model like
//!   `Autodiff<B>`.
//! - `hybrid_parity`: hybrid training ends within a stated margin of all-full training's
//!   validation loss.
//!
//! One binary (they were four until 2026-11-30): it links and instantiates Burn's generics
//! once (docs/ci.md). None of them reads the device pool or changes a process-wide setting,
//! so they run side by side as libtest schedules them.

#[path = "../common/mod.rs"]
mod common;

mod gelu_derivative;
mod gpt2_parity;
mod hybrid_parity;
mod lean_training;
