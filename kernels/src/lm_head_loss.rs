//! The LM head's cross-entropy over one chunk of logits, row by row, in one kernel: each
//! row's loss against its target and, for training, its softmax gradient, where the
//! composed Burn ops make about eight passes over the chunk, each a new tensor.
//!
//! For a row `z` of `vocab` logits and target `t`: `loss = log Σ exp(z) − z_t` and
//! `grad = (softmax(z) − onehot(t)) · scale` (`scale` is `1 / tokens` for a mean). One cube
//! per row: each unit keeps a running maximum and a sum of exponentials rescaled to it over
//! its share of the row (one read, in vectors of the widest width the runtime prefers that
//! divides the row), the cube combines the pairs in shared memory (`reduce`'s, shared with
//! attention's block softmax), and the gradient pass reads the row once more and writes
//! it. f32 arithmetic whatever the element type.

use cubecl::prelude::*;
use cubecl::CubeDim;

use crate::reduce::{absorb, combine_max_sum, cube_row, row_cubes};
use crate::vector::vector_width;

/// Units per cube: one cube per row of logits.
pub const LOSS_ROW_UNITS: usize = 256;

/// Writes each row's cross-entropy into `row_loss` (f32) and, when `with_grad`, its
/// softmax gradient times `scale` into `grad` (else `grad` is not written). Rows are
/// `vectors` vectors of `N` logits; each unit reads whole vectors (more bytes in flight
/// per load than one logit), and the unit whose share holds the row's target writes its
/// loss.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn lm_head_loss_rows_kernel<F: Float, I: Int, N: Size>(
    logits: &Tensor<Vector<F, N>>,
    targets: &Tensor<I>,
    row_loss: &mut Tensor<f32>,
    grad: &mut Tensor<Vector<F, N>>,
    rows: usize,
    vectors: usize,
    scale: f32,
    #[comptime] with_grad: bool,
) {
    let (row, active) = cube_row(rows);
    if !active {
        terminate!();
    }
    let base = row * vectors;
    let target = usize::cast_from(targets[row]);
    // From the row's first logit with nothing summed: a unit with no vector of its own
    // adds nothing.
    let mut largest = f32::cast_from(logits[base][0]);
    let mut sum = 0.0f32;
    let mut target_logit = 0.0f32;
    let mut holds_target = false;
    let mut v = UNIT_POS_X as usize;
    while v < vectors {
        let x = logits[base + v];
        let width = x.vector_size();
        #[unroll]
        for j in 0..width {
            let value = f32::cast_from(x[j]);
            let (new_largest, new_sum) = absorb(largest, sum, value);
            largest = new_largest;
            sum = new_sum;
            if v * width + j == target {
                target_logit = value;
                holds_target = true;
            }
        }
        v += LOSS_ROW_UNITS;
    }
    let (row_max, total) = combine_max_sum(largest, sum, LOSS_ROW_UNITS);
    if holds_target {
        row_loss[row] = row_max + total.ln() - target_logit;
    }
    if with_grad {
        let per_exp = scale / total;
        let mut v = UNIT_POS_X as usize;
        while v < vectors {
            let x = logits[base + v];
            let width = x.vector_size();
            let mut g = Vector::<F, N>::empty();
            #[unroll]
            for j in 0..width {
                let mut value = (f32::cast_from(x[j]) - row_max).exp() * per_exp;
                if v * width + j == target {
                    value -= scale;
                }
                g[j] = F::cast_from(value);
            }
            grad[base + v] = g;
            v += LOSS_ROW_UNITS;
        }
    }
}

/// Runs the kernel over `rows` rows of `vocab` logits.
///
/// # Safety
/// `logits` and `grad` must be contiguous `[rows, vocab]` tensors of `F`, `targets` `[rows]`
/// of `I` with every id below `vocab`, `row_loss` `[rows]` f32; `grad` may be any tensor
/// when `with_grad` is false.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_lm_head_loss_rows<R: Runtime, F: Float + CubeElement, I: Int + CubeElement>(
    client: &ComputeClient<R>,
    logits: TensorArg<R>,
    targets: TensorArg<R>,
    row_loss: TensorArg<R>,
    grad: TensorArg<R>,
    [rows, vocab]: [usize; 2],
    scale: f32,
    with_grad: bool,
) {
    let width = vector_width(client, size_of::<F>(), vocab);
    lm_head_loss_rows_kernel::launch_unchecked::<F, I, R>(
        client,
        row_cubes(rows),
        CubeDim::new_1d(LOSS_ROW_UNITS as u32),
        width,
        logits,
        targets,
        row_loss,
        grad,
        rows,
        vocab / width,
        scale,
        with_grad,
    );
}
