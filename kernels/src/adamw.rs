//! AdamW's update of one parameter tensor in one kernel: the gradient scaled by the
//! clipping's factor, both moments and the decoupled weight decay, where Burn's AdamW runs
//! about fifteen tensor ops (Loshchilov and Hutter, arXiv 1711.05101; the numerics of
//! `burn-optim`'s `AdamW`, computed in f32 whatever the element type).
//!
//! For each element, with `g` the gradient times `scale[0]`:
//!
//! ```text
//! m' = β₁·m + (1 − β₁)·g
//! v' = β₂·v + (1 − β₂)·g²
//! p' = p·decay − lr · (m' / c₁) / (√(v' / c₂) + ε)
//! ```
//!
//! `decay = 1 − lr·weight_decay`, `c₁ = 1 − β₁ᵗ`, `c₂ = 1 − β₂ᵗ`; the first step is the
//! same with `m = v = 0`. All tensors are contiguous and of one length; each unit updates
//! one vector of neighbouring elements.

use cubecl::prelude::*;
use cubecl::CubeDim;

use crate::tensor_group::{group_size, GroupGrid};
use crate::vector::ElementwiseGrid;

/// The step's scalars (runtime values: one compiled kernel serves every step).
#[derive(CubeLaunch, CubeType, Clone, Copy, Debug, PartialEq)]
pub struct AdamWScalars {
    /// β₁, the first moment's decay.
    pub beta_1: f32,
    /// β₂, the second moment's decay.
    pub beta_2: f32,
    /// ε, added to the second moment's square root.
    pub epsilon: f32,
    /// The learning rate.
    pub lr: f32,
    /// `1 − lr · weight_decay`, the factor every weight is multiplied by.
    pub decay: f32,
    /// `1 − β₁ᵗ`, the first moment's bias correction at step `t` (from 1).
    pub correction_1: f32,
    /// `1 − β₂ᵗ`, the second moment's.
    pub correction_2: f32,
}

/// One vector's update: the parameter and both moments after the step, from the
/// parameter, the gradient (times `factor`) and both moments before it.
#[cube]
fn updated<F: Float, N: Size>(
    p: Vector<F, N>,
    g: Vector<F, N>,
    m: Vector<F, N>,
    v: Vector<F, N>,
    factor: f32,
    s: &AdamWScalars,
) -> (Vector<F, N>, Vector<F, N>, Vector<F, N>) {
    let mut p_out = Vector::<F, N>::empty();
    let mut m_out = Vector::<F, N>::empty();
    let mut v_out = Vector::<F, N>::empty();
    #[unroll]
    for i in 0..p.vector_size() {
        let g_i = f32::cast_from(g[i]) * factor;
        let m_i = f32::cast_from(m[i]) * s.beta_1 + g_i * (1.0f32 - s.beta_1);
        let v_i = f32::cast_from(v[i]) * s.beta_2 + g_i * g_i * (1.0f32 - s.beta_2);
        let delta = (m_i / s.correction_1) / ((v_i / s.correction_2).sqrt() + s.epsilon);
        p_out[i] = F::cast_from(f32::cast_from(p[i]) * s.decay - delta * s.lr);
        m_out[i] = F::cast_from(m_i);
        v_out[i] = F::cast_from(v_i);
    }
    (p_out, m_out, v_out)
}

/// One unit per vector of `N` elements (the vector width, see [`vector_width`](crate::vector_width)):
/// reads the parameter, its gradient and both moments, writes the updated three.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn adamw_kernel<F: Float, N: Size>(
    param: &Tensor<Vector<F, N>>,
    grad: &Tensor<Vector<F, N>>,
    moment_1: &Tensor<Vector<F, N>>,
    moment_2: &Tensor<Vector<F, N>>,
    scale: &Tensor<f32>,
    param_out: &mut Tensor<Vector<F, N>>,
    moment_1_out: &mut Tensor<Vector<F, N>>,
    moment_2_out: &mut Tensor<Vector<F, N>>,
    vectors: usize,
    s: &AdamWScalars,
) {
    if ABSOLUTE_POS >= vectors {
        terminate!();
    }
    let at = ABSOLUTE_POS;
    let (p, m, v) = updated(param[at], grad[at], moment_1[at], moment_2[at], scale[0], s);
    param_out[at] = p;
    moment_1_out[at] = m;
    moment_2_out[at] = v;
}

/// Units per cube of [`adamw_in_place_kernel`].
const GROUP_UNITS: usize = 256;

/// Vectors each cube of [`adamw_in_place_kernel`] updates: four per unit. On llvmpipe, over
/// gpt2-mini's 52 tensors, launches of seven took 2.7× the time of launches of one with one
/// vector per unit, 1.4× with four (45 against 33 ms), and with sixteen both took 63 ms.
const GROUP_TILE: usize = GROUP_UNITS * 4;

