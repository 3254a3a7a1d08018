//! col2im: fold a column-gradient matrix back onto the image, summing every tap that read
//! each pixel. Each unit gathers the taps of one pixel, so no atomics are needed and the
//! result does not depend on scheduling.

use cubecl::prelude::*;
use cubecl::{calculate_cube_count_elemwise, CubeDim};

use crate::geometry::{ConvGeometry, ConvGeometryArgs};

/// One unit per image element `(n, c, iy, ix)` of the chunk: sums
/// `columns[(c, ky, kx), (n, oy, ox)]` over the taps `(ky, kx)` and outputs `(oy, ox)` whose
/// receptive field covers the pixel, and writes the sum (overwriting) into image
/// `batch_offset + n`.
#[cube(launch_unchecked)]
pub fn col2im_kernel<F: Float>(columns: &Tensor<F>, image: &mut Tensor<F>, geo: &ConvGeometryArgs) {
    let channels = image.shape(1);
    let chunk = columns.shape(1) / (geo.out_h * geo.out_w);
    if ABSOLUTE_POS >= chunk * channels * geo.in_h * geo.in_w {
        terminate!();
    }
    let ix = ABSOLUTE_POS % geo.in_w;
    let rest = ABSOLUTE_POS / geo.in_w;
    let iy = rest % geo.in_h;
    let rest = rest / geo.in_h;
    let channel = rest % channels;
    let n = rest / channels;

    let y = iy + geo.pad_h;
    let x = ix + geo.pad_w;
    let mut sum = F::new(0.0);
    for ky in 0..geo.kernel_h {
        let reach_y = ky * geo.dilation_h;
        if y >= reach_y {
            let span_y = y - reach_y;
            let oy = span_y / geo.stride_h;
            if oy * geo.stride_h == span_y && oy < geo.out_h {
                for kx in 0..geo.kernel_w {
                    let reach_x = kx * geo.dilation_w;
                    if x >= reach_x {
                        let span_x = x - reach_x;
                        let ox = span_x / geo.stride_w;
                        if ox * geo.stride_w == span_x && ox < geo.out_w {
                            let row = (channel * geo.kernel_h + ky) * geo.kernel_w + kx;
                            let col = (n * geo.out_h + oy) * geo.out_w + ox;
                            sum += columns[row * columns.stride(0) + col * columns.stride(1)];
                        }
                    }
                }
            }
        }
    }
    image[(n + geo.batch_offset) * image.stride(0)
        + channel * image.stride(1)
        + iy * image.stride(2)
        + ix * image.stride(3)] = sum;
}

/// Writes the images `batch_offset .. batch_offset + chunk` of `image` from `columns`
/// (`[geometry.col_rows(), chunk · out_h · out_w]`, any strides).
///
/// # Safety
/// `image` must be `[batch, geometry.channels, in_h, in_w]` with `batch_offset + chunk ≤
/// batch`, and `columns` must match `geometry`; the kernel indexes them unchecked on some
/// runtimes.
pub unsafe fn launch_col2im<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    columns: TensorArg<R>,
    image: TensorArg<R>,
    chunk: usize,
    geometry: &ConvGeometry,
    batch_offset: usize,
) {
    let elements = chunk * geometry.channels * geometry.in_h * geometry.in_w;
    let cube_dim = CubeDim::new(client, elements);
    let cube_count = calculate_cube_count_elemwise(client, elements, cube_dim);
    col2im_kernel::launch_unchecked::<F, R>(client, cube_count, cube_dim, columns, image, geometry.args(batch_offset));
}
