//! How a verified block moves the confidence and the scale.
//!
//! Pure functions of numbers, so the rules are stated (and tested) in one place:
//!
//! - **Evidence** of a kept block is its efficiency (verified gain over what its full
//!   steps would have gained), clamped to `[0, 1]` (1 without a known pace); a rejected
//!   block bought nothing and counts 0, however near it came.
//! - **Confidence** is a running blend of evidence, `c ← ½·c + ½·evidence`; a re-probe
//!   (a block tried while prediction was off) replaces it outright, so one good block
//!   turns prediction back on and one poor one leaves it off.
//! - **Scale** grows by a quarter (up to `max_scale`) after a kept block whose efficiency
//!   reached `hold_efficiency`, and halves (down to `min_scale`) after a rollback. A
//!   re-probe jumps at `initial_scale` again: the rollbacks that turned prediction off
//!   halved the scale, and a jump a tenth as long gains about a tenth as much, so a
//!   re-probe at that scale could never turn prediction back on.

use crate::trainer::config::HybridConfig;
use crate::trainer::predict::guard::BlockVerdict;

/// What a block counts for in the confidence, in `[0, 1]`.
pub fn evidence(verdict: &BlockVerdict) -> f64 {
    if !verdict.keep {
        return 0.0;
    }
    match verdict.efficiency {
        Some(efficiency) if efficiency.is_finite() => efficiency.clamp(0.0, 1.0),
        _ => 1.0,
    }
}

/// The confidence after a verified block; `reprobe` when prediction was off before it.
pub fn confidence_after(confidence: f64, verdict: &BlockVerdict, reprobe: bool) -> f64 {
    let evidence = evidence(verdict);
    if reprobe {
        evidence
    } else {
        (0.5 * confidence + 0.5 * evidence).clamp(0.0, 1.0)
    }
}

/// The scale a block jumps with: its own, or `initial_scale` for a re-probe.
pub fn jump_scale(scale: f64, reprobe: bool, config: &HybridConfig) -> f64 {
    if reprobe {
        config.initial_scale
    } else {
        scale
    }
}

/// The scale after a verified block.
pub fn scale_after(scale: f64, verdict: &BlockVerdict, config: &HybridConfig) -> f64 {
    let next = if !verdict.keep {
        scale * 0.5
    } else if verdict.efficiency.is_some_and(|e| e >= config.hold_efficiency) {
        scale * 1.25
    } else {
        scale
    };
    next.clamp(config.min_scale, config.max_scale)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trainer::predict::guard::RollbackReason;

    fn kept(efficiency: Option<f64>, gain: f64) -> BlockVerdict {
        BlockVerdict { keep: true, gain, efficiency, reason: None }
    }

    fn rolled_back(efficiency: Option<f64>, gain: f64) -> BlockVerdict {
        BlockVerdict {
            keep: false,
            gain,
            efficiency,
            reason: Some(RollbackReason::TooLittleGain { gain, required: 0.0 }),
        }
    }

    #[test]
    fn evidence_is_a_kept_blocks_efficiency_clamped_to_the_unit_interval() {
        assert_eq!(evidence(&kept(Some(0.4), 0.1)), 0.4);
        assert_eq!(evidence(&kept(Some(3.0), 0.1)), 1.0);
        assert_eq!(evidence(&kept(None, 0.1)), 1.0, "kept without a pace");
        assert_eq!(evidence(&rolled_back(Some(-2.0), -0.1)), 0.0);
        assert_eq!(evidence(&rolled_back(Some(0.9), 0.09)), 0.0, "a near miss bought nothing");
        assert_eq!(evidence(&rolled_back(None, -0.1)), 0.0);
        assert_eq!(evidence(&rolled_back(Some(f64::NAN), f64::NAN)), 0.0);
    }

    #[test]
    fn confidence_blends_and_a_reprobe_replaces_it() {
        assert_eq!(confidence_after(0.5, &kept(Some(1.0), 0.1), false), 0.75);
        assert_eq!(confidence_after(0.5, &rolled_back(Some(0.0), 0.0), false), 0.25);
        // Two worthless blocks in a row take the default 0.5 below the default gate 0.25.
        let once = confidence_after(0.5, &rolled_back(Some(0.0), 0.0), false);
        assert!(confidence_after(once, &rolled_back(Some(0.0), 0.0), false) < 0.25);
        assert_eq!(confidence_after(0.1, &kept(Some(0.8), 0.1), true), 0.8);
        assert_eq!(confidence_after(0.9, &rolled_back(Some(0.1), 0.01), true), 0.0);
    }

    #[test]
    fn scale_grows_on_efficient_blocks_and_halves_on_rollbacks_within_bounds() {
        let config = HybridConfig::default().with_min_scale(0.1).with_max_scale(2.0).with_hold_efficiency(0.5);
        assert_eq!(scale_after(1.0, &kept(Some(0.6), 0.1), &config), 1.25);
        assert_eq!(scale_after(1.0, &kept(Some(0.3), 0.1), &config), 1.0);
        assert_eq!(scale_after(1.0, &kept(None, 0.1), &config), 1.0);
        assert_eq!(scale_after(1.0, &rolled_back(Some(0.1), 0.01), &config), 0.5);
        assert_eq!(scale_after(1.9, &kept(Some(0.9), 0.1), &config), 2.0);
        assert_eq!(scale_after(0.15, &rolled_back(None, -1.0), &config), 0.1);
    }

    #[test]
    fn a_reprobe_jumps_at_the_initial_scale() {
        let config = HybridConfig::default().with_initial_scale(1.0).with_min_scale(0.1);
        assert_eq!(jump_scale(0.1, true, &config), 1.0);
        assert_eq!(jump_scale(0.1, false, &config), 0.1, "control: an ordinary block keeps its scale");
    }
}
