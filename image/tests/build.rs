//! Images built by `oci-image` are reproducible and are read by real OCI tools: the same tree
//! gives the same digest whatever its files' times, owners, creation order and non-executable
//! mode bits; one changed byte gives another; `skopeo` reads the layout and the oci-archive and
//! `umoci` unpacks the image into a runtime bundle whose files, modes and config are the ones
//! given.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use oci_image::archive::write_archive;
use oci_image::{ImageSpec, Written, write_layout};

/// A small root filesystem: files in nested dirs, an executable, a symlink. `reversed` reverses
/// the creation order and `mode` is the non-executable files' mode, so two calls can differ in
/// everything but content.
fn tree(root: &Path, reversed: bool, mode: u32) {
    let mut files = vec![
        ("etc/passwd", "root:x:0:0::/:/sbin/nologin\n", false),
        ("usr/bin/tool", "#!/bin/sh\necho tool\n", true),
        ("usr/share/doc/a/README", "a\n", false),
    ];
    if reversed {
        files.reverse();
    }
    for (rel, text, exec) in files {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        let m = if exec { 0o750 } else { mode };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m)).unwrap();
    }
    std::os::unix::fs::symlink("usr/bin", root.join("bin")).unwrap();
}

fn spec(layers: Vec<PathBuf>) -> ImageSpec {
    ImageSpec {
        tag: "1.0".into(),
        layers,
        entrypoint: vec!["/usr/bin/tool".into()],
        env: vec!["PATH=/usr/bin".into()],
        user: "65532:65532".into(),
        working_dir: "/".into(),
        labels: BTreeMap::from([("org.opencontainers.image.version".into(), "1.0".into())]),
        epoch: 1_700_000_000,
        ..ImageSpec::default()
    }
}

#[test]
fn the_same_tree_gives_the_same_digest_and_a_changed_byte_another() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    tree(&a, false, 0o644);
    tree(&b, true, 0o600);
    let past = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
    for f in ["etc/passwd", "usr/bin/tool", "usr/share/doc/a/README"] {
        let file = std::fs::File::options()
            .write(true)
            .open(b.join(f))
            .unwrap();
        file.set_modified(past).unwrap();
    }
    let first = write_layout(&spec(vec![a.clone()]), &tmp.path().join("out-a")).unwrap();
    let second = write_layout(&spec(vec![b.clone()]), &tmp.path().join("out-b")).unwrap();
    assert_eq!(
        first.manifest, second.manifest,
        "same content, other digest"
    );
    let (ar_a, ar_b) = (tmp.path().join("a.tar"), tmp.path().join("b.tar"));
    write_archive(&tmp.path().join("out-a"), &ar_a, 0).unwrap();
    write_archive(&tmp.path().join("out-b"), &ar_b, 0).unwrap();
    assert_eq!(
        std::fs::read(&ar_a).unwrap(),
        std::fs::read(&ar_b).unwrap(),
        "archives differ"
    );

    std::fs::write(b.join("usr/share/doc/a/README"), "b\n").unwrap();
    let changed = write_layout(&spec(vec![b]), &tmp.path().join("out-c")).unwrap();
    assert_ne!(
        first.manifest, changed.manifest,
        "a changed file kept the digest"
    );
}

fn tool(name: &str) -> Option<PathBuf> {
    let found = ["/usr/bin", "/usr/local/bin", "/usr/sbin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file());
    if found.is_none() {
        eprintln!(
            "SKIPPED: {name} not found (scripts/install-deps installs it, see scripts/apt-packages)"
        );
    }
    found
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A one-layer image of [`tree`] (files written with `mode`) in a fresh directory: the
/// directory, the layout's path and what was written.
fn one_layer_image(mode: u32) -> (tempfile::TempDir, PathBuf, Written) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    tree(&root, false, mode);
    let layout = tmp.path().join("layout");
    let written = write_layout(&spec(vec![root]), &layout).unwrap();
    (tmp, layout, written)
}

#[test]
fn skopeo_reads_the_layout_and_the_archive() {
    let Some(skopeo) = tool("skopeo") else { return };
    let (tmp, layout, written) = one_layer_image(0o644);
    let archive = tmp.path().join("image.tar");
    write_archive(&layout, &archive, 0).unwrap();
    let image = format!("oci:{}:1.0", layout.display());
    let raw = run(Command::new(&skopeo).args(["inspect", "--raw", &image]));
    let blob = layout.join("blobs/sha256").join(written.manifest.hex());
    assert_eq!(raw.trim_end(), std::fs::read_to_string(blob).unwrap());
    let from_archive = format!("oci-archive:{}:1.0", archive.display());
    let inspected: serde_json::Value =
        serde_json::from_str(&run(Command::new(&skopeo).args(["inspect", &from_archive]))).unwrap();
    assert_eq!(inspected["Digest"], written.manifest.to_string());
    assert_eq!(
        inspected["Labels"]["org.opencontainers.image.version"],
        "1.0"
    );
    assert_eq!(inspected["Architecture"], "amd64");
}

#[test]
fn umoci_unpacks_the_image_as_it_was_given() {
    let Some(umoci) = tool("umoci") else { return };
    let (tmp, layout, _) = one_layer_image(0o600);
    let bundle = tmp.path().join("bundle");
    let image = format!("{}:1.0", layout.display());
    run(Command::new(umoci)
        .args(["unpack", "--image", &image])
        .arg(&bundle));
    let rootfs = bundle.join("rootfs");
    let mode = |rel: &str| {
        std::fs::symlink_metadata(rootfs.join(rel))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode("usr/bin/tool"), 0o755);
    assert_eq!(mode("etc/passwd"), 0o644);
    assert_eq!(
        std::fs::read_link(rootfs.join("bin")).unwrap(),
        Path::new("usr/bin")
    );
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bundle.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["process"]["args"][0], "/usr/bin/tool");
    assert_eq!(config["process"]["user"]["uid"], 65532);
}
