//! A sum, and a softmax row's maximum and sum of exponentials, over a cube's units in
//! shared memory, for the kernels whose cube works on one row or one gradient together, and
//! the row such a cube works on.

use cubecl::prelude::*;

/// Adds `value` over the cube's units (`units` of them, a power of two, the cube's size)
/// by halving in shared memory; every unit gets the total. Safe to call more than once per
/// kernel.
#[cube]
pub(crate) fn cube_sum(value: f32, #[comptime] units: usize) -> f32 {
    let mut shared = SharedMemory::<f32>::new(units);
    let unit = UNIT_POS_X as usize;
    shared[unit] = value;
    sync_cube();
    let mut half = CUBE_DIM_X as usize / 2;
    while half > 0 {
        if unit < half {
            shared[unit] += shared[unit + half];
        }
        sync_cube();
        half /= 2;
    }
    let result = shared[0];
    sync_cube();
    result
}

/// Adds `a` and `b` each over the cube's units (`units` of them, a power of two, the cube's
/// size) in one halving pass in shared memory: the barriers of one [`cube_sum`] for two
/// sums. Every unit gets both totals, added in `cube_sum`'s order.
#[cube]
pub(crate) fn cube_sum_pair(a: f32, b: f32, #[comptime] units: usize) -> (f32, f32) {
    let mut shared_a = SharedMemory::<f32>::new(units);
    let mut shared_b = SharedMemory::<f32>::new(units);
    let unit = UNIT_POS_X as usize;
    shared_a[unit] = a;
    shared_b[unit] = b;
    sync_cube();
    let mut half = CUBE_DIM_X as usize / 2;
    while half > 0 {
        if unit < half {
            shared_a[unit] += shared_a[unit + half];
            shared_b[unit] += shared_b[unit + half];
        }
        sync_cube();
        half /= 2;
    }
    let result = (shared_a[0], shared_b[0]);
    sync_cube();
    result
}

/// The maximum of `x = scale · row[base ..][.. len]` (`len ≥ 1` elements from vector `base`
/// of a row of vectors of `N` elements) and `Σ exp(x − maximum)`, computed by the cube's
/// `units` units together: each keeps a running maximum and a sum of exponentials rescaled
/// to it over its strided share of the row's vectors (one read), then the pairs are
/// combined in one halving pass in shared memory (half the barriers of a maximum and then
/// a sum); every unit gets both. f32 arithmetic whatever `F`.
#[cube]
pub(crate) fn cube_softmax_stats<F: Float, N: Size>(
    row: &Tensor<Vector<F, N>>,
    base: usize,
    len: usize,
    scale: f32,
    #[comptime] units: usize,
) -> (f32, f32) {
    // From the row's first value with nothing summed: a unit with no value of its own adds
    // nothing.
    let mut largest = f32::cast_from(row[base][0]) * scale;
    let mut sum = 0.0f32;
    let width = row.vector_size();
    let mut v = UNIT_POS_X as usize;
    while v * width < len {
        let x = row[base + v];
        #[unroll]
        for j in 0..width {
            if v * width + j < len {
                let (new_largest, new_sum) = absorb(largest, sum, f32::cast_from(x[j]) * scale);
                largest = new_largest;
                sum = new_sum;
            }
        }
        v += units;
    }
    combine_max_sum(largest, sum, units)
}

/// A running maximum and a sum of exponentials rescaled to it, with `x` taken in.
#[cube]
pub(crate) fn absorb(largest: f32, sum: f32, x: f32) -> (f32, f32) {
    let mut new_largest = largest;
    let mut new_sum = sum;
    if x > largest {
        new_sum = sum * (largest - x).exp() + 1.0f32;
        new_largest = x;
    } else {
        new_sum += (x - largest).exp();
    }
    (new_largest, new_sum)
}

/// The units' `(largest, sum)` pairs combined pairwise by halving in shared memory.
#[cube]
pub(crate) fn combine_max_sum(largest: f32, sum: f32, #[comptime] units: usize) -> (f32, f32) {
    let mut maxima = SharedMemory::<f32>::new(units);
    let mut sums = SharedMemory::<f32>::new(units);
    let unit = UNIT_POS_X as usize;
    maxima[unit] = largest;
    sums[unit] = sum;
    sync_cube();
    let mut half = CUBE_DIM_X as usize / 2;
    while half > 0 {
        if unit < half {
            let (mine, other) = (maxima[unit], maxima[unit + half]);
            let both = max(mine, other);
            sums[unit] = sums[unit] * (mine - both).exp() + sums[unit + half] * (other - both).exp();
            maxima[unit] = both;
        }
        sync_cube();
        half /= 2;
    }
    let result = (maxima[0], sums[0]);
    sync_cube();
    result
}

/// The row this cube works on (the grid may be two-dimensional), and whether it is one.
#[cube]
pub(crate) fn cube_row(rows: usize) -> (usize, bool) {
    let row = CUBE_POS_Y as usize * CUBE_COUNT_X as usize + CUBE_POS_X as usize;
    (row, row < rows)
}

/// One cube per row, in a grid of at most 65,535 cubes a side.
pub(crate) fn row_cubes(rows: usize) -> CubeCount {
    let x = rows.clamp(1, MAX_CUBES_PER_AXIS);
    CubeCount::Static(x as u32, rows.div_ceil(x).max(1) as u32, 1)
}

/// Most cubes along one axis of a launch.
const MAX_CUBES_PER_AXIS: usize = 65_535;
