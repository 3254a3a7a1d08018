//! [`AttentionOps`]' block softmax on Burn's CPU backend (`Flex`): each row of a block's
//! scores in one pass, rows in parallel: forward, the row's scores scaled (the softmax's
//! `1/√head_dim`) as they are copied, their maximum, the shifted exponentials written and
//! summed, then normalized into the probabilities; backward, each row's `Δ` from its
//! output and output gradient, then each score's probability and (unscaled) gradient from
//! the row's log-sum-exp and `Δ`. The composed ops
//! make a new score-sized tensor per step (the mask, the exponentials, the division; the
//! backward's difference and products). f32 scores in contiguous memory only: others take
//! the composed path. The fused kernels stay CubeCL's: on Flex every attention runs in
//! blocks.

use burn::backend::Flex;
use burn::tensor::TensorData;
use burn_backend::tensor::FloatTensor;
use burn_backend::{DType, TensorMetadata};
use burn_flex::FlexTensor;
use rayon::prelude::*;

use super::{blocked, flex_heads, packed, AttentionOps};
use crate::backend::cpu_rows::{exp, exp_shifted_in_place, row_max};

impl AttentionOps for Flex {
    fn lean_heads_to_rows(parts: Vec<FloatTensor<Self>>, layout: [usize; 3]) -> FloatTensor<Self> {
        flex_heads::heads_into_rows(&parts).unwrap_or_else(|| packed::rows_of_heads::<Self>(parts, layout))
    }

    fn lean_rows_to_heads(rows: FloatTensor<Self>, layout: [usize; 3]) -> FloatTensor<Self> {
        flex_heads::rows_into_heads(&rows, layout).unwrap_or_else(|| packed::rows_to_heads::<Self>(rows, layout))
    }

    fn lean_attention_block_softmax(
        scores: FloatTensor<Self>,
        diagonal: Option<usize>,
        scale: f32,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let Some(block) = ScoreBlock::read(&scores, diagonal) else {
            return blocked::composed_softmax::<Self>(scores, diagonal, scale);
        };
        let values = scores.as_slice::<f32>().expect("checked by ScoreBlock::read");
        let mut probabilities = vec![0.0f32; values.len()];
        let mut lse = vec![0.0f32; block.score_rows()];
        let pass = softmax_pass();
        probabilities.par_chunks_mut(block.keys).zip(lse.par_iter_mut()).enumerate().for_each(|(r, (row, lse))| {
            let seen = block.seen(r);
            *lse = pass(&values[r * block.keys..][..seen], &mut row[..seen], scale);
        });
        (block.scores_tensor(probabilities), FlexTensor::from_data(TensorData::new(lse, block.stat_shape())))
    }

    fn lean_attention_block_softmax_grad(
        scores: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        outputs: [FloatTensor<Self>; 2],
        grad_probabilities: FloatTensor<Self>,
        diagonal: Option<usize>,
        scale: f32,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let read = || {
            let block = ScoreBlock::read(&scores, diagonal)?;
            let grad = grad_probabilities.as_slice::<f32>().filter(|g| g.len() == block.scores())?;
            Some((block, grad, block.statistic(&lse)?, block.row_deltas(&outputs)?))
        };
        let Some((block, grad, row_lse, row_delta)) = read() else {
            return blocked::composed_softmax_grad::<Self>(scores, lse, outputs, grad_probabilities, diagonal, scale);
        };
        let values = scores.as_slice::<f32>().expect("checked by ScoreBlock::read");
        let (mut probabilities, mut grad_scores) = (vec![0.0f32; values.len()], vec![0.0f32; values.len()]);
        let pass = softmax_grad_pass();
        let rows = probabilities.par_chunks_mut(block.keys).zip(grad_scores.par_chunks_mut(block.keys));
        rows.enumerate().for_each(|(r, (p, ds))| {
            let (seen, start) = (block.seen(r), r * block.keys);
            let stats = RowStats { lse: row_lse[r], delta: row_delta[r], scale };
            pass(&values[start..][..seen], &grad[start..][..seen], stats, &mut p[..seen], &mut ds[..seen]);
        });
        (block.scores_tensor(probabilities), block.scores_tensor(grad_scores))
    }
}

/// A block's `[batch, heads, rows, keys]` scores and its diagonal.
#[derive(Clone, Copy)]
struct ScoreBlock {
    dims: [usize; 4],
    keys: usize,
    diagonal: Option<usize>,
}

impl ScoreBlock {
    /// `None` where the one-pass rows do not apply (type, layout, an empty block).
    fn read(scores: &FlexTensor, diagonal: Option<usize>) -> Option<Self> {
        let shape = scores.shape();
        if shape.num_dims() != 4 || scores.dtype() != DType::F32 {
            return None;
        }
        let dims = shape.dims::<4>();
        let block = Self { dims, keys: dims[3], diagonal };
        let contiguous = scores.as_slice::<f32>().is_some_and(|values| values.len() == block.scores());
        (contiguous && block.scores() > 0).then_some(block)
    }

    fn scores(&self) -> usize {
        self.dims.iter().product()
    }

    fn score_rows(&self) -> usize {
        self.scores() / self.keys
    }

