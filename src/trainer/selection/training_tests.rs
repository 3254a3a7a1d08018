//! Selection end to end on the trainer's tiny regression (`Autodiff<Flex>`).

use burn::optim::SgdConfig;
use burn::tensor::{Tensor, TensorData};

use super::{ExampleLosses, SelectableBatch, SelectionConfig, SelectionRule};
use crate::trainer::tests::{batch, constant_regressor, weights as weights_of, Batch, Regressor, Train, DEVICE, ROWS};
use crate::trainer::{HybridConfig, HybridTrainer, LrSchedule, TrainerError};

/// Each row's squared error.
impl<B: burn::tensor::backend::Backend> ExampleLosses<B> for Regressor<B> {
    type Input = (Tensor<B, 2>, Tensor<B, 2>);

    fn example_losses(&self, (inputs, targets): Self::Input) -> Tensor<B, 1> {
        let rows = inputs.dims()[0];
        (self.linear.forward(inputs) - targets).square().reshape([rows])
    }
}

/// An all-full trainer on SGD at 0.05 from the same constant weights every time.
fn trainer() -> HybridTrainer<Train, Regressor<Train>, impl burn::optim::Optimizer<Regressor<Train>, Train>, Batch> {
    HybridTrainer::new(
        constant_regressor(),
        SgdConfig::new().init(),
        HybridConfig::all_full(),
        LrSchedule::Constant { lr: 0.05 },
        DEVICE,
    )
    .expect("valid configuration")
}

