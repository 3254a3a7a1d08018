//! The runner end to end on the trainer's tiny regression (`Autodiff<Flex>`).

use std::cell::Cell;
use std::fs;
use std::path::PathBuf;

use burn::optim::{Optimizer, SgdConfig};

use super::*;
use crate::trainer::tests::{batch, config, constant_regressor, weights, Batch, Regressor, Train, DEVICE};
use crate::trainer::{HybridTrainer, LrSchedule};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("leanburn-runner-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    dir
}

/// Indices 0, 1, 2, ... of a batch stream, counting what was drawn.
fn stream(drawn: &Cell<usize>) -> impl FnMut() -> Result<usize, std::io::Error> + '_ {
    move || {
        drawn.set(drawn.get() + 1);
        Ok(drawn.get() - 1)
    }
}

/// Every number in `a` within 1e-5 (relative) of the same in `b`: a resume continues
/// within float noise (checkpointed state is read back, not kept), as the trainer's own
/// resume test allows.
fn assert_close(a: &[f64], b: &[f64], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= 1e-5 * x.abs().max(1.0), "{what}: {a:?} vs {b:?}");
    }
}

fn flat(model: &Regressor<Train>) -> Vec<f64> {
    weights(model).into_iter().flat_map(|data| data.to_vec::<f32>().unwrap()).map(f64::from).collect()
}

fn losses(records: &[crate::trainer::StepReport]) -> Vec<f64> {
    records.iter().map(|r| r.loss.unwrap_or(-1.0)).collect()
}

fn score(_: &Regressor<Train>) -> Validation {
    Validation { loss: 0.5, accuracy: None }
}

/// A trainer started in `dir` (new, or resumed where the directory was opened to resume).
fn start(dir: &RunDir) -> HybridTrainer<Train, Regressor<Train>, impl Optimizer<Regressor<Train>, Train>, Batch> {
    // The same starting weights in every run, so that runs can be compared.
    dir.start_trainer(
        constant_regressor(),
        SgdConfig::new().init(),
        config(),
        LrSchedule::Constant { lr: 0.05 },
        DEVICE,
    )
    .expect("trainer")
}

/// `steps` steps in `dir`, validating and checkpointing every 3.
fn run_to(dir: &RunDir, steps: usize) -> Result<RunOutcome, RunError> {
    let mut trainer = start(dir);
    let settings = RunSettings::new(steps).with_eval_every(Some(3)).with_checkpoint_every(Some(3));
    let outcome = Runner::new(settings).in_dir(dir).run(&mut trainer, stream(&Cell::new(0)), batch, score, |_| {})?;
    assert_eq!(trainer.steps_taken(), steps);
    Ok(outcome)
}

#[test]
fn a_new_run_validates_and_checkpoints_on_its_cadence_and_tells_each_event() {
    let out = scratch("cadence");
    let dir = RunDir::open(&out, "full", StartMode::Fresh).unwrap();
    let mut trainer = start(&dir);
    let settings = RunSettings::new(6).with_eval_every(Some(2)).with_checkpoint_every(Some(4));
    let drawn = Cell::new(0);
    let mut events = Vec::new();
    let on_event = |event: RunEvent<'_>| {
        events.push(match event {
            RunEvent::Resumed { first, .. } => format!("resumed {first}"),
            RunEvent::Started { first, steps } => format!("start {first}..{steps}"),
            RunEvent::Step { record, .. } => format!("step {}", record.step + 1),
            RunEvent::Validated { point, .. } => format!("validate {}", point.step),
            RunEvent::Checkpointed { step, .. } => format!("checkpoint {step}"),
            RunEvent::PoolBloated { step, .. } => format!("bloated {step}"),
            RunEvent::AverageVerified { verdict } => format!("verified {}", verdict.step),
        })
    };
    let outcome = Runner::new(settings).in_dir(&dir).run(&mut trainer, stream(&drawn), batch, score, on_event).unwrap();
    let expected = [
        "start 0..6",
        "validate 0",
        "step 1",
        "step 2",
        "validate 2",
        "step 3",
        "step 4",
        "validate 4",
        "checkpoint 4",
        "step 5",
        "step 6",
        "validate 6",
        "checkpoint 6",
    ];
    assert_eq!(events, expected);
    assert_eq!(drawn.get(), 6, "one batch a step");
    assert_eq!(outcome.records.len(), 6);
    assert_eq!(outcome.validations.iter().map(|p| p.step).collect::<Vec<_>>(), [0, 2, 4, 6]);
    assert_eq!(outcome.last_checkpoint.as_ref().map(|(step, _)| *step), Some(6));
    assert_eq!(outcome.statistics.steps, 6);
    assert!(outcome.items_seen > 0 && outcome.train_seconds > 0.0);
    // The files hold what the outcome holds.
    let history = RunDir::existing(&out, "full").history().unwrap();
    assert_eq!(history.records.iter().map(|r| r.step).collect::<Vec<_>>(), (0..6).collect::<Vec<_>>());
    assert_close(&losses(&history.records), &losses(&outcome.records), "records read back");
    assert_eq!(history.validations, outcome.validations);

    // Control: without validation nothing is scored and no log is written.
    let quiet = scratch("cadence-quiet");
    let dir = RunDir::open(&quiet, "full", StartMode::Fresh).unwrap();
    let mut trainer = start(&dir);
    let settings = RunSettings::new(3).with_eval_every(None);
    let outcome =
        Runner::new(settings).in_dir(&dir).run(&mut trainer, stream(&Cell::new(0)), batch, score, |_| {}).unwrap();
    assert!(outcome.validations.is_empty());
    assert!(!dir.validation_path().exists());
    let _ = fs::remove_dir_all(out);
    let _ = fs::remove_dir_all(quiet);
}

