//! The etcd storage layer: one key per object, JSON values, optimistic concurrency through etcd
//! transactions on `mod_revision` (the object's `resourceVersion`), exactly the way kube-apiserver's
//! etcd3 storage works (it stores protobuf; the stand-in stores JSON).
//!
//! Every etcd call is bounded by a timeout.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};
use serde_json::Value;

use crate::objects;

/// A stored object with its etcd revisions.
#[derive(Clone, Debug)]
pub struct Stored {
    /// etcd key.
    pub key: String,
    /// Object, `metadata.resourceVersion` set to `mod_revision`.
    pub object: Value,
    /// etcd mod revision.
    pub mod_revision: i64,
}

/// A page of a list.
#[derive(Clone, Debug)]
pub struct Page {
    /// Objects in key order.
    pub items: Vec<Stored>,
    /// Revision the list was read at.
    pub revision: i64,
    /// More keys follow the last item.
    pub more: bool,
}

/// A storage failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The key already exists (create).
    #[error("key already exists")]
    Exists,
    /// The key's mod revision was not the expected one, or the key is gone.
    #[error("precondition failed: key changed or missing")]
    Conflict,
    /// The requested revision was compacted.
    #[error("revision {requested} compacted (compact revision {compacted})")]
    Compacted {
        /// Revision asked for.
        requested: i64,
        /// Revision compacted up to (0 if etcd did not say).
        compacted: i64,
    },
    /// etcd failed.
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    /// etcd did not answer in time.
    #[error("etcd {0} timed out")]
    Timeout(&'static str),
    /// The etcd client certificates could not be read.
    #[error("etcd TLS: {0}")]
    Tls(String),
    /// A stored value is not JSON.
    #[error("stored value at {key} is not JSON: {source}")]
    Decode {
        /// Key read.
        key: String,
        /// Cause.
        source: serde_json::Error,
    },
}

/// The etcd-backed object store. Like kube-apiserver's etcd client with every member in
/// `--etcd-servers`, it talks to one member at a time and moves on when that one fails: a read
/// is sent to the next member at once; a write only when no member could have taken it (no
/// connection, or a learner's refusal), otherwise its error is the caller's and the next call
/// starts at the next member.
#[derive(Clone)]
pub struct Store {
    /// One client per endpoint, in the order given.
    clients: Arc<Vec<Client>>,
    /// The endpoint every call starts at: the last one that answered.
    preferred: Arc<AtomicUsize>,
    timeout: Duration,
}

/// Whether a call may be sent again to another member after it failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    /// Reads: always (they change nothing).
    Read,
    /// Writes: only when no member took it.
    Write,
}

/// Why a call to one member failed, for the failover.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failure {
    /// etcd answered, and another member would answer the same (a conflict, a compaction,
    /// `NOSPACE`).
    Answered,
    /// This member did not take the request (no connection, or it is a learner).
    NotTaken,
    /// This member failed or timed out; a write may have been taken.
    Unknown,
}

