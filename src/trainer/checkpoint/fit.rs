//! Whether a checkpoint's model fits the model it is loaded into: Burn's `load_record`
//! takes a saved tensor of any shape, and panics where the parameters differ in number.

use std::panic::{self, AssertUnwindSafe};
use std::path::Path;

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use crate::trainer::error::TrainerError;

/// The shapes of a module's float parameters, in visiting order, without initializing a
/// lazy one.
struct Shapes(Vec<Vec<usize>>);

impl<B: Backend> ModuleVisitor<B> for Shapes {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.0.push(param.lazy_shape().to_vec());
    }
}

fn shapes<B: Backend, M: Module<B>>(module: &M) -> Vec<Vec<usize>> {
    let mut shapes = Shapes(Vec::new());
    module.visit(&mut shapes);
    shapes.0
}

/// `template` with `record`'s values, or a [`TrainerError::Checkpoint`] about `path` that
/// says how they differ, where the record is of another model: other parameter tensors
/// (Burn's loader panics; the panic is caught and not printed) or other shapes.
pub(crate) fn load_fitting<B: Backend, M: Module<B>>(
    template: M,
    record: M::Record,
    path: &Path,
) -> Result<M, TrainerError> {
    let expected = shapes::<B, M>(&template);
    let mismatch = |what: String| {
        TrainerError::checkpoint(
            path,
            format!("its model does not fit this one ({what}); was the run started with other model options?"),
        )
    };
    // The default hook would print the panic before it is caught.
    let hook = panic::take_hook();
    panic::set_hook(Box::new(|_| {}));
    let loaded = panic::catch_unwind(AssertUnwindSafe(|| template.load_record(record)));
    panic::set_hook(hook);
    let loaded = loaded.map_err(|panic| {
        let reason = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("the parameters differ");
        // Burn's message spans lines and starts with the assertion: its first line's gist.
        let reason = reason.lines().next().unwrap_or_default();
        let reason = reason.rsplit("] ").next().unwrap_or(reason).trim();
        mismatch(format!("{} parameter tensors here; Burn's loader: \"{reason}\"", expected.len()))
    })?;
    let found = shapes::<B, M>(&loaded);
    if found.len() != expected.len() {
        return Err(mismatch(format!("{} parameter tensors saved, {} here", found.len(), expected.len())));
    }
    if let Some((index, (saved, here))) = found.iter().zip(&expected).enumerate().find(|(_, (a, b))| a != b) {
        return Err(mismatch(format!("parameter {index} is {saved:?} in the checkpoint and {here:?} here")));
    }
    Ok(loaded)
}