#[test]
fn a_resumed_run_continues_the_batch_stream_and_holds_the_whole_history() {
    let whole = scratch("resume-whole");
    let uninterrupted_dir = RunDir::open(&whole, "hybrid", StartMode::Fresh).unwrap();
    let mut trainer = start(&uninterrupted_dir);
    let settings = RunSettings::new(6).with_eval_every(Some(3)).with_checkpoint_every(Some(3));
    let uninterrupted = Runner::new(settings.clone())
        .in_dir(&uninterrupted_dir)
        .run(&mut trainer, stream(&Cell::new(0)), batch, score, |_| {})
        .unwrap();
    let expected = flat(trainer.model());

    // Three steps, then a new trainer resumed from the checkpoint up to six.
    let split = scratch("resume-split");
    run_to(&RunDir::open(&split, "hybrid", StartMode::Fresh).unwrap(), 3).unwrap();
    let dir = RunDir::open(&split, "hybrid", StartMode::Resume).unwrap();
    assert!(dir.is_resumed());
    let mut trainer = start(&dir);
    assert_eq!(trainer.steps_taken(), 3);
    let drawn = Cell::new(0);
    let first_batch = Cell::new(None);
    let to_device = |i: usize| {
        first_batch.set(first_batch.get().or(Some(i)));
        batch(i)
    };
    let resumed =
        Runner::new(settings).in_dir(&dir).run(&mut trainer, stream(&drawn), to_device, score, |_| {}).unwrap();
    assert_eq!(first_batch.get(), Some(3), "the three batches the first process used were drawn and dropped");
    assert_eq!(drawn.get(), 6);
    assert_close(&flat(trainer.model()), &expected, "the weights of the uninterrupted run");
    assert_eq!(resumed.records.iter().map(|r| r.step).collect::<Vec<_>>(), (0..6).collect::<Vec<_>>());
    assert_close(&losses(&resumed.records), &losses(&uninterrupted.records), "losses");
    assert_eq!(resumed.validations.iter().map(|p| p.step).collect::<Vec<_>>(), [0, 3, 6]);
    assert_close(
        &losses(&RunDir::existing(&split, "hybrid").history().unwrap().records),
        &losses(&resumed.records),
        "on disk",
    );
    // Each process's first step is marked (its time is the start-up's), on disk too; the
    // uninterrupted run, one process, has one.
    let firsts =
        |records: &[crate::trainer::StepReport]| records.iter().map(|r| r.first_in_process).collect::<Vec<_>>();
    assert_eq!(firsts(&resumed.records), [true, false, false, true, false, false]);
    assert_eq!(firsts(&RunDir::existing(&split, "hybrid").history().unwrap().records), firsts(&resumed.records));
    assert_eq!(firsts(&uninterrupted.records), [true, false, false, false, false, false]);
    let _ = fs::remove_dir_all(whole);
    let _ = fs::remove_dir_all(split);
}

/// Indices of a batch stream that skips without drawing, counting what it drew.
struct Skipping<'a> {
    next: usize,
    drawn: &'a Cell<usize>,
}

