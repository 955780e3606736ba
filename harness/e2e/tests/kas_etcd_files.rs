//! Which of kube-apiserver's etcd TLS files it reads again and which only once, at start: measured
//! on the real kube-apiserver v1.36 of `../shared/kas`, run as a process on a real etcd with
//! mutual TLS. Its etcd client material lies in files as a kubelet lays a Secret volume; each
//! file is swapped for one of a CA etcd does not know (atomically, by rename), and etcd is killed
//! and started again so that every connection kube-apiserver has is a new one.
//!
//! - `--etcd-certfile` / `--etcd-keyfile`: **read again for every new connection.** After the swap
//!   the API keeps working on its old connection; once etcd restarts, every write fails (etcd
//!   refuses the foreign certificate), and it works again as soon as the right files are back,
//!   with nothing restarted.
//! - `--etcd-cafile`: **read once, at start.** After the swap and an etcd restart the API works on
//!   (it still trusts the CA it read at start). A kube-apiserver started with the foreign CA file
//!   reaches no etcd and exits (`context deadline exceeded`, about 20 s after start); with the
//!   right file back it starts and writes.
//!
//! This is why the operator's CA rotation waits for a `reload: Restart` consumer's pods to start
//! again after each trust change (`docs/architecture.md`, "What kube-apiserver re-reads"), while
//! a renewed client certificate needs no restart. Without kas the test says SKIPPED and passes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_fixture::{CertFiles, ClusterSpec, EtcdCluster, KubeSubject, LoopbackAddr, Pki};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;

/// How long every write must keep failing (or working) for the verdict: well past
/// kube-apiserver's first reconnect attempts (gRPC backs off from 1 s).
const WINDOW: Duration = Duration::from_secs(12);
const DEADLINE: Duration = Duration::from_secs(90);

/// The real kube-apiserver as a process; killed when dropped.
struct KubeApiServer {
    child: Child,
    log: PathBuf,
}

