//! The shape of one 2-D convolution, shared by the kernels and their CPU references.

use cubecl::prelude::*;

/// Spatial geometry of a 2-D convolution (NCHW), as seen from the image side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvGeometry {
    pub channels: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub kernel_h: usize,
    pub kernel_w: usize,
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
}

impl ConvGeometry {
    /// Output height and width; `None` when the dilated kernel does not fit in the padded
    /// image (or a stride or dilation is zero).
    pub fn output_size(&self) -> Option<[usize; 2]> {
        let size = |input: usize, kernel: usize, stride: usize, pad: usize, dilation: usize| {
            if stride == 0 || dilation == 0 || kernel == 0 {
                return None;
            }
            let extent = dilation * (kernel - 1) + 1;
            let padded = input + 2 * pad;
            (padded >= extent).then(|| (padded - extent) / stride + 1)
        };
        Some([
            size(self.in_h, self.kernel_h, self.stride[0], self.padding[0], self.dilation[0])?,
            size(self.in_w, self.kernel_w, self.stride[1], self.padding[1], self.dilation[1])?,
        ])
    }

    /// Rows of the column matrix: `channels · kernel_h · kernel_w`.
    pub fn col_rows(&self) -> usize {
        self.channels * self.kernel_h * self.kernel_w
    }

    /// Columns per image: `out_h · out_w` (0 when the output is empty).
    pub fn col_cols_per_image(&self) -> usize {
        self.output_size().map_or(0, |[h, w]| h * w)
    }

    /// The kernel arguments for a chunk starting at image `batch_offset`.
    ///
    /// # Panics
    /// If the output would be empty; callers validate with [`Self::output_size`] first.
    pub fn args<R: Runtime>(&self, batch_offset: usize) -> ConvGeometryArgsLaunch<R> {
        let [out_h, out_w] = self.output_size().expect("validated convolution geometry");
        ConvGeometryArgsLaunch::new(
            batch_offset,
            self.in_h,
            self.in_w,
            out_h,
            out_w,
            self.kernel_h,
            self.kernel_w,
            self.stride[0],
            self.stride[1],
            self.padding[0],
            self.padding[1],
            self.dilation[0],
            self.dilation[1],
        )
    }
}

/// [`ConvGeometry`] as the kernels receive it (runtime scalars: one compiled kernel serves
/// every shape).
#[derive(CubeLaunch, CubeType)]
pub struct ConvGeometryArgs {
    pub batch_offset: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub out_h: usize,
    pub out_w: usize,
    pub kernel_h: usize,
    pub kernel_w: usize,
    pub stride_h: usize,
    pub stride_w: usize,
    pub pad_h: usize,
    pub pad_w: usize,
    pub dilation_h: usize,
    pub dilation_w: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(in_hw: usize, k: usize, s: usize, p: usize, d: usize) -> ConvGeometry {
        ConvGeometry {
            channels: 1,
            in_h: in_hw,
            in_w: in_hw,
            kernel_h: k,
            kernel_w: k,
            stride: [s, s],
            padding: [p, p],
            dilation: [d, d],
        }
    }

    #[test]
    fn output_size_follows_the_convolution_formula() {
        assert_eq!(geometry(56, 3, 1, 1, 1).output_size(), Some([56, 56]));
        assert_eq!(geometry(224, 7, 2, 3, 1).output_size(), Some([112, 112]));
        assert_eq!(geometry(10, 3, 1, 0, 2).output_size(), Some([6, 6]));
        assert_eq!(geometry(5, 3, 3, 0, 1).output_size(), Some([1, 1]));
    }

    #[test]
    fn a_kernel_larger_than_the_padded_image_has_no_output() {
        assert_eq!(geometry(2, 5, 1, 1, 1).output_size(), None);
        assert_eq!(geometry(4, 3, 1, 0, 3).output_size(), None);
        assert_eq!(geometry(4, 3, 0, 0, 1).output_size(), None);
    }
}
