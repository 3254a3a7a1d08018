//! [`EmbeddingOps`] on CubeCL backends: `leanburn-kernels`' `embedding_grad`.

use burn_backend::ops::ModuleOps;
use burn_backend::tensor::{FloatTensor, IntTensor};
use burn_backend::Shape;
use burn_cubecl::ops::numeric::zeros_client;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use leanburn_kernels::{embedding_grad_blocks, launch_embedding_grad};

use super::EmbeddingOps;
use crate::backend::{contiguous_of, has_kernels};

impl<R, F, I, BT> EmbeddingOps for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn embedding_grad(
        weights: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
        indices: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        let dtype = output_grad.dtype;
        let [rows, width] = weights.meta.shape().dims::<2>();
        let tokens = indices.meta.num_elements();
        let fits = output_grad.meta.shape().last() == Some(&width) && output_grad.meta.num_elements() == tokens * width;
        if !has_kernels(dtype) || indices.dtype != I::dtype() || !fits {
            return <Self as ModuleOps<Self>>::embedding_backward(weights, output_grad, indices);
        }
        let (client, device) = (output_grad.client.clone(), output_grad.device.clone());
        let output_grad = contiguous_of(output_grad, dtype);
        let ids = if indices.is_contiguous() { indices } else { burn_cubecl::kernel::into_contiguous(indices) };
        let grad = zeros_client(client.clone(), device, Shape::new([rows, width]), dtype);
        let blocks = embedding_grad_blocks(&client, rows);
        #[cfg(test)]
        LAUNCHED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: the output's gradient was made contiguous with `tokens · width` elements of
        // `dtype` (read as `[tokens, width]`), the ids contiguous `tokens` of `I`, and the
        // gradient just filled with zeros, `[rows, width]` of `dtype` (its rows perhaps
        // padded: CUDA's pitched layout).
        unsafe {
            with_float_type!(dtype, E => launch_embedding_grad::<R, E, I>(
                &client,
                output_grad.into_tensor_arg(),
                ids.into_tensor_arg(),
                grad.clone().into_tensor_arg(),
                [tokens, rows, width],
                blocks,
            ));
        }
        grad
    }
}

/// Kernel launches, for the tests' control (the fallback is Burn's op, equal to the bit).
#[cfg(test)]
pub(super) static LAUNCHED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
