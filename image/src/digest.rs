//! SHA-256 digests as OCI writes them (`sha256:<hex>`), and a writer that hashes what passes
//! through it, so a layer is hashed while it streams to disk.

use std::io::Write;

use sha2::{Digest, Sha256};

/// An OCI content digest.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Sha256Digest(pub String);

impl Sha256Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self::from_hasher(Sha256::new_with_prefix(bytes))
    }

    fn from_hasher(h: Sha256) -> Self {
        Self(format!("sha256:{:x}", h.finalize()))
    }

    /// The hex part (the blob's file name under `blobs/sha256/`).
    pub fn hex(&self) -> &str {
        self.0.trim_start_matches("sha256:")
    }
}

impl std::fmt::Display for Sha256Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Passes writes on to `inner`, hashing and counting them.
#[derive(Debug)]
pub struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    len: u64,
}

impl<W: Write> HashingWriter<W> {
    pub fn new(inner: W) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            len: 0,
        }
    }

    /// The inner writer, the digest and the byte count of everything written.
    pub fn finish(self) -> (W, Sha256Digest, u64) {
        (self.inner, Sha256Digest::from_hasher(self.hasher), self.len)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
