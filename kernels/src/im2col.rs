//! im2col: unfold the receptive fields of a batch chunk into the columns of a matrix, so
//! that the convolution becomes one GEMM with the weights.

use cubecl::prelude::*;
use cubecl::{calculate_cube_count_elemwise, CubeDim};

use crate::geometry::{ConvGeometry, ConvGeometryArgs};

/// One unit per image channel and group of `N` neighbouring columns (the vector width,
/// see [`im2col_vector_size`]): `columns[(c, ky, kx), (n, oy, ox)]`, for every kernel tap
/// `(ky, kx)`, is the image pixel under that tap of output `(oy, ox)` of image
/// `batch_offset + n`, or zero in the padding. A unit works out its channel and output
/// position once and walks the taps, so integer division (done lane by lane on SIMD CPUs
/// such as llvmpipe) is paid once per channel and pixel group, not once per element; it
/// writes each tap's `N` columns as one vector. Reads any image strides and writes
/// `columns` by its strides (CUDA pads the rows of a fresh allocation to 512 bytes; the
/// padding is left alone).
#[cube(launch_unchecked)]
pub fn im2col_kernel<F: Float, N: Size>(image: &Tensor<F>, columns: &mut Tensor<Vector<F, N>>, geo: &ConvGeometryArgs) {
    let width = columns.vector_size();
    let groups = columns.shape(1) / width;
    let taps = geo.kernel_h * geo.kernel_w;
    if ABSOLUTE_POS >= columns.shape(0) / taps * groups {
        terminate!();
    }
    let channel = ABSOLUTE_POS / groups;
    // The group's first column; its `width` columns share the image and the output row.
    let col = (ABSOLUTE_POS % groups) * width;

    let ox = col % geo.out_w;
    let pixels = col / geo.out_w;
    let oy = pixels % geo.out_h;
    let n = pixels / geo.out_h + geo.batch_offset;
    let plane = n * image.stride(0) + channel * image.stride(1);
    let column = col * columns.stride(1);

    // Coordinates in the padded image, so that nothing here goes negative.
    let top = oy * geo.stride_h;
    let left = ox * geo.stride_w;
    let mut row = channel * taps;
    for ky in 0..geo.kernel_h {
        let y = top + ky * geo.dilation_h;
        let inside_y = y >= geo.pad_h && y < geo.pad_h + geo.in_h;
        // Wraps around in the top padding, where no tap reads it.
        let line = plane + (y - geo.pad_h) * image.stride(2);
        for kx in 0..geo.kernel_w {
            let mut values = Vector::<F, N>::empty();
            #[unroll]
            for i in 0..width {
                let x = left + i * geo.stride_w + kx * geo.dilation_w;
                let mut value = F::new(0.0);
                if inside_y && x >= geo.pad_w && x < geo.pad_w + geo.in_w {
                    value = image[line + (x - geo.pad_w) * image.stride(3)];
                }
                values[i] = value;
            }
            columns[(row * columns.stride(0) + column) / width] = values;
            row += 1;
        }
    }
}

/// The vector width `launch_im2col` writes with: the widest the runtime prefers for `F`
/// such that a vector's columns share an output row (`out_w` divisible by it) and start
/// aligned in a row whose elements are contiguous (`columns_strides` `[w·k, 1]`); 1 otherwise.
pub fn im2col_vector_size<R: Runtime>(
    client: &ComputeClient<R>,
    elem_bytes: usize,
    geometry: &ConvGeometry,
    columns_strides: [usize; 2],
) -> usize {
    let Some([_, out_w]) = geometry.output_size() else { return 1 };
    client
        .io_optimized_vector_sizes(elem_bytes)
        .filter(|&w| {
            w > 1 && out_w.is_multiple_of(w) && columns_strides[1] == 1 && columns_strides[0].is_multiple_of(w)
        })
        .max()
        .unwrap_or(1)
}

/// Fills `columns` (`[geometry.col_rows(), chunk · out_h · out_w]`, strides
/// `columns_strides`) from the images `batch_offset .. batch_offset + chunk` of `image`.
///
/// # Safety
/// `image` must be `[batch, geometry.channels, in_h, in_w]` with `batch_offset + chunk ≤
/// batch`, `columns` must have the shape above (`columns_len` elements) and the strides
/// given, which stay inside its buffer; the kernel indexes them unchecked.
pub unsafe fn launch_im2col<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    image: TensorArg<R>,
    columns: TensorArg<R>,
    columns_len: usize,
    columns_strides: [usize; 2],
    geometry: &ConvGeometry,
    batch_offset: usize,
) {
    let width = im2col_vector_size(client, size_of::<F>(), geometry, columns_strides);
    let units = columns_len / (geometry.kernel_h * geometry.kernel_w * width).max(1);
    let cube_dim = CubeDim::new(client, units);
    let cube_count = calculate_cube_count_elemwise(client, units, cube_dim);
    im2col_kernel::launch_unchecked::<F, R>(
        client,
        cube_count,
        cube_dim,
        width,
        image,
        columns,
        geometry.args(batch_offset),
    );
}
