//! Gradient clipping's factor over many tensors, PyTorch's `clip_grad_norm_`:
//! `min(1, max_norm / (‖g‖₂ + 1e-6))`, `‖g‖₂` the norm of all the gradients together, in
//! one launch per group of gradients (up to 64 on CUDA, 28 on llvmpipe) and one more,
//! where summing each tensor's squares and adding the sums up takes Burn three or four per
//! gradient.
//!
//! [`squares_kernel`] writes one partial sum of squares per cube into a shared f32 buffer
//! of partials, each gradient into its own range of slots, many gradients per launch, each
//! read in vectors of the widest width that divides its own length (gradients of other
//! widths in a group go to another launch); [`clip_factor_kernel`] adds up every slot in
//! one cube and writes the factor. Sums are f32 whatever the gradients' type, added in a
//! fixed order (the result does not depend on timing, nor on how the gradients were
//! grouped).

use cubecl::prelude::*;
use cubecl::CubeDim;

use crate::reduce::cube_sum;
use crate::tensor_group::{duplicate, group_size, GroupGrid};
use crate::vector::vector_width;

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
/// (`vectors[i]` vectors of `N` elements, contiguous) is summed by the cubes `first_cube[i]
/// .. first_cube[i + 1]` (`squares_partials` of its length in elements; see
/// `tensor_group`), its cube `c` over the vectors `c, c + stride, ...` (`stride` = the
/// gradient's cubes' units), and its cube `c` writes its sum to `partials[first_slot[i] +
/// c]`. A gradient's sums are the same whichever group it is launched in.
#[cube(launch_unchecked)]
pub fn squares_kernel<F: Float, N: Size>(
    grads: &Sequence<Tensor<Vector<F, N>>>,
    partials: &mut Tensor<f32>,
    first_cube: Sequence<usize>,
    vectors: Sequence<usize>,
    first_slot: Sequence<usize>,
) {
    let members = comptime![grads.len()];
    let cube = CUBE_POS;
    let mut sum = 0.0f32;
    let mut slot = 0usize;
    #[unroll]
    for i in 0..members {
        if cube >= first_cube[i] && cube < first_cube[i + 1] {
            let grad = grads.index(i);
            let width = grad.vector_size();
            let stride = (first_cube[i + 1] - first_cube[i]) * NORM_UNITS;
            let mut index = (cube - first_cube[i]) * NORM_UNITS + UNIT_POS_X as usize;
            while index < vectors[i] {
                let values = grad[index];
                #[unroll]
                for j in 0..width {
                    let value = f32::cast_from(values[j]);
                    sum += value * value;
                }
                index += stride;
            }
            slot = first_slot[i] + cube - first_cube[i];
        }
    }
    // Outside the members' branches: every unit of every cube reaches the barriers.
    let total = cube_sum(sum, NORM_UNITS);
    if UNIT_POS_X == 0 && cube < first_cube[members] {
        partials[slot] = total;
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
/// ..]`: the gradients' `squares_partials(len)` slots each, in their order. Each gradient is
/// read in vectors of the widest width the runtime prefers that divides its length: one
/// launch for the gradients of each width, so that a gradient's sums do not depend on the
/// others in its group.
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
    let mut by_width: Vec<(usize, Vec<SquaresMember<R>>)> = Vec::new();
    let mut slot = offset;
    for (tensor, len) in grads {
        let width = vector_width(client, size_of::<F>(), len);
        let member = (tensor, len, slot);
        slot += squares_partials(len);
        match by_width.iter_mut().find(|(w, _)| *w == width) {
            Some((_, members)) => members.push(member),
            None => by_width.push((width, vec![member])),
        }
    }
    for (width, members) in by_width {
        let grid = GroupGrid::new(client, members.iter().map(|&(_, len, _)| squares_partials(len)));
        let (mut tensors, mut vectors, mut first_slot) = (SequenceArg::new(), SequenceArg::new(), SequenceArg::new());
        for (tensor, len, slot) in members {
            tensors.push(tensor);
            vectors.push(len / width);
            first_slot.push(slot);
        }
        // `width` divides every member's length; the rest as the caller guarantees.
        squares_kernel::launch_unchecked::<F, R>(
            client,
            grid.cube_count.clone(),
            CubeDim::new_1d(NORM_UNITS as u32),
            width,
            tensors,
            duplicate(&partials),
            grid.first_cube_arg(),
            vectors,
            first_slot,
        );
    }
}

/// A gradient of a [`launch_squares`] launch: its tensor, its length in elements and its
/// first slot in the partial sums.
type SquaresMember<R> = (TensorArg<R>, usize, usize);

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
