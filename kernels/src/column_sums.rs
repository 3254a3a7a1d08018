//! The sums of a matrix's columns, `sums[c] = Σ_r input[r, c]`: the gradient of a bias
//! added to every row (Burn's `linear_bias_backward`).
//!
//! Burn computes it with its reduction along the rows, which gives each column one unit
//! walking every row: 768 units for a gpt2-small projection's 8,192 rows, too few to fill
//! a GPU (on an H200 the bias gradients and a few row sums took 6.8 ms in 94 launches of a
//! step, 2026-11-30). Here the rows are cut into blocks ([`column_sum_blocks`]: enough
//! cubes to fill the device where the runtime says how many multiprocessors it has). A
//! cube sums one block for [`COLUMN_LANES`] neighbouring vectors of columns: its units
//! stand in [`ROW_LANES`] rows of lanes, lane `l` summing the block's rows `l, l +
//! ROW_LANES, ...` (neighbouring units read neighbouring vectors of one row), then the
//! lanes' sums are added by halving in shared memory. With more than
//! one block the blocks' sums (f32) are added by a second launch over them. f32 arithmetic
//! whatever the element type; the order of the additions depends only on the shape and the
//! block count, so a result does not change from run to run.

use cubecl::prelude::*;
use cubecl::CubeDim;

/// Units of a cube along the columns, each on one vector of neighbouring columns.
pub const COLUMN_LANES: usize = 32;

/// Units of a cube along the rows (a power of two: their sums are added by halving).
pub const ROW_LANES: usize = 8;

const UNITS: usize = COLUMN_LANES * ROW_LANES;

/// Cubes per streaming multiprocessor, where the runtime says how many it has (CUDA).
const CUBES_PER_MULTIPROCESSOR: usize = 4;

/// Cubes where the runtime does not say (wgpu): one block, one launch. On llvmpipe a
/// launch and a cube's barriers cost more than lanes save: 512 × 384 took 3.5 ms a call in
/// one launch, 5.0 in two (six blocks), Burn's reduction 2.4–2.8 (docs/benchmarks.md).
const DEFAULT_CUBES: usize = 1;

/// Rows each lane sums at least, before a block is cut further.
const MIN_LANE_ROWS: usize = 4;

/// Rows each lane sums at most: llvmpipe stops a shader's loops after 65,535 iterations in
/// all (Mesa's `LP_MAX_TGSI_LOOP_ITERATIONS`).
const MAX_LANE_ROWS: usize = 4096;

/// The most rows [`launch_column_sums`] takes (two launches of at most
/// `ROW_LANES · MAX_LANE_ROWS` rows a block).
pub const MAX_COLUMN_SUM_ROWS: usize = (ROW_LANES * MAX_LANE_ROWS) * (ROW_LANES * MAX_LANE_ROWS);

/// The most vectors of columns [`launch_column_sums`] takes (a grid of at most 65,535
/// cubes a side).
pub const MAX_COLUMN_SUM_VECTORS: usize = 65_535 * COLUMN_LANES;

/// Cube `(x, y)` writes into `sums[y, ..]` the sums over rows `y · rows_per_block ..` (at
/// most `rows_per_block`, below `rows`) of the vectors `x · COLUMN_LANES ..` of `input`
/// (`[rows, vectors]` vectors of `N` elements, rows `row_stride` vectors apart). `sums` is
/// `[blocks, vectors]`, contiguous.
#[cube(launch_unchecked)]
pub fn column_sums_kernel<F: Float, G: Float, N: Size>(
    input: &Tensor<Vector<F, N>>,
    sums: &mut Tensor<Vector<G, N>>,
    rows: usize,
    vectors: usize,
    row_stride: usize,
    rows_per_block: usize,
) {
    let column = CUBE_POS_X as usize * COLUMN_LANES + UNIT_POS_X as usize;
    let lane = UNIT_POS_Y as usize;
    let block = CUBE_POS_Y as usize;
    let end = min((block + 1) * rows_per_block, rows);
    let mut sum = Vector::<f32, N>::empty();
    #[unroll]
    for i in 0..sum.vector_size() {
        sum[i] = 0.0f32;
    }
    if column < vectors {
        let mut row = block * rows_per_block + lane;
        while row < end {
            sum += Vector::<f32, N>::cast_from(input[row * row_stride + column]);
            row += ROW_LANES;
        }
    }
    // Every unit takes part in the halving, those past the last column with zeros.
    let mut shared = SharedMemory::<Vector<f32, N>>::new(UNITS);
    let at = lane * COLUMN_LANES + UNIT_POS_X as usize;
    shared[at] = sum;
    sync_cube();
    let mut half = CUBE_DIM_Y as usize / 2;
    while half > 0 {
        if lane < half {
            shared[at] = shared[at] + shared[at + half * COLUMN_LANES];
        }
        sync_cube();
        half /= 2;
    }
    if lane == 0 && column < vectors {
        sums[block * vectors + column] = Vector::<G, N>::cast_from(shared[at]);
    }
}

