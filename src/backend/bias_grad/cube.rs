//! [`BiasGradOps`] on CubeCL backends: `leanburn-kernels`' column sums.

use burn_backend::ops::ModuleOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{DType, Shape};
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use leanburn_kernels::{
    column_sum_blocks, launch_column_sums, vector_width, MAX_COLUMN_SUM_ROWS, MAX_COLUMN_SUM_VECTORS,
};

use super::BiasGradOps;
use crate::backend::{contiguous_of, has_kernels};

impl<R, F, I, BT> BiasGradOps for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn bias_grad(output_grad: FloatTensor<Self>) -> FloatTensor<Self> {
        let dtype = output_grad.dtype;
        let dims = output_grad.meta.shape().to_vec();
        let (columns, rows) = match dims.split_last() {
            Some((&columns, leading)) if !leading.is_empty() => (columns, leading.iter().product::<usize>()),
            _ => return <Self as ModuleOps<Self>>::linear_bias_backward(output_grad),
        };
        if !has_kernels(dtype)
            || rows == 0
            || columns == 0
            || rows > MAX_COLUMN_SUM_ROWS
            || columns > MAX_COLUMN_SUM_VECTORS
        {
            return <Self as ModuleOps<Self>>::linear_bias_backward(output_grad);
        }
        let output_grad =
            if row_stride(&output_grad).is_some() { output_grad } else { contiguous_of(output_grad, dtype) };
        let stride = row_stride(&output_grad).expect("a contiguous tensor's rows are evenly spaced");
        let client = output_grad.client.clone();
        let empty = |shape: Shape, dtype: DType| {
            empty_device_contiguous_dtype(client.clone(), output_grad.device.clone(), shape, dtype)
        };
        // Dividing both the row and the stride between rows.
        let width = vector_width(&client, dtype.size(), columns | stride);
        let vectors = columns / width;
        let blocks = column_sum_blocks(&client, rows, vectors);
        let grad = empty(Shape::new([columns]), dtype);
        #[cfg(test)]
        LAUNCHED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: `output_grad` holds `rows` rows of `columns` contiguous elements of
        // `dtype`, `stride` elements apart (both multiples of `width`, a width the runtime
        // prefers); the partial sums and the gradient were just allocated contiguous with
        // the shapes the launches write; `rows` and `columns` are within the kernel's
        // limits.
        unsafe {
            with_float_type!(dtype, E => {
                if blocks == 1 {
                    launch_column_sums::<R, E, E>(&client, output_grad.into_tensor_arg(), grad.clone().into_tensor_arg(),
                        [rows, vectors], width, stride / width, 1);
                } else {
                    let partials = empty(Shape::new([blocks, columns]), DType::F32);
                    launch_column_sums::<R, E, f32>(&client, output_grad.into_tensor_arg(),
                        partials.clone().into_tensor_arg(), [rows, vectors], width, stride / width, blocks);
                    launch_column_sums::<R, f32, E>(&client, partials.into_tensor_arg(), grad.clone().into_tensor_arg(),
                        [blocks, vectors], width, vectors, 1);
                }
            });
        }
        grad
    }
}

/// The elements between a tensor's rows when its dimensions but the last fold into evenly
/// spaced rows and its last is contiguous (a contiguous tensor, or one with padded rows:
/// CUDA's pitched layout); `None` when they do not. Dimensions of one element are skipped.
fn row_stride<R: CubeRuntime>(tensor: &CubeTensor<R>) -> Option<usize> {
    let (shape, strides) = (tensor.meta.shape(), tensor.meta.strides());
    let last = shape.len() - 1;
    if shape[last] > 1 && strides[last] != 1 {
        return None;
    }
    let mut leading = (0..last).rev().filter(|&d| shape[d] > 1);
    let Some(inner) = leading.next() else { return Some(shape[last]) };
    let mut span = strides[inner] * shape[inner];
    for d in leading {
        if strides[d] != span {
            return None;
        }
        span = strides[d] * shape[d];
    }
    Some(strides[inner])
}

/// Kernel launches, for the tests' control (the fallback is Burn's op).
#[cfg(test)]
pub(super) static LAUNCHED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
