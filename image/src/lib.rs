//! Daemonless, reproducible OCI images. An image is built from directory trees, each becoming
//! one layer ([`layer`]), plus an image config ([`ImageSpec`]); [`layout`] writes the OCI image
//! layout (`oci-layout`, `index.json`, `blobs/sha256/…`) and [`archive`] packs that layout into
//! the `oci-archive` tarball `skopeo copy oci-archive:…` pushes.
//!
//! Same inputs, same digest: layer entries are sorted by path, owned by 0:0, stamped with one
//! fixed time (`SOURCE_DATE_EPOCH`), modes normalised to 0755/0644; gzip carries no time and no
//! name; the JSON documents have a fixed key order; nothing records the build machine or path.
#![cfg_attr(test, allow(clippy::too_many_lines))] // test code is exempt (Cargo.toml's lints)

pub mod archive;
pub mod digest;
pub mod layer;
pub mod layout;

pub use layout::{ImageSpec, Written, write_layout};

/// Why an image could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {what} is not supported in an image layer")]
    Unsupported { path: String, what: &'static str },
    #[error("{path}: not valid UTF-8, which an image path must be here")]
    NotUtf8 { path: String },
    #[error("encoding {what}: {source}")]
    Json {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

/// `Io` with the path it concerns.
pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> ImageError + '_ {
    move |source| ImageError::Io {
        path: path.display().to_string(),
        source,
    }
}