/// How many blocks [`launch_column_sums`] cuts `rows` rows of `vectors` vectors into on
/// this runtime: a few cubes per multiprocessor where the runtime says how many it has,
/// one block where not; each lane summing at least 4 rows where there are enough and at
/// most 4,096 (`rows` at most [`MAX_COLUMN_SUM_ROWS`]).
pub fn column_sum_blocks<R: Runtime>(client: &ComputeClient<R>, rows: usize, vectors: usize) -> usize {
    let multiprocessors = client.properties().hardware.num_streaming_multiprocessors;
    let cubes = multiprocessors.map_or(DEFAULT_CUBES, |count| count as usize * CUBES_PER_MULTIPROCESSOR);
    let wanted = cubes.div_ceil(vectors.div_ceil(COLUMN_LANES).max(1));
    let most = rows.div_ceil(ROW_LANES * MIN_LANE_ROWS).max(1);
    let least = rows.div_ceil(ROW_LANES * MAX_LANE_ROWS).max(1);
    whole_blocks(rows, wanted.min(most).max(least))
}

/// The blocks `rows` rows come to when cut into blocks of `rows / wanted` rows (rounded
/// up) each: `wanted` or fewer, every one with a row, at least one.
pub fn whole_blocks(rows: usize, wanted: usize) -> usize {
    rows.div_ceil(rows.div_ceil(wanted.max(1)).max(1)).max(1)
}

/// Writes into `sums` (`[blocks, vectors]` of `G`, contiguous) the sums of `input`'s
/// columns over each block of rows: with `blocks` = 1 the columns' sums, else partial sums
/// that a second call (over `blocks` rows, in one block) adds up. `input` holds `rows`
/// rows of `vectors` vectors of `width` elements, `row_stride` vectors apart.
///
/// # Safety
/// `input` must hold those rows (its vectors contiguous within a row), `sums` `blocks ·
/// vectors` vectors, not in `input`'s buffer; `width` must be a vector width the runtime
/// supports, `rows` at most [`MAX_COLUMN_SUM_ROWS`], `vectors` at most [`MAX_COLUMN_SUM_VECTORS`];
/// the kernel indexes them unchecked.
///
/// # Panics
/// If `blocks` is not [`whole_blocks`]`(rows, blocks)` (a block without rows would leave
/// its sums unwritten).
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_column_sums<R: Runtime, F: Float + CubeElement, G: Float + CubeElement>(
    client: &ComputeClient<R>,
    input: TensorArg<R>,
    sums: TensorArg<R>,
    [rows, vectors]: [usize; 2],
    width: usize,
    row_stride: usize,
    blocks: usize,
) {
    if vectors == 0 {
        return;
    }
    assert_eq!(blocks, whole_blocks(rows, blocks), "{rows} rows do not fill {blocks} blocks");
    let rows_per_block = rows.div_ceil(blocks).max(1);
    column_sums_kernel::launch_unchecked::<F, G, R>(
        client,
        CubeCount::Static(vectors.div_ceil(COLUMN_LANES) as u32, blocks as u32, 1),
        CubeDim::new_2d(COLUMN_LANES as u32, ROW_LANES as u32),
        width,
        input,
        sums,
        rows,
        vectors,
        row_stride,
        rows_per_block,
    );
}
