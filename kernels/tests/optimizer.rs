//! The optimizer's kernels against their CPU references on a real runtime (wgpu; llvmpipe
//! in CI).
//!
//! AdamW: randomized lengths (multiples of the vector width and not, one past a million
//! elements), steps from the first to late ones, with and without weight decay, the
//! gradient scaled by a clipping factor below 1; f32 and f16 (rounded inputs, f32 math).
//! The in-place kernel (the parameter and moments overwritten) writes the same bits as
//! the one with separate outputs, on every case and both types.
//! Controls: the comparison fails for a bias correction one step off and for a scale left
//! out, in place or not.
//!
//! The in-place kernel updates a group of parameters in one launch: each member's bits are
//! those of its own launch into new buffers (lengths at vector width 4 and 1, one member
//! past a million elements; f32 and f16). Control: a member left out keeps its values.
//!
//! The clipping factor: gradients of random lengths (one element to past a million), f32
//! and f16 together, norms above and below the clipping norm, launched in the runtime's
//! full groups; each gradient's partial sums are the same bits in a group as alone.
//! Controls: a gradient left out is caught, by the factor and by the partial sums.

mod common;

use common::Element;
use cubecl::prelude::*;
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};

use leanburn_kernels::reference::{self, AdamWSettings};
use leanburn_kernels::{
    adamw_group_size, launch_adamw, launch_adamw_in_place, launch_clip_factor, launch_squares, squares_group_size,
    squares_partials, vector_width, AdamWMember, AdamWScalars,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// f32: |got − want| ≤ F32_TOLERANCE · (1 + |want|).
const F32_TOLERANCE: f32 = 1e-6;
/// f16 outputs: their own rounding (2⁻¹¹ relative) dominates.
const F16_TOLERANCE: f32 = 1e-3;

/// The kernel's scalars for `settings`, computed as leanburn's optimizer does (in f32,
/// the bias corrections as Burn's AdamW: `1 − βᵗ` with `powi` in f32).
fn scalars(settings: AdamWSettings) -> AdamWScalars {
    let (beta_1, beta_2) = (settings.beta_1 as f32, settings.beta_2 as f32);
    AdamWScalars {
        beta_1,
        beta_2,
        epsilon: settings.epsilon as f32,
        lr: settings.lr as f32,
        decay: (1.0 - settings.lr * settings.weight_decay) as f32,
        correction_1: 1.0 - beta_1.powi(settings.time),
        correction_2: 1.0 - beta_2.powi(settings.time),
    }
}

/// Runs the kernel on `[param, grad, m, v]` with `scale` as the clipping factor, writing
/// new buffers or, `in_place`, over the parameter and moments.
fn run<E: Element>(
    client: &ComputeClient<WgpuRuntime>,
    inputs: [&[f32]; 4],
    scale: f32,
    scalars: AdamWScalars,
    in_place: bool,
) -> [Vec<f32>; 3] {
    let len = inputs[0].len();
    let upload = |values: &[f32]| client.create_from_slice(E::as_bytes(&E::narrow(values)));
    let handles = inputs.map(upload);
    let scale = client.create_from_slice(f32::as_bytes(&[scale]));
    let outputs = [0; 3].map(|_| client.empty(len * size_of::<E>()));
    let read = |handle: &cubecl::server::Handle| E::widen(E::from_bytes(&client.read_one(handle.clone()).unwrap()));
    if in_place {
        let width = vector_width(client, size_of::<E>(), len);
        let member = AdamWMember { tensors: [0, 1, 2, 3].map(|i| arg(&handles[i], len)), len };
        unsafe { launch_adamw_in_place::<WgpuRuntime, E>(client, vec![member], arg(&scale, 1), width, scalars) };
        return [0, 2, 3].map(|i| read(&handles[i]));
    }
    unsafe {
        launch_adamw::<WgpuRuntime, E>(
            client,
            [0, 1, 2, 3].map(|i| arg(&handles[i], len)),
            arg(&scale, 1),
            [0, 1, 2].map(|i| arg(&outputs[i], len)),
            len,
            scalars,
        );
    }
    outputs.each_ref().map(read)
}

/// The largest |got − want| / (1 + |want|) over the three outputs.
fn error(got: &[Vec<f32>; 3], want: &[Vec<f32>; 3]) -> f32 {
    got.iter()
        .zip(want)
        .flat_map(|(g, w)| g.iter().zip(w).map(|(g, w)| (g - w).abs() / (1.0 + w.abs())))
        .fold(0.0, f32::max)
}

/// A case: the length, the step, the weight decay and the clipping factor.
fn cases() -> Vec<(usize, i32, f64, f64)> {
    let mut rng = SmallRng::seed_from_u64(0xada3);
    let mut cases: Vec<(usize, i32, f64, f64)> = (0..8)
        .map(|i| {
            let len = if i % 2 == 0 { 4 * rng.random_range(1..=3000) } else { rng.random_range(1..=9000) };
            let time = [1, 2, 10, 1000][i % 4];
            let weight_decay = if i % 3 == 0 { 0.0 } else { 0.1 };
            let scale = if i % 2 == 0 { 1.0 } else { rng.random_range(0.05..1.0) };
            (len, time, weight_decay, scale)
        })
        .collect();
    cases.push(((1 << 20) + 3, 7, 0.1, 0.3));
    cases
}

/// Inputs with moments as a run reaches them: `m` about the gradient's size, `v` about
/// its square (zeros at the first step).
fn inputs(rng: &mut SmallRng, len: usize, time: i32) -> [Vec<f32>; 4] {
    let param: Vec<f32> = (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let grad: Vec<f32> = (0..len).map(|_| rng.random_range(-0.1f32..0.1)).collect();
    let first = time == 1;
    let m = (0..len).map(|_| if first { 0.0 } else { rng.random_range(-0.01f32..0.01) }).collect();
    let v = (0..len).map(|_| if first { 0.0 } else { rng.random_range(0.0f32..1e-4) }).collect();
    [param, grad, m, v]
}

fn settings(time: i32, weight_decay: f64, scale: f64) -> AdamWSettings {
    AdamWSettings { beta_1: 0.9, beta_2: 0.999, epsilon: 1e-8, lr: 3e-3, weight_decay, time, scale }
}

fn check<E: Element>(tolerance: f32) {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let mut rng = SmallRng::seed_from_u64(0x5eed);
    for (index, (len, time, weight_decay, scale)) in cases().into_iter().enumerate() {
        let round = |x: &Vec<f32>| E::widen(&E::narrow(x));
        let [param, grad, m, v] = inputs(&mut rng, len, time).map(|x| round(&x));
        let settings = settings(time, weight_decay, scale);
        let got = run::<E>(&client, [&param, &grad, &m, &v], scale as f32, scalars(settings), false);
        let want = reference::adamw(settings, &param, &grad, &m, &v);
        let err = error(&got, &want);
        assert!(
            err <= tolerance,
            "case {index} (len {len}, step {time}, decay {weight_decay}, scale {scale:.3}): off by {err:.2e} \
             (tolerance {tolerance:.0e})"
        );
        let in_place = run::<E>(&client, [&param, &grad, &m, &v], scale as f32, scalars(settings), true);
        let bits =
            |outputs: &[Vec<f32>; 3]| outputs.each_ref().map(|x| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        assert!(bits(&in_place) == bits(&got), "case {index} (len {len}): the in-place update wrote other bits");
    }
}

#[test]
fn f32_adamw_matches_the_reference() {
    check::<f32>(F32_TOLERANCE);
}

#[test]
fn f16_adamw_matches_the_reference() {
    check::<half::f16>(F16_TOLERANCE);
}

/// The controls: a bias correction one step late, or the clipping factor left out, puts
/// the kernel's result outside the tolerance of the reference.
#[test]
fn a_wrong_step_or_a_dropped_scale_is_caught() {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let mut rng = SmallRng::seed_from_u64(11);
    let [param, grad, m, v] = inputs(&mut rng, 4096, 3);
    let settings = settings(3, 0.1, 0.25);
    let want = reference::adamw(settings, &param, &grad, &m, &v);
    for in_place in [false, true] {
        let late = AdamWSettings { time: 4, ..settings };
        let late = run::<f32>(&client, [&param, &grad, &m, &v], 0.25, scalars(late), in_place);
        assert!(error(&late, &want) > 100.0 * F32_TOLERANCE, "a late bias correction went unnoticed ({in_place})");
        let unscaled = run::<f32>(&client, [&param, &grad, &m, &v], 1.0, scalars(settings), in_place);
        assert!(error(&unscaled, &want) > 100.0 * F32_TOLERANCE, "a dropped clipping factor went unnoticed");
        let right = run::<f32>(&client, [&param, &grad, &m, &v], 0.25, scalars(settings), in_place);
        assert!(error(&right, &want) <= F32_TOLERANCE, "the same inputs, rightly scaled, must match");
    }
}

/// One in-place launch over `members` (each `[param, grad, m, v]`), `width` elements to a
/// vector, scaled by `scale`; the member at `leave_out`, if any, is not passed to the
/// launch. Each member's parameter and moments after it.
fn run_group<E: Element>(
    client: &ComputeClient<WgpuRuntime>,
    members: &[[Vec<f32>; 4]],
    scale: f32,
    scalars: AdamWScalars,
    width: usize,
    leave_out: Option<usize>,
) -> Vec<[Vec<f32>; 3]> {
    let upload = |values: &Vec<f32>| client.create_from_slice(E::as_bytes(&E::narrow(values)));
    let handles: Vec<[cubecl::server::Handle; 4]> = members.iter().map(|m| m.each_ref().map(upload)).collect();
    let launched = handles
        .iter()
        .zip(members)
        .enumerate()
        .filter(|(i, _)| leave_out != Some(*i))
        .map(|(_, (handles, member))| {
            let len = member[0].len();
            AdamWMember { tensors: handles.each_ref().map(|h| arg(h, len)), len }
        })
        .collect();
    let scale = client.create_from_slice(f32::as_bytes(&[scale]));
    // SAFETY: each member's four buffers hold its length, distinct from every other's.
    unsafe { launch_adamw_in_place::<WgpuRuntime, E>(client, launched, arg(&scale, 1), width, scalars) };
    let read = |handle: &cubecl::server::Handle| E::widen(E::from_bytes(&client.read_one(handle.clone()).unwrap()));
    handles.iter().map(|h| [0, 2, 3].map(|i| read(&h[i]))).collect()
}

/// Members for a group launch: `count` of random lengths that are multiples of `multiple`,
/// one past a tile of the kernel's cubes and one of a single vector among them.
fn group_members(rng: &mut SmallRng, count: usize, multiple: usize) -> Vec<[Vec<f32>; 4]> {
    (0..count)
        .map(|i| {
            let len = match i {
                1 => multiple * 300_001,
                3 => multiple,
                _ => multiple * rng.random_range(1..=2000),
            };
            inputs(rng, len, 5)
        })
        .collect()
}

fn bits(outputs: &[Vec<f32>; 3]) -> [Vec<u32>; 3] {
    outputs.each_ref().map(|x| x.iter().map(|v| v.to_bits()).collect())
}

/// One launch over a full group writes each member's bits as its own launch into new
/// buffers does: lengths that share a vector width of 4, and odd ones at width 1; f32 and
/// f16. The control: a member left out of the launch keeps its values, which is caught.
fn check_group<E: Element>() {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let mut rng = SmallRng::seed_from_u64(0x6a0);
    let count = adamw_group_size(&client);
    let settings = settings(5, 0.1, 0.4);
    for multiple in [4, 1] {
        let round = |x: &Vec<f32>| E::widen(&E::narrow(x));
        let members: Vec<[Vec<f32>; 4]> =
            group_members(&mut rng, count, multiple).iter().map(|m| m.each_ref().map(round)).collect();
        let width = if multiple == 1 { 1 } else { vector_width(&client, size_of::<E>(), 4) };
        let grouped = run_group::<E>(&client, &members, 0.4, scalars(settings), width, None);
        for (i, (member, got)) in members.iter().zip(&grouped).enumerate() {
            let [p, g, m, v] = member.each_ref().map(|x| &x[..]);
            let alone = run::<E>(&client, [p, g, m, v], 0.4, scalars(settings), false);
            assert!(bits(got) == bits(&alone), "member {i} of {count} (len {}, width {width}): other bits", p.len());
        }
        let left_out = run_group::<E>(&client, &members, 0.4, scalars(settings), width, Some(2));
        assert!(bits(&left_out[2]) != bits(&grouped[2]), "control: a member left out of the launch went unnoticed");
        assert!(left_out[2][0] == members[2][0], "control: the member left out must keep its parameter");
    }
}

#[test]
fn a_group_launch_updates_each_member_as_its_own_launch_does() {
    check_group::<f32>();
    check_group::<half::f16>();
}

/// `handle` as a contiguous tensor of `len` elements.
fn arg(handle: &cubecl::server::Handle, len: usize) -> TensorArg<WgpuRuntime> {
    // SAFETY (of every use): each handle holds `len` elements of its type.
    unsafe { TensorArg::from_raw_parts(handle.clone(), vec![1].into(), vec![len].into()) }
}

/// The partial sums of squares of `grads` (the odd ones uploaded as f16) and their number,
/// launched `group` gradients at a time, each run's f32 gradients in one launch and its
/// f16 ones in another, the slots in that order. The gradient at `skip`, if any, is left
/// out of its launch (its group's last slots stay zero).
fn partials(
    client: &ComputeClient<WgpuRuntime>,
    grads: &[Vec<f32>],
    group: usize,
    skip: Option<usize>,
) -> (cubecl::server::Handle, usize) {
    let count: usize = grads.iter().map(|g| squares_partials(g.len())).sum();
    let partials = client.create_from_slice(f32::as_bytes(&vec![0.0f32; count]));
    let mut offset = 0;
    for (run, chunk) in grads.chunks(group).enumerate() {
        for half in [false, true] {
            let members: Vec<(usize, &Vec<f32>)> = chunk
                .iter()
                .enumerate()
                .map(|(j, g)| (run * group + j, g))
                .filter(|(i, _)| (i % 2 == 1) == half)
                .collect();
            let slots: usize = members.iter().map(|(_, g)| squares_partials(g.len())).sum();
            let upload = |grad: &Vec<f32>| match half {
                true => client.create_from_slice(half::f16::as_bytes(&half::f16::narrow(grad))),
                false => client.create_from_slice(f32::as_bytes(grad)),
            };
            let args: Vec<_> = members
                .iter()
                .filter(|(i, _)| skip != Some(*i))
                .map(|(_, g)| (arg(&upload(g), g.len()), g.len()))
                .collect();
            // SAFETY: each gradient holds its length; the group's slots lie inside `partials`.
            unsafe {
                match (args.is_empty(), half) {
                    (true, _) => {}
                    (false, true) => {
                        launch_squares::<WgpuRuntime, half::f16>(client, args, arg(&partials, count), offset)
                    }
                    (false, false) => launch_squares::<WgpuRuntime, f32>(client, args, arg(&partials, count), offset),
                }
            }
            offset += slots;
        }
    }
    (partials, count)
}

/// The clipping factor over `grads` from the kernels, `group` gradients a launch (see
/// [`partials`]).
fn clip_factor(
    client: &ComputeClient<WgpuRuntime>,
    grads: &[Vec<f32>],
    max_norm: f32,
    group: usize,
    skip: Option<usize>,
) -> f32 {
    let (partials, count) = partials(client, grads, group, skip);
    let factor = client.empty(size_of::<f32>());
    unsafe { launch_clip_factor::<WgpuRuntime>(client, arg(&partials, count), arg(&factor, 1), count, max_norm) };
    f32::from_bytes(&client.read_one(factor).unwrap())[0]
}

/// Gradients of random lengths, the odd ones already rounded to f16.
fn gradients(rng: &mut SmallRng, lens: &[usize]) -> Vec<Vec<f32>> {
    lens.iter()
        .enumerate()
        .map(|(i, &len)| {
            let grad: Vec<f32> = (0..len).map(|_| rng.random_range(-0.05f32..0.05)).collect();
            if i % 2 == 1 {
                half::f16::widen(&half::f16::narrow(&grad))
            } else {
                grad
            }
        })
        .collect()
}

/// f32 sums of up to a million squares: a few parts in a million of the factor.
const FACTOR_TOLERANCE: f64 = 2e-5;

#[test]
fn the_clip_factor_matches_the_reference() {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let mut rng = SmallRng::seed_from_u64(0xc11b);
    let mut lens: Vec<usize> = (0..10).map(|_| rng.random_range(1..=20_000)).collect();
    // Lengths read in vectors (GPT-2's widths among them) beside odd ones read a value a load.
    lens.extend([1, 1024, (1 << 20) + 3, 768, 3 * 768, 4 * 768 + 2, 8 * 1001]);
    assert!(vector_width(&client, size_of::<f32>(), 768) > 1, "the runtime reads no vectors: nothing tested here");
    let grads = gradients(&mut rng, &lens);
    let refs: Vec<&[f32]> = grads.iter().map(|g| &g[..]).collect();
    let squares: f64 = refs.iter().flat_map(|g| g.iter()).map(|&x| f64::from(x) * f64::from(x)).sum();
    // Clipping at a tenth of the norm, and at ten times it (the factor is 1).
    for max_norm in [0.1 * squares.sqrt(), 10.0 * squares.sqrt()] {
        let want = reference::clip_factor(&refs, max_norm);
        let got = f64::from(clip_factor(&client, &grads, max_norm as f32, squares_group_size(&client), None));
        assert!(
            (got - want).abs() <= FACTOR_TOLERANCE * want,
            "clipping at {max_norm:.3}: factor {got} against {want}"
        );
    }
}

/// The partial sums' bits, sorted (grouped launches order the slots otherwise).
fn sorted_partials(
    client: &ComputeClient<WgpuRuntime>,
    grads: &[Vec<f32>],
    group: usize,
    skip: Option<usize>,
) -> Vec<u32> {
    let (partials, _) = partials(client, grads, group, skip);
    let mut bits: Vec<u32> = f32::from_bytes(&client.read_one(partials).unwrap()).iter().map(|v| v.to_bits()).collect();
    bits.sort_unstable();
    bits
}

/// A gradient's partial sums are the same bits whichever group it is launched in: one
/// gradient a launch against the runtime's full groups. The control: a gradient left out
/// of its group changes them.
#[test]
fn grouped_squares_write_each_gradients_own_sums() {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let mut rng = SmallRng::seed_from_u64(0x9a0);
    let group = squares_group_size(&client);
    let mut lens: Vec<usize> = (0..group + 5).map(|_| rng.random_range(1..=30_000)).collect();
    lens[4] = (1 << 20) + 3;
    let grads = gradients(&mut rng, &lens);
    let alone = sorted_partials(&client, &grads, 1, None);
    assert!(sorted_partials(&client, &grads, group, None) == alone, "grouped launches wrote other partial sums");
    assert!(sorted_partials(&client, &grads, group, Some(4)) != alone, "control: a gradient left out went unnoticed");
}

/// The control: with one gradient left out of the sum, the factor is off.
#[test]
fn a_gradient_left_out_of_the_norm_is_caught() {
    let client = WgpuRuntime::client(&WgpuDevice::default());
    let mut rng = SmallRng::seed_from_u64(5);
    let grads = gradients(&mut rng, &[3000, 5000, 4000]);
    let refs: Vec<&[f32]> = grads.iter().map(|g| &g[..]).collect();
    let want = reference::clip_factor(&refs, 0.01);
    let left_out = f64::from(clip_factor(&client, &grads, 0.01, 3, Some(1)));
    assert!((left_out - want).abs() > 100.0 * FACTOR_TOLERANCE * want, "a missing gradient went unnoticed");
    let all = f64::from(clip_factor(&client, &grads, 0.01, 3, None));
    assert!((all - want).abs() <= FACTOR_TOLERANCE * want, "all gradients summed must match: {all} against {want}");
}
