//! Memory-bounded 2-D convolutions: im2col / col2im over batch chunks plus a GEMM.
//!
//! The algorithm ([`forward`], [`backward`], [`transpose`]) is written once, on Burn
//! tensors of the inner backend. Only moving pixels between the image and the column
//! matrix depends on the backend, through [`ChunkedConv`]: on any CubeCL backend that is
//! leanburn's own kernels (`leanburn-kernels`), elsewhere a composition of Burn ops
//! ([`composed`]) with the same chunking, so the workspace bound holds everywhere.

pub(crate) mod backward;
pub(crate) mod composed;
mod cube;
pub(crate) mod forward;
mod fused;
mod rows;
pub(crate) mod transpose;

pub use transpose::conv_transpose2d_plan;

use burn::backend::{Flex, NdArray};
use burn_backend::ops::ConvOptions;
use burn_backend::tensor::FloatTensor;
use burn_backend::Backend;
use leanburn_kernels::ConvGeometry;

use super::bias_grad::BiasGradOps;
use super::embedding::EmbeddingOps;
use super::gelu::GeluOps;
use super::gemm::GemmOps;
use super::residual::ResidualOps;

/// How a backend moves pixels between an image and a column matrix.
///
/// `columns` is `[channels · kh · kw, chunk · out_h · out_w]` (see `leanburn-kernels`);
/// `image` is the whole `[batch, channels, h, w]` tensor and the chunk is the images
/// `batch_offset .. batch_offset + chunk`.
///
/// It is also what `Lean<B>` asks of `B` (its one bound): the GEMM, the embedding's and
/// the bias's gradients, GELU and the residual's add after a linear layer come with it as
/// supertraits.
pub trait ChunkedConv: GemmOps + EmbeddingOps + BiasGradOps + GeluOps + ResidualOps {
    /// Column-matrix-sized buffers alive at once inside [`Self::im2col`]: what the chunk
    /// planner charges per image.
    fn im2col_copies() -> usize {
        composed::IM2COL_COPIES
    }

    fn im2col(
        image: FloatTensor<Self>,
        geometry: &ConvGeometry,
        batch_offset: usize,
        chunk: usize,
    ) -> FloatTensor<Self> {
        composed::im2col::<Self>(image, geometry, batch_offset, chunk)
    }

    /// Writes the chunk of `image` from `columns` (overwriting it) and returns `image`.
    fn col2im(
        columns: FloatTensor<Self>,
        image: FloatTensor<Self>,
        geometry: &ConvGeometry,
        batch_offset: usize,
        chunk: usize,
    ) -> FloatTensor<Self> {
        composed::col2im::<Self>(columns, image, geometry, batch_offset, chunk)
    }
}

impl ChunkedConv for NdArray {}

impl ChunkedConv for Flex {}

/// The geometry of `conv2d(x, weight)`, or a panic with the reason, like Burn's own checks.
pub(crate) fn conv_geometry(
    op: &str,
    x_dims: [usize; 4],
    weight_dims: [usize; 4],
    options: &ConvOptions<2>,
) -> ConvGeometry {
    let ConvOptions { stride, padding, dilation, groups } = options.clone();
    let [_, channels, in_h, in_w] = x_dims;
    let [out_channels, channels_per_group, kernel_h, kernel_w] = weight_dims;
    assert!(groups >= 1, "{op}: groups must be at least 1");
    assert!(
        channels == channels_per_group * groups,
        "{op}: the input has {channels} channels but the weight expects {channels_per_group} \
         per group × {groups} groups"
    );
    assert!(out_channels % groups == 0, "{op}: {out_channels} output channels cannot be split into {groups} groups");
    let geometry = ConvGeometry { channels, in_h, in_w, kernel_h, kernel_w, stride, padding, dilation };
    assert!(
        geometry.output_size().is_some(),
        "{op}: the kernel {kernel_h}×{kernel_w} (dilation {dilation:?}, stride {stride:?}) does \
         not fit in the input {in_h}×{in_w} padded by {padding:?}"
    );
    geometry
}

/// How `Lean` runs one convolution: the batch cut into chunks so that one chunk's
/// transient workspace (column matrix plus GEMM result and its reshaped copy) fits in
/// the [`ConvBudget`](super::ConvBudget) in force.
///
/// When a single image's workspace exceeds the budget, images run one at a time, each cut
/// into tiles of output rows (`row_tiles`), as many rows a tile as fit. Only when one
/// output row alone exceeds the budget does the workspace exceed it
/// ([`ConvPlan::fits_budget`] is then false). The transposed convolution follows the plan
/// of the conv2d it is the adjoint of ([`conv_transpose2d_plan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvPlan {
    /// Images in each chunk (the last chunk may have fewer).
    pub images_per_chunk: usize,
    /// Number of chunks the batch is cut into.
    pub chunks: usize,
    /// Output rows a tile computes: all of them, unless one image is cut into tiles.
    pub rows_per_tile: usize,
    /// Tiles each image is cut into: 1, unless one image's workspace exceeds the budget.
    pub row_tiles: usize,
    /// Workspace bytes of one whole image.
    pub workspace_bytes_per_image: usize,
    /// Workspace bytes of one full chunk, or of one tile: the most `Lean` holds at once
    /// for this call.
    pub workspace_bytes: usize,
    /// The budget the plan was made under.
    pub budget_bytes: usize,
}

