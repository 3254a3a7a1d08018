//! The packed attention's copies between token rows `[batch · seq, n · heads · head_dim]`
//! and heads `[batch, heads, seq, head_dim]` on Burn's CPU backend (`Flex`): rayon's
//! threads each copy whole rows or whole heads, one `head_dim` run at a time. Flex's own copy
//! of those layouts (a swap of the two middle dimensions, which its copy cannot collapse to
//! two) walks them one element at a time on one thread: about 4% of the CPU main job's
//! samples (perf, 2026-12-07). f32 in contiguous memory only: others take Burn's ops.

use burn::tensor::TensorData;
use burn_backend::{DType, TensorMetadata};
use burn_flex::FlexTensor;
use rayon::prelude::*;

/// `parts` (each `[batch, heads, seq, head_dim]`, the same shape) side by side in token
/// rows `[batch · seq, parts · heads · head_dim]`: each row a token's heads of the first
/// part, then of the second, … `None` where a part is not f32 in contiguous memory, the
/// shapes differ or one is empty.
pub(super) fn heads_into_rows(parts: &[FlexTensor]) -> Option<FlexTensor> {
    let dims = heads_dims(parts.first()?)?;
    let slices = parts
        .iter()
        .map(|part| (heads_dims(part) == Some(dims)).then(|| contiguous(part)).flatten())
        .collect::<Option<Vec<&[f32]>>>()?;
    let [batch, heads, seq, head_dim] = dims;
    let width = parts.len() * heads * head_dim;
    let mut rows = vec![0.0f32; batch * seq * width];
    rows.par_chunks_mut(width).enumerate().for_each(|(row, out)| {
        let (b, t) = (row / seq, row % seq);
        let runs = out.chunks_exact_mut(head_dim);
        let sources = slices.iter().flat_map(|part| (0..heads).map(move |h| (part, h)));
        for (run, (part, h)) in runs.zip(sources) {
            run.copy_from_slice(&part[((b * heads + h) * seq + t) * head_dim..][..head_dim]);
        }
    });
    Some(FlexTensor::from_data(TensorData::new(rows, [batch * seq, width])))
}

/// Token rows `[batch · seq, heads · head_dim]` as contiguous heads `[batch, heads, seq,
/// head_dim]`. `None` where `rows` is not f32 in contiguous memory of that shape, or empty.
pub(super) fn rows_into_heads(rows: &FlexTensor, [batch, seq, heads]: [usize; 3]) -> Option<FlexTensor> {
    let shape = rows.shape();
    if shape.num_dims() != 2 || rows.dtype() != DType::F32 || heads == 0 {
        return None;
    }
    let [tokens, width] = shape.dims::<2>();
    let head_dim = width / heads;
    if tokens != batch * seq || width % heads != 0 || tokens * width == 0 {
        return None;
    }
    let values = contiguous(rows)?;
    let mut out = vec![0.0f32; tokens * width];
    out.par_chunks_mut(seq * head_dim).enumerate().for_each(|(head, out)| {
        let (b, h) = (head / heads, head % heads);
        for (t, run) in out.chunks_exact_mut(head_dim).enumerate() {
            run.copy_from_slice(&values[(b * seq + t) * width + h * head_dim..][..head_dim]);
        }
    });
    Some(FlexTensor::from_data(TensorData::new(out, [batch, heads, seq, head_dim])))
}

/// A non-empty f32 `[batch, heads, seq, head_dim]` tensor's dimensions.
fn heads_dims(tensor: &FlexTensor) -> Option<[usize; 4]> {
    let shape = tensor.shape();
    let fits = shape.num_dims() == 4 && tensor.dtype() == DType::F32 && shape.num_elements() > 0;
    fits.then(|| shape.dims::<4>())
}

/// `tensor`'s values, where it is f32 in contiguous memory.
fn contiguous(tensor: &FlexTensor) -> Option<&[f32]> {
    let len = tensor.shape().num_elements();
    tensor.as_slice::<f32>().filter(|values| values.len() == len)
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;
    use burn::tensor::{Distribution, Tensor, TensorPrimitive};
    use burn_backend::tensor::FloatTensor;

    use super::super::packed;
    use super::*;

    const LAYOUT: [usize; 3] = [3, 5, 4];
    const HEAD_DIM: usize = 6;

    fn random(dims: [usize; 4]) -> FlexTensor {
        Tensor::<Flex, 4>::random(dims, Distribution::Default, &Default::default()).into_primitive().tensor()
    }

    /// Flattened: `into_data` reads a tensor in its logical order, whatever its strides.
    fn flat<const D: usize>(tensor: FloatTensor<Flex>) -> Vec<f32> {
        let tensor = Tensor::<Flex, D>::from_primitive(TensorPrimitive::Float(tensor));
        tensor.into_data().to_vec::<f32>().unwrap()
    }

    #[test]
    fn the_copies_give_burns_values_bit_for_bit() {
        let [batch, seq, heads] = LAYOUT;
        let dims = [batch, heads, seq, HEAD_DIM];
        let parts = [random(dims), random(dims), random(dims)];
        // Three parts (the gradients' packing) and one (the output's rows).
        let ours = heads_into_rows(&parts).expect("contiguous f32 heads");
        let burns = packed::pack_heads::<Flex>(parts.to_vec(), LAYOUT);
        assert_eq!(flat::<2>(ours.clone()), flat::<2>(burns));
        let one = heads_into_rows(&parts[..1]).expect("contiguous f32 heads");
        assert_eq!(flat::<2>(one), flat::<2>(packed::heads_to_rows::<Flex>(parts[0].clone())));
        // Back: the first part's rows as heads, against Burn's view of them.
        let rows = heads_into_rows(&parts[..1]).unwrap();
        let heads = rows_into_heads(&rows, LAYOUT).expect("contiguous f32 rows");
        assert!(contiguous(&heads).is_some(), "the heads are not contiguous");
        assert_eq!(flat::<4>(heads.clone()), flat::<4>(packed::rows_to_heads::<Flex>(rows, LAYOUT)));
        assert_eq!(flat::<4>(heads), flat::<4>(parts[0].clone()));
        // Control: the parts in another order are caught.
        let swapped = heads_into_rows(&[parts[1].clone(), parts[0].clone(), parts[2].clone()]).unwrap();
        assert_ne!(flat::<2>(swapped), flat::<2>(ours));
    }

    #[test]
    fn other_layouts_are_left_to_burns_ops() {
        let [batch, seq, heads] = LAYOUT;
        let view = Tensor::<Flex, 4>::from_primitive(TensorPrimitive::Float(random([batch, seq, heads, HEAD_DIM])))
            .swap_dims(1, 2)
            .into_primitive()
            .tensor();
        assert!(heads_into_rows(&[view]).is_none(), "a strided view was read as contiguous");
        let dims = [batch, heads, seq, HEAD_DIM];
        assert!(heads_into_rows(&[random(dims), random([batch, heads, seq, HEAD_DIM + 1])]).is_none());
        let rows = heads_into_rows(&[random(dims)]).unwrap();
        assert!(rows_into_heads(&rows, [batch, seq + 1, heads]).is_none());
        assert!(heads_into_rows(&[]).is_none());
    }
}