/// [`adamw_kernel()`] over a group of parameters, writing each parameter and its moments
/// over themselves: member `i`'s `vectors[i]` vectors are updated by the cubes
/// `first_cube[i] .. first_cube[i + 1]`, `GROUP_TILE` vectors each, neighbouring units
/// on neighbouring vectors (see `tensor_group`). Each unit reads its vectors of the three
/// before it writes them, and no unit reads another's.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn adamw_in_place_kernel<F: Float, N: Size>(
    params: &mut Sequence<Tensor<Vector<F, N>>>,
    grads: &Sequence<Tensor<Vector<F, N>>>,
    moments_1: &mut Sequence<Tensor<Vector<F, N>>>,
    moments_2: &mut Sequence<Tensor<Vector<F, N>>>,
    scale: &Tensor<f32>,
    first_cube: Sequence<usize>,
    vectors: Sequence<usize>,
    s: &AdamWScalars,
) {
    let members = comptime![params.len()];
    let cube = CUBE_POS;
    let factor = scale[0];
    #[unroll]
    for i in 0..members {
        if cube >= first_cube[i] && cube < first_cube[i + 1] {
            let param = params.index_mut(i);
            let grad = grads.index(i);
            let moment_1 = moments_1.index_mut(i);
            let moment_2 = moments_2.index_mut(i);
            let start = (cube - first_cube[i]) * GROUP_TILE;
            let end = min(start + GROUP_TILE, vectors[i]);
            let mut at = start + UNIT_POS as usize;
            while at < end {
                let (p, m, v) = updated(param[at], grad[at], moment_1[at], moment_2[at], factor, s);
                param[at] = p;
                moment_1[at] = m;
                moment_2[at] = v;
                at += GROUP_UNITS;
            }
        }
    }
}

/// Updates a parameter of `len` elements: `param_out`, `moment_1_out` and `moment_2_out`
/// from `param`, `grad`, `moment_1` and `moment_2`, the gradient multiplied by `scale[0]`
/// (an f32 tensor of at least one element: the clipping's factor, or 1).
///
/// # Safety
/// The seven tensors of `F` must be contiguous with `len` elements each, and `scale` must
/// hold at least one f32; the kernel indexes them unchecked. The outputs must not share a
/// buffer with the inputs.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_adamw<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    [param, grad, moment_1, moment_2]: [TensorArg<R>; 4],
    scale: TensorArg<R>,
    [param_out, moment_1_out, moment_2_out]: [TensorArg<R>; 3],
    len: usize,
    scalars: AdamWScalars,
) {
    let ElementwiseGrid { width, vectors, cube_count, cube_dim } = ElementwiseGrid::new::<R, F>(client, len);
    adamw_kernel::launch_unchecked::<F, R>(
        client,
        cube_count,
        cube_dim,
        width,
        param,
        grad,
        moment_1,
        moment_2,
        scale,
        param_out,
        moment_1_out,
        moment_2_out,
        vectors,
        scalars_launch(scalars),
    );
}

/// One parameter's tensors for [`launch_adamw_in_place`]: `[param, grad, moment_1,
/// moment_2]` and their length in elements.
pub struct AdamWMember<R: Runtime> {
    /// The parameter, its gradient and both moments.
    pub tensors: [TensorArg<R>; 4],
    /// Elements in each of them.
    pub len: usize,
}

/// The parameters [`launch_adamw_in_place`] takes in one launch on this runtime (four
/// bindings each, within its binding limit).
pub fn adamw_group_size<R: Runtime>(client: &ComputeClient<R>) -> usize {
    group_size(client, 4)
}

/// [`launch_adamw`] in place, over a group of parameters in one launch: each member's
/// parameter and both moments are overwritten with their updated values (no new buffers,
/// a third less memory traffic written to fresh pages), every gradient multiplied by
/// `scale[0]`. The members are updated `width` elements to a vector: pass a width that
/// divides every member's length ([`vector_width`](crate::vector_width) of their common divisor, or 1).
///
/// # Safety
/// As [`launch_adamw`] for each member's four tensors (contiguous, `len` elements of `F`)
/// and the scale; each member's parameter and moments must be three distinct buffers that
/// nothing else reads afterwards as the values before the step, and no buffer may appear
/// in two members. At most [`adamw_group_size`] members, and `width` must divide each
/// member's length.
pub unsafe fn launch_adamw_in_place<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    members: Vec<AdamWMember<R>>,
    scale: TensorArg<R>,
    width: usize,
    scalars: AdamWScalars,
) {
    let vectors: Vec<usize> = members.iter().map(|member| member.len / width).collect();
    let cube_dim = CubeDim::new_1d(GROUP_UNITS as u32);
    let grid = GroupGrid::new(client, vectors.iter().map(|v| v.div_ceil(GROUP_TILE)));
    let (mut params, mut grads, mut moments_1, mut moments_2) =
        (SequenceArg::new(), SequenceArg::new(), SequenceArg::new(), SequenceArg::new());
    for AdamWMember { tensors: [param, grad, moment_1, moment_2], .. } in members {
        params.push(param);
        grads.push(grad);
        moments_1.push(moment_1);
        moments_2.push(moment_2);
    }
    adamw_in_place_kernel::launch_unchecked::<F, R>(
        client,
        grid.cube_count.clone(),
        cube_dim,
        width,
        params,
        grads,
        moments_1,
        moments_2,
        scale,
        grid.first_cube_arg(),
        vectors.into_iter().collect(),
        scalars_launch(scalars),
    );
}

fn scalars_launch<R: Runtime>(scalars: AdamWScalars) -> AdamWScalarsLaunch<R> {
    let AdamWScalars { beta_1, beta_2, epsilon, lr, decay, correction_1, correction_2 } = scalars;
    AdamWScalarsLaunch::new(beta_1, beta_2, epsilon, lr, decay, correction_1, correction_2)
}
