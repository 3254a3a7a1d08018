//! The text a run trains on: read, checked against the run's record, tokenized and split.

use std::time::Instant;

use leanburn::data::{
    evaluation_windows, Corpus, CorpusFingerprint, CorpusSource, Gpt2Tokenizer, HostBatch, Split, TokenDataset,
    WindowSampler,
};
use leanburn::runner::{BatchSource, CorpusCheck};
use leanburn::RunDir;

use super::Args;
use crate::common::{bad_input, broke, Failure};

/// The corpus `--data` names (else the Cargo registry's sources), checked against the run's
/// record, tokenized and split: the training tokens and the validation batches.
pub fn tokens(args: &Args, dir: &RunDir, batch: usize, seq: usize) -> Result<(TokenDataset, Vec<HostBatch>), Failure> {
    let corpus = match &args.data {
        Some(path) => Corpus::from_path(path, Some((args.corpus_mib as usize) << 20)),
        None => Corpus::cargo_registry(Some((args.corpus_mib as usize) << 20)),
    }
    .map_err(|e| bad_input(e.to_string()))?;
    if let CorpusSource::CargoRegistry(dir) = &corpus.source {
        eprintln!(
            "no --data given: training on the Rust and Markdown sources of the Cargo registry ({})",
            dir.display()
        );
    }
    eprintln!("corpus: {corpus}");
    check_corpus(dir, &CorpusFingerprint::new(&corpus, Gpt2Tokenizer::ENCODING), args)?;
    let tokenizer = Gpt2Tokenizer::new().map_err(|e| broke(e.to_string()))?;
    let started = Instant::now();
    let tokens = tokenizer.encode_corpus(&corpus.text);
    drop(corpus);
    eprintln!("tokenized: {} tokens in {:.1} s", tokens.len(), started.elapsed().as_secs_f64());
    let data = TokenDataset::split_for_windows(tokens, 0.1, seq).map_err(|e| bad_input(format!("--seq {seq}: {e}")))?;
    let validation = evaluation_windows(data.validation(), batch.min(8), seq, args.run.eval_batches as usize);
    let validation = if validation.is_empty() { evaluation_windows(data.validation(), 1, seq, 1) } else { validation };
    Ok((data, validation))
}

/// Records the corpus of a new run; checks a resumed run's against its record, refusing
/// a different one unless `--allow-corpus-change`.
fn check_corpus(dir: &RunDir, fingerprint: &CorpusFingerprint, args: &Args) -> Result<(), Failure> {
    match dir.check_corpus(fingerprint, args.allow_corpus_change)? {
        CorpusCheck::Changed(what) => {
            eprintln!("WARNING: resuming on a different corpus than the run trained on ({what})")
        }
        CorpusCheck::Unrecorded => eprintln!(
            "warning: {} has no corpus record ({}), so the resumed run cannot check that its text is the same",
            dir.out().display(),
            dir.corpus_path().display()
        ),
        CorpusCheck::Recorded | CorpusCheck::Same => {}
    }
    Ok(())
}

/// The training stream: `batch × seq` windows drawn from the training tokens. A resumed
/// run moves it past the windows its earlier steps took by drawing their offsets again,
/// copying none.
pub struct TrainWindows<'a> {
    pub sampler: WindowSampler,
    pub tokens: &'a [u32],
}

impl BatchSource for TrainWindows<'_> {
    type Batch = HostBatch;
    type Error = Failure;

    fn next_batch(&mut self) -> Result<HostBatch, Failure> {
        self.sampler.sample(self.tokens, Split::Train).map_err(|e| broke(e.to_string()))
    }

    fn skip(&mut self, count: usize) -> Result<(), Failure> {
        self.sampler.skip(count, self.tokens, Split::Train).map_err(|e| broke(e.to_string()))
    }
}
