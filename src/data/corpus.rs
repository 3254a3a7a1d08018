//! Reading a text corpus from disk into one host string.
//!
//! A corpus is a UTF-8 file, a directory of text files walked recursively, or, by
//! default, the Rust and Markdown sources Cargo has unpacked under
//! `$CARGO_HOME/registry/src` (on any machine that has built a Rust project). Walks are
//! deterministic: entries are visited in path order, hidden directories and symbolic
//! links to directories are skipped, files that are not UTF-8 are counted and skipped,
//! and files are joined with a blank line.

use std::fmt;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::error::DataError;

/// Extensions read from a directory given as a corpus (files without an extension are
/// read too).
const TEXT_EXTENSIONS: &[&str] = &["txt", "md", "rs", "toml", "py", "json", "csv", "tsv", "text", "markdown", "rst"];

/// Extensions read from the Cargo registry.
const REGISTRY_EXTENSIONS: &[&str] = &["rs", "md"];

/// What separates two files in [`Corpus::text`].
const SEPARATOR: &str = "\n\n";

/// Where a [`Corpus`] was read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CorpusSource {
    /// A file or directory given by the user.
    Path(PathBuf),
    /// The `.rs` and `.md` files of the Cargo registry's unpacked sources (the path is
    /// the `registry/src` directory).
    CargoRegistry(PathBuf),
}

impl CorpusSource {
    /// The file or directory that was read.
    pub fn path(&self) -> &Path {
        match self {
            CorpusSource::Path(path) | CorpusSource::CargoRegistry(path) => path,
        }
    }
}

impl fmt::Display for CorpusSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CorpusSource::Path(path) => write!(f, "{}", path.display()),
            CorpusSource::CargoRegistry(path) => {
                write!(f, "Cargo registry sources in {}", path.display())
            }
        }
    }
}

/// A text corpus, read into memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Corpus {
    /// The files' text, joined with a blank line (`"\n\n"`).
    pub text: String,
    /// Files whose text was (at least partly) included.
    pub files: usize,
    /// Candidate files skipped because they are not valid UTF-8.
    pub skipped_non_utf8: usize,
    /// Size of [`text`](Self::text) in bytes, separators included.
    pub bytes: usize,
    /// Where the text came from.
    pub source: CorpusSource,
}

/// "0.5 MiB from 84 files", with the count of non-UTF-8 files skipped if any.
impl fmt::Display for Corpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1} MiB from {} files", self.bytes as f64 / (1 << 20) as f64, self.files)?;
        match self.skipped_non_utf8 {
            0 => Ok(()),
            n => write!(f, " ({n} non-UTF-8 files skipped)"),
        }
    }
}

impl Corpus {
    /// Reads a UTF-8 file, or every text file under a directory.
    ///
    /// A file given directly is always read, whatever its extension. In a directory, files
    /// with the extensions `txt`, `md`, `rs`, `toml`, `py`, `json`, `csv`, `tsv`, `text`,
    /// `markdown` and `rst`, or with none, are read in path order; hidden directories
    /// (names starting with `.`) and symbolic links to directories are skipped. Empty
    /// files are skipped, files that are not UTF-8 are skipped and counted.
    ///
    /// With `max_bytes`, reading stops once the text reaches that size; the last file is
    /// cut at a character boundary so the text never exceeds it.
    ///
    /// Fails with [`DataError::NotFound`] if `path` does not exist and with
    /// [`DataError::NoText`] if nothing readable was found.
    pub fn from_path(path: &Path, max_bytes: Option<usize>) -> Result<Corpus, DataError> {
        read(path, TEXT_EXTENSIONS, true, max_bytes, CorpusSource::Path(path.to_path_buf()))
    }

    /// Reads the default corpus: the `.rs` and `.md` files under
    /// [`cargo_registry_dir`], walked as [`from_path`](Self::from_path) walks a
    /// directory.
    ///
    /// Fails with [`DataError::NotFound`] if the directory does not exist (nothing has
    /// been downloaded by Cargo on this machine, or neither `CARGO_HOME` nor `HOME` is
    /// set).
    pub fn cargo_registry(max_bytes: Option<usize>) -> Result<Corpus, DataError> {
        let dir = cargo_registry_dir()
            .ok_or_else(|| DataError::NotFound { path: PathBuf::from("$CARGO_HOME/registry/src") })?;
        read(&dir, REGISTRY_EXTENSIONS, false, max_bytes, CorpusSource::CargoRegistry(dir.clone()))
    }
}

