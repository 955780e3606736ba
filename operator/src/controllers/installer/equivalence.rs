//! Equivalent revisions (#36): a node whose running revision differs from the latest only in
//! members added since is not restarted for it.
//!
//! A member that has started restarts from its own data; etcd then ignores the revision's member
//! list (`ETCD_INITIAL_CLUSTER`), and `etcd-verify` lets it through a revision whose list is not
//! the live one (`etcd_verify::decide::RevisionRule::OwnData`, #65). The installer is stricter:
//! a revision that lists a member since removed is still rolled away from when the gate allows
//! (membership holds a learner for a node whose revision lists its removed member). So the
//! node's running revision `r` is
//! *equivalent* to the latest `L` when:
//! * its etcd serves on `r` (its started member on its own data, as far as the API shows), and
//!   the pod the kubelet reports runs `r`'s commands and env (no forged or recovery manifest
//!   under `r`'s label);
//! * `r` lists that member under the node's peer URL, and lists no member, or URL, that `L` does
//!   not ([`members_allow`], which the model check in `gate_model` calls);
//! * the rest is the same ([`same_otherwise`]): the node's pod in `r` is the one in `L` apart
//!   from the membership variables (`ETCD_INITIAL_CLUSTER`, `ETCD_MEMBER_IDS`,
//!   `ETCDCTL_ENDPOINTS`) and the revision number itself, and every certificate, key and CA
//!   bundle that pod names has the same content in both (a new node's certificates, added to the
//!   revision's Secret with the learner, are not this node's).
//!
//! A removal or a replacement lists fewer or other members in `L`, a certificate or flag change
//! changes the rest: those nodes still restart.
//!
//! The plan and the installer's condition name every node found so ([`equivalent_lines`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use membership::{MemberId, MemberIds, MemberUrl};

use crate::api::NodeStatus;

use crate::observed::objects::etcd_env;
use crate::podspec::parse_pod;
use crate::podspec::paths::{
    ALL_BUNDLES_CONFIGMAP, ALL_CERTS_SECRET, CONTAINER_RESOURCE_DIR, POD_CONFIGMAP,
    revision_host_dir,
};

/// The env vars that carry the member list: what a started member does not need.
pub const MEMBERSHIP_VARS: [&str; 3] = [
    "ETCD_INITIAL_CLUSTER",
    "ETCD_MEMBER_IDS",
    "ETCDCTL_ENDPOINTS",
];
/// Where the revision number appears in a rendered pod besides its resource dir.
const REVISION_VAR: &str = "ETCD_STATIC_POD_REVISION";
const REVISION_LABEL: &str = "revision";
const REVISION_ANNOTATION: &str = "etcd.static-operator.io/revision";

/// Why a node's running revision is not equivalent to the latest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Difference {
    /// The node's etcd does not serve on its revision.
    NotServing,
    /// The node has no started member.
    NoStartedMember,
    /// The running revision does not list the node's member under its peer URL.
    OwnNotListed,
    /// The running revision lists a member the latest does not (one removed or replaced since).
    ListsOthers(Vec<MemberId>),
    /// A member's peer URL differs between the two.
    UrlMoved(Vec<MemberId>),
    /// Something its running member needs differs.
    Content(&'static str),
    /// A revision's copies are missing or cannot be read.
    Unreadable(String),
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids = |ids: &[MemberId]| {
            ids.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Self::NotServing => write!(f, "its etcd does not serve"),
            Self::NoStartedMember => write!(f, "it has no started member"),
            Self::OwnNotListed => write!(f, "its revision does not list its member"),
            Self::ListsOthers(m) => write!(f, "its revision lists members gone since: {}", ids(m)),
            Self::UrlMoved(m) => write!(f, "members moved since: {}", ids(m)),
            Self::Content(what) => write!(f, "{what} differ"),
            Self::Unreadable(why) => write!(f, "{why}"),
        }
    }
}

/// The member lists allow the running revision to stand for the latest: it lists `own` under
/// `own_url` and no member or URL the latest does not list.
pub fn members_allow(
    own: MemberId,
    own_url: &MemberUrl,
    running: &MemberIds,
    latest: &MemberIds,
) -> Result<(), Difference> {
    if running.id_for_url(own_url) != Some(own) {
        return Err(Difference::OwnNotListed);
    }
    let diff = running.diff(latest);
    if !diff.only_left.is_empty() {
        return Err(Difference::ListsOthers(
            diff.only_left.iter().map(|(id, _)| *id).collect(),
        ));
    }
    if !diff.url_changed.is_empty() {
        return Err(Difference::UrlMoved(
            diff.url_changed.iter().map(|(id, _, _)| *id).collect(),
        ));
    }
    Ok(())
}

