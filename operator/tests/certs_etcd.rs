//! Real etcd with the operator's certificates: two members, each on its own loopback address,
//! with the peer and serving certificates from `etcd-all-certs` and the CA bundles from
//! `etcd-all-bundles`, mutual TLS on both ports (`--client-cert-auth`, `--peer-client-cert-auth`).
//! Two members so the cluster only accepts a write once peer mTLS works. The operator's client
//! certificate writes; a client certificate from another CA is refused, and so is the
//! scrapers' (`etcd-metric-client`, of the metrics CA), for reads and writes.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::collections::BTreeMap;
use std::fs::File;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_fixture::LoopbackAddr;
use etcd_operator::certs::{
    self, CertKind, CertPolicy, ClientCertKind, DesiredNodes, EtcdCa, PEER_CA_BUNDLE_KEY,
    SERVER_CA_BUNDLE_KEY,
};
use membership::{ClientConfig, EtcdClient, MemberUrl, TlsFiles};
use time::OffsetDateTime;

const DEADLINE: Duration = Duration::from_secs(30);

/// An etcd process killed (and reaped) on drop, also when the test panics.
struct EtcdProcess {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl EtcdProcess {
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<_> = text.lines().collect();
        let from = lines.len().saturating_sub(15);
        format!("--- {} ---\n{}", self.name, lines[from..].join("\n"))
    }

    fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("etcd {} exited ({status}):\n{}", self.name, self.log_tail());
        }
    }
}

fn write(path: &Path, bytes: &[u8]) -> PathBuf {
    std::fs::write(path, bytes).unwrap();
    path.to_owned()
}

fn start_member(
    dir: &Path,
    name: &str,
    ip: Ipv4Addr,
    initial_cluster: &str,
    certs_dir: &Path,
    server_ca: &Path,
    peer_ca: &Path,
) -> EtcdProcess {
    let data_dir = dir.join(format!("{name}-data"));
    let log = dir.join(format!("{name}.log"));
    let client_url = format!("https://{ip}:2379");
    let peer_url = format!("https://{ip}:2380");
    let file = |kind: CertKind, ext: &str| {
        certs_dir
            .join(format!("{}.{ext}", kind.name(name)))
            .display()
            .to_string()
    };
    let child = Command::new(etcd_fixture::etcd_binary())
        .env_clear()
        .arg(format!("--name={name}"))
        .arg(format!("--data-dir={}", data_dir.display()))
        .arg(format!("--listen-client-urls={client_url}"))
        .arg(format!("--advertise-client-urls={client_url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster={initial_cluster}"))
        .arg("--initial-cluster-state=new")
        .arg("--initial-cluster-token=certs-etcd-test")
        .arg(format!("--cert-file={}", file(CertKind::Serving, "crt")))
        .arg(format!("--key-file={}", file(CertKind::Serving, "key")))
        .arg(format!("--trusted-ca-file={}", server_ca.display()))
        .arg("--client-cert-auth")
        .arg(format!("--peer-cert-file={}", file(CertKind::Peer, "crt")))
        .arg(format!("--peer-key-file={}", file(CertKind::Peer, "key")))
        .arg(format!("--peer-trusted-ca-file={}", peer_ca.display()))
        .arg("--peer-client-cert-auth")
        .arg("--logger=zap")
        .arg("--log-outputs=stderr")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(&log).unwrap())
        .spawn()
        .unwrap();
    EtcdProcess {
        name: name.to_owned(),
        child,
        log,
    }
}

fn client(endpoints: &[MemberUrl], ca: &Path, cert: &Path, key: &Path) -> EtcdClient {
    EtcdClient::new(ClientConfig {
        endpoints: endpoints.to_vec(),
        tls: Some(TlsFiles {
            ca: ca.to_owned(),
            cert: cert.to_owned(),
            key: key.to_owned(),
        }),
        call_timeout: Duration::from_secs(2),
    })
    .unwrap()
}

