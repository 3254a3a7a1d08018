//! conv_transpose2d: the adjoint of conv2d, so it runs as conv2d's input gradient does
//! ([`adjoint`]): per chunk of images, or per row tile of one image, GEMM of the weightsᵀ
//! with the input → col2im into the (larger) output image.

use burn_backend::ops::conv::calculate_conv_transpose_output_size;
use burn_backend::ops::ConvTransposeOptions;
use burn_backend::tensor::FloatTensor;
use leanburn_kernels::ConvGeometry;

use super::backward::adjoint;
use super::{float, plan_chunk, ChunkedConv, ConvPlan};

/// The inputs handed back when this path declines: `(x, weight, bias)`.
pub(crate) type Declined<B> = (FloatTensor<B>, FloatTensor<B>, Option<FloatTensor<B>>);

/// The conv2d whose adjoint `conv_transpose2d(x, weight)` is: the geometry of its image,
/// which is the transposed convolution's output. `None` when the output padding makes
/// that output larger than the conv2d it is the adjoint of (`padding_out ≥ stride`).
/// Panics on shapes Burn's own op would reject.
fn adjoint_geometry(
    x_dims: [usize; 4],
    weight_dims: [usize; 4],
    options: &ConvTransposeOptions<2>,
) -> Option<ConvGeometry> {
    let [_, in_channels, in_h, in_w] = x_dims;
    let [weight_in, out_per_group, kernel_h, kernel_w] = weight_dims;
    let groups = options.groups;
    assert!(groups >= 1, "conv_transpose2d: groups must be at least 1");
    assert!(
        weight_in == in_channels && in_channels % groups == 0,
        "conv_transpose2d: the input has {in_channels} channels but the weight expects \
         {weight_in} (in {groups} groups)"
    );
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
    let geometry = ConvGeometry {
        channels: out_per_group * groups,
        in_h: size(0, in_h, kernel_h),
        in_w: size(1, in_w, kernel_w),
        kernel_h,
        kernel_w,
        stride: options.stride,
        padding: options.padding,
        dilation: options.dilation,
    };
    (geometry.output_size() == Some([in_h, in_w])).then_some(geometry)
}

/// The plan `Lean<B>` follows for `conv_transpose2d` of an input of `x_dims` with a weight
/// of `weight_dims` (`[in, out / groups, kh, kw]`), elements of `elem_bytes`: the plan of
/// the conv2d it is the adjoint of, row tiles included. `None` when `Lean` hands the op to
/// `B` (an output padding not smaller than the stride). Panics on shapes Burn's own op
/// would reject.
pub fn conv_transpose2d_plan<B: ChunkedConv>(
    x_dims: [usize; 4],
    weight_dims: [usize; 4],
    options: &ConvTransposeOptions<2>,
    elem_bytes: usize,
) -> Option<ConvPlan> {
    let geometry = adjoint_geometry(x_dims, weight_dims, options)?;
    Some(plan_chunk::<B>(&geometry, x_dims[0], x_dims[1], elem_bytes))
}

/// `Err` with the inputs when the output padding makes the output larger than the conv2d
/// it is the adjoint of (`padding_out ≥ stride`); the caller then uses `B`'s own op.
pub(crate) fn conv_transpose2d<B: ChunkedConv>(
    x: FloatTensor<B>,
    weight: FloatTensor<B>,
    bias: Option<FloatTensor<B>>,
    options: ConvTransposeOptions<2>,
) -> Result<FloatTensor<B>, Declined<B>> {
    let xt = float::<B, 4>(x.clone());
    let wt = float::<B, 4>(weight.clone());
    let [batch, _, _, _] = xt.dims();
    let Some(geometry) = adjoint_geometry(xt.dims(), wt.dims(), &options) else {
        drop((xt, wt));
        return Err((x, weight, bias));
    };
    drop((x, weight));
    let out_channels = geometry.channels;
    let out_dims = [batch, out_channels, geometry.in_h, geometry.in_w];
    let out = float::<B, 4>(adjoint(out_dims, &geometry, wt, xt, options.groups));
    let out = match bias {
        Some(bias) => out + float::<B, 1>(bias).reshape([1, out_channels, 1, 1]),
        None => out,
    };
    Ok(out.into_primitive().tensor())
}
