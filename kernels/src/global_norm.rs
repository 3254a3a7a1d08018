//! Gradient clipping's factor over many tensors, PyTorch's `clip_grad_norm_`:
//! `min(1, max_norm / (‖g‖₂ + 1e-6))`, `‖g‖₂` the norm of all the gradients together, in
//! one launch per group of gradients (up to 64 on CUDA, 28 on llvmpipe) and one more,
//! where summing each tensor's squares and adding the sums up takes Burn three or four per
//! gradient.
//!
//! [`squares_kernel`] writes one partial sum of squares per cube into a shared f32 buffer
//! of partials, each gradient into its own range of slots, many gradients per launch;
//! [`clip_factor_kernel`] adds up every slot in one cube and writes the factor. Sums are
//! f32 whatever the gradients' type, added in a fixed order (the result does not depend on
//! timing, nor on how the gradients were grouped).

use cubecl::prelude::*;
use cubecl::CubeDim;

use crate::reduce::cube_sum;
use crate::tensor_group::{group_size, GroupGrid};

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

/// Sums the squares of a group of gradients, one partial sum per cube: gradient `i`
/// (`lens[i]` elements, contiguous) is summed by the cubes `first_cube[i] ..
/// first_cube[i + 1]` (`squares_partials(lens[i])` of them; see `tensor_group`), its cube
/// `c` over the elements `c, c + stride, ...` (`stride` = the gradient's cubes' units), and
/// cube `k` of the launch writes its sum to `partials[offset + k]`. A gradient's sums are
/// the same whichever group it is launched in.
#[cube(launch_unchecked)]
pub fn squares_kernel<F: Float>(
    grads: &Sequence<Tensor<F>>,
    partials: &mut Tensor<f32>,
    first_cube: Sequence<usize>,
    lens: Sequence<usize>,
    offset: usize,
) {
    let members = comptime![grads.len()];
    let cube = CUBE_POS;
    let mut sum = 0.0f32;
    #[unroll]
    for i in 0..members {
        if cube >= first_cube[i] && cube < first_cube[i + 1] {
            let grad = grads.index(i);
            let stride = (first_cube[i + 1] - first_cube[i]) * NORM_UNITS;
            let mut index = (cube - first_cube[i]) * NORM_UNITS + UNIT_POS_X as usize;
            while index < lens[i] {
                let value = f32::cast_from(grad[index]);
                sum += value * value;
                index += stride;
            }
        }
    }
    // Outside the members' branches: every unit of every cube reaches the barriers.
    let total = cube_sum(sum, NORM_UNITS);
    if UNIT_POS_X == 0 && cube < first_cube[members] {
        partials[offset + cube] = total;
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

/// The gradients [`launch_squares`] takes in one launch on this runtime (one binding each,
/// within its binding limit).
pub fn squares_group_size<R: Runtime>(client: &ComputeClient<R>) -> usize {
    group_size(client, 1)
}

/// Sums the squares of a group of gradients, each `(tensor, len)`, into `partials[offset
/// ..]`: the gradients' `squares_partials(len)` slots each, in their order.
///
/// # Safety
/// Each gradient must be contiguous with `len` elements of `F`; `partials` an f32 tensor of
/// at least `offset` plus the gradients' slots elements; at most [`squares_group_size`]
/// gradients. The kernel indexes them unchecked.
pub unsafe fn launch_squares<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    grads: Vec<(TensorArg<R>, usize)>,
    partials: TensorArg<R>,
    offset: usize,
) {
    let grid = GroupGrid::new(client, grads.iter().map(|&(_, len)| squares_partials(len)));
    let (mut tensors, mut lens) = (SequenceArg::new(), SequenceArg::new());
    for (tensor, len) in grads {
        tensors.push(tensor);
        lens.push(len);
    }
    squares_kernel::launch_unchecked::<F, R>(
        client,
        grid.cube_count.clone(),
        CubeDim::new_1d(NORM_UNITS as u32),
        tensors,
        partials,
        grid.first_cube_arg(),
        lens,
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
