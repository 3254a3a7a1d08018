//! The trainer end to end on a tiny linear regression, on `Autodiff<NdArray>`.

use burn::backend::ndarray::NdArrayDevice;
use burn::backend::{Autodiff, NdArray};
use burn::module::Module;
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, SgdConfig};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};
use burn::train::{InferenceStep, RegressionOutput, TrainOutput, TrainStep};

use super::*;

pub(super) type Train = Autodiff<NdArray>;
pub(super) type Batch = (Tensor<Train, 2>, Tensor<Train, 2>);

pub(super) const DEVICE: NdArrayDevice = NdArrayDevice::Cpu;
pub(super) const ROWS: usize = 8;
const FEATURES: usize = 4;

#[derive(Module, Debug)]
pub(super) struct Regressor<B: Backend> {
    pub(super) linear: Linear<B>,
}

impl<B: Backend> Regressor<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            linear: LinearConfig::new(FEATURES, 1).init(device),
        }
    }

    fn forward(&self, (inputs, targets): (Tensor<B, 2>, Tensor<B, 2>)) -> RegressionOutput<B> {
        let output = self.linear.forward(inputs);
        let loss = MseLoss::new().forward(output.clone(), targets.clone(), Reduction::Mean);
        RegressionOutput {
            loss,
            output,
            targets,
        }
    }
}

impl<B: AutodiffBackend> TrainStep for Regressor<B> {
    type Input = (Tensor<B, 2>, Tensor<B, 2>);
    type Output = RegressionOutput<B>;

    fn step(&self, batch: Self::Input) -> TrainOutput<RegressionOutput<B>> {
        let item = self.forward(batch);
        TrainOutput::new(self, item.loss.backward(), item)
    }
}

impl<B: AutodiffBackend> ForwardLoss<B> for Regressor<B> {
    type Input = (Tensor<B, 2>, Tensor<B, 2>);

    fn forward_loss(&self, batch: Self::Input) -> Tensor<B, 1> {
        self.forward(batch).loss
    }
}

impl<B: Backend> InferenceStep for Regressor<B> {
    type Input = (Tensor<B, 2>, Tensor<B, 2>);
    type Output = RegressionOutput<B>;

    fn step(&self, batch: Self::Input) -> RegressionOutput<B> {
        self.forward(batch)
    }
}

/// A deterministic batch of `y = 0.5·x0 − x1 + 0.25·x2 + 2·x3 + 0.1`, different per step.
pub(super) fn batch(step: usize) -> Batch {
    let inputs: Vec<f32> = (0..ROWS * FEATURES)
        .map(|i| ((i * 37 + step * 53) % 101) as f32 / 50.0 - 1.0)
        .collect();
    let targets: Vec<f32> = inputs
        .chunks(FEATURES)
        .map(|x| 0.5 * x[0] - x[1] + 0.25 * x[2] + 2.0 * x[3] + 0.1)
        .collect();
    (
        Tensor::from_data(TensorData::new(inputs, [ROWS, FEATURES]), &DEVICE),
        Tensor::from_data(TensorData::new(targets, [ROWS, 1]), &DEVICE),
    )
}

/// A batch whose targets are NaN, so any loss on it is NaN.
pub(super) fn poisoned_batch() -> Batch {
    let (inputs, _) = batch(0);
    let targets = Tensor::from_data(TensorData::new(vec![f32::NAN; ROWS], [ROWS, 1]), &DEVICE);
    (inputs, targets)
}

pub(super) fn config() -> HybridConfig {
    HybridConfig::default()
        .with_warmup_steps(3)
        .with_full_steps(1)
        .with_correct_steps(1)
        .with_initial_horizon(2)
        .with_min_horizon(1)
        .with_max_horizon(4)
        .with_min_confidence(0.0)
        .with_loss_tolerance(10.0)
        .with_cooldown_steps(2)
}

/// A trainer on a fresh regressor with plain SGD at a constant rate of 0.05.
pub(super) fn sgd_trainer(
    config: HybridConfig,
) -> HybridTrainer<
    Train,
    Regressor<Train>,
    impl burn::optim::Optimizer<Regressor<Train>, Train>,
    Batch,
> {
    HybridTrainer::new(
        Regressor::<Train>::new(&DEVICE),
        SgdConfig::new().init(),
        config,
        LrSchedule::Constant { lr: 0.05 },
        DEVICE,
    )
    .expect("valid configuration")
}

