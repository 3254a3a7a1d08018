//! GPT-2's byte-level BPE (`r50k_base`), via `tiktoken-rs`.
//!
//! The BPE table is compiled into `tiktoken-rs`, so building the tokenizer needs no
//! network and no files.

use std::fmt;

use tiktoken_rs::CoreBPE;

use super::error::DataError;

/// Size of GPT-2's vocabulary: 50 000 merges, 256 byte tokens and `<|endoftext|>`.
pub const GPT2_VOCAB_SIZE: usize = 50_257;

/// The id of `<|endoftext|>`, GPT-2's only special token (the last id of the vocabulary).
pub const END_OF_TEXT: u32 = 50_256;

/// Target size of the pieces [`Gpt2Tokenizer::encode_corpus`] cuts a text into.
const PIECE_BYTES: usize = 64 * 1024;

/// GPT-2's tokenizer: text to token ids and back.
///
/// Special tokens are never produced by encoding: the text `<|endoftext|>` is encoded as
/// ordinary text. Insert [`END_OF_TEXT`] yourself where a document boundary is wanted.
#[derive(Clone)]
pub struct Gpt2Tokenizer {
    bpe: CoreBPE,
}

impl fmt::Debug for Gpt2Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gpt2Tokenizer")
            .field("encoding", &Self::ENCODING)
            .field("vocab_size", &GPT2_VOCAB_SIZE)
            .finish()
    }
}

impl Gpt2Tokenizer {
    /// The name of the encoding (tiktoken's).
    pub const ENCODING: &'static str = "r50k_base";

    /// Builds the tokenizer from the BPE table embedded in `tiktoken-rs` (a few tens of
    /// milliseconds; build it once and share it).
    pub fn new() -> Result<Self, DataError> {
        tiktoken_rs::r50k_base()
            .map(|bpe| Self { bpe })
            .map_err(|err| DataError::Tokenizer(format!("cannot build the GPT-2 (r50k_base) BPE: {err:#}")))
    }

    /// Encodes `text` in one pass on the calling thread.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.bpe.encode_ordinary(text)
    }

    /// Encodes a large text on all cores.
    ///
    /// The text is cut into pieces of roughly 64 KiB, each ending just before a run of
    /// whitespace that contains a blank line (`"\n\n"`); the pieces are encoded on worker
    /// threads and their tokens concatenated in order, with nothing inserted between
    /// them. This is only a speed and memory measure: GPT-2's pre-tokenizer never joins a
    /// non-space character with the whitespace after it, so a cut there leaves every
    /// pre-token, and hence every token, as one-shot [`encode`](Self::encode) makes it.
    /// Should that ever not hold, the result could differ from `encode` only at the
    /// piece boundaries.
    pub fn encode_corpus(&self, text: &str) -> Vec<u32> {
        self.encode_in_pieces(text, PIECE_BYTES)
    }

    /// [`encode_corpus`](Self::encode_corpus) with a given piece size.
    fn encode_in_pieces(&self, text: &str, piece_bytes: usize) -> Vec<u32> {
        let pieces = pieces(text, piece_bytes);
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(pieces.len());
        if threads <= 1 {
            return self.encode_all(&pieces);
        }
        let per_thread = pieces.len().div_ceil(threads);
        let parts: Vec<Vec<u32>> = std::thread::scope(|scope| {
            let workers: Vec<_> =
                pieces.chunks(per_thread).map(|chunk| scope.spawn(move || self.encode_all(chunk))).collect();
            workers
                .into_iter()
                .map(|worker| match worker.join() {
                    Ok(tokens) => tokens,
                    Err(panic) => std::panic::resume_unwind(panic),
                })
                .collect()
        });
        let mut tokens = Vec::with_capacity(parts.iter().map(Vec::len).sum());
        for part in parts {
            tokens.extend_from_slice(&part);
        }
        tokens
    }

    /// Encodes `pieces` one after another, concatenating their tokens.
    fn encode_all(&self, pieces: &[&str]) -> Vec<u32> {
        let mut tokens = Vec::new();
        for piece in pieces {
            tokens.extend(self.bpe.encode_ordinary(piece));
        }
        tokens
    }

    /// Decodes `tokens` back to text. Fails on an id outside the vocabulary, or when the
    /// tokens' bytes are not valid UTF-8 (a sequence cut in the middle of a character).
    pub fn decode(&self, tokens: &[u32]) -> Result<String, DataError> {
        self.bpe.decode(tokens.to_vec()).map_err(|err| DataError::Tokenizer(format!("cannot decode tokens: {err:#}")))
    }

    /// The vocabulary size, [`GPT2_VOCAB_SIZE`].
    pub fn vocab_size(&self) -> usize {
        GPT2_VOCAB_SIZE
    }
}

