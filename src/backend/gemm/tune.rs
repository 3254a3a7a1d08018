//! Picks the fastest of a GEMM's candidate algorithms by timing each on the device, once per
//! plan (`LEANBURN_GEMM_TUNE=1`): cuBLASLt's heuristic ranks its candidates without running
//! them, and its first choice is not always the fastest for a shape (on an H200 the
//! attention's output projection, 8,192 × 768 × 768 and its gradients, ran at 1.65× PyTorch's
//! time with it).

use cudarc::driver::result::event;
use cudarc::driver::sys::{CUevent, CUevent_flags, CUstream};

/// Untimed runs of each candidate before its timed ones.
const WARMUP: usize = 1;
/// Timed runs of each candidate; the median counts.
const TIMED: usize = 3;

/// The index of the fastest of `count` candidates, each enqueued on `stream` by `run(i)`
/// (the stream is waited for once per timing, so this blocks the host). `None` where no
/// timing could be taken (an event call failed): keep the heuristic's first choice.
pub(super) fn fastest(count: usize, stream: CUstream, run: impl FnMut(usize)) -> Option<usize> {
    let start = event::create(CUevent_flags::CU_EVENT_DEFAULT).ok()?;
    let Ok(end) = event::create(CUevent_flags::CU_EVENT_DEFAULT) else {
        // SAFETY: made above; nothing waits on it.
        let _ = unsafe { event::destroy(start) };
        return None;
    };
    let fastest = time_each(count, stream, [start, end], run);
    // SAFETY: the events were made above and nothing waits on them any more.
    unsafe {
        let _ = event::destroy(start);
        let _ = event::destroy(end);
    }
    fastest
}

/// [`fastest`] with its two events.
fn time_each(count: usize, stream: CUstream, [start, end]: [CUevent; 2], mut run: impl FnMut(usize)) -> Option<usize> {
    let mut best: Option<(usize, f32)> = None;
    for candidate in 0..count {
        let mut times = Vec::with_capacity(TIMED);
        for attempt in 0..WARMUP + TIMED {
            // SAFETY: both events and the stream are live; `run` enqueues on that stream.
            let millis = unsafe {
                event::record(start, stream).ok()?;
                run(candidate);
                event::record(end, stream).ok()?;
                event::synchronize(end).ok()?;
                event::elapsed(start, end).ok()?
            };
            if attempt >= WARMUP {
                times.push(millis);
            }
        }
        times.sort_by(f32::total_cmp);
        let median = times[TIMED / 2];
        if best.is_none_or(|(_, fastest)| median < fastest) {
            best = Some((candidate, median));
        }
    }
    best.map(|(candidate, _)| candidate)
}
