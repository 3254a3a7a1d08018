//! The weights saved at the start of a predict block, for a rollback.

use std::collections::BTreeMap;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};

use crate::trainer::config::SnapshotStore;
use crate::trainer::params::{collect, float_dtype, ParamTensors};

/// The float parameters of a model at one moment, on the device or in host memory.
///
/// A device snapshot copies nothing: Burn tensors are immutable and reference-counted, so
/// holding the old tensors keeps their values while the model moves on (and stops the
/// backend from updating those buffers in place). It costs one set of parameters in
/// device memory for as long as it is held. A host snapshot reads every parameter back
/// instead (a device-to-host copy and a sync) and holds no device memory.
#[derive(Clone, Debug)]
pub enum Snapshot<B: Backend> {
    /// The old tensors themselves.
    Device(ParamTensors<B>),
    /// The old values in host memory, each with its shape and dtype.
    Host(BTreeMap<ParamId, TensorData>),
}

struct HostReader {
    params: BTreeMap<ParamId, TensorData>,
}

impl<B: Backend> ModuleVisitor<B> for HostReader {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let tensor = param.val();
        if tensor.shape().num_elements() == 0 || float_dtype(tensor.dtype()).is_none() {
            return;
        }
        self.params.insert(param.id, tensor.into_data());
    }
}

enum Source<'a, B: Backend> {
    Device(&'a mut ParamTensors<B>),
    Host(&'a mut BTreeMap<ParamId, TensorData>),
}

struct Restorer<'a, AB: AutodiffBackend> {
    source: Source<'a, AB::InnerBackend>,
}

impl<AB: AutodiffBackend> Restorer<'_, AB> {
    /// The saved value of parameter `id`, shaped like `current`, on its device.
    fn saved<const D: usize>(
        &mut self,
        id: &ParamId,
        current: &Tensor<AB::InnerBackend, D>,
    ) -> Option<Tensor<AB::InnerBackend, D>> {
        match &mut self.source {
            Source::Device(params) => {
                let saved = params.remove(id)?;
                Some(saved.tensor.reshape::<D, _>(current.shape()))
            }
            Source::Host(params) => {
                let data = params.remove(id)?;
                let dtype = data.dtype;
                Some(Tensor::from_data(data, (&current.device(), dtype)))
            }
        }
    }
}

impl<AB: AutodiffBackend> ModuleMapper<AB> for Restorer<'_, AB> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<AB, D>>) -> Param<Tensor<AB, D>> {
        let (id, tensor, mapper) = param.consume();
        let require_grad = tensor.is_require_grad();
        let inner = tensor.inner();
        let restored = match self.saved(&id, &inner) {
            Some(saved) if saved.shape() == inner.shape() => saved,
            _ => inner,
        };
        let tensor = Tensor::<AB, D>::from_inner(restored).set_require_grad(require_grad);
        Param::from_mapped_value(id, tensor, mapper)
    }
}

impl<B: Backend> Snapshot<B> {
    /// Saves the float parameters of `module` (usually `model.valid()`).
    pub fn take<M: Module<B>>(module: &M, store: SnapshotStore) -> Self {
        match store {
            SnapshotStore::Device => Snapshot::Device(collect(module)),
            SnapshotStore::Host => {
                let mut reader = HostReader { params: BTreeMap::new() };
                module.visit(&mut reader);
                Snapshot::Host(reader.params)
            }
        }
    }

    /// Puts exactly the saved values back into the autodiff `module`, bit for bit, keeping
    /// every parameter's id and `require_grad` flag. Parameters the snapshot does not
    /// know (or whose shape changed) are left as they are.
    pub fn restore<AB, M>(self, module: M) -> M
    where
        AB: AutodiffBackend<InnerBackend = B>,
        M: Module<AB>,
    {
        match self {
            Snapshot::Device(mut params) => module.map(&mut Restorer::<AB> { source: Source::Device(&mut params) }),
            Snapshot::Host(mut params) => module.map(&mut Restorer::<AB> { source: Source::Host(&mut params) }),
        }
    }

    /// Bytes the saved values occupy (device bytes for a device snapshot, host bytes for a
    /// host one).
    pub fn bytes(&self) -> usize {
        match self {
            Snapshot::Device(params) => params.bytes(),
            Snapshot::Host(params) => params.values().map(|data| data.as_bytes().len()).sum(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::flex::FlexDevice;
    use burn::backend::{Autodiff, Flex};
    use burn::module::AutodiffModule;
    use burn::nn::{Linear, LinearConfig};

    use crate::trainer::params::{apply_update, ParamUpdates};

    type Train = Autodiff<Flex>;

    fn weights(model: &Linear<Train>) -> Vec<TensorData> {
        let bias = model.bias.as_ref().expect("bias");
        vec![model.weight.val().inner().into_data(), bias.val().inner().into_data()]
    }

    fn perturbed(model: Linear<Train>) -> Linear<Train> {
        let device = FlexDevice;
        let params = collect(&model.valid());
        let updates: ParamUpdates<Flex> =
            params.iter().map(|(id, param)| (*id, Tensor::ones([param.tensor.dims()[0]], &device))).collect();
        apply_update(model, &updates, 0.3)
    }

    fn restores_bit_for_bit(store: SnapshotStore) {
        let model: Linear<Train> = LinearConfig::new(4, 3).init(&FlexDevice);
        let original = weights(&model);
        let snapshot = Snapshot::take(&model.valid(), store);
        let kept_in = match snapshot {
            Snapshot::Device(_) => SnapshotStore::Device,
            Snapshot::Host(_) => SnapshotStore::Host,
        };
        assert_eq!(kept_in, store);
        assert_eq!(snapshot.bytes(), (12 + 3) * 4);

        let moved = perturbed(model);
        assert_ne!(weights(&moved), original);
        let restored = snapshot.restore(moved);
        assert_eq!(weights(&restored), original);
        assert!(restored.weight.val().is_require_grad());
    }

    #[test]
    fn device_snapshot_restores_bit_for_bit() {
        restores_bit_for_bit(SnapshotStore::Device);
    }

    #[test]
    fn host_snapshot_restores_bit_for_bit() {
        restores_bit_for_bit(SnapshotStore::Host);
    }
}
