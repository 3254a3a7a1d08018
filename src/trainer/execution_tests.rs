//! Gradient accumulation and deferred loss reads, end to end on the regressor of
//! [`tests`](super::tests) (`Autodiff<Flex>`: deterministic).

use burn::tensor::{Tensor, TensorData};

use super::tests::{batch, config, poisoned_batch, sgd_trainer, weights, Batch, Regressor, Train, DEVICE};
use super::*;

/// A trainer like [`sgd_trainer`]'s (plain SGD at 0.05), on a copy of `model`.
fn sgd_trainer_on(
    model: &Regressor<Train>,
    config: HybridConfig,
) -> HybridTrainer<Train, Regressor<Train>, impl burn::optim::Optimizer<Regressor<Train>, Train>, Batch> {
    HybridTrainer::new(
        model.clone(),
        burn::optim::SgdConfig::new().init(),
        config,
        LrSchedule::Constant { lr: 0.05 },
        DEVICE,
    )
    .expect("valid configuration")
}

/// Micro-batches `2·step` and `2·step + 1` of the regressor's data, stacked into one batch
/// of twice the rows.
fn stacked(step: usize) -> Batch {
    let (a, b) = (batch(2 * step), batch(2 * step + 1));
    (Tensor::cat(vec![a.0, b.0], 0), Tensor::cat(vec![a.1, b.1], 0))
}

fn close(a: &[TensorData], b: &[TensorData], tolerance: f32) -> bool {
    a.iter().zip(b).all(|(a, b)| {
        let (a, b) = (a.to_vec::<f32>().expect("f32"), b.to_vec::<f32>().expect("f32"));
        a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= tolerance * x.abs().max(1.0))
    })
}

#[test]
fn micro_batches_make_the_update_of_one_large_batch() {
    let accumulating = ExecutionConfig::default().with_accumulation_steps(2);
    let mut micro = sgd_trainer(HybridConfig::all_full()).with_execution(accumulating).expect("valid");
    let mut large = sgd_trainer_on(micro.model(), HybridConfig::all_full());

    for step in 0..5 {
        let a = micro.step_accumulated(vec![batch(2 * step), batch(2 * step + 1)]).expect("accumulated step");
        let b = large.step(stacked(step)).expect("large step");
        assert_eq!(a.items, b.items);
        let (la, lb) = (a.loss.expect("read"), b.loss.expect("read"));
        assert!((la - lb).abs() <= 1e-5 * la.abs().max(1.0), "step {step}: mean loss {la} vs {lb}");
        assert!(
            close(&weights(micro.model()), &weights(large.model()), 1e-5),
            "step {step}: weights differ: {:?} vs {:?}",
            weights(micro.model()),
            weights(large.model())
        );
    }
    assert_eq!(micro.optimizer_step(), 5, "one optimizer step per group of micro-batches");
}

#[test]
fn a_step_refuses_the_wrong_number_of_micro_batches() {
    let accumulating = ExecutionConfig::default().with_accumulation_steps(3);
    let mut trainer = sgd_trainer(config()).with_execution(accumulating).expect("valid");
    let before = weights(trainer.model());
    let message = trainer.step(batch(0)).expect_err("one batch of three").to_string();
    assert!(message.contains("3 micro-batch") && message.contains("got 1"), "{message}");
    assert_eq!(weights(trainer.model()), before);
    assert_eq!(trainer.steps_taken(), 0);
    assert!(sgd_trainer(config()).with_execution(ExecutionConfig::default().with_loss_every(0)).is_err());
}

#[test]
fn the_loss_is_read_every_n_steps_as_the_mean_of_its_window() {
    let every = 4;
    let mut deferred = sgd_trainer(HybridConfig::all_full())
        .with_execution(ExecutionConfig::default().with_loss_every(every))
        .expect("valid");
    let mut eager = sgd_trainer_on(deferred.model(), HybridConfig::all_full());

    let mut window = Vec::new();
    for step in 0..12 {
        let d = deferred.step(batch(step)).expect("deferred step");
        let e = eager.step(batch(step)).expect("eager step");
        window.push(e.loss.expect("read every step"));
        if (step + 1) % every == 0 {
            let mean = window.iter().sum::<f64>() / window.len() as f64;
            let read = d.loss.expect("a reading step");
            assert!((read - mean).abs() <= 1e-6 * mean.abs().max(1.0), "step {step}: {read} vs {mean}");
            assert!(d.memory.is_none(), "the CPU backend has no pool to read");
            let readable = crate::memory::process_memory().is_some();
            assert_eq!(d.host_memory.is_some(), readable, "its host memory is read instead, where readable");
            window.clear();
        } else {
            assert_eq!(d.loss, None, "step {step} should leave its loss on the device");
            assert!(d.host_memory.is_none(), "step {step}: no reading between syncs");
        }
    }
    // Reading less often changes nothing about the training itself.
    assert_eq!(weights(deferred.model()), weights(eager.model()));
}

