//! leanburn's AdamW against Burn's, on Flex (the composed update) and on wgpu (llvmpipe in
//! CI: the kernels through Fusion's custom ops): `FusedAdamW` behind Burn's
//! `OptimizerAdaptor` against Burn's `AdamW`, `ClippedAdamW` against `GlobalNormClipping`
//! around Burn's `AdamW` with the clipping active, and Burn's AdamW records resumed by
//! `ClippedAdamW`. Controls: twice the weight decay, and no clipping, are caught.

use burn::backend::{Autodiff, Flex, Wgpu};
use burn::module::{AutodiffModule, Module, Param};
use burn::nn::Linear;
use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};

use super::{ClippedAdamW, FusedAdamW, GlobalNormClipping, ADAM_EPSILON};
use crate::device::TrainBackend;

/// Largest parameter difference after the steps (values about 0.5, updates about 1e-2).
const TOLERANCE: f32 = 2e-6;
const LR: f64 = 1e-2;
const WEIGHT_DECAY: f32 = 0.1;

#[derive(Module, Debug)]
struct Net<B: Backend> {
    first: Linear<B>,
    second: Linear<B>,
}

impl<B: Backend> Net<B> {
    /// Fixed weights (no generator: other tests draw from it at the same time).
    fn new(device: &B::Device) -> Self {
        let linear = |inputs: usize, outputs: usize, salt: usize| {
            let values = |len: usize| -> Vec<f32> {
                (0..len).map(|i| (((i * 29 + salt) % 17) as f32 - 8.0) / (4.0 * inputs as f32)).collect()
            };
            let weight = Tensor::from_data(TensorData::new(values(inputs * outputs), [inputs, outputs]), device);
            let bias = Tensor::from_data(TensorData::new(values(outputs), [outputs]), device);
            Linear { weight: Param::from_tensor(weight), bias: Some(Param::from_tensor(bias)) }
        };
        Self { first: linear(12, 20, 3), second: linear(20, 3, 5) }
    }

    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.second.forward(burn::tensor::activation::tanh(self.first.forward(x)))
    }
}

/// The gradients of a loss whose norm is well above 1 at `step`'s batch.
fn gradients<B: AutodiffBackend>(net: &Net<B>, step: usize, device: &B::Device) -> GradientsParams {
    let values: Vec<f32> = (0..8 * 12).map(|i| (((i * 37 + step * 11) % 23) as f32 - 11.0) / 4.0).collect();
    let x = Tensor::<B, 2>::from_data(TensorData::new(values, [8, 12]), device);
    let loss = (net.forward(x) - 2.0).square().sum();
    GradientsParams::from_grads(loss.backward(), net)
}

fn train<B: AutodiffBackend, O: Optimizer<Net<B>, B>>(
    mut net: Net<B>,
    optimizer: &mut O,
    steps: std::ops::Range<usize>,
    device: &B::Device,
) -> Net<B> {
    for step in steps {
        let grads = gradients(&net, step, device);
        net = optimizer.step(LR, net, grads);
    }
    net
}

