//! Verifying the weight average against the live weights: a rejected average changes
//! nothing, an accepted one is the run's model (and is checkpointed as such), a pull
//! moves the live weights, and batch norm's statistics are recomputed for the average
//! without touching the live model's.

use burn::module::AutodiffModule;
use burn::optim::{AdamConfig, SgdConfig};
use burn::tensor::{Tensor, TensorData};

use super::{AverageConfig, Weights};
use crate::trainer::params;
use crate::trainer::predict::snapshot::Snapshot;
use crate::trainer::tests::{batch, constant_regressor, scratch, weights, Batch, Normed, Regressor, Train, DEVICE};
use crate::trainer::{HybridConfig, HybridTrainer, LrSchedule};

/// All-full SGD at `lr` on the constant regressor.
fn sgd(lr: f64) -> HybridTrainer<Train, Regressor<Train>, impl burn::optim::Optimizer<Regressor<Train>, Train>, Batch> {
    HybridTrainer::new(
        constant_regressor(),
        SgdConfig::new().init(),
        HybridConfig::all_full(),
        LrSchedule::Constant { lr },
        DEVICE,
    )
    .expect("valid configuration")
}

fn flat(data: Vec<TensorData>) -> Vec<f32> {
    data.iter().flat_map(|d| d.to_vec::<f32>().unwrap()).collect()
}

#[test]
fn a_rejected_average_changes_nothing() {
    // An average that hardly moves from the first weights loses to SGD's progress.
    let config = AverageConfig::new(0.999).with_pull(0.5);
    let mut averaging = sgd(0.05).with_weight_average(config).unwrap();
    let mut plain = sgd(0.05);
    assert!(averaging.verify_average().unwrap().is_none(), "nothing to verify before the first update");
    for step in 0..12 {
        averaging.step(batch(step)).unwrap();
        plain.step(batch(step)).unwrap();
        if step % 3 == 2 {
            let verdict = averaging.verify_average().unwrap().expect("verified");
            assert_eq!(verdict.chosen, Weights::Live, "{verdict:?}");
            assert!(verdict.average > verdict.live && !verdict.pulled);
        }
    }
    assert_eq!(weights(averaging.model()), weights(plain.model()), "the live weights bit for bit");
    assert_eq!(weights(&averaging.chosen_model()), weights(plain.model()), "the run stands by them");
    let books = averaging.weight_average().unwrap();
    assert_eq!((books.verified, books.chosen, books.standing()), (4, 0, Weights::Live));
    // Its memory: one copy of the parameters (4 weights and a bias, f32); none without it.
    assert_eq!(averaging.statistics().average_bytes, 5 * 4);
    assert_eq!(plain.statistics().average_bytes, 0);
}

