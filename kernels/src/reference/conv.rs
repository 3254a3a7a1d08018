//! im2col and col2im.

use crate::geometry::ConvGeometry;

/// `columns[(c, ky, kx), (n, oy, ox)]` for images `batch_offset .. batch_offset + chunk` of a
/// contiguous `[batch, channels, in_h, in_w]` image.
pub fn im2col(image: &[f32], geometry: &ConvGeometry, batch_offset: usize, chunk: usize) -> Vec<f32> {
    let g = geometry;
    let [out_h, out_w] = g.output_size().expect("valid geometry");
    let cols = chunk * out_h * out_w;
    let mut columns = vec![0.0; g.col_rows() * cols];
    for c in 0..g.channels {
        for ky in 0..g.kernel_h {
            for kx in 0..g.kernel_w {
                let row = (c * g.kernel_h + ky) * g.kernel_w + kx;
                for n in 0..chunk {
                    for oy in 0..out_h {
                        for ox in 0..out_w {
                            let iy = (oy * g.stride[0] + ky * g.dilation[0]) as isize - g.padding[0] as isize;
                            let ix = (ox * g.stride[1] + kx * g.dilation[1]) as isize - g.padding[1] as isize;
                            let inside = iy >= 0 && ix >= 0 && (iy as usize) < g.in_h && (ix as usize) < g.in_w;
                            let col = (n * out_h + oy) * out_w + ox;
                            if inside {
                                let src = (((batch_offset + n) * g.channels + c) * g.in_h + iy as usize) * g.in_w
                                    + ix as usize;
                                columns[row * cols + col] = image[src];
                            }
                        }
                    }
                }
            }
        }
    }
    columns
}

/// The adjoint of [`im2col`]: scatters-and-adds contiguous `columns` back onto a
/// `[chunk, channels, in_h, in_w]` image.
pub fn col2im(columns: &[f32], geometry: &ConvGeometry, chunk: usize) -> Vec<f32> {
    let g = geometry;
    let [out_h, out_w] = g.output_size().expect("valid geometry");
    let cols = chunk * out_h * out_w;
    let mut image = vec![0.0f64; chunk * g.channels * g.in_h * g.in_w];
    for c in 0..g.channels {
        for ky in 0..g.kernel_h {
            for kx in 0..g.kernel_w {
                let row = (c * g.kernel_h + ky) * g.kernel_w + kx;
                for n in 0..chunk {
                    for oy in 0..out_h {
                        for ox in 0..out_w {
                            let iy = (oy * g.stride[0] + ky * g.dilation[0]) as isize - g.padding[0] as isize;
                            let ix = (ox * g.stride[1] + kx * g.dilation[1]) as isize - g.padding[1] as isize;
                            if iy >= 0 && ix >= 0 && (iy as usize) < g.in_h && (ix as usize) < g.in_w {
                                let dst = ((n * g.channels + c) * g.in_h + iy as usize) * g.in_w + ix as usize;
                                image[dst] += columns[row * cols + (n * out_h + oy) * out_w + ox] as f64;
                            }
                        }
                    }
                }
            }
        }
    }
    image.into_iter().map(|v| v as f32).collect()
}
