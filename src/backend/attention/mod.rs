//! Memory-efficient attention for training: softmax(s·QKᵀ)·V whose autodiff backward keeps
//! no `T × T` scores.
//!
//! Burn 0.21's `Autodiff` runs `attention` as `attention_fallback`: the scores, the mask
//! and the softmax are graph nodes, all kept for the backward pass (a `[8, 12, 1024, 1024]`
//! f32 score tensor is 384 MiB, per layer). [`AttentionOps::lean_attention`] on
//! `Autodiff<B>` instead is one graph node: its forward ([`AttentionOps::lean_attention_forward`]
//! on `B`) keeps q, k, v, the output and each row's log-sum-exp, and its backward
//! ([`AttentionOps::lean_attention_backward`]) recomputes the scores from them
//! (FlashAttention-2's backward). On the CubeCL backends (CUDA, wgpu; fused or not) both
//! are leanburn's fused kernels (`leanburn-kernels`' `attention`: one kernel forward, two
//! backward, for f32, f16 and bf16 and head dimensions that are multiples of 4 up to 256);
//! elsewhere, and for other shapes, they are composed of Burn tensor ops one block of query
//! rows at a time, within [`attention_workspace`] ([`blocked`]), each block's softmax
//! between its products one op ([`AttentionOps::lean_attention_block_softmax`] and its
//! backward: a kernel each on the CubeCL backends, one pass per row on Flex). On `Lean<B>`
//! those blocks' products are its GEMMs (cuBLASLt on CUDA), and [`AttentionPath::Gemm`]
//! takes them even where `B` has kernels; GPT-2's packed attention then runs each pass on
//! `B` ([`AttentionOps::lean_attention_blocks_forward`]), which the fused stacks queue as
//! one operation. On a backend without autodiff `lean_attention` is Burn's own
//! `attention` (flash where the backend has it), except on `Lean<B>` where the training
//! step's attention runs in blocks on the vendor's GEMM: there forward-only passes run the
//! same blocks, so that Burn's attention (and CubeCL's matmul under it) is neither compiled
//! nor autotuned before the first step.
//!
//! Use [`lean_attention`] in a model whose backend implements [`AttentionOps`]: every
//! backend leanburn runs (Flex, NdArray, CubeCL, Fusion, `Lean`) and `Autodiff` over them.

mod autodiff;
pub(crate) mod blocked;
mod cube;
mod flex;
mod flex_heads;
mod fused;
mod packed;
mod path;

#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicUsize, Ordering};

use burn::backend::NdArray;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Tensor, TensorPrimitive};
use burn_backend::tensor::FloatTensor;
use burn_backend::{DType, TensorMetadata};

pub use packed::lean_attention_packed;
pub(crate) use packed::split_packed_heads;
pub use path::{attention_path, set_attention_path, AttentionPath};

use super::conv::ChunkedConv;
use super::GemmOps;
use super::Lean;

/// The default of [`attention_workspace`]: 64 MiB.
pub const DEFAULT_ATTENTION_WORKSPACE_BYTES: usize = 64 << 20;

static WORKSPACE: AtomicUsize = AtomicUsize::new(DEFAULT_ATTENTION_WORKSPACE_BYTES);

/// Bytes of transient score-sized buffers one block of the composed attention may hold
/// (about four `[batch, heads, rows, keys]` tensors in the backward pass): each block's
/// query rows are chosen to fit (at least one row), process-wide. The fused kernels hold
/// no such buffers.
pub fn attention_workspace() -> usize {
    WORKSPACE.load(Ordering::Relaxed)
}

/// Sets [`attention_workspace`] for the whole process (at least 1 byte).
pub fn set_attention_workspace(bytes: usize) {
    WORKSPACE.store(bytes.max(1), Ordering::Relaxed);
}

/// A backend with leanburn's attention; see the module docs (`src/backend/attention/mod.rs`). Its products in
/// blocks are the backend's GEMMs.
pub trait AttentionOps: GemmOps {
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

