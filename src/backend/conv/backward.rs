//! conv2d gradients, chunked like the forward (by images, or by row tiles of one image):
//! - input: GEMM of the weightsᵀ with the output gradient → col2im into the chunk (the
//!   [`adjoint`], which `conv_transpose2d` runs as well);
//! - weight: GEMM of the output gradient with im2col(x), accumulated over chunks.

use std::ops::Range;

use burn::tensor::Tensor;
use burn_backend::ops::ConvOptions;
use burn_backend::tensor::FloatTensor;
use leanburn_kernels::ConvGeometry;

use super::rows::row_tiles;
use super::{chunks, contiguous, conv_geometry, float, plan_chunk, ChunkedConv};
use crate::backend::gemm;

/// A part of the output gradient (`[len, out, rows, out_w]`: whole images or one image's
/// row tile) as `[groups, out/groups, len · rows · out_w]`.
fn grad_columns<B: ChunkedConv>(part: Tensor<B, 4>, groups: usize) -> Tensor<B, 3> {
    let [len, out_channels, rows, out_w] = part.dims();
    contiguous(part).reshape([len, out_channels, rows * out_w]).swap_dims(0, 1).reshape([
        groups,
        out_channels / groups,
        len * rows * out_w,
    ])
}

/// A part of the output gradient (`[len, out, rows, out_w]`) as
/// `[groups, len · rows · out_w, out/groups]` (contiguous).
fn grad_rows<B: ChunkedConv>(part: Tensor<B, 4>, groups: usize) -> Tensor<B, 3> {
    let [len, out_channels, rows, out_w] = part.dims();
    let out_per_group = out_channels / groups;
    contiguous(part).reshape([len, groups, out_per_group, rows * out_w]).permute([1, 0, 3, 2]).reshape([
        groups,
        len * rows * out_w,
        out_per_group,
    ])
}

/// Output rows `rows` of image `image` of the output gradient.
fn tile_of<B: ChunkedConv>(output_grad: &Tensor<B, 4>, image: usize, rows: Range<usize>) -> Tensor<B, 4> {
    let [_, out_channels, _, _] = output_grad.dims();
    output_grad.clone().slice([image..image + 1, 0..out_channels, rows])
}

pub(crate) fn conv2d_x_backward<B: ChunkedConv>(
    x: FloatTensor<B>,
    weight: FloatTensor<B>,
    output_grad: FloatTensor<B>,
    options: ConvOptions<2>,
) -> FloatTensor<B> {
    let x = float::<B, 4>(x);
    let weight = float::<B, 4>(weight);
    let geometry = conv_geometry("conv2d_x_backward", x.dims(), weight.dims(), &options);
    let x_dims = x.dims();
    drop(x);
    adjoint(x_dims, &geometry, weight, float::<B, 4>(output_grad), options.groups)
}

/// The adjoint of conv2d (its input gradient, and `conv_transpose2d`'s output): the image
/// of `x_dims` from `output_grad`, where `geometry` is the convolution of that image with
/// `weight` (`[out, in / groups, kh, kw]`). Per chunk (or row tile): GEMM of the weightsᵀ
/// with the output gradient → col2im.
pub(crate) fn adjoint<B: ChunkedConv>(
    x_dims: [usize; 4],
    geometry: &ConvGeometry,
    weight: Tensor<B, 4>,
    output_grad: Tensor<B, 4>,
    groups: usize,
) -> FloatTensor<B> {
    let (device, dtype) = (output_grad.device(), output_grad.dtype());
    let [batch, ..] = x_dims;
    let [out_channels, ..] = weight.dims();
    let pixels = geometry.col_cols_per_image();
    let rows_per_group = geometry.col_rows() / groups;
    let plan = plan_chunk::<B>(geometry, batch, out_channels, dtype.size());

    // [groups, rows per group, out per group]
    let weights_t = contiguous(weight.reshape([groups, out_channels / groups, rows_per_group]).swap_dims(1, 2));
    let columns_of = |grad: Tensor<B, 3>, cols: usize| {
        gemm(weights_t.clone(), grad).reshape([geometry.col_rows(), cols]).into_primitive().tensor()
    };
    if plan.row_tiles > 1 {
        // Tiles overlap in the input: their gradients are added into a zeroed one.
        let mut x_grad = Tensor::<B, 4>::zeros(x_dims, (&device, dtype));
        let [_, channels, _, in_w] = x_dims;
        for image in 0..batch {
            for tile in row_tiles(geometry, plan.rows_per_tile) {
                let grad = grad_columns(tile_of(&output_grad, image, tile.out_rows.clone()), groups);
                let columns = columns_of(grad, tile.geometry.col_cols_per_image());
                let empty = Tensor::<B, 4>::empty([1, channels, tile.geometry.in_h, in_w], (&device, dtype));
                let tile_grad = B::col2im(columns, empty.into_primitive().tensor(), &tile.geometry, 0, 1);
                x_grad = tile.add_into(x_grad, float::<B, 4>(tile_grad), image);
            }
        }
        return x_grad.into_primitive().tensor();
    }
    let mut x_grad = Tensor::<B, 4>::empty(x_dims, (&device, dtype)).into_primitive().tensor();
    for (start, len) in chunks(batch, plan.images_per_chunk) {
        let grad = grad_columns(output_grad.clone().slice([start..start + len]), groups);
        x_grad = B::col2im(columns_of(grad, len * pixels), x_grad, geometry, start, len);
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
    let rows_per_group = geometry.col_rows() / groups;
    let plan = plan_chunk::<B>(&geometry, batch, out_channels, x.dtype().size());

    // The transposed weight gradient, so both GEMM operands are contiguous without
    // copying the (large) column matrix: [groups, rows per group, out per group].
    let part = |image: FloatTensor<B>, geometry: &ConvGeometry, start: usize, len: usize, grad: Tensor<B, 4>| {
        let columns = float::<B, 2>(B::im2col(image, geometry, start, len)).reshape([
            groups,
            rows_per_group,
            len * geometry.col_cols_per_image(),
        ]);
        gemm(columns, grad_rows(grad, groups))
    };
    let mut weight_grad: Option<Tensor<B, 3>> = None;
    let mut add = |part: Tensor<B, 3>| {
        weight_grad = Some(match weight_grad.take() {
            Some(sum) => sum + part,
            None => part,
        })
    };
    if plan.row_tiles > 1 {
        for image in 0..batch {
            for tile in row_tiles(&geometry, plan.rows_per_tile) {
                let input = tile.input(&x, image).into_primitive().tensor();
                add(part(input, &tile.geometry, 0, 1, tile_of(&output_grad, image, tile.out_rows.clone())));
            }
        }
    } else {
        let x = x.into_primitive().tensor();
        for (start, len) in chunks(batch, plan.images_per_chunk) {
            add(part(x.clone(), &geometry, start, len, output_grad.clone().slice([start..start + len])));
        }
    }
    weight_grad
        .expect("a convolution has at least one image")
        .swap_dims(1, 2)
        .reshape([out_channels, rows_per_group])
        .reshape(weight_dims)
        .into_primitive()
        .tensor()
}
