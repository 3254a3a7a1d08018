/// `residual + product + bias` (`bias` added to every row of its length, where given), in
/// f64: what the residual add after a linear layer computes.
pub fn residual_add(product: &[f32], bias: Option<&[f32]>, residual: &[f32]) -> Vec<f64> {
    assert_eq!(product.len(), residual.len(), "a residual for every element");
    let bias_at = |i: usize| bias.map_or(0.0, |bias| f64::from(bias[i % bias.len()]));
    (0..product.len()).map(|i| f64::from(residual[i]) + f64::from(product[i]) + bias_at(i)).collect()
}
