//! The backward kernels: `dQ` (one unit per query row, which also writes the row's
//! `Δ = Σ dO ∘ O`), then `dK` and `dV` (one unit per key row, reading `Δ`). Both recompute
//! the scores from `Q`, `K` and the forward pass's log-sum-exp, tile by tile:
//! `p = exp(s·q·k − lse)`, `dP = dO·v`, `dS = p (dP − Δ)`; `dQ = s Σ dS k`,
//! `dK = s Σ dS q`, `dV = Σ p dO`.

use cubecl::prelude::*;

use super::forward::cubes;
use super::{
    first_query_row, keys_seen, load_tile, read_row, stat_base, tile_rows, write_row, AttentionShape,
    AttentionShapeLaunch, Quad, ROWS_PER_CUBE, UNROLLED_HEAD_DIM,
};
use crate::tensor_group::duplicate;

/// One unit per query row: `dq[b, h, i, ..]` (contiguous) and `delta[b · heads + h, i]`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn attention_backward_dq_kernel<F: Float>(
    query: &Tensor<F>,
    key: &Tensor<F>,
    value: &Tensor<F>,
    output: &Tensor<F>,
    grad: &Tensor<F>,
    lse: &Tensor<f32>,
    dq: &mut Tensor<F>,
    delta: &mut Tensor<f32>,
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
    let cube_keys = keys_seen(min(first_row + ROWS_PER_CUBE, shape.rows) - 1, shape, causal);
    let row_keys = keys_seen(row, shape, causal);

    // The row's query (scaled), output gradient, Δ = dO·O and log-sum-exp.
    let q_row = read_row::<F>(query, bh, row, active, shape.heads, shape.scale, head_dim);
    let g_row = read_row::<F>(grad, bh, row, active, shape.heads, 1.0f32, head_dim);
    let o_row = read_row::<F>(output, bh, row, active, shape.heads, 1.0f32, head_dim);
    let mut row_delta = 0.0f32;
    let mut acc = Array::<Quad>::new(quads);
    #[unroll(head_dim <= UNROLLED_HEAD_DIM)]
    for c in 0..quads {
        row_delta += g_row[c].dot(o_row[c]);
        acc[c] = Quad::new(0.0);
    }
    let mut row_lse = 0.0f32;
    if active {
        row_lse = lse[stat_base(bh, shape.rows) + row];
    }

    let mut k_tile = SharedMemory::<Quad>::new(tile * quads);
    let mut v_tile = SharedMemory::<Quad>::new(tile * quads);
    let mut start = 0usize;
    while start < cube_keys {
        load_tile::<F>(key, &mut k_tile, bh, start, shape.keys, shape.heads, tile, head_dim);
        load_tile::<F>(value, &mut v_tile, bh, start, shape.keys, shape.heads, tile, head_dim);
        sync_cube();
        if active && start < row_keys {
            let count = min(tile, row_keys - start);
            for j in 0..count {
                let mut s = 0.0f32;
                let mut dp = 0.0f32;
                #[unroll(head_dim <= UNROLLED_HEAD_DIM)]
                for c in 0..quads {
                    s += q_row[c].dot(k_tile[j * quads + c]);
                    dp += g_row[c].dot(v_tile[j * quads + c]);
                }
                let ds = Quad::new((s - row_lse).exp() * (dp - row_delta));
                #[unroll(head_dim <= UNROLLED_HEAD_DIM)]
                for c in 0..quads {
                    acc[c] += ds * k_tile[j * quads + c];
                }
            }
        }
        sync_cube();
        start += tile;
    }

    if active {
        write_row::<F>(dq, &acc, bh, row, shape.heads, shape.scale, head_dim);
        delta[stat_base(bh, shape.rows) + row] = row_delta;
    }
}

