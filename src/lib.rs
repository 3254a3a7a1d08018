//! leanburn: memory-bounded training on Burn.
//!
//! Two pieces that work together, and what runs around them:
//!
//! - [`Lean<B>`](Lean), a Burn backend that wraps any other and forwards every op, but runs
//!   convolutions (forward, both gradients, transposed) chunked under a [`ConvBudget`],
//!   and attention, LayerNorm, GELU and AdamW with kernels of its own where `B` is a CubeCL
//!   backend, nothing kept between calls.
//! - [`HybridTrainer`], which trains any Burn model that has a
//!   [`TrainStep`](burn::train::TrainStep) ([`HybridModel`], [`HybridBatch`],
//!   [`StepLoss`]): full steps (forward, backward, optimizer) and, where they pay, predict
//!   blocks and example selection whose forward passes run on the inner backend with no
//!   autodiff graph. [`HybridConfig`] says how it alternates ([`HybridConfig::all_full`]
//!   is plain training), [`LrSchedule`] its learning rate; [`SelectionConfig`] and
//!   [`AverageConfig`] turn on selection and a verified weight average.
//! - [`Runner`], the run loop around the trainer: a [`RunDir`] to start or resume in,
//!   [`RunSettings`] for the validation and checkpoint cadence, a [`MemoryMonitor`] fed
//!   every step, [`RunEvent`]s for a caller to render, a [`RunOutcome`] at the end.
//!   [`HybridStrategy`] runs the same trainer inside burn-train's `SupervisedTraining`.
//! - [`select_backend`] picks CUDA, wgpu or the CPU at run time from [`BackendArgs`], and a
//!   [`BackendJob`] runs generic training code on the one chosen.
//!
//! The names above are the front door. Each module holds the rest of its topic (configs,
//! errors, reports): [`backend`], [`trainer`], [`runner`], [`memory`], [`device`],
//! [`optim`], [`init`]. [`model`] and [`data`] are reference material: the GPT-2 and the
//! CNNs the examples train, their data pipelines, not part of the library's promise.
//!
//! Training a small CNN on generated shapes, with the trainer's defaults (full steps,
//! predict blocks where they pay), through the runner:
//!
//! ```
//! use burn::backend::{Autodiff, Flex};
//! use burn::module::AutodiffModule;
//! use burn::optim::AdamConfig;
//! use burn::tensor::backend::Backend;
//! use leanburn::data::ShapeSampler;
//! use leanburn::model::SmallCnnConfig;
//! use leanburn::{HybridConfig, HybridTrainer, Lean, LrSchedule, RunSettings, Runner, Validation};
//!
//! type Train = Autodiff<Lean<Flex>>;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let device = Default::default();
//! Train::seed(&device, 7);
//! let model = SmallCnnConfig::new().init::<Train>(&device);
//! let lr = LrSchedule::Constant { lr: 1e-2 };
//! let config = HybridConfig::default();
//! let mut trainer = HybridTrainer::new(model, AdamConfig::new().init(), config, lr, device.clone())?;
//!
//! let mut shapes = ShapeSampler::new(12, 16, 0)?;
//! let mut held_out = ShapeSampler::new(12, 16, 1)?;
//! let validation: Vec<_> = (0..4).map(|_| held_out.sample()).collect();
//! // No run directory here, so no checkpoints (`Runner::in_dir` and a `RunDir` keep them).
//! let settings = RunSettings::new(120).with_eval_every(Some(60)).with_checkpoint_every(None);
//! let outcome = Runner::new(settings).run(
//!     &mut trainer,
//!     || Ok::<_, std::convert::Infallible>(shapes.sample()),
//!     |batch| batch.into_device(&device),
//!     |model| {
//!         let evaluation = model.valid().evaluate(validation.iter().map(|batch| batch.to_device(&device)));
//!         Validation { loss: evaluation.loss, accuracy: Some(evaluation.accuracy) }
//!     },
//!     |_event| {},
//! )?;
//!
//! assert_eq!(outcome.records.len(), 120);
//! let (first, last) = (&outcome.validations[0], outcome.validations.last().unwrap());
//! assert!(last.validation.loss < first.validation.loss, "{first:?} → {last:?}");
//! # Ok(())
//! # }
//! ```

pub mod backend;
pub mod data;
pub mod device;
pub mod init;
pub mod memory;
pub mod model;
pub mod optim;
pub mod runner;
pub mod trainer;

pub use burn;

pub use backend::{ConvBudget, Lean};
pub use device::{select as select_backend, BackendArgs, BackendJob, TrainBackend};
pub use memory::{MemoryMonitor, MemoryProbe};
pub use runner::{HybridStrategy, RunDir, RunEvent, RunOutcome, RunSettings, Runner, StartMode, Validation};
pub use trainer::{
    AverageConfig, HybridBatch, HybridConfig, HybridModel, HybridTrainer, LrSchedule, SelectionConfig, StepLoss,
    StepReport, TrainerError,
};
