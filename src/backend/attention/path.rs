//! Which attention `Lean<B>` trains with: the inner backend's fused kernels, or blocks of
//! query rows whose products run on `Lean`'s GEMMs.

use core::fmt;

use crate::backend::switch::{env_is, Switch};

/// How `Lean<B>` computes the training forward and backward of
/// [`lean_attention`](super::lean_attention).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttentionPath {
    /// The inner backend's fused kernels (leanburn-kernels' `attention` on the CubeCL
    /// backends: no `T × T` buffer, scalar f32 products) where it has them for the inputs,
    /// the blocks of [`AttentionPath::Gemm`] elsewhere. The default.
    Kernels,
    /// Blocks of query rows within [`attention_workspace`](super::attention_workspace):
    /// the scores, `P·V` and the backward's products on [`GemmOps::gemm`](crate::backend::GemmOps::gemm)
    /// (cuBLASLt's tensor cores on CUDA), each block's softmax and log-sum-exp one op
    /// between them (`AttentionOps::lean_attention_block_softmax`: a kernel on the CubeCL
    /// backends, one pass per row on Flex), in f32 for half-precision inputs. Each block's
    /// transient buffers are score-sized: a larger workspace means fewer, larger GEMMs.
    Gemm,
}

impl fmt::Display for AttentionPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Kernels => "the fused attention kernels",
            Self::Gemm => "attention in blocks on Lean's GEMMs",
        })
    }
}

static GEMM: Switch = Switch::unset();

/// Sets `Lean`'s [`AttentionPath`] for the whole process (default
/// [`AttentionPath::Kernels`]; [`AttentionPath::Gemm`] when the environment has
/// `LEANBURN_ATTENTION=gemm`).
pub fn set_attention_path(path: AttentionPath) {
    GEMM.set(path == AttentionPath::Gemm);
}

/// `Lean`'s [`AttentionPath`] now.
pub fn attention_path() -> AttentionPath {
    if GEMM.get(|| env_is("LEANBURN_ATTENTION", "gemm")) {
        AttentionPath::Gemm
    } else {
        AttentionPath::Kernels
    }
}