pub(super) fn weights<B: AutodiffBackend>(model: &Regressor<B>) -> Vec<TensorData> {
    let bias = model.linear.bias.as_ref().expect("bias");
    vec![
        model.linear.weight.val().inner().into_data(),
        bias.val().inner().into_data(),
    ]
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("leanburn-trainer-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn runs_the_phase_cycle_and_predicted_steps_move_the_weights() {
    let mut trainer = sgd_trainer(config());

    let mut records = Vec::new();
    for step in 0..6 {
        let before = weights(trainer.model());
        let record = trainer.step(batch(step)).expect("step");
        let after = weights(trainer.model());
        assert_ne!(
            before, after,
            "step {step} ({}) did not move the weights",
            record.phase
        );
        assert!(trainer.model().linear.weight.val().is_require_grad());
        records.push(record);
    }
    let phases: Vec<Phase> = records.iter().map(|r| r.phase).collect();
    use super::Phase::{Correct as C, Predict as P, Warmup as W};
    assert_eq!(phases, vec![W, W, W, P, P, C]);
    assert!(records[3].predicted && records[4].predicted && !records[5].predicted);
    assert!(records.iter().all(|r| !r.rolled_back && r.loss.is_some_and(f64::is_finite)));
    // Predicted steps count on the learning-rate schedule.
    assert_eq!(records[5].optimizer_step, 5);
    // The first correct step measured the prediction.
    assert!(records[5].cosine.is_some() && records[5].norm_ratio.is_some());

    let statistics = trainer.statistics();
    assert_eq!(statistics.steps, 6);
    assert_eq!(statistics.predict_steps, 2);
    assert_eq!(statistics.rollbacks, 0);
    assert_eq!(statistics.predictor_bytes, (FEATURES + 1) * 4);
    assert_eq!(statistics.snapshot_bytes, (FEATURES + 1) * 4);
    assert!(trainer.can_checkpoint());
}

#[test]
fn a_predicted_step_adds_exactly_scale_times_the_prediction() {
    use burn::module::AutodiffModule;
    let mut trainer = sgd_trainer(config());
    for step in 0..3 {
        trainer.step(batch(step)).expect("warmup step");
    }
    assert_eq!(trainer.phase(), Phase::Predict);
    let lr = trainer.lr_schedule().at(trainer.optimizer_step());
    let scale = trainer.scale();
    let prediction = trainer.predictor().predict(lr);
    let before = collect(&trainer.model().valid());
    assert_eq!(
        prediction.len(),
        before.len(),
        "one predicted tensor per parameter"
    );

    let record = trainer.step(batch(3)).expect("predicted step");
    assert!(record.predicted && !record.rolled_back);
    let after = collect(&trainer.model().valid());
    for (id, old) in before.iter() {
        let update = prediction[id].clone();
        assert!(
            update.clone().abs().sum().into_scalar() > 0.0,
            "a zero prediction proves nothing"
        );
        let expected = old.tensor.clone() + update.mul_scalar(scale);
        let got = after.get(id).expect("parameter kept its id").tensor.clone();
        assert_eq!(got.into_data(), expected.into_data(), "parameter {id}");
    }
}

#[test]
fn a_prediction_that_makes_the_loss_worse_is_rolled_back_bit_for_bit() {
    // A scale of 10⁴ turns a sensible update into a wild one.
    let mut trainer = sgd_trainer(
        config()
            .with_initial_scale(1e4)
            .with_max_scale(1e4)
            .with_loss_tolerance(0.1),
    );
    for step in 0..3 {
        trainer.step(batch(step)).expect("warmup step");
    }
    assert_eq!(trainer.phase(), Phase::Predict);
    let block_start = weights(trainer.model());
    let record = trainer
        .step(batch(3))
        .expect("a rejected step is not an error");
    assert!(
        record.predicted && record.rolled_back,
        "loss {:?}",
        record.loss
    );
    assert!(record.loss.is_some_and(f64::is_finite));
    assert_eq!(weights(trainer.model()), block_start);
    assert_eq!(trainer.phase(), Phase::Full);
}

#[test]
fn training_reduces_the_loss() {
    let mut trainer = sgd_trainer(config());
    let mut losses = Vec::new();
    let statistics = trainer
        .run((0..).map(batch), 60, |record| {
            if !record.predicted {
                losses.push(record.loss.expect("read every step"));
            }
        })
        .expect("run");
    assert_eq!(statistics.steps, 60);
    assert!(statistics.predict_steps > 0);
    let first = losses.first().copied().expect("losses");
    let last = losses.last().copied().expect("losses");
    assert!(last < first * 0.5, "loss went from {first} to {last}");
}

#[test]
fn a_non_finite_full_loss_is_refused_and_changes_nothing() {
    let mut trainer = sgd_trainer(config());
    let before = weights(trainer.model());
    let err = trainer.step(poisoned_batch()).expect_err("NaN loss");
    assert!(
        matches!(err, TrainerError::NonFiniteLoss { step: 0, .. }),
        "{err}"
    );
    assert_eq!(weights(trainer.model()), before);
    assert_eq!(trainer.steps_taken(), 0);
    assert_eq!(trainer.optimizer_step(), 0);
    assert_eq!(trainer.phase(), Phase::Warmup);
    // Training goes on with the next good batch.
    trainer.step(batch(0)).expect("step");
    assert_eq!(trainer.steps_taken(), 1);
}

#[test]
fn a_non_finite_predicted_loss_rolls_back_bit_for_bit() {
    for store in [SnapshotStore::Device, SnapshotStore::Host] {
        let mut trainer = sgd_trainer(config().with_snapshot(store));
        for step in 0..3 {
            trainer.step(batch(step)).expect("warmup step");
        }
        assert_eq!(trainer.phase(), Phase::Predict);
        let block_start = weights(trainer.model());
        let accepted = trainer.step(batch(3)).expect("predicted step");
        assert!(accepted.predicted && !accepted.rolled_back);
        assert_ne!(weights(trainer.model()), block_start);

        // Inside the block, checkpoints are refused.
        assert!(!trainer.can_checkpoint());
        let message = trainer
            .save_checkpoint(scratch("refused"))
            .expect_err("inside a block")
            .to_string();
        assert!(message.contains("predict block"), "{message}");

        let confidence = trainer.confidence();
        let rejected = trainer
            .step(poisoned_batch())
            .expect("a rejected step is not an error");
        assert!(rejected.predicted && rejected.rolled_back, "{store:?}");
        assert!(rejected.loss.is_some_and(f64::is_nan));
        assert_eq!(
            weights(trainer.model()),
            block_start,
            "{store:?}: not restored exactly"
        );
        assert!(trainer.model().linear.weight.val().is_require_grad());
        assert_eq!(trainer.phase(), Phase::Full);
        assert_eq!(trainer.horizon(), 1);
        assert_eq!(trainer.optimizer_step(), 3, "schedule position restored");
        assert!((trainer.confidence() - confidence * 0.5).abs() < 1e-12);
        assert!(trainer.can_checkpoint());
        assert_eq!(trainer.statistics().rollbacks, 1);

        // The cooldown follows: full steps.
        let next = trainer.step(batch(4)).expect("cooldown step");
        assert_eq!(next.phase, Phase::Full);
    }
}

/// The loss of `model` on a fixed batch, in eval mode: the probe a caller of
/// `finish_block` hands in.
fn probe_loss(model: &Regressor<Train>) -> f64 {
    use burn::module::AutodiffModule;
    let (inputs, targets) = batch(1000);
    let item = InferenceStep::step(&model.valid(), (inputs.inner(), targets.inner()));
    item.loss.into_scalar() as f64
}

/// A trainer inside a predict block, one predicted step taken; and the weights and
/// learning-rate position the block started from.
fn inside_a_block(
    config: HybridConfig,
) -> (
    HybridTrainer<Train, Regressor<Train>, impl burn::optim::Optimizer<Regressor<Train>, Train>, Batch>,
    Vec<TensorData>,
) {
    let mut trainer = sgd_trainer(config.with_initial_horizon(4));
    for step in 0..3 {
        trainer.step(batch(step)).expect("warmup step");
    }
    let block_start = weights(trainer.model());
    assert!(trainer.step(batch(3)).expect("predicted step").predicted);
    assert!(!trainer.can_checkpoint(), "control: inside the block no checkpoint can be written");
    (trainer, block_start)
}

#[test]
fn finishing_an_improving_block_keeps_its_weights_and_verifies_them() {
    let (mut trainer, block_start) = inside_a_block(config());
    let now = weights(trainer.model());
    let end = trainer.finish_block(probe_loss).expect("finish");
    let BlockEnd::Kept { after, before } = end else { panic!("{end:?}") };
    assert!(after < before);
    assert_eq!(weights(trainer.model()), now, "kept weights untouched");
    assert_ne!(now, block_start);
    assert!(trainer.can_checkpoint());
    assert_eq!(trainer.phase(), Phase::Correct);
    assert_eq!(trainer.optimizer_step(), 4, "the predicted step stays on the schedule");
    // The next step is a full one that calibrates, as after any accepted block.
    let record = trainer.step(batch(4)).expect("correct step");
    assert_eq!(record.phase, Phase::Correct);
    assert!(record.cosine.is_some());
    // Nothing to finish now: the probe is not even called.
    assert_eq!(trainer.finish_block(|_| unreachable!()).expect("no block"), BlockEnd::NoneOpen);
}

#[test]
fn finishing_a_block_that_probes_worse_rolls_it_back_exactly() {
    // A guard that lets anything finite through, and a wild step: the probe catches it.
    let wild = config().with_loss_tolerance(1e12).with_initial_scale(1e3).with_max_scale(1e3);
    let (mut trainer, block_start) = inside_a_block(wild);
    assert_ne!(weights(trainer.model()), block_start);
    let end = trainer.finish_block(probe_loss).expect("finish");
    let BlockEnd::RolledBack { after, before } = end else { panic!("{end:?}") };
    assert!(after >= before, "{after} vs {before}");
    assert_eq!(weights(trainer.model()), block_start, "not restored exactly");
    assert!(trainer.can_checkpoint());
    assert_eq!(trainer.phase(), Phase::Full);
    assert_eq!(trainer.optimizer_step(), 3, "schedule position restored");
    assert_eq!(trainer.statistics().rollbacks, 1);
    assert!(trainer.save_checkpoint(scratch("finished")).is_ok());
}

#[test]
fn resumes_from_a_checkpoint_exactly() {
    let dir = scratch("resume");
    let make = || {
        HybridTrainer::new(
            Regressor::<Train>::new(&DEVICE),
            AdamConfig::new().init(),
            config(),
            LrSchedule::WarmupCosine {
                peak: 0.05,
                warmup_steps: 2,
                total_steps: 40,
                min_lr: 0.005,
            },
            DEVICE,
        )
        .expect("valid configuration")
    };
    let mut original = make();
    let mut step = 0;
    while step < 8 || !original.can_checkpoint() {
        original.step(batch(step)).expect("step");
        step += 1;
    }
    let saved = original.save_checkpoint(&dir).expect("save");
    assert!(saved.ends_with(format!("ckpt-{step:08}")));

    let mut resumed = HybridTrainer::resume(
        Regressor::<Train>::new(&DEVICE),
        AdamConfig::new().init(),
        &dir,
        DEVICE,
    )
    .expect("resume");
    assert_eq!(resumed.steps_taken(), original.steps_taken());
    assert_eq!(resumed.phase(), original.phase());
    assert_eq!(resumed.state(), original.state());
    assert_eq!(weights(resumed.model()), weights(original.model()));

    for offset in 0..12 {
        let a = original.step(batch(step + offset)).expect("original step");
        let b = resumed.step(batch(step + offset)).expect("resumed step");
        assert_eq!(a.phase, b.phase, "step {}", a.step);
        assert_eq!(a.rolled_back, b.rolled_back);
        let (a_loss, b_loss) = (a.loss.expect("read"), b.loss.expect("read"));
        assert!(
            (a_loss - b_loss).abs() <= 1e-6 * a_loss.abs().max(1.0),
            "step {}: {a_loss} vs {b_loss}",
            a.step,
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn writes_one_json_line_per_step() {
    let dir = scratch("metrics");
    let path = dir.join("steps.jsonl");
    let mut trainer = sgd_trainer(config())
        .with_metrics(&path)
        .expect("metrics file");
    trainer.run((0..).map(batch), 7, |_| {}).expect("run");
    let lines: Vec<StepRecord> = std::fs::read_to_string(&path)
        .expect("read")
        .lines()
        .map(|line| serde_json::from_str(line).expect("a record"))
        .collect();
    assert_eq!(lines.len(), 7);
    assert_eq!(
        lines.iter().map(|r| r.step).collect::<Vec<_>>(),
        (0..7).collect::<Vec<_>>()
    );
    assert!(lines[3].predicted);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rejects_an_invalid_configuration() {
    let result = HybridTrainer::new(
        Regressor::<Train>::new(&DEVICE),
        SgdConfig::new().init(),
        config().with_warmup_steps(0),
        LrSchedule::Constant { lr: 0.05 },
        DEVICE,
    );
    assert!(matches!(
        result,
        Err(TrainerError::Config(ConfigError::WarmupSteps(0)))
    ));
    let result = HybridTrainer::new(
        Regressor::<Train>::new(&DEVICE),
        SgdConfig::new().init(),
        config(),
        LrSchedule::Constant { lr: -1.0 },
        DEVICE,
    );
    assert!(matches!(
        result,
        Err(TrainerError::Config(ConfigError::LearningRate { .. }))
    ));
}
