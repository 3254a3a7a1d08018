//! A sum and a maximum over a cube's units in shared memory, for the kernels whose cube
//! works on one row or one gradient together, and the row such a cube works on.

use cubecl::prelude::*;

/// Adds `value` over the cube's units (`units` of them, a power of two, the cube's size)
/// in shared memory; every unit gets the total. Safe to call more than once per kernel.
#[cube]
pub(crate) fn cube_sum(value: f32, #[comptime] units: usize) -> f32 {
    cube_reduce(value, units, false)
}

/// The largest `value` over the cube's units (as [`cube_sum`]).
#[cube]
pub(crate) fn cube_max(value: f32, #[comptime] units: usize) -> f32 {
    cube_reduce(value, units, true)
}

/// `value` summed, or its maximum taken (`largest`), over the cube's units by halving in
/// shared memory; every unit gets the result.
#[cube]
fn cube_reduce(value: f32, #[comptime] units: usize, #[comptime] largest: bool) -> f32 {
    let mut shared = SharedMemory::<f32>::new(units);
    let unit = UNIT_POS_X as usize;
    shared[unit] = value;
    sync_cube();
    let mut half = CUBE_DIM_X as usize / 2;
    while half > 0 {
        if unit < half {
            let other = shared[unit + half];
            if largest {
                shared[unit] = max(shared[unit], other);
            } else {
                shared[unit] += other;
            }
        }
        sync_cube();
        half /= 2;
    }
    let result = shared[0];
    sync_cube();
    result
}

/// A softmax row's maximum and sum of exponentials over the cube's units, each unit holding
/// its share's `largest` value and `sum` of `exp(x − largest)`: the row's maximum and
/// `Σ sum · exp(largest − maximum)`, combined pairwise in one halving pass (half the
/// barriers of a maximum and then a sum); every unit gets both.
#[cube]
pub(crate) fn cube_max_sum(largest: f32, sum: f32, #[comptime] units: usize) -> (f32, f32) {
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
