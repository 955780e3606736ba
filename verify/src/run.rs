//! The verify loop: observe (data dir, live member list), decide, act (archive), until a decision
//! to start or block, or the deadline.

use std::path::{Path, PathBuf};
use std::time::Duration;

use membership::{BlockCode, ClientConfig, EtcdClient, FailureKind, MemberId, VerifyReport};
use tokio::time::Instant;

use crate::admin_override;
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
    let mut looks = Looks {
        config,
        timing,
        deadline: Instant::now() + timing.timeout,
        archived: None,
        tls_seen: None,
        last_wait: None,
        overridden: None,
    };
    loop {
        match looks.once(client).await {
            Ok(Next::Done(report)) | Err(report) => return report,
            Ok(Next::LookAgain) => {}
            Ok(Next::Sleep) => tokio::time::sleep(timing.retry_interval).await,
        }
    }
}

/// What the loop does after one look.
enum Next {
    /// Decided: start or block.
    Done(VerifyReport),
    /// The data dir changed (archived): look again at once.
    LookAgain,
    /// Waiting: look again after the retry interval.
    Sleep,
}

/// One run's state between looks. A step that cannot go on returns its block as `Err`.
struct Looks<'a> {
    config: &'a VerifyConfig,
    timing: Timing,
    deadline: Instant,
    /// Where a data dir was archived to during this run.
    archived: Option<PathBuf>,
    /// A TLS failure seen earlier in this run: an endpoint answered, so the cluster is not down.
    tls_seen: Option<String>,
    /// Why the last look said "wait": what the block at the deadline is about, even when the
    /// deadline runs out in the next look's first step.
    last_wait: Option<(BlockCode, String)>,
    /// The admin override this run's start used (its file and reason).
    overridden: Option<String>,
}

