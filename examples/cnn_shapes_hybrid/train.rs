//! The training job on the chosen backend: the network built, trained on one device or
//! data-parallel on several, validated and summed up.

use burn::collective::CollectiveConfig;
use burn::optim::AdamConfig;
use burn::prelude::{Int, Tensor};
use std::sync::{Arc, Mutex};

use leanburn::data::{IdxSampler, ImageBatch, InfoBatchConfig, ShapeSampler};
use leanburn::device::ReplicatedJob;
use leanburn::model::{ConvClassifier, Evaluation, ResNet};
use leanburn::runner::{data_parallel, RunError};
use leanburn::trainer::{ExampleLosses, ForwardLoss, Replica};
use leanburn::ConvBudget;
use leanburn::HybridModel;
use leanburn::{BackendJob, TrainBackend};
use leanburn::{RunOutcome, Validation};

use super::{ConvPath, NetConfig, Plan, Source};
use crate::common::{bad_input, run_settings, start_trainer, summary, train, Failure};

impl BackendJob for Plan {
    type Output = Result<(String, RunOutcome), Failure>;

    fn run<B: TrainBackend>(self, device: B::Device) -> Self::Output {
        self.run_on::<B>(vec![device], false)
    }
}

impl ReplicatedJob for Plan {
    type Output = Result<(String, RunOutcome), Failure>;

    fn run<B: TrainBackend>(self, devices: Vec<B::Device>) -> Self::Output {
        self.run_on::<B>(devices, true)
    }
}

type Labelled<B> = (Tensor<B, 4>, Tensor<B, 1, Int>);

impl Plan {
    /// Builds the network on the first device and trains it: there alone, or on every
    /// device as one data-parallel replica each (`parallel`).
    fn run_on<B: TrainBackend>(self, devices: Vec<B::Device>, parallel: bool) -> Result<(String, RunOutcome), Failure> {
        let device = devices[0].clone();
        B::seed(&device, self.args.run.seed);
        match &self.config {
            NetConfig::Plain(config) => {
                let model: ConvClassifier<B> = config.init(&device);
                self.train_on(model, devices, parallel, |model, batches| model.evaluate(batches))
            }
            NetConfig::ResNet(config) => {
                let model: ResNet<B> = config.init(&device);
                self.train_on(model, devices, parallel, |model, batches| model.evaluate(batches))
            }
        }
    }

    /// Trains `model` on `devices`: on the one, or data-parallel on all (replica 0's
    /// outcome is the run's).
    fn train_on<B, M>(
        &self,
        model: M,
        devices: Vec<B::Device>,
        parallel: bool,
        evaluate: impl Fn(&M::InnerModule, Vec<Labelled<B::InnerBackend>>) -> Evaluation + Sync,
    ) -> Result<(String, RunOutcome), Failure>
    where
        B: TrainBackend,
        M: HybridModel<B, Labelled<B>> + ForwardLoss<B, Input = Labelled<B>> + Send,
        M: ExampleLosses<B, Input = Labelled<B>>,
        M::InnerModule: ExampleLosses<B::InnerBackend, Input = Labelled<B::InnerBackend>>,
    {
        if !parallel {
            let device = devices[0].clone();
            return self.train(model, device, None, &evaluate)?.ok_or_else(|| unreachable!("one device leads"));
        }
        let job = |replica: Replica, model: M, device: B::Device| -> Result<_, RunError> {
            Ok(self.train(model, device, Some(replica), &evaluate)?)
        };
        let outcomes = data_parallel::<B, M, _, _>(&devices, CollectiveConfig::default(), model, job)?;
        Ok(outcomes.into_iter().next().flatten().expect("replica 0 returns the outcome"))
    }

