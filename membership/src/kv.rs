//! Key-value calls: a write, a read, a deletion by prefix and a compaction, each bounded like
//! every other client call and sent to a voter (learners refuse them), and a write through one
//! given endpoint for a caller that keeps its own endpoint order.

use crate::{ClientError, EtcdClient, MemberUrl};

impl EtcdClient {
    /// Writes one key (linearizable; voters only).
    pub async fn put(&self, key: &str, value: Vec<u8>) -> Result<i64, ClientError> {
        let (resp, _) = self
            .on_any_voter("put", |mut c| {
                let (key, value) = (key.to_owned(), value.clone());
                async move { c.put(key, value, None).await }
            })
            .await?;
        Ok(resp.header().map_or(0, |h| h.revision()))
    }

    /// Puts `key` through one endpoint, without asking first whether it is a learner (a learner
    /// refuses it): for a caller that keeps its own endpoint order, as kube-apiserver's etcd
    /// client does.
    pub async fn put_at(
        &self,
        endpoint: &MemberUrl,
        key: &str,
        value: Vec<u8>,
    ) -> Result<i64, ClientError> {
        let key = key.to_owned();
        let resp = self
            .on(
                endpoint,
                |mut c| async move { c.put(key, value, None).await },
            )
            .await
            .map_err(ClientError::Endpoint)?;
        Ok(resp.header().map_or(0, |h| h.revision()))
    }

    /// Deletes every key under `prefix`; returns how many were deleted and the revision after.
    pub async fn delete_prefix(&self, prefix: &str) -> Result<(i64, i64), ClientError> {
        let (resp, _) = self
            .on_any_voter("delete", |mut c| {
                let prefix = prefix.to_owned();
                async move {
                    c.delete(
                        prefix,
                        Some(etcd_client::DeleteOptions::new().with_prefix()),
                    )
                    .await
                }
            })
            .await?;
        Ok((resp.deleted(), resp.header().map_or(0, |h| h.revision())))
    }

    /// Compacts the key-value history up to `revision` (what kube-apiserver does every five
    /// minutes), waiting until the compaction is applied.
    pub async fn compact(&self, revision: i64) -> Result<(), ClientError> {
        self.on_any_voter("compact", |mut c| async move {
            c.compact(
                revision,
                Some(etcd_client::CompactionOptions::new().with_physical()),
            )
            .await
        })
        .await
        .map(|_| ())
    }

    /// Reads one key (linearizable; voters only).
    pub async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, ClientError> {
        let (resp, _) = self
            .on_any_voter("get", |mut c| {
                let key = key.to_owned();
                async move { c.get(key, None).await }
            })
            .await?;
        Ok(resp.kvs().first().map(|kv| kv.value().to_vec()))
    }
}