impl Looks<'_> {
    /// Observes, decides and acts once.
    async fn once(&mut self, client: &EtcdClient) -> Result<Next, VerifyReport> {
        let (data_dir, earlier) = self.data_dir().await?;
        let live = self.members(client).await?;
        let new_cluster = self.config.state == crate::config::ClusterState::New
            && data_dir == crate::decide::DataDir::Absent;
        let decision = decide(&Observed {
            config: self.config,
            data_dir: data_dir.clone(),
            live,
            earlier,
        });
        tracing::info!(?decision, "decided");
        let decision = self.admin_override(decision, &data_dir);
        self.archive_for(&decision)?;
        self.settle(decision, new_cluster)
    }

    /// The decision with the admin's override applied, where one was left and applies
    /// ([`admin_override`]); the file is set aside before etcd may start. Where it cannot
    /// apply, the gate's own decision stands and its reason says why.
    fn admin_override(&mut self, gate: Decision, data: &crate::decide::DataDir) -> Decision {
        if matches!(gate, Decision::Start { .. }) {
            return gate;
        }
        let Some(state_dir) = self.config.state_dir.as_deref() else {
            return gate;
        };
        let applied = admin_override::read(state_dir).and_then(|found| {
            let Some(o) = found else {
                return Ok(None);
            };
            let Some(start) = admin_override::overridden(self.config, data, &gate, &o)? else {
                return Ok(None);
            };
            let used = admin_override::consume(&o, &datadir::stamp(time::OffsetDateTime::now_utc()))?;
            tracing::warn!(file = %o.path.display(), set_aside_as = %used.display(), reason = %o.reason, "admin override: etcd starts past the gate");
            Ok(Some((start, o.record())))
        });
        match applied {
            Ok(Some((start, record))) => {
                self.overridden = Some(record);
                start
            }
            Ok(None) => gate,
            Err(why) => with_note(gate, &format!("the admin override was not used: {why}")),
        }
    }

    /// The block for `code` and `reason`, naming what this run archived.
    fn block(&self, code: BlockCode, reason: String, member_id: Option<MemberId>) -> VerifyReport {
        VerifyReport::block(code, reason, member_id, shown(self.archived.as_deref()))
    }

    /// The data dir and what shows a member ran here before, read within the deadline (a file
    /// that never answers a read must not hold the gate past --timeout).
    async fn data_dir(&self) -> Result<(crate::decide::DataDir, Option<String>), VerifyReport> {
        let remaining = self.deadline.saturating_duration_since(Instant::now());
        let dir = self.config.data_dir.clone();
        let state = self.config.state_dir.clone();
        let inspected = tokio::time::timeout(
            remaining,
            tokio::task::spawn_blocking(move || {
                datadir::inspect(&dir).map(|d| (d, datadir::earlier(&dir, state.as_deref())))
            }),
        )
        .await;
        let unusable = |e: &dyn std::fmt::Display| {
            let why = format!("cannot inspect the data dir: {e}");
            self.block(BlockCode::DataDirUnusable, why, None)
        };
        match inspected {
            Ok(Ok(Ok(d))) => Ok(d),
            Ok(Ok(Err(e))) => Err(unusable(&e)),
            Ok(Err(e)) => Err(unusable(&e)),
            Err(_) => {
                let read = format!(
                    "reading the data dir {} did not finish within {:?}",
                    self.config.data_dir.display(),
                    self.timing.timeout
                );
                let (code, why) = after_wait(self.timing.timeout, self.last_wait.as_ref(), &read)
                    .unwrap_or((BlockCode::DataDirUnusable, read));
                Err(self.block(code, why, None))
            }
        }
    }

    /// The live member list (or why there is none), asked within the deadline.
    async fn members(
        &mut self,
        client: &EtcdClient,
    ) -> Result<Result<membership::LiveMembers, LiveError>, VerifyReport> {
        let remaining = self.deadline.saturating_duration_since(Instant::now());
        let asked = tokio::time::timeout(remaining, client.member_list_linearizable()).await;
        let live = match classify(asked, self.tls_seen.as_deref()) {
            Live::Answer(live) => live,
            Live::DeadlineCut => {
                let cut = format!(
                    "the member list did not finish within the remaining {remaining:?}{}",
                    self.tls_seen
                        .as_deref()
                        .map(|t| format!("; earlier: {t}"))
                        .unwrap_or_default()
                );
                let timeout = self.timing.timeout;
                let (code, why) = after_wait(timeout, self.last_wait.as_ref(), &cut)
                    .unwrap_or_else(|| {
                        (
                            BlockCode::TimedOut,
                            format!("timed out after {timeout:?}: {cut}"),
                        )
                    });
                return Err(self.block(code, why, None));
            }
        };
        if let Err(LiveError::Tls(t)) = &live {
            self.tls_seen = Some(t.clone());
        }
        Ok(live)
    }

    /// Archives the data dir when the decision asks for it.
    fn archive_for(&mut self, decision: &Decision) -> Result<(), VerifyReport> {
        let (Decision::Start {
            archive: Some(why),
            member_id,
            ..
        }
        | Decision::Wait {
            archive: Some(why),
            member_id,
            ..
        }) = decision
        else {
            return Ok(());
        };
        match archive(&self.config.data_dir, why) {
            Ok(path) => {
                self.archived = Some(path);
                Ok(())
            }
            Err(e) => Err(self.block(BlockCode::DataDirUnusable, e, *member_id)),
        }
    }

    /// What the decision means for the loop (a new cluster's data dir is marked before it
    /// starts).
    fn settle(&mut self, decision: Decision, new_cluster: bool) -> Result<Next, VerifyReport> {
        match decision {
            Decision::Start {
                reason, member_id, ..
            } => {
                if new_cluster && let Err(e) = mark_bootstrap(self.config) {
                    return Err(self.block(BlockCode::DataDirUnusable, e, member_id));
                }
                let archived = shown(self.archived.as_deref());
                let mut report = VerifyReport::start(reason, member_id, archived);
                report.overridden = self.overridden.take();
                Ok(Next::Done(report))
            }
            Decision::Block {
                code,
                reason,
                member_id,
            } => Err(self.block(code, reason, member_id)),
            Decision::Wait {
                code,
                reason,
                member_id,
                archive,
            } => {
                if archive.is_some() {
                    // The data dir changed: look again at once (if the deadline cuts that look
                    // short, the block still names what was awaited).
                    self.last_wait = Some((code, reason));
                    return Ok(Next::LookAgain);
                }
                if Instant::now() + self.timing.retry_interval >= self.deadline {
                    let why = format!("timed out after {:?}: {reason}", self.timing.timeout);
                    return Err(self.block(code, why, member_id));
                }
                tracing::info!(%reason, "waiting");
                self.last_wait = Some((code, reason));
                Ok(Next::Sleep)
            }
        }
    }
}

/// `gate` with `note` added to its reason (a start is returned as it is).
fn with_note(mut gate: Decision, note: &str) -> Decision {
    if let Decision::Wait { reason, .. } | Decision::Block { reason, .. } = &mut gate {
        reason.push_str("; ");
        reason.push_str(note);
    }
    gate
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

/// Marks the state dir (outside the data dir, where one is given) and the data dir before the
/// bootstrap manifest starts a new cluster, so that the same manifest never starts a second one
/// there ([`datadir::earlier`]), not even on an empty mount point where the data disk failed to
/// mount.
fn mark_bootstrap(config: &VerifyConfig) -> Result<(), String> {
    let member = config.bootstrap_member_id();
    let text = format!(
        "cluster token {}, member {}, started {}\n",
        config.cluster_token,
        member.map_or_else(|| "?".to_owned(), |m| m.to_string()),
        datadir::stamp(time::OffsetDateTime::now_utc())
    );
    for dir in config.state_dir.iter().chain([&config.data_dir]) {
        datadir::mark_bootstrap(dir, &text).map_err(|e| {
            format!(
                "could not mark {} before a new cluster starts: {e}",
                dir.display()
            )
        })?;
    }
    Ok(())
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