    /// Trains `model` on `device` (as `replica` of a data-parallel run), validating its
    /// inference copy with `evaluate`; the summary and outcome, which replicas other than
    /// 0 do not have.
    fn train<B, M>(
        &self,
        model: M,
        device: B::Device,
        replica: Option<Replica>,
        evaluate: &impl Fn(&M::InnerModule, Vec<Labelled<B::InnerBackend>>) -> Evaluation,
    ) -> Result<Option<(String, RunOutcome)>, Failure>
    where
        B: TrainBackend,
        M: HybridModel<B, Labelled<B>> + ForwardLoss<B, Input = Labelled<B>> + ExampleLosses<B, Input = Labelled<B>>,
        M::InnerModule: ExampleLosses<B::InnerBackend, Input = Labelled<B::InnerBackend>>,
    {
        let args = &self.args;
        let steps = args.steps as usize;
        let parameters = model.num_params();
        let selection = args.select.config(steps, args.run.seed)?;
        let start = args.run.start(args.lr, steps, &args.execution, &args.average, selection)?;
        let mut trainer = start_trainer(model, AdamConfig::new().init(), &start, &self.dir, device.clone(), replica)?;
        let replicas = replica.map_or(1, |replica| replica.replicas());
        let resolution = self.resolution;
        let header = |first: usize| {
            format!(
                "training a {parameters}-parameter {} on {} for steps {}..{steps} ({} mode): \
                 batch {} of {resolution}×{resolution} images{}{}, {}{}{}",
                self.config.describe(),
                B::name(&device),
                first + 1,
                args.run.mode.name(),
                args.batch,
                match replicas {
                    1 => String::new(),
                    n => format!(" on each of {n} replicas (effective batch {})", args.batch as usize * n),
                },
                match args.execution.accum {
                    1 => String::new(),
                    k => format!(" × {k} micro-batches (effective batch {})", args.batch * k),
                },
                match args.conv {
                    ConvPath::Lean => format!("{}-MiB conv workspace", ConvBudget::current().bytes() >> 20),
                    ConvPath::Stock => "stock Burn convolutions".to_string(),
                },
                args.execution.describe_checkpointing(),
                args.execution.describe_precision(),
            )
        };
        let settings = run_settings(steps, args.eval_every, args.run.checkpoint_every, trainer.config().warmup_steps);
        // Each replica draws its own images; replica 0 the stream a one-device run draws.
        let rank = replica.map_or(0, |replica| replica.rank()) as u64;
        let seed = args.run.seed.wrapping_add(rank.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let batch = args.batch as usize;
        let mut info_batch = None;
        let source = match &self.images {
            Some(images) => {
                let sampler = IdxSampler::new(images.clone(), batch, seed).map_err(|e| bad_input(e.to_string()))?;
                let sampler = match args.info_batch {
                    0.0 => sampler,
                    prune => {
                        let anneal_step = Some((args.info_batch_anneal * steps as f64).round() as usize);
                        sampler
                            .with_info_batch(InfoBatchConfig { prune, anneal_step })
                            .map_err(|e| bad_input(format!("--info-batch: {e}")))?
                    }
                };
                let sampler = Arc::new(Mutex::new(sampler));
                if args.info_batch > 0.0 {
                    trainer = trainer.with_example_feedback(Arc::clone(&sampler));
                    info_batch = Some(Arc::clone(&sampler));
                }
                Source::Idx(sampler)
            }
            None => Source::Shapes(
                ShapeSampler::new(resolution, batch, seed)
                    .map_err(|e| bad_input(e.to_string()))?
                    .with_noise(args.noise),
            ),
        };
        let to_device = |batch: ImageBatch| batch.into_device::<B>(&device);
        let validate = |model: &M| {
            let evaluation = evaluate(&model.valid(), self.validation.iter().map(|b| b.to_device(&device)).collect());
            Validation { loss: evaluation.loss, accuracy: Some(evaluation.accuracy) }
        };
        let outcome = train(&mut trainer, &self.dir, settings, "img", header, source, to_device, validate)?;
        if replica.is_some_and(|replica| !replica.is_leader()) {
            return Ok(None);
        }
        let on = match replicas {
            1 => B::name(&device),
            n => format!("{n} replicas on {}", B::name(&device)),
        };
        let task = match &args.data {
            Some(dir) => format!("the IDX images in {}", dir.display()),
            None => "shapes".to_string(),
        };
        let title = format!("{} on {task} ({} mode) on {on}", self.config.describe(), args.run.mode.name());
        let mut summary = summary(&title, &outcome, &self.dir, "images");
        if let Some(sampler) = info_batch {
            let sampler = sampler.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if let Some(count) = sampler.info_batch().map(|books| books.count()) {
                summary.push_str(&format!(
                    "\nInfoBatch: {} of the {} images of {} epochs left out ({:.0}%), {} epochs pruned",
                    count.left_out,
                    count.examples,
                    count.epochs,
                    100.0 * count.left_out_share(),
                    count.pruned_epochs,
                ));
            }
        }
        Ok(Some((summary, outcome)))
    }
}
