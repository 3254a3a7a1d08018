//! What the training examples share: run modes, the execution flags, exit codes, the
//! progress they draw from the runner's events, the summary, and the plot of both modes.
//! The loop itself, the `--out` layout, resume and the memory books are the library's
//! (`leanburn::runner`).
#![allow(dead_code)]

pub mod allocator;
pub mod average;
pub mod config;
pub mod failure;
pub mod flags;
pub mod plot;
pub mod progress;
pub mod run_args;
pub mod selection;
pub mod start;

// Each example uses some of these.
#[allow(unused_imports)]
pub use failure::{bad_input, broke, exit_on_failure, Failure};
#[allow(unused_imports)]
pub use flags::{ExecutionArgs, Mode, ParallelArgs};
#[allow(unused_imports)]
pub use plot::plot_runs;
#[allow(unused_imports)]
pub use progress::{summary, train, Progress};
#[allow(unused_imports)]
pub use run_args::RunArgs;
#[allow(unused_imports)]
pub use start::{init_kernel_cache, open_run, run_settings, start_trainer, Start};
