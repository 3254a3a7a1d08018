//! conv_transpose2d: the adjoint of conv2d, so col2im is its natural forward: per chunk,
//! GEMM of the weightsᵀ with the input → col2im into the (larger) output image.

use burn::tensor::Tensor;
use burn_backend::ops::conv::calculate_conv_transpose_output_size;
use burn_backend::ops::ConvTransposeOptions;
use burn_backend::tensor::FloatTensor;
use leanburn_kernels::ConvGeometry;

use super::{chunks, contiguous, float, ChunkedConv};

/// The inputs handed back when this path declines: `(x, weight, bias)`.
pub(crate) type Declined<B> = (FloatTensor<B>, FloatTensor<B>, Option<FloatTensor<B>>);

/// `None` when the output padding makes the output larger than the conv2d it is the
/// adjoint of (`padding_out ≥ stride`); the caller then uses `B`'s own op.
pub(crate) fn conv_transpose2d<B: ChunkedConv>(
    x: FloatTensor<B>,
    weight: FloatTensor<B>,
    bias: Option<FloatTensor<B>>,
    options: ConvTransposeOptions<2>,
) -> Result<FloatTensor<B>, Declined<B>> {
    let xt = float::<B, 4>(x.clone());
    let wt = float::<B, 4>(weight.clone());
    let [batch, in_channels, in_h, in_w] = xt.dims();
    let [weight_in, out_per_group, kernel_h, kernel_w] = wt.dims();
    let groups = options.groups;
    assert!(groups >= 1, "conv_transpose2d: groups must be at least 1");
    assert!(
        weight_in == in_channels && in_channels % groups == 0,
        "conv_transpose2d: the input has {in_channels} channels but the weight expects \
         {weight_in} (in {groups} groups)"
    );
    let out_channels = out_per_group * groups;
    let size = |axis: usize, input: usize, kernel: usize| {
        let reach = input.saturating_sub(1) * options.stride[axis]
            + options.dilation[axis] * kernel.saturating_sub(1)
            + 1
            + options.padding_out[axis];
        assert!(
            input >= 1 && kernel >= 1 && reach > 2 * options.padding[axis],
            "conv_transpose2d: padding {:?} removes the whole output (input {in_h}×{in_w}, \
             kernel {kernel_h}×{kernel_w})",
            options.padding
        );
        calculate_conv_transpose_output_size(
            kernel,
            options.stride[axis],
            options.padding[axis],
            options.padding_out[axis],
            options.dilation[axis],
            input,
        )
    };
    let (out_h, out_w) = (size(0, in_h, kernel_h), size(1, in_w, kernel_w));
    let geometry = ConvGeometry {
        channels: out_channels,
        in_h: out_h,
        in_w: out_w,
        kernel_h,
        kernel_w,
        stride: options.stride,
        padding: options.padding,
        dilation: options.dilation,
    };
    if geometry.output_size() != Some([in_h, in_w]) {
        drop((xt, wt));
        return Err((x, weight, bias));
    }
    drop((x, weight));

    let (device, dtype) = (xt.device(), xt.dtype());
    let pixels = in_h * in_w;
    let per_image = (geometry.col_rows() + 2 * in_channels) * pixels * dtype.size();
    let chunk = super::super::ConvBudget::current().chunk(batch, per_image);

    let in_per_group = in_channels / groups;
    // [groups, out per group · kh · kw, in per group]
    let weights_t = contiguous(wt.reshape([groups, in_per_group, geometry.col_rows() / groups]).swap_dims(1, 2));
    let mut out =
        Tensor::<B, 4>::empty([batch, out_channels, out_h, out_w], (&device, dtype)).into_primitive().tensor();
    for (start, len) in chunks(batch, chunk) {
        let input = contiguous(xt.clone().slice([start..start + len]))
            .reshape([len, in_channels, pixels])
            .swap_dims(0, 1)
            .reshape([groups, in_per_group, len * pixels]);
        let columns = weights_t.clone().matmul(input).reshape([geometry.col_rows(), len * pixels]);
        out = B::col2im(columns.into_primitive().tensor(), out, &geometry, start, len);
    }
    let out = float::<B, 4>(out);
    let out = match bias {
        Some(bias) => out + float::<B, 1>(bias).reshape([1, out_channels, 1, 1]),
        None => out,
    };
    Ok(out.into_primitive().tensor())
}
