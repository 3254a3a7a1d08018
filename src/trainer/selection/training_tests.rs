//! Selection end to end on the trainer's tiny regression (`Autodiff<Flex>`).

use burn::optim::SgdConfig;
use burn::tensor::{Tensor, TensorData};

use super::{ExampleLosses, SelectableBatch, SelectionConfig, SelectionRule};
use crate::trainer::tests::{batch, constant_regressor, weights, Batch, Regressor, Train, DEVICE, ROWS};
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
    let gap = distance(&weights(selecting.model()), &weights(on_chosen.model()));
    assert!(gap <= 1e-7, "selected step against a full step on the chosen rows: {gap}");
    assert_eq!(record.loss, chosen_record.loss, "the loss is the chosen rows' mean");

    // Control: a full step on the whole batch lands elsewhere.
    let mut whole = trainer();
    whole.step(batch(0)).expect("step");
    let gap = distance(&weights(selecting.model()), &weights(whole.model()));
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
