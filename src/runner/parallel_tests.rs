//! Data-parallel runs on two logical devices (two replicas sharing the host's `Flex`
//! device, each on its own thread), on the trainer tests' linear regression.

use std::sync::mpsc;
use std::time::Duration;

use burn::collective::CollectiveConfig;
use burn::module::AutodiffModule;
use burn::optim::SgdConfig;
use burn::tensor::TensorData;

use super::*;
use crate::trainer::tests::{batch, config, weights, Batch, Normed, Regressor, Train, DEVICE, ROWS};
use crate::trainer::{HybridConfig, HybridTrainer, LrSchedule, StepReport, TrainerError};

/// Replica `rank`'s share of `batch`: its half of the rows.
fn share((inputs, targets): Batch, rank: usize, replicas: usize) -> Batch {
    let rows = ROWS / replicas;
    let range = rank * rows..(rank + 1) * rows;
    (inputs.slice([range.clone()]), targets.slice([range]))
}

/// The result of `run`, or a failure if it takes over a minute (a replica left waiting).
fn within_a_minute<R: Send + 'static>(run: impl FnOnce() -> R + Send + 'static) -> R {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || sender.send(run()));
    receiver.recv_timeout(Duration::from_secs(60)).expect("the data-parallel run finished within a minute")
}

type Trained = (Vec<TensorData>, Vec<StepReport>);

/// `steps` steps of `config` from `model` on `replicas` replicas, each on its share of
/// `batch(step)`; replicas that `reduce` are made replicas of the run, the others train
/// on their own.
fn replicated(
    model: &Regressor<Train>,
    config: HybridConfig,
    steps: usize,
    replicas: usize,
    reduce: bool,
) -> Vec<Trained> {
    let model = model.clone();
    within_a_minute(move || {
        data_parallel::<Train, _, _, _>(
            &vec![DEVICE; replicas],
            CollectiveConfig::default(),
            model,
            |replica, model, device| {
                let trainer = HybridTrainer::new(
                    model,
                    SgdConfig::new().init(),
                    config.clone(),
                    LrSchedule::Constant { lr: 0.05 },
                    device,
                )
                .map_err(RunError::Start)?;
                let mut trainer =
                    if reduce { trainer.with_replica(replica).map_err(RunError::Start)? } else { trainer };
                let records = (0..steps)
                    .map(|step| trainer.step(share(batch(step), replica.rank(), replicas)))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|source| RunError::Step { step: 0, source })?;
                Ok((weights(trainer.model()), records))
            },
        )
        .expect("the data-parallel run")
    })
}

fn largest_difference(a: &[TensorData], b: &[TensorData]) -> f32 {
    a.iter()
        .zip(b)
        .flat_map(|(a, b)| {
            let (a, b) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
            a.into_iter().zip(b).map(|(a, b)| (a - b).abs()).collect::<Vec<_>>()
        })
        .fold(0.0, f32::max)
}

#[test]
fn two_replicas_on_half_batches_train_as_one_device_on_whole_batches() {
    // Warmup, predict blocks (probed on each replica's half of the first block's batch),
    // correct and full steps: 10 steps of the trainer tests' cycle.
    let steps = 10;
    let model = crate::init::materialize(Regressor::<Train>::new(&DEVICE));
    let mut single = HybridTrainer::<Train, _, _, Batch>::new(
        model.clone(),
        SgdConfig::new().init(),
        config(),
        LrSchedule::Constant { lr: 0.05 },
        DEVICE,
    )
    .unwrap();
    let records: Vec<StepReport> = (0..steps).map(|step| single.step(batch(step)).unwrap()).collect();
    assert!(records.iter().any(|r| r.predicted), "the run must contain predict blocks");
    let expected = weights(single.model());

    // Mean-reduced MSE gradients of two halves are the whole batch's up to rounding;
    // 1e-5 absolute on weights of order 1.
    let tolerance = 1e-5;
    for (rank, (got, replica_records)) in replicated(&model, config(), steps, 2, true).into_iter().enumerate() {
        let phases = |records: &[StepReport]| records.iter().map(|r| (r.phase, r.rolled_back)).collect::<Vec<_>>();
        assert_eq!(phases(&replica_records), phases(&records), "replica {rank} took other decisions");
        let difference = largest_difference(&got, &expected);
        assert!(difference <= tolerance, "replica {rank}: weights differ by {difference} from one device's");
    }

    // Control: replicas that do not reduce train on half the data each, and differ.
    for (rank, (got, _)) in replicated(&model, config(), steps, 2, false).into_iter().enumerate() {
        let difference = largest_difference(&got, &expected);
        assert!(difference > 100.0 * tolerance, "control replica {rank}: only {difference} from one device's");
    }
}