/// Where Cargo unpacks downloaded crates: `$CARGO_HOME/registry/src`, with `CARGO_HOME`
/// defaulting to `$HOME/.cargo`. `None` when neither variable is set; the directory may
/// not exist.
pub fn cargo_registry_dir() -> Option<PathBuf> {
    let non_empty = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    let cargo_home = non_empty("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| non_empty("HOME").map(|home| PathBuf::from(home).join(".cargo")))?;
    Some(cargo_home.join("registry").join("src"))
}

/// Reads the corpus at `root`: the file itself, or the files under it whose extension is
/// one of `extensions` (or, with `extensionless`, that have none).
fn read(
    root: &Path,
    extensions: &[&str],
    extensionless: bool,
    max_bytes: Option<usize>,
    source: CorpusSource,
) -> Result<Corpus, DataError> {
    if max_bytes == Some(0) {
        return Err(DataError::invalid("the corpus size limit must be at least one byte"));
    }
    let metadata = fs::metadata(root).map_err(|err| match err.kind() {
        ErrorKind::NotFound => DataError::NotFound { path: root.to_path_buf() },
        _ => DataError::io(root, err),
    })?;
    let mut builder = Builder::new(max_bytes);
    if metadata.is_dir() {
        let filter = Filter { extensions, extensionless };
        walk(root, &filter, &mut builder)?;
    } else {
        builder.add_file(root)?;
    }
    builder.finish(root, source)
}

/// Which files of a directory are read.
struct Filter<'a> {
    extensions: &'a [&'a str],
    extensionless: bool,
}

impl Filter<'_> {
    fn accepts(&self, path: &Path) -> bool {
        match path.extension() {
            None => self.extensionless,
            Some(ext) => {
                ext.to_str().is_some_and(|ext| self.extensions.iter().any(|wanted| ext.eq_ignore_ascii_case(wanted)))
            }
        }
    }
}

/// Whether a file or directory name starts with a dot.
fn is_hidden(path: &Path) -> bool {
    path.file_name().and_then(|name| name.to_str()).is_some_and(|name| name.starts_with('.'))
}

/// Visits `dir` depth-first in path order, adding accepted files to `builder`; returns as
/// soon as the size limit is reached.
fn walk(dir: &Path, filter: &Filter<'_>, builder: &mut Builder) -> Result<(), DataError> {
    let mut entries = fs::read_dir(dir)
        .map_err(|err| DataError::io(dir, err))?
        .map(|entry| entry.map_err(|err| DataError::io(dir, err)))
        .collect::<Result<Vec<_>, _>>()?;
    entries.sort_by_key(|entry| entry.path());
    for entry in entries {
        let path = entry.path();
        let file_type = entry.file_type().map_err(|err| DataError::io(&path, err))?;
        let is_dir = if file_type.is_symlink() {
            match fs::metadata(&path) {
                // A link to a directory could lead back up the tree: never follow it.
                Ok(target) if target.is_dir() => continue,
                Ok(_) => false,
                // A dangling link reads as nothing.
                Err(_) => continue,
            }
        } else {
            file_type.is_dir()
        };
        if is_dir {
            if is_hidden(&path) {
                continue;
            }
            walk(&path, filter, builder)?;
        } else if filter.accepts(&path) {
            builder.add_file(&path)?;
        }
        if builder.full() {
            return Ok(());
        }
    }
    Ok(())
}

/// The corpus text as it is gathered.
struct Builder {
    text: String,
    files: usize,
    skipped_non_utf8: usize,
    max_bytes: Option<usize>,
}

impl Builder {
    fn new(max_bytes: Option<usize>) -> Self {
        Self { text: String::new(), files: 0, skipped_non_utf8: 0, max_bytes }
    }

    /// Whether the size limit is reached: no further file would add anything.
    fn full(&self) -> bool {
        self.max_bytes.is_some_and(|max| {
            let separator = if self.text.is_empty() { 0 } else { SEPARATOR.len() };
            self.text.len() + separator >= max
        })
    }