impl ConvPlan {
    /// Whether the workspace stays within the budget (false only when a single output row
    /// of one image needs more than the budget).
    pub fn fits_budget(&self) -> bool {
        self.workspace_bytes <= self.budget_bytes
    }
}

/// The plan `Lean<B>` follows for `conv2d` of an input of `x_dims` with a weight of
/// `weight_dims` (and for that convolution's two gradients, which are chunked the same
/// way), with elements of `elem_bytes`. Panics on shapes Burn's own conv would reject.
pub fn conv2d_plan<B: ChunkedConv>(
    x_dims: [usize; 4],
    weight_dims: [usize; 4],
    options: &ConvOptions<2>,
    elem_bytes: usize,
) -> ConvPlan {
    let geometry = conv_geometry("conv2d", x_dims, weight_dims, options);
    plan_chunk::<B>(&geometry, x_dims[0], weight_dims[0], elem_bytes)
}

/// The chunking for a convolution whose column matrix is `geometry`'s and whose other
/// side has `other_channels` channels per image: the columns (times the backend's copies)
/// plus the GEMM result and its reshaped copy must fit in the budget; with row tiles, the
/// tile's input copies too.
pub(crate) fn plan_chunk<B: ChunkedConv>(
    geometry: &ConvGeometry,
    batch: usize,
    other_channels: usize,
    elem_bytes: usize,
) -> ConvPlan {
    let [out_h, out_w] = geometry.output_size().expect("validated geometry");
    let per_row = (geometry.col_rows() * B::im2col_copies() + 2 * other_channels) * out_w * elem_bytes;
    let per_image = per_row * out_h;
    let budget = super::ConvBudget::current();
    if per_image <= budget.bytes() || out_h <= 1 {
        let images_per_chunk = budget.chunk(batch, per_image);
        return ConvPlan {
            images_per_chunk,
            chunks: batch.max(1).div_ceil(images_per_chunk),
            rows_per_tile: out_h,
            row_tiles: 1,
            workspace_bytes_per_image: per_image,
            workspace_bytes: per_image * images_per_chunk,
            budget_bytes: budget.bytes(),
        };
    }
    let tile_bytes = |rows: usize| {
        let input = geometry.channels * rows::tile_input_rows(geometry, rows) * geometry.in_w * elem_bytes;
        rows * per_row + rows::TILE_INPUT_COPIES * input
    };
    let rows_per_tile = (1..out_h).rev().find(|&rows| tile_bytes(rows) <= budget.bytes()).unwrap_or(1);
    ConvPlan {
        images_per_chunk: 1,
        chunks: batch.max(1),
        rows_per_tile,
        row_tiles: out_h.div_ceil(rows_per_tile),
        workspace_bytes_per_image: per_image,
        workspace_bytes: tile_bytes(rows_per_tile),
        budget_bytes: budget.bytes(),
    }
}

/// The batch cut into `(start, len)` chunks of at most `chunk` images.
pub(crate) fn chunks(batch: usize, chunk: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..batch).step_by(chunk.max(1)).map(move |start| (start, chunk.min(batch - start)))
}

pub(crate) fn float<B: Backend, const D: usize>(tensor: FloatTensor<B>) -> burn::tensor::Tensor<B, D> {
    burn::tensor::Tensor::from_primitive(burn::tensor::TensorPrimitive::Float(tensor))
}

/// `tensor` laid out contiguously (a copy only when it is not already).
///
/// Every GEMM operand and every tensor that is later split into more dims goes through
/// this: on wgpu, Burn 0.21's CubeCL matmul returns wrong values for some transposed
/// right-hand operands (e.g. `[2, 8] · [8, 2048]ᵀ`), and its reshape computes wrong strides
/// when it splits a permuted tensor that has unit dims. Both were found by
/// `tests/conv_correctness.rs`.
pub(crate) fn contiguous<B: Backend, const D: usize>(tensor: burn::tensor::Tensor<B, D>) -> burn::tensor::Tensor<B, D> {
    let dims = tensor.dims();
    // Reshaping to a lower rank copies a non-contiguous tensor and only relabels a
    // contiguous one; splitting a contiguous one back is a relabel.
    tensor.reshape([dims.iter().product::<usize>()]).reshape(dims)
}
