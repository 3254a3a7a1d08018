//! Gradient clipping's factor over many tensors, PyTorch's `clip_grad_norm_`:
//! `min(1, max_norm / (‖g‖₂ + 1e-6))`, `‖g‖₂` the norm of all the gradients together, in
//! one launch per gradient and one more, where summing each tensor's squares and adding
//! the sums up takes Burn three or four per gradient.
//!
//! [`squares_kernel`] writes one partial sum of squares per cube into a shared f32 buffer
//! of partials, each gradient into its own range of slots; [`clip_factor_kernel`] adds up
//! every slot in one cube and writes the factor. Sums are f32 whatever the gradients'
//! type, added in a fixed order (the result does not depend on timing).

use cubecl::prelude::*;
use cubecl::CubeDim;

use crate::reduce::cube_sum;

/// Units per cube of both kernels (a power of two: the shared-memory sums halve it).
pub const NORM_UNITS: usize = 256;

/// The most cubes one gradient is summed by.
const MAX_CUBES: usize = 1024;

/// Each unit sums at least this many elements before the cube adds them up.
const ELEMENTS_PER_UNIT: usize = 4;

/// PyTorch's `clip_grad_norm_` guard against a zero norm.
pub const NORM_EPSILON: f32 = 1e-6;

/// The partial sums (cubes) a gradient of `len` elements takes: one per
/// `NORM_UNITS · 4` elements, at most 1,024, at least one.
pub fn squares_partials(len: usize) -> usize {
    len.div_ceil(NORM_UNITS * ELEMENTS_PER_UNIT).clamp(1, MAX_CUBES)
}

/// Cube `c` sums the squares of the elements `c, c + stride, ...` of its share of `grad`
/// (`len` elements, contiguous; `stride` = units in all cubes of this launch) and writes
/// the sum to `partials[offset + c]`.
#[cube(launch_unchecked)]
pub fn squares_kernel<F: Float>(grad: &Tensor<F>, partials: &mut Tensor<f32>, len: usize, offset: usize) {
    let stride = CUBE_COUNT_X as usize * NORM_UNITS;
    let mut index = CUBE_POS_X as usize * NORM_UNITS + UNIT_POS_X as usize;
    let mut sum = 0.0f32;
    while index < len {
        let value = f32::cast_from(grad[index]);
        sum += value * value;
        index += stride;
    }
    let total = cube_sum(sum, NORM_UNITS);
    if UNIT_POS_X == 0 {
        partials[offset + CUBE_POS_X as usize] = total;
    }
}

/// One cube: `factor[0] = min(1, max_norm / (√Σ partials + 1e-6))`.
#[cube(launch_unchecked)]
pub fn clip_factor_kernel(partials: &Tensor<f32>, factor: &mut Tensor<f32>, count: usize, max_norm: f32) {
    let mut index = UNIT_POS_X as usize;
    let mut sum = 0.0f32;
    while index < count {
        sum += partials[index];
        index += NORM_UNITS;
    }
    let total = cube_sum(sum, NORM_UNITS);
    if UNIT_POS_X == 0 {
        factor[0] = min(max_norm / (total.sqrt() + NORM_EPSILON), 1.0f32);
    }
}

/// Sums the squares of one gradient of `len` elements into `partials[offset ..
/// offset + squares_partials(len)]`.
///
/// # Safety
/// `grad` must be contiguous with `len` elements; `partials` an f32 tensor of at least
/// `offset + squares_partials(len)` elements; the kernel indexes them unchecked.
pub unsafe fn launch_squares<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    grad: TensorArg<R>,
    partials: TensorArg<R>,
    len: usize,
    offset: usize,
) {
    let cubes = squares_partials(len);
    squares_kernel::launch_unchecked::<F, R>(
        client,
        CubeCount::Static(cubes as u32, 1, 1),
        CubeDim::new_1d(NORM_UNITS as u32),
        grad,
        partials,
        len,
        offset,
    );
}

/// Writes the clipping factor for the squares summed in `partials[..count]` into
/// `factor[0]`.
///
/// # Safety
/// `partials` must hold at least `count` f32s, `factor` at least one.
pub unsafe fn launch_clip_factor<R: Runtime>(
    client: &ComputeClient<R>,
    partials: TensorArg<R>,
    factor: TensorArg<R>,
    count: usize,
    max_norm: f32,
) {
    clip_factor_kernel::launch_unchecked::<R>(
        client,
        CubeCount::Static(1, 1, 1),
        CubeDim::new_1d(NORM_UNITS as u32),
        partials,
        factor,
        count,
        max_norm,
    );
}
