use super::*;
use crate::context::BackupPaths;
use crate::podspec::Images;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};

fn opts(output: PathBuf) -> GatherOptions {
    GatherOptions {
        config: OperatorConfig {
            images: Images {
                etcd: "etcd:test".into(),
                operator: "etcd-operator:test".into(),
            },
            operator_namespace: "etcd-operator".into(),
            etcd_timeout: std::time::Duration::from_secs(1),
            backup: BackupPaths::default(),
        },
        output,
        log_files: Vec::new(),
        log_lines: 10,
        server: "https://127.0.0.1:6443".into(),
    }
}

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
}

fn key_pem() -> String {
    rcgen::KeyPair::generate().unwrap().serialize_pem()
}

/// Every file as archived, after checking that none holds the key in any form.
fn archived_without(g: Gathered, pem: &str) -> BTreeMap<String, String> {
    let body = pem.lines().nth(1).unwrap();
    let files = g.finish(&opts("unused.tar.gz".into()), now());
    let mut texts = BTreeMap::new();
    for (name, bytes) in files {
        let text = String::from_utf8(bytes).unwrap();
        assert!(!text.contains("PRIVATE KEY"), "{name}:\n{text}");
        assert!(!text.contains(body), "{name} holds the key's body:\n{text}");
        texts.insert(name, text);
    }
    texts
}

#[test]
fn an_event_whose_message_is_a_private_key_is_archived_without_it() {
    let pem = key_pem();
    let event = Event {
        type_: Some("Warning".into()),
        reason: Some("Odd".into()),
        note: Some(pem.clone()),
        ..Default::default()
    };
    let mut g = Gathered::default();
    g.json("events-etcd.json", &vec![event]);
    let files = archived_without(g, &pem);
    let events: serde_json::Value = serde_json::from_str(&files["events-etcd.json"]).unwrap();
    assert_eq!(events[0]["note"], format!("{}\n", redact::MARKER));
    assert_eq!(events[0]["reason"], "Odd");
    assert!(
        files["problems.txt"].contains("events-etcd.json: 1 private key(s) removed"),
        "{}",
        files["problems.txt"]
    );
}

#[test]
fn a_base64_data_field_holding_a_private_key_is_archived_without_it() {
    let pem = key_pem();
    let secret = Secret {
        data: Some(
            [("tls.key".to_owned(), ByteString(pem.clone().into_bytes()))]
                .into_iter()
                .collect(),
        ),
        ..Default::default()
    };
    let config_map = ConfigMap {
        binary_data: Some(
            [("bundle".to_owned(), ByteString(pem.clone().into_bytes()))]
                .into_iter()
                .collect(),
        ),
        ..Default::default()
    };
    let mut g = Gathered::default();
    g.json("secret.json", &secret);
    g.json("configmap.json", &config_map);
    let files = archived_without(g, &pem);
    let secret: serde_json::Value = serde_json::from_str(&files["secret.json"]).unwrap();
    assert_eq!(secret["data"]["tls.key"], redact::MARKER);
    let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &pem);
    for (name, text) in &files {
        assert!(!text.contains(&b64[..40]), "{name}:\n{text}");
    }
}

#[test]
fn a_log_holding_a_private_key_is_archived_without_it() {
    let pem = key_pem();
    let escaped = serde_json::to_string(&pem).unwrap();
    let log = format!(
        "{{\"level\":\"warn\",\"msg\":\"odd\",\"key\":{escaped}}}\nplain line\n{pem}last line\n"
    );
    let mut g = Gathered::default();
    g.add("logs/files/operator.log".into(), log.into_bytes());
    let files = archived_without(g, &pem);
    let log = &files["logs/files/operator.log"];
    assert!(
        log.contains("plain line\n") && log.ends_with("last line\n"),
        "{log}"
    );
    assert!(files["problems.txt"].contains("logs/files/operator.log: 2 private key(s) removed"));
}

#[test]
fn an_archive_is_written_and_never_over_an_existing_file() {
    let dir = tempfile::tempdir().unwrap();
    let files: BTreeMap<String, Vec<u8>> = [("a.txt".to_owned(), b"a".to_vec())].into();
    let out = dir.path().join("gather.tar.gz");
    write_archive(&files, &out, now()).unwrap();
    assert!(std::fs::metadata(&out).unwrap().len() > 0);
    let err = write_archive(&files, &out, now()).unwrap_err();
    assert!(matches!(&err, GatherError::Exists(p) if p == &out), "{err}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no temporary file is left behind"
    );
}

#[test]
fn a_dangling_symlink_at_the_output_is_not_replaced() {
    // `exists()` follows the link and says no: only an atomic no-clobber step catches it.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gather.tar.gz");
    let target = dir.path().join("nowhere");
    std::os::unix::fs::symlink(&target, &out).unwrap();
    let files: BTreeMap<String, Vec<u8>> = [("a.txt".to_owned(), b"a".to_vec())].into();
    let err = write_archive(&files, &out, now()).unwrap_err();
    assert!(
        err.to_string().contains(&out.display().to_string()),
        "{err}"
    );
    assert_eq!(std::fs::read_link(&out).unwrap(), target);
    assert!(!target.exists());
}

#[test]
fn a_file_that_appears_at_the_output_while_writing_is_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gather.tar.gz");
    let files: BTreeMap<String, Vec<u8>> = [("a.txt".to_owned(), b"a".to_vec())].into();
    // What write_archive does after its early check: the archive is finished under its
    // temporary name, and only then someone else's file appears at the output.
    let tmp = temp_path(&out);
    write_tar(&files, &tmp, now()).unwrap();
    std::fs::write(&out, b"someone else's").unwrap();
    let err = publish(&tmp, &out).unwrap_err();
    assert!(matches!(&err, GatherError::Exists(p) if p == &out), "{err}");
    assert!(
        err.to_string().contains(&out.display().to_string()),
        "{err}"
    );
    assert_eq!(std::fs::read(&out).unwrap(), b"someone else's");
    assert!(!tmp.exists(), "the temporary file is removed");
    assert!(
        tmp.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(".gather.tar.gz.partial-")
    );
}
