//! Labelled images in MNIST's own IDX format: the pair of files users have on disk.
//!
//! An image file is a big-endian header `0x00000803, count, rows, cols` and then one byte
//! per pixel; a label file `0x00000801, count` and one byte per label. [`IdxImages::load`]
//! reads a directory holding one such pair (`images-idx3-ubyte` and `labels-idx1-ubyte`,
//! or MNIST's `train-images-idx3-ubyte` and `train-labels-idx1-ubyte`), checks every
//! header against the file's length and the other file, and keeps the bytes in host
//! memory; batches are scaled to `[0, 1]` as they are cut ([`IdxImages::batch`]), and a
//! validation set is held out spread over the file ([`IdxImages::split_off`]).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use super::error::DataError;
use super::info_batch::{InfoBatch, InfoBatchConfig};
use super::shapes::ImageBatch;
use crate::trainer::ExampleFeedback;

const IMAGES_MAGIC: u32 = 0x0000_0803;
const LABELS_MAGIC: u32 = 0x0000_0801;
/// The file names looked for, images and labels, in order.
const NAMES: [(&str, &str); 2] =
    [("images-idx3-ubyte", "labels-idx1-ubyte"), ("train-images-idx3-ubyte", "train-labels-idx1-ubyte")];

/// Square grey images and their class labels, in host memory.
#[derive(Clone, Debug, PartialEq)]
pub struct IdxImages {
    pixels: Vec<u8>,
    labels: Vec<u8>,
    side: usize,
    classes: usize,
}

impl IdxImages {
    /// Reads the IDX pair in `dir`. Fails, naming the file, where it is missing, its
    /// header is not an IDX image or label header, its length disagrees with its header,
    /// the two counts differ, or the images are not square.
    pub fn load(dir: impl AsRef<Path>) -> Result<Self, DataError> {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            return Err(DataError::NotFound { path: dir.to_path_buf() });
        }
        let (images, labels) = NAMES
            .iter()
            .map(|(images, labels)| (dir.join(images), dir.join(labels)))
            .find(|(images, labels)| images.is_file() && labels.is_file())
            .ok_or_else(|| {
                DataError::invalid(format!(
                    "{} holds no IDX pair: expected {} and {} (or {} and {})",
                    dir.display(),
                    NAMES[0].0,
                    NAMES[0].1,
                    NAMES[1].0,
                    NAMES[1].1
                ))
            })?;
        let (image_bytes, label_bytes) = (read(&images)?, read(&labels)?);
        Self::parse(&image_bytes, &label_bytes).map_err(|why| DataError::invalid(format!("{}: {why}", dir.display())))
    }

    /// The images and labels from the bytes of an IDX pair.
    pub fn parse(images: &[u8], labels: &[u8]) -> Result<Self, String> {
        let header = |bytes: &[u8], words: usize, what: &str| -> Result<Vec<usize>, String> {
            if bytes.len() < 4 * words {
                return Err(format!("the {what} file is {} bytes, shorter than its header", bytes.len()));
            }
            Ok((0..words).map(|i| u32::from_be_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap()) as usize).collect())
        };
        let image_header = header(images, 4, "image")?;
        let label_header = header(labels, 2, "label")?;
        if image_header[0] != IMAGES_MAGIC as usize {
            return Err(format!("the image file's magic is {:#010x}, not {IMAGES_MAGIC:#010x}", image_header[0]));
        }
        if label_header[0] != LABELS_MAGIC as usize {
            return Err(format!("the label file's magic is {:#010x}, not {LABELS_MAGIC:#010x}", label_header[0]));
        }
        let (count, rows, cols) = (image_header[1], image_header[2], image_header[3]);
        if rows != cols || rows == 0 {
            return Err(format!("the images are {rows} × {cols}: square images are needed"));
        }
        if label_header[1] != count {
            return Err(format!("{count} images but {} labels", label_header[1]));
        }
        if count == 0 {
            return Err("the files hold no images".into());
        }
        let pixels = &images[16..];
        if pixels.len() != count * rows * cols {
            return Err(format!(
                "the image file holds {} pixel bytes, its header says {count} × {rows} × {cols}",
                pixels.len()
            ));
        }
        let labels = &labels[8..];
        if labels.len() != count {
            return Err(format!("the label file holds {} labels, its header says {count}", labels.len()));
        }
        let classes = labels.iter().copied().max().map_or(0, |max| max as usize + 1);
        Ok(Self { pixels: pixels.to_vec(), labels: labels.to_vec(), side: rows, classes })
    }

    /// Images held.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The images' side in pixels.
    pub fn side(&self) -> usize {
        self.side
    }

    /// Classes: the largest label + 1.
    pub fn classes(&self) -> usize {
        self.classes
    }

    /// Holds `held_out` images out (for validation), spread evenly over the set, so that a
    /// file ordered by class (or interleaved by class, as the shared MNIST copy is, whose
    /// last images are all ones and sevens) gives a held-out set that samples all of it:
    /// `(the rest, the held out)`, each in file order. Fails unless both keep an image.
    pub fn split_off(self, held_out: usize) -> Result<(Self, Self), DataError> {
        let n = self.len();
        if held_out == 0 || held_out >= n {
            return Err(DataError::invalid(format!("cannot hold out {held_out} of {n} images and train on the rest")));
        }
        let mut held = vec![false; n];
        for k in 0..held_out {
            held[(2 * k + 1) * n / (2 * held_out)] = true;
        }
        let plane = self.side * self.side;
        let part = |keep: bool| {
            let indices: Vec<usize> = (0..n).filter(|&i| held[i] == keep).collect();
            Self {
                pixels: indices.iter().flat_map(|&i| self.pixels[i * plane..(i + 1) * plane].iter().copied()).collect(),
                labels: indices.iter().map(|&i| self.labels[i]).collect(),
                side: self.side,
                classes: self.classes,
            }
        };
        Ok((part(false), part(true)))
    }

    /// The images at `indices` as one batch, `[n, 1, side, side]`, pixels scaled to `[0, 1]`.
    pub fn batch(&self, indices: &[usize]) -> ImageBatch {
        let plane = self.side * self.side;
        let images = indices
            .iter()
            .flat_map(|&i| self.pixels[i * plane..(i + 1) * plane].iter().map(|&p| p as f32 / 255.0))
            .collect();
        let labels = indices.iter().map(|&i| self.labels[i] as i64).collect();
        ImageBatch { images, labels, batch: indices.len(), resolution: self.side, channels: 1 }
    }

    /// Consecutive batches of `batch` images covering the set from its start (the last
    /// one shorter where `batch` does not divide it), at most `batches` of them.
    pub fn batches(&self, batch: usize, batches: usize) -> Vec<ImageBatch> {
        let indices: Vec<usize> = (0..self.len()).collect();
        indices.chunks(batch.max(1)).take(batches).map(|chunk| self.batch(chunk)).collect()
    }
}