/// Cuts `text` into consecutive pieces of at least `piece_bytes` bytes (except the last),
/// each cut placed at the start of the whitespace run around the first `"\n\n"` found
/// past that size. A text without such a break stays one piece. The pieces concatenate
/// back to `text`.
fn pieces(text: &str, piece_bytes: usize) -> Vec<&str> {
    let piece_bytes = piece_bytes.max(1);
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut from = piece_bytes;
    while from < text.len() {
        while !text.is_char_boundary(from) {
            from += 1;
        }
        let Some(found) = text[from..].find("\n\n") else {
            break;
        };
        let blank = from + found;
        // Back to the start of the whitespace run, so the piece ends on a non-space.
        let cut = text[..blank].trim_end_matches(char::is_whitespace).len();
        if cut > start {
            pieces.push(&text[start..cut]);
            start = cut;
            from = cut + piece_bytes;
        } else {
            // Only whitespace since `start`: look for the next break.
            from = blank + 2;
        }
    }
    if start < text.len() {
        pieces.push(&text[start..]);
    }
    pieces
}

#[cfg(test)]
mod tests {
    use std::sync::OnceLock;

    use super::*;

    fn tokenizer() -> &'static Gpt2Tokenizer {
        static TOKENIZER: OnceLock<Gpt2Tokenizer> = OnceLock::new();
        TOKENIZER.get_or_init(|| Gpt2Tokenizer::new().expect("r50k_base is embedded"))
    }

    #[test]
    fn hello_world_has_its_known_ids() {
        assert_eq!(tokenizer().encode("Hello world"), vec![15496, 995]);
        assert_eq!(tokenizer().vocab_size(), GPT2_VOCAB_SIZE);
    }

    #[test]
    fn ascii_and_unicode_round_trip() {
        let tokenizer = tokenizer();
        for text in ["fn main() {\n    println!(\"hi\");\n}\n", "Hello, world! — naïve café 東京", ""] {
            let tokens = tokenizer.encode(text);
            assert!(tokens.iter().all(|&t| (t as usize) < GPT2_VOCAB_SIZE));
            assert_eq!(tokenizer.decode(&tokens).expect("decode"), text);
        }
    }

    #[test]
    fn special_tokens_are_not_encoded_but_decode() {
        let tokenizer = tokenizer();
        assert!(!tokenizer.encode("a<|endoftext|>b").contains(&END_OF_TEXT));
        assert_eq!(tokenizer.decode(&[END_OF_TEXT]).expect("decode"), "<|endoftext|>");
    }

    #[test]
    fn ids_outside_the_vocabulary_fail_to_decode() {
        let err = tokenizer().decode(&[15496, GPT2_VOCAB_SIZE as u32]).unwrap_err();
        assert!(matches!(err, DataError::Tokenizer(_)), "{err}");
    }

    #[test]
    fn encode_corpus_equals_encode() {
        let tokenizer = tokenizer();
        let small = "A short text, with no blank line.\nJust one newline.";
        assert_eq!(tokenizer.encode_corpus(small), tokenizer.encode(small));

        // Small pieces force many cuts, including next to spaces, tabs, runs of blank
        // lines and multi-byte characters.
        let paragraph = "The quick brown fox — naïve café 東京 — it's 42.  \n\n\n  \
                         fn x() {}\t\n\n\"quoted\"\n \n\nend.\n\n";
        let text = paragraph.repeat(40);
        let expected = tokenizer.encode(&text);
        for piece_bytes in [1, 7, 16, 64, 1 << 20] {
            assert_eq!(tokenizer.encode_in_pieces(&text, piece_bytes), expected, "piece size {piece_bytes}");
        }
        assert_eq!(tokenizer.encode_corpus(&text), expected);
    }

    #[test]
    fn pieces_cover_the_text_and_end_on_non_space() {
        let text = "alpha beta\n\ngamma  \n\n\ndelta\n\n   \n\nepsilon";
        let cut = pieces(text, 3);
        assert_eq!(cut.concat(), text);
        assert!(cut.len() > 1, "{cut:?}");
        for piece in &cut[..cut.len() - 1] {
            assert!(!piece.ends_with(char::is_whitespace), "{piece:?}");
        }
        assert_eq!(pieces("no break at all", 2), vec!["no break at all"]);
        assert!(pieces("", 4).is_empty());
        assert_eq!(pieces("\n\n\n\n", 1), vec!["\n\n\n\n"]);
    }
}
