//! Batches of token windows: cut on the host, moved to the device one batch at a time.
//!
//! A window is `seq_len + 1` consecutive tokens: the first `seq_len` are the inputs, the
//! last `seq_len` the targets (each input's next token). Training draws windows at random
//! offsets with a seeded [`WindowSampler`]; evaluation uses fixed, non-overlapping
//! windows spread evenly over the split with [`evaluation_windows`], so every evaluation
//! sees the same tokens, drawn from the whole split rather than from its first file.

use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::error::DataError;
use super::split::Split;
use crate::trainer::{HybridBatch, SelectableBatch};

/// Draws batches of windows at random offsets of a token slice, reproducibly from a seed.
#[derive(Clone, Debug)]
pub struct WindowSampler {
    batch: usize,
    seq_len: usize,
    rng: SmallRng,
}

impl WindowSampler {
    /// A sampler of `batch` windows of `seq_len` tokens per batch, seeded with `seed`.
    /// Fails if `batch` or `seq_len` is zero.
    pub fn new(batch: usize, seq_len: usize, seed: u64) -> Result<Self, DataError> {
        check_shape(batch, seq_len)?;
        Ok(Self { batch, seq_len, rng: SmallRng::seed_from_u64(seed) })
    }

    /// Windows per batch.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Tokens per window (inputs; the targets are the same length).
    pub fn seq_len(&self) -> usize {
        self.seq_len
    }

    /// Draws one batch from `tokens`: `batch` windows whose start offsets are uniform over
    /// every offset that leaves room for `seq_len + 1` tokens (windows may overlap).
    ///
    /// Fails with [`DataError::CorpusTooShort`], naming `split`, if `tokens` holds fewer
    /// than `seq_len + 1` tokens.
    pub fn sample(&mut self, tokens: &[u32], split: Split) -> Result<HostBatch, DataError> {
        let needed = self.seq_len + 1;
        if tokens.len() < needed {
            return Err(DataError::CorpusTooShort { available: tokens.len(), needed, split });
        }
        let last_start = tokens.len() - needed;
        let rng = &mut self.rng;
        let starts = (0..self.batch).map(|_| rng.random_range(0..=last_start));
        Ok(HostBatch::from_windows(tokens, starts, self.batch, self.seq_len))
    }

    /// Moves past `batches` batches of [`sample`](Self::sample) on the same `tokens`: the
    /// same draws of their start offsets, no window copied (a resumed run's way back to
    /// where it stopped: 10,000 steps of 8 windows are 80,000 draws). Fails as `sample`.
    pub fn skip(&mut self, batches: usize, tokens: &[u32], split: Split) -> Result<(), DataError> {
        let needed = self.seq_len + 1;
        if tokens.len() < needed {
            return Err(DataError::CorpusTooShort { available: tokens.len(), needed, split });
        }
        let last_start = tokens.len() - needed;
        for _ in 0..batches * self.batch {
            self.rng.random_range(0..=last_start);
        }
        Ok(())
    }
}

/// Deterministic evaluation batches: non-overlapping windows spread evenly over `tokens`,
/// grouped `batch` at a time, at most `max_batches` batches. `tokens` holds `W` disjoint
/// windows (window `j` starts at `j * seq_len`); of the `n = batch · batches` taken,
/// window `k` is number `⌊k · W / n⌋`, so a few batches still sample the whole split
/// (consecutive windows from its start would sample one file of a corpus). A final
/// partial batch is dropped, so every batch is full; the result is empty when `tokens`
/// cannot fill one batch, or when `batch` or `seq_len` is zero.
pub fn evaluation_windows(tokens: &[u32], batch: usize, seq_len: usize, max_batches: usize) -> Vec<HostBatch> {
    if batch == 0 || seq_len == 0 || tokens.len() <= seq_len {
        return Vec::new();
    }
    // Window k needs tokens up to k * seq_len + seq_len inclusive.
    let windows = (tokens.len() - 1) / seq_len;
    let batches = (windows / batch).min(max_batches);
    let taken = batches * batch;
    (0..batches)
        .map(|b| {
            let starts = (b * batch..(b + 1) * batch).map(|k| k * windows / taken * seq_len);
            HostBatch::from_windows(tokens, starts, batch, seq_len)
        })
        .collect()
}

