//! Fused attention for training: `softmax(s · Q·Kᵀ) · V` over `[batch, heads, rows,
//! head_dim]` tensors in one forward kernel that also writes each row's log-sum-exp, and a
//! backward pass of two kernels that recompute the scores tile by tile (FlashAttention-2's
//! backward, Dao 2023, arXiv 2307.08691). No `rows × keys` buffer exists anywhere.
//!
//! Each unit owns one row (a query row in the forward and `dQ` kernels, a key row in the
//! `dK`/`dV` kernel) and keeps it, and what it accumulates, in registers (`head_dim` floats
//! each, accumulated in f32 whatever the element type); the cube streams the other side
//! through shared memory one tile of rows at a time. Causal attention is aligned at the
//! bottom right, as Burn's: query `i` sees keys `0 ..= i + keys − rows`; a cube stops at
//! the last tile any of its rows sees; the query-row kernels start the cubes of the last
//! rows (which see the most keys) first, and the key-row kernel's first cubes hold the keys
//! most rows see.
//!
//! Inputs are read by their strides (a `[batch, seq, heads, head_dim]` projection viewed
//! as `[batch, heads, seq, head_dim]` needs no copy); outputs are written contiguous.
//!
//! `block` holds the two kernels of the other attention, in blocks of query rows whose
//! products are GEMMs: the softmax rows between those products.

mod backward;
mod block;
mod forward;

pub use backward::{attention_backward_dkdv_kernel, attention_backward_dq_kernel, launch_attention_backward};
pub use block::{
    attention_block_softmax_grad_kernel, attention_block_softmax_kernel, launch_attention_block_softmax,
    launch_attention_block_softmax_grad, BlockDims, ScoreBlock, ScoreBlockLaunch, SCORE_ROW_UNITS,
};
pub use forward::{attention_forward_kernel, launch_attention_forward};

use cubecl::prelude::*;

/// Rows each cube owns, one unit per row.
pub const ROWS_PER_CUBE: usize = 64;

/// Rows of the other side a cube holds in shared memory at a time: two `tile × head_dim`
/// f32 tiles stay within 8 KiB (every runtime leanburn targets gives a cube at least
/// 16 KiB), and at most [`ROWS_PER_CUBE`].
pub fn tile_rows(head_dim: usize) -> usize {
    (1024 / head_dim.max(1)).clamp(1, ROWS_PER_CUBE)
}

/// The sizes every attention kernel needs (runtime scalars: one compiled kernel serves
/// every sequence length).
#[derive(CubeLaunch, CubeType)]
pub struct AttentionShape {
    /// Heads (the tensors are `[batch, heads, ..]`; a cube's `CUBE_POS_Y` is `b · heads + h`).
    pub heads: usize,
    /// Query rows.
    pub rows: usize,
    /// Key (and value) rows.
    pub keys: usize,
    /// `keys − rows` for causal attention (query `i` sees keys `..= i + offset`), else 0.
    pub causal_offset: usize,
    /// The scores' scale, `1/√head_dim` by default.
    pub scale: f32,
}

/// The largest head dimension whose row loops are unrolled (rows then live in registers);
/// past it the loops stay loops, which compile in a fraction of the time (llvmpipe took 32 s
/// for the three kernels at head dimension 128 unrolled) and keep rows in local memory.
pub const UNROLLED_HEAD_DIM: usize = 64;

/// Four f32 lanes: rows are held and multiplied four elements at a time (`head_dim` must be
/// a multiple of 4).
pub type Quad = Vector<f32, Const<4>>;

/// Whether the kernels take this head dimension (a multiple of 4, at most 256).
pub fn supports_head_dim(head_dim: usize) -> bool {
    head_dim > 0 && head_dim.is_multiple_of(4) && head_dim <= 256
}

/// The base offset of batch-head `bh` in `tensor` (`[batch, heads, ..]`).
#[cube]
pub(crate) fn head_base<F: CubePrimitive>(tensor: &Tensor<F>, bh: usize, heads: usize) -> usize {
    (bh / heads) * tensor.stride(0) + (bh % heads) * tensor.stride(1)
}

