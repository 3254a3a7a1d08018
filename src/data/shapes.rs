//! A procedurally generated image-classification task: name the shape in each image.
//!
//! Every image is drawn on the host from a seed: one of four shapes ([`ShapeKind`]) at a
//! random position, size (30–80% of the side) and colour, over a random darker
//! background, with Gaussian pixel noise. The same seed gives the same batches, and
//! nothing touches the device until [`ImageBatch::to_device`]; a batch is the only thing
//! the device ever holds.

use std::f32::consts::PI;
use std::fmt;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::InMemDataset;
use burn::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::error::DataError;

/// Classes of the shapes task.
pub const SHAPE_CLASSES: usize = 4;

/// The shape an image shows; its label is its index in [`ShapeKind::ALL`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShapeKind {
    /// A filled disc.
    Circle,
    /// A filled square, rotated by up to 45°.
    Square,
    /// A filled equilateral triangle at any rotation.
    Triangle,
    /// A thick line segment at any angle.
    Line,
}

impl ShapeKind {
    pub const ALL: [ShapeKind; SHAPE_CLASSES] = [Self::Circle, Self::Square, Self::Triangle, Self::Line];

    /// The class label.
    pub fn label(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Circle => "circle",
            Self::Square => "square",
            Self::Triangle => "triangle",
            Self::Line => "line",
        }
    }
}

impl fmt::Display for ShapeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Smallest and largest image side accepted.
const MIN_RESOLUTION: usize = 8;
const MAX_RESOLUTION: usize = 4096;

/// Draws batches of shape images, reproducibly from a seed.
#[derive(Clone, Debug)]
pub struct ShapeSampler {
    resolution: usize,
    batch: usize,
    noise: f32,
    rng: SmallRng,
}

impl ShapeSampler {
    /// A sampler of `batch` images of `resolution × resolution` pixels, seeded with `seed`.
    /// Fails if `batch` is zero or `resolution` is outside 8..=4096.
    pub fn new(resolution: usize, batch: usize, seed: u64) -> Result<Self, DataError> {
        if batch == 0 {
            return Err(DataError::invalid("the batch size must be at least 1, got 0"));
        }
        if !(MIN_RESOLUTION..=MAX_RESOLUTION).contains(&resolution) {
            return Err(DataError::invalid(format!(
                "the image resolution must be between {MIN_RESOLUTION} and {MAX_RESOLUTION} pixels, got {resolution}"
            )));
        }
        Ok(Self { resolution, batch, noise: 0.05, rng: SmallRng::seed_from_u64(seed) })
    }

    /// Standard deviation of the Gaussian noise added to every pixel (default 0.05).
    pub fn with_noise(mut self, noise: f32) -> Self {
        self.noise = noise.max(0.0);
        self
    }

    pub fn resolution(&self) -> usize {
        self.resolution
    }

    pub fn batch(&self) -> usize {
        self.batch
    }

    /// The next batch: each image's shape drawn uniformly from the four.
    pub fn sample(&mut self) -> ImageBatch {
        let pixels = 3 * self.resolution * self.resolution;
        let mut images = Vec::with_capacity(self.batch * pixels);
        let mut labels = Vec::with_capacity(self.batch);
        for _ in 0..self.batch {
            let kind = ShapeKind::ALL[self.rng.random_range(0..SHAPE_CLASSES)];
            images.extend(self.draw(kind));
            labels.push(kind.label() as i64);
        }
        ImageBatch { images, labels, batch: self.batch, resolution: self.resolution, channels: 3 }
    }

