#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn repository_component_strips_registry_tag_and_digest() {
    assert_eq!(repository_component("etcd"), "etcd");
    assert_eq!(repository_component("quay.io/coreos/etcd:v3.4.23"), "etcd");
    assert_eq!(
        repository_component("localhost:5000/x/etcd@sha256:ab"),
        "etcd"
    );
    assert_eq!(
        repository_component("registry.local/etcd-static-operator:latest"),
        "etcd-static-operator"
    );
}

#[test]
fn table_maps_images_and_commands() {
    let t = ImageTable::standard(Path::new("/opt/bin"));
    let r = t
        .resolve(
            "quay.io/coreos/etcd:v3.4",
            &s(&["/usr/local/bin/etcd"]),
            &s(&["--x"]),
        )
        .unwrap();
    assert_eq!(r.program, PathBuf::from("/usr/bin/etcd"));
    assert_eq!(r.args, s(&["--x"]));
    let r = t.resolve("etcd", &[], &s(&["--name=a"])).unwrap();
    assert_eq!(r.program, PathBuf::from("/opt/etcd-3.6.16/bin/etcd"));
    let r = t
        .resolve(
            "example.com/etcd-static-operator:dev",
            &s(&["etcd-verify", "membership"]),
            &[],
        )
        .unwrap();
    assert_eq!(r.program, PathBuf::from("/opt/bin/etcd-verify"));
    assert_eq!(r.args, s(&["membership"]));
    let r = t
        .resolve("busybox", &s(&["/bin/sh", "-c"]), &s(&["true"]))
        .unwrap();
    assert_eq!(r.program, PathBuf::from("/bin/sh"));
    assert_eq!(r.args, s(&["-c", "true"]));
    assert!(matches!(
        t.resolve("etcd", &s(&["etcd-verify"]), &[]),
        Err(ImageError::BinaryNotInImage { .. })
    ));
    assert!(matches!(
        t.resolve("nginx", &[], &[]),
        Err(ImageError::UnknownImage { .. })
    ));
}

#[test]
fn etcd_tags_pick_the_build_of_their_version() {
    let t = ImageTable::with_builds(Path::new("/opt/bin"), |_| true);
    let program = |image: &str| t.resolve(image, &[], &[]).map(|r| r.program);
    let default = PathBuf::from("/opt/etcd-3.6.16/bin/etcd");
    for image in [
        "etcd",
        "etcd:latest",
        "etcd@sha256:ab",
        "etcd:3.6",
        "registry.k8s.io/etcd:3.6.16-0",
        "etcd-static-operator/etcd:v3.6.16",
    ] {
        assert_eq!(program(image).unwrap(), default, "{image}");
    }
    for (image, program_is) in [
        ("etcd:3.5", "/opt/etcd-3.5.16/bin/etcd"),
        ("registry.k8s.io/etcd:3.5.16-0", "/opt/etcd-3.5.16/bin/etcd"),
        ("etcd:3.5.30", "/opt/etcd-3.5.30/bin/etcd"),
        ("etcd:3.5.36", "/opt/etcd-3.5.36/bin/etcd"),
        ("etcd:v3.7.3", "/opt/etcd-3.7.3/bin/etcd"),
        ("registry.k8s.io/etcd:3.5.1-0", "/opt/etcd-3.5.1/etcd"),
        ("etcd:v3.5.1", "/opt/etcd-3.5.1/etcd"),
        ("etcd:3.4", "/usr/bin/etcd"),
        ("quay.io/coreos/etcd:v3.4.23", "/usr/bin/etcd"),
        ("etcd-static-operator/etcd:3.4.23-0", "/usr/bin/etcd"),
    ] {
        assert_eq!(program(image).unwrap(), Path::new(program_is), "{image}");
    }
    for image in ["etcd:3.5.9", "etcd:3.4.22", "etcd:3.6.0", "etcd:3.8"] {
        let e = program(image).unwrap_err();
        assert!(
            e.to_string().contains(
                "builds: etcd 3.6.16, etcd 3.5.16, etcd 3.5.30, etcd 3.5.36, etcd 3.7.3, etcd 3.5.1, etcd 3.4.23)"
            ),
            "{image}: {e}"
        );
    }
    for (image, tool, is) in [
        ("etcd:3.5.1", "etcdutl", "/opt/etcd-3.5.1/etcdutl"),
        ("etcd", "etcdutl", "/opt/etcd-3.6.16/bin/etcdutl"),
        ("etcd:3.5.30", "etcdctl", "/opt/etcd-3.5.30/bin/etcdctl"),
    ] {
        let r = t.resolve(image, &s(&[tool]), &[]).unwrap();
        assert_eq!(r.program, Path::new(is), "{image} {tool}");
    }
}

#[test]
fn an_optional_build_not_installed_is_refused_by_name() {
    let t = ImageTable::with_builds(Path::new("/opt/bin"), |_| false);
    let e = t.resolve("etcd:3.5.30", &[], &[]).unwrap_err();
    assert!(matches!(e, ImageError::NoSuchTag { .. }), "{e}");
    assert!(
        e.to_string().contains(
            "builds: etcd 3.6.16, etcd 3.5.16, etcd 3.5.36, etcd 3.7.3, etcd 3.5.1, etcd 3.4.23; not installed here: etcd 3.5.30)"
        ),
        "{e}"
    );
    // The minor tag and the untagged image still get their builds.
    for (image, is) in [
        ("etcd:3.5", "/opt/etcd-3.5.16/bin/etcd"),
        ("etcd", "/opt/etcd-3.6.16/bin/etcd"),
    ] {
        let r = t.resolve(image, &[], &[]).unwrap();
        assert_eq!(r.program, Path::new(is), "{image}");
    }
}
