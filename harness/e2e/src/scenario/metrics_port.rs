//! etcd's metrics port is not served in plain text on the node's address: `https://<node>:2381`
//! takes only clients with a certificate of the etcd CA (scrapers use Secret
//! `etcd-metric-client`, which carries the CA as `ca.crt`), and the plain listener the probes use
//! (`:2382`) is on the node's loopback (here the node's own address, a loopback address: the
//! local control plane's nodes share one network namespace).

use std::time::Duration;

use membership::{MemberUrl, http_get, https_config};

use super::harness::Harness;
use crate::controlplane::{ControlPlaneError, OPERATOR_NS};

const LIMIT: Duration = Duration::from_secs(5);

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

fn url(text: &str) -> Result<MemberUrl, ControlPlaneError> {
    text.parse().map_err(|e| failed(format!("{text}: {e}")))
}

pub async fn client_certs_required(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let data = h.secret_data_of(OPERATOR_NS, "etcd-metric-client").await?;
    let get = |k: &str| {
        data.get(k)
            .cloned()
            .ok_or_else(|| failed(format!("Secret etcd-metric-client has no {k}")))
    };
    let (ca, cert, key) = (get("ca.crt")?, get("tls.crt")?, get("tls.key")?);
    let with_cert = https_config(&ca, Some((&cert, &key))).map_err(failed)?;
    let without = https_config(&ca, None).map_err(failed)?;
    let ip = h.cp.node("n1")?.ip();
    let metrics = url(&format!("https://{ip}:2381"))?;
    let (status, body) = http_get(&metrics, "/metrics", Some(&with_cert), LIMIT)
        .await
        .map_err(|e| failed(format!("{metrics} with etcd-metric-client: {e}")))?;
    if !status.contains(" 200") || !body.contains("etcd_server_has_leader") {
        return Err(failed(format!(
            "{metrics}/metrics with the metric client certificate answered {status:?}"
        )));
    }
    let refused = match http_get(&metrics, "/metrics", Some(&without), LIMIT).await {
        Ok((status, body)) if status.contains(" 200") && body.contains("etcd_") => {
            return Err(failed(format!(
                "{metrics}/metrics answered metrics to a client without a certificate"
            )));
        }
        Ok((status, _)) => status,
        Err(e) => e,
    };
    let plain = url(&format!("http://{ip}:2381"))?;
    let plain_said = match http_get(&plain, "/metrics", None, LIMIT).await {
        Ok((status, body)) if status.contains(" 200") && body.contains("etcd_") => {
            return Err(failed(format!(
                "{plain}/metrics served metrics in plain text"
            )));
        }
        Ok((status, _)) if status.is_empty() => "no HTTP answer".to_owned(),
        Ok((status, _)) => status,
        Err(e) => e,
    };
    let health = url(&format!("http://{ip}:2382"))?;
    let (status, body) = http_get(&health, "/health", None, LIMIT)
        .await
        .map_err(|e| failed(format!("{health}/health: {e}")))?;
    if !status.contains(" 200") {
        return Err(failed(format!(
            "{health}/health answered {status:?}: {body}"
        )));
    }
    h.step(format!(
        "metrics port of n1: with etcd-metric-client {status}; without a client certificate: {refused}; plain HTTP: {plain_said}; probes' listener {health}/health: {}",
        body.trim()
    ));
    Ok(())
}
