//! Row tiles: one image's output rows cut into tiles, for when the column matrix of a
//! single image alone exceeds the budget.
//!
//! A tile of output rows `r0 .. r1` reads input rows `r0·s − p .. (r1 − 1)·s − p + (k − 1)·d + 1`
//! (stride `s`, padding `p`, dilation `d`, kernel `k`, all along the height). The tile's input
//! is those rows of the image, with zero rows where they fall into the padding. Its geometry
//! is the image's with that height and no height padding, so the kernels and the composed
//! path run on it unchanged. Tiles overlap in the input wherever the kernel reaches further
//! than the stride, so input gradients are added into the image's, never written.

use std::ops::Range;

use burn::tensor::Tensor;
use burn_backend::ops::PadMode;
use burn_backend::Backend;
use leanburn_kernels::ConvGeometry;

/// Copies of a tile's input alive at once: its padded input, or in the input gradient the
/// tile's gradient, the image rows it is added to and their sum.
pub(crate) const TILE_INPUT_COPIES: usize = 3;

/// One tile of output rows of one image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RowTile {
    /// The output rows it computes.
    pub out_rows: Range<usize>,
    /// The image rows it reads (empty when it reads only padding).
    pub in_rows: Range<usize>,
    /// Zero rows above and below `in_rows` (where the tile reaches into the padding).
    pub pad_top: usize,
    pub pad_bottom: usize,
    /// The convolution of the tile's input: the image's, with the tile's height and no
    /// height padding.
    pub geometry: ConvGeometry,
}

/// Input rows a tile of `rows` output rows reads, padding included.
pub(crate) fn tile_input_rows(geometry: &ConvGeometry, rows: usize) -> usize {
    rows.saturating_sub(1) * geometry.stride[0] + (geometry.kernel_h - 1) * geometry.dilation[0] + 1
}

/// The tiles of at most `rows_per_tile` output rows that cover `geometry`'s output.
pub(crate) fn row_tiles(geometry: &ConvGeometry, rows_per_tile: usize) -> impl Iterator<Item = RowTile> + '_ {
    let [out_h, _] = geometry.output_size().expect("validated geometry");
    let step = rows_per_tile.max(1);
    (0..out_h).step_by(step).map(move |r0| {
        let out_rows = r0..(r0 + step).min(out_h);
        let first = (r0 * geometry.stride[0]) as isize - geometry.padding[0] as isize;
        let end = first + tile_input_rows(geometry, out_rows.len()) as isize;
        let in_h = geometry.in_h as isize;
        let start = first.clamp(0, in_h);
        let stop = end.clamp(start, in_h);
        // A tile that reads only padding is all top padding.
        let (pad_top, pad_bottom) = if stop > start { (start - first, end - stop) } else { (end - first, 0) };
        RowTile {
            out_rows: out_rows.clone(),
            in_rows: start as usize..stop as usize,
            pad_top: pad_top as usize,
            pad_bottom: pad_bottom as usize,
            geometry: ConvGeometry { in_h: (end - first) as usize, padding: [0, geometry.padding[1]], ..*geometry },
        }
    })
}

impl RowTile {
    /// The tile's input from image `image` of `x`: `[1, channels, tile height, in_w]`.
    pub(crate) fn input<B: Backend>(&self, x: &Tensor<B, 4>, image: usize) -> Tensor<B, 4> {
        let [_, channels, _, in_w] = x.dims();
        if self.in_rows.is_empty() {
            return Tensor::zeros([1, channels, self.geometry.in_h, in_w], (&x.device(), x.dtype()));
        }
        let rows = x.clone().slice([image..image + 1, 0..channels, self.in_rows.clone()]);
        match (self.pad_top, self.pad_bottom) {
            (0, 0) => rows,
            (top, bottom) => rows.pad((0, 0, top, bottom), PadMode::Constant(0.0)),
        }
    }

    /// `x_grad` with the tile's input gradient (`[1, channels, tile height, in_w]`) added
    /// into image `image`'s rows.
    pub(crate) fn add_into<B: Backend>(
        &self,
        x_grad: Tensor<B, 4>,
        tile_grad: Tensor<B, 4>,
        image: usize,
    ) -> Tensor<B, 4> {
        if self.in_rows.is_empty() {
            return x_grad;
        }
        let [_, channels, tile_h, in_w] = tile_grad.dims();
        let inside = tile_grad.slice([0..1, 0..channels, self.pad_top..tile_h - self.pad_bottom, 0..in_w]);
        let target = [image..image + 1, 0..channels, self.in_rows.clone(), 0..in_w];
        let sum = x_grad.clone().slice(target.clone()) + inside;
        x_grad.slice_assign(target, sum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(in_h: usize, kernel_h: usize, stride: usize, pad: usize, dilation: usize) -> ConvGeometry {
        ConvGeometry {
            channels: 1,
            in_h,
            in_w: 3,
            kernel_h,
            kernel_w: 1,
            stride: [stride, 1],
            padding: [pad, 0],
            dilation: [dilation, 1],
        }
    }

    /// Every tile's own geometry gives exactly its output rows, the tiles cover the output
    /// once, and the rows each reads are the image's rows plus the padding it reaches.
    #[test]
    fn tiles_cover_the_output_once_and_read_the_right_rows() {
        for (in_h, k, s, p, d) in
            [(10, 3, 1, 1, 1), (9, 5, 2, 2, 1), (7, 3, 3, 3, 2), (5, 1, 1, 0, 1), (12, 4, 2, 3, 3), (2, 1, 1, 3, 1)]
        {
            let g = geometry(in_h, k, s, p, d);
            let [out_h, _] = g.output_size().unwrap();
            for rows in 1..=out_h {
                let tiles: Vec<_> = row_tiles(&g, rows).collect();
                let covered: Vec<usize> = tiles.iter().flat_map(|t| t.out_rows.clone()).collect();
                assert_eq!(covered, (0..out_h).collect::<Vec<_>>(), "{g:?}, {rows} rows a tile");
                for t in &tiles {
                    assert_eq!(t.geometry.output_size().unwrap()[0], t.out_rows.len(), "{t:?}");
                    assert_eq!(t.pad_top + t.in_rows.len() + t.pad_bottom, t.geometry.in_h, "{t:?}");
                    assert!(t.in_rows.end <= in_h, "{t:?}");
                    if !t.in_rows.is_empty() {
                        assert!(t.pad_top <= p && t.pad_bottom <= p, "{t:?}");
                    }
                }
            }
        }
    }
}