#[test]
fn an_accepted_average_is_the_runs_model_and_resumes_as_such() {
    // SGD at 0.9 overshoots along the bias (the inputs' curvature there is about 2):
    // the iterates alternate around the optimum, and their moving average is closer.
    let dir = scratch("average-accepted");
    let config = AverageConfig::new(0.5);
    let mut trainer = sgd(0.9).with_weight_average(config.clone()).unwrap();
    for step in 0..20 {
        trainer.step(batch(step)).unwrap();
    }
    let verdict = trainer.verify_average().unwrap().expect("verified");
    assert_eq!(verdict.chosen, Weights::Average, "{verdict:?}");
    let average = weights(&trainer.averaged_model().unwrap());
    assert_eq!(weights(&trainer.chosen_model()), average, "the chosen model is the average");
    assert_ne!(weights(trainer.model()), average, "and not the live weights (control)");
    assert!(!verdict.pulled, "no pull configured");

    trainer.save_checkpoint(&dir).unwrap();
    let resumed = HybridTrainer::resume(Regressor::<Train>::new(&DEVICE), SgdConfig::new().init(), &dir, DEVICE)
        .unwrap()
        .with_weight_average(config)
        .unwrap();
    assert_eq!(resumed.weight_average().unwrap().last, Some(verdict));
    assert_eq!(weights(&resumed.chosen_model()), average, "a resumed run stands by the same weights");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_pull_moves_the_live_weights_toward_an_accepted_average() {
    let run = |pull: f64| {
        let mut trainer = sgd(0.9).with_weight_average(AverageConfig::new(0.5).with_pull(pull)).unwrap();
        for step in 0..20 {
            trainer.step(batch(step)).unwrap();
        }
        let (live, average) = (flat(weights(trainer.model())), flat(weights(&trainer.averaged_model().unwrap())));
        let verdict = trainer.verify_average().unwrap().unwrap();
        (verdict, live, average, flat(weights(trainer.model())))
    };
    let (verdict, live, average, after) = run(0.5);
    assert!(verdict.pulled && verdict.chosen == Weights::Average, "{verdict:?}");
    for ((l, a), w) in live.iter().zip(&average).zip(&after) {
        assert!((w - (0.5 * l + 0.5 * a)).abs() <= 1e-6, "{after:?} is not halfway from {live:?} to {average:?}");
    }
    // Control: without a pull the live weights stay where they were.
    let (verdict, live, _, after) = run(0.0);
    assert!(!verdict.pulled);
    assert_eq!(live, after);
    assert!(AverageConfig::new(0.9).with_pull(1.5).validate().is_err());
}

/// A batch of the regression's inputs shifted by `shift`: batch norm's statistics for it
/// are far from those of the training batches.
fn shifted(step: usize, shift: f32) -> Batch {
    let (inputs, targets) = batch(step);
    (inputs.add_scalar(shift), targets)
}

fn running_mean(model: &Normed<Train>) -> Vec<f32> {
    model.valid().norm.running_mean.value().into_data().to_vec::<f32>().unwrap()
}

#[test]
fn batch_norm_statistics_are_recomputed_for_the_average_and_the_live_ones_kept() {
    let probe = vec![shifted(100, 3.0)];
    let probe_mean: Vec<f32> = {
        let inputs: Tensor<Train, 2> = probe[0].0.clone();
        inputs.mean_dim(0).into_data().to_vec::<f32>().unwrap()
    };
    let run = |passes: usize| {
        let mut trainer = HybridTrainer::new(
            Normed::<Train>::new(&DEVICE),
            AdamConfig::new().init(),
            HybridConfig::all_full(),
            LrSchedule::Constant { lr: 0.01 },
            DEVICE,
        )
        .unwrap()
        .with_probe_set(probe.clone())
        .unwrap()
        .with_weight_average(AverageConfig::new(0.8).with_statistics_passes(passes))
        .unwrap();
        for step in 0..6 {
            trainer.step(batch(step)).unwrap();
        }
        let live_before = running_mean(trainer.model());
        let verdict = trainer.verify_average().unwrap().unwrap();
        assert_eq!(running_mean(trainer.model()), live_before, "the live statistics are left alone");
        (verdict, running_mean(&trainer.averaged_model().unwrap()), live_before)
    };
    // 40 passes leave 0.9^40 (1.5%) of the averaged statistics: the probe batch's mean.
    let (recomputed, mean, _) = run(40);
    for (m, p) in mean.iter().zip(&probe_mean) {
        assert!((m - p).abs() <= 0.03 * p.abs().max(1.0), "running mean {mean:?} vs the probe's {probe_mean:?}");
    }
    // Control: without the passes the average carries statistics of the training batches,
    // which give the average another probe loss.
    let (stale, stale_mean, _) = run(0);
    assert!(stale_mean.iter().zip(&probe_mean).all(|(m, p)| (m - p).abs() > 1.0), "{stale_mean:?}");
    assert!((stale.average - recomputed.average).abs() > 1e-3 * recomputed.average, "{stale:?} vs {recomputed:?}");
    assert_eq!(stale.live, recomputed.live, "the live side is the same run");
}

#[test]
fn restoring_into_a_plain_clone_would_overwrite_the_live_statistics() {
    // Why `averaged_model` restores into a copy made through the inner module: Burn's
    // running statistics are shared by a module's clones, and `map` writes into them.
    let model = Normed::<Train>::new(&DEVICE);
    drop(<Normed<Train> as burn::train::TrainStep>::step(&model, shifted(0, 3.0)));
    let before = running_mean(&model);
    // The same parameters (same ids) with statistics of other data, in a copy of its own.
    let other = Normed::<Train>::from_inner(model.valid());
    drop(<Normed<Train> as burn::train::TrainStep>::step(&other, shifted(0, -5.0)));
    assert_eq!(running_mean(&model), before, "the copy's statistics are its own");
    let _restored = Snapshot::Device(params::collect(&other.valid())).restore::<Train, _>(model.clone());
    assert_ne!(running_mean(&model), before, "the clone's restore reached the original");
}
