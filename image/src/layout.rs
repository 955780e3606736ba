//! The OCI image layout of one image: its layers ([`crate::layer`]), the image config, the
//! manifest and `index.json` naming the image by its tag (`org.opencontainers.image.ref.name`).
//! Media types and fields are those of the OCI image spec v1.1.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::digest::Sha256Digest;
use crate::layer::{Layer, write_blob, write_layer};
use crate::{ImageError, io};

pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
pub const LAYER_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
/// The annotation `index.json` names an image's tag with.
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";

/// What an image is made of.
#[derive(Clone, Debug, Default)]
pub struct ImageSpec {
    /// The tag `index.json` names it by (e.g. `3.5.16`).
    pub tag: String,
    /// One layer per tree, bottom first.
    pub layers: Vec<PathBuf>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// `KEY=value`, in this order.
    pub env: Vec<String>,
    /// `uid:gid`, or empty for root.
    pub user: String,
    pub working_dir: String,
    pub labels: BTreeMap<String, String>,
    /// The one time every entry and the config carry (seconds since the Unix epoch).
    pub epoch: u64,
}

/// What was written.
#[derive(Clone, Debug)]
pub struct Written {
    pub manifest: Sha256Digest,
    pub manifest_size: u64,
    pub config: Sha256Digest,
    pub layers: Vec<Layer>,
}

#[derive(Serialize)]
struct Descriptor<'a> {
    #[serde(rename = "mediaType")]
    media_type: &'a str,
    digest: String,
    size: u64,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    annotations: BTreeMap<&'a str, &'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct RunConfig<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    user: &'a str,
    env: &'a [String],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    entrypoint: &'a [String],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    cmd: &'a [String],
    working_dir: &'a str,
    labels: &'a BTreeMap<String, String>,
}

#[derive(Serialize)]
struct RootFs {
    r#type: &'static str,
    diff_ids: Vec<String>,
}

#[derive(Serialize)]
struct History {
    created: String,
    created_by: String,
}

#[derive(Serialize)]
struct Config<'a> {
    created: String,
    architecture: &'static str,
    os: &'static str,
    config: RunConfig<'a>,
    rootfs: RootFs,
    history: Vec<History>,
}

#[derive(Serialize)]
struct Manifest<'a> {
    #[serde(rename = "schemaVersion")]
    schema_version: u32,
    #[serde(rename = "mediaType")]
    media_type: &'a str,
    config: Descriptor<'a>,
    layers: Vec<Descriptor<'a>>,
}

#[derive(Serialize)]
struct Index<'a> {
    #[serde(rename = "schemaVersion")]
    schema_version: u32,
    #[serde(rename = "mediaType")]
    media_type: &'a str,
    manifests: Vec<Descriptor<'a>>,
}

/// `1970-01-01T00:00:00Z` style UTC time of `epoch` (days to civil date: Howard Hinnant's
/// published algorithm).
pub fn rfc3339(epoch: u64) -> String {
    let days = (epoch / 86_400) as i64;
    let secs = epoch % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (h, mi, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

fn json<T: Serialize>(what: &'static str, v: &T) -> Result<Vec<u8>, ImageError> {
    serde_json::to_vec(v).map_err(|source| ImageError::Json { what, source })
}

fn config_json(spec: &ImageSpec, layers: &[Layer]) -> Result<Vec<u8>, ImageError> {
    let created = rfc3339(spec.epoch);
    let config = Config {
        created: created.clone(),
        architecture: "amd64",
        os: "linux",
        config: RunConfig {
            user: &spec.user,
            env: &spec.env,
            entrypoint: &spec.entrypoint,
            cmd: &spec.cmd,
            working_dir: &spec.working_dir,
            labels: &spec.labels,
        },
        rootfs: RootFs {
            r#type: "layers",
            diff_ids: layers.iter().map(|l| l.diff_id.to_string()).collect(),
        },
        history: (0..layers.len())
            .map(|n| History {
                created: created.clone(),
                created_by: format!("oci-image: layer {n}"),
            })
            .collect(),
    };
    json("the image config", &config)
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), ImageError> {
    std::fs::write(path, bytes).map_err(io(path))
}

/// Writes the layout of `spec` into the empty or new directory `out`.
pub fn write_layout(spec: &ImageSpec, out: &Path) -> Result<Written, ImageError> {
    let blobs = out.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).map_err(io(&blobs))?;
    let layers = spec
        .layers
        .iter()
        .map(|tree| write_layer(tree, spec.epoch, &blobs))
        .collect::<Result<Vec<_>, _>>()?;
    let (config, config_size) = write_blob(&config_json(spec, &layers)?, &blobs)?;
    let manifest = Manifest {
        schema_version: 2,
        media_type: MANIFEST_MEDIA_TYPE,
        config: descriptor(CONFIG_MEDIA_TYPE, &config, config_size),
        layers: layers
            .iter()
            .map(|l| descriptor(LAYER_MEDIA_TYPE, &l.digest, l.size))
            .collect(),
    };
    let (manifest_digest, manifest_size) = write_blob(&json("the manifest", &manifest)?, &blobs)?;
    let mut named = descriptor(MANIFEST_MEDIA_TYPE, &manifest_digest, manifest_size);
    named.annotations.insert(REF_NAME, &spec.tag);
    let index = Index {
        schema_version: 2,
        media_type: INDEX_MEDIA_TYPE,
        manifests: vec![named],
    };
    write_file(&out.join("index.json"), &json("index.json", &index)?)?;
    write_file(
        &out.join("oci-layout"),
        br#"{"imageLayoutVersion":"1.0.0"}"#,
    )?;
    Ok(Written {
        manifest: manifest_digest,
        manifest_size,
        config,
        layers,
    })
}

fn descriptor<'a>(media_type: &'a str, digest: &Sha256Digest, size: u64) -> Descriptor<'a> {
    Descriptor {
        media_type,
        digest: digest.to_string(),
        size,
        annotations: BTreeMap::new(),
    }
}
