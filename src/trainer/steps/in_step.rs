//! The pool read during steps ([`ExecutionConfig::sample_pool_ms`](crate::trainer::ExecutionConfig::sample_pool_ms)):
//! each step's readings, kept until a step reads its loss and records them.

use std::time::Duration;

use crate::memory::{InStepPeak, InStepReading, MemoryProbe};

/// An [`InStepPeak`] reader and the readings of the steps since the last recorded one.
pub(in crate::trainer) struct InStepSampling {
    period_ms: u64,
    /// `None` where the backend has no device pool.
    reader: Option<InStepPeak>,
    /// The highest readings of the steps that left their loss on the device.
    pending: Option<InStepReading>,
}

impl InStepSampling {
    /// Starts reading the pool that work issued from the calling thread on `device`
    /// allocates from, every `period_ms`.
    pub(in crate::trainer) fn start<B: MemoryProbe>(device: &B::Device, period_ms: u64) -> Self {
        let reader = InStepPeak::start::<B>(device, Duration::from_millis(period_ms));
        if reader.is_none() {
            tracing::info!("sample_pool_ms: no device pool on this backend; nothing is read during steps");
        }
        Self::over(reader, period_ms)
    }

    fn over(reader: Option<InStepPeak>, period_ms: u64) -> Self {
        Self { period_ms, reader, pending: None }
    }

    pub(in crate::trainer) fn period_ms(&self) -> u64 {
        self.period_ms
    }

    /// A step starts: what was read since the last one ended (a validation, a checkpoint)
    /// is no step's.
    pub(in crate::trainer) fn begin_step(&mut self) {
        if let Some(reader) = &self.reader {
            let _ = reader.take();
        }
    }

    /// A step ended: its readings join the pending ones, which a step that `read` its
    /// loss (and synced the device) takes for its record.
    pub(in crate::trainer) fn end_step(&mut self, read: bool) -> Option<InStepReading> {
        if let Some(reading) = self.reader.as_ref().and_then(InStepPeak::take) {
            self.pending = Some(self.pending.map_or(reading, |pending| pending.max(reading)));
        }
        if read {
            self.pending.take()
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::memory::{MemorySample, PoolReader};

    /// A pool whose bytes in use the test sets, read every millisecond.
    fn scripted() -> (Arc<AtomicU64>, InStepSampling) {
        let in_use = Arc::new(AtomicU64::new(0));
        let shared = Arc::clone(&in_use);
        let reader = PoolReader::new(move || {
            let bytes = shared.load(Ordering::Relaxed);
            Some(MemorySample { bytes_in_use: bytes, bytes_reserved: bytes, allocations: 1 })
        });
        (in_use, InStepSampling::over(InStepPeak::reading(reader, Duration::from_millis(1)), 1))
    }

    /// Holds the pool at `bytes` for long enough to be read several times.
    fn hold(pool: &AtomicU64, bytes: u64) {
        pool.store(bytes, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(30));
    }

    /// Starts a step at `bytes`, after any reading of the value before has landed.
    fn begin_at(sampling: &mut InStepSampling, pool: &AtomicU64, bytes: u64) {
        pool.store(bytes, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(5));
        sampling.begin_step();
    }

    #[test]
    fn a_reading_step_records_the_peak_of_the_steps_since_the_last_reading_one() {
        let (pool, mut sampling) = scripted();
        begin_at(&mut sampling, &pool, 100);
        hold(&pool, 700);
        assert_eq!(sampling.end_step(false), None, "a step that read no loss records nothing");
        // Between steps (a validation, say): no step's.
        hold(&pool, 900);
        begin_at(&mut sampling, &pool, 300);
        hold(&pool, 300);
        let reading = sampling.end_step(true).expect("readings");
        assert_eq!(reading.peak_in_use, 700, "the unread step's peak, not the one between steps: {reading:?}");
        assert!(reading.readings >= 2, "{reading:?}");

        begin_at(&mut sampling, &pool, 200);
        hold(&pool, 200);
        let reading = sampling.end_step(true).expect("readings");
        assert_eq!(reading.peak_in_use, 200, "a recorded peak is not recorded again: {reading:?}");
    }
}
