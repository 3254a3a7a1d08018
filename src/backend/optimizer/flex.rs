//! [`OptimizerOps`] on Burn's CPU backend (`Flex`): AdamW's update in one pass over the
//! host buffers, and clipping's sum of squares in one pass per gradient, where the composed
//! path makes about sixteen passes (each op reads and writes the whole tensor). The same
//! f32 arithmetic as [`composed`], element by element and in its order; f32 tensors only
//! (others, and views into a larger buffer, take the composed path).

use burn::backend::Flex;
use burn_backend::tensor::FloatTensor;
use burn_backend::{DType, TensorMetadata};
use burn_flex::FlexTensor;
use rayon::prelude::*;

use super::{composed, composed_clip_factor, AdamWStep, OptimizerOps, NORM_EPSILON};

/// Elements per task of the parallel loops: small tensors run on the calling thread.
const CHUNK: usize = 1 << 16;

impl OptimizerOps for Flex {
    fn adamw_step(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        moments: [FloatTensor<Self>; 2],
        scale: Option<FloatTensor<Self>>,
        step: &AdamWStep,
    ) -> [FloatTensor<Self>; 3] {
        let len = param.shape().num_elements();
        let whole = |tensor: &FlexTensor| {
            tensor.dtype() == DType::F32
                && tensor.layout().contiguous_offsets() == Some((0, len))
                && tensor.storage::<f32>().len() == len
        };
        let readable = |tensor: &FlexTensor| tensor.as_slice::<f32>().is_some_and(|slice| slice.len() == len);
        let scale_ok = scale.as_ref().is_none_or(|scale| scale.as_slice::<f32>().is_some_and(|s| s.len() == 1));
        if !(whole(&param) && whole(&moments[0]) && whole(&moments[1]) && readable(&grad) && scale_ok) {
            return composed::<Self>(param, grad, moments, scale, step);
        }
        let scale = scale.map(|scale| scale.as_slice::<f32>().expect("checked")[0]);
        let [mut moment_1, mut moment_2] = moments;
        let mut param = param;
        let grad = grad.as_slice::<f32>().expect("checked");
        // In place where the buffers are this step's alone; a shared one is copied first.
        let (params, firsts, seconds) =
            (param.storage_mut::<f32>(), moment_1.storage_mut::<f32>(), moment_2.storage_mut::<f32>());
        let update = Update::new(step, scale);
        let run = |((params, firsts), (seconds, grads)): Run<'_>| update.apply(params, firsts, seconds, grads);
        if len <= CHUNK {
            run(((params, firsts), (seconds, grad)));
        } else {
            params
                .par_chunks_mut(CHUNK)
                .zip(firsts.par_chunks_mut(CHUNK))
                .zip(seconds.par_chunks_mut(CHUNK).zip(grad.par_chunks(CHUNK)))
                .for_each(run);
        }
        [param, moment_1, moment_2]
    }

    fn clip_factor(grads: Vec<FloatTensor<Self>>, max_norm: f64) -> FloatTensor<Self> {
        if !grads.iter().all(|grad| grad.as_slice::<f32>().is_some()) {
            return composed_clip_factor::<Self>(grads, max_norm);
        }
        // The squares summed in f64, every gradient's chunks in one parallel loop.
        let chunks: Vec<&[f32]> =
            grads.iter().flat_map(|grad| grad.as_slice::<f32>().expect("checked").chunks(CHUNK)).collect();
        let sum: f64 = chunks.into_par_iter().map(sum_of_squares).sum();
        let factor = (max_norm as f32 / ((sum as f32).sqrt() + NORM_EPSILON as f32)).min(1.0);
        FlexTensor::from_data(burn::tensor::TensorData::new(vec![factor], [1]))
    }
}

/// Running sums [`sum_of_squares`] keeps, one per lane.
const LANES: usize = 16;

/// `Σ value²` in f64, in [`LANES`] running sums added up at the end: independent adds the
/// compiler keeps in vector registers, where one running sum is a chain of dependent adds
/// (about 2% of the CPU main job's step, perf on 2026-12-07).
fn sum_of_squares(values: &[f32]) -> f64 {
    let square = |value: &f32| f64::from(*value) * f64::from(*value);
    let mut lanes = [0.0f64; LANES];
    let mut blocks = values.chunks_exact(LANES);
    for block in &mut blocks {
        for (lane, value) in lanes.iter_mut().zip(block) {
            *lane += square(value);
        }
    }
    lanes.iter().sum::<f64>() + blocks.remainder().iter().map(square).sum::<f64>()
}

