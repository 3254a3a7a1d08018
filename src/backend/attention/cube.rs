//! [`AttentionOps`] on CubeCL backends: leanburn's fused attention kernels
//! (`leanburn-kernels`' `attention`) for the training forward and backward, and its block
//! softmax kernels for the attention in blocks.

use burn_backend::tensor::FloatTensor;
use burn_backend::{DType, Shape};
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use leanburn_kernels::{
    launch_attention_backward, launch_attention_block_softmax, launch_attention_block_softmax_grad,
    launch_attention_forward, supports_head_dim, BlockDims,
};

use super::{blocked, kernel_inputs, AttentionOps};
use crate::backend::{contiguous_of, has_kernels};

/// `[batch, heads, rows, head_dim]` of a 4-D tensor.
fn dims<R: CubeRuntime>(tensor: &CubeTensor<R>) -> [usize; 4] {
    tensor.meta.shape().dims::<4>()
}

/// Whether the kernels take these inputs (see [`kernel_inputs`]).
fn fits<R: CubeRuntime>(query: &CubeTensor<R>, key: &CubeTensor<R>, value: &CubeTensor<R>) -> bool {
    let dtypes = [query.dtype, key.dtype, value.dtype];
    kernel_inputs(
        [dims(query), dims(key), dims(value)],
        dtypes,
        has_kernels(query.dtype) && supports_head_dim(dims(query)[3]),
    )
}

