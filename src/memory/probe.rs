//! Reading the device memory pool of a backend, through every wrapper around it.

use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::{Autodiff, Flex, NdArray};
use burn::tensor::backend::Backend;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use burn_fusion::{Fusion, FusionBackend};
use cubecl::stream_id::StreamId;
use cubecl::MemoryUsage;
use serde::{Deserialize, Serialize};

/// One reading of a device memory pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemorySample {
    /// Bytes held by live allocations (tensors, workspaces) right now.
    pub bytes_in_use: u64,
    /// Bytes the pool has taken from the device, in use or kept for reuse.
    pub bytes_reserved: u64,
    /// Number of live allocations.
    pub allocations: u64,
}

impl From<MemoryUsage> for MemorySample {
    fn from(usage: MemoryUsage) -> Self {
        Self {
            bytes_in_use: usage.bytes_in_use,
            bytes_reserved: usage.bytes_reserved,
            allocations: usage.number_allocs,
        }
    }
}

/// Reads one stream's pool from any thread, without syncing it (see
/// [`MemoryProbe::pool_reader`]).
pub struct PoolReader(Box<dyn Fn() -> Option<MemorySample> + Send>);

impl PoolReader {
    pub fn new(read: impl Fn() -> Option<MemorySample> + Send + 'static) -> Self {
        Self(Box::new(read))
    }

    pub fn read(&self) -> Option<MemorySample> {
        (self.0)()
    }
}

/// A backend whose device memory can be read.
///
/// Implemented for every CubeCL backend (CUDA, wgpu, ...), and forwarded through `Fusion`
/// and `Autodiff`, so the same call works on `Autodiff<Wgpu>` and on its inner backend.
pub trait MemoryProbe: Backend {
    /// The pool's counters, or `None` where the backend has no device pool to read (the
    /// CPU backends): callers must show "not available", never a zero.
    ///
    /// Pending work is flushed first so the reading includes every op already issued;
    /// on a lazy backend this is a host sync.
    fn memory_sample(device: &Self::Device) -> Option<MemorySample>;

    /// Asks the pool to return the memory it keeps for reuse to the device.
    fn release_unused(device: &Self::Device);

    /// A reader, for another thread, of the pool that work issued from the *calling*
    /// thread allocates from (CubeCL keeps one per stream, a stream per thread); it reads
    /// without syncing (see [`InStepPeak`](super::InStepPeak)). `None` where there is no pool.
    fn pool_reader(device: &Self::Device) -> Option<PoolReader>;
}

impl<R, F, I, BT> MemoryProbe for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn memory_sample(device: &Self::Device) -> Option<MemorySample> {
        match R::client(device).memory_usage() {
            Ok(usage) => Some(MemorySample::from(usage)),
            Err(err) => {
                tracing::warn!(%err, "memory usage could not be read from the device");
                None
            }
        }
    }

    fn release_unused(device: &Self::Device) {
        R::client(device).memory_cleanup();
    }

    fn pool_reader(device: &Self::Device) -> Option<PoolReader> {
        let mut client = R::client(device);
        // SAFETY: the client is only ever asked for this stream's usage counters, which
        // the server reads between the stream's own tasks; it launches and allocates
        // nothing on the stream.
        unsafe { client.set_stream(StreamId::current()) };
        Some(PoolReader::new(move || client.memory_usage().ok().map(MemorySample::from)))
    }
}

impl<B: FusionBackend + MemoryProbe> MemoryProbe for Fusion<B> {
    fn memory_sample(device: &Self::Device) -> Option<MemorySample> {
        // Fusion queues ops; without draining the queue the pool has not seen them yet.
        if let Err(err) = <Self as Backend>::sync(device) {
            tracing::warn!(%err, "device sync before a memory reading failed");
        }
        B::memory_sample(device)
    }

    fn release_unused(device: &Self::Device) {
        if let Err(err) = <Self as Backend>::sync(device) {
            tracing::warn!(%err, "device sync before releasing memory failed");
        }
        B::release_unused(device);
    }

    fn pool_reader(device: &Self::Device) -> Option<PoolReader> {
        // Fusion runs each queued operation on the stream of the thread that issued it.
        B::pool_reader(device)
    }
}

impl<B: MemoryProbe, C: CheckpointStrategy> MemoryProbe for Autodiff<B, C> {
    fn memory_sample(device: &Self::Device) -> Option<MemorySample> {
        B::memory_sample(device)
    }

    fn release_unused(device: &Self::Device) {
        B::release_unused(device);
    }

    fn pool_reader(device: &Self::Device) -> Option<PoolReader> {
        B::pool_reader(device)
    }
}

impl MemoryProbe for NdArray {
    fn memory_sample(_device: &Self::Device) -> Option<MemorySample> {
        None
    }

    fn release_unused(_device: &Self::Device) {}

    fn pool_reader(_device: &Self::Device) -> Option<PoolReader> {
        None
    }
}

impl MemoryProbe for Flex {
    fn memory_sample(_device: &Self::Device) -> Option<MemorySample> {
        None
    }

    fn release_unused(_device: &Self::Device) {}

    fn pool_reader(_device: &Self::Device) -> Option<PoolReader> {
        None
    }
}

/// What [`trim`] did: the pool before and after (both `None` on a backend without a pool).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrimReport {
    pub before: Option<MemorySample>,
    pub after: Option<MemorySample>,
}

impl TrimReport {
    /// Reserved bytes handed back to the device, where both readings exist.
    pub fn released_bytes(&self) -> Option<u64> {
        match (self.before, self.after) {
            (Some(before), Some(after)) => Some(before.bytes_reserved.saturating_sub(after.bytes_reserved)),
            _ => None,
        }
    }
}

/// Asks the pool of `device` to release what it can, and reports before and after.
///
/// The pool decides what is worth releasing; nothing here guarantees a drop.
pub fn trim<B: MemoryProbe>(device: &B::Device) -> TrimReport {
    let before = B::memory_sample(device);
    B::release_unused(device);
    let after = B::memory_sample(device);
    TrimReport { before, after }
}
