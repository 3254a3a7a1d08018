//! One launch over a group of tensors of different lengths (PyTorch's multi-tensor apply):
//! the optimizer's kernels update or sum many parameters' tensors in one launch instead of
//! one launch each, where a model has dozens of small ones (GPT-2's biases and LayerNorm
//! weights: 100 of gpt2-small's 148 tensors).
//!
//! The tensors are passed as CubeCL [`Sequence`]s (one binding each; the kernel is unrolled
//! over them at compile time) and the cubes are dealt out in order: member `i` owns the
//! cubes `first_cube[i] .. first_cube[i + 1]`, so every cube works on one member and its
//! branch is the same for all its units. The cube count is spread over two axes where one
//! would pass the runtime's limit; cubes past the last member's do nothing.

use cubecl::prelude::*;

/// The most bindings one group launch takes (GPU runtimes allow far more; this keeps a
/// launch's arguments small: on CUDA each binding is a kernel parameter).
const MAX_GROUP_BINDINGS: usize = 64;

/// Bindings a launch needs besides its members' (the scale, the runtime's metadata buffer,
/// one spare).
const RESERVED_BINDINGS: usize = 3;

/// How many members of `bindings_per_member` bindings each one launch takes on this
/// runtime: as many as its binding limit allows, at most [`MAX_GROUP_BINDINGS`] in all, at
/// least one.
pub fn group_size<R: Runtime>(client: &ComputeClient<R>, bindings_per_member: usize) -> usize {
    let limit = client.properties().hardware.max_bindings as usize;
    let bindings = limit.saturating_sub(RESERVED_BINDINGS).min(MAX_GROUP_BINDINGS);
    (bindings / bindings_per_member).max(1)
}

/// Where each member's cubes start, and the cube count that covers them all.
pub struct GroupGrid {
    /// `first_cube[i]`: member `i`'s first cube; the last entry is the number of cubes.
    pub first_cube: Vec<usize>,
    /// At least `first_cube[last]` cubes, over x and then y.
    pub cube_count: CubeCount,
}

impl GroupGrid {
    /// The grid for members that take `cubes` cubes each (in order).
    pub fn new<R: Runtime>(client: &ComputeClient<R>, cubes: impl IntoIterator<Item = usize>) -> Self {
        let mut first_cube = vec![0];
        for count in cubes {
            first_cube.push(first_cube[first_cube.len() - 1] + count);
        }
        let total = first_cube[first_cube.len() - 1].max(1);
        let max_x = client.properties().hardware.max_cube_count.0.max(1) as usize;
        let x = total.min(max_x);
        let cube_count = CubeCount::Static(x as u32, total.div_ceil(x) as u32, 1);
        Self { first_cube, cube_count }
    }

    /// `first_cube` as the kernels' runtime argument.
    pub fn first_cube_arg<R: Runtime>(&self) -> SequenceArg<R, usize> {
        self.first_cube.iter().copied().collect()
    }
}

/// A second argument for the same tensor (`TensorArg` is not `Clone`).
pub(crate) fn duplicate<R: Runtime>(arg: &TensorArg<R>) -> TensorArg<R> {
    match arg {
        TensorArg::Handle { handle } => TensorArg::Handle { handle: handle.clone() },
        TensorArg::Alias { input_pos, strides, shape } => {
            TensorArg::Alias { input_pos: *input_pos, strides: strides.clone(), shape: shape.clone() }
        }
    }
}
