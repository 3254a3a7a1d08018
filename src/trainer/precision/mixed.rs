//! The plumbing of a mixed-precision step: the compute copy of the weights, and the
//! gradients brought back to the master weights (see [`Precision`](crate::trainer::Precision)).
//!
//! Casts happen at the model boundary only: once per parameter into the compute copy,
//! once per gradient back. Between them every op runs in the compute precision.
//!
//! `HybridTrainer` runs these on every mixed-precision step; they are public for a loop of
//! one's own (and the benches), in the trainer's order: [`compute_copy`], the loss on it
//! cast to f32, its backward, [`master_gradients`] (with the loss scale, if any),
//! [`copy_state_back`], then the optimizer on the master weights.

use std::collections::{HashMap, HashSet};

use burn::module::{AutodiffModule, Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{FloatDType, Tensor, TensorMetadata, TensorPrimitive};

/// `module` with every float parameter cast to `dtype` (a no-op where one already is),
/// each keeping its id. The casts are issued in runs of one shape (shapes in the order
/// first seen, the module's order within each): a fusing backend (Burn's `Fusion`) makes
/// one kernel of each run, where the module's own order, whose neighbours mostly differ in
/// shape, left it one kernel a cast.
pub fn cast_params<B: Backend, M: Module<B>>(module: M, dtype: FloatDType) -> M {
    let mut params = FloatParams(Vec::new(), HashSet::new());
    module.visit(&mut params);
    let runs = in_shape_runs(params.0, |(_, tensor)| tensor.shape().to_vec());
    let cast = runs.into_iter().map(|(id, tensor)| (id, cast_primitive(tensor, dtype)));
    module.map(&mut Replace(cast.collect()))
}

/// `items` reordered so that those of one shape stand together, shapes in the order first
/// seen and, within a shape, items in their given order: ops issued in this order on
/// independent tensors of one shape meet in one fused kernel where Burn's `Fusion` fuses
/// them (it fuses element-wise ops whose outputs have one shape).
fn in_shape_runs<T>(items: Vec<T>, shape: impl Fn(&T) -> Vec<usize>) -> Vec<T> {
    let mut first_seen: HashMap<Vec<usize>, usize> = HashMap::new();
    let mut keyed: Vec<_> = items
        .into_iter()
        .enumerate()
        .map(|(at, item)| {
            let run = *first_seen.entry(shape(&item)).or_insert(at);
            (run, at, item)
        })
        .collect();
    keyed.sort_by_key(|&(run, at, _)| (run, at));
    keyed.into_iter().map(|(_, _, item)| item).collect()
}

/// `tensor` cast to `dtype`, as `Tensor::cast` does it (nothing where it already is).
fn cast_primitive<B: Backend>(tensor: TensorPrimitive<B>, dtype: FloatDType) -> TensorPrimitive<B> {
    if let TensorPrimitive::Float(float) = &tensor {
        if FloatDType::from(float.dtype()) == dtype {
            return tensor;
        }
    }
    TensorPrimitive::Float(B::float_cast(tensor.tensor(), dtype))
}

/// Every float parameter's tensor, once per id, in the module's order.
struct FloatParams<B: Backend>(Vec<(ParamId, TensorPrimitive<B>)>, HashSet<ParamId>);

impl<B: Backend> ModuleVisitor<B> for FloatParams<B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if self.1.insert(param.id) {
            self.0.push((param.id, param.val().into_primitive()));
        }
    }
}

/// Puts each parameter's new tensor in place, by id.
struct Replace<B: Backend>(HashMap<ParamId, TensorPrimitive<B>>);

impl<B: Backend> ModuleMapper<B> for Replace<B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        match self.0.get(&param.id) {
            Some(tensor) => {
                let tensor = tensor.clone();
                param.map(|_| Tensor::from_primitive(tensor))
            }
            None => param,
        }
    }
}

/// A copy of `master` in `dtype` whose parameters are graph leaves (the ones trainable in
/// `master`), so that a backward pass through it yields their gradients under the master
/// parameters' ids. The copy shares no graph with `master`.
pub fn compute_copy<B, M>(master: &M, dtype: FloatDType) -> M
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
{
    let mut trainable = TrainableIds(HashSet::new());
    master.visit(&mut trainable);
    let inner = cast_params(master.valid(), dtype);
    M::from_inner(inner).map(&mut MarkTrainable(trainable.0))
}

/// Collects the ids of the parameters that require gradients.
struct TrainableIds(HashSet<ParamId>);