impl BatchSource for Skipping<'_> {
    type Batch = usize;
    type Error = std::io::Error;

    fn next_batch(&mut self) -> Result<usize, std::io::Error> {
        self.drawn.set(self.drawn.get() + 1);
        self.next += 1;
        Ok(self.next - 1)
    }

    fn skip(&mut self, count: usize) -> Result<(), std::io::Error> {
        self.next += count;
        Ok(())
    }
}

/// A resumed run moves a source that can skip past its earlier steps' batches without
/// drawing them, and trains on the batches the unbroken run took (the closure source of
/// the test above, the control, draws and drops them: six draws for three steps).
#[test]
fn a_resumed_run_skips_a_skipping_source_without_drawing() {
    let whole = scratch("skip-whole");
    let uninterrupted_dir = RunDir::open(&whole, "hybrid", StartMode::Fresh).unwrap();
    let mut trainer = start(&uninterrupted_dir);
    let settings = RunSettings::new(6).with_eval_every(Some(3)).with_checkpoint_every(Some(3));
    let runner = Runner::new(settings.clone()).in_dir(&uninterrupted_dir);
    runner.run(&mut trainer, stream(&Cell::new(0)), batch, score, |_| {}).unwrap();
    let expected = flat(trainer.model());

    let split = scratch("skip-split");
    run_to(&RunDir::open(&split, "hybrid", StartMode::Fresh).unwrap(), 3).unwrap();
    let dir = RunDir::open(&split, "hybrid", StartMode::Resume).unwrap();
    let mut trainer = start(&dir);
    let drawn = Cell::new(0);
    let first_batch = Cell::new(None);
    let to_device = |i: usize| {
        first_batch.set(first_batch.get().or(Some(i)));
        batch(i)
    };
    let mut resumed = None;
    let on_event = |event: RunEvent<'_>| {
        if let RunEvent::Resumed { first, batches, .. } = event {
            resumed = Some((first, batches));
        }
    };
    let source = Skipping { next: 0, drawn: &drawn };
    Runner::new(settings).in_dir(&dir).run(&mut trainer, source, to_device, score, on_event).unwrap();
    assert_eq!(resumed, Some((3, 3)), "the resume is told, with the batches skipped");
    assert_eq!(first_batch.get(), Some(3), "the batch the unbroken run's fourth step took");
    assert_eq!(drawn.get(), 3, "only the resumed steps' batches were drawn");
    assert_close(&flat(trainer.model()), &expected, "the weights of the uninterrupted run");
    let _ = fs::remove_dir_all(whole);
    let _ = fs::remove_dir_all(split);
}

/// The steady pace leaves each process's first step out; the whole run's counts it.
#[test]
fn the_steady_pace_leaves_out_each_process_first_step() {
    let dir = RunDir::open(scratch("pace"), "full", StartMode::Fresh).unwrap();
    let mut outcome = run_to(&dir, 3).unwrap();
    let step = |first_in_process: bool, seconds: f64| crate::trainer::StepReport {
        first_in_process,
        seconds,
        items: 100,
        ..outcome.records[0].clone()
    };
    outcome.records = vec![step(true, 10.0), step(false, 1.0), step(false, 1.0), step(true, 5.0), step(false, 2.0)];
    (outcome.items_seen, outcome.train_seconds) = (500, 19.0);
    assert_eq!(outcome.steady_items_per_second(), Some(300.0 / 4.0));
    assert_eq!(outcome.first_step().map(|r| r.seconds), Some(5.0), "this process's, the newest");
    assert!((outcome.items_per_second() - 500.0 / 19.0).abs() < 1e-12);
    // The control: records of a version without the mark count every step.
    outcome.records.iter_mut().for_each(|r| r.first_in_process = false);
    assert_eq!(outcome.steady_items_per_second(), Some(500.0 / 19.0));
    assert!(outcome.first_step().is_none());
    outcome.records.truncate(0);
    assert_eq!(outcome.steady_items_per_second(), None);
    let _ = fs::remove_dir_all(scratch("pace"));
}

