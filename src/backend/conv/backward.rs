//! conv2d gradients, chunked like the forward:
//! - input: GEMM of the weightsᵀ with the output gradient → col2im into the chunk;
//! - weight: GEMM of the output gradient with im2col(x), accumulated over chunks.

use burn::tensor::Tensor;
use burn_backend::ops::ConvOptions;
use burn_backend::tensor::FloatTensor;

use super::{chunks, contiguous, conv_geometry, float, plan_chunk, ChunkedConv};

/// The output gradient of images `start .. start + len` as `[groups, out/groups, len · pixels]`.
fn grad_columns<B: ChunkedConv>(output_grad: &Tensor<B, 4>, start: usize, len: usize, groups: usize) -> Tensor<B, 3> {
    let [_, out_channels, out_h, out_w] = output_grad.dims();
    contiguous(output_grad.clone().slice([start..start + len]))
        .reshape([len, out_channels, out_h * out_w])
        .swap_dims(0, 1)
        .reshape([groups, out_channels / groups, len * out_h * out_w])
}

/// The output gradient of images `start .. start + len` as
/// `[groups, len · pixels, out/groups]` (contiguous).
fn grad_rows<B: ChunkedConv>(output_grad: &Tensor<B, 4>, start: usize, len: usize, groups: usize) -> Tensor<B, 3> {
    let [_, out_channels, out_h, out_w] = output_grad.dims();
    let out_per_group = out_channels / groups;
    let chunk = contiguous(output_grad.clone().slice([start..start + len]));
    chunk.reshape([len, groups, out_per_group, out_h * out_w]).permute([1, 0, 3, 2]).reshape([
        groups,
        len * out_h * out_w,
        out_per_group,
    ])
}

pub(crate) fn conv2d_x_backward<B: ChunkedConv>(
    x: FloatTensor<B>,
    weight: FloatTensor<B>,
    output_grad: FloatTensor<B>,
    options: ConvOptions<2>,
) -> FloatTensor<B> {
    let x = float::<B, 4>(x);
    let weight = float::<B, 4>(weight);
    let output_grad = float::<B, 4>(output_grad);
    let geometry = conv_geometry("conv2d_x_backward", x.dims(), weight.dims(), &options);
    let x_dims = x.dims();
    let (device, dtype) = (x.device(), x.dtype());
    drop(x);
    let [batch, ..] = x_dims;
    let [out_channels, ..] = weight.dims();
    let groups = options.groups;
    let pixels = geometry.col_cols_per_image();
    let rows_per_group = geometry.col_rows() / groups;
    let chunk = plan_chunk::<B>(&geometry, batch, out_channels, pixels, dtype.size()).images_per_chunk;

    // [groups, rows per group, out per group]
    let weights_t = contiguous(weight.reshape([groups, out_channels / groups, rows_per_group]).swap_dims(1, 2));
    let mut x_grad = Tensor::<B, 4>::empty(x_dims, (&device, dtype)).into_primitive().tensor();
    for (start, len) in chunks(batch, chunk) {
        let grad = grad_columns(&output_grad, start, len, groups);
        let columns = weights_t.clone().matmul(grad).reshape([geometry.col_rows(), len * pixels]);
        x_grad = B::col2im(columns.into_primitive().tensor(), x_grad, &geometry, start, len);
    }
    x_grad
}

pub(crate) fn conv2d_weight_backward<B: ChunkedConv>(
    x: FloatTensor<B>,
    weight: FloatTensor<B>,
    output_grad: FloatTensor<B>,
    options: ConvOptions<2>,
) -> FloatTensor<B> {
    let x = float::<B, 4>(x);
    let weight = float::<B, 4>(weight);
    let output_grad = float::<B, 4>(output_grad);
    let weight_dims = weight.dims();
    let geometry = conv_geometry("conv2d_weight_backward", x.dims(), weight_dims, &options);
    drop(weight);
    let [batch, ..] = x.dims();
    let [out_channels, ..] = weight_dims;
    let groups = options.groups;
    let pixels = geometry.col_cols_per_image();
    let rows_per_group = geometry.col_rows() / groups;
    let chunk = plan_chunk::<B>(&geometry, batch, out_channels, pixels, x.dtype().size()).images_per_chunk;

    let x = x.into_primitive().tensor();
    let mut weight_grad: Option<Tensor<B, 3>> = None;
    for (start, len) in chunks(batch, chunk) {
        let columns =
            float::<B, 2>(B::im2col(x.clone(), &geometry, start, len)).reshape([groups, rows_per_group, len * pixels]);
        // The transposed weight gradient, so both GEMM operands are contiguous without
        // copying the (large) column matrix: [groups, rows per group, out per group].
        let part = columns.matmul(grad_rows(&output_grad, start, len, groups));
        weight_grad = Some(match weight_grad {
            Some(sum) => sum + part,
            None => part,
        });
    }
    weight_grad
        .expect("a convolution has at least one image")
        .swap_dims(1, 2)
        .reshape([out_channels, rows_per_group])
        .reshape(weight_dims)
        .into_primitive()
        .tensor()
}