/// Training batches from an [`IdxImages`] set: every image once per epoch, in an order
/// shuffled anew each epoch from the seed; with [`with_info_batch`](Self::with_info_batch)
/// each epoch leaves out part of the images already learned ([`InfoBatch`]).
#[derive(Clone, Debug)]
pub struct IdxSampler {
    images: IdxImages,
    batch: usize,
    /// This epoch's images and their weights in the loss (1 without InfoBatch).
    order: Vec<(usize, f32)>,
    next: usize,
    rng: SmallRng,
    info_batch: Option<InfoBatch>,
}

impl IdxSampler {
    /// Fails if `batch` is 0.
    pub fn new(images: IdxImages, batch: usize, seed: u64) -> Result<Self, DataError> {
        if batch == 0 {
            return Err(DataError::invalid("the batch size must be at least 1, got 0"));
        }
        let order = (0..images.len()).map(|i| (i, 1.0)).collect();
        let rng = SmallRng::seed_from_u64(seed);
        let mut sampler = Self { images, batch, order, next: usize::MAX, rng, info_batch: None };
        sampler.next = sampler.order.len();
        Ok(sampler)
    }

    /// Plans each epoch with InfoBatch from the next one on: the trainer must then take
    /// each batch's weights and give back its examples' losses
    /// ([`ExampleFeedback`](crate::trainer::ExampleFeedback), which a shared sampler
    /// implements). Fails if `config` breaks a rule.
    pub fn with_info_batch(mut self, config: InfoBatchConfig) -> Result<Self, DataError> {
        self.info_batch = Some(InfoBatch::new(self.images.len(), config)?);
        Ok(self)
    }

    /// InfoBatch's books, where it plans the epochs.
    pub fn info_batch(&self) -> Option<&InfoBatch> {
        self.info_batch.as_ref()
    }

    /// The next `batch` images, starting a new shuffled epoch where this one runs out
    /// (with InfoBatch also where annealing begins: from there every epoch is whole).
    pub fn sample(&mut self) -> ImageBatch {
        let (indices, weights): (Vec<usize>, Vec<f32>) = self.pick().into_iter().unzip();
        let batch = self.images.batch(&indices);
        if let Some(info) = self.info_batch.as_mut() {
            info.issue(indices, weights);
        }
        batch
    }

    /// Moves past `batches` batches of [`sample`](Self::sample): the same epochs planned and
    /// the same images picked, none copied (a resumed run's way back to where it stopped).
    /// With InfoBatch the skipped epochs are planned without the losses those batches would
    /// have given back (the CNN example refuses to resume such a run).
    pub fn skip(&mut self, batches: usize) {
        for _ in 0..batches {
            self.pick();
        }
    }

