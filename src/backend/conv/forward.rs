//! conv2d forward: per chunk (or row tile of one image), im2col → GEMM with the weights →
//! bias → into the output.

use burn::tensor::Tensor;
use burn_backend::ops::ConvOptions;
use burn_backend::tensor::FloatTensor;
use leanburn_kernels::ConvGeometry;

use super::rows::row_tiles;
use super::{chunks, contiguous, conv_geometry, float, plan_chunk, ChunkedConv};
use crate::backend::gemm;

pub(crate) fn conv2d<B: ChunkedConv>(
    x: FloatTensor<B>,
    weight: FloatTensor<B>,
    bias: Option<FloatTensor<B>>,
    options: ConvOptions<2>,
) -> FloatTensor<B> {
    let x = float::<B, 4>(x);
    let weight = float::<B, 4>(weight);
    let geometry = conv_geometry("conv2d", x.dims(), weight.dims(), &options);
    let [batch, ..] = x.dims();
    let [out_channels, _, _, _] = weight.dims();
    let groups = options.groups;
    let [out_h, out_w] = geometry.output_size().expect("validated geometry");
    let rows_per_group = geometry.col_rows() / groups;
    let (device, dtype) = (x.device(), x.dtype());
    let plan = plan_chunk::<B>(&geometry, batch, out_channels, dtype.size());

    let weights = contiguous(weight).reshape([groups, out_channels / groups, rows_per_group]);
    let bias = bias.map(|b| float::<B, 1>(b).reshape([1, out_channels, 1, 1]));
    // `len` images (or one image's tile) of `rows` output rows from `image`, whose
    // convolution is `geometry`.
    let run = |image: FloatTensor<B>, geometry: &ConvGeometry, start: usize, len: usize, rows: usize| -> Tensor<B, 4> {
        let columns =
            float::<B, 2>(B::im2col(image, geometry, start, len)).reshape([groups, rows_per_group, len * rows * out_w]);
        // Split dims while contiguous, then permute: Burn 0.21's CubeCL reshape computes
        // wrong strides when it splits a permuted tensor with unit dims.
        let out = gemm(weights.clone(), columns).reshape([out_channels, len, rows, out_w]).swap_dims(0, 1);
        match &bias {
            Some(bias) => out + bias.clone(),
            None => out,
        }
    };

    // Chunks are written into one contiguous output, which is also the copy that makes a
    // single chunk's permuted result contiguous.
    let mut out = Tensor::<B, 4>::empty([batch, out_channels, out_h, out_w], (&device, dtype));
    if plan.row_tiles > 1 {
        for image in 0..batch {
            for tile in row_tiles(&geometry, plan.rows_per_tile) {
                let input = tile.input(&x, image).into_primitive().tensor();
                let part = run(input, &tile.geometry, 0, 1, tile.out_rows.len());
                out = out.slice_assign([image..image + 1, 0..out_channels, tile.out_rows], part);
            }
        }
        return out.into_primitive().tensor();
    }
    let x = x.into_primitive().tensor();
    for (start, len) in chunks(batch, plan.images_per_chunk) {
        out = out.slice_assign([start..start + len], run(x.clone(), &geometry, start, len, out_h));
    }
    out.into_primitive().tensor()
}
