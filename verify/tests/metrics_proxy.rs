//! `etcd-verify metrics-proxy` run as the real binary in front of a real etcd's plain metrics
//! listener, scraped over real mutual TLS: a certificate of the metrics CA reads `/metrics` and
//! nothing else; no certificate, or one of another CA (etcd's own CA included: the certificate
//! etcd's client port trusts), gets no answer; a stopped or silent upstream is a 502; bad input
//! fails at once naming the flag or file; SIGTERM ends it with exit 0.
//!
//! Each etcd and proxy owns a reserved loopback address (the fixture's [`LoopbackAddr`]) and
//! listens there on the pod's ports: etcd client :2379, peer :2380, plain metrics :2382, and the
//! proxy on :2381.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_fixture::{DEADLINE, LoopbackAddr};
use etcd_pki::{CertKind, CertPolicy, ClientCertKind, EtcdCa, IssuedCert};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::{HeaderMap, Method, Request};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

const BIN: &str = env!("CARGO_BIN_EXE_etcd-verify");
const PROXY_PORT: u16 = 2381;
const METRICS_PORT: u16 = 2382;

// ---------------------------------------------------------------------------------------------
// Certificates

/// Three CAs and what they sign, written to files: the metrics CA (signs the proxy's serving
/// certificate and the scraper's), the etcd CA (signs a client certificate etcd's client port
/// would trust), and a stranger's CA. Their subjects differ (`etcd-signer@<time>`, a second
/// apart), as those of real CAs do.
struct Certs {
    dir: tempfile::TempDir,
    metrics_ca: String,
    metrics_client: IssuedCert,
    etcd_client: IssuedCert,
    stranger_client: IssuedCert,
}

impl Certs {
    fn issue(ip: IpAddr) -> Self {
        let now = time::OffsetDateTime::now_utc();
        let policy = CertPolicy::default();
        let ca = |age: i64| EtcdCa::generate(now - time::Duration::seconds(age)).unwrap();
        let (metrics_ca, etcd_ca, stranger_ca) = (ca(0), ca(1), ca(2));
        let client = ClientCertKind::Metrics.spec();
        let serving = CertKind::Metrics.spec("n1", &BTreeSet::from([ip]));
        let certs = Self {
            dir: tempfile::tempdir().unwrap(),
            metrics_ca: metrics_ca.cert_pem().to_owned(),
            metrics_client: metrics_ca.issue(&client, &policy, now).unwrap(),
            etcd_client: etcd_ca.issue(&client, &policy, now).unwrap(),
            stranger_client: stranger_ca.issue(&client, &policy, now).unwrap(),
        };
        let server = metrics_ca.issue(&serving, &policy, now).unwrap();
        certs.write("server.crt", &server.cert_pem);
        certs.write("server.key", &server.key_pem);
        certs.write("metrics-ca.crt", metrics_ca.cert_pem());
        certs
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.path(name), text).unwrap();
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The proxy's TLS flags.
    fn flags(&self) -> Vec<String> {
        vec![
            format!("--cert-file={}", self.path("server.crt").display()),
            format!("--key-file={}", self.path("server.key").display()),
            format!("--client-ca-file={}", self.path("metrics-ca.crt").display()),
        ]
    }
}

// ---------------------------------------------------------------------------------------------
// Processes

/// One etcd member with a plain metrics listener on `<ip>:2382`, killed on drop.
struct Etcd {
    addr: LoopbackAddr,
    dir: tempfile::TempDir,
    child: Child,
}