    /// [`lean_attention`](Self::lean_attention) of heads packed as GPT-2's `c_attn` writes
    /// them: `qkv` `[batch · seq, 3 · heads · head_dim]`, each row a token's query, key and
    /// value (`[batch, seq, heads]` in `layout`) → the output in the same token rows,
    /// `[batch · seq, heads · head_dim]`. By default the three as views of `qkv` into
    /// `lean_attention`, the output's heads swapped back into rows; under `Autodiff` one
    /// node whose backward writes `qkv`'s gradient as one tensor
    /// (`src/backend/attention/packed.rs`).
    fn lean_attention_packed(qkv: FloatTensor<Self>, layout: [usize; 3], causal: bool) -> FloatTensor<Self> {
        let [query, key, value] = packed::split_heads::<Self>(qkv, layout);
        packed::heads_to_rows::<Self>(Self::lean_attention(query, key, value, causal))
    }

    /// The packed attention's forward pass for a backward pass to follow (its autodiff
    /// node's): what [`lean_attention_packed_backward`](Self::lean_attention_packed_backward)
    /// reads (q, k and v `[batch, heads, seq, head_dim]`, the output in token rows, the
    /// log-sum-exp) and the output in token rows. By default q, k and v as views of `qkv` into
    /// [`lean_attention_forward`](Self::lean_attention_forward); `Lean` takes
    /// [`lean_attention_blocks_forward`](Self::lean_attention_blocks_forward) where its
    /// blocks' products are the vendor's GEMM.
    fn lean_attention_packed_forward(
        qkv: FloatTensor<Self>,
        layout: [usize; 3],
        causal: bool,
    ) -> ([FloatTensor<Self>; 5], FloatTensor<Self>) {
        packed::views_forward::<Self>(qkv, layout, causal)
    }

    /// `qkv`'s gradient (packed as `qkv`) from what
    /// [`lean_attention_packed_forward`](Self::lean_attention_packed_forward) saved and the
    /// gradient of the output in token rows: by default
    /// [`lean_attention_backward`](Self::lean_attention_backward)'s three gradients,
    /// concatenated.
    fn lean_attention_packed_backward(
        saved: [FloatTensor<Self>; 5],
        grad: FloatTensor<Self>,
        layout: [usize; 3],
        causal: bool,
    ) -> FloatTensor<Self> {
        packed::views_backward::<Self>(saved, grad, layout, causal)
    }

    /// Heads `[batch, heads, seq, head_dim]` (one or more parts of the same shape) side by
    /// side in token rows `[batch · seq, parts · heads · head_dim]`: the packed attention's
    /// output, and its three gradients packed as `qkv`. By default Burn's ops (one part's
    /// heads swapped back into rows, more parts concatenated); on Flex one parallel copy.
    fn lean_heads_to_rows(parts: Vec<FloatTensor<Self>>, layout: [usize; 3]) -> FloatTensor<Self> {
        packed::rows_of_heads::<Self>(parts, layout)
    }

    /// Token rows `[batch · seq, heads · head_dim]` as heads `[batch, heads, seq,
    /// head_dim]`: the packed attention's output and its gradient in its backward pass. By
    /// default a view (the kernels and the blocks' GEMMs read strides); on Flex one parallel
    /// copy into contiguous heads.
    fn lean_rows_to_heads(rows: FloatTensor<Self>, layout: [usize; 3]) -> FloatTensor<Self> {
        packed::rows_to_heads::<Self>(rows, layout)
    }

    /// The packed attention's forward pass in blocks on this backend's GEMMs: q, k and v
    /// copied contiguous from `qkv` once (a batched GEMM whose batch must step through one
    /// stride, cuBLASLt's, would otherwise copy them for each product), then the blocks;
    /// returns as [`lean_attention_packed_forward`](Self::lean_attention_packed_forward).
    /// The fused stacks queue it as one operation that their inner backend runs.
    fn lean_attention_blocks_forward(
        qkv: FloatTensor<Self>,
        layout: [usize; 3],
        causal: bool,
    ) -> ([FloatTensor<Self>; 5], FloatTensor<Self>) {
        packed::blocks_forward::<Self>(qkv, layout, causal)
    }

    /// The backward pass of [`lean_attention_blocks_forward`](Self::lean_attention_blocks_forward):
    /// `qkv`'s gradient, packed. The fused stacks queue it as one operation.
    fn lean_attention_blocks_backward(
        saved: [FloatTensor<Self>; 5],
        grad: FloatTensor<Self>,
        layout: [usize; 3],
        causal: bool,
    ) -> FloatTensor<Self> {
        packed::blocks_backward::<Self>(saved, grad, layout, causal)
    }

