//! `Lean`'s embedding gradient against Burn's, through autodiff, on wgpu (Fusion over
//! CubeCL: the custom operation and the kernel) and on Flex (Burn's op).

use std::sync::atomic::Ordering;

use burn::backend::{Autodiff, Flex, Wgpu};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::module::embedding;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::cube::LAUNCHED;
use crate::backend::Lean;

/// A lookup: the table, the ids `[batch, seq]` and the gradient arriving at its output.
#[derive(Clone)]
struct Case {
    table: Vec<f32>,
    ids: Vec<i64>,
    upstream: Vec<f32>,
    shape: [usize; 4],
}

impl Case {
    fn random(rng: &mut SmallRng, [batch, seq, rows, width]: [usize; 4]) -> Self {
        let mut values = |len: usize| (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect::<Vec<_>>();
        let (table, upstream) = (values(rows * width), values(batch * seq * width));
        // Few distinct ids, so that rows sum several tokens; the last row among them.
        let ids =
            (0..batch * seq).map(|n| if n == 0 { rows as i64 - 1 } else { rng.random_range(0..rows.min(5)) as i64 });
        Self { table, ids: ids.collect(), upstream, shape: [batch, seq, rows, width] }
    }

    /// The table's gradient for `Σ output · upstream`, as bits.
    fn grad_bits<B: AutodiffBackend>(&self) -> Vec<u32> {
        let [batch, seq, rows, width] = self.shape;
        let device = Default::default();
        let table =
            Tensor::<B, 2>::from_data(TensorData::new(self.table.clone(), [rows, width]), &device).require_grad();
        let ids = Tensor::<B, 2, Int>::from_data(TensorData::new(self.ids.clone(), [batch, seq]), &device);
        let upstream = Tensor::<B, 3>::from_data(TensorData::new(self.upstream.clone(), [batch, seq, width]), &device);
        let grads = (embedding(table.clone(), ids) * upstream).sum().backward();
        let grad = table.grad(&grads).expect("the table has a gradient");
        grad.into_data().to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect()
    }
}

fn shapes() -> Vec<[usize; 4]> {
    let mut rng = SmallRng::seed_from_u64(0xe3b);
    let mut shapes: Vec<[usize; 4]> = (0..4)
        .map(|_| {
            [rng.random_range(1..=4), rng.random_range(1..=40), rng.random_range(1..=300), rng.random_range(1..=70)]
        })
        .collect();
    shapes.push([2, 16, 1024, 8]);
    shapes
}

/// On wgpu, `Lean`'s gradient (the queued kernel) is Burn's bit for bit; the controls:
/// the custom operation and the kernel ran, and one id changed changes the gradient.
#[test]
fn the_kernels_gradient_is_burns_to_the_bit_on_wgpu() {
    let mut rng = SmallRng::seed_from_u64(0xe4c);
    for shape in shapes() {
        let case = Case::random(&mut rng, shape);
        let (executed, launched) = (super::fused::EXECUTED.load(Ordering::Relaxed), LAUNCHED.load(Ordering::Relaxed));
        let lean = case.grad_bits::<Autodiff<Lean<Wgpu>>>();
        assert!(super::fused::EXECUTED.load(Ordering::Relaxed) > executed, "the custom operation did not run");
        assert!(LAUNCHED.load(Ordering::Relaxed) > launched, "the kernel did not run");
        assert!(lean == case.grad_bits::<Autodiff<Wgpu>>(), "{shape:?}: Lean's gradient is not Burn's");
        let mut moved = case.clone();
        moved.ids[0] = (moved.ids[0] + 1) % shape[2] as i64;
        if shape[2] > 1 {
            assert!(moved.grad_bits::<Autodiff<Lean<Wgpu>>>() != lean, "{shape:?}: a changed id went unnoticed");
        }
    }
}

/// On Flex, `Lean`'s gradient is Burn's op.
#[test]
fn the_gradient_on_flex_is_burns() {
    let mut rng = SmallRng::seed_from_u64(0xe4d);
    let case = Case::random(&mut rng, [3, 7, 11, 5]);
    assert!(case.grad_bits::<Autodiff<Lean<Flex>>>() == case.grad_bits::<Autodiff<Flex>>());
}