    /// The next batch's images and their weights, planning a new epoch where one ends.
    fn pick(&mut self) -> Vec<(usize, f32)> {
        let mut picked = Vec::with_capacity(self.batch);
        if let Some(info) = self.info_batch.as_ref() {
            if info.annealing() && self.order.len() < self.images.len() {
                self.next = self.order.len();
            }
        }
        while picked.len() < self.batch {
            if self.next >= self.order.len() {
                self.order = match self.info_batch.as_mut() {
                    Some(info) => info.plan_epoch(&mut self.rng),
                    None => {
                        self.order.shuffle(&mut self.rng);
                        std::mem::take(&mut self.order)
                    }
                };
                self.next = 0;
            }
            picked.push(self.order[self.next]);
            self.next += 1;
        }
        picked
    }
}

/// The trainer's side of InfoBatch: each step takes the weights of the oldest batch handed
/// out and gives back its examples' losses. Without InfoBatch every weight is 1 and
/// nothing is recorded.
impl ExampleFeedback for Arc<Mutex<IdxSampler>> {
    fn weights(&mut self) -> Option<Vec<f32>> {
        let mut sampler = self.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        sampler.info_batch.as_mut().and_then(InfoBatch::next_weights)
    }

    fn record(&mut self, losses: &[f32]) {
        let mut sampler = self.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(info) = sampler.info_batch.as_mut() {
            info.record(losses);
        }
    }
}