fn failure(e: &etcd_client::Error) -> Failure {
    match e {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => Failure::NotTaken,
        etcd_client::Error::GRpcStatus(status) => {
            match membership::EtcdRefusal::from_status(status.code(), status.message()) {
                membership::EtcdRefusal::NotForLearner => Failure::NotTaken,
                _ if matches!(
                    status.code(),
                    tonic::Code::Unavailable
                        | tonic::Code::DeadlineExceeded
                        | tonic::Code::Cancelled
                        | tonic::Code::Unknown
                ) =>
                {
                    Failure::Unknown
                }
                _ => Failure::Answered,
            }
        }
        _ => Failure::Answered,
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Decodes a stored value, setting `metadata.resourceVersion` to `mod_revision`.
pub fn decode(key: &str, value: &[u8], mod_revision: i64) -> Result<Stored, StoreError> {
    let mut object: Value = serde_json::from_slice(value).map_err(|source| StoreError::Decode {
        key: key.to_string(),
        source,
    })?;
    objects::set_meta_str(&mut object, "resourceVersion", &mod_revision.to_string());
    Ok(Stored {
        key: key.to_string(),
        object,
        mod_revision,
    })
}

/// Serialises an object for storage (without `resourceVersion`, which is etcd's revision).
pub fn encode(object: &Value) -> Vec<u8> {
    let mut copy = object.clone();
    objects::remove_meta(&mut copy, "resourceVersion");
    serde_json::to_vec(&copy).unwrap_or_default()
}

fn is_compacted(err: &etcd_client::Error) -> bool {
    err.to_string().contains("compacted")
}

impl Store {
    /// Connects to etcd (over mTLS when `tls` is given).
    pub async fn connect(
        endpoints: &[String],
        timeout: Duration,
        tls: Option<&crate::EtcdTls>,
    ) -> Result<Self, StoreError> {
        let mut opts = etcd_client::ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_timeout(timeout);
        if let Some(tls) = tls {
            let read = |p: &std::path::Path| {
                std::fs::read(p)
                    .map_err(|e| StoreError::Tls(format!("reading {}: {e}", p.display())))
            };
            let (ca, cert, key) = (read(&tls.ca)?, read(&tls.cert)?, read(&tls.key)?);
            opts = opts.with_tls(
                etcd_client::TlsOptions::new()
                    .ca_certificate(etcd_client::Certificate::from_pem(ca))
                    .identity(etcd_client::Identity::from_pem(cert, key)),
            );
        }
        let mut clients = Vec::new();
        for endpoint in endpoints {
            let connect = Client::connect([endpoint], Some(opts.clone()));
            clients.push(
                tokio::time::timeout(timeout, connect)
                    .await
                    .map_err(|_| StoreError::Timeout("connect"))??,
            );
        }
        if clients.is_empty() {
            return Err(StoreError::Tls("no etcd endpoint given".into()));
        }
        Ok(Self {
            clients: Arc::new(clients),
            preferred: Arc::new(AtomicUsize::new(0)),
            timeout,
        })
    }

    /// The client of the member calls start at (for watches: one that breaks ends the API
    /// watch, and the client's next watch starts at the member that answers then).
    pub fn client(&self) -> Client {
        let i = self.preferred.load(Ordering::Relaxed) % self.clients.len();
        self.clients[i].clone()
    }

    /// Makes `call` through the members, from the preferred one on ([`Store`]), each try
    /// bounded by the timeout.
    async fn on_members<T, F, Fut>(
        &self,
        what: &'static str,
        kind: Call,
        call: F,
    ) -> Result<T, StoreError>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        let n = self.clients.len();
        let start = self.preferred.load(Ordering::Relaxed) % n;
        let mut last = StoreError::Timeout(what);
        for k in 0..n {
            let i = (start + k) % n;
            let outcome = tokio::time::timeout(self.timeout, call(self.clients[i].clone())).await;
            let fail = match &outcome {
                Ok(Ok(_)) => Failure::Answered,
                Ok(Err(e)) => failure(e),
                Err(_) => Failure::Unknown,
            };
            match outcome {
                Ok(Ok(v)) => {
                    self.preferred.store(i, Ordering::Relaxed);
                    return Ok(v);
                }
                Ok(Err(e)) if fail == Failure::Answered => return Err(e.into()),
                Ok(Err(e)) => last = e.into(),
                Err(_) => last = StoreError::Timeout(what),
            }
            self.preferred.store((i + 1) % n, Ordering::Relaxed);
            if kind == Call::Write && fail == Failure::Unknown {
                break;
            }
        }
        Err(last)
    }

    /// Reads one key.
    pub async fn get(&self, key: &str) -> Result<Option<Stored>, StoreError> {
        let resp = self
            .on_members("get", Call::Read, |c| async move {
                c.kv_client().get(key, None).await
            })
            .await?;
        match resp.kvs().first() {
            Some(kv) => Ok(Some(decode(key, kv.value(), kv.mod_revision())?)),
            None => Ok(None),
        }
    }

    /// The current etcd revision.
    pub async fn revision(&self) -> Result<i64, StoreError> {
        let resp = self
            .on_members("get revision", Call::Read, |c| async move {
                let options = GetOptions::new().with_count_only();
                c.kv_client().get("\0", Some(options)).await
            })
            .await?;
        Ok(resp.header().map_or(0, |h| h.revision()))
    }

    /// Lists keys under `prefix` starting at `start` (inclusive), at `revision` (0 = latest), at
    /// most `limit` items (0 = all).
    pub async fn list(
        &self,
        prefix: &str,
        start: Option<&str>,
        revision: i64,
        limit: i64,
    ) -> Result<Page, StoreError> {
        let end = prefix_end(prefix);
        let from = start.unwrap_or(prefix).to_string();
        let mut opts = GetOptions::new().with_range(end);
        if revision > 0 {
            opts = opts.with_revision(revision);
        }
        if limit > 0 {
            opts = opts.with_limit(limit);
        }
        let listed = self
            .on_members("list", Call::Read, |c| {
                let (from, opts) = (from.clone(), opts.clone());
                async move { c.kv_client().get(from, Some(opts)).await }
            })
            .await;
        let resp = match listed {
            Err(StoreError::Etcd(e)) if is_compacted(&e) => {
                return Err(StoreError::Compacted {
                    requested: revision,
                    compacted: 0,
                });
            }
            r => r?,
        };
        let header_rev = resp.header().map_or(0, |h| h.revision());
        let items = resp
            .kvs()
            .iter()
            .map(|kv| {
                decode(
                    &String::from_utf8_lossy(kv.key()),
                    kv.value(),
                    kv.mod_revision(),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Page {
            items,
            revision: if revision > 0 { revision } else { header_rev },
            more: resp.more(),
        })
    }

    /// Creates a key that must not exist; returns the new revision.
    pub async fn create(&self, key: &str, object: &Value) -> Result<i64, StoreError> {
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, encode(object), None)]);
        let resp = self
            .on_members("create", Call::Write, |c| {
                let txn = txn.clone();
                async move { c.kv_client().txn(txn).await }
            })
            .await?;
        if !resp.succeeded() {
            return Err(StoreError::Exists);
        }
        Ok(resp.header().map_or(0, |h| h.revision()))
    }

    /// Replaces a key whose mod revision is `expected`; returns the new revision.
    pub async fn update(
        &self,
        key: &str,
        object: &Value,
        expected: i64,
    ) -> Result<i64, StoreError> {
        let txn = Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, expected)])
            .and_then([TxnOp::put(key, encode(object), None)]);
        let resp = self
            .on_members("update", Call::Write, |c| {
                let txn = txn.clone();
                async move { c.kv_client().txn(txn).await }
            })
            .await?;
        if !resp.succeeded() {
            return Err(StoreError::Conflict);
        }
        Ok(resp.header().map_or(0, |h| h.revision()))
    }

    /// Deletes a key whose mod revision is `expected`; returns the deletion revision.
    pub async fn delete(&self, key: &str, expected: i64) -> Result<i64, StoreError> {
        let txn = Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, expected)])
            .and_then([TxnOp::delete(key, None)]);
        let resp = self
            .on_members("delete", Call::Write, |c| {
                let txn = txn.clone();
                async move { c.kv_client().txn(txn).await }
            })
            .await?;
        if !resp.succeeded() {
            return Err(StoreError::Conflict);
        }
        let deleted = resp.op_responses().iter().any(|r| match r {
            TxnOpResponse::Delete(d) => d.deleted() > 0,
            _ => false,
        });
        if !deleted {
            return Err(StoreError::Conflict);
        }
        Ok(resp.header().map_or(0, |h| h.revision()))
    }

    /// Deletes every key under `prefix` (used when a CRD is removed); returns the revision.
    pub async fn delete_prefix(&self, prefix: &str) -> Result<i64, StoreError> {
        let resp = self
            .on_members("delete prefix", Call::Write, |c| async move {
                let options = etcd_client::DeleteOptions::new().with_prefix();
                c.kv_client().delete(prefix, Some(options)).await
            })
            .await?;
        Ok(resp.header().map_or(0, |h| h.revision()))
    }

    /// Compacts etcd history up to `revision` (what kube-apiserver does every 5 minutes).
    pub async fn compact(&self, revision: i64) -> Result<(), StoreError> {
        self.on_members("compact", Call::Write, |c| async move {
            let options = etcd_client::CompactionOptions::new().with_physical();
            c.kv_client().compact(revision, Some(options)).await
        })
        .await?;
        Ok(())
    }
}

/// The end of a prefix range (prefix with its last byte incremented).
pub fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn prefix_end_increments_last_byte() {
        assert_eq!(prefix_end("/registry/pods/"), b"/registry/pods0".to_vec());
    }

    #[test]
    fn encode_strips_resource_version() {
        let v = serde_json::json!({"metadata": {"name": "a", "resourceVersion": "5"}});
        let back: Value = serde_json::from_slice(&encode(&v)).unwrap();
        assert!(back["metadata"].get("resourceVersion").is_none());
    }
}
