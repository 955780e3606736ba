//! The operator run by the bench itself, with a kubeconfig that points at the counting proxy, so
//! its API requests can be counted (the operator has no request counter of its own). Same
//! arguments as [`LocalControlPlane::start_operator`]; killed on drop.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_fixture::LoopbackAddr;

use super::proxy::CountingProxy;
use crate::controlplane::LocalControlPlane;

/// A running operator process behind a counting proxy.
#[derive(Debug)]
pub struct CountedOperator {
    pub proxy: CountingProxy,
    pub metrics: SocketAddr,
    pub log: PathBuf,
    child: Child,
}

impl CountedOperator {
    /// Starts the proxy and `etcd-operator run` against it. The control plane's own operator
    /// must be stopped first.
    pub async fn start(cp: &LocalControlPlane) -> Result<Self, String> {
        let kubeconfig_text = std::fs::read_to_string(cp.api.kubeconfig())
            .map_err(|e| format!("reading the kubeconfig: {e}"))?;
        let mut kubeconfig: serde_json::Value =
            serde_json::from_str(&kubeconfig_text).map_err(|e| format!("kubeconfig: {e}"))?;
        let server = kubeconfig
            .pointer("/clusters/0/cluster/server")
            .and_then(|s| s.as_str())
            .ok_or("the kubeconfig names no server")?
            .to_owned();
        let upstream: SocketAddr = server
            .strip_prefix("http://")
            .ok_or_else(|| format!("{server}: only a plain-HTTP API can be proxied"))?
            .trim_end_matches('/')
            .parse()
            .map_err(|e| format!("{server}: {e}"))?;
        let addr = LoopbackAddr::acquire().map_err(|e| e.to_string())?;
        let proxy = CountingProxy::start(SocketAddr::from((addr.ip(), 0)), upstream)
            .await
            .map_err(|e| format!("starting the proxy: {e}"))?;
        if let Some(s) = kubeconfig.pointer_mut("/clusters/0/cluster/server") {
            *s = serde_json::Value::String(format!("http://{}", proxy.addr));
        }
        let path = cp.path().join("bench-kubeconfig");
        std::fs::write(&path, kubeconfig.to_string())
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        let metrics = SocketAddr::from((addr.ip(), 8443));
        let log = cp.path().join("bench-operator.log");
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new(cp.bin_dir.join("etcd-operator"))
            .arg("run")
            .arg("--listen")
            .arg(metrics.to_string())
            .args(["--identity", "sandbox-operator", "--lease-duration", "6s"])
            .env("KUBECONFIG", &path)
            .env("ETCD_OPERATOR_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting etcd-operator run: {e}"))?;
        drop(addr);
        Ok(Self {
            proxy,
            metrics,
            log,
            child,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the operator reports itself leader on `/metrics`.
    pub async fn wait_leader(&self, deadline: Duration) -> Result<(), String> {
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < deadline {
            match super::scrape::get(self.metrics, "/metrics").await {
                Ok(text) => {
                    let leader = super::scrape::sum_by(&text, "etcd_operator_is_leader", "");
                    if leader.values().any(|v| *v >= 1.0) {
                        return Ok(());
                    }
                    last = "not leader yet".into();
                }
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(format!(
            "the bench's operator did not become leader in {deadline:?}: {last}"
        ))
    }
}

impl Drop for CountedOperator {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap_or(i32::MAX));
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(5) {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