    /// One `[3, resolution, resolution]` image of `kind`.
    fn draw(&mut self, kind: ShapeKind) -> Vec<f32> {
        let side = self.resolution as f32;
        let background: [f32; 3] = std::array::from_fn(|_| self.rng.random_range(0.0..0.5));
        let colour = loop {
            let colour: [f32; 3] = std::array::from_fn(|_| self.rng.random::<f32>());
            let difference = colour.iter().zip(&background).map(|(a, b)| (a - b).abs()).sum::<f32>() / 3.0;
            if difference >= 0.3 {
                break colour;
            }
        };
        let extent = side * self.rng.random_range(0.3..0.8);
        let half = extent / 2.0;
        let centre = (self.rng.random_range(half..side - half), self.rng.random_range(half..side - half));
        let angle = self.rng.random_range(0.0..2.0 * PI);
        let shape = Geometry::new(kind, centre, half, angle, (side / 16.0).max(1.0));

        let plane = self.resolution * self.resolution;
        let mut image = vec![0.0; 3 * plane];
        for y in 0..self.resolution {
            for x in 0..self.resolution {
                let inside = shape.contains(x as f32 + 0.5, y as f32 + 0.5);
                for channel in 0..3 {
                    let base = if inside { colour[channel] } else { background[channel] };
                    let value = base + self.noise * self.gaussian();
                    image[channel * plane + y * self.resolution + x] = value.clamp(0.0, 1.0);
                }
            }
        }
        image
    }

    /// A standard normal draw (Box–Muller); 0 without noise, to keep the stream cheap.
    fn gaussian(&mut self) -> f32 {
        if self.noise == 0.0 {
            return 0.0;
        }
        let u1: f32 = self.rng.random_range(f32::EPSILON..1.0);
        let u2: f32 = self.rng.random();
        (-2.0 * u1.ln()).sqrt() * (2.0 * PI * u2).cos()
    }
}

/// A shape placed in the image: everything a pixel test needs.
struct Geometry {
    kind: ShapeKind,
    centre: (f32, f32),
    half: f32,
    /// Unit vector of the rotation.
    direction: (f32, f32),
    thickness: f32,
}

impl Geometry {
    fn new(kind: ShapeKind, centre: (f32, f32), half: f32, angle: f32, thickness: f32) -> Self {
        // A square looks the same every 90°: keep its rotation under 45° so a rotated
        // square never reads as a diamond of another class.
        let angle = if kind == ShapeKind::Square { angle % (PI / 4.0) } else { angle };
        Self { kind, centre, half, direction: (angle.cos(), angle.sin()), thickness }
    }

    /// Whether the pixel centre `(x, y)` is inside the shape.
    fn contains(&self, x: f32, y: f32) -> bool {
        let (dx, dy) = (x - self.centre.0, y - self.centre.1);
        // Coordinates in the shape's rotated frame.
        let (c, s) = self.direction;
        let (u, v) = (dx * c + dy * s, -dx * s + dy * c);
        match self.kind {
            ShapeKind::Circle => dx * dx + dy * dy <= self.half * self.half,
            // Half the side is `half / √2` so the rotated square stays within the extent.
            ShapeKind::Square => {
                let h = self.half / std::f32::consts::SQRT_2;
                u.abs() <= h && v.abs() <= h
            }
            ShapeKind::Triangle => {
                // Equilateral, circumradius `half`: inside when on the inner side of all
                // three edges, whose normals point at 0°, 120° and 240° in the shape's frame.
                let inradius = self.half / 2.0;
                (0..3).all(|k| {
                    let theta = k as f32 * 2.0 * PI / 3.0;
                    u * theta.cos() + v * theta.sin() <= inradius
                })
            }
            ShapeKind::Line => u.abs() <= self.half && v.abs() <= self.thickness / 2.0,
        }
    }
}

/// Images `[batch, channels, resolution, resolution]` (values in `[0, 1]`) and their labels, in
/// host memory.
#[derive(Clone, Debug, PartialEq)]
pub struct ImageBatch {
    pub images: Vec<f32>,
    pub labels: Vec<i64>,
    pub batch: usize,
    pub resolution: usize,
    /// Colour channels: 3 for the shapes, 1 for grey images.
    pub channels: usize,
}

impl ImageBatch {
    /// Host bytes of the images (f32) and labels (i64).
    pub fn bytes(&self) -> usize {
        self.images.len() * 4 + self.labels.len() * 8
    }

    fn shape(&self) -> [usize; 4] {
        [self.batch, self.channels, self.resolution, self.resolution]
    }

