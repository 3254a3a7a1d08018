//! AdamW's update of one parameter tensor (`burn-optim`'s `AdamW` numerics, the gradient
//! first multiplied by the clipping's factor) and clipping's factor over many gradients,
//! in f64: the definitions the optimizer's kernels are tested against.

/// The hyperparameters and step of one update.
#[derive(Clone, Copy, Debug)]
pub struct AdamWSettings {
    /// β₁.
    pub beta_1: f64,
    /// β₂.
    pub beta_2: f64,
    /// ε.
    pub epsilon: f64,
    /// The learning rate.
    pub lr: f64,
    /// Decoupled weight decay (the weights shrink by `lr · weight_decay` each step).
    pub weight_decay: f64,
    /// The step, from 1.
    pub time: i32,
    /// The factor the gradient is multiplied by first (clipping's; 1 for none).
    pub scale: f64,
}

/// The updated parameter and moments, `(p', m', v')`, given the parameter, its gradient and
/// the moments before the step (zeros before the first).
pub fn adamw(settings: AdamWSettings, param: &[f32], grad: &[f32], m: &[f32], v: &[f32]) -> [Vec<f32>; 3] {
    let AdamWSettings { beta_1, beta_2, epsilon, lr, weight_decay, time, scale } = settings;
    let (c1, c2) = (1.0 - beta_1.powi(time), 1.0 - beta_2.powi(time));
    let mut out = [Vec::with_capacity(param.len()), Vec::with_capacity(param.len()), Vec::with_capacity(param.len())];
    for i in 0..param.len() {
        let g = f64::from(grad[i]) * scale;
        let m = beta_1 * f64::from(m[i]) + (1.0 - beta_1) * g;
        let v = beta_2 * f64::from(v[i]) + (1.0 - beta_2) * g * g;
        let p = f64::from(param[i]) * (1.0 - lr * weight_decay) - lr * (m / c1) / ((v / c2).sqrt() + epsilon);
        out[0].push(p as f32);
        out[1].push(m as f32);
        out[2].push(v as f32);
    }
    out
}

/// PyTorch's `clip_grad_norm_` factor over `grads`: `min(1, max_norm / (‖g‖₂ + 1e-6))`.
pub fn clip_factor(grads: &[&[f32]], max_norm: f64) -> f64 {
    let squares: f64 = grads.iter().flat_map(|g| g.iter()).map(|&x| f64::from(x) * f64::from(x)).sum();
    (max_norm / (squares.sqrt() + 1e-6)).min(1.0)
}
