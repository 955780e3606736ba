//! A consumer of etcd named in `spec.clients` gets a client certificate Secret
//! (`etcd-consumer-<name>`: `tls.crt`, `tls.key`, `ca.crt`) that real etcd accepts, and loses it
//! when it leaves the list.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use membership::{EtcdClient, TlsPem};

use super::harness::Harness;
use crate::controlplane::{ControlPlaneError, OPERATOR_NS};

const DEADLINE: Duration = Duration::from_secs(60);
const SECRET: &str = "etcd-consumer-kube-apiserver";

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

/// Polls the Secret until `present` says what it should be, with a deadline.
async fn secret_until(
    api: &Api<Secret>,
    what: &str,
    present: bool,
) -> Result<Option<Secret>, ControlPlaneError> {
    let until = Instant::now() + DEADLINE;
    loop {
        let got = api.get_opt(SECRET).await;
        match &got {
            Ok(s) if s.is_some() == present => return Ok(got.ok().flatten()),
            _ if Instant::now() > until => {
                return Err(failed(format!(
                    "{what}: Secret {OPERATOR_NS}/{SECRET} after {DEADLINE:?}: last seen {got:?}"
                )));
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

pub async fn consumer_secret(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let api: Api<Secret> = Api::namespaced(h.cp.client(), OPERATOR_NS);
    h.patch_spec(serde_json::json!({"clients": [
        {"name": "kube-apiserver", "commonName": "kube-apiserver-etcd-client"}
    ]}))
    .await?;
    let secret = secret_until(&api, "spec.clients names kube-apiserver", true)
        .await?
        .ok_or_else(|| failed("no Secret"))?;
    let data = secret.data.unwrap_or_default();
    let get = |k: &str| {
        data.get(k)
            .map(|b| b.0.clone())
            .ok_or_else(|| failed(format!("Secret {SECRET} has no {k}")))
    };
    let pem = TlsPem {
        ca: get("ca.crt")?,
        cert: get("tls.crt")?,
        key: get("tls.key")?,
    };
    let client = EtcdClient::with_pem(h.node_endpoints(), Some(&pem), Duration::from_secs(5))
        .map_err(|e| failed(format!("a client from {SECRET}: {e}")))?;
    let revision = client
        .put(
            "/consumer-check",
            b"written with the consumer's certificate".to_vec(),
        )
        .await
        .map_err(|e| failed(format!("a write with {SECRET}'s certificate: {e}")))?;
    h.step(format!(
        "spec.clients kube-apiserver: Secret {SECRET} issued; etcd accepts its certificate (a write at revision {revision})"
    ));
    h.patch_spec(serde_json::json!({"clients": null})).await?;
    secret_until(&api, "kube-apiserver left spec.clients", false).await?;
    h.step(format!(
        "kube-apiserver left spec.clients: Secret {SECRET} deleted"
    ));
    Ok(())
}
