//! The sums of a matrix's columns, in f64.

/// `sums[c] = Σ_r input[r · columns + c]` over `input`'s rows of `columns` values.
pub fn column_sums(input: &[f32], columns: usize) -> Vec<f64> {
    let mut sums = vec![0.0; columns];
    for row in input.chunks(columns.max(1)) {
        for (sum, &value) in sums.iter_mut().zip(row) {
            *sum += f64::from(value);
        }
    }
    sums
}
