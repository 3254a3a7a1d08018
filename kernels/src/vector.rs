//! How wide the vectors a kernel reads and writes are.

use cubecl::prelude::*;
use cubecl::{calculate_cube_count_elemwise, CubeDim};

/// The widest vector width the runtime prefers for an element of `elem_bytes` that divides
/// `len`; 1 otherwise. Widths are powers of two, so for several lengths pass them or-ed
/// together (`a | b`: its trailing zeros are the fewest of theirs).
pub fn vector_width<R: Runtime>(client: &ComputeClient<R>, elem_bytes: usize, len: usize) -> usize {
    client.io_optimized_vector_sizes(elem_bytes).filter(|&w| len.is_multiple_of(w)).max().unwrap_or(1)
}

/// One unit per vector of `width` elements (the widest [`vector_width`]) over `len`
/// elements of `F`: an element-wise kernel's launch.
pub(crate) struct ElementwiseGrid {
    pub width: usize,
    pub vectors: usize,
    pub cube_count: CubeCount,
    pub cube_dim: CubeDim,
}

impl ElementwiseGrid {
    pub fn new<R: Runtime, F>(client: &ComputeClient<R>, len: usize) -> Self {
        Self::dividing::<R, F>(client, len, len)
    }

    /// As [`new`](Self::new), with vectors that also divide `row` (a row of a per-row
    /// operand, such as a bias added to every row).
    pub fn dividing<R: Runtime, F>(client: &ComputeClient<R>, len: usize, row: usize) -> Self {
        let width = vector_width(client, size_of::<F>(), len | row);
        let vectors = len / width;
        let cube_dim = CubeDim::new(client, vectors);
        let cube_count = calculate_cube_count_elemwise(client, vectors, cube_dim);
        Self { width, vectors, cube_count, cube_dim }
    }
}