fn read(path: &PathBuf) -> Result<Vec<u8>, DataError> {
    fs::read(path).map_err(|err| DataError::io(path, err))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IDX pair of `count` `side × side` images whose pixels encode their index, and
    /// labels `index % classes`.
    pub(crate) fn pair(count: usize, side: usize, classes: usize) -> (Vec<u8>, Vec<u8>) {
        let mut images = Vec::new();
        for word in [IMAGES_MAGIC, count as u32, side as u32, side as u32] {
            images.extend(word.to_be_bytes());
        }
        for i in 0..count {
            images.extend(std::iter::repeat_n((i % 256) as u8, side * side));
        }
        let mut labels = Vec::new();
        for word in [LABELS_MAGIC, count as u32] {
            labels.extend(word.to_be_bytes());
        }
        labels.extend((0..count).map(|i| (i % classes) as u8));
        (images, labels)
    }

    #[test]
    fn a_pair_reads_back_split_and_batched() {
        let (images, labels) = pair(12, 4, 10);
        let set = IdxImages::parse(&images, &labels).unwrap();
        assert_eq!((set.len(), set.side(), set.classes()), (12, 4, 10));
        let (train, held_out) = set.split_off(2).unwrap();
        assert_eq!((train.len(), held_out.len()), (10, 2));
        // Spread over the set: images 3 and 9.
        let batch = held_out.batch(&[1, 0]);
        assert_eq!(batch.labels, vec![9, 3]);
        assert_eq!((batch.batch, batch.channels, batch.resolution), (2, 1, 4));
        assert_eq!(batch.images[0], 9.0 / 255.0);
        assert!(!train.batch(&(0..10).collect::<Vec<_>>()).labels.contains(&3), "held out, not trained on");
        assert_eq!(train.batches(4, 10).iter().map(|b| b.batch).collect::<Vec<_>>(), [4, 4, 2]);
    }

    #[test]
    fn every_image_once_per_epoch_in_a_seeded_order() {
        let (images, labels) = pair(10, 2, 10);
        let set = IdxImages::parse(&images, &labels).unwrap();
        let mut sampler = IdxSampler::new(set.clone(), 5, 3).unwrap();
        let mut epoch: Vec<i64> = (0..2).flat_map(|_| sampler.sample().labels).collect();
        epoch.sort_unstable();
        assert_eq!(epoch, (0..10).collect::<Vec<_>>());
        let again = IdxSampler::new(set.clone(), 5, 3).unwrap().sample();
        assert_eq!(again, IdxSampler::new(set.clone(), 5, 3).unwrap().sample(), "the same seed, the same batches");
        assert_ne!(again.labels, IdxSampler::new(set, 5, 4).unwrap().sample().labels, "control: another seed");
    }

    /// Skipping batches leaves the sampler where drawing them would, across epochs (7
    /// images in batches of 3: epochs end inside batches); the control: one batch fewer
    /// skipped is somewhere else.
    #[test]
    fn skipping_batches_lands_where_drawing_them_would() {
        let (images, labels) = pair(7, 2, 10);
        let set = IdxImages::parse(&images, &labels).unwrap();
        for skipped in [0, 1, 2, 5, 11] {
            let mut drawn = IdxSampler::new(set.clone(), 3, 9).unwrap();
            (0..skipped).for_each(|_| drop(drawn.sample()));
            let mut skipping = IdxSampler::new(set.clone(), 3, 9).unwrap();
            skipping.skip(skipped);
            let next: Vec<_> = (0..4).map(|_| drawn.sample()).collect();
            assert_eq!((0..4).map(|_| skipping.sample()).collect::<Vec<_>>(), next, "after {skipped} batches");
            let mut short = IdxSampler::new(set.clone(), 3, 9).unwrap();
            short.skip(skipped + 1);
            assert_ne!((0..4).map(|_| short.sample()).collect::<Vec<_>>(), next, "control: {} skipped", skipped + 1);
        }
    }

    #[test]
    fn info_batch_leaves_learned_images_out_of_the_next_epoch_and_weighs_up_the_rest() {
        use crate::data::InfoBatchConfig;
        use crate::trainer::ExampleFeedback;

        // 20 images labelled by their index; each one's loss is its label, so 0..10 are
        // below the mean once scored.
        let (images, labels) = pair(20, 2, 20);
        let set = IdxImages::parse(&images, &labels).unwrap();
        let config = InfoBatchConfig { prune: 0.5, anneal_step: Some(8) };
        let sampler = IdxSampler::new(set, 5, 7).unwrap().with_info_batch(config).unwrap();
        let mut shared = Arc::new(Mutex::new(sampler));
        let step = |shared: &mut Arc<Mutex<IdxSampler>>| {
            let batch = shared.lock().unwrap().sample();
            let weights = shared.weights().expect("InfoBatch weighs every batch");
            shared.record(&batch.labels.iter().map(|&l| l as f32).collect::<Vec<_>>());
            batch.labels.into_iter().zip(weights).collect::<Vec<_>>()
        };
        let first: Vec<(i64, f32)> = (0..4).flat_map(|_| step(&mut shared)).collect();
        assert!(first.iter().all(|&(_, w)| w == 1.0), "nothing scored yet: all kept, unweighted");
        // The second epoch: every image from 10 up with weight 1, some below it with 2.
        step(&mut shared);
        let (count, plan) = {
            let sampler = shared.lock().unwrap();
            (sampler.info_batch().unwrap().count(), sampler.order.clone())
        };
        assert_eq!((count.epochs, count.pruned_epochs), (2, 1));
        assert!(count.left_out > 0 && plan.len() == 20 - count.left_out, "{count:?}");
        assert!(plan.iter().filter(|&&(i, _)| i >= 10).all(|&(_, w)| w == 1.0));
        assert_eq!(plan.iter().filter(|&&(i, _)| i >= 10).count(), 10);
        assert!(plan.iter().filter(|&&(i, _)| i < 10).all(|&(_, w)| w == 2.0));
        // From batch 8 on every epoch is whole and unweighted (the pruned one is cut short).
        while !shared.lock().unwrap().info_batch().unwrap().annealing() {
            step(&mut shared);
        }
        let annealed: Vec<(i64, f32)> = (0..4).flat_map(|_| step(&mut shared)).collect();
        let mut seen: Vec<i64> = annealed.iter().map(|&(l, _)| l).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..20).collect::<Vec<_>>(), "an annealed epoch holds every image");
        assert!(annealed.iter().all(|&(_, w)| w == 1.0));
    }

    #[test]
    fn broken_files_are_refused_with_the_reason() {
        let (images, labels) = pair(3, 2, 10);
        let check = |images: &[u8], labels: &[u8], needle: &str| {
            let err = IdxImages::parse(images, labels).unwrap_err();
            assert!(err.contains(needle), "{err}");
        };
        check(&images[..10], &labels, "shorter than its header");
        check(&images[..images.len() - 1], &labels, "pixel bytes");
        let mut swapped = images.clone();
        swapped[..4].copy_from_slice(&LABELS_MAGIC.to_be_bytes());
        check(&swapped, &labels, "the image file's magic");
        check(&images, &images, "the label file's magic");
        let (four, _) = pair(4, 2, 10);
        check(&four, &labels, "4 images but 3 labels");
        let mut wide = images.clone();
        wide[12..16].copy_from_slice(&3u32.to_be_bytes());
        check(&wide, &labels, "square");
        assert!(IdxImages::parse(&images, &labels).is_ok(), "control: the intact pair reads");
        let dir = std::env::temp_dir().join(format!("leanburn-idx-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        assert!(IdxImages::load(&dir).unwrap_err().to_string().contains("no IDX pair"));
        fs::write(dir.join("images-idx3-ubyte"), &images).unwrap();
        fs::write(dir.join("labels-idx1-ubyte"), &labels).unwrap();
        assert_eq!(IdxImages::load(&dir).unwrap().len(), 3);
        let _ = fs::remove_dir_all(&dir);
    }
}
