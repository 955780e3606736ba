//! etcd's metrics are not served in plain text on the node's address: the metrics proxy's
//! `https://<node>:2381` takes only clients with a certificate of the metrics CA (scrapers use
//! Secret `etcd-metric-client`, which carries that CA as `ca.crt`) and passes only `/metrics`;
//! that certificate reads and writes nothing on etcd's client port; and the plain listener the
//! probes and the proxy use (`:2382`) is on the node's loopback (here the node's own address, a
//! loopback address: the local control plane's nodes share one network namespace).

use std::time::Duration;

use membership::{EtcdClient, MemberUrl, TlsPem, http_get, https_config};

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
    let (status, _) = http_get(&metrics, "/health", Some(&with_cert), LIMIT)
        .await
        .map_err(|e| failed(format!("{metrics}/health with etcd-metric-client: {e}")))?;
    if !status.contains(" 404") {
        return Err(failed(format!(
            "{metrics}/health through the metrics proxy answered {status:?}, not 404"
        )));
    }
    let client_port = scraper_on_client_port(h, &cert, &key).await?;
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
        "metrics port of n1: with etcd-metric-client {status}; without a client certificate: {refused}; plain HTTP: {plain_said}; /health through the proxy: 404; etcd-metric-client on the client port: {client_port}; probes' listener {health}/health: {}",
        body.trim()
    ));
    Ok(())
}

/// The scrapers' certificate on n1's client port: a write and a read must both fail (etcd
/// trusts only the etcd CA). Returns what the write met.
async fn scraper_on_client_port(
    h: &mut Harness,
    cert: &[u8],
    key: &[u8],
) -> Result<String, ControlPlaneError> {
    let operator = h.secret_data_of(OPERATOR_NS, "etcd-client").await?;
    let server_ca = operator
        .get("ca.crt")
        .cloned()
        .ok_or_else(|| failed("Secret etcd-client has no ca.crt"))?;
    let tls = TlsPem {
        ca: server_ca,
        cert: cert.to_vec(),
        key: key.to_vec(),
    };
    let ip = h.cp.node("n1")?.ip();
    let endpoint = url(&format!("https://{ip}:2379"))?;
    let client = EtcdClient::with_pem(vec![endpoint.clone()], Some(&tls), LIMIT)
        .map_err(|e| failed(format!("a client with etcd-metric-client: {e}")))?;
    let wrote = tokio::time::timeout(LIMIT * 2, client.put("/scraper-probe", b"x".to_vec())).await;
    let write_said = match wrote {
        Ok(Ok(_)) => {
            return Err(failed(format!(
                "{endpoint}: etcd-metric-client wrote a key"
            )));
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => "timed out".to_owned(),
    };
    let read = tokio::time::timeout(LIMIT * 2, client.get("/scraper-probe")).await;
    if let Ok(Ok(value)) = read {
        return Err(failed(format!(
            "{endpoint}: etcd-metric-client read a key ({value:?})"
        )));
    }
    Ok(write_said)
}