    /// The keys score row `r` sees.
    fn seen(&self, r: usize) -> usize {
        self.diagonal.map_or(self.keys, |diagonal| (r % self.dims[2] + diagonal + 1).min(self.keys))
    }

    fn stat_shape(&self) -> [usize; 4] {
        let [batch, heads, rows, _] = self.dims;
        [batch, heads, rows, 1]
    }

    /// A row statistic (`[batch, heads, rows, 1]` f32, any layout: a block's rows of the
    /// sequence's) in score-row order.
    fn statistic(&self, stat: &FlexTensor) -> Option<Vec<f32>> {
        let fits = stat.dtype() == DType::F32 && stat.shape().dims::<4>() == self.stat_shape();
        fits.then(|| stat.clone().into_data().to_vec::<f32>().ok()).flatten()
    }

    /// Each score row's `Δ = Σ dO ∘ O` from the block's rows of the output and its
    /// gradient (`[batch, heads, rows, head_dim]` f32, any layout), in score-row order.
    fn row_deltas(&self, [output, grad_output]: &[FlexTensor; 2]) -> Option<Vec<f32>> {
        let [batch, heads, rows, _] = self.dims;
        let fits = |t: &FlexTensor| t.dtype() == DType::F32 && t.shape().dims::<4>()[..3] == [batch, heads, rows];
        if !(fits(output) && fits(grad_output) && output.shape() == grad_output.shape()) {
            return None;
        }
        let head_dim = output.shape().dims::<4>()[3];
        let values = |t: &FlexTensor| t.clone().into_data().to_vec::<f32>().ok();
        let (output, grad_output) = (values(output)?, values(grad_output)?);
        if head_dim == 0 {
            return Some(vec![0.0; self.score_rows()]);
        }
        let rows = output.par_chunks(head_dim).zip(grad_output.par_chunks(head_dim));
        Some(rows.map(|(o, g)| o.iter().zip(g).map(|(o, g)| o * g).sum::<f32>()).collect())
    }

    fn scores_tensor(&self, values: Vec<f32>) -> FlexTensor {
        FlexTensor::from_data(TensorData::new(values, self.dims))
    }
}

/// One row's softmax of its scores times the scale over the keys it sees, written into
/// `out`; returns its log-sum-exp.
type SoftmaxPass = fn(&[f32], &mut [f32], f32) -> f32;

/// One row's probabilities and unscaled score gradients.
type SoftmaxGradPass = fn(&[f32], &[f32], RowStats, &mut [f32], &mut [f32]);

/// What the backward's row pass needs besides the row: its log-sum-exp, its `Δ` and the
/// softmax's scale.
#[derive(Clone, Copy)]
struct RowStats {
    lse: f32,
    delta: f32,
    scale: f32,
}

#[inline(always)]
fn softmax_row(scores: &[f32], out: &mut [f32], scale: f32) -> f32 {
    for (out, &score) in out.iter_mut().zip(scores) {
        *out = score * scale;
    }
    let max = row_max(out);
    let sum = exp_shifted_in_place(out, max);
    let normalize = (1.0 / sum) as f32;
    for value in out.iter_mut() {
        *value *= normalize;
    }
    max + sum.ln() as f32
}

#[inline(always)]
fn softmax_grad_row(scores: &[f32], grad: &[f32], stats: RowStats, p: &mut [f32], ds: &mut [f32]) {
    let RowStats { lse, delta, scale } = stats;
    for (((&s, &g), p), ds) in scores.iter().zip(grad).zip(p.iter_mut()).zip(ds.iter_mut()) {
        *p = exp(s * scale - lse);
        *ds = scale * *p * (g - delta);
    }
}

/// [`softmax_row`] in the widest vector instructions this CPU has.
fn softmax_pass() -> SoftmaxPass {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F.
            return |scores, out, scale| unsafe { softmax_row_avx512(scores, out, scale) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA.
            return |scores, out, scale| unsafe { softmax_row_avx2(scores, out, scale) };
        }
    }
    softmax_row
}

/// [`softmax_grad_row`] in the widest vector instructions this CPU has.
fn softmax_grad_pass() -> SoftmaxGradPass {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F.
            return |scores, grad, stats, p, ds| unsafe { softmax_grad_row_avx512(scores, grad, stats, p, ds) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA.
            return |scores, grad, stats, p, ds| unsafe { softmax_grad_row_avx2(scores, grad, stats, p, ds) };
        }
    }
    softmax_grad_row
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn softmax_row_avx512(scores: &[f32], out: &mut [f32], scale: f32) -> f32 {
    softmax_row(scores, out, scale)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn softmax_row_avx2(scores: &[f32], out: &mut [f32], scale: f32) -> f32 {
    softmax_row(scores, out, scale)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn softmax_grad_row_avx512(scores: &[f32], grad: &[f32], stats: RowStats, p: &mut [f32], ds: &mut [f32]) {
    softmax_grad_row(scores, grad, stats, p, ds)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn softmax_grad_row_avx2(scores: &[f32], grad: &[f32], stats: RowStats, p: &mut [f32], ds: &mut [f32]) {
    softmax_grad_row(scores, grad, stats, p, ds)
}