impl Etcd {
    async fn start() -> Self {
        let addr = LoopbackAddr::acquire().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ip = addr.ip();
        let log = std::fs::File::create(dir.path().join("etcd.log")).unwrap();
        let (client, peer) = (format!("http://{ip}:2379"), format!("http://{ip}:2380"));
        let child = Command::new(etcd_fixture::etcd_binary())
            .env_clear()
            .arg("--name=n1")
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=n1={peer}"))
            .arg(format!("--listen-metrics-urls=http://{ip}:{METRICS_PORT}"))
            .args(["--logger=zap", "--log-outputs=stderr"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut etcd = Self { addr, dir, child };
        etcd.wait_healthy().await;
        etcd
    }

    fn ip(&self) -> IpAddr {
        IpAddr::V4(self.addr.ip())
    }

    fn upstream(&self) -> String {
        format!("http://{}:{METRICS_PORT}", self.addr.ip())
    }

    fn log(&self) -> String {
        tail(&self.dir.path().join("etcd.log"))
    }

    /// Until `/health` on the plain metrics listener says true (a leader, so metrics are real).
    async fn wait_healthy(&mut self) {
        let target = SocketAddr::new(self.ip(), METRICS_PORT);
        let started = Instant::now();
        let mut last = String::from("nothing tried yet");
        while started.elapsed() < DEADLINE {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("etcd exited ({status}):\n{}", self.log());
            }
            match plain_get(target, "/health").await {
                Ok(a) if a.status == 200 && a.text().contains("true") => return,
                Ok(a) => last = format!("{a:?}"),
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "etcd not healthy within {DEADLINE:?}; last: {last}\n{}",
            self.log()
        );
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The proxy binary, killed on drop; its stderr in a file.
struct Proxy {
    listen: SocketAddr,
    log: tempfile::NamedTempFile,
    child: Child,
}

impl Proxy {
    /// Starts the proxy on `listen` and waits until it accepts connections.
    async fn start(
        listen: SocketAddr,
        upstream: &str,
        tls_flags: &[String],
        extra: &[&str],
    ) -> Self {
        let log = tempfile::NamedTempFile::new().unwrap();
        let child = Command::new(BIN)
            .arg("metrics-proxy")
            .arg(format!("--listen={listen}"))
            .arg(format!("--upstream={upstream}"))
            .args(tls_flags)
            .args(extra)
            .env_clear()
            .env("ETCD_VERIFY_LOG", "etcd_verify=debug,info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log.reopen().unwrap())
            .spawn()
            .unwrap();
        let mut proxy = Self { listen, log, child };
        proxy.wait_listening().await;
        proxy
    }

    fn log(&self) -> String {
        tail(self.log.path())
    }

    async fn wait_listening(&mut self) {
        let started = Instant::now();
        let mut last = String::from("nothing tried yet");
        while started.elapsed() < DEADLINE {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the proxy exited ({status}):\n{}", self.log());
            }
            match TcpStream::connect(self.listen).await {
                Ok(_) => return,
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "the proxy did not listen on {} within {DEADLINE:?}: {last}\n{}",
            self.listen,
            self.log()
        );
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

// ---------------------------------------------------------------------------------------------
// HTTP clients

/// One answer: status, headers, whole body.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: HeaderMap,
    body: Bytes,
}

impl Answer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }
}

/// One HTTP/1.1 request on `stream`, within 10 s.
async fn exchange<S>(
    stream: S,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Answer, String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP handshake: {e}"))?;
    tokio::spawn(connection);
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "proxy");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = sender
        .send_request(request.body(Empty::<Bytes>::new()).unwrap())
        .await
        .map_err(|e| format!("request: {e:?}"))?;
    let (parts, body) = response.into_parts();
    let body = body
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    Ok(Answer {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body,
    })
}

async fn plain_get(target: SocketAddr, path: &str) -> Result<Answer, String> {
    let tcp = TcpStream::connect(target)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    tokio::time::timeout(
        Duration::from_secs(10),
        exchange(tcp, Method::GET, path, &[]),
    )
    .await
    .map_err(|_| "no answer within 10s".to_owned())?
}

/// A scraper: trusts the metrics CA (which signed the proxy's certificate) and presents
/// `identity`.
struct Scraper {
    config: Arc<rustls::ClientConfig>,
}

impl Scraper {
    fn new(certs: &Certs, identity: Option<&IssuedCert>) -> Self {
        let identity = identity.map(|c| (c.cert_pem.as_bytes(), c.key_pem.as_bytes()));
        Self {
            config: membership::https_config(certs.metrics_ca.as_bytes(), identity).unwrap(),
        }
    }

    async fn request(
        &self,
        target: SocketAddr,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<Answer, String> {
        let exchange = async {
            let tcp = TcpStream::connect(target)
                .await
                .map_err(|e| format!("connect: {e}"))?;
            let name = rustls::pki_types::ServerName::from(target.ip());
            let tls = tokio_rustls::TlsConnector::from(Arc::clone(&self.config))
                .connect(name, tcp)
                .await
                .map_err(|e| format!("TLS handshake: {e}"))?;
            exchange(tls, method, path, headers).await
        };
        tokio::time::timeout(Duration::from_secs(10), exchange)
            .await
            .map_err(|_| "no answer within 10s".to_owned())?
    }

    async fn get(&self, target: SocketAddr, path: &str) -> Result<Answer, String> {
        self.request(target, Method::GET, path, &[]).await
    }
}

// ---------------------------------------------------------------------------------------------
// The scene: etcd, certificates, the proxy on the etcd's address :2381

struct Scene {
    etcd: Etcd,
    certs: Certs,
    proxy: Proxy,
}

impl Scene {
    async fn start() -> Self {
        let etcd = Etcd::start().await;
        let certs = Certs::issue(etcd.ip());
        let listen = SocketAddr::new(etcd.ip(), PROXY_PORT);
        let proxy = Proxy::start(listen, &etcd.upstream(), &certs.flags(), &[]).await;
        Self { etcd, certs, proxy }
    }

    fn scraper(&self) -> Scraper {
        Scraper::new(&self.certs, Some(&self.certs.metrics_client))
    }

    fn logs(&self) -> String {
        format!(
            "--- proxy ---\n{}\n--- etcd ---\n{}",
            self.proxy.log(),
            self.etcd.log()
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Tests

#[tokio::test]
async fn a_scraper_with_a_metrics_ca_certificate_reads_etcd_metrics() {
    let scene = Scene::start().await;
    let (scraper, target) = (scene.scraper(), scene.proxy.listen);

    let get = scraper.get(target, "/metrics").await;
    assert!(
        get.as_ref()
            .is_ok_and(|a| a.status == 200 && a.text().contains("etcd_server_has_leader")),
        "GET /metrics: {get:?}\n{}",
        scene.logs()
    );
    let get = get.unwrap();
    assert!(
        get.header("content-type").starts_with("text/plain"),
        "etcd's content type is passed on: {:?}",
        get.headers
    );

    let head = scraper.request(target, Method::HEAD, "/metrics", &[]).await;
    assert!(
        head.as_ref()
            .is_ok_and(|a| a.status == 200 && a.body.is_empty()),
        "HEAD /metrics: {head:?}"
    );

    let query = scraper
        .get(target, "/metrics?name[]=etcd_server_has_leader")
        .await;
    assert!(
        query
            .as_ref()
            .is_ok_and(|a| a.status == 200 && a.text().contains("etcd_server_has_leader")),
        "a query is dropped, not refused: {query:?}"
    );

    // Content negotiation reaches etcd, and its gzip comes back untouched.
    let gzip = scraper
        .request(
            target,
            Method::GET,
            "/metrics",
            &[("accept-encoding", "gzip"), ("accept", "text/plain")],
        )
        .await;
    assert!(
        gzip.as_ref().is_ok_and(|a| a.status == 200
            && a.header("content-encoding") == "gzip"
            && a.body.starts_with(&[0x1f, 0x8b])),
        "Accept-Encoding: gzip: {:?}",
        gzip.as_ref().map(|a| (a.status, &a.headers, a.body.len()))
    );
}

#[tokio::test]
async fn a_scraper_without_a_metrics_ca_certificate_gets_no_answer() {
    let scene = Scene::start().await;
    let target = scene.proxy.listen;
    let certs = &scene.certs;
    for (who, identity) in [
        ("no client certificate", None),
        ("a certificate of etcd's own CA", Some(&certs.etcd_client)),
        (
            "a certificate of a stranger's CA",
            Some(&certs.stranger_client),
        ),
    ] {
        let seen = Scraper::new(certs, identity).get(target, "/metrics").await;
        assert!(
            seen.is_err(),
            "{who}: the handshake or the first request must fail, saw {:?}\n{}",
            seen.map(|a| (a.status, a.text().chars().take(200).collect::<String>())),
            scene.logs()
        );
    }
    // The proxy refused them one by one and still serves.
    let after = scene.scraper().get(target, "/metrics").await;
    assert!(
        after.as_ref().is_ok_and(|a| a.status == 200),
        "after refused handshakes: {:?}",
        after.map(|a| a.status)
    );
}

#[tokio::test]
async fn only_metrics_is_reachable_through_the_proxy() {
    let scene = Scene::start().await;
    let (scraper, target) = (scene.scraper(), scene.proxy.listen);
    // What etcd serves on its plain listener must not come through.
    let direct = plain_get(SocketAddr::new(scene.etcd.ip(), METRICS_PORT), "/health").await;
    assert!(
        direct.as_ref().is_ok_and(|a| a.status == 200),
        "etcd's /health direct: {direct:?}"
    );
    for path in [
        "/health",
        "/v3/kv/range",
        "/debug/pprof/",
        "/version",
        "/metrics/../health",
        "/",
        "/metrics/",
    ] {
        let seen = scraper.get(target, path).await;
        assert!(
            seen.as_ref().is_ok_and(|a| a.status == 404),
            "GET {path}: {seen:?}"
        );
    }
    let post = scraper
        .request(target, Method::POST, "/v3/kv/range", &[])
        .await;
    assert!(
        post.as_ref().is_ok_and(|a| a.status == 404),
        "POST /v3/kv/range: {post:?}"
    );
    let post = scraper.request(target, Method::POST, "/metrics", &[]).await;
    assert!(
        post.as_ref()
            .is_ok_and(|a| a.status == 405 && a.header("allow") == "GET, HEAD"),
        "POST /metrics: {post:?}"
    );
}

#[tokio::test]
async fn a_stopped_or_silent_upstream_is_a_502() {
    let addr = LoopbackAddr::acquire().unwrap();
    let certs = Certs::issue(IpAddr::V4(addr.ip()));
    let scraper = Scraper::new(&certs, Some(&certs.metrics_client));

    // Nothing listens on the reserved address's :2382.
    let stopped = format!("http://{}:{METRICS_PORT}", addr.ip());
    let listen = SocketAddr::new(IpAddr::V4(addr.ip()), PROXY_PORT);
    let proxy = Proxy::start(listen, &stopped, &certs.flags(), &[]).await;
    let seen = scraper.get(listen, "/metrics").await;
    assert!(
        seen.as_ref().is_ok_and(|a| a.status == 502
            && a.text()
                .starts_with(&format!("upstream {stopped}: connect:"))
            && a.text().lines().count() == 1),
        "stopped upstream: {seen:?}\n{}",
        proxy.log()
    );
    drop(proxy);

    // An upstream that accepts connections and never answers: 502 after --upstream-timeout.
    let silent =
        std::net::TcpListener::bind(SocketAddr::new(IpAddr::V4(addr.ip()), METRICS_PORT)).unwrap();
    let proxy = Proxy::start(
        listen,
        &stopped,
        &certs.flags(),
        &["--upstream-timeout=300ms"],
    )
    .await;
    let started = Instant::now();
    let seen = scraper.get(listen, "/metrics").await;
    assert!(
        seen.as_ref()
            .is_ok_and(|a| a.status == 502 && a.text().contains("no answer within 300ms")),
        "silent upstream: {seen:?}\n{}",
        proxy.log()
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    drop(silent);
}

/// Runs the binary to its end (it must end at once: bad input never serves).
fn run_to_end(args: &[String]) -> (i32, String) {
    let out = Command::new(BIN)
        .arg("metrics-proxy")
        .args(args)
        .env_clear()
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_input_exits_non_zero_naming_the_flag_or_the_file() {
    let certs = Certs::issue("127.0.0.1".parse().unwrap());
    let listen = "--listen=127.0.0.1:0".to_owned();
    let with = |upstream: &str, tls: Vec<String>| {
        let mut args = vec![listen.clone(), format!("--upstream={upstream}")];
        args.extend(tls);
        run_to_end(&args)
    };

    for bad in [
        "https://127.0.0.1:2382",
        "http://127.0.0.1:2382/v3",
        "http://127.0.0.1:2382/?x=1",
    ] {
        let (code, stderr) = with(bad, certs.flags());
        assert!(
            code != 0 && stderr.contains("--upstream") && stderr.contains(bad),
            "--upstream={bad}: exit {code}, stderr {stderr:?}"
        );
    }

    let mut flags = certs.flags();
    let missing = certs.path("missing.crt");
    flags[0] = format!("--cert-file={}", missing.display());
    let (code, stderr) = with("http://127.0.0.1:2382", flags);
    assert!(
        code != 0
            && stderr.contains("--cert-file")
            && stderr.contains(&missing.display().to_string()),
        "missing cert file: exit {code}, stderr {stderr:?}"
    );

    // The key of another certificate.
    let mut flags = certs.flags();
    certs.write("other.key", &certs.metrics_client.key_pem);
    flags[1] = format!("--key-file={}", certs.path("other.key").display());
    let (code, stderr) = with("http://127.0.0.1:2382", flags);
    assert!(
        code != 0 && stderr.contains("does not belong to the certificate"),
        "mismatched key: exit {code}, stderr {stderr:?}"
    );

    let (code, stderr) = run_to_end(&["--upstream=http://127.0.0.1:2382".to_owned()]);
    assert!(
        code != 0 && stderr.contains("--listen"),
        "missing --listen: exit {code}, stderr {stderr:?}"
    );
}

#[test]
fn a_taken_address_is_a_startup_error_naming_it() {
    let certs = Certs::issue("127.0.0.1".parse().unwrap());
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let mut args = vec![
        format!("--listen={addr}"),
        "--upstream=http://127.0.0.1:2382".to_owned(),
    ];
    args.extend(certs.flags());
    let (code, stderr) = run_to_end(&args);
    assert!(
        code == 1 && stderr.contains(&format!("--listen {addr}: cannot listen")),
        "exit {code}, stderr {stderr:?}"
    );
}

#[tokio::test]
async fn sigterm_stops_the_proxy_with_exit_0() {
    let addr = LoopbackAddr::acquire().unwrap();
    let certs = Certs::issue(IpAddr::V4(addr.ip()));
    let listen = SocketAddr::new(IpAddr::V4(addr.ip()), PROXY_PORT);
    let upstream = format!("http://{}:{METRICS_PORT}", addr.ip());
    let mut proxy = Proxy::start(listen, &upstream, &certs.flags(), &[]).await;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(proxy.child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = proxy.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "still running after SIGTERM:\n{}",
            proxy.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        status.code(),
        Some(0),
        "exit after SIGTERM; log:\n{}",
        proxy.log()
    );
    assert!(
        proxy.log().contains("stopped by SIGTERM"),
        "{}",
        proxy.log()
    );
}
