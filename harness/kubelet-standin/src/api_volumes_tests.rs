#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use super::*;
use crate::api_volume_io::{volume_dir, write_volume};
use k8s_openapi::api::core::v1::{
    ConfigMapProjection, ConfigMapVolumeSource, DownwardAPIProjection, ObjectFieldSelector,
    ProjectedVolumeSource, SecretVolumeSource, ServiceAccountTokenProjection,
};
use std::os::unix::fs::PermissionsExt;

/// The volume the ServiceAccount admission plugin of kube-apiserver adds to every pod.
fn kube_api_access() -> Volume {
    Volume {
        name: "kube-api-access-x1".into(),
        projected: Some(ProjectedVolumeSource {
            default_mode: Some(0o644),
            sources: Some(vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        expiration_seconds: Some(3607),
                        path: "token".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: "kube-root-ca.crt".into(),
                        items: Some(vec![KeyToPath {
                            key: "ca.crt".into(),
                            path: "ca.crt".into(),
                            ..Default::default()
                        }]),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                VolumeProjection {
                    downward_api: Some(DownwardAPIProjection {
                        items: Some(vec![DownwardAPIVolumeFile {
                            path: "namespace".into(),
                            field_ref: Some(ObjectFieldSelector {
                                field_path: "metadata.namespace".into(),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }]),
                    }),
                    ..Default::default()
                },
            ]),
        }),
        ..Default::default()
    }
}

fn facts() -> PodFacts {
    PodFacts {
        name: "installer-3-n1".into(),
        namespace: "etcd".into(),
        uid: "u-1".into(),
        service_account: "etcd-installer".into(),
        ..Default::default()
    }
}

fn data(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, Vec<u8>>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.as_bytes().to_vec()))
            .collect(),
    )
}

fn token_key() -> TokenKey {
    TokenKey {
        audience: String::new(),
        expiration_seconds: 3607,
    }
}

#[test]
fn kube_api_access_needs_a_token_and_the_root_ca() {
    let spec = PodSpec {
        volumes: Some(vec![kube_api_access()]),
        ..Default::default()
    };
    assert!(has_service_account_token(&spec));
    let n = needs(&spec);
    assert_eq!(
        n.config_maps,
        BTreeSet::from(["kube-root-ca.crt".to_string()])
    );
    assert!(n.secrets.is_empty());
    assert_eq!(n.tokens, BTreeSet::from([token_key()]));
}

#[test]
fn kube_api_access_files_are_token_ca_and_namespace() {
    let mut fetched = Fetched::default();
    fetched.tokens.insert(token_key(), "tok".into());
    fetched
        .config_maps
        .insert("kube-root-ca.crt".into(), data(&[("ca.crt", "PEM")]));
    let files = volume_files(&kube_api_access(), &facts(), &fetched)
        .unwrap()
        .unwrap();
    let got: Vec<(&str, &[u8], u32)> = files
        .iter()
        .map(|f| (f.path.as_str(), f.data.as_slice(), f.mode))
        .collect();
    assert_eq!(
        got,
        vec![
            ("ca.crt", b"PEM".as_slice(), 0o644),
            ("namespace", b"etcd".as_slice(), 0o644),
            ("token", b"tok".as_slice(), 0o644),
        ]
    );
}

#[test]
fn a_missing_configmap_fails_unless_optional() {
    let mut fetched = Fetched::default();
    fetched.tokens.insert(token_key(), "tok".into());
    fetched.config_maps.insert("kube-root-ca.crt".into(), None);
    let err = volume_files(&kube_api_access(), &facts(), &fetched).unwrap_err();
    assert_eq!(
        err.to_string(),
        "volume \"kube-api-access-x1\": configmap \"kube-root-ca.crt\" not found"
    );
    let mut v = kube_api_access();
    if let Some(p) = v.projected.as_mut() {
        for s in p.sources.iter_mut().flatten() {
            if let Some(cm) = s.config_map.as_mut() {
                cm.optional = Some(true);
            }
        }
    }
    let files = volume_files(&v, &facts(), &fetched).unwrap().unwrap();
    assert_eq!(files.len(), 2, "{files:?}");
}

#[test]
fn a_missing_key_fails_and_no_token_fails() {
    let mut fetched = Fetched::default();
    fetched
        .config_maps
        .insert("kube-root-ca.crt".into(), data(&[("other", "x")]));
    fetched.tokens.insert(token_key(), "tok".into());
    let err = volume_files(&kube_api_access(), &facts(), &fetched).unwrap_err();
    assert!(err.to_string().contains("has no key \"ca.crt\""), "{err}");
    fetched
        .config_maps
        .insert("kube-root-ca.crt".into(), data(&[("ca.crt", "PEM")]));
    fetched.tokens.clear();
    let err = volume_files(&kube_api_access(), &facts(), &fetched).unwrap_err();
    assert!(err.to_string().contains("etcd-installer"), "{err}");
}

#[test]
fn keys_become_files_and_hostile_paths_are_refused() {
    let v = Volume {
        name: "cfg".into(),
        config_map: Some(ConfigMapVolumeSource {
            name: "c".into(),
            default_mode: Some(0o600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut fetched = Fetched::default();
    fetched
        .config_maps
        .insert("c".into(), data(&[("b", "2"), ("a", "1")]));
    let files = volume_files(&v, &facts(), &fetched).unwrap().unwrap();
    let paths: Vec<_> = files.iter().map(|f| (f.path.as_str(), f.mode)).collect();
    assert_eq!(paths, vec![("a", 0o600), ("b", 0o600)]);
    let hostile = Volume {
        name: "s".into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some("s".into()),
            items: Some(vec![KeyToPath {
                key: "k".into(),
                path: "../../etc/passwd".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    fetched.secrets.insert("s".into(), data(&[("k", "v")]));
    let err = volume_files(&hostile, &facts(), &fetched).unwrap_err();
    assert!(matches!(err, ApiVolumeError::BadPath { .. }), "{err}");
    for bad in ["/abs", "", "a/../../b"] {
        assert!(checked_path("v", bad).is_err(), "{bad}");
    }
    assert_eq!(checked_path("v", "dir/file").unwrap(), "dir/file");
}

#[test]
fn host_path_and_empty_dir_are_not_api_volumes() {
    let v = Volume {
        name: "data".into(),
        empty_dir: Some(Default::default()),
        ..Default::default()
    };
    assert!(!is_api_volume(&v));
    assert!(
        volume_files(&v, &facts(), &Fetched::default())
            .unwrap()
            .is_none()
    );
}

#[test]
fn written_volumes_replace_the_old_contents_whole() {
    let dir = tempfile::tempdir().unwrap();
    let target = volume_dir(dir.path(), "cfg");
    let file = |path: &str, data: &str| VolumeFile {
        path: path.into(),
        data: data.as_bytes().to_vec(),
        mode: 0o640,
    };
    write_volume(&target, &[file("a", "1"), file("sub/b", "2")]).unwrap();
    assert_eq!(std::fs::read_to_string(target.join("sub/b")).unwrap(), "2");
    let mode = std::fs::metadata(target.join("a"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o640);
    write_volume(&target, &[file("c", "3")]).unwrap();
    assert!(!target.join("a").exists());
    assert_eq!(std::fs::read_to_string(target.join("c")).unwrap(), "3");
    let leftovers: Vec<_> = std::fs::read_dir(target.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, vec![std::ffi::OsString::from("cfg")]);
}