    /// A device copy, as the `(images, labels)` pair the classifiers take.
    pub fn to_device<B: Backend>(&self, device: &B::Device) -> (Tensor<B, 4>, Tensor<B, 1, Int>) {
        self.clone().into_device(device)
    }

    /// Moves the batch to `device`.
    pub fn into_device<B: Backend>(self, device: &B::Device) -> (Tensor<B, 4>, Tensor<B, 1, Int>) {
        let shape = self.shape();
        let labels = TensorData::new(self.labels, [self.batch]);
        (Tensor::from_data(TensorData::new(self.images, shape), device), Tensor::from_data(labels, device))
    }
}

/// `count` single images drawn from the stream of `seed`, as a Burn dataset (for
/// burn-train's data loaders, with [`ShapeBatcher`]).
pub fn shapes_dataset(
    resolution: usize,
    count: usize,
    seed: u64,
    noise: f32,
) -> Result<InMemDataset<ImageBatch>, DataError> {
    let mut sampler = ShapeSampler::new(resolution, 1, seed)?.with_noise(noise);
    Ok(InMemDataset::new((0..count).map(|_| sampler.sample()).collect()))
}

/// Burn's [`Batcher`] for [`ImageBatch`] items: stacks them into the `(images, labels)`
/// pair the classifiers take. Items must share a resolution.
#[derive(Clone, Copy, Debug, Default)]
pub struct ShapeBatcher;

impl<B: Backend> Batcher<B, ImageBatch, (Tensor<B, 4>, Tensor<B, 1, Int>)> for ShapeBatcher {
    fn batch(&self, items: Vec<ImageBatch>, device: &B::Device) -> (Tensor<B, 4>, Tensor<B, 1, Int>) {
        let resolution = items.first().map_or(0, |item| item.resolution);
        assert!(items.iter().all(|item| item.resolution == resolution), "ShapeBatcher: mixed resolutions");
        let batch = ImageBatch {
            batch: items.iter().map(|item| item.batch).sum(),
            images: items.iter().flat_map(|item| item.images.iter().copied()).collect(),
            labels: items.iter().flat_map(|item| item.labels.iter().copied()).collect(),
            resolution,
            channels: items.first().map_or(3, |item| item.channels),
        };
        batch.into_device(device)
    }
}

