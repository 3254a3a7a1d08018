//! Loss scaling end to end on the regressor of [`tests`](super::tests)
//! (`Autodiff<Flex>`; the scaler runs on f32 here, f16 on a GPU-class backend is tested in
//! `tests/vram_stability/precision.rs`).

use burn::tensor::{Tensor, TensorData};

use super::tests::{batch, config, sgd_trainer, weights, Batch, DEVICE, ROWS};
use super::*;

/// A batch whose inputs are so large that the squared error overflows f32: an injected
/// overflow, as a half-precision model meets one when its loss scale is too high.
fn overflowing_batch() -> Batch {
    let (_, targets) = batch(0);
    let inputs = Tensor::from_data(TensorData::new(vec![3e19f32; ROWS * 4], [ROWS, 4]), &DEVICE);
    (inputs, targets)
}

fn scaled(initial_scale: f64) -> PrecisionConfig {
    PrecisionConfig::new(Precision::F32)
        .with_loss_scale(Some(LossScaleConfig::default().with_initial_scale(initial_scale).with_growth_interval(3)))
}

#[test]
fn a_scaled_loss_makes_the_same_update_as_an_unscaled_one() {
    let mut plain = sgd_trainer(HybridConfig::all_full());
    let mut scaled_trainer = sgd_trainer(HybridConfig::all_full()).with_precision(scaled(1024.0)).expect("valid");
    // Same start: copy the weights across.
    scaled_trainer.model = Some(plain.model().clone());
    for step in 0..6 {
        let a = plain.step(batch(step)).expect("plain step");
        let b = scaled_trainer.step(batch(step)).expect("scaled step");
        assert_eq!(b.loss_scale, Some(if step < 3 { 1024.0 } else { 2048.0 }), "grows after 3 clean steps");
        assert!(!b.overflow);
        let (la, lb) = (a.loss.expect("read"), b.loss.expect("read"));
        assert!((la - lb).abs() <= 1e-6 * la.abs().max(1.0), "step {step}: {la} vs {lb}");
        for (x, y) in weights(plain.model()).iter().zip(&weights(scaled_trainer.model())) {
            let (x, y) = (x.to_vec::<f32>().expect("f32"), y.to_vec::<f32>().expect("f32"));
            assert!(x.iter().zip(&y).all(|(x, y)| (x - y).abs() <= 1e-5), "step {step}: {x:?} vs {y:?}");
        }
    }
}

#[test]
fn an_overflowing_step_is_skipped_lowers_the_scale_and_training_goes_on() {
    let mut trainer = sgd_trainer(HybridConfig::all_full()).with_precision(scaled(65_536.0)).expect("valid");
    let first = trainer.step(batch(0)).expect("a clean step").loss.expect("read");
    let before = weights(trainer.model());
    let optimizer_step = trainer.optimizer_step();

    let record = trainer.step(overflowing_batch()).expect("an overflow is not an error");
    assert!(record.overflow, "{record:?}");
    assert_eq!(record.loss_scale, Some(65_536.0));
    assert_eq!(trainer.loss_scaler().expect("a scaler").scale(), 32_768.0);
    assert_eq!(weights(trainer.model()), before, "the update was skipped");
    assert_eq!(trainer.optimizer_step(), optimizer_step, "the schedule did not move");
    assert_eq!(trainer.statistics().overflow_steps, 1);

    let mut last = first;
    for step in 1..40 {
        let record = trainer.step(batch(step)).expect("a clean step");
        assert!(!record.overflow);
        last = record.loss.expect("read");
    }
    assert!(last < first / 4.0, "training went on after the overflow: {first} → {last}");
}

#[test]
fn hybrid_steps_run_with_loss_scaling() {
    let mut trainer = sgd_trainer(config()).with_precision(scaled(256.0)).expect("valid");
    for step in 0..30 {
        trainer.step(batch(step)).expect("step");
    }
    let statistics = trainer.statistics();
    assert!(statistics.predict_steps > 0, "{statistics:?}");
    assert_eq!(statistics.overflow_steps, 0);
    let loss = statistics.last_loss.expect("a loss");
    assert!(loss.is_finite() && loss < 1.0, "{loss}");
}

#[test]
fn a_precision_the_backend_lacks_is_refused_by_name() {
    use burn::backend::ndarray::NdArrayDevice;
    use burn::backend::{Autodiff, NdArray};
    type F32Only = Autodiff<NdArray>;
    let device = NdArrayDevice::Cpu;
    for precision in [Precision::F16, Precision::Bf16] {
        let model = super::tests::Regressor::<F32Only>::new(&device);
        let lr = LrSchedule::Constant { lr: 0.05 };
        let trainer = HybridTrainer::<F32Only, _, _, (Tensor<F32Only, 2>, Tensor<F32Only, 2>)>::new(
            model,
            burn::optim::SgdConfig::new().init(),
            config(),
            lr,
            device,
        )
        .expect("valid configuration");
        let error = trainer.with_precision(PrecisionConfig::new(precision)).err().expect("ndarray is f32 only");
        assert!(matches!(error, TrainerError::UnsupportedPrecision { .. }), "{error}");
        assert!(error.to_string().contains(precision.name()), "{error}");
        // The control: the default CPU backend has both half types.
        assert!(sgd_trainer(config()).with_precision(PrecisionConfig::new(precision)).is_ok(), "{precision}");
    }
    let bad = PrecisionConfig::new(Precision::F32)
        .with_loss_scale(Some(LossScaleConfig { growth_factor: 0.5, ..LossScaleConfig::default() }));
    assert!(sgd_trainer(config()).with_precision(bad).is_err());
}