    /// The forward pass a backward pass will follow: the output `[batch, heads, rows,
    /// head_dim]` and each query row's log-sum-exp of its scaled scores, in a layout only
    /// this backend's [`lean_attention_backward`](Self::lean_attention_backward) reads.
    /// By default composed of Burn ops, one block of query rows at a time.
    fn lean_attention_forward(
        query: FloatTensor<Self>,
        key: FloatTensor<Self>,
        value: FloatTensor<Self>,
        causal: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        blocked::forward_within_workspace::<Self>(query, key, value, causal)
    }

    /// The gradients of query, key and value given the output's gradient `grad`,
    /// recomputing the scores from the forward pass's `output` and `lse`.
    fn lean_attention_backward(
        query: FloatTensor<Self>,
        key: FloatTensor<Self>,
        value: FloatTensor<Self>,
        output: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        causal: bool,
    ) -> [FloatTensor<Self>; 3] {
        blocked::backward_within_workspace::<Self>(query, key, value, output, lse, grad, causal)
    }

    /// One block of the attention in blocks ([`AttentionPath::Gemm`], and every backend
    /// without kernels) between its two forward products: the block's scores `[batch,
    /// heads, rows, keys]` (the unscaled `q·kᵀ`, unmasked) → the probabilities
    /// `softmax(scale · scores)` (the scores' type) and each row's log-sum-exp of the scaled
    /// scores `[batch, heads, rows, 1]` (f32). `diagonal`: causal, row `i` of the block sees
    /// keys `0 ..= i + diagonal` (the others' probabilities are 0); `None`: every key. The
    /// scale is applied as the scores are read, so the query needs no pass of its own for
    /// it. By default Burn ops, the softmax in f32; one kernel on the CubeCL backends, one
    /// pass per row on Flex (f32).
    fn lean_attention_block_softmax(
        scores: FloatTensor<Self>,
        diagonal: Option<usize>,
        scale: f32,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        blocked::composed_softmax::<Self>(scores, diagonal, scale)
    }

    /// The same block in the backward pass: from its scores, its rows' log-sum-exp
    /// (`[batch, heads, rows, 1]`, f32), its rows of the attention's output and of its
    /// gradient (`O` and `dO`, `[batch, heads, rows, head_dim]`) and the probabilities'
    /// gradient `dP = dO·Vᵀ`: the probabilities and the unscaled scores' gradient
    /// `scale · P ∘ (dP − Δ)`, `Δ = Σ dO ∘ O` each row's sum over the head dimension (in
    /// f32), both in the scores' type. By default Burn ops in f32; one kernel on the CubeCL
    /// backends (`Δ` summed in it), one pass per row on Flex (f32).
    fn lean_attention_block_softmax_grad(
        scores: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        [output, grad_output]: [FloatTensor<Self>; 2],
        grad_probabilities: FloatTensor<Self>,
        diagonal: Option<usize>,
        scale: f32,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let outputs = [output, grad_output];
        blocked::composed_softmax_grad::<Self>(scores, lse, outputs, grad_probabilities, diagonal, scale)
    }

    /// Whether [`lean_attention_forward`](Self::lean_attention_forward) and
    /// [`lean_attention_backward`](Self::lean_attention_backward) run leanburn's fused
    /// kernels for inputs of `dtype` and `head_dim` (and so write the log-sum-exp as
    /// `[batch · heads, rows]` f32). The fused stacks ask their inner backend.
    fn fused_attention(_dtype: DType, _head_dim: usize) -> bool {
        false
    }
}

/// Whether a backend whose kernels take this element type and head dimension (`fused`)
/// runs them for query, key and value of these shapes and types: one type, matching batch,
/// heads and head dimension, as many values as keys, rows and keys to work on.
pub(crate) fn kernel_inputs(dims: [[usize; 4]; 3], dtypes: [DType; 3], fused: bool) -> bool {
    let [[b, h, rows, d], [kb, kh, keys, kd], [vb, vh, vkeys, vd]] = dims;
    fused
        && dtypes[1] == dtypes[0]
        && dtypes[2] == dtypes[0]
        && [kb, kh, kd, vb, vh, vd] == [b, h, d, b, h, d]
        && vkeys == keys
        && rows > 0
        && keys > 0
}