/// One unit per key row: `dk` and `dv` at `[b, h, j, ..]` (contiguous), over the query
/// rows that see the key, staged in shared memory with their `lse` and `Δ`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn attention_backward_dkdv_kernel<F: Float>(
    query: &Tensor<F>,
    key: &Tensor<F>,
    value: &Tensor<F>,
    grad: &Tensor<F>,
    lse: &Tensor<f32>,
    delta: &Tensor<f32>,
    dk: &mut Tensor<F>,
    dv: &mut Tensor<F>,
    shape: &AttentionShape,
    #[comptime] head_dim: usize,
    #[comptime] tile: usize,
    #[comptime] causal: bool,
) {
    let quads = head_dim / 4;
    let bh = CUBE_POS_Y as usize;
    let first_key = CUBE_POS_X as usize * ROWS_PER_CUBE;
    let key_row = first_key + UNIT_POS_X as usize;
    let active = key_row < shape.keys;
    // Causal: key j is seen by the query rows i with i + offset ≥ j.
    let mut cube_start = 0usize;
    let mut row_start = 0usize;
    if causal {
        if first_key > shape.causal_offset {
            cube_start = first_key - shape.causal_offset;
        }
        if key_row > shape.causal_offset {
            row_start = key_row - shape.causal_offset;
        }
    }

    let k_row = read_row::<F>(key, bh, key_row, active, shape.heads, shape.scale, head_dim);
    let v_row = read_row::<F>(value, bh, key_row, active, shape.heads, 1.0f32, head_dim);
    let mut dk_acc = Array::<Quad>::new(quads);
    let mut dv_acc = Array::<Quad>::new(quads);
    #[unroll(head_dim <= UNROLLED_HEAD_DIM)]
    for c in 0..quads {
        dk_acc[c] = Quad::new(0.0);
        dv_acc[c] = Quad::new(0.0);
    }

    let stats = stat_base(bh, shape.rows);
    let mut q_tile = SharedMemory::<Quad>::new(tile * quads);
    let mut g_tile = SharedMemory::<Quad>::new(tile * quads);
    let mut lse_tile = SharedMemory::<f32>::new(tile);
    let mut delta_tile = SharedMemory::<f32>::new(tile);
    // From the tile holding the cube's first visible query row.
    let mut start = (cube_start / tile) * tile;
    while start < shape.rows {
        load_tile::<F>(query, &mut q_tile, bh, start, shape.rows, shape.heads, tile, head_dim);
        load_tile::<F>(grad, &mut g_tile, bh, start, shape.rows, shape.heads, tile, head_dim);
        let mut index = UNIT_POS_X as usize;
        while index < tile {
            let i = start + index;
            let mut l = 0.0f32;
            let mut dl = 0.0f32;
            if i < shape.rows {
                l = lse[stats + i];
                dl = delta[stats + i];
            }
            lse_tile[index] = l;
            delta_tile[index] = dl;
            index += CUBE_DIM_X as usize;
        }
        sync_cube();
        if active {
            let end = min(start + tile, shape.rows);
            let mut i = max(start, row_start);
            while i < end {
                let t = i - start;
                let mut s = 0.0f32;
                let mut dp = 0.0f32;
                #[unroll(head_dim <= UNROLLED_HEAD_DIM)]
                for c in 0..quads {
                    s += k_row[c].dot(q_tile[t * quads + c]);
                    dp += v_row[c].dot(g_tile[t * quads + c]);
                }
                let p = (s - lse_tile[t]).exp();
                let ds = Quad::new(p * (dp - delta_tile[t]));
                let pq = Quad::new(p);
                #[unroll(head_dim <= UNROLLED_HEAD_DIM)]
                for c in 0..quads {
                    dv_acc[c] += pq * g_tile[t * quads + c];
                    dk_acc[c] += ds * q_tile[t * quads + c];
                }
                i += 1;
            }
        }
        sync_cube();
        start += tile;
    }

    if active {
        write_row::<F>(dk, &dk_acc, bh, key_row, shape.heads, shape.scale, head_dim);
        write_row::<F>(dv, &dv_acc, bh, key_row, shape.heads, 1.0f32, head_dim);
    }
}

/// Runs both backward kernels: `dq` (`[batch, heads, rows, head_dim]`), `dk` and `dv`
/// (`[batch, heads, keys, head_dim]`), all contiguous, from the forward's inputs, its
/// `output` and `lse`, and the output's gradient `grad`; `delta` (`[batch · heads, rows]`
/// f32, contiguous) is scratch the first kernel fills for the second.
///
/// # Safety
/// As [`launch_attention_forward`](super::launch_attention_forward), with `output`,
/// `grad`, `lse` and `delta` of the forward pass's shapes.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_attention_backward<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    [query, key, value, output, grad]: [TensorArg<R>; 5],
    lse: TensorArg<R>,
    delta: TensorArg<R>,
    [dq, dk, dv]: [TensorArg<R>; 3],
    [batch_heads, heads, rows, keys, head_dim]: [usize; 5],
    scale: f32,
    causal: bool,
) {
    let offset = if causal { keys - rows } else { 0 };
    let tile = tile_rows(head_dim);
    let (count, dim) = cubes(rows, batch_heads);
    attention_backward_dq_kernel::launch_unchecked::<F, R>(
        client,
        count,
        dim,
        duplicate(&query),
        duplicate(&key),
        duplicate(&value),
        output,
        duplicate(&grad),
        duplicate(&lse),
        dq,
        duplicate(&delta),
        AttentionShapeLaunch::new(heads, rows, keys, offset, scale),
        head_dim,
        tile,
        causal,
    );
    let (count, dim) = cubes(keys, batch_heads);
    attention_backward_dkdv_kernel::launch_unchecked::<F, R>(
        client,
        count,
        dim,
        query,
        key,
        value,
        grad,
        lse,
        delta,
        dk,
        dv,
        AttentionShapeLaunch::new(heads, rows, keys, offset, scale),
        head_dim,
        tile,
        causal,
    );
}
