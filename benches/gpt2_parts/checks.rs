//! Before the step is timed: leanburn's LayerNorm against Burn's, the LM head's loss and
//! gradients, the token embedding's gradient and a bias's on the device against the same
//! ops on the CPU, its clipping factor
//! against the host's (f64, from the gradients read back: Burn's own `sum` is wrong on wgpu
//! past a million elements), and one AdamW step against Burn's AdamW, on the backend under
//! test, once each, so that a kernel that is wrong on a new device shows as a number here,
//! not only as a fast or slow row (as the attention part checks its kernels).

use burn::module::{AutodiffModule, Module, ModuleVisitor, Param};
use burn::nn::LayerNormConfig;
use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::ops::ModuleOps;
use burn::tensor::{Distribution, ElementConversion, Int, Tensor, TensorData, TensorPrimitive};
use burn_backend::tensor::FloatTensor;
use leanburn::backend::{layer_norm, LmHeadLossOps, OptimizerOps};
use leanburn::model::{Gpt2, Gpt2Config};
use leanburn::optim::{GlobalNormClipping, ADAM_EPSILON};
use leanburn::trainer::ForwardLoss;
use leanburn::TrainBackend;

use super::Args;

/// Largest difference over the largest magnitude of `b`.
fn relative<B: Backend, const D: usize>(a: Tensor<B, D>, b: Tensor<B, D>) -> f64 {
    let scale = b.clone().abs().max().into_scalar().elem::<f64>().max(f64::MIN_POSITIVE);
    (a - b).abs().max().into_scalar().elem::<f64>() / scale
}

/// Prints the LayerNorm's output and three gradients against Burn's, the clipping factor
/// against the host's, and one clipped AdamW step's weights against Burn's AdamW.
pub fn against_burn<B: TrainBackend>(args: &Args, config: &Gpt2Config, seq: usize, device: &B::Device) {
    let d = config.d_model;
    let norm = LayerNormConfig::new(d).with_epsilon(config.layer_norm_eps).init::<B>(device);
    let x = Tensor::<B::InnerBackend, 2>::random([args.batch * seq, d], Distribution::Normal(0.3, 1.5), device);
    let dy = Tensor::<B::InnerBackend, 2>::random([args.batch * seq, d], Distribution::Normal(0.0, 1.0), device);
    let forward = |lean: bool, x: Tensor<B, 2>| match lean {
        true => layer_norm(&norm, x, config.layer_norm_eps),
        false => norm.forward(x),
    };
    let results = |lean: bool| {
        let x_tracked = || Tensor::<B, 2>::from_inner(x.clone()).require_grad();
        let x = x_tracked();
        let y = forward(lean, x.clone());
        let grads = (y.clone() * Tensor::from_inner(dy.clone())).sum().backward();
        let beta = norm.beta.as_ref().expect("GPT-2's LayerNorm has a bias");
        let flat = |t: Tensor<B::InnerBackend, 2>| t.flatten::<1>(0, 1);
        // A block's input also feeds its residual: the two gradients summed.
        let block_input = x_tracked();
        let block = block_input.clone() + forward(lean, block_input.clone());
        let block_grads = (block * Tensor::from_inner(dy.clone())).sum().backward();
        [
            flat(y.inner()),
            flat(x.grad(&grads).expect("dx")),
            norm.gamma.grad(&grads).expect("dgamma"),
            beta.grad(&grads).expect("dbeta"),
            flat(block_input.grad(&block_grads).expect("dx with the residual")),
        ]
    };
    let errors: Vec<String> = ["y", "dx", "dgamma", "dbeta", "dx with the residual"]
        .iter()
        .zip(results(true).into_iter().zip(results(false)))
        .map(|(name, (a, b))| format!("{name} {:.1e}", relative(a, b)))
        .collect();
    eprintln!("LayerNorm, leanburn's against Burn's (largest difference over largest value): {}", errors.join(", "));
    lm_head_loss_against_the_cpu::<B::InnerBackend>(config, device);
    embedding_grad_against_the_cpu::<B::InnerBackend>(config, args.batch * seq, device);
    bias_grad_against_the_cpu::<B::InnerBackend>(config, args.batch * seq, device);

    let (model, mut clipped, host) = super::training::<B>(args, config, seq, device);
    // One set of gradients for both (a second backward pass may round differently, and
    // Adam's first step turns any difference in a near-zero gradient into ±lr).
    let grads = GradientsParams::from_grads(model.forward_loss(host.to_device::<B>(device)).backward(), &model);
    let mut copy = CopyGrads { from: &grads, to: GradientsParams::new() };
    model.visit(&mut copy);
    // The clipping factor against the host's, summed in f64 from the gradients read back.
    let found = gradients::<B>(&model, &grads);
    let squares: f64 = found
        .iter()
        .flat_map(|g| g.clone().into_data().convert::<f32>().to_vec::<f32>().expect("f32 values"))
        .map(|v| f64::from(v) * f64::from(v))
        .sum();
    let host = (1.0 / (squares.sqrt() + 1e-6)).min(1.0);
    let factor = <B::InnerBackend as OptimizerOps>::clip_factor(
        found.into_iter().map(|g| g.into_primitive().tensor()).collect(),
        1.0,
    );
    let factor =
        Tensor::<B::InnerBackend, 1>::from_primitive(TensorPrimitive::Float(factor)).into_scalar().elem::<f64>();
    eprintln!(
        "clipping factor (norm 1), leanburn's against the host's in f64: {factor:.6e} against {host:.6e}, \
         relative difference {:.1e}",
        (factor - host).abs() / host
    );
    let adamw = AdamWConfig::new().with_weight_decay(0.1).with_epsilon(ADAM_EPSILON);
    let mut burn = GlobalNormClipping::new(adamw.init::<B, Gpt2<B>>(), 1.0);
    let burns = burn.step(1e-3, model.clone(), copy.to);
    let ours = clipped.step(1e-3, model, grads);
    let (ours, burns) = (weights(&ours.valid()), weights(&burns.valid()));
    let worst = ours.into_iter().zip(burns).map(|(a, b)| relative(a, b)).fold(0.0, f64::max);
    eprintln!(
        "clipped AdamW, one step, leanburn's update against Burn's AdamW at the same clipping factor \
         (worst parameter tensor): {worst:.1e}"
    );
}