/// A fixed held-out set of `batches` batches, drawn from a stream whose seed is derived
/// from `seed` so that it never repeats the training stream of the same seed.
pub fn shapes_validation(
    resolution: usize,
    batch: usize,
    batches: usize,
    seed: u64,
) -> Result<Vec<ImageBatch>, DataError> {
    let mut sampler = ShapeSampler::new(resolution, batch, seed ^ 0x5EED_0F5A_11D0)?;
    Ok((0..batches).map(|_| sampler.sample()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Share of pixels in the minority colour of a two-colour image: the shape's area
    /// (a shape covers at most half the image; see the test's bound).
    fn coverage(image: &[f32], resolution: usize) -> f32 {
        let plane = resolution * resolution;
        let first = (image[0], image[plane], image[2 * plane]);
        let same = (0..plane).filter(|&i| (image[i], image[plane + i], image[2 * plane + i]) == first).count();
        let minority = same.min(plane - same);
        minority as f32 / plane as f32
    }

    #[test]
    fn the_dataset_batched_is_the_sampler_stream() {
        use burn::backend::flex::FlexDevice;
        use burn::backend::Flex;
        use burn::data::dataset::Dataset;
        let dataset = shapes_dataset(16, 3, 9, 0.05).unwrap();
        let items: Vec<ImageBatch> = (0..3).map(|i| dataset.get(i).unwrap()).collect();
        let (images, labels) = <ShapeBatcher as Batcher<Flex, _, _>>::batch(&ShapeBatcher, items, &FlexDevice);
        let expected = ShapeSampler::new(16, 3, 9).unwrap().with_noise(0.05).sample();
        assert_eq!(images.dims(), [3, 3, 16, 16]);
        assert_eq!(images.into_data().to_vec::<f32>().unwrap(), expected.images);
        let labels: Vec<i64> = labels.into_data().convert::<i64>().to_vec().unwrap();
        assert_eq!(labels, expected.labels);
        // Control: another seed is another stream.
        assert_ne!(shapes_dataset(16, 1, 10, 0.05).unwrap().get(0).unwrap().images, expected.images[..3 * 16 * 16]);
    }

    #[test]
    fn the_same_seed_gives_the_same_batches() {
        let mut a = ShapeSampler::new(16, 4, 9).unwrap();
        let mut b = ShapeSampler::new(16, 4, 9).unwrap();
        let mut c = ShapeSampler::new(16, 4, 10).unwrap();
        let (first, second) = (a.sample(), b.sample());
        assert_eq!(first, second);
        assert_ne!(first, c.sample());
        assert_ne!(a.sample(), first, "the stream moves on");
    }

    #[test]
    fn batches_have_the_stated_layout_and_range() {
        let batch = ShapeSampler::new(24, 5, 1).unwrap().sample();
        assert_eq!(batch.images.len(), 5 * 3 * 24 * 24);
        assert_eq!(batch.labels.len(), 5);
        assert_eq!(batch.bytes(), 5 * 3 * 24 * 24 * 4 + 5 * 8);
        assert!(batch.images.iter().all(|v| (0.0..=1.0).contains(v)));
        assert!(batch.labels.iter().all(|&l| (0..SHAPE_CLASSES as i64).contains(&l)));
    }

    #[test]
    fn every_class_appears() {
        let mut sampler = ShapeSampler::new(8, 200, 3).unwrap();
        let labels = sampler.sample().labels;
        for kind in ShapeKind::ALL {
            let count = labels.iter().filter(|&&l| l == kind.label() as i64).count();
            assert!(count >= 20, "{kind}: {count} of 200");
        }
    }

    #[test]
    fn without_noise_each_image_is_two_colours_and_lines_are_thinnest() {
        let mut sampler = ShapeSampler::new(32, 1, 5).unwrap().with_noise(0.0);
        let mut area = [0f32; SHAPE_CLASSES];
        let mut count = [0usize; SHAPE_CLASSES];
        for _ in 0..200 {
            let batch = sampler.sample();
            let image = &batch.images;
            let plane = 32 * 32;
            let mut colours: Vec<(u32, u32, u32)> = (0..plane)
                .map(|i| (image[i].to_bits(), image[plane + i].to_bits(), image[2 * plane + i].to_bits()))
                .collect();
            colours.sort_unstable();
            colours.dedup();
            assert_eq!(colours.len(), 2, "an image without noise has a background and a shape");
            let covered = coverage(image, 32);
            assert!((0.005..=0.5).contains(&covered), "coverage {covered}");
            let label = batch.labels[0] as usize;
            area[label] += covered;
            count[label] += 1;
        }
        let mean = |k: ShapeKind| area[k.label()] / count[k.label()].max(1) as f32;
        assert!(mean(ShapeKind::Line) < mean(ShapeKind::Square), "{area:?} {count:?}");
        assert!(mean(ShapeKind::Line) < mean(ShapeKind::Circle), "{area:?} {count:?}");
        assert!(mean(ShapeKind::Triangle) < mean(ShapeKind::Circle), "{area:?} {count:?}");
    }

    #[test]
    fn validation_differs_from_the_training_stream() {
        let validation = shapes_validation(16, 4, 2, 7).unwrap();
        assert_eq!(validation.len(), 2);
        let mut train = ShapeSampler::new(16, 4, 7).unwrap();
        assert_ne!(validation[0], train.sample());
        assert_eq!(validation, shapes_validation(16, 4, 2, 7).unwrap());
    }

    #[test]
    fn bad_arguments_are_refused_with_the_value() {
        let err = ShapeSampler::new(16, 0, 1).unwrap_err().to_string();
        assert!(err.contains("got 0"), "{err}");
        let err = ShapeSampler::new(4, 2, 1).unwrap_err().to_string();
        assert!(err.contains("between 8 and 4096") && err.contains("got 4"), "{err}");
    }
}
