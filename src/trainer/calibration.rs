//! How measurements move the scale and the confidence.
//!
//! Pure functions of numbers, so the rules are stated (and tested) in one place:
//!
//! - **Confidence** is a running blend of measured cosines: `c ← ½·c + ½·max(cos, 0)`.
//!   Anti-aligned predictions count as zero, not as negative evidence twice.
//! - **Scale.** The multiplier that makes `s·lr·m` closest (least squares) to the real
//!   update `Δ` is `s* = cos · ‖Δ‖ / ‖lr·m‖`. One noisy step should not set the scale, so
//!   it moves half way there in log space, `s ← √(s·s*)`; a non-positive `s*` (the
//!   prediction pointed the wrong way) halves it instead. Always within
//!   `[min_scale, max_scale]`.
//! - **Rollback** halves both the confidence and the scale (not below `min_scale`).

use super::config::HybridConfig;
use super::params::Alignment;

/// The confidence after a measurement with this cosine.
pub fn blended_confidence(confidence: f64, cosine: f64) -> f64 {
    let evidence = if cosine.is_finite() {
        cosine.max(0.0)
    } else {
        0.0
    };
    (0.5 * confidence + 0.5 * evidence).clamp(0.0, 1.0)
}

/// The scale after comparing the real update with the applied prediction.
///
/// `alignment.norm_ratio` is `‖Δ‖ / ‖scale·lr·m‖`, the ratio to what was (or would have
/// been) applied.
pub fn calibrated_scale(scale: f64, alignment: Alignment, config: &HybridConfig) -> f64 {
    let optimal = scale * alignment.cosine * alignment.norm_ratio;
    let next = if optimal.is_finite() && optimal > 0.0 {
        (scale * optimal).sqrt()
    } else {
        scale * 0.5
    };
    next.clamp(config.min_scale, config.max_scale)
}

/// The confidence and scale after a rollback.
pub fn after_rollback(confidence: f64, scale: f64, config: &HybridConfig) -> (f64, f64) {
    (
        confidence * 0.5,
        (scale * 0.5).clamp(config.min_scale, config.max_scale),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> HybridConfig {
        HybridConfig::default()
            .with_min_scale(0.1)
            .with_max_scale(2.0)
    }

    #[test]
    fn confidence_blends_towards_the_cosine() {
        assert_eq!(blended_confidence(0.5, 1.0), 0.75);
        assert_eq!(blended_confidence(0.5, -0.8), 0.25);
        assert_eq!(blended_confidence(0.5, f64::NAN), 0.25);
    }

    #[test]
    fn a_perfect_prediction_keeps_the_scale() {
        let scale = calibrated_scale(
            1.0,
            Alignment {
                cosine: 1.0,
                norm_ratio: 1.0,
            },
            &config(),
        );
        assert!((scale - 1.0).abs() < 1e-12);
    }

    #[test]
    fn the_scale_moves_half_way_in_log_space() {
        // The real update was four times what was applied: s* = 4, s ← √(1·4) = 2.
        let scale = calibrated_scale(
            1.0,
            Alignment {
                cosine: 1.0,
                norm_ratio: 4.0,
            },
            &config(),
        );
        assert!((scale - 2.0).abs() < 1e-12);
        // A quarter: s* = 0.25, s ← 0.5.
        let scale = calibrated_scale(
            1.0,
            Alignment {
                cosine: 1.0,
                norm_ratio: 0.25,
            },
            &config(),
        );
        assert!((scale - 0.5).abs() < 1e-12);
    }

    #[test]
    fn a_wrong_direction_halves_the_scale_within_bounds() {
        let config = config();
        assert_eq!(
            calibrated_scale(
                1.0,
                Alignment {
                    cosine: -0.5,
                    norm_ratio: 1.0
                },
                &config
            ),
            0.5
        );
        assert_eq!(
            calibrated_scale(
                0.15,
                Alignment {
                    cosine: 0.0,
                    norm_ratio: 1.0
                },
                &config
            ),
            0.1
        );
        assert_eq!(
            calibrated_scale(
                1.9,
                Alignment {
                    cosine: 1.0,
                    norm_ratio: 100.0
                },
                &config
            ),
            2.0
        );
    }

    #[test]
    fn rollback_halves_both() {
        assert_eq!(after_rollback(0.6, 1.0, &config()), (0.3, 0.5));
        assert_eq!(after_rollback(0.6, 0.15, &config()), (0.3, 0.1));
    }
}
