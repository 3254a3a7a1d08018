//! The trainer end to end on a tiny linear regression, on `Autodiff<Flex>`.

use burn::backend::flex::FlexDevice;
use burn::backend::{Autodiff, Flex};
use burn::module::Module;
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig};
use burn::optim::{AdamConfig, SgdConfig};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};
use burn::train::{InferenceStep, RegressionOutput, TrainOutput, TrainStep};

use super::params::collect;
use super::*;

pub(crate) type Train = Autodiff<Flex>;
pub(crate) type Batch = (Tensor<Train, 2>, Tensor<Train, 2>);

pub(crate) const DEVICE: FlexDevice = FlexDevice;
pub(crate) const ROWS: usize = 8;
const FEATURES: usize = 4;

#[derive(Module, Debug)]
pub(crate) struct Regressor<B: Backend> {
    pub(crate) linear: Linear<B>,
}

impl<B: Backend> Regressor<B> {
    pub(crate) fn new(device: &B::Device) -> Self {
        Self { linear: LinearConfig::new(FEATURES, 1).init(device) }
    }

    fn forward(&self, (inputs, targets): (Tensor<B, 2>, Tensor<B, 2>)) -> RegressionOutput<B> {
        let output = self.linear.forward(inputs);
        let loss = MseLoss::new().forward(output.clone(), targets.clone(), Reduction::Mean);
        RegressionOutput { loss, output, targets }
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

/// The regression behind a batch norm, whose running statistics no gradient moves (its
/// linear layer's weights all 0.1: the same starting point in every run).
#[derive(Module, Debug)]
pub(crate) struct Normed<B: Backend> {
    pub(crate) norm: BatchNorm<B>,
    pub(crate) linear: Linear<B>,
}

impl<B: Backend> Normed<B> {
    pub(crate) fn new(device: &B::Device) -> Self {
        use burn::nn::Initializer;
        let linear = LinearConfig::new(FEATURES, 1).with_initializer(Initializer::Constant { value: 0.1 });
        Self { norm: BatchNormConfig::new(FEATURES).init(device), linear: linear.init(device) }
    }

    fn forward(&self, (inputs, targets): (Tensor<B, 2>, Tensor<B, 2>)) -> RegressionOutput<B> {
        let output = self.linear.forward(self.norm.forward(inputs));
        let loss = MseLoss::new().forward(output.clone(), targets.clone(), Reduction::Mean);
        RegressionOutput { loss, output, targets }
    }
}

impl<B: AutodiffBackend> TrainStep for Normed<B> {
    type Input = (Tensor<B, 2>, Tensor<B, 2>);
    type Output = RegressionOutput<B>;

    fn step(&self, batch: Self::Input) -> TrainOutput<RegressionOutput<B>> {
        let item = self.forward(batch);
        TrainOutput::new(self, item.loss.backward(), item)
    }
}

impl<B: Backend> InferenceStep for Normed<B> {
    type Input = (Tensor<B, 2>, Tensor<B, 2>);
    type Output = RegressionOutput<B>;

    fn step(&self, batch: Self::Input) -> RegressionOutput<B> {
        self.forward(batch)
    }
}

/// A deterministic batch of `y = 0.5·x0 − x1 + 0.25·x2 + 2·x3 + 0.1`, different per step.
pub(crate) fn batch(step: usize) -> Batch {
    let inputs: Vec<f32> = (0..ROWS * FEATURES).map(|i| ((i * 37 + step * 53) % 101) as f32 / 50.0 - 1.0).collect();
    let targets: Vec<f32> =
        inputs.chunks(FEATURES).map(|x| 0.5 * x[0] - x[1] + 0.25 * x[2] + 2.0 * x[3] + 0.1).collect();
    (
        Tensor::from_data(TensorData::new(inputs, [ROWS, FEATURES]), &DEVICE),
        Tensor::from_data(TensorData::new(targets, [ROWS, 1]), &DEVICE),
    )
}

/// A batch whose targets are NaN, so any loss on it is NaN.
pub(crate) fn poisoned_batch() -> Batch {
    let (inputs, _) = batch(0);
    let targets = Tensor::from_data(TensorData::new(vec![f32::NAN; ROWS], [ROWS, 1]), &DEVICE);
    (inputs, targets)
}

pub(crate) fn config() -> HybridConfig {
    HybridConfig::default()
        .with_warmup_steps(3)
        .with_full_steps(1)
        .with_correct_steps(1)
        .with_initial_horizon(2)
        .with_min_horizon(1)
        .with_max_horizon(4)
        .with_min_confidence(0.0)
        .with_min_gain(-1e9)
        .with_cooldown_steps(2)
}

/// A trainer on a fresh regressor with plain SGD at a constant rate of 0.05.
pub(crate) fn sgd_trainer(
    config: HybridConfig,
) -> HybridTrainer<Train, Regressor<Train>, impl burn::optim::Optimizer<Regressor<Train>, Train>, Batch> {
    HybridTrainer::new(
        Regressor::<Train>::new(&DEVICE),
        SgdConfig::new().init(),
        config,
        LrSchedule::Constant { lr: 0.05 },
        DEVICE,
    )
    .expect("valid configuration")
}

/// A regressor whose weights are all 0.1: the same starting point in every run.
pub(crate) fn constant_regressor() -> Regressor<Train> {
    use burn::nn::Initializer;
    Regressor {
        linear: LinearConfig::new(FEATURES, 1).with_initializer(Initializer::Constant { value: 0.1 }).init(&DEVICE),
    }
}

pub(crate) fn weights<B: AutodiffBackend>(model: &Regressor<B>) -> Vec<TensorData> {
    let bias = model.linear.bias.as_ref().expect("bias");
    vec![model.linear.weight.val().inner().into_data(), bias.val().inner().into_data()]
}

pub(crate) fn scratch(name: &str) -> std::path::PathBuf {
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
        // The block's first step jumps by the whole block's prediction; its second runs
        // nothing.
        assert_eq!(before != after, step != 4, "step {step} ({}): weights moved {}", record.phase, before != after);
        assert!(trainer.model().linear.weight.val().is_require_grad());
        records.push(record);
    }
    let phases: Vec<Phase> = records.iter().map(|r| r.phase).collect();
    use super::Phase::{Correct as C, Predict as P, Warmup as W};
    assert_eq!(phases, vec![W, W, W, P, P, C]);
    assert!(records[3].predicted && records[4].predicted && !records[5].predicted);
    assert!(records.iter().all(|r| !r.rolled_back));
    for (step, record) in records.iter().enumerate() {
        assert_eq!(record.loss.is_some_and(f64::is_finite), step != 4, "step {step}: {:?}", record.loss);
    }
    // The jump was verified on its batch: a gain, and the probe loss after it.
    assert!(records[3].gain.is_some_and(f64::is_finite) && records[4].gain.is_none());
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
}

#[test]
fn a_block_jumps_by_exactly_scale_times_its_summed_prediction() {
    use burn::module::AutodiffModule;
    let mut trainer = sgd_trainer(config());
    for step in 0..3 {
        trainer.step(batch(step)).expect("warmup step");
    }
    assert_eq!(trainer.phase(), Phase::Predict);
    let position = trainer.optimizer_step();
    let rates: f64 = (0..trainer.horizon()).map(|j| trainer.lr_schedule().at(position + j)).sum();
    assert_eq!(trainer.horizon(), 2);
    let scale = trainer.scale();
    let prediction = trainer.predictor().predict(rates);
    let before = collect(&trainer.model().valid());
    assert_eq!(prediction.len(), before.len(), "one predicted tensor per parameter");

    let record = trainer.step(batch(3)).expect("predicted step");
    assert!(record.predicted && !record.rolled_back);
    let after = collect(&trainer.model().valid());
    for (id, old) in before.iter() {
        let update = prediction[id].clone();
        assert!(update.clone().abs().sum().into_scalar() > 0.0, "a zero prediction proves nothing");
        let expected = old.tensor.clone() + update.mul_scalar(scale);
        let got = after.get(id).expect("parameter kept its id").tensor.clone();
        assert_eq!(got.into_data(), expected.into_data(), "parameter {id}");
    }
}

#[test]
fn a_prediction_that_makes_the_loss_worse_is_rolled_back_and_the_step_trains_instead() {
    // A scale of 10⁴ turns a sensible update into a wild one.
    let mut trainer = sgd_trainer(config().with_initial_scale(1e4).with_max_scale(1e4).with_min_gain(0.25));
    for step in 0..3 {
        trainer.step(batch(step)).expect("warmup step");
    }
    assert_eq!(trainer.phase(), Phase::Predict);
    let record = trainer.step(batch(3)).expect("a rejected step is not an error");
    assert!(record.rolled_back && !record.predicted && record.phase == Phase::Full, "{record:?}");
    assert!(record.loss.is_some_and(f64::is_finite));
    assert!(record.gain.is_some_and(|gain| gain < 0.0), "{:?}", record.gain);
    assert_eq!(trainer.phase(), Phase::Full);
    // The data moved on, and so does the learning-rate position: no rewind.
    assert_eq!(trainer.optimizer_step(), 4);
    assert_eq!(trainer.steps_taken(), 4);
}

#[test]
fn training_reduces_the_loss() {
    let mut trainer = sgd_trainer(config());
    let mut losses = Vec::new();
    for step in 0..60 {
        let record = trainer.step(batch(step)).expect("step");
        if !record.predicted {
            losses.push(record.loss.expect("read every step"));
        }
    }
    let statistics = trainer.statistics();
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
    assert!(matches!(err, TrainerError::NonFiniteLoss { step: 0, .. }), "{err}");
    assert_eq!(weights(trainer.model()), before);
    assert_eq!(trainer.steps_taken(), 0);
    assert_eq!(trainer.optimizer_step(), 0);
    assert_eq!(trainer.phase(), Phase::Warmup);
    // Training goes on with the next good batch.
    trainer.step(batch(0)).expect("step");
    assert_eq!(trainer.steps_taken(), 1);
}

#[test]
fn a_non_finite_probe_rolls_back_bit_for_bit_and_is_refused_like_a_full_step() {
    for store in [SnapshotStore::Device, SnapshotStore::Host] {
        let mut trainer = sgd_trainer(config().with_snapshot(store));
        for step in 0..3 {
            trainer.step(batch(step)).expect("warmup step");
        }
        assert_eq!(trainer.phase(), Phase::Predict);
        let block_start = weights(trainer.model());
        let confidence = trainer.confidence();
        // Even the most permissive setting (min_gain −10⁹) rejects a NaN probe; the step
        // then trains on the batch as a full step, whose NaN loss is refused.
        let err = trainer.step(poisoned_batch()).expect_err("a NaN loss");
        assert!(matches!(err, TrainerError::NonFiniteLoss { step: 3, .. }), "{store:?}: {err}");
        assert_eq!(weights(trainer.model()), block_start, "{store:?}: not restored exactly");
        assert!(trainer.model().linear.weight.val().is_require_grad());
        assert_eq!(trainer.phase(), Phase::Full);
        assert_eq!(trainer.horizon(), 1);
        assert_eq!((trainer.steps_taken(), trainer.optimizer_step()), (3, 3), "nothing counted");
        assert!((trainer.confidence() - confidence * 0.5).abs() < 1e-12);

        // The cooldown follows: full steps.
        let next = trainer.step(batch(4)).expect("cooldown step");
        assert_eq!(next.phase, Phase::Full);
    }
}

#[test]
fn a_rolled_back_block_is_exactly_a_full_step() {
    // Adam (it has state), and a wild scale that every block's probe rejects.
    let adam = |config: HybridConfig| {
        HybridTrainer::new(
            Regressor::<Train>::new(&DEVICE),
            AdamConfig::new().init(),
            config,
            LrSchedule::WarmupCosine { peak: 0.05, warmup_steps: 1, total_steps: 40, min_lr: 0.005 },
            DEVICE,
        )
        .expect("valid configuration")
    };
    let wild = config().with_min_gain(0.25).with_initial_scale(1e4).with_min_scale(1e4).with_max_scale(1e4);
    let mut trainer = adam(wild);
    let mut control = adam(HybridConfig::all_full());
    // Control of the control: a trainer that keeps the same wild jump.
    let mut kept = adam(config().with_initial_scale(1e4).with_min_scale(1e4).with_max_scale(1e4));
    for other in [&mut control, &mut kept] {
        other.model =
            Some(Module::load_record(Regressor::<Train>::new(&DEVICE), trainer.model().clone().into_record()));
    }
    for step in 0..3 {
        trainer.step(batch(step)).expect("warmup step");
        control.step(batch(step)).expect("full step");
        kept.step(batch(step)).expect("warmup step");
    }
    assert_eq!(weights(trainer.model()), weights(control.model()));
    let record = trainer.step(batch(3)).expect("predicted step");
    assert!(record.rolled_back && record.phase == Phase::Full, "{record:?}");
    control.step(batch(3)).expect("full step");
    // Weights, Adam's moments and the learning-rate position: both land on the same
    // weights, bit for bit, now and after the next full step.
    assert_eq!(weights(trainer.model()), weights(control.model()));
    assert_eq!(trainer.optimizer_step(), control.optimizer_step());
    trainer.step(batch(4)).expect("cooldown step");
    control.step(batch(4)).expect("full step");
    assert_eq!(weights(trainer.model()), weights(control.model()));
    // The trainer that kept the wild jump does not.
    kept.step(batch(3)).expect("kept jump");
    kept.step(batch(4)).expect("step");
    assert_eq!(kept.statistics().rollbacks, 0);
    assert_ne!(weights(kept.model()), weights(control.model()));
    // One clock: every step, rolled back or not, moves the learning-rate position by one.
    for step in 5..40 {
        trainer.step(batch(step)).expect("step");
        assert_eq!(trainer.optimizer_step(), trainer.steps_taken());
    }
    assert!(trainer.statistics().rollbacks >= 2);
}

#[test]
fn skip_step_moves_the_clock_and_nothing_else() {
    let mut trainer = sgd_trainer(HybridConfig::all_full());
    trainer.step(batch(0)).expect("step");
    let before = weights(trainer.model());
    trainer.skip_step();
    assert_eq!(weights(trainer.model()), before);
    assert_eq!((trainer.steps_taken(), trainer.optimizer_step()), (2, 2));
    assert_eq!(trainer.statistics().steps, 1, "no record for a step passed over");
    // Control: a real step moves the weights.
    trainer.step(batch(2)).expect("step");
    assert_ne!(weights(trainer.model()), before);
}

#[test]
fn the_off_switch_stops_blocks_that_gain_too_little_and_reprobes_later() {
    // Every block jumps 10⁴ times too far, so every probe gets worse. min_scale pins
    // the scale there, and there is no cooldown: only the off-switch can stop it.
    let hurtful = |min_gain: f64| {
        config()
            .with_min_gain(min_gain)
            .with_min_confidence(0.25)
            .with_initial_confidence(0.5)
            .with_cooldown_steps(0)
            .with_reprobe_steps(10)
            .with_initial_scale(1e4)
            .with_min_scale(1e4)
            .with_max_scale(1e4)
    };
    let blocks = |config: HybridConfig| -> Vec<usize> {
        let mut trainer = sgd_trainer(config);
        let mut starts = Vec::new();
        for step in 0..80 {
            let record = trainer.step(batch(step)).expect("step");
            // A block's first step: kept (predicted, probed) or rejected.
            if record.rolled_back || (record.predicted && record.loss.is_some()) {
                starts.push(record.step);
            }
        }
        starts
    };
    let starts = blocks(hurtful(0.25));
    // The first block has no pace to be judged against (it changes nothing); the next
    // two are rejected (confidence 0.5 → 0.25 → 0.125) and turn prediction off;
    // afterwards one re-probe block per 10 full steps at most.
    assert!(starts.len() >= 4, "{starts:?}");
    for pair in starts[2..].windows(2) {
        assert!(pair[1] - pair[0] > 10, "blocks too close after the switch went off: {starts:?}");
    }
    // Control: with the gate never closing (min_confidence 0), the same run keeps trying.
    let control = blocks(hurtful(0.25).with_min_confidence(0.0));
    assert!(control.len() > 2 * starts.len(), "control {control:?} vs {starts:?}");
}

#[test]
fn with_prediction_off_the_predictor_is_dropped_and_refilled_before_each_reprobe() {
    // Every block hurts (a jump 10⁴ times too far), so prediction goes off; re-probes every
    // 30 full steps; ema_decay 0.5 refills the predictor over the last 4 full steps.
    let hurtful = config()
        .with_min_gain(0.25)
        .with_min_confidence(0.25)
        .with_initial_confidence(0.5)
        .with_cooldown_steps(0)
        .with_reprobe_steps(30)
        .with_ema_decay(0.5)
        .with_initial_scale(1e4)
        .with_min_scale(1e4)
        .with_max_scale(1e4);
    let run = |config: HybridConfig| {
        let mut trainer = sgd_trainer(config);
        let (mut empty_steps, mut blocks) = (0, 0);
        for step in 0..120 {
            if trainer.phase() == Phase::Predict {
                assert!(trainer.predictor().is_ready(), "step {step}: a block with an empty predictor");
            }
            let record = trainer.step(batch(step)).expect("step");
            blocks += usize::from(record.gain.is_some());
            empty_steps += usize::from(trainer.predictor().is_empty());
        }
        (empty_steps, blocks)
    };
    let (empty_steps, blocks) = run(hurtful.clone());
    // Off after the third block; then 3 re-probes, each after 26 unfed full steps.
    assert!(blocks >= 5, "{blocks} blocks");
    assert!(empty_steps >= 60, "the predictor was empty for {empty_steps} steps");
    // Control: with the gate held open the predictor is always fed.
    let (empty_steps, _) = run(hurtful.with_min_confidence(0.0));
    assert_eq!(empty_steps, 0);
}

/// The mean loss of `batches` on the inner model, as a probe reads it.
fn probe_loss(model: &Regressor<Train>, batches: &[Batch]) -> f64 {
    use burn::module::AutodiffModule;
    use burn::tensor::ElementConversion;
    let inner = model.valid();
    let sum: f64 = batches
        .iter()
        .map(|batch| {
            let (inputs, targets) = batch.clone();
            let output = InferenceStep::step(&inner, (inputs.inner(), targets.inner()));
            output.loss.into_scalar().elem::<f64>()
        })
        .sum();
    sum / batches.len() as f64
}

#[test]
fn every_block_is_probed_on_the_probe_set() {
    let probe_set = vec![batch(1000), batch(1001)];
    let mut trainer = sgd_trainer(config()).with_probe_set(probe_set.clone()).expect("probe set");
    let mut probed = 0;
    for step in 0..20 {
        let record = trainer.step(batch(step)).expect("step");
        if record.gain.is_some() && !record.rolled_back {
            // The record's loss is the probe after the jump: the probe set's, not the batch's.
            let on_set = probe_loss(trainer.model(), &probe_set);
            let on_batch = probe_loss(trainer.model(), &[batch(step)]);
            let loss = record.loss.expect("probe loss");
            assert!((loss - on_set).abs() <= 1e-6 * on_set.max(1.0), "step {step}: {loss} vs {on_set}");
            assert!((loss - on_batch).abs() > 1e-4, "control: the block's own batch reads {on_batch}");
            probed += 1;
        }
    }
    assert!(probed >= 2, "{probed} blocks kept");
    assert!(matches!(sgd_trainer(config()).with_probe_set(Vec::new()), Err(TrainerError::EmptyProbeSet)));
}

#[test]
fn resumes_from_a_checkpoint_exactly() {
    let dir = scratch("resume");
    let make = || {
        HybridTrainer::new(
            Regressor::<Train>::new(&DEVICE),
            AdamConfig::new().init(),
            config(),
            LrSchedule::WarmupCosine { peak: 0.05, warmup_steps: 2, total_steps: 40, min_lr: 0.005 },
            DEVICE,
        )
        .expect("valid configuration")
    };
    // The probe set is not checkpointed: given again, the run continues exactly.
    let probe_set = || vec![batch(1000), batch(1001)];
    let mut original = make().with_probe_set(probe_set()).expect("probe set");
    let mut step = 0;
    while step < 8 {
        original.step(batch(step)).expect("step");
        step += 1;
    }
    let saved = original.save_checkpoint(&dir).expect("save");
    assert!(saved.ends_with(format!("ckpt-{step:08}")));

    let mut resumed = HybridTrainer::resume(Regressor::<Train>::new(&DEVICE), AdamConfig::new().init(), &dir, DEVICE)
        .expect("resume")
        .with_probe_set(probe_set())
        .expect("probe set");
    assert_eq!(resumed.steps_taken(), original.steps_taken());
    assert_eq!(resumed.phase(), original.phase());
    assert_eq!(resumed.state(), original.state());
    assert_eq!(weights(resumed.model()), weights(original.model()));

    for offset in 0..12 {
        let a = original.step(batch(step + offset)).expect("original step");
        let b = resumed.step(batch(step + offset)).expect("resumed step");
        assert_eq!(a.phase, b.phase, "step {}", a.step);
        assert_eq!(a.rolled_back, b.rolled_back);
        assert_eq!(a.loss.is_some(), b.loss.is_some(), "step {}", a.step);
        if let (Some(a_loss), Some(b_loss)) = (a.loss, b.loss) {
            assert!((a_loss - b_loss).abs() <= 1e-6 * a_loss.abs().max(1.0), "step {}: {a_loss} vs {b_loss}", a.step,);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn writes_one_json_line_per_step() {
    let dir = scratch("metrics");
    let path = dir.join("steps.jsonl");
    let mut trainer = sgd_trainer(config()).with_metrics(&path).expect("metrics file");
    for step in 0..7 {
        trainer.step(batch(step)).expect("step");
    }
    let lines: Vec<StepReport> = std::fs::read_to_string(&path)
        .expect("read")
        .lines()
        .map(|line| serde_json::from_str(line).expect("a record"))
        .collect();
    assert_eq!(lines.len(), 7);
    assert_eq!(lines.iter().map(|r| r.step).collect::<Vec<_>>(), (0..7).collect::<Vec<_>>());
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
    assert!(matches!(result, Err(TrainerError::Config(ConfigError::WarmupSteps(0)))));
    let result = HybridTrainer::new(
        Regressor::<Train>::new(&DEVICE),
        SgdConfig::new().init(),
        config(),
        LrSchedule::Constant { lr: -1.0 },
        DEVICE,
    );
    assert!(matches!(result, Err(TrainerError::Config(ConfigError::LearningRate { .. }))));
}

#[test]
fn a_kept_train_output_belongs_to_its_own_step() {
    let mut trainer = sgd_trainer(config()).with_train_outputs();
    trainer.step(batch(0)).expect("step");
    assert!(trainer.take_train_output().is_some(), "a full step keeps its output");
    assert!(trainer.take_train_output().is_none(), "taken once");
    // A full step's output left untaken, then a step that fails: nothing stale remains.
    trainer.step(batch(1)).expect("step");
    assert!(trainer.step(poisoned_batch()).is_err());
    assert!(trainer.take_train_output().is_none(), "the failed step has no output, and the earlier one is gone");
    // Control: without `with_train_outputs` nothing is kept.
    let mut plain = sgd_trainer(config());
    plain.step(batch(0)).expect("step");
    assert!(plain.take_train_output().is_none());
}

#[test]
fn a_checkpoint_of_another_model_is_refused_by_name() {
    let dir = scratch("another-model");
    let mut trainer = sgd_trainer(config());
    trainer.step(batch(0)).expect("step");
    trainer.save_checkpoint(&dir).expect("save");
    let resume = |model: Regressor<Train>| {
        HybridTrainer::<Train, _, _, Batch>::resume(model, SgdConfig::new().init(), &dir, DEVICE)
    };

    // Four outputs instead of one: the same parameter tensors, other shapes.
    let wider = Regressor::<Train> { linear: LinearConfig::new(FEATURES, 4).init(&DEVICE) };
    match resume(wider) {
        Err(TrainerError::Checkpoint { reason, .. }) => {
            assert!(
                reason.contains("does not fit") && reason.contains("[4, 1]") && reason.contains("[4, 4]"),
                "{reason}"
            )
        }
        Err(other) => panic!("another error: {other}"),
        Ok(_) => panic!("a checkpoint of another shape was loaded"),
    }
    // Control: the model it was saved from resumes.
    let resumed = resume(Regressor::new(&DEVICE)).expect("the same model resumes");
    assert_eq!(weights(resumed.model()), weights(trainer.model()));
    let _ = std::fs::remove_dir_all(&dir);
}