impl AttentionOps for NdArray {}

/// Whether `Lean<B>` hands these inputs to `B`'s fused kernels: on
/// [`AttentionPath::Kernels`] where `B` has kernels for them; otherwise it runs the blocks
/// on its own ops, so that their products are [`GemmOps::gemm`](super::GemmOps::gemm)'s.
fn on_kernels<B: AttentionOps + GemmOps>(query: &FloatTensor<B>, key: &FloatTensor<B>, value: &FloatTensor<B>) -> bool {
    let dims = |t: &FloatTensor<B>| t.shape().dims::<4>();
    let vendor_gemm = B::vendor_gemm(&B::float_device(query));
    let fused =
        attention_path(vendor_gemm) == AttentionPath::Kernels && B::fused_attention(query.dtype(), dims(query)[3]);
    kernel_inputs([dims(query), dims(key), dims(value)], [query.dtype(), key.dtype(), value.dtype()], fused)
}

/// Whether `Lean<B>` runs the attention's products, for inputs of `dtype` and `head_dim`
/// on `device`, in blocks on the vendor's GEMM (whose batched products need each operand's
/// batch to step through one stride).
fn blocks_on_vendor_gemm<B: AttentionOps>(device: &B::Device, dtype: DType, head_dim: usize) -> bool {
    B::vendor_gemm(device) && !(attention_path(true) == AttentionPath::Kernels && B::fused_attention(dtype, head_dim))
}

/// [`blocks_on_vendor_gemm`] for GPT-2's packed projection `qkv` `[batch · seq, 3 · heads
/// · head_dim]` (`[batch, seq, heads]` in `layout`).
fn packed_blocks_on_vendor_gemm<B: AttentionOps>(qkv: &FloatTensor<B>, layout: [usize; 3]) -> bool {
    let head_dim = qkv.shape().dims::<2>()[1] / 3 / layout[2].max(1);
    blocks_on_vendor_gemm::<B>(&B::float_device(qkv), qkv.dtype(), head_dim)
}

/// `B`'s fused kernels, or blocks on `Lean`'s GEMMs: see [`AttentionPath`].
impl<B: ChunkedConv + AttentionOps> AttentionOps for Lean<B> {
    /// Without autodiff (evaluation, predict and selection passes): where a training
    /// step's attention runs in blocks on the vendor's GEMM, the same blocks' forward pass,
    /// so that Burn's attention (its products CubeCL's autotuned matmul) is neither
    /// compiled nor tuned before the first step; elsewhere `B`'s (Burn's attention op).
    fn lean_attention(
        query: FloatTensor<Self>,
        key: FloatTensor<Self>,
        value: FloatTensor<Self>,
        causal: bool,
    ) -> FloatTensor<Self> {
        let head_dim = query.shape().dims::<4>()[3];
        match blocks_on_vendor_gemm::<B>(&B::float_device(&query), query.dtype(), head_dim) {
            true => blocked::forward_within_workspace::<Self>(query, key, value, causal).0,
            false => B::lean_attention(query, key, value, causal),
        }
    }

    /// Without autodiff, as [`lean_attention`](Self::lean_attention): the training step's
    /// blocks forward (one queued operation on the fused stacks; what it saves for a
    /// backward pass is dropped) where those run on the vendor's GEMM, else `B`'s, which
    /// reads the views: no copy.
    fn lean_attention_packed(qkv: FloatTensor<Self>, layout: [usize; 3], causal: bool) -> FloatTensor<Self> {
        match packed_blocks_on_vendor_gemm::<B>(&qkv, layout) {
            true => B::lean_attention_blocks_forward(qkv, layout, causal).1,
            false => B::lean_attention_packed(qkv, layout, causal),
        }
    }

    /// In blocks on `B`'s ops where their products are the vendor's GEMM (on the fused
    /// stacks one queued operation a pass), else q, k and v as views into the forward pass
    /// on `Lean`'s ops.
    fn lean_attention_packed_forward(
        qkv: FloatTensor<Self>,
        layout: [usize; 3],
        causal: bool,
    ) -> ([FloatTensor<Self>; 5], FloatTensor<Self>) {
        match packed_blocks_on_vendor_gemm::<B>(&qkv, layout) {
            true => B::lean_attention_blocks_forward(qkv, layout, causal),
            false => packed::views_forward::<Self>(qkv, layout, causal),
        }
    }

