//! [`LmHeadLossOps`] on Burn's CPU backend (`Flex`). Per chunk of tokens: the logits GEMM
//! into one buffer (allocated once per call), then one pass per row (its maximum, then its
//! exponentials, their sum and the target's negative log-likelihood, then the scale to
//! `(softmax − onehot) / n`, written over the logits), then the two gradient GEMMs reading
//! that buffer, the hidden states' into their rows of the result and the weight's added in
//! place. The composed path makes about eight passes over each block of logits, every op
//! a new tensor (a fresh 100 MB allocation, page faults included, at gpt2-mini's 512 × 50,257),
//! and Flex's `exp` is a scalar call per element; here the exponential is a polynomial the
//! compiler vectorises (Cephes' `expf`, within 2 ulp of it on the logits' range).
//!
//! f32 inputs in contiguous memory only: others take the composed path.

use core::mem::MaybeUninit;

use burn::backend::Flex;
use burn::tensor::TensorData;
use burn_backend::tensor::{FloatTensor, IntTensor};
use burn_backend::{DType, TensorMetadata};
use burn_flex::FlexTensor;
use rayon::prelude::*;

use super::{chunks, composed, composed_token_losses, LmHeadLossOps};
use crate::backend::cpu_rows::{exp_shifted_in_place, row_max};

impl LmHeadLossOps for Flex {
    fn lm_head_loss_grads(
        hidden: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        targets: IntTensor<Self>,
        chunk: usize,
    ) -> [FloatTensor<Self>; 3] {
        assert!(chunk > 0, "loss chunk must be at least 1 token");
        let Some(problem) = Problem::read(&hidden, &weight, &targets) else {
            return composed::<Self>(hidden, weight, targets, chunk);
        };
        let (loss, grad_hidden, grad_weight) = problem.solve(chunk);
        let (tokens, vocab, d) = (problem.tokens, problem.vocab, problem.d);
        [
            TensorData::new(vec![loss], [1]),
            TensorData::new(grad_hidden, [tokens, d]),
            TensorData::new(grad_weight, [vocab, d]),
        ]
        .map(FlexTensor::from_data)
    }

    fn lm_head_token_losses(
        hidden: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        targets: IntTensor<Self>,
        chunk: usize,
    ) -> FloatTensor<Self> {
        assert!(chunk > 0, "loss chunk must be at least 1 token");
        let Some(problem) = Problem::read(&hidden, &weight, &targets) else {
            return composed_token_losses::<Self>(hidden, weight, targets, chunk);
        };
        FlexTensor::from_data(TensorData::new(problem.token_losses(chunk), [problem.tokens]))
    }
}

/// The op's inputs as host slices.
struct Problem<'a> {
    hidden: &'a [f32],
    weight: &'a [f32],
    targets: Vec<usize>,
    tokens: usize,
    vocab: usize,
    d: usize,
}

impl<'a> Problem<'a> {
    /// `None` where the fast path does not apply (types, layouts, shapes); the composed
    /// path then runs, with Burn's own checks.
    fn read(hidden: &'a FlexTensor, weight: &'a FlexTensor, targets: &FlexTensor) -> Option<Self> {
        let (h_shape, w_shape, t_shape) = (hidden.shape(), weight.shape(), targets.shape());
        if h_shape.num_dims() != 2 || w_shape.num_dims() != 2 || t_shape.num_dims() != 1 {
            return None;
        }
        let (tokens, d, vocab) = (h_shape[0], h_shape[1], w_shape[0]);
        if w_shape[1] != d || t_shape[0] != tokens || tokens == 0 || vocab == 0 {
            return None;
        }
        let hidden = hidden.as_slice::<f32>().filter(|slice| slice.len() == tokens * d)?;
        let weight = weight.as_slice::<f32>().filter(|slice| slice.len() == vocab * d)?;
        let ids: Vec<i64> = match targets.dtype() {
            DType::I64 => targets.as_slice::<i64>()?.to_vec(),
            DType::I32 => targets.as_slice::<i32>()?.iter().map(|&id| i64::from(id)).collect(),
            _ => return None,
        };
        let targets = ids
            .into_iter()
            .map(|id| {
                let valid = usize::try_from(id).ok().filter(|&id| id < vocab);
                valid.unwrap_or_else(|| panic!("target id {id} is outside the vocabulary of {vocab}"))
            })
            .collect();
        Some(Self { hidden, weight, targets, tokens, vocab, d })
    }

