//! Gradient accumulation: the mean of the gradients of `k` micro-batches, one backward
//! pass at a time.

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::{GradientsAccumulator, GradientsParams};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;

/// Sums micro-batch gradients with Burn's [`GradientsAccumulator`] and hands back their
/// mean. Only one set of gradients is held beyond the micro-batch being computed.
pub struct MicroBatchGradients<M> {
    sum: GradientsAccumulator<M>,
    micro_batches: usize,
}

impl<M> Default for MicroBatchGradients<M> {
    fn default() -> Self {
        Self { sum: GradientsAccumulator::new(), micro_batches: 0 }
    }
}

impl<M> MicroBatchGradients<M> {
    /// Adds one micro-batch's gradients of `model`'s parameters.
    pub fn add<B: AutodiffBackend>(&mut self, model: &M, grads: GradientsParams)
    where
        M: AutodiffModule<B>,
    {
        self.sum.accumulate(model, grads);
        self.micro_batches += 1;
    }

    /// The mean gradient over the micro-batches added; the accumulator starts empty again.
    pub fn mean<B: AutodiffBackend>(&mut self, model: &M) -> GradientsParams
    where
        M: AutodiffModule<B>,
    {
        let mut grads = self.sum.grads();
        if self.micro_batches > 1 {
            let factor = 1.0 / self.micro_batches as f64;
            model.visit(&mut Scale { grads: &mut grads, factor });
        }
        self.micro_batches = 0;
        grads
    }
}

/// Multiplies every parameter's gradient by `factor`.
struct Scale<'a> {
    grads: &'a mut GradientsParams,
    factor: f64,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Scale<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(grad) = self.grads.remove::<B::InnerBackend, D>(param.id) {
            self.grads.register::<B::InnerBackend, D>(param.id, grad.mul_scalar(self.factor));
        }
    }
}
