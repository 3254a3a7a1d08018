//! im2col / col2im composed from Burn tensor ops, for backends without leanburn kernels.
//! Slower than the kernels and it holds more copies, but it is chunked the same way, so
//! the workspace stays bounded.

use burn::tensor::Tensor;
use burn_backend::ops::PadMode;
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, Slice};
use leanburn_kernels::ConvGeometry;

use super::float;

/// The taps, their stack and the permuted copy are alive together.
pub(crate) const IM2COL_COPIES: usize = 3;

/// The window of output-aligned pixels that tap `(ky, kx)` reads from the padded image.
fn tap_window(geometry: &ConvGeometry, ky: usize, kx: usize) -> [Slice; 4] {
    let [out_h, out_w] = geometry.output_size().expect("validated geometry");
    let axis = |start: usize, out: usize, stride: usize| {
        Slice::new(start as isize, Some((start + (out - 1) * stride + 1) as isize), stride as isize)
    };
    [
        Slice::full(),
        Slice::full(),
        axis(ky * geometry.dilation[0], out_h, geometry.stride[0]),
        axis(kx * geometry.dilation[1], out_w, geometry.stride[1]),
    ]
}

pub(crate) fn im2col<B: Backend>(
    image: FloatTensor<B>,
    geometry: &ConvGeometry,
    batch_offset: usize,
    chunk: usize,
) -> FloatTensor<B> {
    let g = geometry;
    let [out_h, out_w] = g.output_size().expect("validated geometry");
    let [pad_h, pad_w] = g.padding;
    let images = float::<B, 4>(image).slice([batch_offset..batch_offset + chunk]);
    let padded = images.pad((pad_w, pad_w, pad_h, pad_h), PadMode::Constant(0.0));
    let mut taps = Vec::with_capacity(g.kernel_h * g.kernel_w);
    for ky in 0..g.kernel_h {
        for kx in 0..g.kernel_w {
            taps.push(padded.clone().slice(tap_window(g, ky, kx)));
        }
    }
    // [chunk, c, taps, oh, ow] → rows (c, tap), columns (n, oy, ox).
    let stacked: Tensor<B, 5> = Tensor::stack(taps, 2);
    stacked.permute([1, 2, 0, 3, 4]).reshape([g.col_rows(), chunk * out_h * out_w]).into_primitive().tensor()
}

pub(crate) fn col2im<B: Backend>(
    columns: FloatTensor<B>,
    image: FloatTensor<B>,
    geometry: &ConvGeometry,
    batch_offset: usize,
    chunk: usize,
) -> FloatTensor<B> {
    let g = geometry;
    let [out_h, out_w] = g.output_size().expect("validated geometry");
    let [pad_h, pad_w] = g.padding;
    let taps = g.kernel_h * g.kernel_w;
    let columns = float::<B, 2>(columns).reshape([g.channels, taps, chunk, out_h, out_w]);
    let image = float::<B, 4>(image);
    let mut padded = Tensor::<B, 4>::zeros(
        [chunk, g.channels, g.in_h + 2 * pad_h, g.in_w + 2 * pad_w],
        (&image.device(), image.dtype()),
    );
    for ky in 0..g.kernel_h {
        for kx in 0..g.kernel_w {
            let tap = ky * g.kernel_w + kx;
            let part: Tensor<B, 4> = columns
                .clone()
                .slice([0..g.channels, tap..tap + 1])
                .reshape([g.channels, chunk, out_h, out_w])
                .swap_dims(0, 1);
            let window = tap_window(g, ky, kx);
            let sum = padded.clone().slice(window) + part;
            padded = padded.slice_assign(window, sum);
        }
    }
    let unpadded = padded.slice([0..chunk, 0..g.channels, pad_h..pad_h + g.in_h, pad_w..pad_w + g.in_w]);
    image.slice_assign([batch_offset..batch_offset + chunk], unpadded).into_primitive().tensor()
}