/// One revision's copy of a node's pod and of the files its pod names.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeRevision {
    pub number: i64,
    pub pod: Pod,
    /// Every certificate, key and CA bundle the pod names (`secrets/etcd-all-certs/<key>`,
    /// `configmaps/etcd-all-bundles/<key>`), with its content in this revision (`None`: the
    /// revision has no such entry).
    pub files: BTreeMap<String, Option<Vec<u8>>>,
}

/// The static-pod namespace's ConfigMaps and Secrets, where the revisions' copies are.
#[derive(Clone, Copy, Debug)]
pub struct Copies<'a> {
    pub configmaps: &'a [ConfigMap],
    pub secrets: &'a [Secret],
}

impl Copies<'_> {
    fn configmap(&self, name: &str) -> Result<&BTreeMap<String, String>, Difference> {
        self.configmaps
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
            .and_then(|c| c.data.as_ref())
            .ok_or_else(|| Difference::Unreadable(format!("ConfigMap {name} is missing")))
    }

    fn secret(&self, name: &str) -> Result<BTreeMap<&str, &[u8]>, Difference> {
        let secret = self
            .secrets
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
            .ok_or_else(|| Difference::Unreadable(format!("Secret {name} is missing")))?;
        Ok(secret
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), v.0.as_slice()))
            .collect())
    }
}

/// Where a file a pod names comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Source {
    Certs,
    Bundles,
}

impl Source {
    fn dir(self) -> String {
        match self {
            Self::Certs => format!("secrets/{ALL_CERTS_SECRET}"),
            Self::Bundles => format!("configmaps/{ALL_BUNDLES_CONFIGMAP}"),
        }
    }
}

/// The entries of the revision's Secret and bundle ConfigMap that `pod` names as files (in
/// flags and env values of any container): what its etcd and `etcd-verify` read.
fn named_files(pod: &Pod) -> BTreeSet<(Source, String)> {
    let mut texts: Vec<&str> = Vec::new();
    if let Some(spec) = pod.spec.as_ref() {
        let containers = spec.containers.iter();
        for c in containers.chain(spec.init_containers.iter().flatten()) {
            texts.extend(c.command.iter().flatten().map(String::as_str));
            texts.extend(c.args.iter().flatten().map(String::as_str));
            let env = c.env.iter().flatten();
            texts.extend(env.filter_map(|e| e.value.as_deref()));
        }
    }
    let mut out = BTreeSet::new();
    for source in [Source::Certs, Source::Bundles] {
        let prefix = format!("{CONTAINER_RESOURCE_DIR}/{}/", source.dir());
        for text in &texts {
            for (at, _) in text.match_indices(&prefix) {
                let rest = &text[at + prefix.len()..];
                let end = rest.find([',', ' ', '"', '=']).unwrap_or(rest.len());
                out.insert((source, rest[..end].to_owned()));
            }
        }
    }
    out
}

impl NodeRevision {
    /// Revision `number` of `node`'s pod and the files it names.
    pub fn find(copies: Copies<'_>, number: i64, node: &str) -> Result<Self, Difference> {
        let copy = format!("{POD_CONFIGMAP}-{number}");
        let key = format!("pod-{node}.yaml");
        let text = copies
            .configmap(&copy)?
            .get(&key)
            .ok_or_else(|| Difference::Unreadable(format!("ConfigMap {copy} has no {key}")))?;
        let pod =
            parse_pod(text).map_err(|e| Difference::Unreadable(format!("{copy}'s {key}: {e}")))?;
        let secret = copies.secret(&format!("{ALL_CERTS_SECRET}-{number}"))?;
        let bundles = copies.configmap(&format!("{ALL_BUNDLES_CONFIGMAP}-{number}"))?;
        let files = named_files(&pod)
            .into_iter()
            .map(|(source, key)| {
                let content = match source {
                    Source::Certs => secret.get(key.as_str()).map(|v| v.to_vec()),
                    Source::Bundles => bundles.get(&key).map(|v| v.clone().into_bytes()),
                };
                (format!("{}/{key}", source.dir()), content)
            })
            .collect();
        Ok(Self { number, pod, files })
    }

    /// The member list its pod's `ETCD_MEMBER_IDS` (of the etcd container) names.
    pub fn member_ids(&self) -> Result<MemberIds, Difference> {
        let var = etcd_env(&self.pod, "ETCD_MEMBER_IDS").ok_or_else(|| {
            Difference::Unreadable(format!("revision {} has no ETCD_MEMBER_IDS", self.number))
        })?;
        MemberIds::parse(&var)
            .map_err(|e| Difference::Unreadable(format!("revision {}: {e}", self.number)))
    }

