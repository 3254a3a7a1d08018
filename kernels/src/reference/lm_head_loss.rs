//! The LM head's cross-entropy per row of logits, and its softmax gradient, in f64.

/// Each row's `log Σ exp(z) − z_t` and `(softmax(z) − onehot(t)) · scale`, for `logits`
/// `[rows, vocab]` (row-major) and one target per row.
pub fn lm_head_loss_rows(logits: &[f32], targets: &[usize], vocab: usize, scale: f64) -> (Vec<f64>, Vec<f64>) {
    let mut losses = Vec::with_capacity(targets.len());
    let mut grad = Vec::with_capacity(logits.len());
    for (row, &target) in logits.chunks(vocab).zip(targets) {
        let max = row.iter().map(|&z| f64::from(z)).fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = row.iter().map(|&z| (f64::from(z) - max).exp()).sum();
        losses.push(max + sum.ln() - f64::from(row[target]));
        for (j, &z) in row.iter().enumerate() {
            let softmax = (f64::from(z) - max).exp() / sum;
            grad.push((softmax - if j == target { 1.0 } else { 0.0 }) * scale);
        }
    }
    (losses, grad)
}