#[test]
fn replicas_stay_identical_through_predict_blocks_and_rollbacks() {
    // A scale of 10⁴ makes the first blocks wild (rolled back); the scale then falls
    // until blocks are kept. The same start every time: from a random one, a run could
    // keep no block, and the test would fail by chance.
    let config = config().with_initial_scale(1e4).with_max_scale(1e4).with_min_gain(0.25);
    let steps = 40;
    let model = crate::init::materialize(crate::trainer::tests::constant_regressor());
    let trained = replicated(&model, config.clone(), steps, 2, true);
    let records = &trained[0].1;
    let rollbacks = records.iter().filter(|r| r.rolled_back).count();
    let kept = records.iter().filter(|r| r.predicted).count();
    assert!(rollbacks >= 1 && kept >= 1, "{rollbacks} rollbacks and {kept} predicted steps: both needed");
    assert_eq!(trained[0].0, trained[1].0, "the replicas' weights are bit for bit the same");

    // Control: replicas that do not reduce see different halves and drift apart.
    let alone = replicated(&model, config, steps, 2, false);
    assert_ne!(alone[0].0, alone[1].0);
}

#[test]
fn replicas_of_separately_built_models_are_refused() {
    let result = within_a_minute(|| {
        data_parallel::<Train, _, _, _>(
            &[DEVICE, DEVICE],
            CollectiveConfig::default(),
            Regressor::<Train>::new(&DEVICE),
            |replica, forked, device| {
                // Replica 1 builds its own model: new parameter ids.
                let model = if replica.rank() == 0 { forked } else { Regressor::new(&device) };
                HybridTrainer::<Train, _, _, Batch>::new(
                    model,
                    SgdConfig::new().init(),
                    config(),
                    LrSchedule::Constant { lr: 0.05 },
                    device,
                )
                .and_then(|trainer| trainer.with_replica(replica))
                .map(|_| ())
                .map_err(RunError::Start)
            },
        )
    });
    match result {
        Err(RunError::Replica { source, replicas: 2, .. }) => {
            assert!(
                matches!(&*source, RunError::Start(TrainerError::Replica { reason, .. }) if reason.contains("different parameters")),
                "{source}"
            );
        }
        other => panic!("expected the mismatch to be refused, got {:?}", other.map(|_| ())),
    }
}

/// Replicas resumed from different checkpoints would train on apart: refused. (The
/// control, replicas that start alike, is every other test here.)
#[test]
fn replicas_that_start_after_different_steps_are_refused() {
    let result = within_a_minute(|| {
        data_parallel::<Train, _, _, _>(
            &[DEVICE, DEVICE],
            CollectiveConfig::default(),
            Regressor::<Train>::new(&DEVICE),
            |replica, model, device| {
                let mut trainer = HybridTrainer::<Train, _, _, Batch>::new(
                    model,
                    SgdConfig::new().init(),
                    config(),
                    LrSchedule::Constant { lr: 0.05 },
                    device,
                )
                .map_err(RunError::Start)?;
                if replica.rank() == 1 {
                    trainer.step(batch(0)).map_err(|source| RunError::Step { step: 1, source })?;
                }
                trainer.with_replica(replica).map(|_| ()).map_err(RunError::Start)
            },
        )
    });
    match result {
        Err(RunError::Replica { source, .. }) => assert!(
            matches!(&*source, RunError::Start(TrainerError::Replica { reason, .. }) if reason.contains("same checkpoint")),
            "{source}"
        ),
        other => panic!("expected replicas at different steps to be refused, got {:?}", other.map(|_| ())),
    }
}