impl<B: AutodiffBackend> ModuleVisitor<B> for TrainableIds {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if param.is_require_grad() {
            self.0.insert(param.id);
        }
    }
}

/// Makes the listed parameters graph leaves that require gradients (`from_inner` leaves
/// every parameter untracked).
struct MarkTrainable(HashSet<ParamId>);

impl<B: AutodiffBackend> ModuleMapper<B> for MarkTrainable {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        if !self.0.contains(&param.id) {
            return param;
        }
        let (id, tensor, mapper) = param.consume();
        Param::from_mapped_value(id, tensor.require_grad(), mapper)
    }
}

/// Writes the compute copy's untrained float state back into `master`, in the master's
/// float type: batch norm's running statistics, which a training forward pass updates in
/// the copy. (Frozen parameters are written back too, so they end up rounded to the
/// compute precision once; the round trip is exact after that.)
pub fn copy_state_back<B, M>(master: M, compute: &M) -> M
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
{
    let mut trainable = TrainableIds(HashSet::new());
    master.visit(&mut trainable);
    // `valid()` folds the running states' pending updates in; `visit` alone would not.
    let mut state = UntrainedState::<B::InnerBackend> { trained: trainable.0, values: HashMap::new() };
    compute.valid().visit(&mut state);
    if state.values.is_empty() {
        return master;
    }
    master.map(&mut state)
}

/// The values of the parameters and running states that are not trained.
struct UntrainedState<I: Backend> {
    trained: HashSet<ParamId>,
    values: HashMap<ParamId, TensorPrimitive<I>>,
}

impl<I: Backend> ModuleVisitor<I> for UntrainedState<I> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<I, D>>) {
        if !self.trained.contains(&param.id) {
            self.values.insert(param.id, param.val().into_primitive());
        }
    }
}

impl<B: AutodiffBackend> ModuleMapper<B> for UntrainedState<B::InnerBackend> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let Some(value) = self.values.remove(&param.id) else {
            return param;
        };
        let (id, old, mapper) = param.consume();
        let value = Tensor::<B::InnerBackend, D>::from_primitive(value);
        let value = if value.dtype() == old.dtype() { value } else { value.cast(FloatDType::from(old.dtype())) };
        Param::from_mapped_value(id, Tensor::from_inner(value), mapper)
    }
}

/// Gradients of the compute copy, made the master's: each cast to its master parameter's
/// float type and, with loss scaling, divided by the loss scale.
pub struct MasterGradients<B: Backend> {
    /// The gradients, keyed by parameter id, in the master precision.
    pub grads: GradientsParams,
    /// With loss scaling, the sum of every gradient element: finite exactly when every
    /// gradient is (an infinity or NaN anywhere makes it non-finite; a finite sum this large
    /// would mean gradients near f32's limit, as good as an overflow). `None` without loss
    /// scaling (nothing reads it: bf16 has f32's range), or with no gradients.
    pub overflow_check: Option<Tensor<B, 1>>,
}

/// Brings `grads` (of a [`compute_copy`] of `master`) to the master weights; see
/// [`MasterGradients`]. `loss_scale`: the scale the loss was multiplied by, `None` without
/// loss scaling, where no gradient is summed for an overflow check (a reduction and an add
/// per parameter, every step).
pub fn master_gradients<B, M>(
    master: &M,
    grads: GradientsParams,
    loss_scale: Option<f64>,
) -> MasterGradients<B::InnerBackend>
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
{
    let mut taken = TakeGradients::<B::InnerBackend> { grads, taken: Vec::new() };
    master.visit(&mut taken);
    let TakeGradients { mut grads, taken } = taken;
    // Every cast first, in runs of one shape (see `cast_params`), then each put back.
    let cast: Vec<_> = in_shape_runs(taken, |taken| taken.grad.shape().to_vec())
        .into_iter()
        .map(|taken| (cast_primitive(taken.grad, taken.master), taken.id, taken.put_back))
        .collect();
    let mut overflow_check: Option<Tensor<B::InnerBackend, 1>> = None;
    for (grad, id, put_back) in cast {
        if let Some(sum) = put_back(&mut grads, id, grad, loss_scale) {
            overflow_check = Some(match overflow_check.take() {
                Some(check) => check + sum,
                None => sum,
            });
        }
    }
    MasterGradients { grads, overflow_check }
}

/// Takes each master parameter's gradient out of the compute copy's gradients.
struct TakeGradients<I: Backend> {
    grads: GradientsParams,
    taken: Vec<Taken<I>>,
}

