//! Selection scores every example forward only on the inner model: training with it keeps
//! `bytes_in_use` flat, while the same scoring on the autodiff model (a graph nobody
//! consumes) grows every step.

use crate::common::{exclusive_device, image_batch, wgpu_device, CLASSES};
use crate::soak;
use burn::backend::{Autodiff, Wgpu};
use burn::module::AutodiffModule;
use burn::optim::SgdConfig;
use leanburn::memory::LeakVerdict;
use leanburn::model::SmallCnnConfig;
use leanburn::trainer::{ExampleLosses, SelectionRule};
use leanburn::MemoryMonitor;
use leanburn::{HybridConfig, HybridTrainer, LrSchedule, SelectionConfig};

type B = Autodiff<Wgpu>;

const STEPS: usize = 40;
const SETTLE: usize = 5;
const BATCH: usize = 4;
const SIDE: usize = 32;

#[test]
fn selecting_steps_score_without_a_graph_and_stay_flat() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    let model = SmallCnnConfig::new().with_classes(CLASSES).init::<B>(&device);
    let half = SelectionConfig::new(SelectionRule::TopFraction { keep: 0.5 });
    let mut trainer = HybridTrainer::new(
        model,
        SgdConfig::new().init(),
        HybridConfig::all_full(),
        LrSchedule::Constant { lr: 1e-2 },
        device.clone(),
    )
    .expect("valid configuration")
    .with_selection(half)
    .expect("valid selection");
    let result = soak(&mut trainer, STEPS, SETTLE, |step| image_batch::<B>(BATCH, SIDE, step as u64, &device));
    assert_eq!(result.leak.verdict, LeakVerdict::Flat, "{result}");
    assert_eq!(trainer.statistics().selected_share(), Some(0.5), "every step selected half");
}

/// Scoring alone, pass after pass with no backward pass between: on the inner model (what
/// the trainer scores on) nothing stays; on the autodiff model each pass's graph and
/// activations stay until a backward pass (Burn frees orphaned nodes then), so the pool
/// grows with every pass, as a step's peak would by one scoring pass's activations.
#[test]
fn scoring_on_the_inner_model_keeps_nothing_where_the_autodiff_model_keeps_its_graph() {
    let _guard = exclusive_device();
    let device = wgpu_device();
    let model = SmallCnnConfig::new().with_classes(CLASSES).init::<B>(&device);
    let passes = 20;
    let score = |on_inner: bool| {
        let mut monitor = MemoryMonitor::<B>::new(device.clone(), passes);
        for pass in 0..passes {
            let (images, labels) = image_batch::<B>(BATCH, SIDE, pass as u64, &device);
            let scores = if on_inner {
                model.valid().example_losses((images.inner(), labels.inner())).into_data()
            } else {
                model.example_losses((images, labels)).into_data()
            };
            assert_eq!(scores.shape.iter().product::<usize>(), BATCH);
            monitor.sample(pass as u64);
        }
        monitor.report().leak.expect("sampled")
    };
    let inner = score(true);
    assert_eq!(inner.verdict, LeakVerdict::Flat, "{inner}");
    // Control: the same scoring on the autodiff model.
    let autodiff = score(false);
    assert_eq!(autodiff.verdict, LeakVerdict::Growing, "{autodiff}");
}