    /// The pod without what the member list and the revision number put in it.
    fn normalized(&self) -> Pod {
        let mut pod = self.pod.clone();
        let meta = &mut pod.metadata;
        if let Some(labels) = meta.labels.as_mut() {
            labels.remove(REVISION_LABEL);
        }
        if let Some(annotations) = meta.annotations.as_mut() {
            annotations.remove(REVISION_ANNOTATION);
        }
        let Some(spec) = pod.spec.as_mut() else {
            return pod;
        };
        let containers = spec.containers.iter_mut();
        for c in containers.chain(spec.init_containers.iter_mut().flatten()) {
            if let Some(env) = c.env.as_mut() {
                env.retain(|e| {
                    e.name != REVISION_VAR && !MEMBERSHIP_VARS.contains(&e.name.as_str())
                });
            }
        }
        let own_dir = revision_host_dir(&self.number.to_string());
        for v in spec.volumes.iter_mut().flatten() {
            if let Some(host) = v.host_path.as_mut()
                && host.path == own_dir
            {
                host.path.clear();
            }
        }
        pod
    }
}

/// Everything but the member list and the revision number is the same in both: the pods, and
/// every certificate, key and CA bundle they name (another node's new certificates in the
/// revision's Secret are not this node's concern).
pub fn same_otherwise(running: &NodeRevision, latest: &NodeRevision) -> Result<(), Difference> {
    if running.normalized() != latest.normalized() {
        return Err(Difference::Content("pod specs"));
    }
    if running.files.values().any(Option::is_none) || running.files != latest.files {
        return Err(Difference::Content("certificates or CA bundles"));
    }
    Ok(())
}

/// What the API shows of the node's member.
#[derive(Clone, Copy, Debug)]
pub struct RunningMember<'a> {
    /// Its started member, if any.
    pub id: Option<MemberId>,
    pub peer_url: &'a MemberUrl,
    /// The revision its etcd serves on, if it does.
    pub serving: Option<i64>,
    /// Its etcd pod as the kubelet reports it (the mirror of the manifest on the node).
    pub pod: Option<&'a Pod>,
}

/// One container's name, command, args and env (`NAME=value`), as the API keeps them from the
/// manifest.
type CommandLine = (
    String,
    Option<Vec<String>>,
    Option<Vec<String>>,
    Vec<String>,
);

/// The containers' command lines and env, sorted by container.
fn commands(pod: &Pod) -> Vec<CommandLine> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let mut out: Vec<CommandLine> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .map(|c| {
            let env = c.env.iter().flatten();
            let env = env.map(|e| format!("{}={}", e.name, e.value.as_deref().unwrap_or("")));
            (
                c.name.clone(),
                c.command.clone(),
                c.args.clone(),
                env.collect(),
            )
        })
        .collect();
    out.sort();
    out
}

/// The pod on the node is its revision's: a manifest written by someone else (a forged one,
/// `etcd-recover`'s) under the revision's label is never taken for the revision. With no pod
/// there is nothing to compare, and nothing running to restart: whether to install again is
/// the missing-pod rule's to say (its grace, an admin's `etcd-stopped`).
fn on_node_is(revision: &NodeRevision, pod: Option<&Pod>) -> Result<(), Difference> {
    match pod {
        Some(p) if commands(p) != commands(&revision.pod) => Err(Difference::Content(
            "the manifest on the node and its revision",
        )),
        _ => Ok(()),
    }
}

/// Whether `node`'s running revision is equivalent to `latest` (`Ok`), read from the revisions'
/// copies.
pub fn equivalent(
    copies: Copies<'_>,
    node: &str,
    member: RunningMember<'_>,
    latest: i64,
) -> Result<(), Difference> {
    let running = member.serving.ok_or(Difference::NotServing)?;
    let own = member.id.ok_or(Difference::NoStartedMember)?;
    let ours = NodeRevision::find(copies, running, node)?;
    on_node_is(&ours, member.pod)?;
    let last = NodeRevision::find(copies, latest, node)?;
    members_allow(
        own,
        member.peer_url,
        &ours.member_ids()?,
        &last.member_ids()?,
    )?;
    same_otherwise(&ours, &last)
}

#[cfg(test)]
#[path = "equivalence_tests.rs"]
mod tests;

/// "n1 runs revision 10, equivalent to revision 11 ...", for every node that does.
pub fn equivalent_lines(statuses: &[NodeStatus]) -> Vec<String> {
    statuses
        .iter()
        .filter_map(|s| {
            let latest = s.equivalent_to_revision?;
            Some(format!(
                "{} runs revision {}, equivalent to revision {latest} (its revision lacks only members added since): not restarted",
                s.node_name, s.current_revision
            ))
        })
        .collect()
}
