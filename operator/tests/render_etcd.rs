//! `etcd-operator render`'s kube-apiserver material against real etcd: the binary renders a
//! bootstrap node on its own loopback address; its client certificate is checked on its own
//! (CN, client-auth usage, signed by the CA file beside it, key 0600), then an etcd 3.4 started
//! with the render's own serving certificate and CA bundle, `--client-cert-auth`, listening on
//! the node's address and on `[::1]`, takes a write from it, answers it over `[::1]` (the
//! serving certificate names `::1`), and refuses a client certificate of another CA.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use etcd_fixture::LoopbackAddr;
use etcd_operator::bootstrap::apiserver::{CA_FILE, CERT_FILE, CLUSTER_FILE, KEY_FILE};
use etcd_operator::certs::{CertKind, CertPolicy, EtcdCa, LeafSpec, Sans, Usage};
use membership::{ClientConfig, EtcdClient, MemberUrl, TlsFiles};
use x509_parser::prelude::{FromDer, X509Certificate};

const DEADLINE: Duration = Duration::from_secs(30);

#[path = "support/etcd_process.rs"]
mod etcd_process;
use etcd_process::Etcd;

fn der(pem_path: &Path) -> Vec<u8> {
    let text = std::fs::read(pem_path).unwrap();
    let (_, pem) = x509_parser::pem::parse_x509_pem(&text).unwrap();
    pem.contents
}

/// The certificate's CN, client-auth usage and signature, checked with x509-parser alone (not
/// with the code that made it).
fn check_client_cert(out: &Path) {
    let (ca_der, cert_der) = (der(&out.join(CA_FILE)), der(&out.join(CERT_FILE)));
    let (_, ca) = X509Certificate::from_der(&ca_der).unwrap();
    let (_, cert) = X509Certificate::from_der(&cert_der).unwrap();
    let cn: Vec<&str> = cert
        .subject()
        .iter_common_name()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(cn, ["kube-apiserver-etcd-client"]);
    let eku = cert.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.client_auth, "no client-auth usage: {eku:?}");
    assert!(!eku.server_auth, "a client certificate with server usage");
    assert_eq!(cert.issuer(), ca.subject());
    cert.verify_signature(Some(ca.public_key()))
        .expect("the client certificate is not signed by the CA file beside it");
    let mode = std::fs::metadata(out.join(KEY_FILE))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the key is not private");
}

