//! The LM head's cross-entropy over one chunk of logits, row by row, in one kernel: each
//! row's loss against its target and, for training, its softmax gradient, where the
//! composed Burn ops make about eight passes over the chunk, each a new tensor.
//!
//! For a row `z` of `vocab` logits and target `t`: `loss = log Σ exp(z) − z_t` and
//! `grad = (softmax(z) − onehot(t)) · scale` (`scale` is `1 / tokens` for a mean). One cube
//! per row: each unit keeps a running maximum and a sum of exponentials rescaled to it over
//! its share of the row (one read), the cube combines the pairs in shared memory
//! (`reduce::cube_softmax_stats`, shared with attention's block softmax), and the
//! gradient pass reads the row once more and writes it. f32 arithmetic whatever the
//! element type.

use cubecl::prelude::*;
use cubecl::CubeDim;

use crate::reduce::{cube_row, cube_softmax_stats, row_cubes};

/// Units per cube: one cube per row of logits.
pub const LOSS_ROW_UNITS: usize = 256;

/// Writes each row's cross-entropy into `row_loss` (f32) and, when `with_grad`, its
/// softmax gradient times `scale` into `grad` (else `grad` is not written).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn lm_head_loss_rows_kernel<F: Float, I: Int>(
    logits: &Tensor<F>,
    targets: &Tensor<I>,
    row_loss: &mut Tensor<f32>,
    grad: &mut Tensor<F>,
    rows: usize,
    vocab: usize,
    scale: f32,
    #[comptime] with_grad: bool,
) {
    let (row, active) = cube_row(rows);
    if !active {
        terminate!();
    }
    let base = row * vocab;
    let first = UNIT_POS_X as usize;
    let (row_max, total) = cube_softmax_stats(logits, base, vocab, LOSS_ROW_UNITS);
    let target = usize::cast_from(targets[row]);
    if first == 0 {
        row_loss[row] = row_max + total.ln() - f32::cast_from(logits[base + target]);
    }
    if with_grad {
        let per_exp = scale / total;
        let mut i = first;
        while i < vocab {
            let mut g = (f32::cast_from(logits[base + i]) - row_max).exp() * per_exp;
            if i == target {
                g -= scale;
            }
            grad[base + i] = F::cast_from(g);
            i += LOSS_ROW_UNITS;
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
    lm_head_loss_rows_kernel::launch_unchecked::<F, I, R>(
        client,
        row_cubes(rows),
        CubeDim::new_1d(LOSS_ROW_UNITS as u32),
        logits,
        targets,
        row_loss,
        grad,
        rows,
        vocab,
        scale,
        with_grad,
    );
}