    /// The backward pass of whichever forward ran (the blocks' log-sum-exp is 4-D).
    fn lean_attention_packed_backward(
        saved: [FloatTensor<Self>; 5],
        grad: FloatTensor<Self>,
        layout: [usize; 3],
        causal: bool,
    ) -> FloatTensor<Self> {
        let [query, _, _, _, lse] = &saved;
        let head_dim = query.shape().dims::<4>()[3];
        let blocks =
            lse.shape().num_dims() == 4 && blocks_on_vendor_gemm::<B>(&B::float_device(query), query.dtype(), head_dim);
        match blocks {
            true => B::lean_attention_blocks_backward(saved, grad, layout, causal),
            false => packed::views_backward::<Self>(saved, grad, layout, causal),
        }
    }

    fn lean_heads_to_rows(parts: Vec<FloatTensor<Self>>, layout: [usize; 3]) -> FloatTensor<Self> {
        B::lean_heads_to_rows(parts, layout)
    }

    fn lean_rows_to_heads(rows: FloatTensor<Self>, layout: [usize; 3]) -> FloatTensor<Self> {
        B::lean_rows_to_heads(rows, layout)
    }

    fn lean_attention_blocks_forward(
        qkv: FloatTensor<Self>,
        layout: [usize; 3],
        causal: bool,
    ) -> ([FloatTensor<Self>; 5], FloatTensor<Self>) {
        B::lean_attention_blocks_forward(qkv, layout, causal)
    }

    fn lean_attention_blocks_backward(
        saved: [FloatTensor<Self>; 5],
        grad: FloatTensor<Self>,
        layout: [usize; 3],
        causal: bool,
    ) -> FloatTensor<Self> {
        B::lean_attention_blocks_backward(saved, grad, layout, causal)
    }

    fn lean_attention_forward(
        query: FloatTensor<Self>,
        key: FloatTensor<Self>,
        value: FloatTensor<Self>,
        causal: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        if on_kernels::<B>(&query, &key, &value) {
            return B::lean_attention_forward(query, key, value, causal);
        }
        blocked::forward_within_workspace::<Self>(query, key, value, causal)
    }

    fn lean_attention_backward(
        query: FloatTensor<Self>,
        key: FloatTensor<Self>,
        value: FloatTensor<Self>,
        output: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        causal: bool,
    ) -> [FloatTensor<Self>; 3] {
        // The kernels' log-sum-exp is `[batch · heads, rows]`, the blocks' 4-D: the
        // backward follows whichever forward ran.
        if lse.shape().num_dims() == 2 {
            return B::lean_attention_backward(query, key, value, output, lse, grad, causal);
        }
        // The output's gradient is read by two products: one copy, not one for each, where
        // it is a strided view (the GPT-2 model's heads swapped back from token rows).
        let head_dim = query.shape().dims::<4>()[3];
        let grad = match blocks_on_vendor_gemm::<B>(&B::float_device(&grad), grad.dtype(), head_dim) {
            true => packed::contiguous(Tensor::<Self, 4>::from_primitive(TensorPrimitive::Float(grad)))
                .into_primitive()
                .tensor(),
            false => grad,
        };
        blocked::backward_within_workspace::<Self>(query, key, value, output, lse, grad, causal)
    }

    fn lean_attention_block_softmax(
        scores: FloatTensor<Self>,
        diagonal: Option<usize>,
        scale: f32,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        B::lean_attention_block_softmax(scores, diagonal, scale)
    }

    fn lean_attention_block_softmax_grad(
        scores: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        outputs: [FloatTensor<Self>; 2],
        grad_probabilities: FloatTensor<Self>,
        diagonal: Option<usize>,
        scale: f32,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        B::lean_attention_block_softmax_grad(scores, lse, outputs, grad_probabilities, diagonal, scale)
    }

    fn fused_attention(dtype: DType, head_dim: usize) -> bool {
        // No tensor here: the default device's GEMMs decide (all CUDA devices share one).
        attention_path(B::vendor_gemm(&Default::default())) == AttentionPath::Kernels
            && B::fused_attention(dtype, head_dim)
    }
}

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