#[test]
fn records_written_past_the_last_checkpoint_are_dropped_when_resuming() {
    let out = scratch("cut");
    let dir = RunDir::open(&out, "full", StartMode::Fresh).unwrap();
    let mut trainer = start(&dir);
    // Checkpoint at step 2, then the batch source fails at step 4: steps 3's record and
    // validation are on disk but not in any checkpoint.
    let settings = RunSettings::new(6).with_eval_every(Some(1)).with_checkpoint_every(Some(2));
    let mut drawn = 0;
    let failing = || {
        drawn += 1;
        if drawn == 4 {
            Err("the data went away")
        } else {
            Ok(drawn - 1)
        }
    };
    let err = Runner::new(settings.clone()).in_dir(&dir).run(&mut trainer, failing, batch, score, |_| {}).unwrap_err();
    assert!(matches!(err, RunError::Data { step: 4, .. }), "{err}");
    assert!(!err.is_bad_input());
    drop(trainer);
    let before = RunDir::existing(&out, "full").history().unwrap();
    assert_eq!(before.records.len(), 3, "control: step 3 was recorded past the checkpoint of step 2");
    assert_eq!(before.validations.len(), 4);

    let dir = RunDir::open(&out, "full", StartMode::Resume).unwrap();
    let mut trainer = start(&dir);
    assert_eq!(trainer.steps_taken(), 2);
    let after = dir.history().unwrap();
    assert_eq!(after.records.iter().map(|r| r.step).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(after.validations.iter().map(|p| p.step).collect::<Vec<_>>(), [0, 1, 2]);
    let outcome =
        Runner::new(settings).in_dir(&dir).run(&mut trainer, stream(&Cell::new(0)), batch, score, |_| {}).unwrap();
    assert_eq!(outcome.records.iter().map(|r| r.step).collect::<Vec<_>>(), (0..6).collect::<Vec<_>>());
    let on_disk = dir.history().unwrap().records;
    assert_eq!(
        on_disk.iter().map(|r| r.step).collect::<Vec<_>>(),
        (0..6).collect::<Vec<_>>(),
        "each step recorded once"
    );
    let _ = fs::remove_dir_all(out);
}

#[test]
fn the_directory_refuses_what_it_cannot_do_and_touches_nothing_then() {
    let out = scratch("refuse");
    let nothing = RunDir::open(&out, "full", StartMode::Resume).unwrap_err();
    assert!(matches!(nothing, RunError::NothingToResume { .. }) && nothing.is_bad_input(), "{nothing}");
    run_to(&RunDir::open(&out, "full", StartMode::Fresh).unwrap(), 3).unwrap();
    let metrics = fs::read(RunDir::existing(&out, "full").metrics_path()).unwrap();

    let again = RunDir::open(&out, "full", StartMode::Fresh).unwrap_err();
    assert!(matches!(again, RunError::AlreadyHolds { .. }) && again.is_bad_input(), "{again}");
    assert_eq!(fs::read(RunDir::existing(&out, "full").metrics_path()).unwrap(), metrics, "nothing touched");
    // Control: another name in the same directory is a run of its own.
    assert!(RunDir::open(&out, "hybrid", StartMode::Fresh).is_ok());

    let finished = run_to(&RunDir::open(&out, "full", StartMode::Resume).unwrap(), 3).unwrap_err();
    assert!(matches!(finished, RunError::AlreadyFinished { taken: 3, steps: 3, .. }), "{finished}");

    let replaced = RunDir::open(&out, "full", StartMode::Overwrite).unwrap();
    assert!(!replaced.metrics_path().exists() && !replaced.checkpoints_path().exists());
    assert_eq!(run_to(&replaced, 2).unwrap().records.len(), 2);

    let file = out.join("a-file");
    fs::write(&file, b"").unwrap();
    assert!(matches!(RunDir::open(&file, "full", StartMode::Fresh), Err(RunError::Unwritable { .. })));
    let _ = fs::remove_dir_all(out);
}

#[test]
fn settings_without_a_directory_cannot_checkpoint() {
    let mut trainer = crate::trainer::tests::sgd_trainer(config());
    let settings = RunSettings::new(2);
    let err = Runner::new(settings).run(&mut trainer, stream(&Cell::new(0)), batch, score, |_| {}).unwrap_err();
    assert!(matches!(err, RunError::Settings(_)), "{err}");
    // Control: the soak settings (no validation, no checkpoints) run without one.
    let outcome =
        Runner::new(RunSettings::soak(4, 1)).run(&mut trainer, stream(&Cell::new(0)), batch, score, |_| {}).unwrap();
    assert_eq!(outcome.records.len(), 4);
    assert!(outcome.validations.is_empty() && outcome.last_checkpoint.is_none());
    // No device pool on the CPU: the monitor shows the host's memory the records carried.
    assert_eq!(outcome.memory.current, None);
    assert_eq!(outcome.memory.host.is_some(), crate::memory::process_memory().is_some());
    assert!(
        RunSettings::new(0).validate().is_err() && RunSettings::new(3).with_eval_every(Some(0)).validate().is_err()
    );
}

#[test]
fn the_validation_log_is_read_by_column_name() {
    let out = scratch("log");
    fs::create_dir_all(&out).unwrap();
    let dir = RunDir::existing(&out, "cnn");
    fs::write(dir.validation_path(), "validation_accuracy,step,validation_loss,train_seconds\n0.5,10,1.25,3.5\n")
        .unwrap();
    let points = dir.history().unwrap().validations;
    let expected = ValidationPoint {
        step: 10,
        train_seconds: 3.5,
        validation: Validation { loss: 1.25, accuracy: Some(0.5) },
        weights: None,
    };
    assert_eq!(points, [expected]);
    assert_eq!(
        validation::ValidationLog::render(&points),
        "step,train_seconds,validation_loss,validation_accuracy\n10,3.5,1.25,0.5\n"
    );
    // Control: a log without a loss column is refused, not misread.
    fs::write(dir.validation_path(), "step,train_seconds\n10,3.5\n").unwrap();
    assert!(matches!(dir.history(), Err(RunError::Corrupt { line: 1, .. })));
    let _ = fs::remove_dir_all(out);
}

#[test]
fn each_step_takes_its_micro_batches_from_the_stream() {
    use crate::trainer::ExecutionConfig;
    let accumulating = ExecutionConfig::default().with_accumulation_steps(2);
    let mut trainer = crate::trainer::tests::sgd_trainer(config()).with_execution(accumulating).expect("valid");
    let drawn = Cell::new(0);
    let outcome = Runner::new(RunSettings::soak(4, 0)).run(&mut trainer, stream(&drawn), batch, score, |_| {}).unwrap();
    assert_eq!(drawn.get(), 8, "two micro-batches a step");
    assert_eq!(outcome.statistics.steps, 4);
    assert_eq!(outcome.items_seen, 4 * 2 * crate::trainer::tests::ROWS);
    // Control: a stream that ends mid-step stops the run with the step it failed.
    let mut trainer = crate::trainer::tests::sgd_trainer(config()).with_execution(accumulating).expect("valid");
    let mut left = 5;
    let short = || {
        left -= 1;
        if left < 0 {
            Err("no more")
        } else {
            Ok(left as usize)
        }
    };
    let err = Runner::new(RunSettings::soak(4, 0)).run(&mut trainer, short, batch, score, |_| {}).unwrap_err();
    assert!(matches!(err, RunError::Data { step: 3, .. }), "{err}");
}

#[test]
fn a_stop_request_finishes_the_step_checkpoints_it_and_the_run_resumes_from_there() {
    let out = scratch("stop");
    let dir = RunDir::open(&out, "full", StartMode::Fresh).unwrap();
    let mut trainer = start(&dir);
    // Checkpoints every 100 steps: none is due before the stop.
    let settings = RunSettings::new(20).with_eval_every(Some(100)).with_checkpoint_every(Some(100));
    let stop = StopRequest::new();
    let drawn = Cell::new(0);
    let mut checkpointed = Vec::new();
    let on_event = |event: RunEvent<'_>| {
        if let RunEvent::Step { record, .. } = event {
            // Asked during step 5, as a signal arriving mid-step would.
            if record.step + 1 == 5 {
                stop.request();
            }
        }
        if let RunEvent::Checkpointed { step, .. } = event {
            checkpointed.push(step);
        }
    };
    let stopped = Runner::new(settings.clone()).in_dir(&dir).with_stop(stop.clone()).run(
        &mut trainer,
        stream(&drawn),
        batch,
        score,
        on_event,
    );
    match &stopped {
        Err(RunError::Stopped { step: 5, signal: StopRequest::BY_CALLER, checkpoint: Some(path) }) => {
            assert!(path.ends_with("ckpt-00000005"), "{}", path.display())
        }
        other => panic!("expected a stop after step 5 with its checkpoint, got {other:?}"),
    }
    assert_eq!(checkpointed, [5]);
    assert_eq!(trainer.steps_taken(), 5, "the step in progress was finished, no other begun");
    assert_eq!(stopped.as_ref().unwrap_err().exit_code(), 1, "no signal: an ordinary failure's code");
    let stopped_weights = flat(trainer.model());

    // The run resumes from the stopped step: nothing trained was lost.
    let dir = RunDir::open(&out, "full", StartMode::Resume).unwrap();
    let resumed = start(&dir);
    assert_eq!(resumed.steps_taken(), 5);
    assert_close(&flat(resumed.model()), &stopped_weights, "weights at the stop");

    // Control: the same run without the request runs to its end, and saves only then.
    let again = scratch("stop-control");
    let dir = RunDir::open(&again, "full", StartMode::Fresh).unwrap();
    let mut trainer = start(&dir);
    let outcome = Runner::new(settings).in_dir(&dir).run(&mut trainer, stream(&Cell::new(0)), batch, score, |_| {});
    assert_eq!(outcome.unwrap().last_checkpoint.map(|(step, _)| step), Some(20));
    for path in [out, again] {
        let _ = fs::remove_dir_all(path);
    }
}

