//! The gradient of an embedding table: each token's row of the output's gradient added into
//! the table row of its id, `grad[r] += Σ_{n : ids[n] = r} output_grad[n]` (into zeros for
//! the gradient itself).
//!
//! Burn's kernel (`select_add` into zeros) gives each of the table's `width` columns one
//! unit that walks every token: 768 units for gpt2-small, too few to fill a GPU (on an H200
//! its two launches, token and position table, took 5.9 ms of a step). Here each cube owns
//! a block of the table's rows and walks the ids a tile of [`GRAD_UNITS`] tokens at a time,
//! each unit checking one id; the tokens whose id falls in the block are gathered in token
//! order (a prefix sum in shared memory), and the cube's units add their rows of the
//! output's gradient into the table, a unit per column. No entry has two writers (no
//! atomics), and each is summed in token order, the order Burn's kernel sums in, so both
//! give the same bits. The rows are cut into as many blocks as fill the device
//! ([`embedding_grad_blocks`]); each cube reads every id once. Ids outside the table match
//! no block: nothing is written for them.
//!
//! The table is not zeroed here: a unit that walked a block's rows to zero them would loop
//! once per row, and llvmpipe stops a shader's loops after 65,535 iterations in all (Mesa's
//! `LP_MAX_TGSI_LOOP_ITERATIONS`, shared between every loop; blocks of 25,000 rows lost
//! their sums there); the caller passes zeros. A unit's loops here run about `tokens / 256
//! · 9 + its block's tokens · (width / 256 + 1)` times.

use cubecl::prelude::*;
use cubecl::CubeDim;

use crate::reduce::{cube_row, row_cubes};

/// Units per cube: the ids checked at once, the columns updated at once.
pub const GRAD_UNITS: usize = 256;

/// Blocks (cubes) per streaming multiprocessor, where the runtime says how many it has
/// (CUDA).
const BLOCKS_PER_MULTIPROCESSOR: usize = 4;

/// Blocks where the runtime does not say (wgpu). On llvmpipe each block costs about its
/// barriers' coroutine switches, so few: gpt2-tiny's 128 tokens into its 1,024 × 64 table
/// took 3.8–4.0 ms a call with 16 blocks, 7.3–8.0 with 64, Burn's kernel 2.3–2.6; gpt2-mini's
/// 512 into 50,304 × 128 23.4–23.8, 32–34 and 20–24 ms (docs/benchmarks.md).
const DEFAULT_BLOCKS: usize = 16;

/// Cube `block` adds into the table's rows `block · rows_per_block ..` (at most
/// `rows_per_block` of them, below `rows`; as far apart as `grad`'s row stride) every token
/// whose id is among them, in token order.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn embedding_grad_kernel<F: Float, I: Int>(
    output_grad: &Tensor<F>,
    ids: &Tensor<I>,
    grad: &mut Tensor<F>,
    tokens: usize,
    rows: usize,
    width: usize,
    rows_per_block: usize,
    blocks: usize,
) {
    let (block, active) = cube_row(blocks);
    if !active {
        terminate!();
    }
    let unit = UNIT_POS_X as usize;
    let first = block * rows_per_block;
    let end = min(first + rows_per_block, rows);
    let row_stride = grad.stride(0);
    let mut counts = SharedMemory::<u32>::new(GRAD_UNITS);
    let mut matched = SharedMemory::<u32>::new(GRAD_UNITS);
    let mut tile = 0;
    while tile < tokens {
        let token = tile + unit;
        let mut hit = 0u32;
        if token < tokens {
            // A negative id wraps to a value past every block.
            let id = usize::cast_from(ids[token]);
            if id >= first && id < end {
                hit = 1u32;
            }
        }
        let position = inclusive_prefix_sum(&mut counts, hit);
        if hit == 1 {
            matched[position as usize - 1] = token as u32;
        }
        let count = counts[GRAD_UNITS - 1];
        sync_cube();
        for k in 0..count {
            let token = matched[k as usize] as usize;
            let row = usize::cast_from(ids[token]);
            let mut column = unit;
            while column < width {
                grad[row * row_stride + column] += output_grad[token * width + column];
                column += GRAD_UNITS;
            }
        }
        // The next tile overwrites `counts` and `matched`.
        sync_cube();
        tile += GRAD_UNITS;
    }
}

/// The sum of `value` over this unit and the units before it in the cube (Hillis and
/// Steele's scan in `shared`); `shared` holds every unit's sum afterwards.
#[cube]
fn inclusive_prefix_sum(shared: &mut SharedMemory<u32>, value: u32) -> u32 {
    let unit = UNIT_POS_X as usize;
    shared[unit] = value;
    sync_cube();
    let mut offset = 1;
    while offset < GRAD_UNITS {
        let mut before = 0u32;
        if unit >= offset {
            before = shared[unit - offset];
        }
        sync_cube();
        shared[unit] += before;
        sync_cube();
        offset *= 2;
    }
    shared[unit]
}

/// How many blocks of rows [`launch_embedding_grad`] cuts a table of `rows` rows into on
/// this runtime: a few cubes per multiprocessor where the runtime says how many it has, a
/// small GPU's worth where not, at most one block a row, at least one.
pub fn embedding_grad_blocks<R: Runtime>(client: &ComputeClient<R>, rows: usize) -> usize {
    let multiprocessors = client.properties().hardware.num_streaming_multiprocessors;
    let blocks = multiprocessors.map_or(DEFAULT_BLOCKS, |count| count as usize * BLOCKS_PER_MULTIPROCESSOR);
    blocks.clamp(1, rows.max(1))
}

/// Adds into `grad` (`[rows, width]`, zeros for the gradient itself) the gradient of a
/// table looked up at `ids` (`[tokens]`) whose output's gradient is `output_grad`
/// (`[tokens, width]`), the rows cut into `blocks` (see [`embedding_grad_blocks`]; any
/// count from 1 gives the same result).
///
/// # Safety
/// `output_grad` must be a contiguous tensor of `F` of that shape, `ids` a contiguous
/// `[tokens]` tensor of `I`, `grad` a `[rows, width]` tensor of `F` whose columns are
/// contiguous (its rows may be padded); the kernel indexes them unchecked. `grad` must not
/// share a buffer with the inputs.
pub unsafe fn launch_embedding_grad<R: Runtime, F: Float + CubeElement, I: Int + CubeElement>(
    client: &ComputeClient<R>,
    output_grad: TensorArg<R>,
    ids: TensorArg<R>,
    grad: TensorArg<R>,
    [tokens, rows, width]: [usize; 3],
    blocks: usize,
) {
    if rows == 0 || width == 0 {
        return;
    }
    let rows_per_block = rows.div_ceil(blocks.clamp(1, rows));
    let blocks = rows.div_ceil(rows_per_block);
    embedding_grad_kernel::launch_unchecked::<F, I, R>(
        client,
        row_cubes(blocks),
        CubeDim::new_1d(GRAD_UNITS as u32),
        output_grad,
        ids,
        grad,
        tokens,
        rows,
        width,
        rows_per_block,
        blocks,
    );
}