#[test]
fn a_hybrid_run_reads_before_every_predict_block() {
    let mut trainer =
        sgd_trainer(config()).with_execution(ExecutionConfig::default().with_loss_every(100)).expect("valid");
    let mut records = Vec::new();
    for step in 0..12 {
        records.push(trainer.step(batch(step)).expect("step"));
    }
    for (i, record) in records.iter().enumerate() {
        // A block's first step (the jump and its probe) reads; its later steps run nothing.
        if record.predicted && !records[i - 1].predicted {
            assert!(record.loss.is_some(), "predict step {i} must read its probe");
            let before = &records[i - 1];
            assert!(before.predicted || before.loss.is_some(), "the full step before block {i} must read");
        }
    }
    assert!(records.iter().any(|r| r.predicted), "the run should predict");
    assert!(records.iter().any(|r| r.loss.is_none()), "warmup steps should defer their reads");
}

#[test]
fn a_non_finite_loss_is_caught_at_the_next_reading() {
    let mut trainer = sgd_trainer(HybridConfig::all_full())
        .with_execution(ExecutionConfig::default().with_loss_every(3))
        .expect("valid");
    trainer.step(batch(0)).expect("first step");
    let poisoned = trainer.step(poisoned_batch()).expect("its loss is not read yet");
    assert_eq!(poisoned.loss, None);
    let before = weights(trainer.model());
    let err = trainer.step(batch(2)).expect_err("the window holds a NaN");
    assert!(matches!(err, TrainerError::NonFiniteLoss { step: 2, .. }), "{err}");
    // The reading step's own update is not applied.
    assert_eq!(weights(trainer.model()), before);
}

/// The pool read during steps (`sample_pool_ms`), on llvmpipe: each reading step records
/// the peak inside its steps, which holds the step's batch (4 MiB of rows) and
/// activations; the reading after the step, with all of them gone, is the control. A step
/// that leaves its loss on the device records nothing and its readings go to the next
/// reading step; without the setting, or on a backend without a pool, nothing is read.
/// The reader is a thread waking every millisecond: on a loaded machine it can miss a
/// step's work altogether (seen once in a cold CI run, both lanes busy: six readings of
/// one step, all at 160 bytes in use), so the batch must show in the peak of at least one
/// of the three reading steps, not of each.
#[test]
fn the_pool_read_during_steps_holds_what_the_step_freed() {
    use burn::backend::wgpu::WgpuDevice;
    use burn::backend::{Autodiff, Wgpu};
    type Gpu = Autodiff<Wgpu>;
    const ROWS: usize = 1 << 18;
    let device = WgpuDevice::DefaultDevice;
    let rows = |step: usize| -> (Tensor<Gpu, 2>, Tensor<Gpu, 2>) {
        let inputs: Vec<f32> = (0..ROWS * 4).map(|i| ((i * 37 + step * 53) % 101) as f32 / 50.0 - 1.0).collect();
        let targets: Vec<f32> = inputs.chunks(4).map(|x| x[0] - 0.5 * x[3]).collect();
        (
            Tensor::from_data(TensorData::new(inputs, [ROWS, 4]), &device),
            Tensor::from_data(TensorData::new(targets, [ROWS, 1]), &device),
        )
    };
    let trainer = |execution: ExecutionConfig| {
        let sgd = burn::optim::SgdConfig::new().init();
        let schedule = LrSchedule::Constant { lr: 0.05 };
        HybridTrainer::new(Regressor::<Gpu>::new(&device), sgd, HybridConfig::all_full(), schedule, device.clone())
            .expect("valid configuration")
            .with_execution(execution)
            .expect("valid execution")
    };
    let batch_bytes = (ROWS * 4 * 4) as u64;

    let sampled = ExecutionConfig::default().with_sample_pool_ms(Some(1)).with_loss_every(2);
    let mut sampling = trainer(sampled);
    let mut peaks = Vec::new();
    for step in 0..6 {
        let record = sampling.step(rows(step)).expect("step");
        match (record.loss, record.in_step_peak, record.memory) {
            (None, peak, _) => assert_eq!(peak, None, "step {step} read no loss, so it records no peak"),
            (Some(_), Some(peak), Some(after)) => {
                assert!(peak.peak_reserved >= peak.peak_in_use);
                assert!(after.bytes_in_use < batch_bytes, "the control: after step {step} {after:?} holds the batch");
                peaks.push(peak);
            }
            other => panic!("step {step}: a reading step with a pool records both readings, got {other:?}"),
        }
    }
    assert_eq!(peaks.len(), 3, "steps 1, 3 and 5 read their loss");
    let held = peaks.iter().filter(|peak| peak.peak_in_use >= batch_bytes).count();
    assert!(held >= 1, "no reading step's peak holds the {batch_bytes}-byte batch: {peaks:?}");

    let mut plain = trainer(ExecutionConfig::default());
    assert_eq!(plain.step(rows(0)).expect("step").in_step_peak, None, "no readings unless asked for");
    let mut cpu = sgd_trainer(HybridConfig::all_full())
        .with_execution(ExecutionConfig::default().with_sample_pool_ms(Some(1)))
        .expect("valid");
    assert_eq!(cpu.step(batch(0)).expect("step").in_step_peak, None, "Flex has no pool to read");
}