    /// `(loss, grad_hidden, grad_weight)`, the gradients row-major.
    fn solve(&self, chunk: usize) -> (f32, Vec<f32>, Vec<f32>) {
        let (tokens, vocab, d) = (self.tokens, self.vocab, self.d);
        let scale = 1.0 / tokens as f32;
        let pass = row_pass();
        let mut logits = unwritten(chunk.min(tokens) * vocab);
        let mut grad_hidden = unwritten(tokens * d);
        let mut grad_weight = unwritten(vocab * d);
        let mut nll = 0.0f64;
        for (start, len) in chunks(tokens, chunk) {
            let hidden = &self.hidden[start * d..(start + len) * d];
            // z = h · Wᵀ: [len, d] · [d, vocab].
            let block = &mut logits[..len * vocab];
            gemm(Out::overwrite(block, len, vocab), In::row_major(hidden, d), In::transposed(self.weight, d), d);
            // SAFETY: the GEMM wrote every element of the block.
            let block = unsafe { written(block) };
            let targets = &self.targets[start..start + len];
            nll += block
                .par_chunks_mut(vocab)
                .zip(targets.par_iter())
                .map(|(row, &target)| pass(row, target, Some(scale)))
                .sum::<f64>();
            // ∂L/∂h = G · W: [len, vocab] · [vocab, d], into the chunk's rows.
            let rows = &mut grad_hidden[start * d..(start + len) * d];
            gemm(Out::overwrite(rows, len, d), In::row_major(block, vocab), In::row_major(self.weight, d), vocab);
            // ∂L/∂W += Gᵀ · h: [vocab, len] · [len, d]; the first chunk's overwrites.
            let out = Out { data: &mut grad_weight, rows: vocab, cols: d, accumulate: start > 0 };
            gemm(out, In::transposed(block, vocab), In::row_major(hidden, d), len);
        }
        // SAFETY: the chunks cover every token, and each chunk's GEMM wrote its rows of
        // `grad_hidden`; the first chunk's (`tokens` > 0) wrote all of `grad_weight`.
        let (grad_hidden, grad_weight) = unsafe { (grad_hidden.assume_init(), grad_weight.assume_init()) };
        ((nll / tokens as f64) as f32, grad_hidden.into_vec(), grad_weight.into_vec())
    }
}

impl Problem<'_> {
    /// Each token's cross-entropy, forward only.
    fn token_losses(&self, chunk: usize) -> Vec<f32> {
        let (tokens, vocab, d) = (self.tokens, self.vocab, self.d);
        let pass = row_pass();
        let mut logits = unwritten(chunk.min(tokens) * vocab);
        let mut losses = vec![0.0f32; tokens];
        for (start, len) in chunks(tokens, chunk) {
            let block = &mut logits[..len * vocab];
            let hidden = In::row_major(&self.hidden[start * d..(start + len) * d], d);
            gemm(Out::overwrite(block, len, vocab), hidden, In::transposed(self.weight, d), d);
            // SAFETY: the GEMM wrote every element of the block.
            let block = unsafe { written(block) };
            block
                .par_chunks_mut(vocab)
                .zip(self.targets[start..start + len].par_iter())
                .zip(losses[start..start + len].par_iter_mut())
                .for_each(|((row, &target), loss)| *loss = pass(row, target, None) as f32);
        }
        losses
    }
}

/// A buffer of `len` floats left as the allocator gives it: each is written by a GEMM that
/// overwrites its output ([`Out::overwrite`]) before anything reads it. Zeroing the logits'
/// buffer first cost about 4% of the CPU main job's step (gpt2-mini, 512 × 50,304 floats).
fn unwritten(len: usize) -> Box<[MaybeUninit<f32>]> {
    Box::new_uninit_slice(len)
}

/// `buffer` as floats.
///
/// # Safety
/// Every element of `buffer` has been written.
unsafe fn written(buffer: &mut [MaybeUninit<f32>]) -> &mut [f32] {
    // SAFETY: `MaybeUninit<f32>` has `f32`'s layout, and the caller says each is initialised.
    unsafe { &mut *(buffer as *mut [MaybeUninit<f32>] as *mut [f32]) }
}

