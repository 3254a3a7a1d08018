//! Where a run's host batches come from.

/// A stream of host batches for [`Runner::run`](super::Runner::run). A closure that returns
/// the next batch is one. A resumed run first moves the stream past the batches its earlier
/// steps took, with [`skip`](Self::skip): by default by drawing and dropping them, which
/// costs what drawing them cost (a run of 10,000 steps draws 10,000 batches again before
/// its first step); a source that can move on without building the batches says so in
/// its own `skip`, and a resumed run then starts at once, on the batches an unbroken run
/// would have taken.
pub trait BatchSource {
    /// One micro-batch, on the host.
    type Batch;
    /// Why the stream could not give one ([`Runner::run`](super::Runner::run) makes it a
    /// [`RunError::Data`](super::RunError::Data), so there it must convert into a boxed error).
    type Error;

    /// The next batch.
    fn next_batch(&mut self) -> Result<Self::Batch, Self::Error>;

    /// Moves past `count` batches, as `count` calls of [`next_batch`](Self::next_batch)
    /// would, leaving the stream where they would.
    fn skip(&mut self, count: usize) -> Result<(), Self::Error> {
        for _ in 0..count {
            self.next_batch()?;
        }
        Ok(())
    }
}

/// A closure is a source that skips by drawing.
impl<H, E, F> BatchSource for F
where
    F: FnMut() -> Result<H, E>,
{
    type Batch = H;
    type Error = E;

    fn next_batch(&mut self) -> Result<H, E> {
        self()
    }
}
