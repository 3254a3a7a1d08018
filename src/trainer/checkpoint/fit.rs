//! Whether a checkpoint's model fits the model it is loaded into, asked before Burn loads
//! it: Burn's `load_record` takes a saved tensor of any shape, and panics where the
//! parameters differ in number (a `Vec` of layers of another length).
//!
//! The saved side is read from the record's bytes without loading them: every tensor of a
//! NamedMpk record carries its `shape` beside its bytes, so a walk over the MessagePack that
//! keeps the shapes and skips the bytes lists them in the module's order. The model's side
//! is a visit of its parameters and running states, in the same order. No panic is caught,
//! so no process-wide panic hook is touched (data-parallel replicas resume on threads).

use std::fmt;
use std::path::Path;

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::trainer::error::TrainerError;

/// The shapes of a module's tensors (parameters and running states, float, int and bool),
/// in visiting order, without initializing a lazy one.
struct Shapes(Vec<Vec<usize>>);

impl<B: Backend> ModuleVisitor<B> for Shapes {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.0.push(param.lazy_shape().to_vec());
    }

    fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<B, D, Int>>) {
        self.0.push(param.lazy_shape().to_vec());
    }

    fn visit_bool<const D: usize>(&mut self, param: &Param<Tensor<B, D, Bool>>) {
        self.0.push(param.lazy_shape().to_vec());
    }
}

fn shapes<B: Backend, M: Module<B>>(module: &M) -> Vec<Vec<usize>> {
    let mut shapes = Shapes(Vec::new());
    module.visit(&mut shapes);
    shapes.0
}

/// The shapes of the tensors saved in a NamedMpk record, in order, read without their
/// values.
pub(crate) fn saved_shapes(bytes: &[u8]) -> Result<Vec<Vec<usize>>, String> {
    let mut found = Vec::new();
    let mut deserializer = rmp_serde::Deserializer::new(bytes);
    Walk(&mut found).deserialize(&mut deserializer).map_err(|err| err.to_string())?;
    Ok(found)
}

/// A walk over any serde value that keeps the value of every `shape` field.
struct Walk<'a>(&'a mut Vec<Vec<usize>>);

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a model record")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    // A tensor's values: skipped, never copied.
    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Walk(&mut *self.0))?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<FieldName>()? {
            match key {
                FieldName::Shape => self.0.push(map.next_value()?),
                FieldName::Other => map.next_value_seed(Walk(&mut *self.0))?,
            }
        }
        Ok(())
    }
}

/// A map key: `shape`, or anything else.
enum FieldName {
    Shape,
    Other,
}

impl<'de> de::Deserialize<'de> for FieldName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Key;
        impl<'de> Visitor<'de> for Key {
            type Value = FieldName;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }

            fn visit_str<E: de::Error>(self, name: &str) -> Result<FieldName, E> {
                Ok(if name == "shape" { FieldName::Shape } else { FieldName::Other })
            }

            fn visit_u64<E: de::Error>(self, _: u64) -> Result<FieldName, E> {
                Ok(FieldName::Other)
            }

            fn visit_i64<E: de::Error>(self, _: i64) -> Result<FieldName, E> {
                Ok(FieldName::Other)
            }

            fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<FieldName, E> {
                Ok(FieldName::Other)
            }
        }
        deserializer.deserialize_any(Key)
    }
}