impl KubeApiServer {
    fn start(bin: &Path, dir: &Path, ip: IpAddr, etcd_url: &str) -> Self {
        let pki = dir.join("pki");
        let etcd = dir.join("etcd");
        let log = dir.join(format!("kube-apiserver-{}.log", now_ms()));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(bin.join("kube-apiserver"))
            .args([
                format!("--advertise-address={ip}"),
                format!("--bind-address={ip}"),
                "--secure-port=6443".to_owned(),
                format!("--etcd-servers={etcd_url}"),
                format!("--etcd-cafile={}", etcd.join("ca.crt").display()),
                format!("--etcd-certfile={}", etcd.join("client.crt").display()),
                format!("--etcd-keyfile={}", etcd.join("client.key").display()),
                "--authorization-mode=Node,RBAC".to_owned(),
                format!("--client-ca-file={}", pki.join("ca.crt").display()),
                format!("--tls-cert-file={}", pki.join("apiserver.crt").display()),
                format!(
                    "--tls-private-key-file={}",
                    pki.join("apiserver.key").display()
                ),
                "--service-account-issuer=https://kubernetes.default.svc".to_owned(),
                format!(
                    "--service-account-key-file={}",
                    pki.join("sa.pub").display()
                ),
                format!(
                    "--service-account-signing-key-file={}",
                    pki.join("sa.key").display()
                ),
                "--service-cluster-ip-range=10.96.0.0/16".to_owned(),
                "--endpoint-reconciler-type=none".to_owned(),
            ])
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        Self { child, log }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

impl Drop for KubeApiServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default()
}

/// Replaces `to` with a copy of `from` in one rename, as a kubelet swaps a Secret volume.
fn swap(from: &Path, to: &Path) {
    let tmp = to.with_extension("swapping");
    std::fs::copy(from, &tmp).unwrap();
    std::fs::rename(&tmp, to).unwrap();
}

/// One ConfigMap created through kube-apiserver, 5 s at most (whether it reached etcd, not how
/// fast: other tests may load the machine).
async fn write(api: &Api<ConfigMap>) -> Result<(), String> {
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            generate_name: Some("probe-".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match tokio::time::timeout(
        Duration::from_secs(5),
        api.create(&PostParams::default(), &cm),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 5 s".into()),
    }
}

/// Waits until a write's outcome is `works`; panics with the last outcome and the log.
async fn wait_until(api: &Api<ConfigMap>, kas: &KubeApiServer, works: bool, what: &str) {
    let start = Instant::now();
    loop {
        let got = write(api).await;
        if got.is_ok() == works {
            eprintln!("{what}: after {:.1} s", start.elapsed().as_secs_f64());
            return;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{what}: not within {DEADLINE:?}; last write: {got:?}\nkube-apiserver log:\n{}",
            kas.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every write over [`WINDOW`] has outcome `works`: an observation window, not a wait.
async fn holds(api: &Api<ConfigMap>, kas: &KubeApiServer, works: bool, what: &str) {
    let start = Instant::now();
    let mut n = 0;
    while start.elapsed() < WINDOW {
        let got = write(api).await;
        assert_eq!(
            got.is_ok(),
            works,
            "{what}: write {n} after {:.1} s: {got:?}\nkube-apiserver log:\n{}",
            start.elapsed().as_secs_f64(),
            kas.log_tail()
        );
        n += 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    eprintln!("{what}: all {n} writes over {WINDOW:?}");
}

/// Every connection kube-apiserver has to etcd ends: the member is killed and started again.
async fn restart_etcd(etcd: &mut EtcdCluster) {
    let name = etcd.names()[0].clone();
    etcd.kill(&name).unwrap();
    etcd.restart(&name).unwrap();
    etcd.wait_writable().await.unwrap();
}

struct Setup {
    dir: tempfile::TempDir,
    etcd: EtcdCluster,
    ip: IpAddr,
    _addr: LoopbackAddr,
    /// The right client pair and CA (etcd's), and a foreign CA with a pair it issued.
    right: (CertFiles, PathBuf),
    foreign: (CertFiles, PathBuf),
}

async fn setup() -> Setup {
    let dir = tempfile::Builder::new()
        .prefix("kas-etcd-files-")
        .tempdir()
        .unwrap();
    let etcd = EtcdCluster::start(ClusterSpec::tls(1)).await.unwrap();
    let etcd_pki = etcd.pki().unwrap();
    let right = (
        etcd_pki.issue_client("kube-apiserver").unwrap(),
        etcd_pki.ca(),
    );
    let other = Pki::create_named(&dir.path().join("foreign"), "foreign-etcd-ca").unwrap();
    let foreign = (other.issue_client("kube-apiserver").unwrap(), other.ca());
    let addr = LoopbackAddr::acquire().unwrap();
    let ip = IpAddr::V4(addr.ip());
    let files = dir.path().join("etcd");
    std::fs::create_dir_all(&files).unwrap();
    swap(&right.1, &files.join("ca.crt"));
    swap(&right.0.cert, &files.join("client.crt"));
    swap(&right.0.key, &files.join("client.key"));
    kube_pki(&dir.path().join("pki"), ip);
    Setup {
        dir,
        etcd,
        ip,
        _addr: addr,
        right,
        foreign,
    }
}

/// kube-apiserver's own PKI and the admin's kubeconfig (`<dir>/admin.conf`).
fn kube_pki(dir: &Path, ip: IpAddr) {
    let pki = Pki::create_named(&dir.join("ca"), "kubernetes").unwrap();
    let serving = pki
        .issue_kube(
            "apiserver",
            &KubeSubject {
                common_name: "kube-apiserver",
                organization: None,
            },
            Some((&[ip], &["localhost"])),
        )
        .unwrap();
    let sa = pki.signing_key("sa").unwrap();
    for (from, to) in [
        (pki.ca(), "ca.crt"),
        (serving.cert, "apiserver.crt"),
        (serving.key, "apiserver.key"),
        (sa.cert, "sa.pub"),
        (sa.key, "sa.key"),
    ] {
        swap(&from, &dir.join(to));
    }
    let admin = pki
        .issue_kube(
            "admin",
            &KubeSubject {
                common_name: "kubernetes-admin",
                organization: Some("system:masters"),
            },
            None,
        )
        .unwrap();
    e2e::controlplane::stacked::write_kubeconfig(&dir.join("admin.conf"), ip, &pki, &admin)
        .unwrap();
}

async fn configmaps(dir: &Path) -> Api<ConfigMap> {
    let path = dir.join("pki/admin.conf");
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    Api::namespaced(kube::Client::try_from(config).unwrap(), "default")
}

#[tokio::test]
async fn kube_apiserver_reads_its_etcd_client_pair_per_connection_and_its_ca_once() {
    let Some(bin) = kube_testapi::kas_binaries().unwrap() else {
        eprintln!(
            "SKIPPED: no kas binaries (../shared/kas or $KAS): what kube-apiserver re-reads was not measured"
        );
        return;
    };
    let mut s = setup().await;
    let name = s.etcd.names()[0].clone();
    let etcd_url = s.etcd.client_url(&name).unwrap().to_string();
    let files = s.dir.path().join("etcd");
    let api = configmaps(s.dir.path()).await;
    let kas = KubeApiServer::start(&bin, s.dir.path(), s.ip, &etcd_url);
    wait_until(&api, &kas, true, "kube-apiserver writes to etcd").await;

    // The client pair: swapped, the open connection goes on; a new one presents the new pair.
    swap(&s.foreign.0.cert, &files.join("client.crt"));
    swap(&s.foreign.0.key, &files.join("client.key"));
    holds(
        &api,
        &kas,
        true,
        "foreign client pair on disk, old connection",
    )
    .await;
    restart_etcd(&mut s.etcd).await;
    holds(
        &api,
        &kas,
        false,
        "foreign client pair on disk, etcd restarted",
    )
    .await;
    swap(&s.right.0.cert, &files.join("client.crt"));
    swap(&s.right.0.key, &files.join("client.key"));
    wait_until(
        &api,
        &kas,
        true,
        "right client pair back, nothing restarted",
    )
    .await;

    // The CA: swapped for one that does not sign etcd's serving certificate; new connections
    // still trust the CA read at start.
    swap(&s.foreign.1, &files.join("ca.crt"));
    restart_etcd(&mut s.etcd).await;
    wait_until(&api, &kas, true, "foreign CA on disk, etcd restarted").await;
    holds(&api, &kas, true, "foreign CA on disk, new connection").await;
    // The control: a kube-apiserver started with that file reaches no etcd and gives up; started
    // with the right one again, it works.
    drop(kas);
    let mut kas = KubeApiServer::start(&bin, s.dir.path(), s.ip, &etcd_url);
    let exit = exits(&api, &mut kas).await;
    eprintln!("kube-apiserver started with the foreign CA: exited ({exit}) without a write");
    swap(&s.right.1, &files.join("ca.crt"));
    let kas = KubeApiServer::start(&bin, s.dir.path(), s.ip, &etcd_url);
    wait_until(&api, &kas, true, "started again with the right CA").await;
}

/// Waits for kube-apiserver to exit, no write working meanwhile; its exit status.
async fn exits(api: &Api<ConfigMap>, kas: &mut KubeApiServer) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = kas.child.try_wait().unwrap() {
            assert!(!status.success(), "kube-apiserver exited 0");
            return status;
        }
        let got = write(api).await;
        assert!(
            got.is_err() && start.elapsed() < DEADLINE,
            "kube-apiserver with the foreign CA after {:.1} s: still running, last write {got:?}\nlog:\n{}",
            start.elapsed().as_secs_f64(),
            kas.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