/// Fails if either dimension of a batch is zero.
fn check_shape(batch: usize, seq_len: usize) -> Result<(), DataError> {
    if batch == 0 {
        return Err(DataError::invalid("the batch size must be at least 1"));
    }
    if seq_len == 0 {
        return Err(DataError::invalid("the sequence length must be at least 1"));
    }
    Ok(())
}

/// A batch of windows on the host: inputs and targets, row-major `[batch, seq_len]`, as
/// `i64` ready for an integer tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostBatch {
    inputs: Vec<i64>,
    targets: Vec<i64>,
    batch: usize,
    seq_len: usize,
}

impl HostBatch {
    /// The windows of `seq_len + 1` tokens starting at `starts` (each in range).
    fn from_windows(tokens: &[u32], starts: impl Iterator<Item = usize>, batch: usize, seq_len: usize) -> Self {
        let mut inputs = Vec::with_capacity(batch * seq_len);
        let mut targets = Vec::with_capacity(batch * seq_len);
        for start in starts {
            let window = &tokens[start..start + seq_len + 1];
            inputs.extend(window[..seq_len].iter().map(|&token| i64::from(token)));
            targets.extend(window[1..].iter().map(|&token| i64::from(token)));
        }
        debug_assert_eq!(inputs.len(), batch * seq_len);
        Self { inputs, targets, batch, seq_len }
    }

    /// The input tokens, row-major `[batch, seq_len]`.
    pub fn inputs(&self) -> &[i64] {
        &self.inputs
    }

    /// The target tokens (each input's successor), row-major `[batch, seq_len]`.
    pub fn targets(&self) -> &[i64] {
        &self.targets
    }

    /// Windows in the batch.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Tokens per window.
    pub fn seq_len(&self) -> usize {
        self.seq_len
    }

    /// Input tokens in the batch, `batch × seq_len`.
    pub fn tokens(&self) -> usize {
        self.batch * self.seq_len
    }

    /// Copies the batch to `device` as two `[batch, seq_len]` integer tensors (converted to
    /// the backend's integer type there).
    pub fn to_device<B: Backend>(&self, device: &B::Device) -> TokenBatch<B> {
        self.clone().into_device(device)
    }

    /// Moves the batch to `device`, as [`to_device`](Self::to_device) without copying the
    /// host vectors first.
    ///
    /// One host-to-device copy for both tensors: inputs and targets go up as one
    /// `[2·batch, seq_len]` tensor whose halves become the two fields (views of one buffer,
    /// freed together).
    pub fn into_device<B: Backend>(self, device: &B::Device) -> TokenBatch<B> {
        let (batch, seq_len) = (self.batch, self.seq_len);
        let mut both = self.inputs;
        both.extend_from_slice(&self.targets);
        let both = Tensor::<B, 2, Int>::from_data(TensorData::new(both, [2 * batch, seq_len]), device);
        TokenBatch { inputs: both.clone().slice([0..batch]), targets: both.slice([batch..2 * batch]) }
    }
}

/// A batch of token windows on the device: what a language model's train and inference
/// steps take.
#[derive(Clone, Debug)]
pub struct TokenBatch<B: Backend> {
    /// Input token ids, `[batch, seq_len]`.
    pub inputs: Tensor<B, 2, Int>,
    /// Target token ids (each input's next token), `[batch, seq_len]`.
    pub targets: Tensor<B, 2, Int>,
}

impl<B: Backend> TokenBatch<B> {
    /// Input tokens in the batch, `batch × seq_len`.
    pub fn tokens(&self) -> usize {
        let [batch, seq_len] = self.inputs.dims();
        batch * seq_len
    }
}

/// A token batch counts its tokens as items, so throughput reads in tokens per second.
impl<B: AutodiffBackend> HybridBatch<B> for TokenBatch<B> {
    type Inner = TokenBatch<B::InnerBackend>;

    fn into_inner(self) -> Self::Inner {
        TokenBatch { inputs: self.inputs.inner(), targets: self.targets.inner() }
    }

    fn items(&self) -> usize {
        self.tokens()
    }
}

/// The chosen sequences, inputs and targets alike.
impl<B: AutodiffBackend> SelectableBatch<B> for TokenBatch<B> {
    fn examples(&self) -> usize {
        self.inputs.dims()[0]
    }

