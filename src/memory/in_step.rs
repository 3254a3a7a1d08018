//! The peak inside a step: the pool read from a second thread while the step runs.
//!
//! Step telemetry reads the pool between steps, when the step's activations and gradients
//! are gone again. How far the reserve exceeds what a step really needs at once (the pool
//! layout's overhead, docs/memory.md) takes the peak of live allocations *during* the step,
//! which only a reader running beside it sees. [`InStepPeak`] is that reader: a thread that
//! reads the pool of the stream the step runs on every period and keeps the highest values.
//!
//! It is a measuring instrument: every reading flushes the stream's queued kernels, which
//! changes how work is batched and costs time. The peak it reports is a lower bound on the
//! true one, as close as its period is short against the step.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::probe::{MemoryProbe, PoolReader};

/// The highest readings between two calls of [`InStepPeak::take`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InStepReading {
    /// The most bytes live allocations held at once.
    pub peak_in_use: u64,
    /// The most bytes the pool had reserved.
    pub peak_reserved: u64,
    /// How many readings these are the highest of.
    pub readings: u64,
}

impl InStepReading {
    /// The higher of both readings' peaks, over both their readings.
    pub fn max(self, other: Self) -> Self {
        Self {
            peak_in_use: self.peak_in_use.max(other.peak_in_use),
            peak_reserved: self.peak_reserved.max(other.peak_reserved),
            readings: self.readings + other.readings,
        }
    }
}

#[derive(Default)]
struct Peaks {
    stop: AtomicBool,
    in_use: AtomicU64,
    reserved: AtomicU64,
    readings: AtomicU64,
}

/// A thread reading the pool every `period` while steps run (see the module docs (`src/memory/in_step.rs`)).
/// Stopped when dropped.
pub struct InStepPeak {
    peaks: Arc<Peaks>,
    thread: Option<JoinHandle<()>>,
}

impl InStepPeak {
    /// Starts reading the pool that work issued *from the calling thread* on `device`
    /// allocates from; `None` where `B` has no device pool.
    pub fn start<B: MemoryProbe>(device: &B::Device, period: Duration) -> Option<Self> {
        Self::reading(B::pool_reader(device)?, period)
    }

    /// Starts calling `reader` every `period`; `None` if the thread could not start.
    pub fn reading(reader: PoolReader, period: Duration) -> Option<Self> {
        let peaks = Arc::new(Peaks::default());
        let shared = Arc::clone(&peaks);
        let thread = std::thread::Builder::new()
            .name("leanburn-in-step-peak".into())
            .spawn(move || {
                while !shared.stop.load(Ordering::Relaxed) {
                    if let Some(sample) = reader.read() {
                        shared.in_use.fetch_max(sample.bytes_in_use, Ordering::Relaxed);
                        shared.reserved.fetch_max(sample.bytes_reserved, Ordering::Relaxed);
                        shared.readings.fetch_add(1, Ordering::Relaxed);
                    }
                    std::thread::sleep(period);
                }
            })
            .ok()?;
        Some(Self { peaks, thread: Some(thread) })
    }

    /// The highest readings since the last call (or the start), `None` if there was none
    /// yet; the next interval starts empty.
    pub fn take(&self) -> Option<InStepReading> {
        let readings = self.peaks.readings.swap(0, Ordering::Relaxed);
        let reading = InStepReading {
            peak_in_use: self.peaks.in_use.swap(0, Ordering::Relaxed),
            peak_reserved: self.peaks.reserved.swap(0, Ordering::Relaxed),
            readings,
        };
        (readings > 0).then_some(reading)
    }
}

impl Drop for InStepPeak {
    fn drop(&mut self) {
        self.peaks.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::wgpu::WgpuDevice;
    use burn::backend::{Flex, Wgpu};
    use burn::tensor::{Distribution, Tensor};

    use super::*;

    #[test]
    fn no_pool_no_reader() {
        assert!(InStepPeak::start::<Flex>(&burn::backend::flex::FlexDevice, Duration::from_millis(1)).is_none());
    }

    /// On llvmpipe: a 64 MiB intermediate that is gone again before the step ends is seen
    /// by the reader, never by a reading after the step (the control).
    #[test]
    fn sees_what_lived_only_inside_the_step() {
        let device = WgpuDevice::DefaultDevice;
        let intermediate = 64 << 20;
        let resident = Tensor::<Wgpu, 1>::zeros([1024], &device);
        let sampler = InStepPeak::start::<Wgpu>(&device, Duration::from_millis(1)).expect("a wgpu pool");

        // The step: an intermediate made, used, held a while, and dropped.
        let scratch = Tensor::<Wgpu, 1>::random([intermediate as usize / 4], Distribution::Default, &device);
        let total: f32 = scratch.clone().sum().into_scalar();
        std::thread::sleep(Duration::from_millis(50));
        drop(scratch);
        let after = <Wgpu as MemoryProbe>::memory_sample(&device).expect("a wgpu pool");

        let reading = sampler.take().expect("readings during 50 ms at 1 ms");
        eprintln!("after the step: {after:?}; during it: {reading:?}");
        assert!(total.is_finite());
        assert!(after.bytes_in_use < intermediate, "the control: the step's end still holds {} B", after.bytes_in_use);
        assert!(reading.peak_in_use >= intermediate, "the reader saw only {} B in use", reading.peak_in_use);
        assert!(reading.peak_reserved >= reading.peak_in_use);
        drop(resident);
    }
}