fn render(out: &Path, ip: &str) {
    let o = Command::new(env!("CARGO_BIN_EXE_etcd-operator"))
        .args([
            "render",
            "--node-name",
            "n1",
            "--node-ip",
            ip,
            "--output-dir",
        ])
        .arg(out)
        .env("ETCD_OPERATOR_LOG", "warn")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A free TCP port on `[::1]`.
fn free_v6_port() -> u16 {
    std::net::TcpListener::bind("[::1]:0")
        .expect("this machine has no IPv6 loopback ([::1]); etcd's local listener needs one")
        .local_addr()
        .unwrap()
        .port()
}

/// etcd from the render's certificates dir: client mTLS on `ip:2379` and `[::1]:v6_port`.
fn start_etcd(out: &Path, ip: &str, v6_port: u16) -> Etcd {
    let certs = out.join("etcd-certs");
    let secret = |name: String| certs.join("secrets/etcd-all-certs").join(name);
    let log = out.parent().unwrap().join("etcd.log");
    let client = format!("https://{ip}:2379");
    let peer = format!("http://{ip}:2380");
    let child = Command::new(etcd_fixture::etcd_binary())
        .env_clear()
        .arg("--name=n1")
        .arg(format!(
            "--data-dir={}",
            out.parent().unwrap().join("data").display()
        ))
        .arg(format!(
            "--listen-client-urls={client},https://[::1]:{v6_port}"
        ))
        .arg(format!("--advertise-client-urls={client}"))
        .arg(format!("--listen-peer-urls={peer}"))
        .arg(format!("--initial-advertise-peer-urls={peer}"))
        .arg(format!("--initial-cluster=n1={peer}"))
        .arg(format!(
            "--cert-file={}",
            secret(CertKind::Serving.cert_key("n1")).display()
        ))
        .arg(format!(
            "--key-file={}",
            secret(CertKind::Serving.key_key("n1")).display()
        ))
        .arg(format!(
            "--trusted-ca-file={}",
            certs
                .join("configmaps/etcd-all-bundles/server-ca-bundle.crt")
                .display()
        ))
        .arg("--client-cert-auth")
        .args(["--logger=zap", "--log-outputs=stderr"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(&log).unwrap())
        .spawn()
        .unwrap();
    Etcd { child, log }
}

fn client(url: &str, tls: TlsFiles) -> EtcdClient {
    EtcdClient::new(ClientConfig {
        endpoints: vec![url.parse().unwrap()],
        tls: Some(tls),
        call_timeout: Duration::from_secs(2),
    })
    .unwrap()
}

/// Puts until etcd takes the write (it is starting), within [`DEADLINE`].
async fn put_eventually(c: &EtcdClient, etcd: &mut Etcd) {
    let started = Instant::now();
    loop {
        let last =
            match tokio::time::timeout(Duration::from_secs(5), c.put("/render", b"ok".to_vec()))
                .await
            {
                Ok(Ok(_)) => return,
                Ok(Err(e)) => e.to_string(),
                Err(_) => "put timed out".to_owned(),
            };
        if let Ok(Some(status)) = etcd.child.try_wait() {
            panic!("etcd exited ({status}):\n{}", etcd.log_tail(15));
        }
        assert!(
            started.elapsed() < DEADLINE,
            "kube-apiserver's certificate wrote nothing within {DEADLINE:?}: {last}\n{}",
            etcd.log_tail(15)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn kube_apiservers_material_is_accepted_by_real_etcd_also_over_ipv6_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let addr = LoopbackAddr::acquire().unwrap();
    let ip = addr.ip().to_string();
    render(&out, &ip);
    check_client_cert(&out);
    let cluster = std::fs::read_to_string(out.join(CLUSTER_FILE)).unwrap();
    assert!(
        cluster.contains("\"name\": \"kube-apiserver\"")
            && cluster.contains("\"commonName\": \"kube-apiserver-etcd-client\""),
        "the EtcdCluster does not name kube-apiserver as a consumer:\n{cluster}"
    );
    let pod = std::fs::read_to_string(out.join("etcd-pod.yaml")).unwrap();
    let listen = format!(
        "- --listen-client-urls=https://{ip}:2379,https://127.0.0.1:2379,https://[::1]:2379\n"
    );
    assert!(pod.contains(&listen), "{pod}");

    let v6_port = free_v6_port();
    let mut etcd = start_etcd(&out, &ip, v6_port);
    let tls = TlsFiles {
        ca: out.join(CA_FILE),
        cert: out.join(CERT_FILE),
        key: out.join(KEY_FILE),
    };
    let apiserver = client(&format!("https://{ip}:2379"), tls.clone());
    put_eventually(&apiserver, &mut etcd).await;
    let read = apiserver.get("/render").await.unwrap();
    assert_eq!(read.as_deref(), Some(&b"ok"[..]));
    // Over [::1]: TLS checks the serving certificate's `::1` name, etcd the client certificate.
    let v6: MemberUrl = format!("https://[::1]:{v6_port}").parse().unwrap();
    let version = apiserver.version_of(&v6).await;
    assert!(version.is_ok(), "[::1]: {version:?}\n{}", etcd.log_tail(15));

    // Another CA's client certificate is refused: the acceptance above means something.
    let now = time::OffsetDateTime::now_utc();
    let other = EtcdCa::generate(now).unwrap();
    let spec = LeafSpec {
        common_name: "kube-apiserver-etcd-client".into(),
        sans: Sans::default(),
        usage: Usage::CLIENT,
    };
    let stranger = other.issue(&spec, &CertPolicy::default(), now).unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let stranger = TlsFiles {
        ca: out.join(CA_FILE),
        cert: write("stranger.crt", &stranger.cert_pem),
        key: write("stranger.key", &stranger.key_pem),
    };
    let refused = client(&format!("https://{ip}:2379"), stranger)
        .version_of(&v6)
        .await;
    assert!(refused.is_err(), "another CA's certificate was accepted");
    drop(etcd);
}
