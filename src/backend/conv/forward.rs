//! conv2d forward: per chunk, im2col → GEMM with the weights → bias → into the output.

use burn::tensor::Tensor;
use burn_backend::ops::ConvOptions;
use burn_backend::tensor::FloatTensor;

use super::{chunks, contiguous, conv_geometry, float, plan_chunk, ChunkedConv};

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
    let pixels = out_h * out_w;
    let rows_per_group = geometry.col_rows() / groups;
    let (device, dtype) = (x.device(), x.dtype());
    let chunk = plan_chunk::<B>(&geometry, batch, out_channels, pixels, dtype.size()).images_per_chunk;

    let weights = contiguous(weight).reshape([groups, out_channels / groups, rows_per_group]);
    let bias = bias.map(|b| float::<B, 1>(b).reshape([1, out_channels, 1, 1]));
    let x = x.into_primitive().tensor();
    let run = |start: usize, len: usize| -> Tensor<B, 4> {
        let columns =
            float::<B, 2>(B::im2col(x.clone(), &geometry, start, len)).reshape([groups, rows_per_group, len * pixels]);
        // Split dims while contiguous, then permute: Burn 0.21's CubeCL reshape computes
        // wrong strides when it splits a permuted tensor with unit dims.
        let out = weights.clone().matmul(columns).reshape([out_channels, len, out_h, out_w]).swap_dims(0, 1);
        match &bias {
            Some(bias) => out + bias.clone(),
            None => out,
        }
    };

    // Chunks are written into one contiguous output, which is also the copy that makes a
    // single chunk's permuted result contiguous.
    let mut out = Tensor::<B, 4>::empty([batch, out_channels, out_h, out_w], (&device, dtype));
    for (start, len) in chunks(batch, chunk) {
        out = out.slice_assign([start..start + len], run(start, len));
    }
    out.into_primitive().tensor()
}
