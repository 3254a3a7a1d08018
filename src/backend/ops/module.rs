//! [`ModuleOps`] for [`Lean`]: the 2-D convolutions, the linear layers' products and the
//! embedding's gradient are leanburn's, everything else `B`'s.
//!
//! The 2-D convolutions sit apart at the top: they are the ops leanburn exists to replace
//! (memory-bounded kernels instead of `B`'s im2col / implicit GEMM), and keeping them
//! hand-written there lets that change touch four bodies and nothing else.
//!
//! Five ops return structs generic over the backend (`MaxPool*WithIndices`,
//! `MaxPool*Backward`, `DeformConv2dBackward`): `X<B>` and `X<Lean<B>>` are different types
//! with the same fields, so those results are rebuilt field by field.

use burn_backend::ops::{
    AttentionModuleOptions, ConvOptions, ConvTransposeOptions, DeformConv2dBackward, DeformConvOptions,
    InterpolateOptions, MaxPool1dBackward, MaxPool1dWithIndices, MaxPool2dBackward, MaxPool2dWithIndices, ModuleOps,
    UnfoldOptions,
};
use burn_backend::tensor::{BoolTensor, FloatTensor, IntTensor};

use super::forward::forward;
use crate::backend::gemm;
use crate::backend::{ChunkedConv, Lean};

impl<B: ChunkedConv> ModuleOps<Self> for Lean<B> {
    // Convolutions: leanburn's chunked im2col / col2im + GEMM (see backend/conv).
    fn conv2d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Self> {
        crate::backend::conv::forward::conv2d::<B>(x, weight, bias, options)
    }

    fn conv2d_x_backward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Self> {
        crate::backend::conv::backward::conv2d_x_backward::<B>(x, weight, output_grad, options)
    }

    fn conv2d_weight_backward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Self> {
        crate::backend::conv::backward::conv2d_weight_backward::<B>(x, weight, output_grad, options)
    }

