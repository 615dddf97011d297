//! What a cached thing is made from, hashed: the cache key of a root filesystem, the inputs label of an image.
//! A change in any input gives another hash, so the thing is made again; the same inputs, the same hash.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use anyhow::Context as _;
use sha2::{Digest as _, Sha256};

#[derive(Default)]
pub struct Inputs(Sha256);

/// The code of a Rust source file (`include_str!`): what comes before its tests, so editing a test does not
/// rebuild what the code makes. Trailing white space does not count either.
pub fn code_of(source: &str) -> &str {
    source.split_once("\n#[cfg(test)]").map_or(source, |(code, _)| code).trim_end()
}

impl Inputs {
    /// One input; each ends with a separator so that ("ab", "c") and ("a", "bc") differ.
    pub fn add(&mut self, part: impl AsRef<[u8]>) -> &mut Self {
        self.0.update(part.as_ref());
        self.0.update([0]);
        self
    }

    /// The code of Rust source files (see `code_of`); other files whole.
    pub fn code(&mut self, sources: &[&str]) -> &mut Self {
        for source in sources {
            self.add(code_of(source));
        }
        self
    }

    /// A small file by its content.
    pub fn content(&mut self, path: &Path) -> anyhow::Result<&mut Self> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        Ok(self.add(bytes))
    }

    /// A large file (a cached binary) by its path, size and modification time: reading it whole on every run
    /// would cost more than the check saves.
    pub fn stat(&mut self, path: &Path) -> anyhow::Result<&mut Self> {
        let m = path.metadata().with_context(|| format!("no {}", path.display()))?;
        Ok(self.add(format!("{} {} {}", path.display(), m.len(), m.mtime())))
    }

    /// The first `len` hex digits of the hash.
    pub fn hex(&self, len: usize) -> String {
        let digest = self.0.clone().finalize();
        let mut hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        hex.truncate(len);
        hex
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(parts: &[&str]) -> String {
        let mut i = Inputs::default();
        for p in parts {
            i.add(p);
        }
        i.hex(12)
    }

    #[test]
    fn the_same_inputs_give_the_same_hash_and_any_change_another() {
        assert_eq!(hash(&["bookworm", "curl"]), hash(&["bookworm", "curl"]));
        assert_eq!(hash(&["bookworm"]).len(), 12);
        assert!(hash(&["bookworm"]).bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(hash(&["bookworm", "curl"]), hash(&["bookworm", "wget"]));
        assert_ne!(hash(&["ab", "c"]), hash(&["a", "bc"]));
    }

    #[test]
    fn a_source_files_code_is_what_comes_before_its_tests() {
        let source = "fn f() {}\n#[cfg(test)]\nmod tests {}\n";
        assert_eq!(code_of(source), "fn f() {}");
        assert_eq!(code_of("fn f() {}\n"), "fn f() {}");
        let with_test = Inputs::default().code(&[source]).hex(12);
        let other_test = Inputs::default().code(&["fn f() {}\n#[cfg(test)]\nmod tests { fn t() {} }\n"]).hex(12);
        let other_code = Inputs::default().code(&["fn g() {}\n#[cfg(test)]\nmod tests {}\n"]).hex(12);
        assert_eq!(with_test, other_test);
        assert_ne!(with_test, other_code);
    }

    #[test]
    fn files_are_hashed_by_content_or_by_name_size_and_time() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, "same").expect("written");
        std::fs::write(&b, "same").expect("written");
        let content = |p: &Path| Inputs::default().content(p).expect("read").hex(16);
        assert_eq!(content(&a), content(&b));
        let stat = |p: &Path| Inputs::default().stat(p).expect("there").hex(16);
        assert_ne!(stat(&a), stat(&b), "another path is another input");
        let before = stat(&a);
        std::fs::write(&a, "longer").expect("written");
        assert_ne!(stat(&a), before);
        assert!(Inputs::default().stat(&dir.path().join("missing")).is_err());
    }
}
