//! im2col: unfold the receptive fields of a batch chunk into the columns of a matrix, so
//! that the convolution becomes one GEMM with the weights.

use cubecl::prelude::*;
use cubecl::{calculate_cube_count_elemwise, CubeDim};

use crate::geometry::{ConvGeometry, ConvGeometryArgs};

/// One unit per column-matrix element: `columns[(c, ky, kx), (n, oy, ox)]` is the image
/// pixel under kernel tap `(ky, kx)` of output `(oy, ox)` of image `batch_offset + n`, or
/// zero in the padding. Reads any image strides and writes `columns` by its strides (CUDA
/// pads the rows of a fresh allocation to 512 bytes; the padding is left alone).
#[cube(launch)]
pub fn im2col_kernel<F: Float>(image: &Tensor<F>, columns: &mut Tensor<F>, geo: &ConvGeometryArgs) {
    let cols = columns.shape(1);
    if ABSOLUTE_POS >= columns.shape(0) * cols {
        terminate!();
    }
    let row = ABSOLUTE_POS / cols;
    let col = ABSOLUTE_POS % cols;

    let kx = row % geo.kernel_w;
    let taps = row / geo.kernel_w;
    let ky = taps % geo.kernel_h;
    let channel = taps / geo.kernel_h;

    let ox = col % geo.out_w;
    let pixels = col / geo.out_w;
    let oy = pixels % geo.out_h;
    let n = pixels / geo.out_h + geo.batch_offset;

    // Coordinates in the padded image, so that nothing here goes negative.
    let y = oy * geo.stride_h + ky * geo.dilation_h;
    let x = ox * geo.stride_w + kx * geo.dilation_w;

    let mut value = F::new(0.0);
    if y >= geo.pad_h && x >= geo.pad_w {
        let iy = y - geo.pad_h;
        let ix = x - geo.pad_w;
        if iy < geo.in_h && ix < geo.in_w {
            value =
                image[n * image.stride(0) + channel * image.stride(1) + iy * image.stride(2) + ix * image.stride(3)];
        }
    }
    columns[row * columns.stride(0) + col * columns.stride(1)] = value;
}

/// Fills `columns` (`[geometry.col_rows(), chunk · out_h · out_w]`, any strides) from the
/// images `batch_offset .. batch_offset + chunk` of `image`.
///
/// # Safety
/// `image` must be `[batch, geometry.channels, in_h, in_w]` with `batch_offset + chunk ≤
/// batch`, `columns` must have the shape above (`columns_len` elements) and strides that
/// stay inside its buffer; the kernel indexes them unchecked on some runtimes.
pub unsafe fn launch_im2col<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    image: TensorArg<R>,
    columns: TensorArg<R>,
    columns_len: usize,
    geometry: &ConvGeometry,
    batch_offset: usize,
) {
    let cube_dim = CubeDim::new(client, columns_len);
    let cube_count = calculate_cube_count_elemwise(client, columns_len, cube_dim);
    im2col_kernel::launch::<F, R>(client, cube_count, cube_dim, image, columns, geometry.args(batch_offset));
}
