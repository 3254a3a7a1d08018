//! A sum over a cube's units in shared memory, for the kernels whose cube works on one
//! row or one gradient together.

use cubecl::prelude::*;

/// Adds `value` over the cube's units (`units` of them, a power of two, the cube's size)
/// in shared memory; every unit gets the total. Safe to call more than once per kernel.
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
    let total = shared[0];
    sync_cube();
    total
}