    /// Reads the file at `path` and appends its text, cut to the size limit. Empty files
    /// are skipped, files that are not UTF-8 counted; nothing is read once the limit is
    /// reached.
    fn add_file(&mut self, path: &Path) -> Result<(), DataError> {
        if self.full() {
            return Ok(());
        }
        let bytes = fs::read(path).map_err(|err| DataError::io(path, err))?;
        let Ok(text) = String::from_utf8(bytes) else {
            self.skipped_non_utf8 += 1;
            return Ok(());
        };
        if text.is_empty() {
            return Ok(());
        }
        let separator = if self.text.is_empty() { "" } else { SEPARATOR };
        let room = self.max_bytes.map_or(usize::MAX, |max| max - self.text.len() - separator.len());
        let text = &text[..floor_char_boundary(&text, room)];
        if text.is_empty() {
            // Not even its first character fits in the room left.
            return Ok(());
        }
        self.text.push_str(separator);
        self.text.push_str(text);
        self.files += 1;
        Ok(())
    }

    fn finish(self, root: &Path, source: CorpusSource) -> Result<Corpus, DataError> {
        if self.text.is_empty() {
            return Err(DataError::NoText { path: root.to_path_buf(), skipped: self.skipped_non_utf8 });
        }
        Ok(Corpus {
            bytes: self.text.len(),
            text: self.text,
            files: self.files,
            skipped_non_utf8: self.skipped_non_utf8,
            source,
        })
    }
}