/// Checks that the record saved in `bytes` (NamedMpk) is one of `template`'s model, or
/// returns a [`TrainerError::Checkpoint`] about `path` that says how they differ (other
/// tensors in number, or another shape). `template` is not touched.
pub(crate) fn check_fits<B: Backend, M: Module<B>>(
    template: &M,
    bytes: &[u8],
    path: &Path,
) -> Result<(), TrainerError> {
    let mismatch = |what: String| {
        TrainerError::checkpoint(
            path,
            format!("its model does not fit this one ({what}); was the run started with other model options?"),
        )
    };
    let saved =
        saved_shapes(bytes).map_err(|err| TrainerError::checkpoint(path, format!("cannot be decoded: {err}")))?;
    let here = shapes::<B, M>(template);
    if saved.len() != here.len() {
        return Err(mismatch(format!("{} parameter tensors saved, {} here", saved.len(), here.len())));
    }
    if let Some((index, (saved, here))) = saved.iter().zip(&here).enumerate().find(|(_, (a, b))| a != b) {
        return Err(mismatch(format!("parameter {index} is {saved:?} in the checkpoint and {here:?} here")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use burn::backend::Flex;
    use burn::nn::{Linear, LinearConfig};
    use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};

    use super::*;

    fn layers(widths: &[usize]) -> Vec<Linear<Flex>> {
        widths.windows(2).map(|w| LinearConfig::new(w[0], w[1]).init(&Default::default())).collect()
    }

    fn record_bytes(model: Vec<Linear<Flex>>) -> Vec<u8> {
        let recorder = NamedMpkBytesRecorder::<FullPrecisionSettings>::default();
        Recorder::<Flex>::record(&recorder, model.into_record(), ()).unwrap()
    }

    #[test]
    fn the_saved_shapes_are_the_models_in_order() {
        let bytes = record_bytes(layers(&[3, 5, 2]));
        assert_eq!(saved_shapes(&bytes).unwrap(), [vec![3, 5], vec![5], vec![5, 2], vec![2]]);
        assert_eq!(saved_shapes(&bytes).unwrap(), shapes::<Flex, _>(&layers(&[3, 5, 2])));
        // Control: bytes cut short are an error, not a guess.
        assert!(saved_shapes(&bytes[..bytes.len() / 2]).is_err());
    }

    /// Another model is refused, by number of tensors or by shape, on two threads at once,
    /// and no panic happens on the way: a counting panic hook installed before stays
    /// installed and is never called, where Burn's loader would have panicked.
    #[test]
    fn another_model_is_refused_before_burn_loads_it_on_two_threads_at_once() {
        let panics = Arc::new(AtomicUsize::new(0));
        let counted = panics.clone();
        let previous = std::panic::take_hook();
        // Only this test's threads count: other tests may panic meanwhile.
        std::panic::set_hook(Box::new(move |_| {
            if std::thread::current().name().is_some_and(|name| name.starts_with("fit-check")) {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        }));
        let saved = Arc::new(record_bytes(layers(&[3, 5, 2])));
        let threads: Vec<_> = (0..2)
            .map(|i| {
                let saved = saved.clone();
                let thread = std::thread::Builder::new().name(format!("fit-check-{i}"));
                thread
                    .spawn(move || {
                        let path = Path::new("ckpt");
                        let deeper =
                            check_fits::<Flex, _>(&layers(&[3, 5, 5, 2]), &saved, path).unwrap_err().to_string();
                        let wider = check_fits::<Flex, _>(&layers(&[3, 6, 2]), &saved, path).unwrap_err().to_string();
                        let same = check_fits::<Flex, _>(&layers(&[3, 5, 2]), &saved, path);
                        (deeper, wider, same.is_ok())
                    })
                    .unwrap()
            })
            .collect();
        let results: Vec<_> = threads.into_iter().map(|thread| thread.join().unwrap()).collect();
        let quiet = panics.load(Ordering::SeqCst);
        // The control: a panic now reaches the hook, which is still the one installed.
        let control = std::thread::Builder::new().name("fit-check-control".into()).spawn(|| panic!("the control"));
        assert!(control.unwrap().join().is_err());
        let after_control = panics.load(Ordering::SeqCst);
        std::panic::set_hook(previous);
        for (deeper, wider, same) in results {
            assert!(
                deeper.contains("does not fit") && deeper.contains("4 parameter tensors saved, 6 here"),
                "{deeper}"
            );
            assert!(wider.contains("parameter 0 is [3, 5] in the checkpoint and [3, 6] here"), "{wider}");
            assert!(same, "the model the record was saved from fits");
        }
        assert_eq!(quiet, 0, "nothing panicked while refusing");
        assert_eq!(after_control, 1, "the hook installed before is still installed");
    }
}
