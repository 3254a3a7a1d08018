//! One replica of a data-parallel run, and the reductions that keep replicas in step.
//!
//! Every replica holds the whole model and optimizer and trains on its own share of each
//! batch. The values the trainer acts on are reduced across replicas through
//! burn-collective's all-reduce (Burn's own collective machinery, not one of ours): the
//! gradients before the optimizer, the loss the guard reads, the probe losses a predict
//! block is judged on, and the loss scaler's overflow check. Every replica therefore
//! takes the same decisions and applies the same update, and the replicas never diverge.
//!
//! Buffers no gradient moves (batch norm's running statistics) need nothing here: Burn's
//! `RunningState` is shared by every copy of one model and averages the updates of the
//! threads that use it, which is what the replicas of one process are. Replicas on other
//! nodes keep their own (see `docs/parallel.md`). A predicted
//! step needs no gradient all-reduce: each replica applies the same predicted update from
//! its own (identical) predictor; only the two probe losses are reduced.

use burn::collective::{self, CollectiveConfig, CollectiveError, PeerId, ReduceOperation};
use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData, TensorPrimitive};

use super::error::TrainerError;

/// This process's place in a data-parallel run: replica `rank` of `replicas`.
///
/// Made by [`Replica::join`] on the replica's own thread (the
/// [runner](crate::runner::data_parallel) does it), and handed to
/// [`HybridTrainer::with_replica`](super::HybridTrainer::with_replica).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replica {
    rank: usize,
    replicas: usize,
}

impl Replica {
    /// Joins the collective as replica `rank` of `replicas` on `device` of the inner
    /// (non-autodiff) backend `I`. Blocks until every replica of this node has joined
    /// (and, with `config`'s global settings, every node).
    pub fn join<I: Backend>(
        rank: usize,
        replicas: usize,
        device: &I::Device,
        config: CollectiveConfig,
    ) -> Result<Self, TrainerError> {
        let replica = Self { rank, replicas };
        collective::register::<I>(replica.peer(), device.clone(), config).map_err(|err| replica.failed("join", err))?;
        Ok(replica)
    }

    /// This replica's rank, from 0.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// How many replicas the run has.
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// Whether this is replica 0, the one that writes checkpoints, step records and the
    /// validation log.
    pub fn is_leader(&self) -> bool {
        self.rank == 0
    }

    /// Leaves the collective at the end of a run.
    pub fn leave<I: Backend>(self) -> Result<(), TrainerError> {
        collective::finish_collective::<I>(self.peer()).map_err(|err| self.failed("leave", err))
    }

    /// Releases every replica waiting in a reduction with an error: what a replica that
    /// failed does, so that the others stop instead of waiting for it forever.
    pub fn abort<I: Backend>() {
        collective::reset_collective::<I>();
    }

    fn peer(&self) -> PeerId {
        PeerId(self.rank as u32)
    }

    fn failed(&self, what: &str, err: CollectiveError) -> TrainerError {
        TrainerError::Replica { rank: self.rank, reason: format!("{what}: {err:?}") }
    }

    /// The mean of every replica's gradients, in every replica.
    pub(super) fn mean_gradients<I: Backend>(&self, grads: GradientsParams) -> Result<GradientsParams, TrainerError> {
        grads.all_reduce::<I>(self.peer(), ReduceOperation::Mean).map_err(|err| self.failed("gradient all-reduce", err))
    }

    /// The element-wise mean of `tensor` over the replicas.
    pub(super) fn mean<I: Backend, const D: usize>(&self, tensor: Tensor<I, D>) -> Result<Tensor<I, D>, TrainerError> {
        self.reduce(tensor, ReduceOperation::Mean)
    }

    /// The element-wise sum of `tensor` over the replicas.
    pub(super) fn sum<I: Backend, const D: usize>(&self, tensor: Tensor<I, D>) -> Result<Tensor<I, D>, TrainerError> {
        self.reduce(tensor, ReduceOperation::Sum)
    }

    fn reduce<I: Backend, const D: usize>(
        &self,
        tensor: Tensor<I, D>,
        op: ReduceOperation,
    ) -> Result<Tensor<I, D>, TrainerError> {
        let reduced = collective::all_reduce::<I>(self.peer(), tensor.into_primitive().tensor(), op)
            .map_err(|err| self.failed("all-reduce", err))?;
        Ok(Tensor::from_primitive(TensorPrimitive::Float(reduced)))
    }

    /// Fails unless every replica has taken `steps` steps: replicas resumed from different
    /// checkpoints would otherwise train on apart.
    pub(super) fn check_same_step<I: Backend>(&self, steps: usize, device: &I::Device) -> Result<(), TrainerError> {
        // Replicas that differ leave at least one at half a step or more from the mean,
        // and that one fails the run. (A square for the spread would lose its exactness in
        // f32 after a few thousand steps.)
        let local = [steps as f32];
        let mean = self.read(self.mean(Tensor::<I, 1>::from_data(TensorData::from(local), device))?)?;
        if (mean[0] - local[0]).abs() > 0.25 {
            return Err(TrainerError::Replica {
                rank: self.rank,
                reason: format!(
                    "this replica starts after step {steps}, others elsewhere (a mean of {:.1}): resume every \
                     replica from the same checkpoint",
                    mean[0]
                ),
            });
        }
        Ok(())
    }

    fn read<I: Backend, const D: usize>(&self, tensor: Tensor<I, D>) -> Result<Vec<f32>, TrainerError> {
        tensor.into_data().to_vec::<f32>().map_err(|err| TrainerError::Replica {
            rank: self.rank,
            reason: format!("reading a reduced value: {err:?}"),
        })
    }

    /// Fails unless every replica holds a model with the same parameters (the same
    /// [`ParamId`]s, the key every reduction pairs tensors by), as it does when every
    /// replica's model is a copy of one model; models built separately get new ids.
    pub(super) fn check_same_parameters<B, M>(&self, model: &M, device: &B::Device) -> Result<(), TrainerError>
    where
        B: AutodiffBackend,
        M: AutodiffModule<B>,
    {
        let mut ids = ParamIds(Vec::new());
        model.visit(&mut ids);
        ids.0.sort_unstable();
        // Two 11-bit digests and their squares, exact in f32: equal on every replica if
        // and only if mean(d²) = mean(d)² for both; and the count.
        let hash = |seed: u64| ids.0.iter().fold(seed, |h, id| (h ^ id).wrapping_mul(0x100_0000_01b3)) >> 53;
        let (a, b) = (hash(0xcbf2_9ce4_8422_2325) as f32, hash(0x84222325_cbf29ce4) as f32);
        let count = ids.0.len() as f32;
        let local = [a, a * a, b, b * b, count];
        let tensor = Tensor::<B::InnerBackend, 1>::from_data(TensorData::from(local), device);
        let mean = self.read(self.mean(tensor)?)?;
        let spread = |m: f32, m2: f32| (m2 - m * m).abs() > 0.25;
        if mean[4] != count || mean[0] != a || mean[2] != b || spread(mean[0], mean[1]) || spread(mean[2], mean[3]) {
            return Err(TrainerError::Replica {
                rank: self.rank,
                reason: "the replicas' models have different parameters: give every replica a copy of one \
                         model (`model.clone().fork(&device)`), not a model built on its own"
                    .into(),
            });
        }
        Ok(())
    }
}

struct ParamIds(Vec<u64>);

impl<B: Backend> ModuleVisitor<B> for ParamIds {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.0.push(param.id.val());
    }
}
