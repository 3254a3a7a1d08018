//! Attention over heads packed as GPT-2's `c_attn` writes them: one `[batch · seq, 3 · d]`
//! tensor whose rows are each token's query, key and value, the heads in order within each.
//!
//! Split into three slices before the attention, as `qkv.chunk(3, 1)` does, the backward
//! pass would build the packed gradient from three slices' gradients: each a zero-filled
//! tensor of the whole packed shape with its third written in, then the three added (at
//! gpt2-small 8 × 1024, three fills, three writes and two additions of 75 MB tensors a layer,
//! besides a copy of each head-split gradient into rows). Under autodiff
//! [`AttentionOps::lean_attention_packed`](super::AttentionOps::lean_attention_packed) is one
//! node whose backward writes the packed gradient once ([`pack_heads`]); the
//! forward views the packed tensor as q, k and v heads ([`split_heads`]) as the slices did.

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorPrimitive};
use burn_backend::tensor::FloatTensor;

use super::{blocked, AttentionOps};

/// q, k and v `[batch, heads, seq, head_dim]` as views of the packed `qkv` `[batch · seq,
/// 3 · heads · head_dim]` (on an autodiff backend, three slices: the path Burn's attention
/// takes in the GPT-2 model).
pub(crate) fn split_packed_heads<B: Backend>(qkv: Tensor<B, 2>, [batch, seq, heads]: [usize; 3]) -> [Tensor<B, 4>; 3] {
    let head_dim = qkv.dims()[1] / 3 / heads;
    let parts: [Tensor<B, 2>; 3] = qkv.chunk(3, 1).try_into().expect("three equal chunks of 3·d");
    parts.map(|part| part.reshape([batch, seq, heads, head_dim]).swap_dims(1, 2))
}

/// [`split_packed_heads`] on primitives.
pub(crate) fn split_heads<B: Backend>(qkv: FloatTensor<B>, layout: [usize; 3]) -> [FloatTensor<B>; 3] {
    let qkv = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(qkv));
    split_packed_heads(qkv, layout).map(|part| part.into_primitive().tensor())
}

/// q, k and v `[batch, heads, seq, head_dim]`, each contiguous, from the packed `qkv`
/// `[batch · seq, 3 · heads · head_dim]`: one copy of the whole into `[3 · batch, heads,
/// seq, head_dim]`, the three its slices (views of the copy). A batched GEMM whose batch
/// must step through one stride (cuBLASLt's) takes them as they are, where the views of
/// [`split_heads`] (batch and heads apart by other strides than one flat index's) would be
/// copied for every product that reads them: in the attention in blocks, k and v in the
/// forward pass and k twice and v once more in the backward.
pub(crate) fn contiguous_heads<B: Backend>(
    qkv: FloatTensor<B>,
    [batch, seq, heads]: [usize; 3],
) -> [FloatTensor<B>; 3] {
    let qkv = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(qkv));
    let head_dim = qkv.dims()[1] / 3 / heads;
    // `[3, batch, heads, seq, head_dim]` as a view; merging its first two dimensions
    // copies it (no strides express the merge), then q, k and v are its three slices.
    let heads_first = qkv.reshape([batch, seq, 3, heads, head_dim]).permute([2, 0, 3, 1, 4]);
    let copied: Tensor<B, 4> = heads_first.reshape([3 * batch, heads, seq, head_dim]);
    [0, 1, 2].map(|part| copied.clone().slice([part * batch..(part + 1) * batch]).into_primitive().tensor())
}

/// `tensor` with contiguous row-major strides: one copy where it is a strided view, none
/// where it is already contiguous (on the CubeCL backends, where it is used, a reshape
/// copies exactly when the strides do not allow a view).
pub(crate) fn contiguous<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> Tensor<B, D> {
    let dims = tensor.dims();
    tensor.reshape([dims.iter().product::<usize>()]).reshape(dims)
}

/// The packed `[batch · seq, 3 · d]` tensor of q, k and v heads `[batch, heads, seq,
/// head_dim]` (their gradients, in the backward pass): one concatenation.
pub(crate) fn pack_heads<B: Backend>(parts: Vec<FloatTensor<B>>, [batch, seq, _]: [usize; 3]) -> FloatTensor<B> {
    // `[batch, seq, heads, head_dim]` views side by side along the heads: each row of the
    // result is q's heads, then k's, then v's.
    let rows =
        parts.into_iter().map(|part| Tensor::<B, 4>::from_primitive(TensorPrimitive::Float(part)).swap_dims(1, 2));
    let packed = Tensor::cat(rows.collect(), 2);
    let width = packed.dims()[2] * packed.dims()[3];
    packed.reshape([batch * seq, width]).into_primitive().tensor()
}