/// The largest character boundary of `text` that is at most `index`.
fn floor_char_boundary(text: &str, index: usize) -> usize {
    if index >= text.len() {
        return text.len();
    }
    let mut index = index;
    while !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A scratch directory under the system temp dir, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Self {
            static COUNTER: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "leanburn-corpus-{}-{}-{name}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).expect("create scratch dir");
            Self(dir)
        }

        fn write(&self, relative: &str, contents: &[u8]) -> PathBuf {
            let path = self.0.join(relative);
            fs::create_dir_all(path.parent().expect("parent")).expect("create parent");
            fs::write(&path, contents).expect("write");
            path
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    const NOT_UTF8: &[u8] = &[0xff, 0xfe, 0x00];

    #[test]
    fn a_directory_skips_non_utf8_and_empty_files() {
        let scratch = Scratch::new("mixed");
        scratch.write("a.txt", b"hello corpus");
        scratch.write("b.txt", NOT_UTF8);
        scratch.write("c.md", b"");
        let corpus = Corpus::from_path(&scratch.0, None).expect("read");
        assert_eq!(corpus.text, "hello corpus");
        assert_eq!(corpus.files, 1);
        assert_eq!(corpus.skipped_non_utf8, 1);
        assert_eq!(corpus.bytes, "hello corpus".len());
        assert_eq!(corpus.source, CorpusSource::Path(scratch.0.clone()));
    }

    #[test]
    fn files_are_joined_in_path_order_and_filtered() {
        let scratch = Scratch::new("order");
        scratch.write("b/two.rs", b"two");
        scratch.write("a.txt", b"one");
        scratch.write("c", b"three");
        scratch.write("d.png", b"not read: wrong extension");
        scratch.write(".hidden/secret.txt", b"not read: hidden directory");
        let corpus = Corpus::from_path(&scratch.0, None).expect("read");
        assert_eq!(corpus.text, "one\n\ntwo\n\nthree");
        assert_eq!((corpus.files, corpus.skipped_non_utf8), (3, 0));
        assert_eq!(corpus.bytes, corpus.text.len());

        // The registry filter reads only `.rs` and `.md`.
        let mut builder = Builder::new(None);
        let filter = Filter { extensions: REGISTRY_EXTENSIONS, extensionless: false };
        walk(&scratch.0, &filter, &mut builder).expect("walk");
        assert_eq!(builder.text, "two");
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_to_directories_are_not_followed() {
        let scratch = Scratch::new("cycle");
        scratch.write("sub/a.txt", b"once");
        std::os::unix::fs::symlink(&scratch.0, scratch.0.join("sub/loop")).expect("symlink");
        let corpus = Corpus::from_path(&scratch.0, None).expect("read");
        assert_eq!(corpus.text, "once");
        assert_eq!(corpus.files, 1);
    }

    #[test]
    fn a_file_given_directly_is_read_whatever_its_extension() {
        let scratch = Scratch::new("single");
        let path = scratch.write("data.bin", "plain text".as_bytes());
        let corpus = Corpus::from_path(&path, None).expect("read");
        assert_eq!((corpus.text.as_str(), corpus.files), ("plain text", 1));
        assert_eq!(corpus.source.path(), path.as_path());
    }

    #[test]
    fn only_non_utf8_files_is_no_text() {
        let scratch = Scratch::new("binary");
        scratch.write("x.txt", NOT_UTF8);
        scratch.write("y.txt", NOT_UTF8);
        match Corpus::from_path(&scratch.0, None) {
            Err(DataError::NoText { path, skipped }) => {
                assert_eq!(path, scratch.0);
                assert_eq!(skipped, 2);
            }
            other => panic!("expected NoText, got {other:?}"),
        }
        let single = scratch.0.join("x.txt");
        assert!(matches!(Corpus::from_path(&single, None), Err(DataError::NoText { skipped: 1, .. })));
    }

    #[test]
    fn a_missing_path_is_not_found() {
        let scratch = Scratch::new("missing");
        let missing = scratch.0.join("does-not-exist");
        match Corpus::from_path(&missing, None) {
            Err(DataError::NotFound { path }) => assert_eq!(path, missing),
            other => panic!("expected NotFound, got {other:?}"),
        }
    }

    #[test]
    fn max_bytes_cuts_at_a_character_boundary() {
        let scratch = Scratch::new("limit");
        scratch.write("a.txt", "héllo wörld".as_bytes());
        scratch.write("b.txt", b"never read");
        // "h" is 1 byte, "é" 2: a limit of 2 bytes keeps only "h".
        let corpus = Corpus::from_path(&scratch.0, Some(2)).expect("read");
        assert_eq!((corpus.text.as_str(), corpus.files), ("h", 1));
        // "héllo w" is 8 bytes, "ö" takes bytes 8 and 9: a limit of 9 stops before it.
        let corpus = Corpus::from_path(&scratch.0, Some(9)).expect("read");
        assert_eq!(corpus.text, "héllo w");
        assert_eq!(corpus.bytes, 8);
        // Room for the first file, the separator and 3 bytes of the second.
        let first = "héllo wörld".len();
        let corpus = Corpus::from_path(&scratch.0, Some(first + 2 + 3)).expect("read");
        assert_eq!(corpus.text, "héllo wörld\n\nnev");
        assert_eq!((corpus.files, corpus.bytes), (2, first + 5));
        // A limit that leaves room only for the separator adds nothing more.
        let corpus = Corpus::from_path(&scratch.0, Some(first + 2)).expect("read");
        assert_eq!((corpus.text.as_str(), corpus.files), ("héllo wörld", 1));

        assert!(matches!(Corpus::from_path(&scratch.0, Some(0)), Err(DataError::InvalidArgument(_))));
    }

    #[test]
    fn the_cargo_registry_is_read_when_present() {
        let Some(dir) = cargo_registry_dir().filter(|dir| dir.is_dir()) else {
            return;
        };
        match Corpus::cargo_registry(Some(4096)) {
            Ok(corpus) => {
                assert!(corpus.bytes <= 4096 && corpus.bytes == corpus.text.len());
                assert!(corpus.files >= 1);
                assert_eq!(corpus.source, CorpusSource::CargoRegistry(dir));
            }
            // A registry holding no `.rs` or `.md` text is possible, if odd.
            Err(DataError::NoText { .. }) => {}
            Err(err) => panic!("reading the registry failed: {err}"),
        }
    }

    #[test]
    fn floor_char_boundary_never_splits_a_character() {
        let text = "aé東";
        assert_eq!(floor_char_boundary(text, 0), 0);
        assert_eq!(floor_char_boundary(text, 2), 1);
        assert_eq!(floor_char_boundary(text, 3), 3);
        assert_eq!(floor_char_boundary(text, 5), 3);
        assert_eq!(floor_char_boundary(text, 99), text.len());
    }
}
