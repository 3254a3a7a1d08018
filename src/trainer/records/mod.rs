//! What a run reports: one record per step, and totals over the run.

pub(crate) mod record;
pub(crate) mod statistics;