fn distance(a: &[TensorData], b: &[TensorData]) -> f32 {
    a.iter()
        .zip(b)
        .flat_map(|(a, b)| a.to_vec::<f32>().unwrap().into_iter().zip(b.to_vec::<f32>().unwrap()))
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn a_selecting_step_trains_exactly_as_a_full_step_on_the_chosen_examples() {
    let half = SelectionConfig::new(SelectionRule::TopFraction { keep: 0.5 });
    let mut selecting = trainer().with_selection(half).expect("valid selection");
    // The chosen rows, found independently: the initial model's four largest squared errors.
    let (inputs, targets) = batch(0);
    let model = trainer().into_model();
    let errors = (model.linear.forward(inputs.clone()) - targets.clone()).square().reshape([ROWS]);
    let errors = errors.into_data().to_vec::<f32>().unwrap();
    let mut order: Vec<usize> = (0..ROWS).collect();
    order.sort_by(|&a, &b| errors[b].total_cmp(&errors[a]));
    let mut chosen = order[..ROWS / 2].to_vec();
    chosen.sort_unstable();

    let record = selecting.step(batch(0)).expect("step");
    let count = record.selection.expect("the step selected");
    assert_eq!((count.scored, count.kept), (ROWS, ROWS / 2));
    assert_eq!(selecting.statistics().selected_share(), Some(0.5));

    let mut on_chosen = trainer();
    let chosen_record = on_chosen.step((inputs, targets).select(&chosen)).expect("step");
    assert!(chosen_record.selection.is_none());
    let gap = distance(&weights_of(selecting.model()), &weights_of(on_chosen.model()));
    assert!(gap <= 1e-7, "selected step against a full step on the chosen rows: {gap}");
    assert_eq!(record.loss, chosen_record.loss, "the loss is the chosen rows' mean");

    // Control: a full step on the whole batch lands elsewhere.
    let mut whole = trainer();
    whole.step(batch(0)).expect("step");
    let gap = distance(&weights_of(selecting.model()), &weights_of(whole.model()));
    assert!(gap > 1e-4, "selection changed nothing: {gap}");
}

#[test]
fn selection_keeps_to_its_steps_and_refuses_bad_settings() {
    let config = SelectionConfig::new(SelectionRule::TopFraction { keep: 0.25 }).with_steps(2, Some(4));
    let mut selecting = trainer().with_selection(config).expect("valid selection");
    let kept: Vec<Option<usize>> =
        (0..6).map(|step| selecting.step(batch(step)).expect("step").selection.map(|c| c.kept)).collect();
    assert_eq!(kept, [None, None, Some(2), Some(2), None, None]);
    assert_eq!(selecting.statistics().selected_share(), Some(0.25));
    let bad = SelectionConfig::new(SelectionRule::TopFraction { keep: 0.0 });
    assert!(matches!(trainer().with_selection(bad), Err(TrainerError::Config(_))));
}

/// Feedback that hands out fixed weights and keeps what it is given back.
#[derive(Clone, Default)]
struct Recorder {
    weights: Option<Vec<f32>>,
    recorded: std::sync::Arc<std::sync::Mutex<Vec<Vec<f32>>>>,
}

impl super::ExampleFeedback for Recorder {
    fn weights(&mut self) -> Option<Vec<f32>> {
        self.weights.clone()
    }

    fn record(&mut self, losses: &[f32]) {
        self.recorded.lock().unwrap().push(losses.to_vec());
    }
}

#[test]
fn a_weighted_step_trains_as_a_full_step_on_rows_repeated_by_their_weights() {
    // Weights summing to the batch size: the weighted mean is the plain mean over the
    // batch with each row repeated by its weight.
    let weights = vec![2.0, 0.0, 1.0, 1.0, 2.0, 0.0, 1.0, 1.0];
    let feedback = Recorder { weights: Some(weights.clone()), ..Recorder::default() };
    let mut weighted = trainer().with_example_feedback(feedback.clone());
    let record = weighted.step(batch(0)).expect("step");

    let repeated: Vec<usize> = (0..ROWS).flat_map(|row| std::iter::repeat_n(row, weights[row] as usize)).collect();
    let mut on_repeated = trainer();
    on_repeated.step(batch(0).select(&repeated)).expect("step");
    let gap = distance(&weights_of(weighted.model()), &weights_of(on_repeated.model()));
    assert!(gap <= 1e-6, "weighted step against the repeated rows: {gap}");

    // The losses given back are each row's, unweighted, from the step's own forward pass;
    // the step's loss is their plain mean.
    let (inputs, targets) = batch(0);
    let errors = (trainer().into_model().linear.forward(inputs) - targets).square().reshape([ROWS]);
    let errors = errors.into_data().to_vec::<f32>().unwrap();
    assert_eq!(feedback.recorded.lock().unwrap().as_slice(), std::slice::from_ref(&errors));
    let mean = errors.iter().map(|&e| e as f64).sum::<f64>() / ROWS as f64;
    assert!((record.loss.expect("read") - mean).abs() < 1e-6);

    // Controls: without weights it is the plain full step, which lands elsewhere.
    let mut plain = trainer().with_example_feedback(Recorder::default());
    plain.step(batch(0)).expect("step");
    let mut full = trainer();
    full.step(batch(0)).expect("step");
    assert!(distance(&weights_of(plain.model()), &weights_of(full.model())) <= 1e-7);
    let gap = distance(&weights_of(weighted.model()), &weights_of(full.model()));
    assert!(gap > 1e-4, "the weights changed nothing: {gap}");
}

#[test]
fn feedback_refuses_runs_it_cannot_follow_and_weights_of_another_length() {
    let hybrid = HybridTrainer::<Train, _, _, Batch>::new(
        constant_regressor(),
        SgdConfig::new().init(),
        HybridConfig::default(),
        LrSchedule::Constant { lr: 0.05 },
        DEVICE,
    )
    .expect("valid configuration");
    let mut hybrid = hybrid.with_example_feedback(Recorder::default());
    let err = hybrid.step(batch(0)).expect_err("a predicting run");
    assert!(matches!(err, TrainerError::Config(crate::trainer::ConfigError::ExampleFeedback(_))), "{err}");
    assert_eq!(hybrid.steps_taken(), 0);

    let half = SelectionConfig::new(SelectionRule::TopFraction { keep: 0.5 });
    let mut selecting = trainer().with_selection(half).expect("valid").with_example_feedback(Recorder::default());
    assert!(matches!(selecting.step(batch(0)), Err(TrainerError::Config(_))));

    let short = Recorder { weights: Some(vec![1.0; ROWS - 1]), ..Recorder::default() };
    let mut wrong = trainer().with_example_feedback(short.clone());
    assert!(matches!(wrong.step(batch(0)), Err(TrainerError::ExampleLosses { .. })));
    assert!(short.recorded.lock().unwrap().is_empty());
    assert_eq!(distance(&weights_of(wrong.model()), &weights_of(trainer().model())), 0.0, "nothing changed");
}
