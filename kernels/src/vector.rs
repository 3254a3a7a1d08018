//! How wide the vectors a kernel reads and writes are.

use cubecl::prelude::*;

/// The widest vector width the runtime prefers for an element of `elem_bytes` that divides
/// `len`; 1 otherwise. Widths are powers of two, so for several lengths pass them or-ed
/// together (`a | b`: its trailing zeros are the fewest of theirs).
pub fn vector_width<R: Runtime>(client: &ComputeClient<R>, elem_bytes: usize, len: usize) -> usize {
    client.io_optimized_vector_sizes(elem_bytes).filter(|&w| len.is_multiple_of(w)).max().unwrap_or(1)
}