/// A gradient taken out for its master parameter: its tensor, the master's float type, and
/// how to put it back (the rank known where it was taken).
struct Taken<I: Backend> {
    id: ParamId,
    grad: TensorPrimitive<I>,
    master: FloatDType,
    put_back: PutBack<I>,
}

/// Registers a gradient, in the master's type, under its id: with loss scaling divided by
/// the scale first, and its sum returned for the overflow check.
type PutBack<I> = fn(&mut GradientsParams, ParamId, TensorPrimitive<I>, Option<f64>) -> Option<Tensor<I, 1>>;

fn put_back<I: Backend, const D: usize>(
    grads: &mut GradientsParams,
    id: ParamId,
    grad: TensorPrimitive<I>,
    loss_scale: Option<f64>,
) -> Option<Tensor<I, 1>> {
    let mut grad = Tensor::<I, D>::from_primitive(grad);
    let mut sum = None;
    if let Some(scale) = loss_scale {
        if scale != 1.0 {
            grad = grad.mul_scalar(1.0 / scale);
        }
        sum = Some(grad.clone().sum());
    }
    grads.register::<I, D>(id, grad);
    sum
}

impl<B: AutodiffBackend> ModuleVisitor<B> for TakeGradients<B::InnerBackend> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let Some(grad) = self.grads.remove::<B::InnerBackend, D>(param.id) else {
            return;
        };
        let master = FloatDType::from(param.val().dtype());
        let put_back = put_back::<B::InnerBackend, D>;
        self.taken.push(Taken { id: param.id, grad: grad.into_primitive(), master, put_back });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};
    use burn::nn::{Linear, LinearConfig};
    use burn::tensor::{DType, Distribution};

    type B = Autodiff<Flex>;

    #[test]
    fn the_compute_copy_trains_under_the_master_ids_and_gradients_come_back_unscaled() {
        let device = Default::default();
        let master: Linear<B> = crate::init::materialize(LinearConfig::new(3, 2).init(&device));
        let x = Tensor::<B, 2>::random([4, 3], Distribution::Normal(0.0, 1.0), &device);

        let plain = GradientsParams::from_grads(master.forward(x.clone()).sum().backward(), &master);
        let compute = compute_copy::<B, _>(&master, FloatDType::F32);
        let scaled = compute.forward(x).sum().mul_scalar(1024.0).backward();
        let back = master_gradients::<B, _>(&master, GradientsParams::from_grads(scaled, &compute), Some(1024.0));

        let id = master.weight.id;
        let expected = plain.get::<Flex, 2>(id).expect("a weight gradient").into_data();
        let got = back.grads.get::<Flex, 2>(id).expect("the gradient under the master's id");
        assert_eq!(got.dtype(), DType::F32);
        got.into_data().assert_approx_eq::<f32>(&expected, burn::tensor::Tolerance::default());
        let check = back.overflow_check.expect("a check").into_scalar();
        assert!(check.is_finite());
    }

    /// The casts are issued in runs of one shape, the module's order kept within a run: the
    /// runs a fusing backend makes one kernel each (the control: the module's own order
    /// interleaves the shapes).
    #[test]
    fn casts_are_issued_in_runs_of_one_shape_in_the_modules_order() {
        let order = [vec![4], vec![4, 8], vec![8], vec![4], vec![4, 8], vec![4]];
        let items: Vec<(usize, Vec<usize>)> = order.iter().cloned().enumerate().collect();
        let runs: Vec<usize> =
            in_shape_runs(items.clone(), |(_, shape)| shape.clone()).iter().map(|&(at, _)| at).collect();
        assert_eq!(runs, [0, 3, 5, 1, 4, 2]);
        let interleaved = items.windows(2).filter(|pair| pair[0].1 != pair[1].1).count();
        let grouped = runs.windows(2).filter(|pair| order[pair[0]] != order[pair[1]]).count();
        assert_eq!((interleaved, grouped), (5, 2), "the module's order changes shape at every step; the runs twice");
    }

    /// Cast in runs, every parameter is what `Tensor::cast` makes of it, under its own id.
    #[test]
    fn parameters_cast_in_runs_are_each_cast_as_tensor_cast_does() {
        let device = Default::default();
        let layers = [LinearConfig::new(3, 2), LinearConfig::new(2, 3), LinearConfig::new(3, 2)];
        let model: Vec<Linear<Flex>> =
            layers.iter().map(|config| crate::init::materialize(config.init(&device))).collect();
        let cast = cast_params(model.clone(), FloatDType::F16);
        for (before, after) in model.iter().zip(&cast) {
            assert_eq!(after.weight.id, before.weight.id);
            let expected = before.weight.val().cast(FloatDType::F16).into_data();
            assert_eq!(after.weight.val().into_data(), expected);
            let bias = |linear: &Linear<Flex>| linear.bias.as_ref().expect("a bias").val();
            assert_eq!(bias(after).into_data(), bias(before).cast(FloatDType::F16).into_data());
        }
        // An f32 parameter asked for f32 is the same tensor.
        let same = cast_params(model.clone(), FloatDType::F32);
        assert_eq!(same[0].weight.val().into_data(), model[0].weight.val().into_data());
    }

    /// bf16 trains without loss scaling: its gradients come back as they are, and none is
    /// summed for a check that nothing would read (the control: the same gradients at a
    /// scale of 1 are summed).
    #[test]
    fn without_loss_scaling_no_gradient_is_summed_for_an_overflow_check() {
        let device = Default::default();
        let master: Linear<B> = crate::init::materialize(LinearConfig::new(3, 2).init(&device));
        let x = Tensor::<B, 2>::random([4, 3], Distribution::Normal(0.0, 1.0), &device);
        let compute = compute_copy::<B, _>(&master, FloatDType::F32);
        let grads = || GradientsParams::from_grads(compute.forward(x.clone()).sum().backward(), &compute);

        let plain = master_gradients::<B, _>(&master, grads(), None);
        let scaled = master_gradients::<B, _>(&master, grads(), Some(1.0));
        assert!(plain.overflow_check.is_none(), "no loss scaling: no check");
        assert!(scaled.overflow_check.is_some(), "the control: loss scaling sums the gradients");
        let weight = |back: &MasterGradients<Flex>| back.grads.get::<Flex, 2>(master.weight.id).map(|g| g.into_data());
        let bias_id = master.bias.as_ref().expect("a bias").id;
        let bias = |back: &MasterGradients<Flex>| back.grads.get::<Flex, 1>(bias_id).map(|g| g.into_data());
        assert!(weight(&plain).is_some() && bias(&plain).is_some(), "every gradient comes back");
        assert_eq!(weight(&plain), weight(&scaled));
        assert_eq!(bias(&plain), bias(&scaled));
    }

    #[test]
    fn an_infinite_gradient_makes_the_check_non_finite() {
        let device = Default::default();
        let master: Linear<B> = crate::init::materialize(LinearConfig::new(2, 1).init(&device));
        let x = Tensor::<B, 2>::from_floats([[1e30, -1e30]], &device);
        let compute = compute_copy::<B, _>(&master, FloatDType::F32);
        // (1e30·w)² overflows f32 in the forward pass already.
        let loss = compute.forward(x).powf_scalar(2.0).sum().mul_scalar(1e10);
        let back =
            master_gradients::<B, _>(&master, GradientsParams::from_grads(loss.backward(), &compute), Some(1e10));
        assert!(!back.overflow_check.expect("a check").into_scalar().is_finite());
    }

    #[test]
    fn batch_norm_statistics_updated_in_the_copy_reach_the_master() {
        use burn::nn::{BatchNorm, BatchNormConfig};
        let device = Default::default();
        let master: BatchNorm<B> = crate::init::materialize(BatchNormConfig::new(2).init(&device));
        let compute = compute_copy::<B, _>(&master, FloatDType::F32);
        let x = Tensor::<B, 3>::random([4, 2, 5], Distribution::Normal(3.0, 1.0), &device);
        let _ = compute.forward(x);
        let moved = compute.running_mean.value_sync().into_data();
        assert_ne!(master.running_mean.value_sync().into_data(), moved, "the copy's statistics moved");
        let master = copy_state_back::<B, _>(master, &compute);
        assert_eq!(master.running_mean.value_sync().into_data(), moved);
        assert!(master.gamma.is_require_grad(), "trained parameters are left alone");
    }

    #[test]
    fn frozen_master_parameters_stay_frozen_in_the_copy() {
        let device = Default::default();
        let mut master: Linear<B> = crate::init::materialize(LinearConfig::new(2, 2).init(&device));
        master.bias = master.bias.map(|bias| bias.map(|b| b.set_require_grad(false)));
        let compute = compute_copy::<B, _>(&master, FloatDType::F32);
        let x = Tensor::<B, 2>::ones([1, 2], &device);
        let grads = GradientsParams::from_grads(compute.forward(x).sum().backward(), &compute);
        assert!(grads.get::<Flex, 2>(master.weight.id).is_some());
        let bias = master.bias.as_ref().expect("a bias");
        assert!(grads.get::<Flex, 1>(bias.id).is_none());
    }
}
