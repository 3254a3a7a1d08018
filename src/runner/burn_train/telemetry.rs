//! Step records as burn-train metrics: device-pool memory and the share of predicted steps.

use std::sync::{Arc, Mutex};

use burn::train::metric::state::{FormatOptions, NumericMetricState};
use burn::train::metric::{
    Metric, MetricAttributes, MetricMetadata, MetricName, Numeric, NumericAttributes, NumericEntry, SerializedEntry,
};

use crate::trainer::StepReport;

/// What the strategy saw of its steps, shared with the metrics it hands out. The metrics
/// read the newest values when burn-train processes a step's output (on its own thread,
/// so possibly a step later than that output).
#[derive(Clone, Debug, Default)]
pub struct StepTelemetry {
    state: Arc<Mutex<Seen>>,
}

#[derive(Debug, Default)]
struct Seen {
    steps: usize,
    predicted: usize,
    /// Bytes the device pool had in use after the newest step that read it; or the
    /// process's resident bytes where there is no pool.
    memory: Option<(u64, MemoryKind)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MemoryKind {
    Device,
    Host,
}

impl StepTelemetry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one step.
    pub fn observe(&self, record: &StepReport) {
        let mut seen = self.state.lock().expect("telemetry lock");
        seen.steps += 1;
        seen.predicted += usize::from(record.predicted);
        match (record.memory, record.host_memory) {
            (Some(memory), _) => seen.memory = Some((memory.bytes_in_use, MemoryKind::Device)),
            (None, Some(host)) => seen.memory = Some((host.resident, MemoryKind::Host)),
            (None, None) => {}
        }
    }

    /// Steps observed, and how many of them were predicted.
    pub fn steps(&self) -> (usize, usize) {
        let seen = self.state.lock().expect("telemetry lock");
        (seen.steps, seen.predicted)
    }

    /// A metric of the device pool's bytes in use (MiB), or the process's resident memory
    /// where the backend has no pool.
    pub fn pool_memory(&self) -> PoolMemoryMetric {
        PoolMemoryMetric { telemetry: self.clone(), state: NumericMetricState::new() }
    }

    /// A metric of the share of steps so far that were predicted (%).
    pub fn predicted_share(&self) -> PredictedShareMetric {
        PredictedShareMetric { telemetry: self.clone(), state: NumericMetricState::new() }
    }
}

/// Device-pool memory in use after the newest step (MiB); see [`StepTelemetry::pool_memory`].
#[derive(Clone)]
pub struct PoolMemoryMetric {
    telemetry: StepTelemetry,
    state: NumericMetricState,
}

impl Metric for PoolMemoryMetric {
    type Input = ();

    fn name(&self) -> MetricName {
        Arc::new("Memory in use".to_string())
    }

    fn description(&self) -> Option<String> {
        let kind = self.telemetry.state.lock().expect("telemetry lock").memory.map(|(_, kind)| kind);
        Some(match kind {
            Some(MemoryKind::Host) => "process resident memory (no device pool on this backend)".into(),
            _ => "device memory pool: bytes in use after the step".into(),
        })
    }

    fn attributes(&self) -> MetricAttributes {
        NumericAttributes { unit: Some("MiB".to_string()), higher_is_better: false }.into()
    }

    fn update(&mut self, _item: &(), _metadata: &MetricMetadata) -> SerializedEntry {
        let memory = self.telemetry.state.lock().expect("telemetry lock").memory;
        let mib = memory.map_or(f64::NAN, |(bytes, _)| bytes as f64 / (1 << 20) as f64);
        self.state.update(mib, 1, FormatOptions::new(self.name()).unit("MiB").precision(1))
    }

    fn clear(&mut self) {
        self.state.reset();
    }
}

impl Numeric for PoolMemoryMetric {
    fn value(&self) -> NumericEntry {
        self.state.current_value()
    }

    fn running_value(&self) -> NumericEntry {
        self.state.running_value()
    }
}

/// The share of the steps so far that were predicted (%); see
/// [`StepTelemetry::predicted_share`].
#[derive(Clone)]
pub struct PredictedShareMetric {
    telemetry: StepTelemetry,
    state: NumericMetricState,
}

impl Metric for PredictedShareMetric {
    type Input = ();

    fn name(&self) -> MetricName {
        Arc::new("Predicted steps".to_string())
    }

    fn attributes(&self) -> MetricAttributes {
        NumericAttributes { unit: Some("%".to_string()), higher_is_better: true }.into()
    }

    fn update(&mut self, _item: &(), _metadata: &MetricMetadata) -> SerializedEntry {
        let (steps, predicted) = self.telemetry.steps();
        let share = 100.0 * predicted as f64 / steps.max(1) as f64;
        self.state.update(share, 1, FormatOptions::new(self.name()).unit("%").precision(1))
    }

    fn clear(&mut self) {
        self.state.reset();
    }
}

impl Numeric for PredictedShareMetric {
    fn value(&self) -> NumericEntry {
        self.state.current_value()
    }

    fn running_value(&self) -> NumericEntry {
        self.state.running_value()
    }
}