#[tokio::test]
async fn certs_serve_real_etcd_with_mutual_tls() {
    let policy = CertPolicy::default();
    let now = OffsetDateTime::now_utc();
    let dir = tempfile::tempdir().unwrap();
    let addrs = [
        LoopbackAddr::acquire().unwrap(),
        LoopbackAddr::acquire().unwrap(),
    ];
    let names = ["n1", "n2"];

    // The CA, etcd-all-certs and etcd-all-bundles exactly as the operator computes them.
    let (ca, origin) = EtcdCa::adopt_or_generate(certs::CaRole::Etcd, None, &policy, now).unwrap();
    assert_eq!(origin, certs::CaOrigin::Generated);
    let metrics_ca = EtcdCa::generate_for(certs::CaRole::Metrics, &policy, now).unwrap();
    let signers = certs::Signers {
        etcd: &ca,
        metrics: &metrics_ca,
    };
    let desired: DesiredNodes = names
        .iter()
        .zip(&addrs)
        .map(|(n, a)| ((*n).to_owned(), [IpAddr::V4(a.ip())].into()))
        .collect();
    let plan = certs::plan_node_certs(signers, &policy, &BTreeMap::new(), &desired, now);
    let secret = certs::apply_plan(signers, &policy, &plan, &BTreeMap::new(), now).unwrap();
    let bundles = certs::bundle_data(signers);

    let certs_dir = dir.path().join("etcd-all-certs");
    std::fs::create_dir(&certs_dir).unwrap();
    for (key, value) in &secret {
        write(&certs_dir.join(key), value);
    }
    let server_ca = write(
        &dir.path().join(SERVER_CA_BUNDLE_KEY),
        bundles[SERVER_CA_BUNDLE_KEY].as_bytes(),
    );
    let peer_ca = write(
        &dir.path().join(PEER_CA_BUNDLE_KEY),
        bundles[PEER_CA_BUNDLE_KEY].as_bytes(),
    );
    let reason = certs::plan_client_cert(&ca, &policy, &ClientCertKind::Operator.spec(), None, now);
    let client_data = certs::apply_client_cert(
        &ca,
        &policy,
        &ClientCertKind::Operator.spec(),
        &reason,
        None,
        now,
    )
    .unwrap();
    let client_cert = write(&dir.path().join("client.crt"), &client_data["tls.crt"]);
    let client_key = write(&dir.path().join("client.key"), &client_data["tls.key"]);

    let initial_cluster = names
        .iter()
        .zip(&addrs)
        .map(|(n, a)| format!("{n}=https://{}:2380", a.ip()))
        .collect::<Vec<_>>()
        .join(",");
    let mut members: Vec<EtcdProcess> = names
        .iter()
        .zip(&addrs)
        .map(|(n, a)| {
            start_member(
                dir.path(),
                n,
                a.ip(),
                &initial_cluster,
                &certs_dir,
                &server_ca,
                &peer_ca,
            )
        })
        .collect();
    let endpoints: Vec<MemberUrl> = addrs
        .iter()
        .map(|a| format!("https://{}:2379", a.ip()).parse().unwrap())
        .collect();

    // A write needs both members, so it proves peer mTLS as well as client mTLS.
    let operator = client(&endpoints, &server_ca, &client_cert, &client_key);
    let started = Instant::now();
    loop {
        let last = match tokio::time::timeout(
            Duration::from_secs(5),
            operator.put("/certs-test/hello", b"world".to_vec()),
        )
        .await
        {
            Ok(Ok(_)) => break,
            Ok(Err(e)) => e.to_string(),
            Err(_) => "put timed out".to_owned(),
        };
        for m in &mut members {
            m.assert_running();
        }
        if started.elapsed() > DEADLINE {
            let logs: Vec<_> = members.iter().map(EtcdProcess::log_tail).collect();
            panic!(
                "no write accepted within {DEADLINE:?}; last error: {last}\n{}",
                logs.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let value = tokio::time::timeout(Duration::from_secs(5), operator.get("/certs-test/hello"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(value.as_deref(), Some(&b"world"[..]));

    // `/version` over the same identity: the member's version and, once the leader decided it,
    // the cluster version (etcd's own words, which the gRPC API does not carry).
    let started = Instant::now();
    let version = loop {
        let v = operator.version_of(&endpoints[1]).await.unwrap();
        if v.cluster != "not_decided" {
            break v;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "cluster version still {v:?} after {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let binary = Command::new(etcd_fixture::etcd_binary())
        .arg("--version")
        .output()
        .unwrap();
    let binary = String::from_utf8_lossy(&binary.stdout).into_owned();
    assert!(
        binary.contains(&format!("etcd Version: {}", version.server)),
        "{version:?} vs {binary}"
    );
    let minor: Vec<&str> = version.server.split('.').take(2).collect();
    assert_eq!(
        version.cluster,
        format!("{}.0", minor.join(".")),
        "{version:?}"
    );

    // A client certificate from another CA is refused by --client-cert-auth.
    let other = EtcdCa::generate(now).unwrap();
    let stranger = other
        .issue(&ClientCertKind::Operator.spec(), &policy, now)
        .unwrap();
    let stranger_cert = write(
        &dir.path().join("stranger.crt"),
        stranger.cert_pem.as_bytes(),
    );
    let stranger_key = write(
        &dir.path().join("stranger.key"),
        stranger.key_pem.as_bytes(),
    );
    let stranger = client(&endpoints, &server_ca, &stranger_cert, &stranger_key);
    let refused = tokio::time::timeout(
        Duration::from_secs(10),
        stranger.put("/certs-test/stranger", b"no".to_vec()),
    )
    .await;
    assert!(
        !matches!(refused, Ok(Ok(_))),
        "a client certificate from another CA was accepted"
    );
    let refused = stranger.version_of(&endpoints[0]).await.unwrap_err();
    assert!(
        refused.to_string().contains("GET /version"),
        "the stranger read /version: {refused}"
    );
    assert!(
        matches!(
            &refused,
            membership::ClientError::Endpoint(f) if f.kind == membership::FailureKind::Tls
        ),
        "a refused client certificate is a TLS failure, not a down member: {refused:?}"
    );

    // The scrapers' certificate (etcd-metric-client, of the metrics CA) reads and writes
    // nothing: etcd trusts only the etcd CA.
    let scraper = metrics_ca
        .issue(&ClientCertKind::Metrics.spec(), &policy, now)
        .unwrap();
    let scraper_cert = write(&dir.path().join("scraper.crt"), scraper.cert_pem.as_bytes());
    let scraper_key = write(&dir.path().join("scraper.key"), scraper.key_pem.as_bytes());
    let scraper = client(&endpoints, &server_ca, &scraper_cert, &scraper_key);
    let wrote = tokio::time::timeout(
        Duration::from_secs(10),
        scraper.put("/certs-test/scraper", b"no".to_vec()),
    )
    .await;
    assert!(
        !matches!(wrote, Ok(Ok(_))),
        "the metric client certificate wrote a key"
    );
    let read =
        tokio::time::timeout(Duration::from_secs(10), scraper.get("/certs-test/hello")).await;
    assert!(
        !matches!(read, Ok(Ok(_))),
        "the metric client certificate read a key: {read:?}"
    );

    // The secret's certificates still plan as "keep" against the running cluster's CAs.
    let again = certs::plan_node_certs(signers, &policy, &secret, &desired, now);
    assert!(again.is_noop(), "{:?}", again.describe_changes());

    drop(members);
}
