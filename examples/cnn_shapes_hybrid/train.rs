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

/// An IDX sampler shared by the batch source and the trainer's example feedback (InfoBatch).
type SharedSampler = Arc<Mutex<IdxSampler>>;

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
        let on = B::name(&device);
        let header = |first: usize| self.header(parameters, &on, replicas, first);
        let settings = run_settings(steps, args.eval_every, args.run.checkpoint_every, trainer.config().warmup_steps);
        // Each replica draws its own images; replica 0 the stream a one-device run draws.
        let rank = replica.map_or(0, |replica| replica.rank()) as u64;
        let (source, info_batch) = self.source(args.run.seed.wrapping_add(rank.wrapping_mul(0x9e37_79b9_7f4a_7c15)))?;
        if let Some(sampler) = &info_batch {
            trainer = trainer.with_example_feedback(Arc::clone(sampler));
        }
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
            1 => on,
            n => format!("{n} replicas on {on}"),
        };
        let task = match &args.data {
            Some(dir) => format!("the IDX images in {}", dir.display()),
            None => "shapes".to_string(),
        };
        let title = format!("{} on {task} ({} mode) on {on}", self.config.describe(), args.run.mode.name());
        let mut summary = summary(&title, &outcome, &self.dir, "images");
        if let Some(line) = info_batch.and_then(|sampler| info_batch_line(&sampler)) {
            summary.push_str(&line);
        }
        Ok(Some((summary, outcome)))
    }

    /// The line a run starts with, after `first` steps.
    fn header(&self, parameters: usize, on: &str, replicas: usize, first: usize) -> String {
        let args = &self.args;
        let resolution = self.resolution;
        format!(
            "training a {parameters}-parameter {} on {on} for steps {}..{} ({} mode): \
             batch {} of {resolution}×{resolution} images{}{}, {}{}{}",
            self.config.describe(),
            first + 1,
            args.steps,
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
    }

    /// The batches drawn with `seed`: the IDX images (with InfoBatch's sampler, also
    /// returned, where `--info-batch` prunes), or generated shapes.
    fn source(&self, seed: u64) -> Result<(Source, Option<SharedSampler>), Failure> {
        let args = &self.args;
        let batch = args.batch as usize;
        let Some(images) = &self.images else {
            let sampler = ShapeSampler::new(self.resolution, batch, seed).map_err(|e| bad_input(e.to_string()))?;
            return Ok((Source::Shapes(sampler.with_noise(args.noise)), None));
        };
        let sampler = IdxSampler::new(images.clone(), batch, seed).map_err(|e| bad_input(e.to_string()))?;
        if args.info_batch == 0.0 {
            return Ok((Source::Idx(Arc::new(Mutex::new(sampler))), None));
        }
        let anneal_step = Some((args.info_batch_anneal * args.steps as f64).round() as usize);
        let sampler = sampler
            .with_info_batch(InfoBatchConfig { prune: args.info_batch, anneal_step })
            .map_err(|e| bad_input(format!("--info-batch: {e}")))?;
        let sampler = Arc::new(Mutex::new(sampler));
        Ok((Source::Idx(Arc::clone(&sampler)), Some(sampler)))
    }
}

/// What InfoBatch left out over the run, as a line of the summary.
fn info_batch_line(sampler: &Mutex<IdxSampler>) -> Option<String> {
    let sampler = sampler.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let count = sampler.info_batch().map(|books| books.count())?;
    Some(format!(
        "\nInfoBatch: {} of the {} images of {} epochs left out ({:.0}%), {} epochs pruned",
        count.left_out,
        count.examples,
        count.epochs,
        100.0 * count.left_out_share(),
        count.pruned_epochs,
    ))
}
