//! `build-image`: one OCI image, without a container daemon or a registry, from directory trees
//! (one layer each). Writes the OCI layout to `--out` (built beside it and moved into place, so
//! a failed build leaves no half-written layout) and, with `--archive`, its `oci-archive`
//! tarball; prints what it wrote as JSON. `scripts/build-images` assembles the trees.
#![cfg_attr(test, allow(clippy::too_many_lines))] // test code is exempt (Cargo.toml's lints)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Parser;
use oci_image::archive::write_archive;
use oci_image::{ImageSpec, write_layout};

#[derive(Debug, Parser)]
#[command(
    name = "build-image",
    version = concat!(env!("CARGO_PKG_VERSION"), " (git ", env!("GIT_REVISION"), ")"),
    about = "Builds one reproducible OCI image layout from directory trees"
)]
struct Args {
    /// The tag index.json names the image by.
    #[arg(long)]
    tag: String,
    /// A directory tree that becomes one layer (bottom first; repeat).
    #[arg(long = "layer", required = true)]
    layers: Vec<PathBuf>,
    /// The image's entrypoint, one word per flag (repeat, in order).
    #[arg(long)]
    entrypoint: Vec<String>,
    /// The image's default arguments, one word per flag (repeat, in order).
    #[arg(long)]
    cmd: Vec<String>,
    /// KEY=value (repeat).
    #[arg(long)]
    env: Vec<String>,
    /// uid:gid the container runs as (empty: root).
    #[arg(long, default_value = "")]
    user: String,
    /// The working directory the container starts in.
    #[arg(long, default_value = "/")]
    workdir: String,
    /// KEY=value (repeat).
    #[arg(long)]
    label: Vec<String>,
    /// Seconds since the epoch every entry carries (default: SOURCE_DATE_EPOCH, else 0).
    #[arg(long, env = "SOURCE_DATE_EPOCH", default_value_t = 0)]
    epoch: u64,
    /// Where the OCI layout goes (replaced when it exists).
    #[arg(long)]
    out: PathBuf,
    /// Also write the layout as an oci-archive tarball here.
    #[arg(long)]
    archive: Option<PathBuf>,
}

/// `kv` split at its first `=`, refused (naming the option `what`) without one or a key.
fn key_value<'a>(what: &str, kv: &'a str) -> anyhow::Result<(&'a str, &'a str)> {
    match kv.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k, v)),
        _ => bail!("{what} {kv:?} is not KEY=value"),
    }
}

/// The `--label`s as a map (sorted, so the config's bytes do not depend on their order).
fn labels(items: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    items
        .iter()
        .map(|kv| key_value("--label", kv).map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect()
}

/// The `--env`s, each checked, in the order given (the config keeps a list).
fn env(items: Vec<String>) -> anyhow::Result<Vec<String>> {
    for kv in &items {
        key_value("--env", kv)?;
    }
    Ok(items)
}

fn sibling(out: &Path, suffix: &str) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    out.with_file_name(name)
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    for l in &a.layers {
        if !l.is_dir() {
            bail!("--layer {}: not a directory", l.display());
        }
    }
    let spec = ImageSpec {
        tag: a.tag.clone(),
        layers: a.layers.clone(),
        entrypoint: a.entrypoint,
        cmd: a.cmd,
        env: env(a.env)?,
        user: a.user,
        working_dir: a.workdir,
        labels: labels(&a.label)?,
        epoch: a.epoch,
    };
    let tmp = sibling(&a.out, ".building");
    let _ = std::fs::remove_dir_all(&tmp);
    let written = write_layout(&spec, &tmp).with_context(|| format!("image {}", a.tag))?;
    if a.out.exists() {
        std::fs::remove_dir_all(&a.out).with_context(|| format!("removing {}", a.out.display()))?;
    }
    std::fs::rename(&tmp, &a.out).with_context(|| format!("moving to {}", a.out.display()))?;
    if let Some(archive) = &a.archive {
        write_archive(&a.out, archive, a.epoch)?;
    }
    let layers: Vec<_> = written
        .layers
        .iter()
        .map(|l| serde_json::json!({"digest": l.digest.to_string(), "size": l.size}))
        .collect();
    let report = serde_json::json!({
        "tag": a.tag,
        "manifest": written.manifest.to_string(),
        "config": written.config.to_string(),
        "layers": layers,
        "size": written.layers.iter().map(|l| l.size).sum::<u64>(),
    });
    println!("{report}");
    Ok(())
}

etcd_cli::command_line_tests!(Args);
