//! Row passes over f32 slices for the CPU backend's one-pass ops (the LM head's loss rows,
//! attention's block softmax): a row's maximum and its shifted exponentials in partial sums
//! the compiler vectorises, and an `exp` that vectorises (Flex's is a scalar call per
//! element). Callers run them inside `#[target_feature]` functions so that the inlined
//! loops take the CPU's widest vectors.

/// Lanes of the partial maxima and sums (one AVX-512 register of f32).
const LANES: usize = 16;
/// Elements whose exponentials are summed in f32 before the sum joins the f64 total.
const BLOCK: usize = 2048;

/// The largest value of `row` (−∞ for an empty one).
#[inline(always)]
pub(crate) fn row_max(row: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut parts = row.chunks_exact(LANES);
    for part in &mut parts {
        for (max, &value) in lanes.iter_mut().zip(part) {
            *max = if value > *max { value } else { *max };
        }
    }
    parts.remainder().iter().chain(&lanes).fold(f32::NEG_INFINITY, |max, &value| if value > max { value } else { max })
}

/// `row[i] = exp(row[i] − max)`; returns their sum (in f32 within blocks, f64 across).
#[inline(always)]
pub(crate) fn exp_shifted_in_place(row: &mut [f32], max: f32) -> f64 {
    let mut total = 0.0f64;
    for block in row.chunks_mut(BLOCK) {
        let mut lanes = [0.0f32; LANES];
        let mut parts = block.chunks_exact_mut(LANES);
        for part in &mut parts {
            for (sum, value) in lanes.iter_mut().zip(part.iter_mut()) {
                *value = exp(*value - max);
                *sum += *value;
            }
        }
        let mut sum = lanes.iter().sum::<f32>();
        for value in parts.into_remainder() {
            *value = exp(*value - max);
            sum += *value;
        }
        total += f64::from(sum);
    }
    total
}

/// `eˣ` for `x ≤ 88` (Cephes' `expf`: `x = n·ln 2 + r`, `|r| ≤ ln 2 / 2`, a degree-7
/// polynomial in `r`, times `2ⁿ`); below −87 it returns e⁻⁸⁷ (≈ 1.6e−38) where the true value
/// is smaller still, which no sum of exponentials here can tell from 0.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5 · 2²³: adding it rounds to an integer, kept in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let shifted = x * std::f32::consts::LOG2_E + ROUND;
    let n = shifted - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r + 1.666_666_5e-1)
        * r
        + 0.5;
    let y = p * r * r + r + 1.0;
    let exponent = (shifted.to_bits() as i32 - ROUND.to_bits() as i32 + 127) << 23;
    y * f32::from_bits(exponent as u32)
}

#[cfg(test)]
mod tests {
    use super::exp;

    #[test]
    fn exp_is_within_a_few_ulp_of_f64s() {
        // The logits' range: shifted by their row maximum, so at most 0.
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x <= 10.0 {
            let expected = f64::from(x).exp();
            worst = worst.max((f64::from(exp(x)) - expected).abs() / expected);
            x += 0.001_37;
        }
        assert!(worst < 3e-7, "worst relative error {worst:.2e}");
        // Control: f32's own rounding of the true value is already about 6e-8 off at worst,
        // so the bound is a few ulp, not a loose one.
        assert!(worst > 0.0);
        assert_eq!(exp(-200.0), exp(-87.0));
        assert!(exp(-87.0) > 0.0 && exp(-87.0) < 1e-37);
    }
}
