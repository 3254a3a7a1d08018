//! Eager initialisation of a module's parameters.
//!
//! Burn initialises parameters lazily, at first use, and cloning a parameter that was never
//! used clones its *initialiser*: the clone draws its own random weights when it is first
//! read. So `let b = a.clone()` on a freshly built model gives two different models, and a
//! comparison between them (a baseline against a variant, a snapshot against the weights
//! it should restore) silently compares different starting points. Materialising the
//! weights once, right after building, removes that trap.
//!
//! [`materialize_persistent`] goes one step further for models whose weights are large: it
//! also moves them into the device's persistent memory (see its docs).

use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

/// Reads every parameter once, so that clones share the same values.
pub fn materialize<B: Backend, M: Module<B>>(module: M) -> M {
    module.map(&mut Materializer)
}

/// The default mapping consumes each parameter, which initialises it.
struct Materializer;

impl<B: Backend> ModuleMapper<B> for Materializer {}

/// Like [`materialize`], and every float parameter is then written anew inside
/// [`Backend::memory_persistent_allocations`], so that on CubeCL runtimes it sits in the
/// pool's persistent part: one buffer of exactly its size, not a slice of a shared page.
///
/// Burn asks for persistent memory when it initialises a parameter, but under Fusion the
/// initialiser only queues its random draw: the buffer is allocated when the queue runs,
/// which may be inside that window or long after it. CubeCL then sends every later
/// allocation of a size its persistent part already holds there too (gradients, optimizer
/// moments, the update's temporaries), and the rest to pages shared by size. Which
/// parameters landed where therefore depended on when Fusion flushed (measured in
/// `docs/memory.md`, "The pool layout"); after this call it is all of them, which is what
/// [`Gpt2PoolReserve`](crate::model::Gpt2PoolReserve) assumes. Each parameter is read
/// to the host once. Backends without a persistent pool (the CPU) only copy the values.
pub fn materialize_persistent<B: Backend, M: Module<B>>(module: M) -> M {
    module.map(&mut PersistentMaterializer)
}

struct PersistentMaterializer;

impl<B: Backend> ModuleMapper<B> for PersistentMaterializer {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        param.map(|tensor| {
            let device = tensor.device();
            let trainable = tensor.is_require_grad();
            let persistent = B::memory_persistent_allocations(&device, tensor, |tensor| {
                let values = tensor.into_data();
                let dtype = values.dtype;
                Tensor::from_data(values, (&device, dtype))
            });
            if trainable {
                persistent.require_grad()
            } else {
                persistent
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};
    use burn::nn::LinearConfig;

    #[test]
    fn clones_of_a_materialized_module_have_the_same_weights() {
        let device = Default::default();
        let lazy = LinearConfig::new(8, 8).init::<Flex>(&device);
        let copy = lazy.clone();
        // The trap: the clone initialises on its own.
        assert_ne!(lazy.weight.val().into_data(), copy.weight.val().into_data());

        let eager = materialize(LinearConfig::new(8, 8).init::<Flex>(&device));
        let copy = eager.clone();
        assert_eq!(eager.weight.val().into_data(), copy.weight.val().into_data());
    }

    #[test]
    fn persistent_materialization_keeps_values_and_trainability() {
        let device = Default::default();
        let eager = materialize(LinearConfig::new(8, 8).init::<Autodiff<Flex>>(&device));
        let frozen = materialize(LinearConfig::new(8, 8).init::<Autodiff<Flex>>(&device)).no_grad();
        let moved = materialize_persistent(eager.clone());
        assert_eq!(moved.weight.val().into_data(), eager.weight.val().into_data());
        assert_eq!(moved.bias.as_ref().unwrap().val().into_data(), eager.bias.as_ref().unwrap().val().into_data());
        assert!(moved.weight.val().is_require_grad() && moved.weight.is_require_grad());
        let moved_frozen = materialize_persistent(frozen.clone());
        assert_eq!(moved_frozen.weight.val().into_data(), frozen.weight.val().into_data());
        // The control: a frozen module stays frozen.
        assert!(!moved_frozen.weight.val().is_require_grad() && !moved_frozen.weight.is_require_grad());
    }
}
