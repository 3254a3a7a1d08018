//! What a run reports: one report per step, and totals over the run.

pub(crate) mod statistics;
pub(crate) mod step_report;