    fn conv_transpose2d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvTransposeOptions<2>,
    ) -> FloatTensor<Self> {
        // Output padding beyond the stride has no conv2d adjoint: `B`'s own op, explicitly.
        match crate::backend::conv::transpose::conv_transpose2d::<B>(x, weight, bias, options.clone()) {
            Ok(out) => out,
            Err((x, weight, bias)) => B::conv_transpose2d(x, weight, bias, options),
        }
    }

    // Results generic over the backend: rebuilt as `X<Lean<B>>`.
    fn deform_conv2d_backward(
        x: FloatTensor<Self>,
        offset: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        mask: Option<FloatTensor<Self>>,
        bias: Option<FloatTensor<Self>>,
        output_grad: FloatTensor<Self>,
        options: DeformConvOptions<2>,
    ) -> DeformConv2dBackward<Self> {
        let grads = B::deform_conv2d_backward(x, offset, weight, mask, bias, output_grad, options);
        DeformConv2dBackward {
            x_grad: grads.x_grad,
            offset_grad: grads.offset_grad,
            weight_grad: grads.weight_grad,
            mask_grad: grads.mask_grad,
            bias_grad: grads.bias_grad,
        }
    }

    fn max_pool1d_with_indices(
        x: FloatTensor<Self>,
        kernel_size: usize,
        stride: usize,
        padding: usize,
        dilation: usize,
        ceil_mode: bool,
    ) -> MaxPool1dWithIndices<Self> {
        let out = B::max_pool1d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode);
        MaxPool1dWithIndices { output: out.output, indices: out.indices }
    }

    fn max_pool1d_with_indices_backward(
        x: FloatTensor<Self>,
        kernel_size: usize,
        stride: usize,
        padding: usize,
        dilation: usize,
        ceil_mode: bool,
        output_grad: FloatTensor<Self>,
        indices: IntTensor<Self>,
    ) -> MaxPool1dBackward<Self> {
        let grads = B::max_pool1d_with_indices_backward(
            x,
            kernel_size,
            stride,
            padding,
            dilation,
            ceil_mode,
            output_grad,
            indices,
        );
        MaxPool1dBackward { x_grad: grads.x_grad }
    }

    fn max_pool2d_with_indices(
        x: FloatTensor<Self>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        ceil_mode: bool,
    ) -> MaxPool2dWithIndices<Self> {
        let out = B::max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode);
        MaxPool2dWithIndices { output: out.output, indices: out.indices }
    }

    fn max_pool2d_with_indices_backward(
        x: FloatTensor<Self>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        ceil_mode: bool,
        output_grad: FloatTensor<Self>,
        indices: IntTensor<Self>,
    ) -> MaxPool2dBackward<Self> {
        let grads = B::max_pool2d_with_indices_backward(
            x,
            kernel_size,
            stride,
            padding,
            dilation,
            ceil_mode,
            output_grad,
            indices,
        );
        MaxPool2dBackward { x_grad: grads.x_grad }
    }

    // The linear layers' products on the vendor's GEMM where `B` has it, `B`'s own otherwise.
    fn linear(x: FloatTensor<Self>, weight: FloatTensor<Self>, bias: Option<FloatTensor<Self>>) -> FloatTensor<Self> {
        if B::vendor_gemm(&B::float_device(&x)) {
            gemm::linear::<B>(x, weight, bias)
        } else {
            B::linear(x, weight, bias)
        }
    }

    fn linear_x_backward(weight: FloatTensor<Self>, output_grad: FloatTensor<Self>) -> FloatTensor<Self> {
        if B::vendor_gemm(&B::float_device(&weight)) {
            gemm::linear_x_backward::<B>(weight, output_grad)
        } else {
            B::linear_x_backward(weight, output_grad)
        }
    }

    fn linear_weight_backward(x: FloatTensor<Self>, output_grad: FloatTensor<Self>) -> FloatTensor<Self> {
        if B::vendor_gemm(&B::float_device(&x)) {
            gemm::linear_weight_backward::<B>(x, output_grad)
        } else {
            B::linear_weight_backward(x, output_grad)
        }
    }

    // The embedding's gradient on leanburn's kernel where `B` is CubeCL's (see backend/embedding).
    fn embedding_backward(
        weights: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
        indices: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        B::embedding_grad(weights, output_grad, indices)
    }

    // A bias's gradient on leanburn's column sums where `B` is CubeCL's (see backend/bias_grad).
    fn linear_bias_backward(output_grad: FloatTensor<Self>) -> FloatTensor<Self> {
        B::bias_grad(output_grad)
    }

    forward! {
        fn embedding(weights: FloatTensor<Self>, indices: IntTensor<Self>) -> FloatTensor<Self>;
        fn conv1d(
            x: FloatTensor<Self>,
            weight: FloatTensor<Self>,
            bias: Option<FloatTensor<Self>>,
            options: ConvOptions<1>,
        ) -> FloatTensor<Self>;
        fn conv1d_x_backward(
            x: FloatTensor<Self>,
            weight: FloatTensor<Self>,
            output_grad: FloatTensor<Self>,
            options: ConvOptions<1>,
        ) -> FloatTensor<Self>;
        fn conv1d_weight_backward(
            x: FloatTensor<Self>,
            weight: FloatTensor<Self>,
            output_grad: FloatTensor<Self>,
            options: ConvOptions<1>,
        ) -> FloatTensor<Self>;
        fn conv1d_bias_backward(
            x: FloatTensor<Self>,
            bias: FloatTensor<Self>,
            output_grad: FloatTensor<Self>,
        ) -> FloatTensor<Self>;
        fn conv2d_bias_backward(
            x: FloatTensor<Self>,
            bias: FloatTensor<Self>,
            output_grad: FloatTensor<Self>,
        ) -> FloatTensor<Self>;
        fn deform_conv2d(
            x: FloatTensor<Self>,
            offset: FloatTensor<Self>,
            weight: FloatTensor<Self>,
            mask: Option<FloatTensor<Self>>,
            bias: Option<FloatTensor<Self>>,
            options: DeformConvOptions<2>,
        ) -> FloatTensor<Self>;
        fn conv3d(
            x: FloatTensor<Self>,
            weight: FloatTensor<Self>,
            bias: Option<FloatTensor<Self>>,
            options: ConvOptions<3>,
        ) -> FloatTensor<Self>;
        fn conv3d_x_backward(
            x: FloatTensor<Self>,
            weight: FloatTensor<Self>,
            output_grad: FloatTensor<Self>,
            options: ConvOptions<3>,
        ) -> FloatTensor<Self>;
        fn conv3d_weight_backward(
            x: FloatTensor<Self>,
            weight: FloatTensor<Self>,
            output_grad: FloatTensor<Self>,
            options: ConvOptions<3>,
        ) -> FloatTensor<Self>;
        fn conv3d_bias_backward(
            x: FloatTensor<Self>,
            bias: FloatTensor<Self>,
            output_grad: FloatTensor<Self>,
        ) -> FloatTensor<Self>;
        fn conv_transpose1d(
            x: FloatTensor<Self>,
            weight: FloatTensor<Self>,
            bias: Option<FloatTensor<Self>>,
            options: ConvTransposeOptions<1>,
        ) -> FloatTensor<Self>;
        fn conv_transpose1d_x_backward(
            weight: FloatTensor<Self>,
            output_grad: FloatTensor<Self>,
            options: ConvTransposeOptions<1>,
        ) -> FloatTensor<Self>;
        fn conv_transpose1d_weight_backward(
            x: FloatTensor<Self>,
            weight: FloatTensor<Self>,
            output_grad: FloatTensor<Self>,
            options: ConvTransposeOptions<1>,
        ) -> FloatTensor<Self>;
        fn conv_transpose1d_bias_backward(
            x: FloatTensor<Self>,
            bias: FloatTensor<Self>,
            output_grad: FloatTensor<Self>,
        ) -> FloatTensor<Self>;
        fn conv_transpose2d_x_backward(
            weight: FloatTensor<Self>,
            output_grad: FloatTensor<Self>,
            options: ConvTransposeOptions<2>,
        ) -> FloatTensor<Self>;
        fn conv_transpose2d_weight_backward(
            x: FloatTensor<Self>,
            weight: FloatTensor<Self>,
            output_grad: FloatTensor<Self>,
            options: ConvTransposeOptions<2>,
        ) -> FloatTensor<Self>;
        fn conv_transpose2d_bias_backward(
            x: FloatTensor<Self>,
            bias: FloatTensor<Self>,
            output_grad: FloatTensor<Self>,
        ) -> FloatTensor<Self>;
        fn conv_transpose3d(
            x: FloatTensor<Self>,
            weight: FloatTensor<Self>,
            bias: Option<FloatTensor<Self>>,
            options: ConvTransposeOptions<3>,
        ) -> FloatTensor<Self>;
        fn conv_transpose3d_x_backward(
            weight: FloatTensor<Self>,
            output_grad: FloatTensor<Self>,
            options: ConvTransposeOptions<3>,
        ) -> FloatTensor<Self>;
        fn conv_transpose3d_weight_backward(
            x: FloatTensor<Self>,
            weight: FloatTensor<Self>,
            output_grad: FloatTensor<Self>,
            options: ConvTransposeOptions<3>,
        ) -> FloatTensor<Self>;
        fn conv_transpose3d_bias_backward(
            x: FloatTensor<Self>,
            bias: FloatTensor<Self>,
            output_grad: FloatTensor<Self>,
        ) -> FloatTensor<Self>;
        fn unfold4d(
            x: FloatTensor<Self>,
            kernel_size: [usize; 2],
            options: UnfoldOptions,
        ) -> FloatTensor<Self>;
        fn avg_pool1d(
            x: FloatTensor<Self>,
            kernel_size: usize,
            stride: usize,
            padding: usize,
            count_include_pad: bool,
            ceil_mode: bool,
        ) -> FloatTensor<Self>;
        fn avg_pool1d_backward(
            x: FloatTensor<Self>,
            grad: FloatTensor<Self>,
            kernel_size: usize,
            stride: usize,
            padding: usize,
            count_include_pad: bool,
            ceil_mode: bool,
        ) -> FloatTensor<Self>;
        fn avg_pool2d(
            x: FloatTensor<Self>,
            kernel_size: [usize; 2],
            stride: [usize; 2],
            padding: [usize; 2],
            count_include_pad: bool,
            ceil_mode: bool,
        ) -> FloatTensor<Self>;
        fn avg_pool2d_backward(
            x: FloatTensor<Self>,
            grad: FloatTensor<Self>,
            kernel_size: [usize; 2],
            stride: [usize; 2],
            padding: [usize; 2],
            count_include_pad: bool,
            ceil_mode: bool,
        ) -> FloatTensor<Self>;
        fn adaptive_avg_pool2d(x: FloatTensor<Self>, output_size: [usize; 2]) -> FloatTensor<Self>;
        fn adaptive_avg_pool2d_backward(
            x: FloatTensor<Self>,
            grad: FloatTensor<Self>,
        ) -> FloatTensor<Self>;
        fn adaptive_avg_pool1d(x: FloatTensor<Self>, output_size: usize) -> FloatTensor<Self>;
        fn adaptive_avg_pool1d_backward(
            x: FloatTensor<Self>,
            grad: FloatTensor<Self>,
        ) -> FloatTensor<Self>;
        fn max_pool1d(
            x: FloatTensor<Self>,
            kernel_size: usize,
            stride: usize,
            padding: usize,
            dilation: usize,
            ceil_mode: bool,
        ) -> FloatTensor<Self>;
        fn max_pool2d(
            x: FloatTensor<Self>,
            kernel_size: [usize; 2],
            stride: [usize; 2],
            padding: [usize; 2],
            dilation: [usize; 2],
            ceil_mode: bool,
        ) -> FloatTensor<Self>;
        fn interpolate(
            x: FloatTensor<Self>,
            output_size: [usize; 2],
            options: InterpolateOptions,
        ) -> FloatTensor<Self>;
        fn interpolate_backward(
            x: FloatTensor<Self>,
            grad: FloatTensor<Self>,
            output_size: [usize; 2],
            options: InterpolateOptions,
        ) -> FloatTensor<Self>;
        fn attention(
            query: FloatTensor<Self>,
            key: FloatTensor<Self>,
            value: FloatTensor<Self>,
            mask: Option<BoolTensor<Self>>,
            attn_bias: Option<FloatTensor<Self>>,
            options: AttentionModuleOptions,
        ) -> FloatTensor<Self>;
        fn layer_norm(
            tensor: FloatTensor<Self>,
            gamma: FloatTensor<Self>,
            beta: Option<FloatTensor<Self>>,
            epsilon: f64,
        ) -> FloatTensor<Self>;
        fn ctc_loss(
            log_probs: FloatTensor<Self>,
            targets: IntTensor<Self>,
            input_lengths: IntTensor<Self>,
            target_lengths: IntTensor<Self>,
            blank: usize,
        ) -> FloatTensor<Self>;
        fn has_ctc_loss_backward() -> bool;
        fn ctc_loss_backward(
            log_probs: FloatTensor<Self>,
            targets: IntTensor<Self>,
            input_lengths: IntTensor<Self>,
            target_lengths: IntTensor<Self>,
            grad_loss: FloatTensor<Self>,
            blank: usize,
        ) -> FloatTensor<Self>;
        fn rfft(
            signal: FloatTensor<Self>,
            dim: usize,
            n: Option<usize>,
        ) -> (FloatTensor<Self>, FloatTensor<Self>);
        fn irfft(
            spectrum_re: FloatTensor<Self>,
            spectrum_im: FloatTensor<Self>,
            dim: usize,
            n: Option<usize>,
        ) -> FloatTensor<Self>;
    }
}