/// What the packed attention's backward pass reads, as its forward pass leaves it: q, k
/// and v `[batch, heads, seq, head_dim]`, the output in token rows (the node's output
/// itself: the heads' layout is not kept beside it; the backward views the rows as heads)
/// and each query row's log-sum-exp (in the layout of the forward that ran: see
/// [`AttentionOps::lean_attention_forward`]).
pub(crate) type PackedSaved<B> = [FloatTensor<B>; 5];

/// Heads `[batch, heads, seq, head_dim]` as token rows `[batch · seq, heads · head_dim]`
/// (a copy: the heads swapped back next to each other).
pub(crate) fn heads_to_rows<B: Backend>(heads: FloatTensor<B>) -> FloatTensor<B> {
    let heads = Tensor::<B, 4>::from_primitive(TensorPrimitive::Float(heads));
    let [batch, count, seq, head_dim] = heads.dims();
    heads.swap_dims(1, 2).reshape([batch * seq, count * head_dim]).into_primitive().tensor()
}

/// [`AttentionOps::lean_heads_to_rows`] by default: one part's heads swapped back into
/// rows ([`heads_to_rows`]), more parts concatenated ([`pack_heads`]).
pub(crate) fn rows_of_heads<B: Backend>(mut parts: Vec<FloatTensor<B>>, layout: [usize; 3]) -> FloatTensor<B> {
    match parts.len() {
        1 => heads_to_rows::<B>(parts.pop().expect("one part")),
        _ => pack_heads::<B>(parts, layout),
    }
}

/// Token rows `[batch · seq, heads · head_dim]` as heads `[batch, heads, seq, head_dim]`
/// (a view).
pub(crate) fn rows_to_heads<B: Backend>(rows: FloatTensor<B>, [batch, seq, heads]: [usize; 3]) -> FloatTensor<B> {
    let rows = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(rows));
    let head_dim = rows.dims()[1] / heads.max(1);
    rows.reshape([batch, seq, heads, head_dim]).swap_dims(1, 2).into_primitive().tensor()
}

/// [`AttentionOps::lean_attention_packed_forward`] by default: q, k and v as views of
/// `qkv`, then `B`'s forward pass; what the backward reads and the output in token rows.
pub(crate) fn views_forward<B: AttentionOps>(
    qkv: FloatTensor<B>,
    layout: [usize; 3],
    causal: bool,
) -> (PackedSaved<B>, FloatTensor<B>) {
    let [query, key, value] = split_heads::<B>(qkv, layout);
    let (output, lse) = B::lean_attention_forward(query.clone(), key.clone(), value.clone(), causal);
    let rows = B::lean_heads_to_rows(vec![output], layout);
    ([query, key, value, rows.clone(), lse], rows)
}

/// [`AttentionOps::lean_attention_packed_backward`] by default: `B`'s backward pass, the
/// output and its gradient in token rows as heads ([`AttentionOps::lean_rows_to_heads`]:
/// views the kernels and the blocks read by their strides; copies on Flex), its three
/// gradients packed as `qkv` ([`AttentionOps::lean_heads_to_rows`]).
pub(crate) fn views_backward<B: AttentionOps>(
    [query, key, value, output, lse]: PackedSaved<B>,
    grad: FloatTensor<B>,
    layout: [usize; 3],
    causal: bool,
) -> FloatTensor<B> {
    let [output, grad] = [output, grad].map(|rows| B::lean_rows_to_heads(rows, layout));
    let gradients = B::lean_attention_backward(query, key, value, output, lse, grad, causal);
    B::lean_heads_to_rows(gradients.into(), layout)
}

/// [`AttentionOps::lean_attention_blocks_forward`] by default: q, k and v copied contiguous
/// once ([`contiguous_heads`]), then the attention in blocks on `B`'s GEMMs, the output
/// also in token rows.
pub(crate) fn blocks_forward<B: AttentionOps>(
    qkv: FloatTensor<B>,
    layout: [usize; 3],
    causal: bool,
) -> (PackedSaved<B>, FloatTensor<B>) {
    let [query, key, value] = contiguous_heads::<B>(qkv, layout);
    let (output, lse) = blocked::forward_within_workspace::<B>(query.clone(), key.clone(), value.clone(), causal);
    let rows = heads_to_rows::<B>(output);
    ([query, key, value, rows.clone(), lse], rows)
}

