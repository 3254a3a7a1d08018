//! Learning parity: at equal steps, `HybridTrainer` with its default configuration ends
//! within 2% of all-full training's validation loss. Control: a hybrid run whose blocks
//! are all kept but move the weights by nothing (the skip ablation: a third of the steps
//! lost) misses that bar, so the bar can fail.
//!
//! The task is learnable but not trivial (the class shifts the brightness of one colour
//! channel under noise); every run starts from the same weights and sees the same batches,
//! on the deterministic `Flex` backend.

use burn::backend::{Autodiff, Flex};
use burn::module::AutodiffModule;
use burn::optim::AdamConfig;
use burn::prelude::*;
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::AutodiffBackend;
use leanburn::model::{SmallCnn, SmallCnnConfig};
use leanburn::{HybridConfig, HybridTrainer, LrSchedule};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

type B = Autodiff<Flex>;

const STEPS: usize = 150;
const BATCH: usize = 8;
const SIDE: usize = 8;
const CLASSES: usize = 4;
/// Hybrid's final validation loss may exceed all-full's by at most this fraction.
const MARGIN: f64 = 0.02;

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
/// predicted steps, blocks tried: kept or rolled back).
fn train(
    config: HybridConfig,
    weights: &[u8],
    train: &[(TensorData, TensorData)],
    valid: &(TensorData, TensorData),
) -> (f64, f64, f64, usize) {
    let device = Default::default();
    let record = BinBytesRecorder::<FullPrecisionSettings>::default().load(weights.to_vec(), &device).expect("weights");
    let model = SmallCnnConfig::new().with_classes(CLASSES).init::<B>(&device).load_record(record);
    let start = validation_loss(&model, valid);
    let mut trainer =
        HybridTrainer::new(model, AdamConfig::new().init(), config, LrSchedule::Constant { lr: 1e-2 }, device)
            .expect("valid configuration");
    let mut blocks = 0;
    for batch in train.iter().take(STEPS) {
        let record = trainer.step(to_device::<B>(batch)).expect("training");
        // A block's first step: kept (predicted and probed) or rolled back.
        blocks += usize::from(record.rolled_back || (record.predicted && record.loss.is_some()));
    }
    let statistics = trainer.statistics();
    assert_eq!(statistics.steps, STEPS);
    let predicted = statistics.predict_steps as f64 / STEPS as f64;
    (start, validation_loss(trainer.model(), valid), predicted, blocks)
}

#[test]
fn hybrid_training_ends_within_two_percent_of_full_training() {
    let mut rng = SmallRng::seed_from_u64(7);
    <Flex as Backend>::seed(&Default::default(), 7);
    let data: Vec<_> = (0..STEPS).map(|_| batch(&mut rng, BATCH)).collect();
    let valid = batch(&mut rng, 256);
    let weights = BinBytesRecorder::<FullPrecisionSettings>::default()
        .record(SmallCnnConfig::new().with_classes(CLASSES).init::<Flex>(&Default::default()).into_record(), ())
        .expect("serialise the initial weights");

    let (start, full, none, _) = train(HybridConfig::all_full(), &weights, &data, &valid);
    assert_eq!(none, 0.0);
    let (_, hybrid, predicted, blocks) = train(HybridConfig::default(), &weights, &data, &valid);
    // Control: every block kept, each jumping by nothing.
    let skipping = HybridConfig::default()
        .with_min_gain(-1e9)
        .with_min_confidence(0.0)
        .with_min_scale(1e-12)
        .with_initial_scale(1e-12)
        .with_max_scale(1e-12);
    let (_, control, control_predicted, _) = train(skipping, &weights, &data, &valid);
    println!(
        "validation loss: start {start:.4}, full {full:.4}, hybrid {hybrid:.4} with {:.0}% predicted ({blocks} blocks \
         tried), skipping {control:.4} with {:.0}% of the steps skipped",
        predicted * 100.0,
        control_predicted * 100.0
    );
    assert!(full < start * 0.8, "the full run must learn: {start} → {full}");
    assert!(blocks > 0, "the hybrid run never tried a block");
    assert!(hybrid <= full * (1.0 + MARGIN), "hybrid {hybrid} vs full {full} (margin {MARGIN})");
    assert!(
        control > full * (1.0 + MARGIN),
        "control: skipping {:.0}% of the steps should miss the bar: {control} vs full {full}",
        control_predicted * 100.0
    );
}
