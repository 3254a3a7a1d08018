//! The weight average on the trainer's tiny regression (`Autodiff<Flex>`).

use burn::nn::LinearConfig;
use burn::optim::AdamConfig;
use burn::tensor::TensorData;

use super::AverageConfig;
use crate::trainer::tests::{batch, constant_regressor, scratch, weights, Regressor, Train, DEVICE};
use crate::trainer::{HybridConfig, HybridTrainer, LrSchedule, TrainerError};

fn trainer() -> HybridTrainer<
    Train,
    Regressor<Train>,
    impl burn::optim::Optimizer<Regressor<Train>, Train>,
    crate::trainer::tests::Batch,
> {
    HybridTrainer::new(
        constant_regressor(),
        AdamConfig::new().init(),
        HybridConfig::all_full(),
        LrSchedule::Constant { lr: 0.05 },
        DEVICE,
    )
    .expect("valid configuration")
}

fn values(data: &[TensorData]) -> Vec<f32> {
    data.iter().flat_map(|d| d.to_vec::<f32>().unwrap()).collect()
}

#[test]
fn the_average_is_the_moving_average_of_the_weights_after_each_update() {
    let decay = 0.8;
    let mut averaging = trainer().with_weight_average(AverageConfig::new(decay).with_start_step(2)).unwrap();
    assert!(averaging.averaged_model().is_none(), "nothing averaged before the first update");
    // By hand: the live weights after steps 2.. (0-based), folded in at `decay`.
    let mut expected: Option<Vec<f32>> = None;
    for step in 0..7 {
        averaging.step(batch(step)).unwrap();
        let live = values(&weights(averaging.model()));
        if step >= 2 {
            expected = Some(match expected {
                None => live,
                Some(old) => old.iter().zip(&live).map(|(a, w)| decay as f32 * a + (1.0 - decay as f32) * w).collect(),
            });
        }
    }
    let averaged = values(&weights(&averaging.averaged_model().expect("averaged")));
    let expected = expected.unwrap();
    for (a, e) in averaged.iter().zip(&expected) {
        assert!((a - e).abs() <= 1e-6, "{averaged:?} vs {expected:?}");
    }
    assert_eq!(averaging.weight_average().unwrap().observed, 5);
    // It is not the live model (control: the comparison can fail).
    let live = values(&weights(averaging.model()));
    assert!(live.iter().zip(&averaged).any(|(l, a)| (l - a).abs() > 1e-4), "{live:?} vs {averaged:?}");
    assert!(matches!(trainer().with_weight_average(AverageConfig::new(1.0)), Err(TrainerError::Config(_))));
}

#[test]
fn a_resumed_run_continues_the_average_exactly() {
    let dir = scratch("average-resume");
    let config = AverageConfig::new(0.9);
    let mut original = trainer().with_weight_average(config.clone()).unwrap();
    for step in 0..4 {
        original.step(batch(step)).unwrap();
    }
    original.save_checkpoint(&dir).unwrap();
    let resume = || {
        let linear = LinearConfig::new(4, 1).init(&DEVICE);
        HybridTrainer::resume(Regressor::<Train> { linear }, AdamConfig::new().init(), &dir, DEVICE).unwrap()
    };
    let mut resumed = resume().with_weight_average(config).unwrap();
    assert_eq!(
        weights(&resumed.averaged_model().unwrap()),
        weights(&original.averaged_model().unwrap()),
        "restored bit for bit"
    );
    for step in 4..8 {
        original.step(batch(step)).unwrap();
        resumed.step(batch(step)).unwrap();
    }
    let (a, b) =
        (values(&weights(&original.averaged_model().unwrap())), values(&weights(&resumed.averaged_model().unwrap())));
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= 1e-6, "{a:?} vs {b:?}");
    }
    // Control: a checkpoint of a run without an average resumes without one.
    let plain_dir = scratch("average-resume-plain");
    let mut plain = trainer();
    plain.step(batch(0)).unwrap();
    plain.save_checkpoint(&plain_dir).unwrap();
    assert!(!plain_dir.join("ckpt-00000001").join("average.bin").exists());
    assert!(dir.join("ckpt-00000004").join("average.bin").exists());
    for path in [dir, plain_dir] {
        let _ = std::fs::remove_dir_all(path);
    }
}