/// The LM head's loss and both gradients (`LmHeadLossOps::lm_head_loss_grads`: on CUDA the
/// GEMMs on cuBLASLt and the row kernel between them) over 256 tokens and the padded
/// vocabulary, against the same op on the CPU (Flex: f32 GEMMs, its own row pass) from the
/// same values read back; printed, as the checks above.
fn lm_head_loss_against_the_cpu<B: LmHeadLossOps>(config: &Gpt2Config, device: &B::Device) {
    type Cpu = burn::backend::Flex;
    let (tokens, d, vocab) = (256, config.d_model, config.padded_vocab());
    let hidden = Tensor::<B, 2>::random([tokens, d], Distribution::Normal(0.0, 1.0), device);
    let weight = Tensor::<B, 2>::random([vocab, d], Distribution::Normal(0.0, 0.1), device);
    let ids: Vec<i64> = (0..tokens as i64).map(|i| (i * 7919) % config.vocab_size as i64).collect();
    let targets = Tensor::<B, 1, Int>::from_data(TensorData::new(ids.clone(), [tokens]), device);
    let primitive = |t: &Tensor<B, 2>| t.clone().into_primitive().tensor();
    let ours = flat::<B>(B::lm_head_loss_grads(primitive(&hidden), primitive(&weight), targets.into_primitive(), 64));
    let cpu = Default::default();
    let on_cpu =
        |t: &Tensor<B, 2>| Tensor::<Cpu, 2>::from_data(t.to_data().convert::<f32>(), &cpu).into_primitive().tensor();
    let targets = Tensor::<Cpu, 1, Int>::from_data(TensorData::new(ids, [tokens]), &cpu);
    let theirs = flat::<Cpu>(Cpu::lm_head_loss_grads(on_cpu(&hidden), on_cpu(&weight), targets.into_primitive(), 64));
    let host = |data: TensorData| Tensor::<Cpu, 1>::from_data(data.convert::<f32>(), &cpu);
    let errors: Vec<String> = ["loss", "grad hidden", "grad weight"]
        .iter()
        .zip(ours.into_iter().zip(theirs))
        .map(|(name, (a, b))| format!("{name} {:.1e}", relative(host(a), host(b))))
        .collect();
    eprintln!(
        "LM head loss ({tokens} tokens × {vocab}), the device's op against the CPU's (largest difference over largest \
         value; TF32 GEMMs on CUDA): {}",
        errors.join(", ")
    );
}

