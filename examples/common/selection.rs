//! `--select-keep`: selection, a backward pass only for the examples that need it
//! (docs/trainer.md, "Selection").

use leanburn::trainer::SelectionRule;

use leanburn::SelectionConfig;

use super::{bad_input, Failure};

/// Which examples full steps train on.
#[derive(clap::Args, Debug, Clone)]
pub struct SelectArgs {
    /// Full steps in `--select-range` score their examples forward only and train on
    /// this fraction of them, the highest losses; 1 (the default) trains on every one.
    #[arg(long, default_value_t = 1.0, value_name = "FRACTION")]
    pub select_keep: f64,
    /// Where selection is on, as fractions of --steps: `FROM,UNTIL`.
    #[arg(long, value_delimiter = ',', default_value = "0.5,0.9", value_name = "FROM,UNTIL")]
    pub select_range: Vec<f64>,
}

impl SelectArgs {
    /// The trainer's selection for a run of `steps` steps (its picks seeded by `seed`);
    /// `None` at `--select-keep 1`.
    pub fn config(&self, steps: usize, seed: u64) -> Result<Option<SelectionConfig>, Failure> {
        let keep = self.select_keep;
        if !(keep > 0.0 && keep <= 1.0) {
            return Err(bad_input(format!("--select-keep must be in (0, 1], got {keep}")));
        }
        let [from, until] = self.select_range[..] else {
            return Err(bad_input("--select-range takes two fractions, FROM,UNTIL".to_string()));
        };
        if !(0.0 <= from && from < until && until <= 1.0) {
            return Err(bad_input(format!("--select-range must be 0 <= FROM < UNTIL <= 1, got {from},{until}")));
        }
        let at = |fraction: f64| (fraction * steps as f64).round() as usize;
        Ok((keep < 1.0).then(|| {
            SelectionConfig::new(SelectionRule::TopFraction { keep })
                .with_steps(at(from), Some(at(until).max(at(from) + 1)))
                .with_seed(seed)
        }))
    }
}