/// The largest difference between the two nets' parameters.
fn difference<B: AutodiffBackend>(a: &Net<B>, b: &Net<B>) -> f32 {
    let values = |net: &Net<B>| -> Vec<f32> {
        let net = net.valid();
        let layers = [&net.first, &net.second];
        layers
            .iter()
            .flat_map(|l| {
                let mut v = l.weight.val().into_data().convert::<f32>().to_vec::<f32>().unwrap();
                v.extend(l.bias.as_ref().unwrap().val().into_data().convert::<f32>().to_vec::<f32>().unwrap());
                v
            })
            .collect()
    };
    values(a).iter().zip(values(b)).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn burn_adamw(weight_decay: f32) -> AdamWConfig {
    AdamWConfig::new().with_epsilon(ADAM_EPSILON).with_weight_decay(weight_decay)
}

/// Four steps of `FusedAdamW` behind `OptimizerAdaptor` against Burn's `AdamW`; the
/// difference, and that of Burn's `AdamW` at twice the weight decay (the control).
fn unclipped<B: TrainBackend>(device: &B::Device) -> (f32, f32) {
    let start = Net::<B>::new(device);
    let fused = train(
        start.clone(),
        &mut burn::optim::adaptor::OptimizerAdaptor::from(FusedAdamW::new(ADAM_EPSILON, WEIGHT_DECAY)),
        0..4,
        device,
    );
    let burn = train(start.clone(), &mut burn_adamw(WEIGHT_DECAY).init(), 0..4, device);
    let doubled = train(start, &mut burn_adamw(2.0 * WEIGHT_DECAY).init(), 0..4, device);
    (difference(&fused, &burn), difference(&fused, &doubled))
}

/// Four steps of `ClippedAdamW` against `GlobalNormClipping` around Burn's `AdamW`, both
/// at norm 1; the difference, and that of the same without clipping (the control).
fn clipped<B: TrainBackend>(device: &B::Device) -> (f32, f32) {
    let start = Net::<B>::new(device);
    let fused_adamw = FusedAdamW::new(ADAM_EPSILON, WEIGHT_DECAY);
    let fused = train(start.clone(), &mut ClippedAdamW::new(fused_adamw, 1.0), 0..4, device);
    let burn = train(start.clone(), &mut GlobalNormClipping::new(burn_adamw(WEIGHT_DECAY).init(), 1.0), 0..4, device);
    let unclipped = train(start, &mut ClippedAdamW::new(fused_adamw, f64::INFINITY), 0..4, device);
    (difference(&fused, &burn), difference(&unclipped, &burn))
}

fn check<B: TrainBackend>(backend: &str, device: &B::Device) {
    let (fused, doubled) = unclipped::<B>(device);
    assert!(fused <= TOLERANCE, "{backend}: FusedAdamW is {fused:.2e} from Burn's AdamW");
    assert!(doubled > 100.0 * TOLERANCE, "{backend}: twice the weight decay went unnoticed ({doubled:.2e})");
    let (clipped, unclipped) = clipped::<B>(device);
    eprintln!(
        "{backend}: fused {fused:.2e} (doubled decay {doubled:.2e}), clipped {clipped:.2e} (unclipped {unclipped:.2e})"
    );
    assert!(clipped <= TOLERANCE, "{backend}: ClippedAdamW is {clipped:.2e} from Burn's AdamW clipped");
    assert!(unclipped > 100.0 * TOLERANCE, "{backend}: clipping left out went unnoticed ({unclipped:.2e})");
}

#[test]
fn fused_adamw_is_burns_adamw_on_flex() {
    check::<Autodiff<Flex>>("flex", &Default::default());
}

#[test]
fn fused_adamw_is_burns_adamw_on_wgpu() {
    check::<Autodiff<Wgpu>>("wgpu", &Default::default());
}

/// Two steps of Burn's clipped AdamW, its records saved and loaded into `ClippedAdamW`,
/// two more steps: as four steps of Burn's. The control: without the records (moments
/// and step count restarted) the two steps land elsewhere.
#[test]
fn burns_adamw_records_resume_in_clipped_adamw() {
    type B = Autodiff<Flex>;
    let device = Default::default();
    let mut burn = GlobalNormClipping::new(burn_adamw(WEIGHT_DECAY).init(), 1.0);
    let half = train(Net::<B>::new(&device), &mut burn, 0..2, &device);
    let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
    let bytes = recorder.record(Optimizer::<Net<B>, B>::to_record(&burn), ()).unwrap();
    let record = recorder.load(bytes, &device).unwrap();
    let mut resumed = ClippedAdamW::<B>::new(FusedAdamW::new(ADAM_EPSILON, WEIGHT_DECAY), 1.0);
    resumed = Optimizer::<Net<B>, B>::load_record(resumed, record);
    let resumed = train(half.clone(), &mut resumed, 2..4, &device);
    let mut fresh = ClippedAdamW::<B>::new(FusedAdamW::new(ADAM_EPSILON, WEIGHT_DECAY), 1.0);
    let restarted = train(half.clone(), &mut fresh, 2..4, &device);
    let continued = train(half, &mut burn, 2..4, &device);
    let gap = difference(&resumed, &continued);
    assert!(gap <= TOLERANCE, "resumed from Burn's records, {gap:.2e} from Burn's own four steps");
    let restart_gap = difference(&restarted, &continued);
    assert!(restart_gap > 100.0 * TOLERANCE, "restarting the moments went unnoticed ({restart_gap:.2e})");
}

/// The clipping factor of a gradient past a million elements on wgpu, through the fused
/// stack (leanburn's kernels), against the host's f64 sum. Burn 0.21's own `sum` there
/// added up only the first 262,132 elements (printed, not asserted: which reduction runs
/// is autotuned).
#[test]
fn the_clip_factor_of_a_large_gradient_on_wgpu_is_the_hosts() {
    use crate::backend::OptimizerOps;
    use burn::tensor::{Distribution, ElementConversion, TensorPrimitive};
    type W = Wgpu;
    let device = Default::default();
    let grad = Tensor::<W, 1>::random([1_500_007], Distribution::Uniform(-1e-3, 1e-3), &device);
    let host: f64 = grad.to_data().to_vec::<f32>().unwrap().iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    let want = (1e-3 / (host.sqrt() + 1e-6)).min(1.0);
    let factor = <W as OptimizerOps>::clip_factor(vec![grad.clone().into_primitive().tensor()], 1e-3);
    let got = Tensor::<W, 1>::from_primitive(TensorPrimitive::Float(factor)).into_scalar().elem::<f64>();
    let burns = grad.square().sum().into_scalar().elem::<f64>();
    eprintln!("sum of squares: host {host:.6e}, Burn's sum {burns:.6e}; factor {got:.6e} against {want:.6e}");
    assert!((got - want).abs() <= 1e-5 * want, "clip factor {got} against the host's {want}");
}

/// Twenty layers, 40 parameters of lengths at vector widths 4 and 1: more than one group
/// launch of the CubeCL backends' update.
#[derive(Module, Debug)]
struct Deep<B: Backend> {
    layers: Vec<Linear<B>>,
}

impl<B: Backend> Deep<B> {
    fn new(device: &B::Device) -> Self {
        let layers = (0..20)
            .map(|i| {
                let (inputs, outputs) = if i % 2 == 0 { (8, 7) } else { (7, 8) };
                let values = |len: usize| -> Vec<f32> {
                    (0..len).map(|j| (((j * 31 + i * 7) % 19) as f32 - 9.0) / (3.0 * inputs as f32)).collect()
                };
                let weight = Tensor::from_data(TensorData::new(values(inputs * outputs), [inputs, outputs]), device);
                let bias = Tensor::from_data(TensorData::new(values(outputs), [outputs]), device);
                Linear { weight: Param::from_tensor(weight), bias: Some(Param::from_tensor(bias)) }
            })
            .collect();
        Self { layers }
    }

    /// Three steps of `optimizer` on fixed batches; every parameter's bits after them.
    fn trained<O: Optimizer<Self, B>>(mut self, optimizer: &mut O, device: &B::Device) -> Vec<u32>
    where
        B: AutodiffBackend,
    {
        for step in 0..3 {
            let values: Vec<f32> = (0..4 * 8).map(|i| (((i * 13 + step * 5) % 11) as f32 - 5.0) / 2.0).collect();
            let mut x = Tensor::<B, 2>::from_data(TensorData::new(values, [4, 8]), device);
            for layer in &self.layers {
                x = burn::tensor::activation::tanh(layer.forward(x));
            }
            let grads = GradientsParams::from_grads((x - 0.5).square().sum().backward(), &self);
            self = optimizer.step(LR, self, grads);
        }
        let valid = self.valid();
        let bits = |t: Tensor<B::InnerBackend, 2>| t.into_data().to_vec::<f32>().unwrap();
        let values = valid.layers.iter().flat_map(|l| {
            let mut v = bits(l.weight.val());
            v.extend(bits(l.bias.as_ref().unwrap().val().unsqueeze()));
            v
        });
        values.map(f32::to_bits).collect()
    }
}

/// `ClippedAdamW` updates all parameters in one op (on the CubeCL stacks a launch per group
/// of them, in place): its bits are those of one update per parameter, Burn's
/// `OptimizerAdaptor` around `FusedAdamW` behind `GlobalNormClipping` (f32: the clipping's
/// product is the same in the kernel as in a tensor op). The control: twice the weight
/// decay in the all-at-once update changes them.
fn all_at_once_is_one_update_each<B: TrainBackend>(backend: &str, device: &B::Device) {
    let adamw = FusedAdamW::new(ADAM_EPSILON, WEIGHT_DECAY);
    let each = GlobalNormClipping::new(burn::optim::adaptor::OptimizerAdaptor::from(adamw), 1.0);
    let each = Deep::<B>::new(device).trained(&mut { each }, device);
    let all = Deep::<B>::new(device).trained(&mut ClippedAdamW::new(adamw, 1.0), device);
    let doubled = FusedAdamW::new(ADAM_EPSILON, 2.0 * WEIGHT_DECAY);
    let doubled = Deep::<B>::new(device).trained(&mut ClippedAdamW::new(doubled, 1.0), device);
    let differ = |a: &[u32], b: &[u32]| a.iter().zip(b).filter(|(x, y)| x != y).count();
    assert!(
        all == each,
        "{backend}: {} of {} values differ from one update per parameter",
        differ(&all, &each),
        all.len()
    );
    assert!(differ(&doubled, &each) > all.len() / 2, "{backend}: control: twice the weight decay went unnoticed");
}

#[test]
fn clipped_adamw_all_at_once_is_one_update_per_parameter() {
    crate::backend::optimizer::GROUPED.set(true); // both settings write the same bits
    all_at_once_is_one_update_each::<Autodiff<Flex>>("flex", &Default::default());
    all_at_once_is_one_update_each::<Autodiff<Wgpu>>("wgpu", &Default::default());
}