/// The token embedding's gradient (`embedding_backward`: on the CubeCL backends leanburn's
/// kernel) for `tokens` tokens of ids that repeat, against the same op on the CPU (Burn's,
/// on Flex) from the same values read back. Both sum each row's tokens in token order: in
/// f32 the difference should be 0.
fn embedding_grad_against_the_cpu<B: Backend>(config: &Gpt2Config, tokens: usize, device: &B::Device) {
    type Cpu = burn::backend::Flex;
    let (d, vocab) = (config.d_model, config.padded_vocab());
    let weights = Tensor::<B, 2>::zeros([vocab, d], device);
    let output_grad = Tensor::<B, 3>::random([1, tokens, d], Distribution::Normal(0.0, 1.0), device);
    // Ids over a tenth of the vocabulary, so that rows sum several tokens.
    let ids: Vec<i64> = (0..tokens as i64).map(|i| (i * 7919) % (vocab as i64 / 10)).collect();
    let device_ids = Tensor::<B, 2, Int>::from_data(TensorData::new(ids.clone(), [1, tokens]), device);
    let ours = B::embedding_backward(
        weights.into_primitive().tensor(),
        output_grad.clone().into_primitive().tensor(),
        device_ids.into_primitive(),
    );
    let cpu = Default::default();
    let on_cpu = Tensor::<Cpu, 3>::from_data(output_grad.to_data().convert::<f32>(), &cpu).into_primitive().tensor();
    let cpu_ids = Tensor::<Cpu, 2, Int>::from_data(TensorData::new(ids, [1, tokens]), &cpu);
    let zeros = Tensor::<Cpu, 2>::zeros([vocab, d], &cpu).into_primitive().tensor();
    let theirs = Cpu::embedding_backward(zeros, on_cpu, cpu_ids.into_primitive());
    let host = |data: TensorData| Tensor::<Cpu, 2>::from_data(data.convert::<f32>(), &cpu);
    let ours = host(Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(ours)).into_data());
    let theirs = Tensor::<Cpu, 2>::from_primitive(TensorPrimitive::Float(theirs));
    eprintln!(
        "token embedding gradient ({tokens} tokens into {vocab} × {d}), the device's op against the CPU's (largest \
         difference over largest value): {:.1e}",
        relative(ours, theirs)
    );
}

/// The MLP expansion's bias gradient (`linear_bias_backward`: on the CubeCL backends
/// leanburn's column sums) over `tokens` rows of `4 · d_model`, against the same op on the
/// CPU (Burn's, on Flex) from the same values read back: f32 sums in another order, so
/// about 1e-7 in f32.
fn bias_grad_against_the_cpu<B: Backend>(config: &Gpt2Config, tokens: usize, device: &B::Device) {
    type Cpu = burn::backend::Flex;
    let columns = 4 * config.d_model;
    let output_grad = Tensor::<B, 2>::random([tokens, columns], Distribution::Normal(0.0, 1.0), device);
    let ours = B::linear_bias_backward(output_grad.clone().into_primitive().tensor());
    let cpu = Default::default();
    let on_cpu = Tensor::<Cpu, 2>::from_data(output_grad.to_data().convert::<f32>(), &cpu).into_primitive().tensor();
    let theirs = Tensor::<Cpu, 1>::from_primitive(TensorPrimitive::Float(Cpu::linear_bias_backward(on_cpu)));
    let ours = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(ours)).into_data();
    let ours = Tensor::<Cpu, 1>::from_data(ours.convert::<f32>(), &cpu);
    eprintln!(
        "bias gradient ({tokens} rows of {columns}), the device's op against the CPU's (largest difference over \
         largest value): {:.1e}",
        relative(ours, theirs)
    );
}

/// The loss and both gradients of `lm_head_loss_grads`, each flattened, as host data.
fn flat<X: Backend>([loss, grad_hidden, grad_weight]: [FloatTensor<X>; 3]) -> Vec<TensorData> {
    let float = TensorPrimitive::Float;
    let grads = [grad_hidden, grad_weight].map(|t| Tensor::<X, 2>::from_primitive(float(t)).flatten::<1>(0, 1));
    [Tensor::<X, 1>::from_primitive(float(loss))].into_iter().chain(grads).map(|t| t.into_data()).collect()
}

/// A copy of each parameter's gradient in `from`.
struct CopyGrads<'a> {
    from: &'a GradientsParams,
    to: GradientsParams,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for CopyGrads<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(grad) = self.from.get::<B::InnerBackend, D>(param.id) {
            self.to.register::<B::InnerBackend, D>(param.id, grad);
        }
    }
}

/// Each parameter's gradient in `grads`, flattened.
pub(crate) fn gradients<B: AutodiffBackend>(
    model: &Gpt2<B>,
    grads: &GradientsParams,
) -> Vec<Tensor<B::InnerBackend, 1>> {
    struct Collect<'a, B: AutodiffBackend>(&'a GradientsParams, Vec<Tensor<B::InnerBackend, 1>>);
    impl<B: AutodiffBackend> ModuleVisitor<B> for Collect<'_, B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            if let Some(grad) = self.0.get::<B::InnerBackend, D>(param.id) {
                self.1.push(grad.flatten::<1>(0, D - 1));
            }
        }
    }
    let mut collect = Collect::<B>(grads, Vec::new());
    model.visit(&mut collect);
    collect.1
}

/// Every parameter tensor of `model`, flattened.
fn weights<B: Backend>(model: &Gpt2<B>) -> Vec<Tensor<B, 1>> {
    struct Collect<B: Backend>(Vec<Tensor<B, 1>>);
    impl<B: Backend> ModuleVisitor<B> for Collect<B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0.push(param.val().flatten::<1>(0, D - 1));
        }
    }
    let mut collect = Collect(Vec::new());
    model.visit(&mut collect);
    collect.0
}
