//! The forward kernel: each row's output and log-sum-exp in one pass over the keys.

use cubecl::prelude::*;
use cubecl::CubeDim;

use super::{
    first_query_row, keys_seen, load_tile, read_row, stat_base, tile_rows, write_row, AttentionShape,
    AttentionShapeLaunch, Quad, ROWS_PER_CUBE, UNROLLED_HEAD_DIM,
};

/// One unit per query row: an online softmax over tiles of keys and values staged in
/// shared memory (per tile: the tile's scores, one rescale of the running sum and output,
/// then their exponentials added in). Rows are held as `head_dim / 4` four-lane vectors,
/// so that the unrolled loops stay short. Writes `output[b, h, i, ..]` (contiguous) and
/// `lse[b · heads + h, i] = max + ln(Σ exp(score − max))`, natural log, f32.
#[cube(launch_unchecked)]
pub fn attention_forward_kernel<F: Float>(
    query: &Tensor<F>,
    key: &Tensor<F>,
    value: &Tensor<F>,
    output: &mut Tensor<F>,
    lse: &mut Tensor<f32>,
    shape: &AttentionShape,
    #[comptime] head_dim: usize,
    #[comptime] tile: usize,
    #[comptime] causal: bool,
) {
    let quads = head_dim / 4;
    let bh = CUBE_POS_Y as usize;
    let first_row = first_query_row();
    let row = first_row + UNIT_POS_X as usize;
    let active = row < shape.rows;

    // The keys this cube's rows see, and this row's.
    let cube_keys = keys_seen(min(first_row + ROWS_PER_CUBE, shape.rows) - 1, shape, causal);
    let row_keys = keys_seen(row, shape, causal);

    let q_row = read_row::<F>(query, bh, row, active, shape.heads, shape.scale, head_dim);
    let mut acc = Array::<Quad>::new(quads);
    #[unroll(head_dim <= UNROLLED_HEAD_DIM)]
    for c in 0..quads {
        acc[c] = Quad::new(0.0);
    }
    let mut scores = Array::<f32>::new(tile);
    let mut running_max = f32::new(-1.0e30);
    let mut running_sum = 0.0f32;

    let mut k_tile = SharedMemory::<Quad>::new(tile * quads);
    let mut v_tile = SharedMemory::<Quad>::new(tile * quads);

    let mut start = 0usize;
    while start < cube_keys {
        load_tile::<F>(key, &mut k_tile, bh, start, shape.keys, shape.heads, tile, head_dim);
        load_tile::<F>(value, &mut v_tile, bh, start, shape.keys, shape.heads, tile, head_dim);
        sync_cube();

        if active && start < row_keys {
            let count = min(tile, row_keys - start);
            let mut tile_max = f32::new(-1.0e30);
            for j in 0..count {
                let mut s = 0.0f32;
                #[unroll(head_dim <= UNROLLED_HEAD_DIM)]
                for c in 0..quads {
                    s += q_row[c].dot(k_tile[j * quads + c]);
                }
                scores[j] = s;
                tile_max = max(tile_max, s);
            }
            let new_max = max(running_max, tile_max);
            let rescale = (running_max - new_max).exp();
            running_sum *= rescale;
            #[unroll(head_dim <= UNROLLED_HEAD_DIM)]
            for c in 0..quads {
                acc[c] = acc[c] * Quad::new(rescale);
            }
            for j in 0..count {
                let p = (scores[j] - new_max).exp();
                running_sum += p;
                #[unroll(head_dim <= UNROLLED_HEAD_DIM)]
                for c in 0..quads {
                    acc[c] += Quad::new(p) * v_tile[j * quads + c];
                }
            }
            running_max = new_max;
        }
        sync_cube();
        start += tile;
    }

    if active {
        write_row::<F>(output, &acc, bh, row, shape.heads, 1.0f32 / running_sum, head_dim);
        lse[stat_base(bh, shape.rows) + row] = running_max + running_sum.ln();
    }
}

/// The launch configuration both forward and backward use: one cube of
/// [`ROWS_PER_CUBE`] units per block of rows and batch-head.
pub(crate) fn cubes(rows: usize, batch_heads: usize) -> (CubeCount, CubeDim) {
    let count = CubeCount::Static(rows.div_ceil(ROWS_PER_CUBE) as u32, batch_heads as u32, 1);
    (count, CubeDim::new_1d(ROWS_PER_CUBE as u32))
}

/// Runs the forward kernel: `output` (`[batch, heads, rows, head_dim]`, contiguous) and
/// `lse` (`[batch · heads, rows]` f32, contiguous) from `query` (`[batch, heads, rows,
/// head_dim]`), `key` and `value` (`[batch, heads, keys, head_dim]`), any strides.
///
/// # Safety
/// The tensors must have the shapes above (`batch_heads = batch · heads`), `keys ≥ rows`
/// when `causal`, and the strides given must stay inside their buffers; the kernel
/// indexes them unchecked.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_attention_forward<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    query: TensorArg<R>,
    key: TensorArg<R>,
    value: TensorArg<R>,
    output: TensorArg<R>,
    lse: TensorArg<R>,
    [batch_heads, heads, rows, keys, head_dim]: [usize; 5],
    scale: f32,
    causal: bool,
) {
    let (count, dim) = cubes(rows, batch_heads);
    let offset = if causal { keys - rows } else { 0 };
    attention_forward_kernel::launch_unchecked::<F, R>(
        client,
        count,
        dim,
        query,
        key,
        value,
        output,
        lse,
        AttentionShapeLaunch::new(heads, rows, keys, offset, scale),
        head_dim,
        tile_rows(head_dim),
        causal,
    );
}