/// [`AttentionOps::lean_attention_blocks_backward`] by default: the output's gradient (in
/// token rows) copied into contiguous heads (two products read it: one copy, not one
/// each), the output viewed as heads (the softmax's backward reads it by its strides), the
/// backward in the blocks of [`blocks_forward`], the gradients packed.
pub(crate) fn blocks_backward<B: AttentionOps>(
    [query, key, value, output, lse]: PackedSaved<B>,
    grad: FloatTensor<B>,
    layout: [usize; 3],
    causal: bool,
) -> FloatTensor<B> {
    let output = rows_to_heads::<B>(output, layout);
    let grad = Tensor::<B, 4>::from_primitive(TensorPrimitive::Float(rows_to_heads::<B>(grad, layout)));
    let grad = contiguous(grad).into_primitive().tensor();
    let gradients = blocked::backward_within_workspace::<B>(query, key, value, output, lse, grad, causal);
    pack_heads::<B>(gradients.into(), layout)
}

/// [`AttentionOps::lean_attention_packed`] on tensors: `qkv` `[batch · seq, 3 · d]` (rows
/// `b · seq .. (b + 1) · seq` are sequence `b`; each row the token's query, key and value,
/// `heads` heads each) → the attention's output in the same token rows, `[batch · seq, d]`
/// (each row the token's heads side by side: what the output projection reads).
///
/// # Panics
/// If `qkv` does not have `batch · seq` rows, or its width is not three times a multiple
/// of `heads`.
pub fn lean_attention_packed<B: AttentionOps>(
    qkv: Tensor<B, 2>,
    [batch, seq]: [usize; 2],
    heads: usize,
    causal: bool,
) -> Tensor<B, 2> {
    let [rows, width] = qkv.dims();
    assert!(
        rows == batch * seq && heads > 0 && width % (3 * heads) == 0,
        "lean_attention_packed: qkv {:?} is not [batch · seq, 3 · heads · head_dim] for batch {batch}, seq {seq}, \
         heads {heads}",
        qkv.dims()
    );
    let output = B::lean_attention_packed(qkv.into_primitive().tensor(), [batch, seq, heads], causal);
    Tensor::from_primitive(TensorPrimitive::Float(output))
}

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, Flex, Wgpu};
    use burn::tensor::backend::{AutodiffBackend, Backend};
    use burn::tensor::module::attention;
    use burn::tensor::ops::AttentionModuleOptions;
    use burn::tensor::{Tensor, TensorData};
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    use super::super::fused::queued_here;
    use super::{lean_attention_packed, split_packed_heads};
    use crate::backend::gemm::tests::{COPIES_HERE, QUEUE_GEMM, VENDOR_LAYOUTS};
    use crate::backend::{lean_attention, AttentionOps, Lean};
    use crate::device::CubeWgpu;

    /// `[batch, seq, heads, head_dim]`, causal or not.
    type Shape = ([usize; 4], bool);

    fn shapes() -> Vec<Shape> {
        let mut rng = SmallRng::seed_from_u64(0x9c4);
        (0..6)
            .map(|_| {
                let dims = [
                    rng.random_range(1..=3),
                    rng.random_range(1..=20),
                    rng.random_range(1..=3),
                    4 << rng.random_range(0..3),
                ];
                (dims, rng.random_bool(0.5))
            })
            .collect()
    }

    fn random<B: Backend, const D: usize>(rng: &mut SmallRng, shape: [usize; D]) -> Tensor<B, D> {
        let values: Vec<f32> = (0..shape.iter().product()).map(|_| rng.random_range(-1.0..1.0)).collect();
        Tensor::from_data(TensorData::new(values, shape), &Default::default())
    }

    /// The output in token rows and `qkv`'s gradient for the loss `Σ output ∘ w`: packed,
    /// or by the three slices of before (`swap`: key and value swapped, the control's wrong attention).
    fn run<B: AutodiffBackend + AttentionOps>(
        ([batch, seq, heads, head_dim], causal): Shape,
        packed: bool,
        swap: bool,
    ) -> [Vec<f32>; 2] {
        let mut rng = SmallRng::seed_from_u64((batch * 1000 + seq * 10 + heads) as u64);
        let qkv = random::<B, 2>(&mut rng, [batch * seq, 3 * heads * head_dim]).require_grad();
        let weight = random::<B, 2>(&mut rng, [batch * seq, heads * head_dim]);
        let output = if packed {
            lean_attention_packed(qkv.clone(), [batch, seq], heads, causal)
        } else {
            let [q, k, v]: [Tensor<B, 2>; 3] = qkv.clone().chunk(3, 1).try_into().unwrap();
            let split = |t: Tensor<B, 2>| t.reshape([batch, seq, heads, head_dim]).swap_dims(1, 2);
            let (k, v) = if swap { (v, k) } else { (k, v) };
            let output = lean_attention(split(q), split(k), split(v), causal);
            output.swap_dims(1, 2).reshape([batch * seq, heads * head_dim])
        };
        let grads = (output.clone() * weight).sum().backward();
        let grad = qkv.grad(&grads).expect("qkv has a gradient");
        [output.into_data().to_vec().unwrap(), grad.into_data().to_vec().unwrap()]
    }

    /// Packed and sliced give the same output and gradient (as values: a slice's gradient
    /// summed with zeros may turn −0 into 0); the control, key and value swapped, does not.
    fn check<B: AutodiffBackend + AttentionOps>(shapes: &[Shape]) {
        for &shape in shapes {
            let packed = run::<B>(shape, true, false);
            assert!(packed == run::<B>(shape, false, false), "{shape:?}: packed differs from the slices");
            assert!(packed != run::<B>(shape, false, true), "{shape:?}: the control went unnoticed");
        }
    }

    /// The output in token rows (`[batch · seq, d]`) and `qkv`'s gradient as the GPT-2
    /// model runs the packed attention, and the `GemmOps` operand copies counted on this
    /// thread meanwhile. `packed` false: the three head views of `qkv` into
    /// `lean_attention`, the output's heads swapped back into rows (so that its gradient
    /// arrives as a strided view), the control's layout.
    fn run_in_rows<B: AutodiffBackend + AttentionOps>(
        [batch, seq, heads, head_dim]: [usize; 4],
        packed: bool,
    ) -> ([Vec<f32>; 2], usize) {
        let mut rng = SmallRng::seed_from_u64(0x71e);
        let d = heads * head_dim;
        let qkv = random::<B, 2>(&mut rng, [batch * seq, 3 * d]).require_grad();
        let weight = random::<B, 2>(&mut rng, [batch * seq, d]);
        COPIES_HERE.with(|here| here.set(0));
        let rows = if packed {
            lean_attention_packed(qkv.clone(), [batch, seq], heads, true)
        } else {
            let [q, k, v] = split_packed_heads(qkv.clone(), [batch, seq, heads]);
            lean_attention(q, k, v, true).swap_dims(1, 2).reshape([batch * seq, d])
        };
        let grads = (rows.clone() * weight).sum().backward();
        let grad = qkv.grad(&grads).expect("qkv has a gradient");
        let values = [rows.into_data().to_vec().unwrap(), grad.into_data().to_vec().unwrap()];
        (values, COPIES_HERE.with(|here| here.get()))
    }

    /// Output and gradient of the contiguous heads within 1e-5 of the views'.
    fn assert_close(packed: &[Vec<f32>; 2], views: &[Vec<f32>; 2]) {
        for (packed, views) in packed.iter().zip(views) {
            let worst = packed.iter().zip(views).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!(worst <= 1e-5, "contiguous heads differ from the views by {worst}");
        }
    }

    /// Where the attention's products are the vendor's GEMM (on wgpu told so by the test;
    /// CubeCL's matmul runs them), the packed node hands them contiguous q, k and v and
    /// output gradient: none of their operands needs a copy for cuBLASLt through the
    /// forward and backward passes, and output and gradient are those of the views within
    /// 1e-5. The control: the three head views into `lean_attention`, whose products
    /// would copy their keys, values and output gradient.
    #[test]
    fn packed_heads_need_no_copies_for_the_vendor_gemm() {
        type B = Autodiff<Lean<CubeWgpu>>;
        let shape = [2, 9, 3, 8];
        VENDOR_LAYOUTS.with(|vendor| vendor.set(true));
        let (packed, packed_copies) = run_in_rows::<B>(shape, true);
        let (views, view_copies) = run_in_rows::<B>(shape, false);
        VENDOR_LAYOUTS.with(|vendor| vendor.set(false));
        assert_eq!(packed_copies, 0, "the packed attention's products copied operands");
        assert!(view_copies >= 5, "the control: head views copied {view_copies} operands");
        assert_close(&packed, &views);
    }

    /// The same on the fused stack with its GEMMs queued as on CUDA, where each pass of the
    /// packed attention is one queued operation that the inner backend runs (counted on
    /// this thread: the forward and the backward): the output and gradient
    /// equal, within 1e-5, the three head views into `lean_attention` (whose blocks run on
    /// the fusion stream's own operations) and the packed attention without queued GEMMs
    /// (wgpu's fused kernels). The controls: neither of those two queues a pass.
    #[test]
    fn packed_heads_on_the_queued_stack_equal_the_views() {
        type B = Autodiff<Lean<Wgpu>>;
        let shape = [2, 7, 2, 8];
        let queued =
            || queued_here("leanburn_attention_blocks_forward") + queued_here("leanburn_attention_blocks_backward");
        QUEUE_GEMM.with(|queue| queue.set(true));
        let start = queued();
        let (packed, _) = run_in_rows::<B>(shape, true);
        let packed_passes = queued() - start;
        let (views, _) = run_in_rows::<B>(shape, false);
        QUEUE_GEMM.with(|queue| queue.set(false));
        let (kernels, _) = run_in_rows::<B>(shape, true);
        let control_passes = queued() - start - packed_passes;
        assert_eq!(packed_passes, 2, "the packed attention's two passes were not queued as one operation each");
        assert_eq!(control_passes, 0, "the controls queued the packed attention's passes");
        assert_close(&packed, &views);
        assert_close(&packed, &kernels);
    }

    /// Forward only (no autodiff: evaluation, predict and selection passes), where a
    /// training step's attention runs in blocks on the vendor's GEMM (here queued as on
    /// CUDA), the packed attention is that step's blocks forward, one queued operation, and
    /// the four-dimensional `lean_attention` the blocks on `Lean`'s GEMMs (a queued block
    /// softmax each): both within 1e-5 of Burn's attention over the same heads. Without
    /// queued GEMMs (wgpu's default) neither queues anything: Burn's attention runs, as
    /// before. The comparison's control: Burn's attention without the mask is far off.
    #[test]
    fn forward_only_passes_run_the_training_steps_blocks_where_the_gemms_are_the_vendors() {
        type B = Lean<Wgpu>;
        let [batch, seq, heads, head_dim] = [2, 11, 3, 8];
        let qkv = random::<B, 2>(&mut SmallRng::seed_from_u64(0xf0), [batch * seq, 3 * heads * head_dim]);
        let burns = |causal: bool| {
            let [q, k, v] = split_packed_heads(qkv.clone(), [batch, seq, heads]);
            let options = AttentionModuleOptions { is_causal: causal, ..Default::default() };
            let output = attention(q, k, v, None, None, options);
            output.swap_dims(1, 2).reshape([batch * seq, heads * head_dim]).into_data().to_vec::<f32>().unwrap()
        };
        let names = ["leanburn_attention_blocks_forward", "leanburn_attention_block_softmax"];
        let forward_only = |queue: bool| {
            QUEUE_GEMM.with(|queued| queued.set(queue));
            let before = names.map(queued_here);
            let packed = lean_attention_packed(qkv.clone(), [batch, seq], heads, true);
            let [q, k, v] = split_packed_heads(qkv.clone(), [batch, seq, heads]);
            let four_d = lean_attention(q, k, v, true).swap_dims(1, 2).reshape([batch * seq, heads * head_dim]);
            let outputs = [packed, four_d].map(|t| t.into_data().to_vec::<f32>().unwrap());
            QUEUE_GEMM.with(|queued| queued.set(false));
            let after = names.map(queued_here);
            (outputs, [after[0] - before[0], after[1] - before[1]])
        };
        let reference = burns(true);
        let (queued, queued_ops) = forward_only(true);
        let (plain, plain_ops) = forward_only(false);
        assert_eq!(queued_ops[0], 1, "the packed attention forward only: not the blocks' one queued operation");
        assert!(queued_ops[1] >= 1, "the four-dimensional attention forward only: no block softmax queued");
        assert_eq!(plain_ops, [0, 0], "without queued GEMMs the forward-only attention queued leanburn's operations");
        let worst = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
        for output in queued.iter().chain(&plain) {
            assert!(worst(output, &reference) <= 1e-5, "{} off Burn's attention", worst(output, &reference));
        }
        assert!(worst(&queued[0], &burns(false)) > 1e-2, "the control: a missing mask went unnoticed");
    }

    #[test]
    fn packed_equals_the_slices_on_flex() {
        check::<Autodiff<Flex>>(&shapes());
        check::<Autodiff<Lean<Flex>>>(&shapes());
    }

    /// On the model's wgpu stack (the fused kernels, the concatenation as Fusion ops), two
    /// shapes at one head dimension: every head dimension compiles its kernels anew on
    /// llvmpipe (six random shapes on two stacks took 44 s of a CI-like run).
    #[test]
    fn packed_equals_the_slices_on_wgpu() {
        check::<Autodiff<Lean<Wgpu>>>(&[([2, 11, 2, 8], true), ([1, 6, 3, 8], false)]);
    }
}