    fn select(self, indices: &[usize]) -> Self {
        let (inputs, targets) = (self.inputs, self.targets).select(indices);
        TokenBatch { inputs, targets }
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::flex::FlexDevice;
    use burn::backend::{Autodiff, Flex};

    use super::*;

    const DEVICE: FlexDevice = FlexDevice;

    fn count(n: u32) -> Vec<u32> {
        (0..n).collect()
    }

    /// Every row must be a run of consecutive source tokens, its targets shifted by one.
    fn assert_windows_of_counting_tokens(batch: &HostBatch, tokens: usize) {
        assert_eq!(batch.inputs().len(), batch.tokens());
        assert_eq!(batch.targets().len(), batch.tokens());
        for row in 0..batch.batch() {
            let span = row * batch.seq_len()..(row + 1) * batch.seq_len();
            let (inputs, targets) = (&batch.inputs()[span.clone()], &batch.targets()[span]);
            let start = inputs[0];
            let expected: Vec<i64> = (start..start + batch.seq_len() as i64).collect();
            assert_eq!(inputs, expected.as_slice(), "row {row}");
            let shifted: Vec<i64> = expected.iter().map(|token| token + 1).collect();
            assert_eq!(targets, shifted.as_slice(), "row {row}");
            assert!(targets[batch.seq_len() - 1] < tokens as i64, "row {row} runs off the end");
        }
    }

    #[test]
    fn targets_are_inputs_shifted_by_one() {
        let tokens = count(50);
        let mut sampler = WindowSampler::new(4, 8, 7).expect("sampler");
        for _ in 0..20 {
            let batch = sampler.sample(&tokens, Split::Train).expect("sample");
            assert_eq!((batch.batch(), batch.seq_len(), batch.tokens()), (4, 8, 32));
            assert_windows_of_counting_tokens(&batch, tokens.len());
        }
    }

    #[test]
    fn every_offset_is_reachable_including_the_last() {
        // 10 tokens, windows of 8 + 1: offsets 0 and 1 only.
        let tokens = count(10);
        let mut sampler = WindowSampler::new(1, 8, 3).expect("sampler");
        let mut seen = [false; 2];
        for _ in 0..200 {
            let batch = sampler.sample(&tokens, Split::Train).expect("sample");
            seen[batch.inputs()[0] as usize] = true;
        }
        assert_eq!(seen, [true, true]);
        // Exactly seq_len + 1 tokens: the single window.
        let batch = WindowSampler::new(2, 9, 0).expect("sampler").sample(&tokens, Split::Train).expect("sample");
        assert_eq!(batch.inputs()[..9], (0..9).collect::<Vec<i64>>()[..]);
        assert_eq!(batch.targets()[9..], (1..10).collect::<Vec<i64>>()[..]);
    }

    #[test]
    fn the_seed_decides_the_batches() {
        let tokens = count(10_000);
        let draw = |seed| {
            let mut sampler = WindowSampler::new(8, 16, seed).expect("sampler");
            (0..3).map(|_| sampler.sample(&tokens, Split::Train).expect("sample")).collect::<Vec<_>>()
        };
        assert_eq!(draw(42), draw(42));
        assert_ne!(draw(42), draw(43));
    }

    /// Skipping batches draws the same offsets as sampling them, copying no window: the
    /// next batch is the same; the control: one batch fewer skipped gives another. A split
    /// too short to sample is refused as `sample` refuses it.
    #[test]
    fn skipping_batches_lands_where_sampling_them_would() {
        let tokens = count(5_000);
        for skipped in [0, 1, 7, 300] {
            let mut sampled = WindowSampler::new(4, 16, 11).expect("sampler");
            (0..skipped).for_each(|_| drop(sampled.sample(&tokens, Split::Train).unwrap()));
            let mut skipping = WindowSampler::new(4, 16, 11).expect("sampler");
            skipping.skip(skipped, &tokens, Split::Train).unwrap();
            let next = sampled.sample(&tokens, Split::Train).unwrap();
            assert_eq!(skipping.sample(&tokens, Split::Train).unwrap(), next, "after {skipped} batches");
            let mut short = WindowSampler::new(4, 16, 11).expect("sampler");
            short.skip(skipped + 1, &tokens, Split::Train).unwrap();
            assert_ne!(short.sample(&tokens, Split::Train).unwrap(), next, "control: {} skipped", skipped + 1);
        }
        let mut sampler = WindowSampler::new(4, 16, 11).expect("sampler");
        assert!(matches!(sampler.skip(3, &count(10), Split::Train), Err(DataError::CorpusTooShort { .. })));
    }

    #[test]
    fn a_short_split_and_zero_sizes_are_errors() {
        let mut sampler = WindowSampler::new(2, 8, 0).expect("sampler");
        match sampler.sample(&count(8), Split::Validation) {
            Err(DataError::CorpusTooShort { available, needed, split }) => {
                assert_eq!((available, needed, split), (8, 9, Split::Validation))
            }
            other => panic!("expected CorpusTooShort, got {other:?}"),
        }
        assert!(sampler.sample(&[], Split::Train).is_err());
        assert!(matches!(WindowSampler::new(0, 8, 0), Err(DataError::InvalidArgument(_))));
        assert!(matches!(WindowSampler::new(2, 0, 0), Err(DataError::InvalidArgument(_))));
    }

    #[test]
    fn evaluation_windows_are_fixed_and_disjoint() {
        // 35 tokens, seq 4: windows at 0, 4, ..., 28 (8 windows; the one at 32 would need
        // token 36). Batches of 3: two full batches, the partial third is dropped.
        let tokens = count(35);
        let batches = evaluation_windows(&tokens, 3, 4, 10);
        assert_eq!(batches.len(), 2);
        for batch in &batches {
            assert_windows_of_counting_tokens(batch, tokens.len());
        }
        let starts: Vec<i64> = batches.iter().flat_map(|batch| batch.inputs().chunks(4).map(|row| row[0])).collect();
        // Six of the eight windows, spread: numbers 0, 1, 2, 4, 5, 6.
        assert_eq!(starts, vec![0, 4, 8, 16, 20, 24]);
        assert_eq!(batches, evaluation_windows(&tokens, 3, 4, 10));
        // One batch of two from 1,000 tokens (249 windows): the start and the middle.
        let spread = evaluation_windows(&count(1000), 2, 4, 1);
        let starts: Vec<i64> = spread[0].inputs().chunks(4).map(|row| row[0]).collect();
        assert_eq!(starts, vec![0, 124 * 4]);
        for batch in &spread {
            assert_windows_of_counting_tokens(batch, 1000);
        }

        assert_eq!(evaluation_windows(&tokens, 3, 4, 1).len(), 1);
        assert_eq!(evaluation_windows(&tokens, 1, 4, 100).len(), 8);
        // 33 tokens: the window at 28 still fits (tokens 28..=32).
        assert_eq!(evaluation_windows(&count(33), 1, 4, 100).len(), 8);
        assert_eq!(evaluation_windows(&count(32), 1, 4, 100).len(), 7);
        assert!(evaluation_windows(&count(4), 1, 4, 100).is_empty());
        assert!(evaluation_windows(&tokens, 0, 4, 100).is_empty());
        assert!(evaluation_windows(&tokens, 3, 0, 100).is_empty());
        assert!(evaluation_windows(&tokens, 3, 4, 0).is_empty());
    }

    #[test]
    fn to_device_keeps_shape_and_values() {
        let host = WindowSampler::new(3, 5, 1).expect("sampler").sample(&count(100), Split::Train).expect("sample");
        let device: TokenBatch<Flex> = host.to_device(&DEVICE);
        assert_eq!(device.inputs.dims(), [3, 5]);
        assert_eq!(device.targets.dims(), [3, 5]);
        assert_eq!(device.tokens(), 15);
        let read =
            |tensor: Tensor<Flex, 2, Int>| tensor.into_data().convert::<i64>().to_vec::<i64>().expect("i64 data");
        assert_eq!(read(device.inputs), host.inputs());
        assert_eq!(read(device.targets), host.targets());
    }

    #[test]
    fn a_hybrid_batch_counts_tokens_and_moves_to_the_inner_backend() {
        let host = evaluation_windows(&count(100), 2, 6, 1).remove(0);
        let batch: TokenBatch<Autodiff<Flex>> = host.clone().into_device(&DEVICE);
        assert_eq!(HybridBatch::items(&batch), 12);
        let inner: TokenBatch<Flex> = batch.into_inner();
        assert_eq!(inner.inputs.dims(), [2, 6]);
        let values = inner.targets.into_data().convert::<i64>().to_vec::<i64>().expect("i64 data");
        assert_eq!(values, host.targets());
    }
}