/// Settings for several nodes are refused before anything joins, not left to hang.
#[test]
fn settings_for_several_nodes_are_refused() {
    let nodes = CollectiveConfig::default()
        .with_num_nodes(2)
        .with_global_address("ws://127.0.0.1:1".parse().unwrap())
        .with_node_address("ws://127.0.0.1:2".parse().unwrap())
        .with_data_service_port(2);
    let run = |config| {
        within_a_minute(move || {
            data_parallel::<Train, _, _, _>(&[DEVICE], config, Regressor::<Train>::new(&DEVICE), |_, _, _| Ok(()))
        })
    };
    match run(nodes) {
        Err(RunError::Settings(message)) => assert!(message.contains("across nodes"), "{message}"),
        other => panic!("expected several nodes to be refused, got {other:?}"),
    }
    // The control: the same run on one node.
    assert!(run(CollectiveConfig::default()).is_ok());
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("leanburn-parallel-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// How a replica of [`run_in_dir`] breaks.
#[derive(Clone, Copy)]
enum Breaks {
    Never,
    /// Replica 1 cannot draw the batch of this step.
    NoBatch(usize),
    /// Replica 1 panics moving this step's batch to the device.
    Panics(usize),
}

/// A run of `steps` on two replicas in `out`, checkpointed every 3 steps by replica 0;
/// the replicas' final weights.
fn run_in_dir(
    model: &Regressor<Train>,
    out: std::path::PathBuf,
    start: StartMode,
    steps: usize,
    breaks: Breaks,
) -> Result<Vec<Vec<TensorData>>, RunError> {
    let model = model.clone();
    within_a_minute(move || {
        let dir = RunDir::open(&out, "hybrid", start)?;
        let settings = RunSettings::new(steps).with_checkpoint_every(Some(3)).with_eval_every(Some(3));
        data_parallel::<Train, _, _, _>(
            &[DEVICE, DEVICE],
            CollectiveConfig::default(),
            model,
            |replica, model, device| {
                let mut trainer = dir.start_replica_trainer(
                    replica,
                    model,
                    SgdConfig::new().init(),
                    config(),
                    LrSchedule::Constant { lr: 0.05 },
                    device,
                )?;
                let runner = if replica.is_leader() {
                    Runner::new(settings.clone()).in_dir(&dir)
                } else {
                    Runner::follower(settings.clone())
                };
                let rank = replica.rank();
                let mut drawn = 0;
                let next_batch = || {
                    drawn += 1;
                    match breaks {
                        Breaks::NoBatch(step) if rank == 1 && drawn == step => Err("the data ran dry".to_string()),
                        _ => Ok::<_, String>(drawn - 1),
                    }
                };
                let to_device = |step: usize| {
                    if matches!(breaks, Breaks::Panics(at) if rank == 1 && step + 1 == at) {
                        panic!("device lost");
                    }
                    share(batch(step), rank, 2)
                };
                let validate = |_: &Regressor<Train>| Validation { loss: 0.0, accuracy: None };
                runner.run(&mut trainer, next_batch, to_device, validate, |_| {})?;
                Ok(weights(trainer.model()))
            },
        )
    })
}

#[test]
fn a_resumed_run_restores_every_replica_and_continues_as_if_uninterrupted() {
    let model = crate::init::materialize(Regressor::<Train>::new(&DEVICE));
    let whole_out = scratch("whole");
    let whole = run_in_dir(&model, whole_out.clone(), StartMode::Fresh, 9, Breaks::Never).expect("uninterrupted run");
    let _ = std::fs::remove_dir_all(whole_out);
    assert_eq!(whole[0], whole[1]);

    let out = scratch("resumed");
    let first = run_in_dir(&model, out.clone(), StartMode::Fresh, 6, Breaks::Never).expect("first part");
    // Control: six steps are not nine.
    assert_ne!(first[0], whole[0]);
    let resumed = run_in_dir(&model, out.clone(), StartMode::Resume, 9, Breaks::Never).expect("resumed part");
    assert_eq!(resumed[0], whole[0], "replica 0 continued exactly");
    assert_eq!(resumed[1], whole[1], "replica 1 continued exactly");
    // Only replica 0 wrote: one line per step in the step records.
    let lines = std::fs::read_to_string(out.join("metrics-hybrid.jsonl")).map(|s| s.lines().count());
    assert_eq!(lines.ok(), Some(9));
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn a_failing_replica_stops_the_run_with_its_error_and_loses_no_checkpoint() {
    let model = crate::init::materialize(Regressor::<Train>::new(&DEVICE));
    for (breaks, name) in [(Breaks::NoBatch(5), "no-batch"), (Breaks::Panics(5), "panics")] {
        let out = scratch(name);
        let failure =
            run_in_dir(&model, out.clone(), StartMode::Fresh, 9, breaks).expect_err("replica 1 fails at step 5");
        let RunError::Replica { rank, replicas, source } = &failure else { panic!("{failure}") };
        assert_eq!((*rank, *replicas), (1, 2), "{failure}");
        match breaks {
            Breaks::NoBatch(_) => assert!(matches!(**source, RunError::Data { step: 5, .. }), "{failure}"),
            _ => assert!(matches!(&**source, RunError::Panicked(m) if m.contains("device lost")), "{failure}"),
        }
        // Replica 0's checkpoint of step 3 is whole: the run resumes from it.
        let resumed =
            run_in_dir(&model, out.clone(), StartMode::Resume, 9, Breaks::Never).expect("resumed after the failure");
        assert_eq!(resumed[0], resumed[1]);
        let _ = std::fs::remove_dir_all(out);
    }
}

#[test]
fn one_replica_trains_exactly_as_a_trainer_alone() {
    let model = crate::init::materialize(Regressor::<Train>::new(&DEVICE));
    let alone = replicated(&model, config(), 6, 1, false);
    let replica = replicated(&model, config(), 6, 1, true);
    assert_eq!(replica[0].0, alone[0].0);
}

/// The running mean after `steps` all-full steps of `replicas` replicas, each on its share
/// of `batch(step)` (cut in `shares`), from a new model: the copies of one model share
/// its running statistics, so a model trained before would carry its own into the run.
fn running_mean(steps: usize, replicas: usize, shares: usize) -> Vec<TensorData> {
    within_a_minute(move || {
        let model = Normed::<Train>::new(&DEVICE);
        data_parallel::<Train, _, _, _>(
            &vec![DEVICE; replicas],
            CollectiveConfig::default(),
            model,
            |replica, model, device| {
                let mut trainer = HybridTrainer::new(
                    model,
                    SgdConfig::new().init(),
                    HybridConfig::all_full(),
                    LrSchedule::Constant { lr: 0.05 },
                    device,
                )
                .and_then(|trainer| trainer.with_replica(replica))
                .map_err(RunError::Start)?;
                for step in 0..steps {
                    let batch = share(batch(step), replica.rank(), shares);
                    trainer.step(batch).map_err(|source| RunError::Step { step, source })?;
                }
                Ok(trainer.model().valid().norm.running_mean.value().into_data())
            },
        )
        .expect("the data-parallel run")
    })
}

#[test]
fn batch_norm_running_statistics_follow_the_whole_batch() {
    // Burn's RunningState, shared by the replicas' copies, averages their updates: the
    // running mean of the input (batch norm comes first) is the whole batch's.
    let whole = running_mean(3, 1, 1);
    let replicas = running_mean(3, 2, 2);
    let difference = largest_difference(&replicas[0..1], &whole);
    assert!(difference < 1e-5, "the replicas' running mean is {difference} from the whole batch's");
    assert_eq!(replicas[0], replicas[1]);
    // Control: one replica alone on half of each batch.
    let half = running_mean(3, 1, 2);
    assert!(largest_difference(&half, &whole) > 1e-3);
}
