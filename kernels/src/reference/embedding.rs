//! The gradient of an embedding table, in f64.

/// `grad[r] = Σ_{n : ids[n] = r} output_grad[n]` for a `[rows, width]` table looked up at
/// `ids` (one per token) with `output_grad` `[tokens, width]` (row-major); ids outside the
/// table add nothing.
pub fn embedding_grad(output_grad: &[f32], ids: &[i64], rows: usize, width: usize) -> Vec<f64> {
    let mut grad = vec![0.0; rows * width];
    for (&id, token) in ids.iter().zip(output_grad.chunks(width)) {
        let Some(row) = usize::try_from(id).ok().filter(|&row| row < rows) else { continue };
        for (sum, &value) in grad[row * width..(row + 1) * width].iter_mut().zip(token) {
            *sum += f64::from(value);
        }
    }
    grad
}
