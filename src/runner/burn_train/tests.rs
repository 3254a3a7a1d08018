//! The strategy inside burn-train's `SupervisedTraining`, on the trainer's tiny regression
//! (`Autodiff<Flex>`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataset::InMemDataset;
use burn::lr_scheduler::LrScheduler;
use burn::module::AutodiffModule;
use burn::nn::{Initializer, LinearConfig};
use burn::optim::SgdConfig;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use burn::train::metric::{LossMetric, Metric, MetricMetadata, MetricName, SerializedEntry};
use burn::train::{InferenceStep, Learner, SupervisedTraining, TrainingStrategy};

use super::*;
use crate::trainer::tests::{config, Regressor, Train, DEVICE};
use crate::trainer::{HybridConfig, LrSchedule, ScheduledLr};

/// Rows `i` of `y = 0.5·x0 − x1 + 0.25·x2 + 2·x3 + 0.1`, four features each.
#[derive(Clone, Default)]
struct Rows;

impl<B: Backend> Batcher<B, usize, (Tensor<B, 2>, Tensor<B, 2>)> for Rows {
    fn batch(&self, rows: Vec<usize>, device: &B::Device) -> (Tensor<B, 2>, Tensor<B, 2>) {
        let inputs: Vec<f32> =
            rows.iter().flat_map(|i| (0..4).map(move |f| ((i * 37 + f * 53) % 101) as f32 / 50.0 - 1.0)).collect();
        let targets: Vec<f32> = inputs.chunks(4).map(|x| 0.5 * x[0] - x[1] + 0.25 * x[2] + 2.0 * x[3] + 0.1).collect();
        let n = rows.len();
        (
            Tensor::from_data(TensorData::new(inputs, [n, 4]), device),
            Tensor::from_data(TensorData::new(targets, [n, 1]), device),
        )
    }
}

/// A train metric that counts the outputs burn-train gave it.
#[derive(Clone)]
struct Counted(Arc<AtomicUsize>);

impl Metric for Counted {
    type Input = ();

    fn name(&self) -> MetricName {
        Arc::new("Outputs seen".into())
    }

    fn update(&mut self, _: &(), _: &MetricMetadata) -> SerializedEntry {
        let seen = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        SerializedEntry::new(seen.to_string(), seen.to_string())
    }

    fn clear(&mut self) {}
}

fn mean_loss(model: &Regressor<burn::backend::Flex>) -> f64 {
    let (inputs, targets) = <Rows as Batcher<burn::backend::Flex, _, _>>::batch(&Rows, (1000..1064).collect(), &DEVICE);
    model.step((inputs, targets)).loss.into_scalar() as f64
}

/// Three epochs of 12 batches of 8 rows through `SupervisedTraining` with the strategy;
/// returns the initial and final validation losses, the steps and predicted steps the
/// strategy took, and the outputs burn-train's metrics saw.
fn train(config: HybridConfig, name: &str) -> (f64, f64, (usize, usize), usize) {
    let dir = std::env::temp_dir().join(format!("leanburn-strategy-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let train = DataLoaderBuilder::new(Rows).batch_size(8).build(InMemDataset::new((0..96).collect()));
    let valid = DataLoaderBuilder::new(Rows).batch_size(16).build(InMemDataset::new((500..532).collect()));
    let linear = LinearConfig::new(4, 1).with_initializer(Initializer::Constant { value: 0.1 }).init(&DEVICE);
    let model = Regressor::<Train> { linear };
    let before = mean_loss(&model.valid());
    let lr = LrSchedule::Constant { lr: 0.05 };
    let strategy =
        HybridStrategy::new(DEVICE, SgdConfig::new().init(), config, lr.clone()).with_checkpoints(dir.join("hybrid"));
    let telemetry = strategy.telemetry();
    let seen = Arc::new(AtomicUsize::new(0));
    let result = SupervisedTraining::new(&dir, train, valid)
        .metric_train(Counted(seen.clone()))
        .metric_train_numeric(telemetry.pool_memory())
        .metric_train_numeric(telemetry.predicted_share())
        .metric_valid_numeric(LossMetric::new())
        .num_epochs(3)
        .with_application_logger(None)
        .with_training_strategy(TrainingStrategy::Custom(Arc::new(strategy)))
        .launch(Learner::new(model, SgdConfig::new().init(), ScheduledLr::new(lr)));
    let after = mean_loss(&result.model);
    assert!(dir.join("hybrid/latest").exists(), "the trainer's own checkpoint at each epoch's end");
    let _ = std::fs::remove_dir_all(&dir);
    (before, after, telemetry.steps(), seen.load(Ordering::SeqCst))
}

#[test]
fn trains_in_supervised_training_with_predicted_steps_and_burn_metrics_on_full_ones() {
    let (before, after, (steps, predicted), seen) = train(config(), "hybrid");
    assert_eq!(steps, 36, "three epochs of twelve batches");
    assert!(predicted > 0, "the strategy predicts steps");
    assert_eq!(seen, steps - predicted, "burn-train's metrics see every full step and no predicted one");
    assert!(after < 0.5 * before, "the loss went from {before} to {after}");
    // Control: all-full predicts nothing, and the metrics see every step.
    let (_, full_after, (steps, predicted), seen) = train(HybridConfig::all_full(), "full");
    assert_eq!((steps, predicted, seen), (36, 0, 36));
    assert!(full_after < 0.5 * before);
}

#[test]
fn scheduled_lr_steps_through_the_schedule_and_resumes_from_its_record() {
    let schedule = LrSchedule::WarmupCosine { peak: 1.0, warmup_steps: 3, total_steps: 10, min_lr: 0.1 };
    let mut scheduler = ScheduledLr::new(schedule.clone());
    let rates: Vec<f64> = (0..12).map(|_| scheduler.step()).collect();
    assert_eq!(rates, (0..12).map(|step| schedule.at(step)).collect::<Vec<_>>());
    let mut resumed = ScheduledLr::new(schedule.clone()).load_record::<Train>(5);
    assert_eq!(resumed.step(), schedule.at(5));
    assert_eq!(ScheduledLr::new(schedule.clone()).to_record::<Train>(), 0);
    // Control: a fresh scheduler starts at step 0, not where another left off.
    assert_ne!(ScheduledLr::new(schedule.clone()).step(), schedule.at(5));
}
