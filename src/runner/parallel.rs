//! Data-parallel runs: one replica per device, each on its own thread, kept in step by
//! burn-collective's all-reduce (see [`Replica`]).

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

use burn::collective::CollectiveConfig;
use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;

use super::error::RunError;
use crate::trainer::Replica;

/// burn-collective keeps one collective per backend type and process: one run at a time.
static ONE_RUN: Mutex<()> = Mutex::new(());

/// Runs `job` once per device, each on its own thread, as replica `rank` of
/// `devices.len()`: `job(replica, model, device)` gets a copy of `model` on its device
/// (the same parameters, as [`HybridTrainer::with_replica`] requires) and trains it
/// there, typically with [`RunDir::start_replica_trainer`](super::RunDir::start_replica_trainer)
/// and a [`Runner`](super::Runner) (a [follower](super::Runner::follower) on every rank
/// but 0). A device may appear more than once: its replicas share it (two logical
/// devices on one CPU, say).
///
/// `collective` is burn-collective's configuration (its local strategies): its device
/// count is set here. Its global settings (several nodes) are refused: burn-collective
/// 0.21's all-reduce across nodes never returns from its second call (see
/// docs/parallel.md, "Several nodes").
///
/// Returns every replica's result in rank order. When a replica fails (an error or a
/// panic), it releases the others waiting in a reduction, which then stop with an error
/// too, and the first failure is returned as [`RunError::Replica`].
///
/// [`HybridTrainer::with_replica`]: crate::trainer::HybridTrainer::with_replica
pub fn data_parallel<B, M, R, F>(
    devices: &[B::Device],
    collective: CollectiveConfig,
    model: M,
    job: F,
) -> Result<Vec<R>, RunError>
where
    B: AutodiffBackend,
    M: AutodiffModule<B> + Send,
    R: Send,
    F: Fn(Replica, M, B::Device) -> Result<R, RunError> + Sync,
{
    refuse_unsupported(devices.len(), &collective)?;
    let replicas = devices.len();
    // Lazy parameters would initialise anew in every copy.
    let model = crate::init::materialize(model);
    let collective = collective.with_num_devices(replicas);
    let _one_run = ONE_RUN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    // A run that failed earlier may have left peers registered.
    Replica::abort::<B::InnerBackend>();
    let first_failure = FirstFailure::default();
    let results: Vec<Option<R>> = std::thread::scope(|scope| {
        let handles: Vec<_> = devices
            .iter()
            .enumerate()
            .map(|(rank, device)| {
                let (model, device, collective) = (model.clone(), device.clone(), collective.clone());
                let (job, first_failure) = (&job, &first_failure);
                std::thread::Builder::new()
                    .name(format!("replica-{rank}"))
                    .spawn_scoped(scope, move || {
                        let run = || run_replica::<B, M, R, F>(rank, replicas, device, collective, model, job);
                        let failure = match catch_unwind(AssertUnwindSafe(run)) {
                            Ok(Ok(result)) => return Some(result),
                            Ok(Err(err)) => err,
                            Err(panic) => RunError::Panicked(panic_message(panic)),
                        };
                        first_failure.record::<B>(rank, failure);
                        None
                    })
                    .expect("spawning a replica thread")
            })
            .collect();
        handles.into_iter().map(|handle| handle.join().ok().flatten()).collect()
    });
    Replica::abort::<B::InnerBackend>();
    if let Some((rank, source)) = first_failure.take() {
        return Err(RunError::Replica { rank, replicas, source: Box::new(source) });
    }
    Ok(results.into_iter().map(|result| result.expect("every replica succeeded")).collect())
}

/// No devices, or a collective across nodes: refused before any thread starts.
fn refuse_unsupported(devices: usize, collective: &CollectiveConfig) -> Result<(), RunError> {
    if devices == 0 {
        return Err(RunError::Settings("a data-parallel run needs at least one device".into()));
    }
    if spans_nodes(collective) {
        return Err(RunError::Settings(
            "data_parallel runs within one process: burn-collective 0.21's all-reduce across nodes never \
             returns from its second call (docs/parallel.md, \"Several nodes\")"
                .into(),
        ));
    }
    Ok(())
}

/// Replica `rank` of `replicas`: joins the collective, runs `job` on its copy of `model`,
/// leaves.
fn run_replica<B, M, R, F>(
    rank: usize,
    replicas: usize,
    device: B::Device,
    collective: CollectiveConfig,
    model: M,
    job: &F,
) -> Result<R, RunError>
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
    F: Fn(Replica, M, B::Device) -> Result<R, RunError>,
{
    let replica = Replica::join::<B::InnerBackend>(rank, replicas, &device, collective).map_err(RunError::Start)?;
    let result = job(replica, model.fork(&device), device)?;
    replica.leave::<B::InnerBackend>().map_err(RunError::Start)?;
    Ok(result)
}

/// The first replica to fail, and why.
#[derive(Default)]
struct FirstFailure(Mutex<Option<(usize, RunError)>>);

impl FirstFailure {
    /// Keeps `err` if no replica failed before, and then releases the replicas waiting in a
    /// reduction for this one.
    fn record<B: AutodiffBackend>(&self, rank: usize, err: RunError) {
        let mut first = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if first.is_none() {
            *first = Some((rank, err));
            Replica::abort::<B::InnerBackend>();
        }
    }

    fn take(self) -> Option<(usize, RunError)> {
        self.0.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Whether `config` names nodes (its fields are private; its serialised form is not).
fn spans_nodes(config: &CollectiveConfig) -> bool {
    serde_json::to_value(config).map_or(true, |value| !value["num_nodes"].is_null())
}

fn panic_message(panic: Box<dyn Any + Send>) -> String {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into());
    format!("panicked: {message}")
}
