//! `--warm-cache`: compile and autotune a run's kernels, then exit.

use std::time::Instant;

use burn::module::AutodiffModule;
use leanburn::data::{evaluation_windows, Split, WindowSampler};
use leanburn::model::{Gpt2, Gpt2Config};
use leanburn::trainer::{cast_params, Precision, PrecisionConfig};
use leanburn::{BackendJob, TrainBackend};
use leanburn::{HybridConfig, HybridTrainer, LrSchedule};

use super::{optimizer, Args};
use crate::common::{bad_input, broke, Failure};

/// The `--warm-cache` job: one training step and one evaluation step per precision (the
/// evaluation computed in it, as a run's validation and predicted steps are), on token
/// windows of the run's shape (the values do not matter to the kernels).
pub struct WarmCache {
    pub args: Args,
    pub config: Gpt2Config,
    pub batch: usize,
    pub seq: usize,
    pub loss_chunk: Option<usize>,
    /// The precisions to warm, where the backend computes in them.
    pub precisions: Vec<Precision>,
}

impl BackendJob for WarmCache {
    type Output = Result<(), Failure>;

    fn run<B: TrainBackend>(self, device: B::Device) -> Self::Output {
        let tokens: Vec<u32> =
            (0..(self.batch + 1) * (self.seq + 1)).map(|i| (i * 7_919 % self.config.vocab_size) as u32).collect();
        let mut sampler =
            WindowSampler::new(self.batch, self.seq, self.args.run.seed).map_err(|e| bad_input(e.to_string()))?;
        let train = sampler.sample(&tokens, Split::Train).map_err(|e| broke(e.to_string()))?;
        // Predicted steps run the training batch forward; validation runs its own batch size.
        let evaluation = [train.clone(), evaluation_windows(&tokens, self.batch.min(8), self.seq, 1).remove(0)];
        for &precision in self.precisions.iter().filter(|p| B::supports_dtype(&device, p.dtype().into())) {
            let started = Instant::now();
            let model: Gpt2<B> =
                self.config.init::<B>(&device).with_loss_chunk(self.loss_chunk).with_attention(self.args.attention);
            let lr = LrSchedule::Constant { lr: 1e-4 };
            let mut trainer = HybridTrainer::new(model, optimizer(), HybridConfig::all_full(), lr, device.clone())
                .and_then(|t| t.with_execution(self.args.execution.config()))
                .and_then(|t| t.with_precision(PrecisionConfig::new(precision)))
                .map_err(|e| broke(e.to_string()))?;
            trainer.step(train.to_device::<B>(&device)).map_err(|e| broke(e.to_string()))?;
            let trained = started.elapsed().as_secs_f64();
            cast_params(trainer.model().valid(), precision.dtype()).evaluate(&evaluation, &device);
            eprintln!(
                "warmed {}: a training step in {trained:.1} s, evaluation in {:.1} s",
                precision.name(),
                started.elapsed().as_secs_f64() - trained
            );
        }
        Ok(())
    }
}
