//! Eager initialisation of a module's parameters.
//!
//! Burn initialises parameters lazily, at first use, and cloning a parameter that was never
//! used clones its *initialiser*: the clone draws its own random weights when it is first
//! read. So `let b = a.clone()` on a freshly built model gives two different models, and a
//! comparison between them (a baseline against a variant, a snapshot against the weights
//! it should restore) silently compares different starting points. Materialising the
//! weights once, right after building, removes that trap.

use burn::module::{Module, ModuleMapper};
use burn::tensor::backend::Backend;

/// Reads every parameter once, so that clones share the same values.
pub fn materialize<B: Backend, M: Module<B>>(module: M) -> M {
    module.map(&mut Materializer)
}

/// The default mapping consumes each parameter, which initialises it.
struct Materializer;

impl<B: Backend> ModuleMapper<B> for Materializer {}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
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
}
