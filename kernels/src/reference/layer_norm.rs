//! LayerNorm over the last dimension, forward and backward, in f64: the definitions the
//! LayerNorm kernels are tested against.

/// `(y, mean, rstd)` of `rows` rows of `d` elements: `y = (x − μ)/√(σ² + ε)·γ + β`.
pub fn layer_norm(
    x: &[f32],
    gamma: &[f32],
    beta: Option<&[f32]>,
    d: usize,
    epsilon: f64,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let rows = x.len() / d;
    let (mut y, mut means, mut rstds) = (Vec::with_capacity(x.len()), Vec::new(), Vec::new());
    for row in x.chunks(d).take(rows) {
        let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / d as f64;
        let var = row.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / d as f64;
        let rstd = 1.0 / (var + epsilon).sqrt();
        for (i, &v) in row.iter().enumerate() {
            let shift = beta.map_or(0.0, |b| f64::from(b[i]));
            y.push(((f64::from(v) - mean) * rstd * f64::from(gamma[i]) + shift) as f32);
        }
        means.push(mean as f32);
        rstds.push(rstd as f32);
    }
    (y, means, rstds)
}

/// `(dx, dgamma, dbeta)` given the output's gradient `dy`, by the chain rule through the
/// row statistics (recomputed here in f64).
pub fn layer_norm_backward(
    x: &[f32],
    gamma: &[f32],
    dy: &[f32],
    d: usize,
    epsilon: f64,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let mut dx = Vec::with_capacity(x.len());
    let (mut dgamma, mut dbeta) = (vec![0.0f64; d], vec![0.0f64; d]);
    for (row, grad) in x.chunks(d).zip(dy.chunks(d)) {
        let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / d as f64;
        let var = row.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / d as f64;
        let rstd = 1.0 / (var + epsilon).sqrt();
        let x_hat: Vec<f64> = row.iter().map(|&v| (f64::from(v) - mean) * rstd).collect();
        let g: Vec<f64> = grad.iter().zip(gamma).map(|(&dy, &gm)| f64::from(dy) * f64::from(gm)).collect();
        let mean_g = g.iter().sum::<f64>() / d as f64;
        let mean_gx = g.iter().zip(&x_hat).map(|(g, x)| g * x).sum::<f64>() / d as f64;
        for i in 0..d {
            dx.push((rstd * (g[i] - mean_g - x_hat[i] * mean_gx)) as f32);
            dgamma[i] += f64::from(grad[i]) * x_hat[i];
            dbeta[i] += f64::from(grad[i]);
        }
    }
    (dx, dgamma.into_iter().map(|v| v as f32).collect(), dbeta.into_iter().map(|v| v as f32).collect())
}
