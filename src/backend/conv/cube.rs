//! [`ChunkedConv`] on CubeCL backends: leanburn's own im2col / col2im kernels.

use burn_backend::tensor::FloatTensor;
use burn_backend::Shape;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use leanburn_kernels::{launch_col2im, launch_im2col, ConvGeometry};

use super::{composed, ChunkedConv};
use crate::backend::has_kernels;

impl<R, F, I, BT> ChunkedConv for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn im2col_copies() -> usize {
        1
    }

    fn im2col(
        image: FloatTensor<Self>,
        geometry: &ConvGeometry,
        batch_offset: usize,
        chunk: usize,
    ) -> FloatTensor<Self> {
        if !has_kernels(image.dtype) {
            return composed::im2col::<Self>(image, geometry, batch_offset, chunk);
        }
        let rows = geometry.col_rows();
        let cols = chunk * geometry.col_cols_per_image();
        // Contiguous, not the runtime's preferred layout (CUDA pads each row of a fresh
        // buffer to 512 bytes): the layout the GEMM and reshapes after this expect, so none
        // of them has a reason to copy the column matrix. The kernel follows the strides
        // either way.
        let client = image.client.clone();
        let columns =
            empty_device_contiguous_dtype(client.clone(), image.device.clone(), Shape::new([rows, cols]), image.dtype);
        let dtype = image.dtype;
        // SAFETY: `image` is `[batch, channels, h, w]` (validated by the caller's geometry)
        // and `columns` was just allocated with the shape the kernel writes.
        unsafe {
            with_float_type!(dtype, E => launch_im2col::<R, E>(
                &client,
                image.into_tensor_arg(),
                columns.clone().into_tensor_arg(),
                rows * cols,
                [cols, 1],
                geometry,
                batch_offset,
            ));
        }
        columns
    }

    fn col2im(
        columns: FloatTensor<Self>,
        image: FloatTensor<Self>,
        geometry: &ConvGeometry,
        batch_offset: usize,
        chunk: usize,
    ) -> FloatTensor<Self> {
        if !has_kernels(image.dtype) || columns.dtype != image.dtype {
            return composed::col2im::<Self>(columns, image, geometry, batch_offset, chunk);
        }
        // The kernel writes in place: never into a buffer someone else still reads.
        let image = if image.can_mut() { image } else { image.copy() };
        let client = image.client.clone();
        let dtype = image.dtype;
        // SAFETY: shapes as documented on `ChunkedConv::col2im`, checked by the caller.
        unsafe {
            with_float_type!(dtype, E => launch_col2im::<R, E>(
                &client,
                columns.into_tensor_arg(),
                image.clone().into_tensor_arg(),
                chunk,
                geometry,
                batch_offset,
            ));
        }
        image
    }
}