/// A GEMM's row-major output.
struct Out<'a> {
    /// Written through a pointer; read only where `accumulate` (then it must be initialised).
    data: &'a mut [MaybeUninit<f32>],
    rows: usize,
    cols: usize,
    /// Add to what `data` holds (else overwrite it).
    accumulate: bool,
}

impl<'a> Out<'a> {
    /// A `rows × cols` output the GEMM overwrites, initialised or not.
    fn overwrite(data: &'a mut [MaybeUninit<f32>], rows: usize, cols: usize) -> Self {
        Self { data, rows, cols, accumulate: false }
    }
}

/// A GEMM operand: `data` read with these strides (in elements).
struct In<'a> {
    data: &'a [f32],
    row_stride: usize,
    col_stride: usize,
}

impl<'a> In<'a> {
    /// A row-major matrix with `cols` columns.
    fn row_major(data: &'a [f32], cols: usize) -> Self {
        Self { data, row_stride: cols, col_stride: 1 }
    }

    /// The transpose of a row-major matrix with `cols` columns.
    fn transposed(data: &'a [f32], cols: usize) -> Self {
        Self { data, row_stride: 1, col_stride: cols }
    }

    /// Whether a `rows × cols` matrix read this way stays within `data`.
    fn fits(&self, rows: usize, cols: usize) -> bool {
        rows == 0 || cols == 0 || (rows - 1) * self.row_stride + (cols - 1) * self.col_stride < self.data.len()
    }
}

/// `out = [out +] lhs · rhs`, `lhs` `[out.rows, k]`, `rhs` `[k, out.cols]`, with the `gemm`
/// crate Flex's own matmul calls (on all threads above Flex's threshold).
fn gemm(out: Out<'_>, lhs: In<'_>, rhs: In<'_>, k: usize) {
    let (m, n) = (out.rows, out.cols);
    assert!(out.data.len() >= m * n && lhs.fits(m, k) && rhs.fits(k, n), "gemm operands out of bounds");
    let parallelism = if m * n * k >= PARALLEL_OPS { gemm::Parallelism::Rayon(0) } else { gemm::Parallelism::None };
    let alpha = if out.accumulate { 1.0 } else { 0.0 };
    // SAFETY: the assertion above keeps every element the strides reach within its slice;
    // `out` is borrowed mutably, so nothing else reads or writes it meanwhile, and the GEMM
    // reads it only where `accumulate` says it holds values.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.data.as_mut_ptr().cast::<f32>(),
            1,
            n as isize,
            out.accumulate,
            lhs.data.as_ptr(),
            lhs.col_stride as isize,
            lhs.row_stride as isize,
            rhs.data.as_ptr(),
            rhs.col_stride as isize,
            rhs.row_stride as isize,
            alpha,
            1.0f32,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// Flex's threshold (`m · n · k`) for running a GEMM on all threads.
const PARALLEL_OPS: usize = 192 * 192 * 192;

/// One row of logits to its gradient scaled by the given factor (none: the row is left as
/// scratch); returns the row's negative log-likelihood.
type RowPass = fn(&mut [f32], usize, Option<f32>) -> f64;

/// The widest vector instructions this CPU has for [`softmax_gradient_row`].
fn row_pass() -> RowPass {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F.
            return |row, target, scale| unsafe { row_avx512(row, target, scale) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA.
            return |row, target, scale| unsafe { row_avx2(row, target, scale) };
        }
    }
    softmax_gradient_row
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn row_avx512(row: &mut [f32], target: usize, scale: Option<f32>) -> f64 {
    softmax_gradient_row(row, target, scale)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn row_avx2(row: &mut [f32], target: usize, scale: Option<f32>) -> f64 {
    softmax_gradient_row(row, target, scale)
}

/// Returns `log Σ exp(z − max) − (z_target − max)`, the cross-entropy of the row of logits
/// `z`; with a `scale`, `row` becomes `scale · (softmax(z) − onehot(target))`.
#[inline(always)]
fn softmax_gradient_row(row: &mut [f32], target: usize, scale: Option<f32>) -> f64 {
    let max = row_max(row);
    let picked = row[target] - max;
    let sum = exp_shifted_in_place(row, max);
    if let Some(scale) = scale {
        let factor = (f64::from(scale) / sum) as f32;
        for value in row.iter_mut() {
            *value *= factor;
        }
        row[target] -= scale;
    }
    sum.ln() - f64::from(picked)
}
