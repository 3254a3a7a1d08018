//! Full-step losses kept on the device until the trainer reads them back.
//!
//! Reading a scalar to the host waits for every op queued before it: a sync. Summing the
//! losses of several steps on the device and reading the sum once costs one sync for the
//! whole window instead of one per step.

use burn::tensor::backend::Backend;
use burn::tensor::{ElementConversion, Tensor};

/// The sum of the losses not yet read, and how many there are.
pub struct LossWindow<B: Backend> {
    sum: Option<Tensor<B, 1>>,
    steps: usize,
}

impl<B: Backend> Default for LossWindow<B> {
    fn default() -> Self {
        Self { sum: None, steps: 0 }
    }
}

impl<B: Backend> LossWindow<B> {
    /// Adds one step's loss (shape `[1]`), without reading it.
    pub fn push(&mut self, loss: Tensor<B, 1>) {
        self.sum = Some(match self.sum.take() {
            Some(sum) => sum + loss,
            None => loss,
        });
        self.steps += 1;
    }

    /// Losses waiting to be read.
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// Reads the window back (one sync) and empties it: the mean loss and the number of
    /// steps it covers, or `None` when nothing was pushed.
    pub fn read(&mut self) -> Option<(f64, usize)> {
        let sum = self.sum.take()?;
        let steps = std::mem::take(&mut self.steps);
        Some((sum.into_scalar().elem::<f64>() / steps as f64, steps))
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::flex::FlexDevice;
    use burn::backend::Flex;

    use super::*;

    #[test]
    fn reads_the_mean_of_the_window_and_starts_again() {
        let device = FlexDevice;
        let mut window = LossWindow::<Flex>::default();
        assert_eq!(window.read(), None);
        for loss in [1.0f32, 2.0, 6.0] {
            window.push(Tensor::from_floats([loss], &device));
        }
        assert_eq!(window.steps(), 3);
        assert_eq!(window.read(), Some((3.0, 3)));
        assert_eq!(window.steps(), 0);
        window.push(Tensor::from_floats([f32::NAN], &device));
        let (mean, steps) = window.read().expect("one loss");
        assert!(mean.is_nan() && steps == 1);
    }
}
