//! The verify loop: observe (data dir, live member list), decide, act (archive), until a decision
//! to start or block, or the deadline.

use std::path::{Path, PathBuf};
use std::time::Duration;

use membership::{BlockCode, ClientConfig, EtcdClient, FailureKind, MemberId, VerifyReport};
use tokio::time::Instant;

use crate::config::VerifyConfig;
use crate::datadir;
use crate::decide::{Decision, LiveError, Observed, decide};

/// Timing of the loop.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Bound on the whole run, retries included.
    pub timeout: Duration,
    /// Pause between observations while waiting.
    pub retry_interval: Duration,
    /// Bound on one call to one etcd endpoint.
    pub call_timeout: Duration,
}

/// Runs the loop. Errors while acting (archiving) become a block: never start on a half-done step.
pub async fn run(config: &VerifyConfig, client: &EtcdClient, timing: Timing) -> VerifyReport {
    let deadline = Instant::now() + timing.timeout;
    let mut archived: Option<PathBuf> = None;
    // A TLS failure seen earlier in this run: an endpoint answered, so the cluster is not down.
    let mut tls_seen: Option<String> = None;
    // Why the last look said "wait": what the block at the deadline is about, even when the
    // deadline runs out in the next look's first step.
    let mut last_wait: Option<(BlockCode, String)> = None;
    loop {
        // Reading the data dir is bounded by the deadline too (a file that never answers a
        // read must not hold the gate past --timeout).
        let remaining = deadline.saturating_duration_since(Instant::now());
        let dir = config.data_dir.clone();
        let inspected = tokio::time::timeout(
            remaining,
            tokio::task::spawn_blocking(move || {
                datadir::inspect(&dir).map(|d| (d, datadir::earlier(&dir)))
            }),
        )
        .await;
        let (data_dir, earlier) = match inspected {
            Ok(Ok(Ok(d))) => d,
            Ok(Ok(Err(e))) => {
                let why = format!("cannot inspect the data dir: {e}");
                return block(BlockCode::DataDirUnusable, why, None, archived.as_deref());
            }
            Ok(Err(e)) => {
                let why = format!("cannot inspect the data dir: {e}");
                return block(BlockCode::DataDirUnusable, why, None, archived.as_deref());
            }
            Err(_) => {
                let read = format!(
                    "reading the data dir {} did not finish within {:?}",
                    config.data_dir.display(),
                    timing.timeout
                );
                let (code, why) = after_wait(timing.timeout, last_wait.as_ref(), &read)
                    .unwrap_or((BlockCode::DataDirUnusable, read));
                return block(code, why, None, archived.as_deref());
            }
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        let asked = tokio::time::timeout(remaining, client.member_list()).await;
        let live = match classify(asked, tls_seen.as_deref()) {
            Live::Answer(live) => live,
            Live::DeadlineCut => {
                let cut = format!(
                    "the member list did not finish within the remaining {remaining:?}{}",
                    tls_seen
                        .as_deref()
                        .map(|t| format!("; earlier: {t}"))
                        .unwrap_or_default()
                );
                let (code, why) = after_wait(timing.timeout, last_wait.as_ref(), &cut)
                    .unwrap_or_else(|| {
                        let why = format!("timed out after {:?}: {cut}", timing.timeout);
                        (BlockCode::TimedOut, why)
                    });
                return block(code, why, None, archived.as_deref());
            }
        };
        if let Err(LiveError::Tls(t)) = &live {
            tls_seen = Some(t.clone());
        }
        let new_cluster = config.state == crate::config::ClusterState::New
            && data_dir == crate::decide::DataDir::Absent;
        let observed = Observed {
            config,
            data_dir,
            live,
            earlier,
        };
        let decision = decide(&observed);
        tracing::info!(?decision, "decided");
        let (archive_why, member_id) = match &decision {
            Decision::Start {
                archive, member_id, ..
            }
            | Decision::Wait {
                archive, member_id, ..
            } => (archive.clone(), *member_id),
            Decision::Block { member_id, .. } => (None, *member_id),
        };
        if let Some(why) = archive_why {
            match archive(&config.data_dir, &why) {
                Ok(path) => archived = Some(path),
                Err(e) => {
                    return block(
                        BlockCode::DataDirUnusable,
                        e,
                        member_id,
                        archived.as_deref(),
                    );
                }
            }
        }
        match decision {
            Decision::Start {
                reason, member_id, ..
            } => {
                if new_cluster && let Err(e) = mark_bootstrap(config) {
                    return block(
                        BlockCode::DataDirUnusable,
                        e,
                        member_id,
                        archived.as_deref(),
                    );
                }
                return VerifyReport::start(reason, member_id, shown(archived.as_deref()));
            }
            Decision::Block {
                code,
                reason,
                member_id,
            } => {
                return block(code, reason, member_id, archived.as_deref());
            }
            Decision::Wait {
                code,
                reason,
                member_id,
                archive,
            } => {
                if archive.is_some() {
                    // The data dir changed: look again at once (if the deadline cuts that look
                    // short, the block still names what was awaited).
                    last_wait = Some((code, reason));
                    continue;
                }
                if Instant::now() + timing.retry_interval >= deadline {
                    let why = format!("timed out after {:?}: {reason}", timing.timeout);
                    return block(code, why, member_id, archived.as_deref());
                }
                tracing::info!(%reason, "waiting");
                last_wait = Some((code, reason));
                tokio::time::sleep(timing.retry_interval).await;
            }
        }
    }
}

/// The block when the deadline cut a step (`cut`) short after a look said "wait"
/// (`last_wait`): what was awaited comes first, and its code. `None` when no look waited yet.
fn after_wait(
    timeout: Duration,
    last_wait: Option<&(BlockCode, String)>,
    cut: &str,
) -> Option<(BlockCode, String)> {
    last_wait.map(|(code, w)| {
        (
            *code,
            format!("timed out after {timeout:?}: {w} (then {cut})"),
        )
    })
}

fn block(
    code: BlockCode,
    reason: String,
    member_id: Option<MemberId>,
    archived: Option<&Path>,
) -> VerifyReport {
    VerifyReport::block(code, reason, member_id, shown(archived))
}

fn shown(archived: Option<&Path>) -> Option<String> {
    archived.map(|p| p.display().to_string())
}

/// One member-list attempt, classified.
#[derive(Debug)]
enum Live {
    Answer(Result<membership::LiveMembers, LiveError>),
    /// The run's own deadline cut the attempt short: no evidence about etcd at all, so never
    /// read as "no endpoint answered" (which may start a member whose data dir matches).
    DeadlineCut,
}

/// Classifies one attempt (pure). Once an endpoint has answered with a TLS failure in this run
/// (`tls_seen`), a later attempt that hears nothing is not "the whole cluster is down" either:
/// a handshake that merely timed out under load must not turn a TLS failure into a start.
fn classify(
    asked: Result<
        Result<membership::LiveMembers, membership::ClientError>,
        tokio::time::error::Elapsed,
    >,
    tls_seen: Option<&str>,
) -> Live {
    let Ok(asked) = asked else {
        return Live::DeadlineCut;
    };
    Live::Answer(match asked {
        Ok(live) => Ok(live),
        Err(e) if e.failures().iter().any(|f| f.kind == FailureKind::Tls) => {
            Err(LiveError::Tls(e.to_string()))
        }
        Err(e) => match tls_seen {
            Some(t) => Err(LiveError::Tls(format!("{e} (earlier in this run: {t})"))),
            None => Err(LiveError::NoAnswer(e.to_string())),
        },
    })
}

/// Marks the data dir before the bootstrap manifest starts a new cluster, so that the same
/// manifest never starts a second one there ([`datadir::earlier`]).
fn mark_bootstrap(config: &VerifyConfig) -> Result<(), String> {
    let member = config.bootstrap_member_id();
    let text = format!(
        "cluster token {}, member {}, started {}\n",
        config.cluster_token,
        member.map_or_else(|| "?".to_owned(), |m| m.to_string()),
        datadir::stamp(time::OffsetDateTime::now_utc())
    );
    datadir::mark_bootstrap(&config.data_dir, &text)
        .map_err(|e| format!("could not mark the data dir before a new cluster starts: {e}"))
}

fn archive(data_dir: &Path, why: &str) -> Result<PathBuf, String> {
    let path = datadir::archive(data_dir, time::OffsetDateTime::now_utc())
        .map_err(|e| format!("could not archive the data dir ({why}): {e}"))?;
    tracing::warn!(archived_to = %path.display(), %why, "archived data dir");
    Ok(path)
}

/// Builds the etcd client from the validated config.
pub fn client_for(
    config: &VerifyConfig,
    call_timeout: Duration,
) -> Result<EtcdClient, membership::ClientError> {
    EtcdClient::new(ClientConfig {
        endpoints: config.endpoints.clone(),
        tls: config.tls.clone(),
        call_timeout,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use membership::{ClientError, EndpointFailure};

    fn failed(kind: FailureKind) -> ClientError {
        ClientError::NoEndpointAnswered {
            op: "member list",
            failures: vec![EndpointFailure {
                endpoint: "https://127.0.0.1:2379".parse().unwrap(),
                kind,
                message: "m".into(),
            }],
        }
    }

    async fn elapsed() -> tokio::time::error::Elapsed {
        tokio::time::timeout(Duration::ZERO, std::future::pending::<()>())
            .await
            .unwrap_err()
    }

    #[tokio::test]
    async fn the_runs_own_deadline_is_never_no_answer() {
        assert!(matches!(
            classify(Err(elapsed().await), None),
            Live::DeadlineCut
        ));
        assert!(matches!(
            classify(Err(elapsed().await), Some("tls")),
            Live::DeadlineCut
        ));
    }

    #[test]
    fn silence_after_a_tls_failure_stays_a_tls_failure() {
        let timeout = || Ok(Err(failed(FailureKind::Timeout)));
        assert!(matches!(
            classify(timeout(), None),
            Live::Answer(Err(LiveError::NoAnswer(_)))
        ));
        match classify(timeout(), Some("handshake failed")) {
            Live::Answer(Err(LiveError::Tls(m))) => assert!(m.contains("handshake failed"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            classify(Ok(Err(failed(FailureKind::Tls))), None),
            Live::Answer(Err(LiveError::Tls(_)))
        ));
    }
}
