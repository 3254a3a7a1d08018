//! Learning parity: with at least 30% of the steps predicted, `HybridTrainer` reaches a
//! validation loss close to all-full training over the same number of steps.
//!
//! The task is learnable but not trivial (the class shifts the brightness of one colour
//! channel under noise); both runs start from the same weights and see the same batches,
//! on the deterministic `NdArray` backend. Margin: the hybrid run's final validation loss
//! may exceed the full run's by at most 15% of the full run's starting loss.

use burn::backend::{Autodiff, NdArray};
use burn::module::AutodiffModule;
use burn::optim::AdamConfig;
use burn::prelude::*;
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::AutodiffBackend;
use leanburn::model::{SmallCnn, SmallCnnConfig};
use leanburn::trainer::{HybridConfig, HybridTrainer, LrSchedule};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

type B = Autodiff<NdArray>;

const STEPS: usize = 150;
const BATCH: usize = 8;
const SIDE: usize = 8;
const CLASSES: usize = 4;
const MARGIN: f64 = 0.15;

fn batch(rng: &mut SmallRng, size: usize) -> (TensorData, TensorData) {
    let labels: Vec<i64> = (0..size).map(|_| rng.random_range(0..CLASSES as i64)).collect();
    let plane = SIDE * SIDE;
    let pixels: Vec<f32> = (0..size * 3 * plane)
        .map(|i| {
            let (n, c) = (i / (3 * plane), (i / plane) % 3);
            let shift = if c == 0 { (labels[n] as f32 - 1.5) * 0.5 } else { 0.0 };
            rng.random_range(-1.0..1.0) + shift
        })
        .collect();
    (TensorData::new(pixels, [size, 3, SIDE, SIDE]), TensorData::new(labels, [size]))
}

fn to_device<Bk: Backend>((x, y): &(TensorData, TensorData)) -> (Tensor<Bk, 4>, Tensor<Bk, 1, Int>) {
    let device = Default::default();
    (Tensor::from_data(x.clone(), &device), Tensor::from_data(y.clone(), &device))
}

fn validation_loss<Bk: AutodiffBackend>(model: &SmallCnn<Bk>, data: &(TensorData, TensorData)) -> f64 {
    let (x, y) = to_device::<Bk::InnerBackend>(data);
    model.valid().loss(x, y).into_scalar().elem::<f64>()
}

/// Trains from `weights` on `train` and returns (validation loss before, after, share of
/// predicted steps).
fn train(config: HybridConfig, weights: &[u8], train: &[(TensorData, TensorData)], valid: &(TensorData, TensorData)) -> (f64, f64, f64) {
    let device = Default::default();
    let record = BinBytesRecorder::<FullPrecisionSettings>::default()
        .load(weights.to_vec(), &device)
        .expect("weights");
    let model = SmallCnnConfig::new().with_classes(CLASSES).init::<B>(&device).load_record(record);
    let start = validation_loss(&model, valid);
    let mut trainer = HybridTrainer::new(model, AdamConfig::new().init(), config, LrSchedule::Constant { lr: 1e-2 }, device)
        .expect("valid configuration");
    let statistics = trainer.run(train.iter().map(to_device::<B>), STEPS, |_| {}).expect("training");
    assert_eq!(statistics.steps, STEPS);
    let predicted = statistics.predict_steps as f64 / STEPS as f64;
    (start, validation_loss(trainer.model(), valid), predicted)
}

#[test]
fn hybrid_training_matches_full_training_with_a_third_of_the_steps_predicted() {
    let mut rng = SmallRng::seed_from_u64(7);
    let data: Vec<_> = (0..STEPS).map(|_| batch(&mut rng, BATCH)).collect();
    let valid = batch(&mut rng, 256);
    let weights = BinBytesRecorder::<FullPrecisionSettings>::default()
        .record(SmallCnnConfig::new().with_classes(CLASSES).init::<NdArray>(&Default::default()).into_record(), ())
        .expect("serialise the initial weights");

    let (start, full, none) = train(HybridConfig::all_full(), &weights, &data, &valid);
    assert_eq!(none, 0.0);
    let hybrid_config = HybridConfig::default()
        .with_warmup_steps(20)
        .with_initial_horizon(3)
        .with_max_horizon(6)
        .with_full_steps(1)
        .with_correct_steps(1);
    let (_, hybrid, predicted) = train(hybrid_config, &weights, &data, &valid);
    println!("validation loss: start {start:.4}, full {full:.4}, hybrid {hybrid:.4} with {:.0}% predicted", predicted * 100.0);
    assert!(full < start * 0.8, "the full run must learn: {start} → {full}");
    assert!(predicted >= 0.3, "only {:.0}% of the steps were predicted", predicted * 100.0);
    assert!(
        hybrid <= full + MARGIN * start,
        "hybrid {hybrid} vs full {full} (start {start}, margin {MARGIN}·start)"
    );
}