impl<R, F, I, BT> AttentionOps for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn lean_attention_forward(
        query: FloatTensor<Self>,
        key: FloatTensor<Self>,
        value: FloatTensor<Self>,
        causal: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        if !fits(&query, &key, &value) {
            return blocked::forward_within_workspace::<Self>(query, key, value, causal);
        }
        let [batch, heads, rows, head_dim] = dims(&query);
        let keys = dims(&key)[2];
        let (client, device, dtype) = (query.client.clone(), query.device.clone(), query.dtype);
        let output = empty_device_contiguous_dtype(
            client.clone(),
            device.clone(),
            Shape::new([batch, heads, rows, head_dim]),
            dtype,
        );
        let lse = empty_device_contiguous_dtype(client.clone(), device, Shape::new([batch * heads, rows]), DType::F32);
        let scale = 1.0 / (head_dim as f32).sqrt();
        // SAFETY: `fits` checked the shapes the kernel indexes; the outputs were just
        // allocated contiguous with the shapes it writes.
        unsafe {
            with_float_type!(dtype, E => launch_attention_forward::<R, E>(
                &client,
                query.into_tensor_arg(),
                key.into_tensor_arg(),
                value.into_tensor_arg(),
                output.clone().into_tensor_arg(),
                lse.clone().into_tensor_arg(),
                [batch * heads, heads, rows, keys, head_dim],
                scale,
                causal,
            ));
        }
        (output, lse)
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
        // The kernels' forward wrote a `[batch · heads, rows]` f32 log-sum-exp; the
        // composed one a `[batch, heads, rows, 1]`.
        if lse.meta.shape().num_dims() != 2 {
            return blocked::backward_within_workspace::<Self>(query, key, value, output, lse, grad, causal);
        }
        let [batch, heads, rows, head_dim] = dims(&query);
        let keys = dims(&key)[2];
        let (client, device, dtype) = (query.client.clone(), query.device.clone(), query.dtype);
        let grad = if grad.dtype == dtype { grad } else { burn_cubecl::kernel::cast(grad, dtype) };
        let empty =
            |shape: [usize; 4]| empty_device_contiguous_dtype(client.clone(), device.clone(), Shape::new(shape), dtype);
        let (dq, dk, dv) = (empty(dims(&query)), empty(dims(&key)), empty(dims(&value)));
        let delta = empty_device_contiguous_dtype(
            client.clone(),
            device.clone(),
            Shape::new([batch * heads, rows]),
            DType::F32,
        );
        let scale = 1.0 / (head_dim as f32).sqrt();
        // SAFETY: the forward's shapes (checked there), its output and log-sum-exp, an
        // output gradient of the output's shape; the rest just allocated.
        unsafe {
            with_float_type!(dtype, E => launch_attention_backward::<R, E>(
                &client,
                [
                    query.into_tensor_arg(),
                    key.into_tensor_arg(),
                    value.into_tensor_arg(),
                    output.into_tensor_arg(),
                    grad.into_tensor_arg(),
                ],
                lse.into_tensor_arg(),
                delta.into_tensor_arg(),
                [dq.clone().into_tensor_arg(), dk.clone().into_tensor_arg(), dv.clone().into_tensor_arg()],
                [batch * heads, heads, rows, keys, head_dim],
                scale,
                causal,
            ));
        }
        [dq, dk, dv]
    }

    fn lean_attention_block_softmax(
        scores: FloatTensor<Self>,
        diagonal: Option<usize>,
        scale: f32,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let Some(block) = block_dims(&scores, diagonal, scale) else {
            return blocked::composed_softmax::<Self>(scores, diagonal, scale);
        };
        let dtype = scores.dtype;
        let scores = contiguous_of(scores, dtype);
        let probabilities = empty_like(&scores, dims(&scores), dtype);
        let lse = empty_like(&scores, row_dims(&scores), DType::F32);
        // SAFETY: the scores made contiguous `[batch, heads, rows, keys]` (at least one
        // row and key: `block_dims`), the outputs just allocated with the shapes written.
        unsafe {
            with_float_type!(dtype, E => launch_attention_block_softmax::<R, E>(
                &scores.client.clone(),
                scores.into_tensor_arg(),
                probabilities.clone().into_tensor_arg(),
                lse.clone().into_tensor_arg(),
                block,
            ));
        }
        (probabilities, lse)
    }

    fn lean_attention_block_softmax_grad(
        scores: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        [output, grad_output]: [FloatTensor<Self>; 2],
        grad_probabilities: FloatTensor<Self>,
        diagonal: Option<usize>,
        scale: f32,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let [batch, heads, rows, _] = dims(&scores);
        let rows_of =
            |tensor: &CubeTensor<R>| dims(tensor)[..3] == [batch, heads, rows] && tensor.dtype == scores.dtype;
        let fits = lse.meta.shape().dims::<4>() == row_dims(&scores)
            && rows_of(&output)
            && dims(&output) == dims(&grad_output)
            && rows_of(&grad_output)
            && grad_probabilities.meta.shape() == scores.meta.shape();
        let Some(block) = block_dims(&scores, diagonal, scale).filter(|_| fits) else {
            let outputs = [output, grad_output];
            return blocked::composed_softmax_grad::<Self>(scores, lse, outputs, grad_probabilities, diagonal, scale);
        };
        let dtype = scores.dtype;
        let (scores, grad_probabilities) = (contiguous_of(scores, dtype), contiguous_of(grad_probabilities, dtype));
        // Read by its strides: a block's rows of the sequence's log-sum-exp stay a view,
        // as do the block's rows of the output and its gradient.
        let lse = if lse.dtype == DType::F32 { lse } else { burn_cubecl::kernel::cast(lse, DType::F32) };
        let probabilities = empty_like(&scores, dims(&scores), dtype);
        let grad_scores = empty_like(&scores, dims(&scores), dtype);
        // SAFETY: scores and their gradient contiguous `[batch, heads, rows, keys]`, the
        // log-sum-exp `[batch, heads, rows, 1]` f32, the output and its gradient `[batch,
        // heads, rows, head_dim]` of the scores' type (checked above), the outputs just
        // allocated with the shapes written.
        unsafe {
            with_float_type!(dtype, E => launch_attention_block_softmax_grad::<R, E>(
                &scores.client.clone(),
                scores.into_tensor_arg(),
                grad_probabilities.into_tensor_arg(),
                lse.into_tensor_arg(),
                output.into_tensor_arg(),
                grad_output.into_tensor_arg(),
                probabilities.clone().into_tensor_arg(),
                grad_scores.clone().into_tensor_arg(),
                block,
            ));
        }
        (probabilities, grad_scores)
    }

    fn fused_attention(dtype: DType, head_dim: usize) -> bool {
        has_kernels(dtype) && supports_head_dim(head_dim)
    }
}

/// The block softmax kernels' sizes for `scores` (`[batch, heads, rows, keys]`), where
/// they take them: a kernel element type, at least one row and key.
fn block_dims<R: CubeRuntime>(scores: &CubeTensor<R>, diagonal: Option<usize>, scale: f32) -> Option<BlockDims> {
    let [batch, heads, rows, keys] = dims(scores);
    let fits = has_kernels(scores.dtype) && batch * heads * rows * keys > 0;
    fits.then_some(BlockDims { batch_heads: batch * heads, heads, rows, keys, diagonal, scale })
}

/// `[batch, heads, rows, 1]`: the shape of a row statistic of `scores`.
fn row_dims<R: CubeRuntime>(scores: &CubeTensor<R>) -> [usize; 4] {
    let [batch, heads, rows, _] = dims(scores);
    [batch, heads, rows, 1]
}

/// A new contiguous tensor of `shape` and `dtype` on `like`'s device.
fn empty_like<R: CubeRuntime>(like: &CubeTensor<R>, shape: [usize; 4], dtype: DType) -> CubeTensor<R> {
    empty_device_contiguous_dtype(like.client.clone(), like.device.clone(), Shape::new(shape), dtype)
}
