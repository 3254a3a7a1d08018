//! Memory-efficient attention for training: softmax(s·QKᵀ)·V whose autodiff backward keeps
//! no `T × T` scores.
//!
//! Burn 0.21's `Autodiff` runs `attention` as `attention_fallback`: the scores, the mask
//! and the softmax are graph nodes, all kept for the backward pass (a `[8, 12, 1024, 1024]`
//! f32 score tensor is 384 MiB, per layer). [`AttentionOps::lean_attention`] on
//! `Autodiff<B>` instead runs the forward on `B` one block of query rows at a time (an
//! online softmax: scores exist for one block only), keeps q, k, v, the output and each
//! row's log-sum-exp, and in the backward pass recomputes the scores block by block
//! (FlashAttention-2's backward, written with Burn tensor ops, so on every backend). On
//! a backend without autodiff it is Burn's own `attention` (flash where the backend has
//! it).
//!
//! Use [`lean_attention`] in a model whose backend implements [`AttentionOps`]: every
//! backend leanburn runs (Flex, NdArray, CubeCL, Fusion, `Lean`) and `Autodiff` over them.

mod autodiff;
pub(crate) mod blocked;

#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicUsize, Ordering};

use burn::backend::{Flex, NdArray};
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Tensor, TensorPrimitive};
use burn_backend::tensor::FloatTensor;
use burn_backend::Backend;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use burn_fusion::{Fusion, FusionBackend};

use super::conv::ChunkedConv;
use super::Lean;

/// The default of [`attention_workspace`]: 64 MiB.
pub const DEFAULT_ATTENTION_WORKSPACE_BYTES: usize = 64 << 20;

static WORKSPACE: AtomicUsize = AtomicUsize::new(DEFAULT_ATTENTION_WORKSPACE_BYTES);

/// Bytes of transient score-sized buffers one attention block may hold (about four
/// `[batch, heads, rows, keys]` tensors in the backward pass): each block's query rows are
/// chosen to fit (at least one row), process-wide.
pub fn attention_workspace() -> usize {
    WORKSPACE.load(Ordering::Relaxed)
}

/// Sets [`attention_workspace`] for the whole process (at least 1 byte).
pub fn set_attention_workspace(bytes: usize) {
    WORKSPACE.store(bytes.max(1), Ordering::Relaxed);
}

/// A backend with leanburn's attention; see the [module docs](self).
pub trait AttentionOps: Backend {
    /// softmax(QKᵀ/√d)·V over `[batch, heads, seq, head_dim]` tensors, causal (each query
    /// sees keys at or before it, aligned at the bottom right as Burn's) when `causal`.
    fn lean_attention(
        query: FloatTensor<Self>,
        key: FloatTensor<Self>,
        value: FloatTensor<Self>,
        causal: bool,
    ) -> FloatTensor<Self> {
        let options = AttentionModuleOptions { scale: None, softcap: None, is_causal: causal };
        Self::attention(query, key, value, None, None, options)
    }
}

impl AttentionOps for Flex {}

impl AttentionOps for NdArray {}

impl<B: FusionBackend> AttentionOps for Fusion<B> {}

impl<R, F, I, BT> AttentionOps for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
}

impl<B: ChunkedConv> AttentionOps for Lean<B> {}

/// [`AttentionOps::lean_attention`] on tensors: `[batch, heads, seq, head_dim]` query, key
/// and value (key and value may be longer than the query), causal or not.
pub fn lean_attention<B: AttentionOps>(
    query: Tensor<B, 4>,
    key: Tensor<B, 4>,
    value: Tensor<B, 4>,
    causal: bool,
) -> Tensor<B, 4> {
    let [batch, heads, _, head_dim] = query.dims();
    let [k_batch, k_heads, keys, k_dim] = key.dims();
    assert!(
        [k_batch, k_heads, k_dim] == [batch, heads, head_dim] && value.dims()[..3] == key.dims()[..3],
        "lean_attention: query {:?}, key {:?} and value {:?} do not match",
        query.dims(),
        key.dims(),
        value.dims()
    );
    assert!(!causal || query.dims()[2] <= keys, "lean_attention: causal needs at least as many keys as queries");
    let primitive = |t: Tensor<B, 4>| t.into_primitive().tensor();
    Tensor::from_primitive(TensorPrimitive::Float(B::lean_attention(
        primitive(query),
        primitive(key),
        primitive(value),
        causal,
    )))
}