/// One parallel task's runs of the parameter, both moments and the gradient.
type Run<'a> = ((&'a mut [f32], &'a mut [f32]), (&'a mut [f32], &'a [f32]));

/// One step's constants, as [`composed`] turns them into f32.
struct Update {
    scale: Option<f32>,
    beta_1: f32,
    beta_2: f32,
    one_minus_beta_1: f32,
    one_minus_beta_2: f32,
    correction_1: f32,
    correction_2: f32,
    epsilon: f32,
    decay: Option<f32>,
    lr: f32,
}

impl Update {
    fn new(step: &AdamWStep, scale: Option<f32>) -> Self {
        let (correction_1, correction_2) = step.corrections();
        Self {
            scale,
            beta_1: step.beta_1,
            beta_2: step.beta_2,
            one_minus_beta_1: 1.0 - step.beta_1,
            one_minus_beta_2: 1.0 - step.beta_2,
            correction_1,
            correction_2,
            epsilon: step.epsilon,
            decay: (step.weight_decay != 0.0).then(|| step.decay() as f32),
            lr: step.lr as f32,
        }
    }

    /// The update of one run of elements, in place.
    fn apply(&self, params: &mut [f32], firsts: &mut [f32], seconds: &mut [f32], grads: &[f32]) {
        let rows = params.iter_mut().zip(firsts.iter_mut()).zip(seconds.iter_mut().zip(grads));
        for ((param, first), (second, &grad)) in rows {
            let grad = match self.scale {
                Some(scale) => grad * scale,
                None => grad,
            };
            *first = *first * self.beta_1 + grad * self.one_minus_beta_1;
            *second = *second * self.beta_2 + grad * grad * self.one_minus_beta_2;
            let delta = (*first / self.correction_1) / ((*second / self.correction_2).sqrt() + self.epsilon);
            let decayed = match self.decay {
                Some(decay) => *param * decay,
                None => *param,
            };
            *param = decayed - delta * self.lr;
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Distribution, Tensor, TensorPrimitive};

    use super::*;

    fn tensor(len: usize, low: f64, high: f64) -> Tensor<Flex, 1> {
        Tensor::random([len], Distribution::Uniform(low, high), &Default::default())
    }

    fn primitive(tensor: &Tensor<Flex, 1>) -> FlexTensor {
        tensor.clone().into_primitive().tensor()
    }

    fn values(tensor: FlexTensor) -> Vec<f32> {
        Tensor::<Flex, 1>::from_primitive(TensorPrimitive::Float(tensor)).into_data().to_vec().unwrap()
    }

    /// The one-pass update against the composed ops it replaces, on sizes below and above
    /// a parallel chunk, with and without clipping's scale and weight decay, after a few
    /// steps (so the moments are not zero): equal to the bit.
    #[test]
    fn one_pass_adamw_is_the_composed_update() {
        for (len, scale, weight_decay, time) in
            [(1_000, None, 0.1, 1), (200_003, Some(0.37), 0.1, 3), (70_001, None, 0.0, 7)]
        {
            let step = AdamWStep { lr: 3e-3, beta_1: 0.9, beta_2: 0.95, epsilon: 1e-8, weight_decay, time };
            let (param, grad) = (tensor(len, -1.0, 1.0), tensor(len, -1e-2, 1e-2));
            let moments = [tensor(len, -1e-3, 1e-3), tensor(len, 0.0, 1e-5)];
            let scale = scale.map(|scale| Tensor::<Flex, 1>::from_floats([scale], &Default::default()));
            let inputs = || {
                (primitive(&param), primitive(&grad), moments.each_ref().map(primitive), scale.as_ref().map(primitive))
            };
            let snapshot = || [&param, &moments[0], &moments[1]].map(|t| t.to_data().to_vec::<f32>().unwrap());
            let before = snapshot();
            let (p, g, m, s) = inputs();
            let fast = <Flex as OptimizerOps>::adamw_step(p, g, m, s, &step).map(values);
            // The inputs were shared (the test holds them): copied, not written.
            assert_eq!(snapshot(), before, "len {len}: a shared input was written");
            let (p, g, m, s) = inputs();
            let reference = composed::<Flex>(p, g, m, s, &step).map(values);
            assert_eq!(fast, reference, "len {len}, scale {scale:?}, weight decay {weight_decay}");
        }
    }

    /// Control: the comparison above sees a wrong update (β₂ for β₁ in the first moment).
    #[test]
    fn control_a_wrong_update_differs_from_the_composed_one() {
        let step = AdamWStep { lr: 3e-3, beta_1: 0.9, beta_2: 0.95, epsilon: 1e-8, weight_decay: 0.1, time: 2 };
        let wrong = AdamWStep { beta_1: 0.95, ..step };
        let (param, grad) = (tensor(1_000, -1.0, 1.0), tensor(1_000, -1e-2, 1e-2));
        let moments = [tensor(1_000, -1e-3, 1e-3), tensor(1_000, 0.0, 1e-5)];
        let fast = <Flex as OptimizerOps>::adamw_step(
            primitive(&param),
            primitive(&grad),
            moments.each_ref().map(primitive),
            None,
            &wrong,
        );
        let reference =
            composed::<Flex>(primitive(&param), primitive(&grad), moments.each_ref().map(primitive), None, &step);
        assert_ne!(fast.map(values), reference.map(values));
    }

    /// A uniquely owned parameter is updated in its own buffer, no copy.
    #[test]
    fn a_parameter_owned_by_the_step_is_updated_in_place() {
        let len = 5_000;
        let step = AdamWStep { lr: 1e-2, beta_1: 0.9, beta_2: 0.999, epsilon: 1e-8, weight_decay: 0.0, time: 1 };
        let param = primitive(&tensor(len, -1.0, 1.0));
        let before = param.storage::<f32>().as_ptr();
        let moments = [FlexTensor::zeros([len].into(), DType::F32), FlexTensor::zeros([len].into(), DType::F32)];
        let [param, ..] =
            <Flex as OptimizerOps>::adamw_step(param, primitive(&tensor(len, -1.0, 1.0)), moments, None, &step);
        assert_eq!(param.storage::<f32>().as_ptr(), before);
    }

    /// The lanes' sum of squares against one running f64 sum, for lengths around the
    /// lanes' width and a long one: within f64's rounding of the other order (the sums
    /// are positive); a dropped tail (the control) is caught.
    #[test]
    fn the_lanes_sum_the_squares() {
        let values: Vec<f32> = (0..100_003).map(|i| ((i * 7919) % 2003) as f32 * 1e-3 - 1.0).collect();
        for len in (0..3 * LANES + 2).chain([1_000, 100_003]) {
            let values = &values[..len];
            let serial: f64 = values.iter().map(|&value| f64::from(value) * f64::from(value)).sum();
            let lanes = super::sum_of_squares(values);
            assert!((lanes - serial).abs() <= 1e-12 * serial, "{len}: {lanes} against {serial}");
            if len % LANES != 0 {
                let whole = &values[..len - len % LANES];
                assert!((super::sum_of_squares(whole) - serial).abs() > 1e-12 * serial, "control: {len}");
            }
        }
    }

    /// Clipping's factor against the host's, in f64, over several gradients.
    #[test]
    fn clip_factor_is_the_global_norms() {
        let grads = [tensor(300_001, -1e-3, 1e-3), tensor(17, -1.0, 1.0)];
        let host: f64 = grads
            .iter()
            .flat_map(|grad| grad.to_data().to_vec::<f32>().unwrap())
            .map(|value| f64::from(value) * f64::from(value))
            .sum();
        let want = (0.5 / (host.sqrt() + NORM_EPSILON)).min(1.0);
        let got = values(<Flex as OptimizerOps>::clip_factor(grads.iter().map(primitive).collect(), 0.5))[0];
        assert!((f64::from(got) - want).abs() <= 2e-7 * want, "{got} against {want}");
        // Control: a norm under the maximum gives no clipping.
        let one = values(<Flex as OptimizerOps>::clip_factor(grads.iter().map(primitive).collect(), 1e3))[0];
        assert_eq!(one, 1.0);
    }
}