/// Row `row` of batch-head `bh` of `tensor`, times `scale`, as `head_dim / 4` quads (zeros
/// for an inactive unit).
#[cube]
pub(crate) fn read_row<F: Float>(
    tensor: &Tensor<F>,
    bh: usize,
    row: usize,
    active: bool,
    heads: usize,
    scale: f32,
    #[comptime] head_dim: usize,
) -> Array<Quad> {
    let quads = head_dim / 4;
    let base = head_base::<F>(tensor, bh, heads) + row * tensor.stride(2);
    let mut values = Array::<Quad>::new(quads);
    #[unroll(head_dim <= UNROLLED_HEAD_DIM)]
    for c in 0..quads {
        let mut quad = Quad::new(0.0);
        if active {
            #[unroll]
            for u in 0..4usize {
                quad[u] = f32::cast_from(tensor[base + (c * 4 + u) * tensor.stride(3)]) * scale;
            }
        }
        values[c] = quad;
    }
    values
}

/// Writes `values · scale` into row `row` of batch-head `bh` of `tensor`.
#[cube]
pub(crate) fn write_row<F: Float>(
    tensor: &mut Tensor<F>,
    values: &Array<Quad>,
    bh: usize,
    row: usize,
    heads: usize,
    scale: f32,
    #[comptime] head_dim: usize,
) {
    let base = head_base::<F>(tensor, bh, heads) + row * tensor.stride(2);
    #[unroll(head_dim <= UNROLLED_HEAD_DIM)]
    for c in 0..head_dim / 4 {
        let quad = values[c];
        #[unroll]
        for u in 0..4usize {
            tensor[base + (c * 4 + u) * tensor.stride(3)] = F::cast_from(quad[u] * scale);
        }
    }
}

/// Stages rows `start .. start + tile` of batch-head `bh` of `tensor` (`len` rows; zeros
/// past the end) into `tile` as quads, the cube's units sharing the loads.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn load_tile<F: Float>(
    tensor: &Tensor<F>,
    tile: &mut SharedMemory<Quad>,
    bh: usize,
    start: usize,
    len: usize,
    heads: usize,
    #[comptime] rows: usize,
    #[comptime] head_dim: usize,
) {
    let quads = head_dim / 4;
    let base = head_base::<F>(tensor, bh, heads);
    let mut index = UNIT_POS_X as usize;
    while index < rows * quads {
        let row = start + index / quads;
        let c = index % quads;
        let mut quad = Quad::new(0.0);
        if row < len {
            let at = base + row * tensor.stride(2) + c * 4 * tensor.stride(3);
            #[unroll]
            for u in 0..4usize {
                quad[u] = f32::cast_from(tensor[at + u * tensor.stride(3)]);
            }
        }
        tile[index] = quad;
        index += CUBE_DIM_X as usize;
    }
}

/// The first query row of this cube's block: the last block first, since under a causal
/// mask the later rows see the most keys and a GPU starts cubes about in grid order, so
/// the longest run first and the last wave is short ones.
#[cube]
#[allow(arithmetic_overflow)] // the host-side stand-ins of the cube's position are constants
pub(crate) fn first_query_row() -> usize {
    (CUBE_COUNT_X as usize - 1 - CUBE_POS_X as usize) * ROWS_PER_CUBE
}

/// The keys query row `row` sees: all of them, or, causal, those up to `row + offset`.
#[cube]
pub(crate) fn keys_seen(row: usize, shape: &AttentionShape, #[comptime] causal: bool) -> usize {
    let mut keys = shape.keys;
    if causal {
        keys = min(row + shape.causal_offset + 1, shape.keys);
    }
    keys
}

/// The base offset of batch-head `bh` in a contiguous `[batch · heads, rows]` row statistic.
#[cube]
pub(crate) fn stat_base(bh: usize, rows: usize) -> usize {
    bh * rows
}