#[test]
fn a_signal_sets_the_exit_code_and_the_message_says_how_to_continue() {
    let error = RunError::Stopped { step: 2943, signal: 15, checkpoint: Some("runs/gpt2/checkpoints-hybrid/x".into()) };
    assert_eq!(error.exit_code(), 143);
    let message = error.to_string();
    assert!(message.contains("SIGTERM") && message.contains("2943") && message.contains("--resume"), "{message}");
    assert_eq!(RunError::Stopped { step: 1, signal: 2, checkpoint: None }.exit_code(), 130);
}

/// The mean squared error of `model` on `batch(100)`, which no step trains on.
fn held_out(model: &Regressor<Train>) -> Validation {
    use burn::module::AutodiffModule;
    use burn::train::InferenceStep;
    let (inputs, targets) = batch(100);
    let output = model.valid().step((inputs.inner(), targets.inner()));
    Validation { loss: output.loss.into_scalar() as f64, accuracy: None }
}

#[test]
fn a_run_with_a_weight_average_validates_the_weights_its_verification_chose() {
    use crate::trainer::{AverageConfig, HybridConfig, Weights};
    let out = scratch("average");
    fs::create_dir_all(&out).unwrap();
    let dir = RunDir::existing(&out, "full");
    // SGD at 0.9 overshoots along the bias, so the moving average of its iterates wins
    // (as in the trainer's own test).
    let trainer = |average: bool| {
        let trainer = HybridTrainer::new(
            constant_regressor(),
            SgdConfig::new().init(),
            HybridConfig::all_full(),
            LrSchedule::Constant { lr: 0.9 },
            DEVICE,
        )
        .unwrap();
        if average {
            trainer.with_weight_average(AverageConfig::new(0.5)).unwrap()
        } else {
            trainer
        }
    };
    let settings = RunSettings::new(20).with_eval_every(Some(10)).with_checkpoint_every(None);
    let mut averaging = trainer(true);
    let mut verified = Vec::new();
    let outcome = Runner::new(settings.clone())
        .in_dir(&dir)
        .run(&mut averaging, stream(&Cell::new(0)), batch, held_out, |event| {
            if let RunEvent::AverageVerified { verdict } = event {
                verified.push((verdict.step, verdict.chosen));
            }
        })
        .unwrap();
    assert_eq!(verified, [(10, Weights::Average), (20, Weights::Average)]);
    let weights: Vec<_> = outcome.validations.iter().map(|p| p.weights).collect();
    assert_eq!(weights, [Some(Weights::Live), Some(Weights::Average), Some(Weights::Average)]);
    let last = outcome.validation().unwrap().loss;
    assert_eq!(last, held_out(&averaging.averaged_model().unwrap()).loss, "the average was validated");
    assert_eq!(dir.history().unwrap().validations, outcome.validations, "the log says which weights");
    // Control: the same run without an average validates its live weights, which the
    // average beat at the end.
    let mut plain = trainer(false);
    let control = Runner::new(settings).run(&mut plain, stream(&Cell::new(0)), batch, held_out, |_| {}).unwrap();
    assert!(control.validations.iter().all(|p| p.weights.is_none()));
    let live = control.validation().unwrap().loss;
    assert_eq!(live, held_out(averaging.model()).loss, "the live weights are the plain run's");
    assert!(last < live, "average {last} against live {live}");
    let _ = fs::remove_dir_all(out);
}
